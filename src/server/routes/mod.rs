//! The XRPC methods this server implements, one module per NSID group.
//! [`ROUTES`] is the one table: each method's `METHOD` as generated from its
//! lexicon (NSID, query or procedure, encodings) next to its handler.

mod chat;
mod repo;
mod server;
mod sync;

pub use self::server::{require_access_in, require_access_token};

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::response::Response;
use serde_json::Value;

use super::error::XrpcError;
use super::state::AppState;
use super::xrpc::Request;
use crate::atproto::com::atproto::{identity, repo as repo_, server as server_, sync as sync_};
use crate::lexicon::chat::gel::assistant as gel;
use crate::lexicon_runtime::{CidString, Data, Did, Handle, Method, SyntaxError, Tid};
use crate::model::{Cid, json_to_ipld};

type Answer<'a> = Pin<Box<dyn Future<Output = Result<Response, XrpcError>> + Send + 'a>>;

/// A method the server answers over HTTP, and the code that answers it.
pub struct Route {
    pub method: Method,
    handler: for<'a> fn(&'a Arc<AppState>, Request) -> Answer<'a>,
}

impl Route {
    /// Whether the input is a blob (any MIME type; the blob size limit applies).
    pub fn takes_blob(&self) -> bool {
        self.method.input == Some("*/*")
    }

    pub async fn call(&self, state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
        (self.handler)(state, req).await
    }
}

macro_rules! route {
    ($method:path => $handler:path) => {
        Route {
            method: $method,
            handler: |state, req| Box::pin($handler(state, req)),
        }
    };
}

/// Every query and procedure served. Subscriptions are websockets, routed
/// beside XRPC (`server::firehose`, `server::assistant::subscribe`).
static ROUTES: &[Route] = &[
    route!(server_::describe_server::METHOD => server::describe_server),
    route!(server_::create_session::METHOD => server::create_session),
    route!(server_::refresh_session::METHOD => server::refresh_session),
    route!(server_::delete_session::METHOD => server::delete_session),
    route!(server_::get_session::METHOD => server::get_session),
    route!(identity::resolve_handle::METHOD => server::resolve_handle),
    route!(repo_::create_record::METHOD => repo::create_record),
    route!(repo_::put_record::METHOD => repo::put_record),
    route!(repo_::delete_record::METHOD => repo::delete_record),
    route!(repo_::apply_writes::METHOD => repo::apply_writes),
    route!(repo_::get_record::METHOD => repo::get_record),
    route!(repo_::list_records::METHOD => repo::list_records),
    route!(repo_::describe_repo::METHOD => repo::describe_repo),
    route!(repo_::upload_blob::METHOD => repo::upload_blob),
    route!(sync_::get_repo::METHOD => sync::get_repo),
    route!(sync_::get_record::METHOD => sync::get_record),
    route!(sync_::get_blocks::METHOD => sync::get_blocks),
    route!(sync_::get_latest_commit::METHOD => sync::get_latest_commit),
    route!(sync_::get_repo_status::METHOD => sync::get_repo_status),
    route!(sync_::list_repos::METHOD => sync::list_repos),
    route!(sync_::get_blob::METHOD => sync::get_blob),
    route!(gel::get_thread::METHOD => chat::get_thread),
    route!(gel::list_approvals::METHOD => chat::list_approvals),
    route!(gel::answer_approval::METHOD => chat::answer_approval),
];

/// The route of `nsid`, if the server answers it over HTTP.
pub fn route(nsid: &str) -> Option<&'static Route> {
    ROUTES.iter().find(|r| r.method.nsid == nsid)
}

/// One of our own values (a DID, a CID, a key we stored) in its lexicon
/// format, for a generated output: one that does not pass is the server's
/// fault (500), not the client's.
fn ours<T>(what: &str, made: Result<T, SyntaxError>) -> Result<T, XrpcError> {
    made.map_err(|e| XrpcError::internal(format!("our own {what} is not valid: {e}")))
}

/// This server's account's DID, for a generated output.
fn our_did(state: &AppState) -> Result<Did, XrpcError> {
    ours("DID", Did::new(state.did.clone()))
}

/// This server's account's handle, for a generated output.
fn our_handle(state: &AppState) -> Result<Handle, XrpcError> {
    ours("handle", Handle::new(state.handle.clone()))
}

fn cid_string(cid: &Cid) -> Result<CidString, XrpcError> {
    ours("CID", CidString::new(cid.to_string()))
}

/// A repository revision (a TID) for a generated output.
fn rev(rev: &impl std::fmt::Display) -> Result<Tid, XrpcError> {
    ours("rev", Tid::new(rev.to_string()))
}

/// Atproto JSON we hold (a stored record, the DID document) as the
/// generated outputs' `Data`.
fn data(what: &str, value: &Value) -> Result<Data, XrpcError> {
    json_to_ipld(value)
        .map(Data)
        .map_err(|e| XrpcError::internal(format!("our own {what} is not atproto data: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lexicon_runtime::MethodKind;

    #[test]
    fn every_generated_query_and_procedure_of_ours_is_routed_once() {
        for m in crate::lexicon::METHODS {
            let routed = ROUTES.iter().filter(|r| r.method == *m).count();
            let want = usize::from(m.kind != MethodKind::Subscription);
            assert_eq!(routed, want, "{}", m.nsid);
        }
        for r in ROUTES {
            assert_ne!(r.method.kind, MethodKind::Subscription, "{}", r.method.nsid);
            assert!(
                std::ptr::eq(route(r.method.nsid).unwrap(), r),
                "{}",
                r.method.nsid
            );
        }
        assert!(route("com.atproto.repo.uploadBlob").unwrap().takes_blob());
        assert!(!route("com.atproto.repo.createRecord").unwrap().takes_blob());
        assert!(route("com.atproto.sync.subscribeRepos").is_none());
    }
}
