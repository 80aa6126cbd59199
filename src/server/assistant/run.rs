//! One pending reply run through the model command.
//!
//! 1. Under the repository lock: the pending reply, the branch of the chat
//!    it answers (opened), and, for the reply to an approval answer, the
//!    answer's decisions. A reply whose user message this device cannot
//!    open is left alone (another device may run it).
//! 2. Without the lock: `sh -c CMD` with the request as JSON on stdin:
//!    `{"reply", "messages": [{key, role, status, content}…], "request",
//!    "approved": [{callId, name, arguments}…]}`. For a reply to an answer
//!    the command first prints one `tool_result` line per approved call
//!    (it runs the tools), then the model's run. Each stdout line goes
//!    through `LineRun`; each event is framed into the run log at once.
//! 3. Under the lock again: the reply written once (sealed, swapped on the
//!    pending CID); then the last events go out and the log ends, so a
//!    subscriber that sees `done` finds the record finished.
//!
//! A command that cannot start, exits non-zero before the end, or prints a
//! line over [`MAX_LINE`] bytes or not UTF-8 fails the reply (kept, with
//! what was generated); one that stops printing without an end is a cut
//! (`interrupted`). The reply never stays `pending` because of the
//! command. Its stderr goes to the server's.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::Assistant;
use super::log::{RunLog, event_frame};
use crate::chat::approval::{Decision, Resolution};
use crate::chat::store::{LineRun, PendingReply, begin_reply, settle_answer};
use crate::chat::{AssistantEvent, ChatStoreError, ReplyKey, StreamLine, ToolRun};
use crate::lexicon::chat::gel::assistant::defs::ModelRef;
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
    let prepared = state
        .with_core(move |core| {
            let Some(chats) = core.chats()? else {
                return Ok(Err("the server holds no chat key".to_owned()));
            };
            Ok(prepare(chats, key).map_err(|e| e.to_string()))
        })
        .await;
    let prepared = match prepared {
        Ok(Ok(Some(p))) => p,
        Ok(Ok(None)) => {
            assistant.release(&key.to_string());
            return;
        }
        Ok(Err(reason)) => {
            tracing::warn!("assistant: reply {key} not run: {reason}");
            assistant.release(&key.to_string());
            return;
        }
        Err(e) => {
            tracing::error!("assistant: reply {key}: {}", e.message);
            assistant.release(&key.to_string());
            return;
        }
    };
    let mut out = Publisher { log, model: None };
    let (finished, end_events) = generate(&assistant, &prepared, &mut out).await;
    let pending = prepared.pending;
    let written = state
        .with_core(move |core| {
            let Some(chats) = core.chats()? else {
                return Ok(Err("the server holds no chat key".to_owned()));
            };
            Ok(chats
                .finish_reply(&pending, &finished)
                .map(|_| ())
                .map_err(|e| e.to_string()))
        })
        .await;
    match written {
        Ok(Ok(())) => {}
        Ok(Err(reason)) => tracing::warn!("assistant: reply {key} not written: {reason}"),
        Err(e) => tracing::error!("assistant: reply {key} not written: {}", e.message),
    }
    for e in &end_events {
        out.publish(e);
    }
    out.log.end();
    assistant.finished(&key.to_string());
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
    let branch = chats.branch(key.message())?;
    let Some(user) = branch.last().filter(|r| r.key == key.message().to_string()) else {
        return Ok(None);
    };
    if user.content.is_none() {
        tracing::info!(
            "assistant: reply {key}: its message does not open here; left to another device"
        );
        return Ok(None);
    }
    let resolution = chats.answer_resolution(key.message())?;
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

/// Frames events into the run log.
struct Publisher {
    log: Arc<RunLog>,
    model: Option<ModelRef>,
}

impl Publisher {
    fn publish(&mut self, event: &AssistantEvent) {
        let seq = self.log.next_seq();
        self.log.push(event_frame(event, seq, self.model.as_ref()));
    }
}

/// Runs the command and feeds its output through the reply; returns the
/// finished reply and the events its end makes (published after the
/// write).
async fn generate(
    assistant: &Assistant,
    prepared: &Prepared,
    out: &mut Publisher,
) -> (crate::chat::FinishedReply, Vec<AssistantEvent>) {
    let policy = assistant.policy.clone();
    let mut child = match tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&assistant.command)
        .env("GELSTORE_REPLY", prepared.pending.key.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            let run = failed_run(
                &prepared.pending,
                policy,
                &format!("the assistant command did not start: {e}"),
            );
            let f = run.end();
            return (f.reply, f.events);
        }
    };
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
        let run = failed_run(
            &prepared.pending,
            policy,
            "the assistant command has no stdout",
        );
        let f = run.end();
        return (f.reply, f.events);
    };
    let mut lines = BufReader::new(stdout);
    let mut buf = Vec::new();

    // The approved calls' results come first (the command ran the tools).
    let settled = match &prepared.resolution {
        None => None,
        Some(resolution) => match tool_results(resolution, &mut lines, &mut buf).await {
            Ok(runs) => match settle_answer(resolution, &runs) {
                Ok(s) => Some(s),
                Err(e) => {
                    let run = failed_run(&prepared.pending, policy, &e.to_string());
                    let f = run.end();
                    return (f.reply, f.events);
                }
            },
            Err(reason) => {
                let run = failed_run(&prepared.pending, policy, &reason);
                let f = run.end();
                return (f.reply, f.events);
            }
        },
    };
    let (mut run, first) = match begin_reply(&prepared.pending, policy.clone(), settled.as_deref())
    {
        Ok(r) => r,
        Err(e) => {
            let run = failed_run(&prepared.pending, policy, &e.to_string());
            let f = run.end();
            return (f.reply, f.events);
        }
    };
    for e in &first {
        out.publish(e);
    }
    let mut events = Vec::new();
    while !run.stopped() {
        match read_line(&mut lines, &mut buf).await {
            Ok(None) => break,
            Ok(Some(Ok(line))) => {
                if line.contains("\"model\"")
                    && let Ok(StreamLine::Model(m)) = StreamLine::parse(&line)
                {
                    out.model = Some(m);
                }
                run.feed(&line, &mut events);
            }
            Ok(Some(Err(reason))) => run.refuse(reason),
            Err(e) => run.cut_by(e),
        }
        for e in events.drain(..) {
            out.publish(&e);
        }
    }
    // Stop a command that is still talking after the end or a refusal.
    let status = if run.stopped() || run.ended() {
        let _ = child.start_kill();
        None
    } else {
        child.wait().await.ok()
    };
    if let Some(status) = status
        && !status.success()
        && !run.ended()
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
) -> Result<BTreeMap<String, ToolRun>, String> {
    let mut want: Vec<&str> = resolution
        .calls
        .iter()
        .filter(|c| c.decision == Decision::Approved)
        .map(|c| c.call.call_id.as_str())
        .collect();
    let mut runs = BTreeMap::new();
    while !want.is_empty() {
        let line = match read_line(lines, buf).await {
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
        String::from_utf8(std::mem::take(buf)).map_err(|_| "a line that is not UTF-8".to_owned()),
    ))
}
