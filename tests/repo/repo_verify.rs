//! Whole-repository export and verification, and record proofs: round
//! trips, block order, and one test per named error.

use crate::support::fixtures;

use std::collections::{BTreeMap, HashSet};

use gelstore::crypto::{KeyAlgorithm, PublicKey, SignatureError, SigningKey};
use gelstore::model::{Cid, DataModelError, cid_for_blob, cid_for_cbor, encode_dag_cbor};
use gelstore::repo::blocks::{BlockSource, MemoryBlocks};
use gelstore::repo::car::{Car, CarError, CarWriter};
use gelstore::repo::commit::{CommitError, UnsignedCommit};
use gelstore::repo::export::{
    ExportError, ExportOptions, MissingRecords, export_repo, export_repo_to_vec, export_repo_with,
    repo_blocks,
};
use gelstore::repo::mst::{Mst, MstError};
use gelstore::repo::proof::{record_proof, verify_record_proof, write_record_proof};
use gelstore::repo::tid::Tid;
use gelstore::repo::verify::{
    SignatureCheck, SignatureStatus, VerifyError, VerifyOptions, check_repo_path, verify_repo,
    verify_repo_car, verify_repo_car_from_reader,
};
use serde_json::json;

use fixtures::{BuiltRepo, Rng, build_repo, random_records};

const DID: &str = "did:plc:ewvi7nxzyoun6zhxrhs64oiz";

fn signing_key(alg: KeyAlgorithm) -> SigningKey {
    SigningKey::from_bytes(alg, &[0x42; 32]).unwrap()
}

fn rev() -> Tid {
    Tid::parse("3l5qsnqbdrm2c").unwrap()
}

fn repo(seed: u64, n: usize) -> (SigningKey, BuiltRepo) {
    let key = signing_key(KeyAlgorithm::K256);
    let records = random_records(&mut Rng(seed), n);
    let built = build_repo(&key, DID, rev(), &records);
    (key, built)
}

fn checked(pk: &PublicKey) -> VerifyOptions<'_> {
    VerifyOptions::new(SignatureCheck::Key(pk))
}

/// A CAR with these roots and blocks, in this order.
fn car_of(roots: &[Cid], blocks: &[(Cid, Vec<u8>)]) -> Vec<u8> {
    let mut w = CarWriter::new(Vec::new(), roots).unwrap();
    for (cid, bytes) in blocks {
        w.write_block(cid, bytes).unwrap();
    }
    w.finish().unwrap()
}

/// The blocks of `built`, commit first, the rest in CID order.
fn all_blocks(built: &BuiltRepo) -> Vec<(Cid, Vec<u8>)> {
    let mut out = vec![(
        built.commit_cid,
        built.blocks.block(&built.commit_cid).unwrap().to_vec(),
    )];
    let mut rest: Vec<_> = built
        .blocks
        .iter()
        .filter(|(cid, _)| **cid != built.commit_cid)
        .map(|(cid, bytes)| (*cid, bytes.to_vec()))
        .collect();
    rest.sort();
    out.extend(rest);
    out
}

#[test]
fn export_then_verify_round_trip() {
    for (seed, n) in [(1, 0), (2, 1), (3, 10), (4, 300)] {
        for alg in [KeyAlgorithm::K256, KeyAlgorithm::P256] {
            let key = signing_key(alg);
            let records = random_records(&mut Rng(seed), n);
            let built = build_repo(&key, DID, rev(), &records);
            let (bytes, stats) = export_repo(&built.blocks, built.commit_cid, Vec::new()).unwrap();
            assert_eq!(stats.records, n);
            assert_eq!(stats.commit_cid, built.commit_cid);
            assert_eq!(stats.data_cid, built.data);
            assert_eq!(stats.bytes, bytes.len() as u64);

            let pk = key.public_key();
            let did_key = pk.to_did_key();
            let opts = VerifyOptions::new(SignatureCheck::DidKey(&did_key)).expect_did(DID);
            let verified = verify_repo_car(&bytes, &opts).unwrap();
            let s = &verified.repo.summary;
            assert_eq!(s.did, DID);
            assert_eq!(s.rev, rev());
            assert_eq!(s.commit_cid, built.commit_cid);
            assert_eq!(s.data_cid, built.data);
            assert_eq!(s.prev, None);
            assert_eq!(s.record_count, n);
            assert_eq!(s.mst_node_count, stats.mst_nodes);
            assert_eq!(s.signature, SignatureStatus::Verified);
            assert_eq!(verified.unreachable_blocks, 0);
            let listed: BTreeMap<String, Cid> = verified.repo.records.iter().cloned().collect();
            assert_eq!(listed, built.records);
            let keys: Vec<&String> = verified.repo.records.iter().map(|(k, _)| k).collect();
            assert!(keys.windows(2).all(|w| w[0] < w[1]), "records in key order");

            // The same through a reader, and straight from the block source.
            let again = verify_repo_car_from_reader(&bytes[..], &opts).unwrap();
            assert_eq!(again.repo, verified.repo);
            let direct = verify_repo(&built.blocks, built.commit_cid, &opts).unwrap();
            assert_eq!(direct, verified.repo);
            // The exported blocks are exactly the repository's blocks.
            assert_eq!(verified.car.blocks.len(), built.blocks.len());
        }
    }
}

#[test]
fn export_order_is_streamable() {
    let (_, built) = repo(7, 500);
    let mut order: Vec<Cid> = Vec::new();
    repo_blocks(
        &built.blocks,
        built.commit_cid,
        ExportOptions::default(),
        |cid, _| {
            order.push(*cid);
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(order[0], built.commit_cid, "commit first");
    let values: HashSet<Cid> = built.records.values().copied().collect();
    // Replay: each node must be linked from a node already seen (or be the
    // root), each record from a node already seen, and records must come
    // in key order.
    let mut seen_nodes: HashSet<Cid> = HashSet::new();
    let mut linked: HashSet<Cid> = HashSet::from([built.data]);
    let mut last_key = String::new();
    let by_cid: BTreeMap<Cid, Vec<&String>> =
        built.records.iter().fold(BTreeMap::new(), |mut m, (k, v)| {
            m.entry(*v).or_insert_with(Vec::new).push(k);
            m
        });
    for cid in &order[1..] {
        assert!(linked.contains(cid), "{cid} before the node linking it");
        if values.contains(cid) {
            let key = by_cid[cid][0];
            assert!(*key > last_key, "records in key order");
            last_key = key.clone();
            continue;
        }
        seen_nodes.insert(*cid);
        // Everything this node links to may now follow.
        let node = gelstore::model::decode_dag_cbor(built.blocks.block(cid).unwrap()).unwrap();
        collect_links(&node, &mut linked);
    }
    assert_eq!(order.len(), built.blocks.len());
}

fn collect_links(value: &gelstore::model::Ipld, out: &mut HashSet<Cid>) {
    use gelstore::model::Ipld;
    match value {
        Ipld::Link(cid) => {
            out.insert(*cid);
        }
        Ipld::List(items) => items.iter().for_each(|i| collect_links(i, out)),
        Ipld::Map(map) => map.values().for_each(|i| collect_links(i, out)),
        _ => {}
    }
}

#[test]
fn blocks_in_any_order_with_duplicates_and_extras() {
    let (key, built) = repo(8, 50);
    let mut blocks = all_blocks(&built);
    blocks.reverse();
    let extra = encode_dag_cbor(&gelstore::model::Ipld::String("unrelated".into())).unwrap();
    blocks.push((cid_for_cbor(&extra), extra));
    blocks.push(blocks[0].clone());
    let bytes = car_of(&[built.commit_cid], &blocks);
    let pk = key.public_key();
    let verified = verify_repo_car(&bytes, &checked(&pk)).unwrap();
    assert_eq!(verified.unreachable_blocks, 1);
    assert_eq!(verified.repo.summary.record_count, 50);
}

#[test]
fn skipping_the_signature_is_explicit() {
    let (_, built) = repo(9, 5);
    let bytes = export_repo_to_vec(&built.blocks, built.commit_cid).unwrap();
    let verified = verify_repo_car(&bytes, &VerifyOptions::new(SignatureCheck::Skip)).unwrap();
    assert_eq!(verified.repo.summary.signature, SignatureStatus::NotChecked);
}

#[test]
fn wrong_key_bad_did_key_and_wrong_did() {
    let (_, built) = repo(10, 5);
    let bytes = export_repo_to_vec(&built.blocks, built.commit_cid).unwrap();
    let other = signing_key(KeyAlgorithm::P256).public_key();
    let err =
        verify_repo_car(&bytes, &VerifyOptions::new(SignatureCheck::Key(&other))).unwrap_err();
    assert!(
        matches!(
            err,
            VerifyError::BadSignature {
                source: SignatureError::Mismatch,
                ..
            }
        ),
        "{err}"
    );
    let err = verify_repo_car(
        &bytes,
        &VerifyOptions::new(SignatureCheck::DidKey("did:key:zzz")),
    )
    .unwrap_err();
    assert!(matches!(err, VerifyError::Key(_)), "{err}");
    let opts = VerifyOptions::new(SignatureCheck::Skip).expect_did("did:plc:someoneelse");
    let err = verify_repo_car(&bytes, &opts).unwrap_err();
    assert!(matches!(err, VerifyError::DidMismatch { .. }), "{err}");
}

#[test]
fn root_count_and_missing_commit() {
    let (_, built) = repo(11, 3);
    let blocks = all_blocks(&built);
    let skip = VerifyOptions::new(SignatureCheck::Skip);
    for roots in [vec![], vec![built.commit_cid, built.data]] {
        let err = verify_repo_car(&car_of(&roots, &blocks), &skip).unwrap_err();
        assert!(
            matches!(err, VerifyError::RootCount { count } if count == roots.len()),
            "{err}"
        );
    }
    let err = verify_repo_car(&car_of(&[built.commit_cid], &blocks[1..]), &skip).unwrap_err();
    assert!(matches!(err, VerifyError::MissingCommit { .. }), "{err}");
    let raw_root = cid_for_blob(b"x");
    let err = verify_repo_car(&car_of(&[raw_root], &blocks), &skip).unwrap_err();
    assert!(matches!(err, VerifyError::RootNotDagCbor { .. }), "{err}");
    // The root is an MST node, not a commit.
    let err = verify_repo_car(&car_of(&[built.data], &blocks), &skip).unwrap_err();
    assert!(matches!(err, VerifyError::Commit { .. }), "{err}");
    // Not a CAR at all.
    let err = verify_repo_car(b"\x05hello", &skip).unwrap_err();
    assert!(matches!(err, VerifyError::Car(_)), "{err}");
}

#[test]
fn missing_node_and_missing_record() {
    let (_, built) = repo(12, 200);
    let skip = VerifyOptions::new(SignatureCheck::Skip);
    let blocks = all_blocks(&built);
    let record_cids: HashSet<Cid> = built.records.values().copied().collect();
    // Drop a non-root MST node.
    let node = blocks
        .iter()
        .find(|(cid, _)| {
            *cid != built.commit_cid && *cid != built.data && !record_cids.contains(cid)
        })
        .unwrap()
        .0;
    let without: Vec<_> = blocks.iter().filter(|(c, _)| *c != node).cloned().collect();
    let err = verify_repo_car(&car_of(&[built.commit_cid], &without), &skip).unwrap_err();
    assert!(
        matches!(&err, VerifyError::Mst(MstError::MissingBlock { cid }) if **cid == node),
        "{err}"
    );
    // Drop the root node.
    let without: Vec<_> = blocks
        .iter()
        .filter(|(c, _)| *c != built.data)
        .cloned()
        .collect();
    let err = verify_repo_car(&car_of(&[built.commit_cid], &without), &skip).unwrap_err();
    assert!(
        matches!(err, VerifyError::Mst(MstError::MissingBlock { .. })),
        "{err}"
    );
    // Drop a record.
    let (path, record) = built.records.iter().nth(77).unwrap();
    let without: Vec<_> = blocks
        .iter()
        .filter(|(c, _)| c != record)
        .cloned()
        .collect();
    let err = verify_repo_car(&car_of(&[built.commit_cid], &without), &skip).unwrap_err();
    match err {
        VerifyError::MissingRecord { key, cid } => {
            assert_eq!(*cid, *record);
            // The first key (in order) with that CID.
            let first = built.records.iter().find(|(_, v)| *v == record).unwrap().0;
            assert_eq!(&key, first);
            let _ = path;
        }
        other => panic!("{other}"),
    }
}

/// A repo whose MST maps `path` to `value`, with the blocks `extra`.
fn repo_with_value(path: &str, value: Cid, extra: Vec<(Cid, Vec<u8>)>) -> Vec<u8> {
    signed_repo_car([(path, value)], extra)
}

/// The CAR of a repo whose MST holds `entries`, signed with a fresh key,
/// with the blocks `extra` after the commit and the nodes.
fn signed_repo_car<K: AsRef<str>>(
    entries: impl IntoIterator<Item = (K, Cid)>,
    extra: Vec<(Cid, Vec<u8>)>,
) -> Vec<u8> {
    let key = signing_key(KeyAlgorithm::K256);
    let mut blocks = MemoryBlocks::new();
    let mst = Mst::from_entries(MemoryBlocks::new(), entries).unwrap();
    let data = mst.write_new_blocks(&mut blocks).unwrap();
    let commit = UnsignedCommit::new(DID, data, rev(), None)
        .unwrap()
        .sign(&key);
    let mut all = vec![(commit.cid(), commit.to_cbor())];
    all.extend(blocks.iter().map(|(c, b)| (*c, b.to_vec())));
    all.extend(extra);
    car_of(&[commit.cid()], &all)
}

#[test]
fn bad_records_and_paths() {
    let skip = VerifyOptions::new(SignatureCheck::Skip);
    let path = "com.example.record/abc";
    // Not a map.
    let list = encode_dag_cbor(&gelstore::model::Ipld::List(vec![])).unwrap();
    let cid = cid_for_cbor(&list);
    let err = verify_repo_car(&repo_with_value(path, cid, vec![(cid, list)]), &skip).unwrap_err();
    assert!(
        matches!(
            err,
            VerifyError::BadRecord {
                source: DataModelError::RecordNotObject { .. },
                ..
            }
        ),
        "{err}"
    );
    // Not canonical DAG-CBOR (a map with keys out of order).
    let bad = vec![0xa2, 0x61, b'b', 0x01, 0x61, b'a', 0x02];
    let cid = cid_for_cbor(&bad);
    let err = verify_repo_car(&repo_with_value(path, cid, vec![(cid, bad)]), &skip).unwrap_err();
    assert!(matches!(err, VerifyError::BadRecord { .. }), "{err}");
    // A raw (blob) CID as a record.
    let cid = cid_for_blob(b"blob");
    let err = verify_repo_car(
        &repo_with_value(path, cid, vec![(cid, b"blob".to_vec())]),
        &skip,
    )
    .unwrap_err();
    assert!(
        matches!(err, VerifyError::RecordCodec { codec: 0x55, .. }),
        "{err}"
    );
    // Valid MST keys that are not repo paths.
    let rec = encode_dag_cbor(&gelstore::model::Ipld::Map(Default::default())).unwrap();
    let cid = cid_for_cbor(&rec);
    for bad_path in ["A0/123456", "com.example.record/..", "nsid/rkey"] {
        let car = repo_with_value(bad_path, cid, vec![(cid, rec.clone())]);
        let err = verify_repo_car(&car, &skip).unwrap_err();
        assert!(
            matches!(err, VerifyError::InvalidPath { .. }),
            "{bad_path}: {err}"
        );
    }
    assert!(check_repo_path("chat.gel.assistant.message/3l5qsnqbdrm2c").is_ok());
    assert!(check_repo_path("com.example.record/a/b").is_err());
    assert!(check_repo_path("norecord").is_err());
}

/// A block source that returns wrong bytes for one CID.
struct Lying<'a> {
    inner: &'a MemoryBlocks,
    cid: Cid,
}

impl BlockSource for Lying<'_> {
    fn get(&self, cid: &Cid) -> Result<Option<Vec<u8>>, gelstore::repo::blocks::StoreError> {
        if *cid == self.cid {
            return Ok(Some(b"\xa0".to_vec()));
        }
        self.inner.get(cid)
    }
}

#[test]
fn block_source_hashes_are_checked() {
    let (_, built) = repo(13, 20);
    let skip = VerifyOptions::new(SignatureCheck::Skip);
    let lying = Lying {
        inner: &built.blocks,
        cid: built.commit_cid,
    };
    let err = verify_repo(&lying, built.commit_cid, &skip).unwrap_err();
    assert!(
        matches!(err, VerifyError::CommitCidMismatch { .. }),
        "{err}"
    );
    let record = *built.records.values().next().unwrap();
    let lying = Lying {
        inner: &built.blocks,
        cid: record,
    };
    let err = verify_repo(&lying, built.commit_cid, &skip).unwrap_err();
    assert!(
        matches!(err, VerifyError::RecordCidMismatch { .. }),
        "{err}"
    );
    let lying = Lying {
        inner: &built.blocks,
        cid: built.data,
    };
    let err = verify_repo(&lying, built.commit_cid, &skip).unwrap_err();
    assert!(
        matches!(err, VerifyError::Mst(MstError::CidMismatch { .. })),
        "{err}"
    );
}

#[test]
fn tampered_commit_fields_fail_the_signature() {
    let (key, built) = repo(14, 5);
    let commit_bytes = built.blocks.block(&built.commit_cid).unwrap();
    let commit = gelstore::repo::commit::Commit::from_cbor(commit_bytes).unwrap();
    // Same signature over a different rev.
    let (unsigned, sig) = commit.into_parts();
    let forged = UnsignedCommit::new(DID, unsigned.data(), Tid::from_u64(1), None).unwrap();
    let forged = gelstore::repo::commit::Commit::from_parts(forged, sig);
    let mut blocks = all_blocks(&built);
    blocks[0] = (forged.cid(), forged.to_cbor());
    let pk = key.public_key();
    let err = verify_repo_car(&car_of(&[forged.cid()], &blocks), &checked(&pk)).unwrap_err();
    assert!(matches!(err, VerifyError::BadSignature { .. }), "{err}");
    // A commit that does not decode.
    let v2 = encode_dag_cbor(&gelstore::model::Ipld::Map(BTreeMap::from([(
        "version".to_owned(),
        gelstore::model::Ipld::Integer(2),
    )])))
    .unwrap();
    blocks[0] = (cid_for_cbor(&v2), v2);
    let err = verify_repo_car(&car_of(&[blocks[0].0], &blocks), &checked(&pk)).unwrap_err();
    assert!(
        matches!(
            err,
            VerifyError::Commit {
                source: CommitError::UnsupportedVersion(2),
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn export_missing_blocks() {
    let (_, built) = repo(15, 30);
    let mut blocks = built.blocks.clone();
    let record = *built.records.values().nth(3).unwrap();
    blocks.remove(&record);
    let err = export_repo_to_vec(&blocks, built.commit_cid).unwrap_err();
    assert!(matches!(err, ExportError::MissingRecord { .. }), "{err}");
    let opts = ExportOptions {
        missing_records: MissingRecords::Skip,
    };
    let (bytes, stats) = export_repo_with(&blocks, built.commit_cid, Vec::new(), opts).unwrap();
    assert_eq!(stats.missing_records, 1);
    // A partial export is not a valid full repository.
    let err = verify_repo_car(&bytes, &VerifyOptions::new(SignatureCheck::Skip)).unwrap_err();
    assert!(matches!(err, VerifyError::MissingRecord { .. }), "{err}");
    let mut no_commit = built.blocks.clone();
    no_commit.remove(&built.commit_cid);
    let err = export_repo_to_vec(&no_commit, built.commit_cid).unwrap_err();
    assert!(matches!(err, ExportError::MissingCommit { .. }), "{err}");
    let mut no_root = built.blocks.clone();
    no_root.remove(&built.data);
    let err = export_repo_to_vec(&no_root, built.commit_cid).unwrap_err();
    assert!(
        matches!(err, ExportError::Mst(MstError::MissingBlock { .. })),
        "{err}"
    );
}

#[test]
fn proofs_of_presence_and_absence() {
    let (key, built) = repo(16, 400);
    let pk = key.public_key();
    let opts = VerifyOptions::new(SignatureCheck::Key(&pk)).expect_did(DID);
    let mut rng = Rng(99);
    for (path, cid) in built.records.iter().step_by(37) {
        let proof = record_proof(&built.blocks, built.commit_cid, path).unwrap();
        let proven = verify_record_proof(&proof, path, &opts).unwrap();
        assert_eq!(proven.cid, Some(*cid));
        assert_eq!(proven.commit_cid, built.commit_cid);
        assert_eq!(proven.data_cid, built.data);
        assert_eq!(proven.signature, SignatureStatus::Verified);
        assert_eq!(
            proven.record.as_deref(),
            built.blocks.block(cid),
            "the record travels with its proof"
        );
        // Much smaller than the repository.
        assert!(Car::from_slice(&proof).unwrap().blocks.len() < 12);
    }
    for _ in 0..20 {
        let path = rng.path();
        if built.records.contains_key(&path) {
            continue;
        }
        let proof = record_proof(&built.blocks, built.commit_cid, &path).unwrap();
        let proven = verify_record_proof(&proof, &path, &opts).unwrap();
        assert_eq!(proven.cid, None);
        assert_eq!(proven.record, None);
    }
    // Several keys in one proof.
    let keys: Vec<&str> = built.records.keys().take(5).map(String::as_str).collect();
    let proof = write_record_proof(&built.blocks, built.commit_cid, &keys, Vec::new()).unwrap();
    for k in &keys {
        assert!(verify_record_proof(&proof, k, &opts).unwrap().cid.is_some());
    }
}

#[test]
fn incomplete_or_forged_proofs_fail() {
    let (key, built) = repo(17, 400);
    let pk = key.public_key();
    let opts = VerifyOptions::new(SignatureCheck::Key(&pk));
    let (path, cid) = built.records.iter().nth(100).unwrap();
    let proof = record_proof(&built.blocks, built.commit_cid, path).unwrap();
    let car = Car::from_slice(&proof).unwrap();
    // A proof for one key does not show other keys far away.
    let far = built.records.keys().nth(300).unwrap();
    let err = verify_record_proof(&proof, far, &opts).unwrap_err();
    assert!(
        matches!(err, VerifyError::Mst(MstError::MissingBlock { .. })),
        "{err}"
    );
    // Dropping any MST node from the path breaks it; dropping the record
    // leaves the CID proven but no record.
    for dropped in car.blocks.keys().filter(|c| **c != built.commit_cid) {
        let blocks: Vec<_> = car
            .blocks
            .iter()
            .filter(|(c, _)| *c != dropped)
            .map(|(c, b)| (*c, b.clone()))
            .collect();
        let bytes = car_of(&[built.commit_cid], &blocks);
        let result = verify_record_proof(&bytes, path, &opts);
        if dropped == cid {
            let proven = result.unwrap();
            assert_eq!((proven.cid, proven.record), (Some(*cid), None));
        } else {
            assert!(
                matches!(result, Err(VerifyError::Mst(MstError::MissingBlock { .. }))),
                "{result:?}"
            );
        }
    }
    // Another key's signature does not verify.
    let other = signing_key(KeyAlgorithm::P256).public_key();
    let err = verify_record_proof(
        &proof,
        path,
        &VerifyOptions::new(SignatureCheck::Key(&other)),
    )
    .unwrap_err();
    assert!(matches!(err, VerifyError::BadSignature { .. }), "{err}");
    // Invalid path asked for.
    let err = verify_record_proof(&proof, "no-slash", &opts).unwrap_err();
    assert!(matches!(err, VerifyError::InvalidPath { .. }), "{err}");
    // Garbage.
    assert!(matches!(
        verify_record_proof(b"", path, &opts),
        Err(VerifyError::Car(CarError::Truncated { .. }))
    ));
}

#[test]
fn empty_repository() {
    let key = signing_key(KeyAlgorithm::K256);
    let built = build_repo(&key, DID, rev(), &BTreeMap::new());
    assert_eq!(
        built.data.to_string(),
        "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm"
    );
    let bytes = export_repo_to_vec(&built.blocks, built.commit_cid).unwrap();
    let pk = key.public_key();
    let verified = verify_repo_car(&bytes, &checked(&pk)).unwrap();
    assert_eq!(verified.repo.summary.record_count, 0);
    assert_eq!(verified.repo.summary.mst_node_count, 1);
    let proof = record_proof(&built.blocks, built.commit_cid, "a.b.c/d").unwrap();
    assert_eq!(
        verify_record_proof(&proof, "a.b.c/d", &checked(&pk))
            .unwrap()
            .cid,
        None
    );
}

#[test]
fn same_record_under_two_keys_is_written_once() {
    let key = signing_key(KeyAlgorithm::K256);
    let record = json!({"$type": "com.example.record", "text": "same"});
    let records = BTreeMap::from([
        ("com.example.record/a".to_owned(), record.clone()),
        ("com.example.record/b".to_owned(), record),
    ]);
    let built = build_repo(&key, DID, rev(), &records);
    let (bytes, stats) = export_repo(&built.blocks, built.commit_cid, Vec::new()).unwrap();
    assert_eq!((stats.records, stats.record_blocks), (2, 1));
    let pk = key.public_key();
    let verified = verify_repo_car(&bytes, &checked(&pk)).unwrap();
    assert_eq!(verified.repo.summary.record_count, 2);
    assert_eq!(verified.unreachable_blocks, 0);
}

/// A repo of `n` records (`com.example.record/r00000` …), the ones at the
/// indexes in `bad` replaced by blocks that are not records (each a
/// distinct list), signed with a fresh key; plus the path that breaks the
/// walk if `break_at` is given (a record key over 512 characters: a valid
/// MST key, not a valid repo path).
fn repo_with_bad_records(n: usize, bad: &[usize], break_at: Option<usize>) -> Vec<u8> {
    let mut entries = Vec::new();
    let mut extra = Vec::new();
    for i in 0..n {
        let path = match break_at {
            Some(b) if b == i => format!("com.example.record/r{i:05}{}", "x".repeat(600)),
            _ => format!("com.example.record/r{i:05}"),
        };
        let block = if bad.contains(&i) {
            encode_dag_cbor(&gelstore::model::Ipld::List(vec![
                gelstore::model::Ipld::Integer(i as i128),
            ]))
            .unwrap()
        } else {
            encode_dag_cbor(&gelstore::model::Ipld::Map(
                [
                    (
                        "$type".to_owned(),
                        gelstore::model::Ipld::String("com.example.record".into()),
                    ),
                    ("n".to_owned(), gelstore::model::Ipld::Integer(i as i128)),
                ]
                .into(),
            ))
            .unwrap()
        };
        let cid = cid_for_cbor(&block);
        entries.push((path, cid));
        extra.push((cid, block));
    }
    signed_repo_car(entries, extra)
}

/// Records are checked on every core; the error is still the first in key
/// order, and a record error before a broken path wins over it.
#[test]
fn the_first_bad_record_in_key_order_is_the_one_reported() {
    let skip = VerifyOptions::new(SignatureCheck::Skip);
    let key_of = |err: VerifyError| match err {
        VerifyError::BadRecord { key, .. } => key,
        other => panic!("{other}"),
    };
    // Bad records in different runs of the parallel check (and batches).
    let car = repo_with_bad_records(9_000, &[8_500, 6_000, 4_500, 700], None);
    let err = verify_repo_car(&car, &skip).unwrap_err();
    assert_eq!(key_of(err), "com.example.record/r00700");
    let car = repo_with_bad_records(9_000, &[8_999], None);
    let err = verify_repo_car(&car, &skip).unwrap_err();
    assert_eq!(key_of(err), "com.example.record/r08999");
    // A path error after a bad record: the record's error.
    let car = repo_with_bad_records(3_000, &[1_000], Some(2_000));
    let err = verify_repo_car(&car, &skip).unwrap_err();
    assert_eq!(key_of(err), "com.example.record/r01000");
    // A path error before it: the path's.
    let car = repo_with_bad_records(3_000, &[2_500], Some(2_000));
    let err = verify_repo_car(&car, &skip).unwrap_err();
    assert!(matches!(err, VerifyError::InvalidPath { .. }), "{err}");
    // All good: verified.
    let car = repo_with_bad_records(3_000, &[], None);
    assert_eq!(
        verify_repo_car(&car, &skip).unwrap().repo.records.len(),
        3_000
    );
}
