//! `gelstore serve --assistant CMD`: the server as one of the account's
//! devices that runs the model, for `chat.gel.assistant.subscribeReply`
//! and `answerApproval`.
//!
//! Without `--assistant` the server holds no chat key and cannot read what
//! it stores. With it, the data folder also holds an admitted device
//! (made here as the account's first device when the account has none,
//! else paired like any other device), and the server:
//!
//! - **runs pending replies.** A `pending` reply record (written by a
//!   client through `createRecord`/`applyWrites`/sync, or by
//!   `answerApproval`) is a request to generate it. The watcher finds new
//!   ones in the repository's `#commit` event log (at start: every pending
//!   reply, so one cut by a stop is run again) and claims each once.
//! - **calls the model through a command** (`run.rs`): `sh -c CMD` gets
//!   the request on stdin and answers with the run format of
//!   `fixtures/streams/README.md` on stdout (seed 002 events plus
//!   `model`/`turn_end`/`tool_result`/`done`/`error` lines). Any provider
//!   fits behind it; the tests use recorded streams.
//! - **streams each run** (`log.rs`): events are framed as
//!   `subscribeReply` messages with seqs from 1 and kept until the server
//!   stops; the finished reply is sealed and written once, swapped on the
//!   pending version's CID, before the last events go out.
//!
//! Claims are in memory: one server per folder (`serve.json`), so one
//! runner per reply; another device racing to fill the same reply loses
//! on the swap (`ReplyAlreadyFinished`), never overwrites.

mod log;
mod run;
mod subscribe;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

pub use self::log::RunLog;
pub use self::subscribe::subscribe_reply;
use super::error::XrpcError;
use super::state::{AppState, Core};
use crate::chat::store::MESSAGE;
use crate::chat::{ApprovalPolicy, AskFor, NoApproval, ReplyKey};
use crate::repo::events::{Frame, OpAction, decode_frame};
use crate::repo::repository::RepoError;

/// How the assistant runs replies.
#[derive(Debug, Clone)]
pub struct AssistantOptions {
    /// The model command, run with `sh -c` once per reply.
    pub command: String,
    /// Tools whose calls wait for the user's approval.
    pub approve_tools: Vec<String>,
}

/// The running assistant: its command, policy and the runs it made.
pub struct Assistant {
    command: String,
    policy: Arc<dyn ApprovalPolicy + Send + Sync>,
    runs: Mutex<Runs>,
    /// Bumped when a run is claimed: wakes subscribers waiting on a
    /// pending reply.
    claimed: watch::Sender<u64>,
}

impl std::fmt::Debug for Assistant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Assistant")
            .field("command", &self.command)
            .finish_non_exhaustive()
    }
}

/// Finished runs kept in memory for late subscribers; older ones are
/// replayed from their records.
const KEPT_RUNS: usize = 256;

/// The runs by reply key, and the finished ones oldest first.
#[derive(Default)]
struct Runs {
    by_reply: HashMap<String, Arc<RunLog>>,
    finished: VecDeque<String>,
}

impl Assistant {
    /// An assistant with `options`.
    pub fn new(options: AssistantOptions) -> Assistant {
        let policy: Arc<dyn ApprovalPolicy + Send + Sync> = if options.approve_tools.is_empty() {
            Arc::new(NoApproval)
        } else {
            Arc::new(AskFor::tools(options.approve_tools))
        };
        Assistant {
            command: options.command,
            policy,
            runs: Mutex::new(Runs::default()),
            claimed: watch::channel(0).0,
        }
    }

    /// The run of `reply` this server made or is making, if any.
    pub fn run_log(&self, reply: &str) -> Option<Arc<RunLog>> {
        self.lock().by_reply.get(reply).cloned()
    }

    /// A receiver that wakes when a run is claimed.
    pub fn claims(&self) -> watch::Receiver<u64> {
        self.claimed.subscribe()
    }

    /// Claims `reply` for a run; `None` if it was claimed before.
    fn claim(&self, reply: &str) -> Option<Arc<RunLog>> {
        let mut runs = self.lock();
        if runs.by_reply.contains_key(reply) {
            return None;
        }
        let log = Arc::new(RunLog::default());
        runs.by_reply.insert(reply.to_owned(), log.clone());
        drop(runs);
        self.claimed.send_modify(|n| *n += 1);
        Some(log)
    }

    /// Gives up a claim that never started (the reply could not be read
    /// here): subscribers fall back to the record.
    fn release(&self, reply: &str) {
        self.lock().by_reply.remove(reply);
        self.claimed.send_modify(|n| *n += 1);
    }

    /// Records that the run of `reply` ended; forgets the oldest finished
    /// runs beyond [`KEPT_RUNS`] (memory stays bounded on a long-lived
    /// server).
    fn finished(&self, reply: &str) {
        let mut runs = self.lock();
        runs.finished.push_back(reply.to_owned());
        while runs.finished.len() > KEPT_RUNS {
            if let Some(old) = runs.finished.pop_front() {
                runs.by_reply.remove(&old);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Runs> {
        self.runs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Watches the repository for pending replies and runs each once, until
/// the server stops.
pub async fn watch(state: Arc<AppState>, assistant: Arc<Assistant>) {
    let mut commits = state.commits.subscribe();
    let mut stopping = state.stopping.subscribe();
    commits.borrow_and_update();
    // `None`: scan every reply (at start); then follow the event log.
    let mut cursor: Option<u64> = None;
    loop {
        match state
            .with_core(move |core| pending_replies(core, cursor))
            .await
        {
            Ok((found, last)) => {
                cursor = Some(last);
                for key in found {
                    if let Some(log) = assistant.claim(&key.to_string()) {
                        tokio::spawn(run::run_reply(state.clone(), assistant.clone(), key, log));
                    }
                }
            }
            Err(e) => tracing::error!("assistant: looking for pending replies: {}", e.message),
        }
        tokio::select! {
            changed = commits.changed() => {
                if changed.is_err() {
                    return;
                }
                commits.borrow_and_update();
            }
            _ = stopping.changed() => return,
        }
    }
}

/// The pending replies among the records written after event `cursor`
/// (every one when `None`, or when the events were pruned), and the last
/// event seq now.
fn pending_replies(
    core: &mut Core,
    cursor: Option<u64>,
) -> Result<(Vec<ReplyKey>, u64), XrpcError> {
    let repo = core.repo();
    let last = repo.last_event_seq()?.unwrap_or(0);
    let mut keys = Vec::new();
    let mut full_scan = cursor.is_none();
    if let Some(c) = cursor {
        for event in repo.events_since(Some(c))? {
            let event = match event {
                Ok(e) => e,
                Err(RepoError::EventsPruned { .. }) => {
                    full_scan = true;
                    break;
                }
                Err(e) => return Err(e.into()),
            };
            let Ok(Frame::Commit(commit)) = decode_frame(&event.frame) else {
                continue;
            };
            for op in &commit.ops {
                if op.action != OpAction::Delete
                    && let Some(rkey) = op
                        .path
                        .strip_prefix(MESSAGE)
                        .and_then(|r| r.strip_prefix('/'))
                {
                    keys.push(rkey.to_owned());
                }
            }
        }
    }
    if full_scan {
        keys.clear();
        for item in repo.list(Some(MESSAGE))? {
            let (path, _) = item?;
            keys.push(path[MESSAGE.len() + 1..].to_owned());
        }
    }
    let mut out = Vec::new();
    for rkey in keys {
        let Ok(key) = ReplyKey::parse(&rkey) else {
            continue;
        };
        let Some(entry) = repo.get(MESSAGE, &rkey)? else {
            continue;
        };
        let field = |name: &str| entry.value.get(name).and_then(|v| v.as_str());
        if field("role") == Some("assistant") && field("status") == Some("pending") {
            out.push(key);
        }
    }
    Ok((out, last))
}
