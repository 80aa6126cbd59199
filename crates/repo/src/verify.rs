//! Verifying a whole repository from untrusted input: a CAR export (as
//! `com.atproto.sync.getRepo` returns it), or blocks in any
//! [`BlockSource`] under a given commit.
//!
//! What is checked, in this order, stopping at the first problem (each
//! has its own [`VerifyError`] variant):
//!
//! 1. the CAR is well formed (see [`car`](super::car): varints, CIDs,
//!    every block hashes to its CID, size limits);
//! 2. its header has exactly one root, and that root is the commit;
//! 3. the commit block is present, is dag-cbor, and decodes as a strict v3
//!    commit ([`Commit::from_cbor`]);
//! 4. the commit's DID is the expected one, when one is given;
//! 5. the signature verifies against the given key — or, only when the
//!    caller asked for it with [`SignatureCheck::Skip`], it is not checked
//!    and the result says so ([`SignatureStatus::NotChecked`]);
//! 6. the MST under `data` loads from the blocks with every node checked
//!    (hash, canonical DAG-CBOR, shape, key order across the whole tree,
//!    prefix compression, layers, no empty or untrimmed nodes): the walk
//!    visits every node exactly once;
//! 7. every key is a valid repo path (`<NSID>/<record-key>`);
//! 8. every record block is present, hashes to its CID, uses the dag-cbor
//!    codec and decodes as a valid data-model record (a map).
//!
//! Time and memory are linear in the input: each node and each distinct
//! record is decoded once. Nothing panics on any input.
//!
//! Blocks that the commit does not reach are allowed (the CAR spec allows
//! them) and counted in [`VerifiedCar::unreachable_blocks`].

use std::borrow::Cow;
use std::collections::HashSet;
use std::io::Read;

use cid::Cid;
use thiserror::Error;

use super::blocks::{BlockSource, StoreError};
use super::car::{Car, CarError, CarLimits};
use super::commit::{Commit, CommitError};
use super::mst::{Mst, MstError, Visit};
use super::tid::Tid;
use gelstore_crypto::{KeyError, PublicKey, SignatureError};
use gelstore_model::{DAG_CBOR_CODEC, DataModelError, check_record_cbor, cid_for_cbor};

/// How to treat the commit signature. There is no default: a caller that
/// does not check it has to say so, and the result records it.
#[derive(Debug, Clone, Copy)]
pub enum SignatureCheck<'a> {
    /// Verify against this public key.
    Key(&'a PublicKey),
    /// Verify against this `did:key` (for example the `#atproto`
    /// verification method of the account's DID document).
    DidKey(&'a str),
    /// Do not verify; the result reports [`SignatureStatus::NotChecked`].
    Skip,
}

/// Whether the commit signature was verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureStatus {
    /// The signature verified against the key the caller gave.
    Verified,
    /// The caller chose [`SignatureCheck::Skip`]: the signature was not
    /// looked at, so nothing says who made this commit.
    NotChecked,
}

/// What to verify against.
#[derive(Debug, Clone)]
pub struct VerifyOptions<'a> {
    /// The signature check (required).
    pub signature: SignatureCheck<'a>,
    /// The DID the commit must name, if known.
    pub did: Option<&'a str>,
    /// Limits for reading a CAR.
    pub limits: CarLimits,
    /// Record CIDs whose blocks may be absent: the caller verified those
    /// records before and keeps only their CIDs (a replica pulling a
    /// `since` diff). The MST still authenticates each leaf's CID.
    pub known_records: Option<&'a HashSet<Cid>>,
}

impl<'a> VerifyOptions<'a> {
    /// Options with this signature check, any DID, and the default limits.
    pub fn new(signature: SignatureCheck<'a>) -> Self {
        VerifyOptions {
            signature,
            did: None,
            limits: CarLimits::default(),
            known_records: None,
        }
    }

    /// Lets the blocks of these records be absent (see
    /// [`known_records`](Self::known_records)).
    pub fn with_known_records(mut self, known: &'a HashSet<Cid>) -> Self {
        self.known_records = Some(known);
        self
    }

    /// Requires the commit to name `did`.
    pub fn expect_did(mut self, did: &'a str) -> Self {
        self.did = Some(did);
        self
    }

    /// Uses these CAR limits.
    pub fn with_limits(mut self, limits: CarLimits) -> Self {
        self.limits = limits;
        self
    }
}

/// The facts about a verified repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoSummary {
    /// The account DID named by the commit.
    pub did: String,
    /// The commit's revision.
    pub rev: Tid,
    /// The commit's CID.
    pub commit_cid: Cid,
    /// The MST root (the commit's `data`).
    pub data_cid: Cid,
    /// The commit's `prev`, if any (not followed: it need not be present).
    pub prev: Option<Cid>,
    /// Number of records (MST keys).
    pub record_count: usize,
    /// Number of MST nodes.
    pub mst_node_count: usize,
    /// Whether the signature was verified.
    pub signature: SignatureStatus,
}

/// A verified repository: its summary, its commit, and every record key
/// with its CID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedRepo {
    /// The summary.
    pub summary: RepoSummary,
    /// The decoded commit.
    pub commit: Commit,
    /// `(collection/rkey, record CID)` for every record, in key order.
    pub records: Vec<(String, Cid)>,
}

/// A verified repository CAR, with its blocks (for importing them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedCar {
    /// What was verified.
    pub repo: VerifiedRepo,
    /// The CAR's blocks, each checked against its CID.
    pub car: Car,
    /// Blocks in the CAR that the commit does not reach (allowed, and
    /// ignored).
    pub unreachable_blocks: usize,
}

/// Why a repository (or a record proof, see [`proof`](super::proof)) was
/// rejected.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The CAR itself is malformed, or over a limit.
    #[error("bad CAR: {0}")]
    Car(#[from] CarError),

    /// A repository CAR has exactly one root: the commit.
    #[error("a repository CAR must have exactly one root (the commit), found {count}")]
    RootCount {
        /// How many roots the header lists.
        count: usize,
    },

    /// The root does not name a dag-cbor block, so it cannot be a commit.
    #[error("the root {cid} is not a dag-cbor block (codec 0x{codec:x}), so not a commit")]
    RootNotDagCbor {
        /// The root.
        cid: Box<Cid>,
        /// Its codec.
        codec: u64,
    },

    /// The commit block is not among the blocks.
    #[error("the commit block {cid} is missing")]
    MissingCommit {
        /// The commit's CID.
        cid: Box<Cid>,
    },

    /// The bytes stored under the commit's CID do not hash to it (only
    /// possible with a [`BlockSource`] that does not check).
    #[error("the commit block does not match its CID {cid}")]
    CommitCidMismatch {
        /// The commit's CID.
        cid: Box<Cid>,
    },

    /// The commit block is not a valid v3 commit.
    #[error("invalid commit {cid}: {source}")]
    Commit {
        /// The commit's CID.
        cid: Box<Cid>,
        /// What is wrong with it.
        source: CommitError,
    },

    /// The commit names another account.
    #[error("the commit is for {found:?}, expected {expected:?}")]
    DidMismatch {
        /// The DID asked for.
        expected: String,
        /// The DID in the commit.
        found: String,
    },

    /// The `did:key` given to verify against could not be parsed.
    #[error("bad verification key: {0}")]
    Key(#[from] KeyError),

    /// The commit signature is malformed or does not match the key.
    #[error("commit {cid}: bad signature: {source}")]
    BadSignature {
        /// The commit's CID.
        cid: Box<Cid>,
        /// Why it was rejected.
        source: SignatureError,
    },

    /// The MST is malformed, or a node block is missing
    /// ([`MstError::MissingBlock`]).
    #[error("bad MST: {0}")]
    Mst(#[from] MstError),

    /// A key that is not `<collection NSID>/<record key>`.
    #[error("invalid repo path {key:?}: {reason}")]
    InvalidPath {
        /// The key (at most 100 characters).
        key: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A record block the MST points to is not among the blocks.
    #[error("record block {cid} for {key:?} is missing")]
    MissingRecord {
        /// The key.
        key: String,
        /// The record's CID.
        cid: Box<Cid>,
    },

    /// The bytes stored under a record's CID do not hash to it (only
    /// possible with a [`BlockSource`] that does not check).
    #[error("record block for {key:?} does not match its CID {cid}")]
    RecordCidMismatch {
        /// The key.
        key: String,
        /// The record's CID.
        cid: Box<Cid>,
    },

    /// A record CID with a codec other than dag-cbor (a raw blob CID, say).
    #[error("record {cid} for {key:?} is not a dag-cbor block (codec 0x{codec:x})")]
    RecordCodec {
        /// The key.
        key: String,
        /// The record's CID.
        cid: Box<Cid>,
        /// Its codec.
        codec: u64,
    },

    /// A record block that is not canonical DAG-CBOR, or not a data-model
    /// map.
    #[error("record {cid} for {key:?} is not a valid record: {source}")]
    BadRecord {
        /// The key.
        key: String,
        /// The record's CID.
        cid: Box<Cid>,
        /// What the decoder found.
        source: DataModelError,
    },

    /// The block source failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Reads and verifies a repository CAR from untrusted bytes.
pub fn verify_repo_car(bytes: &[u8], opts: &VerifyOptions<'_>) -> Result<VerifiedCar, VerifyError> {
    verified_car(Car::from_slice_with_limits(bytes, opts.limits)?, opts)
}

/// Reads a repository CAR from a stream of untrusted bytes, to its end,
/// and verifies it. Hand it a `BufReader` for a file or socket.
pub fn verify_repo_car_from_reader<R: Read>(
    reader: R,
    opts: &VerifyOptions<'_>,
) -> Result<VerifiedCar, VerifyError> {
    verified_car(Car::from_reader(reader, opts.limits)?, opts)
}

fn verified_car(car: Car, opts: &VerifyOptions<'_>) -> Result<VerifiedCar, VerifyError> {
    let root = single_root(&car.roots)?;
    let (commit, signature) = verified_commit(&car, root, opts)?;
    let mut reachable: foldhash::HashSet<Cid> = HashSet::from_iter([root]);
    let repo = verify_tree(
        &car,
        root,
        commit,
        signature,
        opts.known_records,
        |reached| {
            let (Reached::Node(cid) | Reached::Record(cid)) = reached;
            reachable.insert(cid);
        },
    )?;
    let unreachable_blocks = car.blocks.len().saturating_sub(reachable.len());
    Ok(VerifiedCar {
        repo,
        car,
        unreachable_blocks,
    })
}

/// The one root of a repository CAR (or of a record proof).
pub fn single_root(roots: &[Cid]) -> Result<Cid, VerifyError> {
    match roots {
        [root] => Ok(*root),
        _ => Err(VerifyError::RootCount { count: roots.len() }),
    }
}

/// Verifies the repository under the commit `commit_cid`, reading blocks
/// from `blocks` (which need not check hashes: this does). `opts.limits`
/// is not used.
pub fn verify_repo(
    blocks: &impl BlockSource,
    commit_cid: Cid,
    opts: &VerifyOptions<'_>,
) -> Result<VerifiedRepo, VerifyError> {
    let (commit, signature) = verified_commit(blocks, commit_cid, opts)?;
    verify_tree(
        blocks,
        commit_cid,
        commit,
        signature,
        opts.known_records,
        |_| {},
    )
}

/// A block the verifying walk reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reached {
    /// An MST node (each once, in walk order).
    Node(Cid),
    /// The record under a key (once per key, in key order, so twice for
    /// a record under two keys).
    Record(Cid),
}

/// Steps 6 to 8 for a commit [`verified_commit`] accepted: the tree and
/// its records (absent record blocks are allowed for `known_records`, see
/// [`VerifyOptions::known_records`]). `reached` hears of every block as the walk reaches it,
/// before the records among them are checked: what it does with them
/// stands only if this returns `Ok`.
pub(crate) fn verify_tree(
    blocks: &impl BlockSource,
    commit_cid: Cid,
    commit: Commit,
    signature: SignatureStatus,
    known_records: Option<&HashSet<Cid>>,
    mut reached: impl FnMut(Reached),
) -> Result<VerifiedRepo, VerifyError> {
    let mst = Mst::load(blocks, commit.data())?;
    let mut records = Vec::new();
    let mut nodes = 0;
    let mut checked = foldhash::HashSet::default();
    // Record blocks are checked in batches on every core, each batch once
    // the walk has passed it; an error of the walk is reported only if no
    // record before it fails.
    let mut to_check: Vec<(usize, Cow<'_, [u8]>)> = Vec::new();
    let mut walked = Ok(());
    for visit in mst.walk_once() {
        let visit = match visit {
            Ok(visit) => visit,
            Err(e) => {
                walked = Err(VerifyError::from(e));
                break;
            }
        };
        match visit {
            Visit::Node { cid, .. } => {
                nodes += 1;
                reached(Reached::Node(cid));
            }
            Visit::Leaf { key, value } => {
                if let Err(e) = check_repo_path(&key) {
                    walked = Err(e);
                    break;
                }
                if checked.insert(value) {
                    match blocks.get_cow(&value) {
                        Ok(Some(bytes)) => {
                            to_check.push((records.len(), bytes));
                            if to_check.len() == CHECK_BATCH {
                                records.push((key, value));
                                reached(Reached::Record(value));
                                check_record_blocks(&records, &to_check, blocks.hashes_checked())?;
                                to_check.clear();
                                continue;
                            }
                        }
                        Ok(None) if known_records.is_some_and(|k| k.contains(&value)) => {}
                        Ok(None) => {
                            walked = Err(VerifyError::MissingRecord {
                                key: shorten(&key),
                                cid: Box::new(value),
                            });
                            break;
                        }
                        Err(e) => {
                            walked = Err(e.into());
                            break;
                        }
                    }
                }
                records.push((key, value));
                reached(Reached::Record(value));
            }
        }
    }
    check_record_blocks(&records, &to_check, blocks.hashes_checked())?;
    walked?;
    let summary = RepoSummary {
        did: commit.did().to_owned(),
        rev: commit.rev(),
        commit_cid,
        data_cid: commit.data(),
        prev: commit.prev(),
        record_count: records.len(),
        mst_node_count: nodes,
        signature,
    };
    Ok(VerifiedRepo {
        summary,
        commit,
        records,
    })
}

/// Reads, decodes and checks the commit (steps 3 to 5 of the module docs).
pub fn verified_commit(
    blocks: &impl BlockSource,
    cid: Cid,
    opts: &VerifyOptions<'_>,
) -> Result<(Commit, SignatureStatus), VerifyError> {
    if cid.codec() != DAG_CBOR_CODEC {
        return Err(VerifyError::RootNotDagCbor {
            cid: Box::new(cid),
            codec: cid.codec(),
        });
    }
    let bytes = blocks
        .get(&cid)?
        .ok_or(VerifyError::MissingCommit { cid: Box::new(cid) })?;
    if cid_for_cbor(&bytes) != cid {
        return Err(VerifyError::CommitCidMismatch { cid: Box::new(cid) });
    }
    let commit = Commit::from_cbor(&bytes).map_err(|source| VerifyError::Commit {
        cid: Box::new(cid),
        source,
    })?;
    if let Some(expected) = opts.did
        && commit.did() != expected
    {
        return Err(VerifyError::DidMismatch {
            expected: shorten(expected),
            found: shorten(commit.did()),
        });
    }
    let key = match opts.signature {
        SignatureCheck::Skip => return Ok((commit, SignatureStatus::NotChecked)),
        SignatureCheck::Key(key) => *key,
        SignatureCheck::DidKey(did_key) => PublicKey::from_did_key(did_key)?,
    };
    match commit.verify(&key) {
        Ok(()) => Ok((commit, SignatureStatus::Verified)),
        Err(CommitError::Signature(source)) => Err(VerifyError::BadSignature {
            cid: Box::new(cid),
            source,
        }),
        Err(CommitError::Key(e)) => Err(VerifyError::Key(e)),
        Err(source) => Err(VerifyError::Commit {
            cid: Box::new(cid),
            source,
        }),
    }
}

/// Checks that an MST key is a valid repo path: exactly one `/`, a valid
/// NSID before it and a valid record key after it
/// (<https://atproto.com/specs/repository#repo-data-structure-v3>).
pub fn check_repo_path(key: &str) -> Result<(), VerifyError> {
    use gelstore_lexicon::syntax::{check_nsid, check_record_key};
    let invalid = |reason: String| VerifyError::InvalidPath {
        key: shorten(key),
        reason,
    };
    let Some((collection, rkey)) = key.split_once('/') else {
        return Err(invalid("has no '/'".to_owned()));
    };
    if rkey.contains('/') {
        return Err(invalid("has more than one '/'".to_owned()));
    }
    check_nsid(collection).map_err(|e| invalid(format!("collection: {}", e.reason)))?;
    check_record_key(rkey).map_err(|e| invalid(format!("record key: {}", e.reason)))?;
    Ok(())
}

/// Record blocks held for checking at a time.
const CHECK_BATCH: usize = 4096;

/// Checks the record blocks `to_check` (each the index of its record in
/// `records`, and its bytes) on every core, in contiguous runs, and gives
/// the error of the first one in `records` order that fails.
fn check_record_blocks(
    records: &[(String, Cid)],
    to_check: &[(usize, Cow<'_, [u8]>)],
    hashes_checked: bool,
) -> Result<(), VerifyError> {
    let check = |run: &[(usize, Cow<'_, [u8]>)]| {
        run.iter().find_map(|(index, bytes)| {
            let (key, cid) = &records[*index];
            check_record_bytes(key, cid, bytes, hashes_checked)
                .err()
                .map(|e| (*index, e))
        })
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Below a few hundred records a thread costs more than it saves.
    if threads < 2 || to_check.len() < 512 {
        return check(to_check).map_or(Ok(()), |(_, e)| Err(e));
    }
    let run = to_check.len().div_ceil(threads);
    let first_failure = std::thread::scope(|scope| {
        let workers: Vec<_> = to_check
            .chunks(run)
            .map(|chunk| scope.spawn(move || check(chunk)))
            .collect();
        workers
            .into_iter()
            .filter_map(|worker| {
                worker
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .min_by_key(|(index, _)| *index)
    });
    first_failure.map_or(Ok(()), |(_, e)| Err(e))
}

/// Checks a record block found under `cid` for `key` (step 8).
pub(crate) fn check_record_block(key: &str, cid: &Cid, bytes: &[u8]) -> Result<(), VerifyError> {
    check_record_bytes(key, cid, bytes, false)
}

/// [`check_record_block`]; with `hashes_checked`, `bytes` are known to hash
/// to `cid` (read from a CAR, which checks each block).
fn check_record_bytes(
    key: &str,
    cid: &Cid,
    bytes: &[u8],
    hashes_checked: bool,
) -> Result<(), VerifyError> {
    if cid.codec() != DAG_CBOR_CODEC {
        return Err(VerifyError::RecordCodec {
            key: shorten(key),
            cid: Box::new(*cid),
            codec: cid.codec(),
        });
    }
    if !hashes_checked && cid_for_cbor(bytes) != *cid {
        return Err(VerifyError::RecordCidMismatch {
            key: shorten(key),
            cid: Box::new(*cid),
        });
    }
    let bad = |source| VerifyError::BadRecord {
        key: shorten(key),
        cid: Box::new(*cid),
        source,
    };
    check_record_cbor(bytes).map_err(bad)
}

/// A string for an error message: at most 100 characters.
pub(crate) fn shorten(s: &str) -> String {
    const MAX: usize = 100;
    match s.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}...", &s[..cut]),
        None => s.to_owned(),
    }
}
