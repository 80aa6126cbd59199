//! In-order traversal of a tree, loading nodes only as it reaches them.

use std::sync::Arc;

use cid::Cid;

use super::error::MstError;
use super::node::{Bounds, Link, Node, below};
use crate::blocks::BlockSource;

/// What a [`Cursor`] is looking at.
pub(crate) enum Item {
    /// A key and its value.
    Leaf(Arc<str>, Cid),
    /// A subtree (not yet entered) at the given layer.
    Tree(Link, u8),
}

/// A position in the in-order sequence of a tree's leaves and subtrees.
///
/// Each node is seen as `slot 0, leaf 0, slot 1, leaf 1, ..., slot n`; empty
/// slots are skipped. The cursor can step over a subtree without loading it
/// ([`Cursor::skip`]) or enter it ([`Cursor::descend`]).
pub(crate) struct Cursor<'a> {
    src: &'a dyn BlockSource,
    stack: Vec<Frame>,
    /// Whether nodes read from `src` are kept in the tree (see
    /// [`Link::load_keeping`]).
    keep: bool,
}

struct Frame {
    node: Arc<Node>,
    /// Position in the sequence: even = slot `pos / 2`, odd = leaf `pos / 2`.
    pos: usize,
    bounds: Bounds,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of the tree under `root`.
    pub fn new(src: &'a dyn BlockSource, root: Arc<Node>) -> Self {
        Self {
            src,
            stack: vec![Frame {
                node: root,
                pos: 0,
                bounds: Bounds::default(),
            }],
            keep: true,
        }
    }

    /// A cursor like [`new`](Self::new)'s that keeps no node it reads.
    pub fn passing(src: &'a dyn BlockSource, root: Arc<Node>) -> Self {
        Self {
            keep: false,
            ..Self::new(src, root)
        }
    }

    /// The current item; `None` at the end.
    pub fn current(&mut self) -> Option<Item> {
        loop {
            let frame = self.stack.last_mut()?;
            let node = &frame.node;
            if frame.pos > 2 * node.leaves.len() {
                self.stack.pop();
                continue;
            }
            if frame.pos % 2 == 1 {
                let leaf = &node.leaves[frame.pos / 2];
                return Some(Item::Leaf(leaf.key.clone(), leaf.value));
            }
            match &node.subtrees[frame.pos / 2] {
                Some(link) => return Some(Item::Tree(link.clone(), below(node.height))),
                None => frame.pos += 1,
            }
        }
    }

    /// Moves past the current item (a subtree is skipped whole).
    pub fn skip(&mut self) {
        if let Some(frame) = self.stack.last_mut() {
            frame.pos += 1;
        }
    }

    /// Enters the current item, which must be a subtree (as just returned
    /// by [`current`](Self::current)), and returns its node.
    pub fn descend(&mut self) -> Result<Arc<Node>, MstError> {
        let frame = self.stack.last_mut().expect("descend after current");
        let slot = frame.pos / 2;
        let link = frame.node.subtrees[slot]
            .clone()
            .expect("descend on a subtree");
        let bounds = frame.bounds.child(&frame.node, slot);
        let height = below(frame.node.height);
        let node = link.load_keeping(self.src, height, &bounds, self.keep)?;
        frame.pos += 1;
        self.stack.push(Frame {
            node: node.clone(),
            pos: 0,
            bounds,
        });
        Ok(node)
    }

    /// Moves to the first leaf `>= key` (or to a subtree holding it), going
    /// down only the search path of `key`.
    pub fn seek(&mut self, key: &str) -> Result<(), MstError> {
        let Some(frame) = self.stack.last_mut() else {
            return Ok(());
        };
        frame.pos = 2 * frame.node.find(key);
        while let Some(Item::Tree(..)) = self.current() {
            let frame = self.stack.last().expect("current found a frame");
            // Only enter the slot the key falls in, not later ones.
            if frame.pos != 2 * frame.node.find(key) {
                break;
            }
            let node = self.descend()?;
            let frame = self.stack.last_mut().expect("just pushed");
            frame.pos = 2 * node.find(key);
        }
        Ok(())
    }
}

/// An iterator over `(key, value)` pairs in key order, from
/// [`Mst::entries`](super::Mst::entries) and friends.
///
/// Nodes are loaded as the iteration reaches them; a node that cannot be
/// loaded yields one `Err` and ends the iteration.
pub struct Entries<'a> {
    cursor: Cursor<'a>,
    seek: Option<String>,
    prefix: Option<String>,
    done: bool,
}

impl<'a> Entries<'a> {
    pub(crate) fn new(cursor: Cursor<'a>, seek: Option<String>, prefix: Option<String>) -> Self {
        Self {
            cursor,
            seek,
            prefix,
            done: false,
        }
    }

    fn step(&mut self) -> Result<Option<(String, Cid)>, MstError> {
        if let Some(key) = self.seek.take() {
            self.cursor.seek(&key)?;
        }
        loop {
            match self.cursor.current() {
                None => return Ok(None),
                Some(Item::Leaf(key, value)) => {
                    self.cursor.skip();
                    if let Some(prefix) = &self.prefix
                        && !key.starts_with(prefix.as_str())
                    {
                        return Ok(None);
                    }
                    return Ok(Some((key.to_string(), value)));
                }
                Some(Item::Tree(..)) => {
                    self.cursor.descend()?;
                }
            }
        }
    }
}

impl Iterator for Entries<'_> {
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

/// One step of a preorder walk of a tree ([`Mst::walk`](super::Mst::walk)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Visit {
    /// A node block, met before anything under it.
    Node {
        /// The node's CID.
        cid: Cid,
        /// The node's block (canonical DAG-CBOR).
        bytes: Vec<u8>,
    },
    /// A key and its value, met after its node and after the subtree of
    /// keys just below it.
    Leaf {
        /// The key (`collection/rkey`).
        key: String,
        /// The record CID.
        value: Cid,
    },
}

/// A preorder walk of a whole tree: every node block once, each before its
/// subtrees, with the leaves interleaved in key order. Nodes are loaded (and
/// checked) as the walk reaches them; an error ends the walk.
pub struct Walk<'a> {
    cursor: Cursor<'a>,
    root: Option<Arc<Node>>,
    done: bool,
}

impl<'a> Walk<'a> {
    pub(crate) fn new(cursor: Cursor<'a>, root: Arc<Node>) -> Self {
        Self {
            cursor,
            root: Some(root),
            done: false,
        }
    }

    fn step(&mut self) -> Result<Option<Visit>, MstError> {
        if let Some(root) = self.root.take() {
            return Ok(Some(node_visit(&root)));
        }
        match self.cursor.current() {
            None => Ok(None),
            Some(Item::Leaf(key, value)) => {
                self.cursor.skip();
                Ok(Some(Visit::Leaf {
                    key: key.to_string(),
                    value,
                }))
            }
            Some(Item::Tree(..)) => {
                let node = self.cursor.descend()?;
                Ok(Some(node_visit(&node)))
            }
        }
    }
}

fn node_visit(node: &Node) -> Visit {
    Visit::Node {
        cid: node.cid(),
        bytes: node.bytes().to_vec(),
    }
}

impl Iterator for Walk<'_> {
    type Item = Result<Visit, MstError>;

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
