//! One `gelstore sync` run: login (`connect`), pull and merge, the re-seal
//! of a store started offline, the push with its retries, the final check
//! that the root over the local records is the PDS's `data`; and the
//! one-off whole-repository check (`pull_verify`). The order of these
//! steps is what keeps the invariants of docs/sync.md; each step's own
//! work lives in its module (`mirror`, `merge`, `push`, `device::reseal`).

use std::collections::BTreeMap;
use std::path::Path;

use cid::Cid;
use serde::Serialize;

use super::push::{local_cids, push};
use super::{
    COLLECTION_PREFIX, MergeReport, NoProgress, Progress, PushReport, ResealOutcome, Session,
    SyncError, SyncState, merge, mirror, stored,
};
use crate::crypto::PublicKey;
use crate::identity::{DidResolver, HttpResolver};
use crate::local_repo;
use crate::repo::blobs::{BlobStore, blob_refs_in};
use crate::repo::blocks::MemoryBlocks;
use crate::repo::mst::Mst;
use crate::repo::repository::{RepoError, Repository};
use crate::repo::verify::{SignatureCheck, VerifyOptions, verify_repo_car};

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

/// The account's `#atproto` signing key, from its DID document: from the
/// PLC directory `plc` for a did:plc, from the host itself for a did:web
/// (see [`crate::identity::document_url`]).
pub fn signing_key(session: &Session, plc: &str) -> Result<PublicKey, SyncError> {
    let resolver = HttpResolver::new(plc, DID_TIMEOUT).map_err(|e| SyncError::Io {
        what: "start the DID resolver".into(),
        reason: e.to_string(),
    })?;
    Ok(resolver.resolve(session.did())?.atproto_key()?)
}

/// The longest a DID document may take to come.
const DID_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Fetches the PDS's whole repository and checks it with
/// [`verify_remote`] (a one-off check; [`sync`] pulls through the mirror).
pub fn pull_verify(
    session: &Session,
    key: &PublicKey,
    pushed: &BTreeMap<String, Cid>,
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
    pushed: &BTreeMap<String, Cid>,
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
    entries.extend(pushed.iter().map(|(k, c)| (k.clone(), *c)));
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
    let old = mirror::mirror_entries(state);
    let m = merge::merge(data, repo, &old, &pulled)?;
    let changed = stored::changed_keys(&old, &pulled.entries);
    // Before the mirror moves: a fetch that fails leaves these keys
    // changed, so the next sync fetches again.
    fetch_blobs(session, &BlobStore::new(data), repo, &changed, pulls)?;
    let merged = &mut pulls.merged;
    merged.created += m.created;
    merged.updated += m.updated;
    merged.deleted += m.deleted;
    merged.conflicts += m.conflicts;
    merged.refused.extend(m.refused);
    let (ours, others): (BTreeMap<_, _>, BTreeMap<_, _>) = pulled
        .entries
        .iter()
        .map(|(k, c)| (k.clone(), *c))
        .partition(|(k, _)| k.starts_with(COLLECTION_PREFIX));
    state.pushed = ours;
    state.others = others;
    state.remote = Some(pulled.head);
    state.save_keys(repo, changed)?;
    Ok(())
}

/// Downloads the blobs that the local records at `keys` (those a pull
/// changed) name and this folder lacks, each checked against its CID. A
/// blob the PDS does not have is named in the report, not an error: the
/// record came without it, and reading its output says so.
fn fetch_blobs(
    session: &Session,
    blobs: &BlobStore,
    repo: &Repository,
    keys: &[&str],
    pulls: &mut Pulls,
) -> Result<(), SyncError> {
    let io = |cid: &Cid, e: std::io::Error| SyncError::Io {
        what: format!("store blob {cid}"),
        reason: e.to_string(),
    };
    for key in keys.iter().filter(|k| k.starts_with(COLLECTION_PREFIX)) {
        let (collection, rkey) = super::push::split_key(key);
        let Some(entry) = repo.get(collection, rkey)? else {
            continue;
        };
        for blob in blob_refs_in(&entry.value) {
            if blobs
                .meta(&blob.cid)
                .map_err(|e| io(&blob.cid, e))?
                .is_some()
            {
                continue;
            }
            let Some(bytes) = session.get_blob(&blob.cid)? else {
                pulls.merged.blobs_missing.push(blob.cid.to_string());
                continue;
            };
            if crate::model::cid_for_blob(&bytes) != blob.cid {
                return Err(SyncError::BlobCidMismatch {
                    expected: blob.cid.to_string(),
                    got: "served other bytes".into(),
                });
            }
            let mime = blob
                .mime
                .as_deref()
                .unwrap_or(crate::seal::SEALED_BLOB_MIME);
            blobs.put(&bytes, mime).map_err(|e| io(&blob.cid, e))?;
            pulls.merged.blobs += 1;
        }
    }
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
    let mut repo = local_repo::open(data)?;
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
    let blobs = BlobStore::new(data);
    let mut attempt = 1;
    loop {
        match push(&session, &key, &repo, &blobs, &mut state, &mut push_report) {
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
    entries.extend(state.others.iter().map(|(k, c)| (k.clone(), *c)));
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
    use crate::crypto::{KeyAlgorithm, SigningKey};
    use crate::repo::repository::Write;
    use crate::store::MemoryEngine;

    /// A signed repository with two of our records and one other, as a CAR.
    fn remote() -> (Vec<u8>, String, PublicKey, BTreeMap<String, Cid>) {
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
                pushed.insert(k, cid);
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
            *pushed.values().next().unwrap(),
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
}
