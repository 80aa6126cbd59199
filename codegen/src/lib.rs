//! The gelstore lexicon compiler: a [`gelstore_lexicon`] catalog → Rust types
//! whose `validate` is the lexicon's constraints compiled ([`emit`]).
//!
//! Parsing, resolving, lint, validation and diff are `gelstore-lexicon`'s;
//! this crate only writes code.

pub mod emit;
