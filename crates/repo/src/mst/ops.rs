//! Point operations on a tree: get, insert (or update) and delete.
//!
//! Every function works on immutable nodes and returns new ones, loading a
//! node only when the operation has to look inside it: the search path to
//! the key, plus the two "spines" next to a key that is deleted (the
//! rightmost path of its left subtree and the leftmost path of its right
//! subtree, which have to be merged). That is also exactly the set of nodes
//! a covering proof holds (see `proof.rs`), which is what lets a partial
//! tree loaded from a proof undo a commit's operations.

use std::sync::Arc;

use cid::Cid;

use super::error::MstError;
use super::key::key_height;
use super::node::{Bounds, Leaf, Link, Node, below};
use crate::blocks::BlockSource;

type Sub = Option<Link>;

/// The value stored under `key`, if any.
pub(crate) fn get(
    src: &dyn BlockSource,
    root: &Arc<Node>,
    key: &str,
) -> Result<Option<Cid>, MstError> {
    let mut node = root.clone();
    let mut bounds = Bounds::default();
    loop {
        let i = node.find(key);
        if let Some(leaf) = node.leaf_at(i, key) {
            return Ok(Some(leaf.value));
        }
        let Some(link) = node.subtrees[i].clone() else {
            return Ok(None);
        };
        bounds = bounds.child(&node, i);
        node = link.load(src, below(node.height), &bounds)?;
    }
}

/// Inserts `key` (new or not) with `value` under `root`; returns the new
/// root. The caller has checked that the key is valid and that the value
/// actually changes.
pub(crate) fn insert(
    src: &dyn BlockSource,
    root: &Arc<Node>,
    key: &str,
    value: Cid,
) -> Result<Arc<Node>, MstError> {
    let height = key_height(key.as_bytes());
    let leaf = Leaf {
        key: Arc::from(key),
        value,
    };
    if root.is_empty() {
        return Ok(Arc::new(Node::new(height, vec![leaf], vec![None, None])));
    }
    if height > root.height {
        // The key goes above the current root: split the whole tree around
        // it and lift both halves to the layer just below the new root.
        let whole = Some(Link::Memory(root.clone()));
        let (left, right) = split(src, whole, root.height, &Bounds::default(), key)?;
        let left = lift(left, root.height, height);
        let right = lift(right, root.height, height);
        return Ok(Arc::new(Node::new(height, vec![leaf], vec![left, right])));
    }
    put(src, root, &Bounds::default(), leaf, height).map(Arc::new)
}

/// Puts `leaf` (of height `height <= node.height`) into the subtree `node`.
fn put(
    src: &dyn BlockSource,
    node: &Node,
    bounds: &Bounds,
    leaf: Leaf,
    height: u8,
) -> Result<Node, MstError> {
    let i = node.find(&leaf.key);
    let mut leaves = node.leaves.clone();
    let mut subtrees = node.subtrees.clone();
    if node.leaf_at(i, &leaf.key).is_some() {
        // Same key, so same height: an update in place.
        leaves[i] = leaf;
    } else if height == node.height {
        let (left, right) = split(
            src,
            subtrees[i].take(),
            below(node.height),
            &bounds.child(node, i),
            &leaf.key,
        )?;
        subtrees[i] = left;
        subtrees.insert(i + 1, right);
        leaves.insert(i, leaf);
    } else {
        let child = match &subtrees[i] {
            None => chain(below(node.height), leaf, height),
            Some(link) => {
                let child_bounds = bounds.child(node, i);
                let child = link.load(src, below(node.height), &child_bounds)?;
                put(src, &child, &child_bounds, leaf, height)?
            }
        };
        subtrees[i] = Some(Link::memory(child));
    }
    Ok(Node::new(node.height, leaves, subtrees))
}

/// A new subtree at layer `at` holding only `leaf` (of height `height`):
/// empty nodes down to the leaf's layer.
fn chain(at: u8, leaf: Leaf, height: u8) -> Node {
    if at == height {
        Node::new(at, vec![leaf], vec![None, None])
    } else {
        let below = chain(below(at), leaf, height);
        Node::new(at, Vec::new(), vec![Some(Link::memory(below))])
    }
}

/// Wraps a subtree at layer `from` in empty nodes so that it sits at the
/// layer just below `to`.
fn lift(mut sub: Sub, from: u8, to: u8) -> Sub {
    for layer in from + 1..to {
        sub = sub.map(|link| Link::memory(Node::new(layer, Vec::new(), vec![Some(link)])));
    }
    sub
}

/// Splits the subtree `sub` (at layer `height`) into the parts with keys
/// below and above `key`, which is not in it. Only the search path to `key`
/// is loaded and rebuilt; a side that keeps a whole node reuses its link.
fn split(
    src: &dyn BlockSource,
    sub: Sub,
    height: u8,
    bounds: &Bounds,
    key: &str,
) -> Result<(Sub, Sub), MstError> {
    let Some(link) = sub else {
        return Ok((None, None));
    };
    let node = link.load(src, height, bounds)?;
    let i = node.find(key);
    let (inner_left, inner_right) = split(
        src,
        node.subtrees[i].clone(),
        below(height),
        &bounds.child(&node, i),
        key,
    )?;
    let n = node.leaves.len();
    if i == n && inner_right.is_none() && Link::same(&inner_left, &node.subtrees[n]) {
        return Ok((Some(link), None));
    }
    if i == 0 && inner_left.is_none() && Link::same(&inner_right, &node.subtrees[0]) {
        return Ok((None, Some(link)));
    }
    let mut left_subtrees = node.subtrees[..i].to_vec();
    left_subtrees.push(inner_left);
    let mut right_subtrees = vec![inner_right];
    right_subtrees.extend_from_slice(&node.subtrees[i + 1..]);
    let left = Node::new(height, node.leaves[..i].to_vec(), left_subtrees);
    let right = Node::new(height, node.leaves[i..].to_vec(), right_subtrees);
    Ok((non_empty(left), non_empty(right)))
}

fn non_empty(node: Node) -> Sub {
    (!node.is_empty()).then(|| Link::memory(node))
}

/// Deletes `key` under `root`. Returns the new root and the removed value,
/// or `None` if the key is not in the tree.
pub(crate) fn delete(
    src: &dyn BlockSource,
    root: &Arc<Node>,
    key: &str,
) -> Result<Option<(Arc<Node>, Cid)>, MstError> {
    let Some((node, value)) = remove(src, root, &Bounds::default(), key)? else {
        return Ok(None);
    };
    // Trim the top: a root with no keys is replaced by its only subtree.
    let mut root = Arc::new(node);
    while root.leaves.is_empty() {
        match root.subtrees[0].clone() {
            Some(link) => root = link.load(src, below(root.height), &Bounds::default())?,
            None => {
                root = Arc::new(Node::empty());
                break;
            }
        }
    }
    Ok(Some((root, value)))
}

/// Removes `key` from the subtree `node`; `None` if it is not there. The
/// returned node may be empty (the caller drops it).
fn remove(
    src: &dyn BlockSource,
    node: &Node,
    bounds: &Bounds,
    key: &str,
) -> Result<Option<(Node, Cid)>, MstError> {
    let i = node.find(key);
    let mut leaves = node.leaves.clone();
    let mut subtrees = node.subtrees.clone();
    let value = if let Some(leaf) = node.leaf_at(i, key) {
        let value = leaf.value;
        let merged = merge(
            src,
            subtrees[i].take(),
            subtrees[i + 1].take(),
            below(node.height),
            (&bounds.child(node, i), &bounds.child(node, i + 1)),
        )?;
        leaves.remove(i);
        subtrees.remove(i + 1);
        subtrees[i] = merged;
        value
    } else {
        let Some(link) = &subtrees[i] else {
            return Ok(None);
        };
        let child_bounds = bounds.child(node, i);
        let child = link.load(src, below(node.height), &child_bounds)?;
        let Some((child, value)) = remove(src, &child, &child_bounds, key)? else {
            return Ok(None);
        };
        subtrees[i] = non_empty(child);
        value
    };
    Ok(Some((Node::new(node.height, leaves, subtrees), value)))
}

/// Joins two adjacent subtrees at layer `height` (every key of `left` below
/// every key of `right`), merging the right edge of `left` with the left
/// edge of `right` all the way down.
fn merge(
    src: &dyn BlockSource,
    left: Sub,
    right: Sub,
    height: u8,
    bounds: (&Bounds, &Bounds),
) -> Result<Sub, MstError> {
    let (left_link, right_link) = match (left, right) {
        (None, other) | (other, None) => return Ok(other),
        (Some(l), Some(r)) => (l, r),
    };
    let left = left_link.load(src, height, bounds.0)?;
    let right = right_link.load(src, height, bounds.1)?;
    let last = left.leaves.len();
    let middle = merge(
        src,
        left.subtrees[last].clone(),
        right.subtrees[0].clone(),
        below(height),
        (&bounds.0.child(&left, last), &bounds.1.child(&right, 0)),
    )?;
    let mut leaves = left.leaves.clone();
    leaves.extend_from_slice(&right.leaves);
    let mut subtrees = left.subtrees[..last].to_vec();
    subtrees.push(middle);
    subtrees.extend_from_slice(&right.subtrees[1..]);
    Ok(Some(Link::memory(Node::new(height, leaves, subtrees))))
}
