//! The chat core (see docs/chat.md): pure logic over the generated
//! `chat.gel.assistant` types, with no storage and no sealing.
//!
//! | module | job |
//! |---|---|
//! | [`keys`] | message keys: a TID, and `{tid}.r{attempt}` for replies; ordering by attempt |
//! | [`input`] | the model's stream (seed 002 `AssistantMessageEvent`) and the JSON-lines run format |
//! | [`assemble`] | one model turn's events → `plainContent` parts, with the lexicon's limits |
//! | [`events`] | the live stream (seed 000 `AssistantEvent`) and its `subscribeReply` frames |
//! | [`reply`] | one reply's run: events in, events out, finished record fields |
//! | [`results`] | a tool call's result as a record part and as its events, one conversion for live and replay |
//! | [`approval`] | approval policy, answer checks, settled calls repeated |
//! | [`run`] | a reply's run fed line by line as input arrives; the reply to an answer begun |
//! | [`approval_index`] | the data folder's index of replies waiting for an answer (a cache rebuilt from records) |
//! | [`record`] | `ChatRecord` (a message record with opened content) and record constructors |
//! | [`thread`] | the thread tree readers show |
//! | [`tool_output`] | a call's whole output read back, from its sealed blob when the record could not hold it |

pub mod approval;
pub mod approval_index;
pub mod assemble;
pub mod events;
pub mod finished;
pub mod input;
pub mod keys;
pub mod record;
pub mod replay;
pub mod reply;
pub mod results;
pub mod run;
pub mod settings;
pub mod store;
pub mod thread;
pub mod tool_output;

pub use approval::{ApprovalError, ApprovalPolicy, AskFor, AskIf, NoApproval};
pub use assemble::{Assembler, StreamError};
pub use events::AssistantEvent;
pub use input::{AssistantMessageEvent, Observed, StreamLine, ToolRun};
pub use keys::{Attempt, KeyError, MessageKey, ReplyKey};
pub use record::ChatRecord;
pub use reply::{End, Finished, FinishedReply, Reply, ReplyError};
pub use run::{LineRun, begin_reply, settle_answer};
pub use store::{ChatStore, ChatStoreError, PendingReply, ReplyStart, ReplyTo};
pub use thread::Thread;
