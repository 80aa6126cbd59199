//! Chats kept in a data folder (see docs/chat.md): the chat core joined to a
//! [`Device`] (sealing, keys) and its [`Repository`](crate::repo::repository::Repository).
//!
//! Unlike the rest of `chat`, this module does I/O: it is the one place
//! where the pure reply lifecycle meets storage and sealing.
//!
//! - [`ChatStore::create_chat`]: a `chat.gel.assistant.chat` record (TID
//!   key), title sealed, default model in the clear.
//! - [`ChatStore::send`]: a user message (TID key), text sealed,
//!   `request.attempt` set, `parent` the reply it continues from.
//! - [`ChatStore::start_reply`]: the `pending` reply at `{key}.r{attempt}`,
//!   created if absent; a taken key is [`ChatStoreError::ReplyTaken`].
//! - [`ChatStore::finish_reply`]: the finished reply's content sealed and
//!   written with a swap on the pending version's CID, so exactly once (a
//!   second finish is [`ChatStoreError::ReplyAlreadyFinished`]).
//! - [`ChatStore::thread`]: a chat's messages opened, as the
//!   [`Thread`] tree, with a [`ContentState`] per record
//!   (`UnknownKey` for content this device has no key for).
//! - Approvals: [`ChatStore::approvals`] lists waiting replies across all
//!   chats from the approval index ([`super::approval_index`], kept current
//!   at every commit this store makes); [`ChatStore::approve`] writes the
//!   answer.
//!
//! The run of a reply itself (lines in, events out) is [`super::run`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::AssistantEvent;
use super::approval::{ApprovalError, Resolution, check_answer, waiting_calls};
use super::keys::{Attempt, KeyError, ReplyKey};
use super::record::{ChatRecord, pending_reply, requested_reply, user_message};
use super::reply::FinishedReply;
use super::run::{begin_reply, settle_answer};
use super::thread::Thread;
use crate::device::{Device, DeviceError, SealedAction, SealedWrite};
use crate::lexicon::chat::gel::assistant::chat::{Chat, SealedFields};
use crate::lexicon::chat::gel::assistant::defs::{
    GenerationRequest, ModelRef, PlainContent, PlainContentPartsItem, TextPart, ToolApprovalPart,
};
use crate::lexicon::chat::gel::assistant::message::{Message, MessageRole, MessageStatus};
use crate::lexicon_runtime::{AtUri, Datetime};
use crate::model::Cid;
use crate::model::now_datetime;
use crate::repo::blobs::BlobStore;
use crate::repo::repository::RepoError;
use crate::repo::tid::{Tid, TidClock};
use crate::seal::SEALED_BLOB_MIME;
use crate::seal::{SealError, os_rng};

/// The chat collection.
pub const CHAT: &str = crate::lexicon::chat::gel::assistant::chat::NSID;
/// The message collection.
pub const MESSAGE: &str = crate::lexicon::chat::gel::assistant::message::NSID;
pub use super::approval_index::APPROVAL_INDEX;
use super::approval_index::ApprovalIndex;

mod approvals;
mod read;
mod replies;
mod write;

/// Why a chat operation failed. Nothing was written when one is returned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChatStoreError {
    /// The device (keys, repository) failed or is not set up.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// The reply key already holds a reply: this attempt was started
    /// (perhaps by another device or thread). Never overwritten.
    #[error("reply {key} already exists: that attempt was started already (use the next attempt)")]
    ReplyTaken { key: String },
    /// The reply is no longer the pending version this run created: it was
    /// finished already.
    #[error("reply {key} was already finished; a reply is filled exactly once")]
    ReplyAlreadyFinished { key: String },
    /// A run of a reply asked for elsewhere, but no such reply exists.
    #[error(
        "no pending reply {key}: nothing asked for it (drop --asked to write it here, or sync first)"
    )]
    NotAsked { key: String },
    /// A pending reply whose authenticator is missing or does not open
    /// here: nothing shows a device of the account wrote it (forged, or an
    /// old version put back), so nothing is generated for it.
    #[error("reply {key} is not an authenticated pending reply ({reason}); not generated")]
    UnauthenticatedReply { key: String, reason: String },
    /// No chat with this id.
    #[error("no chat {chat}")]
    NoChat { chat: String },
    /// No message with this key.
    #[error("no message {key}")]
    NoMessage { key: String },
    /// The message is not a user message (a reply answers a user message).
    #[error("message {key} is not a user message")]
    NotAUserMessage { key: String },
    /// The parent reply is not in the chat.
    #[error("no reply {parent} in chat {chat}")]
    NoParent { parent: String, chat: String },
    /// A key or attempt is malformed.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// An approval answer was refused.
    #[error("{}: {}", .0.code().as_str(), .0)]
    Approval(#[from] ApprovalError),
    /// A record or value this module built or read is not valid.
    #[error("invalid {what}: {reason}")]
    Invalid { what: String, reason: String },
    /// The approval index file failed.
    #[error("approval index {path}: {source}")]
    Index {
        path: String,
        source: std::io::Error,
    },
    /// The log of finished replies failed.
    #[error(transparent)]
    Finished(#[from] crate::chat::finished::FinishedError),
    /// A pending reply at a key this folder has seen finished: an old
    /// version put back (see `chat::finished`).
    #[error(
        "reply {key} was finished before and is pending again (an old version put back); not generated again"
    )]
    ReplayedReply { key: String },
    /// A blob of this folder could not be written or read.
    #[error("blob {cid}: {source}")]
    Blob { cid: String, source: std::io::Error },
    /// A record names a blob this folder does not hold.
    #[error(
        "blob {cid} is not in this data folder (`gelstore sync` fetches the blobs of the records it pulls)"
    )]
    BlobMissing { cid: String },
    /// A reply has no result for the call asked for.
    #[error("reply {reply} has no result for call {call_id:?}")]
    NoToolResult { reply: String, call_id: String },
}

type Result<T, E = ChatStoreError> = std::result::Result<T, E>;

pub(super) fn invalid(what: &str, reason: impl std::fmt::Display) -> ChatStoreError {
    ChatStoreError::Invalid {
        what: what.to_string(),
        reason: reason.to_string(),
    }
}

/// A reply created `pending` by [`ChatStore::start_reply`]: where it is
/// and the CID its finish swaps on.
#[derive(Clone, Debug, PartialEq)]
pub struct PendingReply {
    pub key: ReplyKey,
    /// The chat's record key.
    pub chat: String,
    /// The pending record.
    pub record: Message,
    /// The pending version's CID.
    pub cid: Cid,
}

/// Which pending reply a run fills (see [`ChatStore::reply_to_fill`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyStart {
    /// Write the pending reply now (create-if-absent).
    Write,
    /// Fill the pending reply another device wrote with the message.
    Asked,
}

/// The reply a run fills: to user message `message`, attempt `attempt`
/// (default: the one the message asks for), started as `start` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyTo {
    pub message: Tid,
    pub attempt: Option<Attempt>,
    pub start: ReplyStart,
}

/// What a message's content is, as this device sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "state", content = "reason")]
pub enum ContentState {
    /// Opened.
    Open,
    /// No content yet: a pending reply whose authenticator opened, so its
    /// clear fields are the ones a device of the account wrote.
    Empty,
    /// No content where there must be some: a user message, or a reply
    /// that is not pending any more. Someone removed it (nothing
    /// authenticates the clear fields left): shown as tampered.
    Missing,
    /// A pending reply without an authenticator: nothing shows a device
    /// of the account wrote it (forged by whoever can write the PDS, or
    /// a finished reply with its content cut off): shown as tampered.
    Unauthenticated,
    /// Sealed with a key this device does not hold.
    UnknownKey,
    /// Sealed, and it did not open (forged, damaged, invalid plaintext).
    Unreadable(String),
}

impl ContentState {
    /// The state's name, as `chat show --format json` and `getThread` give it.
    pub fn name(&self) -> &'static str {
        match self {
            ContentState::Open => "open",
            ContentState::Empty => "empty",
            ContentState::Missing => "missing",
            ContentState::Unauthenticated => "unauthenticated",
            ContentState::UnknownKey => "unknownKey",
            ContentState::Unreadable(_) => "unreadable",
        }
    }

    /// What a reader without any key can tell from the record's shape
    /// alone: a message with neither content nor an authenticator is
    /// tampered (`Missing`, or `Unauthenticated` for a pending reply).
    /// `None` when only opening it can tell.
    pub fn from_shape(record: &Value) -> Option<ContentState> {
        let has = |f: &str| record.get(f).is_some();
        let pending = record.get("status").and_then(Value::as_str) == Some("pending")
            && record.get("role").and_then(Value::as_str) != Some("user");
        match (
            has("content"),
            has(crate::seal::AUTHENTICATOR_FIELD),
            pending,
        ) {
            (true, _, _) => None,
            // Only a pending reply goes without content, authenticated.
            (false, true, true) => None,
            (false, true, false) => Some(ContentState::Missing),
            (false, false, true) => Some(ContentState::Unauthenticated),
            (false, false, false) => Some(ContentState::Missing),
        }
    }
}

/// A chat's thread, opened.
#[derive(Clone, Debug)]
pub struct ChatThread {
    /// The chat's record key.
    pub chat: String,
    /// The chat record.
    pub record: Chat,
    /// Its sealed fields, if they opened.
    pub fields: Option<SealedFields>,
    /// The tree.
    pub thread: Thread,
    /// The content state of each message, by key.
    pub states: BTreeMap<String, ContentState>,
}

/// One waiting call of a waiting reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitingCall {
    pub call_id: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

/// A reply waiting for an approval answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitingApproval {
    /// The waiting reply's key.
    pub reply: String,
    /// The chat's record key.
    pub chat: String,
    /// Its waiting calls (empty if this device cannot open the reply).
    pub calls: Vec<WaitingCall>,
    /// Whether this device could open the reply.
    pub readable: bool,
    /// What opening it found (`open`, `unknownKey`, or a tampered state:
    /// `missing`, `unreadable`), as `getThread` names it.
    pub state: String,
}

/// Chats in one data folder: the device (keys and repository) and the
/// approval index.
pub struct ChatStore {
    dir: PathBuf,
    device: Device,
    clock: TidClock,
    index: ApprovalIndex,
    /// Others wrote since the index was loaded ([`ChatStore::refresh`]):
    /// reload it before the next use.
    index_stale: bool,
    /// Whether this store keeps `chat-approvals.json` current (see
    /// [`ChatStore::open_without_index`]).
    keeps_index: bool,
    /// Every reply key seen finished, so none is generated twice.
    finished: crate::chat::finished::FinishedReplies,
}

impl std::fmt::Debug for ChatStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatStore")
            .field("dir", &self.dir)
            .field("waiting", &self.index.entries().len())
            .finish_non_exhaustive()
    }
}

impl ChatStore {
    /// Opens the data folder's device (`gelstore device init` first) and
    /// the approval index (rebuilt from the records if missing or stale).
    pub fn open(dir: impl AsRef<Path>) -> Result<ChatStore> {
        let mut store = ChatStore::open_without_index(dir)?;
        store.keeps_index = true;
        store.load_index()?;
        Ok(store)
    }

    /// Opens the device without keeping the approval index: for a host
    /// that others write around all the time (the server, which keeps its
    /// own index of clear fields), where keeping it current would rebuild
    /// it at every reply. The file is left as it is; a store opened with
    /// [`ChatStore::open`] later finds it behind the head and rebuilds it.
    /// [`ChatStore::approvals`] still works (it reads the index afresh).
    pub fn open_without_index(dir: impl AsRef<Path>) -> Result<ChatStore> {
        let dir = dir.as_ref().to_path_buf();
        let device = Device::open(&dir)?;
        let mut finished = crate::chat::finished::FinishedReplies::load(&dir)?;
        finished.follow(device.repo())?;
        Ok(ChatStore {
            index: ApprovalIndex::new(&dir),
            dir,
            device,
            clock: TidClock::new(),
            index_stale: false,
            keeps_index: false,
            finished,
        })
    }

    /// The device, for writes outside the chats (the settings record).
    pub(crate) fn device_mut(&mut self) -> &mut Device {
        &mut self.device
    }

    /// The data folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Whether opening rebuilt the approval index from the records.
    pub fn index_rebuilt(&self) -> bool {
        self.index.rebuilt()
    }

    fn did(&self) -> &str {
        self.device.account_did()
    }

    fn chat_uri(&self, chat: &str) -> Result<AtUri> {
        AtUri::new(format!("at://{}/{CHAT}/{chat}", self.did())).map_err(|e| invalid("chat", e))
    }

    fn now() -> Result<Datetime> {
        Datetime::new(now_datetime()).map_err(|e| invalid("createdAt", e))
    }

    fn next_tid(&mut self) -> Result<Tid> {
        self.clock
            .next_tid()
            .map_err(|e| ChatStoreError::Device(DeviceError::from(RepoError::from(e))))
    }
}

/// The chat record key a message belongs to, if its `chat` is a chat
/// record URI (`at://did/chat.gel.assistant.chat/KEY`).
pub(super) fn chat_of(m: &Message) -> Option<&str> {
    let rest = m.chat.as_str().strip_prefix("at://")?;
    let mut it = rest.splitn(3, '/');
    let _did = it.next()?;
    (it.next()? == CHAT).then_some(())?;
    it.next()
}

/// The record key of `m`'s chat, which must be a chat record of this
/// repository (`what` names `m` in the error).
pub(super) fn own_chat(m: &Message, what: &str) -> Result<String> {
    chat_of(m)
        .map(str::to_owned)
        .ok_or_else(|| invalid(what, "its chat is not a chat record of this repository"))
}

#[cfg(test)]
mod tests {
    use super::ContentState;
    use serde_json::json;

    /// What a keyless reader tells from a message's shape agrees with
    /// `open_content`: only a pending reply may go with an authenticator
    /// and no content.
    #[test]
    fn shapes_a_keyless_reader_can_tell() {
        let shape = |role: &str, status: &str, fields: &[&str]| {
            let mut v = json!({"role": role, "status": status});
            for f in fields {
                v[*f] = json!({});
            }
            ContentState::from_shape(&v)
        };
        assert_eq!(shape("assistant", "complete", &["content"]), None);
        assert_eq!(shape("assistant", "pending", &["authenticator"]), None);
        assert_eq!(
            shape("assistant", "complete", &["authenticator"]),
            Some(ContentState::Missing)
        );
        assert_eq!(
            shape("assistant", "pending", &[]),
            Some(ContentState::Unauthenticated)
        );
        assert_eq!(shape("user", "complete", &[]), Some(ContentState::Missing));
    }
}
