//! Importing a repository CAR into an empty store.
//!
//! The CAR may list its blocks in any order, repeat them, and carry blocks
//! the commit does not reach. It is read whole and its commit checked (one
//! root, the commit, the DID, the signature) before anything is written;
//! then the tree is walked and verified ([`verify_tree`]: every MST node,
//! every repo path, every record block) while, on a second thread, the
//! blocks the walk reaches go into one engine write as they are reached,
//! which commits only if the whole tree verified. Only reachable blocks are
//! stored, with their reference counts and the commit's rev as their
//! creation rev.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use cid::Cid;

use super::refs::{Kind, Loc, RefRow, block_row_copied};
use super::{
    FORMAT, META_DID, META_FORMAT, META_HEAD, META_RECORDS, RepoError, Repository, is_initialized,
    store_path, with_path,
};
use crate::car::{Car, CarLimits};
use crate::commit::Commit;
use crate::key_file;
use crate::tid::Tid;
use crate::verify::{
    Reached, RepoSummary, SignatureCheck, SignatureStatus, VerifiedRepo, VerifyError,
    VerifyOptions, shorten, single_root, verified_commit, verify_tree,
};
use gelstore_crypto::{PublicKey, SigningKey};
use gelstore_store::{Batch, Engine, EngineError, Part, PartsEnd, Table, open_store};

/// How to check a CAR before importing it.
#[derive(Debug, Clone, Default)]
pub struct ImportOptions<'a> {
    /// The DID the commit must name, if known.
    pub did: Option<&'a str>,
    /// The key the commit must be signed with. Without it, the commit's DID
    /// must be a did:key, whose key is used.
    pub key: Option<&'a PublicKey>,
    /// Limits for reading the CAR (default: [`CarLimits::default`]).
    pub limits: Option<CarLimits>,
}

/// What an import stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportStats {
    /// Records in the repository.
    pub records: u64,
    /// Blocks stored (commit, MST nodes, distinct records).
    pub blocks: usize,
    /// Blocks of the CAR that the commit does not reach (not stored).
    pub unreachable_blocks: usize,
}

/// A CAR that passed verification.
pub struct VerifiedImport {
    repo: VerifiedRepo,
}

impl VerifiedImport {
    /// What was verified.
    pub fn summary(&self) -> &RepoSummary {
        &self.repo.summary
    }
}

/// Reads a repository CAR and verifies it in full (see the module docs).
/// The signature is checked against `options.key`, or else against the
/// commit's DID when that is a did:key; any other DID needs a key
/// ([`RepoError::NoVerificationKey`]).
pub fn verify_car(
    reader: impl Read,
    options: &ImportOptions<'_>,
) -> Result<VerifiedImport, RepoError> {
    let CheckedCommit {
        car,
        root,
        commit,
        signature,
    } = read_and_check_commit(reader, options)?;
    let repo = verify_tree(&car, root, commit, signature, None, |_| {})?;
    Ok(VerifiedImport { repo })
}

/// A CAR read whole (every block's hash checked) whose commit passed its
/// checks: what is left to verify is the tree under it.
pub(super) struct CheckedCommit {
    car: Car,
    root: Cid,
    commit: Commit,
    signature: SignatureStatus,
}

impl CheckedCommit {
    pub fn rev(&self) -> Tid {
        self.commit.rev()
    }
}

/// Reads a CAR and checks its one root, its commit, the commit's DID and
/// signature (see [`verify_car`]).
pub(super) fn read_and_check_commit(
    reader: impl Read,
    options: &ImportOptions<'_>,
) -> Result<CheckedCommit, RepoError> {
    let limits = options.limits.unwrap_or_default();
    let car = Car::from_reader(reader, limits).map_err(VerifyError::from)?;
    let root = single_root(&car.roots)?;
    let commit_did = car
        .get(&root)
        .and_then(|bytes| Commit::from_cbor(bytes).ok())
        .map(|c| c.did().to_owned());
    if let (Some(expected), Some(found)) = (options.did, &commit_did)
        && expected != found
    {
        return Err(VerifyError::DidMismatch {
            expected: shorten(expected),
            found: shorten(found),
        }
        .into());
    }
    let signature = match (options.key, &commit_did) {
        (Some(key), _) => SignatureCheck::Key(key),
        (None, Some(did)) if did.starts_with("did:key:") => SignatureCheck::DidKey(did),
        (None, Some(did)) => return Err(RepoError::NoVerificationKey { did: shorten(did) }),
        // No readable commit: verification reports what is wrong.
        (None, None) => SignatureCheck::Skip,
    };
    let mut verify_options = VerifyOptions::new(signature).with_limits(limits);
    if let Some(did) = options.did {
        verify_options = verify_options.expect_did(did);
    }
    let (commit, signature) = verified_commit(&car, root, &verify_options)?;
    Ok(CheckedCommit {
        car,
        root,
        commit,
        signature,
    })
}

impl Repository {
    /// Imports a repository CAR into data folder `dir`, which must not hold
    /// a repository yet. If the folder has a key file, it must be the key of
    /// the imported repository's DID (the repository is then writable);
    /// without one the repository is read-only. Nothing is created on disk
    /// before the CAR is read and its commit checked, and a store this
    /// creates is removed again if the rest of the verification fails.
    pub fn import(
        dir: impl AsRef<Path>,
        reader: impl Read,
        options: &ImportOptions<'_>,
    ) -> Result<(Repository, ImportStats), RepoError> {
        let dir = dir.as_ref();
        let store = store_path(dir);
        let engine = if store.is_dir() {
            Some(open_empty_store(&store)?)
        } else {
            None
        };
        let key = key_file::load_key(dir)?;
        let checked = read_and_check_commit(reader, options)?;
        let (engine, created) = match engine {
            Some(engine) => (engine, None),
            // Reading the CAR took time: a store that another process made
            // meanwhile is checked empty like any other, and not removed.
            None => {
                let created = Created::make(dir, &store)?;
                match open_empty_store(&store) {
                    Ok(engine) => (engine, Some(created)),
                    Err(e) => {
                        created.remove();
                        return Err(e);
                    }
                }
            }
        };
        let imported = Repository::store_while_verifying(engine, key, checked, Batch::new());
        if imported.is_err()
            && let Some(created) = created
        {
            // The engine is closed (it went with the failed import).
            created.remove();
        }
        imported.map_err(|e| with_path(e, dir))
    }

    /// Imports a repository CAR into an engine that holds no repository.
    /// See [`import`](Self::import).
    pub fn import_engine(
        engine: Arc<dyn Engine>,
        key: Option<SigningKey>,
        reader: impl Read,
        options: &ImportOptions<'_>,
    ) -> Result<(Repository, ImportStats), RepoError> {
        ensure_empty(&*engine)?;
        let checked = read_and_check_commit(reader, options)?;
        Repository::store_while_verifying(engine, key, checked, Batch::new())
    }

    /// Verifies the tree of `checked` and stores its reachable blocks as
    /// the whole content of the store, in one engine write that starts
    /// with `first` (nothing, or the deletion of every row of the store,
    /// see `replica`) and commits only if the tree verified.
    pub(super) fn store_while_verifying(
        engine: Arc<dyn Engine>,
        key: Option<SigningKey>,
        checked: CheckedCommit,
        first: Batch,
    ) -> Result<(Repository, ImportStats), RepoError> {
        let CheckedCommit {
            car,
            root,
            commit,
            signature,
        } = checked;
        let did = commit.did().to_owned();
        if let Some(key) = &key {
            let key_did = key.public_key().to_did_key();
            if key_did != did {
                return Err(RepoError::IdentityMismatch { did, key_did });
            }
        }
        let rev = commit.rev();
        let (sender, receiver) = sync_channel(PLACES_QUEUE);
        let (verified, places, written) = std::thread::scope(|scope| {
            let writer = scope.spawn(|| {
                let mut parts = std::iter::once(Part::Rows(first)).chain(RowsFromCar {
                    car: &car,
                    receiver,
                    committing: false,
                });
                engine.write_parts(&mut parts)
            });
            // The walk runs here; the writer takes the blocks it reaches.
            let mut places = Places::new(rev, sender);
            places.reach(root, Kind::Structure);
            let verified = verify_tree(
                &car,
                root,
                commit,
                signature,
                None,
                |reached| match reached {
                    Reached::Node(cid) => places.reach(cid, Kind::Structure),
                    Reached::Record(cid) => places.reach(cid, Kind::Record),
                },
            );
            let places = match verified {
                // The writer abandons the write when the places end
                // without their last rows.
                Err(_) => {
                    drop(places);
                    None
                }
                Ok(ref repo) => Some(places.finish(&did, root, repo.records.len() as u64)),
            };
            let written = writer
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (verified, places, written)
        });
        let repo = verified?;
        let stored = places.expect("a verified tree's places are finished")?;
        match written? {
            PartsEnd::Committed => {}
            PartsEnd::Abandoned => {
                return Err(RepoError::Corrupt(
                    "a verified block is not in the CAR".into(),
                ));
            }
        }
        let records = repo.records.len() as u64;
        let unreachable_blocks = car.blocks.len() - stored;
        drop(car);
        let repo = Repository::open_engine(engine, key)?;
        Ok((
            repo,
            ImportStats {
                records,
                blocks: stored,
                unreachable_blocks,
            },
        ))
    }
}

/// Places handed to the writer at a time, and how many such runs may wait.
const PLACES_RUN: usize = 1024;
const PLACES_QUEUE: usize = 8;

/// What the walk sends the writer.
enum Placed {
    /// Blocks to store, each at its place.
    Blocks(Vec<(Cid, Loc)>),
    /// The last rows: the counts and the repository's metadata.
    Last(Batch),
}

/// Gives every block the walk reaches its place once (in the order
/// reached, so each table is written front to back) and counts its
/// references, sending the places to the writer in runs.
struct Places {
    rev: Tid,
    counts: foldhash::HashMap<Cid, RefRow>,
    run: Vec<(Cid, Loc)>,
    sender: SyncSender<Placed>,
    /// The writer stopped taking places (its engine failed; the error is
    /// its own).
    writer_gone: bool,
}

impl Places {
    fn new(rev: Tid, sender: SyncSender<Placed>) -> Self {
        Places {
            rev,
            counts: Default::default(),
            run: Vec::with_capacity(PLACES_RUN),
            sender,
            writer_gone: false,
        }
    }

    fn reach(&mut self, cid: Cid, kind: Kind) {
        if let Some(row) = self.counts.get_mut(&cid) {
            row.count = row.count.saturating_add(1);
            return;
        }
        // A CAR within any sane limit has far fewer than 2^32 blocks;
        // places past that share the last one and fail `finish`.
        let n = u32::try_from(self.counts.len()).unwrap_or(u32::MAX);
        let loc = Loc {
            kind,
            rev: self.rev,
            n,
        };
        self.counts.insert(cid, RefRow { loc, count: 1 });
        self.run.push((cid, loc));
        if self.run.len() == PLACES_RUN {
            self.send_run();
        }
    }

    fn send_run(&mut self) {
        let run = std::mem::replace(&mut self.run, Vec::with_capacity(PLACES_RUN));
        if !self.writer_gone && self.sender.send(Placed::Blocks(run)).is_err() {
            self.writer_gone = true;
        }
    }

    /// Sends the last places, the `Refs` rows (sorted, so they too go in
    /// front to back) and the metadata; returns how many blocks were
    /// placed.
    fn finish(mut self, did: &str, head: Cid, records: u64) -> Result<usize, RepoError> {
        if u32::try_from(self.counts.len()).is_err() {
            return Err(RepoError::Corrupt("over 2^32 blocks in one commit".into()));
        }
        self.send_run();
        let stored = self.counts.len();
        let mut refs: Vec<(Vec<u8>, RefRow)> = self
            .counts
            .drain()
            .map(|(cid, row)| (cid.to_bytes(), row))
            .collect();
        refs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut last = Batch::new();
        for (key, row) in refs {
            last.put(Table::Refs, key, row.encode());
        }
        last.put(Table::Meta, META_FORMAT, FORMAT);
        last.put(Table::Meta, META_DID, did.as_bytes());
        last.put(Table::Meta, META_RECORDS, records.to_be_bytes());
        last.put(Table::Meta, META_HEAD, head.to_bytes());
        // If the writer is gone, its own error is the one returned.
        let _ = self.sender.send(Placed::Last(last));
        Ok(stored)
    }
}

/// The writer's side: the rows of the placed blocks, their bytes taken
/// from the CAR, then the last rows and the commit. Ends early (so the
/// write is abandoned) when the walk stops without its last rows, or
/// when a placed block is not in the CAR (which a verified walk, reading
/// the same CAR, cannot place).
struct RowsFromCar<'car> {
    car: &'car Car,
    receiver: Receiver<Placed>,
    committing: bool,
}

impl Iterator for RowsFromCar<'_> {
    type Item = Part;

    fn next(&mut self) -> Option<Part> {
        if self.committing {
            self.committing = false;
            return Some(Part::Commit);
        }
        match self.receiver.recv().ok()? {
            Placed::Blocks(run) => {
                let mut rows = Batch::new();
                for (cid, loc) in run {
                    let bytes = self.car.get(&cid)?;
                    rows.put(loc.kind.table(), loc.key(), block_row_copied(&cid, bytes));
                }
                Some(Part::Rows(rows))
            }
            Placed::Last(rows) => {
                self.committing = true;
                Some(Part::Rows(rows))
            }
        }
    }
}

/// The folders an import made, so that a failed import can take them
/// away and leave the data folder as it was.
struct Created {
    /// The data folder, if it did not exist.
    dir: Option<std::path::PathBuf>,
    /// The store folder, if this import made it (not merely found it).
    store: Option<std::path::PathBuf>,
}

impl Created {
    fn make(dir: &Path, store: &Path) -> Result<Created, RepoError> {
        let made_dir = !dir.exists();
        key_file::create_private_dir(dir)?;
        let mut created = Created {
            dir: made_dir.then(|| dir.to_path_buf()),
            store: None,
        };
        // Not recursive: only the call that makes the folder owns it.
        match std::fs::create_dir(store) {
            Ok(()) => created.store = Some(store.to_path_buf()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                created.remove();
                let made = format!("making the store folder {}: {e}", store.display());
                return Err(RepoError::Engine(EngineError::engine(made)));
            }
        }
        Ok(created)
    }

    /// Removes the store folder this import made, then the data folder if
    /// it made that too and nothing else has been put there.
    fn remove(self) {
        if let Some(store) = &self.store
            && let Err(e) = std::fs::remove_dir_all(store)
        {
            tracing::warn!("removing {} after a failed import: {e}", store.display());
        }
        if let Some(dir) = &self.dir {
            // Fails, and keeps the folder, if it is not empty.
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// The store in folder `store` (made if there is none), which must hold
/// no repository.
fn open_empty_store(store: &Path) -> Result<Arc<dyn Engine>, RepoError> {
    let engine = open_store(store, None)?;
    ensure_empty(&*engine)?;
    Ok(engine)
}

pub(super) fn ensure_empty(engine: &dyn Engine) -> Result<(), RepoError> {
    let Some(did) = engine.get(Table::Meta, META_DID)? else {
        return if is_initialized(engine)? {
            Err(RepoError::Corrupt("the store has no DID".into()))
        } else {
            Ok(())
        };
    };
    Err(RepoError::NotEmpty {
        did: String::from_utf8_lossy(&did).into_owned(),
    })
}
