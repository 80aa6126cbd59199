//! The device's own files in the data folder, beside the repository:
//!
//! ```text
//! device.key    the X25519 device secret (seal::DeviceKey::save), mode 0600
//! device.json   the pairing state, mode 0600:
//!               {"version": 1, "pairingCode": "gp1-…", "device": "<rkey>" | null,
//!                "accountKeyId": "account:<epoch>:<hex>" | null,
//!                "heldEpoch": N, "accountDid": "did:…",
//!                "resealPending": {"accountDid": "did:…", "heads": ["<cid>", …]}}
//! ```
//!
//! `accountDid` is the DID the records are sealed for when it is not the
//! repository's own: the account's, once the store was linked to one (and
//! re-sealed for it, see `device::reseal`). `resealPending` is written just
//! before the commit that re-seals the store for `accountDid` and removed
//! once `accountDid` says so: if it is still there, the commit landed only
//! if the repository holds the membership changes `heads` (the re-signed
//! log's), and the next open finishes, or the next sync redoes, the
//! re-seal. A store with it is never pushed.
//!
//! `heldEpoch` is the newest account epoch this device has held: the
//! records can lose epochs (a PDS deletes key wraps), this file cannot, so a
//! keyring re-derived below it is refused for sealing.
//!
//! `pairingCode` is the code (public key and one-time secret) this device
//! was admitted with: shown to the user by `device pair`, or, on the first
//! device, made by `device init` to admit itself. With the device secret it
//! re-opens the pairing wrap addressed to `device`, pinned to
//! `accountKeyId`, so the keyring is re-derived from the records at every
//! open and no unwrapped key is ever cached on disk. `device` and
//! `accountKeyId` are null while a pairing waits for its approval.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use super::DeviceError;
use crate::crypto::private_file::{PrivateFileError, read_private};
use crate::seal::{DeviceKey, PairingCode, PairingRequest};

/// The device key file's name inside a data folder.
pub const DEVICE_KEY_FILE: &str = "device.key";
/// The pairing state file's name inside a data folder.
pub const DEVICE_STATE_FILE: &str = "device.json";
/// The state file format version.
const STATE_VERSION: u64 = 1;
/// Largest state file read.
const MAX_STATE_BYTES: u64 = 16 * 1024;

/// The device key file of data folder `dir`.
pub fn device_key_path(dir: &Path) -> PathBuf {
    dir.join(DEVICE_KEY_FILE)
}

/// The state file of data folder `dir`.
pub fn device_state_path(dir: &Path) -> PathBuf {
    dir.join(DEVICE_STATE_FILE)
}

/// What `device.json` holds.
#[derive(Clone)]
pub struct DeviceState {
    /// The code (with its secret) this device was or will be admitted with.
    pub pairing: PairingCode,
    /// This device's record key, once known.
    pub device: Option<String>,
    /// The keyId of the account key the pairing wrap carries, once admitted.
    pub account_key_id: Option<String>,
    /// The DID the account's records are sealed for, when it is not this
    /// store's repository DID: the account's, once the store was linked
    /// (and re-sealed) or joined through a PDS; each device keeps its own
    /// local repository.
    pub account_did: Option<String>,
    /// The newest account epoch this device has held (0 for a state file
    /// written before it was kept).
    pub held_epoch: u64,
    /// The heads of the membership log this device verified last: a log
    /// that no longer has them went backwards and is refused.
    pub membership_heads: Vec<crate::model::Cid>,
    /// A re-seal for an account's DID that was started and not finished.
    pub reseal: Option<PendingReseal>,
}

/// A re-seal started (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingReseal {
    /// The DID the records are being re-sealed for.
    pub account_did: String,
    /// The heads of the re-signed membership log: there once the commit
    /// landed.
    pub heads: Vec<crate::model::Cid>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PendingFile {
    account_did: String,
    heads: Vec<String>,
}

impl std::fmt::Debug for DeviceState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceState")
            .field("device", &self.device)
            .field("account_key_id", &self.account_key_id)
            .finish_non_exhaustive()
    }
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StateFile {
    version: u64,
    pairing_code: String,
    device: Option<String>,
    account_key_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    account_did: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    held_epoch: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    membership_heads: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reseal_pending: Option<PendingFile>,
}

/// Most heads a state file keeps (a log has more only during a fork).
const MAX_HEADS: usize = 64;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl DeviceState {
    /// The pairing request this state keeps.
    pub fn request(&self) -> PairingRequest {
        PairingRequest::from_code(self.pairing.clone())
    }

    /// Whether an approval has been taken in.
    pub fn is_admitted(&self) -> bool {
        self.device.is_some() && self.account_key_id.is_some()
    }

    /// Reads `device.json` of `dir`, if there is one. Refuses a file that
    /// group or others may read or write, and anything malformed.
    pub fn load(dir: &Path) -> Result<Option<DeviceState>, DeviceError> {
        let path = device_state_path(dir);
        let err = |reason: String| DeviceError::StateFile {
            path: path.display().to_string(),
            reason,
        };
        let bytes = match read_private(&path, MAX_STATE_BYTES) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return Ok(None),
            Err(PrivateFileError::TooLarge { .. }) => {
                return Err(err("too large to be a device state file".into()));
            }
            Err(e) => return Err(err(e.to_string())),
        };
        let text = std::str::from_utf8(&bytes).map_err(|_| err("not UTF-8 text".into()))?;
        let StateFile {
            version,
            pairing_code,
            device,
            account_key_id,
            account_did,
            held_epoch,
            membership_heads,
            reseal_pending,
        } = serde_json::from_str(text).map_err(|e| err(format!("not valid JSON state: {e}")))?;
        let pairing_code = Zeroizing::new(pairing_code);
        if version != STATE_VERSION {
            return Err(err(format!(
                "version {version} (this build reads version {STATE_VERSION})"
            )));
        }
        let pairing: PairingCode = pairing_code
            .parse()
            .map_err(|e| err(format!("pairingCode: {e}")))?;
        for (name, value) in [
            ("device", &device),
            ("accountKeyId", &account_key_id),
            ("accountDid", &account_did),
        ] {
            if value
                .as_ref()
                .is_some_and(|v| v.is_empty() || v.len() > 512)
            {
                return Err(err(format!("{name} is empty or too long")));
            }
        }
        if let Some(device) = &device {
            gelstore_lexicon::syntax::check_record_key(device)
                .map_err(|e| err(format!("device is not a record key: {}", e.reason)))?;
        }
        if membership_heads.len() > MAX_HEADS {
            return Err(err(format!("more than {MAX_HEADS} membershipHeads")));
        }
        let membership_heads = membership_heads
            .iter()
            .map(|c| crate::model::parse_cid(c).map_err(|e| err(format!("membershipHeads: {e}"))))
            .collect::<Result<_, _>>()?;
        let reseal = match reseal_pending {
            None => None,
            Some(p) => {
                if p.account_did.is_empty() || p.account_did.len() > 512 {
                    return Err(err("resealPending.accountDid is empty or too long".into()));
                }
                if p.heads.is_empty() || p.heads.len() > MAX_HEADS {
                    return Err(err(format!(
                        "resealPending.heads must have 1 to {MAX_HEADS} entries"
                    )));
                }
                let heads = p
                    .heads
                    .iter()
                    .map(|c| {
                        crate::model::parse_cid(c)
                            .map_err(|e| err(format!("resealPending.heads: {e}")))
                    })
                    .collect::<Result<_, _>>()?;
                Some(PendingReseal {
                    account_did: p.account_did,
                    heads,
                })
            }
        };
        Ok(Some(DeviceState {
            pairing,
            device,
            account_key_id,
            account_did,
            held_epoch,
            membership_heads,
            reseal,
        }))
    }

    /// Writes `device.json` of `dir` atomically (a 0600 file beside it,
    /// synced, then renamed over it).
    pub fn save(&self, dir: &Path) -> Result<(), DeviceError> {
        let path = device_state_path(dir);
        let err = |reason: String| DeviceError::StateFile {
            path: path.display().to_string(),
            reason,
        };
        let file = StateFile {
            version: STATE_VERSION,
            pairing_code: self.pairing.to_string(),
            device: self.device.clone(),
            account_key_id: self.account_key_id.clone(),
            account_did: self.account_did.clone(),
            held_epoch: self.held_epoch,
            membership_heads: self
                .membership_heads
                .iter()
                .map(|c| c.to_string())
                .collect(),
            reseal_pending: self.reseal.as_ref().map(|p| PendingFile {
                account_did: p.account_did.clone(),
                heads: p.heads.iter().map(|c| c.to_string()).collect(),
            }),
        };
        let text = serde_json::to_string_pretty(&file);
        drop(Zeroizing::new(file.pairing_code));
        let mut text = Zeroizing::new(text.map_err(|e| err(e.to_string()))?);
        text.push('\n');
        let tmp = dir.join(format!(".{DEVICE_STATE_FILE}.tmp"));
        let _ = fs::remove_file(&tmp);
        let mut options = fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let result = options
            .open(&tmp)
            .and_then(|mut f| {
                f.write_all(text.as_bytes())?;
                f.sync_all()
            })
            .and_then(|()| fs::rename(&tmp, &path))
            .and_then(|()| sync_dir(dir));
        if let Err(e) = result {
            let _ = fs::remove_file(&tmp);
            return Err(err(e.to_string()));
        }
        Ok(())
    }
}

/// Loads the device key of `dir`, or makes and saves one (0600) if there is
/// none. Returns the key and whether it was made.
pub fn load_or_create_device_key(
    dir: &Path,
    rng: &mut impl rand_core::CryptoRng,
) -> Result<(DeviceKey, bool), DeviceError> {
    let path = device_key_path(dir);
    if path.exists() {
        return Ok((DeviceKey::load(&path)?, false));
    }
    let key = DeviceKey::generate(rng);
    key.save(&path)?;
    sync_dir(dir).map_err(|e| DeviceError::StateFile {
        path: dir.display().to_string(),
        reason: e.to_string(),
    })?;
    Ok((key, true))
}

/// Loads the device key of `dir`; a missing one means no device was set up.
pub fn load_device_key(dir: &Path) -> Result<DeviceKey, DeviceError> {
    let path = device_key_path(dir);
    if !path.exists() {
        return Err(DeviceError::NoDevice {
            path: dir.display().to_string(),
        });
    }
    Ok(DeviceKey::load(&path)?)
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        fs::File::open(dir)?.sync_all()?;
    }
    let _ = dir;
    Ok(())
}
