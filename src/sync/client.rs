//! The XRPC client: `atrium-api`'s `AtpServiceClient` over
//! `atrium-xrpc-client`'s reqwest client (rustls), with the session's access
//! token, driven by a current-thread tokio runtime so callers stay blocking.
//!
//! Every request goes through [`Auth::send`] (`auth.rs`), which refreshes
//! an expired session once and repeats the request.

use std::sync::Arc;
use std::time::Duration;

use atrium_api::client::AtpServiceClient;
use atrium_api::com::atproto::{repo, server, sync};
use atrium_api::types::string::{AtIdentifier, Did, Nsid, RecordKey};
use atrium_api::xrpc::http::{Request, Response};
use atrium_api::xrpc::types::AuthorizationToken;
use atrium_api::xrpc::{HttpClient, XrpcClient};
use atrium_xrpc_client::reqwest::{ReqwestClient, ReqwestClientBuilder};
use serde_json::Value;

use super::SyncError;
use super::auth::{Auth, BoxError, RefreshRefused, Tokens};
use super::progress::{NoProgress, Progress};
use crate::net::error_chain;

/// The reqwest client plus the bearer tokens of the session, once logged in.
pub(crate) struct AuthClient {
    inner: ReqwestClient,
    http: reqwest::Client,
    base: String,
    auth: Arc<Auth>,
    progress: Arc<dyn Progress>,
}

/// The one download big enough to show progress for.
const GET_REPO_PATH: &str = "/xrpc/com.atproto.sync.getRepo";
/// The longest a `getRepo` download may take (other calls: 120 s).
const GET_REPO_TIMEOUT: Duration = Duration::from_secs(3600);
/// The longest a `getRepo` download may stall.
const GET_REPO_IDLE: Duration = Duration::from_secs(60);
/// The largest `getRepo` body taken: the CAR reader's own limit.
fn max_repo_bytes() -> usize {
    usize::try_from(crate::repo::car::CarLimits::default().max_total_size).unwrap_or(usize::MAX)
}

impl HttpClient for AuthClient {
    async fn send_http(&self, request: Request<Vec<u8>>) -> Result<Response<Vec<u8>>, BoxError> {
        self.auth
            .send(request, |request| async {
                if request.uri().path() == GET_REPO_PATH {
                    self.send_counting(request).await
                } else {
                    self.inner.send_http(request).await
                }
            })
            .await
    }
}

impl AuthClient {
    /// Like `ReqwestClient::send_http`, but reads the body chunk by chunk
    /// and reports each chunk's size to the progress hooks.
    async fn send_counting(
        &self,
        request: Request<Vec<u8>>,
    ) -> Result<Response<Vec<u8>>, BoxError> {
        let mut request: reqwest::Request = request.try_into()?;
        // A large repository over a slow link takes long: no total limit
        // beyond an hour, but a stall of GET_REPO_IDLE ends it.
        *request.timeout_mut() = Some(GET_REPO_TIMEOUT);
        let mut response = self.http.execute(request).await?;
        let mut builder = Response::builder().status(response.status());
        for (k, v) in response.headers() {
            builder = builder.header(k, v);
        }
        let success = response.status().is_success();
        if success {
            self.progress.pull_started(response.content_length());
        }
        let mut body = Vec::new();
        let max = max_repo_bytes();
        let read = async {
            loop {
                let chunk = tokio::time::timeout(GET_REPO_IDLE, response.chunk())
                    .await
                    .map_err(|_| {
                        format!(
                            "getRepo: no data for {} s after {} bytes",
                            GET_REPO_IDLE.as_secs(),
                            body.len()
                        )
                    })?
                    .map_err(|e| e.to_string())?;
                let Some(chunk) = chunk else {
                    return Ok(());
                };
                // Over what the CAR reader takes: refused now, not after
                // buffering all of it.
                if body.len() + chunk.len() > max {
                    return Err(format!(
                        "getRepo: the repository is over {max} bytes, the most a CAR may hold here"
                    ));
                }
                if success {
                    self.progress.pulled(chunk.len() as u64);
                }
                body.extend_from_slice(&chunk);
            }
        }
        .await;
        if success {
            self.progress.pull_finished();
        }
        read?;
        builder.body(body).map_err(Into::into)
    }
}

impl XrpcClient for AuthClient {
    fn base_uri(&self) -> String {
        self.base.clone()
    }

    /// The access token, or the refresh token for refreshSession.
    async fn authorization_token(&self, is_refresh: bool) -> Option<AuthorizationToken> {
        let token = if is_refresh {
            self.auth.refresh_token()
        } else {
            self.auth.access()
        };
        token.map(AuthorizationToken::Bearer)
    }
}

/// A logged-in session with a PDS.
pub struct Session {
    rt: tokio::runtime::Runtime,
    api: AtpServiceClient<AuthClient>,
    /// The HTTP client as atrium's `HttpClient`, for the one call posted
    /// as JSON.
    plain: ReqwestClient,
    auth: Arc<Auth>,
    progress: Arc<dyn Progress>,
    service: String,
    did: String,
    handle: String,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("service", &self.service)
            .field("did", &self.did)
            .field("handle", &self.handle)
            .finish_non_exhaustive()
    }
}

/// Turns an atrium error into a named [`SyncError`].
fn xrpc_error<E: std::fmt::Debug + std::fmt::Display>(
    service: &str,
    method: &'static str,
    e: atrium_api::xrpc::Error<E>,
) -> SyncError {
    use atrium_api::xrpc::Error;
    use atrium_api::xrpc::error::XrpcErrorKind;
    match e {
        Error::XrpcResponse(r) => {
            let (error, message) = match r.error {
                Some(XrpcErrorKind::Undefined(body)) => (body.error, body.message),
                // atrium shows a declared error as `Name: message`.
                Some(XrpcErrorKind::Custom(c)) => {
                    let text = c.to_string();
                    match text.split_once(": ") {
                        Some((name, msg)) => (Some(name.to_owned()), Some(msg.to_owned())),
                        None => (Some(text), None),
                    }
                }
                None => (None, None),
            };
            SyncError::Xrpc {
                method,
                status: r.status.as_u16(),
                error: error.unwrap_or_default(),
                message: message.unwrap_or_default(),
            }
        }
        Error::HttpClient(e) => transport_error(service, &*e),
        other => SyncError::Xrpc {
            method,
            status: 0,
            error: "BadResponse".into(),
            message: other.to_string(),
        },
    }
}

/// An error of the HTTP layer: a refused session refresh, or the PDS
/// could not be reached.
fn transport_error(
    service: &str,
    e: &(dyn std::error::Error + Send + Sync + 'static),
) -> SyncError {
    match e.downcast_ref::<RefreshRefused>() {
        Some(r) => SyncError::SessionExpired {
            service: service.to_owned(),
            cause: r.cause.clone(),
            refresh: r.answer.clone(),
        },
        None => SyncError::Unreachable {
            url: service.to_owned(),
            reason: error_chain(e),
        },
    }
}

pub(crate) fn http_client() -> Result<reqwest::Client, SyncError> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(120))
        .build()
        .map_err(|e| SyncError::Unreachable {
            url: String::new(),
            reason: error_chain(&e),
        })
}

impl Session {
    /// Logs in (`com.atproto.server.createSession`) with a handle or DID and
    /// a password.
    pub fn login(service: &str, identifier: &str, password: &str) -> Result<Session, SyncError> {
        Session::login_with(service, identifier, password, Arc::new(NoProgress))
    }

    /// [`Session::login`], reporting the push and the download to
    /// `progress`.
    pub fn login_with(
        service: &str,
        identifier: &str,
        password: &str,
        progress: Arc<dyn Progress>,
    ) -> Result<Session, SyncError> {
        let service = service.trim_end_matches('/').to_owned();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| SyncError::Io {
                what: "start the async runtime".into(),
                reason: e.to_string(),
            })?;
        let http = http_client()?;
        let inner = ReqwestClientBuilder::new(&service)
            .client(http.clone())
            .build();
        let auth = Arc::new(Auth::new(http.clone(), &service));
        let api = AtpServiceClient::new(AuthClient {
            inner: inner.clone(),
            http: http.clone(),
            base: service.clone(),
            auth: auth.clone(),
            progress: progress.clone(),
        });
        let input = server::create_session::InputData {
            allow_takendown: None,
            auth_factor_token: None,
            identifier: identifier.to_owned(),
            password: password.to_owned(),
        };
        let out = rt
            .block_on(api.service.com.atproto.server.create_session(input.into()))
            .map_err(
                |e| match xrpc_error(&service, server::create_session::NSID, e) {
                    SyncError::Xrpc { status: 401, .. } => SyncError::BadCredentials {
                        identifier: identifier.to_owned(),
                        service: service.clone(),
                    },
                    other => other,
                },
            )?;
        auth.set(Tokens {
            access: out.data.access_jwt.clone(),
            refresh: out.data.refresh_jwt.clone(),
            did: out.data.did.to_string(),
        });
        Ok(Session {
            rt,
            plain: inner,
            auth,
            progress,
            did: out.data.did.as_str().to_owned(),
            handle: out.data.handle.as_str().to_owned(),
            api,
            service,
        })
    }

    /// The account's DID.
    pub fn did(&self) -> &str {
        &self.did
    }

    /// The account's handle.
    pub fn handle(&self) -> &str {
        &self.handle
    }

    /// The PDS URL.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// Where this session reports progress.
    pub fn progress(&self) -> &dyn Progress {
        &*self.progress
    }

    /// Passes a write call's result on, telling the progress hooks about
    /// its `writes` when the PDS acknowledged them.
    fn acknowledged<T>(&self, writes: usize, result: Result<T, SyncError>) -> Result<T, SyncError> {
        if result.is_ok() {
            self.progress.pushed(writes as u64);
        }
        result
    }

    fn repo_id(&self) -> Result<AtIdentifier, SyncError> {
        Did::new(self.did.clone())
            .map(AtIdentifier::Did)
            .map_err(|e| SyncError::Xrpc {
                method: server::create_session::NSID,
                status: 0,
                error: "BadDid".into(),
                message: format!("{e}: {}", self.did),
            })
    }

    /// `com.atproto.repo.applyWrites` (one commit). With `swap_commit`, the
    /// PDS refuses (`InvalidSwap`) unless its head is still that commit.
    pub(crate) fn apply_writes(
        &self,
        writes: Vec<repo::apply_writes::InputWritesItem>,
        swap_commit: Option<cid::Cid>,
    ) -> Result<repo::apply_writes::OutputData, SyncError> {
        let count = writes.len();
        let input = repo::apply_writes::InputData {
            repo: self.repo_id()?,
            swap_commit: swap_commit.map(atrium_api::types::string::Cid::new),
            validate: None,
            writes,
        };
        let result = self
            .rt
            .block_on(self.api.service.com.atproto.repo.apply_writes(input.into()))
            .map(|o| o.data)
            .map_err(|e| xrpc_error(&self.service, repo::apply_writes::NSID, e));
        self.acknowledged(count, result)
    }

    /// `com.atproto.repo.putRecord` replacing the record whose CID is
    /// `swap` (the PDS refuses with `InvalidSwap` if it changed). Returns
    /// the new CID.
    pub(crate) fn update_swapped(
        &self,
        collection: Nsid,
        rkey: RecordKey,
        record: atrium_api::types::Unknown,
        swap: cid::Cid,
    ) -> Result<String, SyncError> {
        let input = repo::put_record::InputData {
            collection,
            record,
            repo: self.repo_id()?,
            rkey,
            swap_commit: None,
            swap_record: Some(atrium_api::types::string::Cid::new(swap)),
            validate: None,
        };
        let result = self
            .rt
            .block_on(self.api.service.com.atproto.repo.put_record(input.into()))
            .map(|o| o.data.cid.as_ref().to_string())
            .map_err(|e| xrpc_error(&self.service, repo::put_record::NSID, e));
        self.acknowledged(1, result)
    }

    /// `com.atproto.repo.putRecord` of `record` (JSON) over the version
    /// whose CID is `swap`.
    pub(crate) fn put_swapped(
        &self,
        collection: &str,
        rkey: &str,
        record: &Value,
        swap: cid::Cid,
    ) -> Result<String, SyncError> {
        self.put_json(collection, rkey, record, Value::String(swap.to_string()))
    }

    /// `com.atproto.repo.putRecord` as JSON, `swap_record` as given
    /// (`null`: only if absent).
    fn put_json(
        &self,
        collection: &str,
        rkey: &str,
        record: &Value,
        swap_record: Value,
    ) -> Result<String, SyncError> {
        let body = serde_json::json!({
            "repo": self.did,
            "collection": collection,
            "rkey": rkey,
            "record": record,
            "swapRecord": swap_record,
        });
        let result = self.post_json(repo::put_record::NSID, &body);
        self.acknowledged(1, result)
    }

    /// `com.atproto.repo.getRecord` in this account's repository: the
    /// record's value and CID, or `None` when there is none.
    pub(crate) fn get_record(
        &self,
        collection: &str,
        rkey: &str,
    ) -> Result<Option<(Value, cid::Cid)>, SyncError> {
        const METHOD: &str = repo::get_record::NSID;
        let bad = |e: &str| bad_request(METHOD, format!("{collection}/{rkey}: {e}"));
        let params = repo::get_record::ParametersData {
            cid: None,
            collection: Nsid::new(collection.to_owned()).map_err(&bad)?,
            repo: self.repo_id()?,
            rkey: RecordKey::new(rkey.to_owned()).map_err(&bad)?,
        };
        match self
            .rt
            .block_on(self.api.service.com.atproto.repo.get_record(params.into()))
            .map_err(|e| xrpc_error(&self.service, METHOD, e))
        {
            Ok(out) => {
                let value =
                    serde_json::to_value(&out.data.value).map_err(|e| bad(&e.to_string()))?;
                let cid = out
                    .data
                    .cid
                    .map(|c| *c.as_ref())
                    .ok_or_else(|| bad("the answer has no cid"))?;
                Ok(Some((value, cid)))
            }
            Err(SyncError::Xrpc { error, .. }) if error == "RecordNotFound" => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `com.atproto.repo.listRecords` of one collection of this account's
    /// repository, every page: `(rkey, value, cid)` in the PDS's order.
    pub(crate) fn list_records(
        &self,
        collection: &str,
    ) -> Result<Vec<(String, Value, cid::Cid)>, SyncError> {
        const METHOD: &str = "com.atproto.repo.listRecords";
        let bad = |e: &str| bad_request(METHOD, format!("{collection}: {e}"));
        let nsid = Nsid::new(collection.to_owned()).map_err(&bad)?;
        let mut out = Vec::new();
        let mut cursor = None;
        loop {
            let params = repo::list_records::ParametersData {
                collection: nsid.clone(),
                cursor: cursor.take(),
                limit: Some(atrium_api::types::LimitedNonZeroU8::<100>::MAX),
                repo: self.repo_id()?,
                reverse: None,
            };
            let page = self
                .rt
                .block_on(
                    self.api
                        .service
                        .com
                        .atproto
                        .repo
                        .list_records(params.into()),
                )
                .map_err(|e| xrpc_error(&self.service, METHOD, e))?
                .data;
            let count = page.records.len();
            for record in page.records {
                let rkey = record.uri.rsplit('/').next().unwrap_or_default().to_owned();
                let value = serde_json::to_value(&record.value).map_err(|e| bad(&e.to_string()))?;
                out.push((rkey, value, *record.cid.as_ref()));
            }
            match page.cursor {
                Some(next) if count > 0 => cursor = Some(next),
                _ => return Ok(out),
            }
        }
    }

    /// `com.atproto.repo.deleteRecord` of the record whose CID is `swap`.
    pub(crate) fn delete_swapped(
        &self,
        collection: Nsid,
        rkey: RecordKey,
        swap: cid::Cid,
    ) -> Result<(), SyncError> {
        let input = repo::delete_record::InputData {
            collection,
            repo: self.repo_id()?,
            rkey,
            swap_commit: None,
            swap_record: Some(atrium_api::types::string::Cid::new(swap)),
        };
        let result = self
            .rt
            .block_on(
                self.api
                    .service
                    .com
                    .atproto
                    .repo
                    .delete_record(input.into()),
            )
            .map(|_| ())
            .map_err(|e| xrpc_error(&self.service, repo::delete_record::NSID, e));
        self.acknowledged(1, result)
    }

    /// `com.atproto.repo.putRecord` with `"swapRecord": null`: create the
    /// record if the key is free. atrium's `InputData` cannot send an
    /// explicit `null` (it omits `None`, which would mean "overwrite"), so
    /// this one call is posted as JSON on the same HTTP client. Returns the
    /// record's CID.
    pub(crate) fn create_if_absent(
        &self,
        collection: &str,
        rkey: &str,
        record: &Value,
    ) -> Result<String, SyncError> {
        self.put_json(collection, rkey, record, Value::Null)
    }

    /// POSTs `body` to XRPC `method` with the access token (through
    /// [`Auth::send`], like every other call); returns the answer's `cid`.
    fn post_json(&self, method: &'static str, body: &Value) -> Result<String, SyncError> {
        let bytes = serde_json::to_vec(body).map_err(|e| bad_request(method, e.to_string()))?;
        let json = self.post(method, "application/json", bytes)?;
        json["cid"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| SyncError::Xrpc {
                method,
                status: 200,
                error: "BadResponse".into(),
                message: format!("no cid in {json}"),
            })
    }

    /// POSTs `bytes` as `content_type` to XRPC `method` with the access
    /// token; returns the answer as JSON.
    fn post(
        &self,
        method: &'static str,
        content_type: &str,
        bytes: Vec<u8>,
    ) -> Result<Value, SyncError> {
        let mut request = Request::builder()
            .method("POST")
            .uri(format!("{}/xrpc/{method}", self.service))
            .header("content-type", content_type);
        if let Some(token) = self.auth.access() {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let request = request
            .body(bytes)
            .map_err(|e| bad_request(method, e.to_string()))?;
        let response = self
            .rt
            .block_on(
                self.auth
                    .send(request, |r| async { self.plain.send_http(r).await }),
            )
            .map_err(|e| transport_error(&self.service, &*e))?;
        let status = response.status().as_u16();
        let text = String::from_utf8_lossy(response.body()).into_owned();
        let json: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if status != 200 {
            return Err(SyncError::Xrpc {
                method,
                status,
                error: json["error"].as_str().unwrap_or_default().to_owned(),
                message: json["message"].as_str().unwrap_or(&text).to_owned(),
            });
        }
        Ok(json)
    }

    /// `com.atproto.repo.uploadBlob`: `bytes` as a blob of type `mime`;
    /// returns the CID the PDS stored them under.
    pub(crate) fn upload_blob(&self, bytes: Vec<u8>, mime: &str) -> Result<cid::Cid, SyncError> {
        const METHOD: &str = repo::upload_blob::NSID;
        let json = self.post(METHOD, mime, bytes)?;
        json["blob"]["ref"]["$link"]
            .as_str()
            .and_then(|l| crate::model::parse_cid(l).ok())
            .ok_or_else(|| SyncError::Xrpc {
                method: METHOD,
                status: 200,
                error: "BadResponse".into(),
                message: format!("no blob ref in {json}"),
            })
    }

    /// `com.atproto.sync.getBlob`: the blob's bytes, or `None` when the PDS
    /// does not have it.
    pub(crate) fn get_blob(&self, cid: &cid::Cid) -> Result<Option<Vec<u8>>, SyncError> {
        const METHOD: &str = sync::get_blob::NSID;
        let params = sync::get_blob::ParametersData {
            cid: atrium_api::types::string::Cid::new(*cid),
            did: self.did_param(METHOD)?,
        };
        match self
            .rt
            .block_on(self.api.service.com.atproto.sync.get_blob(params.into()))
            .map_err(|e| xrpc_error(&self.service, METHOD, e))
        {
            Ok(bytes) => Ok(Some(bytes)),
            Err(SyncError::Xrpc { status, error, .. })
                if status == 404 || error == "BlobNotFound" =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// `com.atproto.sync.getRepo`: the whole repository as a CAR.
    pub fn get_repo(&self) -> Result<Vec<u8>, SyncError> {
        let did = Did::new(self.did.clone()).map_err(|e| SyncError::Xrpc {
            method: sync::get_repo::NSID,
            status: 0,
            error: "BadDid".into(),
            message: e.to_string(),
        })?;
        let params = sync::get_repo::ParametersData { did, since: None };
        self.rt
            .block_on(self.api.service.com.atproto.sync.get_repo(params.into()))
            .map_err(|e| xrpc_error(&self.service, sync::get_repo::NSID, e))
    }
}

/// The replica's calls (see docs/sync.md): the remote head, `since` pulls and the
/// commit block of a push.
impl Session {
    fn did_param(&self, method: &'static str) -> Result<Did, SyncError> {
        Did::new(self.did.clone()).map_err(|e| SyncError::Xrpc {
            method,
            status: 0,
            error: "BadDid".into(),
            message: e.to_string(),
        })
    }

    /// `com.atproto.sync.getRepo` with `since`: the head commit and the
    /// blocks created after that rev (the whole repository without it).
    pub fn get_repo_since(&self, since: Option<&str>) -> Result<Vec<u8>, SyncError> {
        const METHOD: &str = sync::get_repo::NSID;
        let since = since
            .map(|s| {
                atrium_api::types::string::Tid::new(s.to_owned()).map_err(|e| SyncError::Xrpc {
                    method: METHOD,
                    status: 0,
                    error: "BadRev".into(),
                    message: e.to_string(),
                })
            })
            .transpose()?;
        let params = sync::get_repo::ParametersData {
            did: self.did_param(METHOD)?,
            since,
        };
        self.rt
            .block_on(self.api.service.com.atproto.sync.get_repo(params.into()))
            .map_err(|e| xrpc_error(&self.service, METHOD, e))
    }

    /// `com.atproto.sync.getLatestCommit`: the head commit's CID and rev.
    pub fn latest_commit(&self) -> Result<(cid::Cid, String), SyncError> {
        const METHOD: &str = sync::get_latest_commit::NSID;
        let params = sync::get_latest_commit::ParametersData {
            did: self.did_param(METHOD)?,
        };
        self.rt
            .block_on(
                self.api
                    .service
                    .com
                    .atproto
                    .sync
                    .get_latest_commit(params.into()),
            )
            .map(|o| (*o.data.cid.as_ref(), o.data.rev.as_str().to_owned()))
            .map_err(|e| xrpc_error(&self.service, METHOD, e))
    }

    /// `com.atproto.sync.getBlocks`: a CAR of the given blocks.
    pub(crate) fn get_blocks(&self, cids: &[cid::Cid]) -> Result<Vec<u8>, SyncError> {
        const METHOD: &str = sync::get_blocks::NSID;
        let params = sync::get_blocks::ParametersData {
            cids: cids
                .iter()
                .map(|c| atrium_api::types::string::Cid::new(*c))
                .collect(),
            did: self.did_param(METHOD)?,
        };
        self.rt
            .block_on(self.api.service.com.atproto.sync.get_blocks(params.into()))
            .map_err(|e| xrpc_error(&self.service, METHOD, e))
    }
}

fn bad_request(method: &'static str, reason: String) -> SyncError {
    SyncError::Xrpc {
        method,
        status: 0,
        error: "BadRequest".into(),
        message: reason,
    }
}
