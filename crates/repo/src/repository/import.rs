//! Importing a repository CAR into an empty store.
//!
//! The CAR may list its blocks in any order, repeat them, and carry blocks
//! the commit does not reach. It is verified in full first
//! ([`verify_repo`]: one root, the commit, its signature, every MST node,
//! every repo path, every record block); only the reachable blocks are
//! stored, all in one batch, with their reference counts and the commit's
//! rev as their creation rev.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use cid::Cid;

use super::refs::{Kind, fresh_rows};
use super::{
    FORMAT, META_DID, META_FORMAT, META_HEAD, META_RECORDS, RepoError, Repository, is_initialized,
    store_path, with_path,
};
use crate::car::{Car, CarLimits};
use crate::commit::Commit;
use crate::key_file;
use crate::verify::{
    RepoSummary, SignatureCheck, VerifiedRepo, VerifyError, VerifyOptions, shorten, single_root,
    verify_with_nodes,
};
use gelstore_crypto::{PublicKey, SigningKey};
use gelstore_store::{Batch, Engine, Table, open_store};

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

/// A CAR that passed verification, ready to be stored.
pub struct VerifiedImport {
    car: Car,
    repo: VerifiedRepo,
    /// Every MST node's CID, as verification walked them.
    nodes: Vec<Cid>,
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
    let (repo, nodes) = verify_with_nodes(&car, root, &verify_options)?;
    Ok(VerifiedImport { car, repo, nodes })
}

impl Repository {
    /// Imports a repository CAR into data folder `dir`, which must not hold
    /// a repository yet. If the folder has a key file, it must be the key of
    /// the imported repository's DID (the repository is then writable);
    /// without one the repository is read-only. The CAR is verified before
    /// anything is created on disk.
    pub fn import(
        dir: impl AsRef<Path>,
        reader: impl Read,
        options: &ImportOptions<'_>,
    ) -> Result<(Repository, ImportStats), RepoError> {
        let dir = dir.as_ref();
        let engine = if store_path(dir).is_dir() {
            let engine = open_store(&store_path(dir), None)?;
            ensure_empty(&*engine)?;
            Some(engine)
        } else {
            None
        };
        let key = key_file::load_key(dir)?;
        let verified = verify_car(reader, options)?;
        let engine = match engine {
            Some(engine) => engine,
            None => {
                key_file::create_private_dir(dir)?;
                open_store(&store_path(dir), None)?
            }
        };
        Repository::store_verified(engine, key, verified).map_err(|e| with_path(e, dir))
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
        let verified = verify_car(reader, options)?;
        Repository::store_verified(engine, key, verified)
    }

    /// Stores a verified CAR in an engine that holds no repository.
    pub fn store_verified(
        engine: Arc<dyn Engine>,
        key: Option<SigningKey>,
        verified: VerifiedImport,
    ) -> Result<(Repository, ImportStats), RepoError> {
        ensure_empty(&*engine)?;
        Repository::store_verified_after(engine, key, verified, Batch::new())
    }

    /// Stores a verified CAR as the whole content of the store, in one batch
    /// that starts with `batch` (empty, or the deletion of every row of the
    /// store, see `replica`).
    pub(super) fn store_verified_after(
        engine: Arc<dyn Engine>,
        key: Option<SigningKey>,
        verified: VerifiedImport,
        mut batch: Batch,
    ) -> Result<(Repository, ImportStats), RepoError> {
        let VerifiedImport {
            mut car,
            repo,
            nodes,
        } = verified;
        let commit = repo.commit;
        let root = repo.summary.commit_cid;
        let did = commit.did().to_owned();
        if let Some(key) = &key {
            let key_did = key.public_key().to_did_key();
            if key_did != did {
                return Err(RepoError::IdentityMismatch { did, key_did });
            }
        }

        // Every reachable block once: the commit, every node (verification
        // walked them) and every record, counted once per reference (a
        // record under two keys, or a block that is both a node and a
        // record, is kept once with its count).
        let reachable = std::iter::once((root, Kind::Structure))
            .chain(nodes.into_iter().map(|cid| (cid, Kind::Structure)))
            .chain(repo.records.iter().map(|(_, cid)| (*cid, Kind::Record)));
        let mut blocks: Vec<(Cid, Kind, u32, Vec<u8>)> = Vec::with_capacity(car.blocks.len());
        let mut at: foldhash::HashMap<Cid, usize> =
            HashMap::with_capacity_and_hasher(car.blocks.len(), Default::default());
        let total_blocks = car.blocks.len();
        for (cid, kind) in reachable {
            if let Some(&i) = at.get(&cid) {
                blocks[i].2 += 1;
                continue;
            }
            let bytes = car.blocks.remove(&cid).ok_or_else(|| {
                RepoError::Corrupt(format!("verified block {cid} is not in the CAR"))
            })?;
            at.insert(cid, blocks.len());
            blocks.push((cid, kind, 1, bytes));
        }
        let stored = blocks.len();
        drop(car);

        // The store is empty, or `batch` empties it first: no block is
        // stored yet.
        fresh_rows(commit.rev(), blocks, &mut batch)?;
        let records = repo.records.len() as u64;
        batch.put(Table::Meta, META_FORMAT, FORMAT);
        batch.put(Table::Meta, META_DID, did.as_bytes());
        batch.put(Table::Meta, META_RECORDS, records.to_be_bytes());
        batch.put(Table::Meta, META_HEAD, root.to_bytes());
        engine.write(batch)?;
        let repo = Repository::open_engine(engine, key)?;
        Ok((
            repo,
            ImportStats {
                records,
                blocks: stored,
                unreachable_blocks: total_blocks - stored,
            },
        ))
    }
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
