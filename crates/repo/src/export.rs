//! Writing a whole repository as a CAR (what `com.atproto.sync.getRepo`
//! returns), from any [`BlockSource`] and a commit CID.
//!
//! Block order is streamable: the header's one root is the commit; the
//! commit block comes first; then a preorder walk of the MST, each node
//! before its subtrees, with each record block right after the key that
//! points to it (so records come in key order, each after its node). A
//! reader can check everything as it goes, holding only the current path.
//! A record whose CID was already written (the same content under two
//! keys) is written once.
//!
//! These functions read only what they write; they do not verify the
//! signature (the source is trusted storage). To check a CAR, see
//! [`verify`](super::verify).

use std::io::Write;

use cid::Cid;
use thiserror::Error;

use super::blocks::{BlockSource, StoreError};
use super::car::{CarError, CarWriter};
use super::commit::{Commit, CommitError};
use super::mst::{Mst, MstError, Visit};

/// What to do about a record block the source does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MissingRecords {
    /// Fail with [`ExportError::MissingRecord`] (the default: a full
    /// export has every record).
    #[default]
    Fail,
    /// Leave the record out and count it (a replica that mirrors the keys
    /// and CIDs of records it does not hold; the result is a partial CAR).
    Skip,
}

/// Options for an export.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExportOptions {
    /// What to do about missing record blocks.
    pub missing_records: MissingRecords,
}

/// What an export wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportStats {
    /// The commit (the CAR's root).
    pub commit_cid: Cid,
    /// The MST root.
    pub data_cid: Cid,
    /// Number of MST nodes written.
    pub mst_nodes: usize,
    /// Number of keys in the MST.
    pub records: usize,
    /// Number of distinct record blocks written.
    pub record_blocks: usize,
    /// Number of records left out ([`MissingRecords::Skip`]).
    pub missing_records: usize,
    /// Bytes written (header included).
    pub bytes: u64,
}

/// Why an export (or building a record proof) failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ExportError {
    /// The block source failed.
    #[error(transparent)]
    Store(#[from] StoreError),

    /// The commit block is not in the source.
    #[error("commit block {cid} is missing")]
    MissingCommit {
        /// The commit's CID.
        cid: Box<Cid>,
    },

    /// The commit block does not decode.
    #[error("commit {cid} is invalid: {source}")]
    Commit {
        /// The commit's CID.
        cid: Box<Cid>,
        /// What is wrong with it.
        source: CommitError,
    },

    /// An MST node is missing or malformed.
    #[error("MST: {0}")]
    Mst(#[from] MstError),

    /// A record block is not in the source (with [`MissingRecords::Fail`]).
    #[error("record block {cid} for {key:?} is missing")]
    MissingRecord {
        /// The key.
        key: String,
        /// The record's CID.
        cid: Box<Cid>,
    },

    /// Writing the CAR failed.
    #[error("writing the CAR: {0}")]
    Car(#[from] CarError),
}

/// Writes the repository under `commit_cid` as a CAR to `out`, failing on
/// any missing block. Returns the writer and what was written.
pub fn export_repo<S: BlockSource, W: Write>(
    source: &S,
    commit_cid: Cid,
    out: W,
) -> Result<(W, ExportStats), ExportError> {
    export_repo_with(source, commit_cid, out, ExportOptions::default())
}

/// [`export_repo`] into a new byte vector.
pub fn export_repo_to_vec<S: BlockSource>(
    source: &S,
    commit_cid: Cid,
) -> Result<Vec<u8>, ExportError> {
    export_repo(source, commit_cid, Vec::new()).map(|(bytes, _)| bytes)
}

/// [`export_repo`] with options.
pub fn export_repo_with<S: BlockSource, W: Write>(
    source: &S,
    commit_cid: Cid,
    out: W,
    opts: ExportOptions,
) -> Result<(W, ExportStats), ExportError> {
    let mut car = CarWriter::new(out, &[commit_cid])?;
    let mut stats = repo_blocks(source, commit_cid, opts, |cid, bytes| {
        car.write_block(cid, bytes).map_err(ExportError::from)
    })?;
    stats.bytes = car.bytes_written();
    Ok((car.finish()?, stats))
}

/// Hands every block of the repository under `commit_cid` to `emit`, in
/// the streamable order of the module docs (commit, then MST nodes and
/// records in preorder). Use it to stream a repository anywhere a CAR
/// writer does not fit; [`ExportStats::bytes`] is left at 0.
pub fn repo_blocks<S: BlockSource>(
    source: &S,
    commit_cid: Cid,
    opts: ExportOptions,
    mut emit: impl FnMut(&Cid, &[u8]) -> Result<(), ExportError>,
) -> Result<ExportStats, ExportError> {
    let (commit, bytes) = read_commit(source, commit_cid)?;
    emit(&commit_cid, &bytes)?;
    let mst = Mst::load(source, commit.data())?;
    let mut stats = ExportStats {
        commit_cid,
        data_cid: commit.data(),
        mst_nodes: 0,
        records: 0,
        record_blocks: 0,
        missing_records: 0,
        bytes: 0,
    };
    // CIDs are hashes already: a fast seeded hasher does (SipHash showed
    // in the profile of an export).
    let mut written = foldhash::HashSet::default();
    for visit in mst.walk_once() {
        match visit? {
            Visit::Node { cid, bytes } => {
                stats.mst_nodes += 1;
                emit(&cid, &bytes)?;
            }
            Visit::Leaf { key, value } => {
                stats.records += 1;
                if !written.insert(value) {
                    continue;
                }
                match source.get(&value)? {
                    Some(bytes) => {
                        stats.record_blocks += 1;
                        emit(&value, &bytes)?;
                    }
                    None if opts.missing_records == MissingRecords::Skip => {
                        stats.missing_records += 1;
                    }
                    None => {
                        return Err(ExportError::MissingRecord {
                            key,
                            cid: Box::new(value),
                        });
                    }
                }
            }
        }
    }
    Ok(stats)
}

/// The commit block and its decoded form.
pub(crate) fn read_commit(
    source: &impl BlockSource,
    cid: Cid,
) -> Result<(Commit, Vec<u8>), ExportError> {
    let bytes = source
        .get(&cid)?
        .ok_or(ExportError::MissingCommit { cid: Box::new(cid) })?;
    let commit = Commit::from_cbor(&bytes).map_err(|source| ExportError::Commit {
        cid: Box::new(cid),
        source,
    })?;
    Ok((commit, bytes))
}
