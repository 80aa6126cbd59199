//! Reference counting of blocks, and the table layout that goes with it.
//!
//! Every block in the store is counted: the head commit counts 1, every
//! node of the current MST counts 1 (a node can appear only once in a tree:
//! its keys fix its position), and a record block counts once per MST key
//! whose value it is (two keys may hold identical records). A block is
//! written when its count goes from 0 to 1 and deleted, with its `Refs` and
//! `RevLog` rows, when it drops back to 0. Each commit changes the counts
//! by what `Mst::diff` reports between the old and the new tree (nodes
//! created/removed, record CIDs set/replaced) plus the commit blocks, so the
//! work is proportional to the change, not to the repository.
//!
//! Rows: `Refs[cid] = count (u64 BE) ‖ rev (u64 BE)`, where `rev` is the
//! commit that (last) created the block; `RevLog[rev (u64 BE) ‖ cid] = ""`
//! for every live block, so the blocks created after a rev are one range
//! scan away.

use std::collections::{BTreeMap, HashMap};

use cid::Cid;

use super::RepoError;
use crate::tid::Tid;
use gelstore_store::{Batch, Engine, Table};

/// A block's row in `Refs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RefRow {
    pub count: u64,
    pub rev: Tid,
}

impl RefRow {
    pub fn encode(self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&self.count.to_be_bytes());
        out[8..].copy_from_slice(&self.rev.as_u64().to_be_bytes());
        out
    }

    pub fn decode(cid: &Cid, bytes: &[u8]) -> Result<RefRow, RepoError> {
        let arr: [u8; 16] = bytes
            .try_into()
            .map_err(|_| RepoError::Corrupt(format!("refs row of {cid} is not 16 bytes")))?;
        let (count, rev) = arr.split_at(8);
        Ok(RefRow {
            count: u64::from_be_bytes(count.try_into().unwrap_or_default()),
            rev: Tid::from_u64(u64::from_be_bytes(rev.try_into().unwrap_or_default())),
        })
    }
}

/// The `RevLog` key of a block created at `rev`.
pub(crate) fn revlog_key(rev: Tid, cid: &Cid) -> Vec<u8> {
    let mut key = rev.as_u64().to_be_bytes().to_vec();
    key.extend_from_slice(&cid.to_bytes());
    key
}

/// Splits a `RevLog` key.
pub(crate) fn parse_revlog_key(key: &[u8]) -> Result<(Tid, Cid), RepoError> {
    let bad = || RepoError::Corrupt("malformed revlog row".into());
    if key.len() < 9 {
        return Err(bad());
    }
    let (rev, cid) = key.split_at(8);
    let rev = Tid::from_u64(u64::from_be_bytes(rev.try_into().map_err(|_| bad())?));
    let cid = Cid::try_from(cid).map_err(|_| bad())?;
    Ok((rev, cid))
}

/// Collects count changes for one commit and turns them into table rows.
#[derive(Default)]
pub(crate) struct Accounting {
    deltas: BTreeMap<Cid, i64>,
    bytes: HashMap<Cid, Vec<u8>>,
}

/// What a commit did to the block table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockChanges {
    /// Blocks written (count went from 0 to 1).
    pub written: usize,
    /// Bytes of the blocks written.
    pub written_bytes: usize,
    /// Blocks deleted (count went to 0).
    pub deleted: usize,
}

impl Accounting {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `delta` to the count of `cid`.
    pub fn add(&mut self, cid: Cid, delta: i64) {
        *self.deltas.entry(cid).or_default() += delta;
    }

    /// The bytes of a block that may be new.
    pub fn provide(&mut self, cid: Cid, bytes: Vec<u8>) {
        self.bytes.entry(cid).or_insert(bytes);
    }

    /// Adds to `batch` the rows that apply the counted changes, as commit
    /// `rev`. `engine` is `None` for a store known to hold no block (an
    /// import), which saves a lookup per block.
    pub fn finish(
        self,
        engine: Option<&dyn Engine>,
        rev: Tid,
        batch: &mut Batch,
    ) -> Result<BlockChanges, RepoError> {
        let mut changes = BlockChanges::default();
        let mut bytes = self.bytes;
        for (cid, delta) in self.deltas {
            if delta == 0 {
                continue;
            }
            let key = cid.to_bytes();
            let stored = match engine {
                Some(engine) => engine.get(Table::Refs, &key)?,
                None => None,
            };
            let row = match stored {
                Some(raw) => Some(RefRow::decode(&cid, &raw)?),
                None => None,
            };
            let count = row.map_or(0, |r| r.count);
            let new = i128::from(count) + i128::from(delta);
            if new < 0 {
                return Err(RepoError::Corrupt(format!(
                    "reference count of block {cid} would drop below zero"
                )));
            }
            let new = new as u64;
            match row {
                Some(row) if new == 0 => {
                    batch.delete(Table::Blocks, key.clone());
                    batch.delete(Table::Refs, key.clone());
                    batch.delete(Table::RevLog, revlog_key(row.rev, &cid));
                    changes.deleted += 1;
                }
                Some(row) => {
                    let row = RefRow { count: new, ..row };
                    batch.put(Table::Refs, key, row.encode().to_vec());
                }
                None => {
                    let data = bytes.remove(&cid).ok_or_else(|| {
                        RepoError::Corrupt(format!("new block {cid} has no bytes to store"))
                    })?;
                    changes.written += 1;
                    changes.written_bytes += data.len();
                    batch.put(Table::Blocks, key.clone(), data);
                    batch.put(
                        Table::Refs,
                        key,
                        RefRow { count: new, rev }.encode().to_vec(),
                    );
                    batch.put(Table::RevLog, revlog_key(rev, &cid), Vec::new());
                }
            }
        }
        Ok(changes)
    }
}
