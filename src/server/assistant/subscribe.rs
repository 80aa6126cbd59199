//! `chat.gel.assistant.subscribeReply`: one reply's events over a
//! websocket, for the account's own clients (a bearer access token, as for
//! writes: the frames are the chat's plaintext).
//!
//! - A run this server makes or made: its frames after `cursor` (none or
//!   0: all), then live ones until the run ends.
//! - A reply that ended elsewhere or before a restart: the events its
//!   record implies (`chat::replay`), seqs from 1, all of them whatever
//!   the cursor (a live run's seqs mean nothing in a replay; its `message`
//!   events replace what a client showed, so nothing doubles).
//! - A reply still `pending` that no run here has claimed: wait until one
//!   is claimed or the record changes (another device filled it).
//!
//! - A pending reply no host would run (`ChatStore::pending_reply` refuses
//!   it: its authenticator is missing or does not open, or it was finished
//!   before and put back): the socket closes with `ReplyTampered` rather
//!   than wait forever.
//!
//! `ReplyNotFound`, `FutureCursor` and `ReplyTampered` are error frames
//! (the socket then closes), as `subscribeRepos` sends its errors; a server
//! without `--assistant` answers `MethodNotImplemented` before the upgrade.

use std::sync::Arc;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};

use super::Assistant;
use super::log::{RunLog, event_frame};
use crate::chat::ReplyKey;
use crate::chat::replay::replay;
use crate::chat::store::MESSAGE;
use crate::lexicon::chat::gel::assistant::defs::PlainContent;
use crate::lexicon::chat::gel::assistant::message::Message as MessageRecord;
use crate::server::error::XrpcError;
use crate::server::firehose::close_with;
use crate::server::state::AppState;

/// The `GET /xrpc/chat.gel.assistant.subscribeReply` handler.
pub async fn subscribe_reply(
    State(state): State<Arc<AppState>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    match open(&state, query.as_deref(), &headers) {
        Ok((assistant, reply, cursor)) => match ws {
            // A browser client offers this protocol next to its token (see
            // `bearer_protocol`); the handshake must name one it offered.
            Ok(ws) => ws
                .protocols([SUBPROTOCOL])
                .on_upgrade(move |socket| async move {
                    if let Err(e) = stream(state, assistant, socket, reply, cursor).await {
                        tracing::debug!("subscribeReply ended: {e}");
                    }
                }),
            Err(e) => XrpcError::invalid_request(format!(
                "subscribeReply is a websocket subscription: {e}"
            ))
            .into_response(),
        },
        Err(e) => e.into_response(),
    }
}

/// Checks the parameters and the token: `(assistant, reply, cursor)`.
fn open(
    state: &AppState,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Result<(Arc<Assistant>, ReplyKey, u64), XrpcError> {
    let Some(assistant) = state.assistant.clone() else {
        let mut e = XrpcError::not_implemented(SUBPROTOCOL);
        e.message = "this server holds no chat key, so it cannot stream a reply's plaintext; \
                     start it with --assistant to run and stream replies"
            .into();
        return Err(e);
    };
    match bearer_protocol(headers) {
        Some(token) if !headers.contains_key(axum::http::header::AUTHORIZATION) => {
            crate::server::routes::require_access_token(state, token)?
        }
        _ => crate::server::routes::require_access_in(state, headers)?,
    }
    let params = crate::server::xrpc::parse_query(query.unwrap_or(""))?;
    let param = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let reply = param("reply")
        .ok_or_else(|| XrpcError::invalid_request("Params must have the property \"reply\""))?;
    if reply.len() > 512 {
        return Err(XrpcError::invalid_request(
            "reply: longer than 512 characters",
        ));
    }
    let reply =
        ReplyKey::parse(reply).map_err(|e| XrpcError::invalid_request(format!("reply: {e}")))?;
    let cursor = match param("cursor").filter(|c| !c.is_empty()) {
        None => 0,
        Some(c) => c
            .parse::<u64>()
            .map_err(|_| XrpcError::invalid_request("cursor must be a non-negative integer"))?,
    };
    Ok((assistant, reply, cursor))
}

/// The subprotocol a browser offers with its token (the server answers with it).
pub const SUBPROTOCOL: &str = crate::lexicon::chat::gel::assistant::subscribe_reply::NSID;

/// The access token a browser sends as the subprotocol `bearer.<token>`:
/// a browser's `WebSocket` cannot set an `Authorization` header, and a
/// token in the URL would land in logs and history. (The same shape as
/// Kubernetes' `base64url.bearer.authorization.k8s.io.` protocol; a JWT is
/// base64url and dots, which a protocol token may hold.)
fn bearer_protocol(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(axum::http::header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|p| p.trim().strip_prefix("bearer."))
        .filter(|t| !t.is_empty())
}

/// What the record of a reply says, when no run here has it.
enum Stored {
    Missing,
    Pending,
    /// A pending reply no device of the account wrote: why.
    Tampered(String),
    Ended(Vec<Vec<u8>>),
}

async fn stream(
    state: Arc<AppState>,
    assistant: Arc<Assistant>,
    mut socket: WebSocket,
    reply: ReplyKey,
    cursor: u64,
) -> Result<(), axum::Error> {
    let mut commits = state.commits.subscribe();
    let mut claims = assistant.claims();
    let mut stopping = state.stopping.subscribe();
    loop {
        // Subscribe first, then look: no claim or commit slips between.
        commits.borrow_and_update();
        claims.borrow_and_update();
        if let Some(log) = assistant.run_log(&reply.to_string()) {
            return follow(&state, socket, log, cursor).await;
        }
        let stored = state
            .with_core(move |core| {
                let Some(entry) = core.repo().get(MESSAGE, &reply.to_string())? else {
                    return Ok(Stored::Missing);
                };
                let Ok(record) = serde_json::from_value::<MessageRecord>(entry.value) else {
                    return Ok(Stored::Missing);
                };
                if record.status
                    == crate::lexicon::chat::gel::assistant::message::MessageStatus::Pending
                {
                    // What a host asks before it runs one: a reply it
                    // would refuse is never run, so nothing will come.
                    let refused = match core.chats()? {
                        Some(chats) => match chats.pending_reply(&reply) {
                            Err(
                                e @ (crate::chat::ChatStoreError::UnauthenticatedReply { .. }
                                | crate::chat::ChatStoreError::ReplayedReply { .. }),
                            ) => Some(e.to_string()),
                            _ => None,
                        },
                        None => None,
                    };
                    return Ok(refused.map_or(Stored::Pending, Stored::Tampered));
                }
                let content = match core.chats()? {
                    Some(chats) => chats
                        .device()
                        .open_sealed_json(MESSAGE, &reply.to_string())
                        .ok()
                        .and_then(|v| serde_json::from_value::<PlainContent>(v).ok()),
                    None => None,
                };
                let events = replay(&reply, &record, content.as_ref());
                let frames = events
                    .iter()
                    .enumerate()
                    .map(|(i, e)| event_frame(e, i as u64 + 1))
                    .collect();
                Ok(Stored::Ended(frames))
            })
            .await;
        match stored {
            Ok(Stored::Missing) => {
                return close_with(
                    socket,
                    "ReplyNotFound",
                    &format!("no reply has the record key {reply}"),
                )
                .await;
            }
            // A replay has its own, shorter seqs: a cursor from the live
            // run means nothing in it, so all of it is sent (its
            // `message` events replace what the client showed).
            Ok(Stored::Ended(frames)) => {
                for frame in frames {
                    socket.send(Message::Binary(frame.into())).await?;
                }
                return close_normally(socket).await;
            }
            Ok(Stored::Pending) => {}
            Ok(Stored::Tampered(why)) => {
                return close_with(socket, "ReplyTampered", &format!("{reply}: {why}")).await;
            }
            Err(e) => return close_with(socket, "InternalServerError", &e.message).await,
        }
        tokio::select! {
            _ = commits.changed() => {}
            _ = claims.changed() => {}
            _ = stopping.changed() => {
                return close_with(socket, "ServerShuttingDown", "the server is stopping").await;
            }
            incoming = socket.recv() => if closed(&incoming) {
                return Ok(());
            },
        }
    }
}

/// Sends a run's frames after `cursor`, then new ones as they come, until
/// the run ends.
async fn follow(
    state: &AppState,
    mut socket: WebSocket,
    log: Arc<RunLog>,
    mut cursor: u64,
) -> Result<(), axum::Error> {
    let mut changed = log.subscribe();
    let mut stopping = state.stopping.subscribe();
    loop {
        changed.borrow_and_update();
        let Some(read) = log.read_after(cursor) else {
            let last = log.next_seq() - 1;
            return future_cursor(socket, cursor, last).await;
        };
        for frame in read.frames {
            socket.send(Message::Binary(frame.into())).await?;
        }
        cursor = read.last;
        if read.ended {
            return close_normally(socket).await;
        }
        tokio::select! {
            _ = changed.changed() => {}
            _ = stopping.changed() => {
                return close_with(socket, "ServerShuttingDown", "the server is stopping").await;
            }
            incoming = socket.recv() => if closed(&incoming) {
                return Ok(());
            },
        }
    }
}

fn closed(incoming: &Option<Result<Message, axum::Error>>) -> bool {
    matches!(incoming, None | Some(Err(_)) | Some(Ok(Message::Close(_))))
}

async fn future_cursor(socket: WebSocket, cursor: u64, last: u64) -> Result<(), axum::Error> {
    close_with(
        socket,
        "FutureCursor",
        &format!("Cursor {cursor} is past the reply's last event ({last})"),
    )
    .await
}

async fn close_normally(mut socket: WebSocket) -> Result<(), axum::Error> {
    socket
        .send(Message::Close(Some(CloseFrame {
            code: close_code::NORMAL,
            reason: "".into(),
        })))
        .await
}
