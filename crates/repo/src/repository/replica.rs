//! A read-only copy of another store's repository, refreshed from its CAR
//! exports.
//!
//! Until sync with a PDS exists, this is how a second device gets the
//! account's records: the store that signs the repository exports a CAR,
//! and the other store replaces its copy with it. The CAR must be by the
//! same DID and not older than the copy held, and is verified in full (as
//! for an import) while the old copy is replaced in one write (every row
//! deleted, the new blocks, counts and head written) that commits only if
//! it verified, so a failure leaves the old copy whole.

use std::io::Read;
use std::path::Path;

use super::import::{ensure_empty, read_and_check_commit};
use super::{ImportOptions, ImportStats, META_DID, RepoError, Repository, store_path, with_path};
use crate::key_file;
use gelstore_store::{Batch, Engine, Table, open_store};

/// What [`Repository::refresh`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refresh {
    /// The store was empty: the CAR was imported.
    Imported,
    /// The copy was replaced by a newer (or the same) one.
    Replaced,
}

impl Repository {
    /// Brings the read-only copy in data folder `dir` up to the repository
    /// in a CAR: imports it into an empty folder, or replaces a copy of the
    /// same DID whose rev is not newer than the CAR's. A store that holds its
    /// repository's signing key is refused ([`RepoError::NotACopy`]), as is a
    /// CAR of another DID or an older rev ([`RepoError::OlderCopy`]).
    pub fn refresh(
        dir: impl AsRef<Path>,
        reader: impl Read,
        options: &ImportOptions<'_>,
    ) -> Result<(Repository, ImportStats, Refresh), RepoError> {
        let dir = dir.as_ref();
        if !store_path(dir).is_dir() {
            let (repo, stats) = Repository::import(dir, reader, options)?;
            return Ok((repo, stats, Refresh::Imported));
        }
        let engine = open_store(&store_path(dir), None)?;
        let Some(did) = engine.get(Table::Meta, META_DID)? else {
            ensure_empty(&*engine)?;
            drop(engine);
            let (repo, stats) = Repository::import(dir, reader, options)?;
            return Ok((repo, stats, Refresh::Imported));
        };
        let did = String::from_utf8(did)
            .map_err(|_| RepoError::Corrupt("the store's DID is not UTF-8".into()))?;
        if key_file::load_key(dir)?.is_some() {
            return Err(RepoError::NotACopy { did });
        }
        let held = Repository::open_engine(engine.clone(), None).map_err(|e| with_path(e, dir))?;
        let checked = read_and_check_commit(
            reader,
            &ImportOptions {
                did: Some(&did),
                ..options.clone()
            },
        )?;
        if checked.rev() < held.head().rev {
            return Err(RepoError::OlderCopy {
                held: held.head().rev.to_string(),
                found: checked.rev().to_string(),
            });
        }
        drop(held);
        let mut batch = Batch::new();
        for table in Table::ALL {
            for row in engine.scan(table, b"") {
                let (key, _) = row?;
                batch.delete(table, key);
            }
        }
        let (repo, stats) = Repository::store_while_verifying(engine, None, checked, batch)
            .map_err(|e| with_path(e, dir))?;
        Ok((repo, stats, Refresh::Replaced))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::repository::Write;

    const THING: &str = "com.example.thing";

    fn car_of(repo: &Repository) -> Vec<u8> {
        repo.export(Vec::new(), None).unwrap().0
    }

    fn put(repo: &mut Repository, rkey: &str, n: i64) {
        repo.apply(&[Write::create(THING, rkey, json!({"$type": THING, "n": n}))])
            .unwrap();
    }

    #[test]
    fn a_copy_is_imported_then_replaced_by_newer_exports_only() {
        let tmp = tempfile::tempdir().unwrap();
        let (origin, copy, other) = (
            tmp.path().join("origin"),
            tmp.path().join("copy"),
            tmp.path().join("other"),
        );
        let mut repo = Repository::init(&origin).unwrap();
        put(&mut repo, "a", 1);
        put(&mut repo, "b", 2);
        let first = car_of(&repo);
        let options = ImportOptions::default();

        let (held, stats, how) = Repository::refresh(&copy, &first[..], &options).unwrap();
        assert_eq!(how, Refresh::Imported);
        assert_eq!(stats.records, 2);
        assert!(!held.is_writable());
        drop(held);

        // Deletes, updates and creates: the copy follows, and keeps every
        // invariant of a store.
        repo.apply(&[
            Write::delete(THING, "a"),
            Write::update(THING, "b", json!({"$type": THING, "n": 3})),
            Write::create(THING, "c", json!({"$type": THING, "n": 4})),
        ])
        .unwrap();
        let second = car_of(&repo);
        let (held, stats, how) = Repository::refresh(&copy, &second[..], &options).unwrap();
        assert_eq!(how, Refresh::Replaced);
        assert_eq!(stats.records, 2);
        assert_eq!(held.head(), repo.head());
        assert!(held.get(THING, "a").unwrap().is_none());
        assert_eq!(held.get(THING, "b").unwrap().unwrap().value["n"], 3);
        let report = held.check().unwrap();
        assert_eq!(report.records, 2);
        assert_eq!(car_of(&held), second);
        drop(held);

        // The same export again is fine; an older one changes nothing.
        Repository::refresh(&copy, &second[..], &options).unwrap();
        match Repository::refresh(&copy, &first[..], &options) {
            Err(RepoError::OlderCopy { .. }) => {}
            other => panic!("expected OlderCopy, got {:?}", other.map(|r| r.2)),
        }
        // Another account's repository does not replace it.
        let mut foreign = Repository::init(&other).unwrap();
        put(&mut foreign, "z", 9);
        match Repository::refresh(&copy, &car_of(&foreign)[..], &options) {
            Err(RepoError::Verify(_)) => {}
            other => panic!("expected a DID mismatch, got {:?}", other.map(|r| r.2)),
        }
        // Nor is a store that signs its own repository ever replaced.
        drop(foreign);
        match Repository::refresh(&other, &second[..], &options) {
            Err(RepoError::NotACopy { .. }) => {}
            other => panic!("expected NotACopy, got {:?}", other.map(|r| r.2)),
        }
        let held = Repository::open(&copy).unwrap();
        assert_eq!(held.head(), repo.head());
        held.check().unwrap();
    }
}
