//! The redb engine (redb 4): a copy-on-write B-tree in one file.
//!
//! Each [`Table`] is a redb table of byte keys and byte values, and a
//! [`Batch`] is one write transaction committed with redb's `Immediate`
//! durability: the commit writes the new pages, then flips the header to
//! the new root and fsyncs, so a batch is all there or not at all after a
//! `kill -9` (redb falls back to the previous commit slot when the last
//! one's checksums fail).
//!
//! Space: the pages a commit replaces are freed for the next commits to
//! reuse, so the file follows the live data instead of the history (sled
//! 0.34 keeps dead versions in its log until a segment is mostly dead).
//! redb grows its file by doubling, but the new half is sparse until pages
//! are written there, so the size on disk is the blocks the file system
//! allocated, not the file's length. Free pages inside the file (a commit
//! cannot reuse the pages the one before it freed; a big delete frees
//! many) do take disk space: each time the disk size of a file of at least
//! [`COMPACT_MIN_BYTES`] has grown by half since it was last looked at, and
//! after a repack (which frees the pages a table took), redb's page count
//! says how much of it is free, and an eighth or more free is given back
//! with redb's `compact`, after a write or at open. The count walks the
//! file, so it is done only then (the work stays proportional to what was
//! written), and the size it was done at is kept in the file itself.
//!
//! Locking: a `lock` file beside the database is held with `flock` while
//! the engine is open (per open file, so a second handle in the same
//! process is refused too), with the same waiting as [`super::SledEngine`].

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{RwLock, RwLockReadGuard};
use std::time::Duration;

use ::redb::{
    CompactionError, Database, DatabaseError, ReadableDatabase, TableDefinition, TableHandle,
};

use super::lock::{lock_wait, retry_while_locked};
use super::{Batch, Engine, EngineError, Op, Part, PartsEnd, Reader, Scan, Table};

/// The database file inside the store folder.
pub const REDB_FILE: &str = "store.redb";

/// The lock file inside the store folder.
const LOCK_FILE: &str = "lock";

/// Files smaller than this are not compacted (not worth the time).
pub const COMPACT_MIN_BYTES: u64 = 4 * 1024 * 1024;

/// The engine's own table: `checked` → the disk size at which the free
/// space was last counted.
const ENGINE_TABLE: TableDefinition<'static, &'static str, u64> =
    TableDefinition::new("gelstore.engine");
const CHECKED: &str = "checked";
/// Its key in stores written before the disk size was used (the file's
/// length after a compaction).
const COMPACTED: &str = "compacted";

/// redb's page cache. The repository keeps its own cache of MST nodes, and
/// the operating system caches the file.
const CACHE_BYTES: usize = 64 * 1024 * 1024;

type Def = TableDefinition<'static, &'static [u8], &'static [u8]>;

fn def(table: Table) -> Def {
    TableDefinition::new(table.name())
}

/// A store on disk, in a redb database file inside a folder.
pub struct RedbEngine {
    path: PathBuf,
    /// Shared by reads and writes; taken alone only to compact.
    db: RwLock<Database>,
    /// The disk size at which free space was last counted (or at open):
    /// past half as much again, it is counted again.
    checked: AtomicU64,
    // Dropped after `db` (fields drop in order): the lock is let go only
    // once the database is closed.
    _lock: File,
}

impl std::fmt::Debug for RedbEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbEngine")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl RedbEngine {
    /// Opens (creating if needed) the redb store in folder `path`, waiting
    /// up to [`lock_wait`] while another process has it open; see
    /// [`RedbEngine::open_waiting`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self, EngineError> {
        Self::open_waiting(path, lock_wait())
    }

    /// Opens (creating if needed) the redb store in folder `path`. While
    /// another process (or another handle in this one) has it open, the
    /// open is retried for up to `wait`, then fails with
    /// [`EngineError::Locked`].
    pub fn open_waiting(path: impl AsRef<Path>, wait: Duration) -> Result<Self, EngineError> {
        let path = path.as_ref().to_path_buf();
        std::fs::create_dir_all(&path).map_err(EngineError::engine)?;
        let (lock, db) = retry_while_locked(&path, wait, || {
            let lock = take_lock(&path)?;
            let db = Database::builder()
                .set_cache_size(CACHE_BYTES)
                .create(path.join(REDB_FILE))
                .map_err(|e| open_error(&path, e))?;
            Ok((lock, db))
        })?;
        let engine = RedbEngine {
            path,
            db: RwLock::new(db),
            checked: AtomicU64::new(0),
            _lock: lock,
        };
        engine.create_tables()?;
        let recorded = engine.recorded_check()?;
        let size = engine.size_on_disk()?;
        engine
            .checked
            .store(recorded.unwrap_or(size), Ordering::Relaxed);
        if recorded.is_some() {
            engine.compact_if_free(false)?;
        }
        Ok(engine)
    }

    /// The store folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes the file takes on disk that hold no live page.
    pub fn free_bytes(&self) -> Result<u64, EngineError> {
        let used = used_bytes(&self.db())?;
        Ok(self.size_on_disk()?.saturating_sub(used))
    }

    /// Gives the free space back to the file system (redb's `compact`)
    /// now, however much it is.
    pub fn compact(&mut self) -> Result<(), EngineError> {
        let file = self.path.join(REDB_FILE);
        let db = self.db.get_mut().unwrap_or_else(|e| e.into_inner());
        if compact_db(db)? {
            let after = disk_bytes(&file)?;
            record_check(db, after)?;
            self.checked.store(after, Ordering::Relaxed);
        }
        Ok(())
    }

    fn db(&self) -> RwLockReadGuard<'_, Database> {
        // A panic under the lock leaves redb's own state consistent.
        self.db.read().unwrap_or_else(|e| e.into_inner())
    }

    /// After a write, and at open: once the disk size has grown by half
    /// since the free space was last counted (or at once, with `now`),
    /// counts it, and compacts if an eighth or more of the disk size is
    /// free. Skipped (and tried again at the next write) while a read, such
    /// as a long scan, holds a transaction or the lock.
    fn compact_if_free(&self, now: bool) -> Result<(), EngineError> {
        let file = self.path.join(REDB_FILE);
        let size = disk_bytes(&file)?;
        let last = self.checked.load(Ordering::Relaxed);
        let grown = size >= last.saturating_add(last / 2);
        if size < COMPACT_MIN_BYTES || !(grown || now) {
            return Ok(());
        }
        let Ok(mut db) = self.db.try_write() else {
            return Ok(());
        };
        let free = size.saturating_sub(used_bytes(&db)?);
        if free >= size / 8 && !compact_db(&mut db)? {
            return Ok(());
        }
        let after = disk_bytes(&file)?;
        tracing::debug!(size, free, after, "counted the redb store's free space");
        record_check(&db, after)?;
        self.checked.store(after, Ordering::Relaxed);
        Ok(())
    }

    /// The disk size at which the free space was last counted, if it ever
    /// was.
    fn recorded_check(&self) -> Result<Option<u64>, EngineError> {
        let txn = self.db().begin_read().map_err(EngineError::engine)?;
        let table = match txn.open_table(ENGINE_TABLE) {
            Ok(table) => table,
            Err(::redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(EngineError::engine(e)),
        };
        for name in [CHECKED, COMPACTED] {
            if let Some(value) = table.get(name).map_err(EngineError::engine)? {
                return Ok(Some(value.value()));
            }
        }
        Ok(None)
    }

    /// One write transaction: `batch`'s changes and, with `repack`, that
    /// table copied in key order into a new table that then takes its
    /// name (redb appends keep pages full), committed with `Immediate`
    /// durability (redb's default): `commit` returns once the new root is
    /// fsynced. Then a compaction if much of the file has become free.
    fn commit(&self, repack: Option<Table>, batch: Batch) -> Result<(), EngineError> {
        let db = self.db();
        let txn = db.begin_write().map_err(EngineError::engine)?;
        if let Some(table) = repack {
            repack_table(&txn, table)?;
        }
        OpenTables::new(&txn).apply(batch)?;
        txn.commit().map_err(EngineError::engine)?;
        drop(db);
        self.compact_if_needed(repack.is_some());
        Ok(())
    }

    /// After a commit: the batch is durable whatever compaction does.
    fn compact_if_needed(&self, now: bool) {
        if let Err(e) = self.compact_if_free(now) {
            tracing::warn!("compacting the redb store failed: {e}");
        }
    }

    /// Every table exists from the start, so reads never meet a missing one.
    fn create_tables(&self) -> Result<(), EngineError> {
        let db = self.db();
        let txn = db.begin_read().map_err(EngineError::engine)?;
        let present = txn
            .list_tables()
            .map_err(EngineError::engine)?
            .filter(|t| Table::ALL.iter().any(|table| table.name() == t.name()))
            .count();
        drop(txn);
        if present == Table::ALL.len() {
            return Ok(());
        }
        let txn = db.begin_write().map_err(EngineError::engine)?;
        for table in Table::ALL {
            txn.open_table(def(table)).map_err(EngineError::engine)?;
        }
        txn.commit().map_err(EngineError::engine)
    }
}

/// The tables of one write transaction, opened as they are first written.
struct OpenTables<'txn> {
    txn: &'txn ::redb::WriteTransaction,
    open: [Option<::redb::Table<'txn, &'static [u8], &'static [u8]>>; Table::ALL.len()],
}

impl<'txn> OpenTables<'txn> {
    fn new(txn: &'txn ::redb::WriteTransaction) -> Self {
        OpenTables {
            txn,
            open: [const { None }; Table::ALL.len()],
        }
    }

    fn apply(&mut self, batch: Batch) -> Result<(), EngineError> {
        for op in batch.into_ops() {
            let table = match &op {
                Op::Put(table, ..) | Op::Delete(table, _) => *table,
            };
            let slot = &mut self.open[table as usize];
            let handle = match slot {
                Some(handle) => handle,
                None => slot.insert(
                    self.txn
                        .open_table(def(table))
                        .map_err(EngineError::engine)?,
                ),
            };
            match &op {
                Op::Put(_, key, value) => {
                    handle
                        .insert(key.as_slice(), value.as_slice())
                        .map_err(EngineError::engine)?;
                }
                Op::Delete(_, key) => {
                    handle.remove(key.as_slice()).map_err(EngineError::engine)?;
                }
            }
        }
        Ok(())
    }
}

/// One read transaction, its tables opened as they are first read.
struct RedbReader {
    txn: ::redb::ReadTransaction,
    tables: std::cell::RefCell<[Option<ReadOnly>; Table::ALL.len()]>,
}

type ReadOnly = ::redb::ReadOnlyTable<&'static [u8], &'static [u8]>;

impl Reader for RedbReader {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        let mut tables = self.tables.borrow_mut();
        let slot = &mut tables[table as usize];
        if slot.is_none() {
            *slot = Some(
                self.txn
                    .open_table(def(table))
                    .map_err(EngineError::engine)?,
            );
        }
        let handle = slot.as_ref().expect("opened above");
        let value = handle.get(key).map_err(EngineError::engine)?;
        Ok(value.map(|v| v.value().to_vec()))
    }
}

/// The name a table is rebuilt under before it takes the old one's.
const REPACK_TABLE: Def = TableDefinition::new("gelstore.repack");

/// Copies `table` in key order into a new table, then gives the new one
/// its name, inside `txn`.
fn repack_table(txn: &::redb::WriteTransaction, table: Table) -> Result<(), EngineError> {
    use ::redb::ReadableTable;
    txn.delete_table(REPACK_TABLE)
        .map_err(EngineError::engine)?;
    {
        let old = txn.open_table(def(table)).map_err(EngineError::engine)?;
        let mut new = txn.open_table(REPACK_TABLE).map_err(EngineError::engine)?;
        for row in old.iter().map_err(EngineError::engine)? {
            let (key, value) = row.map_err(EngineError::engine)?;
            new.insert(key.value(), value.value())
                .map_err(EngineError::engine)?;
        }
    }
    txn.delete_table(def(table)).map_err(EngineError::engine)?;
    txn.rename_table(REPACK_TABLE, def(table))
        .map_err(EngineError::engine)
}

/// Compacts `db`; false (nothing done) while a read transaction is live.
fn compact_db(db: &mut Database) -> Result<bool, EngineError> {
    loop {
        match db.compact() {
            Ok(true) => {}
            Ok(false) => return Ok(true),
            Err(CompactionError::TransactionInProgress) => return Ok(false),
            Err(e) => return Err(EngineError::engine(e)),
        }
    }
}

/// Keeps the disk size at which the free space was counted in the file.
fn record_check(db: &Database, size: u64) -> Result<(), EngineError> {
    let txn = db.begin_write().map_err(EngineError::engine)?;
    {
        let mut table = txn.open_table(ENGINE_TABLE).map_err(EngineError::engine)?;
        table.insert(CHECKED, size).map_err(EngineError::engine)?;
        table.remove(COMPACTED).map_err(EngineError::engine)?;
    }
    txn.commit().map_err(EngineError::engine)
}

/// The bytes of `db`'s live pages (redb walks the file to count them).
fn used_bytes(db: &Database) -> Result<u64, EngineError> {
    let txn = db.begin_write().map_err(EngineError::engine)?;
    let stats = txn.stats().map_err(EngineError::engine)?;
    let used = stats.allocated_pages() * stats.page_size() as u64;
    txn.abort().map_err(EngineError::engine)?;
    Ok(used)
}

/// The bytes the file system allocated to `file`: its size on disk, which
/// the sparse part redb's growth leaves at its end does not take.
fn disk_bytes(file: &Path) -> Result<u64, EngineError> {
    let meta = std::fs::metadata(file).map_err(EngineError::engine)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Ok(meta.blocks() * 512)
    }
    #[cfg(not(unix))]
    {
        Ok(meta.len())
    }
}

/// Takes the folder's lock file, or says it is held.
fn take_lock(path: &Path) -> Result<File, EngineError> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path.join(LOCK_FILE))
        .map_err(EngineError::engine)?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(locked(path, "lock file held")),
        Err(TryLockError::Error(e)) => Err(EngineError::engine(e)),
    }
}

fn locked(path: &Path, detail: impl Into<String>) -> EngineError {
    EngineError::Locked {
        path: path.display().to_string(),
        detail: detail.into(),
        waited: Duration::ZERO,
    }
}

fn open_error(path: &Path, e: DatabaseError) -> EngineError {
    match e {
        DatabaseError::DatabaseAlreadyOpen => locked(path, e.to_string()),
        other => EngineError::engine(other),
    }
}

fn failed_scan<'a>(e: impl Into<::redb::Error>) -> Scan<'a> {
    Box::new(std::iter::once(Err(EngineError::engine(e.into()))))
}

impl Engine for RedbEngine {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        let txn = self.db().begin_read().map_err(EngineError::engine)?;
        let table = txn.open_table(def(table)).map_err(EngineError::engine)?;
        let value = table.get(key).map_err(EngineError::engine)?;
        Ok(value.map(|v| v.value().to_vec()))
    }

    fn scan(&self, table: Table, start: &[u8]) -> Scan<'_> {
        // The lock is held only to begin: the range keeps its read
        // transaction alive on its own (and holds off compaction meanwhile).
        let txn = match self.db().begin_read() {
            Ok(txn) => txn,
            Err(e) => return failed_scan(e),
        };
        let table = match txn.open_table(def(table)) {
            Ok(table) => table,
            Err(e) => return failed_scan(e),
        };
        let range = match table.range::<&[u8]>(start..) {
            Ok(range) => range,
            Err(e) => return failed_scan(e),
        };
        Box::new(range.map(|item| {
            item.map(|(k, v)| (k.value().to_vec(), v.value().to_vec()))
                .map_err(EngineError::engine)
        }))
    }

    fn write(&self, batch: Batch) -> Result<(), EngineError> {
        if batch.is_empty() {
            return Ok(());
        }
        self.commit(None, batch)
    }

    fn repack(&self, table: Table, batch: Batch) -> Result<(), EngineError> {
        self.commit(Some(table), batch)
    }

    /// The parts go into one write transaction as they come; it commits
    /// at [`Part::Commit`] and is dropped (rolled back) if they end first.
    fn write_parts(&self, parts: &mut dyn Iterator<Item = Part>) -> Result<PartsEnd, EngineError> {
        let db = self.db();
        let txn = db.begin_write().map_err(EngineError::engine)?;
        let mut tables = OpenTables::new(&txn);
        loop {
            match parts.next() {
                Some(Part::Rows(batch)) => tables.apply(batch)?,
                Some(Part::Commit) => break,
                None => return Ok(PartsEnd::Abandoned),
            }
        }
        drop(tables);
        txn.commit().map_err(EngineError::engine)?;
        drop(db);
        self.compact_if_needed(false);
        Ok(PartsEnd::Committed)
    }

    fn reader(&self) -> Result<Box<dyn Reader + '_>, EngineError> {
        let txn = self.db().begin_read().map_err(EngineError::engine)?;
        Ok(Box::new(RedbReader {
            txn,
            tables: Default::default(),
        }))
    }

    fn size_on_disk(&self) -> Result<u64, EngineError> {
        disk_bytes(&self.path.join(REDB_FILE))
    }

    fn name(&self) -> &'static str {
        "redb"
    }
}
