//! Storage engines: the small ordered key-value interface a repository is
//! kept in, and its implementations.
//!
//! A repository needs very little from its storage: a few tables of byte
//! keys and byte values ([`Table`]), point reads, ordered scans, and one
//! write operation that applies a whole [`Batch`] of puts and deletes
//! **atomically and durably**: when [`Engine::write`] returns `Ok`, every
//! change of the batch is on disk and survives a crash of the process (or of
//! the machine, as far as `fsync` goes); when it fails or the process dies
//! during the call, either all of the batch is there after a restart or none
//! of it is. [`Engine::write_parts`] is the same write handed over in parts
//! as they are made (an import writes while it verifies), committed only
//! when the producer says so.
//!
//! Engines:
//!
//! - [`RedbEngine`]: redb 4 (the default for new stores). One redb table
//!   per [`Table`]; a batch is one write transaction, fsynced on commit;
//!   pages a commit frees are reused, and a file that has grown is
//!   compacted when a quarter of it is free, so it follows the live data.
//! - [`SledEngine`]: sled 0.34. All tables share one sled tree, each table
//!   under a one-byte key prefix, so a batch is a single `apply_batch`
//!   (atomic in sled's log) followed by a `flush` (fsync). Its log keeps
//!   dead versions until a segment is mostly dead, so under many small
//!   commits its folder grows far past its rows (see `benches/store_engines.rs`).
//! - [`MemoryEngine`]: a `BTreeMap` behind a lock, for tests.
//!
//! [`open_store`] opens a store folder with the engine it already holds
//! ([`EngineKind::detect`]); a new folder gets [`EngineKind::for_new_store`]
//! ([`ENGINE_ENV`], else [`EngineKind::DEFAULT`]). Another engine (an LSM,
//! SQLite, ...) only has to implement [`Engine`].
//!
//! ```
//! use gelstore_store::{Batch, Engine, MemoryEngine, Table};
//!
//! let engine = MemoryEngine::new();
//! let mut batch = Batch::default();
//! batch.put(Table::Meta, b"head".to_vec(), b"bafy...".to_vec());
//! engine.write(batch).unwrap(); // all of it on disk, or none of it
//! assert_eq!(engine.get(Table::Meta, b"head").unwrap().as_deref(), Some(&b"bafy..."[..]));
//! ```
//! This module knows nothing of blocks, CIDs or commits; the repository
//! decides what the tables hold (see `repo::repository`).

pub mod files;
mod kind;
mod lock;
mod memory;
mod redb;
mod sled;

pub use self::kind::{ENGINE_ENV, EngineKind, open_store};
pub use self::lock::{LOCK_WAIT, LOCK_WAIT_ENV, lock_wait};
pub use self::memory::MemoryEngine;
pub use self::redb::{COMPACT_MIN_BYTES, REDB_FILE, RedbEngine};
pub use self::sled::SledEngine;

use std::error::Error as StdError;

/// The tables of a store. The repository's layout (what each key and value
/// is) is described in `repo::repository`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Table {
    /// Small named values (the account DID, the head commit, the format version).
    Meta,
    /// The repository's record blocks, by where they were created:
    /// creation rev ‖ n → CID bytes ‖ block bytes (see `repo::repository`).
    Blocks,
    /// The repository's MST nodes and commits, keyed as `Blocks` (kept
    /// apart: they are replaced by nearly every commit, records rarely).
    Nodes,
    /// Each block's place and reference count: CID bytes → its table, its
    /// key there and its count.
    Refs,
    /// Store format 1's list of which commit created each block (rev ‖ CID
    /// bytes → nothing): empty once a store is migrated to format 2.
    RevLog,
    /// The repository event stream: seq (u64 BE) → event (see `repo::events`).
    Events,
    /// The size of each `Events` row: seq (u64 BE) → row bytes (u64 BE), so
    /// that opening a store learns the event window without reading it.
    EventSizes,
    /// Sync's mirror of the remote repository: `collection/rkey` → CID
    /// bytes of every record on the PDS (see `sync::stored`). Not
    /// repository blocks: no reference counts, not in `Repository::check`.
    Mirror,
}

impl Table {
    /// Every table.
    pub const ALL: [Table; 8] = [
        Table::Meta,
        Table::Blocks,
        Table::Nodes,
        Table::Refs,
        Table::RevLog,
        Table::Events,
        Table::EventSizes,
        Table::Mirror,
    ];

    /// The one-byte prefix of the table's keys in engines that keep all
    /// tables in one keyspace.
    pub fn prefix(self) -> u8 {
        match self {
            Table::Meta => b'm',
            Table::Blocks => b'b',
            Table::Nodes => b'n',
            Table::Refs => b'r',
            Table::RevLog => b'l',
            Table::Events => b'e',
            Table::EventSizes => b'z',
            Table::Mirror => b's',
        }
    }

    /// The table's name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Table::Meta => "meta",
            Table::Blocks => "blocks",
            Table::Nodes => "nodes",
            Table::Refs => "refs",
            Table::RevLog => "revlog",
            Table::Events => "events",
            Table::EventSizes => "event_sizes",
            Table::Mirror => "mirror",
        }
    }
}

/// A failure of the storage engine itself (I/O, a corrupt or locked
/// database), as opposed to a value that is simply absent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// Another process (or another handle in this one) kept the store open
    /// for as long as the opener waited (see `SledEngine::open`).
    #[error(
        "the store at {path} is still in use by another gelstore process after waiting {} s; \
         try again when that process has finished (or wait longer: GELSTORE_LOCK_WAIT_SECS=SECONDS)",
        waited.as_secs_f32().round()
    )]
    Locked {
        /// The store's folder.
        path: String,
        /// What the engine said (kept for debugging; not in the message).
        detail: String,
        /// How long the opener was to wait (it gave up after that).
        waited: std::time::Duration,
    },
    /// A store engine named (in [`ENGINE_ENV`] or an option) that this
    /// build does not have.
    #[error("unknown store engine {name:?}: the engines are redb and sled")]
    UnknownEngine {
        /// The name given (cut to 40 characters).
        name: String,
    },
    /// The store folder holds files of two engines: which one is the store
    /// cannot be told.
    #[error(
        "the store at {path} holds both a redb and a sled database; remove the one that is not the store"
    )]
    TwoEngines {
        /// The store's folder.
        path: String,
    },
    /// Anything else the engine reported.
    #[error("storage engine failed: {0}")]
    Engine(#[source] Box<dyn StdError + Send + Sync + 'static>),
}

impl EngineError {
    /// Wraps an engine's own error.
    pub fn engine(error: impl Into<Box<dyn StdError + Send + Sync + 'static>>) -> Self {
        EngineError::Engine(error.into())
    }
}

/// One change of a [`Batch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Sets `key` in `table` to `value`.
    Put(Table, Vec<u8>, Vec<u8>),
    /// Removes `key` from `table` (absent keys are fine).
    Delete(Table, Vec<u8>),
}

/// One step of a write in parts ([`Engine::write_parts`]).
#[derive(Debug)]
pub enum Part {
    /// More changes of the write, after those of the parts before.
    Rows(Batch),
    /// The write is complete: make it durable.
    Commit,
}

/// How a write in parts ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartsEnd {
    /// Every part is on disk, atomically and durably.
    Committed,
    /// The parts ended without [`Part::Commit`]: nothing was written.
    Abandoned,
}

/// A list of changes applied together by [`Engine::write`]. Later changes
/// to the same key win.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    ops: Vec<Op>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a put.
    pub fn put(&mut self, table: Table, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.ops.push(Op::Put(table, key.into(), value.into()));
    }

    /// Adds a delete.
    pub fn delete(&mut self, table: Table, key: impl Into<Vec<u8>>) {
        self.ops.push(Op::Delete(table, key.into()));
    }

    /// The changes, in order.
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// Number of changes.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether there are no changes.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Takes the changes out.
    pub fn into_ops(self) -> Vec<Op> {
        self.ops
    }
}

/// The key/value pairs of a scan, in key order.
pub type Scan<'a> = Box<dyn Iterator<Item = Result<(Vec<u8>, Vec<u8>), EngineError>> + 'a>;

/// Point reads for a bounded run of them (an export, a check): an engine
/// that can serves them all from one read transaction, so each read is
/// only its lookup, and they all see the store as it was when the reader
/// was made. Hold one no longer than that run: a live read transaction
/// keeps the pages it sees from being reused.
pub trait Reader {
    /// The value of `key` in `table`.
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError>;
}

/// A [`Reader`] that reads through [`Engine::get`]: every read on its
/// own, as engines with nothing better do.
pub struct Direct<'a, E: ?Sized>(pub &'a E);

impl<E: Engine + ?Sized> Reader for Direct<'_, E> {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        self.0.get(table, key)
    }
}

/// An ordered key-value store with atomic, durable batches.
///
/// Implementations must be safe to share between threads; a repository
/// serialises its own writes, so an engine only needs reads to see either
/// all or none of a concurrent batch.
pub trait Engine: Send + Sync {
    /// The value of `key` in `table`.
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError>;

    /// The pairs of `table` with keys `>= start`, in byte order of the keys
    /// (keys are returned without any engine-internal prefix).
    fn scan(&self, table: Table, start: &[u8]) -> Scan<'_>;

    /// Applies every change of `batch`, atomically and durably (see the
    /// module docs). An empty batch is a no-op.
    fn write(&self, batch: Batch) -> Result<(), EngineError>;

    /// Bytes the store takes on disk (0 for memory engines).
    fn size_on_disk(&self) -> Result<u64, EngineError>;

    /// The engine's name, for messages (`redb`, `sled`, `memory`).
    fn name(&self) -> &'static str;

    /// Applies `batch` like [`write`](Engine::write) and, in the same
    /// atomic write, lays `table`'s rows out again as tightly as the engine
    /// can: for a B-tree, full pages again where deletes left holes that
    /// appends at the end never refill. Same rows, same keys. Engines with
    /// nothing to gain just write the batch.
    fn repack(&self, table: Table, batch: Batch) -> Result<(), EngineError> {
        let _ = table;
        self.write(batch)
    }

    /// A [`Reader`] for a bounded run of point reads.
    fn reader(&self) -> Result<Box<dyn Reader + '_>, EngineError> {
        Ok(Box::new(Direct(self)))
    }

    /// One atomic, durable write of every [`Part::Rows`] batch `parts`
    /// yields, in order, made when it yields [`Part::Commit`] (nothing after
    /// that is read). If `parts` ends first, nothing is written: a producer
    /// that fails (or panics) only has to stop. An engine may apply the
    /// first parts while later ones are still being made, so a producer on
    /// another thread overlaps its work with the engine's; by default the
    /// parts are gathered and written as one [`write`](Engine::write).
    fn write_parts(&self, parts: &mut dyn Iterator<Item = Part>) -> Result<PartsEnd, EngineError> {
        let mut all = Batch::new();
        for part in parts {
            match part {
                Part::Rows(batch) => all.ops.extend(batch.ops),
                Part::Commit => {
                    self.write(all)?;
                    return Ok(PartsEnd::Committed);
                }
            }
        }
        Ok(PartsEnd::Abandoned)
    }
}

impl<E: Engine + ?Sized> Engine for Box<E> {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        (**self).get(table, key)
    }
    fn scan(&self, table: Table, start: &[u8]) -> Scan<'_> {
        (**self).scan(table, start)
    }
    fn write(&self, batch: Batch) -> Result<(), EngineError> {
        (**self).write(batch)
    }
    fn size_on_disk(&self) -> Result<u64, EngineError> {
        (**self).size_on_disk()
    }
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn repack(&self, table: Table, batch: Batch) -> Result<(), EngineError> {
        (**self).repack(table, batch)
    }
    fn reader(&self) -> Result<Box<dyn Reader + '_>, EngineError> {
        (**self).reader()
    }
    fn write_parts(&self, parts: &mut dyn Iterator<Item = Part>) -> Result<PartsEnd, EngineError> {
        (**self).write_parts(parts)
    }
}

impl<E: Engine + ?Sized> Engine for std::sync::Arc<E> {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        (**self).get(table, key)
    }
    fn scan(&self, table: Table, start: &[u8]) -> Scan<'_> {
        (**self).scan(table, start)
    }
    fn write(&self, batch: Batch) -> Result<(), EngineError> {
        (**self).write(batch)
    }
    fn size_on_disk(&self) -> Result<u64, EngineError> {
        (**self).size_on_disk()
    }
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn repack(&self, table: Table, batch: Batch) -> Result<(), EngineError> {
        (**self).repack(table, batch)
    }
    fn reader(&self) -> Result<Box<dyn Reader + '_>, EngineError> {
        (**self).reader()
    }
    fn write_parts(&self, parts: &mut dyn Iterator<Item = Part>) -> Result<PartsEnd, EngineError> {
        (**self).write_parts(parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    /// The contract every engine must keep.
    pub(crate) fn engine_contract(engine: &dyn Engine) {
        assert_eq!(engine.get(Table::Blocks, b"a").unwrap(), None);
        let mut batch = Batch::new();
        batch.put(Table::Blocks, b"a".to_vec(), b"1".to_vec());
        batch.put(Table::Blocks, b"c".to_vec(), b"3".to_vec());
        batch.put(Table::Blocks, b"b".to_vec(), b"2".to_vec());
        batch.put(Table::Refs, b"a".to_vec(), b"other table".to_vec());
        batch.put(Table::Meta, b"z".to_vec(), b"x".to_vec());
        batch.put(Table::Mirror, b"b".to_vec(), b"mirrored".to_vec());
        engine.write(batch).unwrap();
        assert_eq!(
            engine.get(Table::Blocks, b"a").unwrap(),
            Some(b"1".to_vec())
        );
        assert_eq!(
            engine.get(Table::Refs, b"a").unwrap(),
            Some(b"other table".to_vec())
        );
        let all: Vec<_> = engine
            .scan(Table::Blocks, b"")
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            all,
            vec![
                (b"a".to_vec(), b"1".to_vec()),
                (b"b".to_vec(), b"2".to_vec()),
                (b"c".to_vec(), b"3".to_vec()),
            ]
        );
        let from_b: Vec<_> = engine
            .scan(Table::Blocks, b"b")
            .map(|r| r.unwrap().0)
            .collect();
        assert_eq!(from_b, vec![b"b".to_vec(), b"c".to_vec()]);
        // Scans stay inside their table.
        assert_eq!(engine.scan(Table::RevLog, b"").count(), 0);
        assert_eq!(engine.scan(Table::Mirror, b"").count(), 1);
        assert_eq!(
            engine.get(Table::Mirror, b"b").unwrap(),
            Some(b"mirrored".to_vec())
        );
        assert_eq!(engine.scan(Table::Meta, b"").count(), 1);

        let mut batch = Batch::new();
        batch.delete(Table::Blocks, b"a".to_vec());
        batch.delete(Table::Blocks, b"missing".to_vec());
        batch.put(Table::Blocks, b"b".to_vec(), b"first".to_vec());
        batch.put(Table::Blocks, b"b".to_vec(), b"last".to_vec());
        engine.write(batch).unwrap();
        assert_eq!(engine.get(Table::Blocks, b"a").unwrap(), None);
        assert_eq!(
            engine.get(Table::Blocks, b"b").unwrap(),
            Some(b"last".to_vec())
        );
        engine.write(Batch::new()).unwrap();

        let reader = engine.reader().unwrap();
        assert_eq!(
            reader.get(Table::Blocks, b"b").unwrap(),
            Some(b"last".to_vec())
        );
        assert_eq!(reader.get(Table::Blocks, b"a").unwrap(), None);
        assert_eq!(
            reader.get(Table::Refs, b"a").unwrap(),
            Some(b"other table".to_vec())
        );
        drop(reader);

        // A repack keeps every row of its table (and of the others) and
        // applies its batch with it.
        let rows = |table| -> Vec<_> { engine.scan(table, b"").map(Result::unwrap).collect() };
        let (blocks, refs) = (rows(Table::Blocks), rows(Table::Refs));
        let mut batch = Batch::new();
        batch.put(Table::Meta, b"repacked".to_vec(), b"yes".to_vec());
        engine.repack(Table::Blocks, batch).unwrap();
        assert_eq!(rows(Table::Blocks), blocks);
        assert_eq!(rows(Table::Refs), refs);
        assert_eq!(
            engine.get(Table::Meta, b"repacked").unwrap(),
            Some(b"yes".to_vec())
        );

        write_parts_contract(engine);
    }

    /// A write in parts lands whole at its commit, or not at all.
    fn write_parts_contract(engine: &dyn Engine) {
        let part = |key: &[u8], value: &[u8]| {
            let mut batch = Batch::new();
            batch.put(Table::Mirror, key.to_vec(), value.to_vec());
            Part::Rows(batch)
        };
        let mirror = || -> Vec<_> {
            engine
                .scan(Table::Mirror, b"")
                .map(|row| row.unwrap().0)
                .collect()
        };
        let before = mirror();
        // Parts made on another thread, which stops before the commit (as
        // a failed producer does): nothing of them is written.
        let (sender, receiver) = std::sync::mpsc::sync_channel(1);
        let end = std::thread::scope(|scope| {
            scope.spawn(move || {
                for key in [&b"p1"[..], b"p2", b"p3"] {
                    sender.send(part(key, b"v")).unwrap();
                }
            });
            engine.write_parts(&mut receiver.into_iter()).unwrap()
        });
        assert_eq!(end, PartsEnd::Abandoned);
        assert_eq!(mirror(), before);

        // With the commit: every part, later ones winning; nothing after
        // the commit is read.
        let mut parts = vec![
            part(b"p1", b"first"),
            part(b"p2", b"v"),
            part(b"p1", b"last"),
            Part::Commit,
            part(b"p3", b"after the commit"),
        ]
        .into_iter();
        assert_eq!(engine.write_parts(&mut parts).unwrap(), PartsEnd::Committed);
        assert_eq!(parts.count(), 1, "the part after the commit is left");
        assert_eq!(
            engine.get(Table::Mirror, b"p1").unwrap(),
            Some(b"last".to_vec())
        );
        assert_eq!(
            engine.get(Table::Mirror, b"p2").unwrap(),
            Some(b"v".to_vec())
        );
        assert_eq!(engine.get(Table::Mirror, b"p3").unwrap(), None);
    }

    #[test]
    fn a_redb_repack_fills_the_pages_deletes_emptied() {
        let dir = tempfile::tempdir().unwrap();
        let engine = RedbEngine::open(dir.path()).unwrap();
        let value = vec![9u8; 900];
        let mut batch = Batch::new();
        for i in 0u32..20_000 {
            batch.put(Table::Nodes, i.to_be_bytes().to_vec(), value.clone());
        }
        engine.write(batch).unwrap();
        // Every other row deleted: each page keeps half of its rows, above
        // the share under which redb merges a page into its neighbour.
        let mut batch = Batch::new();
        for i in (0u32..20_000).filter(|i| i % 2 == 1) {
            batch.delete(Table::Nodes, i.to_be_bytes().to_vec());
        }
        engine.write(batch).unwrap();
        let used = || engine.size_on_disk().unwrap() - engine.free_bytes().unwrap();
        let used_before = used();
        let kept: Vec<_> = engine.scan(Table::Nodes, b"").map(Result::unwrap).collect();
        engine.repack(Table::Nodes, Batch::new()).unwrap();
        assert_eq!(
            engine
                .scan(Table::Nodes, b"")
                .map(Result::unwrap)
                .collect::<Vec<_>>(),
            kept
        );
        // The rows now take about half the pages (the rest is free for the
        // next writes, or given back by a compaction).
        let used_after = used();
        assert!(
            used_after * 10 < used_before * 7,
            "{used_before} B of live pages before the repack, {used_after} B after"
        );
    }

    #[test]
    fn every_table_has_its_own_prefix_and_name() {
        let prefixes: std::collections::BTreeSet<u8> =
            Table::ALL.iter().map(|t| t.prefix()).collect();
        let names: std::collections::BTreeSet<&str> = Table::ALL.iter().map(|t| t.name()).collect();
        assert_eq!(prefixes.len(), Table::ALL.len());
        assert_eq!(names.len(), Table::ALL.len());
    }

    #[test]
    fn memory_engine_keeps_the_contract() {
        engine_contract(&MemoryEngine::new());
    }

    type Opener = fn(&std::path::Path, Duration) -> Result<Arc<dyn Engine>, EngineError>;

    /// Each on-disk engine, opened with a lock wait.
    fn disk_engines() -> [(&'static str, Opener); 2] {
        [
            ("redb", |p, w| {
                Ok(Arc::new(RedbEngine::open_waiting(p, w)?) as Arc<dyn Engine>)
            }),
            ("sled", |p, w| {
                Ok(Arc::new(SledEngine::open_waiting(p, w)?) as Arc<dyn Engine>)
            }),
        ]
    }

    #[test]
    fn disk_engines_keep_the_contract_and_persist() {
        for (name, open) in disk_engines() {
            let dir = tempfile::tempdir().unwrap();
            {
                let engine = open(dir.path(), Duration::ZERO).unwrap();
                assert_eq!(engine.name(), name);
                engine_contract(&*engine);
                assert!(engine.size_on_disk().unwrap() > 0, "{name}");
            }
            let engine = open(dir.path(), Duration::from_secs(10)).unwrap();
            assert_eq!(
                engine.get(Table::Blocks, b"b").unwrap(),
                Some(b"last".to_vec()),
                "{name}"
            );
            assert_eq!(engine.get(Table::Meta, b"z").unwrap(), Some(b"x".to_vec()));
            drop(engine);
            assert_eq!(
                EngineKind::detect(dir.path())
                    .unwrap()
                    .map(EngineKind::name),
                Some(name)
            );
        }
    }

    #[test]
    fn disk_engines_refuse_a_second_opener_after_their_wait() {
        for (name, open) in disk_engines() {
            let dir = tempfile::tempdir().unwrap();
            let _first = open(dir.path(), Duration::ZERO).unwrap();
            let started = std::time::Instant::now();
            match open(dir.path(), Duration::from_secs(1)) {
                Err(e @ EngineError::Locked { .. }) => {
                    let waited = started.elapsed();
                    assert!(waited >= Duration::from_secs(1), "{name}: {waited:?}");
                    assert!(waited < Duration::from_secs(5), "{name}: {waited:?}");
                    let message = e.to_string();
                    assert!(
                        message.contains("still in use by another gelstore process")
                            && message.contains("after waiting 1 s")
                            && message.contains("GELSTORE_LOCK_WAIT_SECS"),
                        "{name}: {message}"
                    );
                    // The engine's own words stay out of the message.
                    assert!(!message.contains("could not acquire lock"), "{message}");
                    assert!(!message.contains("lock file held"), "{message}");
                }
                other => panic!("{name}: expected Locked, got {:?}", other.map(|_| ())),
            }
            match open(dir.path(), Duration::ZERO) {
                Err(EngineError::Locked { .. }) => {}
                other => panic!("{name}: expected Locked, got {:?}", other.map(|_| ())),
            }
        }
    }

    #[test]
    fn disk_engines_wait_for_a_handle_closed_meanwhile() {
        for (name, open) in disk_engines() {
            let dir = tempfile::tempdir().unwrap();
            let first = open(dir.path(), Duration::ZERO).unwrap();
            let path = dir.path().to_path_buf();
            let second =
                std::thread::spawn(move || open(&path, Duration::from_secs(20)).map(|_| ()));
            std::thread::sleep(Duration::from_millis(400));
            drop(first);
            second
                .join()
                .unwrap()
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    #[test]
    fn a_store_keeps_its_engine_and_a_new_one_gets_the_one_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        for kind in EngineKind::ALL {
            let folder = dir.path().join(kind.name());
            assert_eq!(EngineKind::detect(&folder).unwrap(), None);
            let engine = open_store(&folder, Some(kind)).unwrap();
            assert_eq!(engine.name(), kind.name());
            let mut batch = Batch::new();
            batch.put(Table::Meta, b"k".to_vec(), b"v".to_vec());
            engine.write(batch).unwrap();
            drop(engine);
            assert_eq!(EngineKind::detect(&folder).unwrap(), Some(kind));
            // Asked for the other engine, the folder still opens with its own.
            let other = EngineKind::ALL.into_iter().find(|k| *k != kind).unwrap();
            let engine = retry(|| open_store(&folder, Some(other)));
            assert_eq!(engine.name(), kind.name());
            assert_eq!(engine.get(Table::Meta, b"k").unwrap(), Some(b"v".to_vec()));
        }
        assert_eq!(EngineKind::parse("ReDB").unwrap(), EngineKind::Redb);
        let err = EngineKind::parse("rocks").unwrap_err().to_string();
        assert!(err.contains("unknown store engine \"rocks\""), "{err}");
        std::fs::write(dir.path().join("redb").join("db"), b"").unwrap();
        assert!(matches!(
            EngineKind::detect(&dir.path().join("redb")),
            Err(EngineError::TwoEngines { .. })
        ));
    }

    /// sled lets its lock go a moment after the handle is dropped.
    fn retry(open: impl Fn() -> Result<Arc<dyn Engine>, EngineError>) -> Arc<dyn Engine> {
        for _ in 0..200 {
            match open() {
                Err(EngineError::Locked { .. }) => std::thread::sleep(Duration::from_millis(50)),
                other => return other.unwrap(),
            }
        }
        panic!("still locked")
    }

    #[test]
    fn redb_gives_free_space_back_when_compacted() {
        let dir = tempfile::tempdir().unwrap();
        let big = vec![7u8; 64 * 1024];
        let engine = RedbEngine::open(dir.path()).unwrap();
        let small = engine.size_on_disk().unwrap();
        let mut batch = Batch::new();
        for i in 0u32..200 {
            batch.put(Table::Blocks, i.to_be_bytes().to_vec(), big.clone());
        }
        engine.write(batch).unwrap();
        let mut batch = Batch::new();
        for i in 0u32..190 {
            batch.delete(Table::Blocks, i.to_be_bytes().to_vec());
        }
        engine.write(batch).unwrap();
        drop(engine);
        // The first big write grew the file past half again its size, so
        // its free space was counted then (none) and the size recorded; the
        // deletes left it mostly free, which an explicit compaction gives
        // back.
        let mut engine = RedbEngine::open(dir.path()).unwrap();
        let before = engine.size_on_disk().unwrap();
        assert!(
            before > 10 * 1024 * 1024 && before > 2 * small,
            "{before} B"
        );
        engine.compact().unwrap();
        let size = engine.size_on_disk().unwrap();
        assert!(size < 4 * 1024 * 1024, "{size} B after compaction");
        assert_eq!(engine.scan(Table::Blocks, b"").count(), 10);
    }
}
