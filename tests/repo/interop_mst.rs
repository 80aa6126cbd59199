//! atproto interop fixtures (CC0) for the MST: `fixtures/interop/mst/*` and
//! `fixtures/interop/firehose/commit-proof-fixtures.json`. See
//! `fixtures/interop/INVENTORY.md` for the harness these follow.

use std::collections::BTreeSet;

use crate::support::fixtures;
use fixtures::{interop_cases, interop_path, str_field};

use gelstore::model::{Cid, parse_cid};
use gelstore::repo::blocks::{BlockSource, MemoryBlocks};
use gelstore::repo::mst::{Mst, RecordOp, check_key, common_prefix_len, key_height};
use serde_json::Value;

fn strings(case: &Value, key: &str) -> Vec<String> {
    case.get(key)
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("no array {key:?} in {case}"))
        .iter()
        .map(|v| v.as_str().expect("string item").to_owned())
        .collect()
}

fn cid(s: &str) -> Cid {
    parse_cid(s).unwrap_or_else(|e| panic!("bad CID {s}: {e}"))
}

#[test]
fn key_heights() {
    let cases = interop_cases("mst/key_heights.json");
    assert_eq!(cases.len(), 9, "fixture case count changed");
    for case in &cases {
        let key = str_field(case, "key");
        let height = case["height"].as_u64().expect("height");
        assert_eq!(u64::from(key_height(key.as_bytes())), height, "{key:?}");
    }
}

#[test]
fn example_keys_have_the_height_in_their_name() {
    let path = interop_path("mst/example_keys.txt");
    let text = std::fs::read_to_string(&path).unwrap();
    // Split on '\n' only, skip empty and '#' lines, never trim.
    let keys: Vec<&str> = text
        .split('\n')
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect();
    assert_eq!(keys.len(), 156, "fixture case count changed");
    for key in keys {
        let digit = key.as_bytes()[1];
        assert!(digit.is_ascii_digit(), "{key:?}");
        assert_eq!(key_height(key.as_bytes()), digit - b'0', "{key:?}");
        check_key(key).unwrap_or_else(|e| panic!("{key:?} rejected: {e}"));
    }
}

#[test]
fn common_prefix() {
    let cases = interop_cases("mst/common_prefix.json");
    assert_eq!(cases.len(), 13, "fixture case count changed");
    for case in &cases {
        let (left, right) = (str_field(case, "left"), str_field(case, "right"));
        let len = case["len"].as_u64().expect("len") as usize;
        assert_eq!(
            common_prefix_len(left.as_bytes(), right.as_bytes()),
            len,
            "{left:?} / {right:?}"
        );
    }
}

/// All orderings of `items`.
fn permutations<T: Clone>(items: &[T]) -> Vec<Vec<T>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    let mut out = Vec::new();
    for i in 0..items.len() {
        let mut rest = items.to_vec();
        let first = rest.remove(i);
        for mut tail in permutations(&rest) {
            tail.insert(0, first.clone());
            out.push(tail);
        }
    }
    out
}

/// Undoes `ops` in every order on the tree at `root` loaded from `blocks`
/// alone; each must give `expected`.
fn check_inversion(name: &str, blocks: &MemoryBlocks, root: Cid, ops: &[RecordOp], expected: Cid) {
    for order in permutations(ops) {
        let mut partial = Mst::load(blocks, root).unwrap_or_else(|e| panic!("{name}: {e}"));
        for op in &order {
            partial
                .invert(op)
                .unwrap_or_else(|e| panic!("{name}: inverting {op:?} (order {order:?}): {e}"));
        }
        assert_eq!(partial.root(), expected, "{name}: order {order:?}");
    }
}

#[test]
fn commit_proofs() {
    let cases = interop_cases("firehose/commit-proof-fixtures.json");
    assert_eq!(cases.len(), 6, "fixture case count changed");
    for case in &cases {
        let name = str_field(case, "comment");
        let leaf = cid(str_field(case, "leafValue"));
        let keys = strings(case, "keys");
        let adds = strings(case, "adds");
        let dels = strings(case, "dels");
        let before = cid(str_field(case, "rootBeforeCommit"));
        let after = cid(str_field(case, "rootAfterCommit"));
        let in_proof: BTreeSet<Cid> = strings(case, "blocksInProof")
            .iter()
            .map(|s| cid(s))
            .collect();

        // Build the tree before the commit, by inserts and in one pass.
        let mut tree = Mst::new(MemoryBlocks::new());
        for key in &keys {
            tree.insert(key, leaf).unwrap();
        }
        assert_eq!(tree.root(), before, "{name}: rootBeforeCommit");
        let built = Mst::from_entries(MemoryBlocks::new(), keys.iter().map(|k| (k, leaf))).unwrap();
        assert_eq!(built.root(), before, "{name}: rootBeforeCommit (bulk)");
        let old = tree.clone();

        // Apply the commit.
        let mut ops = Vec::new();
        for key in &adds {
            let op = RecordOp::create(key, leaf);
            tree.apply(&op).unwrap();
            ops.push(op);
        }
        for key in &dels {
            let op = RecordOp::delete(key, leaf);
            tree.apply(&op).unwrap();
            ops.push(op);
        }
        assert_eq!(tree.root(), after, "{name}: rootAfterCommit");

        // The diff finds exactly the commit's operations.
        let mut sorted_ops = ops.clone();
        sorted_ops.sort();
        assert_eq!(old.diff(&tree).unwrap().ops, sorted_ops, "{name}: diff");

        // Covering proofs over the tree after the commit.
        let mut full = MemoryBlocks::new();
        tree.write_new_blocks(&mut full).unwrap();
        let mut proof = MemoryBlocks::new();
        for op in &ops {
            tree.covering_proof(&op.key, &mut proof).unwrap();
        }
        let ours: BTreeSet<Cid> = proof.cids().copied().collect();
        let missing: Vec<_> = in_proof.difference(&ours).collect();
        assert!(missing.is_empty(), "{name}: proof lacks {missing:?}");
        assert_eq!(ours, in_proof, "{name}: proof differs from the reference's");

        // From the proof blocks alone, undoing the ops in every order gives
        // the root before the commit.
        check_inversion(name, &proof, after, &ops, before);

        // The same from exactly the reference's proof blocks.
        let reference: MemoryBlocks = in_proof
            .iter()
            .map(|c| (*c, full.get(c).unwrap().expect("proof block in the tree")))
            .collect();
        check_inversion(name, &reference, after, &ops, before);
    }
}
