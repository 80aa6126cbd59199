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
//!   `answerApproval`) is a request to generate it, if its authenticator
//!   opens here (sealed by a device that holds the chat key; a pending
//!   reply anyone else wrote is logged and never run). The watcher finds new
//!   ones in the repository's `#commit` event log (at start: every pending
//!   reply, so one cut by a stop is run again) and claims each once.
//! - **calls the model through a command** (`run.rs`): `sh -c CMD` gets
//!   the request on stdin and answers with the run format of
//!   `fixtures/streams/README.md` on stdout (seed 002 events plus
//!   `model`/`turn_end`/`tool_result`/`done`/`error` lines). Any provider
//!   fits behind it; the tests use recorded streams.
//! - **streams each run** (`log.rs`, `subscribe.rs`): events are framed
//!   as `subscribeReply` messages with seqs from 1 and kept for late
//!   subscribers (the last 256 runs, at most 64 MiB); the finished reply
//!   is sealed and written once, swapped on the pending version's CID,
//!   before the last events go out.
//!
//! Claims are in memory: one server per folder (`serve.json`), so one
//! runner per reply; another device racing to fill the same reply loses
//! on the swap (`ReplyAlreadyFinished`), never overwrites.

mod log;
mod run;
mod subscribe;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

pub use self::log::RunLog;
pub use self::subscribe::subscribe_reply;
use super::error::XrpcError;
use super::state::{AppState, Core};
use crate::agent::{Agent, AgentOptions, McpServers, ToolHost};
use crate::chat::store::MESSAGE;
use crate::chat::{ApprovalPolicy, AskFor, NoApproval, ReplyKey};
use crate::device::records::DEVICE_COLLECTION as DEVICE;
use crate::lexicon::chat::gel::assistant::key_wrap::NSID as KEY_WRAP;
use crate::provider::ModelSpec;
use crate::repo::events::OpAction;
use crate::repo::repository::{Changes, Follower};

/// How the assistant runs replies.
#[derive(Debug, Clone)]
pub struct AssistantOptions {
    /// What generates a reply.
    pub runner: RunnerOptions,
    /// Tools whose calls wait for the user's approval.
    pub approve_tools: Vec<String>,
    /// How many commands run at once (more requests wait their turn).
    pub jobs: usize,
    /// A command silent this long (no line) is cut.
    pub idle: Duration,
}

/// What generates a reply.
#[derive(Debug, Clone)]
pub enum RunnerOptions {
    /// `--assistant CMD`: a command run with `sh -c` once per reply.
    Command(String),
    /// `--assistant-model`: the built-in loop, with this default model
    /// and these MCP servers (besides the user's settings).
    Agent {
        default_model: ModelSpec,
        servers: McpServers,
        options: AgentOptions,
    },
}

/// The runner, started.
pub(super) enum Runner {
    Command(String),
    Agent {
        agent: Arc<Agent>,
        default_model: ModelSpec,
    },
}

impl AssistantOptions {
    /// Commands at once by default.
    pub const DEFAULT_JOBS: usize = 2;
    /// The default silence before a cut.
    pub const DEFAULT_IDLE: Duration = Duration::from_secs(300);
}

/// The running assistant: its runner, policy and the runs it made.
pub struct Assistant {
    runner: Runner,
    approve_tools: Vec<String>,
    policy: Arc<dyn ApprovalPolicy + Send + Sync>,
    jobs: Arc<Semaphore>,
    idle: Duration,
    /// The run tasks: aborted and awaited at shutdown (each kills its
    /// command), so the store closes before `serve.json` goes.
    tasks: Mutex<JoinSet<()>>,
    runs: Mutex<Runs>,
    /// Bumped when a run is claimed: wakes subscribers waiting on a
    /// pending reply.
    claimed: watch::Sender<u64>,
}

impl std::fmt::Debug for Assistant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let runner = match &self.runner {
            Runner::Command(c) => format!("command {c:?}"),
            Runner::Agent { default_model, .. } => format!("loop, default model {default_model}"),
        };
        f.debug_struct("Assistant")
            .field("runner", &runner)
            .finish_non_exhaustive()
    }
}

/// Finished runs kept in memory for late subscribers (at most this many,
/// and at most [`KEPT_BYTES`] of frames); older ones are replayed from
/// their records.
const KEPT_RUNS: usize = 256;
/// See [`KEPT_RUNS`].
const KEPT_BYTES: usize = 64 * 1024 * 1024;

/// The runs by reply key, the finished ones oldest first, and the replies
/// given up because they did not open here (retried when key wraps come).
#[derive(Default)]
struct Runs {
    by_reply: HashMap<String, Arc<RunLog>>,
    finished: VecDeque<String>,
    finished_bytes: usize,
    deferred: HashSet<String>,
}

impl Assistant {
    /// An assistant with `options`; the loop's MCP servers (`options`'
    /// and `user_servers`, the settings') are started here.
    pub async fn start(options: AssistantOptions, user_servers: McpServers) -> Assistant {
        let policy: Arc<dyn ApprovalPolicy + Send + Sync> = if options.approve_tools.is_empty() {
            Arc::new(NoApproval)
        } else {
            Arc::new(AskFor::tools(options.approve_tools.clone()))
        };
        let runner = match options.runner {
            RunnerOptions::Command(c) => Runner::Command(c),
            RunnerOptions::Agent {
                default_model,
                servers,
                options: agent_options,
            } => {
                let servers = user_servers.merged(servers);
                let (host, _problems) = ToolHost::connect(&servers, agent_options.idle).await;
                let env: crate::agent::Env = Arc::new(|v| std::env::var(v).ok());
                Runner::Agent {
                    agent: Arc::new(Agent::new(agent_options, Arc::new(host), env)),
                    default_model,
                }
            }
        };
        Assistant {
            runner,
            approve_tools: options.approve_tools,
            policy,
            jobs: Arc::new(Semaphore::new(options.jobs.max(1))),
            idle: options.idle,
            tasks: Mutex::new(JoinSet::new()),
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

    /// Gives up a claim (the reply could not be read here, or was not
    /// written): subscribers fall back to the record, and the reply is
    /// looked at again when new key wraps arrive.
    fn release(&self, reply: &str) {
        let mut runs = self.lock();
        runs.by_reply.remove(reply);
        runs.deferred.insert(reply.to_owned());
        drop(runs);
        self.claimed.send_modify(|n| *n += 1);
    }

    /// Starts a run task.
    fn spawn(&self, run: impl std::future::Future<Output = ()> + Send + 'static) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        // Reap the finished ones so the set stays small.
        while tasks.try_join_next().is_some() {}
        tasks.spawn(run);
    }

    /// Stops every run (their commands are killed; the replies stay
    /// pending and run again at the next start) and waits for them.
    pub async fn stop(&self) {
        let mut tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
    }

    /// Records that the run of `reply` ended; forgets the oldest finished
    /// runs beyond [`KEPT_RUNS`] (memory stays bounded on a long-lived
    /// server).
    fn finished(&self, reply: &str) {
        let mut runs = self.lock();
        let bytes = runs.by_reply.get(reply).map_or(0, |l| l.bytes());
        runs.finished.push_back(reply.to_owned());
        runs.finished_bytes += bytes;
        while runs.finished.len() > KEPT_RUNS || runs.finished_bytes > KEPT_BYTES {
            let Some(old) = runs.finished.pop_front() else {
                break;
            };
            if let Some(log) = runs.by_reply.remove(&old) {
                runs.finished_bytes = runs.finished_bytes.saturating_sub(log.bytes());
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
    // No cursor: scan every reply (at start, or after a failed read); then
    // follow the event log.
    let mut follower = Follower::new();
    loop {
        let deferred: Vec<String> = assistant.lock().deferred.iter().cloned().collect();
        let looking = follower.clone();
        match state
            .with_core(move |core| pending_replies(core, looking, deferred))
            .await
        {
            Ok(found) => {
                follower = found.follower;
                if found.retried {
                    assistant.lock().deferred.clear();
                }
                for key in found.pending {
                    if let Some(log) = assistant.claim(&key.to_string()) {
                        assistant.spawn(run::run_reply(state.clone(), assistant.clone(), key, log));
                    }
                }
            }
            Err(e) => {
                tracing::error!("assistant: looking for pending replies: {}", e.message);
                follower = Follower::new();
            }
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

/// What one look at the repository found.
struct Found {
    /// Pending replies to run.
    pending: Vec<ReplyKey>,
    /// The cursor after this look.
    follower: Follower,
    /// Whether the deferred replies were looked at again.
    retried: bool,
}

/// The pending replies among the records the event log shows created since
/// `follower`'s cursor (every one when the log cannot tell: see
/// `Follower`; a `tooBig` commit written here is known from its hints),
/// and the `deferred` ones again if key wraps or devices changed.
fn pending_replies(
    core: &mut Core,
    mut follower: Follower,
    deferred: Vec<String>,
) -> Result<Found, XrpcError> {
    let hints = &core.hints;
    let repo = core.repo();
    let mut keys = Vec::new();
    let mut refused = Vec::new();
    let mut keys_changed = false;
    let full_scan = match follower.next(repo, |c| hints.get(c))? {
        Changes::Rebuild => true,
        Changes::None => false,
        Changes::Ops(ops) => {
            for (action, path) in ops {
                keys_changed |= path.starts_with(KEY_WRAP) || path.starts_with(DEVICE);
                let Some(rkey) = path.strip_prefix(MESSAGE).and_then(|r| r.strip_prefix('/'))
                else {
                    continue;
                };
                match action {
                    // A request is a reply created pending (create-if-absent).
                    OpAction::Create => keys.push(rkey.to_owned()),
                    // A record updated to pending is a finished reply turned
                    // back (nothing makes one legitimately): running it would
                    // overwrite what was generated.
                    OpAction::Update => refused.push(rkey.to_owned()),
                    OpAction::Delete => {}
                }
            }
            false
        }
    };
    if full_scan {
        keys.clear();
        for item in repo.list(Some(MESSAGE))? {
            let (path, _) = item?;
            keys.push(path[MESSAGE.len() + 1..].to_owned());
        }
    }
    for rkey in &refused {
        if let Some(entry) = repo.get(MESSAGE, rkey)?
            && entry.value.get("status").and_then(|v| v.as_str()) == Some("pending")
        {
            tracing::warn!(
                "assistant: reply {rkey} was updated back to pending (not created pending): not run"
            );
        }
    }
    let retried = (keys_changed || full_scan) && !deferred.is_empty();
    if retried {
        keys.extend(deferred);
    }
    let mut pending = Vec::new();
    for rkey in keys {
        let Ok(key) = ReplyKey::parse(&rkey) else {
            continue;
        };
        let Some(entry) = repo.get(MESSAGE, &rkey)? else {
            continue;
        };
        let field = |name: &str| entry.value.get(name).and_then(|v| v.as_str());
        if field("role") != Some("assistant") || field("status") != Some("pending") {
            continue;
        }
        // Whoever can write the PDS can write clear fields; a request
        // counts only with an authenticator (opened before the run, in
        // `ChatStore::pending_reply`).
        if entry.value.get(crate::seal::AUTHENTICATOR_FIELD).is_none() {
            tracing::warn!(
                "assistant: reply {rkey} is pending without an authenticator (forged, or its content cut off): not run"
            );
            continue;
        }
        pending.push(key);
    }
    Ok(Found {
        pending,
        follower,
        retried,
    })
}
