//! The repository's side of the event stream (issue 8): appending a
//! commit's `#commit` event to the commit's batch, and reading the log.
//! The format, cursors and retention are described in `repo::events`.

use std::collections::BTreeMap;

use cid::Cid;

use super::{Head, RepoError, Repository};
use crate::blocks::BlockSource;
use crate::events::{
    self, CommitEventParts, EventLog, Events, MAX_BLOCKS_BYTES, MAX_OPS, RepoEvent,
};
use crate::mst::{Mst, RecordOp};
use gelstore_store::{Batch, Engine};

impl Repository {
    /// Events with `seq > cursor`, in order, then (polled again after
    /// returning `None`) the ones appended since. `None` is the live-only
    /// stream of the reference PDS: no backlog at all; a live reader starts
    /// from [`last_event_seq`](Self::last_event_seq). A cursor past the last
    /// event is [`RepoError::FutureCursor`]. A cursor older than the
    /// retained window replays what is kept (check
    /// [`is_outdated_cursor`](Self::is_outdated_cursor) first to send
    /// `OutdatedCursor`). The iterator owns a handle on the store: it does
    /// not borrow the repository.
    pub fn events_since(
        &self,
        cursor: Option<u64>,
    ) -> Result<impl Iterator<Item = Result<RepoEvent, RepoError>> + use<>, RepoError> {
        if let Some(cursor) = cursor {
            let last = self.events.last().unwrap_or(0);
            if cursor > last {
                return Err(RepoError::FutureCursor { cursor, last });
            }
        }
        Ok(Events::new(self.engine.clone(), cursor))
    }

    /// The sequence number of the last event (`None` before the first).
    pub fn last_event_seq(&self) -> Result<Option<u64>, RepoError> {
        Ok(self.events.last())
    }

    /// The oldest event still kept (`None` when there is none).
    pub fn oldest_event_seq(&self) -> Result<Option<u64>, RepoError> {
        events::log_oldest(&*self.engine)
    }

    /// Whether events after `cursor` were pruned: a server then sends
    /// [`events::outdated_cursor_frame`] before replaying what is kept.
    pub fn is_outdated_cursor(&self, cursor: u64) -> Result<bool, RepoError> {
        Ok(match self.oldest_event_seq()? {
            Some(oldest) => cursor.saturating_add(1) < oldest,
            None => false,
        })
    }

    /// How many events are kept ([`events::DEFAULT_RETENTION`] unless set).
    pub fn event_retention(&self) -> u64 {
        self.events.retention()
    }

    /// Keeps the last `keep` events (at least 1) from the next commit on;
    /// older ones are deleted by the commits that follow.
    pub fn set_event_retention(&mut self, keep: u64) {
        self.events.set_retention(keep);
    }

    /// The most bytes of event rows kept
    /// ([`events::DEFAULT_RETENTION_BYTES`] unless set).
    pub fn event_retention_bytes(&self) -> u64 {
        self.events.retention_bytes()
    }

    /// Keeps at most `bytes` of event rows (keys and values) from the next
    /// commit on, whatever their count; the newest event is kept even when
    /// it alone is larger. Older ones are deleted by the commits that follow.
    pub fn set_event_retention_bytes(&mut self, bytes: u64) {
        self.events.set_retention_bytes(bytes);
    }

    /// How many events are stored and the bytes of their rows (keys and
    /// values): what the window costs before the engine's own overhead.
    pub fn event_window(&mut self) -> Result<(u64, u64), RepoError> {
        self.events.window_size(&*self.engine)
    }

    /// The event log's part of [`check`](Self::check): the kept events are
    /// consecutive and end at the last seq handed out, and the last one is
    /// the head commit's (so no commit lacks its event).
    pub(super) fn check_events(&self) -> Result<(), RepoError> {
        let bad = |what: String| Err(RepoError::Corrupt(what));
        let last = self.events.last();
        let mut newest = None;
        for event in Events::new(self.engine.clone(), Some(0)) {
            let event = event.map_err(|e| match e {
                RepoError::EventsPruned { expected, oldest } => RepoError::Corrupt(format!(
                    "the event log has a gap: {expected} is missing, {oldest} follows"
                )),
                other => other,
            })?;
            newest = Some(event);
        }
        let Some(newest) = newest else {
            return match last {
                None => Ok(()),
                Some(seq) => bad(format!("event {seq} was handed out but is not kept")),
            };
        };
        if Some(newest.seq) != last {
            return bad(format!(
                "the newest event is {}, the last seq handed out is {last:?}",
                newest.seq
            ));
        }
        match events::decode_frame(&newest.frame) {
            Ok(events::Frame::Commit(c))
                if c.commit == self.head.commit && c.rev == self.head.rev.to_string() =>
            {
                Ok(())
            }
            Ok(_) => bad(format!(
                "the newest event ({}) is not the head commit's",
                newest.seq
            )),
            Err(e) => bad(format!("event {} does not decode: {e}", newest.seq)),
        }
    }
}

/// Puts the `#commit` event of a commit into its batch. `blocks` holds the
/// commit's new MST nodes and records; the covering proofs of the changed
/// keys in `tree` (the new tree) are added here. `since` is the previous
/// head (`None` for the first commit).
#[allow(clippy::too_many_arguments)]
pub(super) fn stage_commit_event<S: BlockSource>(
    engine: &dyn Engine,
    log: &mut EventLog,
    did: &str,
    batch: &mut Batch,
    tree: &Mst<S>,
    ops: &[RecordOp],
    commit: (Cid, &[u8]),
    head: Head,
    since: Option<Head>,
    mut blocks: BTreeMap<Cid, Vec<u8>>,
) -> Result<RepoEvent, RepoError> {
    // A commit already known to be `tooBig` (too many ops, or new blocks
    // over the CAR limit before any proof) sends only its commit block:
    // its proofs are not worth building.
    let too_big =
        ops.len() > MAX_OPS || blocks.values().map(Vec::len).sum::<usize>() > MAX_BLOCKS_BYTES;
    if !too_big {
        let mut proof = Vec::new();
        for op in ops {
            tree.covering_proof(&op.key, &mut proof)?;
        }
        blocks.extend(proof);
    }
    let parts = CommitEventParts {
        did,
        commit: commit.0,
        commit_block: commit.1,
        rev: head.rev,
        since: since.map(|h| (h.rev, h.data)),
        ops,
        blocks: &blocks,
        too_big,
    };
    log.stage(engine, batch, &parts)
}
