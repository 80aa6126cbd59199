//! The chat core (DESIGN §3–§5): pure logic over the generated
//! `chat.gel.assistant` types, with no storage and no sealing.
//!
//! | module | job |
//! |---|---|
//! | [`keys`] | message keys: a TID, and `{tid}.r{attempt}` for replies; ordering by attempt |
//! | [`input`] | the model's stream (seed 002 `AssistantMessageEvent`) and the JSON-lines run format |
//! | [`assemble`] | one model turn's events → `plainContent` parts, with the lexicon's limits |

pub mod assemble;
pub mod input;
pub mod keys;

pub use assemble::{Assembler, StreamError};
pub use input::{AssistantMessageEvent, StreamLine, ToolRun};
pub use keys::{Attempt, KeyError, MessageKey, ReplyKey};
