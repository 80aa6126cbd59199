//! The repository event stream behind `com.atproto.sync.subscribeRepos`:
//! the `#commit` firehose, both sides.
//!
//! # Producer
//!
//! Every successful [`Repository::apply_with`](crate::repository::Repository::apply_with)
//! (and the initial commit of [`Repository::init_engine`](crate::repository::Repository::init_engine))
//! appends one `#commit` event to the store's `Events` table **in the same
//! engine batch as the commit**: an acknowledged commit always has its
//! event, a failed commit has none. Events carry consecutive sequence
//! numbers starting at 1; the last one handed out is kept in `Meta`, so
//! numbers are never reused, even after pruning.
//!
//! A stored event ([`RepoEvent`]) is the complete binary websocket message
//! ([`RepoEvent::frame`]): the DAG-CBOR header `{op: 1, t: "#commit"}`
//! followed by the DAG-CBOR body (`seq`, `rebase`, `tooBig`, `repo`,
//! `commit`, `rev`, `since`, `blocks`, `ops`, `prevData`, `blobs`, `time`;
//! see [`CommitEvent`]). A server sends it as is.
//!
//! `blocks` is a CAR (root: the commit) with the commit block, the new MST
//! nodes, the new record blocks, and the covering proof of every changed key
//! in the new tree (`Mst::covering_proof`): enough for a consumer to check
//! the signature and invert the ops back to `prevData` (sync v1.1). A commit
//! with more than [`MAX_OPS`] operations or a CAR over [`MAX_BLOCKS_BYTES`]
//! is sent as `tooBig` with no ops and only the commit block; the consumer
//! must fetch the repository instead.
//!
//! ## Cursors and retention
//!
//! Like the reference PDS: no cursor means live only (no backlog); a cursor
//! `c` replays every retained event with `seq > c`, then continues live; a
//! cursor past the last event is `FutureCursor`. Only the last
//! [`DEFAULT_RETENTION`] events, and at most [`DEFAULT_RETENTION_BYTES`] of
//! them, are kept (both configurable per repository);
//! older rows are deleted in the batch that appends the new one, so the log
//! is bounded. A cursor older than the retained window gets an
//! `OutdatedCursor` info frame ([`info_frame`]) and then what is kept.
//!
//! # Consumer
//!
//! [`decode_frame`] reads a binary message strictly (never panics; a named
//! [`EventError`] for each problem), and [`verify_commit`] checks a
//! `#commit` event inductively against the previous data CID.
//!
//! Module map: `frame` (encode/decode of messages), `build` (a commit's
//! event body and CAR slice), `log` (the store table, cursors, retention),
//! `verify` (the inductive check).

mod build;
mod frame;
mod log;
mod verify;

pub(crate) use self::build::CommitEventParts;
pub use self::build::{MAX_BLOCKS_BYTES, MAX_OPS};
pub use self::frame::{
    CommitEvent, EventOp, Frame, MAX_FRAME_SIZE, OpAction, decode_frame, error_frame, info_frame,
    outdated_cursor_frame,
};
pub use self::log::{DEFAULT_RETENTION, DEFAULT_RETENTION_BYTES, Events};
pub(crate) use self::log::{EventLog, oldest as log_oldest};
pub use self::verify::{VerifiedCommit, VerifyEventError, verify_commit};

use gelstore_model::DataModelError;

/// One stored event of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoEvent {
    /// Its sequence number (1, 2, ...; never reused).
    pub seq: u64,
    /// When it was appended (an atproto datetime, also in the frame).
    pub time: String,
    /// The complete binary websocket message: header then body.
    pub frame: Vec<u8>,
}

/// Why a frame could not be read (or, rarely, written).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EventError {
    /// The message is larger than [`MAX_FRAME_SIZE`].
    #[error("frame of {size} bytes is larger than the limit of {max}")]
    FrameTooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The header is not one strict DAG-CBOR item.
    #[error("frame header is not valid DAG-CBOR: {0}")]
    Header(DataModelError),
    /// The message ends after its header.
    #[error("frame has a header but no body")]
    NoBody,
    /// The body is not one strict DAG-CBOR item.
    #[error("frame body is not valid DAG-CBOR: {0}")]
    Body(DataModelError),
    /// The header is not `{op: 1, t: "#..."}` or `{op: -1}`.
    #[error("bad frame header: {0}")]
    BadHeader(String),
    /// A field of the body is missing or has the wrong type or syntax.
    #[error("bad field `{field}` in a {kind} frame: {reason}")]
    BadField {
        /// The message type (`#commit`, `#info`, `error`).
        kind: &'static str,
        /// The field.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// An entry of `ops` is malformed.
    #[error("bad op #{index} in a #commit frame: {reason}")]
    BadOp {
        /// Its position in `ops`.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// An event could not be encoded (a value outside the data model or a
    /// frame over the size limit).
    #[error("cannot encode the event: {0}")]
    Encode(String),
}
