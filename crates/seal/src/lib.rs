//! Sealing: end-to-end encryption of the user's content in records.
//!
//! Everything a user or model wrote is sealed; metadata stays clear. The
//! pieces, each in its own module:
//!
//! - [`record`]: seal/open a record's sealed field (`content` of a message,
//!   `sealed` of a chat) with XChaCha20-Poly1305 under a key derived by
//!   HKDF-SHA256 from the chat key; alg `xchacha20poly1305-hkdf-sha256-v1`.
//! - [`aad`]: the associated data that binds a seal to its place and
//!   metadata (alg, keyId, nonce, the envelope's `$type`, repo DID,
//!   collection, rkey, `$type`, the sealed field's name, a hash of the clear
//!   fields, the blob list with each blob's MIME type). A message without
//!   content carries an authenticator instead ([`AUTHENTICATOR_FIELD`]).
//! - [`frame`]: the plaintext frame (DAG-CBOR content, blob keys, padding).
//! - [`envelope`]: `encryptedContent` parsed with structural checks first.
//! - [`blob`]: sealed blobs, age-style STREAM in 64 KiB chunks, with the
//!   length inside and Padmé padding.
//! - [`keys`]: chat, blob, device (X25519, file 0600) and account keys.
//! - [`wrap`]: HPKE (RFC 9180) key wraps as `keyWrap` records.
//! - [`membership`]: the signed log of who holds the account key.
//! - [`keyring`]: a device's keys; pairing, approval, removal and rotation.
//!
//! Every function that needs randomness takes the RNG as an argument
//! (`rand_core::CryptoRng`), so tests can replay fixed vectors; production
//! callers pass [`os_rng`]. `fixtures/seal/README.md` walks through the
//! construction with byte-exact golden vectors.
//!
//! ```
//! use gelstore_seal::{SealError, open_blob, os_rng, seal_blob};
//!
//! let sealed = seal_blob(b"a long tool output", &mut os_rng()).unwrap();
//! // The server keeps `sealed.bytes` and cannot read them; the record keeps the key.
//! assert_eq!(open_blob(&sealed.bytes, &sealed.seal).unwrap(), b"a long tool output");
//! let mut tampered = sealed.bytes.clone();
//! tampered[40] ^= 1;
//! // The CID is checked before any chunk is opened.
//! assert!(matches!(
//!     open_blob(&tampered, &sealed.seal),
//!     Err(SealError::BlobCidMismatch { .. })
//! ));
//! ```

pub mod aad;
pub mod blob;
pub mod envelope;
mod error;
pub mod frame;
#[doc(hidden)]
pub mod fuzzing;
pub mod keyring;
pub mod keys;
pub mod membership;
mod plaintext;
pub mod record;
mod typed;
pub mod wrap;

pub use self::aad::{
    AUTHENTICATOR_FIELD, AadContext, BlobBinding, Place, clear_fields_hash, record_aad,
    sealed_field, sealed_fields,
};
pub use self::blob::{
    BlobReader, BlobSeal, SealedBlob, open_blob, seal_blob, seal_blob_with, seal_blob_with_key,
};
pub use self::envelope::{Envelope, EnvelopeRef, SEAL_ALG_V1, SEALED_BLOB_MIME};
pub use self::error::{Result, SealError};
pub use self::frame::Padding;
pub use self::keyring::{
    AbsorbReport, Fork, KeySet, Keyring, PairingCode, PairingRequest, Resealed, ResealedWrap,
    pair_request,
};
pub use self::keys::{AccountKey, BlobKey, ChatKey, DeviceKey, KeyLookup, os_rng};
pub use self::membership::{Log, SignedChange, Standing};
pub use self::plaintext::Plaintext;
pub use self::record::{Opened, SealOptions, open_record, seal_record};
pub use self::wrap::{KeyWrap, Recipient, WRAP_ALG_V1};
