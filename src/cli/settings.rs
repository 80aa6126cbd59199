//! `gelstore settings show|set`: the user's assistant settings record
//! (`chat.gel.assistant.settings`, key `self`): default model and effort
//! and the tools switched on in the clear; which tools need approval and
//! the MCP servers sealed.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde_json::json;

use super::chat::{Result, effort, model_ref};
use super::{Failure, Format, Outcome, finish, say};
use crate::agent::{McpServers, ServerConfig};
use crate::chat::ChatStore;
use crate::chat::settings::UserSettings;
use crate::lexicon::chat::gel::assistant::settings::McpServer;
use crate::lexicon_runtime::{Datetime, Uri};

#[derive(Subcommand, Debug)]
pub enum SettingsCommand {
    /// Print the settings (environment values of MCP servers are not shown).
    Show(ShowArgs),
    /// Change the settings; what is not given stays as it is.
    Set(SetArgs),
}

#[derive(Args, Debug)]
pub struct ShowArgs {
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct SetArgs {
    /// The default model, `PROVIDER/ID`.
    #[arg(long, value_name = "PROVIDER/ID")]
    pub model: Option<String>,
    /// The default reasoning effort: none, low, medium, high, max.
    #[arg(long)]
    pub effort: Option<String>,
    /// The tools switched on, by name (`mcp_<server>_<tool>`).
    #[arg(
        long,
        value_name = "NAME,...",
        value_delimiter = ',',
        conflicts_with = "all_tools"
    )]
    pub tools: Option<Vec<String>>,
    /// Switch on every tool of the configured servers.
    #[arg(long)]
    pub all_tools: bool,
    /// Tools whose calls wait for approval (`*`: every tool).
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    pub approve_tools: Option<Vec<String>>,
    /// Replace the MCP servers with those of this file,
    /// `{"mcpServers": {NAME: {"command","args","env"} | {"url"}}}`.
    #[arg(long, value_name = "FILE")]
    pub mcp_config: Option<PathBuf>,
}

pub fn run(data: &Path, cmd: SettingsCommand) -> Outcome {
    finish(match cmd {
        SettingsCommand::Show(a) => show(data, a.format),
        SettingsCommand::Set(a) => set(data, a),
    })
}

fn show(data: &Path, format: Format) -> Result<()> {
    let store = ChatStore::open(data)?;
    let Some((settings, _)) = store.settings()? else {
        match format {
            Format::Human => eprintln!("no settings yet (gelstore settings set …)"),
            Format::Json => say(json!({})),
        }
        return Ok(());
    };
    let r = &settings.record;
    let sealed = settings.sealed.as_ref();
    let servers: Vec<serde_json::Value> = sealed
        .and_then(|s| s.mcp_servers.as_ref())
        .into_iter()
        .flatten()
        .map(|s| {
            json!({
                "name": s.name,
                "command": s.command,
                "args": s.args,
                "env": s.env.as_ref().map(|e| e.iter().map(|kv| kv.split('=').next().unwrap_or("")).collect::<Vec<_>>()),
                "url": s.url.as_ref().map(|u| u.as_str()),
            })
        })
        .collect();
    let value = json!({
        "model": r.model.as_ref().map(|m| format!("{}/{}", m.provider, m.id)),
        "effort": r.effort.as_ref().map(|e| e.as_str()),
        "tools": r.tools,
        "approvalTools": sealed.and_then(|s| s.approval_tools.clone()),
        "mcpServers": servers,
        "sealedOpens": sealed.is_some(),
        "updatedAt": r.updated_at.as_str(),
    });
    match format {
        Format::Json => say(value),
        Format::Human => {
            for (k, v) in value.as_object().into_iter().flatten() {
                if !v.is_null() {
                    say(format!("{k}\t{v}"));
                }
            }
        }
    }
    Ok(())
}

fn set(data: &Path, args: SetArgs) -> Result<()> {
    let now =
        Datetime::new(crate::model::now_datetime()).map_err(|e| Failure::env(e.to_string()))?;
    let mut store = ChatStore::open(data)?;
    let (mut settings, previous) = match store.settings()? {
        Some((s, cid)) => (s, Some(cid)),
        None => (UserSettings::empty(now.clone()), None),
    };
    let Some(sealed) = settings.sealed.as_mut() else {
        return Err(Failure::input(
            "the sealed settings do not open on this device (sync, or wait for its key)",
        ));
    };
    if let Some(m) = &args.model {
        settings.record.model = Some(model_ref(m)?);
    }
    if let Some(e) = &args.effort {
        settings.record.effort = Some(effort(e)?);
    }
    if args.all_tools {
        settings.record.tools = None;
    } else if let Some(t) = &args.tools {
        settings.record.tools = Some(t.clone());
    }
    if let Some(t) = &args.approve_tools {
        sealed.approval_tools = Some(t.clone());
    }
    if let Some(path) = &args.mcp_config {
        let servers =
            McpServers::load(path).map_err(|e| Failure::input(format!("--mcp-config: {e}")))?;
        sealed.mcp_servers = Some(
            servers
                .0
                .iter()
                .map(|(n, c)| lexicon_server(n, c))
                .collect::<Result<_>>()?,
        );
    }
    settings.record.updated_at = now;
    store.put_settings(&settings, previous)?;
    eprintln!("settings written");
    Ok(())
}

fn lexicon_server(name: &str, config: &ServerConfig) -> Result<McpServer> {
    let mut s = McpServer {
        name: name.to_owned(),
        command: None,
        args: None,
        env: None,
        url: None,
        extra: Default::default(),
    };
    match config {
        ServerConfig::Stdio { command, args, env } => {
            s.command = Some(command.clone());
            s.args = (!args.is_empty()).then(|| args.clone());
            s.env =
                (!env.is_empty()).then(|| env.iter().map(|(k, v)| format!("{k}={v}")).collect());
        }
        ServerConfig::Http { url, .. } => {
            s.url = Some(
                Uri::new(url)
                    .map_err(|e| Failure::input(format!("MCP server {name}: url {url:?}: {e}")))?,
            );
        }
    }
    Ok(s)
}
