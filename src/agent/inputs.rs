//! What a reply is generated from, read from the store in one go (under
//! the server's lock, or the CLI's open store): the pending reply, the
//! branch it answers, the approval answer it continues, the chat's
//! defaults and system prompt, and the user's settings. Choosing the
//! model, tools and approval rule from them happens here too.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{Job, McpServers, ServerConfig};
use crate::chat::approval::{AskIf, Resolution};
use crate::chat::settings::UserSettings;
use crate::chat::store::PendingReply;
use crate::chat::{ApprovalPolicy, ChatRecord, ChatStore, ChatStoreError};
use crate::lexicon::chat::gel::assistant::chat::Chat;
use crate::lexicon::chat::gel::assistant::defs::GenerationRequest;
use crate::lexicon::chat::gel::assistant::message::MessageRole;
use crate::provider::ModelSpec;
use crate::repo::tid::Tid;

/// The inputs of one reply.
#[derive(Clone, Debug)]
pub struct Inputs {
    /// The branch, opened, oldest first; the last record is the user
    /// message the reply answers.
    pub branch: Vec<ChatRecord>,
    pub resolution: Option<Resolution>,
    pub request: Option<GenerationRequest>,
    pub chat: Option<Chat>,
    pub system: Option<String>,
    pub settings: Option<UserSettings>,
}

/// What the host adds to the user's choices.
#[derive(Clone, Debug, Default)]
pub struct HostChoices {
    /// `--model`: used whatever the records say.
    pub model: Option<ModelSpec>,
    /// `--assistant-model`: used when the records name no model.
    pub default_model: Option<ModelSpec>,
    /// `--approve-tools`: calls that wait for approval besides the user's.
    pub approve_tools: Vec<String>,
}

/// Why a reply cannot be generated from its inputs.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(
        "no model to answer with: the message asks for none, no reply before it names one, and no default is set (pass --model provider/id, or `gelstore settings set --model provider/id`)"
    )]
    NoModel,
}

impl Inputs {
    /// Reads the inputs of a reply to user message `message`; `None` when
    /// the message does not open on this device.
    pub fn read(store: &ChatStore, message: Tid) -> Result<Option<Inputs>, ChatStoreError> {
        let (branch, resolution) = store.reply_inputs(message)?;
        let Some(user) = branch
            .last()
            .filter(|r| r.key == message.to_string() && r.message.role == MessageRole::User)
        else {
            return Ok(None);
        };
        if user.content.is_none() {
            return Ok(None);
        }
        let request = user.message.request.clone();
        let chat_key = store.chat_of_message(message)?;
        let chat = store.chat(&chat_key).ok();
        let system = store.chat_fields(&chat_key).and_then(|f| f.system_prompt);
        let settings = store.settings()?.map(|(s, _)| s);
        Ok(Some(Inputs {
            branch,
            resolution,
            request,
            chat,
            system,
            settings,
        }))
    }

    /// The model (seed 001): the host's override, the request's, the
    /// previous reply's, the chat's default, the user's default, the
    /// host's default.
    pub fn model(&self, host: &HostChoices) -> Result<ModelSpec, PlanError> {
        let chat = self
            .chat
            .as_ref()
            .and_then(|c| c.model.as_ref())
            .map(ModelSpec::from_ref);
        let user = self
            .settings
            .as_ref()
            .and_then(|s| s.record.model.as_ref())
            .map(ModelSpec::from_ref);
        let fallback = chat.or(user).or_else(|| host.default_model.clone());
        super::choose_model(
            host.model.as_ref(),
            self.request.as_ref(),
            &self.branch,
            fallback.as_ref(),
        )
        .ok_or(PlanError::NoModel)
    }

    /// The MCP servers of the user's settings.
    pub fn servers(&self) -> McpServers {
        self.settings.as_ref().map(servers_of).unwrap_or_default()
    }

    /// The job for the loop: `pending` with `model` and the host's choices.
    pub fn job<'a>(
        &'a self,
        pending: &'a PendingReply,
        model: ModelSpec,
        host: &HostChoices,
    ) -> Job<'a> {
        let settings_tools = self
            .settings
            .as_ref()
            .and_then(|s| s.record.tools.as_deref());
        let chat_tools = self.chat.as_ref().and_then(|c| c.tools.as_deref());
        let tools = super::choose_tools(self.request.as_ref(), chat_tools, settings_tools);
        let effort = self
            .request
            .as_ref()
            .and_then(|r| r.effort.as_ref())
            .or_else(|| self.chat.as_ref().and_then(|c| c.effort.as_ref()))
            .or_else(|| {
                self.settings
                    .as_ref()
                    .and_then(|s| s.record.effort.as_ref())
            })
            .map(|e| e.as_str().to_owned());
        let mut gated: BTreeSet<String> = host.approve_tools.iter().cloned().collect();
        if let Some(list) = self
            .settings
            .as_ref()
            .and_then(|s| s.sealed.as_ref())
            .and_then(|s| s.approval_tools.as_ref())
        {
            gated.extend(list.iter().cloned());
        }
        let all = gated.contains("*");
        let policy: Arc<dyn ApprovalPolicy + Send + Sync> =
            Arc::new(AskIf(move |c: &crate::chat::assemble::FinishedCall| {
                all || gated.contains(&c.name)
            }));
        Job {
            pending,
            branch: &self.branch,
            system: self.system.clone(),
            resolution: self.resolution.as_ref(),
            model,
            tools,
            effort,
            policy,
            stop: None,
        }
    }
}

/// The MCP servers `settings` configure.
pub fn servers_of(settings: &UserSettings) -> McpServers {
    let mut servers = McpServers::default();
    let Some(list) = settings
        .sealed
        .as_ref()
        .and_then(|s| s.mcp_servers.as_ref())
    else {
        return servers;
    };
    for s in list {
        let config = match (&s.command, &s.url) {
            (Some(command), _) => ServerConfig::Stdio {
                command: command.clone(),
                args: s.args.clone().unwrap_or_default(),
                env: s
                    .env
                    .iter()
                    .flatten()
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
            },
            (None, Some(url)) => ServerConfig::Http {
                url: url.as_str().to_owned(),
                headers: Default::default(),
            },
            (None, None) => continue,
        };
        servers.0.insert(s.name.clone(), config);
    }
    servers
}
