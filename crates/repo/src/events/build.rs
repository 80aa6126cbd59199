//! The `#commit` event of one commit: its CAR slice and its body.

use std::collections::BTreeMap;

use cid::Cid;

use super::frame::{CommitEvent, EventOp, OpAction};
use super::{EventError, RepoEvent};
use crate::car::CarWriter;
use crate::mst::RecordOp;
use crate::tid::Tid;

/// Most operations one `#commit` carries (the lexicon's `maxLength`); a
/// commit with more is sent as `tooBig`.
pub const MAX_OPS: usize = 200;

/// Largest `blocks` CAR one `#commit` carries (the lexicon's `maxLength`);
/// a commit with a larger slice is sent as `tooBig`.
pub const MAX_BLOCKS_BYTES: usize = 1_000_000;

/// What the repository knows about a commit when it appends its event.
pub(crate) struct CommitEventParts<'a> {
    pub did: &'a str,
    pub commit: Cid,
    pub commit_block: &'a [u8],
    pub rev: Tid,
    /// The previous commit's rev and MST root (`None` for the first one).
    pub since: Option<(Tid, Cid)>,
    /// The record operations, sorted by key.
    pub ops: &'a [RecordOp],
    /// Every other block the consumer needs: new MST nodes, new records and
    /// the covering proofs of the changed keys in the new tree.
    pub blocks: &'a BTreeMap<Cid, Vec<u8>>,
    /// Already known to be `tooBig` (too many ops, or new blocks over the
    /// limit before any proof): only the commit block is sent.
    pub too_big: bool,
}

/// The stored event for `parts` with sequence number `seq`, stamped `time`.
pub(crate) fn commit_frame(
    seq: u64,
    time: &str,
    parts: &CommitEventParts<'_>,
) -> Result<RepoEvent, EventError> {
    // Known `tooBig`: the whole slice is not built. Otherwise the proofs
    // may still take it over the limit.
    let full = if parts.too_big || parts.ops.len() > MAX_OPS {
        None
    } else {
        Some(car(parts, true)?).filter(|c| c.len() <= MAX_BLOCKS_BYTES)
    };
    let too_big = full.is_none();
    let (ops, blocks) = match full {
        Some(car) => (parts.ops.iter().map(event_op).collect(), car),
        None => (Vec::new(), car(parts, false)?),
    };
    let event = CommitEvent {
        seq,
        rebase: false,
        too_big,
        repo: parts.did.to_owned(),
        commit: parts.commit,
        rev: parts.rev.to_string(),
        since: parts.since.map(|(rev, _)| rev.to_string()),
        blocks,
        ops,
        prev_data: parts.since.map(|(_, data)| data),
        blobs: Vec::new(),
        time: time.to_owned(),
    };
    Ok(RepoEvent {
        seq,
        time: time.to_owned(),
        frame: event.to_frame()?,
    })
}

fn event_op(op: &RecordOp) -> EventOp {
    let action = match (op.prev, op.cid) {
        (None, _) => OpAction::Create,
        (Some(_), Some(_)) => OpAction::Update,
        (Some(_), None) => OpAction::Delete,
    };
    EventOp {
        action,
        path: op.key.clone(),
        cid: op.cid,
        prev: op.prev,
    }
}

/// The CAR slice: root and first block the commit, then (with `all`) the
/// other blocks in CID order.
fn car(parts: &CommitEventParts<'_>, all: bool) -> Result<Vec<u8>, EventError> {
    let enc = |e: crate::car::CarError| EventError::Encode(e.to_string());
    let mut w = CarWriter::new(Vec::new(), &[parts.commit]).map_err(enc)?;
    w.write_block(&parts.commit, parts.commit_block)
        .map_err(enc)?;
    if all {
        for (cid, bytes) in parts.blocks {
            if *cid != parts.commit {
                w.write_block(cid, bytes).map_err(enc)?;
            }
        }
    }
    w.finish().map_err(enc)
}
