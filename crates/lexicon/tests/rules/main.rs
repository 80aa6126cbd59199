//! The lexicon toolkit against the atproto interop fixtures and its own
//! rule tables: one binary, one module per subject.

mod interop_lexicon;
mod interop_records;
mod interop_syntax;
mod lexicon_diff;
mod lint_rules;
mod validate_rules;
