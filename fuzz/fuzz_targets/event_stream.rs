//! Arbitrary bytes as a recorded model run (JSON lines, the
//! `fixtures/streams` format) through `chat::Reply`. Must never panic, and
//! whatever the input, the finished reply is a valid record: its
//! `plainContent` and the filled message validate and encode as DAG-CBOR,
//! stored tool arguments are JSON objects, cut calls have no arguments and
//! were never announced, every live event validates as a `subscribeReply`
//! frame and survives a JSON round trip, and the stream ends with exactly
//! one `done` (or with `confirm_required` when the reply waits).

#![no_main]

use std::sync::Arc;

use gelstore::chat::approval::AskIf;
use gelstore::chat::assemble::FinishedCall;
use gelstore::chat::events::AssistantEvent;
use gelstore::chat::keys::ReplyKey;
use gelstore::chat::record::pending_reply;
use gelstore::chat::reply::Reply;
use gelstore::lexicon::chat::gel::assistant::defs::PlainContentPartsItem;
use gelstore::lexicon::chat::gel::assistant::message::MessageStatus;
use gelstore::lexicon_runtime::{self as support, AtUri, Datetime, Validate};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let key = ReplyKey::parse("3lbqzdw5pzk22.r7").unwrap();
    // Calls to tools whose name has an odd length wait for approval.
    let policy = AskIf(|c: &FinishedCall| c.name.len() % 2 == 1);
    let f = Reply::new(key, Arc::new(policy)).run_jsonl(&text);
    let r = &f.reply;

    r.content.validate().expect("content validates");
    support::to_dag_cbor(&r.content).expect("content encodes");
    let mut m = pending_reply(
        AtUri::new("at://did:plc:ewvi7nxzyoun6zhxrhs64oiz/chat.gel.assistant.chat/3lbqzcx2ss222")
            .unwrap(),
        Datetime::new("2025-11-29T19:41:00.000Z").unwrap(),
    );
    r.fill(&mut m);
    m.validate().expect("record validates");
    support::to_dag_cbor(&m).expect("record encodes");

    for p in &r.content.parts {
        if let PlainContentPartsItem::ToolCallPart(c) = p
            && let Some(a) = &c.arguments
        {
            let v: serde_json::Value = serde_json::from_str(a).expect("arguments are JSON");
            assert!(v.is_object(), "arguments are an object");
        }
    }
    for c in &r.cut_calls {
        assert!(matches!(
            &r.content.parts[c.index],
            PlainContentPartsItem::ToolCallPart(p) if p.arguments.is_none()
        ));
        assert!(!f.events.iter().any(
            |e| matches!(e, AssistantEvent::ToolCall { call_id, .. } if *call_id == c.call_id)
        ));
    }

    for (seq, e) in f.events.iter().enumerate() {
        e.to_frame(seq as i64)
            .validate()
            .expect("frame validates");
        let back: AssistantEvent = serde_json::from_str(&e.to_json_line()).expect("event reads");
        assert_eq!(&back, e);
    }
    let ends = f.events.iter().filter(|e| matches!(e, AssistantEvent::Done { .. })).count();
    if r.status == MessageStatus::Waiting {
        assert_eq!(ends, 0);
        assert!(!r.waiting.is_empty());
        assert!(matches!(f.events.last(), Some(AssistantEvent::ConfirmRequired { .. })));
    } else {
        assert_eq!(ends, 1);
        assert!(matches!(f.events.last(), Some(AssistantEvent::Done { .. })));
    }
});
