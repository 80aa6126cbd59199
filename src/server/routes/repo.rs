//! `com.atproto.repo.*`: record writes (each one signed commit), reads,
//! `describeRepo` and `uploadBlob`.
//!
//! Every write checks the access token first, then that `repo` is this
//! account. The writes of one request are resolved and applied under the
//! repository lock as one `apply_with` call: all of them land in one commit
//! or, on any error, none does.

use std::sync::Arc;

use axum::Json;
use axum::response::{IntoResponse, Response};
use cid::Cid;
use serde_json::{Map, Value};

use super::server::require_access;
use super::{cid_string, data, our_did, our_handle, ours, rev};
use crate::atproto::com::atproto::repo as repo_;
use crate::lexicon_runtime::{
    AtUri, Blob, BlobRef, CidLink, CidString, Nsid, RecordKey, StringEnum,
};
use crate::model::{parse_cid, record_cid};
use crate::repo::blobs::blob_refs_in;
use crate::repo::records::prepare_record;
use crate::repo::repository::{CommitInfo, RepoError, Write};
use crate::server::error::XrpcError;
use crate::server::state::{AppState, Core};
use crate::server::xrpc::{Request, content_type, decode_input, null_as_absent};
use repo_::apply_writes::{
    self as apply, ApplyWritesInput, ApplyWritesInputWritesItem as WriteOp, ApplyWritesOutput,
    ApplyWritesOutputResultsItem as WriteResult,
};
use repo_::create_record::{CreateRecordInput, CreateRecordOutput};
use repo_::defs::CommitMeta;
use repo_::delete_record::{DeleteRecordInput, DeleteRecordOutput};
use repo_::describe_repo::DescribeRepoOutput;
use repo_::get_record::GetRecordOutput;
use repo_::list_records::{self as list, ListRecordsOutput};
use repo_::put_record::{PutRecordInput, PutRecordOutput};
use repo_::upload_blob::UploadBlobOutput;

/// A write as the client asked for it, before the lock resolves it.
enum Planned {
    /// Create; without a key the server makes a TID.
    Create {
        collection: String,
        rkey: Option<String>,
        value: Value,
    },
    /// Create or replace; `swap` is the expected current state.
    Put {
        collection: String,
        rkey: String,
        value: Value,
        swap: Swap,
    },
    /// Replace an existing record (applyWrites `#update`).
    Update {
        collection: String,
        rkey: String,
        value: Value,
    },
    /// Delete.
    Delete {
        collection: String,
        rkey: String,
        swap: Option<Cid>,
    },
}

/// `swapRecord`: absent (no check), `null` (must not exist), or a CID.
#[derive(Debug, Clone, Copy)]
enum Swap {
    Any,
    Absent,
    Is(Cid),
}

/// What one write did, for the response.
struct Done {
    collection: String,
    rkey: String,
    /// What the key holds after the commit (a record a later write of the
    /// batch deleted: its own); none for a delete.
    cid: Option<Cid>,
}

/// Which kind of write an applyWrites result answers.
#[derive(Clone, Copy)]
enum Kind {
    Create,
    Update,
    Delete,
}

fn cid_of(what: &str, s: &CidString) -> Result<Cid, XrpcError> {
    parse_cid(s).map_err(|e| XrpcError::invalid_request(format!("{what} is not a CID: {e}")))
}

fn cid_param(what: &str, s: Option<&CidString>) -> Result<Option<Cid>, XrpcError> {
    s.map(|s| cid_of(what, s)).transpose()
}

/// A write's body, the account checked first: a `repo` string that is not
/// this account, well-formed or not, is `RepoNotFound` before the rest is
/// read (the generated `AtIdentifier` would call a malformed one
/// `InvalidRequest`). One that is missing or not a string fails decoding.
fn write_body(state: &AppState, req: &Request) -> Result<Map<String, Value>, XrpcError> {
    let body = req.object()?;
    if let Some(Value::String(repo)) = body.get("repo") {
        state.own_repo(repo)?;
    }
    Ok(body)
}

/// Takes the record at `field` out of `object` as the client sent it,
/// leaving `null` for the generated type's `Data`. The repository reads
/// and checks records itself, its lexicon first (`InvalidRecord`), then
/// the data model; decoded as `Data` here, a float or a malformed `$link`
/// would be `InvalidRequest` first, and `$bytes` with stray bits that the
/// data model refuses would be stored re-encoded.
fn take_record(object: &mut Map<String, Value>, field: &str) -> Option<Value> {
    object.get_mut(field).map(Value::take)
}

/// Each applyWrites write's `value`, taken out as [`take_record`] does;
/// `null` there is absent, as it always was.
fn take_values(body: &mut Map<String, Value>) -> Vec<Option<Value>> {
    let Some(Value::Array(writes)) = body.get_mut("writes") else {
        return Vec::new();
    };
    writes
        .iter_mut()
        .map(|w| match w {
            Value::Object(op) => {
                null_as_absent(op, &[]);
                take_record(op, "value")
            }
            _ => None,
        })
        .collect()
}

/// A record set aside by [`take_record`] for a field the input requires
/// (so it is there once the input decoded).
fn required(record: Option<Value>, what: &str) -> Result<Value, XrpcError> {
    record.ok_or_else(|| XrpcError::invalid_request(format!("{what} must have a record")))
}

fn check_validate(
    state: &AppState,
    collection: &str,
    validate: Option<bool>,
) -> Result<(), XrpcError> {
    // Records of known lexicons are always validated (see docs/server.md); asking
    // for validation of a collection we have no lexicon for is an error,
    // as on the reference PDS.
    if validate == Some(true) && state.lexicons.get(collection).is_none() {
        return Err(XrpcError::invalid_request(format!(
            "Lexicon not found: {}",
            collection.chars().take(300).collect::<String>()
        )));
    }
    Ok(())
}

/// `validationStatus` as the method's generated enum.
fn validation_status<T: StringEnum>(state: &AppState, collection: &str) -> Result<T, XrpcError> {
    let status = if state.lexicons.get(collection).is_some() {
        "valid"
    } else {
        "unknown"
    };
    T::from_string(status.to_owned()).map_err(XrpcError::internal)
}

fn uri(state: &AppState, collection: &str, rkey: &str) -> String {
    format!("at://{}/{collection}/{rkey}", state.did)
}

fn record_uri(state: &AppState, collection: &str, rkey: &str) -> Result<AtUri, XrpcError> {
    ours("record URI", AtUri::new(uri(state, collection, rkey)))
}

/// The `uri` and `cid` of a record the commit wrote.
fn written(state: &AppState, d: &Done) -> Result<(AtUri, CidString), XrpcError> {
    let cid = d
        .cid
        .ok_or_else(|| XrpcError::internal("a written record has no CID"))?;
    Ok((
        record_uri(state, &d.collection, &d.rkey)?,
        cid_string(&cid)?,
    ))
}

/// Resolves the planned writes against the current tree, applies them as
/// one commit and reports what each did. Runs under the lock.
fn commit(
    core: &mut Core,
    planned: Vec<Planned>,
    swap_commit: Option<Cid>,
) -> Result<(CommitInfo, Vec<Done>), XrpcError> {
    let mut writes = Vec::with_capacity(planned.len());
    for p in planned {
        writes.push(match p {
            Planned::Create {
                collection,
                rkey,
                value,
            } => {
                let rkey = match rkey {
                    Some(k) => k,
                    None => core
                        .clock
                        .next_tid()
                        .map_err(XrpcError::internal)?
                        .to_string(),
                };
                Write::Create {
                    collection,
                    rkey,
                    value,
                }
            }
            Planned::Put {
                collection,
                rkey,
                value,
                swap,
            } => {
                let current = core.repo().get_cid(&collection, &rkey)?;
                let path = format!("{collection}/{rkey}");
                match (swap, current) {
                    (Swap::Absent, Some(found)) => {
                        return Err(XrpcError::named(
                            "InvalidSwap",
                            format!("record {path} exists ({found}); swapRecord was null"),
                        ));
                    }
                    (Swap::Is(expected), None) => {
                        return Err(XrpcError::named(
                            "InvalidSwap",
                            format!("record {path} is absent, not {expected}"),
                        ));
                    }
                    (Swap::Absent | Swap::Any, None) => Write::Create {
                        collection,
                        rkey,
                        value,
                    },
                    // The swap is checked again by `apply_with`, on the
                    // tree as the earlier writes of the batch left it.
                    (swap, Some(_)) => Write::Update {
                        collection,
                        rkey,
                        value,
                        swap: match swap {
                            Swap::Is(c) => Some(c),
                            _ => None,
                        },
                    },
                }
            }
            Planned::Update {
                collection,
                rkey,
                value,
            } => Write::Update {
                collection,
                rkey,
                value,
                swap: None,
            },
            Planned::Delete {
                collection,
                rkey,
                swap,
            } => Write::Delete {
                collection,
                rkey,
                swap,
            },
        });
    }
    check_blob_refs(core, &writes)?;
    let info = core.repo_mut().apply_with(&writes, swap_commit)?;
    // The event log's followers read the ops from the commit's event,
    // which a `tooBig` commit lacks: keep them here.
    core.hints.record(info.head.commit, &info.ops);
    let mut done = Vec::with_capacity(writes.len());
    for w in &writes {
        let cid = match w {
            Write::Delete { .. } => None,
            Write::Create { value, .. } | Write::Update { value, .. } => {
                match core.repo().get_cid(w.collection(), w.rkey())? {
                    Some(cid) => Some(cid),
                    // A later write of the batch deleted it: its own CID,
                    // as the reference PDS answers (the result needs one).
                    None => Some(record_cid(value).map_err(XrpcError::internal)?),
                }
            }
        };
        done.push(Done {
            collection: w.collection().to_owned(),
            rkey: w.rkey().to_owned(),
            cid,
        });
    }
    Ok((info, done))
}

/// Every blob a created or updated record references must be one a record
/// already references, or an upload whose size and MIME type the reference
/// repeats; otherwise the write is refused with the reference PDS's names
/// (`BlobNotFound`, `InvalidMimeType`, `InvalidSize`) before anything is
/// written. Runs under the lock, so no sweep deletes a blob in between.
fn check_blob_refs(core: &Core, writes: &[Write]) -> Result<(), XrpcError> {
    for w in writes {
        let value = match w {
            Write::Create { value, .. } | Write::Update { value, .. } => value,
            Write::Delete { .. } => continue,
        };
        let refs = blob_refs_in(value);
        if refs.is_empty() {
            continue;
        }
        // A record that is invalid anyway gets that error, as the reference
        // PDS validates before it looks at blobs (a malformed blob ref is
        // `InvalidRecord`/`InvalidRequest`, not `BlobNotFound`).
        prepare_record(core.repo().lexicons(), w.collection(), w.rkey(), value)
            .map_err(RepoError::from)?;
        for r in refs {
            if core.blob_refs.is_referenced(&r.cid) {
                continue;
            }
            let Some(stored) = core.blobs.meta(&r.cid).map_err(XrpcError::internal)? else {
                return Err(XrpcError::named(
                    "BlobNotFound",
                    format!("Could not find blob: {}", r.cid),
                ));
            };
            if r.mime.as_deref() != Some(stored.mime.as_str()) {
                return Err(XrpcError::named(
                    "InvalidMimeType",
                    format!(
                        "Referenced Mimetype does not match stored blob. Expected: {}, Got: {}",
                        stored.mime,
                        r.mime.as_deref().unwrap_or("(none)")
                    ),
                ));
            }
            if r.size != Some(stored.size) {
                return Err(XrpcError::named(
                    "InvalidSize",
                    format!(
                        "Referenced Size does not match stored blob. Expected: {}, Got: {}",
                        stored.size,
                        r.size.map_or("(none)".into(), |n| n.to_string())
                    ),
                ));
            }
        }
    }
    Ok(())
}

async fn run_commit(
    state: &Arc<AppState>,
    planned: Vec<Planned>,
    swap_commit: Option<Cid>,
) -> Result<(CommitInfo, Vec<Done>), XrpcError> {
    let (info, done) = state
        .with_core(move |core| commit(core, planned, swap_commit))
        .await?;
    Ok((info, done))
}

fn commit_meta(info: &CommitInfo) -> Result<CommitMeta, XrpcError> {
    Ok(CommitMeta {
        cid: cid_string(&info.head.commit)?,
        rev: rev(&info.head.rev)?,
        extra: Default::default(),
    })
}

pub async fn create_record(state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
    require_access(state, &req)?;
    let mut body = write_body(state, &req)?;
    null_as_absent(&mut body, &["record"]);
    let record = take_record(&mut body, "record");
    let input: CreateRecordInput = decode_input(body)?;
    let record = required(record, "createRecord")?;
    let collection = input.collection.into_string();
    check_validate(state, &collection, input.validate)?;
    let swap_commit = cid_param("swapCommit", input.swap_commit.as_ref())?;
    let planned = vec![Planned::Create {
        collection,
        rkey: input.rkey.map(RecordKey::into_string),
        value: record,
    }];
    let (info, done) = run_commit(state, planned, swap_commit).await?;
    let (uri, cid) = written(state, &done[0])?;
    Ok(Json(CreateRecordOutput {
        uri,
        cid,
        commit: Some(commit_meta(&info)?),
        validation_status: Some(validation_status(state, &done[0].collection)?),
        extra: Default::default(),
    })
    .into_response())
}

pub async fn put_record(state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
    require_access(state, &req)?;
    let mut body = write_body(state, &req)?;
    // A null `swapRecord` is "must not exist", not absent.
    null_as_absent(&mut body, &["record", "swapRecord"]);
    let record = take_record(&mut body, "record");
    let input: PutRecordInput = decode_input(body)?;
    let record = required(record, "putRecord")?;
    let (collection, rkey) = (input.collection.into_string(), input.rkey.into_string());
    check_validate(state, &collection, input.validate)?;
    let swap = match &input.swap_record {
        None => Swap::Any,
        Some(None) => Swap::Absent,
        Some(Some(cid)) => Swap::Is(cid_of("swapRecord", cid)?),
    };
    let swap_commit = cid_param("swapCommit", input.swap_commit.as_ref())?;
    // The record already stored as given: a no-op without a commit (the
    // swaps are not checked), as the reference PDS answers it. `gelstore
    // sync` relies on this for its create-if-absent retries.
    if let Ok(cid) = record_cid(&record) {
        let key = (collection.clone(), rkey.clone());
        let current = state
            .with_core(move |core| Ok(core.repo().get_cid(&key.0, &key.1)?))
            .await?;
        if current == Some(cid) {
            return Ok(Json(PutRecordOutput {
                uri: record_uri(state, &collection, &rkey)?,
                cid: cid_string(&cid)?,
                commit: None,
                validation_status: Some(validation_status(state, &collection)?),
                extra: Default::default(),
            })
            .into_response());
        }
    }
    let planned = vec![Planned::Put {
        collection,
        rkey,
        value: record,
        swap,
    }];
    let (info, done) = run_commit(state, planned, swap_commit).await?;
    let (uri, cid) = written(state, &done[0])?;
    Ok(Json(PutRecordOutput {
        uri,
        cid,
        commit: Some(commit_meta(&info)?),
        validation_status: Some(validation_status(state, &done[0].collection)?),
        extra: Default::default(),
    })
    .into_response())
}

pub async fn delete_record(state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
    require_access(state, &req)?;
    let mut body = write_body(state, &req)?;
    null_as_absent(&mut body, &[]);
    let input: DeleteRecordInput = decode_input(body)?;
    let swap = cid_param("swapRecord", input.swap_record.as_ref())?;
    let swap_commit = cid_param("swapCommit", input.swap_commit.as_ref())?;
    let (collection, rkey) = (input.collection.into_string(), input.rkey.into_string());
    let result = state
        .with_core(move |core| {
            // Deleting what is not there is a no-op without a commit (as on
            // the reference PDS), unless the caller expected a record.
            if swap.is_none() && core.repo().get_cid(&collection, &rkey)?.is_none() {
                return Ok(None);
            }
            let planned = vec![Planned::Delete {
                collection,
                rkey,
                swap,
            }];
            commit(core, planned, swap_commit).map(|(info, _)| Some(info))
        })
        .await?;
    Ok(Json(DeleteRecordOutput {
        commit: result.as_ref().map(commit_meta).transpose()?,
        extra: Default::default(),
    })
    .into_response())
}

/// One applyWrites write as planned, with its `value` as set aside.
fn plan(
    state: &AppState,
    i: usize,
    op: WriteOp,
    value: Option<Value>,
    validate: Option<bool>,
) -> Result<(Planned, Kind), XrpcError> {
    let what = format!("writes/{i}");
    Ok(match op {
        WriteOp::Create(w) => {
            check_validate(state, &w.collection, validate)?;
            let planned = Planned::Create {
                collection: w.collection.into_string(),
                rkey: w.rkey.map(RecordKey::into_string),
                value: required(value, &what)?,
            };
            (planned, Kind::Create)
        }
        WriteOp::Update(w) => {
            check_validate(state, &w.collection, validate)?;
            let planned = Planned::Update {
                collection: w.collection.into_string(),
                rkey: w.rkey.into_string(),
                value: required(value, &what)?,
            };
            (planned, Kind::Update)
        }
        WriteOp::Delete(w) => {
            check_validate(state, &w.collection, validate)?;
            let planned = Planned::Delete {
                collection: w.collection.into_string(),
                rkey: w.rkey.into_string(),
                swap: None,
            };
            (planned, Kind::Delete)
        }
    })
}

/// What one applyWrites write did, as its result.
fn write_result(state: &AppState, d: &Done, kind: Kind) -> Result<WriteResult, XrpcError> {
    let extra = Default::default();
    Ok(match kind {
        Kind::Delete => WriteResult::DeleteResult(apply::DeleteResult { extra }),
        Kind::Create => {
            let (uri, cid) = written(state, d)?;
            let validation_status = Some(validation_status(state, &d.collection)?);
            WriteResult::CreateResult(apply::CreateResult {
                uri,
                cid,
                validation_status,
                extra,
            })
        }
        Kind::Update => {
            let (uri, cid) = written(state, d)?;
            let validation_status = Some(validation_status(state, &d.collection)?);
            WriteResult::UpdateResult(apply::UpdateResult {
                uri,
                cid,
                validation_status,
                extra,
            })
        }
    })
}

pub async fn apply_writes(state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
    require_access(state, &req)?;
    let mut body = write_body(state, &req)?;
    null_as_absent(&mut body, &[]);
    let mut values = take_values(&mut body).into_iter();
    let input: ApplyWritesInput = decode_input(body)?;
    if input.writes.len() > state.limits.writes {
        return Err(XrpcError::invalid_request(format!(
            "Too many writes. Max: {}",
            state.limits.writes
        )));
    }
    let swap_commit = cid_param("swapCommit", input.swap_commit.as_ref())?;
    let mut planned = Vec::with_capacity(input.writes.len());
    let mut kinds = Vec::with_capacity(input.writes.len());
    for (i, op) in input.writes.into_iter().enumerate() {
        let (write, kind) = plan(state, i, op, values.next().flatten(), input.validate)?;
        planned.push(write);
        kinds.push(kind);
    }
    if planned.is_empty() {
        return Err(XrpcError::invalid_request("writes must not be empty"));
    }
    let (info, done) = run_commit(state, planned, swap_commit).await?;
    let results = done
        .iter()
        .zip(kinds)
        .map(|(d, kind)| write_result(state, d, kind))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Json(ApplyWritesOutput {
        commit: Some(commit_meta(&info)?),
        results: Some(results),
        extra: Default::default(),
    })
    .into_response())
}

pub async fn get_record(state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
    let params: repo_::get_record::GetRecordParams = req.params()?;
    state.own_repo(params.repo.as_str())?;
    let (collection, rkey) = (params.collection.into_string(), params.rkey.into_string());
    let want = cid_param("cid", params.cid.as_ref())?;
    let key = (collection.clone(), rkey.clone());
    let entry = state
        .with_core(move |core| Ok(core.repo().get(&key.0, &key.1)?))
        .await?;
    let not_found = || {
        XrpcError::named(
            repo_::get_record::GetRecordError::RecordNotFound.as_str(),
            format!(
                "Could not locate record: {}",
                uri(state, &collection, &rkey)
            ),
        )
    };
    let Some(entry) = entry else {
        return Err(not_found());
    };
    if want.is_some_and(|c| c != entry.cid) {
        return Err(not_found());
    }
    Ok(Json(GetRecordOutput {
        uri: record_uri(state, &collection, &rkey)?,
        cid: Some(cid_string(&entry.cid)?),
        value: data("record", &entry.value)?,
        extra: Default::default(),
    })
    .into_response())
}

pub async fn list_records(state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
    let params: repo_::list_records::ListRecordsParams = req.params()?;
    state.own_repo(params.repo.as_str())?;
    let limit = params.limit_or_default() as usize;
    let reverse = params.reverse.unwrap_or(false);
    let collection = params.collection.into_string();
    // An empty `cursor=` is no cursor, as the reference PDS reads it
    // (clients that build the query by hand send it on the first page).
    let cursor = params.cursor.filter(|c| !c.is_empty());
    let did = state.did.clone();
    let (records, next) = state
        .with_core(move |core| {
            let prefix = format!("{collection}/");
            let mut page: Vec<(String, Cid)> = Vec::with_capacity(limit + 1);
            // Newest first by default (record keys are mostly TIDs);
            // `reverse` lists oldest first, as the reference PDS does.
            if reverse {
                let start = match &cursor {
                    Some(c) => format!("{prefix}{c}"),
                    None => prefix.clone(),
                };
                for item in core.repo().mst().entries_from(&start) {
                    let (key, cid) = item.map_err(RepoError::from)?;
                    if !key.starts_with(&prefix) {
                        break;
                    }
                    if cursor.is_some() && key == start {
                        continue;
                    }
                    page.push((key, cid));
                    if page.len() > limit {
                        break;
                    }
                }
            } else {
                // A reverse MST walk from the cursor (or the collection's
                // end): the page costs O(log n + limit), not O(collection).
                for item in core.repo().list_rev(&collection, cursor.as_deref())? {
                    page.push(item?);
                    if page.len() > limit {
                        break;
                    }
                }
            }
            let more = page.len() > limit;
            page.truncate(limit);
            let next = if more {
                page.last().map(|(k, _)| k[prefix.len()..].to_owned())
            } else {
                None
            };
            let mut records = Vec::with_capacity(page.len());
            for (key, cid) in page {
                let rkey = &key[prefix.len()..];
                let Some(entry) = core.repo().get(&collection, rkey)? else {
                    continue;
                };
                records.push(list::Record {
                    uri: ours("record URI", AtUri::new(format!("at://{did}/{key}")))?,
                    cid: cid_string(&cid)?,
                    value: data("record", &entry.value)?,
                    extra: Default::default(),
                });
            }
            Ok((records, next))
        })
        .await?;
    Ok(Json(ListRecordsOutput {
        cursor: next,
        records,
        extra: Default::default(),
    })
    .into_response())
}

pub async fn describe_repo(state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
    let params: repo_::describe_repo::DescribeRepoParams = req.params()?;
    state.own_repo(params.repo.as_str())?;
    let collections = state
        .with_core(|core| {
            let mut out: Vec<Nsid> = Vec::new();
            let mut start = String::new();
            loop {
                // Jump over each collection: every key of `c/…` sorts
                // before `c0` ('/' + 1 = '0').
                let next = core.repo().mst().entries_from(&start).next();
                let Some(item) = next else { break };
                let (key, _) = item.map_err(RepoError::from)?;
                let Some((c, _)) = key.split_once('/') else {
                    break;
                };
                out.push(ours("collection", Nsid::new(c))?);
                start = format!("{c}0");
            }
            Ok(out)
        })
        .await?;
    Ok(Json(DescribeRepoOutput {
        handle: our_handle(state)?,
        did: our_did(state)?,
        did_doc: data("DID document", &state.did_doc)?,
        collections,
        handle_is_correct: true,
        extra: Default::default(),
    })
    .into_response())
}

pub async fn upload_blob(state: &Arc<AppState>, req: Request) -> Result<Response, XrpcError> {
    require_access(state, &req)?;
    let mime = content_type(&req.headers).unwrap_or_else(|| "application/octet-stream".into());
    let size = req.body.len();
    // Written outside the lock; only the move into place takes it.
    let blobs = state.blobs.clone();
    let staged = tokio::task::spawn_blocking(move || blobs.stage(&req.body))
        .await
        .map_err(XrpcError::internal)?
        .map_err(XrpcError::internal)?;
    let cid = staged.cid;
    let stored_mime = mime.clone();
    state
        .with_core(move |core| {
            let referenced = core.blob_refs.is_referenced(&staged.cid);
            core.blobs
                .place(staged, &stored_mime, referenced)
                .map_err(XrpcError::internal)
        })
        .await?;
    Ok(Json(UploadBlobOutput {
        blob: BlobRef::Typed(Blob {
            r#ref: CidLink(cid),
            mime_type: mime,
            size: i64::try_from(size).map_err(XrpcError::internal)?,
        }),
        extra: Default::default(),
    })
    .into_response())
}
