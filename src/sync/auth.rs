//! The session's tokens and their renewal, at the HTTP layer: every request
//! the session sends goes through [`Auth::send`], which, when the PDS says
//! the access token expired, refreshes the session once
//! (`com.atproto.server.refreshSession` with the refresh token; the PDS
//! returns a new pair) and sends the same request again with the new access
//! token. So every XRPC call, present or future, is covered without being
//! wrapped one by one.
//!
//! Only a request the PDS refused for its token is repeated: the PDS checks
//! the token before doing anything, so a write is never applied twice.

use std::sync::RwLock;

use atrium_api::com::atproto::server::refresh_session;
use atrium_api::xrpc::http::header::AUTHORIZATION;
use atrium_api::xrpc::http::{HeaderValue, Request, Response};
use serde_json::Value;

/// What the HTTP layer's errors are boxed as (atrium's `HttpClient`).
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The session's two JWTs (createSession / refreshSession give both).
#[derive(Clone)]
pub(crate) struct Tokens {
    pub access: String,
    pub refresh: String,
    /// The account the tokens are for; a refresh must not change it.
    pub did: String,
}

/// refreshSession refused to renew the session (the refresh token expired
/// or was revoked). Travels through atrium's boxed HTTP error and becomes
/// `SyncError::SessionExpired`.
#[derive(Debug)]
pub(crate) struct RefreshRefused {
    /// The answer that made the refresh necessary.
    pub cause: String,
    /// refreshSession's answer.
    pub answer: String,
}

impl std::fmt::Display for RefreshRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the session expired ({}) and refreshSession refused: {}",
            self.cause, self.answer
        )
    }
}

impl std::error::Error for RefreshRefused {}

/// Whether an answer says the access token expired: the reference PDS
/// answers 400 `ExpiredToken`, other servers 401.
pub(crate) fn is_expired(status: u16, body: &[u8]) -> bool {
    status == 401
        || (status == 400
            && serde_json::from_slice::<Value>(body)
                .is_ok_and(|v| v["error"].as_str() == Some("ExpiredToken")))
}

/// `HTTP 400 ExpiredToken: Token has expired` (or the start of the body).
pub(crate) fn answer_text(status: u16, body: &[u8]) -> String {
    match serde_json::from_slice::<Value>(body) {
        Ok(v) if v["error"].is_string() => format!(
            "HTTP {status} {}: {}",
            v["error"].as_str().unwrap_or_default(),
            v["message"].as_str().unwrap_or_default()
        ),
        _ => {
            let text = String::from_utf8_lossy(body);
            format!(
                "HTTP {status} {}",
                text.chars().take(200).collect::<String>()
            )
        }
    }
}

/// The login and the refresh are never refreshed-and-repeated.
fn is_session_call(path: &str) -> bool {
    path.ends_with("/com.atproto.server.createSession")
        || path.ends_with("/com.atproto.server.refreshSession")
}

/// The tokens of one session and the client that renews them.
pub(crate) struct Auth {
    http: reqwest::Client,
    service: String,
    tokens: RwLock<Option<Tokens>>,
}

impl Auth {
    pub fn new(http: reqwest::Client, service: &str) -> Auth {
        Auth {
            http,
            service: service.to_owned(),
            tokens: RwLock::new(None),
        }
    }

    /// Stores a new pair (after createSession or refreshSession).
    pub fn set(&self, tokens: Tokens) {
        *self.tokens.write().unwrap_or_else(|e| e.into_inner()) = Some(tokens);
    }

    /// The current access token.
    pub fn access(&self) -> Option<String> {
        let tokens = self.tokens.read().unwrap_or_else(|e| e.into_inner());
        tokens.as_ref().map(|t| t.access.clone())
    }

    /// The current refresh token.
    pub fn refresh_token(&self) -> Option<String> {
        let tokens = self.tokens.read().unwrap_or_else(|e| e.into_inner());
        tokens.as_ref().map(|t| t.refresh.clone())
    }

    /// Sends `request` with `send`; if the answer says the access token
    /// expired, refreshes the session and sends it once more with the new
    /// token.
    pub async fn send<F, Fut>(
        &self,
        request: Request<Vec<u8>>,
        send: F,
    ) -> Result<Response<Vec<u8>>, BoxError>
    where
        F: Fn(Request<Vec<u8>>) -> Fut,
        Fut: Future<Output = Result<Response<Vec<u8>>, BoxError>>,
    {
        let (parts, body) = request.into_parts();
        let first = send(Request::from_parts(parts.clone(), body.clone())).await?;
        let status = first.status().as_u16();
        if is_session_call(parts.uri.path()) || !is_expired(status, first.body()) {
            return Ok(first);
        }
        let cause = format!(
            "{} answered {}",
            parts.uri.path().trim_start_matches("/xrpc/"),
            answer_text(status, first.body())
        );
        self.refresh(cause).await?;
        let mut parts = parts;
        if let Some(token) = self.access() {
            parts.headers.insert(
                AUTHORIZATION,
                HeaderValue::from_str(&format!("Bearer {token}"))?,
            );
        }
        send(Request::from_parts(parts, body)).await
    }

    /// `com.atproto.server.refreshSession`: a new token pair, or
    /// [`RefreshRefused`] (a transport failure stays a transport error).
    async fn refresh(&self, cause: String) -> Result<(), BoxError> {
        let refused = |answer: String| {
            Box::new(RefreshRefused {
                cause: cause.clone(),
                answer,
            })
        };
        let Some(token) = self.refresh_token() else {
            return Err(refused("no session to refresh".into()));
        };
        let url = format!("{}/xrpc/com.atproto.server.refreshSession", self.service);
        let resp = self.http.post(url).bearer_auth(token).send().await?;
        let status = resp.status().as_u16();
        let body = resp.bytes().await?;
        if status != 200 {
            return Err(refused(answer_text(status, &body)));
        }
        let out: refresh_session::OutputData = serde_json::from_slice(&body)
            .map_err(|e| refused(format!("an unreadable answer: {e}")))?;
        let same_account = {
            let tokens = self.tokens.read().unwrap_or_else(|e| e.into_inner());
            tokens.as_ref().is_some_and(|t| t.did == out.did.as_str())
        };
        if !same_account {
            return Err(refused(format!(
                "a session for another account ({})",
                out.did.as_str()
            )));
        }
        tracing::debug!(did = %out.did.as_str(), "session refreshed");
        self.set(Tokens {
            access: out.access_jwt,
            refresh: out.refresh_jwt,
            did: out.did.to_string(),
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_answers_are_recognised_by_status_and_error_name() {
        let expired = br#"{"error":"ExpiredToken","message":"Token has expired"}"#;
        assert!(is_expired(400, expired));
        assert!(is_expired(401, b"{}"));
        assert!(!is_expired(400, br#"{"error":"InvalidRequest"}"#));
        assert!(!is_expired(500, expired));
        assert!(!is_expired(400, b"not json"));
        assert_eq!(
            answer_text(400, expired),
            "HTTP 400 ExpiredToken: Token has expired"
        );
        assert_eq!(answer_text(502, b"bad gateway"), "HTTP 502 bad gateway");
        assert!(is_session_call("/xrpc/com.atproto.server.refreshSession"));
        assert!(!is_session_call("/xrpc/com.atproto.repo.applyWrites"));
    }
}
