//! The XRPC methods this server implements, one module per NSID group.
//! [`kind_of`] is the table of methods; [`call`] sends a request to its
//! handler.

mod chat;
mod repo;
mod server;
mod sync;

pub use self::server::{require_access_in, require_access_token};

use std::sync::Arc;

use axum::response::Response;

use super::error::XrpcError;
use super::state::AppState;
use super::xrpc::{Kind, Request};

/// Whether `nsid` is served, and as a query or a procedure.
pub fn kind_of(nsid: &str) -> Option<Kind> {
    use Kind::*;
    Some(match nsid {
        "com.atproto.server.describeServer"
        | "com.atproto.server.getSession"
        | "com.atproto.identity.resolveHandle"
        | "com.atproto.repo.getRecord"
        | "com.atproto.repo.listRecords"
        | "com.atproto.repo.describeRepo"
        | "com.atproto.sync.getRepo"
        | "com.atproto.sync.getRecord"
        | "com.atproto.sync.getBlocks"
        | "com.atproto.sync.getLatestCommit"
        | "com.atproto.sync.getRepoStatus"
        | "com.atproto.sync.listRepos"
        | "com.atproto.sync.getBlob"
        | "chat.gel.assistant.getThread"
        | "chat.gel.assistant.listApprovals" => Query,
        "com.atproto.server.createSession"
        | "com.atproto.server.refreshSession"
        | "com.atproto.server.deleteSession"
        | "com.atproto.repo.createRecord"
        | "com.atproto.repo.putRecord"
        | "com.atproto.repo.deleteRecord"
        | "com.atproto.repo.applyWrites"
        | "com.atproto.repo.uploadBlob"
        | "chat.gel.assistant.answerApproval" => Procedure,
        _ => return None,
    })
}

/// Whether the method's body is a blob (the blob size limit applies).
pub fn takes_blob(nsid: &str) -> bool {
    nsid == "com.atproto.repo.uploadBlob"
}

/// Runs the handler of `nsid` (which [`kind_of`] knows).
pub async fn call(state: &Arc<AppState>, nsid: &str, req: Request) -> Result<Response, XrpcError> {
    match nsid {
        "com.atproto.server.describeServer" => server::describe_server(state),
        "com.atproto.server.createSession" => server::create_session(state, req).await,
        "com.atproto.server.refreshSession" => server::refresh_session(state, req).await,
        "com.atproto.server.deleteSession" => server::delete_session(state, req).await,
        "com.atproto.server.getSession" => server::get_session(state, req),
        "com.atproto.identity.resolveHandle" => server::resolve_handle(state, req),
        "com.atproto.repo.createRecord" => repo::create_record(state, req).await,
        "com.atproto.repo.putRecord" => repo::put_record(state, req).await,
        "com.atproto.repo.deleteRecord" => repo::delete_record(state, req).await,
        "com.atproto.repo.applyWrites" => repo::apply_writes(state, req).await,
        "com.atproto.repo.getRecord" => repo::get_record(state, req).await,
        "com.atproto.repo.listRecords" => repo::list_records(state, req).await,
        "com.atproto.repo.describeRepo" => repo::describe_repo(state, req).await,
        "com.atproto.repo.uploadBlob" => repo::upload_blob(state, req).await,
        "com.atproto.sync.getRepo" => sync::get_repo(state, req).await,
        "com.atproto.sync.getRecord" => sync::get_record(state, req).await,
        "com.atproto.sync.getBlocks" => sync::get_blocks(state, req).await,
        "com.atproto.sync.getLatestCommit" => sync::get_latest_commit(state, req).await,
        "com.atproto.sync.getRepoStatus" => sync::get_repo_status(state, req).await,
        "com.atproto.sync.listRepos" => sync::list_repos(state, req).await,
        "com.atproto.sync.getBlob" => sync::get_blob(state, req).await,
        "chat.gel.assistant.getThread" => chat::get_thread(state, req).await,
        "chat.gel.assistant.listApprovals" => chat::list_approvals(state, req).await,
        "chat.gel.assistant.answerApproval" => chat::answer_approval(state, req).await,
        other => Err(XrpcError::not_implemented(other)),
    }
}
