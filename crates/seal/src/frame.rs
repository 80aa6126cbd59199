//! The plaintext frame that a record seal encrypts.
//!
//! ```text
//! frame = u32be(len(C)) ‖ C ‖ K_1 ‖ … ‖ K_n ‖ 0x00 × p
//! C     = DAG-CBOR of the sealed content (a plainContent, or the record's
//!         sealed fields), canonical
//! K_i   = the 32-byte key of the i-th blob of encryptedContent.blobs
//! p     = padding: zero bytes, any number
//! ```
//!
//! The number of blob keys is the number of blobs in the envelope, so the
//! frame needs no other length. On open every padding byte must be zero and
//! `C` must be one canonical DAG-CBOR map.
//!
//! **Padding** ([`Padding::Padme`], the default) hides the exact size: the
//! frame of length `L` is padded to `padme(max(L, 256))`, capped at the
//! largest frame that still fits the ciphertext limit. Padmé (Nikitin et
//! al., "Reducing Metadata Leakage from Encrypted Files and Communication
//! with PURBs", 2019) rounds `L` up so only the top
//! `floor(log2(floor(log2 L))) + 1` bits of the length remain: at most 12 %
//! overhead, and about log log L bits of the length leak.

use super::envelope::TAG_LEN;
use super::error::{Result, SealError};
use super::keys::{BlobKey, KEY_LEN};
use super::plaintext::Plaintext;

/// Frames shorter than this are padded up to it.
pub const MIN_PADDED_FRAME: usize = 256;

/// How much padding to add to the plaintext frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Padding {
    /// No padding: the ciphertext shows the exact content size.
    None,
    /// Pad to `padme(max(len, 256))` (the default).
    #[default]
    Padme,
}

/// Padmé: rounds `len` up so that only its top `floor(log2 E) + 1` bits vary,
/// where `E = floor(log2 len)`.
pub fn padme(len: u64) -> u64 {
    if len < 2 {
        return len;
    }
    let e = 63 - u64::from(len.leading_zeros()); // floor(log2 len), ≥ 1
    let s = 64 - u64::from(e.leading_zeros()); // floor(log2 e) + 1
    let last_bits = e - s;
    let mask = (1u64 << last_bits) - 1;
    (len + mask) & !mask
}

/// The padded length of a frame of `len` bytes, at most `max`.
pub fn padded_len(len: usize, padding: Padding, max: usize) -> usize {
    match padding {
        Padding::None => len,
        Padding::Padme => {
            let target = padme(len.max(MIN_PADDED_FRAME) as u64);
            usize::try_from(target)
                .unwrap_or(usize::MAX)
                .min(max)
                .max(len)
        }
    }
}

/// Builds the frame. `max` is the largest frame allowed; the caller has
/// checked that the unpadded frame fits.
#[cfg(test)]
pub(crate) fn encode(
    content: &[u8],
    blob_keys: &[&BlobKey],
    padding: Padding,
    max: usize,
) -> Plaintext {
    encode_with(
        content.len(),
        |out| out.extend_from_slice(content),
        blob_keys,
        padding,
        max,
    )
}

/// Builds the frame around content of `content_len` bytes that `write`
/// appends, in one buffer with room for the AEAD tag: the content is
/// written once, where it is encrypted.
pub(crate) fn encode_with(
    content_len: usize,
    write: impl FnOnce(&mut Vec<u8>),
    blob_keys: &[&BlobKey],
    padding: Padding,
    max: usize,
) -> Plaintext {
    let len = unpadded_len(content_len, blob_keys.len());
    let total = padded_len(len, padding, max);
    let mut out = Plaintext::with_capacity(total + TAG_LEN);
    let clen = u32::try_from(content_len).unwrap_or(u32::MAX);
    out.extend_from_slice(&clen.to_be_bytes());
    write(&mut out);
    debug_assert_eq!(out.len(), 4 + content_len, "content of another length");
    for key in blob_keys {
        out.extend_from_slice(key.bytes());
    }
    out.resize(total, 0);
    out
}

/// Length of the frame before padding.
pub(crate) fn unpadded_len(content_len: usize, blobs: usize) -> usize {
    4 + content_len + blobs * KEY_LEN
}

/// Splits a frame into the content bytes and `blobs` blob keys, checking
/// lengths and that the padding is all zeros.
pub fn decode(frame: &[u8], blobs: usize) -> Result<(&[u8], Vec<BlobKey>)> {
    let Some((head, rest)) = frame.split_first_chunk::<4>() else {
        return Err(SealError::invalid_plaintext(format!(
            "frame of {} bytes is shorter than its 4-byte length",
            frame.len()
        )));
    };
    let clen = u32::from_be_bytes(*head) as usize;
    let needed = clen.checked_add(blobs * KEY_LEN);
    let Some(needed) = needed.filter(|n| *n <= rest.len()) else {
        return Err(SealError::invalid_plaintext(format!(
            "frame says {clen} content bytes and has {blobs} blob keys, \
             which does not fit in {} bytes",
            rest.len()
        )));
    };
    let (content, rest) = rest.split_at(clen);
    let (keys, padding) = rest.split_at(needed - clen);
    // A fold rather than a search: it vectorizes.
    if padding.iter().fold(0u8, |acc, b| acc | b) != 0 {
        return Err(SealError::invalid_plaintext(
            "padding bytes are not all zero",
        ));
    }
    let keys = keys
        .chunks_exact(KEY_LEN)
        .map(|c| {
            let mut k = [0u8; KEY_LEN];
            k.copy_from_slice(c);
            BlobKey::from_bytes(k)
        })
        .collect();
    Ok((content, keys))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padme_matches_the_paper() {
        // Values worked by hand from the definition.
        assert_eq!(padme(0), 0);
        assert_eq!(padme(1), 1);
        assert_eq!(padme(2), 2);
        assert_eq!(padme(9), 10);
        assert_eq!(padme(256), 256);
        assert_eq!(padme(257), 272);
        assert_eq!(padme(1000), 1024);
        assert_eq!(padme(1025), 1088);
        assert_eq!(padme(1_000_000), 1_015_808);
        for len in 1..5000u64 {
            let p = padme(len);
            assert!(
                p >= len && (p - len) * 100 <= len * 12 + 100,
                "{len} -> {p}"
            );
        }
    }

    #[test]
    fn frame_round_trip_and_padding_checks() {
        let key = BlobKey::from_bytes([7; 32]);
        let frame = encode(b"\xa0", &[&key], Padding::Padme, 10_000);
        assert_eq!(frame.len(), 256);
        let (content, keys) = decode(&frame, 1).unwrap();
        assert_eq!(content, b"\xa0");
        assert_eq!(keys, vec![key.clone()]);

        let mut bad = frame.to_vec();
        *bad.last_mut().unwrap() = 1;
        assert!(matches!(
            decode(&bad, 1),
            Err(SealError::InvalidPlaintext { .. })
        ));
        assert!(matches!(
            decode(&frame[..3], 0),
            Err(SealError::InvalidPlaintext { .. })
        ));
        assert!(matches!(
            decode(&frame[..36], 2),
            Err(SealError::InvalidPlaintext { .. })
        ));
        let unpadded = encode(b"\xa0", &[], Padding::None, 10_000);
        assert_eq!(unpadded.as_slice(), b"\x00\x00\x00\x01\xa0");
    }

    #[test]
    fn padding_is_capped() {
        assert_eq!(padded_len(999_000, Padding::Padme, 999_984), 999_424);
        assert_eq!(padded_len(999_500, Padding::Padme, 999_984), 999_984);
        assert_eq!(padded_len(10, Padding::Padme, 100), 100);
        assert_eq!(padded_len(10, Padding::None, 100), 10);
    }
}
