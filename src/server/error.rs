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
}

impl XrpcError {
    fn new(status: StatusCode, error: &str, message: impl Into<String>) -> Self {
        XrpcError {
            status,
            error: error.to_owned(),
            message: message.into(),
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

    /// 429 `RateLimitExceeded`, saying when to try again.
    pub fn rate_limited(retry_after: std::time::Duration) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "RateLimitExceeded",
            format!(
                "Rate Limit Exceeded: try again in {} s",
                retry_after.as_secs().max(1)
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
        (
            self.status,
            Json(json!({"error": self.error, "message": self.message})),
        )
            .into_response()
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
