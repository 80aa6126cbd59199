//! The sled engine (sled 0.34, the stable line).
//!
//! Every table lives in one sled tree, `repo`, under its one-byte
//! [`Table::prefix`]: sled's `apply_batch` is atomic within one tree (the
//! batch is sealed in the log as a unit and recovered all or nothing), which
//! a multi-tree transaction would only give through sled's optimistic
//! transaction machinery. After the batch, `flush` writes and fsyncs sled's
//! log, so a write that returned `Ok` survives `kill -9`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::lock::{lock_wait, retry_while_locked};
use super::{Batch, Engine, EngineError, Op, Scan, Table};

const TREE: &str = "repo";

/// A store on disk, in a sled database folder.
pub struct SledEngine {
    path: PathBuf,
    db: sled::Db,
    tree: sled::Tree,
}

impl std::fmt::Debug for SledEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledEngine")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SledEngine {
    /// Opens (creating if needed) the sled database in folder `path`,
    /// waiting up to [`lock_wait`] (30 s unless [`LOCK_WAIT_ENV`](super::LOCK_WAIT_ENV) says
    /// otherwise) while another process has it open; see
    /// [`SledEngine::open_waiting`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self, EngineError> {
        Self::open_waiting(path, lock_wait())
    }

    /// Opens (creating if needed) the sled database in folder `path`. While
    /// another process (or another handle in this one) has it open, the
    /// open is retried for up to `wait`: gelstore processes on one data
    /// folder take turns rather than fail. After
    /// 200 ms of waiting, one line on stderr says so. When `wait` runs out
    /// the error is [`EngineError::Locked`].
    ///
    /// The retry also covers sled's own lag: it releases its lock file only
    /// when its last background job for a closed handle has finished, which
    /// can be a moment after the handle was dropped.
    pub fn open_waiting(path: impl AsRef<Path>, wait: Duration) -> Result<Self, EngineError> {
        let path = path.as_ref().to_path_buf();
        let db = retry_while_locked(&path, wait, || {
            sled::Config::new()
                .path(&path)
                // Writes are flushed explicitly, per batch. The background
                // flusher is also sled's segment cleaner, but turning it on
                // (every 100 or 500 ms) left the file as large under
                // single-record commits (~290 MB for 20k commits, 5 MB of
                // rows) and slowed them: it only added fsyncs.
                .flush_every_ms(None)
                .open()
                .map_err(|e| open_error(&path, e))
        })?;
        let tree = db.open_tree(TREE).map_err(EngineError::engine)?;
        Ok(SledEngine { path, db, tree })
    }

    /// The database folder.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn open_error(path: &Path, e: sled::Error) -> EngineError {
    match &e {
        sled::Error::Io(io) if io.to_string().contains("could not acquire lock") => {
            EngineError::Locked {
                path: path.display().to_string(),
                detail: io.to_string(),
                waited: Duration::ZERO,
            }
        }
        _ => EngineError::engine(e),
    }
}

fn prefixed(table: Table, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 1);
    out.push(table.prefix());
    out.extend_from_slice(key);
    out
}

impl Engine for SledEngine {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        let value = self
            .tree
            .get(prefixed(table, key))
            .map_err(EngineError::engine)?;
        Ok(value.map(|v| v.to_vec()))
    }

    fn scan(&self, table: Table, start: &[u8]) -> Scan<'_> {
        let prefix = table.prefix();
        let iter = self
            .tree
            .range(prefixed(table, start)..)
            .take_while(move |item| match item {
                Ok((k, _)) => k.first() == Some(&prefix),
                Err(_) => true,
            })
            .map(|item| {
                item.map(|(k, v)| (k[1..].to_vec(), v.to_vec()))
                    .map_err(EngineError::engine)
            });
        Box::new(iter)
    }

    fn write(&self, batch: Batch) -> Result<(), EngineError> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut sled_batch = sled::Batch::default();
        for op in batch.into_ops() {
            match op {
                Op::Put(table, key, value) => sled_batch.insert(prefixed(table, &key), value),
                Op::Delete(table, key) => sled_batch.remove(prefixed(table, &key)),
            }
        }
        self.tree
            .apply_batch(sled_batch)
            .map_err(EngineError::engine)?;
        self.db.flush().map_err(EngineError::engine)?;
        Ok(())
    }

    fn size_on_disk(&self) -> Result<u64, EngineError> {
        self.db.size_on_disk().map_err(EngineError::engine)
    }

    fn name(&self) -> &'static str {
        "sled"
    }
}
