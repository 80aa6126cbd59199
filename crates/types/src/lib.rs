//! The `chat.gel.assistant` lexicons as Rust types, and the runtime that
//! generated lexicon code stands on.
//!
//! - [`lexicon`]: one module per lexicon of the project's `lexicons/`
//!   folder, written by `gelstore lex gen` and checked fresh by the test
//!   suite (do not edit; `chat` is re-exported at the root).
//! - [`catalog`]: the lexicon files themselves, compiled in, as the
//!   [`Catalog`](gelstore_lexicon::catalog::Catalog) a repository validates
//!   these records against ([`lexicons`]).
//! - [`lexicon_runtime`]: hand-written: the data-model newtypes, the
//!   compiled checks and the serde forms every generated type uses. Code
//!   generated for other lexicons in another crate uses it too
//!   (`lex gen --support gelstore_types::lexicon_runtime`).
//!
//! ```
//! use gelstore_types::chat::gel::assistant::chat::{Chat, NSID};
//! use gelstore_types::lexicon_runtime::Validate;
//!
//! assert_eq!(NSID, "chat.gel.assistant.chat");
//! let chat: Chat = serde_json::from_value(serde_json::json!({
//!     "$type": NSID,
//!     "createdAt": "2026-12-03T12:00:00.000Z",
//! }))
//! .unwrap();
//! chat.validate().unwrap();
//! ```

pub mod catalog;
pub mod lexicon;
pub mod lexicon_runtime;

pub use catalog::lexicons;
pub use lexicon::chat;
