//! Pushing chat messages to a real PDS: batched sync (`applyWrites`, ≤ 200
//! writes per commit) against one `com.atproto.repo.createRecord` call per
//! record, in the same run against the same PDS.
//!
//! Run: `cargo bench --bench sync` (release profile). Needs Node 20+ and
//! npm: the reference PDS in tests/pds is started (and installed on first
//! use) by tests/support/pds.rs, on loopback.
//!
//! The records: a device's store with one chat and 500 exchanges (a sealed
//! user message and a sealed finished reply each: 1,000
//! `chat.gel.assistant.message` records), plus the chat and the device's
//! own records. Both ways push the same records, in key order:
//!
//! - `batched`: `sync::sync_with_progress` (what `gelstore sync` runs) into
//!   the test account; the push is timed through the progress hooks, from
//!   the announced total to the last acknowledged write, and the whole sync
//!   (login, pulls, push, verification) is shown on its own row;
//! - `one-by-one`: `createRecord` per record over one keep-alive HTTP
//!   client, into a second, fresh account on the same PDS.
//!
//! Login is outside both push timings.

#[allow(dead_code)] // the tests\' support module; a bench uses a part
#[path = "../tests/support/launch.rs"]
mod launch;
#[allow(dead_code)] // the tests\' support module; a bench uses a part
#[path = "../tests/support/pds.rs"]
mod pds;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use gelstore::chat::approval::NoApproval;
use gelstore::chat::keys::Attempt;
use gelstore::chat::reply::Reply;
use gelstore::chat::store::ChatStore;
use gelstore::repo::repository::Repository;
use gelstore::sync::{self, Progress, SyncOptions};
use serde_json::{Value, json};

use pds::Pds;

const EXCHANGES: usize = 500;

/// A data folder with one chat and `EXCHANGES` message/reply pairs.
fn store_with_messages(dir: &Path) {
    gelstore::device::init(dir, None, &mut gelstore::seal::os_rng()).unwrap();
    let mut store = ChatStore::open(dir).unwrap();
    let chat = store.create_chat(Some("bench"), None).unwrap();
    let run = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/streams/plain_text_small_deltas/input.jsonl"),
    )
    .unwrap();
    let mut parent = None;
    for i in 0..EXCHANGES {
        let text = format!("message {i}: tell me about the weather");
        let msg = store.send(&chat, &text, parent, Attempt::FIRST).unwrap();
        let pending = store.start_reply(msg, None).unwrap();
        let finished = Reply::new(pending.key, Arc::new(NoApproval)).run_jsonl(&run);
        store.finish_reply(&pending, &finished.reply).unwrap();
        parent = Some(pending.key);
    }
}

/// The store's `chat.gel.assistant.*` records as (collection, rkey, value).
fn records(repo: &Repository) -> Vec<(String, String, Value)> {
    repo.mst()
        .entries_with_prefix(sync::COLLECTION_PREFIX)
        .map(|e| {
            let (key, _) = e.unwrap();
            let (collection, rkey) = key.split_once('/').unwrap();
            let value = repo.get(collection, rkey).unwrap().unwrap().value;
            (collection.to_owned(), rkey.to_owned(), value)
        })
        .collect()
}

/// Times the push through the progress hooks.
#[derive(Default)]
struct PushClock {
    /// (start, total, acknowledged so far, end)
    state: Mutex<(Option<Instant>, u64, u64, Option<Instant>)>,
}

impl Progress for PushClock {
    fn push_started(&self, total: u64) {
        *self.state.lock().unwrap() = (Some(Instant::now()), total, 0, None);
    }

    fn pushed(&self, done: u64) {
        let mut s = self.state.lock().unwrap();
        s.2 += done;
        if s.2 >= s.1 {
            s.3 = Some(Instant::now());
        }
    }
}

impl PushClock {
    fn push_secs(&self) -> f64 {
        let s = self.state.lock().unwrap();
        let (Some(start), Some(end)) = (s.0, s.3) else {
            panic!("the push was not timed: {:?} of {} writes", s.2, s.1);
        };
        (end - start).as_secs_f64()
    }
}

fn rate(n: usize, secs: f64) -> f64 {
    n as f64 / secs
}

fn main() {
    let pds = Pds::start();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let started = Instant::now();
    store_with_messages(d);
    // Read, then closed: the sync opens the store itself.
    let records = records(&Repository::open(d).unwrap());
    let messages = records
        .iter()
        .filter(|(c, _, _)| c == "chat.gel.assistant.message")
        .count();
    println!(
        "{} records ({messages} messages) written locally in {:.1?}; PDS on {}",
        records.len(),
        started.elapsed(),
        pds.service
    );

    // Batched: `gelstore sync` itself; the push is timed by its progress
    // hooks, from the announced total to the last acknowledged write.
    let clock = Arc::new(PushClock::default());
    let opts = SyncOptions {
        service: pds.service.clone(),
        identifier: pds.handle.clone(),
        password: pds.password.clone(),
        plc: pds.plc.clone(),
    };
    let t = Instant::now();
    let report = sync::sync_with_progress(d, &opts, clock.clone()).unwrap();
    let whole = t.elapsed().as_secs_f64();
    assert_eq!(report.push.created, records.len());
    assert!(report.pull.data_matches);
    let batched = clock.push_secs();
    println!(
        "{:<11} {} records in {} applyWrites calls: {:.2} s, {:.0} records/s",
        "batched",
        report.push.created,
        report.push.batches,
        batched,
        rate(report.push.created, batched)
    );
    println!(
        "{:<11} login, push, getRepo ({} bytes) and verification: {:.2} s, {:.0} records/s",
        "whole sync",
        report.pull.car_bytes,
        whole,
        rate(report.push.created, whole)
    );

    // One createRecord per record, into a fresh account.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let http = reqwest::Client::new();
    let post = |method: &str, body: Value, token: Option<&str>| {
        let mut req = http
            .post(format!("{}/xrpc/{method}", pds.service))
            .json(&body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        rt.block_on(async {
            let resp = req.send().await.unwrap();
            let status = resp.status().as_u16();
            let json: Value = resp.json().await.unwrap();
            assert_eq!(status, 200, "{method}: {json}");
            json
        })
    };
    let bob = post(
        "com.atproto.server.createAccount",
        json!({"handle": "bench-bob.test", "email": "bob@example.com", "password": "bob-pass"}),
        None,
    );
    let bob_did = bob["did"].as_str().unwrap().to_owned();
    let token = bob["accessJwt"].as_str().unwrap().to_owned();
    let t = Instant::now();
    for (collection, rkey, value) in &records {
        post(
            "com.atproto.repo.createRecord",
            json!({"repo": bob_did, "collection": collection, "rkey": rkey, "record": value}),
            Some(&token),
        );
    }
    let single = t.elapsed().as_secs_f64();
    println!(
        "{:<11} {} records in {} createRecord calls: {:.2} s, {:.0} records/s",
        "one-by-one",
        records.len(),
        records.len(),
        single,
        rate(records.len(), single)
    );
    println!(
        "batched is {:.1}x the records/s of one createRecord per record",
        single / batched
    );
}
