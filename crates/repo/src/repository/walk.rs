//! A block-level walk of an MST in "streamable" order: each node before
//! everything below it, its left subtree (`l`) first, then for each entry
//! the record (`v`) and the subtree to its right (`t`). Records come out in
//! key order, and a reader can check each block against the node that links
//! it as the blocks arrive.
//!
//! Nodes are decoded only for their links. The repository stores only nodes
//! the MST code built or checked, so this decoder is lenient about anything
//! it does not need (key bytes, prefix lengths) but strict about the links.

use cid::Cid;
use ipld_core::ipld::Ipld;

use super::RepoError;
use crate::blocks::BlockSource;
use gelstore_model::decode_dag_cbor;

/// The links of one MST node.
pub(crate) struct NodeLinks {
    pub left: Option<Cid>,
    /// `(record, right subtree)` per entry, in order.
    pub entries: Vec<(Cid, Option<Cid>)>,
}

pub(crate) fn node_links(cid: &Cid, bytes: &[u8]) -> Result<NodeLinks, RepoError> {
    let bad = |what: &str| RepoError::Corrupt(format!("MST node {cid}: {what}"));
    let Ipld::Map(map) = decode_dag_cbor(bytes).map_err(|e| bad(&e.to_string()))? else {
        return Err(bad("not a map"));
    };
    let link = |v: Option<&Ipld>, field: &str| match v {
        None | Some(Ipld::Null) => Ok(None),
        Some(Ipld::Link(c)) => Ok(Some(*c)),
        Some(_) => Err(bad(&format!("{field} is not a link"))),
    };
    let left = link(map.get("l"), "l")?;
    let Some(Ipld::List(list)) = map.get("e") else {
        return Err(bad("no entry list"));
    };
    let mut entries = Vec::with_capacity(list.len());
    for entry in list {
        let Ipld::Map(e) = entry else {
            return Err(bad("an entry is not a map"));
        };
        let value = link(e.get("v"), "v")?.ok_or_else(|| bad("an entry has no value"))?;
        entries.push((value, link(e.get("t"), "t")?));
    }
    Ok(NodeLinks { left, entries })
}

/// What the walk found at one step.
pub(crate) enum Visit<'a> {
    /// An MST node and its block.
    Node(&'a Cid, &'a [u8]),
    /// A record link (the block is not read by the walk).
    Record(&'a Cid),
}

/// Walks the tree under `root` in streamable order. `enter` decides for each
/// node (by CID, before it is read) whether to visit it and its subtree at
/// all; `visit` sees every node entered and every record link of those nodes.
pub(crate) fn walk(
    src: &dyn BlockSource,
    root: Cid,
    enter: &mut dyn FnMut(&Cid) -> bool,
    visit: &mut dyn FnMut(Visit<'_>) -> Result<(), RepoError>,
) -> Result<(), RepoError> {
    // An explicit stack instead of recursion: nodes to enter and records to
    // report, in reverse order.
    enum Step {
        Node(Cid),
        Record(Cid),
    }
    let mut stack = vec![Step::Node(root)];
    while let Some(step) = stack.pop() {
        match step {
            Step::Record(cid) => visit(Visit::Record(&cid))?,
            Step::Node(cid) => {
                if !enter(&cid) {
                    continue;
                }
                let bytes = src
                    .get(&cid)
                    .map_err(|e| RepoError::Corrupt(e.to_string()))?
                    .ok_or_else(|| RepoError::Corrupt(format!("MST node {cid} is missing")))?;
                visit(Visit::Node(&cid, &bytes))?;
                let links = node_links(&cid, &bytes)?;
                for (record, right) in links.entries.into_iter().rev() {
                    if let Some(right) = right {
                        stack.push(Step::Node(right));
                    }
                    stack.push(Step::Record(record));
                }
                if let Some(left) = links.left {
                    stack.push(Step::Node(left));
                }
            }
        }
    }
    Ok(())
}
