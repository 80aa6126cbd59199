//! `gelstore serve`: an XRPC server over one data folder's repository, for
//! standard atproto clients (see docs/server.md).
//!
//! | module | job |
//! |---|---|
//! | `mod.rs` | options, start-up (identity, account, bind, ready line, `serve.json`), shutdown |
//! | `conn` | the connections: header, idle and write timeouts, the bound on open connections |
//! | `state` | what handlers share: the repository under one lock, account, keys, limits |
//! | `xrpc` | `/xrpc/{nsid}`: method table, HTTP method, query, body limits, JSON/CBOR input |
//! | `routes/` | the handlers, one module per NSID group |
//! | `error` | the `{error, message}` responses and the status of each error name |
//! | `auth` | HS256 session tokens (access/refresh) and the bearer header |
//! | `account` | `account.json`: handle, Argon2id password hash (old PBKDF2 ones upgraded), token secret |
//! | `sessions` | `sessions.json`: the live refresh-token ids (rotation, grace, revocation) |
//! | `identity` | the did:web and its DID document |
//! | `plc` | `--plc`: a did:plc genesis operation registered with a PLC directory |
//! | `blob_refs` | `blob-refs.json`: which records reference which blobs, derived from the repository |
//! | `chat_index` | the message records' clear fields for the chat queries, kept current from the event log |
//! | `ratelimit` | failed password attempts (createSession), limited per address (the reference's figures) and per account |
//! | `firehose` | `subscribeRepos`: the `#commit` event log over a websocket |
//! | `running` | `serve.json`: tells other `gelstore` commands a server holds the folder |
//! | `web` | the chat page at `/` (the built `web/app/dist/` assets, compiled in) with its Content-Security-Policy |

mod account;
mod assistant;
mod auth;
mod blob_refs;
mod chat_index;
mod conn;
mod error;
mod firehose;
mod ratelimit;
mod routes;
pub mod running;
mod sessions;
mod state;
pub mod web;
mod xrpc;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};

pub use self::account::{ACCOUNT_FILE, DEFAULT_HANDLE};
pub use self::assistant::{AssistantOptions, RunnerOptions};
pub use self::error::XrpcError;
pub use self::state::Limits;
pub use crate::identity::PlcError;

use self::account::{Account, PasswordNote};
use self::assistant::Assistant;
use self::auth::TokenKeys;
use self::blob_refs::BlobRefs;
use self::sessions::Sessions;
use self::state::{AppState, Identity, Store};
use crate::chat::ChatStore;
use crate::identity::{plc, web as did_web};
use crate::local_repo;
use crate::repo::blobs::{self, BlobStore};
use crate::repo::key_file::load_key;
use crate::repo::repository::{RepoError, Repository};

/// The address `gelstore serve` listens on by default.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:2583";

/// How to run a server.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The data folder.
    pub data: PathBuf,
    /// The address to listen on (port 0: any free port).
    pub listen: SocketAddr,
    /// A new handle for the account (kept across restarts).
    pub handle: Option<String>,
    /// A new password for the account (only its hash is kept).
    pub password: Option<String>,
    /// Request size limits, timeouts and the bound on connections.
    pub limits: Limits,
    /// A PLC directory: a new repository gets a did:plc registered there
    /// instead of a did:web.
    pub plc: Option<String>,
    /// The URL clients reach this server at, when it is not the listen
    /// address (a proxy in front): the service endpoint, and the did:web
    /// of a new account.
    pub public_url: Option<String>,
    /// Behind `--public-url`: how many proxies in front append the address
    /// they were reached from to `X-Forwarded-For` (the client is that
    /// many entries from its right end; 0: the connection's address).
    pub trusted_proxies: usize,
    /// The `#commit` events kept for replay: at most this many, and at
    /// most this many bytes of them.
    pub event_window: (u64, u64),
    /// PDSes (origins) the chat page may sign in at besides this server.
    pub web_pds: Vec<String>,
    /// Run the assistant: the folder holds a device of the account, and
    /// pending replies are generated with this model command.
    pub assistant: Option<AssistantOptions>,
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Binding the address failed.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Opening or creating the repository failed.
    #[error(transparent)]
    Repo(#[from] Box<RepoError>),
    /// The account file failed.
    #[error(transparent)]
    Account(#[from] account::AccountError),
    /// Another server holds the folder.
    #[error(transparent)]
    Running(#[from] running::RunningError),
    /// The store has no signing key: it cannot accept writes.
    #[error("the repository in {0} has no signing key (an imported copy); it cannot be served")]
    ReadOnly(String),
    /// Registering the did:plc failed.
    #[error(transparent)]
    Plc(#[from] plc::PlcError),
    /// `--assistant` needs a device of the account in the folder.
    #[error("--assistant: {0}")]
    Assistant(String),
    /// A setting from the environment is not usable.
    #[error("{0}")]
    Setting(String),
    /// Serving failed.
    #[error("server failed: {0}")]
    Io(#[from] std::io::Error),
}

/// What the ready line says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ready {
    /// The base URL.
    pub service: String,
    /// The account DID.
    pub did: String,
    /// The account handle.
    pub handle: String,
}

/// Runs the server until SIGINT/SIGTERM. `ready` is called once the port is
/// bound and the store open (the CLI prints the JSON line there).
pub fn run(options: ServeOptions, ready: impl FnOnce(&Ready)) -> Result<(), ServeError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(serve(options, ready))
}

async fn serve(options: ServeOptions, ready: impl FnOnce(&Ready)) -> Result<(), ServeError> {
    let data = options.data.clone();
    let grace = sessions::grace_from_env().map_err(ServeError::Setting)?;
    let blob_window = blobs::temp_window_from_env().map_err(ServeError::Setting)?;
    crate::repo::key_file::create_private_dir(&data).map_err(|e| Box::new(RepoError::from(e)))?;
    // Refuse early and clearly if another server holds the folder.
    running::check_free(&data)?;
    // No other server holds it: the temporary files in its blob folder
    // are a killed server's unfinished uploads.
    match BlobStore::new(&data).remove_leftovers() {
        Ok(0) => {}
        Ok(n) => tracing::info!("removed {n} unfinished uploads a stopped server left"),
        Err(e) => tracing::warn!("could not remove unfinished uploads: {e}"),
    }
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: options.listen,
            source,
        })?;
    let addr = listener.local_addr()?;
    // What clients use (the DID document, the ready line), and what this
    // machine's own commands use (`serve.json`).
    let local_service = did_web::service_for(addr).0;
    let (service, web_did) = match &options.public_url {
        Some(url) => did_web::service_for_url(url).map_err(ServeError::Setting)?,
        None => {
            if !addr.ip().is_loopback() {
                eprintln!(
                    "note: listening on {addr} without --public-url: the account's did:web names an IP address, which clients cannot resolve; give the host name clients use with --public-url"
                );
            }
            did_web::service_for(addr)
        }
    };

    let (account, note) = Account::load_or_create(
        &data,
        options.handle.as_deref(),
        options.password.as_deref(),
    )?;
    let sessions = Sessions::load(&data, grace)?;
    if note != PasswordNote::Kept {
        // The token key was replaced with the password: no old token
        // verifies any more; forget their ids too.
        sessions.clear()?;
    }
    let did = match &options.plc {
        Some(plc) if !repository_exists(&data) => {
            let key_data = data.clone();
            let key = tokio::task::spawn_blocking(move || {
                crate::repo::key_file::load_or_create_key(&key_data)
            })
            .await
            .map_err(std::io::Error::other)?
            .map_err(|e| Box::new(RepoError::from(e)))?;
            let (did, op) = plc::genesis(&key, &account.handle, &service)?;
            plc::register(plc, &did, &op).await?;
            plc::save_directory(&data, &did, plc)?;
            did
        }
        _ => web_did.clone(),
    };
    let open_data = data.clone();
    let mut repo = tokio::task::spawn_blocking(move || local_repo::init_as(&open_data, &did))
        .await
        .map_err(std::io::Error::other)?
        .map_err(Box::new)?;
    repo.set_event_retention(options.event_window.0);
    repo.set_event_retention_bytes(options.event_window.1);
    if !repo.is_writable() {
        return Err(ServeError::ReadOnly(data.display().to_string()));
    }
    if !repo.did().starts_with("did:plc:") && web_did != repo.did() {
        eprintln!(
            "note: this store's DID is {}, not the did:web of {service}; clients that resolve the DID will not find this server",
            repo.did()
        );
    }
    let key = load_key(&data)
        .map_err(|e| Box::new(RepoError::from(e)))?
        .ok_or_else(|| ServeError::ReadOnly(data.display().to_string()))?;
    if repo.did().starts_with("did:plc:") {
        keep_plc_current(&data, &options, repo.did(), &key, &account.handle, &service).await;
    }
    if let PasswordNote::Generated(pw) = &note {
        eprintln!(
            "created the account {} with the password {pw} (shown once; only its hash is stored: \
             start with --password or GELSTORE_PASSWORD to set another)",
            account.handle
        );
    }
    let did_doc = did_web::did_document(repo.did(), &account.handle, &key.public_key(), &service);
    let token_key = account
        .token_key()
        .ok_or_else(|| account::AccountError::Malformed {
            path: data.join(account::ACCOUNT_FILE).display().to_string(),
            reason: "tokenSecret is too short".into(),
        })?;
    let tokens = TokenKeys::new(token_key, repo.did().to_owned());
    let refs_data = data.clone();
    let (repo, loaded) = tokio::task::spawn_blocking(move || {
        let loaded = BlobRefs::load(&refs_data, &repo);
        (repo, loaded)
    })
    .await
    .map_err(std::io::Error::other)?;
    let (blob_refs, dropped) = loaded.map_err(Box::new)?;
    let (store, assistant) = match options.assistant {
        None => (Store::Keyless(Box::new(repo)), None),
        Some(a) => {
            let mut chats = open_chats(&data, repo).await?;
            // The device's own handle on the store keeps the same window.
            chats.repo_mut().set_event_retention(options.event_window.0);
            chats
                .repo_mut()
                .set_event_retention_bytes(options.event_window.1);
            // The MCP servers of the user's settings, as they are at start.
            let user_servers = chats
                .settings()
                .ok()
                .flatten()
                .map(|(s, _)| crate::agent::inputs::servers_of(&s))
                .unwrap_or_default();
            (
                Store::Chats(Box::new(chats)),
                Some(Arc::new(Assistant::start(a, user_servers).await)),
            )
        }
    };
    let state = AppState::new(
        store,
        Identity {
            handle: account.handle.clone(),
            password_hash: account.password_hash.clone(),
            did_doc,
            data: data.clone(),
            behind_proxy: options.public_url.is_some(),
            trusted_proxies: options.trusted_proxies,
        },
        tokens,
        sessions,
        BlobStore::new(&data),
        blob_refs,
        options.limits,
        assistant.clone(),
    );
    // Blobs the commits since the last run left unreferenced, and old
    // unreferenced uploads, go before the first request.
    sweep_blobs(&state, dropped, blob_window).await;
    let sweeper = tokio::spawn(sweep_blobs_every(state.clone(), blob_window));
    let watcher = assistant
        .clone()
        .map(|a| tokio::spawn(assistant::watch(state.clone(), a)));

    let app = Router::new()
        .route(
            "/xrpc/com.atproto.sync.subscribeRepos",
            // Any method: a non-GET or non-upgrade request gets an XRPC
            // error from the handler rather than a bare 405.
            any(firehose::subscribe_repos),
        )
        .route(
            "/xrpc/chat.gel.assistant.subscribeReply",
            any(assistant::subscribe_reply),
        )
        .route("/xrpc/{nsid}", any(xrpc::handle))
        .route("/.well-known/did.json", get(did_json))
        .route("/.well-known/atproto-did", get(atproto_did))
        .route("/xrpc/_health", get(health))
        .merge(web::routes(web::Page::new(&options.web_pds)))
        .route("/{did}", get(plc_style_did))
        .fallback(not_found)
        .with_state(state.clone());

    let marker = running::Marker::write(&data, &local_service, state.did.as_str())?;
    ready(&Ready {
        service: service.clone(),
        did: state.did.clone(),
        handle: state.handle.clone(),
    });
    let stopping = state.stopping.clone();
    let served = conn::serve(listener, app, options.limits, async move {
        shutdown_signal().await;
        // Long-lived streams end on this, so the graceful shutdown
        // does not wait for them forever.
        stopping.send_replace(true);
    })
    .await;
    // The store closes before the marker goes, so a command that starts
    // when the marker is gone does not meet the store's lock: the assistant's
    // watcher and runs (which hold the state) end first.
    stopping_done(&state);
    let _ = sweeper.await;
    // The blob index's cache, current for the next start.
    let _ = state
        .with_core(|core| {
            core.blob_refs.save();
            Ok(())
        })
        .await;
    if let Some(watcher) = watcher {
        let _ = watcher.await;
    }
    if let Some(assistant) = &assistant {
        assistant.stop().await;
    }
    drop(assistant);
    drop(state);
    drop(marker);
    served?;
    Ok(())
}

/// Deletes the blobs in `dropped` that are still unreferenced, then every
/// unreferenced blob older than `window`. The folder is listed without the
/// lock; each deletion is decided under it, so no commit checks a
/// reference, and no upload renews a blob, in between.
async fn sweep_blobs(state: &Arc<AppState>, dropped: Vec<cid::Cid>, window: std::time::Duration) {
    let blobs = state.blobs.clone();
    let old = match tokio::task::spawn_blocking(move || blobs.older_than(window)).await {
        Ok(Ok(old)) => old,
        Ok(Err(e)) => {
            tracing::warn!("blob sweep: could not list the blobs: {e}");
            Vec::new()
        }
        Err(e) => {
            tracing::warn!("blob sweep: {e}");
            Vec::new()
        }
    };
    if old.is_empty() && dropped.is_empty() {
        return;
    }
    let swept = state
        .with_core(move |core| {
            // Deletions trust the index only when it is at the head (a
            // failed catch-up leaves it stale): never delete on a guess.
            if !core.blob_refs_current() {
                return Ok(0);
            }
            let mut deleted = 0;
            for cid in dropped {
                if !core.blob_refs.is_referenced(&cid) {
                    core.blobs.delete(&cid).map_err(XrpcError::internal)?;
                    deleted += 1;
                }
            }
            for cid in old {
                if !core.blob_refs.is_referenced(&cid)
                    && core
                        .blobs
                        .delete_if_older(&cid, window)
                        .map_err(XrpcError::internal)?
                {
                    deleted += 1;
                }
            }
            Ok(deleted)
        })
        .await;
    match swept {
        Ok(0) => {}
        Ok(n) => tracing::info!("deleted {n} unreferenced blobs"),
        Err(e) => tracing::warn!("blob sweep failed: {}", e.message),
    }
}

/// Sweeps unreferenced blobs every quarter window (1 s to 5 min) until the
/// server stops, so an upload no record took is gone within 1.25 windows.
async fn sweep_blobs_every(state: Arc<AppState>, window: std::time::Duration) {
    let every = (window / 4).clamp(
        std::time::Duration::from_secs(1),
        std::time::Duration::from_secs(300),
    );
    let mut stopping = state.stopping.subscribe();
    while !*stopping.borrow_and_update() {
        tokio::select! {
            _ = tokio::time::sleep(every) => sweep_blobs(&state, Vec::new(), window).await,
            changed = stopping.changed() => if changed.is_err() { return },
        }
    }
}

/// A did:plc account's document names this server's handle and URL: if
/// either changed since the last operation, the next one is sent. A
/// directory that cannot be reached or refuses is reported, not fatal (the
/// server still serves its own clients).
async fn keep_plc_current(
    data: &std::path::Path,
    options: &ServeOptions,
    did: &str,
    key: &crate::crypto::SigningKey,
    handle: &str,
    service: &str,
) {
    let Some(directory) = options
        .plc
        .clone()
        .or_else(|| plc::load_directory(data, did))
    else {
        eprintln!(
            "note: the PLC directory of {did} is not known here (start once with --plc URL): its document is not checked"
        );
        return;
    };
    match plc::update(&directory, did, key, handle, service).await {
        Ok(true) => eprintln!("updated {did} at {directory}: handle {handle}, endpoint {service}"),
        Ok(false) => {}
        Err(e) => eprintln!("warning: {did}'s document was not updated: {e}"),
    }
    if options.plc.is_some()
        && let Err(e) = plc::save_directory(data, did, &directory)
    {
        eprintln!("warning: cannot remember the PLC directory: {e}");
    }
}

/// The folder's chats for the assistant: its device, made here as the
/// account's first device if the account has none yet.
async fn open_chats(data: &std::path::Path, repo: Repository) -> Result<ChatStore, ServeError> {
    // The device opens its own handle on the store.
    drop(repo);
    let data = data.to_path_buf();
    tokio::task::spawn_blocking(move || {
        if !crate::device::state::device_state_path(&data).exists() {
            crate::device::init(&data, Some("gelstore serve"), &mut crate::seal::os_rng()).map_err(
                |e| match e {
                    crate::device::DeviceError::AccountExists { .. } => ServeError::Assistant(format!(
                        "the account already has devices; pair this folder first (gelstore device pair --data {} on it, approve the code on a device of the account, sync it, then gelstore device join)",
                        data.display()
                    )),
                    e => ServeError::Assistant(e.to_string()),
                },
            )?;
        }
        ChatStore::open_without_index(&data).map_err(|e| ServeError::Assistant(e.to_string()))
    })
    .await
    .map_err(std::io::Error::other)?
}

/// Marks the server stopping (also when serving failed rather than being
/// asked to stop), so every long-lived task ends.
fn stopping_done(state: &AppState) {
    state.stopping.send_replace(true);
}

/// Whether the data folder already holds a repository (its DID is then
/// the store's, whatever the options say).
fn repository_exists(data: &std::path::Path) -> bool {
    crate::repo::repository::store_path(data).is_dir()
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

async fn did_json(State(state): State<Arc<AppState>>) -> Response {
    axum::Json(state.did_doc.clone()).into_response()
}

/// `GET /{did}`: the DID document of this server's account, in the place a
/// PLC directory serves documents, for clients that only know how to ask a
/// PLC directory (`gelstore sync` itself resolves a did:web from
/// `/.well-known/did.json`; an account made with `--plc` is registered
/// with that directory instead).
async fn plc_style_did(
    State(state): State<Arc<AppState>>,
    axum::extract::Path(did): axum::extract::Path<String>,
) -> Response {
    // The path arrives percent-decoded: `did:web:localhost%3A2583` is
    // `did:web:localhost:2583` here.
    if did == state.did || did == state.did.replace("%3A", ":") {
        return did_json(State(state)).await;
    }
    not_found().await
}

async fn atproto_did(State(state): State<Arc<AppState>>) -> Response {
    state.did.clone().into_response()
}

async fn health() -> Response {
    axum::Json(serde_json::json!({"version": env!("CARGO_PKG_VERSION")})).into_response()
}

async fn not_found() -> Response {
    XrpcError {
        status: axum::http::StatusCode::NOT_FOUND,
        error: "NotFound".into(),
        message: "Not Found".into(),
        rate_limit: None,
    }
    .into_response()
}
