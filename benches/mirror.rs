//! The expected-`data` computation of a push: 100 batches of 200 creates
//! on a mirror of 20,000 records, rebuilt from `sync.json`'s entries per
//! batch (before) versus one tree moved write by write (`MirrorTree`).
//!
//! `cargo bench --bench mirror`

use std::time::Instant;

use gelstore::sync::SyncState;
use gelstore::sync::mirror::{MirrorTree, mirror_entries, mirror_tree};

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
        state.pushed.insert(key(n), cid(n).to_string());
    }
    state
}

fn main() {
    let mut state = mirror();
    let start = Instant::now();
    let mut before = None;
    for b in 0..BATCHES {
        for n in HELD + b * BATCH..HELD + (b + 1) * BATCH {
            state.pushed.insert(key(n), cid(n).to_string());
        }
        before = Some(
            mirror_tree(&mirror_entries(&state).unwrap())
                .unwrap()
                .root(),
        );
    }
    let rebuild = start.elapsed();

    let mut state = mirror();
    let start = Instant::now();
    let mut tree = MirrorTree::of(&state).unwrap();
    for b in 0..BATCHES {
        for n in HELD + b * BATCH..HELD + (b + 1) * BATCH {
            state.pushed.insert(key(n), cid(n).to_string());
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
