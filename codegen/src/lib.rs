//! The gelstore lexicon compiler: a [`gelstore_lexicon`] catalog → Rust types
//! whose `validate` is the lexicon's constraints compiled ([`emit`]).
//!
//! Parsing, resolving, lint, validation and diff are `gelstore-lexicon`'s;
//! they are re-exported here under the names this crate has always had, so
//! a project that uses the compiler needs one dependency.

pub mod emit;

pub use gelstore_lexicon::{Finding, catalog, diff, finding, lint, schema, syntax, validate};
