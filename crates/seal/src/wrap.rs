//! Key wraps: one 32-byte secret sealed with HPKE (RFC 9180) to one X25519
//! public key, as a `chat.gel.assistant.keyWrap` record.
//!
//! Suite: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305, in
//! **PSK mode** (`mode_psk`), single-shot (sequence number 0). The PSK is what
//! makes a wrap trustworthy: a PDS that plants a `keyWrap` record cannot make
//! one a device accepts, because it holds neither PSK:
//!
//! | wrap | recipient | PSK from |
//! |---|---|---|
//! | pairing: the account key to a new device | device | the pairing secret |
//! | rotation: a new account epoch `N+1` to a device | device | account key of epoch `N` |
//! | chain: account key `N` to account key `N+1` | account `N+1` | account key `N+1` |
//! | chat key of account epoch `E` | account `E` | account key `E` |
//!
//! ```text
//! account PSK(K)  = HKDF-SHA256(salt = "", IKM = K's X25519 secret,
//!                               info = "gelstore/wrap/account-psk/v1")      32 bytes
//!   psk_id        = "gelstore/wrap/account/" ‖ K's keyId
//! pairing PSK     = HKDF-SHA256(salt = new device's public key, IKM = pairing secret,
//!                               info = "gelstore/wrap/pairing-psk/v1")       32 bytes
//!   psk_id        = "gelstore/wrap/pairing/v1"
//! info (HPKE)     = lp("gelstore/wrap/v1") ‖ lp(alg) ‖ lp(repo DID) ‖ lp(keyId)
//!                 ‖ u64be(epoch) ‖ recipient
//!   recipient     = lp("device") ‖ lp(device rkey)
//!                 | lp("account") ‖ lp(account keyId) ‖ u64be(account epoch)
//! aad (HPKE)      = lp("gelstore/wrap/aad/v1") ‖ lp(createdAt) ‖ lp(change CID bytes)
//! enc, ciphertext = SetupPSKS(pkR, info, psk, psk_id) then Seal(aad, secret)
//! ```
//!
//! The change CID is that of the membership change a pairing wrap admits
//! the device by (see [`super::membership`]): opening the wrap with the
//! pairing secret is what tells the new device which change to trust. Other
//! wraps bind an empty one.

use std::collections::BTreeMap;

use hkdf::Hkdf;
use hpke::aead::ChaCha20Poly1305;
use hpke::kdf::HkdfSha256;
use hpke::kem::X25519HkdfSha256;
use hpke::{Deserializable, Kem, OpModeR, OpModeS, PskBundle, Serializable};
use ipld_core::ipld::Ipld;
use rand_core::CryptoRng;
use sha2::Sha256;
use zeroize::Zeroizing;

use super::aad::put_field;
use super::error::{Result, SealError};
use super::keys::KEY_LEN;
use gelstore_model::Cid;

/// The wrap scheme of version 1.
pub const WRAP_ALG_V1: &str = "hpke-x25519-hkdf-sha256-chacha20poly1305-v1";
/// `$type` of a key wrap record.
pub const KEY_WRAP_TYPE: &str = gelstore_types::lexicon::chat::gel::assistant::key_wrap::NSID;
/// Collection of key wrap records.
pub const KEY_WRAP_COLLECTION: &str = KEY_WRAP_TYPE;
/// HKDF info of the account PSK.
pub const ACCOUNT_PSK_LABEL: &str = "gelstore/wrap/account-psk/v1";
/// HKDF info of the pairing PSK.
pub const PAIRING_PSK_LABEL: &str = "gelstore/wrap/pairing-psk/v1";
/// psk_id of pairing wraps.
pub const PAIRING_PSK_ID: &str = "gelstore/wrap/pairing/v1";
/// Label that starts the HPKE info.
pub const WRAP_INFO_LABEL: &str = "gelstore/wrap/v1";

/// Size of `enc` (an X25519 public key).
const ENC_LEN: usize = 32;
/// Size of a wrap's ciphertext: 32-byte secret + 16-byte tag.
const WRAPPED_LEN: usize = KEY_LEN + 16;

type PrivateKey = <X25519HkdfSha256 as Kem>::PrivateKey;
type PublicKey = <X25519HkdfSha256 as Kem>::PublicKey;
type EncappedKey = <X25519HkdfSha256 as Kem>::EncappedKey;

/// Whom a wrap is for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Recipient {
    /// A device, by the record key of its `device` record.
    Device {
        /// The device record's rkey.
        device: String,
    },
    /// One epoch of the account key.
    Account {
        /// The account key's keyId.
        key_id: String,
        /// Its epoch.
        epoch: u64,
    },
}

/// A `chat.gel.assistant.keyWrap` record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyWrap {
    /// The keyId of what is wrapped.
    pub key_id: String,
    /// Its epoch.
    pub epoch: u64,
    /// The scheme.
    pub alg: String,
    /// Whom it is for.
    pub recipient: Recipient,
    /// HPKE encapsulated key (32 bytes).
    pub enc: Vec<u8>,
    /// The wrapped secret and tag (48 bytes).
    pub ciphertext: Vec<u8>,
    /// When it was made (atproto datetime).
    pub created_at: String,
}

/// A PSK and its id, for HPKE PSK mode.
pub struct Psk {
    psk: Zeroizing<[u8; 32]>,
    id: Vec<u8>,
}

impl std::fmt::Debug for Psk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Psk")
            .field("id", &String::from_utf8_lossy(&self.id))
            .finish_non_exhaustive()
    }
}

impl Psk {
    /// The PSK bytes (for test vectors).
    pub fn bytes(&self) -> &[u8; 32] {
        &self.psk
    }

    /// The psk_id.
    pub fn id(&self) -> &[u8] {
        &self.id
    }

    /// The PSK that proves possession of an account key.
    pub fn account(secret: &[u8; KEY_LEN], key_id: &str) -> Psk {
        let mut psk = Zeroizing::new([0u8; 32]);
        Hkdf::<Sha256>::new(None, secret)
            .expand(ACCOUNT_PSK_LABEL.as_bytes(), psk.as_mut())
            .expect("32 bytes is a valid HKDF-SHA256 length");
        Psk {
            psk,
            id: format!("gelstore/wrap/account/{key_id}").into_bytes(),
        }
    }

    /// The PSK of a pairing, from the secret in the pairing code.
    pub fn pairing(secret: &[u8], device_public: &[u8; KEY_LEN]) -> Psk {
        let mut psk = Zeroizing::new([0u8; 32]);
        Hkdf::<Sha256>::new(Some(device_public), secret)
            .expand(PAIRING_PSK_LABEL.as_bytes(), psk.as_mut())
            .expect("32 bytes is a valid HKDF-SHA256 length");
        Psk {
            psk,
            id: PAIRING_PSK_ID.as_bytes().to_vec(),
        }
    }
}

/// Label that starts the HPKE associated data.
pub const WRAP_AAD_LABEL: &str = "gelstore/wrap/aad/v1";

/// The HPKE associated data of a wrap: its `createdAt`, and for a pairing
/// wrap the CID of the membership change that admits the device.
pub fn wrap_aad(created_at: &str, change: Option<&Cid>) -> Vec<u8> {
    let mut out = Vec::with_capacity(96);
    put_field(&mut out, WRAP_AAD_LABEL.as_bytes());
    put_field(&mut out, created_at.as_bytes());
    put_field(&mut out, &change.map(Cid::to_bytes).unwrap_or_default());
    out
}

/// The HPKE `info` of a wrap.
pub fn wrap_info(did: &str, alg: &str, key_id: &str, epoch: u64, recipient: &Recipient) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    put_field(&mut out, WRAP_INFO_LABEL.as_bytes());
    put_field(&mut out, alg.as_bytes());
    put_field(&mut out, did.as_bytes());
    put_field(&mut out, key_id.as_bytes());
    out.extend_from_slice(&epoch.to_be_bytes());
    match recipient {
        Recipient::Device { device } => {
            put_field(&mut out, b"device");
            put_field(&mut out, device.as_bytes());
        }
        Recipient::Account { key_id, epoch } => {
            put_field(&mut out, b"account");
            put_field(&mut out, key_id.as_bytes());
            out.extend_from_slice(&epoch.to_be_bytes());
        }
    }
    out
}

/// Wraps `secret` to `recipient_public` (HPKE PSK mode; the ephemeral key
/// comes from `rng`), bound to membership change `change` for a pairing.
#[allow(clippy::too_many_arguments)]
pub fn seal_wrap(
    did: &str,
    key_id: &str,
    epoch: u64,
    recipient: Recipient,
    recipient_public: &[u8; KEY_LEN],
    psk: &Psk,
    secret: &[u8; KEY_LEN],
    created_at: String,
    change: Option<&Cid>,
    rng: &mut impl CryptoRng,
) -> Result<KeyWrap> {
    let info = wrap_info(did, WRAP_ALG_V1, key_id, epoch, &recipient);
    let aad = wrap_aad(&created_at, change);
    let pk = PublicKey::from_bytes(recipient_public).map_err(|_| SealError::Keyring {
        reason: "recipient public key is not a valid X25519 key".into(),
    })?;
    let bundle = PskBundle::new(psk.psk.as_ref(), &psk.id).map_err(|_| SealError::Keyring {
        reason: "empty PSK".into(),
    })?;
    let (enc, ciphertext) = hpke::single_shot_seal_with_rng::<
        ChaCha20Poly1305,
        HkdfSha256,
        X25519HkdfSha256,
    >(&OpModeS::Psk(bundle), &pk, &info, secret, &aad, rng)
    .map_err(|e| SealError::Keyring {
        reason: format!("HPKE seal failed: {e}"),
    })?;
    Ok(KeyWrap {
        key_id: key_id.to_string(),
        epoch,
        alg: WRAP_ALG_V1.to_string(),
        recipient,
        enc: enc.to_bytes().to_vec(),
        ciphertext,
        created_at,
    })
}

/// Opens a wrap with the recipient's key pair and the PSK (and, for a
/// pairing wrap, the membership change it names). Structure is checked
/// first (alg, sizes); a wrong key, PSK, DID, change or any edited field
/// fails authentication.
pub fn open_wrap(
    did: &str,
    wrap: &KeyWrap,
    recipient_secret: &[u8; KEY_LEN],
    psk: &Psk,
    change: Option<&Cid>,
) -> Result<Zeroizing<[u8; KEY_LEN]>> {
    wrap.check()?;
    let info = wrap_info(did, &wrap.alg, &wrap.key_id, wrap.epoch, &wrap.recipient);
    let aad = wrap_aad(&wrap.created_at, change);
    let sk = PrivateKey::from_bytes(recipient_secret).map_err(|_| SealError::Keyring {
        reason: "invalid X25519 secret".into(),
    })?;
    let enc = EncappedKey::from_bytes(&wrap.enc).map_err(|_| SealError::AuthenticationFailed {
        what: "the key wrap",
    })?;
    let bundle = PskBundle::new(psk.psk.as_ref(), &psk.id).map_err(|_| SealError::Keyring {
        reason: "empty PSK".into(),
    })?;
    let plain = Zeroizing::new(
        hpke::single_shot_open::<ChaCha20Poly1305, HkdfSha256, X25519HkdfSha256>(
            &OpModeR::Psk(bundle),
            &sk,
            &enc,
            &info,
            &wrap.ciphertext,
            &aad,
        )
        .map_err(|_| SealError::AuthenticationFailed {
            what: "the key wrap",
        })?,
    );
    let mut out = Zeroizing::new([0u8; KEY_LEN]);
    if plain.len() != KEY_LEN {
        return Err(SealError::invalid_plaintext(format!(
            "a wrapped key of {} bytes",
            plain.len()
        )));
    }
    out.copy_from_slice(&plain);
    Ok(out)
}

impl KeyWrap {
    /// Structural checks: alg on the allow-list, sizes of `enc` and
    /// `ciphertext`, lengths of ids.
    pub fn check(&self) -> Result<()> {
        if self.alg != WRAP_ALG_V1 {
            return Err(SealError::UnsupportedAlg {
                alg: self.alg.chars().take(128).collect(),
                allowed: WRAP_ALG_V1,
            });
        }
        if self.enc.len() != ENC_LEN {
            return Err(SealError::malformed(
                "keyWrap",
                format!("enc of {} bytes, expected {ENC_LEN}", self.enc.len()),
            ));
        }
        if self.ciphertext.len() < WRAPPED_LEN {
            return Err(SealError::Truncated {
                what: "keyWrap ciphertext",
                detail: format!("{} bytes, expected {WRAPPED_LEN}", self.ciphertext.len()),
            });
        }
        if self.ciphertext.len() > WRAPPED_LEN {
            return Err(SealError::Oversize {
                what: "keyWrap ciphertext",
                size: self.ciphertext.len() as u64,
                max: WRAPPED_LEN as u64,
                hint: "",
            });
        }
        if self.key_id.is_empty() || self.key_id.len() > 128 {
            return Err(SealError::malformed(
                "keyWrap",
                "keyId must be 1..=128 bytes",
            ));
        }
        Ok(())
    }

    /// The record (with `$type`).
    pub fn to_ipld(&self) -> Ipld {
        let mut map = BTreeMap::new();
        map.insert("$type".to_string(), Ipld::String(KEY_WRAP_TYPE.into()));
        map.insert("keyId".to_string(), Ipld::String(self.key_id.clone()));
        map.insert("epoch".to_string(), Ipld::Integer(i128::from(self.epoch)));
        map.insert("alg".to_string(), Ipld::String(self.alg.clone()));
        let mut recipient = BTreeMap::new();
        match &self.recipient {
            Recipient::Device { device } => {
                recipient.insert(
                    "$type".to_string(),
                    Ipld::String(format!("{KEY_WRAP_TYPE}#deviceRecipient")),
                );
                recipient.insert("device".to_string(), Ipld::String(device.clone()));
            }
            Recipient::Account { key_id, epoch } => {
                recipient.insert(
                    "$type".to_string(),
                    Ipld::String(format!("{KEY_WRAP_TYPE}#accountRecipient")),
                );
                recipient.insert("keyId".to_string(), Ipld::String(key_id.clone()));
                recipient.insert("epoch".to_string(), Ipld::Integer(i128::from(*epoch)));
            }
        }
        map.insert("recipient".to_string(), Ipld::Map(recipient));
        map.insert("enc".to_string(), Ipld::Bytes(self.enc.clone()));
        map.insert(
            "ciphertext".to_string(),
            Ipld::Bytes(self.ciphertext.clone()),
        );
        map.insert(
            "createdAt".to_string(),
            Ipld::String(self.created_at.clone()),
        );
        Ipld::Map(map)
    }

    /// Parses a key wrap record (structure only; see [`KeyWrap::check`]).
    pub fn from_ipld(value: &Ipld) -> Result<KeyWrap> {
        let bad = |reason: String| SealError::malformed("keyWrap", reason);
        let Ipld::Map(map) = value else {
            return Err(bad("not a map".into()));
        };
        let string = |name: &str| match map.get(name) {
            Some(Ipld::String(s)) => Ok(s.clone()),
            _ => Err(bad(format!("{name} is not a string"))),
        };
        let bytes = |name: &str| match map.get(name) {
            Some(Ipld::Bytes(b)) => Ok(b.clone()),
            _ => Err(bad(format!("{name} is not bytes"))),
        };
        let epoch_of = |v: Option<&Ipld>, name: &str| match v {
            Some(Ipld::Integer(n)) => u64::try_from(*n).map_err(|_| bad(format!("{name} < 0"))),
            _ => Err(bad(format!("{name} is not an integer"))),
        };
        if map.get("$type") != Some(&Ipld::String(KEY_WRAP_TYPE.into())) {
            return Err(bad(format!("$type is not {KEY_WRAP_TYPE:?}")));
        }
        let Some(Ipld::Map(r)) = map.get("recipient") else {
            return Err(bad("recipient is not a map".into()));
        };
        let rstring = |name: &str| match r.get(name) {
            Some(Ipld::String(s)) => Ok(s.clone()),
            _ => Err(bad(format!("recipient.{name} is not a string"))),
        };
        let recipient = match r.get("$type") {
            Some(Ipld::String(t)) if *t == format!("{KEY_WRAP_TYPE}#deviceRecipient") => {
                Recipient::Device {
                    device: rstring("device")?,
                }
            }
            Some(Ipld::String(t)) if *t == format!("{KEY_WRAP_TYPE}#accountRecipient") => {
                Recipient::Account {
                    key_id: rstring("keyId")?,
                    epoch: epoch_of(r.get("epoch"), "recipient.epoch")?,
                }
            }
            _ => return Err(bad("recipient has an unknown $type".into())),
        };
        Ok(KeyWrap {
            key_id: string("keyId")?,
            epoch: epoch_of(map.get("epoch"), "epoch")?,
            alg: string("alg")?,
            recipient,
            enc: bytes("enc")?,
            ciphertext: bytes("ciphertext")?,
            created_at: string("createdAt")?,
        })
    }
}

/// Derives an X25519 key pair the way HPKE's DeriveKeyPair does (RFC 9180
/// §7.1.3), for tests that replay RFC 9180 vectors.
pub fn derive_x25519_keypair(ikm: &[u8]) -> ([u8; KEY_LEN], [u8; KEY_LEN]) {
    let (sk, pk) = X25519HkdfSha256::derive_keypair(ikm);
    let mut s = [0u8; KEY_LEN];
    s.copy_from_slice(&sk.to_bytes());
    let mut p = [0u8; KEY_LEN];
    p.copy_from_slice(&pk.to_bytes());
    (s, p)
}
