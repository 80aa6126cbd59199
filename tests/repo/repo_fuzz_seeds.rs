//! Runs the fuzz seeds of `car_read`, `commit_decode` and `repo_verify`
//! (`fuzz/seeds/<target>/`) through the same properties as the fuzz
//! targets. Seeds named `valid-*` must be accepted; the others must be
//! rejected without panicking.
//!
//! `GELSTORE_WRITE_REPO_SEEDS=1 cargo test --test repo repo_fuzz_seeds` rewrites
//! the seed files from the generators below.
//! `REPO_FUZZ_CORPUS=<dir>` with
//! `REPO_FUZZ_TARGET=car_read|commit_decode|repo_verify` also runs a fuzz
//! corpus and prints how many inputs were accepted.

use crate::support::fixtures;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gelstore::crypto::{KeyAlgorithm, SigningKey};
use gelstore::model::{Cid, Ipld, cid_for_blob, cid_for_cbor, encode_dag_cbor};
use gelstore::repo::blocks::MemoryBlocks;
use gelstore::repo::car::{Car, CarLimits, CarWriter};
use gelstore::repo::commit::{Commit, UnsignedCommit};
use gelstore::repo::export::export_repo_to_vec;
use gelstore::repo::mst::{Mst, MstError};
use gelstore::repo::proof::{record_proof, verify_record_proof};
use gelstore::repo::tid::Tid;
use gelstore::repo::verify::{SignatureCheck, SignatureStatus, VerifyOptions, verify_repo_car};
use serde_json::json;

fn seed_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/seeds")
        .join(target)
}

/// The `car_read` property; returns whether the input was accepted.
fn check_car(name: &str, data: &[u8]) -> bool {
    let slice = Car::from_slice(data);
    let stream = Car::from_reader(data, CarLimits::default());
    let car = match (slice, stream) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a, b, "{name}: readers disagree");
            a
        }
        (Err(_), Err(_)) => return false,
        (a, b) => panic!("{name}: readers disagree: {a:?} vs {b:?}"),
    };
    let again = Car::from_slice(&car.to_vec().unwrap()).unwrap();
    assert_eq!(again, car, "{name}: round trip");
    true
}

/// The `commit_decode` property; returns whether the input was accepted.
fn check_commit(name: &str, data: &[u8]) -> bool {
    let Ok(commit) = Commit::from_cbor(data) else {
        return false;
    };
    assert_eq!(commit.to_cbor(), data, "{name}: re-encoding");
    assert_eq!(commit.cid(), cid_for_cbor(data), "{name}: cid");
    let _ = commit.verify(&key(KeyAlgorithm::K256).public_key());
    let _ = commit.verify_did_key(commit.did());
    true
}

/// The `repo_verify` property (see `fuzz/fuzz_targets/repo_verify.rs`);
/// returns whether any of the three verifiers accepted the input.
fn check_repo_verify(name: &str, data: &[u8]) -> bool {
    let skip = VerifyOptions::new(SignatureCheck::Skip);
    let mut accepted = false;
    if let Ok(verified) = verify_repo_car(data, &skip) {
        accepted = true;
        let summary = &verified.repo.summary;
        assert_eq!(summary.signature, SignatureStatus::NotChecked, "{name}");
        let commit = summary.commit_cid;
        let exported = export_repo_to_vec(&verified.car, commit).unwrap();
        let again = verify_repo_car(&exported, &skip).unwrap();
        assert_eq!(again.repo, verified.repo, "{name}: re-export");
        assert_eq!(again.unreachable_blocks, 0, "{name}");
        for (key, cid) in verified.repo.records.iter().step_by(7).take(8) {
            let proof = record_proof(&verified.car, commit, key).unwrap();
            let proven = verify_record_proof(&proof, key, &skip).unwrap();
            assert_eq!(proven.cid, Some(*cid), "{name}: {key}");
        }
    }
    for key in [PROOF_KEY, "app.bsky.feed.post/a"] {
        if let Ok(proven) = verify_record_proof(data, key, &skip) {
            accepted = true;
            if let (Some(cid), Some(record)) = (proven.cid, &proven.record) {
                assert_eq!(cid_for_cbor(record), cid, "{name}");
            }
        }
    }
    let cid = cid_for_cbor(data);
    let mut blocks = MemoryBlocks::new();
    blocks.insert(cid, data.to_vec());
    if let Ok(tree) = Mst::load(&blocks, cid) {
        let entries: Result<Vec<(String, Cid)>, MstError> = tree.entries().collect();
        if let Ok(entries) = entries {
            accepted = true;
            let rebuilt = Mst::from_entries(MemoryBlocks::new(), entries).unwrap();
            assert_eq!(rebuilt.root(), cid, "{name}: single node not canonical");
        }
    }
    accepted
}

/// The key the `repo_verify` target asks proofs about.
const PROOF_KEY: &str = "com.example.record/3jqfcqzm3fo2j";

/// Seeds for `repo_verify`: repositories, a proof, single nodes.
fn repo_verify_seeds() -> Vec<(String, Vec<u8>)> {
    let key = key(KeyAlgorithm::K256);
    let did = "did:plc:ewvi7nxzyoun6zhxrhs64oiz";
    let rev = Tid::parse("3l5qsnqbdrm2c").unwrap();
    let mut records = fixtures::random_records(&mut fixtures::Rng(5), 60);
    records.insert(
        PROOF_KEY.to_owned(),
        json!({"$type": "com.example.record", "text": "hi"}),
    );
    let repo = fixtures::build_repo(&key, did, rev, &records);
    let full = export_repo_to_vec(&repo.blocks, repo.commit_cid).unwrap();
    let empty = fixtures::build_repo(&key, did, rev, &BTreeMap::new());
    let empty = export_repo_to_vec(&empty.blocks, empty.commit_cid).unwrap();
    let proof = record_proof(&repo.blocks, repo.commit_cid, PROOF_KEY).unwrap();
    // A leaf node (three keys of height 0) and the root (which has subtrees).
    let value = cid_for_cbor(b"\xa0");
    let leaf = Mst::from_entries(
        MemoryBlocks::new(),
        ["a.b.c/1", "a.b.c/2", "a.b.c/3"].map(|k| (k, value)),
    )
    .unwrap();
    let mut leaf_blocks: Vec<(Cid, Vec<u8>)> = Vec::new();
    let leaf_root = leaf.write_new_blocks(&mut leaf_blocks).unwrap();
    assert_eq!(leaf_blocks.len(), 1, "one node");
    let car = Car::from_slice(&full).unwrap();
    let root_node = car.get(&repo.data).unwrap().to_vec();
    // The repository without one record block: not a valid repository,
    // but still a valid proof for PROOF_KEY (the record is optional there).
    let mut missing = car.clone();
    missing.blocks.remove(&repo.records[PROOF_KEY]);
    assert_eq!(leaf_root, leaf_blocks[0].0);
    let mut two_roots = car.clone();
    two_roots.roots.push(repo.data);
    vec![
        ("valid-repo.car".into(), full),
        ("valid-empty-repo.car".into(), empty),
        ("valid-proof.car".into(), proof),
        ("valid-leaf-node.cbor".into(), leaf_blocks.remove(0).1),
        ("root-node-with-subtrees.cbor".into(), root_node),
        (
            "valid-as-proof-missing-record.car".into(),
            missing.to_vec().unwrap(),
        ),
        ("two-roots.car".into(), two_roots.to_vec().unwrap()),
    ]
}

fn key(alg: KeyAlgorithm) -> SigningKey {
    SigningKey::from_bytes(alg, &[0x11; 32]).unwrap()
}

fn commit(alg: KeyAlgorithm, prev: bool) -> Commit {
    let key = key(alg);
    let did = key.public_key().to_did_key();
    let prev = prev.then(|| cid_for_cbor(b"\xa0"));
    UnsignedCommit::new(
        did,
        cid_for_cbor(b"\x80"),
        Tid::parse("3l5qsnqbdrm2c").unwrap(),
        prev,
    )
    .unwrap()
    .sign(&key)
}

/// Seed files: (name, bytes).
fn generate(target: &str) -> Vec<(String, Vec<u8>)> {
    match target {
        "commit_decode" => {
            let k = commit(KeyAlgorithm::K256, false);
            let p = commit(KeyAlgorithm::P256, true);
            let mut v2 = match gelstore::model::decode_dag_cbor(&k.to_cbor()).unwrap() {
                Ipld::Map(m) => m,
                _ => unreachable!(),
            };
            v2.insert("version".into(), Ipld::Integer(2));
            vec![
                ("valid-k256.cbor".into(), k.to_cbor()),
                ("valid-p256-prev.cbor".into(), p.to_cbor()),
                (
                    "version-2.cbor".into(),
                    encode_dag_cbor(&Ipld::Map(v2)).unwrap(),
                ),
            ]
        }
        "car_read" => {
            let c = commit(KeyAlgorithm::K256, false);
            let record = encode_dag_cbor(&Ipld::Map(BTreeMap::from([(
                "text".to_owned(),
                Ipld::String("hello".into()),
            )])))
            .unwrap();
            let mut w = CarWriter::new(Vec::new(), &[c.cid()]).unwrap();
            w.write_block(&c.cid(), &c.to_cbor()).unwrap();
            w.write_block(&cid_for_cbor(&record), &record).unwrap();
            w.write_block(&cid_for_blob(b"blob"), b"blob").unwrap();
            w.write_block(&c.cid(), &c.to_cbor()).unwrap();
            let full = w.finish().unwrap();
            let empty = CarWriter::new(Vec::new(), &[]).unwrap().finish().unwrap();
            let mut mismatch = full.clone();
            let last = mismatch.len() - 1;
            mismatch[last] ^= 1;
            vec![
                ("valid-commit-record-blob.car".into(), full),
                ("valid-empty.car".into(), empty),
                ("hash-mismatch.car".into(), mismatch),
            ]
        }
        "repo_verify" => repo_verify_seeds(),
        other => panic!("unknown target {other}"),
    }
}

fn run(target: &str, dir: &Path, require_names: bool) -> (usize, usize) {
    let check: fn(&str, &[u8]) -> bool = match target {
        "car_read" => check_car,
        "commit_decode" => check_commit,
        "repo_verify" => check_repo_verify,
        other => panic!("unknown target {other}"),
    };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    let mut accepted = 0;
    for path in &paths {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let ok = check(&name, &std::fs::read(path).unwrap());
        if require_names {
            assert_eq!(ok, name.starts_with("valid-"), "{target}/{name}");
        }
        accepted += usize::from(ok);
    }
    (accepted, paths.len())
}

#[test]
fn seeds_hold_the_fuzz_properties() {
    for target in ["car_read", "commit_decode", "repo_verify"] {
        let dir = seed_dir(target);
        if std::env::var_os("GELSTORE_WRITE_REPO_SEEDS").is_some() {
            std::fs::create_dir_all(&dir).unwrap();
            for (name, bytes) in generate(target) {
                std::fs::write(dir.join(name), bytes).unwrap();
            }
        }
        // The checked-in seeds are the generated ones (the formats are stable).
        for (name, bytes) in generate(target) {
            let stored =
                std::fs::read(dir.join(&name)).unwrap_or_else(|e| panic!("{target}/{name}: {e}"));
            assert_eq!(stored, bytes, "{target}/{name} differs from its generator");
        }
        let (accepted, total) = run(target, &dir, true);
        assert!(
            accepted > 0 && total > accepted,
            "{target}: {accepted}/{total}"
        );
    }
}

#[test]
fn fuzz_corpus_from_env() {
    let (Some(dir), Some(target)) = (
        std::env::var_os("REPO_FUZZ_CORPUS"),
        std::env::var("REPO_FUZZ_TARGET").ok(),
    ) else {
        return;
    };
    let (accepted, total) = run(&target, Path::new(&dir), false);
    println!("{target}: {accepted} of {total} corpus inputs accepted");
}
