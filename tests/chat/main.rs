//! Chats: the chat store and its races, replies from recorded streams,
//! approvals, the assistant loop with a mock provider and real MCP servers,
//! the provider wire corpus, `gelstore chat`.

#[allow(dead_code, unused_imports, unused_macros)] // each binary uses a part of the shared support
#[path = "../support/mod.rs"]
mod support;

mod assistant_loop;
mod chat_approvals;
mod chat_race;
mod chat_store;
mod chat_streams;
mod cli_chat;
mod provider_corpus;
