//! The gelstore lexicon compiler: parse → resolve → lint → validate → emit.
//!
//! This crate knows Lexicon v1 and the atproto string formats and nothing of
//! gelstore itself, so any atproto project can use it in CI.

pub mod catalog;
pub mod diff;
pub mod emit;
pub mod finding;
pub mod lint;
pub mod schema;
pub mod syntax;
pub mod validate;

pub use finding::Finding;
