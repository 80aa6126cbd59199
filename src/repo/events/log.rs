//! The `Events` table: sequence numbers, appends in the commit's batch,
//! bounded retention, and reading from a cursor.
//!
//! Rows: `Events[seq (u64 BE)] = len(time) (u8) ‖ time ‖ frame`, and
//! `Meta[event_seq] = last seq handed out (u64 BE)`. Sequence numbers are
//! consecutive, so a gap in a scan can only mean rows were pruned.

use std::collections::VecDeque;
use std::sync::Arc;

use super::RepoEvent;
use super::build::{CommitEventParts, commit_frame};
use crate::repo::repository::RepoError;
use crate::store::{Batch, Engine, Table};

/// How many events a repository keeps by default. Frames are about 3–4 KB
/// for one-record commits of sealed chat messages (the record, new MST
/// nodes and the covering proofs; `cargo bench --bench events`), and sled
/// takes about 3 times that on disk: `tests/repo_gc.rs` measures ~50 MB for
/// a 5,000-event window against 2.6 MB for the repository itself, hence a
/// window of 1,000 commits (~10 MB). A consumer further behind than that
/// gets `OutdatedCursor` and resyncs with `getRepo`.
pub const DEFAULT_RETENTION: u64 = 1_000;

pub(crate) const META_EVENT_SEQ: &[u8] = b"event_seq";

/// Rows read per engine scan by [`Events`].
const PAGE: usize = 64;

/// A repository's view of its event table.
#[derive(Debug, Clone)]
pub(crate) struct EventLog {
    /// The last sequence number handed out (0: none yet).
    last: u64,
    /// How many events are kept (at least 1).
    retention: u64,
    /// Whether the next append must look for every row out of the window
    /// (after opening, or after the retention was lowered), rather than
    /// delete the one row that just fell out of it.
    sweep: bool,
}

impl EventLog {
    /// The log of a store with no events yet.
    pub fn new() -> EventLog {
        EventLog {
            last: 0,
            retention: DEFAULT_RETENTION,
            sweep: false,
        }
    }

    /// The log as the store has it.
    pub fn open(engine: &dyn Engine) -> Result<EventLog, RepoError> {
        let last = match engine.get(Table::Meta, META_EVENT_SEQ)? {
            None => 0,
            Some(bytes) => u64::from_be_bytes(
                bytes
                    .try_into()
                    .map_err(|_| RepoError::Corrupt("the last event seq is not 8 bytes".into()))?,
            ),
        };
        // The store may have been written with a larger retention.
        Ok(EventLog {
            last,
            retention: DEFAULT_RETENTION,
            sweep: true,
        })
    }

    /// The last sequence number handed out.
    pub fn last(&self) -> Option<u64> {
        (self.last > 0).then_some(self.last)
    }

    pub fn retention(&self) -> u64 {
        self.retention
    }

    pub fn set_retention(&mut self, keep: u64) {
        let keep = keep.max(1);
        self.sweep |= keep < self.retention;
        self.retention = keep;
    }

    /// Puts the commit's event, the new last seq and the pruning of events
    /// that fall out of the window into `batch`. Call
    /// [`committed`](Self::committed) once the batch is written.
    pub fn stage(
        &self,
        engine: &dyn Engine,
        batch: &mut Batch,
        parts: &CommitEventParts<'_>,
    ) -> Result<RepoEvent, RepoError> {
        let seq = self
            .last
            .checked_add(1)
            .ok_or_else(|| RepoError::Corrupt("event sequence numbers are exhausted".into()))?;
        let time = crate::model::now_datetime();
        let event = commit_frame(seq, &time, parts)?;
        batch.put(Table::Events, seq.to_be_bytes(), encode_row(&event));
        batch.put(Table::Meta, META_EVENT_SEQ, seq.to_be_bytes());
        // Keep seqs (seq - retention, seq]: one row falls out per append
        // (a blind delete: no scan, whatever the engine), or after opening
        // or lowering the retention, every row below the window.
        let keep_from = seq.saturating_sub(self.retention) + 1;
        if self.sweep {
            for row in engine.scan(Table::Events, b"") {
                let (key, _) = row?;
                if parse_seq(&key)? >= keep_from {
                    break;
                }
                batch.delete(Table::Events, key);
            }
        } else if keep_from > 1 {
            batch.delete(Table::Events, (keep_from - 1).to_be_bytes());
        }
        Ok(event)
    }

    /// Records that the event `seq` staged by [`stage`](Self::stage) is
    /// stored.
    pub fn committed(&mut self, seq: u64) {
        self.last = seq;
        self.sweep = false;
    }
}

fn encode_row(event: &RepoEvent) -> Vec<u8> {
    // An atproto datetime is far shorter than 255 bytes (we write 24).
    let time = &event.time.as_bytes()[..event.time.len().min(255)];
    let mut row = Vec::with_capacity(1 + time.len() + event.frame.len());
    row.push(time.len() as u8);
    row.extend_from_slice(time);
    row.extend_from_slice(&event.frame);
    row
}

fn parse_seq(key: &[u8]) -> Result<u64, RepoError> {
    let key: [u8; 8] = key
        .try_into()
        .map_err(|_| RepoError::Corrupt("an events row key is not 8 bytes".into()))?;
    Ok(u64::from_be_bytes(key))
}

fn decode_row(key: &[u8], row: Vec<u8>) -> Result<RepoEvent, RepoError> {
    let seq = parse_seq(key)?;
    let bad = || RepoError::Corrupt(format!("event {seq} is malformed"));
    let (&len, rest) = row.split_first().ok_or_else(bad)?;
    let len = usize::from(len);
    if rest.len() < len {
        return Err(bad());
    }
    let time = String::from_utf8(rest[..len].to_vec()).map_err(|_| bad())?;
    Ok(RepoEvent {
        seq,
        time,
        frame: rest[len..].to_vec(),
    })
}

/// The sequence number of the oldest event kept.
pub(crate) fn oldest(engine: &dyn Engine) -> Result<Option<u64>, RepoError> {
    match engine.scan(Table::Events, b"").next() {
        None => Ok(None),
        Some(row) => parse_seq(&row?.0).map(Some),
    }
}

/// Events with `seq > cursor`, in order, read from the store a page at a
/// time (it holds no borrow of the repository and no lock between pages).
///
/// The first event may come after `cursor + 1` when the events between were
/// pruned (an outdated cursor; see `Repository::is_outdated_cursor`). After
/// that, a gap means events were pruned while this reader lagged behind; it
/// yields [`RepoError::EventsPruned`] and ends (a server answers
/// `ConsumerTooSlow`).
///
/// When it returns `None` it has caught up; calling `next` again later
/// returns the events appended since (so a server can tail the log).
pub struct Events {
    engine: Option<Arc<dyn Engine>>,
    /// The next seq expected.
    next: u64,
    /// Whether a gap before the next event is allowed (only before the first).
    started: bool,
    buf: VecDeque<RepoEvent>,
    failed: bool,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events")
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl Events {
    /// Events after `cursor` (`None`: nothing, the live-only stream's
    /// empty backlog).
    pub(crate) fn new(engine: Arc<dyn Engine>, cursor: Option<u64>) -> Events {
        Events {
            next: cursor.map_or(0, |c| c.saturating_add(1)),
            engine: cursor.map(|_| engine),
            started: false,
            buf: VecDeque::new(),
            failed: false,
        }
    }

    /// The seq of the next event this reader expects.
    pub fn next_seq(&self) -> u64 {
        self.next
    }

    fn refill(&mut self) -> Result<(), RepoError> {
        let Some(engine) = &self.engine else {
            return Ok(());
        };
        for row in engine
            .scan(Table::Events, &self.next.to_be_bytes())
            .take(PAGE)
        {
            let (key, value) = row?;
            self.buf.push_back(decode_row(&key, value)?);
        }
        Ok(())
    }
}

impl Iterator for Events {
    type Item = Result<RepoEvent, RepoError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if self.buf.is_empty()
            && let Err(e) = self.refill()
        {
            self.failed = true;
            return Some(Err(e));
        }
        let Some(event) = self.buf.pop_front() else {
            // Caught up: from now on a gap can only be pruning.
            self.started = true;
            return None;
        };
        if event.seq != self.next && self.started {
            self.failed = true;
            return Some(Err(RepoError::EventsPruned {
                expected: self.next,
                oldest: event.seq,
            }));
        }
        self.started = true;
        self.next = event.seq.saturating_add(1);
        Some(Ok(event))
    }
}
