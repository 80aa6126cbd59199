//! `com.atproto.sync.subscribeRepos`: the `#commit` event log
//! (`repo::events`) over a websocket.
//!
//! No cursor: live events only (as the reference PDS). A cursor: every
//! retained event after it, then live; a cursor past the last event gets an
//! `error` frame `FutureCursor` and the socket closes; a cursor older than
//! the retained window first gets the `#info` frame `OutdatedCursor`. A
//! reader that falls more than the retention behind gets `ConsumerTooSlow`
//! and is closed. Frames go out exactly as stored (header + body).
//!
//! Reading the log needs no repository lock: the event iterator holds its
//! own store handle, and runs on a blocking thread. A reader that has
//! caught up sleeps until `AppState::committed` bumps the commit counter
//! (it subscribes before reading, so no commit slips between the two).

use std::sync::Arc;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};

use super::error::XrpcError;
use super::state::AppState;
use crate::repo::events::{RepoEvent, error_frame, outdated_cursor_frame};
use crate::repo::repository::RepoError;

/// Events read from the log per blocking call.
const BATCH: usize = 256;

/// The `GET /xrpc/com.atproto.sync.subscribeRepos` handler.
pub async fn subscribe_repos(
    State(state): State<Arc<AppState>>,
    RawQuery(query): RawQuery,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let cursor = match parse_cursor(query.as_deref()) {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    let ws = match ws {
        Ok(ws) => ws,
        Err(e) => {
            return XrpcError::invalid_request(format!(
                "subscribeRepos is a websocket subscription: {e}"
            ))
            .into_response();
        }
    };
    ws.on_upgrade(move |socket| async move {
        if let Err(e) = stream(state, socket, cursor).await {
            tracing::debug!("subscribeRepos ended: {e}");
        }
    })
}

fn parse_cursor(query: Option<&str>) -> Result<Option<u64>, XrpcError> {
    for pair in query.unwrap_or("").split('&') {
        // `@atproto/xrpc-server`'s Subscription sends `cursor=` for an
        // undefined cursor: that is no cursor.
        if let Some(v) = pair.strip_prefix("cursor=")
            && !v.is_empty()
        {
            return v
                .parse::<u64>()
                .map(Some)
                .map_err(|_| XrpcError::invalid_request("cursor must be a non-negative integer"));
        }
    }
    Ok(None)
}

async fn stream(
    state: Arc<AppState>,
    mut socket: WebSocket,
    cursor: Option<u64>,
) -> Result<(), axum::Error> {
    let mut commits = state.commits.subscribe();
    let mut stopping = state.stopping.subscribe();
    commits.borrow_and_update();
    let opened = state
        .with_core(move |core| {
            let repo = core.repo();
            let (start, outdated) = match cursor {
                Some(c) => (Some(c), repo.is_outdated_cursor(c)?),
                // Live only: start after the last event there is now.
                None => (Some(repo.last_event_seq()?.unwrap_or(0)), false),
            };
            match repo.events_since(start) {
                Ok(events) => Ok(Ok((events, outdated))),
                Err(RepoError::FutureCursor { cursor, last }) => Ok(Err(format!(
                    "Cursor {cursor} is in the future: the last event is {last}"
                ))),
                Err(e) => Err(e.into()),
            }
        })
        .await;
    let mut events = match opened {
        Ok(Ok((events, outdated))) => {
            if outdated {
                socket
                    .send(Message::Binary(outdated_cursor_frame().into()))
                    .await?;
            }
            events
        }
        Ok(Err(message)) => return close_with(socket, "FutureCursor", &message).await,
        Err(e) => return close_with(socket, "InternalServerError", &e.message).await,
    };
    loop {
        if *stopping.borrow() {
            return close_with(socket, "ServerShuttingDown", "the server is stopping").await;
        }
        let (back, batch) = match tokio::task::spawn_blocking(move || read_batch(events)).await {
            Ok(r) => r,
            Err(e) => return close_with(socket, "InternalServerError", &e.to_string()).await,
        };
        events = back;
        let caught_up = batch.len() < BATCH;
        for item in batch {
            match item {
                Ok(frame) => socket.send(Message::Binary(frame.into())).await?,
                Err(RepoError::EventsPruned { .. }) => {
                    return close_with(
                        socket,
                        "ConsumerTooSlow",
                        "the reader fell behind the retained events",
                    )
                    .await;
                }
                Err(e) => {
                    tracing::error!("subscribeRepos: {e}");
                    return close_with(socket, "InternalServerError", "Internal Server Error")
                        .await;
                }
            }
        }
        if !caught_up {
            continue;
        }
        tokio::select! {
            changed = commits.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
                commits.borrow_and_update();
            }
            _ = stopping.changed() => {}
            incoming = socket.recv() => match incoming {
                // The client closed or the connection broke.
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return Ok(()),
                // Pings are answered by the websocket layer; anything else
                // from a subscriber is ignored.
                Some(Ok(_)) => {}
            },
        }
    }
}

/// Up to [`BATCH`] frames (or an error, which ends the batch).
fn read_batch<I>(mut events: I) -> (I, Vec<Result<Vec<u8>, RepoError>>)
where
    I: Iterator<Item = Result<RepoEvent, RepoError>>,
{
    let mut out = Vec::new();
    while out.len() < BATCH {
        match events.next() {
            Some(Ok(event)) => out.push(Ok(event.frame)),
            Some(Err(e)) => {
                out.push(Err(e));
                break;
            }
            None => break,
        }
    }
    (events, out)
}

/// Sends an error frame `name` and closes the socket (the XRPC way to end
/// a subscription with an error).
pub async fn close_with(
    mut socket: WebSocket,
    name: &str,
    message: &str,
) -> Result<(), axum::Error> {
    socket
        .send(Message::Binary(error_frame(name, message).into()))
        .await?;
    socket
        .send(Message::Close(Some(CloseFrame {
            code: close_code::POLICY,
            reason: name.into(),
        })))
        .await
}
