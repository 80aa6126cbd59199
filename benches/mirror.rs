//! The mirror's costs through a push: 100 batches of 200 creates on a
//! mirror of 20,000 records.
//!
//! 1. The expected `data` of each batch: rebuilt from the mirror's entries
//!    per batch (before) versus one tree moved write by write
//!    (`MirrorTree`).
//! 2. Persisting the mirror after each batch: the whole of it rewritten as
//!    a JSON file (`sync.json`, the former layout, kept here as the
//!    baseline: temp file, fsync, rename) versus one engine batch of the
//!    batch's rows and the head in the store (`SyncState::save_keys`, sled,
//!    flushed).
//!
//! `cargo bench --bench mirror`

use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use gelstore::repo::repository::Repository;
use gelstore::sync::SyncState;
use gelstore::sync::mirror::{MirrorTree, RemoteHead, mirror_entries, mirror_tree};

const HELD: u64 = 20_000;
const BATCHES: u64 = 100;
const BATCH: u64 = 200;

fn cid(n: u64) -> gelstore::model::Cid {
    gelstore::model::cid_for_cbor(&n.to_be_bytes())
}

fn key(n: u64) -> String {
    format!("chat.gel.assistant.message/r{n:08}")
}

fn mirror() -> SyncState {
    let mut state = SyncState::default();
    for n in 0..HELD {
        state.pushed.insert(key(n), cid(n));
    }
    state.did = Some("did:plc:aaaaaaaaaaaaaaaaaaaaaaaa".into());
    state.service = Some("https://pds.example.com".into());
    state
}

/// The keys of batch `b`.
fn batch_keys(b: u64) -> impl Iterator<Item = u64> {
    HELD + b * BATCH..HELD + (b + 1) * BATCH
}

/// A new head per batch, as a push moves it.
fn head(b: u64) -> RemoteHead {
    RemoteHead {
        commit: cid(1_000_000 + b).to_string(),
        rev: format!("3lbqzdw5p{b:04}"),
        data: cid(2_000_000 + b).to_string(),
    }
}

fn expected_data() {
    let mut state = mirror();
    let start = Instant::now();
    let mut before = None;
    for b in 0..BATCHES {
        for n in batch_keys(b) {
            state.pushed.insert(key(n), cid(n));
        }
        before = Some(mirror_tree(&mirror_entries(&state)).unwrap().root());
    }
    let rebuild = start.elapsed();

    let mut state = mirror();
    let start = Instant::now();
    let mut tree = MirrorTree::of(&state).unwrap();
    for b in 0..BATCHES {
        for n in batch_keys(b) {
            state.pushed.insert(key(n), cid(n));
            tree.set(&key(n), cid(n)).unwrap();
        }
    }
    let moved = start.elapsed();
    assert_eq!(before, Some(tree.root()));
    println!(
        "expected data over {HELD} mirrored records + {BATCHES} batches of {BATCH} creates: \
         rebuild per batch {:.2} s, one tree moved write by write {:.2} s",
        rebuild.as_secs_f64(),
        moved.as_secs_f64()
    );
}

/// The former persistence, the baseline: the whole state as pretty JSON in
/// `sync.json`, written to a temp file, fsynced, renamed over the old one.
/// Returns the bytes written.
fn save_json(state: &SyncState, dir: &Path) -> usize {
    let bytes = serde_json::to_vec_pretty(state).unwrap();
    let tmp = dir.join("sync.json.tmp");
    let mut f = std::fs::File::create(&tmp).unwrap();
    f.write_all(&bytes).unwrap();
    f.sync_all().unwrap();
    std::fs::rename(&tmp, dir.join("sync.json")).unwrap();
    bytes.len()
}

fn per_batch(total: Duration) -> f64 {
    total.as_secs_f64() * 1000.0 / BATCHES as f64
}

fn persistence() {
    // Before: the whole file per batch.
    let dir = tempfile::tempdir().unwrap();
    let mut state = mirror();
    save_json(&state, dir.path());
    let mut json_bytes = 0;
    let start = Instant::now();
    for b in 0..BATCHES {
        for n in batch_keys(b) {
            state.pushed.insert(key(n), cid(n));
        }
        state.remote = Some(head(b));
        json_bytes += save_json(&state, dir.path());
    }
    let json = start.elapsed();

    // Now: the batch's rows and the head, one engine batch in the store.
    let dir = tempfile::tempdir().unwrap();
    let repo = Repository::init(dir.path()).unwrap();
    let mut state = mirror();
    state.save_all(&repo).unwrap();
    let mut row_bytes = 0;
    let start = Instant::now();
    for b in 0..BATCHES {
        let keys: Vec<String> = batch_keys(b).map(key).collect();
        for (k, n) in keys.iter().zip(batch_keys(b)) {
            let c = cid(n);
            row_bytes += k.len() + c.to_bytes().len();
            state.pushed.insert(k.clone(), c);
        }
        state.remote = Some(head(b));
        state
            .save_keys(&repo, keys.iter().map(String::as_str))
            .unwrap();
    }
    let rows = start.elapsed();
    // The store holds exactly the state (not timed).
    assert_eq!(SyncState::load(dir.path(), &repo).unwrap(), state);

    println!(
        "persisting the mirror after each of {BATCHES} batches of {BATCH} creates on {HELD} records: \
         sync.json rewritten whole {:.2} s ({:.1} ms/batch, {:.1} MB written), \
         one store batch of the changed rows {:.2} s ({:.1} ms/batch, {:.2} MB of rows)",
        json.as_secs_f64(),
        per_batch(json),
        json_bytes as f64 / 1e6,
        rows.as_secs_f64(),
        per_batch(rows),
        row_bytes as f64 / 1e6,
    );
}

fn main() {
    expected_data();
    persistence();
}
