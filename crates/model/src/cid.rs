//! CIDs: computing them for blocks and blobs, parsing them, and checking that
//! they are in the atproto "blessed" set.

use ::cid::Cid;
use ::cid::multihash::Multihash;
use sha2::{Digest, Sha256};

use super::error::{DataModelError, Result};

/// Multicodec code of DAG-CBOR, the codec of records and other data nodes.
pub const DAG_CBOR_CODEC: u64 = 0x71;
/// Multicodec code of raw bytes, the codec of blobs.
pub const RAW_CODEC: u64 = 0x55;
/// Multihash code of sha2-256.
pub const SHA2_256: u64 = 0x12;
/// Length of a sha2-256 digest in bytes.
const SHA2_256_LEN: usize = 32;
/// Longest CID string we try to parse. A blessed CID string is 59 characters.
const MAX_CID_STRING_LEN: usize = 128;

/// The CID (v1, dag-cbor, sha2-256) of a DAG-CBOR block.
///
/// The bytes are hashed as given; this does not check that they are valid
/// DAG-CBOR.
pub fn cid_for_cbor(block: &[u8]) -> Cid {
    sha256_cid(DAG_CBOR_CODEC, block)
}

/// The CID (v1, raw, sha2-256) of a blob, as used in a blob's `ref` field.
pub fn cid_for_blob(blob: &[u8]) -> Cid {
    sha256_cid(RAW_CODEC, blob)
}

/// The blob CID of bytes whose SHA-256 is `digest`, for a caller that
/// hashed them as they went by (see [`cid_for_blob`]).
pub fn cid_for_blob_digest(digest: &[u8; 32]) -> Cid {
    sha256_digest_cid(RAW_CODEC, digest)
}

fn sha256_cid(codec: u64, data: &[u8]) -> Cid {
    sha256_digest_cid(codec, &Sha256::digest(data).into())
}

fn sha256_digest_cid(codec: u64, digest: &[u8; 32]) -> Cid {
    // `wrap` only fails for digests longer than the 64-byte capacity of
    // `Cid`'s multihash; a sha2-256 digest is always 32 bytes.
    let hash = Multihash::wrap(SHA2_256, digest)
        .expect("a 32-byte digest always fits in a 64-byte multihash");
    Cid::new_v1(codec, hash)
}

/// Parses a CID string as written in atproto JSON (`$link` values).
///
/// Only the canonical string form is accepted: multibase base32 lower case
/// (prefix `b`), and the CID must be in the blessed set (see
/// [`check_blessed_cid`]).
pub fn parse_cid(s: &str) -> Result<Cid> {
    if s.len() > MAX_CID_STRING_LEN {
        return Err(invalid_cid(format!(
            "string of {} bytes is too long",
            s.len()
        )));
    }
    if !s.starts_with('b') {
        return Err(invalid_cid(format!(
            "{s:?} is not a base32 (multibase 'b') CID string"
        )));
    }
    let cid = Cid::try_from(s).map_err(|e| invalid_cid(format!("{s:?}: {e}")))?;
    check_blessed_cid(&cid)?;
    // Rejects anything that decodes but is not the canonical spelling:
    // upper case, trailing bytes after the multihash, non-minimal varints.
    if cid.to_string() != s {
        return Err(invalid_cid(format!("{s:?} is not in canonical form")));
    }
    Ok(cid)
}

/// Parses the binary form of a CID (without the DAG-CBOR `0x00` multibase
/// prefix). Every byte must be part of the CID, and the CID must be blessed.
pub fn cid_from_bytes(bytes: &[u8]) -> Result<Cid> {
    let cid = Cid::try_from(bytes).map_err(|e| invalid_cid(e.to_string()))?;
    check_blessed_cid(&cid)?;
    // A blessed CID has one canonical spelling: version 1, its one-byte
    // codec, sha2-256 (0x12) of 32 bytes (0x20), then the digest it was
    // read from. Anything longer or spelled otherwise (a non-minimal
    // varint) is refused, without encoding the CID again.
    let canonical = [1, cid.codec() as u8, SHA2_256 as u8, SHA2_256_LEN as u8];
    if bytes.len() != canonical.len() + SHA2_256_LEN || bytes[..canonical.len()] != canonical {
        return Err(invalid_cid(
            "binary CID has trailing or non-canonical bytes".to_owned(),
        ));
    }
    Ok(cid)
}

/// Checks that a CID is in the atproto blessed set: CIDv1, codec dag-cbor
/// (0x71) or raw (0x55), multihash sha2-256 with a 32-byte digest.
pub fn check_blessed_cid(cid: &Cid) -> Result<()> {
    let reason = if cid.version() != ::cid::Version::V1 {
        "only CIDv1 is allowed"
    } else if cid.codec() != DAG_CBOR_CODEC && cid.codec() != RAW_CODEC {
        "codec must be dag-cbor (0x71) or raw (0x55)"
    } else if cid.hash().code() != SHA2_256 {
        "hash must be sha2-256 (0x12)"
    } else if cid.hash().size() as usize != SHA2_256_LEN {
        "sha2-256 digest must be 32 bytes"
    } else {
        return Ok(());
    };
    Err(DataModelError::DisallowedCid {
        cid: cid.to_string(),
        reason,
    })
}

fn invalid_cid(reason: String) -> DataModelError {
    DataModelError::InvalidCid { reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECORD_CID: &str = "bafyreidfayvfuwqa7qlnopdjiqrxzs6blmoeu4rujcjtnci5beludirz2a";
    const BLOB_CID: &str = "bafkreiccldh766hwcnuxnf2wh6jgzepf2nlu2lvcllt63eww5p6chi4ity";

    #[test]
    fn parses_blessed_strings() {
        let cid = parse_cid(RECORD_CID).unwrap();
        assert_eq!(cid.codec(), DAG_CBOR_CODEC);
        assert_eq!(parse_cid(BLOB_CID).unwrap().codec(), RAW_CODEC);
    }

    #[test]
    fn rejects_bad_strings() {
        for s in [
            "",
            ".",
            "bafyrei",
            "QmY7Yh4UquoXHLPFo2XbhXkhBvFoPwmQUSa92pxnxjQuPU",
            "/ipfs/bafyreidfayvfuwqa7qlnopdjiqrxzs6blmoeu4rujcjtnci5beludirz2a",
            "BAFYREIDFAYVFUWQA7QLNOPDJIQRXZS6BLMOEU4RUJCJTNCI5BELUDIRZ2A",
            " bafyreidfayvfuwqa7qlnopdjiqrxzs6blmoeu4rujcjtnci5beludirz2a",
        ] {
            assert!(
                matches!(parse_cid(s), Err(DataModelError::InvalidCid { .. })),
                "{s:?} accepted"
            );
        }
    }

    #[test]
    fn rejects_unblessed() {
        // CIDv1 dag-pb (0x70) sha2-256.
        let cid = Cid::new_v1(0x70, Multihash::wrap(SHA2_256, &[0u8; 32]).unwrap());
        assert!(matches!(
            parse_cid(&cid.to_string()),
            Err(DataModelError::DisallowedCid { .. })
        ));
        // identity hash.
        let cid = Cid::new_v1(DAG_CBOR_CODEC, Multihash::wrap(0x00, b"abc").unwrap());
        assert!(matches!(
            cid_from_bytes(&cid.to_bytes()),
            Err(DataModelError::DisallowedCid { .. })
        ));
        // sha2-256 code with a short digest.
        let cid = Cid::new_v1(DAG_CBOR_CODEC, Multihash::wrap(SHA2_256, &[1; 20]).unwrap());
        assert!(matches!(
            check_blessed_cid(&cid),
            Err(DataModelError::DisallowedCid { .. })
        ));
    }

    #[test]
    fn binary_form_must_be_exact() {
        let cid = parse_cid(RECORD_CID).unwrap();
        let mut bytes = cid.to_bytes();
        assert_eq!(cid_from_bytes(&bytes).unwrap(), cid);
        bytes.push(0);
        assert!(matches!(
            cid_from_bytes(&bytes),
            Err(DataModelError::InvalidCid { .. })
        ));
        assert!(matches!(
            cid_from_bytes(&bytes[..10]),
            Err(DataModelError::InvalidCid { .. })
        ));
        // The same CID with one of its varints spelled long (version,
        // codec, hash code, digest size: each one byte in canonical form).
        let canonical = cid.to_bytes();
        for at in 0..4 {
            let mut long = canonical[..at].to_vec();
            long.extend_from_slice(&[canonical[at] | 0x80, 0x00]);
            long.extend_from_slice(&canonical[at + 1..]);
            let parsed = cid_from_bytes(&long);
            assert!(
                matches!(parsed, Err(DataModelError::InvalidCid { .. })),
                "varint {at} spelled long: {parsed:?}"
            );
        }
    }

    #[test]
    fn computes_known_cids() {
        // sha2-256 of the empty string is e3b0c442...; check the structure.
        let cid = cid_for_blob(b"");
        assert_eq!(cid.codec(), RAW_CODEC);
        assert_eq!(cid.hash().code(), SHA2_256);
        assert_eq!(
            cid.hash().digest()[..4],
            [0xe3, 0xb0, 0xc4, 0x42],
            "sha2-256 of the empty input"
        );
        assert_eq!(cid_for_cbor(b"").codec(), DAG_CBOR_CODEC);
        assert!(check_blessed_cid(&cid_for_cbor(b"\xa0")).is_ok());
    }
}
