//! The mirror of the account's remote repository (see docs/sync.md)
//! and how it is brought up to the PDS's head.
//!
//! The mirror is kept in the store ([`SyncState`], rows of
//! `Table::Mirror`, see [`super::stored`]): the remote head
//! (commit CID, rev, data), and the key → CID of every remote record —
//! `pushed` for `chat.gel.assistant.*`, `others` for every other
//! collection. Bodies are kept only for our collections, and they live in
//! the local repository (merged by [`super::merge`]). Because the MST is
//! deterministic, the mirror's node blocks are rebuilt from its entries
//! whenever they are needed ([`mirror_tree`]), so nothing else is stored;
//! a push keeps one such tree in step with its writes ([`MirrorTree`]).
//!
//! [`fetch`] pulls the PDS's repository: with `getRepo?since=<mirrored
//! rev>` when a head is mirrored (the CAR then holds the new commit and
//! the blocks made after that rev; the rest comes from the rebuilt mirror
//! tree and the local record blocks, and records the mirror already holds
//! may lack their bodies), else — or when that partial CAR does not verify
//! on those blocks, or lacks the body of a changed record of ours — the
//! full `getRepo`. Either way the commit
//! signature is checked against the DID document's key, every MST node and
//! record block against its CID, and the rev must not go backwards.

use std::collections::{BTreeMap, HashSet};

use cid::Cid;
use serde::{Deserialize, Serialize};

use super::{COLLECTION_PREFIX, Session, SyncError, SyncState, parse_marker_cid};
use crate::crypto::PublicKey;
use crate::repo::blocks::{BlockSource, MemoryBlocks, StoreError};
use crate::repo::car::Car;
use crate::repo::mst::Mst;
use crate::repo::repository::{RepoError, Repository};
use crate::repo::verify::{SignatureCheck, VerifyOptions, verify_repo, verify_repo_car};

/// The remote head the mirror is at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteHead {
    /// The commit's CID.
    pub commit: String,
    /// Its rev.
    pub rev: String,
    /// Its MST root.
    pub data: String,
}

impl RemoteHead {
    pub(crate) fn commit_cid(&self) -> Result<Cid, SyncError> {
        parse_marker_cid("the remote head", &self.commit)
    }
}

/// A verified pull: the remote head, every record's key and CID, and the
/// blocks that came with it (record bodies among them).
pub struct Pulled {
    /// The head.
    pub head: RemoteHead,
    /// Every remote record, `collection/rkey` → CID.
    pub entries: BTreeMap<String, Cid>,
    /// Blocks the CAR carried.
    pub blocks: MemoryBlocks,
    /// The CAR's size.
    pub car_bytes: usize,
    /// Whether the `since` form was used.
    pub partial: bool,
}

impl Pulled {
    /// Whether `key` is one of our collections.
    pub fn ours(key: &str) -> bool {
        key.starts_with(COLLECTION_PREFIX)
    }
}

/// Every record of the mirror, key → CID.
pub fn mirror_entries(state: &SyncState) -> BTreeMap<String, Cid> {
    state
        .pushed
        .iter()
        .chain(state.others.iter())
        .map(|(k, c)| (k.clone(), *c))
        .collect()
}

/// The mirror's MST, built in memory (its root is the mirrored `data`).
pub fn mirror_tree(entries: &BTreeMap<String, Cid>) -> Result<Mst<MemoryBlocks>, SyncError> {
    Mst::from_entries(
        MemoryBlocks::default(),
        entries.iter().map(|(k, c)| (k.clone(), *c)),
    )
    .map_err(|e| SyncError::from(RepoError::from(e)))
}

/// The mirror's MST kept in step with the mirror's entries through a push:
/// built once from the state, then each acknowledged write is applied to
/// it, so a batch's expected `data` costs O(batch · log N) instead of a
/// rebuild over every mirrored record. Whoever holds one must apply every
/// change made to `state.pushed`/`state.others` to it too, or drop it.
pub struct MirrorTree(Mst<MemoryBlocks>);

impl MirrorTree {
    /// The tree over the mirror's entries as `state` holds them now.
    pub fn of(state: &SyncState) -> Result<Self, SyncError> {
        Ok(Self(mirror_tree(&mirror_entries(state))?))
    }

    /// Records `key` → `cid` (a create or an update).
    pub fn set(&mut self, key: &str, cid: Cid) -> Result<(), SyncError> {
        self.0
            .insert(key, cid)
            .map(drop)
            .map_err(|e| SyncError::from(RepoError::from(e)))
    }

    /// Forgets `key` (a delete; absent is fine).
    pub fn remove(&mut self, key: &str) -> Result<(), SyncError> {
        self.0
            .delete(key)
            .map(drop)
            .map_err(|e| SyncError::from(RepoError::from(e)))
    }

    /// The root: the `data` a commit of the mirrored entries carries.
    pub fn root(&self) -> Cid {
        self.0.root()
    }
}

/// Blocks looked up in several places, first hit wins. Every block read
/// through it is checked against its CID by the verifier.
struct Layers<'a>(Vec<&'a dyn BlockSource>);

impl BlockSource for Layers<'_> {
    fn get(&self, cid: &Cid) -> Result<Option<Vec<u8>>, StoreError> {
        for layer in &self.0 {
            if let Some(b) = layer.get(cid)? {
                return Ok(Some(b));
            }
        }
        Ok(None)
    }
}

/// Pulls the PDS's repository and verifies it (see the module docs).
pub fn fetch(
    session: &Session,
    key: &PublicKey,
    state: &SyncState,
    local: &Repository,
) -> Result<Pulled, SyncError> {
    let opts = VerifyOptions::new(SignatureCheck::Key(key)).expect_did(session.did());
    if let Some(head) = &state.remote {
        let car = session.get_repo_since(Some(&head.rev))?;
        // A partial CAR that does not verify on the blocks held here (a
        // record body this store no longer has, another collection's body)
        // is not trusted: the full repository is fetched instead.
        if let Ok(pulled) = verify_partial(&car, &opts, state, local) {
            check_not_older(head, &pulled.head)?;
            return Ok(pulled);
        }
    }
    let car = session.get_repo_since(None)?;
    let verified = verify_repo_car(&car, &opts)?;
    let summary = &verified.repo.summary;
    let pulled = Pulled {
        head: RemoteHead {
            commit: summary.commit_cid.to_string(),
            rev: summary.rev.to_string(),
            data: summary.data_cid.to_string(),
        },
        entries: verified.repo.records.iter().cloned().collect(),
        blocks: verified.car.blocks.into_iter().collect(),
        car_bytes: car.len(),
        partial: false,
    };
    if let Some(head) = &state.remote {
        check_not_older(head, &pulled.head)?;
    }
    Ok(pulled)
}

fn verify_partial(
    car: &[u8],
    opts: &VerifyOptions<'_>,
    state: &SyncState,
    local: &Repository,
) -> Result<Pulled, SyncError> {
    let parsed = Car::from_slice_with_limits(car, opts.limits).map_err(RepoError::from)?;
    let root = crate::repo::verify::single_root(&parsed.roots)?;
    let blocks: MemoryBlocks = parsed.blocks.into_iter().collect();
    let held = mirror_entries(state);
    let mirror = mirror_tree(&held)?;
    let mut nodes = MemoryBlocks::default();
    mirror
        .write_new_blocks(&mut nodes)
        .map_err(|e| SyncError::from(RepoError::from(e)))?;
    let store = local.mst().store().clone();
    let layers = Layers(vec![&blocks, &nodes, &store]);
    // Records of the mirror were verified when they were pulled; only their
    // CIDs are kept for other collections, so their bodies may be absent.
    let known: HashSet<Cid> = held.values().copied().collect();
    let verified = verify_repo(&layers, root, &opts.clone().with_known_records(&known))?;
    // The merge needs the body of every record of ours that changed.
    for (key, cid) in &verified.records {
        if Pulled::ours(key)
            && held.get(key) != Some(cid)
            && layers
                .get(cid)
                .map_err(|e| SyncError::from(RepoError::Corrupt(e.to_string())))?
                .is_none()
        {
            return Err(SyncError::InvalidRecord {
                key: key.clone(),
                reason: format!("its block {cid} did not come with the since pull"),
            });
        }
    }
    let summary = &verified.summary;
    Ok(Pulled {
        head: RemoteHead {
            commit: summary.commit_cid.to_string(),
            rev: summary.rev.to_string(),
            data: summary.data_cid.to_string(),
        },
        entries: verified.records.into_iter().collect(),
        blocks,
        car_bytes: car.len(),
        partial: true,
    })
}

fn check_not_older(held: &RemoteHead, found: &RemoteHead) -> Result<(), SyncError> {
    if found.rev < held.rev {
        return Err(SyncError::OlderRemote {
            held: held.rev.clone(),
            found: found.rev.clone(),
        });
    }
    Ok(())
}

/// Checks the commit a push made: fetched with `getBlocks`, signed by the
/// account's key, for its DID, and its `data` equal to `expected` (the
/// root computed here over the mirror with the batch applied).
pub fn check_pushed_commit(
    session: &Session,
    key: &PublicKey,
    commit: Cid,
    expected: Cid,
) -> Result<RemoteHead, SyncError> {
    let car = session.get_blocks(&[commit])?;
    let parsed = Car::from_slice(&car).map_err(RepoError::from)?;
    let blocks: MemoryBlocks = parsed.blocks.into_iter().collect();
    let opts = VerifyOptions::new(SignatureCheck::Key(key)).expect_did(session.did());
    let (verified, _) = crate::repo::verify::verified_commit(&blocks, commit, &opts)?;
    if verified.data() != expected {
        return Err(SyncError::DataMismatch {
            commit: commit.to_string(),
            remote: verified.data().to_string(),
            local: expected.to_string(),
        });
    }
    Ok(RemoteHead {
        commit: commit.to_string(),
        rev: verified.rev().to_string(),
        data: verified.data().to_string(),
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

    const OURS: &str = "chat.gel.assistant.chat";
    const OTHER: &str = "app.example.thing";

    fn chat(day: u32) -> serde_json::Value {
        json!({"$type": OURS, "createdAt": format!("2026-01-{day:02}T00:00:00.000Z")})
    }

    fn repo_with(key: SigningKey) -> Repository {
        Repository::init_engine(Arc::new(MemoryEngine::new()), key).unwrap()
    }

    /// The mirror of `repo` as a sync would have saved it.
    fn mirror_of(repo: &Repository) -> SyncState {
        let mut state = SyncState::default();
        for entry in repo.list(None).unwrap() {
            let (k, c) = entry.unwrap();
            let map = if k.starts_with(COLLECTION_PREFIX) {
                &mut state.pushed
            } else {
                &mut state.others
            };
            map.insert(k, c);
        }
        let head = repo.head();
        state.remote = Some(RemoteHead {
            commit: head.commit.to_string(),
            rev: head.rev.to_string(),
            data: head.data.to_string(),
        });
        state
    }

    #[test]
    fn a_since_car_verifies_over_the_rebuilt_mirror_without_other_bodies() {
        let key = SigningKey::generate(KeyAlgorithm::K256).unwrap();
        let public = key.public_key();
        let mut remote = repo_with(key);
        remote
            .apply(&[
                Write::create(OURS, "3lbqzdw5pzk22", chat(1)),
                Write::create(OTHER, "self", json!({"$type": OTHER, "n": 1})),
            ])
            .unwrap();
        let state = mirror_of(&remote);
        let since = remote.head().rev;
        remote
            .apply(&[
                Write::update(OURS, "3lbqzdw5pzk22", chat(2)),
                Write::create(OURS, "3lbqzdw5pzk33", chat(3)),
            ])
            .unwrap();
        let (car, _) = remote.export(Vec::new(), Some(since)).unwrap();
        let (full, _) = remote.export(Vec::new(), None).unwrap();
        assert!(car.len() < full.len());

        // This store holds none of the bodies: the other collection's record
        // is known by CID only, ours changed and came with the CAR.
        let local = repo_with(SigningKey::generate(KeyAlgorithm::K256).unwrap());
        let did = remote.did().to_owned();
        let opts = VerifyOptions::new(SignatureCheck::Key(&public)).expect_did(&did);
        let pulled = verify_partial(&car, &opts, &state, &local).unwrap();
        assert!(pulled.partial);
        assert_eq!(pulled.head.commit, remote.head().commit.to_string());
        let expected: BTreeMap<String, Cid> =
            remote.list(None).unwrap().map(|e| e.unwrap()).collect();
        assert_eq!(pulled.entries, expected);

        // A damaged CAR, a mirror that is not the remote's, another key:
        // refused (the caller then fetches the whole repository).
        let mut bad = car.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0x55;
        assert!(verify_partial(&bad, &opts, &state, &local).is_err());
        let mut wrong = state.clone();
        wrong.others.clear();
        assert!(verify_partial(&car, &opts, &wrong, &local).is_err());
        let stranger = SigningKey::generate(KeyAlgorithm::K256)
            .unwrap()
            .public_key();
        let opts = VerifyOptions::new(SignatureCheck::Key(&stranger)).expect_did(&did);
        assert!(verify_partial(&car, &opts, &state, &local).is_err());
    }
}
