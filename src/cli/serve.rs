//! `gelstore serve`: the XRPC server over the data folder (see
//! `crate::server`). Prints one JSON line when it is ready:
//! `{"service","did","handle"}`.

use std::net::SocketAddr;
use std::path::Path;

use clap::Args;

use super::{Failure, Outcome, finish, say};
use crate::server::{self, DEFAULT_LISTEN, Limits, ServeOptions};

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The address to listen on (port 0: any free port).
    #[arg(long, default_value = DEFAULT_LISTEN)]
    listen: SocketAddr,
    /// The URL clients reach this server at, if not the listen address (a
    /// TLS proxy in front: https://pds.example.com). It is the service
    /// endpoint in the DID document, and a new account's did:web
    /// (did:web:pds.example.com).
    #[arg(long, value_name = "URL")]
    public_url: Option<String>,
    /// The account's handle (default for a new account: gelstore.test).
    #[arg(long)]
    handle: Option<String>,
    /// Sets the account's password (only a salted hash is stored); default:
    /// the GELSTORE_PASSWORD environment variable. Without either, a new
    /// account gets a random password, shown once on stderr.
    #[arg(long)]
    password: Option<String>,
    /// A PLC directory URL: a new repository gets a did:plc registered
    /// there (signing key = rotation key = `#atproto` key) instead of the
    /// did:web of the listen address.
    #[arg(long, value_name = "URL")]
    plc: Option<String>,
    /// Run the assistant with this model command (run with `sh -c` once
    /// per pending reply: the request as JSON on stdin, the model's run as
    /// JSON lines on stdout, see fixtures/streams/README.md). The folder
    /// then holds a device of the account, so this server can read the
    /// chats; without the flag it holds no chat key.
    #[arg(long, value_name = "CMD", conflicts_with = "assistant_model")]
    assistant: Option<String>,
    /// Run the built-in assistant: model providers by their SDKs'
    /// variables (OPENAI_API_KEY/OPENAI_BASE_URL, ANTHROPIC_API_KEY/
    /// ANTHROPIC_BASE_URL, OLLAMA_HOST) and tools from MCP servers. This
    /// model answers when the message, the reply before it, the chat and
    /// the user's settings name none. As with --assistant, the folder then
    /// holds a device of the account.
    #[arg(long, value_name = "PROVIDER/ID")]
    assistant_model: Option<String>,
    /// With --assistant-model: MCP servers besides the user's settings,
    /// `{"mcpServers": {NAME: {"command","args","env"} | {"url"}}}`.
    #[arg(long, value_name = "FILE", requires = "assistant_model")]
    mcp_config: Option<std::path::PathBuf>,
    /// Tools whose calls wait for the user's approval (besides those the
    /// user's settings name).
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    approve_tools: Vec<String>,
    /// With --assistant: how many replies run at once.
    #[arg(long, value_name = "N", default_value_t = server::AssistantOptions::DEFAULT_JOBS)]
    assistant_jobs: usize,
    /// With --assistant: a command silent this many seconds is cut (the
    /// reply is kept as interrupted).
    #[arg(long, value_name = "SECS", default_value_t = server::AssistantOptions::DEFAULT_IDLE.as_secs())]
    assistant_idle_secs: u64,
    /// The largest blob upload, in bytes.
    #[arg(long, default_value_t = Limits::default().blob)]
    max_blob_bytes: usize,
    /// The largest JSON request body, in bytes.
    #[arg(long, default_value_t = Limits::default().body)]
    max_body_bytes: usize,
    /// Seconds a client has to send a request's head (from its first
    /// byte, or from connecting).
    #[arg(long, value_name = "SECS", default_value_t = Limits::default().header_timeout.as_secs(), value_parser = clap::value_parser!(u64).range(1..=86_400))]
    header_timeout_secs: u64,
    /// Seconds a kept-alive connection may wait for its next request.
    #[arg(long, value_name = "SECS", default_value_t = Limits::default().idle_timeout.as_secs(), value_parser = clap::value_parser!(u64).range(1..=86_400))]
    idle_timeout_secs: u64,
    /// Seconds a request body may send nothing (408), and a response wait
    /// for a client that does not read it.
    #[arg(long, value_name = "SECS", default_value_t = Limits::default().body_timeout.as_secs(), value_parser = clap::value_parser!(u64).range(1..=86_400))]
    body_timeout_secs: u64,
    /// The most connections open at once (kept under the open-file
    /// limit); past it the connection quiet the longest is closed.
    #[arg(long, value_name = "N", default_value_t = Limits::default().connections, value_parser = parse_connections)]
    max_connections: usize,
    /// With --public-url: how many proxies in front append the address
    /// they were reached from to X-Forwarded-For. The client's address is
    /// that many entries from the right (entries left of it are the
    /// client's own); 0 ignores the header.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "public_url")]
    trusted_proxies: usize,
    /// How many of the latest `#commit` events subscribeRepos can replay
    /// from a cursor (older ones are deleted; a consumer further behind
    /// resyncs with getRepo).
    #[arg(long, value_name = "N", default_value_t = crate::repo::events::DEFAULT_RETENTION, value_parser = clap::value_parser!(u64).range(1..))]
    event_window: u64,
    /// The most bytes of `#commit` events kept for replay, whatever their
    /// number (the latest event is always kept).
    #[arg(long, value_name = "BYTES", default_value_t = crate::repo::events::DEFAULT_RETENTION_BYTES)]
    event_window_bytes: u64,
    /// A PDS the chat page at / may sign in at, besides this server, for
    /// accounts that live there (repeat for more). Its origin is added to
    /// the page's Content-Security-Policy; the page reads and writes the
    /// sealed records there itself.
    #[arg(long, value_name = "URL", value_parser = crate::server::web::origin_of)]
    web_pds: Vec<String>,
}

fn parse_connections(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("must be a whole number of at least 1".into()),
    }
}

pub fn run(data: &Path, args: ServeArgs) -> Outcome {
    let runner = match (args.assistant, &args.assistant_model) {
        (Some(command), _) => Some(server::RunnerOptions::Command(command)),
        (None, Some(model)) => {
            let default_model = match crate::provider::ModelSpec::parse(model) {
                Ok(m) => m,
                Err(e) => return finish(Err(Failure::input(format!("--assistant-model: {e}")))),
            };
            let servers = match &args.mcp_config {
                None => crate::agent::McpServers::default(),
                Some(path) => match crate::agent::McpServers::load(path) {
                    Ok(s) => s,
                    Err(e) => return finish(Err(Failure::input(format!("--mcp-config: {e}")))),
                },
            };
            Some(server::RunnerOptions::Agent {
                default_model,
                servers,
                options: crate::agent::AgentOptions {
                    idle: std::time::Duration::from_secs(args.assistant_idle_secs),
                    ..Default::default()
                },
            })
        }
        (None, None) => {
            if !args.approve_tools.is_empty() {
                return finish(Err(Failure::input(
                    "--approve-tools needs --assistant or --assistant-model",
                )));
            }
            None
        }
    };
    let options = ServeOptions {
        data: data.to_path_buf(),
        listen: args.listen,
        handle: args.handle,
        plc: args.plc,
        public_url: args.public_url,
        trusted_proxies: args.trusted_proxies,
        event_window: (args.event_window, args.event_window_bytes),
        web_pds: args.web_pds,
        assistant: runner.map(|runner| server::AssistantOptions {
            runner,
            approve_tools: args.approve_tools,
            jobs: args.assistant_jobs,
            idle: std::time::Duration::from_secs(args.assistant_idle_secs),
        }),
        password: args
            .password
            .or_else(|| std::env::var(super::sync::PASSWORD_ENV).ok()),
        limits: Limits {
            blob: args.max_blob_bytes,
            body: args.max_body_bytes,
            header_timeout: std::time::Duration::from_secs(args.header_timeout_secs),
            idle_timeout: std::time::Duration::from_secs(args.idle_timeout_secs),
            body_timeout: std::time::Duration::from_secs(args.body_timeout_secs),
            connections: args.max_connections,
            ..Limits::default()
        },
    };
    finish(
        server::run(options, |ready| {
            say(serde_json::json!({
                "service": ready.service,
                "did": ready.did,
                "handle": ready.handle,
            }))
        })
        .map_err(|e| match e {
            server::ServeError::Account(_)
            | server::ServeError::ReadOnly(_)
            | server::ServeError::Assistant(_)
            | server::ServeError::Setting(_)
            | server::ServeError::Plc(server::PlcError::Refused { .. }) => {
                Failure::input(e.to_string())
            }
            other => Failure::env(other.to_string()),
        }),
    )
}
