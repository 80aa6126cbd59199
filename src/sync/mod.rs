//! Sync with a PDS (see docs/sync.md), the store in the replica
//! role: it mirrors the account's repository on the PDS and applies its own
//! writes on top.
//!
//! One [`sync`] run:
//!
//! 1. login (`connect`): `createSession`; a store linked to another
//!    account is refused; the `#atproto` key of the DID document (PLC
//!    directory for did:plc, the host's `/.well-known/did.json` for
//!    did:web: [`did`]) is resolved before anything is written.
//! 2. pull ([`mirror::fetch`]): nothing when `getLatestCommit` names the
//!    mirrored head; else `getRepo?since=<mirrored rev>`, verified over the
//!    mirror's rebuilt tree and the local record blocks, or the full
//!    `getRepo` (first time, or when the partial CAR does not verify on what
//!    is held here). Signature, MST and every record are checked.
//! 3. merge ([`merge::merge`]): the `chat.gel.assistant.*` records other
//!    devices changed are lexicon-checked and taken into the local store in
//!    one commit; a key changed on both sides keeps the PDS's version and
//!    the local one goes to `sync-conflicts.jsonl`. The mirror in the store
//!    ([`stored`]) then moves to the new head: the rows of the keys that
//!    changed and the head, in one engine batch.
//! 4. push ([`push`]): local records whose CID differs from the mirror's go
//!    out in `applyWrites` batches (≤ 200 writes) with `swapCommit` = the
//!    mirrored head, so a batch lands on exactly the repository mirrored
//!    here or not at all ([`SyncError::RemoteMoved`]: pull again, retry).
//!    The new commit is fetched (`getBlocks`), its signature checked, and
//!    its `data` must equal the root computed here over the mirror with the
//!    batch applied — else [`SyncError::DataMismatch`], the mirror is
//!    re-pulled in full and the run fails (exit 1). A batch the PDS answers
//!    with 500 (a create on a taken key) is redone record by record:
//!    creates as `putRecord` with `"swapRecord": null`, updates and deletes
//!    with the mirrored CID as `swapRecord`.
//! 5. the final check: the root over the local records (plus the mirrored
//!    other collections) equals the PDS's `data`.
//!
//! [`status`] compares without changing anything: `getLatestCommit`
//! against the mirrored head, MST diffs for the counts.
//!
//! After the first pull, before any push, a store whose device seals for its own
//! did:key (started offline) is sealed again for the account's DID, once,
//! in one commit (`device::reseal`); before the push, a store whose
//! re-seal is unfinished or missing is refused
//! ([`SyncError::Reseal`]), so nothing sealed for the did:key reaches the
//! PDS. Devices that join through the PDS then seal for the account's DID,
//! which their own login gave (`device::join_synced`).
//!
//! Not done here (issue 7): blobs.

mod auth;
mod batch;
mod client;
pub mod did;
pub mod merge;
pub mod mirror;
pub mod progress;
pub mod status;
pub mod stored;

use std::collections::BTreeMap;
use std::path::Path;

use atrium_api::com::atproto::repo::apply_writes;
use atrium_api::types::string::{Nsid, RecordKey};
use cid::Cid;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

pub use crate::device::reseal::ResealOutcome;
pub use client::Session;
pub use merge::MergeReport;
pub use mirror::RemoteHead;
pub use progress::{NoProgress, Progress};
pub use status::{StatusReport, status};

use crate::repo::blocks::MemoryBlocks;
use crate::repo::keys::PublicKey;
use crate::repo::mst::Mst;
use crate::repo::repository::{RepoError, Repository};
use crate::repo::verify::{SignatureCheck, VerifyError, VerifyOptions, verify_repo_car};

/// The collections sync pushes.
pub const COLLECTION_PREFIX: &str = "chat.gel.assistant.";

/// Most writes in one `applyWrites` call (the PDS's limit; the body size
/// is bounded too, see [`batch::MAX_BATCH_BYTES`]).
pub const MAX_BATCH: usize = 200;

pub use batch::MAX_BATCH_BYTES;

/// The file older versions kept the mirror in, in the data folder; now
/// only read once, to take it into the store ([`stored`]).
pub const STATE_FILE: &str = "sync.json";

/// Why a sync failed. Local data is never changed by a failed sync (the
/// marker only records what the PDS acknowledged).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SyncError {
    /// The PDS (or PLC) could not be reached.
    #[error("cannot reach {url}: {reason}")]
    Unreachable {
        /// The URL.
        url: String,
        /// The transport's reason.
        reason: String,
    },
    /// createSession refused the identifier/password.
    #[error("bad credentials: {service} refused the login of {identifier}")]
    BadCredentials {
        /// The handle or DID given.
        identifier: String,
        /// The PDS.
        service: String,
    },
    /// The access token expired and refreshSession refused the refresh
    /// token too: log in again.
    #[error("the session with {service} expired ({cause}) and could not be refreshed: {refresh}")]
    SessionExpired {
        /// The PDS.
        service: String,
        /// The refused call.
        cause: String,
        /// refreshSession's answer.
        refresh: String,
    },
    /// An XRPC call failed.
    #[error("{method} failed (HTTP {status}) {error}: {message}")]
    Xrpc {
        /// The method.
        method: &'static str,
        /// The HTTP status (0: the response could not be read).
        status: u16,
        /// The XRPC error name.
        error: String,
        /// Its message.
        message: String,
    },
    /// This data folder was synced with another account.
    #[error(
        "this store is linked to {linked}, not {got}: refusing to sync it with another account"
    )]
    AccountMismatch {
        /// The linked DID.
        linked: String,
        /// The DID logged in.
        got: String,
    },
    /// The account's DID is not one sync can resolve (did:plc and
    /// host-only did:web are); nothing was fetched.
    #[error("cannot resolve the DID document of {did}: {reason}")]
    UnsupportedDid {
        /// The DID.
        did: String,
        /// Why.
        reason: String,
    },
    /// The account's signing key could not be found.
    #[error("cannot resolve the key of {did} from {url}: {reason}")]
    DidResolution {
        /// The DID.
        did: String,
        /// Where it was looked up.
        url: String,
        /// Why it failed.
        reason: String,
    },
    /// The PDS's repository did not verify.
    #[error("the PDS's repository CAR failed verification: {0}")]
    Verify(Box<VerifyError>),
    /// The PDS stored a record under another CID than ours (its bytes
    /// differ: the data model round trip is broken).
    #[error("the PDS stored {key} as {remote}, but it is {local} here")]
    RecordCidMismatch {
        /// `collection/rkey`.
        key: String,
        /// Our CID.
        local: String,
        /// The PDS's.
        remote: String,
    },
    /// The data check failed (docs/sync.md): the commit the PDS made for a push has
    /// another MST root than the one computed here over the mirror with the
    /// same writes. The mirror is re-pulled in full before this is returned.
    #[error(
        "replica out of step: the PDS's commit {commit} has data {remote}, but the root computed here is {local}; the mirror is pulled again in full, run sync again"
    )]
    DataMismatch {
        /// The PDS's commit.
        commit: String,
        /// Its `data`.
        remote: String,
        /// The root computed here.
        local: String,
    },
    /// The PDS's head moved while pushing (another device wrote): the push
    /// was refused by `swapCommit`, nothing of it landed.
    #[error("the PDS's head moved during the push (another device wrote); pull again")]
    RemoteMoved,
    /// The PDS serves an older rev than the one mirrored here.
    #[error("the PDS's repository is at rev {found}, older than the rev {held} mirrored here")]
    OlderRemote {
        /// The mirrored rev.
        held: String,
        /// The PDS's rev.
        found: String,
    },
    /// A pulled record fails our lexicon validation (or cannot be decoded);
    /// nothing of the pull was merged.
    #[error("record {key} from the PDS fails validation: {reason}; nothing was merged")]
    InvalidRecord {
        /// `collection/rkey`.
        key: String,
        /// Why.
        reason: String,
    },
    /// The store could not be sealed for the account's DID before its
    /// first push, or a re-seal is unfinished: nothing was pushed.
    #[error(transparent)]
    Reseal(Box<crate::device::DeviceError>),
    /// The local repository.
    #[error(transparent)]
    Local(Box<RepoError>),
    /// Local I/O (the marker file, the runtime).
    #[error("cannot {what}: {reason}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        reason: String,
    },
}

impl From<RepoError> for SyncError {
    fn from(e: RepoError) -> Self {
        SyncError::Local(Box::new(e))
    }
}

impl From<VerifyError> for SyncError {
    fn from(e: VerifyError) -> Self {
        SyncError::Verify(Box::new(e))
    }
}

impl SyncError {
    /// Whether this is the environment's failure (exit 2: the PDS could not
    /// be reached, local I/O) rather than a refusal (exit 1).
    pub fn is_environment(&self) -> bool {
        matches!(
            self,
            SyncError::Unreachable { .. } | SyncError::Io { .. } | SyncError::Local(_)
        )
    }
}

/// The sync state and the mirror of the remote repository (see
/// [`mirror`]): which account this store syncs with, the remote head the
/// mirror is at, and the CID of every remote record. Kept in the store
/// (`Table::Mirror` and `Meta` rows, see [`stored`]); this is the copy a
/// run works on. (Serde: the `sync.json` format of older versions.)
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SyncState {
    /// The account's DID (set by the first sync).
    pub did: Option<String>,
    /// The PDS last synced with.
    pub service: Option<String>,
    /// `collection/rkey` → CID of our records on the PDS, as acknowledged
    /// by a push or seen in a pull.
    pub pushed: BTreeMap<String, String>,
    /// The remote head the mirror is at (`None`: never pulled, or the
    /// mirror is to be re-pulled in full).
    #[serde(default)]
    pub remote: Option<RemoteHead>,
    /// `collection/rkey` → CID of the remote records of other collections
    /// (keys and CIDs only; their bodies are not kept).
    #[serde(default)]
    pub others: BTreeMap<String, String>,
}

/// What a push did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PushReport {
    /// Records created on the PDS.
    pub created: usize,
    /// Records updated.
    pub updated: usize,
    /// Records deleted.
    pub deleted: usize,
    /// Local records already on the PDS (nothing sent).
    pub unchanged: usize,
    /// `applyWrites` calls that succeeded.
    pub batches: usize,
    /// Writes retried one by one after a refused batch.
    pub retried: usize,
}

/// What a pull-verify found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PullReport {
    /// The DID the commit names.
    pub did: String,
    /// The commit's revision.
    pub rev: String,
    /// The commit's CID.
    pub commit: String,
    /// The PDS's MST root (`data`).
    pub data: String,
    /// Bytes of the CARs downloaded (0: the PDS's head was the mirrored
    /// one, nothing was fetched).
    pub car_bytes: usize,
    /// `getRepo` calls for the whole repository.
    pub full_pulls: usize,
    /// `getRepo` calls with `since` (only what changed after the mirrored
    /// rev).
    pub since_pulls: usize,
    /// Records in the PDS repository.
    pub records: usize,
    /// Of them, under `chat.gel.assistant.*`.
    pub our_records: usize,
    /// The signing key (multikey) the signature verified against.
    pub signing_key: String,
    /// The MST root computed locally over our records (as pushed) plus the
    /// PDS's records of other collections.
    pub expected_data: String,
    /// Whether `expected_data == data` (see docs/sync.md).
    pub data_matches: bool,
}

/// What [`sync`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SyncReport {
    /// The PDS.
    pub service: String,
    /// The account's DID.
    pub did: String,
    /// Its handle.
    pub handle: String,
    /// The push.
    pub push: PushReport,
    /// What the pulls merged into the local store.
    pub merged: MergeReport,
    /// The mirror at the end.
    pub pull: PullReport,
    /// What sealing the store for the account's DID did before anything
    /// was pushed (see `device::reseal`).
    pub reseal: ResealOutcome,
}

/// One local record to push.
pub(crate) struct LocalRecord {
    pub(crate) key: String,
    pub(crate) cid: Cid,
    value: Value,
}

pub(crate) fn split_key(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or((key, ""))
}

/// The keys and CIDs of the local records under [`COLLECTION_PREFIX`], in
/// key order (no bodies read).
fn local_cids(repo: &Repository) -> Result<Vec<(String, Cid)>, SyncError> {
    repo.mst()
        .entries_with_prefix(COLLECTION_PREFIX)
        .map(|entry| entry.map_err(|e| RepoError::from(e).into()))
        .collect()
}

/// The record at `key` (CID `cid`) with its body: read only for records
/// a push sends.
fn local_record(repo: &Repository, key: &str, cid: Cid) -> Result<LocalRecord, SyncError> {
    let (collection, rkey) = split_key(key);
    let value = repo
        .get(collection, rkey)?
        .ok_or_else(|| RepoError::Corrupt(format!("record {key} listed but missing")))?
        .value;
    Ok(LocalRecord {
        key: key.to_owned(),
        cid,
        value,
    })
}

enum Op<'a> {
    Create(&'a LocalRecord),
    Update(&'a LocalRecord, String),
    Delete(String, String),
}

fn bad_name(key: &str, e: &str) -> SyncError {
    SyncError::Xrpc {
        method: "com.atproto.repo.applyWrites",
        status: 0,
        error: "InvalidRequest".into(),
        message: format!("{key}: {e}"),
    }
}

fn names(key: &str) -> Result<(Nsid, RecordKey), SyncError> {
    let (collection, rkey) = split_key(key);
    let nsid = Nsid::new(collection.to_owned()).map_err(|e| bad_name(key, e))?;
    let rkey = RecordKey::new(rkey.to_owned()).map_err(|e| bad_name(key, e))?;
    Ok((nsid, rkey))
}

fn unknown(key: &str, value: &Value) -> Result<atrium_api::types::Unknown, SyncError> {
    serde_json::from_value(value.clone()).map_err(|e| bad_name(key, &e.to_string()))
}

impl Op<'_> {
    /// About how many bytes of the `applyWrites` body this write takes.
    fn json_size(&self) -> usize {
        let value = match self {
            Op::Create(r) | Op::Update(r, _) => serde_json::to_vec(&r.value).map_or(0, |v| v.len()),
            Op::Delete(..) => 0,
        };
        value + self.key().len() + 100
    }

    fn key(&self) -> &str {
        match self {
            Op::Create(r) | Op::Update(r, _) => &r.key,
            Op::Delete(k, _) => k,
        }
    }

    fn to_write(&self) -> Result<apply_writes::InputWritesItem, SyncError> {
        let (collection, rkey) = names(self.key())?;
        Ok(match self {
            Op::Create(r) => apply_writes::InputWritesItem::Create(Box::new(
                apply_writes::CreateData {
                    collection,
                    rkey: Some(rkey),
                    value: unknown(&r.key, &r.value)?,
                }
                .into(),
            )),
            Op::Update(r, _) => apply_writes::InputWritesItem::Update(Box::new(
                apply_writes::UpdateData {
                    collection,
                    rkey,
                    value: unknown(&r.key, &r.value)?,
                }
                .into(),
            )),
            Op::Delete(..) => apply_writes::InputWritesItem::Delete(Box::new(
                apply_writes::DeleteData { collection, rkey }.into(),
            )),
        })
    }
}

fn check_cid(key: &str, local: &Cid, remote: &str) -> Result<(), SyncError> {
    if local.to_string() == remote {
        Ok(())
    } else {
        Err(SyncError::RecordCidMismatch {
            key: key.to_owned(),
            local: local.to_string(),
            remote: remote.to_owned(),
        })
    }
}

/// Pushes the local records whose CID differs from the mirror's, in
/// `applyWrites` batches pinned to the mirrored head (`swapCommit`). After
/// each batch the PDS's new commit is fetched and its `data` must equal the
/// root computed here over the mirror with the batch applied (see docs/sync.md);
/// the mirror then moves to that commit: the batch's rows and the new head
/// in one store batch ([`SyncState::save_keys`]). Counts go into `report`
/// as batches land.
pub fn push(
    session: &Session,
    key: &PublicKey,
    repo: &Repository,
    state: &mut SyncState,
    report: &mut PushReport,
) -> Result<(), SyncError> {
    // Bodies are read only for the records that go out.
    let local = local_cids(repo)?;
    let mut present = std::collections::BTreeSet::new();
    let mut unchanged = 0;
    let mut outgoing = Vec::new();
    for (key, cid) in &local {
        present.insert(key.as_str());
        match state.pushed.get(key) {
            Some(was) if *was == cid.to_string() => unchanged += 1,
            was => outgoing.push((local_record(repo, key, *cid)?, was.cloned())),
        }
    }
    let mut ops: Vec<Op> = outgoing
        .iter()
        .map(|(r, was)| match was {
            Some(was) => Op::Update(r, was.clone()),
            None => Op::Create(r),
        })
        .collect();
    report.unchanged = unchanged;
    for (key, cid) in &state.pushed {
        if !present.contains(key.as_str()) {
            ops.push(Op::Delete(key.clone(), cid.clone()));
        }
    }
    // The session reports each acknowledged write to the same hooks.
    session.progress().push_started(ops.len() as u64);
    // The mirror's tree, built on the first commit check and then moved
    // with every write `record_done` takes into `state` (so the checks
    // cost O(pushed · log N), not a rebuild over the mirror per batch).
    // It lives only for this push: a re-pull makes the next push build
    // it again, and every early return drops it.
    let mut tree: Option<mirror::MirrorTree> = None;
    for batch in batch::split(&ops, Op::json_size) {
        let writes = batch
            .iter()
            .map(Op::to_write)
            .collect::<Result<Vec<_>, _>>()?;
        let swap = state
            .remote
            .as_ref()
            .map(RemoteHead::commit_cid)
            .transpose()?;
        match session.apply_writes(writes, swap) {
            Ok(out) => {
                report.batches += 1;
                let results = out.results.unwrap_or_default();
                for (i, op) in batch.iter().enumerate() {
                    let remote = results.get(i).and_then(|r| match r {
                        apply_writes::OutputResultsItem::CreateResult(c) => {
                            Some(c.cid.as_ref().to_string())
                        }
                        apply_writes::OutputResultsItem::UpdateResult(u) => {
                            Some(u.cid.as_ref().to_string())
                        }
                        apply_writes::OutputResultsItem::DeleteResult(_) => None,
                    });
                    record_done(op, remote.as_deref(), state, &mut tree, report)?;
                }
                state.remote = match (swap, out.commit) {
                    // The batch landed on the mirrored head: its commit's
                    // data must be the mirror's root with the batch applied.
                    (Some(_), Some(commit)) => {
                        let expected = match &tree {
                            Some(tree) => tree.root(),
                            None => tree.insert(mirror::MirrorTree::of(state)?).root(),
                        };
                        match mirror::check_pushed_commit(
                            session,
                            key,
                            *commit.cid.as_ref(),
                            expected,
                        ) {
                            Ok(head) => Some(head),
                            Err(e) => {
                                state.remote = None;
                                state.save_keys(repo, batch.iter().map(Op::key))?;
                                return Err(e);
                            }
                        }
                    }
                    // No mirrored head (or no commit named): the next pull
                    // brings the mirror up to date.
                    _ => None,
                };
            }
            Err(e) if head_moved(session, &e, swap)? => return Err(SyncError::RemoteMoved),
            // The reference PDS answers 500 for a create on a taken key (and
            // for an update/delete of a missing one), `gelstore serve` a
            // named `InvalidSwap` (`RecordNotFound`) on a head that did not
            // move: go one by one.
            Err(SyncError::Xrpc { status, error, .. })
                if status == 500 || error == "InvalidSwap" || error == "RecordNotFound" =>
            {
                for op in batch {
                    report.retried += 1;
                    push_one(session, op, state, &mut tree, report)?;
                }
            }
            Err(e) => return Err(e),
        }
        state.save_keys(repo, batch.iter().map(Op::key))?;
    }
    Ok(())
}

/// Whether a refused `applyWrites` pinned to `swap` was refused because
/// the PDS's head moved: an `InvalidSwap` while the head is no longer
/// `swap`. (`gelstore serve` also names a taken key `InvalidSwap`; then
/// the head is still `swap`.)
fn head_moved(session: &Session, e: &SyncError, swap: Option<Cid>) -> Result<bool, SyncError> {
    let (SyncError::Xrpc { error, .. }, Some(swap)) = (e, swap) else {
        return Ok(false);
    };
    if !error.starts_with("InvalidSwap") {
        return Ok(false);
    }
    Ok(session.latest_commit()?.0 != swap)
}

/// Takes an acknowledged write into the mirror: `state` and, when one is
/// held, its tree.
fn record_done(
    op: &Op<'_>,
    remote: Option<&str>,
    state: &mut SyncState,
    tree: &mut Option<mirror::MirrorTree>,
    report: &mut PushReport,
) -> Result<(), SyncError> {
    match op {
        Op::Create(r) | Op::Update(r, _) => {
            if let Some(remote) = remote {
                check_cid(&r.key, &r.cid, remote)?;
            }
            state.pushed.insert(r.key.clone(), r.cid.to_string());
            if let Some(tree) = tree {
                tree.set(&r.key, r.cid)?;
            }
            if matches!(op, Op::Create(_)) {
                report.created += 1;
            } else {
                report.updated += 1;
            }
        }
        Op::Delete(key, _) => {
            state.pushed.remove(key);
            if let Some(tree) = tree {
                tree.remove(key)?;
            }
            report.deleted += 1;
        }
    }
    Ok(())
}

fn push_one(
    session: &Session,
    op: &Op<'_>,
    state: &mut SyncState,
    tree: &mut Option<mirror::MirrorTree>,
    report: &mut PushReport,
) -> Result<(), SyncError> {
    match op {
        Op::Create(r) => {
            let (collection, rkey) = split_key(&r.key);
            let remote = session.create_if_absent(collection, rkey, &r.value)?;
            record_done(op, Some(&remote), state, tree, report)
        }
        // The swap CID is the one last pushed: the PDS refuses
        // (`InvalidSwap`) if someone else changed the record since.
        Op::Update(r, swap) => {
            let (collection, rkey) = names(&r.key)?;
            let remote = session.update_swapped(
                collection,
                rkey,
                unknown(&r.key, &r.value)?,
                parse_marker_cid(&r.key, swap)?,
            )?;
            record_done(op, Some(&remote), state, tree, report)
        }
        Op::Delete(key, swap) => {
            let (collection, rkey) = names(key)?;
            session.delete_swapped(collection, rkey, parse_marker_cid(key, swap)?)?;
            record_done(op, None, state, tree, report)
        }
    }
}

pub(crate) fn parse_marker_cid(key: &str, cid: &str) -> Result<Cid, SyncError> {
    crate::model::parse_cid(cid).map_err(|e| SyncError::Io {
        what: format!("read the mirrored CID of {key}"),
        reason: e.to_string(),
    })
}

/// The account's `#atproto` signing key, from its DID document: from the
/// PLC directory `plc` for a did:plc, from the host itself for a did:web
/// (see [`did::document_url`]).
pub fn signing_key(session: &Session, plc: &str) -> Result<PublicKey, SyncError> {
    let url = did::document_url(session.did(), plc)?;
    let doc = session.did_document(&url)?;
    did::atproto_key(&doc, session.did(), &url)
}

/// Fetches the PDS's whole repository and checks it with
/// [`verify_remote`] (a one-off check; [`sync`] pulls through the mirror).
pub fn pull_verify(
    session: &Session,
    key: &PublicKey,
    pushed: &BTreeMap<String, String>,
) -> Result<PullReport, SyncError> {
    let car = session.get_repo()?;
    verify_remote(&car, session.did(), key, pushed)
}

/// Verifies a repository CAR from the PDS (signature against `key`, the
/// commit naming `did`, MST, records) and compares its `data` with the root
/// computed over `pushed` plus its records of other collections.
pub fn verify_remote(
    car: &[u8],
    did: &str,
    key: &PublicKey,
    pushed: &BTreeMap<String, String>,
) -> Result<PullReport, SyncError> {
    let verified = verify_repo_car(
        car,
        &VerifyOptions::new(SignatureCheck::Key(key)).expect_did(did),
    )?;
    let repo = &verified.repo;
    let mut entries: Vec<(String, Cid)> = repo
        .records
        .iter()
        .filter(|(k, _)| !k.starts_with(COLLECTION_PREFIX))
        .cloned()
        .collect();
    for (k, cid) in pushed {
        entries.push((k.clone(), parse_marker_cid(k, cid)?));
    }
    let expected = Mst::from_entries(MemoryBlocks::default(), entries)
        .map_err(|e| SyncError::from(RepoError::from(e)))?
        .root();
    Ok(PullReport {
        did: repo.summary.did.clone(),
        rev: repo.summary.rev.to_string(),
        commit: repo.summary.commit_cid.to_string(),
        data: repo.summary.data_cid.to_string(),
        car_bytes: car.len(),
        full_pulls: 1,
        since_pulls: 0,
        records: repo.summary.record_count,
        our_records: repo
            .records
            .iter()
            .filter(|(k, _)| k.starts_with(COLLECTION_PREFIX))
            .count(),
        signing_key: key.to_multikey(),
        expected_data: expected.to_string(),
        data_matches: expected == repo.summary.data_cid,
    })
}

/// Where to find DID documents when no PLC URL is given.
pub const DEFAULT_PLC: &str = "https://plc.directory";

/// What [`sync`] needs.
#[derive(Debug, Clone)]
pub struct SyncOptions {
    /// The PDS URL.
    pub service: String,
    /// Handle or DID.
    pub identifier: String,
    /// The password.
    pub password: String,
    /// The PLC directory URL.
    pub plc: String,
}

/// A logged-in session for `data`'s store: refuses another account than
/// the linked one, resolves the signing key before anything is written,
/// and links the store on first use.
pub(crate) fn connect(
    repo: &Repository,
    opts: &SyncOptions,
    state: &mut SyncState,
    progress: std::sync::Arc<dyn Progress>,
) -> Result<(Session, PublicKey), SyncError> {
    let session = Session::login_with(&opts.service, &opts.identifier, &opts.password, progress)?;
    if let Some(linked) = &state.did
        && linked != session.did()
    {
        return Err(SyncError::AccountMismatch {
            linked: linked.clone(),
            got: session.did().to_owned(),
        });
    }
    // Resolve the key before writing, so a PDS we cannot verify gets nothing.
    let key = signing_key(&session, &opts.plc)?;
    if state.did.is_none() {
        state.did = Some(session.did().to_owned());
        state.service = Some(session.service().to_owned());
        state.save_meta(repo)?;
    }
    Ok((session, key))
}

/// What the pulls of one sync did.
#[derive(Default)]
struct Pulls {
    merged: MergeReport,
    car_bytes: usize,
    full: usize,
    since: usize,
}

/// Brings the mirror to the PDS's head and merges the remote changes of our
/// collections into the local store. Nothing is downloaded when the head
/// is the mirrored one (`getLatestCommit`).
fn pull_merge(
    session: &Session,
    key: &PublicKey,
    data: &Path,
    repo: &mut Repository,
    state: &mut SyncState,
    pulls: &mut Pulls,
) -> Result<(), SyncError> {
    if let Some(head) = &state.remote {
        let (latest, _) = session.latest_commit()?;
        if latest.to_string() == head.commit {
            return Ok(());
        }
    }
    let pulled = mirror::fetch(session, key, state, repo)?;
    pulls.car_bytes += pulled.car_bytes;
    if pulled.partial {
        pulls.since += 1;
    } else {
        pulls.full += 1;
    }
    let old = mirror::mirror_entries(state)?;
    let m = merge::merge(data, repo, &old, &pulled)?;
    let changed = stored::changed_keys(&old, &pulled.entries);
    let merged = &mut pulls.merged;
    merged.created += m.created;
    merged.updated += m.updated;
    merged.deleted += m.deleted;
    merged.conflicts += m.conflicts;
    merged.refused.extend(m.refused);
    let (ours, others): (BTreeMap<_, _>, BTreeMap<_, _>) = pulled
        .entries
        .iter()
        .map(|(k, c)| (k.clone(), c.to_string()))
        .partition(|(k, _)| k.starts_with(COLLECTION_PREFIX));
    state.pushed = ours;
    state.others = others;
    state.remote = Some(pulled.head);
    state.save_keys(repo, changed)?;
    Ok(())
}

/// How often a push refused because the PDS's head moved is retried after a
/// new pull.
const PUSH_ATTEMPTS: usize = 3;

/// Logs in, pulls and merges the other devices' records, pushes this
/// store's changes (checking each new commit's `data`), and
/// brings the mirror to the final head. A `DataMismatch` re-pulls the
/// mirror in full and is returned.
pub fn sync(data: &Path, opts: &SyncOptions) -> Result<SyncReport, SyncError> {
    sync_with_progress(data, opts, std::sync::Arc::new(NoProgress))
}

/// [`sync`], reporting the push and the download to `progress`.
pub fn sync_with_progress(
    data: &Path,
    opts: &SyncOptions,
    progress: std::sync::Arc<dyn Progress>,
) -> Result<SyncReport, SyncError> {
    let mut repo = Repository::open(data)?;
    let mut state = SyncState::load(data, &repo)?;
    let (session, key) = connect(&repo, opts, &mut state, progress)?;
    let mut pulls = Pulls::default();
    pull_merge(&session, &key, data, &mut repo, &mut state, &mut pulls)?;
    // After a pull that verified (a failed one leaves the store as it was),
    // before any push: a store that seals for its own did:key is sealed
    // again for the account's DID, in one commit.
    let reseal = crate::device::reseal::reseal_for_account(
        data,
        &mut repo,
        session.did(),
        &state.pushed,
        &mut crate::seal::os_rng(),
    )
    .map_err(|e| SyncError::Reseal(Box::new(e)))?;
    crate::device::reseal::check_ready(data, &repo, session.did(), &state.pushed)
        .map_err(|e| SyncError::Reseal(Box::new(e)))?;
    let mut push_report = PushReport::default();
    let mut attempt = 1;
    loop {
        match push(&session, &key, &repo, &mut state, &mut push_report) {
            Ok(()) => break,
            Err(SyncError::RemoteMoved) if attempt < PUSH_ATTEMPTS => {
                attempt += 1;
                pull_merge(&session, &key, data, &mut repo, &mut state, &mut pulls)?;
            }
            Err(e @ SyncError::DataMismatch { .. }) => {
                // The mirror is wrong: take the PDS's repository in full.
                // The mismatch stays the error reported; if this pull fails
                // too, the dropped head makes the next run pull in full.
                if let Err(again) =
                    pull_merge(&session, &key, data, &mut repo, &mut state, &mut pulls)
                {
                    tracing::warn!(error = %again, "re-pulling the mirror after a data mismatch failed");
                }
                return Err(e);
            }
            Err(e) => return Err(e),
        }
    }
    pull_merge(&session, &key, data, &mut repo, &mut state, &mut pulls)?;
    let pull = final_check(&state, &repo, &key, &pulls)?;
    Ok(SyncReport {
        service: session.service().to_owned(),
        did: session.did().to_owned(),
        handle: session.handle().to_owned(),
        push: push_report,
        merged: pulls.merged,
        pull,
        reseal,
    })
}

/// The report of the mirror at the end of a sync; the root over the local
/// records (plus the mirrored other collections) must be the PDS's `data`.
fn final_check(
    state: &SyncState,
    repo: &Repository,
    key: &PublicKey,
    pulls: &Pulls,
) -> Result<PullReport, SyncError> {
    let head = state.remote.clone().ok_or(SyncError::RemoteMoved)?;
    let mut entries: BTreeMap<String, Cid> = BTreeMap::new();
    for (k, c) in &state.others {
        entries.insert(k.clone(), parse_marker_cid(k, c)?);
    }
    entries.extend(local_cids(repo)?);
    let expected = mirror::mirror_tree(&entries)?.root().to_string();
    if expected != head.data {
        return Err(SyncError::DataMismatch {
            commit: head.commit,
            remote: head.data,
            local: expected,
        });
    }
    Ok(PullReport {
        did: state.did.clone().unwrap_or_default(),
        rev: head.rev,
        commit: head.commit,
        data: head.data,
        car_bytes: pulls.car_bytes,
        full_pulls: pulls.full,
        since_pulls: pulls.since,
        records: state.pushed.len() + state.others.len(),
        our_records: state.pushed.len(),
        signing_key: key.to_multikey(),
        data_matches: true,
        expected_data: expected,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::repo::keys::{KeyAlgorithm, SigningKey};
    use crate::repo::repository::Write;
    use crate::store::MemoryEngine;

    /// A signed repository with two of our records and one other, as a CAR.
    fn remote() -> (Vec<u8>, String, PublicKey, BTreeMap<String, String>) {
        let key = SigningKey::generate(KeyAlgorithm::K256).unwrap();
        let public = key.public_key();
        let mut repo = Repository::init_engine(Arc::new(MemoryEngine::new()), key).unwrap();
        let chat =
            json!({"$type": "chat.gel.assistant.chat", "createdAt": "2026-01-01T00:00:00.000Z"});
        let other = json!({"$type": "app.example.thing", "n": 1});
        repo.apply(&[
            Write::create("chat.gel.assistant.chat", "3lbqzdw5pzk22", chat.clone()),
            Write::create("app.example.thing", "self", other),
        ])
        .unwrap();
        let mut pushed = BTreeMap::new();
        for entry in repo.list(None).unwrap() {
            let (k, cid) = entry.unwrap();
            if k.starts_with(COLLECTION_PREFIX) {
                pushed.insert(k, cid.to_string());
            }
        }
        let (car, _) = repo.export(Vec::new(), None).unwrap();
        (car, repo.did().to_owned(), public, pushed)
    }

    #[test]
    fn verify_remote_checks_signature_and_data_root() {
        let (car, did, key, pushed) = remote();
        let report = verify_remote(&car, &did, &key, &pushed).unwrap();
        assert_eq!(report.records, 2);
        assert_eq!(report.our_records, 1);
        assert!(report.data_matches, "{report:?}");

        // A record the PDS lacks: verified, but not in sync.
        let mut more = pushed.clone();
        more.insert(
            "chat.gel.assistant.chat/3lbqzdw5pzk23".into(),
            pushed.values().next().unwrap().clone(),
        );
        let report = verify_remote(&car, &did, &key, &more).unwrap();
        assert!(!report.data_matches);
        assert_ne!(report.expected_data, report.data);

        // Another key, another DID, a damaged CAR: named errors.
        let stranger = SigningKey::generate(KeyAlgorithm::K256)
            .unwrap()
            .public_key();
        let e = verify_remote(&car, &did, &stranger, &pushed).unwrap_err();
        assert!(matches!(e, SyncError::Verify(_)), "{e}");
        assert!(e.to_string().contains("failed verification"), "{e}");
        assert!(!e.is_environment());
        let e = verify_remote(&car, "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", &key, &pushed).unwrap_err();
        assert!(matches!(e, SyncError::Verify(_)), "{e}");
        let mut bad = car.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0x55;
        let e = verify_remote(&bad, &did, &key, &pushed).unwrap_err();
        assert!(matches!(e, SyncError::Verify(_)), "{e}");
    }

    /// A small seeded xorshift, so the random batches are the same each run.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    #[test]
    fn the_push_tree_moved_write_by_write_equals_a_rebuild() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let cid = |n: u64| crate::model::cid_for_cbor(&n.to_be_bytes());
        let mut state = SyncState::default();
        // Records of other collections sit in the same tree, untouched.
        for n in 0..40 {
            state
                .others
                .insert(format!("app.example.thing/k{n:04}"), cid(n).to_string());
        }
        let mut tree = Some(mirror::MirrorTree::of(&state).unwrap());
        let mut report = PushReport::default();
        let mut version = 1_000;
        for _ in 0..50 {
            // A batch of creates, updates and deletes over a small key space,
            // so all three happen often (a batch never repeats a key).
            let mut keys = std::collections::BTreeSet::new();
            for _ in 0..rng.below(20) + 1 {
                keys.insert(format!("chat.gel.assistant.chat/r{:04}", rng.below(150)));
            }
            let mut records = Vec::new();
            let mut deletes = Vec::new();
            for key in keys {
                let held = state.pushed.get(&key).cloned();
                match held {
                    Some(prev) if rng.below(3) == 0 => deletes.push((key, prev)),
                    held => {
                        version += 1;
                        records.push((
                            LocalRecord {
                                key,
                                cid: cid(version),
                                value: Value::Null,
                            },
                            held,
                        ));
                    }
                }
            }
            let batch: Vec<Op<'_>> = records
                .iter()
                .map(|(r, held)| match held {
                    Some(prev) => Op::Update(r, prev.clone()),
                    None => Op::Create(r),
                })
                .chain(deletes.into_iter().map(|(k, p)| Op::Delete(k, p)))
                .collect();
            for op in &batch {
                record_done(op, None, &mut state, &mut tree, &mut report).unwrap();
            }
            let rebuilt = mirror::MirrorTree::of(&state).unwrap().root();
            assert_eq!(tree.as_ref().unwrap().root(), rebuilt);
        }
        // The run did exercise every kind of write.
        assert!(report.created > 50 && report.updated > 50 && report.deleted > 20);
        assert!(report.created + report.updated + report.deleted >= 300);
    }
}
