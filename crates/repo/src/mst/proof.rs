//! Covering proofs: the node blocks that show a key's value, or its absence,
//! and that are enough to undo a change to that key.

use std::sync::Arc;

use super::error::MstError;
use super::node::{Bounds, Link, Node, below};
use crate::blocks::{BlockSink, BlockSource};

/// Puts into `out` the blocks of the nodes covering `key` in the tree under
/// `root`:
///
/// - every node on the search path of `key`, from the root down to the node
///   holding it or, when it is absent, to the lowest node whose range holds
///   it (this shows the value, or that there is none);
/// - when the key is present, the rightmost path of the subtree just left of
///   it and the leftmost path of the subtree just right of it: its
///   neighbours, and the nodes a deletion of the key merges.
///
/// This is the same set the reference implementation's covering proof
/// (`proofForKey` + `proofForLeftSib` + `proofForRightSib`) gives. With it,
/// the key can be looked up, inserted or deleted in a partial tree loaded
/// from these blocks.
pub(crate) fn covering_proof(
    src: &dyn BlockSource,
    root: &Arc<Node>,
    key: &str,
    out: &mut dyn BlockSink,
) -> Result<(), MstError> {
    let Some((node, bounds, i)) = search_path_to(src, root, key, out)? else {
        return Ok(());
    };
    let h = below(node.height);
    spine(
        src,
        &node.subtrees[i],
        h,
        bounds.child(&node, i),
        Edge::Last,
        out,
    )?;
    spine(
        src,
        &node.subtrees[i + 1],
        h,
        bounds.child(&node, i + 1),
        Edge::First,
        out,
    )
}

#[derive(Clone, Copy)]
enum Edge {
    First,
    Last,
}

/// The nodes on the leftmost (`First`) or rightmost (`Last`) path of `sub`.
fn spine(
    src: &dyn BlockSource,
    sub: &Option<Link>,
    mut height: u8,
    mut bounds: Bounds,
    edge: Edge,
    out: &mut dyn BlockSink,
) -> Result<(), MstError> {
    let mut sub = sub.clone();
    while let Some(link) = sub {
        let node = link.load(src, height, &bounds)?;
        out.put(node.cid(), node.bytes().to_vec())?;
        let slot = match edge {
            Edge::First => 0,
            Edge::Last => node.leaves.len(),
        };
        bounds = bounds.child(&node, slot);
        height = below(height);
        sub = node.subtrees[slot].clone();
    }
    Ok(())
}

/// Puts into `out` the nodes on the search path of `key` only: from the
/// root down to the node holding it, or to the lowest node whose range
/// holds it. Enough to look `key` up (its value or its absence), which is
/// what a record proof (`com.atproto.sync.getRecord`) carries.
pub(crate) fn search_path(
    src: &dyn BlockSource,
    root: &Arc<Node>,
    key: &str,
    out: &mut dyn BlockSink,
) -> Result<(), MstError> {
    search_path_to(src, root, key, out).map(|_| ())
}

/// Puts the search path of `key` into `out` (see [`search_path`]); when
/// the key is present, gives the node holding it, that node's bounds and
/// the key's index among its leaves.
fn search_path_to(
    src: &dyn BlockSource,
    root: &Arc<Node>,
    key: &str,
    out: &mut dyn BlockSink,
) -> Result<Option<(Arc<Node>, Bounds, usize)>, MstError> {
    let mut node = root.clone();
    let mut bounds = Bounds::default();
    loop {
        out.put(node.cid(), node.bytes().to_vec())?;
        let i = node.find(key);
        if node.leaf_at(i, key).is_some() {
            return Ok(Some((node, bounds, i)));
        }
        let Some(link) = node.subtrees[i].clone() else {
            return Ok(None);
        };
        bounds = bounds.child(&node, i);
        node = link.load(src, below(node.height), &bounds)?;
    }
}
