//! The records the chat core reads and writes: `chat.gel.assistant.message`
//! with its content already opened (sealing is `seal`'s job), and the few
//! constructors the reply lifecycle needs (see docs/chat.md).

use crate::lexicon::chat::gel::assistant::defs::{GenerationRequest, PlainContent};
use crate::lexicon::chat::gel::assistant::message::{Message, MessageRole, MessageStatus};
use crate::lexicon_runtime::{AtUri, Datetime, RecordKey};

use super::keys::{Attempt, MessageKey, ReplyKey};

/// One message record of a chat: its record key, the record (whose
/// `content` stays sealed), and the opened `plainContent` (`None` for a
/// pending reply, or when it could not be opened).
#[derive(Clone, Debug, PartialEq)]
pub struct ChatRecord {
    pub key: String,
    pub message: Message,
    pub content: Option<PlainContent>,
}

impl ChatRecord {
    pub fn new(key: impl Into<String>, message: Message, content: Option<PlainContent>) -> Self {
        ChatRecord {
            key: key.into(),
            message,
            content,
        }
    }

    /// The key, parsed (`None` if it is neither a TID nor a reply key).
    pub fn parsed_key(&self) -> Option<MessageKey> {
        MessageKey::parse(&self.key).ok()
    }
}

fn message(chat: AtUri, role: MessageRole, status: MessageStatus, created_at: Datetime) -> Message {
    Message {
        chat,
        role,
        status,
        parent: None,
        request: None,
        model: None,
        usage: None,
        stop_reason: None,
        content: None,
        authenticator: None,
        created_at,
        extra: Default::default(),
    }
}

/// A new reply: `pending`, no content. Create it under its [`ReplyKey`]
/// with create-if-absent, sealed with an authenticator (`ChatStore` does
/// both); fill it once with `FinishedReply::fill`.
pub fn pending_reply(chat: AtUri, created_at: Datetime) -> Message {
    message(
        chat,
        MessageRole::Assistant,
        MessageStatus::Pending,
        created_at,
    )
}

/// A user message (always `complete`), continuing from `parent` (absent
/// on a chat's first message), asking for reply `attempt`. Its sealed
/// `content` is set by the caller.
pub fn user_message(
    chat: AtUri,
    parent: Option<ReplyKey>,
    attempt: Attempt,
    created_at: Datetime,
) -> Message {
    let mut m = message(chat, MessageRole::User, MessageStatus::Complete, created_at);
    m.parent = parent.map(|p| p.record_key());
    m.request = Some(GenerationRequest {
        attempt: (attempt != Attempt::FIRST).then(|| i64::from(attempt.get())),
        model: None,
        tools: None,
        effort: None,
        extra: Default::default(),
    });
    m
}

/// The reply key a user message asks for: its key and `request.attempt`.
pub fn requested_reply(user_key: &str, message: &Message) -> Option<ReplyKey> {
    let MessageKey::User(tid) = MessageKey::parse(user_key).ok()? else {
        return None;
    };
    let attempt = message
        .request
        .as_ref()
        .map_or(0, GenerationRequest::attempt_or_default);
    Some(ReplyKey::new(tid, Attempt::new(attempt).ok()?))
}

/// The `parent` of a message as a reply key, if it is one.
pub fn parent_reply(message: &Message) -> Option<ReplyKey> {
    message
        .parent
        .as_ref()
        .and_then(|p: &RecordKey| ReplyKey::parse(p.as_str()).ok())
}
