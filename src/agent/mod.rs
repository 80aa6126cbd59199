//! The assistant loop: model turn → tool calls → approval gate → tool
//! execution → results → next turn, until the model stops or the step
//! budget ends.
//!
//! ```text
//!   branch (opened) ──history──▶ Conversation ─┐
//!                                              ▼
//!   ┌──────────── provider::http (one turn, streamed) ◀── TurnRequest
//!   │ outputs: seed 002 events, model, providerData, End
//!   ▼
//!   LineRun (the chat core's Reply) ──▶ AssistantEvents (seed 000) ──▶ publish
//!   │ after the turn: calls_to_run (no approval needed) ──▶ tools (MCP, bounded)
//!   │                 accepted (MCP tasks) ──▶ followed ──▶ observations
//!   │                 has_gated_calls ──▶ finish: `waiting`, confirm_required
//!   └─ results appended; the reply's parts so far extend the history; next turn
//! ```
//!
//! The loop is the only new producer of run lines: the assembler, the
//! records and the live stream are the chat core's. A reply to an
//! approval answer first runs the approved calls, then continues.
//!
//! Which model (seed 001): the host's override, else the request's, else
//! the previous reply's, else the user's default. Which tools: the
//! request's, else the chat's, else the user's switched-on tools, else
//! every tool the host has.

pub mod history;
pub mod inputs;
mod mcp_http;
pub mod tasks;
pub mod tools;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;

pub use self::tools::{JobHandle, McpConfigError, McpServers, ServerConfig, ToolHost};
use crate::chat::approval::{Decision, MAX_WORDS, Resolution, truncate_words};
use crate::chat::assemble::FinishedCall;
use crate::chat::run::{LineRun, begin_reply, settle_answer};
use crate::chat::store::PendingReply;
use crate::chat::{
    ApprovalPolicy, AssistantEvent, AssistantMessageEvent, ChatRecord, End, Finished, StreamLine,
    ToolRun,
};
use crate::lexicon::chat::gel::assistant::defs::{GenerationRequest, PlainContentPartsItem};
use crate::lexicon::chat::gel::assistant::message::{MessageRole, MessageStopReason};
use crate::lexicon::chat::gel::assistant::subscribe_reply::{Confirmation, Effects, ErrorCode};
use crate::provider::http::ProviderClient;
use crate::provider::{
    Conversation, Finish, ModelSpec, Output, ProviderConfig, ProviderError, SpecError, ToolSpec,
    TurnRequest,
};

/// How the loop runs.
#[derive(Clone, Debug)]
pub struct AgentOptions {
    /// Model turns per reply at most; then the reply ends `done(budget)`.
    pub max_steps: u32,
    /// Output tokens per turn at most.
    pub max_tokens: u32,
    /// Tool calls of one turn run at once at most.
    pub tool_jobs: usize,
    /// A provider silent this long is cut.
    pub idle: Duration,
    /// The work an accepted call queued (an MCP task) is waited for this
    /// long at most; then it is cancelled and observed `silent`
    /// (`exhausted`).
    pub job_wait: Duration,
}

impl Default for AgentOptions {
    fn default() -> Self {
        AgentOptions {
            max_steps: 16,
            max_tokens: 8192,
            tool_jobs: 4,
            idle: Duration::from_secs(120),
            job_wait: Duration::from_secs(300),
        }
    }
}

/// Reads a configuration variable (the process environment, or a test's).
pub type Env = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The loop with its tools and provider clients.
pub struct Agent {
    options: AgentOptions,
    tools: Arc<ToolHost>,
    env: Env,
    clients: Mutex<HashMap<String, ProviderClient>>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("options", &self.options)
            .field("tools", &self.tools)
            .finish_non_exhaustive()
    }
}

/// One reply to generate.
pub struct Job<'a> {
    pub pending: &'a PendingReply,
    /// The branch it answers, opened, oldest first; the last is the user
    /// message.
    pub branch: &'a [ChatRecord],
    /// The chat's system prompt.
    pub system: Option<String>,
    /// For the reply to an approval answer: the answer.
    pub resolution: Option<&'a Resolution>,
    pub model: ModelSpec,
    /// The tools the model may call, by offered name (`None`: all).
    pub tools: Option<Vec<String>>,
    pub effort: Option<String>,
    pub policy: Arc<dyn ApprovalPolicy + Send + Sync>,
    /// Says `true` when the run is to stop: queued work still followed is
    /// then observed `interrupted` and the reply ends aborted.
    pub stop: Option<tokio::sync::watch::Receiver<bool>>,
}

/// Where events go as they are made (a trait rather than a closure: a
/// higher-ranked closure held across an await makes the server's run
/// futures fail the `Send` check).
pub trait EventSink: Send {
    fn publish(&mut self, event: &AssistantEvent);
}

/// See [`EventSink`].
pub type Publish<'a> = &'a mut dyn EventSink;

impl Agent {
    pub fn new(options: AgentOptions, tools: Arc<ToolHost>, env: Env) -> Agent {
        Agent {
            options,
            tools,
            env,
            clients: Mutex::new(HashMap::new()),
        }
    }

    /// The loop's tools.
    pub fn tools(&self) -> &ToolHost {
        &self.tools
    }

    fn client(&self, provider: &str) -> Result<ProviderClient, ProviderError> {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = clients.get(provider) {
            return Ok(c.clone());
        }
        let env = self.env.clone();
        let config = ProviderConfig::from_lookup(provider, move |v| env(v)).map_err(|e| {
            let code = match e {
                SpecError::MissingKey { .. } => ErrorCode::AssistantAuth,
                SpecError::BadUrl { .. } => ErrorCode::AssistantProvider,
                SpecError::UnknownProvider(_) | SpecError::NotProviderSlashId(_) => {
                    ErrorCode::AssistantModelNotOffered
                }
            };
            ProviderError::new(code, e.to_string())
        })?;
        let client = ProviderClient::new(config, self.options.idle)?;
        clients.insert(provider.to_owned(), client.clone());
        Ok(client)
    }

    /// Runs `job` to its end. Events go to `publish` as they are made;
    /// the returned [`Finished`] holds the reply and the events its end
    /// makes (published by the caller once the reply is written).
    pub async fn run(&self, job: Job<'_>, publish: Publish<'_>) -> Finished {
        let fail_now = |code: ErrorCode, message: String| {
            let mut run =
                LineRun::new(crate::chat::Reply::new(job.pending.key, job.policy.clone()));
            run.end_with(End::ProviderError {
                code,
                message,
                usage: None,
            });
            run.end()
        };
        // The approved calls of an answer run first.
        let mut approved_jobs = Vec::new();
        let settled = match job.resolution {
            None => None,
            Some(resolution) => {
                let approved: Vec<(String, String, serde_json::Value)> = resolution
                    .calls
                    .iter()
                    .filter(|c| c.decision == Decision::Approved)
                    .map(|c| {
                        let args = c
                            .call
                            .arguments
                            .as_deref()
                            .and_then(|a| serde_json::from_str(a).ok())
                            .unwrap_or(serde_json::Value::Null);
                        (c.call.call_id.clone(), c.call.name.clone(), args)
                    })
                    .collect();
                let mut runs = BTreeMap::new();
                for (id, run, job) in self.run_calls(&approved).await {
                    if let Some(job) = job {
                        approved_jobs.push((id.clone(), job));
                    }
                    runs.insert(id, run);
                }
                match settle_answer(resolution, &runs) {
                    Ok(s) => Some(s),
                    Err(e) => return fail_now(ErrorCode::Internal, e.to_string()),
                }
            }
        };
        let policy: Arc<dyn ApprovalPolicy + Send + Sync> = Arc::new(Described {
            inner: job.policy.clone(),
            tools: self.tools.clone(),
        });
        let (mut run, first) = match begin_reply(job.pending, policy, settled.as_deref()) {
            Ok(r) => r,
            Err(e) => return fail_now(ErrorCode::Internal, e.to_string()),
        };
        for e in &first {
            publish.publish(e);
        }
        let mut events = Vec::new();
        if !approved_jobs.is_empty()
            && self
                .follow_jobs(approved_jobs, &job, &mut run, &mut events, publish)
                .await
        {
            run.end_with(End::Aborted);
            return run.end();
        }
        let client = match self.client(&job.model.provider) {
            Ok(c) => c,
            Err(e) => {
                run.end_with(End::ProviderError {
                    code: e.code,
                    message: e.message,
                    usage: None,
                });
                return run.end();
            }
        };
        let offered = self.offered(job.tools.as_deref());
        let base = history::conversation(job.system.clone(), job.branch, &job.model.provider);
        for _step in 0..self.options.max_steps {
            let mut conversation = base.clone();
            // The reply's own parts so far are this provider's.
            history::append(
                &mut conversation,
                history::assistant_turns(run.reply().parts(), true),
            );
            let ended = self
                .turn(
                    &client,
                    &job,
                    &conversation,
                    &offered,
                    &mut run,
                    &mut events,
                    publish,
                )
                .await;
            let Some(stop) = ended else {
                return run.end();
            };
            if run.model().is_none() {
                run.apply(StreamLine::Model(job.model.to_ref()), &mut events);
            }
            let calls = run.reply().calls_to_run();
            if calls.is_empty() || run.stopped() {
                run.end_with(End::Done {
                    stop_reason: stop,
                    usage: None,
                });
                break;
            }
            let work: Vec<(String, String, serde_json::Value)> = calls
                .into_iter()
                .map(|c| (c.call_id, c.name, c.args))
                .collect();
            for (id, name, _) in &work {
                if let Some(source) = self.tools.source(name) {
                    run.set_source(id, source);
                }
            }
            let mut jobs = Vec::new();
            for (call_id, result, job) in self.run_calls(&work).await {
                if let Some(job) = job {
                    jobs.push((call_id.clone(), job));
                }
                run.apply(
                    StreamLine::ToolResult {
                        call_id,
                        run: result,
                    },
                    &mut events,
                );
                for e in events.drain(..) {
                    publish.publish(&e);
                }
            }
            if !jobs.is_empty()
                && self
                    .follow_jobs(jobs, &job, &mut run, &mut events, publish)
                    .await
            {
                run.end_with(End::Aborted);
                break;
            }
            if run.reply().has_gated_calls() {
                run.end_with(End::Done {
                    stop_reason: MessageStopReason::ToolUse,
                    usage: None,
                });
                break;
            }
        }
        if !run.ended() && !run.stopped() {
            run.end_with(End::Budget);
        }
        run.end()
    }

    /// One model turn into `run`; the stop reason, or `None` when the run
    /// ended (a failure or cut, already recorded in `run`).
    #[allow(clippy::too_many_arguments)]
    async fn turn(
        &self,
        client: &ProviderClient,
        job: &Job<'_>,
        conversation: &Conversation,
        offered: &[ToolSpec],
        run: &mut LineRun,
        events: &mut Vec<AssistantEvent>,
        publish: Publish<'_>,
    ) -> Option<MessageStopReason> {
        let request = TurnRequest {
            model: &job.model.id,
            conversation,
            tools: offered,
            effort: job.effort.as_deref(),
            max_tokens: self.options.max_tokens,
        };
        let mut stop = None;
        let mut ids = CallIds::new(run.reply().parts());
        let mut sink = |o: Output| match o {
            Output::Line(line) => {
                run.apply(ids.unique(line), events);
                for e in events.drain(..) {
                    publish.publish(&e);
                }
            }
            Output::End { stop_reason, usage } => {
                stop = Some(stop_reason.clone());
                run.apply(StreamLine::TurnEnd { stop_reason, usage }, events);
                for e in events.drain(..) {
                    publish.publish(&e);
                }
            }
        };
        let result = client.stream_turn(&request, &mut sink).await;
        match result {
            _ if run.stopped() => None,
            Ok(Finish::Ended) => stop,
            Ok(Finish::Cut) => {
                run.end_with(End::Cut);
                None
            }
            Err(e) if e.interrupted => {
                run.end_with(End::CutBy {
                    code: e.code,
                    message: e.message,
                });
                None
            }
            Err(e) => {
                run.end_with(End::ProviderError {
                    code: e.code,
                    message: e.message,
                    usage: None,
                });
                None
            }
        }
    }

    /// The specs of the tools offered: `names` (those the host has), or all.
    fn offered(&self, names: Option<&[String]>) -> Vec<ToolSpec> {
        match names {
            None => self.tools.specs().cloned().collect(),
            Some(names) => names
                .iter()
                .filter_map(|n| {
                    let spec = self.tools.spec(n);
                    if spec.is_none() {
                        tracing::warn!("tool {n:?} is asked for but no MCP server here offers it");
                    }
                    spec.cloned()
                })
                .collect(),
        }
    }

    /// Follows the work the turn's accepted calls queued, all at once,
    /// until each settles, the wait runs out or the job is stopped; what
    /// is seen goes into `run` as observations, published as they come.
    /// Whether the job was stopped.
    async fn follow_jobs(
        &self,
        jobs: Vec<(String, JobHandle)>,
        job: &Job<'_>,
        run: &mut LineRun,
        events: &mut Vec<AssistantEvent>,
        publish: Publish<'_>,
    ) -> bool {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let wait = self.options.job_wait;
        let following: Vec<_> = jobs
            .into_iter()
            .map(|(call_id, handle)| {
                let tx = tx.clone();
                let tools = self.tools.clone();
                let stop = job.stop.clone();
                async move {
                    tasks::follow(&tools, &handle, wait, stop, |observed| {
                        let _ = tx.send((call_id.clone(), observed));
                    })
                    .await
                }
            })
            .collect();
        drop(tx);
        let apply = async {
            while let Some((call_id, observed)) = rx.recv().await {
                run.apply(StreamLine::Observation { call_id, observed }, events);
                for e in events.drain(..) {
                    publish.publish(&e);
                }
            }
        };
        tokio::join!(futures_util::future::join_all(following), apply);
        job.stop.as_ref().is_some_and(|s| *s.borrow())
    }

    /// Runs calls concurrently (at most `tool_jobs` at once); results in
    /// call order, each with the job it queued, if any.
    async fn run_calls(
        &self,
        calls: &[(String, String, serde_json::Value)],
    ) -> Vec<(String, ToolRun, Option<JobHandle>)> {
        let tools = self.tools.clone();
        let wait = self.options.job_wait;
        // Owned futures: a stream over a borrowing closure would make the
        // caller's future fail the `Send` check (a higher-ranked closure).
        let futures: Vec<_> = calls
            .iter()
            .cloned()
            .map(|(id, name, args)| {
                let tools = tools.clone();
                async move {
                    let (run, job) = tools.call_job(&name, &args, wait).await;
                    (id, run, job)
                }
            })
            .collect();
        futures_util::stream::iter(futures)
            .buffered(self.options.tool_jobs.max(1))
            .collect()
            .await
    }
}

/// The job's approval rule, with the words a user is shown taken from what
/// the MCP server says of the tool (its title and annotations): the
/// `tool_call` label and the `confirm_required` target and consequence.
struct Described {
    inner: Arc<dyn ApprovalPolicy + Send + Sync>,
    tools: Arc<ToolHost>,
}

impl Described {
    fn shown(&self, call: &FinishedCall) -> Option<(String, &tools::ToolInfo)> {
        let info = self.tools.info(&call.name)?;
        let title = info.title.clone().unwrap_or_else(|| call.name.clone());
        Some((title, info))
    }
}

impl ApprovalPolicy for Described {
    fn needs_approval(&self, call: &FinishedCall) -> bool {
        self.inner.needs_approval(call)
    }

    fn confirmation(&self, call: &FinishedCall) -> Confirmation {
        match self.shown(call) {
            None => self.inner.confirmation(call),
            Some((title, info)) => Confirmation {
                target: truncate_words(&format!("{title} {}", call.arguments), MAX_WORDS),
                consequence: truncate_words(&info.consequence(&format!("'{title}'")), MAX_WORDS),
                extra: Default::default(),
            },
        }
    }

    fn label(&self, call: &FinishedCall) -> Option<String> {
        match self.shown(call) {
            None => self.inner.label(call),
            Some((title, _)) => Some(truncate_words(&format!("{title} {}", call.arguments), 200)),
        }
    }

    fn effects(&self, call: &FinishedCall) -> Option<Effects> {
        match self.tools.info(&call.name) {
            None => self.inner.effects(call),
            Some(info) => info.effects(),
        }
    }
}

/// Keeps tool call ids unique within a reply: providers that have none
/// (Ollama) get ids numbered per turn from the adapter, which a second
/// tool turn would repeat; a repeated id gets a suffix for this turn.
struct CallIds {
    used: HashSet<String>,
    renamed: HashMap<String, String>,
}

impl CallIds {
    fn new(parts: &[PlainContentPartsItem]) -> CallIds {
        let used = parts
            .iter()
            .filter_map(|p| match p {
                PlainContentPartsItem::ToolCallPart(c) => Some(c.call_id.clone()),
                _ => None,
            })
            .collect();
        CallIds {
            used,
            renamed: HashMap::new(),
        }
    }

    fn unique(&mut self, line: StreamLine) -> StreamLine {
        match line {
            StreamLine::Event(AssistantMessageEvent::ToolcallStart {
                content_index,
                id,
                tool_name,
            }) => {
                let mut fresh = id.clone();
                let mut n = 1;
                while self.used.contains(&fresh) {
                    n += 1;
                    fresh = format!("{id}_{n}");
                }
                self.used.insert(fresh.clone());
                if fresh != id {
                    self.renamed.insert(id, fresh.clone());
                }
                StreamLine::Event(AssistantMessageEvent::ToolcallStart {
                    content_index,
                    id: fresh,
                    tool_name,
                })
            }
            StreamLine::Event(AssistantMessageEvent::ToolcallEnd {
                content_index,
                mut tool_call,
            }) => {
                if let Some(fresh) = self.renamed.get(&tool_call.id) {
                    tool_call.id = fresh.clone();
                }
                StreamLine::Event(AssistantMessageEvent::ToolcallEnd {
                    content_index,
                    tool_call,
                })
            }
            other => other,
        }
    }
}

/// The model for a reply (seed 001): `override_` (the host's `--model`),
/// else the request's, else the previous reply's in the branch, else
/// `default`.
pub fn choose_model(
    override_: Option<&ModelSpec>,
    request: Option<&GenerationRequest>,
    branch: &[ChatRecord],
    default: Option<&ModelSpec>,
) -> Option<ModelSpec> {
    if let Some(m) = override_ {
        return Some(m.clone());
    }
    if let Some(m) = request.and_then(|r| r.model.as_ref()) {
        return Some(ModelSpec::from_ref(m));
    }
    let previous = branch
        .iter()
        .rev()
        .filter(|r| r.message.role == MessageRole::Assistant)
        .find_map(|r| r.message.model.as_ref());
    if let Some(m) = previous {
        return Some(ModelSpec::from_ref(m));
    }
    default.cloned()
}

/// The tools for a reply (seed 001): the request's, else the chat's, else
/// the user's switched-on ones; `None` means every tool the host has.
pub fn choose_tools(
    request: Option<&GenerationRequest>,
    chat: Option<&[String]>,
    settings: Option<&[String]>,
) -> Option<Vec<String>> {
    request
        .and_then(|r| r.tools.clone())
        .or_else(|| chat.map(<[String]>::to_vec))
        .or_else(|| settings.map(<[String]>::to_vec))
}
