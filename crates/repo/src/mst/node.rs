//! In-memory MST nodes and the links between them.
//!
//! A [`Node`] is immutable once built and shared through `Arc`, so a changed
//! tree shares every untouched node with the tree it came from, and a failed
//! operation leaves the original tree as it was.
//!
//! A node holds its leaves (key + record CID) and one subtree slot before,
//! between and after them: `subtrees.len() == leaves.len() + 1`. Slot `i` is
//! the subtree of keys between leaf `i - 1` and leaf `i`; slot 0 is encoded
//! as `l`, slot `i + 1` as the `t` of entry `i`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use cid::Cid;

use super::codec;
use super::error::MstError;
use crate::blocks::BlockSource;

/// One key/value pair of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Leaf {
    pub key: Arc<str>,
    pub value: Cid,
}

/// An MST node.
#[derive(Debug)]
pub(crate) struct Node {
    /// The layer of the node; every leaf's key has this height.
    pub height: u8,
    pub leaves: Vec<Leaf>,
    /// `leaves.len() + 1` subtree slots, each one layer below.
    pub subtrees: Vec<Option<Link>>,
    /// The encoded block, computed on first use (or kept from loading).
    block: OnceLock<Block>,
    /// Whether the block is already in storage: true for loaded nodes, and
    /// set once a node has been written to a sink.
    persisted: AtomicBool,
}

#[derive(Debug)]
struct Block {
    cid: Cid,
    bytes: Vec<u8>,
}

impl Node {
    /// A node built in memory (not yet stored).
    pub fn new(height: u8, leaves: Vec<Leaf>, subtrees: Vec<Option<Link>>) -> Self {
        debug_assert_eq!(subtrees.len(), leaves.len() + 1);
        Self {
            height,
            leaves,
            subtrees,
            block: OnceLock::new(),
            persisted: AtomicBool::new(false),
        }
    }

    /// A node decoded from `bytes`, which are stored under `cid`.
    pub fn loaded(
        height: u8,
        leaves: Vec<Leaf>,
        subtrees: Vec<Option<Link>>,
        cid: Cid,
        bytes: Vec<u8>,
    ) -> Self {
        let node = Self {
            height,
            leaves,
            subtrees,
            block: OnceLock::new(),
            persisted: AtomicBool::new(true),
        };
        let _ = node.block.set(Block { cid, bytes });
        node
    }

    /// The root of an empty tree.
    pub fn empty() -> Self {
        Self::new(0, Vec::new(), vec![None])
    }

    /// No leaves and no subtree.
    pub fn is_empty(&self) -> bool {
        self.leaves.is_empty() && self.subtrees[0].is_none()
    }

    /// Index of the first leaf whose key is `>= key` (`leaves.len()` if none).
    /// It is also the index of the subtree slot where `key` would be.
    pub fn find(&self, key: &str) -> usize {
        self.leaves
            .partition_point(|leaf| leaf.key.as_bytes() < key.as_bytes())
    }

    /// The leaf at `index` if its key is `key`.
    pub fn leaf_at(&self, index: usize, key: &str) -> Option<&Leaf> {
        self.leaves.get(index).filter(|leaf| &*leaf.key == key)
    }

    fn block(&self) -> &Block {
        self.block.get_or_init(|| {
            let bytes = codec::encode_node(self);
            Block {
                cid: codec::cid_for_node(&bytes),
                bytes,
            }
        })
    }

    /// The CID of the node's block.
    pub fn cid(&self) -> Cid {
        self.block().cid
    }

    /// The node's block (canonical DAG-CBOR).
    pub fn bytes(&self) -> &[u8] {
        &self.block().bytes
    }

    pub fn is_persisted(&self) -> bool {
        self.persisted.load(Ordering::Acquire)
    }

    pub fn mark_persisted(&self) {
        self.persisted.store(true, Ordering::Release);
    }
}

/// A link from a node to a subtree.
#[derive(Debug, Clone)]
pub(crate) enum Link {
    /// A node in the block source, loaded on first use.
    Stored(Arc<StoredLink>),
    /// A node held in memory.
    Memory(Arc<Node>),
}

#[derive(Debug)]
pub(crate) struct StoredLink {
    cid: Cid,
    node: OnceLock<Arc<Node>>,
}

/// The key range a node must fall in, from the leaves around its slot in
/// the parent (exclusive on both ends).
#[derive(Debug, Clone, Default)]
pub(crate) struct Bounds {
    pub lo: Option<Arc<str>>,
    pub hi: Option<Arc<str>>,
}

impl Bounds {
    /// The range of subtree slot `slot` of `node`, which is in range `self`.
    pub fn child(&self, node: &Node, slot: usize) -> Bounds {
        Bounds {
            lo: match slot {
                0 => self.lo.clone(),
                _ => Some(node.leaves[slot - 1].key.clone()),
            },
            hi: match node.leaves.get(slot) {
                Some(leaf) => Some(leaf.key.clone()),
                None => self.hi.clone(),
            },
        }
    }

    pub fn contains(&self, key: &str) -> bool {
        self.lo
            .as_deref()
            .is_none_or(|lo| lo.as_bytes() < key.as_bytes())
            && self
                .hi
                .as_deref()
                .is_none_or(|hi| key.as_bytes() < hi.as_bytes())
    }
}

impl Link {
    /// A link to a block not yet loaded.
    pub fn stored(cid: Cid) -> Self {
        Link::Stored(Arc::new(StoredLink {
            cid,
            node: OnceLock::new(),
        }))
    }

    /// A link to a node in memory.
    pub fn memory(node: Node) -> Self {
        Link::Memory(Arc::new(node))
    }

    /// The CID of the linked node.
    pub fn cid(&self) -> Cid {
        match self {
            Link::Stored(link) => link.cid,
            Link::Memory(node) => node.cid(),
        }
    }

    /// Whether two links are the same object (not just equal).
    pub fn same(a: &Option<Link>, b: &Option<Link>) -> bool {
        match (a, b) {
            (None, None) => true,
            (Some(Link::Stored(x)), Some(Link::Stored(y))) => Arc::ptr_eq(x, y),
            (Some(Link::Memory(x)), Some(Link::Memory(y))) => Arc::ptr_eq(x, y),
            _ => false,
        }
    }

    /// The linked node, loading (and checking) it from `src` the first time.
    /// A loaded node must be at layer `height` with keys inside `bounds`.
    pub fn load(
        &self,
        src: &dyn BlockSource,
        height: u8,
        bounds: &Bounds,
    ) -> Result<Arc<Node>, MstError> {
        self.load_keeping(src, height, bounds, true)
    }

    /// [`load`](Self::load), keeping a node read from `src` in the link
    /// only if `keep`: a single pass over a tree (`Mst::walk_once`) keeps
    /// none, so the tree holds only the path it is on.
    pub fn load_keeping(
        &self,
        src: &dyn BlockSource,
        height: u8,
        bounds: &Bounds,
        keep: bool,
    ) -> Result<Arc<Node>, MstError> {
        let link = match self {
            Link::Memory(node) => return Ok(node.clone()),
            Link::Stored(link) => link,
        };
        if let Some(node) = link.node.get() {
            return Ok(node.clone());
        }
        let node = Arc::new(codec::load_node(src, &link.cid, Some(height), bounds)?);
        Ok(match keep {
            true => link.node.get_or_init(|| node).clone(),
            false => node,
        })
    }
}

/// The height of the layer below `height`. Nodes at layer 0 never have
/// subtrees (the decoder rejects them), so this is only used above 0.
pub(crate) fn below(height: u8) -> u8 {
    height.saturating_sub(1)
}
