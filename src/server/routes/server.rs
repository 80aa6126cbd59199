//! `com.atproto.server.*` (sessions, description) and
//! `com.atproto.identity.resolveHandle`.

use std::sync::Arc;

use axum::http::HeaderMap;

use axum::Json;
use axum::response::{IntoResponse, Response};

use super::{data, our_did, our_handle};
use crate::atproto::com::atproto::identity::resolve_handle::{
    ResolveHandleOutput, ResolveHandleParams,
};
use crate::atproto::com::atproto::server::create_session::{
    CreateSessionInput, CreateSessionOutput,
};
use crate::atproto::com::atproto::server::describe_server::{DescribeServerOutput, Links};
use crate::atproto::com::atproto::server::get_session::GetSessionOutput;
use crate::atproto::com::atproto::server::refresh_session::RefreshSessionOutput;
use crate::lexicon_runtime::{Data, Did, Handle};
use crate::server::account::{Checked, check_password, hash_password, random_token};
use crate::server::auth::{ACCESS_SCOPE, REFRESH_SCOPE, REFRESH_SECS, bearer, now};
use crate::server::error::{RateLimit, XrpcError};
use crate::server::sessions::Refused;
use crate::server::state::AppState;
use crate::server::xrpc::{Request, decode_input};

pub async fn describe_server(state: &Arc<AppState>, _req: Request) -> Result<Response, XrpcError> {
    Ok(Json(DescribeServerOutput {
        invite_code_required: Some(true),
        phone_verification_required: Some(false),
        blob_upload_limit: None,
        available_user_domains: Vec::new(),
        links: Some(Links {
            privacy_policy: None,
            terms_of_service: None,
            extra: Default::default(),
        }),
        contact: None,
        did: our_did(state)?,
        extra: Default::default(),
    })
    .into_response())
}

pub async fn create_session(state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
    let mut body = req.object()?;
    // No email codes and no takedowns here: the server reads neither
    // field, so a malformed one is ignored, as it always was.
    body.remove("authFactorToken");
    body.remove("allowTakendown");
    let input: CreateSessionInput = decode_input(body)?;
    let wrong = || XrpcError::auth_required("Invalid identifier or password");
    if !state.is_own_repo(input.identifier.trim()) {
        return Err(wrong());
    }
    // Too many failures from one client, or for the account, lock it out
    // for a while (ratelimit.rs); the attempt counts as failed until it
    // succeeds.
    let attempt = state
        .attempts
        .begin(state.client_of(&req), std::time::Instant::now())
        .map_err(|limited| {
            XrpcError::rate_limited(RateLimit {
                retry_after: limited.retry_after,
                limit: limited.limit,
                window: limited.window,
            })
        })?;
    // The hash is slow on purpose; it runs off the async workers, a few
    // at a time. A hash of an older kind is replaced on the way.
    let _permit = state.hashing.acquire().await.map_err(XrpcError::internal)?;
    let checking = state.clone();
    let ok = tokio::task::spawn_blocking(move || {
        let stored = checking.password_hash();
        let checked = check_password(&input.password, &stored);
        if checked == Checked::RightOutdated {
            match hash_password(&input.password) {
                Ok(new) => {
                    if let Err(e) = checking.upgrade_password_hash(&stored, new) {
                        tracing::warn!("could not store the new password hash: {e}");
                    }
                }
                Err(e) => tracing::warn!("{e}"),
            }
        }
        checked.is_right()
    })
    .await
    .map_err(XrpcError::internal)?;
    if !ok {
        return Err(wrong());
    }
    state.attempts.succeeded(attempt);
    let jti = random_token(32).map_err(XrpcError::internal)?;
    let iat = now();
    let exp = iat + REFRESH_SECS;
    let record = state.clone();
    let id = jti.clone();
    // Recorded (and on disk) before the client sees the token.
    tokio::task::spawn_blocking(move || record.sessions.add(&id, iat, exp))
        .await
        .map_err(XrpcError::internal)?
        .map_err(XrpcError::internal)?;
    let a = Account::of(state)?;
    Ok(Json(CreateSessionOutput {
        access_jwt: state.tokens.access(&state.did, iat),
        refresh_jwt: state.tokens.refresh(&state.did, &jti, iat, exp),
        handle: a.handle,
        did: a.did,
        did_doc: Some(a.did_doc),
        email: None,
        email_confirmed: None,
        email_auth_factor: None,
        active: Some(true),
        status: None,
        extra: Default::default(),
    })
    .into_response())
}

/// What every session answer says of the account.
struct Account {
    handle: Handle,
    did: Did,
    did_doc: Data,
}

impl Account {
    fn of(state: &AppState) -> Result<Account, XrpcError> {
        Ok(Account {
            handle: our_handle(state)?,
            did: our_did(state)?,
            did_doc: data("DID document", &state.did_doc)?,
        })
    }
}

/// The refresh token of the request and its id; `allow_expired` for
/// `deleteSession`.
fn refresh_claims(
    state: &AppState,
    req: &Request,
    allow_expired: bool,
) -> Result<String, XrpcError> {
    let token = bearer(&req.headers)?;
    let claims = if allow_expired {
        state.tokens.verify_allow_expired(token, REFRESH_SCOPE)?
    } else {
        state.tokens.verify(token, REFRESH_SCOPE)?
    };
    if claims.sub != state.did {
        return Err(XrpcError::invalid_token("Token is for another account"));
    }
    let Some(jti) = claims.jti else {
        // The reference's name and status for a refresh token without id.
        return Err(XrpcError {
            status: axum::http::StatusCode::UNAUTHORIZED,
            error: "MissingTokenId".into(),
            message: "Unexpected missing refresh token id".into(),
            rate_limit: None,
        });
    };
    Ok(jti)
}

/// Rotates the refresh token (see `sessions`): a used, revoked or
/// past-grace token is `ExpiredToken` "Token has been revoked", as the
/// reference answers.
pub async fn refresh_session(state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
    let jti = refresh_claims(state, &req, false)?;
    let rotate = state.clone();
    let rotated =
        tokio::task::spawn_blocking(move || rotate.sessions.rotate(&jti, now(), REFRESH_SECS))
            .await
            .map_err(XrpcError::internal)?
            .map_err(XrpcError::internal)?;
    let next = match rotated {
        Ok(next) => next,
        Err(Refused::Revoked) => {
            return Err(XrpcError::named("ExpiredToken", "Token has been revoked"));
        }
    };
    let a = Account::of(state)?;
    Ok(Json(RefreshSessionOutput {
        access_jwt: state.tokens.access(&state.did, now()),
        refresh_jwt: state
            .tokens
            .refresh(&state.did, &next.jti, next.iat, next.exp),
        handle: a.handle,
        did: a.did,
        did_doc: Some(a.did_doc),
        email: None,
        email_confirmed: None,
        email_auth_factor: None,
        active: Some(true),
        status: None,
        extra: Default::default(),
    })
    .into_response())
}

/// Revokes the request's refresh token (expired ones too). Like the
/// reference, an already revoked one is not an error, and access tokens
/// already issued stay valid until they expire (at most 2 hours).
pub async fn delete_session(state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
    let jti = refresh_claims(state, &req, true)?;
    let revoke = state.clone();
    tokio::task::spawn_blocking(move || revoke.sessions.revoke(&jti, now()))
        .await
        .map_err(XrpcError::internal)?
        .map_err(XrpcError::internal)?;
    Ok(axum::http::StatusCode::OK.into_response())
}

pub async fn get_session(state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
    require_access(state, &req)?;
    let a = Account::of(state)?;
    Ok(Json(GetSessionOutput {
        handle: a.handle,
        did: a.did,
        did_doc: Some(a.did_doc),
        email: None,
        email_confirmed: None,
        email_auth_factor: None,
        active: Some(true),
        status: None,
        extra: Default::default(),
    })
    .into_response())
}

/// Checks the request's access token; every write calls this first.
pub fn require_access(state: &AppState, req: &Request) -> Result<(), XrpcError> {
    require_access_in(state, &req.headers)
}

/// [`require_access`] for a request that is not an XRPC [`Request`] (a
/// subscription's upgrade).
pub fn require_access_in(state: &AppState, headers: &HeaderMap) -> Result<(), XrpcError> {
    require_access_token(state, bearer(headers)?)
}

/// [`require_access`] for a token that came another way (a websocket
/// subprotocol).
pub fn require_access_token(state: &AppState, token: &str) -> Result<(), XrpcError> {
    let claims = state.tokens.verify(token, ACCESS_SCOPE)?;
    if claims.sub != state.did {
        return Err(XrpcError::invalid_token("Token is for another account"));
    }
    Ok(())
}

pub async fn resolve_handle(state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
    let params: ResolveHandleParams = req.params()?;
    let handle = params.handle.as_str();
    if !handle.eq_ignore_ascii_case(&state.handle) {
        return Err(XrpcError::named(
            "HandleNotFound",
            "Unable to resolve handle",
        ));
    }
    Ok(Json(ResolveHandleOutput {
        did: our_did(state)?,
        extra: Default::default(),
    })
    .into_response())
}
