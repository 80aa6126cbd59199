//! Model providers: one adapter per wire format, each turning our history
//! into that provider's streaming request and its stream back into the run
//! format the chat core takes (seed 002 events plus `model`,
//! `provider_data` and the turn's end; see `fixtures/streams/README.md`).
//!
//! ```text
//!   Conversation ──encode──▶ HTTP request body (JSON)
//!   HTTP stream ──frames──▶ Decoder::feed ──▶ Output (StreamLine | End)
//! ```
//!
//! The adapters are pure: no I/O, no clock. [`http`] sends the request,
//! maps the HTTP status before the stream, cuts the body into [`Frame`]s
//! (SSE events, or NDJSON lines for Ollama) and feeds the decoder.
//!
//! | format | path | framing |
//! |---|---|---|
//! | [`WireFormat::OpenAiChat`] | `/v1/chat/completions` | SSE, `data: [DONE]` |
//! | [`WireFormat::OpenAiResponses`] | `/v1/responses` | SSE, typed events |
//! | [`WireFormat::Anthropic`] | `/v1/messages` | SSE, typed events |
//! | [`WireFormat::Ollama`] | `/api/chat` | NDJSON |

pub mod anthropic;
pub mod config;
pub mod conversation;
pub mod http;
pub mod ollama;
pub mod openai_chat;
pub mod openai_responses;
mod parts;

pub use config::{ModelSpec, ProviderConfig, SpecError};
pub use conversation::{AssistantPart, Conversation, ToolResultItem, ToolSpec, Turn};

use crate::chat::StreamLine;
use crate::lexicon::chat::gel::assistant::defs::Usage;
use crate::lexicon::chat::gel::assistant::message::MessageStopReason;
use crate::lexicon::chat::gel::assistant::subscribe_reply::ErrorCode;

/// The wire formats gelstore speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WireFormat {
    /// OpenAI Chat Completions; also every OpenAI-compatible server.
    OpenAiChat,
    /// OpenAI Responses.
    OpenAiResponses,
    /// Anthropic Messages.
    Anthropic,
    /// Ollama's native `/api/chat`.
    Ollama,
}

impl WireFormat {
    /// Whether the body is SSE (else NDJSON, one JSON object a line).
    pub fn is_sse(self) -> bool {
        !matches!(self, WireFormat::Ollama)
    }

    /// A fresh decoder for one response of this format.
    pub fn decoder(self) -> Box<dyn Decoder> {
        match self {
            WireFormat::OpenAiChat => Box::new(openai_chat::ChatDecoder::default()),
            WireFormat::OpenAiResponses => Box::new(openai_responses::ResponsesDecoder::default()),
            WireFormat::Anthropic => Box::new(anthropic::MessagesDecoder::default()),
            WireFormat::Ollama => Box::new(ollama::ChatDecoder::default()),
        }
    }

    /// The request path under the base URL.
    pub fn path(self) -> &'static str {
        match self {
            WireFormat::OpenAiChat => "/chat/completions",
            WireFormat::OpenAiResponses => "/responses",
            WireFormat::Anthropic => "/v1/messages",
            WireFormat::Ollama => "/api/chat",
        }
    }

    /// The streaming request body for one model turn.
    pub fn encode(self, request: &TurnRequest<'_>) -> serde_json::Value {
        match self {
            WireFormat::OpenAiChat => openai_chat::encode(request),
            WireFormat::OpenAiResponses => openai_responses::encode(request),
            WireFormat::Anthropic => anthropic::encode(request),
            WireFormat::Ollama => ollama::encode(request),
        }
    }
}

/// What one model turn is asked with.
#[derive(Clone, Debug)]
pub struct TurnRequest<'a> {
    /// The provider's model id (`claude-sonnet-4-5`, `gpt-5` …).
    pub model: &'a str,
    /// The history, already stripped of other providers' `providerData`.
    pub conversation: &'a Conversation,
    /// The tools offered, with their JSON Schemas.
    pub tools: &'a [ToolSpec],
    /// `none|low|medium|high|max`, mapped to the provider's knob where it
    /// has one.
    pub effort: Option<&'a str>,
    /// The most output tokens (required by Anthropic; others may omit it).
    pub max_tokens: u32,
}

/// One unit of a response body: an SSE event (`event` name, `data`), or
/// one NDJSON line (`event` is `None`).
#[derive(Clone, Copy, Debug)]
pub struct Frame<'a> {
    pub event: Option<&'a str>,
    pub data: &'a str,
}

/// What a decoder makes of a frame.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// A run-format line: a seed 002 event, `provider_data` or `model`.
    Line(StreamLine),
    /// The turn ended with this stop reason (the provider's mapped to
    /// ours) and the turn's usage. Nothing follows it.
    End {
        stop_reason: MessageStopReason,
        usage: Option<Usage>,
    },
}

/// A provider failure, with the seed 000 code a UI shows.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ProviderError {
    pub code: ErrorCode,
    /// What happened and what to fix; never holds a key.
    pub message: String,
    /// Whether trying again later is safe and may help (overloaded, 429,
    /// 5xx before any output).
    pub retryable: bool,
    /// Seconds the provider asked to wait (`retry-after`).
    pub retry_after: Option<u64>,
    /// The stream was cut (connection lost, the provider went silent)
    /// rather than refused: the reply ends `interrupted`, not `failed`.
    pub interrupted: bool,
}

impl ProviderError {
    /// A failure with `code` and `message`, not retryable.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ProviderError {
        ProviderError {
            code,
            message: message.into(),
            retryable: false,
            retry_after: None,
            interrupted: false,
        }
    }

    /// The provider sent something that does not follow its format.
    pub fn malformed(what: impl std::fmt::Display) -> ProviderError {
        ProviderError::new(
            ErrorCode::AssistantProvider,
            format!("the provider's stream is malformed: {what}"),
        )
    }
}

/// Turns one response's frames into run-format output. A decoder is used
/// for one response only.
pub trait Decoder: Send {
    /// Takes one frame; pushes what it completes to `out`. An error event
    /// from the provider, or a frame that breaks the format, is an `Err`;
    /// what was pushed before stays valid (the reply keeps it).
    fn feed(&mut self, frame: Frame<'_>, out: &mut Vec<Output>) -> Result<(), ProviderError>;

    /// The body ended. Pushes the turn's [`Output::End`] and returns
    /// [`Finish::Ended`] if the provider said it finished, else
    /// [`Finish::Cut`] (open parts stay open: the reply records a cut).
    fn finish(&mut self, out: &mut Vec<Output>) -> Result<Finish, ProviderError>;
}

/// How a response body ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// The provider finished the turn ([`Output::End`] was pushed).
    Ended,
    /// The body stopped before the provider's end.
    Cut,
}

/// Our stop reasons, as the run format writes them.
pub fn stop_name(stop: &MessageStopReason) -> &str {
    stop.as_str()
}
