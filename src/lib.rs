//! gelstore: AI-assistant chats as user-owned, end-to-end sealed AT Protocol records.

pub mod agent;
pub mod atproto;
pub mod chat;
pub mod cli;
pub mod device;
pub mod identity;
pub use gelstore_types::lexicon;
pub use gelstore_types::lexicon_runtime;
pub mod lexnet;
pub mod local_repo;
mod net;
pub use gelstore_crypto as crypto;
pub use gelstore_model as model;
pub mod provider;
pub use gelstore_repo as repo;
pub use gelstore_seal as seal;
pub mod server;
pub use gelstore_store as store;
pub mod sync;
