//! Store format 1 → 2, run when a format-1 store is opened.
//!
//! Format 1 kept `Blocks[CID] = bytes`, `Refs[CID] = count (u64) ‖ rev
//! (u64)` and `RevLog[rev ‖ CID] = ""`. Format 2 keys blocks by where they
//! were created (see `refs`). The move goes through the rev log in order,
//! [`CHUNK`] blocks per engine batch: each batch rewrites its blocks' rows
//! and deletes their rev-log rows, so what is left in the rev log is what is
//! left to move, and a migration cut short (a crash, a full disk) goes on
//! from there at the next open. `Meta[migrating]` holds the next block
//! number; the last batch sets `Meta[format] = 2` and deletes it. Until
//! then the store is only opened to finish the move.

use cid::Cid;

use super::refs::{Kind, Loc, RefRow, block_row};
use super::{META_FORMAT, RepoError};
use crate::tid::Tid;
use gelstore_model::Ipld;
use gelstore_store::{Batch, Engine, Table};

/// Blocks moved per engine batch (a batch holds their bytes in memory).
const CHUNK: usize = 4096;

/// The format a migrated store has.
const FORMAT_2: &[u8] = b"2";

/// The next block number while a migration runs.
const META_MIGRATING: &[u8] = b"migrating";

/// Moves a format-1 store to format 2 (see the module docs). Returns the
/// number of blocks moved by this call.
pub(super) fn format_1_to_2(engine: &dyn Engine) -> Result<u64, RepoError> {
    format_1_to_2_in(engine, CHUNK)
}

fn format_1_to_2_in(engine: &dyn Engine, chunk: usize) -> Result<u64, RepoError> {
    let mut moved = 0u64;
    loop {
        let mut next = match engine.get(Table::Meta, META_MIGRATING)? {
            Some(raw) => u32::from_be_bytes(raw.as_slice().try_into().map_err(|_| {
                RepoError::Corrupt("the migration's block number is not 4 bytes".into())
            })?),
            None => 0,
        };
        let mut batch = Batch::new();
        let mut in_batch = 0usize;
        for item in engine.scan(Table::RevLog, b"") {
            let (key, _) = item?;
            let (rev, cid) = parse_revlog_key(&key)?;
            let old_refs = engine
                .get(Table::Refs, &cid.to_bytes())?
                .ok_or_else(|| RepoError::Corrupt(format!("block {cid} has no count")))?;
            let count = format_1_count(&cid, &old_refs)?;
            let bytes = engine
                .get(Table::Blocks, &cid.to_bytes())?
                .ok_or_else(|| RepoError::Corrupt(format!("block {cid} is missing")))?;
            // Block numbers only grow, so the new keys stay in rev order
            // whatever the chunking.
            let loc = Loc {
                kind: kind_of(&bytes),
                rev,
                n: next,
            };
            next = next
                .checked_add(1)
                .ok_or_else(|| RepoError::Corrupt("over 2^32 blocks to migrate".into()))?;
            batch.delete(Table::Blocks, cid.to_bytes());
            batch.put(loc.kind.table(), loc.key(), block_row(&cid, bytes));
            batch.put(Table::Refs, cid.to_bytes(), RefRow { loc, count }.encode());
            batch.delete(Table::RevLog, key);
            in_batch += 1;
            if in_batch == chunk {
                break;
            }
        }
        moved += in_batch as u64;
        if in_batch < chunk {
            batch.put(Table::Meta, META_FORMAT, FORMAT_2);
            batch.delete(Table::Meta, META_MIGRATING);
            engine.write(batch)?;
            return Ok(moved);
        }
        batch.put(Table::Meta, META_MIGRATING, next.to_be_bytes());
        engine.write(batch)?;
    }
}

/// Records carry a `$type`; MST nodes and commits do not. (Only where the
/// block is kept depends on it: its `Refs` row says which table.)
fn kind_of(block: &[u8]) -> Kind {
    match gelstore_model::decode_dag_cbor(block) {
        Ok(Ipld::Map(map)) if map.contains_key("$type") => Kind::Record,
        _ => Kind::Structure,
    }
}

/// A format-1 `Refs` value: count (u64 BE) ‖ rev (u64 BE).
fn format_1_count(cid: &Cid, raw: &[u8]) -> Result<u32, RepoError> {
    let bad = || RepoError::Corrupt(format!("the format-1 count of {cid} is malformed"));
    let raw: [u8; 16] = raw.try_into().map_err(|_| bad())?;
    let count = u64::from_be_bytes(raw[..8].try_into().map_err(|_| bad())?);
    u32::try_from(count).map_err(|_| bad())
}

/// Splits a format-1 `RevLog` key: rev (u64 BE) ‖ CID.
fn parse_revlog_key(key: &[u8]) -> Result<(Tid, Cid), RepoError> {
    let bad = || RepoError::Corrupt("malformed rev log row".into());
    if key.len() < 9 {
        return Err(bad());
    }
    let (rev, cid) = key.split_at(8);
    let rev = Tid::from_u64(u64::from_be_bytes(rev.try_into().map_err(|_| bad())?));
    let cid = Cid::try_from(cid).map_err(|_| bad())?;
    Ok((rev, cid))
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::key_file;
    use crate::repository::{Repository, Write, store_path};
    use gelstore_store::{EngineError, Scan, open_store};

    /// The format-1 data folders of `fixtures/stores/format1.tar.gz`,
    /// unpacked.
    fn unpack() -> tempfile::TempDir {
        let fixture =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/stores/format1.tar.gz");
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("tar")
            .arg("xzf")
            .arg(&fixture)
            .arg("-C")
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(status.success(), "tar xzf {}", fixture.display());
        dir
    }

    /// An engine whose writes fail after `left` more succeed.
    struct FailingAfter<'a> {
        inner: &'a dyn Engine,
        left: AtomicUsize,
    }

    impl Engine for FailingAfter<'_> {
        fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
            self.inner.get(table, key)
        }
        fn scan(&self, table: Table, start: &[u8]) -> Scan<'_> {
            self.inner.scan(table, start)
        }
        fn write(&self, batch: Batch) -> Result<(), EngineError> {
            let left = self.left.load(Ordering::SeqCst);
            if left == 0 {
                return Err(EngineError::engine("the disk is full"));
            }
            self.left.store(left - 1, Ordering::SeqCst);
            self.inner.write(batch)
        }
        fn size_on_disk(&self) -> Result<u64, EngineError> {
            self.inner.size_on_disk()
        }
        fn name(&self) -> &'static str {
            "failing"
        }
    }

    fn folder(root: &Path, engine: &str) -> PathBuf {
        root.join(engine)
    }

    #[test]
    fn a_format_1_store_opens_as_format_2_with_the_same_repository() {
        let root = unpack();
        for engine in ["redb", "sled"] {
            let dir = folder(root.path(), engine);
            let car = std::fs::read(root.path().join(format!("{engine}.car"))).unwrap();
            let mut repo = Repository::open(&dir).unwrap();
            let report = repo.check().unwrap();
            assert_eq!(report.records, 35, "{engine}");
            let (exported, _) = repo.export(Vec::new(), None).unwrap();
            assert_eq!(exported, car, "{engine}: the same CAR, byte for byte");
            assert_eq!(
                repo.engine()
                    .get(Table::Meta, META_FORMAT)
                    .unwrap()
                    .unwrap(),
                b"2"
            );
            // Written to, collected and reopened as any format-2 store.
            repo.apply(&[Write::delete("app.example.note", "3lbqyb6tcm000")])
                .unwrap();
            drop(repo);
            let repo = Repository::open(&dir).unwrap();
            assert_eq!(repo.check().unwrap().records, 34, "{engine}");
        }
    }

    #[test]
    fn a_migration_cut_short_goes_on_at_the_next_open() {
        let root = unpack();
        let dir = folder(root.path(), "redb");
        let car = std::fs::read(root.path().join("redb.car")).unwrap();
        {
            let engine = open_store(&store_path(&dir), None).unwrap();
            let failing = FailingAfter {
                inner: &*engine,
                left: AtomicUsize::new(3),
            };
            // Three chunks of 7 land, then the disk fills.
            let e = format_1_to_2_in(&failing, 7).unwrap_err();
            assert!(e.to_string().contains("the disk is full"), "{e}");
            assert_eq!(engine.get(Table::Meta, META_FORMAT).unwrap().unwrap(), b"1");
            assert_eq!(
                engine.get(Table::Meta, META_MIGRATING).unwrap().unwrap(),
                21u32.to_be_bytes()
            );
            // Another cut, in the middle of what is left.
            let failing = FailingAfter {
                inner: &*engine,
                left: AtomicUsize::new(2),
            };
            format_1_to_2_in(&failing, 5).unwrap_err();
        }
        let key = key_file::load_key(&dir).unwrap();
        let engine = open_store(&store_path(&dir), None).unwrap();
        let repo = Repository::open_engine(engine, key).unwrap();
        repo.check().unwrap();
        let (exported, _) = repo.export(Vec::new(), None).unwrap();
        assert_eq!(exported, car);
        assert!(
            repo.engine()
                .get(Table::Meta, META_MIGRATING)
                .unwrap()
                .is_none(),
            "the progress row is gone once the move is done"
        );
    }
}
