//! The Merkle Search Tree (MST) of an atproto repository (v3): a map from
//! keys (`collection/rkey`) to record CIDs whose shape depends only on its
//! contents, so the same key set always has the same root CID.
//!
//! Layout (see <https://atproto.com/specs/repository>): each key has a
//! height, the number of leading zero bits of its SHA-256 divided by two
//! ([`key_height`], fanout 4). A node at layer `h` holds the keys of height
//! `h` in its range, in order, with a subtree one layer down in each gap that
//! holds lower keys. The root is at the highest key height; empty nodes are
//! kept in the middle (so links never skip a layer) but trimmed from the top
//! and the bottom. Nodes are DAG-CBOR blocks with prefix-compressed keys,
//! linked by CID (v1, dag-cbor, sha2-256).
//!
//! [`Mst`] holds a tree over a [`BlockSource`]. Nodes are loaded when an
//! operation reaches them, and are immutable and shared: a change rebuilds
//! only the path to the key, so a change at 100k records loads and creates
//! O(log n) nodes. [`Mst::write_new_blocks`] hands the created nodes to a
//! sink. Every node read from the source is checked (hash, canonical CBOR,
//! shape, key order and layers) and rejected with a named [`MstError`].
//!
//! Partial trees work too: [`Mst::covering_proof`] gives the blocks that
//! prove a key's value or absence, and a tree loaded from those blocks alone
//! can look the key up, or [`invert`](Mst::invert) a change to it, which is
//! how the inductive firehose checks a commit against its previous root.
//!
//! Module map: `key` (key rules, heights), `node` (in-memory nodes, lazy
//! links), `codec` (block encoding, checked decoding), `ops` (get, insert,
//! delete), `build` (canonical bulk build), `walk` (ordered traversal),
//! `rev` (descending traversal below a bound), `diff`, `proof`.

mod build;
mod codec;
mod diff;
mod error;
mod key;
mod node;
mod ops;
mod proof;
mod rev;
mod walk;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use cid::Cid;

pub use self::diff::{MstDiff, RecordOp};
pub use self::error::MstError;
pub use self::key::{MAX_KEY_LEN, check_key, common_prefix_len, key_height};
pub use self::rev::EntriesRev;
pub use self::walk::{Entries, Visit, Walk};

use self::node::{Link, Node};
use self::walk::Cursor;
use crate::blocks::{BlockSink, BlockSource};
use gelstore_model::check_blessed_cid;

/// A Merkle Search Tree over the block source `S` (which may be a
/// reference, e.g. `&MemoryBlocks`).
#[derive(Clone)]
pub struct Mst<S> {
    store: S,
    /// Always loaded; never an empty node with a subtree.
    root: Arc<Node>,
}

impl<S> fmt::Debug for Mst<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mst")
            .field("root", &self.root.cid())
            .field("layer", &self.root.height)
            .finish_non_exhaustive()
    }
}

impl<S: BlockSource> Mst<S> {
    /// An empty tree.
    pub fn new(store: S) -> Self {
        Self {
            store,
            root: Arc::new(Node::empty()),
        }
    }

    /// The tree whose root node is `root`. Only the root is loaded now.
    pub fn load(store: S, root: Cid) -> Result<Self, MstError> {
        let node = codec::load_root(&store, &root)?;
        Ok(Self {
            store,
            root: Arc::new(node),
        })
    }

    /// The canonical tree holding `entries` (in any order; for a repeated
    /// key the last value wins), built in one pass.
    pub fn from_entries<K: AsRef<str>>(
        store: S,
        entries: impl IntoIterator<Item = (K, Cid)>,
    ) -> Result<Self, MstError> {
        let mut map = BTreeMap::new();
        for (key, value) in entries {
            let key = key.as_ref();
            check_entry(key, &value)?;
            map.insert(key.to_owned(), value);
        }
        let items = map.into_iter().map(|(k, v)| (Arc::from(k), v)).collect();
        Ok(Self {
            store,
            root: Arc::new(build::build(items)),
        })
    }

    /// The root CID (the `data` field of a commit).
    pub fn root(&self) -> Cid {
        self.root.cid()
    }

    /// The layer of the root node (0 for an empty tree).
    pub fn layer(&self) -> u8 {
        self.root.height
    }

    /// Whether the tree has no keys.
    pub fn is_empty(&self) -> bool {
        self.root.is_empty()
    }

    /// The block source.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The value stored under `key`. A key that is not valid is never in
    /// the tree, so it gives `None`.
    pub fn get(&self, key: &str) -> Result<Option<Cid>, MstError> {
        ops::get(&self.store, &self.root, key)
    }

    /// Sets `key` to `value`; returns the previous value. The key must be
    /// valid ([`check_key`]) and the value a blessed CID.
    pub fn insert(&mut self, key: &str, value: Cid) -> Result<Option<Cid>, MstError> {
        check_entry(key, &value)?;
        let prev = self.get(key)?;
        if prev != Some(value) {
            self.root = ops::insert(&self.store, &self.root, key, value)?;
        }
        Ok(prev)
    }

    /// Removes `key`; returns its value, or `None` if it was absent.
    pub fn delete(&mut self, key: &str) -> Result<Option<Cid>, MstError> {
        match ops::delete(&self.store, &self.root, key)? {
            Some((root, value)) => {
                self.root = root;
                Ok(Some(value))
            }
            None => Ok(None),
        }
    }

    /// Applies `op`, checking that the tree holds `op.prev` first.
    pub fn apply(&mut self, op: &RecordOp) -> Result<(), MstError> {
        let mismatch = |reason| MstError::OpMismatch {
            key: key::shorten(&op.key),
            reason,
        };
        if self.get(&op.key)? != op.prev {
            return Err(mismatch(
                "the tree does not hold the operation's prev value",
            ));
        }
        match op.cid {
            Some(cid) => self.insert(&op.key, cid).map(drop),
            None if op.prev.is_some() => self.delete(&op.key).map(drop),
            None => Err(mismatch("the operation changes nothing")),
        }
    }

    /// Undoes `op` on the tree after it: checks that the tree holds
    /// `op.cid`, then restores `op.prev`. This is the inductive firehose
    /// check: a tree loaded from a commit's proof blocks, with all its
    /// operations inverted (in any order), must give the previous root.
    pub fn invert(&mut self, op: &RecordOp) -> Result<(), MstError> {
        let mismatch = |reason| MstError::OpMismatch {
            key: key::shorten(&op.key),
            reason,
        };
        if op.cid.is_none() && op.prev.is_none() {
            return Err(mismatch("the operation changes nothing"));
        }
        if self.get(&op.key)? != op.cid {
            return Err(mismatch("the tree does not hold the operation's new value"));
        }
        match op.prev {
            Some(prev) => self.insert(&op.key, prev).map(drop),
            None => self.delete(&op.key).map(drop),
        }
    }

    /// All `(key, value)` pairs in key order.
    pub fn entries(&self) -> Entries<'_> {
        Entries::new(self.cursor(), None, None)
    }

    /// The pairs with keys `>= start`, in key order. Only the search path of
    /// `start` and the nodes actually listed are loaded.
    pub fn entries_from(&self, start: &str) -> Entries<'_> {
        Entries::new(self.cursor(), Some(start.to_owned()), None)
    }

    /// The pairs whose keys start with `prefix` (for one collection, pass
    /// `"<nsid>/"`), in key order.
    pub fn entries_with_prefix(&self, prefix: &str) -> Entries<'_> {
        Entries::new(
            self.cursor(),
            Some(prefix.to_owned()),
            Some(prefix.to_owned()),
        )
    }

    /// All `(key, value)` pairs in descending key order.
    pub fn entries_rev(&self) -> EntriesRev<'_> {
        EntriesRev::new(&self.store, self.root.clone(), None)
    }

    /// The pairs with keys `< end` (strictly), in descending key order.
    /// Only the search path of `end` and the paths to the keys actually
    /// listed are loaded: a page of `k` keys costs O(log n + k) nodes.
    /// For the newest keys of one collection, pass `"<nsid>0"` (every
    /// `"<nsid>/…"` key sorts below it, as `'0'` follows `'/'`) and stop at
    /// the first key without the `"<nsid>/"` prefix.
    pub fn entries_before(&self, end: &str) -> EntriesRev<'_> {
        EntriesRev::new(&self.store, self.root.clone(), Some(end.to_owned()))
    }

    /// A preorder walk of the whole tree: each node block before its
    /// subtrees, leaves interleaved in key order (so every leaf comes after
    /// its node). This is the order of a streamable CAR export, and it loads
    /// and checks every node of a stored tree exactly once.
    pub fn walk(&self) -> Walk<'_> {
        Walk::new(self.cursor(), self.root.clone())
    }

    /// [`walk`](Self::walk) for one pass: the nodes it reads are dropped
    /// once it has left them instead of staying in the tree, so a walk of
    /// a large stored tree holds only its path.
    pub fn walk_once(&self) -> Walk<'_> {
        Walk::new(
            Cursor::passing(&self.store, self.root.clone()),
            self.root.clone(),
        )
    }

    fn cursor(&self) -> Cursor<'_> {
        Cursor::new(&self.store, self.root.clone())
    }

    /// What changed from `self` (the old tree) to `new`. Subtrees with the
    /// same CID in both are not visited.
    pub fn diff<T: BlockSource>(&self, new: &Mst<T>) -> Result<MstDiff, MstError> {
        diff::diff(&self.store, &self.root, &new.store, &new.root)
    }

    /// Puts into `out` the node blocks covering `key`: its search path, and
    /// if present, the nodes along its two neighbours. See the module docs;
    /// a tree loaded from these blocks can look `key` up, or insert or
    /// delete it.
    pub fn covering_proof(&self, key: &str, out: &mut impl BlockSink) -> Result<(), MstError> {
        proof::covering_proof(&self.store, &self.root, key, out)
    }

    /// Puts into `out` the node blocks on the search path of `key` only:
    /// the smallest set that shows its value or its absence (what a record
    /// proof carries). [`covering_proof`](Self::covering_proof) adds the
    /// neighbours needed to change the key.
    pub fn search_path_proof(&self, key: &str, out: &mut impl BlockSink) -> Result<(), MstError> {
        proof::search_path(&self.store, &self.root, key, out)
    }

    /// Hands every node created in memory since it was loaded (or since the
    /// last call) to `sink`, children before parents, and returns the root
    /// CID. Nodes read from the block source are never written again.
    ///
    /// "Already written" is remembered per node, and clones of a tree share
    /// their nodes, so write each tree's new nodes to the store it reads
    /// from (or to a set of blocks that will land there).
    pub fn write_new_blocks(&self, sink: &mut impl BlockSink) -> Result<Cid, MstError> {
        write_node(&self.root, sink)?;
        Ok(self.root.cid())
    }
}

fn check_entry(key: &str, value: &Cid) -> Result<(), MstError> {
    check_key(key)?;
    check_blessed_cid(value).map_err(|e| MstError::DisallowedCid {
        cid: Box::new(*value),
        reason: e.to_string(),
    })
}

fn write_node(node: &Node, sink: &mut dyn BlockSink) -> Result<(), MstError> {
    if node.is_persisted() {
        return Ok(());
    }
    for sub in node.subtrees.iter().flatten() {
        if let Link::Memory(child) = sub {
            write_node(child, sink)?;
        }
    }
    sink.put(node.cid(), node.bytes().to_vec())?;
    node.mark_persisted();
    Ok(())
}

/// Checks a proof: the value `blocks` show for `key` in the tree with root
/// `root` (`None` = proven absent). Fails if the blocks do not cover the
/// key's search path or any of them is malformed.
pub fn verify_proof(
    root: Cid,
    key: &str,
    blocks: &impl BlockSource,
) -> Result<Option<Cid>, MstError> {
    Mst::load(blocks, root)?.get(key)
}

#[cfg(test)]
mod tests;
