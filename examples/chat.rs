//! The chat API an app uses, end to end, on a throwaway data folder:
//!
//! 1. set up this device's keys and the account's repository
//!    ([`gelstore::device::init`], what `gelstore device init` does);
//! 2. open the folder as a [`ChatStore`];
//! 3. create a chat and send a user message (both sealed);
//! 4. run the reply from a recorded model stream (JSON lines, the format
//!    of `fixtures/streams/README.md`), printing each live
//!    [`AssistantEvent`] as it is made — what a client would receive;
//! 5. read the thread back, opened.
//!
//! ```sh
//! cargo run --example chat                      # fixtures/streams/plain_text_small_deltas
//! cargo run --example chat -- path/to/input.jsonl
//! ```

use std::io::BufRead as _;
use std::path::PathBuf;
use std::sync::Arc;

use gelstore::chat::{AssistantEvent, Attempt, ChatStore, NoApproval};
use gelstore::lexicon::chat::gel::assistant::defs::PlainContentPartsItem;
use gelstore::seal::os_rng;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let stream = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("fixtures/streams/plain_text_small_deltas/input.jsonl")
        });

    // A data folder: the repository, the identity key and the device keys.
    // Only one process opens a data folder at a time; another one waits for
    // it (up to GELSTORE_LOCK_WAIT_SECS, 30 s by default).
    let data = tempfile::tempdir()?;
    let device = gelstore::device::init(data.path(), Some("example"), &mut os_rng())?;
    println!("device {} of {}", device.device, device.did);

    let mut store = ChatStore::open(data.path())?;

    // A chat (its title sealed) and a first user message (its text sealed).
    let chat = store.create_chat(Some("Greetings"), None)?;
    let message = store.send(&chat, "Say hello", None, Attempt::FIRST)?;
    println!("chat {chat}, message {message}");

    // The reply: written `pending` at `{message}.r0`, fed line by line,
    // then filled once. No tool needs approval here (`NoApproval`); with
    // `AskFor::tools([...])` the reply would end `waiting` instead.
    let lines = std::io::BufReader::new(std::fs::File::open(&stream)?).lines();
    let (pending, finished) =
        store.run_reply(message, None, Arc::new(NoApproval), lines, |event| {
            print_event(event)
        })?;
    println!("reply {}: {}", pending.key, finished.status.as_str());

    // The thread, opened: each user message with its replies by attempt.
    let thread = store.thread(&chat)?;
    let title = thread.fields.as_ref().and_then(|f| f.title.as_deref());
    println!("\nchat {} ({})", thread.chat, title.unwrap_or("untitled"));
    for &root in &thread.thread.roots {
        let user = &thread.thread.users[root];
        println!(
            "  user {}: {}",
            user.key,
            text(user.record.content.as_ref())
        );
        for reply in thread.thread.replies_of(root) {
            println!(
                "    assistant {} ({}): {}",
                reply.key,
                reply.record.message.status.as_str(),
                text(reply.view.as_ref())
            );
        }
    }
    Ok(())
}

/// One live event, as a client shows it (its JSON form is what
/// `gelstore chat reply` prints and `subscribeReply` carries).
fn print_event(event: &AssistantEvent) {
    match event {
        AssistantEvent::TextDelta { text, .. } => println!("  delta   {text:?}"),
        AssistantEvent::Message { text, .. } => println!("  message {text:?}"),
        other => println!(
            "  event   {}",
            serde_json::to_string(other).unwrap_or_default()
        ),
    }
}

/// The text parts of a message's content, joined.
fn text(content: Option<&gelstore::lexicon::chat::gel::assistant::defs::PlainContent>) -> String {
    let Some(content) = content else {
        return "(no content)".into();
    };
    content
        .parts
        .iter()
        .map(|p| match p {
            PlainContentPartsItem::TextPart(t) => t.text.clone(),
            PlainContentPartsItem::ToolCallPart(c) => format!("[tool call {}]", c.name),
            PlainContentPartsItem::ToolResultPart(r) => format!("[tool result {}]", r.call_id),
            _ => "[…]".into(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}
