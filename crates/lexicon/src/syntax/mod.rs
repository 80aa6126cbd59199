//! Syntax checks for the atproto string formats a lexicon can name in
//! `"format"`. Each check is strict (the full spec rule, not a loose regex)
//! and never panics on any input.
//!
//! The interop fixtures' `*_parse_invalid` cases are rejected here too:
//! callers get one answer, not a "syntax ok but semantically wrong" pair.

mod aturi;
mod cid;
mod datetime;
mod did;
mod handle;
mod language;
mod nsid;
mod recordkey;
mod text;
mod tid;
mod uri;

pub use aturi::check_at_uri;
pub use cid::check_cid;
pub use datetime::check_datetime;
pub use did::check_did;
pub use handle::check_handle;
pub use language::check_language;
pub use nsid::check_nsid;
pub use recordkey::check_record_key;
pub use tid::check_tid;
pub use uri::check_uri;

use std::fmt;

/// A string format named by the Lexicon spec (`"format": "..."`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    AtIdentifier,
    AtUri,
    Cid,
    Datetime,
    Did,
    Handle,
    Language,
    Nsid,
    RecordKey,
    Tid,
    Uri,
}

impl Format {
    /// Every format, in the order the spec lists them.
    pub const ALL: [Format; 11] = [
        Format::AtIdentifier,
        Format::AtUri,
        Format::Cid,
        Format::Datetime,
        Format::Did,
        Format::Handle,
        Format::Nsid,
        Format::Tid,
        Format::RecordKey,
        Format::Uri,
        Format::Language,
    ];

    /// The format for a lexicon `format` name, or `None` for a name the spec does not define.
    pub fn from_name(name: &str) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The name as written in a lexicon.
    pub fn name(self) -> &'static str {
        match self {
            Format::AtIdentifier => "at-identifier",
            Format::AtUri => "at-uri",
            Format::Cid => "cid",
            Format::Datetime => "datetime",
            Format::Did => "did",
            Format::Handle => "handle",
            Format::Language => "language",
            Format::Nsid => "nsid",
            Format::RecordKey => "record-key",
            Format::Tid => "tid",
            Format::Uri => "uri",
        }
    }

    /// Checks `value` against this format.
    pub fn check(self, value: &str) -> Result<(), SyntaxError> {
        match self {
            Format::AtIdentifier => check_at_identifier(value),
            Format::AtUri => check_at_uri(value),
            Format::Cid => check_cid(value),
            Format::Datetime => check_datetime(value),
            Format::Did => check_did(value),
            Format::Handle => check_handle(value),
            Format::Language => check_language(value),
            Format::Nsid => check_nsid(value),
            Format::RecordKey => check_record_key(value),
            Format::Tid => check_tid(value),
            Format::Uri => check_uri(value),
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a string is not a valid value of a format. `reason` is written for a
/// person ("segment 2 starts with a digit"), without repeating the value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a valid {format}: {reason}")]
pub struct SyntaxError {
    pub format: Format,
    pub reason: String,
}

impl SyntaxError {
    pub(crate) fn new(format: Format, reason: impl Into<String>) -> Self {
        SyntaxError {
            format,
            reason: reason.into(),
        }
    }
}

/// An at-identifier is a handle or a DID.
pub fn check_at_identifier(value: &str) -> Result<(), SyntaxError> {
    let result = if value.starts_with("did:") {
        check_did(value)
    } else {
        check_handle(value)
    };
    result.map_err(|e| SyntaxError::new(Format::AtIdentifier, e.to_string()))
}
