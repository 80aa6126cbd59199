//! How a device gets admitted: [`init`] (the first device of an account
//! admits itself), [`pair`] (a new device's code), [`publish`] (its
//! `device` record, for pairing through a PDS), [`approve`] (an admitted
//! device signs the admission and the pairing wrap) and [`join`] /
//! [`join_synced`] (the new device takes the approval in, from an exported
//! CAR or from the records a sync brought). Each runs once per command and
//! keeps `device.json` in step with the records it writes.

use std::path::Path;

use rand_core::CryptoRng;

use super::error::DeviceError;
use super::handle::{Device, derive};
use super::records::{DEVICE_COLLECTION, KeyRecords, device_to_value, key_writes};
use super::state::{self, DeviceState, load_device_key, load_or_create_device_key};
use crate::local_repo;
use crate::repo::repository::{ImportOptions, ImportStats, Refresh, RepoError, Repository, Write};
use crate::repo::tid::TidClock;
use crate::seal::{DeviceKey, Keyring, PairingCode, SealError, pair_request};

/// What [`init`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitOutcome {
    /// This device's record key.
    pub device: String,
    /// The account DID.
    pub did: String,
    /// Whether anything was made (false: it was already set up).
    pub created: bool,
}

/// What [`pair`] did.
#[derive(Debug, Clone)]
pub struct PairOutcome {
    /// The code to show.
    pub code: PairingCode,
    /// Whether the code was made now (false: the pending one again).
    pub created: bool,
}

/// What [`approve`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApproveOutcome {
    /// The new device's record key.
    pub device: String,
    /// Whether a `device` record was written for it (false: one with its
    /// public key was there).
    pub record_created: bool,
    /// Whether it was admitted already (nothing written).
    pub already_admitted: bool,
    /// The account epoch it was admitted to.
    pub epoch: u64,
}

/// What [`join`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinOutcome {
    /// This device's record key.
    pub device: String,
    /// The account DID.
    pub did: String,
    /// Whether this join admitted the device (false: it was, and only the
    /// copy was refreshed).
    pub newly_paired: bool,
    /// How the copy was updated (`None`: joined from the records a sync
    /// brought in).
    pub refresh: Option<Refresh>,
    /// Records in the copy.
    pub records: u64,
    /// The newest account epoch this device holds.
    pub epoch: u64,
    /// The epoch in force by the verified membership log; above `epoch`,
    /// this device was removed (or its rotation wrap is missing).
    pub newest_epoch: u64,
}

/// Sets up the first device of an account in data folder `dir`: the
/// repository and its identity if missing, the device key, the account key
/// (epoch 0), and the records (the device's `device` record, its admission
/// and its pairing wrap). Idempotent: on a device already set up it changes
/// nothing. Refused where the repository already has paired devices.
pub fn init(
    dir: impl AsRef<Path>,
    name: Option<&str>,
    rng: &mut impl CryptoRng,
) -> Result<InitOutcome, DeviceError> {
    let dir = dir.as_ref();
    let state = DeviceState::load(dir)?;
    if let Some(state) = &state
        && state.is_admitted()
    {
        let device = Device::open(dir)?;
        return Ok(InitOutcome {
            device: device.id().to_string(),
            did: device.repo.did().to_string(),
            created: false,
        });
    }
    let mut repo = local_repo::init(dir)?;
    if !repo.is_writable() {
        return Err(DeviceError::ReadOnlyCopy {
            did: repo.did().to_string(),
        });
    }
    let (key, _) = load_or_create_device_key(dir, rng)?;
    let records = KeyRecords::read(&repo)?;
    let mut state = match state {
        Some(s) => s,
        None => DeviceState {
            pairing: pair_request(&key, rng).code().clone(),
            device: None,
            account_key_id: None,
            account_did: None,
            held_epoch: 0,
            membership_heads: Vec::new(),
            reseal: None,
        },
    };
    if state.pairing.public_key != key.public_key() {
        return Err(DeviceError::StateFile {
            path: state::device_state_path(dir).display().to_string(),
            reason: "its pairing code is for another device key than device.key".into(),
        });
    }
    // A crash after the records landed but before the state was saved:
    // take the approval in from the records.
    if let Some(id) = &state.device
        && let Ok((ring, _)) =
            Keyring::join(repo.did(), id, key.clone(), &state.request(), &records.keys)
    {
        state.account_key_id = Some(ring.admitted_with().to_string());
        state.save(dir)?;
        return Ok(InitOutcome {
            device: id.clone(),
            did: repo.did().to_string(),
            created: true,
        });
    }
    if !records.keys.wraps.is_empty() || !records.keys.changes.is_empty() {
        return Err(DeviceError::AccountExists {
            did: repo.did().to_string(),
        });
    }
    let mut clock = TidClock::new();
    let id = match &state.device {
        Some(id) => id.clone(),
        None => clock.next_tid().map_err(RepoError::from)?.to_string(),
    };
    state.device = Some(id.clone());
    state.save(dir)?;

    let (ring, set) = Keyring::create(repo.did(), &id, key.clone(), &state.pairing, rng)?;
    let mut writes = Vec::new();
    if records.devices_with_key(&key.public_key()).is_empty() {
        writes.push(own_device_write(&id, &key, name, &state)?);
    }
    writes.extend(key_writes(&set, &mut clock)?);
    repo.apply(&writes)?;
    state.account_key_id = Some(ring.admitted_with().to_string());
    state.save(dir)?;
    Ok(InitOutcome {
        device: id,
        did: repo.did().to_string(),
        created: true,
    })
}

/// Starts pairing a new device in data folder `dir`: makes the device key
/// if missing and a pairing code, kept (with its secret) in `device.json`
/// until the approval is taken in. Asked again while pending, returns the
/// same code. Needs no repository.
pub fn pair(dir: impl AsRef<Path>, rng: &mut impl CryptoRng) -> Result<PairOutcome, DeviceError> {
    let dir = dir.as_ref();
    crate::repo::key_file::create_private_dir(dir).map_err(RepoError::from)?;
    let state = DeviceState::load(dir)?;
    if let Some(state) = &state {
        if let (true, Some(device)) = (state.is_admitted(), &state.device) {
            return Err(DeviceError::AlreadyPaired {
                device: device.clone(),
            });
        }
        let key = load_device_key(dir)?;
        if state.pairing.public_key != key.public_key() {
            return Err(DeviceError::StateFile {
                path: state::device_state_path(dir).display().to_string(),
                reason: "its pairing code is for another device key than device.key".into(),
            });
        }
        return Ok(PairOutcome {
            code: state.pairing.clone(),
            created: false,
        });
    }
    let (key, _) = load_or_create_device_key(dir, rng)?;
    let code = pair_request(&key, rng).code().clone();
    DeviceState {
        pairing: code.clone(),
        device: None,
        account_key_id: None,
        account_did: None,
        held_epoch: 0,
        membership_heads: Vec::new(),
        reseal: None,
    }
    .save(dir)?;
    Ok(PairOutcome {
        code,
        created: true,
    })
}

/// Approves a new device on the admitted device of `dir`: finds (or
/// writes) the `device` record with the code's public key, wraps the
/// current account key to it with the pairing secret, and admits it.
pub fn approve(
    dir: impl AsRef<Path>,
    code: &PairingCode,
    name: Option<&str>,
    rng: &mut impl CryptoRng,
) -> Result<ApproveOutcome, DeviceError> {
    let mut device = Device::open(dir)?;
    device.writable()?;
    if code.public_key == device.keyring.device_public_key() {
        return Err(DeviceError::OwnCode);
    }
    let epoch = device.keyring.account_epoch();
    // Of the device records with the code's public key, the one whose
    // signing key the code proves (the new device published it); else one
    // without a signing key (an approver-written record). A record whose
    // proof fails was not written by the new device and is never used.
    let candidates = device.records.devices_with_key(&code.public_key);
    let mut planted = None;
    let mut chosen: Option<(String, Option<String>)> = None;
    for entry in &candidates {
        match entry.proven_signing_key(code) {
            Ok(Some(key)) => {
                chosen = Some((entry.id.clone(), Some(key)));
                break;
            }
            Ok(None) => {
                if chosen.is_none() {
                    chosen = Some((entry.id.clone(), None));
                }
            }
            Err(why) => planted = Some((entry.id.clone(), why)),
        }
    }
    if let (None, Some((id, why))) = (&chosen, planted) {
        return Err(DeviceError::Record {
            collection: DEVICE_COLLECTION,
            reason: format!(
                "device record {id} has this code's public key but {why}: it was not written by the device that shows the code; do not approve it, pair again"
            ),
        });
    }
    let signing_key = chosen.as_ref().and_then(|(_, k)| k.clone());
    let existing = chosen.map(|(id, _)| id);
    let mut clock = TidClock::new();
    let mut writes = Vec::new();
    let id = match existing {
        Some(id) => {
            if device.keyring.devices().get(&id) == Some(&code.public_key) {
                return Ok(ApproveOutcome {
                    device: id,
                    record_created: false,
                    already_admitted: true,
                    epoch,
                });
            }
            id
        }
        None => {
            let id = clock.next_tid().map_err(RepoError::from)?.to_string();
            writes.push(Write::create(
                DEVICE_COLLECTION,
                &id,
                device_to_value(&code.public_key, name, None)?,
            ));
            id
        }
    };
    let record_created = !writes.is_empty();
    let mut keyring = device.keyring.clone();
    let set = keyring.approve(code, &id, signing_key, rng)?;
    writes.extend(key_writes(&set, &mut clock)?);
    device.commit(keyring, &writes, set)?;
    Ok(ApproveOutcome {
        device: id,
        record_created,
        already_admitted: false,
        epoch,
    })
}

/// Publishes the pending device of `dir` for pairing through a PDS: makes
/// the data folder's own (writable) repository if missing and writes this
/// device's `device` record in it, so the next `gelstore sync` pushes it
/// and a paired device finds it when it approves the code. Returns the
/// record key. Idempotent; refused on an admitted device and on a
/// read-only copy.
pub fn publish(dir: impl AsRef<Path>, name: Option<&str>) -> Result<String, DeviceError> {
    let dir = dir.as_ref();
    let mut state = DeviceState::load(dir)?.ok_or_else(|| DeviceError::NoDevice {
        path: dir.display().to_string(),
    })?;
    if let (true, Some(device)) = (state.is_admitted(), &state.device) {
        return Err(DeviceError::AlreadyPaired {
            device: device.clone(),
        });
    }
    let key = load_device_key(dir)?;
    let mut repo = local_repo::init(dir)?;
    if !repo.is_writable() {
        return Err(DeviceError::ReadOnlyCopy {
            did: repo.did().to_string(),
        });
    }
    let records = KeyRecords::read(&repo)?;
    let own = records
        .devices_with_key(&key.public_key())
        .into_iter()
        .find(|d| matches!(d.proven_signing_key(&state.pairing), Ok(Some(_))));
    let id = match own {
        Some(d) => d.id.clone(),
        None => {
            let id = TidClock::new()
                .next_tid()
                .map_err(RepoError::from)?
                .to_string();
            repo.apply(&[own_device_write(&id, &key, name, &state)?])?;
            id
        }
    };
    state.device = Some(id.clone());
    state.save(dir)?;
    Ok(id)
}

/// Takes the account's records into the new (or already paired) device of
/// `dir` from a CAR exported by the store that holds the repository: the
/// read-only copy is imported or refreshed ([`Repository::refresh`]), and a
/// pending pairing is completed from the pairing wrap addressed to this
/// device's record. The records are sealed for `account_did` if given (a
/// store linked to an account seals for the account's DID, which its
/// exported repository does not name), else for the exported repository's
/// own DID. An already paired copy whose pairing wrap is gone from the
/// export (its store was re-sealed for an account) is left as it was
/// ([`DeviceError::CopyCannotFollow`]).
pub fn join(
    dir: impl AsRef<Path>,
    car: &Path,
    account_did: Option<&str>,
) -> Result<JoinOutcome, DeviceError> {
    let dir = dir.as_ref();
    let state = pending_or_paired(dir)?;
    let key = load_device_key(dir)?;
    let bytes = std::fs::read(car).map_err(|source| DeviceError::Io {
        path: car.display().to_string(),
        source,
    })?;
    if state.is_admitted() {
        check_copy_follows(dir, &bytes, &key, &state)?;
    }
    let (repo, _stats, refresh): (Repository, ImportStats, Refresh) =
        local_repo::refresh(dir, bytes.as_slice(), &ImportOptions::default())?;
    let did = match account_did {
        Some(d) => d.to_owned(),
        None => state
            .account_did
            .clone()
            .unwrap_or_else(|| repo.did().to_owned()),
    };
    finish_join(dir, repo, key, state, &did, Some(refresh))
}

/// Refuses, before the copy is replaced, an export in which this paired
/// device's keyring no longer opens because its pairing wrap is gone: the
/// store was re-sealed for its account, which a CAR-paired device cannot
/// follow. Anything else that fails is left to the join itself.
fn check_copy_follows(
    dir: &Path,
    car: &[u8],
    key: &DeviceKey,
    state: &DeviceState,
) -> Result<(), DeviceError> {
    let held = match local_repo::open(dir) {
        Ok(repo) => repo.did().to_owned(),
        // No copy yet, or one that does not open: the refresh says why.
        Err(_) => return Ok(()),
    };
    let engine = std::sync::Arc::new(crate::store::MemoryEngine::new());
    let Ok((copy, _)) = Repository::import_engine(engine, None, car, &ImportOptions::default())
    else {
        return Ok(());
    };
    if copy.did() != held {
        return Ok(()); // another repository: the refresh refuses it
    }
    let records = KeyRecords::read(&copy)?;
    let pairing_kept = records.keys.wraps.iter().any(|w| {
        matches!(&w.recipient, crate::seal::Recipient::Device { device } if Some(device) == state.device.as_ref())
            && Some(&w.key_id) == state.account_key_id.as_ref()
    });
    if pairing_kept || derive(&copy, key, state).is_ok() {
        return Ok(());
    }
    Err(DeviceError::CopyCannotFollow {
        did: state
            .account_did
            .clone()
            .unwrap_or_else(|| copy.did().to_owned()),
    })
}

/// Completes a pending pairing from the records already in the store of
/// `dir` — the way a device joins through a PDS: `gelstore sync` pulled
/// the pairing wrap into its own repository. The records are sealed for
/// the account's DID: the one this store's sync is linked to (its login
/// gave it), else the repository's own (a store that is the account's
/// repository, such as `gelstore serve`'s). `account_did` overrides it, for
/// an account whose first device was linked by an earlier version (it
/// seals for its own did:key).
pub fn join_synced(
    dir: impl AsRef<Path>,
    account_did: Option<&str>,
) -> Result<JoinOutcome, DeviceError> {
    let dir = dir.as_ref();
    let state = pending_or_paired(dir)?;
    let key = load_device_key(dir)?;
    let repo = local_repo::open(dir)?;
    let did = match account_did {
        Some(d) => d.to_owned(),
        None => crate::sync::SyncState::load(dir, &repo)
            .map_err(|e| DeviceError::StateFile {
                path: dir.display().to_string(),
                reason: format!("the sync state: {e}"),
            })?
            .did
            .unwrap_or_else(|| repo.did().to_owned()),
    };
    finish_join(dir, repo, key, state, &did, None)
}

fn pending_or_paired(dir: &Path) -> Result<DeviceState, DeviceError> {
    DeviceState::load(dir)?.ok_or_else(|| DeviceError::NoDevice {
        path: dir.display().to_string(),
    })
}

fn finish_join(
    dir: &Path,
    repo: Repository,
    key: DeviceKey,
    mut state: DeviceState,
    did: &str,
    refresh: Option<Refresh>,
) -> Result<JoinOutcome, DeviceError> {
    let newly_paired = !state.is_admitted();
    if newly_paired {
        let records = KeyRecords::read(&repo)?;
        let candidates: Vec<String> = match &state.device {
            Some(id) => vec![id.clone()],
            None => records
                .devices_with_key(&key.public_key())
                .iter()
                .map(|d| d.id.clone())
                .collect(),
        };
        if candidates.is_empty() {
            return Err(DeviceError::NotApproved {
                detail: format!(
                    "the repository of {} has no device record with this device's public key; approve this device's code on a paired device, then export its repository (or sync both devices) again",
                    repo.did()
                ),
            });
        }
        let mut last = None;
        for id in &candidates {
            match Keyring::join(did, id, key.clone(), &state.request(), &records.keys) {
                Ok((ring, _)) => {
                    state.device = Some(id.clone());
                    state.account_key_id = Some(ring.admitted_with().to_string());
                    state.account_did = (did != repo.did()).then(|| did.to_owned());
                    last = None;
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        if let Some(e) = last {
            return Err(match e {
                SealError::NotRecipient { .. } => DeviceError::NotApproved {
                    detail: "no pairing wrap is addressed to this device's record yet; approve its code on a paired device, then export that device's repository (or sync both devices) again".into(),
                },
                // The HPKE info binds the DID: a wrap addressed to this
                // device that does not open is sealed for another one.
                SealError::AuthenticationFailed { .. } => DeviceError::PairingWrapRefused {
                    did: did.to_owned(),
                },
                other => other.into(),
            });
        }
        state.save(dir)?;
    }
    let records = repo.record_count();
    let device = Device::build(dir, repo, key, state)?;
    Ok(JoinOutcome {
        device: device.id().to_string(),
        did: device.account_did().to_string(),
        newly_paired,
        refresh,
        records,
        epoch: device.keyring.held_epoch(),
        newest_epoch: device.newest_epoch(),
    })
}

/// This device's own `device` record (its public keys, name, and the
/// signing key's proof under its pairing secret), created at `id`.
fn own_device_write(
    id: &str,
    key: &DeviceKey,
    name: Option<&str>,
    state: &DeviceState,
) -> Result<Write, DeviceError> {
    Ok(Write::create(
        DEVICE_COLLECTION,
        id,
        device_to_value(
            &key.public_key(),
            name,
            Some((&key.signing_key(), &state.pairing)),
        )?,
    ))
}
