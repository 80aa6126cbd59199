//! Differential tests against the reference TypeScript implementation
//! (`@atproto/repo`, pinned in `tests/reference/package.json`), driven
//! through `tests/reference/repo-ref.mjs`:
//!
//! - (a) random record sets and random edit sequences give the same MST
//!   root CIDs, after every batch of changes;
//! - (b) their `verifyRepoCar` accepts our CAR exports (and their
//!   `verifyProofs` our record proofs), listing the same records;
//! - (c) we verify and import CARs (and verify record proofs) they produced, and agree on
//!   every record CID and on the MST root.
//!
//! Needs Node (20+) and npm. The first run installs the harness with
//! `npm ci` into `tests/reference/node_modules` (the npm registry only).

use crate::support::reference_harness::repo_ref as reference;

use crate::support::fixtures;

use std::collections::BTreeMap;

use gelstore::crypto::{KeyAlgorithm, SigningKey};
use gelstore::model::{Cid, cid_for_cbor, parse_cid, record_cid};
use gelstore::repo::blocks::MemoryBlocks;
use gelstore::repo::export::export_repo_to_vec;
use gelstore::repo::mst::Mst;
use gelstore::repo::proof::{verify_record_proof, write_record_proof};
use gelstore::repo::repository::{ImportOptions, Repository};
use gelstore::repo::tid::Tid;
use gelstore::repo::verify::{SignatureCheck, SignatureStatus, VerifyOptions, verify_repo_car};
use serde_json::{Value, json};

use fixtures::{Rng, build_repo, random_records};

fn cid(value: &Value) -> Cid {
    parse_cid(value.as_str().unwrap()).unwrap()
}

fn record_list(value: &Value) -> BTreeMap<String, Cid> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|pair| (pair[0].as_str().unwrap().to_owned(), cid(&pair[1])))
        .collect()
}

fn value_cid(rng: &mut Rng) -> Cid {
    cid_for_cbor(&rng.next().to_be_bytes())
}

// --- (a) MST roots -----------------------------------------------------

/// Inserts `n` keys, then makes `n` random edits (create, update, delete),
/// then deletes everything; roots are compared after every batch.
fn mst_scenario(seed: u64, n: usize) -> (Vec<Value>, Vec<Cid>) {
    let mut rng = Rng(seed);
    let mut ops = Vec::new();
    let mut ours = Vec::new();
    let mut tree = Mst::new(MemoryBlocks::new());
    let mut map: BTreeMap<String, Cid> = BTreeMap::new();
    let mut checkpoint =
        |ops: &mut Vec<Value>, tree: &Mst<MemoryBlocks>, map: &BTreeMap<String, Cid>| {
            ops.push(json!(["root"]));
            let rebuilt = Mst::from_entries(MemoryBlocks::new(), map.iter().map(|(k, v)| (k, *v)));
            assert_eq!(tree.root(), rebuilt.unwrap().root(), "incremental vs bulk");
            ours.push(tree.root());
        };
    checkpoint(&mut ops, &tree, &map);
    let batch = (n / 10).max(1);
    while map.len() < n {
        let key = rng.path();
        let value = value_cid(&mut rng);
        tree.insert(&key, value).unwrap();
        map.insert(key.clone(), value);
        ops.push(json!(["put", key, value.to_string()]));
        if map.len().is_multiple_of(batch) {
            checkpoint(&mut ops, &tree, &map);
        }
    }
    for i in 0..n {
        let existing: Option<String> = if map.is_empty() {
            None
        } else {
            map.keys().nth(rng.below(map.len())).cloned()
        };
        match (rng.below(10), existing) {
            (0..=3, _) | (_, None) => {
                let key = rng.path();
                let value = value_cid(&mut rng);
                tree.insert(&key, value).unwrap();
                map.insert(key.clone(), value);
                ops.push(json!(["put", key, value.to_string()]));
            }
            (4..=6, Some(key)) => {
                let value = value_cid(&mut rng);
                tree.insert(&key, value).unwrap();
                map.insert(key.clone(), value);
                ops.push(json!(["put", key, value.to_string()]));
            }
            (_, Some(key)) => {
                tree.delete(&key).unwrap();
                map.remove(&key);
                ops.push(json!(["del", key]));
            }
        }
        if i % 20 == 19 {
            checkpoint(&mut ops, &tree, &map);
        }
    }
    checkpoint(&mut ops, &tree, &map);
    let mut keys: Vec<String> = map.keys().cloned().collect();
    for i in (1..keys.len()).rev() {
        keys.swap(i, rng.below(i + 1));
    }
    for (i, key) in keys.iter().enumerate() {
        tree.delete(key).unwrap();
        map.remove(key);
        ops.push(json!(["del", key]));
        if i % batch == batch - 1 {
            checkpoint(&mut ops, &tree, &map);
        }
    }
    checkpoint(&mut ops, &tree, &map);
    (ops, ours)
}

#[test]
fn mst_roots_match_reference() {
    let mut total_keys = 0;
    let mut total_roots = 0;
    for (seed, n) in [(1, 200), (2, 300), (3, 500), (4, 800), (5, 1500)] {
        let (ops, ours) = mst_scenario(seed, n);
        let theirs = reference(&["mst-root"], Some(&json!({ "ops": ops })));
        let theirs: Vec<Cid> = theirs["roots"]
            .as_array()
            .unwrap()
            .iter()
            .map(cid)
            .collect();
        assert_eq!(theirs.len(), ours.len());
        for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            assert_eq!(a, b, "seed {seed}: root {i} of {} differs", ours.len());
        }
        assert_eq!(
            ours.last().unwrap().to_string(),
            "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm"
        );
        total_keys += n;
        total_roots += ours.len();
    }
    eprintln!("MST: {total_keys} keys inserted, {total_roots} roots compared, all equal");
}

// --- (b) they verify ours -----------------------------------------------

#[test]
fn reference_accepts_our_exports_and_proofs() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        (21, 0, KeyAlgorithm::K256, false),
        (22, 1, KeyAlgorithm::P256, true),
        (23, 150, KeyAlgorithm::K256, true),
        (24, 600, KeyAlgorithm::P256, false),
        (25, 1200, KeyAlgorithm::K256, true),
    ];
    for (seed, n, alg, did_is_key) in cases {
        let key = SigningKey::from_bytes(alg, &[seed as u8; 32]).unwrap();
        let did_key = key.public_key().to_did_key();
        let did = if did_is_key {
            did_key.clone()
        } else {
            format!("did:plc:{}", "abcdefghijklmnopqrstuvwx")
        };
        let mut rng = Rng(seed);
        let records = random_records(&mut rng, n);
        let built = build_repo(&key, &did, Tid::parse("3l5qsnqbdrm2c").unwrap(), &records);
        let car = export_repo_to_vec(&built.blocks, built.commit_cid).unwrap();
        let path = tmp.path().join(format!("ours-{seed}.car"));
        std::fs::write(&path, &car).unwrap();
        let file = path.to_str().unwrap();

        let out = reference(&["verify-car", file, &did, &did_key], None);
        assert_eq!(out["ok"], true, "seed {seed}: {out}");
        assert_eq!(cid(&out["commit"]), built.commit_cid);
        assert_eq!(out["rev"], "3l5qsnqbdrm2c");
        assert_eq!(record_list(&out["records"]), built.records, "seed {seed}");

        // A wrong key or DID is rejected by them too.
        let other = SigningKey::from_bytes(alg, &[0xee; 32])
            .unwrap()
            .public_key()
            .to_did_key();
        let out = reference(&["verify-car", file, &did, &other], None);
        assert_eq!(out["ok"], false, "seed {seed}: wrong key accepted");
        let out = reference(&["verify-car", file, "did:plc:other", &did_key], None);
        assert_eq!(out["ok"], false, "seed {seed}: wrong did accepted");

        // Our record proofs: some present keys, some absent ones, in one CAR.
        let mut claims: Vec<(String, Option<Cid>)> = built
            .records
            .iter()
            .step_by((n / 4).max(1))
            .map(|(k, v)| (k.clone(), Some(*v)))
            .collect();
        while claims.len() < 8 {
            let path = rng.path();
            if !built.records.contains_key(&path) {
                claims.push((path, None));
            }
        }
        let keys: Vec<&str> = claims.iter().map(|(k, _)| k.as_str()).collect();
        let proof = write_record_proof(&built.blocks, built.commit_cid, &keys, Vec::new()).unwrap();
        let proof_path = tmp.path().join(format!("proof-{seed}.car"));
        std::fs::write(&proof_path, &proof).unwrap();
        let mut claims_json: Vec<Value> = claims
            .iter()
            .map(|(k, v)| json!([k, v.map(|c| c.to_string())]))
            .collect();
        // And two false claims, which they must not verify.
        let wrong = cid_for_cbor(b"\xa0");
        claims_json.push(json!([claims[0].0, wrong.to_string()]));
        claims_json.push(json!([claims.last().unwrap().0, wrong.to_string()]));
        let out = reference(
            &["verify-proof", proof_path.to_str().unwrap(), &did, &did_key],
            Some(&json!({ "claims": claims_json })),
        );
        assert_eq!(out["ok"], true, "seed {seed}: {out}");
        let verified: Vec<bool> = out["verified"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_bool().unwrap())
            .collect();
        let mut expected = vec![true; claims.len()];
        expected.extend([false, false]);
        assert_eq!(verified, expected, "seed {seed}");
    }
}

// --- (c) we verify theirs -----------------------------------------------

/// Record batches for their `make-car`: create `n`, then three commits of
/// updates, deletes and creates. Returns the batches and the final state.
fn write_batches(rng: &mut Rng, n: usize) -> (Vec<Value>, BTreeMap<String, Value>) {
    let mut state = random_records(rng, n);
    let create = |k: &str, r: &Value| {
        let (collection, rkey) = k.split_once('/').unwrap();
        json!({"action": "create", "collection": collection, "rkey": rkey, "record": r})
    };
    let mut batches = vec![Value::Array(
        state.iter().map(|(k, r)| create(k, r)).collect(),
    )];
    for _ in 0..3 {
        let mut batch = Vec::new();
        let mut touched = std::collections::BTreeSet::new();
        for _ in 0..(n / 10).max(1) {
            let roll = rng.below(3);
            let existing = if state.is_empty() {
                None
            } else {
                state.keys().nth(rng.below(state.len())).cloned()
            };
            match (roll, existing) {
                (0, Some(k)) if touched.insert(k.clone()) => {
                    let (collection, rkey) = k.split_once('/').unwrap();
                    let record = rng.record(collection);
                    batch.push(json!({"action": "update", "collection": collection, "rkey": rkey, "record": record}));
                    state.insert(k, record);
                }
                (1, Some(k)) if touched.insert(k.clone()) => {
                    let (collection, rkey) = k.split_once('/').unwrap();
                    batch.push(json!({"action": "delete", "collection": collection, "rkey": rkey}));
                    state.remove(&k);
                }
                _ => {
                    let k = rng.path();
                    if state.contains_key(&k) || !touched.insert(k.clone()) {
                        continue;
                    }
                    let collection = k.split_once('/').unwrap().0.to_owned();
                    let record = rng.record(&collection);
                    batch.push(create(&k, &record));
                    state.insert(k, record);
                }
            }
        }
        batches.push(Value::Array(batch));
    }
    (batches, state)
}

#[test]
fn we_verify_reference_cars_and_proofs() {
    let tmp = tempfile::tempdir().unwrap();
    for (seed, n, alg) in [(31, 40, "k256"), (32, 400, "p256"), (33, 1000, "k256")] {
        let mut rng = Rng(seed);
        let (batches, state) = write_batches(&mut rng, n);
        let privkey: String = std::iter::repeat_n(format!("{:02x}", seed as u8), 32).collect();
        let car_path = tmp.path().join(format!("theirs-{seed}.car"));
        let made = reference(
            &["make-car", car_path.to_str().unwrap()],
            Some(&json!({"alg": alg, "privkey": privkey, "batches": batches})),
        );
        let did = made["did"].as_str().unwrap().to_owned();
        let bytes = std::fs::read(&car_path).unwrap();

        let opts = VerifyOptions::new(SignatureCheck::DidKey(&did)).expect_did(&did);
        let verified =
            verify_repo_car(&bytes, &opts).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let s = &verified.repo.summary;
        assert_eq!(s.signature, SignatureStatus::Verified);
        assert_eq!(s.commit_cid, cid(&made["commit"]));
        assert_eq!(s.data_cid, cid(&made["data"]));
        assert_eq!(s.rev.to_string(), made["rev"].as_str().unwrap());
        assert!(
            s.prev.is_none(),
            "v3 repos from this version leave prev null"
        );
        let theirs = record_list(&made["records"]);
        let ours: BTreeMap<String, Cid> = verified.repo.records.iter().cloned().collect();
        assert_eq!(ours, theirs, "seed {seed}: record lists differ");
        assert_eq!(verified.unreachable_blocks, 0);

        // The same records encode to the same CIDs here, and make the same MST.
        let expected: BTreeMap<String, Cid> = state
            .iter()
            .map(|(k, r)| (k.clone(), record_cid(r).unwrap()))
            .collect();
        assert_eq!(expected, theirs, "seed {seed}: record CIDs differ");
        let mst = Mst::from_entries(MemoryBlocks::new(), expected.iter().map(|(k, v)| (k, *v)));
        assert_eq!(mst.unwrap().root(), s.data_cid);

        // And their CAR imports into a store here, which then holds exactly it.
        let store_dir = tmp.path().join(format!("imported-{seed}"));
        let import = ImportOptions {
            did: Some(&did),
            key: None,
            limits: None,
        };
        let (repo, stats) = Repository::import(&store_dir, bytes.as_slice(), &import)
            .unwrap_or_else(|e| panic!("seed {seed}: import: {e}"));
        assert_eq!(stats.records, theirs.len() as u64);
        let stored: BTreeMap<String, Cid> =
            repo.list(None).unwrap().collect::<Result<_, _>>().unwrap();
        assert_eq!(stored, theirs, "seed {seed}: imported records differ");
        assert_eq!(repo.head().commit, s.commit_cid);
        repo.check()
            .unwrap_or_else(|e| panic!("seed {seed}: imported store: {e}"));

        // Their record proofs (getRecord), for present and absent keys.
        let mut keys: Vec<String> = theirs.keys().step_by((n / 5).max(1)).cloned().collect();
        while keys.len() < 10 {
            let path = rng.path();
            if !theirs.contains_key(&path) {
                keys.push(path);
            }
        }
        let proof_path = tmp.path().join(format!("theirs-proof-{seed}.car"));
        let mut args = vec![
            "prove",
            car_path.to_str().unwrap(),
            proof_path.to_str().unwrap(),
        ];
        args.extend(keys.iter().map(String::as_str));
        let out = reference(&args, None);
        assert_eq!(out["ok"], true, "{out}");
        let proof = std::fs::read(&proof_path).unwrap();
        for key in &keys {
            let proven = verify_record_proof(&proof, key, &opts)
                .unwrap_or_else(|e| panic!("seed {seed}, {key}: {e}"));
            assert_eq!(proven.cid, theirs.get(key).copied(), "{key}");
            assert_eq!(proven.record.is_some(), theirs.contains_key(key));
        }
    }
}
