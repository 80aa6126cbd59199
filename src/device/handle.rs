//! [`Device`], the opened handle of an admitted device: its repository and
//! the keyring re-derived from the key records at every open (no unwrapped
//! key is kept on disk), sealed writes that commit their new chat-key wraps
//! in the same commit, opening sealed records, and `device ls`. The
//! lifecycle functions that change membership ([`super::pairing`],
//! [`super::lifecycle`]) open one and commit through it.

use std::path::Path;

use rand_core::CryptoRng;
use serde_json::Value;

use super::error::{DeviceError, not_paired};
use super::records::{self, DeviceEntry, KeyRecords, wrap_writes};
use super::reseal;
use super::sealed::{SealedAction, SealedWrite};
use super::state::{DeviceState, load_device_key};
use crate::local_repo;
use crate::model::{ipld_to_json, record_from_json};
use crate::repo::repository::{CommitInfo, Repository, Write};
use crate::repo::tid::TidClock;
use crate::seal::{
    AbsorbReport, DeviceKey, KeySet, Keyring, Opened, Place, SealError, SealOptions, open_record,
    seal_record,
};

/// An admitted device: the repository of its data folder and the keyring
/// re-derived from its records.
pub struct Device {
    pub(super) repo: Repository,
    /// The DID records are sealed for (see [`DeviceState::account_did`]).
    did: String,
    pub(super) keyring: Keyring,
    pub(super) records: KeyRecords,
    report: AbsorbReport,
    /// What the keyring is re-derived from (see [`Device::reload_if_moved`]).
    key: DeviceKey,
    state: DeviceState,
    /// The head commit the keyring was derived at.
    derived_at: crate::model::Cid,
    /// The key records (device, keyWrap: path and CID) it was derived
    /// from: a head that moved without changing them needs no new keyring.
    derived_from: Vec<(String, crate::model::Cid)>,
    /// The data folder (for `device.json`'s held epoch).
    dir: std::path::PathBuf,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("repo", &self.repo)
            .field("keyring", &self.keyring)
            .finish_non_exhaustive()
    }
}

/// A device record and what the keyring says of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceListing {
    /// The record.
    pub entry: DeviceEntry,
    /// Its standing.
    pub status: DeviceStatus,
    /// Whether it is this device.
    pub this: bool,
}

/// A device's standing in the account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceStatus {
    /// Admitted in the current epoch, with the record's public key.
    Admitted,
    /// Admitted in an earlier epoch, not in the current one.
    Removed,
    /// Never admitted (as far as this device can open): a record only.
    NotAdmitted,
    /// Admitted under another public key than its record now names.
    KeyMismatch,
}

impl DeviceStatus {
    /// The word `device ls` prints.
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceStatus::Admitted => "admitted",
            DeviceStatus::Removed => "removed",
            DeviceStatus::NotAdmitted => "not-admitted",
            DeviceStatus::KeyMismatch => "key-mismatch",
        }
    }
}

impl Device {
    /// Opens the admitted device of data folder `dir`: its repository, and
    /// its keyring re-derived from the repository's records with the device
    /// and pairing secrets.
    pub fn open(dir: impl AsRef<Path>) -> Result<Device, DeviceError> {
        let dir = dir.as_ref();
        let key = load_device_key(dir)?;
        let mut state = admitted_state(dir)?;
        let repo = local_repo::open(dir)?;
        // A re-seal whose commit landed before a crash: finish its state.
        reseal::finish_pending(dir, &repo, &mut state)?;
        Device::build(dir, repo, key, state)
    }

    pub(super) fn build(
        dir: &Path,
        repo: Repository,
        key: DeviceKey,
        state: DeviceState,
    ) -> Result<Device, DeviceError> {
        let (did, keyring, records, report) = derive(&repo, &key, &state)?;
        let derived_at = repo.head().commit;
        let derived_from = key_record_cids(&repo)?;
        let mut device = Device {
            repo,
            did,
            keyring,
            records,
            report,
            key,
            state,
            derived_at,
            derived_from,
            dir: dir.to_path_buf(),
        };
        device.note_progress()?;
        Ok(device)
    }

    /// Keeps in `device.json` the newest epoch held (it only grows) and the
    /// heads of the membership log verified, so a log that later loses
    /// them is refused.
    fn note_progress(&mut self) -> Result<(), DeviceError> {
        let epoch = self.keyring.held_epoch();
        let heads = self.keyring.heads();
        if epoch > self.state.held_epoch || heads != self.state.membership_heads {
            let mut state = self.state.clone();
            state.held_epoch = state.held_epoch.max(epoch);
            state.membership_heads = heads;
            state.save(&self.dir)?;
            self.state = state;
        }
        Ok(())
    }

    /// `Some(held)` when the keyring is below the newest epoch this device
    /// held (see [`DeviceError::MembershipRolledBack`]).
    pub fn rolled_back(&self) -> Option<u64> {
        (self.keyring.held_epoch() < self.state.held_epoch).then_some(self.state.held_epoch)
    }

    /// Follows a repository that moved since the keyring was derived (a
    /// writer other than this `Device` — a server's XRPC client, a sync):
    /// re-derives the keyring if the key records (device, keyWrap)
    /// changed. Returns whether the repository moved. On error the old
    /// keyring stays.
    pub fn reload_if_moved(&mut self) -> Result<bool, DeviceError> {
        let head = self.repo.head().commit;
        if head == self.derived_at {
            return Ok(false);
        }
        // Listing the key records' CIDs is cheap; re-deriving opens every
        // wrap (HPKE): only when those records changed.
        let now = key_record_cids(&self.repo)?;
        if now == self.derived_from {
            self.derived_at = head;
            return Ok(true);
        }
        let (did, keyring, records, report) = derive(&self.repo, &self.key, &self.state)?;
        (self.did, self.keyring, self.records, self.report) = (did, keyring, records, report);
        self.derived_at = head;
        self.derived_from = now;
        self.note_progress()?;
        Ok(true)
    }

    /// The repository, for writes that are not sealed by this device (a
    /// server applying its clients' writes). The keyring follows them at
    /// the next [`Device::reload_if_moved`].
    pub fn repo_mut(&mut self) -> &mut Repository {
        &mut self.repo
    }

    /// The account DID records are sealed for and named by (at-uris): the
    /// repository's own for a store not linked to an account yet (or that
    /// is the account's repository), else the account's (see [`reseal`]).
    pub fn account_did(&self) -> &str {
        &self.did
    }

    /// The repository.
    pub fn repo(&self) -> &Repository {
        &self.repo
    }

    /// The keyring.
    pub fn keyring(&self) -> &Keyring {
        &self.keyring
    }

    /// This device's record key.
    pub fn id(&self) -> &str {
        self.keyring.device_id()
    }

    /// What re-deriving the keyring refused or skipped: wraps addressed to
    /// this device's keys that did not open (forged or damaged).
    pub fn absorb_report(&self) -> &AbsorbReport {
        &self.report
    }

    /// Records of the device and keyWrap collections that did not decode.
    pub fn skipped_records(&self) -> &[String] {
        &self.records.skipped
    }

    /// The account epoch in force by the verified membership log (records
    /// that do not verify, such as a planted wrap naming a later epoch,
    /// never move it).
    pub fn newest_epoch(&self) -> u64 {
        self.keyring.account_epoch()
    }

    /// Why this device cannot seal now, if it cannot: it was removed, its
    /// rotation wrap has not arrived, or the log is forked.
    pub fn standing_error(&self) -> Option<SealError> {
        self.keyring.sealing_account().err()
    }

    /// Whether this device cannot seal in the epoch in force (it was
    /// removed, or its rotation wrap has not arrived).
    pub fn is_behind(&self) -> bool {
        matches!(
            self.standing_error(),
            Some(SealError::NotAdmitted { .. } | SealError::AccountKeyPending { .. })
        )
    }

    /// Every device record with its standing, in record key order.
    pub fn list(&self) -> Vec<DeviceListing> {
        let epoch = self.keyring.account_epoch();
        let current = self.keyring.devices();
        self.records
            .devices
            .iter()
            .map(|entry| {
                let earlier = (0..epoch)
                    .rev()
                    .find_map(|e| self.keyring.devices_at(e).get(&entry.id).copied());
                let status = match (current.get(&entry.id), earlier) {
                    (Some(k), _) if *k == entry.public_key => DeviceStatus::Admitted,
                    (Some(_), _) => DeviceStatus::KeyMismatch,
                    (None, Some(k)) if k == entry.public_key => DeviceStatus::Removed,
                    (None, Some(_)) => DeviceStatus::KeyMismatch,
                    (None, None) => DeviceStatus::NotAdmitted,
                };
                DeviceListing {
                    this: entry.id == self.id(),
                    entry: entry.clone(),
                    status,
                }
            })
            .collect()
    }

    /// Seals each item with its chat's key (made, and wrapped to the account
    /// key, on first use in the current epoch) and applies the records, with
    /// the wraps of any new chat keys, as one signed commit. The keyring
    /// changes only if the commit lands.
    pub fn apply_sealed(
        &mut self,
        items: &[SealedWrite],
        rng: &mut impl CryptoRng,
    ) -> Result<CommitInfo, DeviceError> {
        self.apply_sealed_with(items, &[], rng)
    }

    /// [`Device::apply_sealed`] with clear writes in the same commit (a
    /// pending reply beside the message it answers).
    pub fn apply_sealed_with(
        &mut self,
        items: &[SealedWrite],
        clear: &[Write],
        rng: &mut impl CryptoRng,
    ) -> Result<CommitInfo, DeviceError> {
        self.writable()?;
        let mut keyring = self.keyring.clone();
        let mut wraps = Vec::new();
        let mut writes = Vec::new();
        for item in items {
            let (key, wrap) = keyring.chat_key_for_seal(&item.chat, rng)?;
            wraps.extend(wrap);
            let place = Place {
                did: &self.did,
                collection: item.collection,
                rkey: &item.rkey,
            };
            let sealed = seal_record(
                &item.record,
                &place,
                &item.content,
                &item.blobs,
                &key,
                &SealOptions::default(),
                rng,
            )?;
            let value =
                ipld_to_json(&sealed).map_err(|e| SealError::malformed("record", e.to_string()))?;
            writes.push(match item.action {
                SealedAction::Update { swap } => Write::Update {
                    collection: item.collection.to_owned(),
                    rkey: item.rkey.clone(),
                    value,
                    swap,
                },
                SealedAction::Create => Write::create(item.collection, &item.rkey, value),
            });
        }
        let mut all = wrap_writes(&wraps, &mut TidClock::new())?;
        all.extend(writes);
        all.extend_from_slice(clear);
        let set = KeySet {
            wraps,
            changes: Vec::new(),
        };
        self.commit(keyring, &all, set)
    }

    /// Applies clear (unsealed) writes as one signed commit, refused on a
    /// read-only copy (a pending reply, which has no content yet).
    pub fn apply(&mut self, writes: &[Write]) -> Result<CommitInfo, DeviceError> {
        self.writable()?;
        let current = self.repo.head().commit == self.derived_at;
        let info = self.repo.apply(writes)?;
        self.keep_derived(current);
        Ok(info)
    }

    /// After a write of this device's own: the keyring still matches the
    /// records if it did before (`current`), so no reload is needed.
    fn keep_derived(&mut self, current: bool) {
        if current {
            self.derived_at = self.repo.head().commit;
            // Its own wraps moved the key records; the keyring already
            // holds them. An error here only costs a re-derive later.
            if let Ok(now) = key_record_cids(&self.repo) {
                self.derived_from = now;
            }
        }
    }

    /// Opens the sealed field of the record at `collection/rkey`.
    pub fn open_sealed(&self, collection: &str, rkey: &str) -> Result<Opened, DeviceError> {
        let entry =
            self.repo
                .get(collection, rkey)?
                .ok_or_else(|| DeviceError::RecordNotFound {
                    path: format!("{collection}/{rkey}"),
                })?;
        let record = record_from_json(&entry.value)
            .map_err(|e| SealError::malformed("record", e.to_string()))?;
        let place = Place {
            did: &self.did,
            collection,
            rkey,
        };
        Ok(open_record(&record, &place, &self.keyring)?)
    }

    /// Opens the sealed field as atproto JSON.
    pub fn open_sealed_json(&self, collection: &str, rkey: &str) -> Result<Value, DeviceError> {
        let opened = self.open_sealed(collection, rkey)?;
        ipld_to_json(&opened.content)
            .map_err(|e| SealError::invalid_plaintext(e.to_string()).into())
    }

    pub(super) fn writable(&self) -> Result<(), DeviceError> {
        if !self.repo.is_writable() {
            return Err(DeviceError::ReadOnlyCopy {
                did: self.repo.did().to_string(),
            });
        }
        if let Some(held) = self.rolled_back() {
            return Err(DeviceError::MembershipRolledBack {
                held,
                now: self.keyring.held_epoch(),
            });
        }
        if let Some(f) = self.keyring.fork() {
            return Err(SealError::MembershipFork {
                epoch: f.epoch,
                next: f.epoch + 1,
                left_out: f.left_out,
            }
            .into());
        }
        Ok(())
    }

    /// Applies `writes` made with a changed copy of the keyring, and keeps
    /// that copy only if they land.
    pub(super) fn commit(
        &mut self,
        keyring: Keyring,
        writes: &[Write],
        set: KeySet,
    ) -> Result<CommitInfo, DeviceError> {
        let current = self.repo.head().commit == self.derived_at;
        let info = self.repo.apply(writes)?;
        self.keyring = keyring;
        self.records.keys.extend(set);
        self.keep_derived(current);
        self.note_progress()?;
        Ok(info)
    }
}

fn admitted_state(dir: &Path) -> Result<DeviceState, DeviceError> {
    match DeviceState::load(dir)? {
        Some(state) if state.is_admitted() => Ok(state),
        Some(state) => Err(not_paired(&state)),
        None => Err(DeviceError::NoDevice {
            path: dir.display().to_string(),
        }),
    }
}

/// The paths and CIDs of the records a keyring is derived from.
fn key_record_cids(repo: &Repository) -> Result<Vec<(String, crate::model::Cid)>, DeviceError> {
    let mut out = Vec::new();
    for collection in [
        records::DEVICE_COLLECTION,
        crate::seal::wrap::KEY_WRAP_COLLECTION,
        crate::seal::membership::MEMBERSHIP_COLLECTION,
    ] {
        for item in repo.list(Some(collection))? {
            out.push(item?);
        }
    }
    Ok(out)
}

/// The keyring of an admitted device, re-derived from the repository's
/// records: `(sealing DID, keyring, records, report)`.
pub(super) fn derive(
    repo: &Repository,
    key: &DeviceKey,
    state: &DeviceState,
) -> Result<(String, Keyring, KeyRecords, AbsorbReport), DeviceError> {
    let records = KeyRecords::read(repo)?;
    let (Some(device), Some(account)) = (&state.device, &state.account_key_id) else {
        return Err(not_paired(state));
    };
    let did = state
        .account_did
        .clone()
        .unwrap_or_else(|| repo.did().to_owned());
    let (keyring, report) = Keyring::rejoin(
        &did,
        device,
        key.clone(),
        &state.request(),
        account,
        &state.membership_heads,
        &records.keys,
    )?;
    Ok((did, keyring, records, report))
}
