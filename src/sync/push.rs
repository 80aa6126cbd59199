//! The push: local records whose CID differs from the mirror's go out in
//! `applyWrites` batches pinned to the mirrored head (`swapCommit`), each
//! new commit's `data` checked against the root computed here over the
//! mirror with the batch applied, the mirror moved batch by batch; a batch
//! refused for a taken key is redone record by record. Kept apart from the
//! run (`run.rs`), which decides when to push and what to do when a push
//! is refused.

use std::collections::BTreeSet;

use atrium_api::com::atproto::repo::apply_writes;
use atrium_api::types::string::{Nsid, RecordKey};
use cid::Cid;
use serde::Serialize;
use serde_json::Value;

use super::{COLLECTION_PREFIX, RemoteHead, Session, SyncError, SyncState, batch, mirror};
use crate::crypto::PublicKey;
use crate::repo::blobs::{BlobStore, blob_refs_in};
use crate::repo::repository::{RepoError, Repository};

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
    /// Blobs uploaded for the records sent (a blob is uploaded before the
    /// batch whose records name it, once per push).
    pub blobs: usize,
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
pub(super) fn local_cids(repo: &Repository) -> Result<Vec<(String, Cid)>, SyncError> {
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
    Update(&'a LocalRecord, Cid),
    Delete(String, Cid),
}

fn bad_name(key: &str, e: &str) -> SyncError {
    SyncError::Xrpc {
        method: atrium_api::com::atproto::repo::apply_writes::NSID,
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
    blobs: &BlobStore,
    state: &mut SyncState,
    report: &mut PushReport,
) -> Result<(), SyncError> {
    // Bodies are read only for the records that go out.
    let local = local_cids(repo)?;
    let mut present = BTreeSet::new();
    let mut unchanged = 0;
    let mut outgoing = Vec::new();
    for (key, cid) in &local {
        present.insert(key.as_str());
        match state.pushed.get(key) {
            Some(was) if was == cid => unchanged += 1,
            was => outgoing.push((local_record(repo, key, *cid)?, was.copied())),
        }
    }
    let mut ops: Vec<Op> = outgoing
        .iter()
        .map(|(r, was)| match was {
            Some(was) => Op::Update(r, *was),
            None => Op::Create(r),
        })
        .collect();
    report.unchanged = unchanged;
    for (key, cid) in &state.pushed {
        if !present.contains(key.as_str()) {
            ops.push(Op::Delete(key.clone(), *cid));
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
    let mut uploaded = BTreeSet::new();
    for batch in batch::split(&ops, Op::json_size) {
        upload_blobs(session, blobs, batch, &mut uploaded, report)?;
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

/// Uploads the blobs the records of `batch` name that this push has not
/// uploaded yet: a PDS refuses a record whose blobs it does not hold. A
/// blob this folder lacks refuses the batch before anything is sent.
fn upload_blobs(
    session: &Session,
    blobs: &BlobStore,
    batch: &[Op<'_>],
    uploaded: &mut BTreeSet<Cid>,
    report: &mut PushReport,
) -> Result<(), SyncError> {
    for op in batch {
        let (Op::Create(r) | Op::Update(r, _)) = op else {
            continue;
        };
        for blob in blob_refs_in(&r.value) {
            if uploaded.contains(&blob.cid) {
                continue;
            }
            let stored = blobs
                .get(&blob.cid)
                .map_err(|e| SyncError::Io {
                    what: format!("read blob {}", blob.cid),
                    reason: e.to_string(),
                })?
                .ok_or_else(|| SyncError::BlobMissing {
                    key: r.key.clone(),
                    cid: blob.cid.to_string(),
                })?;
            let got = session.upload_blob(stored.bytes, &stored.mime)?;
            if got != blob.cid {
                return Err(SyncError::BlobCidMismatch {
                    expected: blob.cid.to_string(),
                    got: format!("stored it as {got}"),
                });
            }
            uploaded.insert(blob.cid);
            report.blobs += 1;
        }
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
            state.pushed.insert(r.key.clone(), r.cid);
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
            let remote =
                session.update_swapped(collection, rkey, unknown(&r.key, &r.value)?, *swap)?;
            record_done(op, Some(&remote), state, tree, report)
        }
        Op::Delete(key, swap) => {
            let (collection, rkey) = names(key)?;
            session.delete_swapped(collection, rkey, *swap)?;
            record_done(op, None, state, tree, report)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
                .insert(format!("app.example.thing/k{n:04}"), cid(n));
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
                let held = state.pushed.get(&key).copied();
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
                    Some(prev) => Op::Update(r, *prev),
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
