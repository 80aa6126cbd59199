//! The XRPC client: `atrium-api`'s `AtpServiceClient` over
//! `atrium-xrpc-client`'s reqwest client (rustls), with the session's access
//! token, driven by a current-thread tokio runtime so callers stay blocking.

use std::sync::{Arc, RwLock};
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

/// The reqwest client plus the bearer token of the session, once logged in.
pub(crate) struct AuthClient {
    inner: ReqwestClient,
    base: String,
    token: Arc<RwLock<Option<String>>>,
}

impl HttpClient for AuthClient {
    async fn send_http(
        &self,
        request: Request<Vec<u8>>,
    ) -> Result<Response<Vec<u8>>, Box<dyn std::error::Error + Send + Sync + 'static>> {
        self.inner.send_http(request).await
    }
}

impl XrpcClient for AuthClient {
    fn base_uri(&self) -> String {
        self.base.clone()
    }

    async fn authorization_token(&self, _is_refresh: bool) -> Option<AuthorizationToken> {
        let token = self.token.read().unwrap_or_else(|e| e.into_inner());
        token.clone().map(AuthorizationToken::Bearer)
    }
}

/// A logged-in session with a PDS.
pub struct Session {
    rt: tokio::runtime::Runtime,
    api: AtpServiceClient<AuthClient>,
    http: reqwest::Client,
    token: Arc<RwLock<Option<String>>>,
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
                Some(XrpcErrorKind::Custom(c)) => (Some(c.to_string()), None),
                None => (None, None),
            };
            SyncError::Xrpc {
                method,
                status: r.status.as_u16(),
                error: error.unwrap_or_default(),
                message: message.unwrap_or_default(),
            }
        }
        Error::HttpClient(e) => SyncError::Unreachable {
            url: service.to_owned(),
            reason: error_chain(&*e),
        },
        other => SyncError::Xrpc {
            method,
            status: 0,
            error: "BadResponse".into(),
            message: other.to_string(),
        },
    }
}

/// An error and its sources, joined (reqwest hides the cause in `source`).
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
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
        let token = Arc::new(RwLock::new(None));
        let api = AtpServiceClient::new(AuthClient {
            inner,
            base: service.clone(),
            token: token.clone(),
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
                |e| match xrpc_error(&service, "com.atproto.server.createSession", e) {
                    SyncError::Xrpc { status: 401, .. } => SyncError::BadCredentials {
                        identifier: identifier.to_owned(),
                        service: service.clone(),
                    },
                    other => other,
                },
            )?;
        *token.write().unwrap_or_else(|e| e.into_inner()) = Some(out.data.access_jwt.clone());
        Ok(Session {
            rt,
            http,
            token,
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

    fn repo_id(&self) -> Result<AtIdentifier, SyncError> {
        Did::new(self.did.clone())
            .map(AtIdentifier::Did)
            .map_err(|e| SyncError::Xrpc {
                method: "com.atproto.server.createSession",
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
        let input = repo::apply_writes::InputData {
            repo: self.repo_id()?,
            swap_commit: swap_commit.map(atrium_api::types::string::Cid::new),
            validate: None,
            writes,
        };
        self.rt
            .block_on(self.api.service.com.atproto.repo.apply_writes(input.into()))
            .map(|o| o.data)
            .map_err(|e| xrpc_error(&self.service, "com.atproto.repo.applyWrites", e))
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
        self.rt
            .block_on(self.api.service.com.atproto.repo.put_record(input.into()))
            .map(|o| o.data.cid.as_ref().to_string())
            .map_err(|e| xrpc_error(&self.service, "com.atproto.repo.putRecord", e))
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
        self.rt
            .block_on(
                self.api
                    .service
                    .com
                    .atproto
                    .repo
                    .delete_record(input.into()),
            )
            .map(|_| ())
            .map_err(|e| xrpc_error(&self.service, "com.atproto.repo.deleteRecord", e))
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
        const METHOD: &str = "com.atproto.repo.putRecord";
        let body = serde_json::json!({
            "repo": self.did,
            "collection": collection,
            "rkey": rkey,
            "record": record,
            "swapRecord": null,
        });
        let token = self.token.read().unwrap_or_else(|e| e.into_inner()).clone();
        let url = format!("{}/xrpc/{METHOD}", self.service);
        let (status, text) = self.rt.block_on(async {
            let mut req = self.http.post(&url).json(&body);
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            let resp = req.send().await.map_err(|e| SyncError::Unreachable {
                url: self.service.clone(),
                reason: error_chain(&e),
            })?;
            let status = resp.status().as_u16();
            let text = resp.text().await.map_err(|e| SyncError::Unreachable {
                url: self.service.clone(),
                reason: error_chain(&e),
            })?;
            Ok::<_, SyncError>((status, text))
        })?;
        let json: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if status != 200 {
            return Err(SyncError::Xrpc {
                method: METHOD,
                status,
                error: json["error"].as_str().unwrap_or_default().to_owned(),
                message: json["message"].as_str().unwrap_or(&text).to_owned(),
            });
        }
        json["cid"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| SyncError::Xrpc {
                method: METHOD,
                status,
                error: "BadResponse".into(),
                message: format!("no cid in {text}"),
            })
    }

    /// `com.atproto.sync.getRepo`: the whole repository as a CAR.
    pub fn get_repo(&self) -> Result<Vec<u8>, SyncError> {
        let did = Did::new(self.did.clone()).map_err(|e| SyncError::Xrpc {
            method: "com.atproto.sync.getRepo",
            status: 0,
            error: "BadDid".into(),
            message: e.to_string(),
        })?;
        let params = sync::get_repo::ParametersData { did, since: None };
        self.rt
            .block_on(self.api.service.com.atproto.sync.get_repo(params.into()))
            .map_err(|e| xrpc_error(&self.service, "com.atproto.sync.getRepo", e))
    }

    /// `GET {plc}/{did}`: the account's DID document.
    pub fn did_document(&self, plc: &str) -> Result<Value, SyncError> {
        let url = format!("{}/{}", plc.trim_end_matches('/'), self.did);
        self.rt.block_on(async {
            let fail = |reason: String| SyncError::DidResolution {
                did: self.did.clone(),
                url: url.clone(),
                reason,
            };
            // A PLC directory that cannot be reached is the environment's
            // failure (exit 2), like an unreachable PDS.
            let resp = self
                .http
                .get(&url)
                .send()
                .await
                .map_err(|e| SyncError::Unreachable {
                    url: plc.to_owned(),
                    reason: error_chain(&e),
                })?;
            if !resp.status().is_success() {
                return Err(fail(format!("HTTP {}", resp.status())));
            }
            resp.json::<Value>()
                .await
                .map_err(|e| fail(error_chain(&e)))
        })
    }
}

/// The replica's calls (DESIGN §7): the remote head, `since` pulls and the
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
        const METHOD: &str = "com.atproto.sync.getRepo";
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
        const METHOD: &str = "com.atproto.sync.getLatestCommit";
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
        const METHOD: &str = "com.atproto.sync.getBlocks";
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
