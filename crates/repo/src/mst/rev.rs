//! Descending traversal: the keys below a bound, largest first, loading
//! nodes only as it reaches them (the mirror of the forward [`Entries`]).
//!
//! Cost: seeking the bound loads its search path, O(log n) nodes; after
//! that each node entered is an ancestor of the next key yielded, so taking
//! `k` keys loads O(log n + k) nodes whatever the size of the tree. This is
//! what lets `listRecords` page newest-first without walking a collection
//! from its start.
//!
//! [`Entries`]: super::Entries

use std::sync::Arc;

use cid::Cid;

use super::error::MstError;
use super::node::{Bounds, Node, below};
use crate::blocks::BlockSource;

/// An iterator over `(key, value)` pairs in descending key order, from
/// [`Mst::entries_rev`](super::Mst::entries_rev) and
/// [`Mst::entries_before`](super::Mst::entries_before).
///
/// Nodes are loaded as the iteration reaches them (the bound's search path
/// on the first call to `next`, nothing before); a node that cannot be
/// loaded yields one `Err` and ends the iteration.
pub struct EntriesRev<'a> {
    src: &'a dyn BlockSource,
    stack: Vec<Frame>,
    /// The exclusive upper bound, sought on the first `next`.
    before: Option<String>,
    done: bool,
}

/// A node being walked right to left.
///
/// Each node is the sequence `slot 0, leaf 0, slot 1, ..., leaf n-1, slot n`
/// (positions `0..=2n`: even = subtree slot `pos / 2`, odd = leaf `pos / 2`);
/// the positions `0..end` are still to be visited, so `end` counts down.
struct Frame {
    node: Arc<Node>,
    end: usize,
    bounds: Bounds,
}

impl Frame {
    fn whole(node: Arc<Node>, bounds: Bounds) -> Self {
        let end = 2 * node.leaves.len() + 1;
        Self { node, end, bounds }
    }
}

impl<'a> EntriesRev<'a> {
    pub(crate) fn new(src: &'a dyn BlockSource, root: Arc<Node>, before: Option<String>) -> Self {
        Self {
            src,
            stack: vec![Frame::whole(root, Bounds::default())],
            before,
            done: false,
        }
    }

    /// Loads subtree `slot` of the top frame's node (checked against its
    /// layer and key range) and pushes it whole.
    fn enter(&mut self, slot: usize) -> Result<(), MstError> {
        let frame = self.stack.last().expect("enter with a frame");
        let Some(link) = frame.node.subtrees[slot].clone() else {
            return Ok(());
        };
        let bounds = frame.bounds.child(&frame.node, slot);
        let node = link.load(self.src, below(frame.node.height), &bounds)?;
        self.stack.push(Frame::whole(node, bounds));
        Ok(())
    }

    /// Narrows the walk to keys `< before`, going down only the slot
    /// `before` falls in at each layer: its search path. (When `before` is
    /// a key of the tree, that slot is the subtree just left of it, and the
    /// path runs down its right edge, to the key that comes out first.)
    fn seek(&mut self, before: &str) -> Result<(), MstError> {
        loop {
            let frame = self.stack.last_mut().expect("seek with a frame");
            let slot = frame.node.find(before);
            // Leaves `slot..` are >= before; slot `slot` is entered now, so
            // what remains of this node is positions `0..2 * slot`.
            frame.end = 2 * slot;
            if frame.node.subtrees[slot].is_none() {
                return Ok(());
            }
            self.enter(slot)?;
        }
    }

    fn step(&mut self) -> Result<Option<(String, Cid)>, MstError> {
        if let Some(before) = self.before.take() {
            self.seek(&before)?;
        }
        loop {
            let Some(frame) = self.stack.last_mut() else {
                return Ok(None);
            };
            if frame.end == 0 {
                self.stack.pop();
                continue;
            }
            frame.end -= 1;
            let pos = frame.end;
            if pos % 2 == 1 {
                let leaf = &frame.node.leaves[pos / 2];
                return Ok(Some((leaf.key.to_string(), leaf.value)));
            }
            self.enter(pos / 2)?;
        }
    }
}

impl Iterator for EntriesRev<'_> {
    type Item = Result<(String, Cid), MstError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.step().transpose();
        if !matches!(item, Some(Ok(_))) {
            self.done = true;
        }
        item
    }
}
