//! `com.atproto.sync.*` over HTTP: the repository as a CAR (whole or
//! `since` a rev), blocks by CID, record proofs, the head, the repo list
//! and blobs. The
//! firehose (`subscribeRepos`) is in `server::firehose`.

use std::sync::Arc;

use axum::Json;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::{cid_string, our_did, rev};
use crate::atproto::com::atproto::sync;
use crate::model::parse_cid;
use crate::repo::blocks::BlockSource;
use crate::repo::car::CarWriter;
use crate::repo::proof::record_proof;
use crate::repo::records::repo_key;
use crate::repo::repository::RepoError;
use crate::repo::tid::Tid;
use crate::server::error::XrpcError;
use crate::server::state::AppState;
use crate::server::xrpc::Request;

const CAR: &str = "application/vnd.ipld.car";

/// Checked before the parameters' formats: any `did` but this account's,
/// well-formed or not, is `RepoNotFound`.
fn own_did(state: &AppState, req: &Request) -> Result<(), XrpcError> {
    let did = req.first("did").unwrap_or("");
    if did != state.did {
        return Err(XrpcError::named(
            "RepoNotFound",
            format!(
                "Could not find repo for DID: {}",
                did.chars().take(300).collect::<String>()
            ),
        ));
    }
    Ok(())
}

fn car(bytes: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, CAR)], bytes).into_response()
}

pub async fn get_repo(state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
    own_did(state, &req)?;
    let params: sync::get_repo::GetRepoParams = req.params()?;
    let since = params
        .since
        .as_ref()
        .map(|s| {
            Tid::parse(s.as_str())
                .map_err(|e| XrpcError::invalid_request(format!("since is not a TID: {e}")))
        })
        .transpose()?;
    let bytes = state
        .with_core(move |core| Ok(core.repo().export(Vec::new(), since)?.0))
        .await?;
    Ok(car(bytes))
}

/// Most CIDs one `getBlocks` call takes.
const MAX_BLOCKS: usize = 10_000;

/// `getBlocks`: a CAR (no roots) of the repository blocks named by the
/// repeated `cids` parameter, each once; any one missing fails the whole
/// call with the lexicon's `BlockNotFound` (`gelstore sync` fetches a
/// push's commit this way).
pub async fn get_blocks(state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
    own_did(state, &req)?;
    let params: sync::get_blocks::GetBlocksParams = req.params()?;
    if params.cids.len() > MAX_BLOCKS {
        return Err(XrpcError::invalid_request(format!(
            "at most {MAX_BLOCKS} cids per call"
        )));
    }
    let cids = params
        .cids
        .iter()
        .map(|c| parse_cid(c.as_str()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| XrpcError::invalid_request(format!("cids: {e}")))?;
    let bytes = state
        .with_core(move |core| {
            let store = core.repo().mst().store();
            let mut car = CarWriter::new(Vec::new(), &[]).map_err(XrpcError::internal)?;
            let mut written = std::collections::HashSet::new();
            let mut missing = Vec::new();
            for cid in cids {
                if !written.insert(cid) {
                    continue;
                }
                match store.get(&cid).map_err(XrpcError::internal)? {
                    Some(block) => car.write_block(&cid, &block).map_err(XrpcError::internal)?,
                    None => missing.push(cid.to_string()),
                }
            }
            if !missing.is_empty() {
                return Err(XrpcError::named(
                    "BlockNotFound",
                    format!("Could not find cids: {}", missing.join(", ")),
                ));
            }
            car.finish().map_err(XrpcError::internal)
        })
        .await?;
    Ok(car(bytes))
}

pub async fn get_record(state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
    own_did(state, &req)?;
    let params: sync::get_record::GetRecordParams = req.params()?;
    let key = repo_key(params.collection.as_str(), params.rkey.as_str())
        .map_err(|e| XrpcError::invalid_request(e.to_string()))?;
    // A key that is absent gets its proof of absence (a valid CAR a client
    // can verify), not an error.
    let bytes = state
        .with_core(move |core| {
            let head = core.repo().head().commit;
            record_proof(core.repo().mst().store(), head, &key)
                .map_err(|e| XrpcError::from(RepoError::from(e)))
        })
        .await?;
    Ok(car(bytes))
}

pub async fn get_latest_commit(state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
    own_did(state, &req)?;
    // Only checked: the DID is all they hold.
    let _: sync::get_latest_commit::GetLatestCommitParams = req.params()?;
    let head = state.with_core(|core| Ok(core.repo().head())).await?;
    Ok(Json(sync::get_latest_commit::GetLatestCommitOutput {
        cid: cid_string(&head.commit)?,
        rev: rev(&head.rev)?,
        extra: Default::default(),
    })
    .into_response())
}

pub async fn get_repo_status(state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
    own_did(state, &req)?;
    let _: sync::get_repo_status::GetRepoStatusParams = req.params()?;
    let head = state.with_core(|core| Ok(core.repo().head())).await?;
    Ok(Json(sync::get_repo_status::GetRepoStatusOutput {
        did: our_did(state)?,
        active: true,
        status: None,
        rev: Some(rev(&head.rev)?),
        extra: Default::default(),
    })
    .into_response())
}

pub async fn list_repos(state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
    let params: sync::list_repos::ListReposParams = req.params()?;
    // One account: a cursor means the client has seen it already.
    let repos = if params.cursor.is_some() {
        Vec::new()
    } else {
        let head = state.with_core(|core| Ok(core.repo().head())).await?;
        vec![sync::list_repos::Repo {
            did: our_did(state)?,
            head: cid_string(&head.commit)?,
            rev: rev(&head.rev)?,
            active: Some(true),
            status: None,
            extra: Default::default(),
        }]
    };
    Ok(Json(sync::list_repos::ListReposOutput {
        cursor: None,
        repos,
        extra: Default::default(),
    })
    .into_response())
}

pub async fn get_blob(state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
    own_did(state, &req)?;
    let params: sync::get_blob::GetBlobParams = req.params()?;
    let cid = parse_cid(params.cid.as_str())
        .map_err(|e| XrpcError::invalid_request(format!("cid: {e}")))?;
    // Only blobs a record references are served: an upload no record took
    // yet is temporary, and the reference PDS answers `InvalidRequest`
    // "Blob not found" for it as for an unknown CID.
    // The bytes are read after the lock is released: a deletion in between
    // leaves no file, which is the same answer.
    let referenced = state
        .with_core(move |core| Ok(core.blob_refs.is_referenced(&cid)))
        .await?;
    let not_found = || XrpcError::invalid_request("Blob not found");
    if !referenced {
        return Err(not_found());
    }
    let blobs = state.blobs.clone();
    let blob = tokio::task::spawn_blocking(move || blobs.get(&cid))
        .await
        .map_err(XrpcError::internal)?
        .map_err(XrpcError::internal)?
        .ok_or_else(not_found)?;
    Ok((
        [
            (header::CONTENT_TYPE, blob.mime),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; sandbox".to_owned(),
            ),
        ],
        blob.bytes,
    )
        .into_response())
}
