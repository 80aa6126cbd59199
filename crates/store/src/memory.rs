//! An in-memory engine for tests: a sorted map behind a lock.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use super::{Batch, Engine, EngineError, Op, Scan, Table};

type Map = BTreeMap<(Table, Vec<u8>), Vec<u8>>;

/// An engine that keeps everything in memory. Batches are atomic (applied
/// under one lock); nothing is durable.
#[derive(Debug, Default)]
pub struct MemoryEngine {
    map: Mutex<Map>,
}

impl MemoryEngine {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of keys in `table`.
    pub fn len(&self, table: Table) -> usize {
        self.lock().keys().filter(|(t, _)| *t == table).count()
    }

    /// Total bytes of keys and values in `table`.
    pub fn bytes(&self, table: Table) -> usize {
        self.lock()
            .iter()
            .filter(|((t, _), _)| *t == table)
            .map(|((_, k), v)| k.len() + v.len())
            .sum()
    }

    fn lock(&self) -> MutexGuard<'_, Map> {
        // Map inserts and removes do not panic, so a poisoned lock still
        // holds a consistent map.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Engine for MemoryEngine {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        Ok(self.lock().get(&(table, key.to_vec())).cloned())
    }

    fn scan(&self, table: Table, start: &[u8]) -> Scan<'_> {
        // Collected up front: the lock is not held across the iteration.
        let items: Vec<_> = self
            .lock()
            .range((table, start.to_vec())..)
            .take_while(|((t, _), _)| *t == table)
            .map(|((_, k), v)| Ok((k.clone(), v.clone())))
            .collect();
        Box::new(items.into_iter())
    }

    fn write(&self, batch: Batch) -> Result<(), EngineError> {
        let mut map = self.lock();
        for op in batch.into_ops() {
            match op {
                Op::Put(table, key, value) => {
                    map.insert((table, key), value);
                }
                Op::Delete(table, key) => {
                    map.remove(&(table, key));
                }
            }
        }
        Ok(())
    }

    fn size_on_disk(&self) -> Result<u64, EngineError> {
        Ok(0)
    }

    fn name(&self) -> &'static str {
        "memory"
    }
}
