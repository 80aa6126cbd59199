//! The `#commit` event stream (issue 8): every commit's event, checked the
//! way a firehose consumer checks it (strict decoding, the lexicon's shape,
//! the inductive verifier from an empty repository on), cursors and
//! retention, and tampered frames.

#[allow(dead_code)]
#[path = "generated_atproto/mod.rs"]
mod generated;

use std::collections::BTreeMap;
use std::sync::Arc;

use gelstore::lexicon::support::Validate;
use gelstore::model::{self, Cid, Ipld};

use gelstore::repo::events::{
    CommitEvent, Frame, OpAction, RepoEvent, decode_frame, error_frame, info_frame,
    outdated_cursor_frame, verify_commit,
};
use gelstore::repo::keys::{KeyAlgorithm, PublicKey, SigningKey};
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

/// The header and the raw body of a frame.
fn split_frame(frame: &[u8]) -> (Ipld, Ipld) {
    let at = match model::decode_dag_cbor(frame) {
        Err(model::DataModelError::TrailingBytes { offset, .. }) => offset,
        other => panic!("a frame is two items: {other:?}"),
    };
    (
        model::decode_dag_cbor(&frame[..at]).unwrap(),
        model::decode_dag_cbor(&frame[at..]).unwrap(),
    )
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
            gelstore::lexicon::support::to_dag_cbor(c).unwrap(),
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
