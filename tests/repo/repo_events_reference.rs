//! Our `#commit` frames checked by the reference TypeScript packages
//! (`tests/reference/firehose-ref.mjs`: @atproto/lex-cbor decodes the
//! message, @atproto/repo reads the CAR, checks the signature, runs
//! `verifyProofs` on the ops and inverts them on the MST to `prevData`).
//!
//! Needs Node (20+) and npm. The first run installs the harness with
//! `npm ci` into `tests/reference/node_modules`.

use crate::support::launch;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};

use base64::Engine as _;
use gelstore::crypto::{KeyAlgorithm, SigningKey};
use gelstore::model::{Ipld, decode_dag_cbor, encode_dag_cbor};
use gelstore::repo::repository::{Repository, Write};
use gelstore::store::MemoryEngine;
use serde_json::{Value, json};

const THING: &str = "com.example.thing";

fn harness() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference");
        if !dir
            .join("node_modules/@atproto/lex-cbor/package.json")
            .exists()
        {
            launch::npm_ci(&dir, &[], "the reference event tests (tests/reference)");
        }
        dir
    })
}

/// Runs the reference check on `frames`; one result per frame.
fn reference_check(repo: &Repository, frames: &[Vec<u8>]) -> Vec<Value> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let input = json!({"frames": frames.iter().map(|f| b64.encode(f)).collect::<Vec<_>>()});
    let mut child = Command::new("node")
        .args(["firehose-ref.mjs", repo.did(), repo.did()])
        .current_dir(harness())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run node ({e}): Node 20+ must be on PATH"));
    let body = input.to_string();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(body.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        out.status.success(),
        "firehose-ref.mjs failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["results"].as_array().unwrap().clone()
}

fn thing(n: i64) -> Value {
    json!({"$type": THING, "n": n, "text": "x".repeat((n as usize * 37) % 300)})
}

#[test]
fn reference_consumer_accepts_our_commit_frames() {
    let key = SigningKey::from_bytes(KeyAlgorithm::K256, &[5; 32]).unwrap();
    let mut repo = Repository::init_engine(Arc::new(MemoryEngine::new()), key).unwrap();
    // Creates one by one and in a batch, updates, deletes, and mixed
    // batches over a tree big enough to have several layers.
    for i in 0..10 {
        repo.apply(&[Write::create(THING, format!("a{i:03}"), thing(i))])
            .unwrap();
    }
    let batch: Vec<Write> = (0..150)
        .map(|i| Write::create(THING, format!("b{i:03}"), thing(i)))
        .collect();
    repo.apply(&batch).unwrap();
    for i in (0..150).step_by(7) {
        repo.apply(&[
            Write::update(THING, format!("b{i:03}"), thing(i + 1000)),
            Write::delete(THING, format!("b{:03}", (i + 3) % 150)),
            Write::create(THING, format!("c{i:03}"), thing(i)),
        ])
        .unwrap();
    }
    let deletes: Vec<Write> = (0..10)
        .map(|i| Write::delete(THING, format!("a{i:03}")))
        .collect();
    repo.apply(&deletes).unwrap();

    let frames: Vec<Vec<u8>> = repo
        .events_since(Some(0))
        .unwrap()
        .map(|e| e.unwrap().frame)
        .collect();
    assert_eq!(frames.len(), 1 + 10 + 1 + 22 + 1);
    let results = reference_check(&repo, &frames);
    assert_eq!(results.len(), frames.len());
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["ok"], true, "frame {}: {r}", i + 1);
    }

    // The check has teeth: a frame whose prevData is another root fails.
    let last = frames.last().unwrap();
    let at = match decode_dag_cbor(last) {
        Err(gelstore::model::DataModelError::TrailingBytes { offset, .. }) => offset,
        other => panic!("{other:?}"),
    };
    let Ipld::Map(mut body) = decode_dag_cbor(&last[at..]).unwrap() else {
        panic!("body")
    };
    let Ipld::Link(data) = body["prevData"].clone() else {
        panic!("prevData")
    };
    let other = repo.head().data;
    assert_ne!(data, other);
    body.insert("prevData".into(), Ipld::Link(other));
    let mut tampered = last[..at].to_vec();
    tampered.extend(encode_dag_cbor(&Ipld::Map(body)).unwrap());
    let results = reference_check(&repo, &[tampered]);
    assert_eq!(results[0]["ok"], false, "{}", results[0]);
    assert!(
        results[0]["error"].as_str().unwrap().contains("prevData"),
        "{}",
        results[0]
    );
}
