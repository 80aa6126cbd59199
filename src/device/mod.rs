//! A device of the account: its keyring kept across restarts, on top of one
//! data folder (`--data`).
//!
//! **What lives where.** The device's X25519 secret stays in `device.key`
//! (0600) and its pairing state in `device.json` (0600), both in the data
//! folder and never in the repository (see [`state`]). Everything public —
//! device records, key wraps, admissions — is a repository record
//! (`chat.gel.assistant.device`, `chat.gel.assistant.keyWrap`) written
//! through [`Repository::apply`], so it travels with the repository like
//! any other record (see [`records`]). No unwrapped key is kept on disk:
//! [`Device::open`] re-derives the [`Keyring`] from the records, the device
//! secret and the pairing secret at every open.
//!
//! **Flow.** The first device runs [`init`]: it makes the account key
//! (epoch 0) and admits itself by pairing with its own code (so it, like
//! every later device, re-opens the account key from a pairing wrap). A new
//! device runs [`pair`] and shows the code; an admitted device runs
//! [`approve`] with it, which writes the new device's `device` record (found
//! by public key if it is already there), the pairing wrap and the
//! admission. The new device then takes the records in with [`join`].
//! [`remove`] starts a new account epoch without the removed device.
//!
//! **Without a PDS** the repository is signed by one store (the first
//! device's), and other devices hold a read-only copy of it, refreshed from
//! that store's CAR export ([`join`] with the file, through
//! [`Repository::refresh`]). They can open everything they were admitted to
//! but write nothing. **With a PDS** (`crate::sync`) every device keeps its
//! own writable store and the PDS's repository is the shared one: a new
//! device writes its own `device` record ([`publish`]), syncs, and after the
//! approval has been synced completes the pairing from the records in its
//! own store ([`join_synced`]). Records are sealed for the account's DID
//! ([`Device::account_did`], kept in `device.json`): a store started
//! offline seals for its own did:key until its first sync re-seals it
//! ([`reseal`]), and a device that joins through the PDS takes the DID its
//! login gave.

pub mod records;
pub mod reseal;
pub mod state;

use std::path::Path;

use rand_core::CryptoRng;
use serde_json::Value;

use self::records::{
    DEVICE_COLLECTION, DeviceEntry, KeyRecords, device_to_value, key_writes, wrap_writes,
};
use self::state::{DeviceState, load_device_key, load_or_create_device_key};
use crate::model::{ipld_to_json, record_from_json};
use crate::repo::repository::{
    CommitInfo, ImportOptions, ImportStats, Refresh, RepoError, Repository, Write,
};
use crate::repo::tid::TidClock;
use crate::seal::{
    AbsorbReport, DeviceKey, KeySet, Keyring, Opened, PairingCode, Place, SealError, SealOptions,
    open_record, pair_request, seal_record,
};

/// Why a device operation failed. Nothing was written when one returns an
/// error, except where the variant says so.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// The data folder has no device key.
    #[error(
        "no device in {path}; run `gelstore device init` (first device of an account) or `gelstore device pair` (a new device)"
    )]
    NoDevice {
        /// The data folder.
        path: String,
    },
    /// The device waits for its pairing to be approved and taken in.
    #[error(
        "this device is not paired yet: approve its code ({code_hint}…) with `gelstore device approve` on a paired device, export that device's repository, and run `gelstore device join --from FILE.car` here"
    )]
    NotPaired {
        /// The start of the pending code (public part only).
        code_hint: String,
    },
    /// `device pair` on a device that is already admitted.
    #[error("this device is already paired, as {device}")]
    AlreadyPaired {
        /// Its record key.
        device: String,
    },
    /// `device init` where the account already has devices.
    #[error(
        "the repository of {did} already has paired devices; pair this device with `gelstore device pair` instead"
    )]
    AccountExists {
        /// The account DID.
        did: String,
    },
    /// A write on a read-only copy of the repository.
    #[error(
        "this data folder holds a read-only copy of {did}'s repository (taken in with `device join --from`); run this on the device that holds the repository, or pair this device through a PDS (`gelstore device pair --publish` in a new data folder)"
    )]
    ReadOnlyCopy {
        /// The account DID.
        did: String,
    },
    /// `device join` found no approval for this device in the records. The
    /// copy of the repository it took in is kept (it is refreshed again by
    /// the next `join`).
    #[error("not approved: {detail}")]
    NotApproved {
        /// What was looked for.
        detail: String,
    },
    /// The code given to `device approve` is this device's own.
    #[error("this is this device's own pairing code; approve it on another, already paired device")]
    OwnCode,
    /// A record to open or seal is not in the repository.
    #[error("record {path} does not exist")]
    RecordNotFound {
        /// `collection/rkey`.
        path: String,
    },
    /// The state file is unreadable or malformed.
    #[error("device state file {path}: {reason}")]
    StateFile {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A record could not be built from its generated type.
    #[error("cannot build a {collection} record: {reason}")]
    Record {
        /// Its collection.
        collection: &'static str,
        /// Why.
        reason: String,
    },
    /// The key records give an older account epoch than this device has
    /// held: records were deleted or rolled back (a PDS can do that). The
    /// device refuses to seal anything below the epoch it knows.
    #[error(
        "this device held account epoch {held}, but the key records now give only epoch {now}: key records were deleted or rolled back (by the PDS, or someone with the account's password). Nothing is sealed until a sync brings them back from a device that still holds them"
    )]
    MembershipRolledBack {
        /// The newest epoch this device held.
        held: u64,
        /// The epoch the records give now.
        now: u64,
    },
    /// The store could not be sealed again for the account's DID it is
    /// being linked to. Nothing was changed, and nothing is pushed.
    #[error(
        "cannot re-seal this store for the account {account}: {reason}; nothing was changed, and nothing is pushed until it is re-sealed"
    )]
    Reseal {
        /// The account's DID.
        account: String,
        /// Why.
        reason: String,
    },
    /// A re-seal for the account's DID is not finished (a crash, or an
    /// earlier failure): nothing is pushed until it is.
    #[error(
        "this store is not yet sealed for the account {account}; nothing is pushed until it is: run `gelstore sync` again, which finishes the re-seal first"
    )]
    ResealPending {
        /// The account's DID.
        account: String,
    },
    /// The pairing wrap addressed to this device does not open for the DID
    /// tried (its HPKE info binds the DID, its PSK the pairing secret).
    #[error(
        "the pairing wrap addressed to this device does not open for {did} (authentication failed): either it was made with another pairing code than this device's (approve the code this device shows), or the account's records are sealed for another DID: give it with --account-did (`gelstore device ls` on a paired device shows it; a store linked to an account seals for the account's DID, one linked by an earlier gelstore for its own did:key)"
    )]
    PairingWrapRefused {
        /// The DID tried.
        did: String,
    },
    /// A read-only copy paired from an exported CAR, whose account has
    /// since been re-sealed for its account's DID: its pairing wrap could
    /// not be made again (only this device knows its pairing secret). The
    /// copy was left as it was.
    #[error(
        "this read-only copy was paired for {did}, but the exported repository no longer opens for this device: the store it comes from was linked to an account and re-sealed for the account's DID, and a device paired from an exported CAR cannot follow (its pairing secret never left this device). The copy here is left as it was. Pair this device again: `gelstore device pair` in a new data folder, `gelstore device approve CODE` on the paired device, then sync through the PDS (`gelstore device pair --publish`) or `gelstore device join --from FILE.car --account-did DID`"
    )]
    CopyCannotFollow {
        /// The DID the copy was paired for.
        did: String,
    },
    /// Sealing, opening, pairing or a keyring operation failed.
    #[error(transparent)]
    Seal(#[from] SealError),
    /// The repository failed.
    #[error(transparent)]
    Repo(Box<RepoError>),
    /// Reading an input file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl From<RepoError> for DeviceError {
    fn from(e: RepoError) -> Self {
        DeviceError::Repo(Box::new(e))
    }
}

/// An admitted device: the repository of its data folder and the keyring
/// re-derived from its records.
pub struct Device {
    repo: Repository,
    /// The DID records are sealed for (see [`DeviceState::account_did`]).
    did: String,
    keyring: Keyring,
    records: KeyRecords,
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

/// One record to seal and write with [`Device::apply_sealed`].
#[derive(Debug, Clone)]
pub struct SealedWrite {
    /// Collection NSID (`chat.gel.assistant.chat` or `.message`).
    pub collection: String,
    /// Record key.
    pub rkey: String,
    /// The record key of the chat it belongs to (the chat's own for a chat
    /// record): the chat key is chosen by it.
    pub chat: String,
    /// The record's clear fields as atproto JSON, with `$type` (any sealed
    /// field in it is replaced).
    pub record: Value,
    /// What to seal, as atproto JSON (a `plainContent` for a message, the
    /// `sealedFields` for a chat).
    pub content: Value,
    /// Create the record (the key must be free), or replace it.
    pub update: bool,
    /// With `update`: the CID the record must have now (compare-and-swap);
    /// `None` replaces whatever is there.
    pub swap: Option<crate::model::Cid>,
}

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
        let repo = Repository::open(dir)?;
        // A re-seal whose commit landed before a crash: finish its state.
        reseal::finish_pending(dir, &repo, &mut state)?;
        Device::build(dir, repo, key, state)
    }

    fn build(
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
            let record = record_from_json(&item.record)
                .map_err(|e| SealError::malformed("record", e.to_string()))?;
            let content = record_from_json(&item.content)
                .map_err(|e| SealError::invalid_plaintext(format!("content: {e}")))?;
            let place = Place {
                did: &self.did,
                collection: &item.collection,
                rkey: &item.rkey,
            };
            let sealed = seal_record(
                &record,
                &place,
                &content,
                &[],
                &key,
                &SealOptions::default(),
                rng,
            )?;
            let value =
                ipld_to_json(&sealed).map_err(|e| SealError::malformed("record", e.to_string()))?;
            writes.push(if item.update {
                Write::Update {
                    collection: item.collection.clone(),
                    rkey: item.rkey.clone(),
                    value,
                    swap: item.swap,
                }
            } else {
                Write::create(&item.collection, &item.rkey, value)
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

    fn writable(&self) -> Result<(), DeviceError> {
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
    fn commit(
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

fn not_paired(state: &DeviceState) -> DeviceError {
    let code = state.pairing.to_string();
    // The public key's first characters only: never the secret.
    DeviceError::NotPaired {
        code_hint: code.chars().take(14).collect(),
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
fn derive(
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
    let mut repo = Repository::init(dir)?;
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
        writes.push(Write::create(
            DEVICE_COLLECTION,
            &id,
            device_to_value(
                &key.public_key(),
                name,
                Some((&key.signing_key(), &state.pairing)),
            )?,
        ));
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
    crate::repo::identity::create_private_dir(dir).map_err(RepoError::from)?;
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
    let mut repo = Repository::init(dir)?;
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
            repo.apply(&[Write::create(
                DEVICE_COLLECTION,
                &id,
                device_to_value(
                    &key.public_key(),
                    name,
                    Some((&key.signing_key(), &state.pairing)),
                )?,
            )])?;
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
        Repository::refresh(dir, bytes.as_slice(), &ImportOptions::default())?;
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
    let held = match Repository::open(dir) {
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
    let repo = Repository::open(dir)?;
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

/// Resolves a forked account epoch on the admitted device of `dir` (see
/// `seal::Fork`): starts the next epoch for the devices every rotation kept.
/// Returns the new epoch.
pub fn resolve(dir: impl AsRef<Path>, rng: &mut impl CryptoRng) -> Result<u64, DeviceError> {
    let mut device = Device::open(dir)?;
    if !device.repo.is_writable() {
        return Err(DeviceError::ReadOnlyCopy {
            did: device.repo.did().to_string(),
        });
    }
    let mut keyring = device.keyring.clone();
    let set = keyring.resolve_fork(rng)?;
    let epoch = keyring.account_epoch();
    let writes = key_writes(&set, &mut TidClock::new())?;
    device.commit(keyring, &writes, set)?;
    Ok(epoch)
}

/// Removes device `id` on the admitted device of `dir`: starts the next
/// account epoch, wrapped to every other admitted device; later seals use
/// keys the removed device never gets. Returns the new epoch.
pub fn remove(
    dir: impl AsRef<Path>,
    id: &str,
    rng: &mut impl CryptoRng,
) -> Result<u64, DeviceError> {
    let mut device = Device::open(dir)?;
    // A removal during a fork resolves it too (it rotates to the devices
    // every rotation kept, less `id`), so only the copy and the held epoch
    // are checked here.
    if !device.repo.is_writable() {
        return Err(DeviceError::ReadOnlyCopy {
            did: device.repo.did().to_string(),
        });
    }
    if let Some(held) = device.rolled_back() {
        return Err(DeviceError::MembershipRolledBack {
            held,
            now: device.keyring.held_epoch(),
        });
    }
    let mut keyring = device.keyring.clone();
    let set = keyring.remove_device(id, rng)?;
    let epoch = keyring.account_epoch();
    let writes = key_writes(&set, &mut TidClock::new())?;
    device.commit(keyring, &writes, set)?;
    Ok(epoch)
}
