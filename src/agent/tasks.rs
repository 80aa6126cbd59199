//! MCP tasks for the tool host: a tool call the server runs as a task
//! (`accepted`, its `jobId` the task id), followed until it settles.
//!
//! The servers in the field speak the tasks utility of protocol revision
//! 2025-11-25 (SEP-1686): the server advertises
//! `capabilities.tasks.requests.tools.call`, a tool says
//! `execution.taskSupport` (`forbidden` | `optional` | `required`); the
//! client sends `tools/call` with a `task` param (`{"ttl": ms}`) and gets
//! `{"task": {taskId, status, statusMessage, ttl, pollInterval, …}}`
//! instead of the result, polls `tasks/get`, fetches the result with
//! `tasks/result` once the status is `completed`, and may send
//! `tasks/cancel`. rmcp 3.11 types the later tasks extension (SEP-2663:
//! `resultType: "task"`, `ttlMs`, `pollIntervalMs`, no `execution` on a
//! tool, the capability under `extensions`), so its typed listing drops
//! both the capability and `taskSupport`, and its `call_tool` refuses a
//! task answer. Here:
//!
//! - [`Discovery`] reads the capability and each tool's `taskSupport`
//!   from the server's own bytes while it is being connected (a stdio
//!   child's stdout through [`Tap`], an HTTP server's answers in
//!   `mcp_http`), then stops looking.
//! - The four requests go as rmcp custom requests (raw methods); whatever
//!   typed shape rmcp decodes an answer into is turned back into JSON and
//!   read by field name, so both revisions' names are taken
//!   (`pollInterval` / `pollIntervalMs`).
//! - [`follow`] polls one task and says what it sees as [`Observed`]s.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use rmcp::model::{CallToolResult, ClientRequest, CustomRequest, JsonObject};
use rmcp::service::{Peer, RoleClient, RxJsonRpcMessage, ServiceError, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::time::Instant;

use super::tools::{JobHandle, ToolHost};
use crate::chat::Observed;
use crate::lexicon::chat::gel::assistant::subscribe_reply::{ObservationReason, ObservationState};

/// The shortest and longest wait between two polls, whatever the server
/// suggests.
pub const POLL_FLOOR: Duration = Duration::from_millis(200);
pub const POLL_CEILING: Duration = Duration::from_secs(10);
/// How long a task is asked to be kept (`ttl`) beyond the wait.
const TTL_MARGIN: Duration = Duration::from_secs(60);
/// The most of a discovery message read, in bytes.
const MAX_DISCOVERY_LINE: usize = 16 * 1024 * 1024;
/// The captured observation's `text`: the result's first line, cut here.
const CAPTURED_TEXT: usize = 200;

/// What one server says of tasks while it is connected.
#[derive(Clone, Debug, Default)]
pub struct Discovery(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    closed: AtomicBool,
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    tool_calls: bool,
    support: HashMap<String, String>,
    partial: Vec<u8>,
}

/// The tasks a server runs, as discovered.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskSupport {
    /// The server advertises `tasks.requests.tools.call`.
    pub tool_calls: bool,
    /// Each tool's `execution.taskSupport`, by the server's tool name.
    pub tools: HashMap<String, String>,
}

impl TaskSupport {
    /// Whether `tool` is called as a task: the server takes task-augmented
    /// calls and the tool says `optional` or `required`.
    pub fn as_task(&self, tool: &str) -> bool {
        self.tool_calls
            && matches!(
                self.tools.get(tool).map(String::as_str),
                Some("optional" | "required")
            )
    }
}

impl Discovery {
    pub fn new() -> Discovery {
        Discovery::default()
    }

    /// Whether it still looks.
    pub fn open(&self) -> bool {
        !self.0.closed.load(Ordering::Relaxed)
    }

    /// Stops looking; what was seen.
    pub fn close(&self) -> TaskSupport {
        self.0.closed.store(true, Ordering::Relaxed);
        let mut seen = self.0.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.partial = Vec::new();
        TaskSupport {
            tool_calls: seen.tool_calls,
            tools: std::mem::take(&mut seen.support),
        }
    }

    /// One whole JSON-RPC message (or a batch) as the server sent it.
    pub fn message(&self, bytes: &[u8]) {
        if !self.open() {
            return;
        }
        let mut seen = self.0.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.read(bytes);
    }

    /// Bytes of a newline-delimited stream of messages (stdio).
    fn bytes(&self, chunk: &[u8]) {
        let mut seen = self.0.seen.lock().unwrap_or_else(|e| e.into_inner());
        let mut rest = chunk;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            let (line, after) = rest.split_at(end);
            if seen.partial.is_empty() {
                seen.read(line);
            } else {
                let mut whole = std::mem::take(&mut seen.partial);
                whole.extend_from_slice(line);
                seen.read(&whole);
            }
            rest = &after[1..];
        }
        if seen.partial.len() + rest.len() > MAX_DISCOVERY_LINE {
            seen.partial.clear();
        } else {
            seen.partial.extend_from_slice(rest);
        }
    }
}

impl Seen {
    fn read(&mut self, bytes: &[u8]) {
        let Ok(value) = serde_json::from_slice::<Value>(bytes) else {
            return;
        };
        let messages = match value {
            Value::Array(all) => all,
            one => vec![one],
        };
        for m in messages {
            let Some(result) = m.get("result") else {
                continue;
            };
            if result
                .pointer("/capabilities/tasks/requests/tools/call")
                .is_some()
            {
                self.tool_calls = true;
            }
            for tool in result
                .get("tools")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let (Some(name), Some(support)) = (
                    tool.get("name").and_then(Value::as_str),
                    tool.pointer("/execution/taskSupport")
                        .and_then(Value::as_str),
                ) else {
                    continue;
                };
                self.support.insert(name.to_owned(), support.to_owned());
            }
        }
    }
}

/// A reader that shows what passes to a [`Discovery`] while it looks.
pub struct Tap<R> {
    inner: R,
    discovery: Discovery,
}

impl<R: AsyncRead + Unpin> AsyncRead for Tap<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && this.discovery.open() {
            this.discovery.bytes(&buf.filled()[before..]);
        }
        polled
    }
}

/// A stdio server: the child process and the line transport over its
/// stdin and (tapped) stdout. Closing ends stdin, waits a little for the
/// child to leave, then kills it; dropping kills it.
pub struct Child {
    child: Option<tokio::process::Child>,
    io: AsyncRwTransport<RoleClient, Tap<ChildStdout>, ChildStdin>,
}

impl Child {
    /// Starts `cmd` (stderr to nowhere), its stdout shown to `discovery`.
    pub fn spawn(mut cmd: tokio::process::Command, discovery: Discovery) -> std::io::Result<Child> {
        use std::process::Stdio;
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        let mut child = cmd.spawn()?;
        let missing = || std::io::Error::other("the child's stdio is not piped");
        let stdin = child.stdin.take().ok_or_else(missing)?;
        let stdout = child.stdout.take().ok_or_else(missing)?;
        let read = Tap {
            inner: stdout,
            discovery,
        };
        Ok(Child {
            child: Some(child),
            io: AsyncRwTransport::new_client(read, stdin),
        })
    }
}

impl Transport<RoleClient> for Child {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.io.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.io.receive()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        let closed = self.io.close().await;
        if let Some(mut child) = self.child.take()
            && tokio::time::timeout(Duration::from_secs(3), child.wait())
                .await
                .is_err()
        {
            let _ = child.kill().await;
        }
        closed
    }
}

/// A task as the server describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskState {
    pub task_id: String,
    /// `working`, `input_required`, `completed`, `failed`, `cancelled`.
    pub status: String,
    pub message: Option<String>,
    pub poll: Option<Duration>,
}

impl TaskState {
    /// Reads a task object of either revision.
    fn of(v: &Value) -> Option<TaskState> {
        let poll = v
            .get("pollInterval")
            .or_else(|| v.get("pollIntervalMs"))
            .and_then(Value::as_u64)
            .map(Duration::from_millis);
        Some(TaskState {
            task_id: v.get("taskId")?.as_str()?.to_owned(),
            status: v.get("status")?.as_str()?.to_owned(),
            message: v
                .get("statusMessage")
                .and_then(Value::as_str)
                .map(str::to_owned),
            poll,
        })
    }

    fn settled(&self) -> bool {
        matches!(self.status.as_str(), "completed" | "failed" | "cancelled")
    }
}

/// What a task-augmented call answered.
#[derive(Debug)]
pub enum Created {
    /// The server made a task.
    Task(TaskState),
    /// The server ran the call at once (a tool that may run either way).
    Done(CallToolResult),
}

/// One raw request; the answer as JSON, whatever rmcp typed it as.
async fn request(
    peer: &Peer<RoleClient>,
    method: &str,
    params: Value,
) -> Result<Value, ServiceError> {
    let answer = peer
        .send_request(ClientRequest::CustomRequest(CustomRequest::new(
            method,
            Some(params),
        )))
        .await?;
    serde_json::to_value(&answer).map_err(|_| ServiceError::UnexpectedResponse)
}

/// `tools/call` as a task, kept `wait` and a margin.
pub async fn create(
    peer: &Peer<RoleClient>,
    tool: &str,
    arguments: &JsonObject,
    wait: Duration,
) -> Result<Created, ServiceError> {
    let ttl = u64::try_from((wait + TTL_MARGIN).as_millis()).unwrap_or(u64::MAX);
    let answer = request(
        peer,
        "tools/call",
        json!({"name": tool, "arguments": arguments, "task": {"ttl": ttl}}),
    )
    .await?;
    // 2025-11-25 nests the task; SEP-2663 flattens it with a resultType.
    let task = match answer.get("task") {
        Some(t) => Some(t),
        None if answer.get("resultType").and_then(Value::as_str) == Some("task") => Some(&answer),
        None => None,
    };
    match task {
        Some(t) => TaskState::of(t)
            .map(Created::Task)
            .ok_or(ServiceError::UnexpectedResponse),
        None => serde_json::from_value(answer)
            .map(Created::Done)
            .map_err(|_| ServiceError::UnexpectedResponse),
    }
}

/// `tasks/get`.
pub async fn get(peer: &Peer<RoleClient>, task_id: &str) -> Result<TaskState, ServiceError> {
    let answer = request(peer, "tasks/get", json!({"taskId": task_id})).await?;
    TaskState::of(&answer).ok_or(ServiceError::UnexpectedResponse)
}

/// `tasks/result`: the call's result.
pub async fn result(
    peer: &Peer<RoleClient>,
    task_id: &str,
) -> Result<CallToolResult, ServiceError> {
    let answer = request(peer, "tasks/result", json!({"taskId": task_id})).await?;
    serde_json::from_value(answer).map_err(|_| ServiceError::UnexpectedResponse)
}

/// `tasks/cancel`.
pub async fn cancel(peer: &Peer<RoleClient>, task_id: &str) -> Result<(), ServiceError> {
    request(peer, "tasks/cancel", json!({"taskId": task_id}))
        .await
        .map(|_| ())
}

fn observed(state: ObservationState, text: Option<String>) -> Observed {
    Observed {
        state,
        text,
        reason: None,
        output: None,
    }
}

fn ended(reason: ObservationReason, text: String) -> Observed {
    Observed {
        reason: Some(reason),
        ..observed(ObservationState::Unavailable, Some(text))
    }
}

/// The first line of `output` with text, cut to a sentence's length.
fn first_line(output: &str) -> Option<String> {
    let line = output.lines().map(str::trim).find(|l| !l.is_empty())?;
    if line.len() <= CAPTURED_TEXT {
        return Some(line.to_owned());
    }
    let mut end = CAPTURED_TEXT;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    Some(format!("{}…", &line[..end]))
}

/// Resolves once `stop` says stop (never without one).
async fn stopped(stop: &mut Option<tokio::sync::watch::Receiver<bool>>) {
    if let Some(rx) = stop
        && rx.wait_for(|s| *s).await.is_ok()
    {
        return;
    }
    std::future::pending().await
}

/// Follows `job` until it settles, `wait` runs out (then it is cancelled)
/// or `stop` says stop; each thing seen goes to `emit`: `awaited` when
/// the status or its message changes, then one of `captured` (with the
/// result as the model reads it), `unavailable` (`failed`, `cancelled`),
/// `silent` (`exhausted`) or `interrupted`.
pub async fn follow(
    host: &ToolHost,
    job: &JobHandle,
    wait: Duration,
    mut stop: Option<tokio::sync::watch::Receiver<bool>>,
    mut emit: impl FnMut(Observed),
) {
    let deadline = Instant::now() + wait;
    let mut shown: Option<(String, Option<String>)> = None;
    let mut state = job.initial.clone();
    let mut poll = job.initial.poll;
    loop {
        if !state.settled() {
            let now = (state.status.clone(), state.message.clone());
            if shown.as_ref() != Some(&now) {
                emit(observed(ObservationState::Awaited, state.message.clone()));
                shown = Some(now);
            }
        }
        match state.status.as_str() {
            "completed" => {
                let fetched = tokio::select! {
                    r = host.job_result(job) => r,
                    () = stopped(&mut stop) => {
                        emit(interrupted());
                        return;
                    }
                };
                match fetched {
                    Ok((output, is_error)) => emit(Observed {
                        text: first_line(&output).or_else(|| {
                            Some(if is_error {
                                "the work ended with an error".to_owned()
                            } else {
                                "the work finished".to_owned()
                            })
                        }),
                        output: Some(output),
                        ..observed(ObservationState::Captured, None)
                    }),
                    Err(e) => emit(ended(ObservationReason::Failed, e)),
                }
                return;
            }
            "failed" => {
                let text = state
                    .message
                    .unwrap_or_else(|| "the work failed".to_owned());
                emit(ended(ObservationReason::Failed, text));
                return;
            }
            "cancelled" => {
                let text = state
                    .message
                    .unwrap_or_else(|| "the work was cancelled".to_owned());
                emit(ended(ObservationReason::Cancelled, text));
                return;
            }
            _ => {}
        }
        let nap = poll
            .unwrap_or(Duration::from_secs(1))
            .clamp(POLL_FLOOR, POLL_CEILING);
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let _ = tokio::time::timeout(Duration::from_secs(5), host.cancel_job(job)).await;
            emit(Observed {
                reason: Some(ObservationReason::Exhausted),
                ..observed(
                    ObservationState::Silent,
                    Some(format!(
                        "no result within {} s; the task was cancelled",
                        wait.as_secs_f64()
                    )),
                )
            });
            return;
        }
        let step = async {
            tokio::time::sleep(nap.min(left)).await;
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            tokio::time::timeout(left, host.job_state(job)).await.ok()
        };
        let got = tokio::select! {
            got = step => got,
            () = stopped(&mut stop) => {
                emit(interrupted());
                return;
            }
        };
        match got {
            // The wait ran out: said at the top.
            None => {}
            Some(Err(e)) => {
                emit(ended(ObservationReason::Failed, e));
                return;
            }
            Some(Ok(now)) => {
                poll = now.poll.or(poll);
                state = now;
            }
        }
    }
}

fn interrupted() -> Observed {
    observed(
        ObservationState::Interrupted,
        Some("the run was stopped while the work ran".to_owned()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ServerResult;

    /// The answers server-everything 2026.8.31 (TypeScript SDK 1.32)
    /// gives, as rmcp types them and back: every field read here
    /// survives.
    #[test]
    fn sep_1686_answers_survive_rmcp_typing() {
        let through = |v: Value| {
            let typed: ServerResult = serde_json::from_value(v).unwrap();
            serde_json::to_value(&typed).unwrap()
        };
        let task = json!({"taskId":"450c","status":"working","ttl":300000,"createdAt":"2026-12-02T01:45:03.542Z","lastUpdatedAt":"2026-12-02T01:45:03.547Z","pollInterval":1000,"statusMessage":"Gathering sources..."});
        let created = through(json!({ "task": task }));
        let state = TaskState::of(&created["task"]).unwrap();
        assert_eq!(state.task_id, "450c");
        assert_eq!(state.status, "working");
        assert_eq!(state.message.as_deref(), Some("Gathering sources..."));
        assert_eq!(state.poll, Some(Duration::from_millis(1000)));
        for status in ["working", "completed", "cancelled", "failed"] {
            let mut got = task.clone();
            got["status"] = json!(status);
            let state = TaskState::of(&through(got)).unwrap();
            assert_eq!(
                (state.task_id.as_str(), state.status.as_str()),
                ("450c", status)
            );
            assert_eq!(state.message.as_deref(), Some("Gathering sources..."));
        }
        let result = through(
            json!({"content":[{"type":"text","text":"# Research Report: tides\n\nbody"}],"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"450c"}}}),
        );
        let result: CallToolResult = serde_json::from_value(result).unwrap();
        assert_eq!(result.content.len(), 1);
    }

    #[test]
    fn discovery_reads_the_capability_and_task_support_from_split_lines() {
        let d = Discovery::new();
        let init = br#"{"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{},"tasks":{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}}},"jsonrpc":"2.0","id":0}"#;
        let list = br#"{"result":{"tools":[{"name":"echo","execution":{"taskSupport":"forbidden"}},{"name":"simulate-research-query","execution":{"taskSupport":"required"}},{"name":"plain"}]},"jsonrpc":"2.0","id":1}"#;
        let mut all = Vec::new();
        all.extend_from_slice(init);
        all.push(b'\n');
        all.extend_from_slice(list);
        all.push(b'\n');
        for piece in all.chunks(7) {
            d.bytes(piece);
        }
        let seen = d.close();
        assert!(seen.tool_calls);
        assert!(seen.as_task("simulate-research-query"));
        assert!(!seen.as_task("echo"));
        assert!(!seen.as_task("plain"));
        // Closed: nothing more is read.
        d.message(init);
        assert!(!d.open());
        let none = TaskSupport {
            tool_calls: false,
            ..seen
        };
        assert!(!none.as_task("simulate-research-query"));
    }

    #[test]
    fn the_captured_text_is_the_first_line_cut() {
        assert_eq!(
            first_line("\n# Research Report: tides\n\nmore").as_deref(),
            Some("# Research Report: tides")
        );
        let long = "é".repeat(300);
        let cut = first_line(&long).unwrap();
        assert!(cut.len() <= CAPTURED_TEXT + '…'.len_utf8() && cut.ends_with('…'));
        assert_eq!(first_line(" \n "), None);
    }
}
