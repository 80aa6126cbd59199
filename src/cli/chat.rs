//! `gelstore chat …`: chats sealed into the data folder's repository (on
//! the global `--data` folder, after `gelstore device init`).
//!
//! Exit codes: 0 success; 1 the operation was refused (no device, no such
//! chat or message, a reply key already taken, an approval answer refused:
//! `pending_resolved`, `pending_unknown`, `pending_superseded`), with a
//! message on stderr and nothing written; 2 usage, or an environment
//! failure (I/O, the store locked by another process).

use std::io::{self, BufRead};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::device::is_environment;
use super::{Failure, Format, Outcome, finish, say};
use crate::chat::ToolRun;
use crate::chat::store::{ChatThread, ContentState, WaitingApproval};
use crate::chat::{
    ApprovalPolicy, AskFor, Attempt, ChatStore, ChatStoreError, MessageKey, NoApproval, ReplyKey,
    ReplyStart, ReplyTo,
};
use crate::lexicon::chat::gel::assistant::defs::{
    Effort, GenerationRequest, ModelRef, PlainContent, PlainContentPartsItem, ToolApprovalPart,
    ToolApprovalPartDecision,
};
use crate::lexicon::chat::gel::assistant::subscribe_reply::ToolResultOutcome;

#[derive(Subcommand, Debug)]
pub enum ChatCommand {
    /// Start a chat; prints its id.
    New(NewArgs),
    /// List the chats.
    Ls(FormatArg),
    /// Send a user message; prints its key.
    Send(SendArgs),
    /// Write the reply to a user message: the assistant loop runs here
    /// (a model and MCP tools), or `--events` replays a recorded model
    /// stream; prints the live events (JSON lines) as it goes.
    Reply(ReplyArgs),
    /// Ask for the reply to a user message: write it `pending` (no
    /// content), for an assistant (`gelstore serve --assistant`) to
    /// generate once it has it (sync it there); prints the reply's key.
    Ask(AskArgs),
    /// Show a chat's thread.
    Show(ShowArgs),
    /// Print a tool call's whole output from a reply, opening the sealed
    /// blob it was kept in when the record could not hold it all.
    Output(OutputArgs),
    /// List the replies waiting for an approval, across all chats.
    Approvals(FormatArg),
    /// Answer a waiting reply: allow or deny its tool calls (a call not
    /// mentioned is denied); prints the answer message's key.
    Approve(ApproveArgs),
}

#[derive(Args, Debug)]
pub struct FormatArg {
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct NewArgs {
    /// The chat's title (sealed).
    #[arg(long)]
    pub title: Option<String>,
    /// The chat's default model, `PROVIDER/ID` (in the clear).
    #[arg(long, value_name = "PROVIDER/ID")]
    pub model: Option<String>,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct SendArgs {
    /// The chat's id.
    #[arg(long)]
    pub chat: String,
    /// The reply this message continues from (absent on the first).
    #[arg(long, value_name = "REPLYKEY")]
    pub parent: Option<String>,
    /// The reply attempt the message asks for.
    #[arg(long, default_value_t = 0)]
    pub attempt: i64,
    /// The message's text (sealed).
    pub text: String,
    /// The model the reply should use (`request.model`).
    #[arg(long, value_name = "PROVIDER/ID")]
    pub model: Option<String>,
    /// The tools the reply may use (`request.tools`), by name.
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    pub tools: Option<Vec<String>>,
    /// The reasoning effort (`request.effort`): none, low, medium, high, max.
    #[arg(long)]
    pub effort: Option<String>,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct ReplyArgs {
    /// The user message replied to.
    #[arg(long, value_name = "MESSAGEKEY")]
    pub to: String,
    /// The attempt (default: the one the message asks for); a new attempt
    /// regenerates.
    #[arg(long)]
    pub attempt: Option<i64>,
    /// Replay a recorded model stream, JSON lines (`-` for stdin; see
    /// `fixtures/streams/README.md`). Without it the assistant runs here:
    /// a model provider (by its SDK's variables, such as OPENAI_API_KEY or
    /// OLLAMA_HOST) and the MCP tools of the settings and --mcp-config.
    #[arg(long, value_name = "FILE.jsonl")]
    pub events: Option<PathBuf>,
    /// The model to answer with, whatever the message asks (default: the
    /// message's, the previous reply's, the chat's, then the settings').
    #[arg(long, value_name = "PROVIDER/ID", conflicts_with = "events")]
    pub model: Option<String>,
    /// MCP servers besides the settings', `{"mcpServers": {NAME: …}}`.
    #[arg(long, value_name = "FILE", conflicts_with = "events")]
    pub mcp_config: Option<PathBuf>,
    /// Tools whose calls need the user's approval (the reply then waits).
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    pub approve_tools: Vec<String>,
    /// Fill the pending reply another device already wrote with the
    /// message (the chat page, `chat ask` elsewhere; synced here) instead
    /// of writing a new one; without --attempt, its newest attempt. Only
    /// one run of a reply is ever kept.
    #[arg(long)]
    pub asked: bool,
    /// For a reply to an approval answer: the output of an approved call
    /// the host ran (repeat for each approved call). Denied calls get a
    /// refused error result.
    #[arg(long, value_name = "CALLID=OUTPUT")]
    pub tool_output: Vec<String>,
}

impl ReplyArgs {
    /// The reply this run fills (`--asked`: the one another device wrote).
    pub fn reply_to(&self, message: crate::repo::tid::Tid, attempt: Option<Attempt>) -> ReplyTo {
        let start = if self.asked {
            ReplyStart::Asked
        } else {
            ReplyStart::Write
        };
        ReplyTo {
            message,
            attempt,
            start,
        }
    }
}

#[derive(Args, Debug)]
pub struct AskArgs {
    /// The user message replied to.
    #[arg(long, value_name = "MESSAGEKEY")]
    pub to: String,
    /// The attempt (default: the one the message asks for).
    #[arg(long)]
    pub attempt: Option<i64>,
}

#[derive(Args, Debug)]
pub struct ShowArgs {
    /// The chat's id.
    #[arg(long)]
    pub chat: String,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct OutputArgs {
    /// The reply.
    #[arg(long, value_name = "REPLYKEY")]
    pub reply: String,
    /// The tool call.
    #[arg(long = "call", value_name = "CALLID")]
    pub call_id: String,
    /// human: the output as it is; json: `{"output", "json", "fromBlob"}`.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct ApproveArgs {
    /// The waiting reply.
    #[arg(long, value_name = "REPLYKEY")]
    pub reply: String,
    /// A call to approve (repeat for more).
    #[arg(long, value_name = "CALLID")]
    pub allow: Vec<String>,
    /// A call to deny (repeat for more); calls not mentioned are denied too.
    #[arg(long, value_name = "CALLID")]
    pub deny: Vec<String>,
    /// The reason, kept with each decision given here.
    #[arg(long)]
    pub reason: Option<String>,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

impl From<ChatStoreError> for Failure {
    fn from(e: ChatStoreError) -> Self {
        let outcome = match &e {
            ChatStoreError::Device(d) if is_environment(d) => Outcome::Failed,
            ChatStoreError::Index { .. } | ChatStoreError::Blob { .. } => Outcome::Failed,
            _ => Outcome::Findings,
        };
        Failure {
            outcome,
            message: e.to_string(),
        }
    }
}

pub(super) type Result<T> = std::result::Result<T, Failure>;

pub fn run(data: &Path, cmd: ChatCommand) -> Outcome {
    let result = match cmd {
        ChatCommand::New(a) => new(data, a),
        ChatCommand::Ls(a) => ls(data, a.format),
        ChatCommand::Send(a) => send(data, a),
        ChatCommand::Reply(a) => reply(data, a),
        ChatCommand::Ask(a) => ask(data, a),
        ChatCommand::Show(a) => show(data, a),
        ChatCommand::Output(a) => output(data, a),
        ChatCommand::Approvals(a) => approvals(data, a.format),
        ChatCommand::Approve(a) => approve(data, a),
    };
    finish(result)
}

/// An `--effort` value: one the lexicon knows.
pub(super) fn effort(e: &str) -> Result<Effort> {
    use crate::lexicon_runtime::StringEnum;
    match Effort::from_string(e.to_owned()) {
        Ok(Effort::Other(_)) | Err(_) => Err(Failure::input(format!(
            "--effort {e:?}: one of none, low, medium, high, max"
        ))),
        Ok(known) => Ok(known),
    }
}

/// A `--model PROVIDER/ID` as the lexicon's `modelRef`.
pub(super) fn model_ref(m: &str) -> Result<ModelRef> {
    let (provider, id) = m
        .split_once('/')
        .filter(|(p, i)| !p.is_empty() && !i.is_empty())
        .ok_or_else(|| Failure::env(format!("--model {m:?}: expected PROVIDER/ID")))?;
    Ok(ModelRef {
        provider: provider.into(),
        id: id.into(),
        extra: Default::default(),
    })
}

fn new(data: &Path, args: NewArgs) -> Result<()> {
    let model = args.model.as_deref().map(model_ref).transpose()?;
    let mut store = ChatStore::open(data)?;
    let chat = store.create_chat(args.title.as_deref(), model)?;
    match args.format {
        Format::Human => say(&chat),
        Format::Json => say(json!({ "chat": chat })),
    }
    Ok(())
}

fn ls(data: &Path, format: Format) -> Result<()> {
    let store = ChatStore::open(data)?;
    for (key, _) in store.chats()? {
        let title = store
            .thread(&key)
            .ok()
            .and_then(|t| t.fields.and_then(|f| f.title));
        match format {
            Format::Human => say(format!("{key}\t{}", title.unwrap_or_default())),
            Format::Json => say(json!({ "chat": key, "title": title })),
        }
    }
    Ok(())
}

fn attempt(n: i64) -> Result<Attempt> {
    Attempt::new(n).map_err(|e| Failure::env(format!("--attempt: {e}")))
}

fn send(data: &Path, args: SendArgs) -> Result<()> {
    let parent = args
        .parent
        .as_deref()
        .map(ReplyKey::parse)
        .transpose()
        .map_err(|e| Failure::env(format!("--parent: {e}")))?;
    let attempt = attempt(args.attempt)?;
    let request = GenerationRequest {
        attempt: None,
        model: args.model.as_deref().map(model_ref).transpose()?,
        tools: args.tools.clone(),
        effort: args.effort.as_deref().map(effort).transpose()?,
        extra: Default::default(),
    };
    let mut store = ChatStore::open(data)?;
    let key = store.send_with(&args.chat, &args.text, parent, attempt, &request)?;
    match args.format {
        Format::Human => say(key),
        Format::Json => say(json!({ "message": key.to_string(), "chat": args.chat })),
    }
    Ok(())
}

/// The user message `--to` names.
fn user_message(to: &str) -> Result<crate::repo::tid::Tid> {
    match MessageKey::parse(to) {
        Ok(MessageKey::User(t)) => Ok(t),
        Ok(MessageKey::Reply(_)) => Err(Failure::input(format!(
            "--to {to}: a reply answers a user message, not a reply"
        ))),
        Err(e) => Err(Failure::env(format!("--to: {e}"))),
    }
}

fn ask(data: &Path, args: AskArgs) -> Result<()> {
    let message = user_message(&args.to)?;
    let attempt = args.attempt.map(attempt).transpose()?;
    let mut store = ChatStore::open(data)?;
    let pending = store.start_reply(message, attempt)?;
    say(pending.key.to_string());
    Ok(())
}

fn reply(data: &Path, args: ReplyArgs) -> Result<()> {
    let message = user_message(&args.to)?;
    let attempt = args.attempt.map(attempt).transpose()?;
    let Some(events) = &args.events else {
        if !args.tool_output.is_empty() {
            return Err(Failure::input(
                "--tool-output goes with --events: the assistant runs approved calls itself",
            ));
        }
        return super::assistant::reply_here(data, message, attempt, &args);
    };
    let policy: Arc<dyn ApprovalPolicy + Send + Sync> = if args.approve_tools.is_empty() {
        Arc::new(NoApproval)
    } else {
        Arc::new(AskFor::tools(args.approve_tools.iter().cloned()))
    };
    let input: Box<dyn BufRead> = if events.as_os_str() == "-" {
        Box::new(io::stdin().lock())
    } else {
        let f = std::fs::File::open(events)
            .map_err(|e| Failure::env(format!("{}: {e}", events.display())))?;
        Box::new(io::BufReader::new(f))
    };
    let mut runs = std::collections::BTreeMap::new();
    for t in &args.tool_output {
        let (id, output) = t
            .split_once('=')
            .ok_or_else(|| Failure::env(format!("--tool-output {t:?}: expected CALLID=OUTPUT")))?;
        let run = ToolRun::new(ToolResultOutcome::Succeeded, output);
        if runs.insert(id.to_string(), run).is_some() {
            return Err(Failure::env(format!(
                "--tool-output: two outputs for call {id:?}"
            )));
        }
    }
    let mut store = ChatStore::open(data)?;
    let to = args.reply_to(message, attempt);
    let (pending, finished) = store.run_reply_with(to, policy, &runs, input.lines(), |event| {
        say(event.to_json_line())
    })?;
    let status = finished.status.as_str();
    eprintln!("reply {}: {status}", pending.key);
    if !finished.waiting.is_empty() {
        eprintln!(
            "waiting for approval of {}; answer with: gelstore chat approve --reply {} --allow CALLID|--deny CALLID",
            finished.waiting.join(", "),
            pending.key
        );
    }
    if finished.status == crate::lexicon::chat::gel::assistant::message::MessageStatus::Failed {
        let why = match &finished.error {
            Some(e) => format!("[assistant_provider] the stream failed: {e}"),
            None => "[assistant_provider] the model's run ended with an error".into(),
        };
        return Err(Failure::input(format!(
            "reply {} failed: {why}",
            pending.key
        )));
    }
    Ok(())
}

fn output(data: &Path, args: OutputArgs) -> Result<()> {
    let store = ChatStore::open_without_index(data)?;
    let out = store.tool_output(&args.reply, &args.call_id)?;
    match args.format {
        Format::Human => say(&out.text),
        Format::Json => say(json!({
            "output": out.text,
            "json": out.json,
            "fromBlob": out.from_blob,
        })),
    }
    Ok(())
}

fn show(data: &Path, args: ShowArgs) -> Result<()> {
    let store = ChatStore::open(data)?;
    let t = store.thread(&args.chat)?;
    let items = walk(&t);
    match args.format {
        Format::Json => {
            let messages: Vec<Value> = items
                .iter()
                .map(|it| {
                    let mut m = json!({
                        "key": it.key,
                        "role": it.role,
                        "status": it.status,
                        "depth": it.depth,
                        "content": it.content.as_ref().map(|c| serde_json::to_value(c).unwrap_or(Value::Null)),
                    });
                    let state = serde_json::to_value(&it.state).unwrap_or(Value::Null);
                    if let (Value::Object(m), Value::Object(s)) = (&mut m, state) {
                        m.extend(s);
                        m.extend(it.meta.clone());
                        if let Some(p) = &it.parent {
                            m.insert("parent".into(), p.clone().into());
                        }
                    }
                    m
                })
                .collect();
            say(json!({
                "chat": t.chat,
                "title": t.fields.as_ref().and_then(|f| f.title.clone()),
                "model": t.record.model.as_ref().map(|m| format!("{}/{}", m.provider, m.id)),
                "messages": messages,
            }));
        }
        Format::Human => {
            let title = t
                .fields
                .as_ref()
                .and_then(|f| f.title.clone())
                .unwrap_or_else(|| "(untitled)".into());
            say(format!("chat {}: {title}", t.chat));
            for it in &items {
                let pad = "  ".repeat(it.depth);
                say(format!("{pad}[{}] {} ({})", it.key, it.role, it.status));
                match (&it.state, &it.content) {
                    (_, Some(c)) => {
                        for line in render(c) {
                            say(format!("{pad}  {line}"));
                        }
                    }
                    (ContentState::Empty, None) => {}
                    (ContentState::Missing, None) => say(format!(
                        "{pad}  (tampered: a {} message without its sealed content)",
                        it.status
                    )),
                    (ContentState::Unauthenticated, None) => say(format!(
                        "{pad}  (tampered: a pending reply without its authenticator; nothing shows a device of this account wrote it)"
                    )),
                    (ContentState::UnknownKey, None) => say(format!(
                        "{pad}  (sealed with a key this device does not hold)"
                    )),
                    (ContentState::Unreadable(r), None) => {
                        say(format!("{pad}  (does not open: {r})"))
                    }
                    (ContentState::Open, None) => {}
                }
            }
        }
    }
    Ok(())
}

struct Item {
    key: String,
    /// The clear metadata beside the status: a reply's `model`, `usage`
    /// and `stopReason`, a user message's `request`.
    meta: serde_json::Map<String, Value>,
    role: &'static str,
    status: String,
    parent: Option<String>,
    depth: usize,
    state: ContentState,
    content: Option<PlainContent>,
}

/// A message's clear metadata as `chat show --format json` prints it.
fn clear_meta(
    m: &crate::lexicon::chat::gel::assistant::message::Message,
) -> serde_json::Map<String, Value> {
    let mut out = serde_json::Map::new();
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v.filter(|v| !v.is_null()) {
            out.insert(k.into(), v);
        }
    };
    put(
        "model",
        m.model
            .as_ref()
            .map(|r| json!(format!("{}/{}", r.provider, r.id))),
    );
    put(
        "usage",
        m.usage.as_ref().and_then(|u| serde_json::to_value(u).ok()),
    );
    put(
        "stopReason",
        m.stop_reason.as_ref().map(|r| json!(r.as_str())),
    );
    put(
        "request",
        m.request
            .as_ref()
            .and_then(|r| serde_json::to_value(r).ok()),
    );
    out
}

/// The thread depth-first: each user message, then its replies (by
/// attempt), each followed by the messages continuing from it; orphans
/// last.
fn walk(t: &ChatThread) -> Vec<Item> {
    enum Node {
        User(usize, usize),
        Reply(usize, usize),
    }
    let th = &t.thread;
    let mut out = Vec::new();
    let mut stack: Vec<Node> = th
        .orphan_users
        .iter()
        .rev()
        .map(|&u| Node::User(u, 0))
        .collect();
    stack.extend(th.roots.iter().rev().map(|&u| Node::User(u, 0)));
    let state = |k: &str| t.states.get(k).cloned().unwrap_or(ContentState::Empty);
    while let Some(n) = stack.pop() {
        match n {
            Node::User(u, d) => {
                let node = &th.users[u];
                let key = node.record.key.clone();
                out.push(Item {
                    meta: clear_meta(&node.record.message),
                    state: state(&key),
                    role: "user",
                    status: node.record.message.status.as_str().to_string(),
                    parent: node
                        .record
                        .message
                        .parent
                        .as_ref()
                        .map(|p| p.as_str().to_string()),
                    depth: d,
                    content: node.record.content.clone(),
                    key,
                });
                stack.extend(node.replies.iter().rev().map(|&r| Node::Reply(r, d + 1)));
            }
            Node::Reply(r, d) => {
                let node = &th.replies[r];
                let key = node.record.key.clone();
                out.push(Item {
                    meta: clear_meta(&node.record.message),
                    state: state(&key),
                    role: "assistant",
                    status: node.record.message.status.as_str().to_string(),
                    parent: None,
                    depth: d,
                    content: node.view.clone(),
                    key,
                });
                stack.extend(node.children.iter().rev().map(|&u| Node::User(u, d + 1)));
            }
        }
    }
    for &r in &th.orphan_replies {
        let node = &th.replies[r];
        out.push(Item {
            meta: clear_meta(&node.record.message),
            state: state(&node.record.key),
            key: node.record.key.clone(),
            role: "assistant",
            status: node.record.message.status.as_str().to_string(),
            parent: None,
            depth: 0,
            content: node.view.clone(),
        });
    }
    out
}

fn render(c: &PlainContent) -> Vec<String> {
    c.parts
        .iter()
        .map(|p| match p {
            PlainContentPartsItem::TextPart(t) => t.text.clone(),
            PlainContentPartsItem::ReasoningPart(_) => "(thinking)".to_string(),
            PlainContentPartsItem::ToolCallPart(c) => format!(
                "tool call {} {}({}){}",
                c.call_id,
                c.name,
                c.arguments.as_deref().unwrap_or("… never ran"),
                c.approval
                    .as_ref()
                    .map(|a| format!(" [{}]", a.as_str()))
                    .unwrap_or_default()
            ),
            PlainContentPartsItem::ToolResultPart(r) => format!(
                "tool result {}{}: {}{}",
                r.call_id,
                if r.is_error == Some(true) {
                    " (error)"
                } else {
                    ""
                },
                r.output,
                if r.output_blob.is_some() {
                    format!(
                        " (the whole output: gelstore chat output --call {})",
                        r.call_id
                    )
                } else {
                    String::new()
                }
            ),
            PlainContentPartsItem::ToolApprovalPart(a) => format!(
                "{} {}{}",
                a.decision.as_str(),
                a.call_id,
                a.reason
                    .as_ref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            ),
            _ => "(a part this version does not show)".to_string(),
        })
        .collect()
}

fn approvals(data: &Path, format: Format) -> Result<()> {
    let mut store = ChatStore::open(data)?;
    if store.index_rebuilt() {
        eprintln!("(the approval index was rebuilt from the records)");
    }
    let list: Vec<WaitingApproval> = store.approvals()?;
    for w in &list {
        match format {
            Format::Json => say(serde_json::to_string(w).unwrap_or_default()),
            Format::Human => {
                say(format!("{}\tchat {}", w.reply, w.chat));
                match (w.readable, w.state.as_str()) {
                    (true, _) => {}
                    (false, "unknownKey") => say("  (sealed with a key this device does not hold)"),
                    (false, state) => say(format!(
                        "  (tampered ({state}): no device of this account wrote this request; do not answer it)"
                    )),
                }
                for c in &w.calls {
                    say(format!(
                        "  {} {}({})",
                        c.call_id,
                        c.name,
                        c.arguments.as_deref().unwrap_or("")
                    ));
                }
            }
        }
    }
    if format == Format::Human && list.is_empty() {
        eprintln!("nothing waits for approval");
    }
    Ok(())
}

fn approve(data: &Path, args: ApproveArgs) -> Result<()> {
    // An id given is a callId or the pendingId a confirmation showed; the
    // store resolves either to its call.
    let decision = |call_id: &String, decision| ToolApprovalPart {
        call_id: call_id.clone(),
        pending_id: None,
        decision,
        reason: args.reason.clone(),
        extra: Default::default(),
    };
    let decisions: Vec<ToolApprovalPart> = args
        .allow
        .iter()
        .map(|c| decision(c, ToolApprovalPartDecision::Approved))
        .chain(
            args.deny
                .iter()
                .map(|c| decision(c, ToolApprovalPartDecision::Denied)),
        )
        .collect();
    let mut store = ChatStore::open(data)?;
    let answer = store.approve(&args.reply, &decisions)?;
    match args.format {
        Format::Human => {
            say(answer);
            eprintln!("answered {} (answer {answer})", args.reply);
        }
        Format::Json => say(json!({ "answer": answer.to_string(), "reply": args.reply })),
    }
    Ok(())
}
