//! What every request handler shares: the repository (behind one lock:
//! commits are serial, and reads see a consistent head), the account, the
//! token keys and live sessions, the blob folder and the limits.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use super::assistant::Assistant;
use super::auth::TokenKeys;
use super::blob_refs::BlobRefs;
use super::chat_index::ChatIndex;
use super::error::XrpcError;
use super::ratelimit::AttemptLimiter;
use super::sessions::Sessions;
use crate::chat::ChatStore;
use crate::repo::blobs::BlobStore;
use crate::repo::repository::Repository;
use crate::repo::repository::WriteHints;
use crate::repo::tid::TidClock;
use gelstore_lexicon::catalog::Catalog;

/// Limits on requests and connections.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The largest JSON (or CBOR) request body.
    pub body: usize,
    /// The largest blob upload.
    pub blob: usize,
    /// The most writes in one `applyWrites`.
    pub writes: usize,
    /// How long a client has to send a request's head (from its first
    /// byte, or from the connection's start).
    pub header_timeout: Duration,
    /// How long a kept-alive connection may wait for its next request.
    pub idle_timeout: Duration,
    /// How long a request body may send nothing, and a response wait for
    /// a client that does not read it.
    pub body_timeout: Duration,
    /// The most connections open at once (fitted under the open-file
    /// limit); past it the longest-quiet one is closed.
    pub connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            body: 2 * 1024 * 1024,
            blob: 5 * 1024 * 1024,
            writes: 200,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            body_timeout: Duration::from_secs(60),
            connections: 512,
        }
    }
}

/// The repository, the record-key clock, the blob index and the chat index,
/// used under one lock.
pub struct Core {
    store: Store,
    /// Makes TIDs for record keys the client leaves to the server.
    pub clock: TidClock,
    /// Which records reference which blobs; kept current with the head by
    /// [`AppState::with_core`].
    pub blob_refs: BlobRefs,
    /// The blob files (placed, checked and deleted only under the lock).
    pub blobs: BlobStore,
    /// The messages' clear fields, for the chat queries.
    chat_index: ChatIndex,
    /// The ops of the latest commits written here, for the followers of
    /// the event log (a `tooBig` commit's event lists none).
    pub hints: WriteHints,
}

/// The repository alone (the server holds no chat key), or inside the
/// assistant's [`ChatStore`] (the folder holds an admitted device).
pub enum Store {
    Keyless(Box<Repository>),
    Chats(Box<ChatStore>),
}

impl Core {
    /// The account's repository.
    pub fn repo(&self) -> &Repository {
        match &self.store {
            Store::Keyless(repo) => repo,
            Store::Chats(chats) => chats.device().repo(),
        }
    }

    /// The account's repository, to write to.
    pub fn repo_mut(&mut self) -> &mut Repository {
        match &mut self.store {
            Store::Keyless(repo) => repo,
            Store::Chats(chats) => chats.repo_mut(),
        }
    }

    /// The chat index brought up to the repository's head, and the
    /// repository.
    pub fn chat_index(&mut self) -> Result<(&ChatIndex, &Repository), XrpcError> {
        let repo: &Repository = match &self.store {
            Store::Keyless(repo) => repo,
            Store::Chats(chats) => chats.device().repo(),
        };
        self.chat_index.catch_up(repo, &self.hints)?;
        Ok((&self.chat_index, repo))
    }

    /// The chats, when this server runs the assistant (it holds a device's
    /// keys); brought up to date with writes made through
    /// [`Core::repo_mut`] first.
    pub fn chats(&mut self) -> Result<Option<&mut ChatStore>, XrpcError> {
        match &mut self.store {
            Store::Keyless(_) => Ok(None),
            Store::Chats(chats) => {
                chats.refresh().map_err(XrpcError::internal)?;
                Ok(Some(chats))
            }
        }
    }
}

impl Core {
    /// Brings the blob index up to the head (as `follow_blob_refs`) and
    /// says whether it is there.
    pub fn blob_refs_current(&mut self) -> bool {
        self.follow_blob_refs();
        let repo = match &self.store {
            Store::Keyless(repo) => &**repo,
            Store::Chats(chats) => chats.device().repo(),
        };
        self.blob_refs.is_current(repo)
    }

    /// Brings the blob index up to the head and deletes the blobs no
    /// record references any more. A failure is logged: the index stays
    /// stale (caught up on the next commit or start) and nothing is
    /// deleted, so at worst an orphan file waits for a sweep.
    pub fn follow_blob_refs(&mut self) {
        let Core {
            store,
            blob_refs,
            blobs,
            hints,
            ..
        } = self;
        let repo = match store {
            Store::Keyless(repo) => &**repo,
            Store::Chats(chats) => chats.device().repo(),
        };
        match blob_refs.catch_up(repo, hints) {
            Ok(dropped) => {
                for cid in dropped {
                    if let Err(e) = blobs.delete(&cid) {
                        tracing::warn!("could not delete unreferenced blob {cid}: {e}");
                    }
                }
            }
            Err(e) => tracing::error!("blob index: could not follow the repository: {e}"),
        }
    }
}

/// The server's shared state.
pub struct AppState {
    core: Mutex<Core>,
    /// The account DID (the repository's).
    pub did: String,
    /// The handle.
    pub handle: String,
    /// The stored password hash (replaced when an old kind is upgraded).
    password_hash: Mutex<String>,
    /// The data folder (its `account.json`).
    pub data: PathBuf,
    /// The DID document served at `/.well-known/did.json`.
    pub did_doc: Value,
    /// Signs and checks session tokens.
    pub tokens: TokenKeys,
    /// The live refresh-token ids.
    pub sessions: Sessions,
    /// Uploaded blobs.
    pub blobs: BlobStore,
    /// Request limits.
    pub limits: Limits,
    /// Bumped after every commit: wakes firehose subscribers.
    pub commits: watch::Sender<u64>,
    /// Set when the server is stopping: ends long-lived streams.
    pub stopping: watch::Sender<bool>,
    /// The assistant (`--assistant`): runs and streams replies.
    pub assistant: Option<Arc<Assistant>>,
    /// Failed password attempts (createSession), limited.
    pub attempts: AttemptLimiter,
    /// Password hashes computed at once (each is slow on purpose).
    pub hashing: tokio::sync::Semaphore,
    /// Behind a proxy (`--public-url`): the client is taken from
    /// `X-Forwarded-For`, not the connection.
    pub behind_proxy: bool,
    /// How many proxies in front append to `X-Forwarded-For` (the client
    /// is that many entries from its right end).
    pub trusted_proxies: usize,
    /// The lexicons the repository validates records against (the
    /// answers' `validationStatus` and `validate: true` follow them).
    pub lexicons: Arc<Catalog>,
}

/// Who the server is and how it is reached, for [`AppState::new`].
#[derive(Debug, Clone)]
pub struct Identity {
    /// The handle.
    pub handle: String,
    /// The stored password hash.
    pub password_hash: String,
    /// The DID document.
    pub did_doc: Value,
    /// The data folder.
    pub data: PathBuf,
    /// Behind a proxy (`--public-url`).
    pub behind_proxy: bool,
    /// Proxies appending to `X-Forwarded-For`.
    pub trusted_proxies: usize,
}

impl AppState {
    /// Shared state over an opened repository.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Store,
        identity: Identity,
        tokens: TokenKeys,
        sessions: Sessions,
        blobs: BlobStore,
        blob_refs: BlobRefs,
        limits: Limits,
        assistant: Option<Arc<Assistant>>,
    ) -> Arc<AppState> {
        let Identity {
            handle,
            password_hash,
            did_doc,
            data,
            behind_proxy,
            trusted_proxies,
        } = identity;
        let core = Core {
            store,
            clock: TidClock::new(),
            blob_refs,
            blobs: blobs.clone(),
            chat_index: ChatIndex::default(),
            hints: WriteHints::default(),
        };
        let did = core.repo().did().to_owned();
        let lexicons = core.repo().lexicons().clone();
        Arc::new(AppState {
            core: Mutex::new(core),
            did,
            handle,
            password_hash: Mutex::new(password_hash),
            data,
            did_doc,
            tokens,
            sessions,
            blobs,
            limits,
            commits: watch::channel(0).0,
            stopping: watch::channel(false).0,
            assistant,
            attempts: AttemptLimiter::default(),
            hashing: tokio::sync::Semaphore::new(2),
            behind_proxy,
            trusted_proxies,
            lexicons,
        })
    }

    /// The stored password hash.
    pub fn password_hash(&self) -> String {
        self.password_hash
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replaces the stored hash `old` with `new` (a stronger hash of the
    /// same password), in `account.json` and here; nothing happens if
    /// the hash is no longer `old`. Blocking (it writes the file).
    pub fn upgrade_password_hash(&self, old: &str, new: String) -> Result<(), String> {
        let mut current = self.password_hash.lock().unwrap_or_else(|e| e.into_inner());
        if *current != old {
            return Ok(());
        }
        super::account::Account::replace_hash(&self.data, old, &new).map_err(|e| e.to_string())?;
        *current = new;
        Ok(())
    }

    /// Runs `f` on the repository on a blocking thread (store reads and
    /// fsyncs must not stall the async workers), under the lock; if `f`
    /// moved the head, `subscribeRepos` subscribers are woken and the blob
    /// index follows the new commits, deleting the blobs they left
    /// unreferenced (the commits are durable by then).
    pub async fn with_core<T, F>(self: &Arc<Self>, f: F) -> Result<T, XrpcError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Core) -> Result<T, XrpcError> + Send + 'static,
    {
        let state = self.clone();
        tokio::task::spawn_blocking(move || {
            // A panic inside `f` cannot leave the repository half-changed:
            // `apply_with` changes its in-memory head only after the batch
            // is durable. So a poisoned lock is still safe to use.
            let mut core = state.core.lock().unwrap_or_else(|e| e.into_inner());
            let before = core.repo().head().commit;
            let result = f(&mut core);
            // Wake subscribers here, not in the handler: a client that
            // hangs up drops its handler, but this task still commits.
            if core.repo().head().commit != before {
                state.commits.send_modify(|n| *n += 1);
                core.follow_blob_refs();
            }
            result
        })
        .await
        .map_err(XrpcError::internal)?
    }

    /// The client of `req`: the connection's address, or behind a proxy
    /// the `X-Forwarded-For` entry the outermost trusted proxy appended
    /// (the [`AppState::trusted_proxies`]-th from the right: entries left
    /// of it are the client's own words). Without that many entries, or
    /// with one that is not an address there, the connection's address.
    pub fn client_of(&self, req: &crate::server::xrpc::Request) -> std::net::IpAddr {
        if !self.behind_proxy {
            return req.peer;
        }
        forwarded_client(&req.headers, self.trusted_proxies).unwrap_or(req.peer)
    }

    /// Whether `repo` (a DID or handle) names this server's account.
    pub fn is_own_repo(&self, repo: &str) -> bool {
        repo == self.did || repo.eq_ignore_ascii_case(&self.handle)
    }

    /// Checks that `repo` is this server's account.
    pub fn own_repo(&self, repo: &str) -> Result<(), XrpcError> {
        if self.is_own_repo(repo) {
            Ok(())
        } else {
            Err(XrpcError::named(
                "RepoNotFound",
                format!(
                    "Could not find repo: {}",
                    repo.chars().take(300).collect::<String>()
                ),
            ))
        }
    }
}

/// The address `trusted` entries from the right of the request's
/// `X-Forwarded-For` (all its lines, in order); `None` if there are not
/// that many, `trusted` is 0, or the entry is not an address.
pub fn forwarded_client(
    headers: &axum::http::HeaderMap,
    trusted: usize,
) -> Option<std::net::IpAddr> {
    let entries: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .map(|v| v.to_str().unwrap_or(""))
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    if trusted == 0 {
        return None;
    }
    let entry = entries[entries.len().checked_sub(trusted)?];
    entry
        .parse::<std::net::IpAddr>()
        .ok()
        .or_else(|| entry.parse::<std::net::SocketAddr>().ok().map(|a| a.ip()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_is_counted_from_the_right_of_x_forwarded_for() {
        let mut headers = axum::http::HeaderMap::new();
        let at = |h: &axum::http::HeaderMap, n| forwarded_client(h, n).map(|a| a.to_string());
        assert_eq!(at(&headers, 1), None);
        headers.append(
            "x-forwarded-for",
            "203.0.113.9, 198.51.100.1".parse().unwrap(),
        );
        assert_eq!(at(&headers, 1).as_deref(), Some("198.51.100.1"));
        assert_eq!(at(&headers, 2).as_deref(), Some("203.0.113.9"));
        assert_eq!(at(&headers, 3), None);
        assert_eq!(at(&headers, 0), None);
        // A second line continues the list.
        headers.append("x-forwarded-for", "[2001:db8::1]:443".parse().unwrap());
        assert_eq!(at(&headers, 1).as_deref(), Some("2001:db8::1"));
        assert_eq!(at(&headers, 2).as_deref(), Some("198.51.100.1"));
        headers.append("x-forwarded-for", "unknown".parse().unwrap());
        assert_eq!(at(&headers, 1), None);
    }
}
