//! Sealing and opening a record's sealed field.
//!
//! ```text
//! K     = HKDF-SHA256(salt = "", IKM = chat key,
//!                     info = lp("gelstore/seal/record-key/v1") ‖ lp(alg) ‖ lp(keyId))   32 bytes
//! nonce = 24 fresh random bytes (every seal, edits too)
//! ct    = XChaCha20-Poly1305(K, nonce, frame, AAD)                 (tag at the end)
//! ```
//!
//! The frame is in [`super::frame`], the AAD in [`super::aad`].

use std::collections::BTreeMap;

use chacha20poly1305::aead::{AeadInOut, KeyInit};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use hkdf::Hkdf;
use ipld_core::ipld::Ipld;
use rand_core::CryptoRng;
use sha2::Sha256;
use zeroize::Zeroizing;

use super::aad::{
    AUTHENTICATOR_FIELD, AadContext, BlobBinding, Place, clear_fields_hash, put_field, record_aad,
    record_parts, sealed_field, sealed_fields,
};
use super::blob::BlobSeal;
use super::envelope::{
    Envelope, EnvelopeRef, MAX_CIPHERTEXT, NONCE_LEN, SEAL_ALG_V1, TAG_LEN, check_alg,
};
use super::error::{Result, SealError};
use super::frame::{self, Padding};
use super::keys::{BlobKey, ChatKey, KEY_LEN, KeyLookup};
use super::plaintext::Plaintext;
use gelstore_model::{Checked, decode_dag_cbor};

/// HKDF info label of the record key.
pub const RECORD_KEY_LABEL: &str = "gelstore/seal/record-key/v1";

/// The largest plaintext frame whose ciphertext fits the lexicon limit.
pub const MAX_FRAME: usize = MAX_CIPHERTEXT - TAG_LEN;

/// Options of a seal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SealOptions {
    /// Length padding of the plaintext frame.
    pub padding: Padding,
}

/// What opening a sealed record gives back.
#[derive(Debug, Clone, PartialEq)]
pub struct Opened {
    /// The field that opened: the record type's sealed field, or
    /// [`AUTHENTICATOR_FIELD`] for a message without content.
    pub field: &'static str,
    /// The sealed content (a plainContent, or the record's sealed fields;
    /// the empty map for an authenticator).
    pub content: Ipld,
    /// Each blob of the envelope with the key to open it, in order.
    pub blobs: Vec<BlobSeal>,
}

/// Derives the record key from a chat key.
pub fn record_key(chat_key: &[u8; KEY_LEN], alg: &str, key_id: &str) -> Zeroizing<[u8; KEY_LEN]> {
    let mut info = Vec::with_capacity(64 + key_id.len());
    put_field(&mut info, RECORD_KEY_LABEL.as_bytes());
    put_field(&mut info, alg.as_bytes());
    put_field(&mut info, key_id.as_bytes());
    let mut out = Zeroizing::new([0u8; KEY_LEN]);
    Hkdf::<Sha256>::new(None, chat_key)
        .expand(&info, out.as_mut())
        .expect("32 bytes is a valid HKDF-SHA256 output length");
    out
}

fn cipher(chat_key: &ChatKey, alg: &str) -> XChaCha20Poly1305 {
    let key = record_key(chat_key.secret(), alg, chat_key.key_id());
    XChaCha20Poly1305::new(&(*key).into())
}

/// Encrypts an already built frame: the low-level half of [`seal_record`]
/// (the nonce comes from `rng`).
pub fn seal_frame(
    frame: &[u8],
    key: &ChatKey,
    ctx: &AadContext<'_>,
    blobs: &[BlobBinding],
    rng: &mut impl CryptoRng,
) -> Result<Envelope> {
    seal_buffer(Plaintext::copy_of(frame, TAG_LEN), key, ctx, blobs, rng)
}

/// [`seal_frame`] on a frame in a buffer of its own, encrypted in place
/// (with room for the tag, no copy is made).
fn seal_buffer(
    mut buffer: Plaintext,
    key: &ChatKey,
    ctx: &AadContext<'_>,
    blobs: &[BlobBinding],
    rng: &mut impl CryptoRng,
) -> Result<Envelope> {
    let frame_len = buffer.len();
    if frame_len > MAX_FRAME {
        return Err(SealError::Oversize {
            what: "sealed ciphertext",
            size: (frame_len + TAG_LEN) as u64,
            max: MAX_CIPHERTEXT as u64,
            hint: " (encryptedContent.ciphertext); store large content as a sealed blob",
        });
    }
    let mut nonce = [0u8; NONCE_LEN];
    rng.fill_bytes(&mut nonce);
    // gelstore writes no envelope `$type` (the field's lexicon type says it).
    let aad = record_aad(SEAL_ALG_V1, key.key_id(), &nonce, "", ctx, blobs);
    // Room for the tag, so the plaintext is never left behind by a
    // reallocation (the callers give it; a copy otherwise, the old buffer
    // wiped).
    if buffer.capacity() < frame_len + TAG_LEN {
        buffer = Plaintext::copy_of(&buffer, TAG_LEN);
    }
    cipher(key, SEAL_ALG_V1)
        .encrypt_in_place(&XNonce::from(nonce), &aad, &mut *buffer)
        .map_err(|_| SealError::Oversize {
            what: "plaintext",
            size: frame_len as u64,
            max: MAX_FRAME as u64,
            hint: "",
        })?;
    // The buffer now holds the ciphertext: nothing secret is left to wipe.
    let ciphertext = buffer.take();
    Ok(Envelope {
        alg: SEAL_ALG_V1.to_string(),
        key_id: key.key_id().to_string(),
        nonce,
        ciphertext,
        blobs: blobs.to_vec(),
        typed: false,
    })
}

/// Decrypts an envelope to its frame: the low-level half of [`open_record`].
/// The envelope must come from [`Envelope::from_ipld`] (structure checked).
pub fn open_frame(envelope: &Envelope, key: &ChatKey, ctx: &AadContext<'_>) -> Result<Plaintext> {
    open_view(&envelope.view(), key, ctx)
}

/// [`open_frame`] on a borrowed envelope: the ciphertext is copied once,
/// into the buffer it is decrypted in.
fn open_view(envelope: &EnvelopeRef<'_>, key: &ChatKey, ctx: &AadContext<'_>) -> Result<Plaintext> {
    check_alg(envelope.alg)?;
    if envelope.key_id != key.key_id() {
        return Err(SealError::UnknownKey {
            key_id: envelope.key_id.to_string(),
        });
    }
    let aad = record_aad(
        envelope.alg,
        envelope.key_id,
        &envelope.nonce,
        envelope.envelope_type(),
        ctx,
        &envelope.blobs,
    );
    let mut buffer = Plaintext::copy_of(envelope.ciphertext, 0);
    cipher(key, envelope.alg)
        .decrypt_in_place(&XNonce::from(envelope.nonce), &aad, &mut *buffer)
        .map_err(|_| SealError::AuthenticationFailed {
            what: "the sealed record",
        })?;
    Ok(buffer)
}

/// Seals `content` into `record`'s sealed field (`content` for messages,
/// `sealed` for chats) and returns the record with the envelope in place.
///
/// `record` must be a map with `$type`; any sealed field already in it is
/// replaced, and the other fields are the clear fields the AAD hashes. A
/// message that carries an `authenticator` (any value: a placeholder) has
/// it sealed instead of `content`: then `content` must be the empty map and
/// there are no blobs (see [`AUTHENTICATOR_FIELD`]); it is never padded.
/// `blobs` are the blobs the content refers to, as [`super::seal_blob`]
/// returned them; their keys go inside the ciphertext, their CIDs and sizes
/// into the envelope and the AAD. A fresh nonce is drawn from `rng`.
pub fn seal_record(
    record: &Ipld,
    place: &Place<'_>,
    content: &Ipld,
    blobs: &[BlobSeal],
    key: &ChatKey,
    options: &SealOptions,
    rng: &mut impl CryptoRng,
) -> Result<Ipld> {
    let (map, record_type) = record_parts(record)?;
    let main = sealed_field(record_type).ok_or_else(|| SealError::NotSealable {
        record_type: record_type.to_string(),
    })?;
    let field = match present_fields(map, record_type)?.as_slice() {
        [only] if *only == AUTHENTICATOR_FIELD => AUTHENTICATOR_FIELD,
        _ => main,
    };
    if !matches!(content, Ipld::Map(_)) {
        return Err(SealError::invalid_plaintext(
            "the sealed content must be a map",
        ));
    }
    if field == AUTHENTICATOR_FIELD && (content != &Ipld::Map(BTreeMap::new()) || !blobs.is_empty())
    {
        return Err(SealError::invalid_plaintext(
            "an authenticator seals the empty map and no blobs",
        ));
    }
    if blobs.len() > super::envelope::MAX_BLOBS {
        return Err(SealError::Oversize {
            what: "blob list",
            size: blobs.len() as u64,
            max: super::envelope::MAX_BLOBS as u64,
            hint: " entries",
        });
    }
    let content = Checked::new(content).map_err(|e| {
        SealError::invalid_plaintext(format!("content is not valid data model: {e}"))
    })?;
    let unpadded = frame::unpadded_len(content.len(), blobs.len());
    if unpadded > MAX_FRAME {
        return Err(SealError::Oversize {
            what: "sealed ciphertext",
            size: (unpadded + TAG_LEN) as u64,
            max: MAX_CIPHERTEXT as u64,
            hint: " (encryptedContent.ciphertext); store large content as a sealed blob",
        });
    }
    let ctx = AadContext {
        place: *place,
        record_type,
        field,
        clear_hash: clear_fields_hash(map, field)?,
    };
    let keys: Vec<&BlobKey> = blobs.iter().map(|b| &b.key).collect();
    let bindings: Vec<BlobBinding> = blobs.iter().map(BlobSeal::binding).collect();
    // An authenticator's plaintext is always the same: padding hides nothing.
    let padding = if field == AUTHENTICATOR_FIELD {
        Padding::None
    } else {
        options.padding
    };
    // The content is written once, into the buffer it is encrypted in.
    let frame = frame::encode_with(
        content.len(),
        |out| content.write_to(out),
        &keys,
        padding,
        MAX_FRAME,
    );
    let envelope = seal_buffer(frame, key, &ctx, &bindings, rng)?;
    // The clear fields; a sealed field already there is replaced.
    let mut out: BTreeMap<String, Ipld> = map
        .iter()
        .filter(|(k, _)| k.as_str() != field)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    out.insert(field.to_string(), envelope.into_ipld());
    Ok(Ipld::Map(out))
}

/// Opens `record`'s sealed field with a key from `keys`.
///
/// Structural checks first (record shape, envelope shape, alg, nonce,
/// sizes), then the key lookup, then decryption; the frame and the content
/// are checked after the tag verifies. Returns nothing of the plaintext on
/// any failure.
pub fn open_record<K: KeyLookup + ?Sized>(
    record: &Ipld,
    place: &Place<'_>,
    keys: &K,
) -> Result<Opened> {
    let (map, record_type) = record_parts(record)?;
    let main = sealed_field(record_type).ok_or_else(|| SealError::NotSealable {
        record_type: record_type.to_string(),
    })?;
    let field = match present_fields(map, record_type)?.as_slice() {
        [only] => *only,
        _ => {
            return Err(SealError::malformed(
                "record",
                format!("no sealed field {main:?}"),
            ));
        }
    };
    let envelope = EnvelopeRef::parse(&map[field])?;
    if field == AUTHENTICATOR_FIELD && !envelope.blobs.is_empty() {
        return Err(SealError::malformed(
            "record",
            "an authenticator lists no blobs",
        ));
    }
    let key = keys
        .chat_key(envelope.key_id)
        .ok_or_else(|| SealError::UnknownKey {
            key_id: envelope.key_id.to_string(),
        })?;
    let ctx = AadContext {
        place: *place,
        record_type,
        field,
        clear_hash: clear_fields_hash(map, field)?,
    };
    let frame = open_view(&envelope, key, &ctx)?;
    let (content_bytes, blob_keys) = frame::decode(&frame, envelope.blobs.len())?;
    let content = decode_dag_cbor(content_bytes)
        .map_err(|e| SealError::invalid_plaintext(format!("content is not DAG-CBOR: {e}")))?;
    if !matches!(content, Ipld::Map(_)) {
        return Err(SealError::invalid_plaintext(
            "the sealed content is not a map",
        ));
    }
    if field == AUTHENTICATOR_FIELD && !matches!(&content, Ipld::Map(m) if m.is_empty()) {
        return Err(SealError::invalid_plaintext(
            "an authenticator holds something other than the empty map",
        ));
    }
    let blobs = envelope
        .blobs
        .into_iter()
        .zip(blob_keys)
        .map(|(b, key)| BlobSeal {
            cid: b.cid,
            size: b.size,
            key,
        })
        .collect();
    Ok(Opened {
        field,
        content,
        blobs,
    })
}

/// The sealed fields `map` holds, of those its type allows; two at once
/// (content and an authenticator) is malformed: which one counts would be
/// the PDS's choice.
fn present_fields(map: &BTreeMap<String, Ipld>, record_type: &str) -> Result<Vec<&'static str>> {
    let present: Vec<&'static str> = sealed_fields(record_type)
        .iter()
        .copied()
        .filter(|f| map.contains_key(*f))
        .collect();
    if present.len() > 1 {
        return Err(SealError::malformed(
            "record",
            format!(
                "both {:?} and {:?}: a message has one",
                present[0], present[1]
            ),
        ));
    }
    Ok(present)
}
