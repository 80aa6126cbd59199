//! `chat::ChatStore`: chats, messages and replies sealed into a data
//! folder's repository, with the reply lifecycle's guarantees (see docs/chat.md).

use std::path::Path;
use std::sync::{Arc, Barrier, Mutex};

use gelstore::chat::run::LineRun;
use gelstore::chat::store::ContentState;
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
        // One seed for both, so their pending-action ids agree.
        let reply =
            || Reply::new(key, Arc::new(AskFor::tools(["delete_files"]))).with_action_seed([7; 16]);
        let whole = reply().run_jsonl(&input);
        let mut lr = LineRun::new(reply());
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

/// Rewrites message `key` as a PDS (or anyone with the account password)
/// would: its JSON edited, written back without any chat key. `None`
/// deletes it.
fn pds_rewrites(s: &mut ChatStore, key: &str, edit: impl FnOnce(&mut serde_json::Value)) {
    use gelstore::repo::repository::Write;
    let mut value = s
        .device()
        .repo()
        .get("chat.gel.assistant.message", key)
        .unwrap()
        .map(|e| e.value)
        .unwrap_or_else(|| serde_json::json!({}));
    edit(&mut value);
    s.repo_mut()
        .apply(&[Write::Update {
            collection: "chat.gel.assistant.message".into(),
            rkey: key.into(),
            value,
            swap: None,
        }])
        .unwrap();
    s.refresh().unwrap();
}

fn pds_creates(s: &mut ChatStore, key: &str, value: serde_json::Value) {
    use gelstore::repo::repository::Write;
    s.repo_mut()
        .apply(&[Write::create("chat.gel.assistant.message", key, value)])
        .unwrap();
    s.refresh().unwrap();
}

#[test]
fn a_pending_reply_carries_an_authenticator_and_forged_ones_are_tampered() {
    let (_dir, mut s) = store();
    let chat = s.create_chat(None, None).unwrap();
    let msg = s.send(&chat, "hi", None, Attempt::FIRST).unwrap();
    let pending = s.start_reply(msg, None).unwrap();
    let key = pending.key.to_string();
    let stored = s
        .device()
        .repo()
        .get("chat.gel.assistant.message", &key)
        .unwrap()
        .unwrap()
        .value;
    assert!(stored.get("authenticator").is_some(), "{stored}");
    assert!(stored.get("content").is_none(), "{stored}");
    assert_eq!(s.content_state(&key).unwrap(), ContentState::Empty);
    s.pending_reply(&pending.key).unwrap();

    // Injected model and usage on the real pending reply: the
    // authenticator no longer opens, and nothing may generate for it.
    pds_rewrites(&mut s, &key, |v| {
        v["model"] = serde_json::json!({"provider": "evil", "id": "evil"});
        v["usage"] = serde_json::json!({"inputTokens": 1, "outputTokens": 1});
    });
    let state = s.content_state(&key).unwrap();
    assert!(matches!(state, ContentState::Unreadable(_)), "{state:?}");
    let err = s.pending_reply(&pending.key).unwrap_err();
    assert!(
        matches!(err, ChatStoreError::UnauthenticatedReply { .. }),
        "{err}"
    );

    // A pending reply made up from clear fields alone (what any client
    // could write before): tampered, never run.
    let other = s.send(&chat, "second", None, Attempt::FIRST).unwrap();
    let forged = format!("{other}.r0");
    let did = s.device().account_did().to_string();
    pds_creates(
        &mut s,
        &forged,
        serde_json::json!({
            "$type": "chat.gel.assistant.message",
            "chat": format!("at://{did}/chat.gel.assistant.chat/{chat}"),
            "role": "assistant", "status": "pending",
            "createdAt": "2026-01-01T00:00:00.000Z",
        }),
    );
    assert_eq!(
        s.content_state(&forged).unwrap(),
        ContentState::Unauthenticated
    );
    let err = s
        .pending_reply(&ReplyKey::parse(&forged).unwrap())
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("not an authenticated pending reply"),
        "{err}"
    );
    let t = s.thread(&chat).unwrap();
    assert_eq!(t.states[&forged], ContentState::Unauthenticated);
}

#[test]
fn a_finished_reply_cut_back_to_content_less_is_tampered() {
    let (_dir, mut s) = store();
    let chat = s.create_chat(None, None).unwrap();
    let msg = s.send(&chat, "hi", None, Attempt::FIRST).unwrap();
    let pending = s.start_reply(msg, None).unwrap();
    let finished = run(&fixture("plain_text_small_deltas"), pending.key);
    s.finish_reply(&pending, &finished.reply).unwrap();
    let key = pending.key.to_string();
    let done = s
        .device()
        .repo()
        .get("chat.gel.assistant.message", &key)
        .unwrap()
        .unwrap()
        .value;
    assert!(done.get("authenticator").is_none(), "{done}");
    assert_eq!(s.content_state(&key).unwrap(), ContentState::Open);

    // Content deleted: shown as tampered, not empty.
    pds_rewrites(&mut s, &key, |v| {
        v.as_object_mut().unwrap().remove("content");
    });
    assert_eq!(s.content_state(&key).unwrap(), ContentState::Missing);
    // Turned into a content-less pending reply: still tampered, and not a
    // request any host runs.
    pds_rewrites(&mut s, &key, |v| {
        let m = v.as_object_mut().unwrap();
        for k in ["model", "usage", "stopReason"] {
            m.remove(k);
        }
        m.insert("status".into(), "pending".into());
    });
    assert_eq!(
        s.content_state(&key).unwrap(),
        ContentState::Unauthenticated
    );
    assert!(matches!(
        s.pending_reply(&pending.key).unwrap_err(),
        ChatStoreError::UnauthenticatedReply { .. }
    ));
    // Given the content's envelope as its authenticator: does not open.
    pds_rewrites(&mut s, &key, |v| {
        v["authenticator"] = done["content"].clone();
    });
    assert!(matches!(
        s.content_state(&key).unwrap(),
        ContentState::Unreadable(_)
    ));
}

#[test]
fn a_user_message_asked_for_in_one_commit_gets_an_authenticated_reply() {
    let (_dir, mut s) = store();
    let chat = s.create_chat(None, None).unwrap();
    let msg = s
        .send(&chat, "Delete my drafts", None, Attempt::FIRST)
        .unwrap();
    let policy = Arc::new(AskFor::tools(["delete_files"]));
    let (pending, finished) = s
        .run_reply(
            msg,
            None,
            policy,
            fixture("approval_waiting")
                .lines()
                .map(|l| Ok(l.to_string())),
            |_| {},
        )
        .unwrap();
    assert!(!finished.waiting.is_empty());
    let decisions: Vec<_> = finished
        .waiting
        .iter()
        .map(|id| {
            serde_json::from_value(serde_json::json!({
                "$type": "chat.gel.assistant.defs#toolApprovalPart",
                "callId": id, "decision": "approved"
            }))
            .unwrap()
        })
        .collect();
    let (_, asked) = s
        .approve_and_ask(&pending.key.to_string(), &decisions)
        .unwrap();
    assert_eq!(
        s.content_state(&asked.key.to_string()).unwrap(),
        ContentState::Empty
    );
}

/// The replay that authentication cannot catch: a finished reply deleted
/// and its saved pending version put back (authentic: a device wrote it).
/// The folder remembers the key was finished, from its own finish and from
/// one it only saw in the records, across a restart, and refuses to run it.
#[test]
fn a_finished_reply_put_back_as_its_pending_version_is_never_run_again() {
    use gelstore::repo::repository::Write;
    let (dir, mut s) = store();
    let chat = s.create_chat(None, None).unwrap();
    let delete = |s: &mut ChatStore, key: &str| {
        s.repo_mut()
            .apply(&[Write::Delete {
                collection: "chat.gel.assistant.message".into(),
                rkey: key.into(),
                swap: None,
            }])
            .unwrap();
        s.refresh().unwrap();
    };
    let pending_value = |s: &ChatStore, key: &str| {
        s.device()
            .repo()
            .get("chat.gel.assistant.message", key)
            .unwrap()
            .unwrap()
            .value
    };

    // Finished here.
    let msg = s
        .send(&chat, "Delete my drafts", None, Attempt::FIRST)
        .unwrap();
    let pending = s.start_reply(msg, None).unwrap();
    let saved = pending_value(&s, &pending.key.to_string());
    let finished = run(&fixture("plain_text_small_deltas"), pending.key);
    s.finish_reply(&pending, &finished.reply).unwrap();
    delete(&mut s, &pending.key.to_string());
    pds_creates(&mut s, &pending.key.to_string(), saved);
    let err = s.pending_reply(&pending.key).unwrap_err();
    assert!(matches!(err, ChatStoreError::ReplayedReply { .. }), "{err}");

    // Finished by another writer (as a sync would land it), then deleted
    // and put back in one go, seen only after a restart.
    let msg2 = s
        .send(&chat, "And the old ones", None, Attempt::FIRST)
        .unwrap();
    let pending2 = s.start_reply(msg2, None).unwrap();
    let key2 = pending2.key.to_string();
    let saved2 = pending_value(&s, &key2);
    s.pending_reply(&pending2.key).unwrap();
    pds_rewrites(&mut s, &key2, |v| v["status"] = "complete".into());
    drop(s);
    let mut s = ChatStore::open(dir.path()).unwrap();
    delete(&mut s, &key2);
    pds_creates(&mut s, &key2, saved2);
    let err = s.pending_reply(&pending2.key).unwrap_err();
    assert!(matches!(err, ChatStoreError::ReplayedReply { .. }), "{err}");
    // A fresh pending reply of the next attempt runs as before.
    let next = s.start_reply(msg2, Some(Attempt::new(1).unwrap())).unwrap();
    s.pending_reply(&next.key).unwrap();
}
