//! XRPC errors: the `{error, message}` body with the HTTP status clients
//! expect. Lexicon-declared error names (`InvalidSwap`, `RecordNotFound`,
//! …) go out with status 400, as the reference server sends them.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::repo::records::RecordError;
use crate::repo::repository::RepoError;

/// One XRPC error response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XrpcError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The error name (`InvalidRequest`, `AuthenticationRequired`, or a
    /// lexicon's own name).
    pub error: String,
    /// A human-readable message.
    pub message: String,
    /// A refusal by a rate limit: its `Retry-After` and `RateLimit-*`
    /// headers.
    pub rate_limit: Option<RateLimit>,
}

/// What a 429 tells the client about the limit that refused it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// How long until the next attempt is allowed.
    pub retry_after: std::time::Duration,
    /// The most attempts the window takes.
    pub limit: usize,
    /// The window.
    pub window: std::time::Duration,
}

impl RateLimit {
    /// The headers: `Retry-After` (seconds), and as the reference PDS
    /// sends them `RateLimit-Limit`, `RateLimit-Remaining`,
    /// `RateLimit-Reset` (the Unix time, in seconds, the next attempt is
    /// allowed at) and `RateLimit-Policy` (`LIMIT;w=SECONDS`).
    fn headers(&self) -> [(&'static str, String); 5] {
        // Whole seconds, rounded up: a client that waits that long is let in.
        let wait = self.retry_after.as_secs()
            + u64::from(self.retry_after.subsec_nanos() > 0 || self.retry_after.is_zero());
        let reset = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs()
            + wait;
        [
            ("retry-after", wait.to_string()),
            ("ratelimit-limit", self.limit.to_string()),
            ("ratelimit-remaining", "0".to_owned()),
            ("ratelimit-reset", reset.to_string()),
            (
                "ratelimit-policy",
                format!("{};w={}", self.limit, self.window.as_secs()),
            ),
        ]
    }
}

impl XrpcError {
    fn new(status: StatusCode, error: &str, message: impl Into<String>) -> Self {
        XrpcError {
            status,
            error: error.to_owned(),
            message: message.into(),
            rate_limit: None,
        }
    }

    /// 400 `InvalidRequest`: the request is malformed or not allowed.
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "InvalidRequest", message)
    }

    /// 400 with a lexicon-declared error name.
    pub fn named(name: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, name, message)
    }

    /// 401 `AuthenticationRequired`: no or wrong credentials.
    pub fn auth_required(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "AuthenticationRequired", message)
    }

    /// 400 `ExpiredToken`: the client should refresh its session.
    pub fn expired_token() -> Self {
        Self::named("ExpiredToken", "Token has expired")
    }

    /// 400 `InvalidToken`: a token that is not ours, damaged, or of the
    /// wrong kind.
    pub fn invalid_token(message: impl Into<String>) -> Self {
        Self::named("InvalidToken", message)
    }

    /// 501 `MethodNotImplemented`: an NSID this server does not serve.
    pub fn not_implemented(nsid: &str) -> Self {
        let shown: String = nsid.chars().take(200).collect();
        Self::new(
            StatusCode::NOT_IMPLEMENTED,
            "MethodNotImplemented",
            format!("Method Not Implemented: {shown}"),
        )
    }

    /// 429 `RateLimitExceeded`, saying when to try again (in the message
    /// and the headers).
    pub fn rate_limited(limit: RateLimit) -> Self {
        let mut e = Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "RateLimitExceeded",
            format!(
                "Rate Limit Exceeded: try again in {} s",
                limit.retry_after.as_secs().max(1)
            ),
        );
        e.rate_limit = Some(limit);
        e
    }

    /// 408 `RequestTimeout`: the request body stopped coming.
    pub fn body_timeout(patience: std::time::Duration) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "RequestTimeout",
            format!(
                "the request body sent nothing for {} s",
                patience.as_secs_f64()
            ),
        )
    }

    /// 413 `PayloadTooLarge`.
    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "PayloadTooLarge",
            format!("request body is larger than {limit} bytes"),
        )
    }

    /// 500 `InternalServerError`; the details go to the log, not the client.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        tracing::error!("internal error: {detail}");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalServerError",
            "Internal Server Error",
        )
    }
}

impl IntoResponse for XrpcError {
    fn into_response(self) -> Response {
        let mut response = (
            self.status,
            Json(json!({"error": self.error, "message": self.message})),
        )
            .into_response();
        if let Some(limit) = self.rate_limit {
            let headers = response.headers_mut();
            for (name, value) in limit.headers() {
                if let Ok(value) = axum::http::HeaderValue::from_str(&value) {
                    headers.insert(name, value);
                }
            }
        }
        response
    }
}

impl From<RepoError> for XrpcError {
    fn from(e: RepoError) -> Self {
        match e {
            RepoError::Record(RecordError::Invalid { .. }) => {
                XrpcError::named("InvalidRecord", e.to_string())
            }
            RepoError::Record(_) | RepoError::EmptyBatch => {
                XrpcError::invalid_request(e.to_string())
            }
            // A taken key on create and a failed compare-and-swap are both
            // "the current state is not the one the write expected".
            RepoError::RecordExists { .. }
            | RepoError::SwapMismatch { .. }
            | RepoError::CommitSwapMismatch { .. } => {
                XrpcError::named("InvalidSwap", e.to_string())
            }
            RepoError::RecordNotFound { .. } => XrpcError::named("RecordNotFound", e.to_string()),
            other => XrpcError::internal(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_429_says_when_to_come_back() {
        let r = XrpcError::rate_limited(RateLimit {
            retry_after: Duration::from_millis(269_400),
            limit: 30,
            window: Duration::from_secs(300),
        })
        .into_response();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        let h = |name: &str| r.headers()[name].to_str().unwrap().to_owned();
        assert_eq!(h("retry-after"), "270");
        assert_eq!(h("ratelimit-limit"), "30");
        assert_eq!(h("ratelimit-remaining"), "0");
        assert_eq!(h("ratelimit-policy"), "30;w=300");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let reset: u64 = h("ratelimit-reset").parse().unwrap();
        assert!((now + 269..=now + 271).contains(&reset), "{reset} vs {now}");
    }
}
