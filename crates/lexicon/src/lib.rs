//! Lexicon v1 for any atproto project: parse → resolve → lint → validate →
//! diff. It knows the Lexicon language and the atproto string formats and
//! nothing of gelstore, so a CI pipeline or another implementation can use
//! it alone (the Rust emitter on top is `gelstore-codegen`).
//!
//! - [`syntax`]: strict checks for the atproto string formats (did, handle,
//!   nsid, at-uri, cid, datetime, record-key, tid, …).
//! - [`schema`]: the typed model of a Lexicon document and its parser.
//! - [`catalog`]: documents by NSID, with references resolved.
//! - [`lint`], [`validate`], [`diff`]: rules over a catalog, data checked
//!   against it, and changes classed as breaking or safe, each reporting
//!   [`Finding`]s.
//!
//! ```
//! use gelstore_lexicon::catalog::Catalog;
//! use gelstore_lexicon::{syntax, validate};
//!
//! assert!(syntax::check_nsid("chat.gel.assistant.message").is_ok());
//! assert!(syntax::check_did("did:plc:").is_err());
//!
//! let mut catalog = Catalog::new();
//! catalog.add("note.json", &serde_json::json!({
//!     "lexicon": 1,
//!     "id": "com.example.note",
//!     "defs": {"main": {
//!         "type": "record",
//!         "key": "tid",
//!         "record": {"type": "object", "required": ["text"],
//!                    "properties": {"text": {"type": "string", "maxLength": 10}}}
//!     }}
//! }));
//! let note = serde_json::json!({"$type": "com.example.note", "text": "far too long"});
//! let findings = validate::validate_record(&catalog, &note, Some("3kabcdefghi22"));
//! assert_eq!(findings.len(), 1, "{findings:?}");
//! ```

pub mod catalog;
pub mod diff;
pub mod finding;
pub mod lint;
pub mod schema;
pub mod syntax;
pub mod validate;

pub use finding::Finding;
