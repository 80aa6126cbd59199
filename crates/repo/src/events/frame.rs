//! Event-stream messages: a DAG-CBOR header followed by a DAG-CBOR body
//! (<https://atproto.com/specs/event-stream>). Encoding of `#commit`
//! bodies, `#info` and error frames, and strict decoding of untrusted
//! messages.

use std::collections::BTreeMap;

use cid::Cid;
use ipld_core::ipld::Ipld;

use super::EventError;
use gelstore_model::{DataModelError, MAX_CBOR_SIZE, decode_dag_cbor, encode_dag_cbor};

/// Largest message [`decode_frame`] reads (and the encoder writes): the
/// data model's block limit, which holds a `#commit` body with a full
/// [`MAX_BLOCKS_BYTES`](super::MAX_BLOCKS_BYTES) CAR.
pub const MAX_FRAME_SIZE: usize = MAX_CBOR_SIZE;

/// What a repository operation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpAction {
    /// A new record.
    Create,
    /// A replaced record.
    Update,
    /// A removed record.
    Delete,
}

impl OpAction {
    /// The lexicon's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            OpAction::Create => "create",
            OpAction::Update => "update",
            OpAction::Delete => "delete",
        }
    }
}

/// One `#repoOp` of a `#commit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventOp {
    /// What happened.
    pub action: OpAction,
    /// `collection/rkey`.
    pub path: String,
    /// The new record CID (`None` for a delete).
    pub cid: Option<Cid>,
    /// The previous record CID (for updates and deletes; sync v1.1).
    pub prev: Option<Cid>,
}

/// The body of a `#commit` message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitEvent {
    /// The stream sequence number.
    pub seq: u64,
    /// Deprecated; always false when we write it.
    pub rebase: bool,
    /// The commit was too large to send; `ops` and `blocks` are incomplete.
    pub too_big: bool,
    /// The repository's DID.
    pub repo: String,
    /// The commit's CID.
    pub commit: Cid,
    /// The commit's rev.
    pub rev: String,
    /// The previous commit's rev (`None` for the first commit).
    pub since: Option<String>,
    /// A CAR slice with the blocks the commit added (see the module docs).
    pub blocks: Vec<u8>,
    /// The record operations.
    pub ops: Vec<EventOp>,
    /// The previous commit's MST root (`None` for the first commit).
    pub prev_data: Option<Cid>,
    /// New blobs (always empty here: blobs are not part of this repository).
    pub blobs: Vec<Cid>,
    /// When the event was appended.
    pub time: String,
}

/// A decoded message.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// `#commit`.
    Commit(Box<CommitEvent>),
    /// `#info` (`OutdatedCursor`, ...).
    Info {
        /// The info's name.
        name: String,
        /// Its text, if any.
        message: Option<String>,
    },
    /// An error frame (`op: -1`); the stream ends after it.
    Error {
        /// The error's name (`FutureCursor`, `ConsumerTooSlow`, ...).
        error: String,
        /// Its text, if any.
        message: Option<String>,
    },
    /// A message of another type (`#identity`, `#account`, ...), undecoded.
    Other {
        /// Its header's `t`.
        t: String,
        /// Its body.
        body: Ipld,
    },
}

const COMMIT: &str = "#commit";
const INFO: &str = "#info";

fn text(s: &str) -> Ipld {
    Ipld::String(s.to_owned())
}

fn map(entries: impl IntoIterator<Item = (&'static str, Ipld)>) -> Ipld {
    Ipld::Map(
        entries
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
    )
}

/// Header and body as one message.
fn message(header: Ipld, body: Ipld) -> Result<Vec<u8>, EventError> {
    let enc = |v: &Ipld| encode_dag_cbor(v).map_err(|e| EventError::Encode(e.to_string()));
    let mut out = enc(&header)?;
    out.extend(enc(&body)?);
    if out.len() > MAX_FRAME_SIZE {
        return Err(EventError::Encode(format!(
            "the frame is {} bytes, over the limit of {MAX_FRAME_SIZE}",
            out.len()
        )));
    }
    Ok(out)
}

impl CommitEvent {
    /// The binary websocket message for this event.
    pub fn to_frame(&self) -> Result<Vec<u8>, EventError> {
        let seq = i64::try_from(self.seq)
            .map_err(|_| EventError::Encode(format!("seq {} is over i64", self.seq)))?;
        let ops = self
            .ops
            .iter()
            .map(|op| {
                let mut m = BTreeMap::from([
                    ("action".to_owned(), text(op.action.as_str())),
                    ("path".to_owned(), text(&op.path)),
                    ("cid".to_owned(), op.cid.map_or(Ipld::Null, Ipld::Link)),
                ]);
                if let Some(prev) = op.prev {
                    m.insert("prev".to_owned(), Ipld::Link(prev));
                }
                Ipld::Map(m)
            })
            .collect();
        let mut body = BTreeMap::from([
            ("seq".to_owned(), Ipld::Integer(seq.into())),
            ("rebase".to_owned(), Ipld::Bool(self.rebase)),
            ("tooBig".to_owned(), Ipld::Bool(self.too_big)),
            ("repo".to_owned(), text(&self.repo)),
            ("commit".to_owned(), Ipld::Link(self.commit)),
            ("rev".to_owned(), text(&self.rev)),
            (
                "since".to_owned(),
                self.since.as_deref().map_or(Ipld::Null, text),
            ),
            ("blocks".to_owned(), Ipld::Bytes(self.blocks.clone())),
            ("ops".to_owned(), Ipld::List(ops)),
            (
                "blobs".to_owned(),
                Ipld::List(self.blobs.iter().copied().map(Ipld::Link).collect()),
            ),
            ("time".to_owned(), text(&self.time)),
        ]);
        if let Some(prev_data) = self.prev_data {
            body.insert("prevData".to_owned(), Ipld::Link(prev_data));
        }
        message(
            map([("op", Ipld::Integer(1)), ("t", text(COMMIT))]),
            Ipld::Map(body),
        )
    }
}

/// An error message (`op: -1`), e.g. `FutureCursor`; the server closes the
/// stream after sending it.
pub fn error_frame(name: &str, message_text: &str) -> Vec<u8> {
    let body = map([("error", text(name)), ("message", text(message_text))]);
    // Two small maps of strings: encodable unless the caller passes
    // megabytes of text, which is then cut to keep the frame valid.
    message(map([("op", Ipld::Integer(-1))]), body).unwrap_or_else(|_| {
        let cut = |s: &str| s.chars().take(1000).collect::<String>();
        let body = map([
            ("error", text(&cut(name))),
            ("message", text(&cut(message_text))),
        ]);
        message(map([("op", Ipld::Integer(-1))]), body).unwrap_or_default()
    })
}

/// An `#info` message, e.g. `OutdatedCursor`.
pub fn info_frame(name: &str, message_text: &str) -> Vec<u8> {
    let header = || map([("op", Ipld::Integer(1)), ("t", text(INFO))]);
    let body = map([("name", text(name)), ("message", text(message_text))]);
    message(header(), body).unwrap_or_else(|_| {
        let cut = |s: &str| s.chars().take(1000).collect::<String>();
        let body = map([
            ("name", text(&cut(name))),
            ("message", text(&cut(message_text))),
        ]);
        message(header(), body).unwrap_or_default()
    })
}

/// The `#info` a server sends first when a cursor is older than the
/// retained window (then it replays what is kept).
pub fn outdated_cursor_frame() -> Vec<u8> {
    info_frame(
        "OutdatedCursor",
        "Requested cursor exceeded limit. Possibly missing events",
    )
}

/// Reads an untrusted binary message: exactly one header and one body, both
/// strict DAG-CBOR. `#commit` and `#info` bodies and error frames are
/// checked field by field; other message types are returned undecoded.
/// Unknown extra fields are allowed (lexicons may grow). Never panics.
pub fn decode_frame(bytes: &[u8]) -> Result<Frame, EventError> {
    if bytes.len() > MAX_FRAME_SIZE {
        return Err(EventError::FrameTooLarge {
            size: bytes.len(),
            max: MAX_FRAME_SIZE,
        });
    }
    // The strict decoder accepts exactly one item and names where the
    // bytes after it start: that is where the body begins.
    let split = match decode_dag_cbor(bytes) {
        Ok(_) => return Err(EventError::NoBody),
        Err(DataModelError::TrailingBytes { offset, .. }) => offset,
        Err(e) => return Err(EventError::Header(e)),
    };
    let (head, body) = bytes.split_at(split);
    let header = decode_dag_cbor(head).map_err(EventError::Header)?;
    let body = decode_dag_cbor(body).map_err(EventError::Body)?;
    let bad = |reason: &str| EventError::BadHeader(reason.to_owned());
    let Ipld::Map(header) = header else {
        return Err(bad("not a map"));
    };
    let op = match header.get("op") {
        Some(Ipld::Integer(op)) => *op,
        Some(_) => return Err(bad("`op` is not an integer")),
        None => return Err(bad("no `op`")),
    };
    let Ipld::Map(body) = body else {
        return Err(EventError::BadField {
            kind: "any",
            field: "(body)",
            reason: "the body is not a map".into(),
        });
    };
    match op {
        -1 => {
            let f = Fields::new("error", &body);
            Ok(Frame::Error {
                error: f.string("error")?,
                message: f.opt_string("message")?,
            })
        }
        1 => {
            let t = match header.get("t") {
                Some(Ipld::String(t)) => t.clone(),
                Some(_) => return Err(bad("`t` is not a string")),
                None => return Err(bad("`op` is 1 but there is no `t`")),
            };
            match t.as_str() {
                COMMIT => decode_commit(&body).map(|c| Frame::Commit(Box::new(c))),
                INFO => {
                    let f = Fields::new(INFO, &body);
                    Ok(Frame::Info {
                        name: f.string("name")?,
                        message: f.opt_string("message")?,
                    })
                }
                _ => Ok(Frame::Other {
                    t,
                    body: Ipld::Map(body),
                }),
            }
        }
        other => Err(EventError::BadHeader(format!(
            "`op` is {other}, not 1 or -1"
        ))),
    }
}

fn decode_commit(body: &BTreeMap<String, Ipld>) -> Result<CommitEvent, EventError> {
    let f = Fields::new(COMMIT, body);
    let seq = f.integer("seq")?;
    let seq = u64::try_from(seq).map_err(|_| f.bad("seq", "negative"))?;
    let repo = f.string("repo")?;
    gelstore_lexicon::syntax::check_did(&repo).map_err(|e| f.bad("repo", &e.reason))?;
    let rev = f.string("rev")?;
    gelstore_lexicon::syntax::check_tid(&rev).map_err(|e| f.bad("rev", &e.reason))?;
    let since = f.nullable_string("since")?;
    if let Some(since) = &since {
        gelstore_lexicon::syntax::check_tid(since).map_err(|e| f.bad("since", &e.reason))?;
    }
    let time = f.string("time")?;
    gelstore_lexicon::syntax::check_datetime(&time).map_err(|e| f.bad("time", &e.reason))?;
    let blocks = match f.get("blocks")? {
        Ipld::Bytes(b) => b.clone(),
        _ => return Err(f.bad("blocks", "not bytes")),
    };
    let Ipld::List(raw_ops) = f.get("ops")? else {
        return Err(f.bad("ops", "not a list"));
    };
    let ops = raw_ops
        .iter()
        .enumerate()
        .map(|(index, op)| decode_op(index, op))
        .collect::<Result<Vec<_>, _>>()?;
    let Ipld::List(raw_blobs) = f.get("blobs")? else {
        return Err(f.bad("blobs", "not a list"));
    };
    let blobs = raw_blobs
        .iter()
        .map(|b| match b {
            Ipld::Link(c) => Ok(*c),
            _ => Err(f.bad("blobs", "an item is not a link")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let prev_data = match body.get("prevData") {
        None | Some(Ipld::Null) => None,
        Some(Ipld::Link(c)) => Some(*c),
        Some(_) => return Err(f.bad("prevData", "not a link")),
    };
    // `prev` is deprecated; when present it must still be a link or null.
    if let Some(p) = body.get("prev")
        && !matches!(p, Ipld::Link(_) | Ipld::Null)
    {
        return Err(f.bad("prev", "not a link or null"));
    }
    Ok(CommitEvent {
        seq,
        rebase: f.boolean("rebase")?,
        too_big: f.boolean("tooBig")?,
        repo,
        commit: f.link("commit")?,
        rev,
        since,
        blocks,
        ops,
        prev_data,
        blobs,
        time,
    })
}

fn decode_op(index: usize, op: &Ipld) -> Result<EventOp, EventError> {
    let bad = |reason: &str| EventError::BadOp {
        index,
        reason: reason.to_owned(),
    };
    let Ipld::Map(m) = op else {
        return Err(bad("not a map"));
    };
    let action = match m.get("action") {
        Some(Ipld::String(a)) => match a.as_str() {
            "create" => OpAction::Create,
            "update" => OpAction::Update,
            "delete" => OpAction::Delete,
            _ => return Err(bad("`action` is not create, update or delete")),
        },
        Some(_) => return Err(bad("`action` is not a string")),
        None => return Err(bad("no `action`")),
    };
    let path = match m.get("path") {
        Some(Ipld::String(p)) => p.clone(),
        Some(_) => return Err(bad("`path` is not a string")),
        None => return Err(bad("no `path`")),
    };
    let link = |name: &str, required: bool| match m.get(name) {
        Some(Ipld::Link(c)) => Ok(Some(*c)),
        Some(Ipld::Null) => Ok(None),
        None if !required => Ok(None),
        None => Err(bad(&format!("no `{name}`"))),
        Some(_) => Err(bad(&format!("`{name}` is not a link or null"))),
    };
    let cid = link("cid", true)?;
    let prev = link("prev", false)?;
    match (action, cid) {
        (OpAction::Delete, Some(_)) => return Err(bad("a delete with a `cid`")),
        (OpAction::Create | OpAction::Update, None) => {
            return Err(bad("a create or update without a `cid`"));
        }
        _ => {}
    }
    if action == OpAction::Create && prev.is_some() {
        return Err(bad("a create with a `prev`"));
    }
    Ok(EventOp {
        action,
        path,
        cid,
        prev,
    })
}

/// Typed access to a body's fields, with named errors.
struct Fields<'a> {
    kind: &'static str,
    map: &'a BTreeMap<String, Ipld>,
}

impl<'a> Fields<'a> {
    fn new(kind: &'static str, map: &'a BTreeMap<String, Ipld>) -> Self {
        Fields { kind, map }
    }

    fn bad(&self, field: &'static str, reason: &str) -> EventError {
        EventError::BadField {
            kind: self.kind,
            field,
            reason: reason.to_owned(),
        }
    }

    fn get(&self, field: &'static str) -> Result<&'a Ipld, EventError> {
        self.map
            .get(field)
            .ok_or_else(|| self.bad(field, "missing"))
    }

    fn string(&self, field: &'static str) -> Result<String, EventError> {
        match self.get(field)? {
            Ipld::String(s) => Ok(s.clone()),
            _ => Err(self.bad(field, "not a string")),
        }
    }

    fn opt_string(&self, field: &'static str) -> Result<Option<String>, EventError> {
        match self.map.get(field) {
            None => Ok(None),
            Some(_) => self.string(field).map(Some),
        }
    }

    fn nullable_string(&self, field: &'static str) -> Result<Option<String>, EventError> {
        match self.get(field)? {
            Ipld::Null => Ok(None),
            Ipld::String(s) => Ok(Some(s.clone())),
            _ => Err(self.bad(field, "not a string or null")),
        }
    }

    fn integer(&self, field: &'static str) -> Result<i128, EventError> {
        match self.get(field)? {
            Ipld::Integer(i) => Ok(*i),
            _ => Err(self.bad(field, "not an integer")),
        }
    }

    fn boolean(&self, field: &'static str) -> Result<bool, EventError> {
        match self.get(field)? {
            Ipld::Bool(b) => Ok(*b),
            _ => Err(self.bad(field, "not a boolean")),
        }
    }

    fn link(&self, field: &'static str) -> Result<Cid, EventError> {
        match self.get(field)? {
            Ipld::Link(c) => Ok(*c),
            _ => Err(self.bad(field, "not a link")),
        }
    }
}
