//! The public half of the keyring as repository records, through the types
//! generated from the lexicons: `chat.gel.assistant.device` (a device's
//! public keys), `chat.gel.assistant.keyWrap` (every wrap the keyring makes:
//! pairings, rotations, chains, chat keys) and `chat.gel.assistant.membership`
//! (the signed changes of who holds the account key).
//!
//! Reading is lenient where the records come from the network: a record of
//! these collections that does not decode is skipped and counted, never
//! fatal, so a planted or damaged record cannot lock a device out of the
//! rest.

use serde_json::Value;

use super::DeviceError;
use crate::lexicon::chat::gel::assistant::device::Device as DeviceRecord;
use crate::lexicon::chat::gel::assistant::key_wrap::{
    AccountRecipient, DeviceRecipient, KeyWrap as KeyWrapRecord, KeyWrapAlg, KeyWrapRecipient,
};
use crate::lexicon_runtime::{Bytes, Datetime, Did, RecordKey};
use crate::model::now_datetime;
use crate::repo::repository::{RepoError, Repository, Write};
use crate::repo::tid::TidClock;
use crate::seal::membership::MEMBERSHIP_COLLECTION;
use crate::seal::wrap::KEY_WRAP_COLLECTION;
use crate::seal::{KeySet, KeyWrap, PairingCode, Recipient, SignedChange, WRAP_ALG_V1};

/// Collection of device records.
pub const DEVICE_COLLECTION: &str = crate::lexicon::chat::gel::assistant::device::NSID;

/// A device record read from the repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceEntry {
    /// Its record key (the device id).
    pub id: String,
    /// The X25519 public key it names.
    pub public_key: [u8; 32],
    /// What the owner calls it.
    pub name: Option<String>,
    /// When it was made.
    pub created_at: String,
    /// Its membership signing key (a did:key), as the device published it.
    pub signing_key: Option<String>,
    /// The proof of that key under its pairing secret.
    pub signing_key_proof: Option<Vec<u8>>,
}

impl DeviceEntry {
    /// The signing key, if the record carries one whose proof `code` (the
    /// device's pairing code) confirms: `Ok(None)` for a record without
    /// one, an error for a key whose proof does not check (planted).
    pub fn proven_signing_key(&self, code: &PairingCode) -> Result<Option<String>, String> {
        let (Some(key), Some(proof)) = (&self.signing_key, &self.signing_key_proof) else {
            return match self.signing_key {
                Some(_) => Err("its signingKey has no signingKeyProof".into()),
                None => Ok(None),
            };
        };
        let expected = code.signing_key_proof(key);
        if subtle::ConstantTimeEq::ct_eq(expected.as_slice(), proof.as_slice()).into() {
            Ok(Some(key.clone()))
        } else {
            Err("its signingKeyProof does not match the pairing code".into())
        }
    }
}

/// The keyring's records found in a repository.
#[derive(Debug, Default)]
pub struct KeyRecords {
    /// Device records, by record key.
    pub devices: Vec<DeviceEntry>,
    /// Key wraps (in record key order) and membership changes.
    pub keys: KeySet,
    /// Records of the two collections that did not decode, as
    /// `collection/rkey: why`.
    pub skipped: Vec<String>,
}

impl KeyRecords {
    /// Reads every device and keyWrap record of `repo`.
    pub fn read(repo: &Repository) -> Result<KeyRecords, DeviceError> {
        let mut out = KeyRecords::default();
        for (collection, rkey, value) in records_of(repo, DEVICE_COLLECTION)? {
            match device_from_value(&rkey, value) {
                Ok(d) => out.devices.push(d),
                Err(why) => out.skipped.push(format!("{collection}/{rkey}: {why}")),
            }
        }
        for (collection, rkey, value) in records_of(repo, KEY_WRAP_COLLECTION)? {
            match wrap_from_value(value) {
                Ok(w) => out.keys.wraps.push(w),
                Err(why) => out.skipped.push(format!("{collection}/{rkey}: {why}")),
            }
        }
        for (collection, rkey, value) in records_of(repo, MEMBERSHIP_COLLECTION)? {
            match SignedChange::from_value(value) {
                Ok(c) => out.keys.changes.push(c),
                Err(why) => out.skipped.push(format!("{collection}/{rkey}: {why}")),
            }
        }
        Ok(out)
    }

    /// The devices whose record names `public_key`, in record key order.
    pub fn devices_with_key(&self, public_key: &[u8; 32]) -> Vec<&DeviceEntry> {
        self.devices
            .iter()
            .filter(|d| d.public_key == *public_key)
            .collect()
    }

    /// The highest account epoch any wrap or change mentions, unverified
    /// (what a planted record claims shows up here, never in a keyring).
    pub fn newest_epoch(&self) -> Option<u64> {
        let wraps = self.keys.wraps.iter().map(|w| match &w.recipient {
            Recipient::Account { epoch, .. } => w.epoch.max(*epoch),
            Recipient::Device { .. } => w.epoch,
        });
        wraps
            .chain(self.keys.changes.iter().map(|c| c.change.epoch))
            .max()
    }
}

fn records_of(
    repo: &Repository,
    collection: &str,
) -> Result<Vec<(String, String, Value)>, DeviceError> {
    let mut out = Vec::new();
    let keys: Vec<String> = repo
        .list(Some(collection))?
        .map(|r| r.map(|(key, _)| key))
        .collect::<Result<_, RepoError>>()?;
    for key in keys {
        let (collection, rkey) = key.split_once('/').unwrap_or((collection, &key));
        if let Some(entry) = repo.get(collection, rkey)? {
            out.push((collection.to_string(), rkey.to_string(), entry.value));
        }
    }
    Ok(out)
}

fn device_from_value(rkey: &str, value: Value) -> Result<DeviceEntry, String> {
    let record: DeviceRecord = serde_json::from_value(value).map_err(|e| e.to_string())?;
    let public_key: [u8; 32] = record
        .public_key
        .0
        .as_slice()
        .try_into()
        .map_err(|_| format!("publicKey is {} bytes, not 32", record.public_key.0.len()))?;
    Ok(DeviceEntry {
        id: rkey.to_string(),
        public_key,
        name: record.name,
        created_at: record.created_at.into_string(),
        signing_key: record.signing_key.map(|d| d.into_string()),
        signing_key_proof: record.signing_key_proof.map(|b| b.0),
    })
}

/// A keyWrap record as the keyring's [`KeyWrap`] (structure only; the
/// keyring checks the rest before any cryptography).
pub fn wrap_from_value(value: Value) -> Result<KeyWrap, String> {
    let record: KeyWrapRecord = serde_json::from_value(value).map_err(|e| e.to_string())?;
    let epoch = |n: i64, name: &str| u64::try_from(n).map_err(|_| format!("{name} is negative"));
    let recipient = match record.recipient {
        KeyWrapRecipient::DeviceRecipient(r) => Recipient::Device {
            device: r.device.into_string(),
        },
        KeyWrapRecipient::AccountRecipient(r) => Recipient::Account {
            key_id: r.key_id,
            epoch: epoch(r.epoch, "recipient.epoch")?,
        },
    };
    Ok(KeyWrap {
        key_id: record.key_id,
        epoch: epoch(record.epoch, "epoch")?,
        alg: record.alg.as_str().to_string(),
        recipient,
        enc: record.enc.0,
        ciphertext: record.ciphertext.0,
        created_at: record.created_at.into_string(),
    })
}

/// The keyWrap record of a wrap, as atproto JSON.
pub fn wrap_to_value(wrap: &KeyWrap) -> Result<Value, DeviceError> {
    let bad = |reason: String| DeviceError::Record {
        collection: KEY_WRAP_COLLECTION,
        reason,
    };
    let epoch = |n: u64| i64::try_from(n).map_err(|_| bad(format!("epoch {n} is too large")));
    let recipient = match &wrap.recipient {
        Recipient::Device { device } => KeyWrapRecipient::DeviceRecipient(DeviceRecipient {
            device: RecordKey::new(device.clone()).map_err(|e| bad(e.to_string()))?,
            extra: Default::default(),
        }),
        Recipient::Account { key_id, epoch: e } => {
            KeyWrapRecipient::AccountRecipient(AccountRecipient {
                key_id: key_id.clone(),
                epoch: epoch(*e)?,
                extra: Default::default(),
            })
        }
    };
    let record = KeyWrapRecord {
        key_id: wrap.key_id.clone(),
        epoch: epoch(wrap.epoch)?,
        alg: if wrap.alg == WRAP_ALG_V1 {
            KeyWrapAlg::HpkeX25519HkdfSha256Chacha20poly1305V1
        } else {
            KeyWrapAlg::Other(wrap.alg.clone())
        },
        recipient,
        enc: Bytes(wrap.enc.clone()),
        ciphertext: Bytes(wrap.ciphertext.clone()),
        created_at: Datetime::new(wrap.created_at.clone()).map_err(|e| bad(e.to_string()))?,
        extra: Default::default(),
    };
    serde_json::to_value(&record).map_err(|e| bad(e.to_string()))
}

/// The device record of a public key, as atproto JSON; `signing` is the
/// device's own signing key and pairing code, when the device writes it.
pub fn device_to_value(
    public_key: &[u8; 32],
    name: Option<&str>,
    signing: Option<(&crate::crypto::SigningKey, &PairingCode)>,
) -> Result<Value, DeviceError> {
    let bad = |reason: String| DeviceError::Record {
        collection: DEVICE_COLLECTION,
        reason,
    };
    let (signing_key, signing_key_proof) = match signing {
        Some((key, code)) => {
            let did_key = key.public_key().to_did_key();
            let proof = code.signing_key_proof(&did_key);
            (
                Some(Did::new(did_key).map_err(|e| bad(e.to_string()))?),
                Some(Bytes(proof.to_vec())),
            )
        }
        None => (None, None),
    };
    let record = DeviceRecord {
        public_key: Bytes(public_key.to_vec()),
        signing_key,
        signing_key_proof,
        name: name.map(str::to_string),
        created_at: Datetime::new(now_datetime()).map_err(|e| bad(e.to_string()))?,
        extra: Default::default(),
    };
    serde_json::to_value(&record).map_err(|e| bad(e.to_string()))
}

/// Creates of keyWrap records for `wraps`, each under a fresh TID.
pub fn wrap_writes(wraps: &[KeyWrap], clock: &mut TidClock) -> Result<Vec<Write>, DeviceError> {
    wraps
        .iter()
        .map(|w| {
            let rkey = clock.next_tid().map_err(RepoError::from)?.to_string();
            Ok(Write::create(KEY_WRAP_COLLECTION, rkey, wrap_to_value(w)?))
        })
        .collect()
}

/// Creates of the records of `set`: its membership changes, then its wraps,
/// each under a fresh TID.
pub fn key_writes(set: &KeySet, clock: &mut TidClock) -> Result<Vec<Write>, DeviceError> {
    let mut out = Vec::new();
    for c in &set.changes {
        let rkey = clock.next_tid().map_err(RepoError::from)?.to_string();
        out.push(Write::create(MEMBERSHIP_COLLECTION, rkey, c.value.clone()));
    }
    out.extend(wrap_writes(&set.wraps, clock)?);
    Ok(out)
}
