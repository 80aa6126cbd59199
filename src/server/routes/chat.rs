//! The `chat.gel.assistant.*` queries and procedures (`subscribeReply` is
//! a websocket: `server::assistant::subscribe`).
//!
//! What a keyless server sees: record keys, `chat`, `role`, `status`,
//! `parent`, `createdAt` and the other clear fields; never anything sealed
//! (message content, tool calls, approvals' words, chat titles). With
//! `--assistant` the folder holds a device of the account and the server
//! opens what it needs.
//!
//! - `getThread`: the chat record and its message records as stored
//!   (sealed fields stay sealed), in record-key order, paged. Each message
//!   says what the server can tell of it (`state`): keyless, only that a
//!   message with neither content nor an authenticator is tampered
//!   (`missing`, `unauthenticated`); with `--assistant`, whether its
//!   content or authenticator opens (`open`, `empty`, `unreadable`, …).
//! - `listApprovals`: the replies with status `waiting` that are the newest
//!   attempt and not answered yet (no user message continues from them),
//!   newest first. Their `calls` are sealed inside the reply's content:
//!   listed with `--assistant` (then the call needs the access token),
//!   empty on a keyless server (a client opens the reply to show them).
//!   A waiting reply without sealed content, or (with `--assistant`) whose
//!   content does not open, is a forged request and is never listed.
//! - `answerApproval`: the checks that clear metadata allows (the reply
//!   exists, is waiting, is the newest attempt, is not answered:
//!   `PendingUnknown`, `PendingSuperseded`, `PendingResolved`). With
//!   `--assistant` the answer is written (a sealed user message of
//!   `toolApprovalPart`s, unmentioned calls denied) with a pending reply
//!   to it, which the assistant then runs; a keyless server refuses, since
//!   only a holder of the chat key can write the answer.
//!
//! The clear fields they need come from `server::chat_index` (kept
//! current from the event log): a thread page is O(log n + page), the
//! approval list O(waiting replies).

use std::sync::Arc;

use axum::Json;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::server::require_access;
use crate::chat::keys::ReplyKey;
use crate::chat::store::ContentState;
use crate::chat::{ChatStore, ChatStoreError};
use crate::lexicon::chat::gel::assistant::answer_approval::{
    AnswerApprovalError, AnswerApprovalInput, AnswerApprovalOutput,
};
use crate::lexicon::chat::gel::assistant::defs::ToolApprovalPart;
use crate::lexicon::chat::gel::assistant::get_thread::{GetThreadError, GetThreadParams};
use crate::lexicon::chat::gel::assistant::list_approvals::{
    ListApprovalsOutput, ListApprovalsParams, WaitingCall, WaitingReply,
};
use crate::lexicon_runtime::{AtUri, CidString, Datetime, RecordKey, SyntaxError};
use crate::server::chat_index::MessageMeta;
use crate::server::error::XrpcError;
use crate::server::state::AppState;
use crate::server::xrpc::Request;

use crate::chat::store::{CHAT, MESSAGE};

/// The one answer not built as its generated Output (`GetThreadOutput`):
/// the records go out as stored, where typing each as `Data` would
/// re-encode every message of the page.
pub async fn get_thread(state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
    let params: GetThreadParams = req.params()?;
    let limit = params.limit_or_default() as usize;
    let (chat, cursor) = (params.chat.into_string(), params.cursor);
    let did = state.did.clone();
    let out = state
        .with_core(move |core| {
            let Some(record) = core.repo().get(CHAT, &chat)? else {
                return Err(XrpcError::named(
                    GetThreadError::ChatNotFound.as_str(),
                    format!("no chat has the record key {chat}"),
                ));
            };
            let chat_uri = format!("at://{did}/{CHAT}/{chat}");
            let (index, repo) = core.chat_index()?;
            let mut keys = index.thread(&chat_uri, cursor.as_deref());
            let page_keys: Vec<String> = keys.by_ref().take(limit).cloned().collect();
            let next = (keys.next().is_some())
                .then(|| page_keys.last().cloned())
                .flatten();
            let mut page = Vec::with_capacity(page_keys.len());
            for rkey in &page_keys {
                if let Some(m) = repo.get(MESSAGE, rkey)? {
                    // Keyless, the shape alone can show a tampered message.
                    let state = ContentState::from_shape(&m.value);
                    page.push((
                        rkey,
                        state,
                        json!({
                            "uri": format!("at://{did}/{MESSAGE}/{rkey}"),
                            "cid": m.cid.to_string(),
                            "value": m.value,
                        }),
                    ));
                }
            }
            drop(keys);
            let chats = core.chats()?;
            let page: Vec<Value> = page
                .into_iter()
                .map(|(rkey, shape, mut item)| {
                    let state = match (&chats, shape) {
                        (_, Some(s)) => Some(s),
                        (Some(c), None) => c.content_state(rkey).ok(),
                        (None, None) => None,
                    };
                    if let Some(s) = state {
                        item["state"] = s.name().into();
                        if let ContentState::Unreadable(r) = s {
                            item["reason"] = crate::chat::approval::truncate_words(&r, 1000).into();
                        }
                    }
                    item
                })
                .collect();
            let mut out = json!({
                "chat": {"uri": chat_uri, "cid": record.cid.to_string(), "value": record.value},
                "messages": page,
            });
            if let Some(c) = next {
                out["cursor"] = c.into();
            }
            Ok(out)
        })
        .await?;
    Ok(Json(out).into_response())
}

pub async fn list_approvals(state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
    // With the assistant the calls are opened from sealed content: the
    // account's own clients only. (Keyless, the list is clear metadata any
    // listRecords shows.)
    if state.assistant.is_some() {
        require_access(state, &req)?;
    }
    let params: ListApprovalsParams = req.params()?;
    let limit = params.limit_or_default() as usize;
    let chat = params.chat.map(|c| c.into_string());
    let cursor = params.cursor;
    let did = state.did.clone();
    let out = state
        .with_core(move |core| {
            let chat_uri = chat.map(|c| format!("at://{did}/{CHAT}/{c}"));
            let (index, _) = core.chat_index()?;
            let mut waiting = index
                .waiting(cursor.as_deref())
                .filter(|(_, m)| m.sealed)
                .filter(|(_, m)| chat_uri.as_deref().is_none_or(|c| m.chat == c));
            let mut page: Vec<(String, WaitingReply)> = Vec::with_capacity(limit);
            for (rkey, m) in waiting.by_ref().take(limit) {
                page.push((rkey.clone(), waiting_reply(&did, rkey, m)?));
            }
            // The page's last key, even if opening drops that reply below.
            let next_cursor = (waiting.next().is_some())
                .then(|| page.last().map(|(k, _)| k.clone()))
                .flatten();
            drop(waiting);
            if let Some(chats) = core.chats()? {
                // Only this page's replies are opened; one that does not
                // open is dropped from the page.
                let mut opened = Vec::with_capacity(page.len());
                for (rkey, mut reply) in page {
                    if let Some(calls) = chats.waiting_calls(&rkey).map_err(XrpcError::internal)? {
                        reply.calls = calls
                            .into_iter()
                            .map(|c| WaitingCall {
                                call_id: c.call_id,
                                tool: c.name,
                                extra: Default::default(),
                            })
                            .collect();
                        opened.push((rkey, reply));
                    }
                }
                page = opened;
            }
            Ok(ListApprovalsOutput {
                replies: page.into_iter().map(|(_, r)| r).collect(),
                cursor: next_cursor,
                extra: Default::default(),
            })
        })
        .await?;
    Ok(Json(out).into_response())
}

/// A waiting reply as listed, its calls still empty (they are sealed).
fn waiting_reply(did: &str, rkey: &str, m: &MessageMeta) -> Result<WaitingReply, XrpcError> {
    let stored = |field: &str, e: SyntaxError| {
        XrpcError::internal(format!("the stored {field} of {rkey} is not valid: {e}"))
    };
    Ok(WaitingReply {
        uri: AtUri::new(format!("at://{did}/{MESSAGE}/{rkey}")).map_err(|e| stored("uri", e))?,
        cid: CidString::new(m.cid.clone()).map_err(|e| stored("cid", e))?,
        chat: AtUri::new(m.chat.clone()).map_err(|e| stored("chat", e))?,
        calls: Vec::new(),
        created_at: Datetime::new(m.created_at.clone()).map_err(|e| stored("createdAt", e))?,
        extra: Default::default(),
    })
}

/// Writes the answer and the pending reply to it (`--assistant`).
fn write_answer(
    chats: &mut ChatStore,
    did: &str,
    reply: &str,
    decisions: &[ToolApprovalPart],
) -> Result<AnswerApprovalOutput, XrpcError> {
    // One commit: the answer and the pending reply to it, or neither.
    let (answer, pending) = chats
        .approve_and_ask(reply, decisions)
        .map_err(|e| match e {
            ChatStoreError::Approval(a) => XrpcError::named(a.xrpc_error().as_str(), a.to_string()),
            e => XrpcError::internal(e),
        })?;
    let cid = chats
        .device()
        .repo()
        .get_cid(MESSAGE, &answer.to_string())?
        .ok_or_else(|| XrpcError::internal("the answer is missing after its commit"))?;
    let made = |e: SyntaxError| XrpcError::internal(format!("the answer's own reference: {e}"));
    Ok(AnswerApprovalOutput {
        uri: AtUri::new(format!("at://{did}/{MESSAGE}/{answer}")).map_err(made)?,
        cid: CidString::new(cid.to_string()).map_err(made)?,
        reply: RecordKey::new(pending.key.to_string()).map_err(made)?,
        extra: Default::default(),
    })
}

pub async fn answer_approval(state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
    require_access(state, &req)?;
    let input: AnswerApprovalInput = req.valid_input()?;
    let (reply, decisions) = (input.reply.into_string(), input.decisions);
    let did = state.did.clone();
    state
        .with_core(move |core| {
            if let Some(chats) = core.chats()? {
                return Ok(Json(write_answer(chats, &did, &reply, &decisions)?).into_response());
            }
            let (index, _) = core.chat_index()?;
            let (Some(m), Ok(key)) = (index.get(&reply), ReplyKey::parse(&reply)) else {
                return Err(XrpcError::named(
                    AnswerApprovalError::PendingUnknown.as_str(),
                    format!("no reply has the record key {reply}"),
                ));
            };
            if m.role == "user" {
                return Err(XrpcError::named(
                    AnswerApprovalError::PendingUnknown.as_str(),
                    format!("{reply} is not a reply"),
                ));
            }
            if index.is_superseded(&key) {
                return Err(XrpcError::named(
                    AnswerApprovalError::PendingSuperseded.as_str(),
                    format!("a newer attempt replaced the reply {reply}"),
                ));
            }
            if index.is_answered(&reply) {
                return Err(XrpcError::named(
                    AnswerApprovalError::PendingResolved.as_str(),
                    format!("the reply {reply} was already answered"),
                ));
            }
            if m.status != "waiting" {
                return Err(XrpcError::named(
                    AnswerApprovalError::PendingUnknown.as_str(),
                    format!("the reply {reply} is not waiting for approval"),
                ));
            }
            Err(XrpcError::invalid_request(
                "this server stores sealed chats and cannot write the answer: it is a sealed \
                 message only a holder of the chat key can write (createRecord or applyWrites \
                 from the app)",
            ))
        })
        .await
}
