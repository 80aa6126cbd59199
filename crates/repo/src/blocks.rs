//! Blocks: the content-addressed byte strings a repository is made of (MST
//! nodes, records, commits), and the small read/write interface the MST, the
//! CAR code and the storage layer share.
//!
//! - [`BlockSource`] reads a block by CID. `Ok(None)` means "not here", which
//!   is normal for partial trees (proofs, CAR slices); an `Err` means the
//!   storage itself failed.
//! - [`BlockSink`] receives new blocks (for example the MST nodes a write
//!   created).
//! - [`MemoryBlocks`] is an in-memory map that is both, for tests, proofs and
//!   CAR contents. A persistent store implements the same traits.
//!
//! Neither trait checks that the bytes hash to the CID; readers that take
//! untrusted blocks (the MST loader does) check it themselves.

use std::borrow::Cow;
use std::collections::HashMap;
use std::error::Error as StdError;

use cid::Cid;

/// A storage failure (I/O, a corrupt database, ...), as opposed to a block
/// that is simply absent.
#[derive(Debug, thiserror::Error)]
#[error("block storage failed: {0}")]
pub struct StoreError(#[source] pub Box<dyn StdError + Send + Sync + 'static>);

impl StoreError {
    /// Wraps any error as a storage failure.
    pub fn new(error: impl Into<Box<dyn StdError + Send + Sync + 'static>>) -> Self {
        Self(error.into())
    }
}

/// Reads blocks by CID.
pub trait BlockSource {
    /// The bytes of the block with this CID, or `None` if this source does
    /// not have it.
    fn get(&self, cid: &Cid) -> Result<Option<Vec<u8>>, StoreError>;

    /// Whether every block this source gives is known to hash to its CID
    /// (a CAR reader checks each as it reads): then a verifier need not
    /// hash it again.
    fn hashes_checked(&self) -> bool {
        false
    }

    /// The block as [`get`](BlockSource::get) gives it, but borrowed where
    /// the source holds it in memory (a CAR read whole), not copied.
    fn get_cow(&self, cid: &Cid) -> Result<Option<Cow<'_, [u8]>>, StoreError> {
        Ok(self.get(cid)?.map(Cow::Owned))
    }
}

/// Receives blocks.
pub trait BlockSink {
    /// Stores a block. Storing a CID that is already present is allowed and
    /// must leave the store unchanged (the bytes are the same by definition).
    fn put(&mut self, cid: Cid, bytes: Vec<u8>) -> Result<(), StoreError>;
}

impl<T: BlockSource + ?Sized> BlockSource for &T {
    fn get(&self, cid: &Cid) -> Result<Option<Vec<u8>>, StoreError> {
        (**self).get(cid)
    }

    fn hashes_checked(&self) -> bool {
        (**self).hashes_checked()
    }

    fn get_cow(&self, cid: &Cid) -> Result<Option<Cow<'_, [u8]>>, StoreError> {
        (**self).get_cow(cid)
    }
}

impl<T: BlockSink + ?Sized> BlockSink for &mut T {
    fn put(&mut self, cid: Cid, bytes: Vec<u8>) -> Result<(), StoreError> {
        (**self).put(cid, bytes)
    }
}

/// Collects blocks in the order they are put (duplicates included), for
/// example the new blocks of one commit.
impl BlockSink for Vec<(Cid, Vec<u8>)> {
    fn put(&mut self, cid: Cid, bytes: Vec<u8>) -> Result<(), StoreError> {
        self.push((cid, bytes));
        Ok(())
    }
}

/// An in-memory block map. Reading and writing never fail.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryBlocks {
    blocks: HashMap<Cid, Vec<u8>>,
}

impl MemoryBlocks {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a block; a CID already present keeps its first bytes.
    pub fn insert(&mut self, cid: Cid, bytes: Vec<u8>) {
        self.blocks.entry(cid).or_insert(bytes);
    }

    /// The bytes of a block, if present.
    pub fn block(&self, cid: &Cid) -> Option<&[u8]> {
        self.blocks.get(cid).map(Vec::as_slice)
    }

    /// Whether a block is present.
    pub fn contains(&self, cid: &Cid) -> bool {
        self.blocks.contains_key(cid)
    }

    /// Removes a block, returning its bytes.
    pub fn remove(&mut self, cid: &Cid) -> Option<Vec<u8>> {
        self.blocks.remove(cid)
    }

    /// Number of blocks.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Whether there are no blocks.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// The CIDs present, in no particular order.
    pub fn cids(&self) -> impl Iterator<Item = &Cid> {
        self.blocks.keys()
    }

    /// All blocks, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&Cid, &[u8])> {
        self.blocks
            .iter()
            .map(|(cid, bytes)| (cid, bytes.as_slice()))
    }

    /// Adds every block of `other`.
    pub fn extend(&mut self, other: MemoryBlocks) {
        for (cid, bytes) in other.blocks {
            self.insert(cid, bytes);
        }
    }
}

impl BlockSource for MemoryBlocks {
    fn get(&self, cid: &Cid) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.blocks.get(cid).cloned())
    }
}

impl BlockSink for MemoryBlocks {
    fn put(&mut self, cid: Cid, bytes: Vec<u8>) -> Result<(), StoreError> {
        self.insert(cid, bytes);
        Ok(())
    }
}

impl FromIterator<(Cid, Vec<u8>)> for MemoryBlocks {
    fn from_iter<I: IntoIterator<Item = (Cid, Vec<u8>)>>(iter: I) -> Self {
        let mut out = Self::new();
        for (cid, bytes) in iter {
            out.insert(cid, bytes);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gelstore_model::cid_for_cbor;

    #[test]
    fn memory_blocks_round_trip() {
        let cid = cid_for_cbor(b"\xa0");
        let mut blocks = MemoryBlocks::new();
        assert_eq!(blocks.get(&cid).unwrap(), None);
        blocks.put(cid, b"\xa0".to_vec()).unwrap();
        blocks.put(cid, b"\xa0".to_vec()).unwrap();
        assert_eq!(blocks.len(), 1);
        assert_eq!(blocks.get(&cid).unwrap(), Some(b"\xa0".to_vec()));
        let by_ref: &dyn BlockSource = &&blocks;
        assert!(by_ref.get(&cid).unwrap().is_some());
    }

    #[test]
    fn vec_sink_keeps_order() {
        let mut sink: Vec<(Cid, Vec<u8>)> = Vec::new();
        let a = cid_for_cbor(b"\x01");
        let b = cid_for_cbor(b"\x02");
        sink.put(b, vec![2]).unwrap();
        sink.put(a, vec![1]).unwrap();
        assert_eq!(sink, vec![(b, vec![2]), (a, vec![1])]);
    }
}
