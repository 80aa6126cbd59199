//! `gelstore chat reply --to KEY` without `--events`: the assistant loop
//! run here, on this device (no server): a model provider by its SDK's
//! variables, and the MCP tools of the settings and `--mcp-config`.
//! Prints the live events as JSON lines; exits 1 when the reply ends
//! `failed`, with the code on stderr.

use std::path::Path;
use std::sync::Arc;

use super::Failure;
use super::chat::{ReplyArgs, Result};
use crate::agent::inputs::{HostChoices, Inputs};
use crate::agent::{Agent, AgentOptions, McpServers, ToolHost};
use crate::chat::{AssistantEvent, Attempt, ChatStore};
use crate::lexicon::chat::gel::assistant::message::MessageStatus;
use crate::provider::ModelSpec;
use crate::repo::tid::Tid;

pub(super) fn reply_here(
    data: &Path,
    message: Tid,
    attempt: Option<Attempt>,
    args: &ReplyArgs,
) -> Result<()> {
    let host = HostChoices {
        model: args
            .model
            .as_deref()
            .map(ModelSpec::parse)
            .transpose()
            .map_err(|e| Failure::input(format!("--model: {e}")))?,
        default_model: None,
        approve_tools: args.approve_tools.clone(),
    };
    let extra = match &args.mcp_config {
        None => McpServers::default(),
        Some(p) => McpServers::load(p).map_err(|e| Failure::input(format!("--mcp-config: {e}")))?,
    };
    let mut store = ChatStore::open(data)?;
    // Everything that can refuse the reply is checked before it is written.
    let inputs = Inputs::read(&store, message)?
        .ok_or_else(|| Failure::input(format!("message {message} does not open on this device")))?;
    let model = inputs
        .model(&host)
        .map_err(|e| Failure::input(e.to_string()))?;
    let servers = inputs.servers().merged(extra);
    let pending = store.reply_to_fill(args.reply_to(message, attempt))?;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::env(format!("the async runtime: {e}")))?;
    let options = AgentOptions::default();
    let finished = runtime.block_on(async {
        let (tools, problems) = ToolHost::connect(&servers, options.idle).await;
        for p in &problems {
            eprintln!("MCP server {}: [{}] {}", p.server, p.code, p.message);
        }
        let tools = Arc::new(tools);
        let env: crate::agent::Env = Arc::new(|v| std::env::var(v).ok());
        let agent = Agent::new(options, tools.clone(), env);
        let job = inputs.job(&pending, model, &host);
        let finished = agent.run(job, &mut Printer).await;
        drop(agent);
        if let Ok(tools) = Arc::try_unwrap(tools) {
            tools.shutdown().await;
        }
        finished
    });
    store.finish_reply(&pending, &finished.reply)?;
    for e in &finished.events {
        super::say(e.to_json_line());
    }
    let reply = &finished.reply;
    eprintln!("reply {}: {}", pending.key, reply.status.as_str());
    if !reply.waiting.is_empty() {
        eprintln!(
            "waiting for approval of {}; answer with: gelstore chat approve --reply {} --allow CALLID|--deny CALLID",
            reply.waiting.join(", "),
            pending.key
        );
    }
    if reply.status == MessageStatus::Failed {
        let said = finished.events.iter().find_map(|e| match e {
            AssistantEvent::Error { code, message } => Some(format!(
                "[{}] {}",
                code.as_str(),
                message.as_deref().unwrap_or("")
            )),
            _ => None,
        });
        return Err(Failure::input(format!(
            "reply {} failed: {}",
            pending.key,
            said.unwrap_or_else(|| "see the events above".into())
        )));
    }
    Ok(())
}

/// Prints each event as a JSON line.
struct Printer;

impl crate::agent::EventSink for Printer {
    fn publish(&mut self, event: &AssistantEvent) {
        super::say(event.to_json_line())
    }
}
