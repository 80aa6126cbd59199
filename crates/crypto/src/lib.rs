//! Signing keys, public keys as `did:key`, and atproto ECDSA signatures.
//!
//! atproto allows two curves (<https://atproto.com/specs/cryptography>):
//! secp256k1 ("K-256", JWT `ES256K`) and NIST P-256 (JWT `ES256`). For both:
//!
//! - the signed message is hashed with SHA-256 and the hash is signed;
//! - signatures are the 64-byte "compact" form `r ‖ s` (big-endian, 32 bytes
//!   each), never ASN.1 DER;
//! - `s` must be in the lower half of the curve order ("low-S"): signing
//!   always produces low-S, and verification rejects high-S signatures,
//!   which would otherwise be a second valid signature for the same message;
//! - public keys are written as a compressed 33-byte SEC1 point, and as a
//!   `did:key`: `did:key:z` + base58btc(multicodec varint ‖ point), with the
//!   multicodec `secp256k1-pub` (0xe7) or `p256-pub` (0x1200).
//!
//! A private key is stored as its 32-byte big-endian scalar
//! ([`SigningKey::to_bytes`], [`SigningKey::from_bytes`]); files holding
//! secrets are read through [`private_file::read_private`], which refuses
//! one that other users may read.
//!
//! ```
//! use gelstore_crypto::{KeyAlgorithm, PublicKey, SigningKey};
//!
//! let key = SigningKey::generate(KeyAlgorithm::P256).unwrap();
//! let signature = key.sign(b"a commit's bytes");
//! // A verifier that knows only the did:key.
//! let public = PublicKey::from_did_key(&key.public_key().to_did_key()).unwrap();
//! public.verify(b"a commit's bytes", &signature).unwrap();
//! assert!(public.verify(b"other bytes", &signature).is_err());
//! ```

use std::fmt;

pub mod private_file;

use cid::multibase::{self, Base};
use k256::ecdsa::signature::{Signer, Verifier};
use k256::elliptic_curve::Generate;
use k256::elliptic_curve::scalar::IsHigh;
use k256::elliptic_curve::zeroize::Zeroizing;
use thiserror::Error;

/// Prefix of every `did:key` identifier.
pub const DID_KEY_PREFIX: &str = "did:key:";

/// Length of a compact `r ‖ s` signature.
pub const SIGNATURE_LEN: usize = 64;

/// Length of a private key (a big-endian scalar).
pub const PRIVATE_KEY_LEN: usize = 32;

/// Length of a compressed SEC1 public key.
pub const COMPRESSED_KEY_LEN: usize = 33;

/// Multicodec varint bytes of `secp256k1-pub` (code 0xe7).
const SECP256K1_PUB_PREFIX: [u8; 2] = [0xe7, 0x01];
/// Multicodec varint bytes of `p256-pub` (code 0x1200).
const P256_PUB_PREFIX: [u8; 2] = [0x80, 0x24];

/// Longest `did:key` string we try to decode. A valid one for either curve
/// is 57 characters; the cap keeps base58 decoding (quadratic) cheap on
/// hostile input.
const MAX_DID_KEY_LEN: usize = 128;

/// The two curves atproto allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyAlgorithm {
    /// secp256k1, JWT algorithm `ES256K`. The default for new identities.
    K256,
    /// NIST P-256 (secp256r1), JWT algorithm `ES256`.
    P256,
}

impl KeyAlgorithm {
    /// The JWT `alg` name: `ES256K` or `ES256`.
    pub fn jwt_name(self) -> &'static str {
        match self {
            KeyAlgorithm::K256 => "ES256K",
            KeyAlgorithm::P256 => "ES256",
        }
    }

    /// The multicodec code of this curve's public keys.
    pub fn multicodec(self) -> u64 {
        match self {
            KeyAlgorithm::K256 => 0xe7,
            KeyAlgorithm::P256 => 0x1200,
        }
    }

    fn multicodec_prefix(self) -> [u8; 2] {
        match self {
            KeyAlgorithm::K256 => SECP256K1_PUB_PREFIX,
            KeyAlgorithm::P256 => P256_PUB_PREFIX,
        }
    }
}

impl fmt::Display for KeyAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.jwt_name())
    }
}

/// Why a key could not be made, parsed or decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The operating system's random number generator failed.
    #[error("system randomness unavailable: {0}")]
    Randomness(String),

    /// Private key bytes of the wrong length.
    #[error("a private key is {PRIVATE_KEY_LEN} bytes, got {len}")]
    PrivateKeyLength {
        /// The length given.
        len: usize,
    },

    /// 32 bytes that are not a valid scalar (zero, or not below the curve order).
    #[error("private key is not a valid {alg} scalar")]
    InvalidPrivateKey {
        /// The curve.
        alg: KeyAlgorithm,
    },

    /// The string does not start with `did:key:`.
    #[error("not a did:key identifier")]
    NotDidKey,

    /// The `did:key` string is longer than any valid one.
    #[error("did:key of {len} bytes is too long")]
    DidKeyTooLong {
        /// Its length.
        len: usize,
    },

    /// The multibase part is not `z` + base58btc.
    #[error("invalid multibase key (expected 'z' + base58btc): {reason}")]
    Multibase {
        /// What is wrong with it.
        reason: String,
    },

    /// The key's multicodec is not `secp256k1-pub` or `p256-pub`.
    #[error("unsupported key type (multicodec prefix {prefix:02x?})")]
    UnsupportedKeyType {
        /// Up to the first two bytes after base58 decoding.
        prefix: Vec<u8>,
    },

    /// The public key is not a 33-byte compressed point.
    #[error("public key must be a {COMPRESSED_KEY_LEN}-byte compressed point, got {len} bytes")]
    PublicKeyLength {
        /// The length found.
        len: usize,
    },

    /// The bytes do not encode a compressed point on the curve.
    #[error("public key is not a valid compressed {alg} point")]
    InvalidPublicKey {
        /// The curve.
        alg: KeyAlgorithm,
    },
}

/// Why a signature was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// Not a 64-byte compact signature; an ASN.1 DER signature (70–72
    /// bytes, starting with 0x30) lands here too.
    #[error("signature must be {SIGNATURE_LEN} bytes (compact r‖s), got {len}{}", if *.der_like { " (looks like ASN.1 DER, which atproto does not allow)" } else { "" })]
    NotCompact {
        /// The length given.
        len: usize,
        /// Whether the bytes start like a DER `SEQUENCE`.
        der_like: bool,
    },

    /// `r` or `s` is zero or not below the curve order.
    #[error("signature scalars out of range")]
    OutOfRange,

    /// `s` is in the upper half of the curve order (a malleable twin of a
    /// low-S signature), which atproto forbids.
    #[error("high-S signature (atproto requires low-S)")]
    HighS,

    /// A well-formed signature that does not match the message and key.
    #[error("signature does not match the message and key")]
    Mismatch,
}

#[derive(Clone)]
enum SecretInner {
    K256(k256::ecdsa::SigningKey),
    P256(p256::ecdsa::SigningKey),
}

/// A private signing key on one of the two atproto curves.
///
/// `Debug` never shows the secret, only the curve and the public `did:key`.
#[derive(Clone)]
pub struct SigningKey(SecretInner);

impl SigningKey {
    /// Generates a new key from the operating system's randomness.
    pub fn generate(alg: KeyAlgorithm) -> Result<Self, KeyError> {
        let inner = match alg {
            KeyAlgorithm::K256 => SecretInner::K256(
                k256::ecdsa::SigningKey::try_generate()
                    .map_err(|e| KeyError::Randomness(e.to_string()))?,
            ),
            KeyAlgorithm::P256 => SecretInner::P256(
                p256::ecdsa::SigningKey::try_generate()
                    .map_err(|e| KeyError::Randomness(e.to_string()))?,
            ),
        };
        Ok(SigningKey(inner))
    }

    /// Loads a key from its 32-byte big-endian scalar.
    pub fn from_bytes(alg: KeyAlgorithm, bytes: &[u8]) -> Result<Self, KeyError> {
        if bytes.len() != PRIVATE_KEY_LEN {
            return Err(KeyError::PrivateKeyLength { len: bytes.len() });
        }
        let invalid = |_| KeyError::InvalidPrivateKey { alg };
        let inner = match alg {
            KeyAlgorithm::K256 => {
                SecretInner::K256(k256::ecdsa::SigningKey::from_slice(bytes).map_err(invalid)?)
            }
            KeyAlgorithm::P256 => {
                SecretInner::P256(p256::ecdsa::SigningKey::from_slice(bytes).map_err(invalid)?)
            }
        };
        Ok(SigningKey(inner))
    }

    /// The 32-byte big-endian scalar, for storing the identity. The buffer is
    /// wiped when dropped.
    pub fn to_bytes(&self) -> Zeroizing<[u8; PRIVATE_KEY_LEN]> {
        let mut out = Zeroizing::new([0u8; PRIVATE_KEY_LEN]);
        match &self.0 {
            SecretInner::K256(k) => out.copy_from_slice(&k.to_bytes()),
            SecretInner::P256(k) => out.copy_from_slice(&k.to_bytes()),
        }
        out
    }

    /// The key's curve.
    pub fn algorithm(&self) -> KeyAlgorithm {
        match self.0 {
            SecretInner::K256(_) => KeyAlgorithm::K256,
            SecretInner::P256(_) => KeyAlgorithm::P256,
        }
    }

    /// The matching public key.
    pub fn public_key(&self) -> PublicKey {
        match &self.0 {
            SecretInner::K256(k) => PublicKey(PublicInner::K256(*k.verifying_key())),
            SecretInner::P256(k) => PublicKey(PublicInner::P256(*k.verifying_key())),
        }
    }

    /// Signs SHA-256(`message`) and returns the low-S compact signature.
    ///
    /// Signing is deterministic (RFC 6979): the same key and message always
    /// give the same signature.
    pub fn sign(&self, message: &[u8]) -> [u8; SIGNATURE_LEN] {
        let mut out = [0u8; SIGNATURE_LEN];
        match &self.0 {
            SecretInner::K256(k) => {
                let sig: k256::ecdsa::Signature = k.sign(message);
                out.copy_from_slice(&sig.normalize_s().to_bytes());
            }
            SecretInner::P256(k) => {
                let sig: p256::ecdsa::Signature = k.sign(message);
                // p256 does not normalise by itself; atproto requires it.
                out.copy_from_slice(&sig.normalize_s().to_bytes());
            }
        }
        out
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningKey")
            .field("algorithm", &self.algorithm())
            .field("public", &self.public_key().to_did_key())
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum PublicInner {
    K256(k256::ecdsa::VerifyingKey),
    P256(p256::ecdsa::VerifyingKey),
}

/// A public key on one of the two atproto curves.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PublicKey(PublicInner);

impl PublicKey {
    /// Parses a compressed 33-byte SEC1 point.
    pub fn from_compressed(alg: KeyAlgorithm, bytes: &[u8]) -> Result<Self, KeyError> {
        if bytes.len() != COMPRESSED_KEY_LEN {
            return Err(KeyError::PublicKeyLength { len: bytes.len() });
        }
        // `from_sec1_bytes` also takes uncompressed points; the length check
        // above and this tag check keep it to the compressed form.
        if bytes[0] != 0x02 && bytes[0] != 0x03 {
            return Err(KeyError::InvalidPublicKey { alg });
        }
        let invalid = |_| KeyError::InvalidPublicKey { alg };
        let inner = match alg {
            KeyAlgorithm::K256 => PublicInner::K256(
                k256::ecdsa::VerifyingKey::from_sec1_bytes(bytes).map_err(invalid)?,
            ),
            KeyAlgorithm::P256 => PublicInner::P256(
                p256::ecdsa::VerifyingKey::from_sec1_bytes(bytes).map_err(invalid)?,
            ),
        };
        Ok(PublicKey(inner))
    }

    /// The compressed 33-byte SEC1 point.
    pub fn to_compressed(&self) -> [u8; COMPRESSED_KEY_LEN] {
        let mut out = [0u8; COMPRESSED_KEY_LEN];
        match &self.0 {
            PublicInner::K256(k) => out.copy_from_slice(k.to_sec1_point(true).as_bytes()),
            PublicInner::P256(k) => out.copy_from_slice(k.to_sec1_point(true).as_bytes()),
        }
        out
    }

    /// The key's curve.
    pub fn algorithm(&self) -> KeyAlgorithm {
        match self.0 {
            PublicInner::K256(_) => KeyAlgorithm::K256,
            PublicInner::P256(_) => KeyAlgorithm::P256,
        }
    }

    /// The multikey form used in DID documents (`publicKeyMultibase`):
    /// `z` + base58btc(multicodec ‖ compressed point).
    pub fn to_multikey(&self) -> String {
        let mut bytes = Vec::with_capacity(2 + COMPRESSED_KEY_LEN);
        bytes.extend_from_slice(&self.algorithm().multicodec_prefix());
        bytes.extend_from_slice(&self.to_compressed());
        multibase::encode(Base::Base58Btc, bytes)
    }

    /// Parses the multikey form (`z` + base58btc(multicodec ‖ point)).
    pub fn from_multikey(multikey: &str) -> Result<Self, KeyError> {
        if multikey.len() > MAX_DID_KEY_LEN {
            return Err(KeyError::DidKeyTooLong {
                len: multikey.len(),
            });
        }
        let bytes = decode_base58btc(multikey)?;
        let alg = match bytes.get(..2) {
            Some(p) if p == SECP256K1_PUB_PREFIX => KeyAlgorithm::K256,
            Some(p) if p == P256_PUB_PREFIX => KeyAlgorithm::P256,
            _ => {
                return Err(KeyError::UnsupportedKeyType {
                    prefix: bytes.iter().take(2).copied().collect(),
                });
            }
        };
        PublicKey::from_compressed(alg, &bytes[2..])
    }

    /// Parses the legacy DID-document form: `publicKeyMultibase` of a
    /// verification method of type `EcdsaSecp256k1VerificationKey2019` or
    /// `EcdsaSecp256r1VerificationKey2019` (the algorithm comes from the
    /// type): `z` + base58btc of the bare SEC1 point, without a multicodec
    /// prefix. The PLC directory serves this form with the uncompressed
    /// 65-byte point; the compressed 33-byte one is accepted too.
    pub fn from_legacy_multibase(alg: KeyAlgorithm, multibase: &str) -> Result<Self, KeyError> {
        if multibase.len() > MAX_DID_KEY_LEN {
            return Err(KeyError::DidKeyTooLong {
                len: multibase.len(),
            });
        }
        let bytes = decode_base58btc(multibase)?;
        match bytes.len() {
            COMPRESSED_KEY_LEN => PublicKey::from_compressed(alg, &bytes),
            65 if bytes[0] == 0x04 => {
                let invalid = |_| KeyError::InvalidPublicKey { alg };
                let inner = match alg {
                    KeyAlgorithm::K256 => PublicInner::K256(
                        k256::ecdsa::VerifyingKey::from_sec1_bytes(&bytes).map_err(invalid)?,
                    ),
                    KeyAlgorithm::P256 => PublicInner::P256(
                        p256::ecdsa::VerifyingKey::from_sec1_bytes(&bytes).map_err(invalid)?,
                    ),
                };
                Ok(PublicKey(inner))
            }
            len => Err(KeyError::PublicKeyLength { len }),
        }
    }

    /// The `did:key` identifier of this key.
    pub fn to_did_key(&self) -> String {
        format!("{DID_KEY_PREFIX}{}", self.to_multikey())
    }

    /// Parses a `did:key` identifier (compressed secp256k1 or P-256 key).
    pub fn from_did_key(did: &str) -> Result<Self, KeyError> {
        if did.len() > MAX_DID_KEY_LEN {
            return Err(KeyError::DidKeyTooLong { len: did.len() });
        }
        let multikey = did
            .strip_prefix(DID_KEY_PREFIX)
            .ok_or(KeyError::NotDidKey)?;
        PublicKey::from_multikey(multikey)
    }

    /// Verifies a compact signature over SHA-256(`message`).
    ///
    /// Rejects anything but 64 bytes (so DER), out-of-range scalars, and
    /// high-S signatures, before checking the signature itself.
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> Result<(), SignatureError> {
        if signature.len() != SIGNATURE_LEN {
            return Err(SignatureError::NotCompact {
                len: signature.len(),
                der_like: signature.first() == Some(&0x30),
            });
        }
        match &self.0 {
            PublicInner::K256(k) => {
                let sig = k256::ecdsa::Signature::from_slice(signature)
                    .map_err(|_| SignatureError::OutOfRange)?;
                if bool::from(sig.s().is_high()) {
                    return Err(SignatureError::HighS);
                }
                k.verify(message, &sig)
                    .map_err(|_| SignatureError::Mismatch)
            }
            PublicInner::P256(k) => {
                let sig = p256::ecdsa::Signature::from_slice(signature)
                    .map_err(|_| SignatureError::OutOfRange)?;
                if bool::from(sig.s().is_high()) {
                    return Err(SignatureError::HighS);
                }
                k.verify(message, &sig)
                    .map_err(|_| SignatureError::Mismatch)
            }
        }
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PublicKey")
            .field(&self.to_did_key())
            .finish()
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_did_key())
    }
}

impl std::str::FromStr for PublicKey {
    type Err = KeyError;

    /// Parses a `did:key`.
    fn from_str(s: &str) -> Result<Self, KeyError> {
        PublicKey::from_did_key(s)
    }
}

fn decode_base58btc(s: &str) -> Result<Vec<u8>, KeyError> {
    let multibase_err = |reason: String| KeyError::Multibase { reason };
    if !s.starts_with('z') {
        return Err(multibase_err(
            "expected the 'z' (base58btc) multibase prefix".to_owned(),
        ));
    }
    let (base, bytes) = multibase::decode(s).map_err(|e| multibase_err(e.to_string()))?;
    if base != Base::Base58Btc {
        return Err(multibase_err(format!("unexpected base {base:?}")));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_round_trip() {
        for alg in [KeyAlgorithm::K256, KeyAlgorithm::P256] {
            let key = SigningKey::generate(alg).unwrap();
            assert_eq!(key.algorithm(), alg);
            let again = SigningKey::from_bytes(alg, key.to_bytes().as_slice()).unwrap();
            assert_eq!(again.public_key(), key.public_key());
            let did = key.public_key().to_did_key();
            assert_eq!(PublicKey::from_did_key(&did).unwrap(), key.public_key());
            let sig = key.sign(b"hello");
            key.public_key().verify(b"hello", &sig).unwrap();
            assert_eq!(
                key.public_key().verify(b"hellO", &sig),
                Err(SignatureError::Mismatch)
            );
            // Two generated keys differ.
            let other = SigningKey::generate(alg).unwrap();
            assert_ne!(other.public_key(), key.public_key());
            assert_eq!(
                other.public_key().verify(b"hello", &sig),
                Err(SignatureError::Mismatch)
            );
        }
    }

    #[test]
    fn legacy_multibase_keys() {
        // An `#atproto` key as the PLC directory (@did-plc/server 0.0.1)
        // serves it: type EcdsaSecp256k1VerificationKey2019, the bare
        // uncompressed point.
        let legacy = "zRJptMQvfVaokqCYec5HtQ1vFdtvZhkHsE7fnfYdJKKK3sNSdnCCRm6FcEh7rdAe2mkvvFpjTuPmSN5qznBf3w2p7";
        let point = decode_base58btc(legacy).unwrap();
        assert_eq!((point.len(), point[0]), (65, 0x04));
        let mut compressed = vec![0x02 | (point[64] & 1)];
        compressed.extend_from_slice(&point[1..33]);
        let want = PublicKey::from_compressed(KeyAlgorithm::K256, &compressed).unwrap();
        let got = PublicKey::from_legacy_multibase(KeyAlgorithm::K256, legacy).unwrap();
        assert_eq!(got, want);
        // The compressed legacy form too.
        let short = multibase::encode(Base::Base58Btc, &compressed);
        assert_eq!(
            PublicKey::from_legacy_multibase(KeyAlgorithm::K256, &short).unwrap(),
            want
        );
        // Not a point of the curve; a wrong length; a multikey (prefixed).
        let mut bad = point.clone();
        bad[64] ^= 1;
        let bad = multibase::encode(Base::Base58Btc, &bad);
        assert!(PublicKey::from_legacy_multibase(KeyAlgorithm::K256, &bad).is_err());
        let odd = multibase::encode(Base::Base58Btc, &point[..40]);
        assert_eq!(
            PublicKey::from_legacy_multibase(KeyAlgorithm::K256, &odd).unwrap_err(),
            KeyError::PublicKeyLength { len: 40 }
        );
        assert!(PublicKey::from_legacy_multibase(KeyAlgorithm::K256, &want.to_multikey()).is_err());
    }

    #[test]
    fn did_key_prefixes() {
        let k = SigningKey::from_bytes(KeyAlgorithm::K256, &[7; 32]).unwrap();
        assert!(k.public_key().to_did_key().starts_with("did:key:zQ3s"));
        let p = SigningKey::from_bytes(KeyAlgorithm::P256, &[7; 32]).unwrap();
        assert!(p.public_key().to_did_key().starts_with("did:key:zDna"));
    }

    #[test]
    fn rejects_bad_private_keys() {
        assert_eq!(
            SigningKey::from_bytes(KeyAlgorithm::K256, &[1; 31]).unwrap_err(),
            KeyError::PrivateKeyLength { len: 31 }
        );
        for alg in [KeyAlgorithm::K256, KeyAlgorithm::P256] {
            assert_eq!(
                SigningKey::from_bytes(alg, &[0; 32]).unwrap_err(),
                KeyError::InvalidPrivateKey { alg }
            );
            assert_eq!(
                SigningKey::from_bytes(alg, &[0xff; 32]).unwrap_err(),
                KeyError::InvalidPrivateKey { alg }
            );
        }
    }

    #[test]
    fn rejects_bad_did_keys() {
        let good = SigningKey::from_bytes(KeyAlgorithm::K256, &[7; 32])
            .unwrap()
            .public_key()
            .to_did_key();
        assert_eq!(
            PublicKey::from_did_key("did:plc:abc"),
            Err(KeyError::NotDidKey)
        );
        assert!(matches!(
            PublicKey::from_did_key("did:key:Q3sh"),
            Err(KeyError::Multibase { .. })
        ));
        assert!(matches!(
            PublicKey::from_did_key("did:key:z0OIl"),
            Err(KeyError::Multibase { .. })
        ));
        assert!(matches!(
            PublicKey::from_did_key(&format!("{good}{}", "1".repeat(200))),
            Err(KeyError::DidKeyTooLong { .. })
        ));
        // Ed25519 (0xed 0x01) is a valid did:key, but not an atproto key type.
        let ed = multibase::encode(Base::Base58Btc, [&[0xed, 0x01][..], &[1; 32]].concat());
        assert_eq!(
            PublicKey::from_did_key(&format!("did:key:{ed}")),
            Err(KeyError::UnsupportedKeyType {
                prefix: vec![0xed, 0x01]
            })
        );
        // Right prefix, one byte short.
        let mut bytes = decode_base58btc(good.strip_prefix("did:key:").unwrap()).unwrap();
        bytes.pop();
        let short = multibase::encode(Base::Base58Btc, &bytes);
        assert_eq!(
            PublicKey::from_did_key(&format!("did:key:{short}")),
            Err(KeyError::PublicKeyLength { len: 32 })
        );
        // An x coordinate that is not on the curve (x = 5 on secp256k1:
        // 125 + 7 = 132 is not a square mod p), and a bad tag byte.
        let mut off_curve = vec![0xe7, 0x01, 0x02];
        off_curve.extend_from_slice(&[0; 31]);
        off_curve.push(5);
        let enc = multibase::encode(Base::Base58Btc, &off_curve);
        assert_eq!(
            PublicKey::from_did_key(&format!("did:key:{enc}")),
            Err(KeyError::InvalidPublicKey {
                alg: KeyAlgorithm::K256
            })
        );
        bytes.push(0);
        bytes[2] = 0x04;
        let enc = multibase::encode(Base::Base58Btc, &bytes);
        assert_eq!(
            PublicKey::from_did_key(&format!("did:key:{enc}")),
            Err(KeyError::InvalidPublicKey {
                alg: KeyAlgorithm::K256
            })
        );
    }

    #[test]
    fn signatures_are_low_s_and_high_s_is_rejected() {
        for alg in [KeyAlgorithm::K256, KeyAlgorithm::P256] {
            let key = SigningKey::from_bytes(alg, &[9; 32]).unwrap();
            let public = key.public_key();
            for i in 0..32u8 {
                let msg = [i; 5];
                let sig = key.sign(&msg);
                public.verify(&msg, &sig).unwrap();
                let high = flip_s(alg, &sig);
                assert_eq!(public.verify(&msg, &high), Err(SignatureError::HighS));
            }
        }
    }

    /// Replaces s by n - s (the malleable twin of the signature).
    fn flip_s(alg: KeyAlgorithm, sig: &[u8; 64]) -> [u8; 64] {
        let mut out = [0u8; 64];
        match alg {
            KeyAlgorithm::K256 => {
                let s = k256::ecdsa::Signature::from_slice(sig).unwrap();
                let neg = -*s.s();
                let flipped =
                    k256::ecdsa::Signature::from_scalars(s.r().to_bytes(), neg.to_bytes()).unwrap();
                out.copy_from_slice(&flipped.to_bytes());
            }
            KeyAlgorithm::P256 => {
                let s = p256::ecdsa::Signature::from_slice(sig).unwrap();
                let neg = -*s.s();
                let flipped =
                    p256::ecdsa::Signature::from_scalars(s.r().to_bytes(), neg.to_bytes()).unwrap();
                out.copy_from_slice(&flipped.to_bytes());
            }
        }
        out
    }

    #[test]
    fn rejects_malformed_signatures() {
        let key = SigningKey::from_bytes(KeyAlgorithm::K256, &[3; 32]).unwrap();
        let public = key.public_key();
        assert_eq!(
            public.verify(b"m", &[0x30; 70]),
            Err(SignatureError::NotCompact {
                len: 70,
                der_like: true
            })
        );
        assert_eq!(
            public.verify(b"m", &[]),
            Err(SignatureError::NotCompact {
                len: 0,
                der_like: false
            })
        );
        assert_eq!(
            public.verify(b"m", &[0; 64]),
            Err(SignatureError::OutOfRange)
        );
        assert_eq!(
            public.verify(b"m", &[0xff; 64]),
            Err(SignatureError::OutOfRange)
        );
    }

    #[test]
    fn debug_hides_the_secret() {
        let key = SigningKey::from_bytes(KeyAlgorithm::K256, &[0x42; 32]).unwrap();
        let shown = format!("{key:?}");
        assert!(shown.contains("did:key:"), "{shown}");
        assert!(!shown.contains("42, 42"), "{shown}");
    }
}
