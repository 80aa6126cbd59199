//! The generated `gelstore::lexicon` types: checked in and fresh, round
//! trips through atproto JSON and DAG-CBOR (stable CIDs, unknown fields and
//! union variants kept), and `validate()` agreeing with the dynamic
//! validator on every record fixture.

use std::collections::BTreeMap;
use std::path::Path;

use gelstore::lexicon::chat::gel::assistant::subscribe_reply as events;
use gelstore::lexicon::chat::gel::assistant::{chat, defs, device, key_wrap, message};
use gelstore::lexicon_runtime::{self as support, Validate};
use gelstore::model;
use gelstore_codegen::emit;
use gelstore_lexicon::catalog::Catalog;
use gelstore_lexicon::schema::Def;
use gelstore_lexicon::validate;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn catalog() -> Catalog {
    let (catalog, findings) = Catalog::load_paths(&[format!("{ROOT}/lexicons")]).unwrap();
    assert!(findings.is_empty(), "{findings:?}");
    catalog
}

/// Runs `$f::<T>(args)` with `T` the generated type `$type` names.
macro_rules! with_type {
    ($t:expr, $f:ident ( $($arg:expr),* )) => {
        match $t {
            "chat.gel.assistant.message" => $f::<message::Message>($($arg),*),
            "chat.gel.assistant.chat" => $f::<chat::Chat>($($arg),*),
            "chat.gel.assistant.device" => $f::<device::Device>($($arg),*),
            "chat.gel.assistant.keyWrap" => $f::<key_wrap::KeyWrap>($($arg),*),
            "chat.gel.assistant.defs#plainContent" => $f::<defs::PlainContent>($($arg),*),
            "chat.gel.assistant.chat#sealedFields" => $f::<chat::SealedFields>($($arg),*),
            "chat.gel.assistant.subscribeReply#textDelta" => $f::<events::TextDelta>($($arg),*),
            "chat.gel.assistant.subscribeReply#message" => $f::<events::Message>($($arg),*),
            "chat.gel.assistant.subscribeReply#toolCall" => $f::<events::ToolCall>($($arg),*),
            "chat.gel.assistant.subscribeReply#toolResult" => $f::<events::ToolResult>($($arg),*),
            "chat.gel.assistant.subscribeReply#confirmRequired" => {
                $f::<events::ConfirmRequired>($($arg),*)
            }
            "chat.gel.assistant.subscribeReply#error" => $f::<events::Error>($($arg),*),
            "chat.gel.assistant.subscribeReply#done" => $f::<events::Done>($($arg),*),
            other => panic!("no generated type for {other}"),
        }
    };
}

/// Every record fixture: (file name, JSON, expected valid).
fn fixtures() -> Vec<(String, Value, bool)> {
    let dir = Path::new(ROOT).join("fixtures/records");
    let expectations: BTreeMap<String, Value> =
        serde_json::from_slice(&std::fs::read(dir.join("expectations.json")).unwrap()).unwrap();
    let mut out = Vec::new();
    for (name, e) in expectations {
        let valid = e["valid"].as_bool().unwrap();
        let sub = if valid { "valid" } else { "invalid" };
        let text = std::fs::read(dir.join(sub).join(&name)).unwrap();
        out.push((name, serde_json::from_slice(&text).unwrap(), valid));
    }
    assert!(out.len() > 100, "{} fixtures", out.len());
    out
}

#[test]
fn checked_in_code_is_what_the_lexicons_generate() {
    let files = emit::generate(&catalog(), &emit::Options::gelstore()).unwrap();
    let out = Path::new(ROOT).join("crates/types/src/lexicon");
    for f in &files {
        let on_disk = std::fs::read_to_string(out.join(&f.path))
            .unwrap_or_else(|e| panic!("{}: {e}; run `gelstore lex gen`", f.path));
        assert!(
            on_disk == f.contents,
            "crates/types/src/lexicon/{} is stale; run `gelstore lex gen --out crates/types/src/lexicon`",
            f.path
        );
    }
    // Nothing generated is left over from lexicons that are gone.
    let drift = gelstore::cli::sync_generated(&out, &files, true).unwrap();
    assert!(drift.is_empty(), "{drift:?}");
    // Deterministic: a second run gives the same text.
    assert_eq!(
        emit::generate(&catalog(), &emit::Options::gelstore()).unwrap(),
        files
    );
}

/// The com.atproto methods the server implements, generated from the
/// vendored lexicons into `src/atproto/`.
#[test]
fn checked_in_atproto_code_is_what_the_vendored_lexicons_generate() {
    let (catalog, findings) =
        Catalog::load_paths(&[format!("{ROOT}/vendor/lexicons")]).expect("vendor/lexicons");
    assert!(findings.is_empty(), "{findings:?}");
    let opts = emit::Options {
        root: "crate::atproto".into(),
        ..emit::Options::gelstore()
    };
    let files = emit::generate(&catalog, &opts).unwrap();
    let out = Path::new(ROOT).join("src/atproto");
    let drift = gelstore::cli::sync_generated(&out, &files, true).unwrap();
    assert!(
        drift.is_empty(),
        "regenerate with `gelstore lex gen --lexicons vendor/lexicons --out src/atproto \
         --root crate::atproto`: {drift:?}"
    );
}

/// Every method a lexicon declares is in its tree's `METHODS`, once, with
/// the kind and encodings the lexicon gives.
#[test]
fn the_method_table_lists_every_method_as_declared() {
    use gelstore::lexicon_runtime::MethodKind;
    let methods = gelstore::lexicon::METHODS;
    let nsids: Vec<&str> = methods.iter().map(|m| m.nsid).collect();
    let mut sorted = nsids.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(nsids, sorted, "in NSID order, each once");
    let declared: Vec<String> = catalog()
        .entries()
        .filter(|e| {
            matches!(
                e.doc.main().map(|d| d.type_name()),
                Some("query" | "procedure" | "subscription")
            )
        })
        .map(|e| e.doc.id.clone())
        .collect();
    assert_eq!(nsids.len(), declared.len(), "{nsids:?} vs {declared:?}");
    let get_thread = gelstore::lexicon::chat::gel::assistant::get_thread::METHOD;
    assert_eq!(get_thread.nsid, "chat.gel.assistant.getThread");
    assert_eq!(get_thread.kind, MethodKind::Query);
    assert_eq!(get_thread.input, None);
    assert_eq!(get_thread.output, Some("application/json"));
    let upload = gelstore::atproto::com::atproto::repo::upload_blob::METHOD;
    assert_eq!(upload.kind, MethodKind::Procedure);
    assert_eq!(upload.input, Some("*/*"));
    let subscribe = gelstore::atproto::com::atproto::sync::subscribe_repos::METHOD;
    assert_eq!(subscribe.kind, MethodKind::Subscription);
    assert!(gelstore::atproto::METHODS.contains(&subscribe));
}

fn round_trip<T>(json: &Value) -> Result<(), String>
where
    T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug,
{
    let typed: T = serde_json::from_value(json.clone()).map_err(|e| e.to_string())?;
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(&back, json, "JSON → typed → JSON");
    let cbor = support::to_dag_cbor(&typed).unwrap();
    assert_eq!(
        cbor,
        model::record_to_dag_cbor(json).unwrap(),
        "canonical DAG-CBOR"
    );
    assert_eq!(
        support::cid(&typed).unwrap(),
        model::record_cid(json).unwrap()
    );
    let again: T = support::from_dag_cbor(&cbor).unwrap();
    assert_eq!(again, typed, "typed → DAG-CBOR → typed");
    assert_eq!(serde_json::to_value(&again).unwrap(), *json, "… → JSON");
    Ok(())
}

#[test]
fn every_decodable_fixture_round_trips_through_json_and_dag_cbor_with_a_stable_cid() {
    let mut decoded = 0;
    for (name, json, valid) in fixtures() {
        let t = json["$type"].as_str().unwrap().to_string();
        match with_type!(t.as_str(), round_trip(&json)) {
            Ok(()) => decoded += 1,
            Err(e) => assert!(!valid, "{name}: valid fixture does not decode: {e}"),
        }
    }
    assert!(decoded >= 90, "only {decoded} fixtures decoded");
}

fn typed_check<T: DeserializeOwned + Validate>(
    json: &Value,
) -> Result<Vec<(String, &'static str)>, String> {
    let v: T = serde_json::from_value(json.clone()).map_err(|e| e.to_string())?;
    Ok(match v.validate() {
        Ok(()) => Vec::new(),
        Err(e) => e.0.into_iter().map(|e| (e.path, e.rule)).collect(),
    })
}

fn dynamic_check(catalog: &Catalog, json: &Value, rkey: &str) -> Vec<(String, &'static str)> {
    let t = json["$type"].as_str().unwrap();
    let record = matches!(catalog.resolve_type_id(t).unwrap().def, Def::Record(_));
    let findings = if record {
        validate::validate_record(catalog, json, Some(rkey))
    } else {
        validate::validate_value(catalog, t, json)
    };
    findings.into_iter().map(|f| (f.path, f.rule)).collect()
}

#[test]
fn validate_agrees_with_the_dynamic_validator_on_every_fixture() {
    let catalog = catalog();
    let dir = Path::new(ROOT).join("fixtures/records");
    let expectations: BTreeMap<String, Value> =
        serde_json::from_slice(&std::fs::read(dir.join("expectations.json")).unwrap()).unwrap();
    let (mut same_findings, mut refused_at_decode) = (0, 0);
    for (name, json, valid) in fixtures() {
        let rkey = expectations[&name]["rkey"].as_str().unwrap();
        let mut dynamic = dynamic_check(&catalog, &json, rkey);
        let t = json["$type"].as_str().unwrap().to_string();
        assert_eq!(dynamic.is_empty(), valid, "{name}: dynamic validator");
        match with_type!(t.as_str(), typed_check(&json)) {
            Ok(mut typed) => {
                typed.sort();
                dynamic.sort();
                assert_eq!(typed, dynamic, "{name}: validate() vs dynamic validator");
                same_findings += 1;
            }
            Err(e) => {
                assert!(!valid, "{name}: a valid fixture was refused: {e}");
                refused_at_decode += 1;
            }
        }
    }
    println!(
        "{same_findings} fixtures: same (path, rule) findings; {refused_at_decode} refused at decode"
    );
    assert!(same_findings >= 90 && refused_at_decode > 0);
}

#[test]
fn records_know_their_nsid_and_key_and_write_their_type() {
    use support::{KeyType, Record};
    assert_eq!(message::Message::NSID, "chat.gel.assistant.message");
    assert_eq!(message::Message::KEY, KeyType::Any);
    assert_eq!(chat::Chat::KEY, KeyType::Tid);
    assert!(chat::Chat::KEY.check("3lbqzcx2ss222").is_ok());
    assert!(chat::Chat::KEY.check("self").is_err());
    let device = device::Device {
        public_key: support::Bytes(vec![7; 32]),
        signing_key: None,
        signing_key_proof: None,
        name: None,
        created_at: support::Datetime::new("2025-11-29T19:41:00.000Z").unwrap(),
        extra: Default::default(),
    };
    let json = serde_json::to_value(&device).unwrap();
    assert_eq!(json["$type"], "chat.gel.assistant.device");
    assert!(device.validate().is_ok());
    // `nsid#main` is the same type; another NSID is refused.
    let mut other = json.clone();
    other["$type"] = json!("chat.gel.assistant.device#main");
    assert!(serde_json::from_value::<device::Device>(other).is_ok());
    let mut other = json.clone();
    other["$type"] = json!("chat.gel.assistant.chat");
    assert!(serde_json::from_value::<device::Device>(other).is_err());
}

const LINK: &str = "bafyreiclp443lavogvhj3d2ob2cxbfuscni2k5jk7bebjzg7khl3esabwq";

/// Data a newer client might add: every data-model kind, including the
/// ones serde's `flatten` buffering is known to mangle in CBOR.
fn newer_fields() -> Value {
    json!({
        "addedBytes": {"$bytes": "AAECAwQ"},
        "addedLink": {"$link": LINK},
        "addedInts": [0, 1, -1, 23, 24, 255, 256, 65536, i64::MAX, i64::MIN],
        "addedNested": {"deep": {"list": [{"$bytes": ""}, null, true, "s"]}},
    })
}

#[test]
fn fields_a_newer_lexicon_adds_survive_json_and_dag_cbor() {
    let mut record: Value = serde_json::from_slice(
        &std::fs::read(format!(
            "{ROOT}/fixtures/records/valid/message-user-full.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let extra = newer_fields();
    record
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    for place in ["request", "content"] {
        record[place]
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
    }
    round_trip::<message::Message>(&record).unwrap();
    let typed: message::Message = serde_json::from_value(record.clone()).unwrap();
    assert_eq!(typed.extra.len(), 4);
    assert_eq!(typed.request.as_ref().unwrap().extra.len(), 4);
    assert!(typed.validate().is_ok(), "{:?}", typed.validate());

    // Inside union variants, and an unknown variant with the same data.
    let mut part = json!({"$type": "chat.gel.assistant.defs#textPart", "text": "hi"});
    part.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let mut unknown = json!({"$type": "com.example.future#part"});
    unknown
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let content =
        json!({"$type": "chat.gel.assistant.defs#plainContent", "parts": [part, unknown]});
    round_trip::<defs::PlainContent>(&content).unwrap();
    let typed: defs::PlainContent = serde_json::from_value(content).unwrap();
    assert!(
        matches!(&typed.parts[0], defs::PlainContentPartsItem::TextPart(p) if p.extra.len() == 4)
    );
    match &typed.parts[1] {
        defs::PlainContentPartsItem::Unknown(d) => {
            assert_eq!(d.type_id(), Some("com.example.future#part"))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(typed.parts[1].type_id(), "com.example.future#part");
}

#[test]
fn null_for_a_field_that_is_not_nullable_is_refused() {
    let json = json!({"$type": "chat.gel.assistant.chat#sealedFields", "title": null});
    assert!(serde_json::from_value::<chat::SealedFields>(json.clone()).is_err());
    assert!(
        !validate::validate_value(&catalog(), "chat.gel.assistant.chat#sealedFields", &json)
            .is_empty()
    );
}

#[test]
fn known_values_keep_unknown_strings_and_defaults_apply() {
    let m: message::Message = serde_json::from_value(json!({
        "$type": "chat.gel.assistant.message",
        "chat": "at://did:plc:ewvi7nxzyoun6zhxrhs64oiz/chat.gel.assistant.chat/3lbqzcx2ss222",
        "role": "moderator",
        "status": "complete",
        "request": {},
        "createdAt": "2025-11-29T19:41:00.000Z"
    }))
    .unwrap();
    assert_eq!(m.role, message::MessageRole::Other("moderator".into()));
    assert_eq!(m.status, message::MessageStatus::Complete);
    assert_eq!(m.request.as_ref().unwrap().attempt_or_default(), 0);
    assert_eq!(serde_json::to_value(&m).unwrap()["role"], "moderator");
}

#[test]
fn subscription_frames_decode_by_header_type() {
    let body = model::json_to_ipld(&json!({"seq": 3, "messageId": "m1", "text": "he"})).unwrap();
    let m = events::SubscribeReplyMessage::from_frame("#textDelta", body).unwrap();
    assert!(matches!(&m, events::SubscribeReplyMessage::TextDelta(d) if d.seq == 3));
    assert_eq!(m.type_id(), "chat.gel.assistant.subscribeReply#textDelta");
    let json = serde_json::to_value(&m).unwrap();
    assert_eq!(json["$type"], "chat.gel.assistant.subscribeReply#textDelta");
    let err: events::SubscribeReplyError =
        support::StringEnum::from_string("FutureCursor".to_string()).unwrap();
    assert_eq!(err, events::SubscribeReplyError::FutureCursor);
}

/// A query string read into a generated `…Params` type: each value typed
/// as the lexicon says, the required ones named when absent, the lexicon's
/// limits checked, repeated names gathered for an array.
#[test]
fn query_parameters_read_as_the_lexicon_declares_them() {
    use gelstore::atproto::com::atproto::sync::get_blocks::GetBlocksParams;
    use gelstore::lexicon::chat::gel::assistant::get_thread::GetThreadParams;
    use support::params_from_query;
    let q = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let p: GetThreadParams = params_from_query(&q(&[
        ("chat", "3lbqzdw5pzk22"),
        ("limit", "7"),
        ("limit", "9"),
    ]))
    .unwrap();
    assert_eq!(p.chat.as_str(), "3lbqzdw5pzk22");
    assert_eq!(p.limit, Some(7), "the first of a repeated scalar counts");
    assert_eq!(p.limit_or_default(), 7);
    let p: GetThreadParams = params_from_query(&q(&[("chat", "c1"), ("future", "x")])).unwrap();
    assert_eq!(p.limit_or_default(), 500);
    assert_eq!(p.extra.len(), 1, "an undeclared name is kept, as a string");

    let err = |pairs: &[(&str, &str)]| params_from_query::<GetThreadParams>(&q(pairs)).unwrap_err();
    assert_eq!(
        err(&[("limit", "5")]),
        "Params must have the property \"chat\""
    );
    assert_eq!(
        err(&[("chat", "c1"), ("limit", "five")]),
        "limit must be an integer"
    );
    assert!(
        err(&[("chat", "c1"), ("limit", "1001")]).contains("/limit"),
        "the lexicon's maximum"
    );
    assert!(
        err(&[("chat", "c1"), ("limit", "0")]).contains("/limit"),
        "the lexicon's minimum"
    );
    assert!(
        err(&[("chat", "no/slash")]).starts_with("Invalid params"),
        "a bad record key"
    );

    let did = "did:plc:ewvi7nxzyoun6zhxrhs64oiz";
    let cid = "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm";
    let p: GetBlocksParams =
        params_from_query(&q(&[("did", did), ("cids", cid), ("cids", cid)])).unwrap();
    assert_eq!(p.cids.len(), 2, "a repeated array name gathers");
}
