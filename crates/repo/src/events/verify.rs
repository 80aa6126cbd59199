//! The consumer's inductive check of a `#commit` event (sync v1.1): given
//! the MST root a consumer holds for the repository (the previous commit's
//! `data`), the event alone proves the new root.
//!
//! Checked, in this order, each failure with its own [`VerifyEventError`]:
//!
//! 1. the event is not `tooBig` (those carry no ops; fetch the repo);
//! 2. `prevData` is the root the consumer holds (absent only for the first
//!    commit of a repository, which must have no ops);
//! 3. `blocks` is a well-formed CAR (every block hashes to its CID) whose
//!    one root is the event's `commit`, and holds the commit block;
//! 4. the commit decodes, is by `repo`, has the event's `rev`, and its
//!    signature verifies with the given key;
//! 5. every op is well formed: a valid repo path, at most one op per path,
//!    `prev` given for updates and deletes; the record block of every
//!    create and update is in `blocks` and is a valid record;
//! 6. the MST under the commit's `data`, loaded from `blocks` alone, holds
//!    each op's new value, and inverting every op gives back `prevData`
//!    (a missing node is [`VerifyEventError::Inversion`] with the MST's
//!    `MissingBlock`).

use std::collections::BTreeSet;

use cid::Cid;

use super::frame::{CommitEvent, OpAction};
use crate::car::{Car, CarError};
use crate::commit::{Commit, CommitError};
use crate::mst::{Mst, MstError, RecordOp};
use crate::verify::{check_record_block, check_repo_path};
use gelstore_crypto::PublicKey;

/// What a verified `#commit` establishes: the consumer's new state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedCommit {
    /// The commit's CID.
    pub commit: Cid,
    /// Its rev.
    pub rev: String,
    /// Its MST root: the `prevData` the next event must carry.
    pub data: Cid,
}

/// Why a `#commit` event does not verify.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyEventError {
    /// A `tooBig` event carries no ops and cannot be checked inductively.
    #[error("the commit is marked tooBig: fetch the repository instead")]
    TooBig,
    /// The event's `prevData` is not the root the consumer holds.
    #[error("prevData is {}, but the consumer holds {expected}",
        found.as_ref().map_or("absent".to_owned(), |c| c.to_string()))]
    PrevDataMismatch {
        /// The root the consumer holds.
        expected: Box<Cid>,
        /// What the event says.
        found: Option<Box<Cid>>,
    },
    /// The event continues from a root, but the consumer gave none (to
    /// start a chain mid-stream, pass the event's own `prevData`).
    #[error("the event continues from root {found}, but no previous root was given")]
    UnexpectedPrevData {
        /// The event's `prevData`.
        found: Box<Cid>,
    },
    /// An event without `prevData` that is not a repository's first commit.
    #[error("the event has no prevData but is not a first commit ({reason})")]
    MissingPrevData {
        /// Why it is not a first commit.
        reason: &'static str,
    },
    /// `blocks` is not a well-formed CAR (a flipped byte lands here: the
    /// block no longer hashes to its CID).
    #[error("blocks is not a valid CAR: {0}")]
    BadBlocks(#[source] CarError),
    /// The CAR's roots are not exactly the event's commit.
    #[error("the blocks CAR's roots are {found:?}, not the commit {commit}")]
    WrongCarRoot {
        /// The event's commit.
        commit: Box<Cid>,
        /// The CAR's roots.
        found: Vec<Cid>,
    },
    /// The commit block is not in `blocks`.
    #[error("the commit block {0} is not in blocks")]
    MissingCommitBlock(Box<Cid>),
    /// The commit block does not decode as a v3 commit.
    #[error("the commit block is malformed: {0}")]
    BadCommit(#[source] CommitError),
    /// The commit is by another DID than the event's `repo`.
    #[error("the commit is by {found}, the event is for {repo}")]
    RepoMismatch {
        /// The event's `repo`.
        repo: String,
        /// The commit's DID.
        found: String,
    },
    /// The commit's rev is not the event's `rev`.
    #[error("the commit's rev is {found}, the event says {rev}")]
    RevMismatch {
        /// The event's `rev`.
        rev: String,
        /// The commit's rev.
        found: String,
    },
    /// The signature does not verify with the given key.
    #[error("the commit signature does not verify: {0}")]
    BadSignature(#[source] CommitError),
    /// An op is malformed (bad path, repeated path, missing `prev`).
    #[error("op on {path}: {reason}")]
    BadOp {
        /// The op's path (shortened).
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The record block of a create or update is not in `blocks`.
    #[error("the record block {cid} of {path} is not in blocks")]
    MissingRecordBlock {
        /// The op's path.
        path: String,
        /// The record CID.
        cid: Box<Cid>,
    },
    /// A record block is not a valid data-model record.
    #[error("the record block of {path} is not a valid record: {reason}")]
    BadRecord {
        /// The op's path.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The ops could not be inverted on the tree from `blocks` (a missing
    /// or malformed node, or a tree that does not hold an op's new value).
    #[error("inverting the ops failed: {0}")]
    Inversion(#[source] MstError),
    /// Inverting the ops gave another root than `prevData`.
    #[error("inverting the ops gives root {found}, not prevData {expected}")]
    InvertedRootMismatch {
        /// `prevData`.
        expected: Box<Cid>,
        /// The root the inversion gave.
        found: Box<Cid>,
    },
}

/// Checks `event` against `prev_data`, the MST root the consumer holds for
/// the repository (`None` before its first commit), and the repository's
/// signing key. See the module docs for what is checked. On success the
/// returned [`VerifiedCommit::data`] is the `prev_data` for the next event.
pub fn verify_commit(
    event: &CommitEvent,
    prev_data: Option<Cid>,
    key: &PublicKey,
) -> Result<VerifiedCommit, VerifyEventError> {
    use VerifyEventError as E;
    if event.too_big {
        return Err(E::TooBig);
    }
    match (prev_data, event.prev_data) {
        (Some(expected), found) if found != Some(expected) => {
            return Err(E::PrevDataMismatch {
                expected: Box::new(expected),
                found: found.map(Box::new),
            });
        }
        (None, Some(found)) => {
            return Err(E::UnexpectedPrevData {
                found: Box::new(found),
            });
        }
        (None, None) if !event.ops.is_empty() => {
            return Err(E::MissingPrevData {
                reason: "it has ops",
            });
        }
        (None, None) if event.since.is_some() => {
            return Err(E::MissingPrevData {
                reason: "it has a since rev",
            });
        }
        _ => {}
    }

    let car = Car::from_slice(&event.blocks).map_err(E::BadBlocks)?;
    if car.roots != [event.commit] {
        return Err(E::WrongCarRoot {
            commit: Box::new(event.commit),
            found: car.roots.clone(),
        });
    }
    let commit_block = car
        .get(&event.commit)
        .ok_or_else(|| E::MissingCommitBlock(Box::new(event.commit)))?;
    let commit = Commit::from_cbor(commit_block).map_err(E::BadCommit)?;
    if commit.did() != event.repo {
        return Err(E::RepoMismatch {
            repo: event.repo.clone(),
            found: commit.did().to_owned(),
        });
    }
    if commit.rev().to_string() != event.rev {
        return Err(E::RevMismatch {
            rev: event.rev.clone(),
            found: commit.rev().to_string(),
        });
    }
    commit.verify(key).map_err(E::BadSignature)?;

    let ops = check_ops(event, &car)?;
    let mut tree = Mst::load(&car, commit.data()).map_err(E::Inversion)?;
    for op in &ops {
        tree.invert(op).map_err(E::Inversion)?;
    }
    if let Some(expected) = prev_data {
        let found = tree.root();
        if found != expected {
            return Err(E::InvertedRootMismatch {
                expected: Box::new(expected),
                found: Box::new(found),
            });
        }
    }
    Ok(VerifiedCommit {
        commit: event.commit,
        rev: event.rev.clone(),
        data: commit.data(),
    })
}

/// The event's ops as MST operations, after the per-op checks.
fn check_ops(event: &CommitEvent, car: &Car) -> Result<Vec<RecordOp>, VerifyEventError> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(event.ops.len());
    for op in &event.ops {
        let short: String = op.path.chars().take(200).collect();
        let bad = |reason: &str| VerifyEventError::BadOp {
            path: short.clone(),
            reason: reason.to_owned(),
        };
        check_repo_path(&op.path).map_err(|e| bad(&e.to_string()))?;
        if !seen.insert(op.path.as_str()) {
            return Err(bad("more than one op on this path"));
        }
        match (op.action, op.prev, op.cid) {
            (OpAction::Create, None, Some(_)) | (OpAction::Update, Some(_), Some(_)) => {}
            (OpAction::Delete, Some(_), None) => {}
            (OpAction::Create, ..) => return Err(bad("a create needs a cid and no prev")),
            (OpAction::Update, None, _) | (OpAction::Delete, None, _) => {
                return Err(bad("an update or delete without prev"));
            }
            (OpAction::Update, ..) => return Err(bad("an update without a cid")),
            (OpAction::Delete, ..) => return Err(bad("a delete with a cid")),
        }
        if let Some(cid) = op.cid {
            let block = car
                .get(&cid)
                .ok_or_else(|| VerifyEventError::MissingRecordBlock {
                    path: short.clone(),
                    cid: Box::new(cid),
                })?;
            // The repository verifier's record check: a DAG-CBOR CID that
            // is the block's hash, a record of the data model.
            check_record_block(&op.path, &cid, block).map_err(|e| VerifyEventError::BadRecord {
                path: short.clone(),
                reason: e.to_string(),
            })?;
        }
        out.push(RecordOp {
            key: op.path.clone(),
            prev: op.prev,
            cid: op.cid,
        });
    }
    Ok(out)
}
