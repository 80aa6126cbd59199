//! `chat::ChatStore`: chats, messages and replies sealed into a data
//! folder's repository, with the reply lifecycle's guarantees (see docs/chat.md).

use std::path::Path;
use std::sync::{Arc, Barrier, Mutex};

use gelstore::chat::store::{ContentState, LineRun};
use gelstore::chat::{AskFor, Attempt, ChatStore, ChatStoreError, NoApproval, Reply, ReplyKey};
use gelstore::lexicon::chat::gel::assistant::defs::PlainContentPartsItem;
use gelstore::lexicon::chat::gel::assistant::message::MessageStatus;
use gelstore::seal::os_rng;

fn fixture(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/streams")
            .join(name)
            .join("input.jsonl"),
    )
    .unwrap()
}

fn store() -> (tempfile::TempDir, ChatStore) {
    let dir = tempfile::tempdir().unwrap();
    gelstore::device::init(dir.path(), Some("test"), &mut os_rng()).unwrap();
    let store = ChatStore::open(dir.path()).unwrap();
    (dir, store)
}

fn run(input: &str, key: ReplyKey) -> gelstore::chat::Finished {
    Reply::new(key, Arc::new(NoApproval)).run_jsonl(input)
}

#[test]
fn open_without_a_device_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let err = ChatStore::open(dir.path()).unwrap_err();
    assert!(err.to_string().contains("gelstore device init"), "{err}");
}

#[test]
fn send_reply_finish_once_and_read_back() {
    let (dir, mut s) = store();
    let chat = s.create_chat(Some("Greetings"), None).unwrap();
    let msg = s.send(&chat, "Say hello", None, Attempt::FIRST).unwrap();
    let pending = s.start_reply(msg, None).unwrap();
    assert_eq!(pending.key.to_string(), format!("{msg}.r0"));

    // The key is taken now: never overwritten.
    let again = s.start_reply(msg, Some(Attempt::FIRST)).unwrap_err();
    assert!(
        matches!(again, ChatStoreError::ReplyTaken { .. }),
        "{again}"
    );

    // Pending: no content.
    let t = s.thread(&chat).unwrap();
    assert_eq!(t.states[&pending.key.to_string()], ContentState::Empty);

    let finished = run(&fixture("plain_text_small_deltas"), pending.key);
    s.finish_reply(&pending, &finished.reply).unwrap();
    let twice = s.finish_reply(&pending, &finished.reply).unwrap_err();
    assert!(
        matches!(twice, ChatStoreError::ReplyAlreadyFinished { .. }),
        "{twice}"
    );

    // Read back after a restart.
    drop(s);
    let s = ChatStore::open(dir.path()).unwrap();
    let t = s.thread(&chat).unwrap();
    assert_eq!(
        t.fields.as_ref().and_then(|f| f.title.as_deref()),
        Some("Greetings")
    );
    assert_eq!(t.thread.roots.len(), 1);
    let user = &t.thread.users[t.thread.roots[0]];
    assert_eq!(user.key, msg);
    let reply = t.thread.replies_of(t.thread.roots[0]).next().unwrap();
    assert_eq!(reply.record.message.status, MessageStatus::Complete);
    let Some(PlainContentPartsItem::TextPart(text)) = reply.view.as_ref().unwrap().parts.first()
    else {
        panic!("no text part");
    };
    assert!(text.text.starts_with("Grüße!"));
    s.device().repo().check().unwrap();
}

#[test]
fn regeneration_and_continuation() {
    let (_dir, mut s) = store();
    let chat = s.create_chat(None, None).unwrap();
    let msg = s.send(&chat, "one", None, Attempt::FIRST).unwrap();
    for a in 0..3 {
        let p = s.start_reply(msg, Some(Attempt::new(a).unwrap())).unwrap();
        let f = run(&fixture("plain_text_small_deltas"), p.key);
        s.finish_reply(&p, &f.reply).unwrap();
    }
    let parent = ReplyKey::new(msg, Attempt::new(2).unwrap());
    let next = s.send(&chat, "two", Some(parent), Attempt::FIRST).unwrap();
    // A parent from nowhere is refused.
    let other = s.create_chat(None, None).unwrap();
    let err = s
        .send(&other, "x", Some(parent), Attempt::FIRST)
        .unwrap_err();
    assert!(matches!(err, ChatStoreError::NoParent { .. }), "{err}");
    let t = s.thread(&chat).unwrap();
    let replies: Vec<String> = t
        .thread
        .replies_of(t.thread.roots[0])
        .map(|r| r.key.to_string())
        .collect();
    assert_eq!(
        replies,
        vec![
            format!("{msg}.r0"),
            format!("{msg}.r1"),
            format!("{msg}.r2")
        ]
    );
    let r2 = t.thread.replies_of(t.thread.roots[0]).nth(2).unwrap();
    assert_eq!(t.thread.users[r2.children[0]].key, next);
}

#[test]
fn line_run_matches_run_jsonl() {
    let key = ReplyKey::parse("3lbqzdw5pzk22.r0").unwrap();
    for case in [
        "plain_text_small_deltas",
        "approval_waiting",
        "error_malformed_line",
    ] {
        let input = fixture(case);
        let whole = Reply::new(key, Arc::new(AskFor::tools(["delete_files"]))).run_jsonl(&input);
        let mut lr = LineRun::new(Reply::new(key, Arc::new(AskFor::tools(["delete_files"]))));
        let mut events = Vec::new();
        for line in input.lines() {
            lr.feed(line, &mut events);
            if lr.stopped() {
                break;
            }
        }
        let mut end = lr.end();
        events.append(&mut end.events);
        assert_eq!(events, whole.events, "{case}");
        assert_eq!(end.reply, whole.reply, "{case}");
    }
}

/// Many threads sharing one open store start the same `{key}.rN`: exactly
/// one succeeds, the others get `ReplyTaken`.
#[test]
fn racing_starts_one_wins() {
    let (_dir, mut s) = store();
    let chat = s.create_chat(None, None).unwrap();
    let msg = s.send(&chat, "race", None, Attempt::FIRST).unwrap();
    let s = Arc::new(Mutex::new(s));
    let n = 8;
    let barrier = Arc::new(Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let s = Arc::clone(&s);
            let b = Arc::clone(&barrier);
            std::thread::spawn(move || {
                b.wait();
                s.lock()
                    .unwrap()
                    .start_reply(msg, Some(Attempt::new(1).unwrap()))
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let won = results.iter().filter(|r| r.is_ok()).count();
    let taken = results
        .iter()
        .filter(|r| matches!(r, Err(ChatStoreError::ReplyTaken { .. })))
        .count();
    assert_eq!((won, taken), (1, n - 1));
}
