//! Differences between two trees, walking only the parts that differ.

use std::collections::BTreeSet;
use std::sync::Arc;

use cid::Cid;

use super::error::MstError;
use super::node::Node;
use super::walk::{Cursor, Item};
use crate::blocks::BlockSource;

/// A change to one key: the firehose's `repoOp`, without the action name
/// (it follows from which CIDs are present).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordOp {
    /// The MST key (`collection/rkey`).
    pub key: String,
    /// The value before the change; `None` for a creation.
    pub prev: Option<Cid>,
    /// The value after the change; `None` for a deletion.
    pub cid: Option<Cid>,
}

impl RecordOp {
    /// A creation: the key was absent and now has `cid`.
    pub fn create(key: impl Into<String>, cid: Cid) -> Self {
        Self {
            key: key.into(),
            prev: None,
            cid: Some(cid),
        }
    }

    /// An update from `prev` to `cid`.
    pub fn update(key: impl Into<String>, prev: Cid, cid: Cid) -> Self {
        Self {
            key: key.into(),
            prev: Some(prev),
            cid: Some(cid),
        }
    }

    /// A deletion of the value `prev`.
    pub fn delete(key: impl Into<String>, prev: Cid) -> Self {
        Self {
            key: key.into(),
            prev: Some(prev),
            cid: None,
        }
    }
}

/// What changed from one tree to another.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MstDiff {
    /// One operation per key that differs, sorted by key.
    pub ops: Vec<RecordOp>,
    /// CIDs of the nodes of the new tree that are not in the old tree.
    pub new_nodes: BTreeSet<Cid>,
    /// CIDs of the nodes of the old tree that are not in the new tree.
    pub removed_nodes: BTreeSet<Cid>,
}

/// Compares the tree under `old` with the tree under `new`.
///
/// Both trees are walked in key order side by side. Two subtrees with the
/// same CID hold the same keys, so they are stepped over without loading;
/// only nodes on the boundary of a change are loaded. A node is reported in
/// `new_nodes`/`removed_nodes` by comparing the sets of nodes visited on
/// each side, which holds every node that is not in a shared subtree.
pub(crate) fn diff(
    old_src: &dyn BlockSource,
    old: &Arc<Node>,
    new_src: &dyn BlockSource,
    new: &Arc<Node>,
) -> Result<MstDiff, MstError> {
    let mut out = MstDiff::default();
    if old.cid() == new.cid() {
        return Ok(out);
    }
    let mut seen_old = BTreeSet::from([old.cid()]);
    let mut seen_new = BTreeSet::from([new.cid()]);
    let mut a = Cursor::new(old_src, old.clone());
    let mut b = Cursor::new(new_src, new.clone());
    loop {
        match (a.current(), b.current()) {
            (None, None) => break,
            (Some(Item::Leaf(key, prev)), None) => {
                out.ops.push(RecordOp::delete(&*key, prev));
                a.skip();
            }
            (None, Some(Item::Leaf(key, cid))) => {
                out.ops.push(RecordOp::create(&*key, cid));
                b.skip();
            }
            (Some(Item::Tree(..)), None) | (Some(Item::Tree(..)), Some(Item::Leaf(..))) => {
                seen_old.insert(a.descend()?.cid());
            }
            (None, Some(Item::Tree(..))) | (Some(Item::Leaf(..)), Some(Item::Tree(..))) => {
                seen_new.insert(b.descend()?.cid());
            }
            (Some(Item::Leaf(ka, va)), Some(Item::Leaf(kb, vb))) => {
                match ka.as_bytes().cmp(kb.as_bytes()) {
                    std::cmp::Ordering::Less => {
                        out.ops.push(RecordOp::delete(&*ka, va));
                        a.skip();
                    }
                    std::cmp::Ordering::Greater => {
                        out.ops.push(RecordOp::create(&*kb, vb));
                        b.skip();
                    }
                    std::cmp::Ordering::Equal => {
                        if va != vb {
                            out.ops.push(RecordOp::update(&*ka, va, vb));
                        }
                        a.skip();
                        b.skip();
                    }
                }
            }
            (Some(Item::Tree(ta, ha)), Some(Item::Tree(tb, hb))) => {
                if ta.cid() == tb.cid() {
                    a.skip();
                    b.skip();
                } else {
                    // Enter the higher one (its keys may include a copy of
                    // the lower one further down), or both at equal height.
                    if ha >= hb {
                        seen_old.insert(a.descend()?.cid());
                    }
                    if hb >= ha {
                        seen_new.insert(b.descend()?.cid());
                    }
                }
            }
        }
    }
    out.new_nodes = seen_new.difference(&seen_old).copied().collect();
    out.removed_nodes = seen_old.difference(&seen_new).copied().collect();
    Ok(out)
}
