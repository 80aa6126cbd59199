//! Typed decode + `validate()` (generated code) against the dynamic
//! validator, on the same records.
//!
//! Run: `cargo bench --bench codegen` (release profile). The corpus is every
//! valid record fixture of at most 16 KB of JSON (messages, chats, devices,
//! key wraps, sealed content, stream events), repeated to `RECORDS`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use gelstore::lexicon::chat::gel::assistant::subscribe_reply as events;
use gelstore::lexicon::chat::gel::assistant::{chat, defs, device, key_wrap, message};
use gelstore::lexicon_runtime::Validate;
use gelstore_lexicon::catalog::Catalog;
use gelstore_lexicon::validate;
use serde_json::Value;

const RECORDS: usize = 2_000;
const MAX_FIXTURE_BYTES: usize = 16 * 1024;
const MIN_TIME: Duration = Duration::from_secs(2);

fn typed<T: serde::de::DeserializeOwned + Validate>(json: &[u8]) -> bool {
    serde_json::from_slice::<T>(json)
        .map(|v| v.validate().is_ok())
        .unwrap_or(false)
}

/// Decodes `json` as the generated type its `$type` names and validates it.
fn typed_check(t: &str, json: &[u8]) -> bool {
    match t {
        "chat.gel.assistant.message" => typed::<message::Message>(json),
        "chat.gel.assistant.chat" => typed::<chat::Chat>(json),
        "chat.gel.assistant.device" => typed::<device::Device>(json),
        "chat.gel.assistant.keyWrap" => typed::<key_wrap::KeyWrap>(json),
        "chat.gel.assistant.defs#plainContent" => typed::<defs::PlainContent>(json),
        "chat.gel.assistant.chat#sealedFields" => typed::<chat::SealedFields>(json),
        "chat.gel.assistant.subscribeReply#textDelta" => typed::<events::TextDelta>(json),
        "chat.gel.assistant.subscribeReply#message" => typed::<events::Message>(json),
        "chat.gel.assistant.subscribeReply#toolCall" => typed::<events::ToolCall>(json),
        "chat.gel.assistant.subscribeReply#toolResult" => typed::<events::ToolResult>(json),
        "chat.gel.assistant.subscribeReply#confirmRequired" => {
            typed::<events::ConfirmRequired>(json)
        }
        "chat.gel.assistant.subscribeReply#error" => typed::<events::Error>(json),
        "chat.gel.assistant.subscribeReply#done" => typed::<events::Done>(json),
        other => panic!("no generated type for {other}"),
    }
}

fn dynamic_check(catalog: &Catalog, t: &str, v: &Value) -> bool {
    if t.contains('#') {
        validate::validate_value(catalog, t, v).is_empty()
    } else {
        validate::validate_record(catalog, v, None).is_empty()
    }
}

fn main() {
    let root = env!("CARGO_MANIFEST_DIR");
    let (catalog, findings) = Catalog::load_paths(&[format!("{root}/lexicons")]).expect("lexicons");
    assert!(findings.is_empty(), "{findings:?}");
    let mut fixtures: Vec<(String, Vec<u8>)> = Vec::new();
    let mut paths: Vec<_> = std::fs::read_dir(format!("{root}/fixtures/records/valid"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    for p in paths {
        let bytes = std::fs::read(&p).unwrap();
        if bytes.len() > MAX_FIXTURE_BYTES {
            continue;
        }
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        let t = v["$type"].as_str().unwrap().to_string();
        fixtures.push((t, serde_json::to_vec(&v).unwrap()));
    }
    let corpus: Vec<&(String, Vec<u8>)> = fixtures.iter().cycle().take(RECORDS).collect();
    let bytes: usize = corpus.iter().map(|(_, b)| b.len()).sum();
    for (t, b) in &corpus {
        let v: Value = serde_json::from_slice(b).unwrap();
        assert!(dynamic_check(&catalog, t, &v), "{t}");
        assert!(typed_check(t, b), "{t}");
    }
    println!(
        "corpus: {RECORDS} records ({} distinct fixtures), {:.2} MB of JSON",
        fixtures.len(),
        bytes as f64 / 1e6
    );

    let dynamic = measure(|| {
        for (t, b) in &corpus {
            let v: Value = serde_json::from_slice(b).unwrap();
            black_box(dynamic_check(&catalog, t, &v));
        }
    });
    let typed = measure(|| {
        for (t, b) in &corpus {
            black_box(typed_check(t, b));
        }
    });
    report("dynamic: parse to Value + validate", dynamic, bytes);
    report("typed:   decode to struct + validate()", typed, bytes);
    println!(
        "typed / dynamic: {:.2}x the records per second",
        dynamic.as_secs_f64() / typed.as_secs_f64()
    );
}

/// Runs `f` (one pass over the corpus) until `MIN_TIME` has passed; returns time per pass.
fn measure(mut f: impl FnMut()) -> Duration {
    f();
    let start = Instant::now();
    let mut passes = 0u32;
    while start.elapsed() < MIN_TIME {
        f();
        passes += 1;
    }
    start.elapsed() / passes
}

fn report(what: &str, per_pass: Duration, bytes: usize) {
    let secs = per_pass.as_secs_f64();
    println!(
        "{what:<42} {:>10.0} records/s  {:>7.1} MB/s",
        RECORDS as f64 / secs,
        bytes as f64 / 1e6 / secs
    );
}
