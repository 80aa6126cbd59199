//! Tools through MCP (the official Rust SDK, `rmcp`): the servers a user
//! configured, started (stdio) or reached (streamable HTTP, `mcp_http`) once per
//! host, their tools offered to the model as `mcp_<server>_<tool>` with
//! their JSON Schemas.
//!
//! A call never fails the run: a schema violation is refused before the
//! call, and an MCP error, a transport failure, a timeout or a response
//! that does not parse becomes a result with `isError` whose output starts
//! with the seed 000 code in brackets (`[mcp_transport_failed] …`), so the
//! model and the UI both see what happened.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use serde::Deserialize;
use serde_json::Value;

use super::tasks::{self, Created, Discovery, TaskState};
use crate::chat::ToolRun;
use crate::chat::results::{OUTPUT_KEPT, OUTPUT_MAX, cut_with_note};
use crate::lexicon::chat::gel::assistant::subscribe_reply::{Effects, Subject, ToolResultOutcome};
use crate::provider::ToolSpec;

/// The codes a failed call's output starts with (seed 000 names).
pub mod codes {
    pub const TRANSPORT_FAILED: &str = "mcp_transport_failed";
    pub const READ_FAILED: &str = "mcp_read_failed";
    pub const RESPONSE_INVALID: &str = "mcp_response_invalid";
    pub const TIMEOUT: &str = "operation_timeout";
    pub const INVALID_REQUEST: &str = "invalid_request";
    pub const NOT_FOUND: &str = "not_found";
}

/// How to reach one MCP server, in the `mcpServers` shape MCP clients
/// share: `{"command","args","env"}` or `{"url","headers"}`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum ServerConfig {
    Stdio {
        command: String,
        #[serde(default)]
        args: Vec<String>,
        #[serde(default)]
        env: BTreeMap<String, String>,
    },
    Http {
        url: String,
        #[serde(default)]
        headers: BTreeMap<String, String>,
    },
}

impl ServerConfig {
    /// What a tool call part records as its `source`: the URL, or the
    /// command's name (never its arguments or environment, which may hold
    /// secrets).
    pub fn source(&self) -> String {
        match self {
            ServerConfig::Stdio { command, .. } => command.clone(),
            ServerConfig::Http { url, .. } => url.clone(),
        }
    }
}

/// A set of servers by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct McpServers(pub BTreeMap<String, ServerConfig>);

/// Why an MCP configuration is refused.
#[derive(Debug, thiserror::Error)]
pub enum McpConfigError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "the MCP configuration is not {{\"mcpServers\": {{NAME: {{\"command\", \"args\", \"env\"}} | {{\"url\"}}}}}}: {0}"
    )]
    Shape(String),
    #[error("MCP server name {0:?}: use letters, digits, '-' and '_' (at most 32)")]
    BadName(String),
}

impl McpServers {
    /// Parses `{"mcpServers": {NAME: …}}`.
    pub fn from_json(text: &str) -> Result<McpServers, McpConfigError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct File {
            mcp_servers: BTreeMap<String, ServerConfig>,
        }
        let file: File =
            serde_json::from_str(text).map_err(|e| McpConfigError::Shape(e.to_string()))?;
        for name in file.mcp_servers.keys() {
            if name.is_empty()
                || name.len() > 32
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(McpConfigError::BadName(name.chars().take(64).collect()));
            }
        }
        Ok(McpServers(file.mcp_servers))
    }

    /// Reads the configuration file at `path`.
    pub fn load(path: &Path) -> Result<McpServers, McpConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| McpConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        McpServers::from_json(&text)
    }

    /// These servers with `other`'s added (`other` wins on a name).
    pub fn merged(mut self, other: McpServers) -> McpServers {
        self.0.extend(other.0);
        self
    }
}

/// The name a server's tool is offered as: `mcp_<server>_<tool>`, in the
/// characters and length every provider accepts (`[A-Za-z0-9_-]{1,64}`).
pub fn offered_name(server: &str, tool: &str) -> String {
    let clean: String = format!("mcp_{server}_{tool}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.len() <= 64 {
        return clean;
    }
    // Too long: keep a readable prefix and make it unique with a hash.
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{server}\0{tool}").as_bytes());
    let tag: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    format!("{}_{tag}", &clean[..55])
}

struct HostedTool {
    server: String,
    /// The server's own name of the tool.
    tool: String,
    spec: ToolSpec,
    source: String,
    info: ToolInfo,
    /// `None` when the schema does not compile here (a remote `$ref`):
    /// the server then checks the arguments itself.
    validator: Option<jsonschema::Validator>,
    /// Called as an MCP task (the server takes task-augmented calls and
    /// the tool's `execution.taskSupport` is `optional` or `required`).
    task: bool,
}

/// The work an `accepted` call queued: an MCP task on a server.
#[derive(Clone, Debug, PartialEq)]
pub struct JobHandle {
    pub server: String,
    pub task_id: String,
    /// The task as the call's answer described it.
    pub initial: TaskState,
}

/// The tools of the configured MCP servers, connected.
pub struct ToolHost {
    tools: BTreeMap<String, HostedTool>,
    clients: BTreeMap<String, RunningService<RoleClient, ()>>,
    timeout: Duration,
}

impl std::fmt::Debug for ToolHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolHost")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// What a server says of one tool: its title and its annotations (hints,
/// which the server may get wrong: they only shape the words a user is
/// shown, never whether a call waits).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolInfo {
    pub server: String,
    pub title: Option<String>,
    pub read_only: Option<bool>,
    pub destructive: Option<bool>,
    pub idempotent: Option<bool>,
    pub open_world: Option<bool>,
}

impl ToolInfo {
    /// What the tool declares it may do, if it declares anything.
    pub fn effects(&self) -> Option<Effects> {
        let declared = [
            self.read_only,
            self.destructive,
            self.idempotent,
            self.open_world,
        ];
        declared.iter().any(Option::is_some).then(|| Effects {
            read_only: self.read_only,
            destructive: self.destructive,
            idempotent: self.idempotent,
            open_world: self.open_world,
            extra: Default::default(),
        })
    }

    /// What running it does, in a sentence for a confirmation.
    pub fn consequence(&self, shown: &str) -> String {
        let effect = match (self.read_only, self.destructive) {
            (Some(true), _) => "it only reads",
            (_, Some(true)) => "it may change or delete data",
            (_, Some(false)) => "it may change data, but not delete any",
            _ => "the server does not say what it changes",
        };
        let world = if self.open_world == Some(true) {
            ", and it reaches outside the server"
        } else {
            ""
        };
        format!(
            "The assistant runs {shown} on the MCP server {}: {effect}{world}.",
            self.server
        )
    }
}

/// A server that could not be used, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerProblem {
    pub server: String,
    pub code: &'static str,
    pub message: String,
}

impl ToolHost {
    /// A host with no tools.
    pub fn empty() -> ToolHost {
        ToolHost {
            tools: BTreeMap::new(),
            clients: BTreeMap::new(),
            timeout: Duration::from_secs(60),
        }
    }

    /// Starts or reaches every server and lists its tools; a server that
    /// fails is left out and reported (the others still serve). Each
    /// call may take `timeout`.
    pub async fn connect(
        servers: &McpServers,
        timeout: Duration,
    ) -> (ToolHost, Vec<ServerProblem>) {
        let mut host = ToolHost {
            timeout,
            ..ToolHost::empty()
        };
        let mut problems = Vec::new();
        for (name, config) in &servers.0 {
            match tokio::time::timeout(timeout, host.add(name, config)).await {
                Ok(Ok(())) => {}
                Ok(Err(p)) => problems.push(p),
                Err(_) => problems.push(ServerProblem {
                    server: name.clone(),
                    code: codes::TIMEOUT,
                    message: format!(
                        "MCP server {name} did not start within {} s",
                        timeout.as_secs()
                    ),
                }),
            }
        }
        for p in &problems {
            tracing::warn!("MCP server {}: [{}] {}", p.server, p.code, p.message);
        }
        (host, problems)
    }

    async fn add(&mut self, name: &str, config: &ServerConfig) -> Result<(), ServerProblem> {
        let problem = |code, message: String| ServerProblem {
            server: name.to_owned(),
            code,
            message,
        };
        // What the server says of tasks, read from its own answers until
        // its tools are listed (rmcp's types do not keep it).
        let discovery = Discovery::new();
        let client = match config {
            ServerConfig::Stdio { command, args, env } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).envs(env);
                // The server's password must not reach a tool.
                cmd.env_remove("GELSTORE_PASSWORD");
                let transport = tasks::Child::spawn(cmd, discovery.clone()).map_err(|e| {
                    problem(
                        codes::TRANSPORT_FAILED,
                        format!("{command} did not start: {e}"),
                    )
                })?;
                ().serve(transport)
                    .await
                    .map_err(|e| problem(codes::TRANSPORT_FAILED, format!("{command}: {e}")))?
            }
            ServerConfig::Http { url, headers } => {
                super::mcp_http::connect(url, headers, discovery.clone())
                    .await
                    .map_err(|e| problem(codes::TRANSPORT_FAILED, format!("{url}: {e}")))?
            }
        };
        let listed = client.list_all_tools().await;
        let support = discovery.close();
        let listed =
            listed.map_err(|e| problem(codes::READ_FAILED, format!("listing tools: {e}")))?;
        for tool in listed {
            let schema = Value::Object((*tool.input_schema).clone());
            let offered = offered_name(name, &tool.name);
            let validator = jsonschema::validator_for(&schema).ok();
            let hints = tool.annotations.as_ref();
            let info = ToolInfo {
                server: name.to_owned(),
                title: tool
                    .title
                    .clone()
                    .or_else(|| hints.and_then(|a| a.title.clone()))
                    .filter(|t| !t.trim().is_empty()),
                read_only: hints.and_then(|a| a.read_only_hint),
                destructive: hints.and_then(|a| a.destructive_hint),
                idempotent: hints.and_then(|a| a.idempotent_hint),
                open_world: hints.and_then(|a| a.open_world_hint),
            };
            self.tools.insert(
                offered.clone(),
                HostedTool {
                    server: name.to_owned(),
                    tool: tool.name.to_string(),
                    spec: ToolSpec {
                        name: offered,
                        description: tool.description.map(|d| d.to_string()),
                        input_schema: schema,
                    },
                    source: config.source(),
                    info,
                    validator,
                    task: support.as_task(&tool.name),
                },
            );
        }
        self.clients.insert(name.to_owned(), client);
        Ok(())
    }

    /// Every tool's spec, by offered name.
    pub fn specs(&self) -> impl Iterator<Item = &ToolSpec> {
        self.tools.values().map(|t| &t.spec)
    }

    /// The spec of the tool offered as `name`.
    pub fn spec(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.get(name).map(|t| &t.spec)
    }

    /// What the server says of the tool offered as `name`.
    pub fn info(&self, name: &str) -> Option<&ToolInfo> {
        self.tools.get(name).map(|t| &t.info)
    }

    /// The `source` a call to `name` records.
    pub fn source(&self, name: &str) -> Option<&str> {
        self.tools.get(name).map(|t| t.source.as_str())
    }

    /// Runs the call `name(args)`; every failure is a result. An output
    /// over [`OUTPUT_MAX`] bytes is cut there, with a note saying how much
    /// was left out.
    pub async fn call(&self, name: &str, args: &Value) -> ToolRun {
        self.call_job(name, args, Duration::from_secs(300)).await.0
    }

    /// [`ToolHost::call`], and for a tool the server runs as a task, the
    /// task it queued (the result is then `accepted`, its `jobId` the task
    /// id; the server is asked to keep it `wait` and a margin). The
    /// caller follows the job ([`tasks::follow`]).
    pub async fn call_job(
        &self,
        name: &str,
        args: &Value,
        wait: Duration,
    ) -> (ToolRun, Option<JobHandle>) {
        let started = Instant::now();
        let (mut run, job) = match self.call_task(name, args, wait).await {
            Some(queued) => queued,
            None => (self.call_inner(name, args).await, None),
        };
        run.elapsed_ms = Some(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
        let whole = run.output.len();
        run.output = cut_output(run.output);
        // A cut JSON text no longer parses: it is text now.
        run.json &= run.output.len() == whole;
        (run, job)
    }

    /// A call to a task tool, its arguments checked first (`None`: not a
    /// task tool, or arguments the plain path refuses).
    async fn call_task(
        &self,
        name: &str,
        args: &Value,
        wait: Duration,
    ) -> Option<(ToolRun, Option<JobHandle>)> {
        let tool = self.tools.get(name).filter(|t| t.task)?;
        let object = args.as_object()?;
        if tool.validator.as_ref().is_some_and(|v| !v.is_valid(args)) {
            return None;
        }
        let client = self.clients.get(&tool.server)?;
        let created = tokio::time::timeout(
            self.timeout,
            tasks::create(client, &tool.tool, object, wait),
        )
        .await;
        Some(match created {
            Err(_) => (
                failed(
                    ToolResultOutcome::Uncertain,
                    codes::TIMEOUT,
                    &format!(
                        "{} did not answer within {} s",
                        tool.server,
                        self.timeout.as_secs()
                    ),
                ),
                None,
            ),
            Ok(Err(e)) => (service_failure(&tool.server, e), None),
            Ok(Ok(Created::Done(result))) => (ran(&result), None),
            // A record keeps a job id of 512 bytes at most.
            Ok(Ok(Created::Task(state)))
                if state.task_id.is_empty() || state.task_id.len() > 512 =>
            {
                (
                    failed(
                        ToolResultOutcome::Uncertain,
                        codes::RESPONSE_INVALID,
                        &format!(
                            "{} named its task with an id this host cannot keep",
                            tool.server
                        ),
                    ),
                    None,
                )
            }
            Ok(Ok(Created::Task(state))) => {
                let run = ToolRun {
                    job_id: Some(state.task_id.clone()),
                    ..ToolRun::new(
                        ToolResultOutcome::Accepted,
                        format!("[accepted] the work runs as task {}", state.task_id),
                    )
                };
                let job = JobHandle {
                    server: tool.server.clone(),
                    task_id: state.task_id.clone(),
                    initial: state,
                };
                (run, Some(job))
            }
        })
    }

    fn job_client(&self, job: &JobHandle) -> Result<&RunningService<RoleClient, ()>, String> {
        self.clients
            .get(&job.server)
            .ok_or_else(|| "the task's server is not connected".to_owned())
    }

    /// The job's task as its server describes it now.
    pub async fn job_state(&self, job: &JobHandle) -> Result<TaskState, String> {
        let client = self.job_client(job)?;
        match tokio::time::timeout(self.timeout, tasks::get(client, &job.task_id)).await {
            Err(_) => Err(format!("{} did not say how the task is", job.server)),
            Ok(Err(e)) => Err(format!("{}: {e}", job.server)),
            Ok(Ok(state)) => Ok(state),
        }
    }

    /// The finished job's result as the model reads it (cut as a call's
    /// output is), and whether it is an error.
    pub async fn job_result(&self, job: &JobHandle) -> Result<(String, bool), String> {
        let client = self.job_client(job)?;
        match tokio::time::timeout(self.timeout, tasks::result(client, &job.task_id)).await {
            Err(_) => Err(format!("{} did not give the task's result", job.server)),
            Ok(Err(e)) => Err(format!("{}: {e}", job.server)),
            Ok(Ok(result)) => {
                let (output, _) = render(&result.content, result.structured_content.as_ref());
                // An observation keeps it in the record: no blob.
                Ok((
                    cut_to(output, OUTPUT_KEPT),
                    result.is_error.unwrap_or(false),
                ))
            }
        }
    }

    /// Asks the job's server to cancel its task.
    pub async fn cancel_job(&self, job: &JobHandle) {
        if let Some(client) = self.clients.get(&job.server)
            && let Err(e) = tasks::cancel(client, &job.task_id).await
        {
            tracing::warn!("cancelling task {} on {}: {e}", job.task_id, job.server);
        }
    }

    async fn call_inner(&self, name: &str, args: &Value) -> ToolRun {
        let Some(tool) = self.tools.get(name) else {
            return failed(
                ToolResultOutcome::Refused,
                codes::NOT_FOUND,
                &format!("no tool {name:?} is offered here"),
            );
        };
        let Some(object) = args.as_object() else {
            return failed(
                ToolResultOutcome::Refused,
                codes::INVALID_REQUEST,
                "the arguments are not a JSON object",
            );
        };
        if let Some(v) = &tool.validator {
            let errors: Vec<String> = v
                .iter_errors(args)
                .take(5)
                .map(|e| {
                    let at = e.instance_path().to_string();
                    if at.is_empty() {
                        e.to_string()
                    } else {
                        format!("{at}: {e}")
                    }
                })
                .collect();
            if !errors.is_empty() {
                return failed(
                    ToolResultOutcome::Refused,
                    codes::INVALID_REQUEST,
                    &format!(
                        "the arguments do not match the tool's schema: {}",
                        errors.join("; ")
                    ),
                );
            }
        }
        let Some(client) = self.clients.get(&tool.server) else {
            return failed(
                ToolResultOutcome::Refused,
                codes::TRANSPORT_FAILED,
                "the tool's server is not connected",
            );
        };
        let params = CallToolRequestParams::new(tool.tool.clone()).with_arguments(object.clone());
        match tokio::time::timeout(self.timeout, client.call_tool(params)).await {
            Err(_) => failed(
                ToolResultOutcome::Uncertain,
                codes::TIMEOUT,
                &format!(
                    "{} did not answer within {} s",
                    tool.server,
                    self.timeout.as_secs()
                ),
            ),
            Ok(Err(e)) => service_failure(&tool.server, e),
            Ok(Ok(result)) => ran(&result),
        }
    }

    /// Closes every server (stdio children are stopped).
    pub async fn shutdown(self) {
        for (_, client) in self.clients {
            let _ = client.cancel().await;
        }
    }
}

/// A tool's output as a call's result keeps it: whole up to
/// [`OUTPUT_MAX`] (what is over [`OUTPUT_KEPT`] the reply keeps in a
/// sealed blob), cut there with a note saying how much was left out.
fn cut_output(output: String) -> String {
    cut_to(output, OUTPUT_MAX)
}

/// `output` cut to `limit` bytes, with a note saying how much was left out.
fn cut_to(output: String, limit: usize) -> String {
    if output.len() <= limit {
        return output;
    }
    let note = format!(
        "\n[output cut: {} bytes in all, the first {limit} kept]",
        output.len()
    );
    cut_with_note(&output, limit, &note)
}

/// A call that ran, as its result says.
fn ran(result: &CallToolResult) -> ToolRun {
    let (output, json) = render(&result.content, result.structured_content.as_ref());
    ToolRun {
        is_error: result.is_error.unwrap_or(false),
        json,
        subject: subject_of(&result.content),
        ..ToolRun::new(ToolResultOutcome::Succeeded, output)
    }
}

fn failed(outcome: ToolResultOutcome, code: &str, message: &str) -> ToolRun {
    ToolRun {
        is_error: true,
        ..ToolRun::new(outcome, format!("[{code}] {message}"))
    }
}

fn service_failure(server: &str, e: ServiceError) -> ToolRun {
    match e {
        // The server answered with a JSON-RPC error: the call did not run.
        ServiceError::McpError(e) => failed(
            ToolResultOutcome::Refused,
            codes::READ_FAILED,
            &format!("{server} answered with an error: {}", e.message),
        ),
        ServiceError::UnexpectedResponse => failed(
            ToolResultOutcome::Uncertain,
            codes::RESPONSE_INVALID,
            &format!("{server} gave a response that is not a tool result"),
        ),
        ServiceError::Timeout { .. } => failed(
            ToolResultOutcome::Uncertain,
            codes::TIMEOUT,
            &format!("{server} did not answer in time"),
        ),
        other => failed(
            ToolResultOutcome::Uncertain,
            codes::TRANSPORT_FAILED,
            &format!("{server}: {other}"),
        ),
    }
}

/// What a result names as its subject: its first resource link (or
/// embedded resource), when its URI is one the lexicon takes.
fn subject_of(content: &[ContentBlock]) -> Option<Subject> {
    content.iter().find_map(|block| {
        let (uri, name, mime_type) = match block {
            ContentBlock::ResourceLink(r) => {
                (r.uri.clone(), Some(r.name.clone()), r.mime_type.clone())
            }
            _ => return None,
        };
        let uri = crate::lexicon_runtime::Uri::new(uri).ok()?;
        Some(Subject {
            uri,
            name,
            mime_type,
            extra: Default::default(),
        })
    })
}

/// A tool result's content as the text a model reads, and whether it is
/// the structured result as JSON: text blocks as they are, other blocks
/// named, structured content as JSON when there is nothing else.
fn render(content: &[ContentBlock], structured: Option<&Value>) -> (String, bool) {
    let mut parts: Vec<String> = Vec::new();
    for block in content {
        match block {
            ContentBlock::Text(t) => parts.push(t.text.clone()),
            ContentBlock::Image(i) => parts.push(format!(
                "[image {}, {} base64 bytes]",
                i.mime_type,
                i.data.len()
            )),
            ContentBlock::Audio(a) => parts.push(format!(
                "[audio {}, {} base64 bytes]",
                a.mime_type,
                a.data.len()
            )),
            other => parts.push(serde_json::to_string(other).unwrap_or_default()),
        }
    }
    if parts.is_empty()
        && let Some(s) = structured
    {
        return (s.to_string(), true);
    }
    (parts.join("\n"), false)
}

/// Shared by the loop's tasks.
pub type SharedTools = Arc<ToolHost>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_failure_codes_are_seed_000_codes() {
        use crate::lexicon::chat::gel::assistant::subscribe_reply::ErrorCode;
        use crate::lexicon_runtime::StringEnum;
        for code in [
            codes::TRANSPORT_FAILED,
            codes::READ_FAILED,
            codes::RESPONSE_INVALID,
            codes::TIMEOUT,
            codes::INVALID_REQUEST,
            codes::NOT_FOUND,
        ] {
            let known = ErrorCode::from_string(code.to_owned()).unwrap();
            assert!(!matches!(known, ErrorCode::Other(_)), "{code}");
        }
    }

    #[test]
    fn long_output_is_cut_on_a_char_boundary_with_a_note() {
        let long = "é".repeat(OUTPUT_KEPT);
        let cut = cut_to(long.clone(), OUTPUT_KEPT);
        assert!(cut.len() <= OUTPUT_KEPT);
        assert!(cut.ends_with(&format!(
            "[output cut: {} bytes in all, the first {OUTPUT_KEPT} kept]",
            long.len()
        )));
        assert_eq!(cut_output("short".into()), "short");
        // A call's output is cut only past what a blob holds.
        assert_eq!(cut_output(long.clone()), long);
    }

    #[test]
    fn consequences_follow_the_annotations() {
        let info = |read_only, destructive, open_world| ToolInfo {
            server: "fs".into(),
            title: None,
            read_only,
            destructive,
            idempotent: None,
            open_world,
        };
        let say = |i: ToolInfo| i.consequence("'Write File'");
        assert_eq!(
            say(info(Some(false), Some(true), Some(false))),
            "The assistant runs 'Write File' on the MCP server fs: it may change or delete data."
        );
        assert!(say(info(Some(true), None, None)).ends_with("it only reads."));
        assert!(
            say(info(None, None, Some(true)))
                .ends_with("does not say what it changes, and it reaches outside the server.")
        );
        assert!(say(info(None, Some(false), None)).contains("but not delete any"));
    }

    #[test]
    fn offered_names_fit_every_provider() {
        assert_eq!(
            offered_name("fs", "read_text_file"),
            "mcp_fs_read_text_file"
        );
        assert_eq!(offered_name("my.server", "do it"), "mcp_my_server_do_it");
        let long = offered_name("server", &"t".repeat(100));
        assert!(
            long.len() <= 64 && long.starts_with("mcp_server_t"),
            "{long}"
        );
        assert_ne!(long, offered_name("server", &"t".repeat(101)));
    }

    #[test]
    fn mcp_config_shapes_and_bad_names() {
        let s = McpServers::from_json(r#"{"mcpServers":{"a":{"command":"x","args":["1"],"env":{"K":"V"}},"b":{"url":"http://127.0.0.1:1/mcp"}}}"#).unwrap();
        assert_eq!(s.0["a"].source(), "x");
        assert_eq!(s.0["b"].source(), "http://127.0.0.1:1/mcp");
        assert!(matches!(
            McpServers::from_json(r#"{"mcpServers":{"a b":{"command":"x"}}}"#),
            Err(McpConfigError::BadName(_))
        ));
        assert!(matches!(
            McpServers::from_json(r#"{"servers":{}}"#),
            Err(McpConfigError::Shape(_))
        ));
        assert!(matches!(
            McpServers::from_json(r#"{"mcpServers":{"a":{"command":"x","url":"y"}}}"#),
            Err(McpConfigError::Shape(_))
        ));
    }
}
