//! The assistant loop against a loopback mock provider (real HTTP,
//! recorded transcripts from `fixtures/providers/`) and real MCP servers
//! from npm (`tests/mcp`: `@modelcontextprotocol/server-everything` and
//! `server-filesystem`, installed with `npm ci` on first use): model turn
//! → tool calls → approval gate → MCP execution → results → next turn,
//! with the requests the provider received checked (history, tool
//! results, providerData sent back) and every failure ending the reply
//! in its named state.

use crate::support::provider;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use gelstore::agent::inputs::{HostChoices, Inputs};
use gelstore::agent::{Agent, AgentOptions, EventSink, McpServers, ToolHost};
use gelstore::chat::settings::UserSettings;
use gelstore::chat::{AssistantEvent, Attempt, ChatStore, Finished};
use gelstore::lexicon::chat::gel::assistant::defs::{
    PlainContentPartsItem, ToolApprovalPart, ToolApprovalPartDecision, ToolCallPartApproval,
};
use gelstore::lexicon::chat::gel::assistant::message::{MessageStatus, MessageStopReason};
use gelstore::lexicon::chat::gel::assistant::subscribe_reply::{ErrorCode, ToolResultOutcome};
use gelstore::lexicon_runtime::Datetime;
use gelstore::provider::ModelSpec;
use gelstore::seal::os_rng;
use provider::{Answer, KEY, MockProvider, Received, mcp_bin};
use serde_json::{Value, json};

fn everything() -> McpServers {
    McpServers::from_json(&provider::everything_config().to_string()).unwrap()
}

fn store() -> (tempfile::TempDir, ChatStore) {
    let dir = tempfile::tempdir().unwrap();
    gelstore::device::init(dir.path(), Some("test"), &mut os_rng()).unwrap();
    let store = ChatStore::open(dir.path()).unwrap();
    (dir, store)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The variables the providers read, pointing at `mock`.
fn env_for(mock: &MockProvider) -> gelstore::agent::Env {
    let url = mock.url.clone();
    Arc::new(move |v: &str| match v {
        "ANTHROPIC_BASE_URL" | "OLLAMA_HOST" => Some(url.clone()),
        "OPENAI_BASE_URL" => Some(format!("{url}/v1")),
        "ANTHROPIC_API_KEY" | "OPENAI_API_KEY" => Some(KEY.into()),
        _ => None,
    })
}

#[derive(Default)]
struct Collect(Vec<AssistantEvent>);

impl EventSink for Collect {
    fn publish(&mut self, event: &AssistantEvent) {
        self.0.push(event.clone());
    }
}

/// One reply run by the loop: the finished reply (written to the store)
/// and every event, the end's included.
struct Ran {
    finished: Finished,
    events: Vec<AssistantEvent>,
    reply: String,
}

struct Harness {
    rt: tokio::runtime::Runtime,
    agent: Agent,
    _dir: tempfile::TempDir,
    store: ChatStore,
    chat: String,
    /// Given to each job: the run stops when it says `true`.
    stop: Option<tokio::sync::watch::Receiver<bool>>,
}

impl Harness {
    fn new(mock: &MockProvider, servers: McpServers, options: AgentOptions) -> Harness {
        let rt = runtime();
        let (tools, problems) = rt.block_on(ToolHost::connect(&servers, Duration::from_secs(60)));
        assert!(problems.is_empty(), "{problems:?}");
        let agent = Agent::new(options, Arc::new(tools), env_for(mock));
        let (dir, mut store) = store();
        let chat = store.create_chat(Some("loop"), None).unwrap();
        Harness {
            rt,
            agent,
            _dir: dir,
            store,
            chat,
            stop: None,
        }
    }

    /// Sends `text` in the harness's chat and runs its reply with `model`.
    fn ask(&mut self, text: &str, model: &str) -> Ran {
        let chat = self.chat.clone();
        let msg = self.store.send(&chat, text, None, Attempt::FIRST).unwrap();
        self.reply(msg, &host(model))
    }

    /// Runs the reply to user message `message` with `host`'s choices.
    fn reply(&mut self, message: gelstore::repo::tid::Tid, host: &HostChoices) -> Ran {
        let inputs = Inputs::read(&self.store, message).unwrap().expect("opens");
        let model = inputs.model(host).unwrap();
        let pending = self.store.start_reply(message, None).unwrap();
        let mut sink = Collect::default();
        let mut job = inputs.job(&pending, model, host);
        job.stop = self.stop.clone();
        let finished = self.rt.block_on(self.agent.run(job, &mut sink));
        self.store.finish_reply(&pending, &finished.reply).unwrap();
        let mut events = sink.0;
        events.extend(finished.events.iter().cloned());
        Ran {
            finished,
            events,
            reply: pending.key.to_string(),
        }
    }
}

fn host(model: &str) -> HostChoices {
    HostChoices {
        model: Some(ModelSpec::parse(model).unwrap()),
        ..Default::default()
    }
}

fn parts(ran: &Ran) -> &[PlainContentPartsItem] {
    &ran.finished.reply.content.parts
}

fn kinds(ran: &Ran) -> Vec<&'static str> {
    parts(ran)
        .iter()
        .map(|p| match p {
            PlainContentPartsItem::TextPart(_) => "text",
            PlainContentPartsItem::ReasoningPart(_) => "reasoning",
            PlainContentPartsItem::ToolCallPart(_) => "call",
            PlainContentPartsItem::ToolResultPart(_) => "result",
            _ => "other",
        })
        .collect()
}

fn result_of<'a>(
    ran: &'a Ran,
    call: &str,
) -> &'a gelstore::lexicon::chat::gel::assistant::defs::ToolResultPart {
    parts(ran)
        .iter()
        .find_map(|p| match p {
            PlainContentPartsItem::ToolResultPart(r) if r.call_id == call => Some(r),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for {call}: {:?}", parts(ran)))
}

fn event_types(events: &[AssistantEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            serde_json::to_value(e).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

fn error_code(events: &[AssistantEvent]) -> Option<ErrorCode> {
    events.iter().find_map(|e| match e {
        AssistantEvent::Error { code, .. } => Some(code.clone()),
        _ => None,
    })
}

fn assert_no_key(received: &[Received], ran: &Ran) {
    let record = serde_json::to_string(&ran.finished.reply.summary_json()).unwrap();
    assert!(!record.contains(KEY), "the key reached the record");
    let events = serde_json::to_string(&ran.events).unwrap();
    assert!(!events.contains(KEY), "the key reached an event");
    for r in received {
        assert!(
            !r.body.to_string().contains(KEY),
            "the key is in a request body"
        );
    }
}

#[test]
fn two_turns_with_a_real_mcp_tool_and_the_signature_sent_back() {
    let mock = MockProvider::start(vec![
        Answer::sse("loop/anthropic_think_and_echo.sse"),
        Answer::sse("loop/anthropic_final_text.sse"),
    ]);
    let mut h = Harness::new(&mock, everything(), AgentOptions::default());
    let ran = h.ask("say sealed hello", "anthropic/claude-sonnet-4-5");

    let reply = &ran.finished.reply;
    assert_eq!(reply.status, MessageStatus::Complete, "{:?}", ran.events);
    assert_eq!(reply.stop_reason, Some(MessageStopReason::Stop));
    assert_eq!(kinds(&ran), ["reasoning", "text", "call", "result", "text"]);
    let model = reply.model.as_ref().unwrap();
    assert_eq!(
        (model.provider.as_str(), model.id.as_str()),
        ("anthropic", "claude-sonnet-4-5-20250929")
    );
    let PlainContentPartsItem::ToolCallPart(call) = &parts(&ran)[2] else {
        unreachable!()
    };
    assert_eq!(call.name, "mcp_everything_echo");
    assert_eq!(
        call.arguments.as_deref(),
        Some(r#"{"message":"sealed hello"}"#)
    );
    assert!(
        call.source
            .as_deref()
            .unwrap()
            .ends_with("mcp-server-everything"),
        "{:?}",
        call.source
    );
    let result = result_of(&ran, "toolu_01EchoCall");
    assert_eq!(result.output, "Echo: sealed hello");
    assert_eq!(result.is_error, None);
    let usage = reply.usage.as_ref().unwrap();
    assert_eq!(usage.output_tokens, Some(61 + 12));

    // What a live client saw: the call and its result, the final text; no
    // reasoning ever.
    let types = event_types(&ran.events);
    assert!(
        types.contains(&"tool_call".to_owned()) && types.contains(&"tool_result".to_owned()),
        "{types:?}"
    );
    assert_eq!(types.last().map(String::as_str), Some("done"));
    let json = serde_json::to_string(&ran.events).unwrap();
    assert!(
        !json.contains("call the echo tool"),
        "reasoning was streamed"
    );
    assert!(ran.events.iter().any(|e| matches!(
        e,
        AssistantEvent::ToolResult {
            outcome: ToolResultOutcome::Succeeded,
            elapsed_ms: Some(_),
            ..
        }
    )));

    // What the provider received.
    let received = mock.received();
    assert_eq!(received.len(), 2);
    for r in &received {
        assert_eq!(r.path, "/v1/messages");
        assert_eq!(r.header("x-api-key"), Some(KEY));
        assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(r.body["stream"], true);
        assert_eq!(r.body["model"], "claude-sonnet-4-5");
        let tools = r.body["tools"].as_array().unwrap();
        let echo = tools
            .iter()
            .find(|t| t["name"] == "mcp_everything_echo")
            .expect("echo offered");
        assert_eq!(echo["input_schema"]["required"], json!(["message"]));
    }
    let messages = received[1].body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "{messages:#?}");
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(messages[1]["role"], "assistant");
    let blocks = messages[1]["content"].as_array().unwrap();
    assert_eq!(blocks[0]["type"], "thinking");
    assert_eq!(
        blocks[0]["signature"],
        "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"
    );
    assert_eq!(
        blocks[0]["thinking"],
        "The user wants an echo; call the echo tool."
    );
    assert_eq!(blocks[2]["type"], "tool_use");
    assert_eq!(blocks[2]["input"], json!({"message": "sealed hello"}));
    let results = messages[2]["content"].as_array().unwrap();
    assert_eq!(results[0]["type"], "tool_result");
    assert_eq!(results[0]["tool_use_id"], "toolu_01EchoCall");
    assert_no_key(&received, &ran);

    // The thread as any device reads it back.
    let thread = h.store.thread(&h.chat).unwrap();
    let text = format!("{:?}", thread.thread);
    assert!(text.contains("Echo: sealed hello"));
}

#[test]
fn a_gated_call_waits_then_runs_after_approval_and_the_loop_continues() {
    let mock = MockProvider::start(vec![
        Answer::sse("loop/anthropic_think_and_echo.sse"),
        Answer::sse("loop/anthropic_final_text.sse"),
    ]);
    let mut h = Harness::new(&mock, everything(), AgentOptions::default());
    // The user's settings say echo needs approval.
    let now = Datetime::new("2026-12-01T00:00:00.000Z").unwrap();
    let mut settings = UserSettings::empty(now);
    settings.sealed.as_mut().unwrap().approval_tools = Some(vec!["mcp_everything_echo".into()]);
    h.store.put_settings(&settings, None).unwrap();

    let ran = h.ask("say sealed hello", "anthropic/claude-sonnet-4-5");
    assert_eq!(
        ran.finished.reply.status,
        MessageStatus::Waiting,
        "{:?}",
        ran.events
    );
    assert_eq!(ran.finished.reply.waiting, ["toolu_01EchoCall"]);
    assert_eq!(
        kinds(&ran),
        ["reasoning", "text", "call"],
        "the gated call did not run"
    );
    assert_eq!(
        event_types(&ran.events).last().map(String::as_str),
        Some("confirm_required")
    );
    // The words come from what the MCP server says of the tool.
    let Some(AssistantEvent::ConfirmRequired {
        label,
        confirmation,
        ..
    }) = ran.events.last()
    else {
        panic!("confirm_required last")
    };
    assert_eq!(
        label.as_deref(),
        Some(r#"Echo Tool {"message":"sealed hello"}"#)
    );
    assert_eq!(
        confirmation.target,
        r#"Echo Tool {"message":"sealed hello"}"#
    );
    assert_eq!(
        confirmation.consequence,
        "The assistant runs 'Echo Tool' on the MCP server everything: it only reads."
    );
    assert_eq!(mock.received().len(), 1, "no second turn while waiting");

    let answer = h
        .store
        .approve(
            &ran.reply,
            &[ToolApprovalPart {
                call_id: "toolu_01EchoCall".into(),
                pending_id: None,
                decision: ToolApprovalPartDecision::Approved,
                reason: None,
                extra: Default::default(),
            }],
        )
        .unwrap();
    let after = h.reply(answer, &HostChoices::default());
    assert_eq!(
        after.finished.reply.status,
        MessageStatus::Complete,
        "{:?}",
        after.events
    );
    assert_eq!(kinds(&after), ["call", "result", "text"]);
    let PlainContentPartsItem::ToolCallPart(call) = &parts(&after)[0] else {
        unreachable!()
    };
    assert_eq!(call.approval, Some(ToolCallPartApproval::Approved));
    assert_eq!(
        result_of(&after, "toolu_01EchoCall").output,
        "Echo: sealed hello"
    );
    // The previous reply's model answered again (seed 001's rule).
    assert_eq!(
        after.finished.reply.model.as_ref().unwrap().provider,
        "anthropic"
    );

    let received = mock.received();
    assert_eq!(received.len(), 2);
    let messages = received[1].body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user"], "{messages:#?}");
    let blocks: Vec<&str> = messages[1]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(blocks, ["thinking", "text", "tool_use"]);
    assert_eq!(messages[2]["content"][0]["content"], "Echo: sealed hello");
}

#[test]
fn parallel_calls_run_concurrently_and_keep_float_arguments() {
    let mock = MockProvider::start(vec![
        Answer::sse("loop/openai_chat_parallel_sum_and_echo.sse"),
        Answer::sse("loop/openai_chat_final_text.sse"),
    ]);
    let mut h = Harness::new(&mock, everything(), AgentOptions::default());
    let ran = h.ask("add and echo", "openai-chat/llama3.2");
    assert_eq!(
        ran.finished.reply.status,
        MessageStatus::Complete,
        "{:?}",
        ran.events
    );
    assert_eq!(kinds(&ran), ["call", "call", "result", "result", "text"]);
    assert!(
        result_of(&ran, "call_sum").output.contains("6.5"),
        "{}",
        result_of(&ran, "call_sum").output
    );
    assert_eq!(result_of(&ran, "call_echo").output, "Echo: two at once");

    let received = mock.received();
    assert_eq!(received[0].path, "/v1/chat/completions");
    assert_eq!(
        received[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(received[0].body["stream_options"]["include_usage"], true);
    let messages = received[1].body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["user", "assistant", "tool", "tool"],
        "{messages:#?}"
    );
    let calls = messages[1]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    let args: Value =
        serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"a": 2.5, "b": 4}));
    assert_eq!(messages[2]["tool_call_id"], "call_sum");
    assert_eq!(messages[3]["tool_call_id"], "call_echo");
}

#[test]
fn bad_arguments_and_unknown_tools_are_refused_results_not_a_crashed_run() {
    let mock = MockProvider::start(vec![
        Answer::sse("loop/openai_chat_bad_args.sse"),
        Answer::sse("loop/openai_chat_final_text.sse"),
    ]);
    let mut h = Harness::new(&mock, everything(), AgentOptions::default());
    let ran = h.ask("try", "openai-chat/llama3.2");
    assert_eq!(
        ran.finished.reply.status,
        MessageStatus::Complete,
        "{:?}",
        ran.events
    );
    let bad = result_of(&ran, "call_bad");
    assert_eq!(bad.is_error, Some(true));
    assert!(
        bad.output.starts_with("[invalid_request]"),
        "{}",
        bad.output
    );
    let ghost = result_of(&ran, "call_ghost");
    assert!(ghost.output.starts_with("[not_found]"), "{}", ghost.output);
    assert!(ran.events.iter().any(|e| matches!(
        e,
        AssistantEvent::ToolResult {
            outcome: ToolResultOutcome::Refused,
            ..
        }
    )));
    // The model saw both errors.
    let messages = mock.received()[1].body["messages"]
        .as_array()
        .unwrap()
        .clone();
    assert!(
        messages[2]["content"]
            .as_str()
            .unwrap()
            .contains("invalid_request")
    );
}

#[test]
fn http_errors_before_the_stream_end_the_reply_with_named_codes() {
    let cases = [
        (
            Answer::error(
                401,
                json!({"type":"error","error":{"type":"authentication_error","message":format!("invalid x-api-key {KEY}")}}),
            ),
            ErrorCode::AssistantAuth,
            "ANTHROPIC_API_KEY",
        ),
        (
            Answer::error(
                404,
                json!({"type":"error","error":{"type":"not_found_error","message":"model: claude-nope"}}),
            ),
            ErrorCode::AssistantModelNotOffered,
            "claude-sonnet-4-5",
        ),
        (
            Answer::error(
                400,
                json!({"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}),
            ),
            ErrorCode::AssistantContextTooLarge,
            "too long",
        ),
    ];
    for (answer, code, words) in cases {
        let mock = MockProvider::start(vec![answer]);
        let mut h = Harness::new(&mock, McpServers::default(), AgentOptions::default());
        let msg = h
            .store
            .send(&h.chat.clone(), "hi", None, Attempt::FIRST)
            .unwrap();
        let ran = h.reply(msg, &host("anthropic/claude-sonnet-4-5"));
        assert_eq!(ran.finished.reply.status, MessageStatus::Failed);
        assert_eq!(error_code(&ran.events), Some(code.clone()));
        let message = format!("{:?}", ran.events);
        assert!(message.contains(words), "{code:?}: {message}");
        assert!(
            !message.contains(KEY),
            "the key reached the error: {message}"
        );
        assert_eq!(mock.received().len(), 1, "{code:?} is not retried");
    }
}

#[test]
fn rate_limits_and_overload_are_retried_within_bounds() {
    // 429 with retry-after 0, then a 529, then the stream: three requests.
    let mock = MockProvider::start(vec![
        Answer::error(
            429,
            json!({"error":{"type":"rate_limit_error","message":"slow down"}}),
        )
        .with_header("retry-after", "0"),
        Answer::error(
            529,
            json!({"error":{"type":"overloaded_error","message":"Overloaded"}}),
        ),
        Answer::sse("loop/anthropic_final_text.sse"),
    ]);
    let mut h = Harness::new(&mock, McpServers::default(), AgentOptions::default());
    let ran = h.ask("hi", "anthropic/claude-sonnet-4-5");
    assert_eq!(
        ran.finished.reply.status,
        MessageStatus::Complete,
        "{:?}",
        ran.events
    );
    assert_eq!(mock.received().len(), 3);

    // Always 503: the first try and two retries, then failed.
    let mock = MockProvider::start(vec![
        Answer::error(503, json!({"error":{"message":"down"}})),
        Answer::error(503, json!({"error":{"message":"down"}})),
        Answer::error(503, json!({"error":{"message":"down"}})),
        Answer::sse("loop/anthropic_final_text.sse"),
    ]);
    let mut h = Harness::new(&mock, McpServers::default(), AgentOptions::default());
    let ran = h.ask("hi", "anthropic/claude-sonnet-4-5");
    assert_eq!(ran.finished.reply.status, MessageStatus::Failed);
    assert_eq!(error_code(&ran.events), Some(ErrorCode::AssistantProvider));
    assert_eq!(mock.received().len(), 3);
}

#[test]
fn a_provider_that_goes_silent_is_cut_and_what_came_is_kept() {
    let body = provider::read_fixture("loop/anthropic_final_text.sse");
    // Silent after the first text delta.
    let cut_at = String::from_utf8_lossy(&body).find("Echo: sealed").unwrap();
    let mock = MockProvider::start(vec![
        Answer::stream(body, "text/event-stream").stalling(cut_at, Duration::from_secs(6)),
    ]);
    let options = AgentOptions {
        idle: Duration::from_secs(1),
        ..AgentOptions::default()
    };
    let mut h = Harness::new(&mock, McpServers::default(), options);
    let ran = h.ask("hi", "anthropic/claude-sonnet-4-5");
    assert_eq!(
        ran.finished.reply.status,
        MessageStatus::Interrupted,
        "{:?}",
        ran.events
    );
    assert_eq!(error_code(&ran.events), Some(ErrorCode::RequestTimeout));
    let PlainContentPartsItem::TextPart(t) = &parts(&ran)[0] else {
        panic!("{:?}", parts(&ran))
    };
    assert_eq!(t.text, "The tool said: ");
}

#[test]
fn the_step_budget_ends_a_reply_that_keeps_calling_tools() {
    let mock = MockProvider::start(vec![
        Answer::sse("loop/openai_chat_parallel_sum_and_echo.sse"),
        Answer::sse("loop/openai_chat_parallel_sum_and_echo.sse"),
    ]);
    let options = AgentOptions {
        max_steps: 1,
        ..AgentOptions::default()
    };
    let mut h = Harness::new(&mock, everything(), options);
    let ran = h.ask("loop", "openai-chat/llama3.2");
    assert_eq!(ran.finished.reply.status, MessageStatus::Complete);
    assert!(
        matches!(
            ran.events.last(),
            Some(AssistantEvent::Done { reason }) if reason.as_str() == "budget"
        ),
        "{:?}",
        ran.events.last()
    );
    assert_eq!(mock.received().len(), 1);
}

#[test]
fn the_filesystem_server_reads_a_file_for_the_model() {
    let files = tempfile::tempdir().unwrap();
    let root = files.path().canonicalize().unwrap();
    std::fs::write(root.join("notes.txt"), "sealed notes\n").unwrap();
    let path = root.join("notes.txt").display().to_string();
    let args = json!({"path": path}).to_string();
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id":"c1","object":"chat.completion.chunk","created":1,"model":"llama3.2",
                   "choices":[{"index":0,"delta":delta,"finish_reason":finish}]})
        )
    };
    let first = chunk(
        json!({"role":"assistant","tool_calls":[{"index":0,"id":"call_read","type":"function",
               "function":{"name":"mcp_fs_read_text_file","arguments":args}}]}),
        Value::Null,
    ) + &chunk(json!({}), json!("tool_calls"))
        + "data: [DONE]\n\n";
    let mock = MockProvider::start(vec![
        Answer::stream(first.into_bytes(), "text/event-stream"),
        Answer::sse("loop/openai_chat_final_text.sse"),
    ]);
    let bin = mcp_bin("mcp-server-filesystem");
    let servers = McpServers::from_json(
        &json!({"mcpServers": {"fs": {"command": bin, "args": [root.display().to_string()]}}})
            .to_string(),
    )
    .unwrap();
    let mut h = Harness::new(&mock, servers, AgentOptions::default());
    let ran = h.ask("read my notes", "openai-chat/llama3.2");
    assert_eq!(
        ran.finished.reply.status,
        MessageStatus::Complete,
        "{:?}",
        ran.events
    );
    let read = result_of(&ran, "call_read");
    assert_eq!(read.is_error, None, "{}", read.output);
    assert!(read.output.contains("sealed notes"), "{}", read.output);
    // A path outside the allowed folder is the server's error, as a result.
    let tools = h.agent.tools();
    let outside =
        h.rt.block_on(tools.call("mcp_fs_read_text_file", &json!({"path": "/etc/hostname"})));
    assert!(outside.is_error, "{outside:?}");
}

fn gel(data: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_gelstore"))
        .arg("--data")
        .arg(data)
        .args(args)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn ok(out: std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The CLI end to end: `settings set|show`, `chat send --model`, `chat
/// reply --to` running the loop on this device (waiting on the gated
/// call), `chat approve`, the reply to the answer, and a failed reply's
/// exit status.
#[test]
fn the_cli_runs_the_loop_with_settings_and_approvals() {
    let mock = MockProvider::start(vec![
        Answer::sse("loop/anthropic_think_and_echo.sse"),
        Answer::sse("loop/anthropic_final_text.sse"),
        Answer::error(
            401,
            json!({"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}),
        ),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mcp = dir.path().join("mcp.json");
    let mut config = provider::everything_config();
    config["mcpServers"]["everything"]["env"] = json!({"EVERYTHING_TOKEN": "not-for-show"});
    std::fs::write(&mcp, config.to_string()).unwrap();
    let env = [
        ("ANTHROPIC_BASE_URL", mock.url.as_str()),
        ("ANTHROPIC_API_KEY", KEY),
    ];
    ok(gel(&data, &["device", "init", "--name", "laptop"], &[]));
    ok(gel(
        &data,
        &[
            "settings",
            "set",
            "--model",
            "anthropic/claude-sonnet-4-5",
            "--approve-tools",
            "mcp_everything_echo",
            "--mcp-config",
            &mcp.display().to_string(),
        ],
        &[],
    ));
    let shown: Value = serde_json::from_str(&ok(gel(
        &data,
        &["settings", "show", "--format", "json"],
        &[],
    )))
    .unwrap();
    assert_eq!(shown["model"], "anthropic/claude-sonnet-4-5");
    assert_eq!(shown["approvalTools"], json!(["mcp_everything_echo"]));
    assert_eq!(shown["mcpServers"][0]["name"], "everything");
    assert_eq!(shown["mcpServers"][0]["env"], json!(["EVERYTHING_TOKEN"]));
    assert!(!shown.to_string().contains("not-for-show"));

    let chat = ok(gel(&data, &["chat", "new", "--title", "cli"], &[]))
        .trim()
        .to_owned();
    let message = ok(gel(
        &data,
        &[
            "chat",
            "send",
            "--chat",
            &chat,
            "--effort",
            "low",
            "say sealed hello",
        ],
        &[],
    ))
    .trim()
    .to_owned();
    let out = gel(&data, &["chat", "reply", "--to", &message], &env);
    let events = ok(out);
    let last: Value = serde_json::from_str(events.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "confirm_required", "{events}");
    assert_eq!(last["callId"], "toolu_01EchoCall");
    // The settings' default model answered; the effort became thinking.
    let first = &mock.received()[0];
    assert_eq!(first.body["model"], "claude-sonnet-4-5");
    assert_eq!(first.body["thinking"]["type"], "enabled");

    let reply = format!("{message}.r0");
    let answer = ok(gel(
        &data,
        &[
            "chat",
            "approve",
            "--reply",
            &reply,
            "--allow",
            "toolu_01EchoCall",
        ],
        &[],
    ))
    .trim()
    .to_owned();
    let events = ok(gel(&data, &["chat", "reply", "--to", &answer], &env));
    assert!(events.contains("\"tool_result\""), "{events}");
    assert!(
        events.lines().last().unwrap().contains("\"done\""),
        "{events}"
    );
    let shown = ok(gel(
        &data,
        &["chat", "show", "--chat", &chat, "--format", "json"],
        &[],
    ));
    assert!(shown.contains("Echo: sealed hello"), "{shown}");
    // The clear metadata is shown too.
    let thread: Value = serde_json::from_str(&shown).unwrap();
    let messages = thread["messages"].as_array().unwrap();
    let replies: Vec<&Value> = messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .collect();
    assert_eq!(replies[0]["stopReason"], "toolUse", "{shown}");
    assert_eq!(replies[1]["model"], "anthropic/claude-sonnet-4-5-20250929");
    assert_eq!(replies[1]["usage"]["outputTokens"], 12);
    assert_eq!(messages[0]["request"]["effort"], "low");

    // A refused key: exit 1, the code on stderr, the reply kept as failed.
    let again = ok(gel(
        &data,
        &[
            "chat",
            "send",
            "--chat",
            &chat,
            "--parent",
            &format!("{answer}.r0"),
            "again",
        ],
        &[],
    ))
    .trim()
    .to_owned();
    let out = gel(&data, &["chat", "reply", "--to", &again], &env);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("[assistant_auth]"), "{stderr}");
    assert!(!stderr.contains(KEY));

    // No model anywhere: refused before anything is written.
    let bare = dir.path().join("bare");
    ok(gel(&bare, &["device", "init"], &[]));
    let chat = ok(gel(&bare, &["chat", "new"], &[])).trim().to_owned();
    let m = ok(gel(&bare, &["chat", "send", "--chat", &chat, "hi"], &[]))
        .trim()
        .to_owned();
    let out = gel(&bare, &["chat", "reply", "--to", &m], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no model to answer with"));
    let shown = ok(gel(
        &bare,
        &["chat", "show", "--chat", &chat, "--format", "json"],
        &[],
    ));
    assert!(!shown.contains(".r0"), "a reply was written: {shown}");
}

/// Ollama sends whole calls without ids; the adapter numbers them per turn
/// and the loop keeps them unique across turns of one reply.
#[test]
fn ollama_whole_calls_in_two_turns_keep_unique_ids() {
    let call = |text: &str| {
        format!(
            "{}\n{}\n",
            json!({"model":"llama3.2","created_at":"2026-12-01T00:00:00Z","message":{"role":"assistant","content":"",
                   "tool_calls":[{"function":{"name":"mcp_everything_echo","arguments":{"message":text}}}]},"done":false}),
            json!({"model":"llama3.2","created_at":"2026-12-01T00:00:01Z","message":{"role":"assistant","content":""},
                   "done":true,"done_reason":"stop","prompt_eval_count":10,"eval_count":5})
        )
    };
    let last = format!(
        "{}\n{}\n",
        json!({"model":"llama3.2","created_at":"2026-12-01T00:00:02Z","message":{"role":"assistant","content":"both echoed"},"done":false}),
        json!({"model":"llama3.2","created_at":"2026-12-01T00:00:03Z","message":{"role":"assistant","content":""},
               "done":true,"done_reason":"stop","prompt_eval_count":30,"eval_count":3})
    );
    let mock = MockProvider::start(vec![
        Answer::stream(call("one").into_bytes(), "application/x-ndjson"),
        Answer::stream(call("two").into_bytes(), "application/x-ndjson"),
        Answer::stream(last.into_bytes(), "application/x-ndjson"),
    ]);
    let mut h = Harness::new(&mock, everything(), AgentOptions::default());
    let ran = h.ask("echo twice", "ollama/llama3.2");
    assert_eq!(
        ran.finished.reply.status,
        MessageStatus::Complete,
        "{:?}",
        ran.events
    );
    assert_eq!(kinds(&ran), ["call", "result", "call", "result", "text"]);
    let ids: Vec<&str> = parts(&ran)
        .iter()
        .filter_map(|p| match p {
            PlainContentPartsItem::ToolCallPart(c) => Some(c.call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(ids, ["call_0", "call_0_2"]);
    assert_eq!(result_of(&ran, "call_0_2").output, "Echo: two");
    let received = mock.received();
    assert_eq!(received[0].path, "/api/chat");
    let messages = received[2].body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["user", "assistant", "tool", "assistant", "tool"],
        "{messages:#?}"
    );
    assert_eq!(
        messages[1]["tool_calls"][0]["function"]["arguments"],
        json!({"message": "one"})
    );
    assert_eq!(messages[4]["content"], "Echo: two");
    assert_eq!(
        ran.finished.reply.usage.as_ref().unwrap().input_tokens,
        Some(50)
    );
}

/// A streamable HTTP MCP server (`server-everything streamableHttp`): the
/// tools are listed and called over HTTP through rmcp on our reqwest.
#[test]
fn a_streamable_http_mcp_server_serves_tools() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = std::process::Command::new(mcp_bin("mcp-server-everything"))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Ready once it says it listens.
    let stderr = server.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("listening") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("the HTTP MCP server started");
    let url = format!("http://127.0.0.1:{port}/mcp");
    let servers =
        McpServers::from_json(&json!({"mcpServers": {"web": {"url": url}}}).to_string()).unwrap();
    let rt = runtime();
    let (tools, problems) = rt.block_on(ToolHost::connect(&servers, Duration::from_secs(30)));
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(tools.source("mcp_web_echo"), Some(url.as_str()));
    let run = rt.block_on(tools.call("mcp_web_echo", &json!({"message": "over http"})));
    assert_eq!(run.output, "Echo: over http", "{run:?}");
    assert!(!run.is_error);
    let sum = rt.block_on(tools.call("mcp_web_get-sum", &json!({"a": 1.25, "b": 2})));
    assert!(sum.output.contains("3.25"), "{sum:?}");
    rt.block_on(tools.shutdown());
    let _ = server.kill();
    let _ = server.wait();

    // A server that is not there is reported and left out, not fatal.
    let gone = McpServers::from_json(
        &json!({"mcpServers": {"gone": {"url": format!("http://127.0.0.1:{port}/mcp")}}})
            .to_string(),
    )
    .unwrap();
    let (tools, problems) = rt.block_on(ToolHost::connect(&gone, Duration::from_secs(10)));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].code, "mcp_transport_failed");
    assert_eq!(tools.specs().count(), 0);
}

/// A call that outlives the host's timeout is a result (`uncertain`,
/// `[operation_timeout]`), and the server stays usable.
#[test]
fn a_tool_call_past_its_timeout_is_an_uncertain_result() {
    let rt = runtime();
    let (tools, problems) = rt.block_on(ToolHost::connect(&everything(), Duration::from_secs(3)));
    assert!(problems.is_empty(), "{problems:?}");
    let run = rt.block_on(tools.call(
        "mcp_everything_trigger-long-running-operation",
        &json!({"duration": 20, "steps": 2}),
    ));
    assert!(run.is_error, "{run:?}");
    assert_eq!(run.outcome, ToolResultOutcome::Uncertain);
    assert!(
        run.output.starts_with("[operation_timeout]"),
        "{}",
        run.output
    );
    let echo = rt.block_on(tools.call("mcp_everything_echo", &json!({"message": "still here"})));
    assert_eq!(echo.output, "Echo: still here");
    rt.block_on(tools.shutdown());
}

/// The events a finished reply's record replays to.
fn replayed(ran: &Ran) -> Vec<AssistantEvent> {
    let chat = gelstore::lexicon_runtime::AtUri::new(
        "at://did:plc:ewvi7nxzyoun6zhxrhs64oiz/chat.gel.assistant.chat/3lbqzcx2ss222",
    )
    .unwrap();
    let mut record = gelstore::chat::record::pending_reply(
        chat,
        Datetime::new("2026-12-01T00:00:00.000Z").unwrap(),
    );
    ran.finished.reply.fill(&mut record);
    gelstore::chat::replay::replay(
        &ran.finished.reply.key,
        &record,
        Some(&ran.finished.reply.content),
    )
}

/// The observations of `events`: (state, reason, text).
fn observations(events: &[AssistantEvent]) -> Vec<(String, Option<String>, Option<String>)> {
    events
        .iter()
        .filter_map(|e| match e {
            AssistantEvent::Observation {
                state,
                reason,
                text,
                ..
            } => Some((
                state.as_str().to_owned(),
                reason.as_ref().map(|r| r.as_str().to_owned()),
                text.clone(),
            )),
            _ => None,
        })
        .collect()
}

/// The tool results of a provider request as the model reads them
/// (Anthropic Messages: `tool_result` blocks).
fn tool_results_sent(r: &Received) -> Vec<String> {
    let mut out = Vec::new();
    for m in r.body["messages"].as_array().into_iter().flatten() {
        for b in m["content"].as_array().into_iter().flatten() {
            if b["type"] == "tool_result" {
                match &b["content"] {
                    Value::String(s) => out.push(s.clone()),
                    other => out.push(other.to_string()),
                }
            }
        }
    }
    out
}

/// A tool the server runs as an MCP task (server-everything's
/// `simulate-research-query`, tasks of protocol 2025-11-25): the call is
/// `accepted` with the task's id, the loop polls the task (`awaited`
/// with each status message), fetches its result (`captured`), and the
/// next turn gives the model the report; the record replays the same.
#[test]
fn an_mcp_task_is_followed_to_its_result_which_the_next_turn_reads() {
    let mock = MockProvider::start(vec![
        Answer::sse("loop/anthropic_research_task.sse"),
        Answer::sse("loop/anthropic_research_report.sse"),
    ]);
    let options = AgentOptions {
        job_wait: Duration::from_secs(60),
        ..AgentOptions::default()
    };
    let mut h = Harness::new(&mock, everything(), options);
    let tool = "mcp_everything_simulate-research-query";
    assert!(h.agent.tools().spec(tool).is_some());
    let ran = h.ask("research tides", "anthropic/claude-sonnet-4-5");
    let reply = &ran.finished.reply;
    assert_eq!(reply.status, MessageStatus::Complete, "{:?}", ran.events);
    assert_eq!(kinds(&ran), ["text", "call", "result", "text"]);

    // The events: the call, its acceptance, what was seen of the task,
    // then the next turn.
    let flow: Vec<String> = event_types(&ran.events)
        .into_iter()
        .filter(|t| t != "text_delta" && t != "message")
        .collect();
    let seen = observations(&ran.events);
    assert!(seen.len() >= 2, "{seen:?}");
    let mut expected = vec!["tool_call".to_owned(), "tool_result".to_owned()];
    expected.extend(std::iter::repeat_n("observation".to_owned(), seen.len()));
    expected.push("done".to_owned());
    assert_eq!(flow, expected, "{:?}", ran.events);
    let (last, awaited) = seen.split_last().unwrap();
    for (state, reason, text) in awaited {
        assert_eq!((state.as_str(), reason), ("awaited", &None));
        assert!(text.as_deref().unwrap().ends_with("..."), "{text:?}");
    }
    assert_eq!(awaited[0].2.as_deref(), Some("Gathering sources..."));
    assert_eq!(
        last,
        &(
            "captured".to_owned(),
            None,
            Some("# Research Report: tides".to_owned())
        )
    );
    let job = ran
        .events
        .iter()
        .find_map(|e| match e {
            AssistantEvent::ToolResult {
                outcome: ToolResultOutcome::Accepted,
                job_id: Some(job),
                ok: true,
                ..
            } => Some(job.clone()),
            _ => None,
        })
        .expect("an accepted result with a job id");
    assert!(ran.events.iter().all(|e| match e {
        AssistantEvent::Observation { job_id, id, .. } =>
            job_id.as_deref() == Some(job.as_str()) && id == "toolu_01ResearchTask",
        _ => true,
    }));

    // The record: the output as the live result showed it, the report in
    // the captured observation.
    let result = result_of(&ran, "toolu_01ResearchTask");
    assert_eq!(
        result.output,
        format!("[accepted] the work runs as task {job}")
    );
    assert_eq!(result.job_id.as_deref(), Some(job.as_str()));
    let kept = result.observations.as_ref().unwrap();
    let report = kept.last().unwrap().output.as_deref().unwrap();
    assert!(report.starts_with("# Research Report: tides\n"), "{report}");
    assert!(report.contains("Stage 4: Generating report"), "{report}");
    assert!(kept[..kept.len() - 1].iter().all(|o| o.output.is_none()));

    // The next turn's request gives the model the report after the
    // acceptance.
    let received = mock.received();
    assert_eq!(received.len(), 2);
    assert!(tool_results_sent(&received[0]).is_empty());
    let sent = tool_results_sent(&received[1]);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(
        sent[0].starts_with(&format!("[accepted] the work runs as task {job}")),
        "{}",
        sent[0]
    );
    assert!(sent[0].contains(report), "{}", sent[0]);
    assert_no_key(&received, &ran);

    // The finished record replays to the live events.
    let model = reply.model.as_ref().map(|m| m.id.clone());
    assert_eq!(
        replayed(&ran),
        gelstore::chat::replay::fold_deltas(&ran.events, model)
    );
}

/// A task that outlives the loop's `job_wait` is cancelled on its server
/// and observed `silent` (`exhausted`); the next turn tells the model.
#[test]
fn an_mcp_task_past_the_wait_is_cancelled_and_observed_exhausted() {
    let mock = MockProvider::start(vec![
        Answer::sse("loop/anthropic_research_task.sse"),
        Answer::sse("loop/anthropic_research_gave_up.sse"),
    ]);
    let options = AgentOptions {
        job_wait: Duration::from_millis(1500),
        ..AgentOptions::default()
    };
    let mut h = Harness::new(&mock, everything(), options);
    let ran = h.ask("research tides", "anthropic/claude-sonnet-4-5");
    assert_eq!(
        ran.finished.reply.status,
        MessageStatus::Complete,
        "{:?}",
        ran.events
    );
    let seen = observations(&ran.events);
    let (last, awaited) = seen.split_last().expect("observations");
    assert!(!awaited.is_empty() && awaited.iter().all(|o| o.0 == "awaited"));
    assert_eq!(
        (last.0.as_str(), last.1.as_deref()),
        ("silent", Some("exhausted")),
        "{seen:?}"
    );
    let result = result_of(&ran, "toolu_01ResearchTask");
    let task = result.job_id.clone().unwrap();
    assert!(
        result
            .observations
            .iter()
            .flatten()
            .all(|o| o.output.is_none())
    );

    // The server was told: the task is cancelled there.
    let handle = gelstore::agent::JobHandle {
        server: "everything".into(),
        task_id: task.clone(),
        initial: gelstore::agent::tasks::TaskState {
            task_id: task.clone(),
            status: "working".into(),
            message: None,
            poll: None,
        },
    };
    let state =
        h.rt.block_on(h.agent.tools().job_state(&handle))
            .expect("the server still knows the task");
    assert_eq!(state.status, "cancelled", "{state:?}");

    let sent = tool_results_sent(&mock.received()[1]);
    assert!(
        sent[0].contains(&format!("[{task} gave no result: silent (exhausted)")),
        "{}",
        sent[0]
    );
    let model = ran.finished.reply.model.as_ref().map(|m| m.id.clone());
    assert_eq!(
        replayed(&ran),
        gelstore::chat::replay::fold_deltas(&ran.events, model)
    );
}

/// Two tasks of one turn are followed at once: each is seen working
/// before either is captured, and the next turn reads both reports.
#[test]
fn the_tasks_of_one_turn_are_followed_concurrently() {
    let mock = MockProvider::start(vec![
        Answer::sse("loop/anthropic_two_research_tasks.sse"),
        Answer::sse("loop/anthropic_research_report.sse"),
    ]);
    let options = AgentOptions {
        job_wait: Duration::from_secs(60),
        ..AgentOptions::default()
    };
    let mut h = Harness::new(&mock, everything(), options);
    let ran = h.ask("research tides and reefs", "anthropic/claude-sonnet-4-5");
    assert_eq!(
        ran.finished.reply.status,
        MessageStatus::Complete,
        "{:?}",
        ran.events
    );
    let order: Vec<(String, String)> = ran
        .events
        .iter()
        .filter_map(|e| match e {
            AssistantEvent::Observation { id, state, .. } => {
                Some((id.clone(), state.as_str().to_owned()))
            }
            _ => None,
        })
        .collect();
    let first_captured = order.iter().position(|(_, s)| s == "captured").unwrap();
    for call in ["toolu_01ResearchTides", "toolu_01ResearchReefs"] {
        let seen = order.iter().position(|(id, _)| id == call).unwrap();
        assert!(seen < first_captured, "{order:?}");
        assert_eq!(
            order
                .iter()
                .filter(|(id, s)| id == call && s == "captured")
                .count(),
            1,
            "{order:?}"
        );
    }
    let sent = tool_results_sent(&mock.received()[1]);
    assert_eq!(sent.len(), 2);
    assert!(sent[0].contains("# Research Report: tides"), "{}", sent[0]);
    assert!(sent[1].contains("# Research Report: reefs"), "{}", sent[1]);
    let model = ran.finished.reply.model.as_ref().map(|m| m.id.clone());
    assert_eq!(
        replayed(&ran),
        gelstore::chat::replay::fold_deltas(&ran.events, model)
    );
}

/// A run stopped while it waits for a task: the task is observed
/// `interrupted` and the reply ends aborted, with no further turn.
#[test]
fn a_run_stopped_while_a_task_runs_observes_it_interrupted() {
    let mock = MockProvider::start(vec![Answer::sse("loop/anthropic_research_task.sse")]);
    let options = AgentOptions {
        job_wait: Duration::from_secs(60),
        ..AgentOptions::default()
    };
    let mut h = Harness::new(&mock, everything(), options);
    let (tx, rx) = tokio::sync::watch::channel(false);
    h.stop = Some(rx);
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        let _ = tx.send(true);
        tx
    });
    let ran = h.ask("research tides", "anthropic/claude-sonnet-4-5");
    drop(stopper.join());
    let reply = &ran.finished.reply;
    assert_eq!(reply.status, MessageStatus::Interrupted, "{:?}", ran.events);
    assert_eq!(reply.stop_reason, Some(MessageStopReason::Aborted));
    let seen = observations(&ran.events);
    let (last, awaited) = seen.split_last().expect("observations");
    assert!(!awaited.is_empty() && awaited.iter().all(|o| o.0 == "awaited"));
    assert_eq!(last.0, "interrupted", "{seen:?}");
    assert_eq!(mock.received().len(), 1);
    let model = reply.model.as_ref().map(|m| m.id.clone());
    assert_eq!(
        replayed(&ran),
        gelstore::chat::replay::fold_deltas(&ran.events, model)
    );
}
