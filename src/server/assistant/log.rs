//! One reply's live run as `subscribeReply` frames: appended by the run,
//! read by any number of subscribers, each from its own cursor.
//!
//! Seqs start at 1, so `cursor=0` (or none) replays the whole run. Frames
//! are encoded once, when the event is made; a subscriber copies out the
//! frames after its cursor and sleeps on a watch channel until the next
//! append or the end. The log is kept after the run ends (for late
//! subscribers and cursor resumes): the last 256 finished runs, older
//! ones are replayed from their records.

use std::sync::Mutex;

use tokio::sync::watch;

use crate::chat::AssistantEvent;
use crate::repo::events::error_frame;

/// `event` as a binary `subscribeReply` message with sequence number
/// `seq`: the header `{op: 1, t: "#name"}` then the body (the event
/// without `$type`), both DAG-CBOR.
pub fn event_frame(event: &AssistantEvent, seq: u64) -> Vec<u8> {
    // The generated types convert (strings, integers, maps; `args` and
    // `body` were checked to be a lexicon `unknown` by `to_frame`); should
    // one not, the subscriber gets an error frame instead of undecodable
    // bytes.
    event.frame_bytes(seq).unwrap_or_else(|e| {
        tracing::error!("subscribeReply: event {seq} does not encode: {e}");
        error_frame("InternalServerError", "an event could not be encoded")
    })
}

/// A run's frames so far, and whether it ended.
#[derive(Debug)]
pub struct RunLog {
    inner: Mutex<Inner>,
    /// Bumped on every append and at the end.
    changed: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Frame of seq `i + 1` at index `i`.
    frames: Vec<Vec<u8>>,
    /// Their total size.
    bytes: usize,
    ended: bool,
}

/// What a subscriber reads after its cursor.
#[derive(Debug)]
pub struct Read {
    /// The frames after the cursor, in order.
    pub frames: Vec<Vec<u8>>,
    /// The seq of the last frame returned (the cursor to read from next).
    pub last: u64,
    /// The run ended and nothing follows these frames.
    pub ended: bool,
}

impl Default for RunLog {
    fn default() -> Self {
        RunLog {
            inner: Mutex::new(Inner::default()),
            changed: watch::channel(0).0,
        }
    }
}

impl RunLog {
    /// The seq the next frame gets.
    pub fn next_seq(&self) -> u64 {
        self.lock().frames.len() as u64 + 1
    }

    /// Appends a frame made for seq [`RunLog::next_seq`].
    pub fn push(&self, frame: Vec<u8>) {
        let mut inner = self.lock();
        inner.bytes += frame.len();
        inner.frames.push(frame);
        drop(inner);
        self.changed.send_modify(|n| *n += 1);
    }

    /// The frames' total size.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Marks the run ended: subscribers finish after the last frame.
    pub fn end(&self) {
        self.lock().ended = true;
        self.changed.send_modify(|n| *n += 1);
    }

    /// The frames after `cursor`, or `None` if `cursor` is past the last
    /// frame (a seq this run has not made).
    pub fn read_after(&self, cursor: u64) -> Option<Read> {
        let inner = self.lock();
        let len = inner.frames.len() as u64;
        if cursor > len {
            return None;
        }
        Some(Read {
            frames: inner.frames[cursor as usize..].to_vec(),
            last: len,
            ended: inner.ended,
        })
    }

    /// A receiver that wakes on the next append or the end.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Appends are single pushes: a panic elsewhere cannot leave the
        // list half-changed, so a poisoned lock is safe to use.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_read_what_follows() {
        let log = RunLog::default();
        assert_eq!(log.next_seq(), 1);
        log.push(b"a".to_vec());
        log.push(b"b".to_vec());
        let all = log.read_after(0).unwrap();
        assert_eq!(all.frames, vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!((all.last, all.ended), (2, false));
        assert_eq!(log.read_after(1).unwrap().frames, vec![b"b".to_vec()]);
        assert!(log.read_after(2).unwrap().frames.is_empty());
        assert!(log.read_after(3).is_none(), "a future cursor");
        let mut rx = log.subscribe();
        log.end();
        assert!(rx.has_changed().unwrap());
        rx.borrow_and_update();
        assert!(log.read_after(2).unwrap().ended);
    }
}
