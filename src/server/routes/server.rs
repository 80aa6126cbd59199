//! `com.atproto.server.*` (sessions, description) and
//! `com.atproto.identity.resolveHandle`.

use std::sync::Arc;

use axum::http::HeaderMap;

use axum::Json;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use crate::server::account::verify_password;
use crate::server::auth::{ACCESS_SCOPE, REFRESH_SCOPE, bearer};
use crate::server::error::XrpcError;
use crate::server::state::AppState;
use crate::server::xrpc::Request;

pub fn describe_server(state: &Arc<AppState>) -> Result<Response, XrpcError> {
    Ok(Json(json!({
        "did": state.did,
        "availableUserDomains": [],
        "inviteCodeRequired": true,
        "phoneVerificationRequired": false,
        "links": {},
    }))
    .into_response())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateSessionInput {
    identifier: String,
    password: String,
}

pub async fn create_session(state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
    let input: CreateSessionInput = req.input()?;
    let wrong = || XrpcError::auth_required("Invalid identifier or password");
    if !state.is_own_repo(input.identifier.trim()) {
        return Err(wrong());
    }
    // The hash is slow on purpose; it runs off the async workers.
    let stored = state.password_hash.clone();
    let ok = tokio::task::spawn_blocking(move || verify_password(&input.password, &stored))
        .await
        .map_err(XrpcError::internal)?;
    if !ok {
        return Err(wrong());
    }
    Ok(session_output(state, true))
}

fn session_output(state: &AppState, with_tokens: bool) -> Response {
    let mut out = json!({
        "did": state.did,
        "handle": state.handle,
        "didDoc": state.did_doc,
        "active": true,
    });
    if with_tokens {
        let (access, refresh) = state.tokens.issue(&state.did);
        out["accessJwt"] = access.into();
        out["refreshJwt"] = refresh.into();
    }
    Json(out).into_response()
}

pub fn refresh_session(state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
    let claims = state.tokens.verify(bearer(&req.headers)?, REFRESH_SCOPE)?;
    if claims.sub != state.did {
        return Err(XrpcError::invalid_token("Token is for another account"));
    }
    Ok(session_output(state, true))
}

pub fn get_session(state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
    require_access(state, &req)?;
    Ok(session_output(state, false))
}

/// Checks the request's access token; every write calls this first.
pub fn require_access(state: &AppState, req: &Request) -> Result<(), XrpcError> {
    require_access_in(state, &req.headers)
}

/// [`require_access`] for a request that is not an XRPC [`Request`] (a
/// subscription's upgrade).
pub fn require_access_in(state: &AppState, headers: &HeaderMap) -> Result<(), XrpcError> {
    let claims = state.tokens.verify(bearer(headers)?, ACCESS_SCOPE)?;
    if claims.sub != state.did {
        return Err(XrpcError::invalid_token("Token is for another account"));
    }
    Ok(())
}

pub fn resolve_handle(state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
    let handle = req.required("handle")?;
    if !handle.eq_ignore_ascii_case(&state.handle) {
        return Err(XrpcError::named(
            "HandleNotFound",
            "Unable to resolve handle",
        ));
    }
    Ok(Json(json!({"did": state.did})).into_response())
}
