//! The `#commit` event stream (issue 8): every commit's event, checked the
//! way a firehose consumer checks it (strict decoding, the lexicon's shape,
//! the inductive verifier from an empty repository on), cursors and
//! retention, and tampered frames.

#[allow(dead_code)]
use crate::generated;
use crate::support::fixtures;

use std::collections::BTreeMap;
use std::sync::Arc;

use gelstore::lexicon_runtime::Validate;
use gelstore::model::{self, Cid, Ipld};

use fixtures::split_frame;
use gelstore::crypto::{KeyAlgorithm, PublicKey, SigningKey};
use gelstore::repo::car::{Car, CarWriter};
use gelstore::repo::events::{
    CommitEvent, EventError, Frame, OpAction, RepoEvent, VerifyEventError, decode_frame,
    error_frame, info_frame, outdated_cursor_frame, verify_commit,
};
use gelstore::repo::mst::MstError;
use gelstore::repo::repository::{RepoError, Repository, Write};
use gelstore::store::MemoryEngine;
use generated::com::atproto::sync::subscribe_repos::{self, SubscribeReposMessage};
use serde_json::{Value, json};

const THING: &str = "com.example.thing";

fn key(seed: u8) -> SigningKey {
    SigningKey::from_bytes(KeyAlgorithm::K256, &[seed; 32]).unwrap()
}

fn thing(n: i64) -> Value {
    json!({"$type": THING, "n": n})
}

fn new_repo() -> Repository {
    Repository::init_engine(Arc::new(MemoryEngine::new()), key(7)).unwrap()
}

fn public(repo: &Repository) -> PublicKey {
    PublicKey::from_did_key(repo.did()).unwrap()
}

fn all_events(repo: &Repository) -> Vec<RepoEvent> {
    repo.events_since(Some(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn commit_of(event: &RepoEvent) -> CommitEvent {
    match decode_frame(&event.frame).unwrap() {
        Frame::Commit(c) => *c,
        other => panic!("not a #commit: {other:?}"),
    }
}

/// A mix of creates, updates, deletes and batches, including one whose
/// writes cancel out (a commit with no ops).
fn scripted_writes(repo: &mut Repository) {
    repo.apply(&[Write::create(THING, "a", thing(1))]).unwrap();
    repo.apply(&[Write::create(THING, "b", thing(2))]).unwrap();
    repo.apply(&[Write::update(THING, "a", thing(3))]).unwrap();
    let batch: Vec<Write> = (0..40)
        .map(|i| Write::create(THING, format!("k{i:03}"), thing(100 + i)))
        .collect();
    repo.apply(&batch).unwrap();
    repo.apply(&[Write::delete(THING, "b")]).unwrap();
    repo.apply(&[
        Write::create(THING, "c", thing(4)),
        Write::update(THING, "k007", thing(5)),
        Write::delete(THING, "k011"),
        Write::delete(THING, "k030"),
        Write::create(THING, "b", thing(2)),
    ])
    .unwrap();
    repo.apply(&[
        Write::create(THING, "tmp", thing(6)),
        Write::delete(THING, "tmp"),
    ])
    .unwrap();
    let dels: Vec<Write> = (0..40)
        .filter(|i| *i != 11 && *i != 30)
        .map(|i| Write::delete(THING, format!("k{i:03}")))
        .collect();
    repo.apply(&dels).unwrap();
}

#[test]
fn events_verify_inductively_from_an_empty_repo() {
    let mut repo = new_repo();
    let genesis_head = repo.head();
    scripted_writes(&mut repo);
    let events = all_events(&repo);
    assert_eq!(events.len(), 9, "the first commit and 8 applies");
    assert_eq!(repo.last_event_seq().unwrap(), Some(9));

    let key = public(&repo);
    let mut data: Option<Cid> = None;
    let mut rev: Option<String> = None;
    let mut roots = Vec::new();
    for (i, event) in events.iter().enumerate() {
        assert_eq!(event.seq, i as u64 + 1);
        let c = commit_of(event);
        assert_eq!(c.seq, event.seq);
        assert_eq!(c.time, event.time);
        assert_eq!(c.repo, repo.did());
        assert!(!c.rebase && !c.too_big && c.blobs.is_empty());
        assert_eq!(c.since, rev, "since is the previous rev");
        let verified =
            verify_commit(&c, data, &key).unwrap_or_else(|e| panic!("event {}: {e}", event.seq));
        if i == 0 {
            assert_eq!(verified.commit, genesis_head.commit);
            assert!(c.ops.is_empty() && c.prev_data.is_none());
        }
        data = Some(verified.data);
        roots.push(verified.data);
        rev = Some(verified.rev);
    }
    assert_eq!(data, Some(repo.head().data));
    assert_eq!(rev.unwrap(), repo.head().rev.to_string());
    // The cancelled-out batch is a commit with no ops; its root is the
    // previous one.
    let empty = commit_of(&events[7]);
    assert!(empty.ops.is_empty());
    assert_eq!(empty.prev_data, Some(roots[6]));
    assert_eq!(roots[7], roots[6]);
}

#[test]
fn ops_match_the_commit() {
    let mut repo = new_repo();
    let a = repo.apply(&[Write::create(THING, "a", thing(1))]).unwrap();
    let b = repo
        .apply(&[
            Write::update(THING, "a", thing(2)),
            Write::create(THING, "b", thing(3)),
        ])
        .unwrap();
    let c = repo.apply(&[Write::delete(THING, "a")]).unwrap();
    let events = all_events(&repo);
    assert_eq!((a.event_seq, b.event_seq, c.event_seq), (2, 3, 4));
    for (info, event) in [a, b, c].iter().zip(&events[1..]) {
        let e = commit_of(event);
        assert_eq!(e.commit, info.head.commit);
        assert_eq!(e.rev, info.head.rev.to_string());
        let ops: Vec<(OpAction, String, Option<Cid>, Option<Cid>)> = e
            .ops
            .iter()
            .map(|o| (o.action, o.path.clone(), o.cid, o.prev))
            .collect();
        let want: Vec<_> = info
            .ops
            .iter()
            .map(|o| {
                let action = match (o.prev, o.cid) {
                    (None, _) => OpAction::Create,
                    (Some(_), Some(_)) => OpAction::Update,
                    (Some(_), None) => OpAction::Delete,
                };
                (action, o.key.clone(), o.cid, o.prev)
            })
            .collect();
        assert_eq!(ops, want);
    }
    let actions: Vec<_> = commit_of(&events[2]).ops.iter().map(|o| o.action).collect();
    assert_eq!(actions, [OpAction::Update, OpAction::Create]);
    assert_eq!(commit_of(&events[3]).ops[0].action, OpAction::Delete);
}

fn keys(v: &Ipld) -> Vec<&str> {
    let Ipld::Map(m) = v else { panic!("not a map") };
    m.keys().map(String::as_str).collect()
}

#[test]
fn frames_have_the_lexicon_shape() {
    let mut repo = new_repo();
    scripted_writes(&mut repo);
    for event in all_events(&repo) {
        let (header, body) = split_frame(&event.frame);
        assert_eq!(
            header,
            Ipld::Map(BTreeMap::from([
                ("op".to_owned(), Ipld::Integer(1)),
                ("t".to_owned(), Ipld::String("#commit".into())),
            ]))
        );
        let mut want = vec![
            "ops", "rev", "seq", "repo", "time", "blobs", "since", "blocks", "commit", "rebase",
            "tooBig",
        ];
        if event.seq > 1 {
            want.push("prevData");
        }
        want.sort();
        assert_eq!(keys(&body), want, "event {}", event.seq);
        let Ipld::Map(m) = &body else { unreachable!() };
        let Ipld::List(ops) = &m["ops"] else {
            panic!("ops")
        };
        for op in ops {
            let Ipld::Map(o) = op else { panic!("op") };
            let action = &o["action"];
            let want: &[&str] = if *action == Ipld::String("create".into()) {
                &["action", "cid", "path"]
            } else {
                &["action", "cid", "path", "prev"]
            };
            assert_eq!(keys(op), want);
        }

        // The generated com.atproto types read it and it validates against
        // the subscribeRepos lexicon.
        let msg = SubscribeReposMessage::from_frame("#commit", body.clone()).unwrap();
        let SubscribeReposMessage::Commit(c) = &msg else {
            panic!("{msg:?}")
        };
        assert_eq!(c.seq, event.seq as i64);
        assert!(msg.validate().is_ok(), "{:?}", msg.validate());
        // It writes back to exactly the bytes we sent.
        assert_eq!(
            gelstore::lexicon_runtime::to_dag_cbor(c).unwrap(),
            model::encode_dag_cbor(&body).unwrap()
        );
        // And our own decoder gives back the same event.
        let ours = commit_of(&event);
        assert_eq!(ours.to_frame().unwrap(), event.frame);
    }
    assert_eq!(subscribe_repos::NSID, "com.atproto.sync.subscribeRepos");
}

#[test]
fn info_and_error_frames() {
    match decode_frame(&outdated_cursor_frame()).unwrap() {
        Frame::Info { name, message } => {
            assert_eq!(name, "OutdatedCursor");
            assert!(message.is_some());
        }
        other => panic!("{other:?}"),
    }
    let (header, body) = split_frame(&info_frame("OutdatedCursor", "m"));
    assert_eq!(keys(&header), ["op", "t"]);
    let msg = SubscribeReposMessage::from_frame("#info", body).unwrap();
    assert!(matches!(msg, SubscribeReposMessage::Info(_)));
    assert!(msg.validate().is_ok());

    let frame = error_frame("FutureCursor", "cursor in the future");
    let (header, body) = split_frame(&frame);
    assert_eq!(
        header,
        Ipld::Map(BTreeMap::from([("op".to_owned(), Ipld::Integer(-1))]))
    );
    assert_eq!(keys(&body), ["error", "message"]);
    assert_eq!(
        decode_frame(&frame).unwrap(),
        Frame::Error {
            error: "FutureCursor".into(),
            message: Some("cursor in the future".into())
        }
    );
}

#[test]
fn cursors_replay_from_after_the_cursor_and_tail_new_events() {
    let mut repo = new_repo();
    for i in 0..5 {
        repo.apply(&[Write::create(THING, format!("r{i}"), thing(i))])
            .unwrap();
    }
    assert_eq!(repo.last_event_seq().unwrap(), Some(6));
    // No cursor: live only, no backlog.
    assert_eq!(repo.events_since(None).unwrap().count(), 0);
    let seqs = |cursor| -> Vec<u64> {
        repo.events_since(Some(cursor))
            .unwrap()
            .map(|e| e.unwrap().seq)
            .collect()
    };
    assert_eq!(seqs(0), [1, 2, 3, 4, 5, 6]);
    assert_eq!(seqs(4), [5, 6]);
    assert_eq!(seqs(6), Vec::<u64>::new());
    assert!(matches!(
        repo.events_since(Some(7)).map(drop),
        Err(RepoError::FutureCursor { cursor: 7, last: 6 })
    ));
    assert!(!repo.is_outdated_cursor(0).unwrap());

    // A reader that caught up sees later events when polled again; it does
    // not borrow the repository.
    let mut reader = repo.events_since(Some(6)).unwrap();
    assert!(reader.next().is_none());
    repo.apply(&[Write::create(THING, "later", thing(9))])
        .unwrap();
    let next = reader.next().unwrap().unwrap();
    assert_eq!(next.seq, 7);
    assert!(commit_of(&next).ops[0].path.ends_with("/later"));
    assert!(reader.next().is_none());
}

#[test]
fn sequence_numbers_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut repo = Repository::init(dir.path()).unwrap();
        repo.apply(&[Write::create(THING, "a", thing(1))]).unwrap();
    }
    let mut repo = Repository::open(dir.path()).unwrap();
    assert_eq!(repo.last_event_seq().unwrap(), Some(2));
    let info = repo.apply(&[Write::create(THING, "b", thing(2))]).unwrap();
    assert_eq!(info.event_seq, 3);
    let key = public(&repo);
    let mut data = None;
    for e in all_events(&repo) {
        data = Some(verify_commit(&commit_of(&e), data, &key).unwrap().data);
    }
    assert_eq!(data, Some(repo.head().data));
}

#[test]
fn a_bytes_window_bounds_the_log_and_a_reopened_store_prunes_to_its_window() {
    let dir = tempfile::tempdir().unwrap();
    let mut repo = Repository::init(dir.path()).unwrap();
    assert_eq!(
        repo.event_retention_bytes(),
        gelstore::repo::events::DEFAULT_RETENTION_BYTES
    );
    repo.set_event_retention_bytes(20_000);
    for i in 0..60 {
        let text = "x".repeat(500);
        repo.apply(&[Write::create(
            THING,
            format!("r{i:02}"),
            json!({"$type": THING, "n": i, "text": text}),
        )])
        .unwrap();
    }
    let (count, bytes) = repo.event_window().unwrap();
    let stored: u64 = repo
        .engine()
        .scan(gelstore::store::Table::Events, b"")
        .map(|r| r.map(|(k, v)| (k.len() + v.len()) as u64).unwrap())
        .sum();
    assert_eq!(bytes, stored, "the window's bytes are the rows'");
    assert!(bytes <= 20_000, "{bytes}");
    assert!(count > 1 && count < 60, "{count}");
    let kept: Vec<u64> = all_events(&repo).iter().map(|e| e.seq).collect();
    assert_eq!(kept.last(), Some(&61));
    assert_eq!(kept.len() as u64, count);
    assert!(kept.windows(2).all(|w| w[1] == w[0] + 1), "{kept:?}");

    // Below the newest event's own size, the window still keeps it.
    repo.set_event_retention_bytes(1);
    repo.apply(&[Write::create(THING, "one", thing(1))])
        .unwrap();
    let kept: Vec<u64> = all_events(&repo).iter().map(|e| e.seq).collect();
    assert_eq!(kept, [62]);
    drop(repo);

    // A store written with a larger window: the reopened one, with a
    // smaller count, prunes down at its first commit.
    let mut repo = Repository::open(dir.path()).unwrap();
    for i in 0..4 {
        repo.apply(&[Write::create(THING, format!("z{i}"), thing(i))])
            .unwrap();
    }
    repo.set_event_retention(2);
    repo.apply(&[Write::create(THING, "last", thing(0))])
        .unwrap();
    let kept: Vec<u64> = all_events(&repo).iter().map(|e| e.seq).collect();
    assert_eq!(kept, [66, 67]);
    assert_eq!(repo.event_window().unwrap().0, 2);
    repo.check().unwrap();
}

/// An engine that counts the `Events` rows read through it.
struct CountingEngine {
    inner: Arc<MemoryEngine>,
    event_rows_read: std::sync::atomic::AtomicUsize,
}

impl CountingEngine {
    fn count(&self, table: gelstore::store::Table) {
        if table == gelstore::store::Table::Events {
            self.event_rows_read
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl gelstore::store::Engine for CountingEngine {
    fn get(
        &self,
        table: gelstore::store::Table,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, gelstore::store::EngineError> {
        self.count(table);
        self.inner.get(table, key)
    }
    fn scan(&self, table: gelstore::store::Table, start: &[u8]) -> gelstore::store::Scan<'_> {
        Box::new(
            self.inner
                .scan(table, start)
                .inspect(move |_| self.count(table)),
        )
    }
    fn write(&self, batch: gelstore::store::Batch) -> Result<(), gelstore::store::EngineError> {
        self.inner.write(batch)
    }
    fn size_on_disk(&self) -> Result<u64, gelstore::store::EngineError> {
        self.inner.size_on_disk()
    }
    fn name(&self) -> &'static str {
        "counting"
    }
}

#[test]
fn a_reopened_store_learns_its_window_from_the_sizes_not_the_events() {
    use gelstore::store::{Batch, Engine, Table};
    let memory = Arc::new(MemoryEngine::new());
    let mut repo = Repository::init_engine(memory.clone(), key(7)).unwrap();
    for i in 0..40 {
        repo.apply(&[Write::create(THING, format!("r{i:02}"), thing(i))])
            .unwrap();
    }
    let window = repo.event_window().unwrap();
    drop(repo);
    // Each events row's key and its bytes (key and value).
    let event_rows = |engine: &MemoryEngine| -> Vec<(Vec<u8>, u64)> {
        engine
            .scan(Table::Events, b"")
            .map(|row| {
                let (key, value) = row.unwrap();
                let bytes = (key.len() + value.len()) as u64;
                (key, bytes)
            })
            .collect()
    };
    let sizes = |engine: &MemoryEngine| -> Vec<(Vec<u8>, u64)> {
        engine
            .scan(Table::EventSizes, b"")
            .map(|row| {
                let (key, value) = row.unwrap();
                (key, u64::from_be_bytes(value.try_into().unwrap()))
            })
            .collect()
    };
    let rows = event_rows(&memory);
    assert_eq!(sizes(&memory), rows, "one size row per event row");

    // Reopened and appended to: the window comes from the sizes, and of
    // the events only the oldest is looked at.
    let counting = Arc::new(CountingEngine {
        inner: memory.clone(),
        event_rows_read: Default::default(),
    });
    let mut repo = Repository::open_engine(counting.clone(), Some(key(7))).unwrap();
    assert_eq!(repo.event_window().unwrap(), window);
    repo.set_event_retention(10);
    repo.apply(&[Write::create(THING, "later", thing(0))])
        .unwrap();
    let read = counting
        .event_rows_read
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(read <= 1, "{read} event rows read to learn the window");
    let kept: Vec<u64> = all_events(&repo).iter().map(|e| e.seq).collect();
    assert_eq!(kept, (33..=42).collect::<Vec<u64>>());
    drop(repo);
    assert_eq!(
        sizes(&memory).len(),
        10,
        "pruned sizes go with their events"
    );

    // A store whose sizes are missing or stale (written by a build without
    // them): counted from the events once, and the sizes rewritten.
    let mut batch = Batch::new();
    batch.delete(Table::EventSizes, 35u64.to_be_bytes());
    batch.put(Table::EventSizes, 5u64.to_be_bytes(), 1u64.to_be_bytes());
    memory.write(batch).unwrap();
    let mut repo = Repository::open_engine(memory.clone(), Some(key(7))).unwrap();
    let before = repo.event_window().unwrap();
    let stored: u64 = event_rows(&memory).iter().map(|(_, bytes)| bytes).sum();
    assert_eq!(before, (10, stored));
    repo.apply(&[Write::create(THING, "again", thing(0))])
        .unwrap();
    drop(repo);
    let rows = event_rows(&memory);
    assert_eq!(
        rows.len(),
        11,
        "the count window is per handle: back to the default"
    );
    assert_eq!(sizes(&memory), rows, "the sizes are whole again");
}

#[test]
fn retention_keeps_the_last_events_and_flags_outdated_cursors() {
    let mut repo = new_repo();
    repo.set_event_retention(5);
    for i in 0..20 {
        repo.apply(&[Write::create(THING, format!("r{i:02}"), thing(i))])
            .unwrap();
    }
    assert_eq!(repo.last_event_seq().unwrap(), Some(21));
    assert_eq!(repo.oldest_event_seq().unwrap(), Some(17));
    let kept: Vec<u64> = all_events(&repo).iter().map(|e| e.seq).collect();
    assert_eq!(
        kept,
        [17, 18, 19, 20, 21],
        "an outdated cursor replays what is kept"
    );
    assert!(repo.is_outdated_cursor(0).unwrap());
    assert!(repo.is_outdated_cursor(15).unwrap());
    assert!(!repo.is_outdated_cursor(16).unwrap());
    assert!(!repo.is_outdated_cursor(21).unwrap());
    let total = repo
        .engine()
        .scan(gelstore::store::Table::Events, b"")
        .count();
    assert_eq!(total, 5);

    // Lowering the retention prunes down at the next commit.
    repo.set_event_retention(2);
    repo.apply(&[Write::create(THING, "x", thing(0))]).unwrap();
    let kept: Vec<u64> = all_events(&repo).iter().map(|e| e.seq).collect();
    assert_eq!(kept, [21, 22]);

    // A reader that falls more than the retention behind gets a named error.
    let mut reader = repo.events_since(Some(20)).unwrap();
    assert_eq!(reader.next().unwrap().unwrap().seq, 21);
    for i in 0..3 {
        repo.apply(&[Write::create(THING, format!("y{i}"), thing(i))])
            .unwrap();
    }
    // The reader had buffered seq 22 in its page; after it, the gap shows.
    let mut saw_gap = false;
    for item in reader.by_ref() {
        match item {
            Ok(_) => {}
            Err(RepoError::EventsPruned { .. }) => saw_gap = true,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(saw_gap, "pruned events under a reader are reported");
}

/// A repository with some history and its last event (an update, a
/// create and a delete in one commit), with the root before it.
fn last_commit() -> (Repository, CommitEvent, Cid) {
    let mut repo = new_repo();
    let batch: Vec<Write> = (0..30)
        .map(|i| Write::create(THING, format!("k{i:02}"), thing(i)))
        .collect();
    repo.apply(&batch).unwrap();
    let before = repo.head().data;
    repo.apply(&[
        Write::update(THING, "k03", thing(100)),
        Write::create(THING, "new", thing(101)),
        Write::delete(THING, "k17"),
    ])
    .unwrap();
    let event = commit_of(all_events(&repo).last().unwrap());
    verify_commit(&event, Some(before), &public(&repo)).unwrap();
    (repo, event, before)
}

/// `event` with its blocks CAR rebuilt from `car` (roots kept).
fn with_blocks(event: &CommitEvent, car: &Car) -> CommitEvent {
    let mut w = CarWriter::new(Vec::new(), &car.roots).unwrap();
    for (cid, bytes) in &car.blocks {
        w.write_block(cid, bytes).unwrap();
    }
    CommitEvent {
        blocks: w.finish().unwrap(),
        ..event.clone()
    }
}

#[test]
fn tampered_events_get_named_errors() {
    let (repo, event, before) = last_commit();
    let key = public(&repo);
    let check = |e: &CommitEvent| verify_commit(e, Some(before), &key);

    // Wrong prevData, on either side.
    let other = repo.head().data;
    assert!(matches!(
        verify_commit(&event, Some(other), &key),
        Err(VerifyEventError::PrevDataMismatch { .. })
    ));
    let lying = CommitEvent {
        prev_data: Some(other),
        ..event.clone()
    };
    assert!(matches!(
        verify_commit(&lying, Some(other), &key),
        Err(VerifyEventError::InvertedRootMismatch { .. })
    ));
    assert!(matches!(
        verify_commit(&event, None, &key),
        Err(VerifyEventError::UnexpectedPrevData { .. })
    ));

    // Another key, another repo, another rev.
    let stranger = key_public(9);
    assert!(matches!(
        verify_commit(&event, Some(before), &stranger),
        Err(VerifyEventError::BadSignature(_))
    ));
    let e = CommitEvent {
        repo: "did:plc:ewvi7nxzyoun6zhxrhs64oiz".into(),
        ..event.clone()
    };
    assert!(matches!(
        check(&e),
        Err(VerifyEventError::RepoMismatch { .. })
    ));
    let e = CommitEvent {
        rev: "3lbqzcx2ss222".into(),
        ..event.clone()
    };
    assert!(matches!(
        check(&e),
        Err(VerifyEventError::RevMismatch { .. })
    ));
    let e = CommitEvent {
        too_big: true,
        ..event.clone()
    };
    assert!(matches!(check(&e), Err(VerifyEventError::TooBig)));

    // Missing blocks: the commit, a record, an MST node.
    let car = Car::from_slice(&event.blocks).unwrap();
    let mut no_commit = car.clone();
    no_commit.blocks.remove(&event.commit);
    assert!(matches!(
        check(&with_blocks(&event, &no_commit)),
        Err(VerifyEventError::MissingCommitBlock(_))
    ));
    let created = event
        .ops
        .iter()
        .find(|o| o.action == OpAction::Create)
        .unwrap();
    let mut no_record = car.clone();
    no_record.blocks.remove(&created.cid.unwrap());
    assert!(matches!(
        check(&with_blocks(&event, &no_record)),
        Err(VerifyEventError::MissingRecordBlock { .. })
    ));
    let records: Vec<Cid> = event.ops.iter().filter_map(|o| o.cid).collect();
    let nodes: Vec<Cid> = car
        .blocks
        .keys()
        .filter(|c| **c != event.commit && !records.contains(c))
        .copied()
        .collect();
    assert!(nodes.len() >= 2, "{nodes:?}");
    for node in &nodes {
        let mut no_node = car.clone();
        no_node.blocks.remove(node);
        match check(&with_blocks(&event, &no_node)) {
            Err(VerifyEventError::Inversion(MstError::MissingBlock { .. })) => {}
            other => panic!("without node {node}: {other:?}"),
        }
    }

    // Ops that do not match the tree: one left out, one with another CID,
    // one twice.
    let mut fewer = event.clone();
    fewer.ops.retain(|o| o.action != OpAction::Delete);
    assert!(matches!(
        check(&fewer),
        Err(VerifyEventError::InvertedRootMismatch { .. })
    ));
    let mut swapped = event.clone();
    let actions: Vec<_> = swapped.ops.iter().map(|o| o.action).collect();
    assert_eq!(
        actions,
        [OpAction::Update, OpAction::Delete, OpAction::Create]
    );
    let (a, b) = (swapped.ops[0].cid, swapped.ops[2].cid);
    swapped.ops[0].cid = b;
    swapped.ops[2].cid = a;
    assert!(matches!(
        check(&swapped),
        Err(VerifyEventError::Inversion(MstError::OpMismatch { .. }))
    ));
    let mut twice = event.clone();
    twice.ops.push(twice.ops[0].clone());
    assert!(matches!(check(&twice), Err(VerifyEventError::BadOp { .. })));
    let mut no_prev = event.clone();
    no_prev.ops[0].prev = None;
    assert!(matches!(
        check(&no_prev),
        Err(VerifyEventError::BadOp { .. })
    ));
    let mut delete_with_cid = event.clone();
    delete_with_cid.ops[1].cid = event.ops[0].cid;
    assert!(matches!(
        check(&delete_with_cid),
        Err(VerifyEventError::BadOp { .. })
    ));
}

fn key_public(seed: u8) -> PublicKey {
    key(seed).public_key()
}

#[test]
fn every_flipped_byte_in_blocks_is_caught() {
    let (repo, event, before) = last_commit();
    let key = public(&repo);
    let mut bad_blocks = 0;
    for i in 0..event.blocks.len() {
        let mut e = event.clone();
        e.blocks[i] ^= 0x01;
        match verify_commit(&e, Some(before), &key) {
            Ok(v) => panic!("flipping byte {i} of blocks still verifies: {v:?}"),
            Err(VerifyEventError::BadBlocks(_)) => bad_blocks += 1,
            Err(_) => {}
        }
        // And the frame carrying it still decodes (blocks are opaque
        // there), to the tampered event.
        assert_eq!(
            decode_frame(&e.to_frame().unwrap()).unwrap(),
            Frame::Commit(Box::new(e))
        );
    }
    // A flip inside block data breaks its hash: the CAR reader names it.
    assert!(bad_blocks > event.blocks.len() / 2, "{bad_blocks}");
}

#[test]
fn malformed_frames_get_named_errors_never_panics() {
    let (repo, _, _) = last_commit();
    let frame = all_events(&repo).pop().unwrap().frame;
    assert!(matches!(decode_frame(&[]), Err(EventError::Header(_))));
    let (header, body) = split_frame(&frame);
    let header_bytes = model::encode_dag_cbor(&header).unwrap();
    assert!(matches!(
        decode_frame(&header_bytes),
        Err(EventError::NoBody)
    ));
    let mut trailing = frame.clone();
    trailing.push(0);
    assert!(matches!(decode_frame(&trailing), Err(EventError::Body(_))));
    let op2 = model::encode_dag_cbor(&Ipld::Map(BTreeMap::from([(
        "op".to_owned(),
        Ipld::Integer(2),
    )])))
    .unwrap();
    let body_bytes = model::encode_dag_cbor(&body).unwrap();
    assert!(matches!(
        decode_frame(&[op2, body_bytes.clone()].concat()),
        Err(EventError::BadHeader(_))
    ));
    let Ipld::Map(mut m) = body.clone() else {
        unreachable!()
    };
    m.remove("rev");
    let no_rev = model::encode_dag_cbor(&Ipld::Map(m.clone())).unwrap();
    assert!(matches!(
        decode_frame(&[header_bytes.clone(), no_rev].concat()),
        Err(EventError::BadField { field: "rev", .. })
    ));
    m.insert("rev".into(), Ipld::String("not-a-tid".into()));
    let bad_rev = model::encode_dag_cbor(&Ipld::Map(m.clone())).unwrap();
    assert!(matches!(
        decode_frame(&[header_bytes.clone(), bad_rev].concat()),
        Err(EventError::BadField { field: "rev", .. })
    ));
    m.insert("rev".into(), Ipld::String("3lbqzcx2ss222".into()));
    m.insert("ops".into(), Ipld::List(vec![Ipld::Integer(1)]));
    let bad_op = model::encode_dag_cbor(&Ipld::Map(m)).unwrap();
    assert!(matches!(
        decode_frame(&[header_bytes, bad_op].concat()),
        Err(EventError::BadOp { index: 0, .. })
    ));
    // Every truncation and every single flipped byte: an error or a frame,
    // never a panic.
    for n in 0..frame.len() {
        assert!(decode_frame(&frame[..n]).is_err(), "prefix {n}");
    }
    for i in 0..frame.len() {
        let mut f = frame.clone();
        f[i] ^= 0x80;
        let _ = decode_frame(&f);
    }
}

/// The fuzz target's property (`fuzz/fuzz_targets/repo_event_frame.rs`);
/// returns whether the input decoded.
fn check_frame(name: &str, data: &[u8]) -> bool {
    let Ok(frame) = decode_frame(data) else {
        return false;
    };
    match &frame {
        Frame::Commit(commit) => {
            let again = commit.to_frame().unwrap();
            assert_eq!(decode_frame(&again).unwrap(), frame, "{name}");
            let key = key_public(0x11);
            let _ = verify_commit(commit, commit.prev_data, &key);
            let _ = verify_commit(commit, None, &key);
        }
        Frame::Info { name: n, message } => {
            let again = info_frame(n, message.as_deref().unwrap_or(""));
            assert!(
                matches!(decode_frame(&again), Ok(Frame::Info { .. })),
                "{name}"
            );
        }
        Frame::Error { error, message } => {
            let again = error_frame(error, message.as_deref().unwrap_or(""));
            assert!(
                matches!(decode_frame(&again), Ok(Frame::Error { .. })),
                "{name}"
            );
        }
        Frame::Other { .. } => {}
    }
    true
}

/// The seeds of the `repo_event_frame` fuzz target: `valid-*` decode, the
/// others are rejected, none panics. `GELSTORE_WRITE_EVENT_SEEDS=1`
/// rewrites them from a fresh repository.
#[test]
fn fuzz_seeds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/repo_event_frame");
    if std::env::var("GELSTORE_WRITE_EVENT_SEEDS").is_ok() {
        std::fs::create_dir_all(&dir).unwrap();
        let (repo, _, _) = last_commit();
        let events = all_events(&repo);
        let last = events.last().unwrap().frame.clone();
        let write = |name: &str, bytes: &[u8]| std::fs::write(dir.join(name), bytes).unwrap();
        write("valid-genesis.bin", &events[0].frame);
        write("valid-commit.bin", &last);
        write("valid-info.bin", &outdated_cursor_frame());
        write("valid-error.bin", &error_frame("FutureCursor", "too far"));
        write("truncated.bin", &last[..last.len() / 2]);
        let (header, _) = split_frame(&last);
        write("header-only.bin", &model::encode_dag_cbor(&header).unwrap());
        let mut flipped = last.clone();
        flipped[0] ^= 0xff;
        write("flipped.bin", &flipped);
    }
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let data = std::fs::read(&path).unwrap();
        let accepted = check_frame(&name, &data);
        assert_eq!(accepted, name.starts_with("valid-"), "{name}");
        seen += 1;
    }
    assert!(seen >= 7, "{seen} seeds");
}

#[test]
fn check_finds_an_event_log_that_does_not_match_the_commits() {
    let mut repo = new_repo();
    scripted_writes(&mut repo);
    repo.check().unwrap();
    let events = all_events(&repo);
    // The newest event replaced by an older one's frame: it no longer
    // belongs to the head commit.
    let mut batch = gelstore::store::Batch::new();
    batch.put(
        gelstore::store::Table::Events,
        9u64.to_be_bytes(),
        [&[24u8][..], events[3].time.as_bytes(), &events[3].frame].concat(),
    );
    repo.engine().write(batch).unwrap();
    let err = repo.check().unwrap_err();
    assert!(err.to_string().contains("not the head commit"), "{err}");
    // A missing middle event is a gap.
    let mut batch = gelstore::store::Batch::new();
    batch.delete(gelstore::store::Table::Events, 5u64.to_be_bytes());
    repo.engine().write(batch).unwrap();
    let err = repo.check().unwrap_err();
    assert!(err.to_string().contains("gap"), "{err}");
}

#[test]
fn a_commit_over_the_op_limit_is_sent_too_big() {
    use gelstore::repo::events::MAX_OPS;
    let mut repo = new_repo();
    let batch: Vec<Write> = (0..=MAX_OPS)
        .map(|i| Write::create(THING, format!("k{i:04}"), thing(i as i64)))
        .collect();
    let big = repo.apply(&batch).unwrap();
    assert_eq!(big.ops.len(), MAX_OPS + 1);
    repo.apply(&[Write::create(THING, "after", thing(1))])
        .unwrap();
    let events = all_events(&repo);
    let e = commit_of(&events[1]);
    assert!(e.too_big);
    assert!(e.ops.is_empty(), "a tooBig event carries no ops");
    let car = Car::from_slice(&e.blocks).unwrap();
    assert_eq!(car.roots, [big.head.commit]);
    assert_eq!(car.blocks.len(), 1, "only the commit block");
    let key = public(&repo);
    assert!(matches!(
        verify_commit(&e, e.prev_data, &key),
        Err(VerifyEventError::TooBig)
    ));
    // The lexicon still accepts it.
    let (_, body) = split_frame(&events[1].frame);
    let msg = SubscribeReposMessage::from_frame("#commit", body).unwrap();
    assert!(msg.validate().is_ok());
    // A consumer that fetched the repository after it goes on from its root.
    let next = commit_of(&events[2]);
    assert_eq!(next.prev_data, Some(big.head.data));
    verify_commit(&next, Some(big.head.data), &key).unwrap();
}
