//! `gelstore serve`: accounts and sessions, the XRPC methods against
//! standard npm clients, blobs, limits and bad input, PLC, sync through it,
//! the assistant's live stream, and the chat page in headless Chromium.

#[allow(dead_code, unused_imports, unused_macros)] // each binary uses a part of the shared support
#[path = "../support/mod.rs"]
mod support;

mod serve_account;
mod serve_assistant;
mod serve_bad_input;
mod serve_blobs;
mod serve_chat;
mod serve_clients;
mod serve_inputs;
mod serve_limits;
mod serve_plc;
mod serve_sessions;
mod serve_sync;
mod web_app_browser;
