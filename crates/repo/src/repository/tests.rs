use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::blocks::MemoryBlocks;
use crate::car::Car;
use gelstore_crypto::KeyAlgorithm;
use gelstore_store::MemoryEngine;

const THING: &str = "com.example.thing";

fn key(seed: u8) -> SigningKey {
    SigningKey::from_bytes(KeyAlgorithm::K256, &[seed; 32]).unwrap()
}

fn thing(n: i64) -> Value {
    json!({"$type": THING, "n": n})
}

/// The bytes of block `cid` if the store keeps it.
fn stored(engine: &dyn Engine, cid: &Cid) -> Option<Vec<u8>> {
    refs::read_block(&Direct(engine), cid).unwrap()
}

fn new_repo() -> (Arc<MemoryEngine>, Repository) {
    let engine = Arc::new(MemoryEngine::new());
    let repo = Repository::init_engine(engine.clone(), key(1))
        .unwrap()
        .with_lexicons(gelstore_types::lexicons());
    (engine, repo)
}

/// Every row of every table.
fn snapshot(engine: &dyn Engine) -> Vec<(Table, Vec<u8>, Vec<u8>)> {
    Table::ALL
        .iter()
        .flat_map(|t| {
            engine
                .scan(*t, b"")
                .map(move |r| r.map(|(k, v)| (*t, k, v)).unwrap())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn export(repo: &Repository, since: Option<Tid>) -> Vec<u8> {
    repo.export(Vec::new(), since).unwrap().0
}

#[test]
fn init_makes_an_empty_signed_repository_once() {
    let (engine, repo) = new_repo();
    assert_eq!(repo.did(), key(1).public_key().to_did_key());
    assert_eq!(repo.record_count(), 0);
    assert_eq!(repo.head().data, Mst::new(MemoryBlocks::new()).root());
    let report = repo.check().unwrap();
    assert!(report.signature_checked);
    assert_eq!(report.blocks, 2, "the commit and the empty root node");
    let head = repo.head();
    let again = Repository::init_engine(engine.clone(), key(1)).unwrap();
    assert_eq!(again.head(), head, "init is idempotent");
    assert!(matches!(
        Repository::init_engine(engine, key(2)),
        Err(RepoError::IdentityMismatch { .. })
    ));
    assert!(matches!(
        Repository::open_engine(Arc::new(MemoryEngine::new()), None),
        Err(RepoError::NotInitialized { .. })
    ));
}

#[test]
fn list_rev_pages_one_collection_newest_first() {
    let (_engine, mut repo) = new_repo();
    // Neighbours on both sides: "thin/" sorts before "thing/", "thingz/"
    // after it.
    let mut writes: Vec<Write> = (0..30)
        .map(|i| Write::create(THING, format!("{i:03}"), thing(i)))
        .collect();
    for other in ["com.example.thin", "com.example.thingz"] {
        for rkey in ["000", "zzz"] {
            writes.push(Write::create(other, rkey, json!({"$type": other})));
        }
    }
    repo.apply(&writes).unwrap();
    let page = |before: Option<&str>, limit: usize| -> Vec<String> {
        repo.list_rev(THING, before)
            .unwrap()
            .take(limit)
            .map(|r| r.unwrap().0["com.example.thing/".len()..].to_owned())
            .collect()
    };
    // Pages of 7 with the last key as the cursor cover every record once.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let got = page(cursor.as_deref(), 7);
        seen.extend(got.iter().cloned());
        if got.len() < 7 {
            break;
        }
        cursor = got.last().cloned();
    }
    let want: Vec<String> = (0..30).rev().map(|i| format!("{i:03}")).collect();
    assert_eq!(seen, want);
    assert_eq!(page(Some("015"), 2), ["014", "013"]);
    assert_eq!(page(Some("0145"), 2), ["014", "013"]);
    assert_eq!(page(Some("000"), 5), Vec::<String>::new());
    assert_eq!(page(Some("~"), 1), ["029"]);
    assert!(
        repo.list_rev("com.example.none", None)
            .unwrap()
            .next()
            .is_none()
    );
    assert!(matches!(
        repo.list_rev("not an nsid", None).map(|_| ()),
        Err(RepoError::Record(RecordError::InvalidCollection { .. }))
    ));
}

#[test]
fn create_get_list_update_delete() {
    let (engine, mut repo) = new_repo();
    let first = repo
        .apply(&[
            Write::create(THING, "a", thing(1)),
            Write::create(THING, "b", thing(2)),
            Write::create(
                "com.example.other",
                "x",
                json!({"$type": "com.example.other"}),
            ),
        ])
        .unwrap();
    assert_eq!(first.ops.len(), 3);
    assert!(first.head.rev > first.prev.map(|_| Tid::from_u64(0)).unwrap());
    assert_eq!(repo.record_count(), 3);
    let a = repo.get(THING, "a").unwrap().unwrap();
    assert_eq!(a.value, thing(1));
    assert_eq!(repo.get(THING, "zz").unwrap(), None);
    let listed: Vec<String> = repo
        .list(Some(THING))
        .unwrap()
        .map(|r| r.unwrap().0)
        .collect();
    assert_eq!(listed, vec!["com.example.thing/a", "com.example.thing/b"]);
    assert_eq!(repo.list(None).unwrap().count(), 3);

    let rev1 = repo.head().rev;
    let second = repo
        .apply(&[
            Write::Update {
                collection: THING.into(),
                rkey: "a".into(),
                value: thing(10),
                swap: Some(a.cid),
            },
            Write::delete(THING, "b"),
        ])
        .unwrap();
    assert!(second.head.rev > rev1);
    assert_eq!(second.prev, Some(first.head.commit));
    assert_eq!(repo.get(THING, "a").unwrap().unwrap().value, thing(10));
    assert_eq!(repo.get(THING, "b").unwrap(), None);
    assert_eq!(repo.record_count(), 2);
    repo.check().unwrap();

    // Reopening sees the same state.
    let reopened = Repository::open_engine(engine, None).unwrap();
    assert_eq!(reopened.head(), repo.head());
    assert_eq!(reopened.record_count(), 2);
    assert!(!reopened.is_writable());
    reopened.check().unwrap();
}

#[test]
fn failed_batches_change_nothing() {
    let (engine, mut repo) = new_repo();
    let info = repo.apply(&[Write::create(THING, "a", thing(1))]).unwrap();
    let a = info.ops[0].cid.unwrap();
    let before = snapshot(&*engine);
    let head = repo.head();

    type Case = (Vec<Write>, fn(&RepoError) -> bool);
    let cases: Vec<Case> = vec![
        (
            vec![
                Write::create(THING, "new", thing(5)),
                Write::create(THING, "a", thing(2)),
            ],
            |e| matches!(e, RepoError::RecordExists { path } if path == "com.example.thing/a"),
        ),
        (vec![Write::update(THING, "missing", thing(1))], |e| {
            matches!(e, RepoError::RecordNotFound { .. })
        }),
        (vec![Write::delete(THING, "missing")], |e| {
            matches!(e, RepoError::RecordNotFound { .. })
        }),
        (
            vec![Write::Delete {
                collection: THING.into(),
                rkey: "a".into(),
                swap: Some(gelstore_model::cid_for_cbor(b"\xa0")),
            }],
            |e| matches!(e, RepoError::SwapMismatch { found: Some(_), .. }),
        ),
        (
            vec![Write::Update {
                collection: THING.into(),
                rkey: "missing".into(),
                value: thing(3),
                swap: Some(a),
            }],
            |e| matches!(e, RepoError::SwapMismatch { found: None, .. }),
        ),
        (vec![], |e| matches!(e, RepoError::EmptyBatch)),
        (vec![Write::create("Not An NSID", "a", thing(1))], |e| {
            matches!(e, RepoError::Record(RecordError::InvalidCollection { .. }))
        }),
        (vec![Write::create(THING, "a/b", thing(1))], |e| {
            matches!(e, RepoError::Record(RecordError::InvalidRkey { .. }))
        }),
        (
            vec![Write::create(THING, "c", json!({"$type": THING, "f": 0.5}))],
            |e| matches!(e, RepoError::Record(RecordError::DataModel { .. })),
        ),
        (
            vec![Write::create(
                "chat.gel.assistant.chat",
                "3lbqzcx2ss222",
                json!({"$type": "chat.gel.assistant.chat"}),
            )],
            |e| matches!(e, RepoError::Record(RecordError::Invalid { .. })),
        ),
    ];
    for (writes, expected) in cases {
        let err = repo.apply(&writes).unwrap_err();
        assert!(expected(&err), "{writes:?}: {err}");
        assert_eq!(repo.head(), head);
        assert_eq!(snapshot(&*engine), before, "{writes:?} changed the store");
    }
    let err = repo
        .apply_with(
            &[Write::create(THING, "z", thing(1))],
            Some(gelstore_model::cid_for_cbor(b"\xa0")),
        )
        .unwrap_err();
    assert!(matches!(err, RepoError::CommitSwapMismatch { .. }));
    assert_eq!(snapshot(&*engine), before);

    // The repository still works, and swap on the head passes.
    repo.apply_with(&[Write::create(THING, "z", thing(1))], Some(head.commit))
        .unwrap();
    repo.check().unwrap();
}

#[test]
fn known_lexicon_records_are_written_when_valid() {
    let (_, mut repo) = new_repo();
    let chat = json!({"$type": "chat.gel.assistant.chat", "createdAt": "2025-11-29T19:41:00.000Z"});
    repo.apply(&[Write::create(
        "chat.gel.assistant.chat",
        "3lbqzcx2ss222",
        chat.clone(),
    )])
    .unwrap();
    // The chat lexicon's key is a TID.
    let err = repo
        .apply(&[Write::create("chat.gel.assistant.chat", "not-a-tid", chat)])
        .unwrap_err();
    assert!(
        matches!(err, RepoError::Record(RecordError::Invalid { .. })),
        "{err}"
    );
}

#[test]
fn writes_in_a_batch_apply_in_order() {
    let (_, mut repo) = new_repo();
    let info = repo
        .apply(&[
            Write::create(THING, "a", thing(1)),
            Write::update(THING, "a", thing(2)),
            Write::create(THING, "gone", thing(3)),
            Write::delete(THING, "gone"),
        ])
        .unwrap();
    assert_eq!(info.ops.len(), 1);
    assert_eq!(repo.get(THING, "a").unwrap().unwrap().value, thing(2));
    assert_eq!(repo.record_count(), 1);
    let report = repo.check().unwrap();
    // commit + one node + one record: the intermediate record was never stored.
    assert_eq!(report.blocks, 3);
}

#[test]
fn shared_record_blocks_are_counted() {
    let (engine, mut repo) = new_repo();
    repo.apply(&[
        Write::create(THING, "a", thing(7)),
        Write::create(THING, "b", thing(7)),
    ])
    .unwrap();
    let cid = repo.get_cid(THING, "a").unwrap().unwrap();
    assert_eq!(repo.get_cid(THING, "b").unwrap(), Some(cid));
    repo.check().unwrap();
    repo.apply(&[Write::delete(THING, "a")]).unwrap();
    assert!(stored(&*engine, &cid).is_some());
    repo.check().unwrap();
    repo.apply(&[Write::delete(THING, "b")]).unwrap();
    assert!(stored(&*engine, &cid).is_none());
    let report = repo.check().unwrap();
    assert_eq!(report.blocks, 2);
}

#[test]
fn repeated_updates_do_not_grow_the_store() {
    let (engine, mut repo) = new_repo();
    let mut writes = Vec::new();
    for i in 0..300 {
        writes.push(Write::create(THING, format!("k{i:04}"), thing(i)));
    }
    repo.apply(&writes).unwrap();
    let blocks = engine.len(Table::Blocks) + engine.len(Table::Nodes);
    let bytes = engine.bytes(Table::Blocks)
        + engine.bytes(Table::Nodes)
        + engine.bytes(Table::Refs)
        + engine.bytes(Table::RevLog);
    for i in 0..2_000 {
        let info = repo
            .apply(&[Write::update(THING, "k0150", thing(1_000 + i))])
            .unwrap();
        assert_eq!(info.blocks.written, info.blocks.deleted);
    }
    assert_eq!(engine.len(Table::Blocks) + engine.len(Table::Nodes), blocks);
    assert_eq!(engine.len(Table::Refs), blocks);
    assert_eq!(engine.len(Table::RevLog), 0, "format 2 keeps no rev log");
    let after = engine.bytes(Table::Blocks)
        + engine.bytes(Table::Nodes)
        + engine.bytes(Table::Refs)
        + engine.bytes(Table::RevLog);
    assert!(after <= bytes + 64, "{bytes} -> {after}");
    repo.check().unwrap();
}

#[test]
fn export_import_round_trip_in_streamable_order() {
    let (_, mut repo) = new_repo();
    let mut writes = Vec::new();
    for i in 0..200 {
        writes.push(Write::create(THING, format!("r{i:03}"), thing(i % 50)));
    }
    repo.apply(&writes).unwrap();
    let bytes = export(&repo, None);
    let car = Car::from_slice(&bytes).unwrap();
    assert_eq!(car.roots, vec![repo.head().commit]);
    // The first block is the commit, the second the MST root.
    let mut reader = crate::car::CarReader::from_slice(&bytes, Default::default()).unwrap();
    assert_eq!(reader.next_block().unwrap().unwrap().0, repo.head().commit);
    assert_eq!(reader.next_block().unwrap().unwrap().0, repo.head().data);
    // 50 distinct records, each once.
    let stats = repo.export(Vec::new(), None).unwrap().1;
    assert_eq!(stats.blocks, car.blocks.len());

    let engine = Arc::new(MemoryEngine::new());
    let (copy, import) =
        Repository::import_engine(engine.clone(), None, bytes.as_slice(), &Default::default())
            .unwrap();
    assert_eq!(import.records, 200);
    assert_eq!(import.unreachable_blocks, 0);
    assert_eq!(copy.head(), repo.head());
    assert_eq!(copy.did(), repo.did());
    assert!(!copy.is_writable());
    copy.check().unwrap();
    assert_eq!(export(&copy, None), bytes);
    assert!(matches!(
        copy.clone_for_test_apply(),
        Err(RepoError::ReadOnly { .. })
    ));
    // A second import into the same store is refused.
    assert!(matches!(
        Repository::import_engine(engine, None, bytes.as_slice(), &Default::default()),
        Err(RepoError::NotEmpty { .. })
    ));
}

impl Repository {
    fn clone_for_test_apply(mut self) -> Result<CommitInfo, RepoError> {
        self.apply(&[Write::create(THING, "x", thing(1))])
    }
}

#[test]
fn import_takes_any_order_duplicates_and_extra_blocks() {
    let (_, mut repo) = new_repo();
    let mut writes = Vec::new();
    for i in 0..100 {
        writes.push(Write::create(THING, format!("r{i:03}"), thing(i)));
    }
    repo.apply(&writes).unwrap();
    let car = Car::from_slice(&export(&repo, None)).unwrap();
    let extra = gelstore_model::record_to_dag_cbor(&thing(-1)).unwrap();
    let extra_cid = gelstore_model::cid_for_cbor(&extra);
    // Reverse CID order, every block twice, one block nobody links.
    let mut w = crate::car::CarWriter::new(Vec::new(), &car.roots).unwrap();
    for (cid, block) in car.blocks.iter().rev() {
        w.write_block(cid, block).unwrap();
        w.write_block(cid, block).unwrap();
    }
    w.write_block(&extra_cid, &extra).unwrap();
    let shuffled = w.finish().unwrap();

    let engine = Arc::new(MemoryEngine::new());
    let (copy, stats) = Repository::import_engine(
        engine.clone(),
        Some(key(1)),
        shuffled.as_slice(),
        &Default::default(),
    )
    .unwrap();
    assert_eq!(stats.unreachable_blocks, 1);
    assert!(stored(&*engine, &extra_cid).is_none());
    assert!(copy.is_writable(), "the key of the DID makes it writable");
    copy.check().unwrap();
    let mut copy = copy;
    copy.apply(&[Write::delete(THING, "r050")]).unwrap();
    copy.check().unwrap();
}

#[test]
fn import_rejects_bad_cars_and_keeps_the_store_empty() {
    let (_, mut repo) = new_repo();
    repo.apply(&[Write::create(THING, "a", thing(1))]).unwrap();
    let car = Car::from_slice(&export(&repo, None)).unwrap();
    let engine = Arc::new(MemoryEngine::new());
    let try_import = |car: &Car, opts: &ImportOptions<'_>| {
        Repository::import_engine(engine.clone(), None, car.to_vec().unwrap().as_slice(), opts)
    };

    // A missing record.
    let mut missing = car.clone();
    let record = repo.get_cid(THING, "a").unwrap().unwrap();
    missing.blocks.remove(&record);
    assert!(matches!(
        try_import(&missing, &Default::default()),
        Err(RepoError::Verify(VerifyError::MissingRecord { .. }))
    ));
    // The wrong DID, the wrong key.
    assert!(matches!(
        try_import(
            &car,
            &ImportOptions {
                did: Some("did:plc:ewvi7nxzyoun6zhxrhs64oiz"),
                ..Default::default()
            }
        ),
        Err(RepoError::Verify(VerifyError::DidMismatch { .. }))
    ));
    let other = key(2).public_key();
    assert!(matches!(
        try_import(
            &car,
            &ImportOptions {
                key: Some(&other),
                ..Default::default()
            }
        ),
        Err(RepoError::Verify(VerifyError::BadSignature { .. }))
    ));
    // Two roots.
    let mut two = car.clone();
    two.roots.push(record);
    assert!(matches!(
        try_import(&two, &Default::default()),
        Err(RepoError::Verify(VerifyError::RootCount { count: 2 }))
    ));
    assert!(snapshot(&*engine).is_empty());
}

/// A repository of `n` records and its CAR.
fn car_of_things(n: i64) -> (Repository, Car) {
    let (_, mut repo) = new_repo();
    let writes: Vec<_> = (0..n)
        .map(|i| Write::create(THING, format!("r{i:04}"), thing(i)))
        .collect();
    repo.apply(&writes).unwrap();
    let car = Car::from_slice(&export(&repo, None)).unwrap();
    (repo, car)
}

#[test]
fn a_tree_that_fails_late_leaves_a_redb_store_empty() {
    // The last record is missing: the walk has handed thousands of blocks
    // to the writer before it fails, and the write must be rolled back.
    let (repo, mut car) = car_of_things(3000);
    let last = repo.get_cid(THING, "r2999").unwrap().unwrap();
    car.blocks.remove(&last);
    let dir = tempfile::tempdir().unwrap();
    let engine: Arc<dyn Engine> = Arc::new(gelstore_store::RedbEngine::open(dir.path()).unwrap());
    let bytes = car.to_vec().unwrap();
    assert!(matches!(
        Repository::import_engine(engine.clone(), None, bytes.as_slice(), &Default::default()),
        Err(RepoError::Verify(VerifyError::MissingRecord { .. }))
    ));
    assert!(snapshot(&*engine).is_empty());
    // The store takes the good CAR afterwards.
    let good = export(&repo, None);
    let (copy, stats) =
        Repository::import_engine(engine.clone(), None, good.as_slice(), &Default::default())
            .unwrap();
    assert_eq!(stats.records, 3000);
    copy.check().unwrap();
}

#[test]
fn a_failed_import_takes_away_the_store_it_created() {
    let (repo, mut car) = car_of_things(1500);
    let last = repo.get_cid(THING, "r1499").unwrap().unwrap();
    car.blocks.remove(&last);
    let bad = car.to_vec().unwrap();
    let tmp = tempfile::tempdir().unwrap();

    // A data folder that did not exist is gone again.
    let fresh = tmp.path().join("fresh");
    assert!(matches!(
        Repository::import(&fresh, bad.as_slice(), &Default::default()),
        Err(RepoError::Verify(VerifyError::MissingRecord { .. }))
    ));
    assert!(!fresh.exists());

    // In a folder that existed (with its key file), only the store goes.
    let kept = tmp.path().join("kept");
    key_file::create_private_dir(&kept).unwrap();
    key_file::store_key(&kept, &key(1)).unwrap();
    assert!(Repository::import(&kept, bad.as_slice(), &Default::default()).is_err());
    assert!(kept.is_dir() && !store_path(&kept).exists());
    assert!(key_file::load_key(&kept).unwrap().is_some());
    let good = export(&repo, None);
    let (copy, _) = Repository::import(&kept, good.as_slice(), &Default::default()).unwrap();
    assert!(copy.is_writable());
}

/// Gives `bytes`, after running `meanwhile` on the first read: what another
/// process may do while an import is still reading its CAR.
struct ReadAfter<'a, F: FnMut()> {
    meanwhile: Option<F>,
    bytes: &'a [u8],
}

impl<F: FnMut()> std::io::Read for ReadAfter<'_, F> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if let Some(mut meanwhile) = self.meanwhile.take() {
            meanwhile();
        }
        self.bytes.read(buf)
    }
}

#[test]
fn a_repository_made_while_the_car_is_read_is_left_alone() {
    let (repo, mut car) = car_of_things(300);
    let good = export(&repo, None);
    let last = repo.get_cid(THING, "r0299").unwrap().unwrap();
    car.blocks.remove(&last);
    let bad = car.to_vec().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    for (name, bytes) in [("good", &good), ("bad", &bad)] {
        let dir = tmp.path().join(name);
        let mut other_head = None;
        let reader = ReadAfter {
            meanwhile: Some(|| {
                let other = Repository::init(&dir).unwrap();
                other_head = Some(other.head().commit);
            }),
            bytes,
        };
        let imported = Repository::import(&dir, reader, &Default::default());
        assert!(
            matches!(imported, Err(RepoError::NotEmpty { .. })),
            "{name}: {imported:?}"
        );
        let other = Repository::open(&dir).unwrap();
        assert_eq!(Some(other.head().commit), other_head, "{name}");
        assert_eq!(other.record_count(), 0, "{name}");
    }
}

#[test]
fn since_exports_carry_what_changed() {
    let (_, mut repo) = new_repo();
    let mut writes = Vec::new();
    for i in 0..300 {
        writes.push(Write::create(THING, format!("r{i:03}"), thing(i)));
    }
    repo.apply(&writes).unwrap();
    let old_rev = repo.head().rev;
    let old = Car::from_slice(&export(&repo, None)).unwrap();
    let unchanged = repo.get_cid(THING, "r000").unwrap().unwrap();

    repo.apply(&[
        Write::update(THING, "r100", thing(-100)),
        Write::create(THING, "r999", thing(999)),
        Write::delete(THING, "r200"),
    ])
    .unwrap();
    let new = Car::from_slice(&export(&repo, None)).unwrap();
    let diff_bytes = export(&repo, Some(old_rev));
    let diff = Car::from_slice(&diff_bytes).unwrap();
    assert_eq!(diff.roots, vec![repo.head().commit]);
    // Old + diff covers the new repository; the diff is small and holds
    // nothing the old one had.
    for cid in new.blocks.keys() {
        assert!(
            old.blocks.contains_key(cid) || diff.blocks.contains_key(cid),
            "{cid} missing"
        );
    }
    assert!(!diff.blocks.contains_key(&unchanged));
    for cid in diff.blocks.keys() {
        assert!(!old.blocks.contains_key(cid));
    }
    assert!(diff.blocks.len() < 30, "{}", diff.blocks.len());
    let new_record = repo.get_cid(THING, "r999").unwrap().unwrap();
    assert!(diff.blocks.contains_key(&new_record));
    // The commit first, then the new root.
    let mut reader = crate::car::CarReader::from_slice(&diff_bytes, Default::default()).unwrap();
    assert_eq!(reader.next_block().unwrap().unwrap().0, repo.head().commit);
    assert_eq!(reader.next_block().unwrap().unwrap().0, repo.head().data);

    // Since the head: only the commit. Since long ago: everything.
    let at_head = Car::from_slice(&export(&repo, Some(repo.head().rev))).unwrap();
    assert_eq!(at_head.blocks.len(), 1);
    let all = Car::from_slice(&export(&repo, Some(Tid::from_u64(0)))).unwrap();
    let all_cids: BTreeSet<_> = all.blocks.keys().collect();
    let new_cids: BTreeSet<_> = new.blocks.keys().collect();
    assert_eq!(all_cids, new_cids);
}

#[test]
fn a_corrupt_store_is_reported() {
    let (engine, mut repo) = new_repo();
    repo.apply(&[
        Write::create(THING, "a", thing(1)),
        Write::create(THING, "b", thing(2)),
    ])
    .unwrap();
    repo.check().unwrap();
    // An orphan block, counted where it is kept.
    let orphan = gelstore_model::record_to_dag_cbor(&thing(3)).unwrap();
    let cid = gelstore_model::cid_for_cbor(&orphan);
    let loc = refs::Loc {
        kind: refs::Kind::Record,
        rev: repo.head().rev,
        n: 1_000,
    };
    let mut batch = Batch::new();
    batch.put(
        Table::Blocks,
        loc.key(),
        refs::block_row(&cid, orphan.clone()),
    );
    batch.put(
        Table::Refs,
        cid.to_bytes(),
        refs::RefRow { loc, count: 1 }.encode(),
    );
    engine.write(batch).unwrap();
    assert!(matches!(repo.check(), Err(RepoError::Corrupt(_))));
    let mut batch = Batch::new();
    batch.delete(Table::Blocks, loc.key());
    batch.delete(Table::Refs, cid.to_bytes());
    engine.write(batch).unwrap();
    repo.check().unwrap();
    // A block kept somewhere its count row does not say.
    let a = repo.get_cid(THING, "a").unwrap().unwrap();
    let row = refs::RefRow::decode(
        &a,
        &engine.get(Table::Refs, &a.to_bytes()).unwrap().unwrap(),
    )
    .unwrap();
    let moved = refs::RefRow {
        loc: refs::Loc {
            n: 2_000,
            ..row.loc
        },
        ..row
    };
    let mut batch = Batch::new();
    batch.put(Table::Refs, a.to_bytes(), moved.encode());
    engine.write(batch).unwrap();
    assert!(matches!(repo.check(), Err(RepoError::Corrupt(_))));
    let mut batch = Batch::new();
    batch.put(Table::Refs, a.to_bytes(), row.encode());
    engine.write(batch).unwrap();
    repo.check().unwrap();
    // A missing record.
    let mut batch = Batch::new();
    batch.delete(row.loc.kind.table(), row.loc.key());
    engine.write(batch).unwrap();
    assert!(matches!(repo.check(), Err(RepoError::Corrupt(_))));
}

#[test]
fn a_repository_of_another_did_is_signed_by_the_key_and_reopens_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let did = "did:web:localhost%3A2583";
    {
        let mut repo = Repository::init_as(dir.path(), did).unwrap();
        assert_eq!(repo.did(), did);
        repo.apply(&[Write::create(
            "app.example.thing",
            "a",
            serde_json::json!({"$type": "app.example.thing"}),
        )])
        .unwrap();
        let key = crate::key_file::load_key(dir.path()).unwrap().unwrap();
        repo.commit().unwrap().verify(&key.public_key()).unwrap();
    }
    let repo = Repository::open(dir.path()).unwrap();
    assert_eq!(repo.did(), did);
    assert!(repo.is_writable());
    assert!(matches!(
        Repository::init_as(tempfile::tempdir().unwrap().path(), "not a did"),
        Err(RepoError::InvalidDid { .. })
    ));
}

#[test]
fn the_nodes_table_is_repacked_once_as_many_nodes_were_written_as_it_holds() {
    let (engine, mut repo) = new_repo();
    let written = |engine: &MemoryEngine| {
        let raw = engine
            .get(Table::Meta, META_NODES_WRITTEN)
            .unwrap()
            .unwrap();
        u64::from_be_bytes(raw.try_into().unwrap())
    };
    let mut total = 0u64;
    let mut repacks = 0;
    for i in 0..1_500 {
        let info = repo
            .apply(&[Write::create(THING, format!("k{i:05}"), thing(i))])
            .unwrap();
        total += info.blocks.nodes_written as u64;
        if written(&engine) < info.blocks.nodes_written as u64 {
            repacks += 1;
        }
    }
    assert!(total > 2 * REPACK_MIN_NODES, "{total} nodes written");
    assert!(repacks >= 1, "{total} nodes written, never repacked");
    assert!(written(&engine) < REPACK_MIN_NODES);
    repo.check().unwrap();
    drop(repo);
    // The count carries over a reopen.
    let before = written(&engine);
    let mut repo = Repository::open_engine(engine.clone(), Some(key(1))).unwrap();
    let info = repo
        .apply(&[Write::create(THING, "after", thing(0))])
        .unwrap();
    assert_eq!(written(&engine), before + info.blocks.nodes_written as u64);
}
