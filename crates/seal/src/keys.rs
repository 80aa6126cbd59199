//! Key material: chat keys, blob keys, device keys (X25519, kept in an
//! owner-only file) and account keys (X25519, shared by the owner's devices).
//!
//! Secret bytes live in [`Zeroizing`] buffers or `x25519_dalek::StaticSecret`
//! (zeroed on drop); `Debug` never prints them. Nothing here implements
//! `Serialize`: a secret reaches a record only inside a sealed wrap.

use std::fmt;
use std::path::Path;

use gelstore_crypto::private_file::{PrivateFileError, read_private};
use rand_core::CryptoRng;
use x25519_dalek::{PublicKey, StaticSecret};
use zeroize::Zeroizing;

use super::error::{Result, SealError};

/// Length of every symmetric key and X25519 key here.
pub const KEY_LEN: usize = 32;

/// The operating system's random number generator (getrandom), for
/// production callers of the functions that take an injected RNG.
pub fn os_rng() -> impl CryptoRng {
    rand_core::UnwrapErr(getrandom::SysRng)
}

/// 32 fresh random bytes.
pub(crate) fn random_key(rng: &mut impl CryptoRng) -> Zeroizing<[u8; KEY_LEN]> {
    let mut key = Zeroizing::new([0u8; KEY_LEN]);
    rng.fill_bytes(key.as_mut());
    key
}

/// `n` random bytes as lowercase hex (used for the random part of keyIds).
pub(crate) fn random_hex(rng: &mut impl CryptoRng, n: usize) -> String {
    let mut buf = vec![0u8; n];
    rng.fill_bytes(&mut buf);
    hex(&buf)
}

/// A chat key (CK): the 32-byte secret that record keys are derived from,
/// with the `keyId` that names it in `encryptedContent.keyId`.
#[derive(Clone)]
pub struct ChatKey {
    key_id: String,
    secret: Zeroizing<[u8; KEY_LEN]>,
}

impl ChatKey {
    /// A chat key from its id and secret bytes.
    pub fn new(key_id: impl Into<String>, secret: [u8; KEY_LEN]) -> ChatKey {
        ChatKey {
            key_id: key_id.into(),
            secret: Zeroizing::new(secret),
        }
    }

    /// A fresh random chat key.
    pub fn generate(key_id: impl Into<String>, rng: &mut impl CryptoRng) -> ChatKey {
        ChatKey {
            key_id: key_id.into(),
            secret: random_key(rng),
        }
    }

    /// The keyId.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    pub(crate) fn secret(&self) -> &[u8; KEY_LEN] {
        &self.secret
    }
}

impl fmt::Debug for ChatKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatKey")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

/// Finds chat keys by `keyId` when opening records.
pub trait KeyLookup {
    /// The chat key named `key_id`, if held.
    fn chat_key(&self, key_id: &str) -> Option<&ChatKey>;
}

impl KeyLookup for ChatKey {
    fn chat_key(&self, key_id: &str) -> Option<&ChatKey> {
        (self.key_id == key_id).then_some(self)
    }
}

impl KeyLookup for [ChatKey] {
    fn chat_key(&self, key_id: &str) -> Option<&ChatKey> {
        self.iter().find(|k| k.key_id == key_id)
    }
}

/// The per-blob key: random for every blob, kept inside the sealed content.
#[derive(Clone, PartialEq, Eq)]
pub struct BlobKey(pub(crate) Zeroizing<[u8; KEY_LEN]>);

impl BlobKey {
    /// A blob key from its bytes.
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> BlobKey {
        BlobKey(Zeroizing::new(bytes))
    }

    /// A fresh random blob key.
    pub fn generate(rng: &mut impl CryptoRng) -> BlobKey {
        BlobKey(random_key(rng))
    }

    pub(crate) fn bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }
}

impl fmt::Debug for BlobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BlobKey(..)")
    }
}

/// An X25519 key pair: a device's own key, or an account key.
#[derive(Clone)]
pub(crate) struct X25519Pair {
    secret: StaticSecret,
    public: [u8; KEY_LEN],
}

impl X25519Pair {
    pub(crate) fn generate(rng: &mut impl CryptoRng) -> X25519Pair {
        X25519Pair::from_secret(StaticSecret::random_from_rng(rng))
    }

    pub(crate) fn from_secret(secret: StaticSecret) -> X25519Pair {
        let public = PublicKey::from(&secret).to_bytes();
        X25519Pair { secret, public }
    }

    pub(crate) fn from_bytes(bytes: [u8; KEY_LEN]) -> X25519Pair {
        X25519Pair::from_secret(StaticSecret::from(bytes))
    }

    pub(crate) fn secret_bytes(&self) -> &[u8; KEY_LEN] {
        self.secret.as_bytes()
    }

    pub(crate) fn public(&self) -> &[u8; KEY_LEN] {
        &self.public
    }
}

/// This device's X25519 key. The secret never leaves the device: it is kept
/// in a file only its owner can read ([`DeviceKey::save`]) and is never
/// written into a record.
#[derive(Clone)]
pub struct DeviceKey(pub(crate) X25519Pair);

/// First line of a device key file.
const KEY_FILE_HEADER: &str = "gelstore device key v1 (X25519 secret, base64). Keep private.";
/// Longest device key file read (two short lines).
const MAX_KEY_FILE_BYTES: u64 = 4096;

impl DeviceKey {
    /// A fresh device key.
    pub fn generate(rng: &mut impl CryptoRng) -> DeviceKey {
        DeviceKey(X25519Pair::generate(rng))
    }

    /// A device key from its 32 secret bytes.
    pub fn from_secret_bytes(bytes: [u8; KEY_LEN]) -> DeviceKey {
        DeviceKey(X25519Pair::from_bytes(bytes))
    }

    /// The device's membership signing key (P-256), derived from its
    /// X25519 secret with HKDF-SHA256 so a device keeps one secret file.
    /// The two uses are kept apart by the HKDF label; neither key reveals
    /// the other.
    pub fn signing_key(&self) -> gelstore_crypto::SigningKey {
        use gelstore_crypto::{KeyAlgorithm, SigningKey};
        let hk = hkdf::Hkdf::<sha2::Sha256>::new(
            Some(b"gelstore/device-signing-key/v1"),
            self.0.secret_bytes(),
        );
        // A scalar of zero or above the group order fails; the chance is
        // about 2^-32 per try, so a counter in the label finds one.
        for counter in 0u8..=255 {
            let mut seed = Zeroizing::new([0u8; KEY_LEN]);
            hk.expand(&[counter], seed.as_mut())
                .expect("32 bytes is a valid HKDF-SHA256 output length");
            if let Ok(key) = SigningKey::from_bytes(KeyAlgorithm::P256, seed.as_ref()) {
                return key;
            }
        }
        unreachable!("256 HKDF outputs were all invalid P-256 scalars")
    }

    /// The public key, as the `device` record's `publicKey`.
    pub fn public_key(&self) -> [u8; KEY_LEN] {
        *self.0.public()
    }

    /// Writes the key to a new file with owner-only permissions (0600 on
    /// Unix). Refuses to overwrite an existing file.
    pub fn save(&self, path: &Path) -> Result<()> {
        use base64::Engine;
        use std::io::Write;
        let err = |reason: String| SealError::KeyFile {
            path: path.display().to_string(),
            reason,
        };
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let mut file = options.open(path).map_err(|e| err(e.to_string()))?;
        let encoded =
            Zeroizing::new(base64::engine::general_purpose::STANDARD.encode(self.0.secret_bytes()));
        let text = Zeroizing::new(format!("{KEY_FILE_HEADER}\n{}\n", encoded.as_str()));
        file.write_all(text.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|e| err(e.to_string()))
    }

    /// Reads a key written by [`DeviceKey::save`]. On Unix, refuses a file
    /// that group or others may read or write.
    pub fn load(path: &Path) -> Result<DeviceKey> {
        use base64::Engine;
        let err = |reason: String| SealError::KeyFile {
            path: path.display().to_string(),
            reason,
        };
        let bytes = match read_private(path, MAX_KEY_FILE_BYTES) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return Err(err("no such file".into())),
            Err(PrivateFileError::TooLarge { .. }) => {
                return Err(err("too large to be a device key file".into()));
            }
            Err(e) => return Err(err(e.to_string())),
        };
        let text = std::str::from_utf8(&bytes).map_err(|_| err("not UTF-8 text".into()))?;
        let mut lines = text.lines();
        if lines.next() != Some(KEY_FILE_HEADER) {
            return Err(err("not a gelstore device key file (bad first line)".into()));
        }
        let body = lines.next().unwrap_or("").trim();
        let bytes = Zeroizing::new(
            base64::engine::general_purpose::STANDARD
                .decode(body)
                .map_err(|_| err("the key line is not base64".into()))?,
        );
        let secret: [u8; KEY_LEN] = bytes
            .as_slice()
            .try_into()
            .map_err(|_| err(format!("the key is {} bytes, expected 32", bytes.len())))?;
        Ok(DeviceKey::from_secret_bytes(secret))
    }
}

impl fmt::Debug for DeviceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceKey")
            .field("public", &hex(self.0.public()))
            .finish_non_exhaustive()
    }
}

/// One generation (epoch) of the account key: an X25519 key pair shared by
/// every admitted device. Chat keys are wrapped to it.
#[derive(Clone)]
pub struct AccountKey {
    pub(crate) key_id: String,
    pub(crate) epoch: u64,
    pub(crate) pair: X25519Pair,
}

impl AccountKey {
    /// The keyId (`account:<epoch>:<random>`).
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The epoch (generation), counting from 0.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The public half.
    pub fn public_key(&self) -> [u8; KEY_LEN] {
        *self.pair.public()
    }
}

impl fmt::Debug for AccountKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccountKey")
            .field("key_id", &self.key_id)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

/// Lower-case hex, as key ids and device secrets are written.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
