//! Generated code for lexicons that are not ours: the `com.atproto.*` set
//! in `fixtures/lexicons` and the interop catalog, generated into the
//! checked-in `tests/generated_atproto/` and compiled as part of this test.
//! Regenerate with:
//!
//! ```sh
//! gelstore lex gen --lexicons fixtures/lexicons --lexicons fixtures/interop/lexicon/catalog \
//!     --out tests/generated_atproto --root crate::generated --support gelstore::lexicon_runtime
//! ```

#[allow(dead_code)]
use crate::generated;

use std::path::Path;

use gelstore::lexicon_runtime::{self as support, Validate};
use gelstore::model;
use gelstore_codegen::emit;
use gelstore_lexicon::catalog::Catalog;
use gelstore_lexicon::validate;
use generated::com::atproto::sync::subscribe_repos;
use generated::example::lexicon::record::Record as DemoRecord;
use serde_json::{Value, json};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn catalog() -> Catalog {
    let paths = [
        format!("{ROOT}/fixtures/lexicons"),
        format!("{ROOT}/fixtures/interop/lexicon/catalog"),
    ];
    let (catalog, findings) = Catalog::load_paths(&paths).unwrap();
    assert!(findings.is_empty(), "{findings:?}");
    catalog
}

fn options() -> emit::Options {
    emit::Options {
        root: "crate::generated".into(),
        support: "gelstore::lexicon_runtime".into(),
        command: "gelstore lex gen".into(),
    }
}

#[test]
fn checked_in_code_is_what_the_lexicons_generate() {
    let catalog = catalog();
    assert!(catalog.len() >= 19, "{} lexicons", catalog.len());
    let files = emit::generate(&catalog, &options()).unwrap();
    let out = Path::new(ROOT).join("tests/generated_atproto");
    let drift = gelstore::cli::sync_generated(&out, &files, true).unwrap();
    assert!(
        drift.is_empty(),
        "regenerate tests/generated_atproto: {drift:?}"
    );
}

fn cases(file: &str) -> Vec<(String, Value)> {
    let path = format!("{ROOT}/fixtures/interop/lexicon/{file}");
    let cases: Vec<Value> = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    cases
        .into_iter()
        .map(|c| (c["name"].as_str().unwrap().to_string(), c["data"].clone()))
        .collect()
}

/// The interop record fixtures: typed decode + `validate()` gives the same
/// verdict as the dynamic validator, and valid records round-trip.
#[test]
fn interop_records_agree_with_the_dynamic_validator_and_round_trip() {
    let catalog = catalog();
    let mut checked = 0;
    for (file, valid) in [
        ("record-data-valid.json", true),
        ("record-data-invalid.json", false),
    ] {
        for (name, data) in cases(file) {
            let dynamic = validate::validate_record(&catalog, &data, Some("demo"));
            assert_eq!(dynamic.is_empty(), valid, "{name}: dynamic {dynamic:?}");
            let typed = serde_json::from_value::<DemoRecord>(data.clone())
                .map_err(|e| e.to_string())
                .and_then(|r| r.validate().map(|()| r).map_err(|e| e.to_string()));
            assert_eq!(typed.is_ok(), valid, "{name}: typed {typed:?}");
            // The data model refuses non-canonical base64 ("123"), which the
            // validators accept; round-trip what it encodes.
            if let (Ok(record), Ok(cbor)) = (typed, model::record_to_dag_cbor(&data)) {
                assert_eq!(serde_json::to_value(&record).unwrap(), data, "{name}");
                assert_eq!(support::to_dag_cbor(&record).unwrap(), cbor, "{name}");
                let again: DemoRecord = support::from_dag_cbor(&cbor).unwrap();
                assert_eq!(again, record, "{name}");
            }
            checked += 1;
        }
    }
    assert!(checked >= 50);
}

#[test]
fn firehose_frames_decode_and_round_trip() {
    let commit = json!({
        "seq": 42, "rebase": false, "tooBig": false,
        "repo": "did:plc:ewvi7nxzyoun6zhxrhs64oiz",
        "commit": {"$link": "bafyreiclp443lavogvhj3d2ob2cxbfuscni2k5jk7bebjzg7khl3esabwq"},
        "rev": "3lbqzcx2ss222", "since": null,
        "blocks": {"$bytes": "AAEC"},
        "ops": [{"action": "create", "path": "app.bsky.feed.post/3lbqzcx2ss222", "cid": null}],
        "blobs": [], "time": "2025-11-29T19:41:00.000Z"
    });
    let body = model::json_to_ipld(&commit).unwrap();
    let cbor = model::encode_dag_cbor(&body).unwrap();
    let msg = subscribe_repos::SubscribeReposMessage::from_frame("#commit", body).unwrap();
    let subscribe_repos::SubscribeReposMessage::Commit(c) = &msg else {
        panic!("{msg:?}");
    };
    assert_eq!(c.since, None);
    assert_eq!(c.ops[0].cid, None);
    assert!(c.prev.is_none());
    assert!(msg.validate().is_ok());
    assert_eq!(
        support::to_dag_cbor(c).unwrap(),
        cbor,
        "nullable fields keep their null"
    );
    let account = json!({
        "$type": "com.atproto.sync.subscribeRepos#account",
        "seq": 1, "did": "did:plc:ewvi7nxzyoun6zhxrhs64oiz", "time": "2025-11-29T19:41:00.000Z",
        "active": false, "status": {"$type": "com.atproto.sync.defs#takendown"}
    });
    let typed: subscribe_repos::SubscribeReposMessage =
        serde_json::from_value(account.clone()).unwrap();
    assert_eq!(serde_json::to_value(&typed).unwrap(), account);
}
