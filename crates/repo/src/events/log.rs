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
use crate::repository::RepoError;
use gelstore_store::{Batch, Engine, Table};

/// How many events a repository keeps by default. Frames are about 3–4 KB
/// for one-record commits of sealed chat messages (the record, new MST
/// nodes and the covering proofs; `cargo bench --bench events`), so the
/// default window holds about 4 MB of rows. A consumer further behind than
/// that gets `OutdatedCursor` and resyncs with `getRepo`.
pub const DEFAULT_RETENTION: u64 = 1_000;

/// The most bytes of rows a repository keeps by default, whatever their
/// count: a frame may carry up to a 1 MB CAR, so a window bounded only by
/// count could hold a gigabyte.
pub const DEFAULT_RETENTION_BYTES: u64 = 32 * 1024 * 1024;

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
    /// How many bytes of rows (key and value) are kept; the newest event is
    /// kept whatever its size.
    retention_bytes: u64,
    /// The sizes of the stored events; `None` until read from the store
    /// (after opening), since a
    /// store written with a larger window may hold more rows than this one
    /// keeps.
    window: Option<Window>,
}

/// The events a store holds, as sizes.
#[derive(Debug, Clone, Default)]
struct Window {
    /// The seq and row bytes of every stored event, oldest first.
    rows: VecDeque<(u64, u64)>,
    /// The sum of the rows' bytes.
    total: u64,
    /// Set when `EventSizes` did not match the events (the sizes were
    /// counted from the events themselves): the `EventSizes` keys found
    /// then. The next append deletes them and writes the sizes of `rows`.
    resave: Option<Vec<u64>>,
}

impl EventLog {
    /// The log of a store with no events yet.
    pub fn new() -> EventLog {
        EventLog {
            last: 0,
            retention: DEFAULT_RETENTION,
            retention_bytes: DEFAULT_RETENTION_BYTES,
            window: Some(Window::default()),
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
        Ok(EventLog {
            last,
            retention: DEFAULT_RETENTION,
            retention_bytes: DEFAULT_RETENTION_BYTES,
            window: None,
        })
    }

    /// The last sequence number handed out.
    pub fn last(&self) -> Option<u64> {
        (self.last > 0).then_some(self.last)
    }

    pub fn retention(&self) -> u64 {
        self.retention
    }

    pub fn retention_bytes(&self) -> u64 {
        self.retention_bytes
    }

    pub fn set_retention(&mut self, keep: u64) {
        self.retention = keep.max(1);
    }

    pub fn set_retention_bytes(&mut self, bytes: u64) {
        self.retention_bytes = bytes;
    }

    /// The number and bytes of the rows stored, once known (after the first
    /// append since opening, or from [`EventLog::window_size`]). Read from
    /// `EventSizes` (a few bytes a row) when that table matches the events
    /// kept; otherwise (a store from before the table, or one written since
    /// by a build without it) from the rows themselves, once, and the sizes
    /// are rewritten with the next append.
    fn load_window(&mut self, engine: &dyn Engine) -> Result<(), RepoError> {
        if self.window.is_some() {
            return Ok(());
        }
        let mut window = Window::default();
        for row in engine.scan(Table::EventSizes, b"") {
            let (key, value) = row?;
            let bytes =
                u64::from_be_bytes(value.try_into().map_err(|_| {
                    RepoError::Corrupt("an event_sizes value is not 8 bytes".into())
                })?);
            window.rows.push_back((parse_seq(&key)?, bytes));
            window.total += bytes;
        }
        // Seqs are consecutive and pruned from the oldest end, so the sizes
        // are whole when they run from the oldest event kept to the last.
        let whole = match (window.rows.front(), window.rows.back()) {
            (Some(&(first, _)), Some(&(last, _))) => {
                last == self.last
                    && last - first + 1 == window.rows.len() as u64
                    && oldest(engine)? == Some(first)
            }
            _ => oldest(engine)?.is_none(),
        };
        if !whole {
            let stale = window.rows.iter().map(|&(seq, _)| seq).collect();
            window = Window {
                resave: Some(stale),
                ..Window::default()
            };
            for row in engine.scan(Table::Events, b"") {
                let (key, value) = row?;
                let bytes = row_bytes(value.len());
                window.rows.push_back((parse_seq(&key)?, bytes));
                window.total += bytes;
            }
        }
        self.window = Some(window);
        Ok(())
    }

    /// How many events are stored and their bytes (keys and values).
    pub fn window_size(&mut self, engine: &dyn Engine) -> Result<(u64, u64), RepoError> {
        self.load_window(engine)?;
        let (rows, total) = self
            .window
            .as_ref()
            .map_or((0, 0), |w| (w.rows.len(), w.total));
        Ok((rows as u64, total))
    }

    /// How many of the oldest rows fall out once a row of `bytes` is added
    /// to `rows` (total `total`): past the count or the bytes, never the new one.
    fn falling_out(&self, rows: &VecDeque<(u64, u64)>, total: u64, bytes: u64) -> usize {
        let mut count = rows.len() as u64 + 1;
        let mut total = total + bytes;
        let mut out = 0;
        for &(_, old) in rows {
            if count <= self.retention && total <= self.retention_bytes {
                break;
            }
            count -= 1;
            total -= old;
            out += 1;
        }
        out
    }

    /// Puts the commit's event, the new last seq and the pruning of events
    /// that fall out of the window into `batch`. Call
    /// [`committed`](Self::committed) once the batch is written.
    pub fn stage(
        &mut self,
        engine: &dyn Engine,
        batch: &mut Batch,
        parts: &CommitEventParts<'_>,
    ) -> Result<RepoEvent, RepoError> {
        let seq = self
            .last
            .checked_add(1)
            .ok_or_else(|| RepoError::Corrupt("event sequence numbers are exhausted".into()))?;
        let time = gelstore_model::now_datetime();
        let event = commit_frame(seq, &time, parts)?;
        let row = encode_row(&event);
        let bytes = row_bytes(row.len());
        batch.put(Table::Events, seq.to_be_bytes(), row);
        batch.put(Table::EventSizes, seq.to_be_bytes(), bytes.to_be_bytes());
        batch.put(Table::Meta, META_EVENT_SEQ, seq.to_be_bytes());
        // Reading the window only learns what the store holds: harmless if
        // this batch is never written.
        self.load_window(engine)?;
        if let Some(window) = &self.window {
            if let Some(stale) = &window.resave {
                let first = window.rows.front().map_or(u64::MAX, |&(seq, _)| seq);
                for &seq in stale {
                    // `rows` runs from `first` to the last seq without a gap.
                    if seq < first {
                        batch.delete(Table::EventSizes, seq.to_be_bytes());
                    }
                }
                for &(seq, bytes) in &window.rows {
                    batch.put(Table::EventSizes, seq.to_be_bytes(), bytes.to_be_bytes());
                }
            }
            // Blind deletes of the rows known to fall out: no scan.
            let out = self.falling_out(&window.rows, window.total, bytes);
            for &(old, _) in window.rows.iter().take(out) {
                batch.delete(Table::Events, old.to_be_bytes());
                batch.delete(Table::EventSizes, old.to_be_bytes());
            }
        }
        Ok(event)
    }

    /// Records that `event`, staged by [`stage`](Self::stage), is stored
    /// (and the rows that fell out of the window with it are gone).
    pub fn committed(&mut self, event: &RepoEvent) {
        self.last = event.seq;
        let bytes = row_bytes(1 + event.time.len().min(255) + event.frame.len());
        let Some(window) = &self.window else {
            return;
        };
        let out = self.falling_out(&window.rows, window.total, bytes);
        if let Some(window) = &mut self.window {
            for (_, old) in window.rows.drain(..out) {
                window.total -= old;
            }
            window.rows.push_back((event.seq, bytes));
            window.total += bytes;
            window.resave = None;
        }
    }
}

/// The bytes an events row takes, counted as its key and value.
fn row_bytes(value_len: usize) -> u64 {
    8 + value_len as u64
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
