//! One pending reply run through the model command.
//!
//! 1. Under the repository lock: the pending reply, the branch of the chat
//!    it answers (opened), and, for the reply to an approval answer, the
//!    answer's decisions. A reply whose user message this device cannot
//!    open is deferred (retried when new key wraps arrive).
//! 2. Without the lock, holding one of the `--assistant-jobs` permits:
//!    `sh -c CMD` in its own process group, with the request as JSON on
//!    stdin: `{"reply", "messages": [{key, role, status, content}…],
//!    "request", "approved": [{callId, name, arguments}…]}`. For a reply to
//!    an answer the command first prints one `tool_result` line per
//!    approved call (it runs the tools), then the model's run. Each stdout
//!    line goes through `LineRun`; each event is framed into the run log at
//!    once. The run ends at its end line (the command is then stopped), at
//!    a refused line, at EOF, or after `idle` without a line (a cut).
//! 3. Under the lock again: the reply written once (sealed, swapped on the
//!    pending CID). Only then do the last events go out, so a subscriber
//!    that sees `done` finds the record finished. If the write fails, a
//!    `failed` reply without content is written instead (content over the
//!    sealed size limit, say) and the subscribers get `error` + `done`; if
//!    another writer filled the reply first, the run is dropped and
//!    subscribers are told `assistant_run_conflict`.
//!
//! A command that cannot start, exits non-zero before the end, or prints a
//! line over [`MAX_LINE`] bytes or not UTF-8 fails the reply (kept, with
//! what was generated); one that ends or goes quiet without an end is a
//! cut (`interrupted`). Its stderr goes to the server's; the server's
//! password variable is not passed on.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::log::{RunLog, event_frame};
use super::{Assistant, Runner};
use crate::agent::EventSink;
use crate::agent::inputs::{HostChoices, Inputs};
use crate::chat::approval::{Decision, Resolution};
use crate::chat::run::{LineRun, begin_reply, settle_answer};
use crate::chat::store::PendingReply;
use crate::chat::{AssistantEvent, ChatStoreError, FinishedReply, ReplyKey, StreamLine, ToolRun};
use crate::lexicon::chat::gel::assistant::message::{MessageStatus, MessageStopReason};
use crate::lexicon::chat::gel::assistant::subscribe_reply::{DoneReason, ErrorCode};
use crate::server::state::AppState;

/// The longest stdout line taken from the command, in bytes (a text part
/// holds up to 500,000 characters, escaped in JSON).
pub const MAX_LINE: usize = 8 * 1024 * 1024;

/// What the run needs from the store.
struct Prepared {
    pending: PendingReply,
    resolution: Option<Resolution>,
    request: Value,
}

pub(super) async fn run_reply(
    state: Arc<AppState>,
    assistant: Arc<Assistant>,
    key: ReplyKey,
    log: Arc<RunLog>,
) {
    // One permit per running command: a burst of requests queues here.
    let Ok(_permit) = assistant.jobs.clone().acquire_owned().await else {
        return;
    };
    if let Runner::Agent {
        agent,
        default_model,
    } = &assistant.runner
    {
        return run_with_agent(
            state,
            assistant.clone(),
            key,
            log,
            agent.clone(),
            default_model.clone(),
        )
        .await;
    }
    let prepared = state
        .with_core(move |core| {
            let Some(chats) = core.chats()? else {
                return Ok(Err("the server holds no chat key".to_owned()));
            };
            Ok(prepare(chats, key).map_err(|e| e.to_string()))
        })
        .await;
    let Some(prepared) = taken(&assistant, key, prepared) else {
        return;
    };
    let mut out = Publisher { log };
    let (finished, end_events) = generate(&assistant, &prepared, &mut out).await;
    conclude(
        state,
        assistant,
        key,
        out,
        prepared.pending,
        finished,
        end_events,
    )
    .await;
}

/// The inputs a run read under the lock, or `None` after giving the claim
/// up: the reply is not pending any more, does not open here (left to
/// another device, looked at again when key wraps come), or could not be
/// read.
fn taken<T>(
    assistant: &Assistant,
    key: ReplyKey,
    read: Result<Result<Option<T>, String>, crate::server::error::XrpcError>,
) -> Option<T> {
    match read {
        Ok(Ok(Some(t))) => return Some(t),
        Ok(Ok(None)) => tracing::info!(
            "assistant: reply {key} not run here (finished, or its message does not open)"
        ),
        Ok(Err(reason)) => tracing::warn!("assistant: reply {key} not run: {reason}"),
        Err(e) => tracing::error!("assistant: reply {key}: {}", e.message),
    }
    assistant.release(&key.to_string());
    None
}

/// A reply run by the built-in loop.
async fn run_with_agent(
    state: Arc<AppState>,
    assistant: Arc<Assistant>,
    key: ReplyKey,
    log: Arc<RunLog>,
    agent: Arc<crate::agent::Agent>,
    default_model: crate::provider::ModelSpec,
) {
    let read = state
        .with_core(move |core| {
            let Some(chats) = core.chats()? else {
                return Ok(Err("the server holds no chat key".to_owned()));
            };
            let pending = match chats.pending_reply(&key) {
                Ok(p) => p,
                Err(ChatStoreError::ReplyAlreadyFinished { .. }) => return Ok(Ok(None)),
                Err(e) => return Ok(Err(e.to_string())),
            };
            Ok(Inputs::read(chats, key.message())
                .map(|i| i.map(|i| (pending, i)))
                .map_err(|e| e.to_string()))
        })
        .await;
    let Some((pending, inputs)) = taken(&assistant, key, read) else {
        return;
    };
    let mut out = Publisher { log };
    let host = HostChoices {
        model: None,
        default_model: Some(default_model),
        approve_tools: assistant.approve_tools.clone(),
    };
    let finished = match inputs.model(&host) {
        Ok(model) => {
            let job = inputs.job(&pending, model, &host);
            agent.run(job, &mut out).await
        }
        Err(e) => {
            let mut run = LineRun::new(crate::chat::Reply::new(key, assistant.policy.clone()));
            run.end_with(crate::chat::End::ProviderError {
                code: ErrorCode::AssistantModelNotOffered,
                message: e.to_string(),
                usage: None,
            });
            run.end()
        }
    };
    conclude(
        state,
        assistant,
        key,
        out,
        pending,
        finished.reply,
        finished.events,
    )
    .await;
}

/// Writes the finished reply and ends the run's stream.
#[allow(clippy::too_many_arguments)]
async fn conclude(
    state: Arc<AppState>,
    assistant: Arc<Assistant>,
    key: ReplyKey,
    mut out: Publisher,
    pending: PendingReply,
    finished: FinishedReply,
    end_events: Vec<AssistantEvent>,
) {
    let interrupted = AssistantEvent::Done {
        reason: DoneReason::Interrupted,
    };
    // The events that end the stream, and whether the run stays known here.
    let (ending, kept) = match write(&state, pending, finished).await {
        Written::Done => (end_events, true),
        Written::Instead(reason) => {
            tracing::warn!("assistant: reply {key} written as failed: {reason}");
            (vec![internal_error(&reason), interrupted], true)
        }
        // Later subscribers get the record the winner wrote.
        Written::Lost => (
            vec![
                AssistantEvent::Error {
                    code: ErrorCode::AssistantRunConflict,
                    message: Some("another writer filled this reply first".into()),
                },
                interrupted,
            ],
            false,
        ),
        // Still pending: run again at the next start.
        Written::Not(reason) => {
            tracing::error!("assistant: reply {key} not written: {reason}");
            (vec![internal_error(&reason), interrupted], false)
        }
    };
    for e in &ending {
        out.publish(e);
    }
    out.log.end();
    if kept {
        assistant.finished(&key.to_string());
    } else {
        assistant.release(&key.to_string());
    }
}

fn internal_error(reason: &str) -> AssistantEvent {
    AssistantEvent::Error {
        code: ErrorCode::Internal,
        message: Some(crate::chat::approval::truncate_words(reason, 1000)),
    }
}

/// How writing the finished reply went.
enum Written {
    /// As generated.
    Done,
    /// It could not be written as generated (why): a `failed` reply
    /// without content was written instead.
    Instead(String),
    /// Another writer filled it first.
    Lost,
    /// Nothing could be written (why): it is still pending.
    Not(String),
}

async fn write(state: &Arc<AppState>, pending: PendingReply, finished: FinishedReply) -> Written {
    let written = state
        .with_core(move |core| {
            let Some(chats) = core.chats()? else {
                return Ok(Written::Not("the server holds no chat key".into()));
            };
            let first = match chats.finish_reply(&pending, &finished) {
                Ok(_) => return Ok(Written::Done),
                Err(ChatStoreError::ReplyAlreadyFinished { .. }) => return Ok(Written::Lost),
                Err(e) => e.to_string(),
            };
            let mut failed = finished;
            failed.status = MessageStatus::Failed;
            failed.stop_reason = Some(MessageStopReason::Error);
            failed.content.parts.clear();
            failed.waiting.clear();
            Ok(match chats.finish_reply(&pending, &failed) {
                Ok(_) => Written::Instead(first),
                Err(ChatStoreError::ReplyAlreadyFinished { .. }) => Written::Lost,
                Err(e) => Written::Not(format!("{first}; then: {e}")),
            })
        })
        .await;
    written.unwrap_or_else(|e| Written::Not(e.message))
}

/// The pending reply and the request for the command; `None` if `key` is
/// not pending any more or its message does not open here.
fn prepare(
    chats: &mut crate::chat::ChatStore,
    key: ReplyKey,
) -> Result<Option<Prepared>, ChatStoreError> {
    let pending = match chats.pending_reply(&key) {
        Ok(p) => p,
        Err(ChatStoreError::ReplyAlreadyFinished { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let (branch, resolution) = chats.reply_inputs(key.message())?;
    let Some(user) = branch.last().filter(|r| r.key == key.message().to_string()) else {
        return Ok(None);
    };
    if user.content.is_none() {
        tracing::info!(
            "assistant: reply {key}: its message does not open here; left to another device"
        );
        return Ok(None);
    }
    let approved: Vec<Value> = resolution
        .iter()
        .flat_map(|r| &r.calls)
        .filter(|c| c.decision == Decision::Approved)
        .map(|c| {
            json!({
                "callId": c.call.call_id,
                "name": c.call.name,
                "arguments": c.call.arguments.as_deref().and_then(|a| serde_json::from_str::<Value>(a).ok()),
            })
        })
        .collect();
    let messages: Vec<Value> = branch
        .iter()
        .map(|r| {
            json!({
                "key": r.key,
                "role": r.message.role,
                "status": r.message.status,
                "content": r.content,
            })
        })
        .collect();
    let request = json!({
        "reply": key.to_string(),
        "messages": messages,
        "request": user.message.request,
        "approved": approved,
    });
    Ok(Some(Prepared {
        pending,
        resolution,
        request,
    }))
}

/// Frames events into the run log (the run is its only writer, so the
/// seq read and the push cannot interleave with another's).
struct Publisher {
    log: Arc<RunLog>,
}

impl crate::agent::EventSink for Publisher {
    fn publish(&mut self, event: &AssistantEvent) {
        let seq = self.log.next_seq();
        self.log.push(event_frame(event, seq));
    }
}

/// Kills the command's whole process group when dropped (the run ended,
/// was refused, or its task was aborted at shutdown): `sh -c` may have
/// started a pipeline, and killing `sh` alone would leave it running.
struct ProcessGroup(Option<u32>);

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(pgid) = self.0.and_then(|p| i32::try_from(p).ok()) {
            // SAFETY: killpg only sends a signal; the group is the one the
            // child leads (`process_group(0)`), and a group that is gone
            // makes it fail with ESRCH, which is fine.
            unsafe {
                libc::killpg(pgid, libc::SIGKILL);
            }
        }
    }
}

/// Runs the command and feeds its output through the reply; returns the
/// finished reply, the events its end makes (published after the write)
/// and the model that answered.
async fn generate(
    assistant: &Assistant,
    prepared: &Prepared,
    out: &mut Publisher,
) -> (FinishedReply, Vec<AssistantEvent>) {
    let policy = assistant.policy.clone();
    let fail_now = |reason: &str| {
        let f = failed_run(&prepared.pending, policy.clone(), reason).end();
        (f.reply, f.events)
    };
    let Runner::Command(script) = &assistant.runner else {
        return fail_now("the assistant has no model command");
    };
    let mut command = tokio::process::Command::new("sh");
    command
        .arg("-c")
        .arg(script)
        .env("GELSTORE_REPLY", prepared.pending.key.to_string())
        // The password `gelstore serve` may have been given (cli::sync::PASSWORD_ENV).
        .env_remove("GELSTORE_PASSWORD")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    #[cfg(unix)]
    command.process_group(0);
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => return fail_now(&format!("the assistant command did not start: {e}")),
    };
    let _group = ProcessGroup(child.id());
    if let Some(mut stdin) = child.stdin.take() {
        let body = prepared.request.to_string();
        // A command that does not read its input is fine: ignore the pipe
        // closing early.
        tokio::spawn(async move {
            let _ = stdin.write_all(body.as_bytes()).await;
            let _ = stdin.shutdown().await;
        });
    }
    let Some(stdout) = child.stdout.take() else {
        return fail_now("the assistant command has no stdout");
    };
    let mut lines = BufReader::new(stdout);
    let mut buf = Vec::new();
    let idle = assistant.idle;

    // The approved calls' results come first (the command ran the tools).
    let settled = match &prepared.resolution {
        None => None,
        Some(resolution) => match tool_results(resolution, &mut lines, &mut buf, idle).await {
            Ok(runs) => match settle_answer(resolution, &runs) {
                Ok(s) => Some(s),
                Err(e) => return fail_now(&e.to_string()),
            },
            Err(reason) => return fail_now(&reason),
        },
    };
    let (mut run, first) = match begin_reply(&prepared.pending, policy.clone(), settled.as_deref())
    {
        Ok(r) => r,
        Err(e) => return fail_now(&e.to_string()),
    };
    for e in &first {
        out.publish(e);
    }
    let mut events = Vec::new();
    let mut eof = false;
    while !run.stopped() && !run.ended() {
        match tokio::time::timeout(idle, read_line(&mut lines, &mut buf)).await {
            Err(_) => run.cut_by(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no output for {} s", idle.as_secs()),
            )),
            Ok(Ok(None)) => {
                eof = true;
                break;
            }
            Ok(Ok(Some(Ok(line)))) => run.feed(&line, &mut events),
            Ok(Ok(Some(Err(reason)))) => run.refuse(reason),
            Ok(Err(e)) => run.cut_by(e),
        }
        for e in events.drain(..) {
            out.publish(&e);
        }
    }
    // At EOF without an end, the exit status tells a crash from a cut.
    let status = if eof && !run.ended() {
        tokio::time::timeout(EXIT_WAIT, child.wait())
            .await
            .ok()
            .and_then(Result::ok)
    } else {
        None
    };
    if let Some(status) = status
        && !status.success()
    {
        let line = json!({
            "type": "error",
            "message": format!("the assistant command exited ({status}) before the reply ended"),
        });
        run.feed(&line.to_string(), &mut events);
        for e in events.drain(..) {
            out.publish(&e);
        }
    }

    let f = run.end();
    (f.reply, f.events)
}

/// How long a command that closed its output may take to exit.
const EXIT_WAIT: Duration = Duration::from_secs(5);

/// A run that fails at once with a provider error `message`.
fn failed_run(
    pending: &PendingReply,
    policy: Arc<dyn crate::chat::ApprovalPolicy + Send + Sync>,
    message: &str,
) -> LineRun {
    let mut run = LineRun::new(crate::chat::Reply::new(pending.key, policy));
    let line = json!({"type": "error", "message": message});
    run.feed(&line.to_string(), &mut Vec::new());
    run
}

/// Reads one `tool_result` line per approved call of `resolution`.
async fn tool_results<R: AsyncBufRead + Unpin>(
    resolution: &Resolution,
    lines: &mut R,
    buf: &mut Vec<u8>,
    idle: Duration,
) -> Result<BTreeMap<String, ToolRun>, String> {
    let mut want: Vec<&str> = resolution
        .calls
        .iter()
        .filter(|c| c.decision == Decision::Approved)
        .map(|c| c.call.call_id.as_str())
        .collect();
    let mut runs = BTreeMap::new();
    while !want.is_empty() {
        let read = tokio::time::timeout(idle, read_line(lines, buf))
            .await
            .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()));
        let line = match read {
            Ok(Some(Ok(line))) => line,
            Ok(Some(Err(reason))) => return Err(reason),
            Ok(None) | Err(_) => {
                return Err(format!(
                    "the assistant command gave no result for approved call(s) {}",
                    want.join(", ")
                ));
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        match StreamLine::parse(&line) {
            Ok(StreamLine::ToolResult { call_id, run }) if want.contains(&call_id.as_str()) => {
                want.retain(|w| *w != call_id);
                runs.insert(call_id, run);
            }
            _ => {
                return Err(format!(
                    "expected a tool_result line for each approved call ({}) before the model's run",
                    want.join(", ")
                ));
            }
        }
    }
    Ok(runs)
}

/// The next line of `reader` without its newline: `None` at the end,
/// `Some(Err(reason))` for a line over [`MAX_LINE`] bytes or not UTF-8.
async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<Result<String, String>>> {
    buf.clear();
    let n = (&mut *reader)
        .take(MAX_LINE as u64 + 1)
        .read_until(b'\n', buf)
        .await?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
    } else if buf.len() > MAX_LINE {
        return Ok(Some(Err(format!("a line over {MAX_LINE} bytes"))));
    }
    Ok(Some(
        std::str::from_utf8(buf)
            .map(str::to_owned)
            .map_err(|_| "a line that is not UTF-8".to_owned()),
    ))
}
