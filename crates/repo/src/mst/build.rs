//! Building a tree in one pass from a sorted key set.
//!
//! This follows the definition of the canonical shape directly: the root is
//! at the highest key height; a node at layer `h` holds the keys of height
//! `h` in its range, and each gap between them that contains any lower key
//! gets a subtree at layer `h - 1` (an empty node if the gap has no key of
//! height `h - 1`). It shares no code with the insert/delete paths, so tests
//! use it to check them.

use std::sync::Arc;

use cid::Cid;

use super::key::key_height;
use super::node::{Leaf, Link, Node, below};

/// Builds the canonical tree of `items`, which must be sorted by key with
/// no duplicates.
pub(crate) fn build(items: Vec<(Arc<str>, Cid)>) -> Node {
    let items: Vec<(Leaf, u8)> = items
        .into_iter()
        .map(|(key, value)| {
            let height = key_height(key.as_bytes());
            (Leaf { key, value }, height)
        })
        .collect();
    match items.iter().map(|(_, h)| *h).max() {
        None => Node::empty(),
        Some(top) => build_node(&items, top),
    }
}

/// The node at layer `height` for `items` (non-empty, all of height
/// `<= height`).
fn build_node(items: &[(Leaf, u8)], height: u8) -> Node {
    let mut leaves = Vec::new();
    let mut subtrees = Vec::new();
    let mut gap_start = 0;
    for (i, (leaf, h)) in items.iter().enumerate() {
        if *h == height {
            subtrees.push(build_sub(&items[gap_start..i], height));
            leaves.push(leaf.clone());
            gap_start = i + 1;
        }
    }
    subtrees.push(build_sub(&items[gap_start..], height));
    Node::new(height, leaves, subtrees)
}

fn build_sub(gap: &[(Leaf, u8)], height: u8) -> Option<Link> {
    (!gap.is_empty()).then(|| Link::memory(build_node(gap, below(height))))
}
