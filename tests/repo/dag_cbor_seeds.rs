//! Runs the fuzz seeds (`fuzz/seeds/dag_cbor_decode/`) through the same
//! property as the fuzz target: decoding never panics, and an accepted input
//! re-encodes to the same bytes and survives the atproto JSON round trip.
//!
//! Set `DAG_CBOR_CORPUS=<dir>` to also run a fuzz corpus (for example
//! `fuzz/corpus/dag_cbor_decode`) and print how many inputs were accepted.

use std::path::{Path, PathBuf};

use gelstore::model::{decode_dag_cbor, encode_dag_cbor, ipld_to_json, json_to_ipld};

/// Checks the property on one input; returns whether it was accepted.
fn check(name: &str, data: &[u8]) -> bool {
    let Ok(value) = decode_dag_cbor(data) else {
        return false;
    };
    assert_eq!(
        encode_dag_cbor(&value).unwrap(),
        data,
        "{name}: re-encoding"
    );
    let json = ipld_to_json(&value).unwrap_or_else(|e| panic!("{name}: to JSON: {e}"));
    let back = json_to_ipld(&json).unwrap_or_else(|e| panic!("{name}: from JSON: {e}"));
    assert_eq!(back, value, "{name}: JSON round trip");
    true
}

fn run_dir(dir: &Path) -> (usize, usize) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .collect();
    entries.sort();
    let mut accepted = 0;
    for path in &entries {
        let data = std::fs::read(path).unwrap();
        if check(&path.display().to_string(), &data) {
            accepted += 1;
        }
    }
    (accepted, entries.len())
}

#[test]
fn fuzz_seeds_hold_the_round_trip_property() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/dag_cbor_decode");
    let (accepted, total) = run_dir(&dir);
    assert!(total > 0, "no seeds in {}", dir.display());
    // The seeds are all valid blocks.
    assert_eq!(accepted, total, "some seeds were rejected");
}

#[test]
fn fuzz_corpus_from_env() {
    let Some(dir) = std::env::var_os("DAG_CBOR_CORPUS") else {
        return;
    };
    let (accepted, total) = run_dir(Path::new(&dir));
    println!("{accepted} of {total} corpus inputs accepted");
}
