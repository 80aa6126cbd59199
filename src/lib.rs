//! gelstore: AI-assistant chats as user-owned, end-to-end sealed AT Protocol records.

pub mod cli;
pub mod model;
pub mod repo;
pub mod store;
