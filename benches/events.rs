//! The cost of the `#commit` event stream (issue 8) on sled, fsync per
//! commit as in real use:
//!
//! 1. commit throughput with events (every `apply` also builds and stores
//!    its event in the same batch): single-record creates into a growing
//!    repository, then mixed commits (update + create + delete);
//! 2. what the events are: frame size, rows kept under retention;
//! 3. the reading side: replaying the log from cursor 0, and decoding plus
//!    verifying every event inductively (what a consumer does).
//!
//! Run: `cargo bench --bench events`. `GELSTORE_BENCH_COMMITS` sets the
//! number of single-record commits (default 3,000);
//! `GELSTORE_BENCH_MEMORY=1` runs on the memory engine (no fsync). The "without events"
//! side by side in `benches/RESULTS.md` is phase 1 run on the commit before the
//! event stream (same code, same machine, same run of the build).

use std::sync::Arc;
use std::time::Instant;

use gelstore::crypto::{KeyAlgorithm, PublicKey, SigningKey};
use gelstore::repo::events::{Frame, decode_frame, verify_commit};
use gelstore::repo::repository::{Repository, Write};
use gelstore::repo::tid::Tid;
use gelstore::store::MemoryEngine;

#[path = "common/records.rs"]
mod records;
use records::message;

const COLL: &str = "chat.gel.assistant.message";
const MIXED: usize = 500;

fn main() {
    let commits: usize = std::env::var("GELSTORE_BENCH_COMMITS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3_000);
    let dir = tempfile::tempdir().expect("temp dir");
    // GELSTORE_BENCH_MEMORY=1: the memory engine, no fsync, so the CPU cost
    // of a commit (and of its event) is not hidden by the disk's.
    let memory = std::env::var("GELSTORE_BENCH_MEMORY").is_ok_and(|v| v == "1");
    let mut repo = if memory {
        let key = SigningKey::from_bytes(KeyAlgorithm::K256, &[7; 32]).expect("key");
        Repository::init_engine(Arc::new(MemoryEngine::new()), key).expect("init")
    } else {
        Repository::init(dir.path().join("a")).expect("init")
    };
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let base = Tid::parse("3lbqzdw5pzk22").unwrap().as_u64();
    let rkey = |i: usize| format!("{}.r0", Tid::from_u64(base + (i as u64) * 1024));
    println!(
        "events bench: {}, retention {}",
        if memory {
            "memory engine"
        } else {
            "disk engine (default), fsync per commit"
        },
        repo.event_retention()
    );

    let started = Instant::now();
    for i in 0..commits {
        repo.apply(&[Write::create(COLL, rkey(i), message(i, &mut rng))])
            .expect("apply");
    }
    let t = started.elapsed().as_secs_f64();
    println!(
        "create, 1 record per commit:  {commits:>6} commits in {t:>6.2} s = {:>7.0} commits/s ({:.3} ms/commit)",
        commits as f64 / t,
        t * 1e3 / commits as f64
    );
    let started = Instant::now();
    for k in 0..MIXED {
        let i = commits + k;
        repo.apply(&[
            Write::update(COLL, rkey(k * 2), message(k, &mut rng)),
            Write::create(COLL, rkey(i), message(i, &mut rng)),
            Write::delete(COLL, rkey(k * 2 + 1)),
        ])
        .expect("apply");
    }
    let t = started.elapsed().as_secs_f64();
    println!(
        "update+create+delete commits: {MIXED:>6} commits in {t:>6.2} s = {:>7.0} commits/s ({:.3} ms/commit)",
        MIXED as f64 / t,
        t * 1e3 / MIXED as f64
    );

    let started = Instant::now();
    let events: Vec<_> = repo
        .events_since(Some(0))
        .expect("cursor")
        .map(|e| e.expect("event"))
        .collect();
    let t = started.elapsed().as_secs_f64();
    let bytes: usize = events.iter().map(|e| e.frame.len()).sum();
    println!(
        "replay from cursor 0:         {:>6} events in {t:>6.2} s = {:>7.0} events/s; frames {:.0} bytes on average, {:.1} MB kept",
        events.len(),
        events.len() as f64 / t,
        bytes as f64 / events.len() as f64,
        bytes as f64 / 1e6
    );
    let key = PublicKey::from_did_key(repo.did()).expect("did:key");
    let started = Instant::now();
    let mut data = None;
    for e in &events {
        let Ok(Frame::Commit(c)) = decode_frame(&e.frame) else {
            panic!("event {} is not a #commit", e.seq)
        };
        if data.is_none() {
            data = c.prev_data;
        }
        data = Some(verify_commit(&c, data, &key).expect("verifies").data);
    }
    let t = started.elapsed().as_secs_f64();
    println!(
        "decode + verify inductively:  {:>6} events in {t:>6.2} s = {:>7.0} events/s",
        events.len(),
        events.len() as f64 / t
    );
    assert_eq!(data, Some(repo.head().data));
}
