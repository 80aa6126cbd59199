//! Record proofs: a small CAR that shows, under a signed commit, the value
//! of one key (or several) — or that it is absent. This is what
//! `com.atproto.sync.getRecord` returns.
//!
//! A proof CAR has one root, the commit, and holds: the commit block; the
//! MST nodes on the search path of each key, from the root down; and the
//! record block of each key that is present. Absence is shown by the same
//! path: it ends at the lowest node whose key range holds the key, and the
//! key is not there.
//!
//! Verifying one ([`verify_record_proof`]) checks the CAR, the root, the
//! commit and its signature exactly as [`verify`](super::verify) does,
//! then looks the key up in the partial tree (every node on the way is
//! checked: hash, shape, order, layers). A node the lookup needs but the
//! proof lacks is an error
//! ([`MstError::MissingBlock`](super::mst::MstError::MissingBlock)), never
//! "absent".

use std::collections::HashSet;
use std::io::Write;

use cid::Cid;

use super::blocks::BlockSource;
use super::car::{Car, CarWriter};
use super::export::{ExportError, read_commit};
use super::mst::Mst;
use super::tid::Tid;
use super::verify::{
    SignatureStatus, VerifyError, VerifyOptions, check_record_block, check_repo_path, single_root,
    verified_commit,
};

/// Writes a proof CAR for `keys` under the commit `commit_cid` to `out`.
///
/// Keys that are absent from the tree get their proof of absence. Fails
/// if a block the proof needs is not in the source (a present key's
/// record included).
pub fn write_record_proof<S: BlockSource, W: Write>(
    source: &S,
    commit_cid: Cid,
    keys: &[&str],
    out: W,
) -> Result<W, ExportError> {
    let (commit, commit_bytes) = read_commit(source, commit_cid)?;
    let mst = Mst::load(source, commit.data())?;
    let mut car = CarWriter::new(out, &[commit_cid])?;
    car.write_block(&commit_cid, &commit_bytes)?;
    let mut written = HashSet::from([commit_cid]);
    for key in keys {
        let mut path: Vec<(Cid, Vec<u8>)> = Vec::new();
        mst.search_path_proof(key, &mut path)?;
        for (cid, bytes) in path {
            if written.insert(cid) {
                car.write_block(&cid, &bytes)?;
            }
        }
        if let Some(value) = mst.get(key)?
            && written.insert(value)
        {
            let bytes = source
                .get(&value)?
                .ok_or_else(|| ExportError::MissingRecord {
                    key: (*key).to_owned(),
                    cid: Box::new(value),
                })?;
            car.write_block(&value, &bytes)?;
        }
    }
    Ok(car.finish()?)
}

/// [`write_record_proof`] for one key, into a new byte vector.
pub fn record_proof<S: BlockSource>(
    source: &S,
    commit_cid: Cid,
    key: &str,
) -> Result<Vec<u8>, ExportError> {
    write_record_proof(source, commit_cid, &[key], Vec::new())
}

/// What a verified record proof shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvenRecord {
    /// The account DID named by the commit.
    pub did: String,
    /// The commit's revision.
    pub rev: Tid,
    /// The commit's CID (the proof's root).
    pub commit_cid: Cid,
    /// The MST root.
    pub data_cid: Cid,
    /// Whether the commit signature was verified.
    pub signature: SignatureStatus,
    /// The key asked about.
    pub key: String,
    /// The record's CID, or `None` when the proof shows the key is absent.
    pub cid: Option<Cid>,
    /// The record block, when the key is present and the proof carries it
    /// (checked: it hashes to `cid` and is a valid data-model record).
    pub record: Option<Vec<u8>>,
}

/// Verifies a proof CAR from untrusted bytes for `key` (a repo path,
/// `collection/rkey`).
pub fn verify_record_proof(
    car: &[u8],
    key: &str,
    opts: &VerifyOptions<'_>,
) -> Result<ProvenRecord, VerifyError> {
    let car = Car::from_slice_with_limits(car, opts.limits)?;
    verify_loaded_proof(&car, key, opts)
}

/// Verifies a proof whose CAR was already read.
pub fn verify_loaded_proof(
    car: &Car,
    key: &str,
    opts: &VerifyOptions<'_>,
) -> Result<ProvenRecord, VerifyError> {
    check_repo_path(key)?;
    let commit_cid = single_root(&car.roots)?;
    let (commit, signature) = verified_commit(car, commit_cid, opts)?;
    // Only the nodes the proof holds: a node it lacks on the path is a
    // MissingBlock error, not absence.
    let cid = Mst::load(car, commit.data())?.get(key)?;
    let record = match cid {
        Some(cid) => match car.get(&cid) {
            Some(bytes) => {
                check_record_block(key, &cid, bytes)?;
                Some(bytes.to_vec())
            }
            None => None,
        },
        None => None,
    };
    Ok(ProvenRecord {
        did: commit.did().to_owned(),
        rev: commit.rev(),
        commit_cid,
        data_cid: commit.data(),
        signature,
        key: key.to_owned(),
        cid,
        record,
    })
}
