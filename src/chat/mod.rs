//! The chat core (DESIGN §3–§5): pure logic over the generated
//! `chat.gel.assistant` types, with no storage and no sealing.
//!
//! | module | job |
//! |---|---|
//! | [`keys`] | message keys: a TID, and `{tid}.r{attempt}` for replies; ordering by attempt |
//! | [`input`] | the model's stream (seed 002 `AssistantMessageEvent`) and the JSON-lines run format |
//! | [`assemble`] | one model turn's events → `plainContent` parts, with the lexicon's limits |
//! | [`approval`] | approval policy, answer checks, settled calls repeated |
//! | [`record`] | `ChatRecord` (a message record with opened content) and record constructors |

pub mod approval;
pub mod assemble;
pub mod input;
pub mod keys;
pub mod record;

pub use approval::{ApprovalError, ApprovalPolicy, AskFor, AskIf, NoApproval};
pub use assemble::{Assembler, StreamError};
pub use input::{AssistantMessageEvent, StreamLine, ToolRun};
pub use keys::{Attempt, KeyError, MessageKey, ReplyKey};
pub use record::ChatRecord;
