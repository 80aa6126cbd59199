//! Reference counting of blocks, and the table layout that goes with it.
//!
//! Every block in the store is counted: the head commit counts 1, every
//! node of the current MST counts 1 (a node can appear only once in a tree:
//! its keys fix its position), and a record block counts once per MST key
//! whose value it is (two keys may hold identical records). A block is
//! written when its count goes from 0 to 1 and deleted, with its `Refs`
//! row, when it drops back to 0. Each commit changes the counts by what
//! `Mst::diff` reports between the old and the new tree (nodes
//! created/removed, record CIDs set/replaced) plus the commit blocks, so the
//! work is proportional to the change, not to the repository.
//!
//! Rows (store format 2):
//!
//! - `Blocks[rev ‖ n] = CID ‖ block bytes` for records and `Nodes[rev ‖ n]`
//!   the same for MST nodes and commits, where `rev` (u64 BE) is the commit
//!   that created the block and `n` (u32 BE) its place among that commit's
//!   new blocks. Keys only ever grow, so a B-tree engine appends to its
//!   last page and keeps its pages full (blocks keyed by their random CIDs
//!   left them a third empty), and the blocks created after a rev are one
//!   range scan of each table. Records and nodes are kept apart because
//!   nearly every commit replaces some nodes and few replace records: the
//!   holes the dead nodes leave stay in the small `Nodes` table.
//! - `Refs[CID] = kind (u8) ‖ rev ‖ n ‖ count (u32 BE)`: where the block is
//!   (kind 0: `Blocks`, 1: `Nodes`), and how many references it has.
//!
//! Format 1 kept `Blocks[CID]`, `Refs[CID] = count ‖ rev` and a `RevLog`;
//! `migrate` turns such a store into this layout when it is opened.

use std::collections::{BTreeMap, HashMap};

use cid::Cid;

use super::RepoError;
use crate::tid::Tid;
use gelstore_store::{Batch, Engine, EngineError, Reader, Table};

/// Which table a block is kept in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Kind {
    /// A record: `Blocks`.
    Record,
    /// An MST node or a commit: `Nodes`.
    Structure,
}

impl Kind {
    pub fn table(self) -> Table {
        match self {
            Kind::Record => Table::Blocks,
            Kind::Structure => Table::Nodes,
        }
    }

    fn byte(self) -> u8 {
        match self {
            Kind::Record => 0,
            Kind::Structure => 1,
        }
    }

    fn from_byte(byte: u8) -> Result<Kind, RepoError> {
        match byte {
            0 => Ok(Kind::Record),
            1 => Ok(Kind::Structure),
            other => Err(RepoError::Corrupt(format!("unknown block kind {other}"))),
        }
    }
}

/// Where a block is kept: its table and its key there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Loc {
    pub kind: Kind,
    /// The commit that created the block.
    pub rev: Tid,
    /// Its place among that commit's new blocks.
    pub n: u32,
}

impl Loc {
    /// The length of a key.
    pub const LEN: usize = 12;

    /// The key in its table.
    pub fn key(self) -> [u8; Loc::LEN] {
        let mut out = [0u8; Loc::LEN];
        out[..8].copy_from_slice(&self.rev.as_u64().to_be_bytes());
        out[8..].copy_from_slice(&self.n.to_be_bytes());
        out
    }

    /// The place of the row with `key` in `kind`'s table.
    pub fn from_key(kind: Kind, key: &[u8]) -> Result<Loc, RepoError> {
        let key: [u8; Loc::LEN] = key
            .try_into()
            .map_err(|_| RepoError::Corrupt("a blocks key is not 12 bytes".into()))?;
        let (rev, n) = key.split_at(8);
        Ok(Loc {
            kind,
            rev: Tid::from_u64(u64::from_be_bytes(rev.try_into().unwrap_or_default())),
            n: u32::from_be_bytes(n.try_into().unwrap_or_default()),
        })
    }

    /// The first key of the blocks created after `rev`, if any can be.
    pub fn after(rev: Tid) -> Option<[u8; Loc::LEN]> {
        let next = rev.as_u64().checked_add(1)?;
        Some(
            Loc {
                kind: Kind::Record,
                rev: Tid::from_u64(next),
                n: 0,
            }
            .key(),
        )
    }
}

/// A block's row in `Refs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RefRow {
    pub loc: Loc,
    pub count: u32,
}

impl RefRow {
    pub const LEN: usize = 1 + Loc::LEN + 4;

    pub fn encode(self) -> [u8; RefRow::LEN] {
        let mut out = [0u8; RefRow::LEN];
        out[0] = self.loc.kind.byte();
        out[1..1 + Loc::LEN].copy_from_slice(&self.loc.key());
        out[1 + Loc::LEN..].copy_from_slice(&self.count.to_be_bytes());
        out
    }

    pub fn decode(cid: &Cid, bytes: &[u8]) -> Result<RefRow, RepoError> {
        if bytes.len() != RefRow::LEN {
            return Err(RepoError::Corrupt(format!(
                "refs row of {cid} is not {} bytes",
                RefRow::LEN
            )));
        }
        let kind = Kind::from_byte(bytes[0])?;
        let (loc, count) = bytes[1..].split_at(Loc::LEN);
        Ok(RefRow {
            loc: Loc::from_key(kind, loc)?,
            count: u32::from_be_bytes(count.try_into().unwrap_or_default()),
        })
    }
}

/// A `Blocks`/`Nodes` value: `bytes ‖ 0` when the CID is the one the
/// bytes give as DAG-CBOR (CIDv1, sha2-256: every block this store writes,
/// and any a repository should hold), else `bytes ‖ CID ‖ len(CID) ‖ 1`.
/// The CID is computed again when it is needed (a `since` export,
/// `check`), which costs less than keeping 36 bytes beside every block;
/// the tail goes at the end so the block's own buffer becomes the row.
pub(crate) fn block_row(cid: &Cid, mut bytes: Vec<u8>) -> Vec<u8> {
    if is_dag_cbor_sha256(cid) {
        bytes.push(0);
    } else {
        let named = cid.to_bytes();
        bytes.extend_from_slice(&named);
        // A CID is far shorter than 255 bytes (a sha2-256 one is 36).
        bytes.push(named.len() as u8);
        bytes.push(1);
    }
    bytes
}

/// [`block_row`] of borrowed bytes, copied once.
pub(crate) fn block_row_copied(cid: &Cid, bytes: &[u8]) -> Vec<u8> {
    // Room for the tail: a CID (36 bytes for sha2-256, more is rare) and
    // two bytes.
    let mut row = Vec::with_capacity(bytes.len() + 40);
    row.extend_from_slice(bytes);
    block_row(cid, row)
}

fn is_dag_cbor_sha256(cid: &Cid) -> bool {
    const DAG_CBOR: u64 = 0x71;
    const SHA2_256: u64 = 0x12;
    cid.version() == cid::Version::V1
        && cid.codec() == DAG_CBOR
        && cid.hash().code() == SHA2_256
        && cid.hash().size() == 32
}

/// Splits a `Blocks`/`Nodes` value into the CID it names (if it names one)
/// and the block bytes.
pub(crate) fn split_block_row(mut row: Vec<u8>) -> Result<(Option<Cid>, Vec<u8>), RepoError> {
    let bad = || RepoError::Corrupt("a blocks row is malformed".into());
    match row.pop() {
        Some(0) => Ok((None, row)),
        Some(1) => {
            let len = usize::from(row.pop().ok_or_else(bad)?);
            let at = row.len().checked_sub(len).ok_or_else(bad)?;
            let cid = Cid::try_from(&row[at..]).map_err(|_| bad())?;
            row.truncate(at);
            Ok((Some(cid), row))
        }
        _ => Err(bad()),
    }
}

/// The CID of a `Blocks`/`Nodes` value: the one it names, or the one its
/// bytes give.
pub(crate) fn row_cid(row: Vec<u8>) -> Result<Cid, RepoError> {
    let (named, bytes) = split_block_row(row)?;
    Ok(named.unwrap_or_else(|| gelstore_model::cid_for_cbor(&bytes)))
}

/// The bytes of block `cid` in a format-2 store, if it is there: its
/// `Refs` row, then the `Blocks` row it points at, which must name it.
pub(crate) fn read_block(reader: &dyn Reader, cid: &Cid) -> Result<Option<Vec<u8>>, EngineError> {
    let key = cid.to_bytes();
    let Some(raw) = reader.get(Table::Refs, &key)? else {
        return Ok(None);
    };
    let corrupt = |e: RepoError| EngineError::engine(e.to_string());
    let row = RefRow::decode(cid, &raw).map_err(corrupt)?;
    let Some(value) = reader.get(row.loc.kind.table(), &row.loc.key())? else {
        return Err(corrupt(RepoError::Corrupt(format!(
            "block {cid} is counted but missing"
        ))));
    };
    let (named, bytes) = split_block_row(value).map_err(corrupt)?;
    if named.is_some_and(|named| named != *cid) {
        return Err(corrupt(RepoError::Corrupt(format!(
            "the blocks row of {cid} names another block"
        ))));
    }
    Ok(Some(bytes))
}

/// Collects count changes for one commit and turns them into table rows.
#[derive(Default)]
pub(crate) struct Accounting {
    deltas: BTreeMap<Cid, i64>,
    bytes: HashMap<Cid, (Kind, Vec<u8>)>,
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
    /// Of the blocks written, the MST nodes and commits (the `Nodes` rows
    /// added).
    pub nodes_written: usize,
}

impl Accounting {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `delta` to the count of `cid`.
    pub fn add(&mut self, cid: Cid, delta: i64) {
        *self.deltas.entry(cid).or_default() += delta;
    }

    /// The bytes of a block that may be new, and what it is.
    pub fn provide(&mut self, cid: Cid, kind: Kind, bytes: Vec<u8>) {
        self.bytes.entry(cid).or_insert((kind, bytes));
    }

    /// Adds to `batch` the rows that apply the counted changes, as commit
    /// `rev`, reading the current counts from `engine`.
    pub fn finish(
        self,
        engine: &dyn Engine,
        rev: Tid,
        batch: &mut Batch,
    ) -> Result<BlockChanges, RepoError> {
        let mut changes = BlockChanges::default();
        let mut bytes = self.bytes;
        let mut next = 0u32;
        for (cid, delta) in self.deltas {
            if delta == 0 {
                continue;
            }
            let key = cid.to_bytes();
            let row = match engine.get(Table::Refs, &key)? {
                Some(raw) => Some(RefRow::decode(&cid, &raw)?),
                None => None,
            };
            let count = row.map_or(0, |r| r.count);
            let new = i64::from(count) + delta;
            let Ok(new) = u32::try_from(new) else {
                return Err(RepoError::Corrupt(format!(
                    "reference count of block {cid} would leave 0..=u32::MAX ({new})"
                )));
            };
            match row {
                Some(row) if new == 0 => {
                    batch.delete(row.loc.kind.table(), row.loc.key());
                    batch.delete(Table::Refs, key);
                    changes.deleted += 1;
                }
                Some(row) => {
                    let row = RefRow { count: new, ..row };
                    batch.put(Table::Refs, key, row.encode());
                }
                None => {
                    let (kind, data) = bytes.remove(&cid).ok_or_else(|| {
                        RepoError::Corrupt(format!("new block {cid} has no bytes to store"))
                    })?;
                    let loc = Loc { kind, rev, n: next };
                    next = next.checked_add(1).ok_or_else(|| {
                        RepoError::Corrupt("over 2^32 new blocks in one commit".into())
                    })?;
                    changes.written += 1;
                    changes.written_bytes += data.len();
                    if kind == Kind::Structure {
                        changes.nodes_written += 1;
                    }
                    batch.put(kind.table(), loc.key(), block_row(&cid, data));
                    batch.put(Table::Refs, key, RefRow { loc, count: new }.encode());
                }
            }
        }
        Ok(changes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_rows_name_their_cid_only_when_the_bytes_do_not_give_it() {
        let bytes = gelstore_model::encode_dag_cbor(&gelstore_model::Ipld::Map(
            [(
                "$type".to_owned(),
                gelstore_model::Ipld::String("a.b.c".into()),
            )]
            .into(),
        ))
        .unwrap();
        let standard = gelstore_model::cid_for_cbor(&bytes);
        let row = block_row(&standard, bytes.clone());
        assert_eq!(row.len(), bytes.len() + 1);
        assert_eq!(row_cid(row.clone()).unwrap(), standard);
        assert_eq!(split_block_row(row).unwrap(), (None, bytes.clone()));
        // Another codec: the CID travels with the bytes.
        let raw = gelstore_model::cid_for_blob(&bytes);
        let row = block_row(&raw, bytes.clone());
        assert_eq!(row_cid(row.clone()).unwrap(), raw);
        assert_eq!(split_block_row(row).unwrap(), (Some(raw), bytes));
        // Malformed rows are named errors.
        for bad in [vec![], vec![2], vec![9, 9, 1], vec![1, 200, 1]] {
            assert!(matches!(split_block_row(bad), Err(RepoError::Corrupt(_))));
        }
    }
}
