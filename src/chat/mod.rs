//! The chat core (DESIGN §3–§5): pure logic over the generated
//! `chat.gel.assistant` types, with no storage and no sealing.
//!
//! | module | job |
//! |---|---|
//! | [`keys`] | message keys: a TID, and `{tid}.r{attempt}` for replies; ordering by attempt |

pub mod keys;

pub use keys::{Attempt, KeyError, MessageKey, ReplyKey};
