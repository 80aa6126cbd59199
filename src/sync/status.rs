//! `sync status`: how the local store and the PDS differ, without
//! downloading anything when they agree.
//!
//! The remote head comes from `getLatestCommit`; when it is the mirrored
//! one nothing is pulled and "to pull" is zero. Otherwise the repository is
//! fetched (`since` the mirrored rev when possible) and verified, and the
//! mirror's MST is diffed against the new one. "To push" is the diff of the
//! mirror's tree of our collections against the local store's tree. Both
//! diffs skip subtrees whose CIDs are equal, so equal stores cost one root
//! comparison. Neither the store nor the mirror is changed (only a store
//! synced for the first time is linked to the account, as by `sync`).

use std::path::Path;

use serde::Serialize;

use super::mirror::{self, RemoteHead};
use super::{COLLECTION_PREFIX, SyncError, SyncOptions, SyncState, connect};
use crate::local_repo;
use crate::repo::mst::RecordOp;
use crate::repo::repository::RepoError;

/// Counts of record changes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Changes {
    /// Keys only the newer side has.
    pub created: usize,
    /// Keys whose CID differs.
    pub updated: usize,
    /// Keys only the older side has.
    pub deleted: usize,
}

impl Changes {
    fn count<'a>(ops: impl IntoIterator<Item = &'a RecordOp>) -> Changes {
        let mut c = Changes::default();
        for op in ops {
            match (op.prev, op.cid) {
                (None, Some(_)) => c.created += 1,
                (Some(_), Some(_)) => c.updated += 1,
                (Some(_), None) => c.deleted += 1,
                (None, None) => {}
            }
        }
        c
    }

    /// Whether nothing differs.
    pub fn is_empty(&self) -> bool {
        self.created + self.updated + self.deleted == 0
    }
}

/// What `sync status` found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusReport {
    /// The PDS.
    pub service: String,
    /// The account.
    pub did: String,
    /// The PDS's head commit and rev.
    pub remote_commit: String,
    /// Its rev.
    pub remote_rev: String,
    /// The head the mirror is at (`None`: never pulled).
    pub mirrored: Option<RemoteHead>,
    /// Whether nothing is to push or pull.
    pub in_sync: bool,
    /// Local changes of our collections not on the PDS.
    pub to_push: Changes,
    /// Remote changes (all collections) not in the mirror.
    pub to_pull: Changes,
    /// Bytes downloaded to count `to_pull` (0 when the heads are equal).
    pub car_bytes: usize,
}

/// Compares the store in `data` with the PDS (see the module docs).
pub fn status(data: &Path, opts: &SyncOptions) -> Result<StatusReport, SyncError> {
    let repo = local_repo::open(data)?;
    let mut state = SyncState::load(data, &repo)?;
    let (session, key) = connect(
        &repo,
        opts,
        &mut state,
        std::sync::Arc::new(super::NoProgress),
    )?;
    let (latest, rev) = session.latest_commit()?;
    let old = mirror::mirror_entries(&state);

    let pushed_tree = mirror::mirror_tree(&state.pushed)?;
    let local_diff = pushed_tree.diff(repo.mst()).map_err(RepoError::from)?;
    let to_push = Changes::count(
        local_diff
            .ops
            .iter()
            .filter(|op| op.key.starts_with(COLLECTION_PREFIX)),
    );

    let mirrored_now = state
        .remote
        .as_ref()
        .is_some_and(|h| h.commit == latest.to_string());
    let (to_pull, car_bytes) = if mirrored_now {
        (Changes::default(), 0)
    } else {
        let pulled = mirror::fetch(&session, &key, &state, &repo)?;
        let before = mirror::mirror_tree(&old)?;
        let after = mirror::mirror_tree(&pulled.entries)?;
        let diff = before.diff(&after).map_err(RepoError::from)?;
        (Changes::count(&diff.ops), pulled.car_bytes)
    };
    Ok(StatusReport {
        service: session.service().to_owned(),
        did: session.did().to_owned(),
        remote_commit: latest.to_string(),
        remote_rev: rev,
        in_sync: mirrored_now && to_push.is_empty(),
        mirrored: state.remote.clone(),
        to_push,
        to_pull,
        car_bytes,
    })
}
