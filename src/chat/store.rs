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
    Finished(#[from] super::finished::FinishedError),
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
    finished: super::finished::FinishedReplies,
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
        let mut finished = super::finished::FinishedReplies::load(&dir)?;
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

    /// Creates a chat; returns its record key (a TID).
    pub fn create_chat(&mut self, title: Option<&str>, model: Option<ModelRef>) -> Result<String> {
        let rkey = self.next_tid()?.to_string();
        let record = Chat {
            sealed: None,
            model,
            tools: None,
            effort: None,
            created_at: Self::now()?,
            extra: Default::default(),
        };
        let fields = SealedFields {
            title: title.map(str::to_string),
            system_prompt: None,
            extra: Default::default(),
        };
        self.seal_and_apply(SealedWrite {
            collection: CHAT.into(),
            rkey: rkey.clone(),
            chat: rkey.clone(),
            record: to_json("chat", &record)?,
            content: to_json("chat fields", &fields)?,
            action: SealedAction::Create,
            blobs: Vec::new(),
        })?;
        Ok(rkey)
    }

    fn seal_and_apply(&mut self, write: SealedWrite) -> Result<Cid> {
        self.device.apply_sealed(&[write], &mut os_rng())?;
        self.save_index()?;
        Ok(self.device.repo().head().commit)
    }

    /// The chat record at `chat`.
    pub fn chat(&self, chat: &str) -> Result<Chat> {
        let entry = self
            .device
            .repo()
            .get(CHAT, chat)
            .map_err(|e| match e {
                RepoError::Record(_) => ChatStoreError::NoChat {
                    chat: chat.chars().take(64).collect(),
                },
                e => DeviceError::from(e).into(),
            })?
            .ok_or_else(|| ChatStoreError::NoChat {
                chat: chat.to_string(),
            })?;
        serde_json::from_value(entry.value).map_err(|e| invalid("chat record", e))
    }

    fn message(&self, key: &str) -> Result<(Message, Cid)> {
        let entry = self
            .device
            .repo()
            .get(MESSAGE, key)
            .map_err(|e| match e {
                RepoError::Record(_) => ChatStoreError::NoMessage {
                    key: key.chars().take(64).collect(),
                },
                e => DeviceError::from(e).into(),
            })?
            .ok_or_else(|| ChatStoreError::NoMessage {
                key: key.to_string(),
            })?;
        let m = serde_json::from_value(entry.value).map_err(|e| invalid("message record", e))?;
        Ok((m, entry.cid))
    }

    /// Sends a user message with `text` to `chat`, continuing from `parent`
    /// (absent on a chat's first message) and asking for reply `attempt`.
    /// Returns its key (a TID). A message continuing from a waiting reply
    /// is that reply's answer (see [`ChatStore::approve`]).
    pub fn send(
        &mut self,
        chat: &str,
        text: &str,
        parent: Option<ReplyKey>,
        attempt: Attempt,
    ) -> Result<Tid> {
        let content = PlainContent {
            parts: vec![PlainContentPartsItem::TextPart(TextPart {
                provider_data: None,
                text: text.to_string(),
                extra: Default::default(),
            })],
            error: None,
            extra: Default::default(),
        };
        self.write_user(chat, content, parent, attempt, None, false)
    }

    /// [`ChatStore::send`] with the rest of the generation request (the
    /// model, tools and effort the reply should use; `request.attempt` is
    /// ignored for `attempt`).
    pub fn send_with(
        &mut self,
        chat: &str,
        text: &str,
        parent: Option<ReplyKey>,
        attempt: Attempt,
        request: &GenerationRequest,
    ) -> Result<Tid> {
        let content = PlainContent {
            parts: vec![PlainContentPartsItem::TextPart(TextPart {
                provider_data: None,
                text: text.to_string(),
                extra: Default::default(),
            })],
            error: None,
            extra: Default::default(),
        };
        self.write_user(chat, content, parent, attempt, Some(request), false)
    }

    fn write_user(
        &mut self,
        chat: &str,
        content: PlainContent,
        parent: Option<ReplyKey>,
        attempt: Attempt,
        request: Option<&GenerationRequest>,
        ask: bool,
    ) -> Result<Tid> {
        self.ensure_index()?;
        self.chat(chat)?;
        if let Some(p) = parent {
            let missing = || ChatStoreError::NoParent {
                parent: p.to_string(),
                chat: chat.to_string(),
            };
            let (m, _) = self.message(&p.to_string()).map_err(|e| match e {
                ChatStoreError::NoMessage { .. } => missing(),
                e => e,
            })?;
            if chat_of(&m) != Some(chat) {
                return Err(missing());
            }
        }
        let key = self.next_tid()?;
        let mut record = user_message(self.chat_uri(chat)?, parent, attempt, Self::now()?);
        if let (Some(asked), Some(r)) = (request, record.request.as_mut()) {
            r.model = asked.model.clone();
            r.tools = asked.tools.clone();
            r.effort = asked.effort.clone();
        }
        use crate::lexicon_runtime::Validate;
        record
            .validate()
            .map_err(|e| invalid("message request", e))?;
        content
            .validate()
            .map_err(|e| invalid("message content", e))?;
        let mut writes = vec![SealedWrite {
            collection: MESSAGE.into(),
            rkey: key.to_string(),
            chat: chat.to_string(),
            record: to_json("message", &record)?,
            content: to_json("message content", &content)?,
            action: SealedAction::Create,
            blobs: Vec::new(),
        }];
        // Asked for, the pending reply lands in the same commit.
        if ask {
            let reply = ReplyKey::new(key, attempt);
            let pending = pending_reply(record.chat.clone(), Self::now()?);
            writes.push(pending_write(&reply, chat, &pending)?);
        }
        self.device.apply_sealed(&writes, &mut os_rng())?;
        // A user message continuing from a waiting reply answers it.
        if let Some(p) = parent {
            self.index.remove(&p.to_string());
        }
        self.save_index()?;
        Ok(key)
    }

    /// Creates the `pending` reply `{message}.r{attempt}` (create-if-absent:
    /// a taken key is [`ChatStoreError::ReplyTaken`]). `attempt` defaults
    /// to the one the user message asks for. Returns what
    /// [`ChatStore::finish_reply`] needs.
    pub fn start_reply(&mut self, message: Tid, attempt: Option<Attempt>) -> Result<PendingReply> {
        self.ensure_index()?;
        let (key, user) = self.reply_key_for(message, attempt)?;
        let chat = own_chat(&user, "message")?;
        let record = pending_reply(user.chat.clone(), Self::now()?);
        self.device
            .apply_sealed(&[pending_write(&key, &chat, &record)?], &mut os_rng())
            .map_err(|e| taken(e, &key.to_string()))?;
        let cid = self
            .device
            .repo()
            .get_cid(MESSAGE, &key.to_string())
            .map_err(DeviceError::from)?
            .ok_or_else(|| invalid("reply", "the pending reply is missing after its commit"))?;
        // A newer attempt supersedes a waiting one.
        self.index.supersede(message, key.attempt());
        self.save_index()?;
        Ok(PendingReply {
            key,
            chat,
            record,
            cid,
        })
    }

    /// The reply key a run of user message `message` fills: `attempt`, or
    /// the one the message asks for, else the first.
    fn reply_key_for(&self, message: Tid, attempt: Option<Attempt>) -> Result<(ReplyKey, Message)> {
        let (user, _) = self.message(&message.to_string())?;
        if user.role != MessageRole::User {
            return Err(ChatStoreError::NotAUserMessage {
                key: message.to_string(),
            });
        }
        let attempt = match attempt {
            Some(a) => a,
            None => {
                requested_reply(&message.to_string(), &user).map_or(Attempt::FIRST, |k| k.attempt())
            }
        };
        Ok((ReplyKey::new(message, attempt), user))
    }

    /// The newest attempt of a reply to `message` in the repository.
    fn newest_attempt(&self, message: Tid) -> Result<Option<ReplyKey>> {
        let mut newest: Option<ReplyKey> = None;
        let keys = self
            .device
            .repo()
            .list_prefix(MESSAGE, &format!("{message}.r"))
            .map_err(DeviceError::from)?;
        for entry in keys {
            let (path, _) = entry.map_err(DeviceError::from)?;
            let rkey = path.rsplit('/').next().unwrap_or_default();
            if let Ok(k) = ReplyKey::parse(rkey)
                && k.message() == message
                && newest.is_none_or(|n| k.attempt() > n.attempt())
            {
                newest = Some(k);
            }
        }
        Ok(newest)
    }

    /// The pending reply a run `to` its message fills: written now
    /// ([`ChatStore::start_reply`]) or, for [`ReplyStart::Asked`], the one
    /// already in the repository, which another device (the chat page, a
    /// phone) wrote with the message ([`ChatStore::pending_reply`] checks
    /// it is pending and authentic); without `attempt`, the newest attempt
    /// there. Either way the finish is swapped on
    /// the pending record's CID, so only one run of a key is ever kept.
    pub fn reply_to_fill(&mut self, to: ReplyTo) -> Result<PendingReply> {
        let ReplyTo {
            message,
            attempt,
            start,
        } = to;
        match start {
            ReplyStart::Write => self.start_reply(message, attempt),
            ReplyStart::Asked => {
                self.ensure_index()?;
                let (mut key, _) = self.reply_key_for(message, attempt)?;
                if attempt.is_none() {
                    // A regeneration elsewhere wrote the next attempt
                    // without changing the message: take the newest.
                    if let Some(newest) = self.newest_attempt(message)? {
                        key = newest;
                    }
                }
                self.pending_reply(&key).map_err(|e| match e {
                    ChatStoreError::NoMessage { .. } => ChatStoreError::NotAsked {
                        key: key.to_string(),
                    },
                    e => e,
                })
            }
        }
    }

    /// Writes the finished reply: its blobs stored first (so no record
    /// names a blob the folder lacks), its clear fields into the pending
    /// record, its content sealed, swapped on the pending version's CID. A second
    /// finish (of this or any run of the key) is
    /// [`ChatStoreError::ReplyAlreadyFinished`]. Returns the new CID.
    pub fn finish_reply(
        &mut self,
        pending: &PendingReply,
        finished: &FinishedReply,
    ) -> Result<Cid> {
        self.ensure_index()?;
        if finished.key != pending.key {
            return Err(invalid(
                "finished reply",
                format!("it is for {}, not {}", finished.key, pending.key),
            ));
        }
        let key = pending.key.to_string();
        let blobs = BlobStore::new(&self.dir);
        for blob in &finished.blobs {
            blobs
                .put(&blob.bytes, SEALED_BLOB_MIME)
                .map_err(|source| ChatStoreError::Blob {
                    cid: blob.seal.cid.to_string(),
                    source,
                })?;
        }
        let mut record = pending.record.clone();
        finished.fill(&mut record);
        // The content takes the authenticator's place.
        record.authenticator = None;
        self.device
            .apply_sealed(
                &[SealedWrite {
                    collection: MESSAGE.into(),
                    rkey: key.clone(),
                    chat: pending.chat.clone(),
                    record: to_json("reply", &record)?,
                    content: to_json("reply content", &finished.content)?,
                    action: SealedAction::Update {
                        swap: Some(pending.cid),
                    },
                    blobs: finished.blobs.iter().map(|b| b.seal.clone()).collect(),
                }],
                &mut os_rng(),
            )
            .map_err(|e| match e {
                DeviceError::Repo(r)
                    if matches!(
                        *r,
                        RepoError::SwapMismatch { .. } | RepoError::RecordNotFound { .. }
                    ) =>
                {
                    ChatStoreError::ReplyAlreadyFinished { key: key.clone() }
                }
                e => e.into(),
            })?;
        self.finished.note([key.as_str()])?;
        if finished.status == MessageStatus::Waiting {
            self.index.insert(&key, &pending.chat);
        }
        self.save_index()?;
        self.device
            .repo()
            .get_cid(MESSAGE, &key)
            .map_err(DeviceError::from)?
            .ok_or_else(|| invalid("reply", "missing after its commit"))
    }

    /// Starts the reply and runs a recorded run (JSON lines) through it,
    /// calling `on_event` with each event as it is made, then finishes it.
    pub fn run_reply(
        &mut self,
        message: Tid,
        attempt: Option<Attempt>,
        policy: std::sync::Arc<dyn super::ApprovalPolicy + Send + Sync>,
        lines: impl IntoIterator<Item = std::io::Result<String>>,
        on_event: impl FnMut(&AssistantEvent),
    ) -> Result<(PendingReply, FinishedReply)> {
        let to = ReplyTo {
            message,
            attempt,
            start: ReplyStart::Write,
        };
        self.run_reply_with(to, policy, &BTreeMap::new(), lines, on_event)
    }

    /// [`ChatStore::run_reply`] of the reply `to`, whose message may be an
    /// approval answer
    /// (a user message of `toolApprovalPart`s continuing from a waiting
    /// reply): then the reply starts with the decided calls repeated, each
    /// followed by its result (`Reply::resume`). `tool_runs` holds the
    /// results of the approved calls, by call id (the host ran them);
    /// denied calls get a refused error result. An approved call without
    /// a result is refused before anything is written.
    pub fn run_reply_with(
        &mut self,
        to: ReplyTo,
        policy: std::sync::Arc<dyn super::ApprovalPolicy + Send + Sync>,
        tool_runs: &BTreeMap<String, super::ToolRun>,
        lines: impl IntoIterator<Item = std::io::Result<String>>,
        mut on_event: impl FnMut(&AssistantEvent),
    ) -> Result<(PendingReply, FinishedReply)> {
        let message = to.message;
        let settled = match self.answer_resolution(message)? {
            Some(resolution) => Some(settle_answer(&resolution, tool_runs)?),
            None if !tool_runs.is_empty() => {
                return Err(invalid(
                    "tool results",
                    format!(
                        "{message} is not an approval answer; there is no call to give a result to"
                    ),
                ));
            }
            None => None,
        };
        let pending = self.reply_to_fill(to)?;
        let (mut run, first) = begin_reply(&pending, policy, settled.as_deref())?;
        for e in &first {
            on_event(e);
        }
        let mut events = Vec::new();
        for line in lines {
            match line {
                Ok(line) => run.feed(&line, &mut events),
                Err(e) => {
                    run.cut_by(e);
                }
            }
            for e in events.drain(..) {
                on_event(&e);
            }
            if run.stopped() {
                break;
            }
        }
        let finished = run.end();
        for e in &finished.events {
            on_event(e);
        }
        self.finish_reply(&pending, &finished.reply)?;
        Ok((pending, finished.reply))
    }

    /// The pending reply `key` as [`ChatStore::finish_reply`] needs it
    /// (for a host that runs replies others created). A reply that is not
    /// `pending` any more is [`ChatStoreError::ReplyAlreadyFinished`]; one
    /// whose authenticator is missing or does not open here is
    /// [`ChatStoreError::UnauthenticatedReply`] (a host must not generate
    /// for it).
    pub fn pending_reply(&self, key: &ReplyKey) -> Result<PendingReply> {
        let (record, cid) = self.message(&key.to_string())?;
        if record.role == MessageRole::User || record.status != MessageStatus::Pending {
            return Err(ChatStoreError::ReplyAlreadyFinished {
                key: key.to_string(),
            });
        }
        let chat = own_chat(&record, "reply")?;
        let reason = match self.open_content(&key.to_string(), &record).1 {
            ContentState::Empty => None,
            ContentState::Unauthenticated | ContentState::Missing => {
                Some("it has no authenticator".to_string())
            }
            ContentState::UnknownKey => {
                Some("its authenticator is sealed with a key this device does not hold".into())
            }
            ContentState::Unreadable(r) => Some(format!("its authenticator does not open: {r}")),
            ContentState::Open => Some("it has content".into()),
        };
        if let Some(reason) = reason {
            return Err(ChatStoreError::UnauthenticatedReply {
                key: key.to_string(),
                reason,
            });
        }
        // Authentic, but an old version put back (see `chat::finished`).
        if self.finished.contains(&key.to_string()) {
            return Err(ChatStoreError::ReplayedReply {
                key: key.to_string(),
            });
        }
        Ok(PendingReply {
            key: *key,
            chat,
            record,
            cid,
        })
    }

    /// If user message `message` answers a waiting reply: the answer,
    /// checked against the chat as it was before it (without the
    /// continuations of the waiting reply). `None` for any other message.
    fn answer_resolution(&self, message: Tid) -> Result<Option<Resolution>> {
        let (m, _) = self.message(&message.to_string())?;
        let Some(chat) = chat_of(&m) else {
            return Ok(None);
        };
        if super::record::parent_reply(&m).is_none() {
            return Ok(None);
        }
        let (records, _) = self.chat_records(chat)?;
        resolution_in(&records, message)
    }

    /// What a host needs to run the reply to user message `message`, from
    /// one read of its chat: the branch it continues (from the chat's first
    /// message along `parent` links to `message` itself, opened where this
    /// device can: what a model is given as history) and, for an approval
    /// answer, the checked answer ([`ChatStore::answer_resolution`]).
    pub fn reply_inputs(&self, message: Tid) -> Result<(Vec<ChatRecord>, Option<Resolution>)> {
        let (m, _) = self.message(&message.to_string())?;
        let chat = own_chat(&m, "message")?;
        let (records, _) = self.chat_records(&chat)?;
        let resolution = resolution_in(&records, message)?;
        Ok((branch_in(records, message), resolution))
    }

    /// Follows writes made around this store (a server applying its
    /// clients' writes through [`ChatStore::repo_mut`], a sync): if the
    /// repository moved, the keyring is re-derived, and the approval index
    /// is reloaded (rebuilt if stale) before its next use — not now: a
    /// server refreshes before every read, and most reads never need it.
    pub fn refresh(&mut self) -> Result<()> {
        if self.device.reload_if_moved()? {
            self.index_stale = true;
            self.finished.follow(self.device.repo())?;
        }
        Ok(())
    }

    /// Reloads the approval index if others wrote since it was loaded.
    /// Every path that reads or changes the index calls this first (before
    /// its own commit, so a reload sees the records it missed).
    fn ensure_index(&mut self) -> Result<()> {
        if !self.keeps_index {
            return Ok(());
        }
        if self.index_stale {
            self.load_index()?;
            self.index_stale = false;
        }
        Ok(())
    }

    /// The repository, for writes this store does not make (call
    /// [`ChatStore::refresh`] before the next chat operation).
    pub fn repo_mut(&mut self) -> &mut crate::repo::repository::Repository {
        self.device.repo_mut()
    }

    /// Every message record of `chat`, opened where this device can, with
    /// each one's content state.
    fn chat_records(
        &self,
        chat: &str,
    ) -> Result<(Vec<ChatRecord>, BTreeMap<String, ContentState>)> {
        let mut records = Vec::new();
        let mut states = BTreeMap::new();
        for (key, message, cid) in self.all_messages()? {
            let _ = cid;
            if chat_of(&message) != Some(chat) {
                continue;
            }
            let (content, state) = self.open_content(&key, &message);
            states.insert(key.clone(), state);
            records.push(ChatRecord::new(key, message, content));
        }
        Ok((records, states))
    }

    fn open_content(&self, key: &str, message: &Message) -> (Option<PlainContent>, ContentState) {
        let pending = message.role != MessageRole::User && message.status == MessageStatus::Pending;
        if message.content.is_none() {
            if message.authenticator.is_none() {
                let state = if pending {
                    ContentState::Unauthenticated
                } else {
                    ContentState::Missing
                };
                return (None, state);
            }
            // Only a pending reply goes without content, authenticated.
            if !pending {
                return (None, ContentState::Missing);
            }
            return match self.device.open_sealed(MESSAGE, key) {
                Ok(o) if o.field == crate::seal::AUTHENTICATOR_FIELD => (None, ContentState::Empty),
                Ok(_) => (None, ContentState::Unauthenticated),
                Err(DeviceError::Seal(SealError::UnknownKey { .. })) => {
                    (None, ContentState::UnknownKey)
                }
                Err(e) => (None, ContentState::Unreadable(e.to_string())),
            };
        }
        match self.device.open_sealed_json(MESSAGE, key) {
            Ok(v) => match serde_json::from_value::<PlainContent>(v) {
                Ok(c) => (Some(c), ContentState::Open),
                Err(e) => (None, ContentState::Unreadable(e.to_string())),
            },
            Err(DeviceError::Seal(SealError::UnknownKey { .. })) => {
                (None, ContentState::UnknownKey)
            }
            Err(e) => (None, ContentState::Unreadable(e.to_string())),
        }
    }

    /// The content state of message `key`, as this device sees it.
    pub fn content_state(&self, key: &str) -> Result<ContentState> {
        let (message, _) = self.message(key)?;
        Ok(self.open_content(key, &message).1)
    }

    /// Every message record: `(key, record, cid)`, in key order. Records
    /// that do not decode are skipped.
    fn all_messages(&self) -> Result<Vec<(String, Message, Cid)>> {
        let repo = self.device.repo();
        let mut out = Vec::new();
        for item in repo.list(Some(MESSAGE)).map_err(DeviceError::from)? {
            let (path, cid) = item.map_err(DeviceError::from)?;
            let key = path.rsplit('/').next().unwrap_or_default().to_string();
            let Some(entry) = repo.get(MESSAGE, &key).map_err(DeviceError::from)? else {
                continue;
            };
            if let Ok(m) = serde_json::from_value::<Message>(entry.value) {
                out.push((key, m, cid));
            }
        }
        Ok(out)
    }

    /// The chats: `(record key, record)`, in key (creation) order.
    pub fn chats(&self) -> Result<Vec<(String, Chat)>> {
        let repo = self.device.repo();
        let mut out = Vec::new();
        for item in repo.list(Some(CHAT)).map_err(DeviceError::from)? {
            let (path, _) = item.map_err(DeviceError::from)?;
            let key = path.rsplit('/').next().unwrap_or_default().to_string();
            if let Ok(c) = self.chat(&key) {
                out.push((key, c));
            }
        }
        Ok(out)
    }

    /// The chat (its record key) message `message` belongs to.
    pub fn chat_of_message(&self, message: Tid) -> Result<String> {
        let (m, _) = self.message(&message.to_string())?;
        own_chat(&m, "message")
    }

    /// The chat's sealed fields (title, system prompt), if they open here.
    pub fn chat_fields(&self, chat: &str) -> Option<SealedFields> {
        self.device
            .open_sealed_json(CHAT, chat)
            .ok()
            .and_then(|v| serde_json::from_value::<SealedFields>(v).ok())
    }

    /// The chat's thread, opened.
    pub fn thread(&self, chat: &str) -> Result<ChatThread> {
        let record = self.chat(chat)?;
        let fields = self.chat_fields(chat);
        let (records, states) = self.chat_records(chat)?;
        Ok(ChatThread {
            chat: chat.to_string(),
            record,
            fields,
            thread: Thread::build(records),
            states,
        })
    }

    /// The replies waiting for an approval answer, across all chats, from
    /// the index.
    pub fn approvals(&mut self) -> Result<Vec<WaitingApproval>> {
        if self.keeps_index {
            self.ensure_index()?;
        } else {
            self.load_index()?;
        }
        let mut out = Vec::with_capacity(self.index.entries().len());
        for e in self.index.entries() {
            let (m, _) = self.message(&e.reply)?;
            let (content, state) = self.open_content(&e.reply, &m);
            out.push(WaitingApproval {
                reply: e.reply.clone(),
                chat: e.chat.clone(),
                calls: content.as_ref().map(calls_of).unwrap_or_default(),
                readable: content.is_some(),
                state: state.name().to_owned(),
            });
        }
        Ok(out)
    }

    /// The waiting calls of reply `reply`, opened (`None` if it does not
    /// open here): one reply, without the index.
    pub fn waiting_calls(&self, reply: &str) -> Result<Option<Vec<WaitingCall>>> {
        let (m, _) = self.message(reply)?;
        let (content, _) = self.open_content(reply, &m);
        Ok(content.as_ref().map(calls_of))
    }

    /// Writes the answer to the waiting reply `reply`: a user message
    /// continuing from it whose content holds one `toolApprovalPart` per
    /// waiting call (calls `decisions` does not mention are denied).
    /// Refusals are [`ChatStoreError::Approval`] (`pending_resolved`,
    /// `pending_unknown`, `pending_superseded`, …). Returns the answer's key.
    pub fn approve(&mut self, reply: &str, decisions: &[ToolApprovalPart]) -> Result<Tid> {
        self.answer(reply, decisions, false)
    }

    /// [`ChatStore::approve`], and the pending reply to the answer in the
    /// same commit (for a host that generates it): both or neither.
    pub fn approve_and_ask(
        &mut self,
        reply: &str,
        decisions: &[ToolApprovalPart],
    ) -> Result<(Tid, PendingReply)> {
        let answer = self.answer(reply, decisions, true)?;
        let pending = self.pending_reply(&ReplyKey::first(answer))?;
        Ok((answer, pending))
    }

    fn answer(&mut self, reply: &str, decisions: &[ToolApprovalPart], ask: bool) -> Result<Tid> {
        let key = ReplyKey::parse(reply).map_err(|e| {
            ApprovalError::PendingUnknown(format!("{reply:?} is not a reply key: {e}"))
        })?;
        let (message, _) = self.message(reply).map_err(|e| match e {
            ChatStoreError::NoMessage { .. } => {
                ApprovalError::PendingUnknown(format!("no reply {reply}")).into()
            }
            e => e,
        })?;
        let chat = own_chat(&message, "reply")?;
        let (records, _) = self.chat_records(&chat)?;
        let resolution = check_answer(&records, reply, decisions)?;
        let answer = self.write_user(
            &chat,
            resolution.answer_content(),
            Some(key),
            Attempt::FIRST,
            None,
            ask,
        )?;
        Ok(answer)
    }

    fn load_index(&mut self) -> Result<()> {
        let head = self.device.repo().head().commit.to_string();
        if !self.index.read(&head) {
            self.rebuild_index()?;
            self.save_index()?;
        }
        Ok(())
    }

    /// Rebuilds the approval index from the records: every `waiting` reply
    /// that no newer attempt replaced and no user message continues from.
    pub fn rebuild_index(&mut self) -> Result<()> {
        let messages = self.all_messages()?;
        self.index
            .rebuild(messages.iter().map(|(k, m, _)| (k.as_str(), m)));
        Ok(())
    }

    /// Saves the index with the current head. Called after every commit
    /// this store makes.
    fn save_index(&self) -> Result<()> {
        if !self.keeps_index {
            return Ok(());
        }
        let head = self.device.repo().head().commit.to_string();
        self.index
            .save(&head)
            .map_err(|source| ChatStoreError::Index {
                path: self.index.display_path(),
                source,
            })
    }
}

fn calls_of(content: &PlainContent) -> Vec<WaitingCall> {
    waiting_calls(content)
        .map(|c| WaitingCall {
            call_id: c.call_id.clone(),
            name: c.name.clone(),
            arguments: c.arguments.clone(),
        })
        .collect()
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
fn own_chat(m: &Message, what: &str) -> Result<String> {
    chat_of(m)
        .map(str::to_owned)
        .ok_or_else(|| invalid(what, "its chat is not a chat record of this repository"))
}

fn to_json(what: &str, v: &impl Serialize) -> Result<Value> {
    serde_json::to_value(v).map_err(|e| invalid(what, e))
}

/// The pending reply `record` at `key` as a sealed write: its
/// authenticator (the empty map, sealed) binds its clear fields, so a
/// forged or altered pending reply does not open.
fn pending_write(key: &ReplyKey, chat: &str, record: &Message) -> Result<SealedWrite> {
    let mut value = to_json("reply", record)?;
    // The placeholder tells the seal which field to fill.
    value[crate::seal::AUTHENTICATOR_FIELD] = Value::Object(Default::default());
    Ok(SealedWrite {
        collection: MESSAGE.into(),
        rkey: key.to_string(),
        chat: chat.to_string(),
        record: value,
        content: Value::Object(Default::default()),
        action: SealedAction::Create,
        blobs: Vec::new(),
    })
}

fn taken(e: DeviceError, key: &str) -> ChatStoreError {
    match e {
        DeviceError::Repo(r) if matches!(*r, RepoError::RecordExists { .. }) => {
            ChatStoreError::ReplyTaken {
                key: key.to_string(),
            }
        }
        e => e.into(),
    }
}

/// [`ChatStore::answer_resolution`] over the chat's opened `records`.
fn resolution_in(records: &[ChatRecord], message: Tid) -> Result<Option<Resolution>> {
    let key = message.to_string();
    let Some(answer) = records.iter().find(|r| r.key == key) else {
        return Ok(None);
    };
    let Some(parent) = super::record::parent_reply(&answer.message) else {
        return Ok(None);
    };
    let parent_key = parent.to_string();
    let is_waiting = records
        .iter()
        .any(|r| r.key == parent_key && r.message.status == MessageStatus::Waiting);
    let decisions: Vec<ToolApprovalPart> = answer
        .content
        .iter()
        .flat_map(|c| &c.parts)
        .filter_map(|p| match p {
            PlainContentPartsItem::ToolApprovalPart(a) => Some(a.clone()),
            _ => None,
        })
        .collect();
    if !is_waiting || decisions.is_empty() {
        return Ok(None);
    }
    // The answer as it was made: the chat without the continuations of
    // the waiting reply (this answer among them).
    let before: Vec<ChatRecord> = records
        .iter()
        .filter(|r| {
            !(r.message.role == MessageRole::User
                && r.message.parent.as_ref().map(|p| p.as_str()) == Some(parent_key.as_str()))
        })
        .cloned()
        .collect();
    Ok(Some(check_answer(&before, &parent_key, &decisions)?))
}

/// The branch of [`ChatStore::reply_inputs`] over the chat's opened `records`.
fn branch_in(records: Vec<ChatRecord>, message: Tid) -> Vec<ChatRecord> {
    let mut by_key: BTreeMap<String, ChatRecord> =
        records.into_iter().map(|r| (r.key.clone(), r)).collect();
    let mut out = Vec::new();
    let mut next = Some(message.to_string());
    // Each step moves to an older TID (a parent reply belongs to an
    // earlier message), and a record is taken out once: no cycles.
    while let Some(key) = next.take() {
        let Some(user) = by_key.remove(&key) else {
            break;
        };
        if let Some(parent) = super::record::parent_reply(&user.message)
            && let Some(reply) = by_key.remove(&parent.to_string())
        {
            next = Some(parent.message().to_string());
            out.push(user);
            out.push(reply);
            continue;
        }
        out.push(user);
    }
    out.reverse();
    out
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
