//! Runs the recorded model streams in `fixtures/streams/` through
//! `chat::Reply` and compares the finished record (`expected.record.json`:
//! status, stopReason, model, usage, plainContent) and the live events
//! (`expected.events.jsonl`) with the committed expectations. Every case is
//! also checked for the properties that hold whatever the expectations
//! say: the record validates, the stream ends with `done` or
//! `confirm_required`, reasoning and partial arguments never reach the
//! events, every frame validates.
//!
//! `GELSTORE_WRITE_STREAM_FIXTURES=1 cargo test --test chat chat_streams`
//! rewrites the expected files (review the diff before committing).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gelstore::chat::approval::{ApprovalPolicy, AskFor};
use gelstore::chat::events::AssistantEvent;
use gelstore::chat::keys::{Attempt, ReplyKey};
use gelstore::chat::record::{ChatRecord, pending_reply, user_message};
use gelstore::chat::reply::{Finished, Reply};
use gelstore::chat::results::OUTPUT_KEPT;
use gelstore::chat::thread::Thread;
use gelstore::lexicon::chat::gel::assistant::defs::{PlainContent, PlainContentPartsItem};
use gelstore::lexicon::chat::gel::assistant::message::{MessageStatus, MessageStopReason};
use gelstore::lexicon_runtime::{AtUri, BlobRef, Datetime, Validate};
use gelstore::seal::open_blob;
use serde_json::Value;

use crate::support::fixtures;

const USER_KEY: &str = "3lbqzdw5pzk22";

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/streams")
}

fn writing() -> bool {
    std::env::var_os("GELSTORE_WRITE_STREAM_FIXTURES").is_some()
}

fn chat_uri() -> AtUri {
    AtUri::new("at://did:plc:ewvi7nxzyoun6zhxrhs64oiz/chat.gel.assistant.chat/3lbqzcx2ss222")
        .unwrap()
}

fn now() -> Datetime {
    Datetime::new("2025-11-29T19:41:00.000Z").unwrap()
}

fn options(case: &Path) -> Value {
    serde_json::from_str(&fs::read_to_string(case.join("options.json")).unwrap()).unwrap()
}

fn policy(opts: &Value) -> Arc<dyn ApprovalPolicy + Send + Sync> {
    Arc::new(AskFor::from_fixture_options(opts))
}

/// The seed of the fixtures' pending-action ids (a live run draws one).
const FIXTURE_ACTION_SEED: [u8; 16] = [0; 16];
/// The seed of the fixtures' output-blob keys, so their CIDs are fixed.
const FIXTURE_BLOB_SEED: [u8; 32] = [1; 32];

fn run(case: &Path, input: &str, key: ReplyKey) -> Finished {
    let text = fs::read_to_string(case.join(input)).unwrap();
    Reply::new(key, policy(&options(case)))
        .with_action_seed(FIXTURE_ACTION_SEED)
        .with_blob_seed(FIXTURE_BLOB_SEED)
        .run_jsonl(&text)
}

fn events_text(events: &[AssistantEvent]) -> String {
    events
        .iter()
        .map(|e| e.to_json_line() + "\n")
        .collect::<String>()
}

/// Writes `actual` to `name`, or compares with it.
fn expect(case: &Path, name: &str, actual: &str) {
    let path = case.join(name);
    if writing() {
        fs::write(&path, actual).unwrap();
        return;
    }
    let want = fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (write it with GELSTORE_WRITE_STREAM_FIXTURES=1)",
            path.display()
        )
    });
    assert_eq!(actual, want, "{} differs", path.display());
}

/// Properties every finished run has.
fn check_invariants(name: &str, f: &Finished) {
    let r = &f.reply;
    r.content
        .validate()
        .unwrap_or_else(|e| panic!("{name}: content: {e}"));
    let mut m = pending_reply(chat_uri(), now());
    r.fill(&mut m);
    m.validate()
        .unwrap_or_else(|e| panic!("{name}: record: {e}"));
    gelstore::lexicon_runtime::to_dag_cbor(&r.content).unwrap();

    // The stream ends with done, or with confirm_required when waiting.
    let last = f.events.last().expect("events");
    if r.status == MessageStatus::Waiting {
        assert!(
            matches!(last, AssistantEvent::ConfirmRequired { .. }),
            "{name}"
        );
        assert!(
            !f.events
                .iter()
                .any(|e| matches!(e, AssistantEvent::Done { .. }))
        );
    } else {
        assert!(matches!(last, AssistantEvent::Done { .. }), "{name}");
        assert_eq!(
            f.events.iter().filter(|e| e.ends_stream()).count(),
            1,
            "{name}: one done"
        );
    }

    // Private reasoning never reaches the events; the cut calls never do.
    let all = events_text(&f.events);
    for p in &r.content.parts {
        if let PlainContentPartsItem::ReasoningPart(t) = p {
            assert!(
                t.text.len() < 3 || !all.contains(&t.text),
                "{name}: reasoning streamed"
            );
            if let Some(pd) = &t.provider_data {
                assert!(!all.contains(&pd.0), "{name}: provider data streamed");
            }
        }
    }
    for c in &r.cut_calls {
        assert!(
            !f.events.iter().any(
                |e| matches!(e, AssistantEvent::ToolCall { call_id, .. } if *call_id == c.call_id)
            ),
            "{name}: cut call announced"
        );
        let part = &r.content.parts[c.index];
        assert!(
            matches!(part, PlainContentPartsItem::ToolCallPart(p) if p.arguments.is_none() && p.call_id == c.call_id),
            "{name}: cut call stored with arguments"
        );
    }

    // What a delta-aware client ends with equals the record's text parts.
    for (i, p) in r.content.parts.iter().enumerate() {
        if let PlainContentPartsItem::TextPart(t) = p {
            let id = format!("{}/{i}", r.key);
            let mut shown = String::new();
            for e in &f.events {
                match e {
                    AssistantEvent::TextDelta { message_id, text } if *message_id == id => {
                        shown.push_str(text)
                    }
                    AssistantEvent::Message {
                        message_id, text, ..
                    } if *message_id == id => shown = text.clone(),
                    _ => {}
                }
            }
            assert_eq!(shown, t.text, "{name}: client text of part {i}");
        }
    }

    // Every output blob is referenced by one part and holds that part's
    // whole output, of which the part keeps the start.
    let results: Vec<_> = r
        .content
        .parts
        .iter()
        .filter_map(|p| match p {
            PlainContentPartsItem::ToolResultPart(t) => Some(t),
            _ => None,
        })
        .collect();
    let with_blob: Vec<_> = results.iter().filter(|t| t.output_blob.is_some()).collect();
    assert_eq!(
        with_blob.len(),
        r.blobs.len(),
        "{name}: a blob per outputBlob"
    );
    for (part, blob) in with_blob.iter().zip(&r.blobs) {
        let Some(BlobRef::Typed(b)) = &part.output_blob else {
            panic!("{name}: a typed blob ref")
        };
        assert_eq!(b.r#ref.0, blob.seal.cid, "{name}: the blob's CID");
        assert_eq!(b.size as u64, blob.seal.size, "{name}: the blob's size");
        let whole = String::from_utf8(open_blob(&blob.bytes, &blob.seal).unwrap()).unwrap();
        assert!(
            whole.len() > OUTPUT_KEPT,
            "{name}: only long outputs go to blobs"
        );
        assert!(
            part.output.len() <= OUTPUT_KEPT,
            "{name}: the part keeps at most its limit"
        );
        let start = part.output.split("\n[").next().unwrap();
        assert!(whole.starts_with(start), "{name}: the part keeps the start");
    }

    for (seq, e) in f.events.iter().enumerate() {
        e.to_frame(seq as i64)
            .validate()
            .unwrap_or_else(|err| panic!("{name}: frame {seq}: {err}"));
    }
}

fn cases() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() && p.join("input.jsonl").exists())
        .collect();
    out.sort();
    out
}

fn first_key() -> ReplyKey {
    ReplyKey::parse(&format!("{USER_KEY}.r0")).unwrap()
}

fn finished(name: &str) -> Finished {
    run(&dir().join(name), "input.jsonl", first_key())
}

fn text_of(c: &PlainContent, i: usize) -> &str {
    match &c.parts[i] {
        PlainContentPartsItem::TextPart(t) => &t.text,
        PlainContentPartsItem::ReasoningPart(t) => &t.text,
        other => panic!("part {i} is {other:?}"),
    }
}

fn arguments_of(c: &PlainContent, i: usize) -> Option<&str> {
    match &c.parts[i] {
        PlainContentPartsItem::ToolCallPart(t) => t.arguments.as_deref(),
        other => panic!("part {i} is {other:?}"),
    }
}

#[test]
fn every_case_matches_its_expectations() {
    let cases = cases();
    assert!(cases.len() >= 14, "cases: {}", cases.len());
    for case in cases {
        let name = case.file_name().unwrap().to_string_lossy().to_string();
        let f = run(&case, "input.jsonl", first_key());
        check_invariants(&name, &f);
        let record = serde_json::to_string_pretty(&f.reply.summary_json()).unwrap() + "\n";
        expect(&case, "expected.record.json", &record);
        expect(&case, "expected.events.jsonl", &events_text(&f.events));
    }
}

#[test]
fn plain_text_in_small_deltas() {
    let f = finished("plain_text_small_deltas");
    assert_eq!(f.reply.status, MessageStatus::Complete);
    assert_eq!(
        text_of(&f.reply.content, 0),
        "Grüße! Sure — here is a short answer: 42 is the answer 🙂. Ça va?"
    );
    let deltas = f
        .events
        .iter()
        .filter(|e| matches!(e, AssistantEvent::TextDelta { .. }))
        .count();
    assert!(deltas > 40, "{deltas}");
}

#[test]
fn the_end_wins_over_the_deltas() {
    let f = finished("end_replaces_deltas");
    assert_eq!(text_of(&f.reply.content, 0), "Plan: greet politely.");
    assert_eq!(text_of(&f.reply.content, 1), "Hello world");
    assert!(
        f.events
            .iter()
            .any(|e| matches!(e, AssistantEvent::Message { text, .. } if text == "Hello world"))
    );
}

#[test]
fn signature_is_kept_byte_exact() {
    let f = finished("thinking_signature");
    let PlainContentPartsItem::ReasoningPart(r) = &f.reply.content.parts[0] else {
        panic!()
    };
    assert_eq!(
        r.provider_data.as_ref().unwrap().0,
        r#"{"signature": "EqQBCkgIBxABGAIiQL2v+0Zx/==",  "type":"thinking"}"#
    );
}

#[test]
fn tool_arguments_come_from_the_ends() {
    let f = finished("tool_calls_split_arguments");
    let c = &f.reply.content;
    assert_eq!(f.reply.status, MessageStatus::Complete);
    assert_eq!(
        arguments_of(c, 1),
        Some(r#"{"query":"rain in Kyoto \"June\"","limit":10}"#)
    );
    assert_eq!(
        arguments_of(c, 2),
        Some(r#"{"city":"Kyōto","units":"metric","days":[1,2,3]}"#)
    );
    assert_eq!(
        arguments_of(c, 3),
        Some(r#"{"expr":"2**10","precision":1.5,"opts":{"exact":true,"note":null}}"#)
    );
    // text, 3 calls, 3 results, text.
    assert_eq!(c.parts.len(), 8);
    let u = f.reply.usage.as_ref().unwrap();
    assert_eq!((u.input_tokens, u.output_tokens), (Some(280), Some(80)));
}

#[test]
fn a_cut_call_never_ran() {
    let f = finished("cut_before_toolcall_end");
    assert_eq!(f.reply.status, MessageStatus::Interrupted);
    assert_eq!(arguments_of(&f.reply.content, 1), None);
    assert_eq!(f.reply.cut_calls.len(), 1);
    assert!(f.reply.cut_calls[0].partial_len > 0);
    let g = finished("length_stop_open_parts");
    assert_eq!(g.reply.status, MessageStatus::Complete);
    assert_eq!(g.reply.stop_reason, Some(MessageStopReason::Length));
    assert_eq!(text_of(&g.reply.content, 1), "And then the mod");
    assert_eq!(arguments_of(&g.reply.content, 2), None);
}

#[test]
fn stream_errors_fail_and_keep_the_partial_reply() {
    for (name, error) in [
        ("error_delta_before_start", "before its start"),
        ("error_start_twice", "already started"),
        ("error_end_before_start", "before its start"),
        ("error_unknown_index", "unknown content index 5"),
        ("error_wrong_kind", "which is a text part"),
        ("error_bad_tool_arguments", "arguments is not a JSON object"),
        ("error_malformed_line", "line 6"),
    ] {
        let f = finished(name);
        assert_eq!(f.reply.status, MessageStatus::Failed, "{name}");
        let e = f.reply.error.as_ref().expect(name).to_string();
        assert!(e.contains(error), "{name}: {e}");
        assert!(!f.reply.content.parts.is_empty(), "{name}: partial kept");
    }
    let p = finished("provider_error");
    assert_eq!(p.reply.status, MessageStatus::Failed);
    assert_eq!(p.reply.stop_reason, Some(MessageStopReason::Error));
    assert_eq!(text_of(&p.reply.content, 0), "Half an ans");
}

#[test]
fn approval_waits_with_a_pending_action_id_per_call() {
    let f = finished("approval_waiting");
    assert_eq!(f.reply.status, MessageStatus::Waiting);
    assert_eq!(f.reply.waiting, vec!["toolu_11".to_string()]);
    let confirms: Vec<_> = f
        .events
        .iter()
        .filter_map(|e| match e {
            AssistantEvent::ConfirmRequired { id, call_id, .. } => {
                Some((id.clone(), call_id.clone()))
            }
            _ => None,
        })
        .collect();
    let [(id, call)] = &confirms[..] else {
        panic!("{confirms:?}")
    };
    assert_eq!(call, "toolu_11");
    // Issued per action, kept with the call, and nothing a provider or the
    // server could derive from what it sees: another run's differs.
    assert!(id.starts_with("pa-") && id.len() == 29, "{id}");
    let stored = f.reply.content.parts.iter().find_map(|p| match p {
        PlainContentPartsItem::ToolCallPart(c) => c.pending_id.clone(),
        _ => None,
    });
    assert_eq!(stored.as_ref(), Some(id));
    let case = dir().join("approval_waiting");
    let text = fs::read_to_string(case.join("input.jsonl")).unwrap();
    let live = Reply::new(first_key(), policy(&options(&case))).run_jsonl(&text);
    let live_id = live.events.iter().find_map(|e| match e {
        AssistantEvent::ConfirmRequired { id, .. } => Some(id.clone()),
        _ => None,
    });
    assert_ne!(live_id.as_ref(), Some(id));
}

#[test]
fn twelve_attempts_are_ordered_by_number() {
    let case = dir().join("twelve_attempts");
    let user = ReplyKey::parse(&format!("{USER_KEY}.r0"))
        .unwrap()
        .message();
    let mut records = vec![ChatRecord::new(
        USER_KEY,
        user_message(chat_uri(), None, Attempt::FIRST, now()),
        None,
    )];
    let mut events = Vec::new();
    for n in 0..12 {
        let key = ReplyKey::new(user, Attempt::new(n).unwrap());
        let f = run(&case, &format!("r{n}.input.jsonl"), key);
        check_invariants(&key.to_string(), &f);
        events.extend(f.events);
        let mut m = pending_reply(chat_uri(), now());
        f.reply.fill(&mut m);
        records.push(ChatRecord::new(key.to_string(), m, Some(f.reply.content)));
    }
    // Given in key-string order (r10 and r11 before r2), as a store lists them.
    records.sort_by(|a, b| a.key.cmp(&b.key));
    assert_eq!(records[3].key, format!("{USER_KEY}.r10"));
    let t = Thread::build(records);
    assert_eq!(t.roots.len(), 1);
    let order: Vec<Value> = t
        .replies_of(t.roots[0])
        .map(|r| {
            serde_json::json!({
                "key": r.key.to_string(),
                "status": r.record.message.status.as_str(),
                "text": text_of(r.view.as_ref().unwrap(), 0),
            })
        })
        .collect();
    let keys: Vec<String> = order
        .iter()
        .map(|v| v["key"].as_str().unwrap().to_string())
        .collect();
    let want: Vec<String> = (0..12).map(|n| format!("{USER_KEY}.r{n}")).collect();
    assert_eq!(keys, want);
    expect(
        &case,
        "expected.thread.json",
        &(serde_json::to_string_pretty(&order).unwrap() + "\n"),
    );
    expect(&case, "expected.events.jsonl", &events_text(&events));
}

/// The fuzz target's seeds (`fuzz/seeds/event_stream`, including inputs
/// that once failed it) keep the same properties.
#[test]
fn fuzz_seeds_hold_the_invariants() {
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/event_stream");
    let mut n = 0;
    for entry in fs::read_dir(seeds).unwrap() {
        let path = entry.unwrap().path();
        let text = String::from_utf8_lossy(&fs::read(&path).unwrap()).into_owned();
        let f = Reply::new(
            first_key(),
            Arc::new(AskFor::tools(["delete_files", "abc", "del"])),
        )
        .run_jsonl(&text);
        check_invariants(&path.display().to_string(), &f);
        n += 1;
    }
    assert!(n >= 17, "{n} seeds");
}

/// Every frame `subscribeReply` would send for a case, decoded from its
/// bytes with the generated types, is the CLI's JSON line for the same
/// event (`expected.events.jsonl`, which `chat reply` prints), field for
/// field: arguments and bodies the data model cannot hold included.
#[test]
fn frames_decode_to_the_cli_events() {
    use gelstore::lexicon::chat::gel::assistant::subscribe_reply::SubscribeReplyMessage;
    for case in cases() {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let f = run(&case, "input.jsonl", first_key());
        let cli: Vec<Value> = fs::read_to_string(case.join("expected.events.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(f.events.len(), cli.len(), "{name}");
        for (i, (event, want)) in f.events.iter().zip(&cli).enumerate() {
            let seq = i as u64 + 1;
            let bytes = event.frame_bytes(seq).unwrap();
            let (header, body) = fixtures::split_frame(&bytes);
            let header = gelstore::model::ipld_to_json(&header).unwrap();
            assert_eq!(header["op"], 1, "{name} #{seq}");
            let t = header["t"].as_str().unwrap();
            let message = SubscribeReplyMessage::from_frame(t, body)
                .unwrap_or_else(|e| panic!("{name} #{seq} {t}: {e}"));
            message.validate().unwrap();
            let (got_seq, decoded) = AssistantEvent::from_frame(&message).unwrap();
            assert_eq!(got_seq, seq as i64, "{name}");
            assert_eq!(
                serde_json::to_value(&decoded).unwrap(),
                *want,
                "{name} #{seq}"
            );
        }
    }
}
