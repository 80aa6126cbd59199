//! The history a model turn is asked with, in a provider-neutral shape the
//! adapters encode: built from the branch's opened records by the agent
//! loop, one [`Turn`] per provider message.

use serde_json::Value;

/// The chat so far, oldest first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Conversation {
    /// The chat's system prompt.
    pub system: Option<String>,
    pub turns: Vec<Turn>,
}

/// One message of the history.
#[derive(Clone, Debug, PartialEq)]
pub enum Turn {
    /// What the user wrote (attachments' extracted text included).
    User { text: String },
    /// One model turn: its text, reasoning and tool calls, in order.
    Assistant { parts: Vec<AssistantPart> },
    /// The results of the previous assistant turn's calls, in call order.
    ToolResults { results: Vec<ToolResultItem> },
}

/// A piece of an assistant turn. `provider_data` is the JSON text the same
/// provider sent with it (a reasoning signature, an item id), kept
/// byte-exact; the loop clears it when the turn goes to another provider.
#[derive(Clone, Debug, PartialEq)]
pub enum AssistantPart {
    Text {
        text: String,
        provider_data: Option<String>,
    },
    Reasoning {
        text: String,
        provider_data: Option<String>,
    },
    ToolCall {
        id: String,
        name: String,
        /// The arguments as JSON text (an object).
        arguments: String,
        provider_data: Option<String>,
    },
}

/// What one call returned.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolResultItem {
    pub call_id: String,
    /// The tool's name (Ollama and Gemini-style formats want it).
    pub name: String,
    pub output: String,
    pub is_error: bool,
}

/// A tool offered to the model.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    /// The name the model calls it by (`mcp_<server>_<tool>`).
    pub name: String,
    pub description: Option<String>,
    /// The JSON Schema of its arguments (an object schema).
    pub input_schema: Value,
}
