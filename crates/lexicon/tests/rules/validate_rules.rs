//! Unit tests for each validation rule, with exact paths and boundary
//! (at the limit / one past it) cases, against a small test catalog.

use std::path::PathBuf;

use gelstore_lexicon::Finding;
use gelstore_lexicon::catalog::Catalog;
use gelstore_lexicon::validate::{
    DEFAULT_MAX_DEPTH, Validator, coerce_query_params, rules, validate_input, validate_message,
    validate_message_of_type, validate_output, validate_params, validate_query_string,
    validate_record, validate_value,
};
use serde_json::{Map, Value, json};

const CID: &str = "bafyreiclp443lavogvhj3d2ob2cxbfuscni2k5jk7bebjzg7khl3esabwq";
const TID: &str = "3kznmn7xqxl22";
/// One extended grapheme cluster of 25 UTF-8 bytes (woman, ZWJ, woman, ZWJ, boy, ZWJ, boy).
const FAMILY: &str = "👩\u{200d}👩\u{200d}👦\u{200d}👦";

fn catalog() -> Catalog {
    let mut c = Catalog::new();
    let docs = [
        json!({"lexicon": 1, "id": "com.example.test", "defs": {
            "main": {"type": "record", "key": "tid", "record": {
                "type": "object",
                "required": ["text"],
                "nullable": ["maybe"],
                "properties": {
                    "text": {"type": "string", "minLength": 2, "maxLength": 10},
                    "graph": {"type": "string", "minGraphemes": 2, "maxGraphemes": 3},
                    "count": {"type": "integer", "minimum": 1, "maximum": 10},
                    "flag": {"type": "boolean", "const": true},
                    "kind": {"type": "string", "enum": ["a", "b"]},
                    "fixed": {"type": "string", "const": "x"},
                    "known": {"type": "string", "knownValues": ["a"]},
                    "odd": {"type": "integer", "enum": [1, 3]},
                    "answer": {"type": "integer", "const": 42},
                    "dflt": {"type": "integer", "default": 5, "minimum": 1},
                    "when": {"type": "string", "format": "datetime"},
                    "data": {"type": "bytes", "minLength": 2, "maxLength": 4},
                    "link": {"type": "cid-link"},
                    "pic": {"type": "blob", "accept": ["image/*"], "maxSize": 100},
                    "exact": {"type": "blob", "accept": ["image/png", "text/plain"]},
                    "any": {"type": "blob", "accept": ["*/*"]},
                    "items": {"type": "array", "minLength": 1, "maxLength": 3,
                              "items": {"type": "integer"}},
                    "content": {"type": "ref", "ref": "#content"},
                    "embed": {"type": "union", "refs": ["#content", "com.example.other"]},
                    "closed": {"type": "union", "refs": ["#content"], "closed": true},
                    "extra": {"type": "unknown"},
                    "maybe": {"type": "string"},
                    "nothing": {"type": "null"},
                    "tree": {"type": "ref", "ref": "#node"},
                    "tok": {"type": "ref", "ref": "#tok"},
                    "missing": {"type": "ref", "ref": "com.example.nowhere#x"}
                }
            }},
            "content": {"type": "object", "properties": {
                "parts": {"type": "array", "items": {"type": "ref", "ref": "#part"}}
            }},
            "part": {"type": "object", "required": ["text"], "properties": {
                "text": {"type": "string", "maxLength": 5}
            }},
            "node": {"type": "object", "properties": {
                "v": {"type": "integer"},
                "children": {"type": "array", "items": {"type": "ref", "ref": "#node"}}
            }},
            "tok": {"type": "token"},
            "handle": {"type": "string", "format": "handle"}
        }}),
        json!({"lexicon": 1, "id": "com.example.other", "defs": {
            "main": {"type": "object", "required": ["n"], "properties": {
                "n": {"type": "integer", "maximum": 9}
            }}
        }}),
        json!({"lexicon": 1, "id": "com.example.unlisted", "defs": {
            "main": {"type": "object", "properties": {"z": {"type": "boolean"}}}
        }}),
        json!({"lexicon": 1, "id": "com.example.any", "defs": {
            "main": {"type": "record", "key": "any", "record": {"type": "object", "properties": {}}}
        }}),
        json!({"lexicon": 1, "id": "com.example.byNsid", "defs": {
            "main": {"type": "record", "key": "nsid", "record": {"type": "object", "properties": {}}}
        }}),
        json!({"lexicon": 1, "id": "com.example.self", "defs": {
            "main": {"type": "record", "key": "literal:self", "record": {"type": "object", "properties": {}}}
        }}),
        json!({"lexicon": 1, "id": "com.example.query", "defs": {
            "main": {"type": "query",
                "parameters": {"type": "params", "required": ["q"], "properties": {
                    "q": {"type": "string"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                    "tags": {"type": "array", "maxLength": 3,
                             "items": {"type": "string", "maxLength": 3}},
                    "flag": {"type": "boolean"},
                    "filter": {"type": "unknown"}
                }},
                "output": {"encoding": "application/json", "schema": {"type": "ref", "ref": "com.example.other"}}
            }
        }}),
        json!({"lexicon": 1, "id": "com.example.proc", "defs": {
            "main": {"type": "procedure",
                "input": {"encoding": "application/json", "schema": {
                    "type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}}},
                "output": {"encoding": "application/json", "schema": {
                    "type": "union", "refs": ["com.example.other"]}}
            }
        }}),
        json!({"lexicon": 1, "id": "com.example.upload", "defs": {
            "main": {"type": "procedure", "input": {"encoding": "*/*"}}
        }}),
        json!({"lexicon": 1, "id": "com.example.noinput", "defs": {
            "main": {"type": "procedure"}
        }}),
        json!({"lexicon": 1, "id": "com.example.sub", "defs": {
            "main": {"type": "subscription",
                "parameters": {"type": "params", "properties": {"cursor": {"type": "integer"}}},
                "message": {"schema": {"type": "union", "refs": ["#commit", "#info"], "closed": true}}
            },
            "commit": {"type": "object", "required": ["seq"], "properties": {"seq": {"type": "integer", "minimum": 0}}},
            "info": {"type": "object", "properties": {"name": {"type": "string"}}}
        }}),
    ];
    for doc in docs {
        let findings = c.add("test.json", &doc);
        assert!(findings.is_empty(), "{findings:#?}");
    }
    c
}

/// A record of `com.example.test` with `text` set and `fields` added.
fn rec(fields: Value) -> Value {
    let mut r = json!({"$type": "com.example.test", "text": "hello"});
    for (k, v) in fields.as_object().expect("fields object") {
        r[k] = v.clone();
    }
    r
}

/// `(path, rule)` of each finding, in order.
fn pr(findings: &[Finding]) -> Vec<(String, &'static str)> {
    findings.iter().map(|f| (f.path.clone(), f.rule)).collect()
}

fn check(fields: Value) -> Vec<(String, &'static str)> {
    pr(&validate_record(&catalog(), &rec(fields), None))
}

fn one(path: &str, rule: &'static str) -> Vec<(String, &'static str)> {
    vec![(path.to_string(), rule)]
}

fn none() -> Vec<(String, &'static str)> {
    Vec::new()
}

#[test]
fn string_lengths_count_utf8_bytes() {
    // "é" is 2 bytes: 5 of them are exactly the 10-byte maximum.
    assert_eq!(check(json!({"text": "ééééé"})), none());
    assert_eq!(
        check(json!({"text": "éééééa"})),
        one("/text", rules::MAX_LENGTH)
    );
    assert_eq!(check(json!({"text": "é"})), none());
    assert_eq!(check(json!({"text": "a"})), one("/text", rules::MIN_LENGTH));
    let f = validate_record(&catalog(), &rec(json!({"text": "éééééa"})), None);
    assert_eq!(
        f[0].message,
        "text is 11 bytes of UTF-8, over the maximum of 10"
    );
}

#[test]
fn grapheme_lengths_count_extended_clusters() {
    assert_eq!(check(json!({"graph": "ééé"})), none());
    assert_eq!(
        check(json!({"graph": "éééé"})),
        one("/graph", rules::MAX_GRAPHEMES)
    );
    // Three ZWJ families are 75 bytes but 3 graphemes.
    assert_eq!(check(json!({"graph": FAMILY.repeat(3)})), none());
    assert_eq!(
        check(json!({"graph": FAMILY.repeat(4)})),
        one("/graph", rules::MAX_GRAPHEMES)
    );
    // 25 bytes, but one grapheme: under the minimum of 2.
    assert_eq!(
        check(json!({"graph": FAMILY})),
        one("/graph", rules::MIN_GRAPHEMES)
    );
    // e + combining acute accent, twice: 2 graphemes.
    assert_eq!(check(json!({"graph": "e\u{301}e\u{301}"})), none());
    assert_eq!(
        check(json!({"graph": "e\u{301}"})),
        one("/graph", rules::MIN_GRAPHEMES)
    );
    let f = validate_record(&catalog(), &rec(json!({"graph": FAMILY.repeat(4)})), None);
    assert_eq!(f[0].message, "graph is 4 graphemes, over the maximum of 3");
}

#[test]
fn string_enum_const_known_values_and_format() {
    assert_eq!(
        check(json!({"kind": "a", "fixed": "x", "known": "zzz"})),
        none()
    );
    assert_eq!(check(json!({"kind": "c"})), one("/kind", rules::ENUM));
    assert_eq!(check(json!({"fixed": "y"})), one("/fixed", rules::CONST));
    assert_eq!(check(json!({"when": "2024-01-01T00:00:00Z"})), none());
    assert_eq!(
        check(json!({"when": "2024-01-01"})),
        one("/when", rules::FORMAT)
    );
    assert_eq!(check(json!({"kind": 1})), one("/kind", rules::TYPE));
}

#[test]
fn integer_ranges_enum_const_and_integral_floats() {
    assert_eq!(check(json!({"count": 1})), none());
    assert_eq!(check(json!({"count": 10})), none());
    assert_eq!(check(json!({"count": 0})), one("/count", rules::MINIMUM));
    assert_eq!(check(json!({"count": 11})), one("/count", rules::MAXIMUM));
    assert_eq!(check(json!({"count": 5.0})), none());
    assert_eq!(
        check(json!({"count": 5.5})),
        one("/count", rules::DATA_MODEL)
    );
    assert_eq!(
        check(json!({"count": u64::MAX})),
        one("/count", rules::DATA_MODEL)
    );
    assert_eq!(check(json!({"count": "5"})), one("/count", rules::TYPE));
    assert_eq!(check(json!({"odd": 3, "answer": 42})), none());
    assert_eq!(check(json!({"odd": 2})), one("/odd", rules::ENUM));
    assert_eq!(check(json!({"answer": 41})), one("/answer", rules::CONST));
    // A default describes absence; a present value is still checked.
    assert_eq!(check(json!({})), none());
    assert_eq!(check(json!({"dflt": 0})), one("/dflt", rules::MINIMUM));
}

#[test]
fn boolean_const() {
    assert_eq!(check(json!({"flag": true})), none());
    assert_eq!(check(json!({"flag": false})), one("/flag", rules::CONST));
    assert_eq!(check(json!({"flag": "true"})), one("/flag", rules::TYPE));
}

#[test]
fn bytes_lengths_are_decoded_lengths() {
    assert_eq!(check(json!({"data": {"$bytes": "AAA"}})), none()); // 2 bytes
    assert_eq!(check(json!({"data": {"$bytes": "AAAAAA=="}})), none()); // 4 bytes, padded
    assert_eq!(
        check(json!({"data": {"$bytes": "AA"}})),
        one("/data", rules::BYTES_LENGTH)
    );
    assert_eq!(
        check(json!({"data": {"$bytes": "AAAAAAA"}})),
        one("/data", rules::BYTES_LENGTH)
    );
    assert_eq!(
        check(json!({"data": {"$bytes": "A"}})),
        one("/data", rules::DATA_MODEL)
    );
    assert_eq!(
        check(json!({"data": {"$bytes": "AA-A"}})),
        one("/data", rules::DATA_MODEL)
    );
    assert_eq!(
        check(json!({"data": {"$bytes": "AAA", "x": 1}})),
        one("/data", rules::DATA_MODEL)
    );
    assert_eq!(check(json!({"data": "AAA"})), one("/data", rules::TYPE));
}

#[test]
fn cid_links() {
    assert_eq!(check(json!({"link": {"$link": CID}})), none());
    assert_eq!(
        check(json!({"link": {"$link": "."}})),
        one("/link", rules::DATA_MODEL)
    );
    assert_eq!(
        check(json!({"link": {"$link": CID, "other": 1}})),
        one("/link", rules::DATA_MODEL)
    );
    assert_eq!(
        check(json!({"link": {"$link": 5}})),
        one("/link", rules::DATA_MODEL)
    );
    assert_eq!(check(json!({"link": CID})), one("/link", rules::TYPE));
}

fn blob(mime: &str, size: i64) -> Value {
    json!({"$type": "blob", "ref": {"$link": CID}, "mimeType": mime, "size": size})
}

#[test]
fn blobs_size_and_accept() {
    assert_eq!(check(json!({"pic": blob("image/png", 100)})), none());
    assert_eq!(
        check(json!({"pic": blob("image/png", 101)})),
        one("/pic", rules::BLOB_SIZE)
    );
    assert_eq!(
        check(json!({"pic": blob("text/plain", 1)})),
        one("/pic", rules::BLOB_ACCEPT)
    );
    assert_eq!(check(json!({"exact": blob("text/plain", 1)})), none());
    assert_eq!(
        check(json!({"exact": blob("image/jpeg", 1)})),
        one("/exact", rules::BLOB_ACCEPT)
    );
    assert_eq!(
        check(json!({"any": blob("application/x-anything", 1)})),
        none()
    );
    assert_eq!(
        check(json!({"pic": {"$type": "blob", "ref": {"$link": CID}, "mimeType": "image/png"}})),
        one("/pic", rules::DATA_MODEL)
    );
    assert_eq!(
        check(
            json!({"pic": {"$type": "blob", "ref": {"$link": "."}, "mimeType": "image/png", "size": 1}})
        ),
        one("/pic/ref", rules::DATA_MODEL)
    );
    assert_eq!(
        check(json!({"pic": {"$type": "blob", "ref": CID, "mimeType": "", "size": -1}})),
        vec![
            ("/pic/ref".to_string(), rules::DATA_MODEL),
            ("/pic/mimeType".to_string(), rules::DATA_MODEL),
            ("/pic/size".to_string(), rules::DATA_MODEL),
        ]
    );
    assert_eq!(
        check(json!({"pic": {"$link": CID}})),
        one("/pic", rules::TYPE)
    );
}

#[test]
fn legacy_blobs_are_accepted_unless_refused() {
    let legacy = rec(json!({"pic": {"cid": CID, "mimeType": "image/png"}}));
    assert_eq!(pr(&validate_record(&catalog(), &legacy, None)), none());
    let c = catalog();
    let refused = Validator::new(&c).legacy_blobs(false).record(&legacy, None);
    assert_eq!(pr(&refused), one("/pic", rules::TYPE));
    assert_eq!(
        check(json!({"pic": {"cid": CID, "mimeType": "text/plain"}})),
        one("/pic", rules::BLOB_ACCEPT)
    );
    assert_eq!(
        check(json!({"pic": {"cid": "nope", "mimeType": "image/png"}})),
        one("/pic/cid", rules::DATA_MODEL)
    );
}

#[test]
fn arrays_lengths_and_item_paths() {
    assert_eq!(check(json!({"items": [1]})), none());
    assert_eq!(check(json!({"items": [1, 2, 3]})), none());
    assert_eq!(
        check(json!({"items": []})),
        one("/items", rules::ARRAY_LENGTH)
    );
    assert_eq!(
        check(json!({"items": [1, 2, 3, 4]})),
        one("/items", rules::ARRAY_LENGTH)
    );
    assert_eq!(
        check(json!({"items": [1, "two", null]})),
        vec![
            ("/items/1".to_string(), rules::TYPE),
            ("/items/2".to_string(), rules::TYPE),
        ]
    );
}

#[test]
fn nested_paths_through_refs() {
    let f = validate_record(
        &catalog(),
        &rec(json!({"content": {"parts": [{"text": "ok"}, {"text": "too long"}, {}]}})),
        None,
    );
    assert_eq!(
        pr(&f),
        vec![
            ("/content/parts/1/text".to_string(), rules::MAX_LENGTH),
            ("/content/parts/2/text".to_string(), rules::REQUIRED),
        ]
    );
    assert_eq!(
        f[0].message,
        "text is 8 bytes of UTF-8, over the maximum of 5"
    );
    assert_eq!(f[1].message, "required field \"text\" is missing");
    assert!(f.iter().all(|f| f.file.is_empty()));
}

#[test]
fn paths_escape_slash_and_tilde() {
    assert_eq!(
        check(json!({"extra": {"a/b": {"c~d": 1.5}}})),
        one("/extra/a~1b/c~0d", rules::DATA_MODEL)
    );
}

#[test]
fn required_and_nullable() {
    let c = catalog();
    let f = validate_record(&c, &json!({"$type": "com.example.test"}), None);
    assert_eq!(pr(&f), one("/text", rules::REQUIRED));
    assert_eq!(check(json!({"maybe": null})), none());
    assert_eq!(check(json!({"text": null})), one("/text", rules::NULLABLE));
    assert_eq!(
        check(json!({"count": null})),
        one("/count", rules::NULLABLE)
    );
    assert_eq!(check(json!({"nothing": null})), none());
    assert_eq!(check(json!({"nothing": 1})), one("/nothing", rules::TYPE));
    // Undeclared fields are allowed, null or not.
    assert_eq!(check(json!({"future": null, "later": {"x": [1]}})), none());
}

#[test]
fn unions_open_closed_and_main() {
    // Listed variant, local ref.
    assert_eq!(
        check(json!({"embed": {"$type": "com.example.test#content", "parts": []}})),
        none()
    );
    // `nsid#main` is the same type as `nsid`.
    assert_eq!(
        check(json!({"embed": {"$type": "com.example.other#main", "n": 1}})),
        none()
    );
    assert_eq!(
        check(json!({"embed": {"$type": "com.example.other", "n": 10}})),
        one("/embed/n", rules::MAXIMUM)
    );
    // Open: a type the catalog does not know is accepted unchecked.
    assert_eq!(
        check(json!({"embed": {"$type": "org.elsewhere.thing", "n": "x"}})),
        none()
    );
    // Open: an unlisted type the catalog knows is checked.
    assert_eq!(
        check(json!({"embed": {"$type": "com.example.unlisted", "z": 1}})),
        one("/embed/z", rules::TYPE)
    );
    assert_eq!(
        check(json!({"embed": {"parts": []}})),
        one("/embed", rules::UNION_TYPE)
    );
    assert_eq!(
        check(json!({"embed": [1]})),
        one("/embed", rules::UNION_TYPE)
    );
    assert_eq!(
        check(json!({"embed": {"$type": ""}})),
        one("/embed/$type", rules::DATA_MODEL)
    );
    // Closed.
    assert_eq!(
        check(json!({"closed": {"$type": "com.example.test#content"}})),
        none()
    );
    assert_eq!(
        check(json!({"closed": {"$type": "com.example.other", "n": 1}})),
        one("/closed", rules::CLOSED_UNION)
    );
    // A listed variant with data-model problems inside still reports them.
    assert_eq!(
        check(json!({"closed": {"$type": "com.example.other", "x": 1.5}})),
        vec![
            ("/closed".to_string(), rules::CLOSED_UNION),
            ("/closed/x".to_string(), rules::DATA_MODEL),
        ]
    );
}

#[test]
fn unknown_holds_objects_and_checks_known_types() {
    assert_eq!(check(json!({"extra": {"anything": [1, "two"]}})), none());
    assert_eq!(
        check(json!({"extra": {"$type": "org.elsewhere.x", "a": 1}})),
        none()
    );
    assert_eq!(
        check(json!({"extra": {"$type": "com.example.other", "n": 100}})),
        one("/extra/n", rules::MAXIMUM)
    );
    assert_eq!(check(json!({"extra": "str"})), one("/extra", rules::TYPE));
    assert_eq!(check(json!({"extra": [1]})), one("/extra", rules::TYPE));
    assert_eq!(
        check(json!({"extra": {"$bytes": "AAAA"}})),
        one("/extra", rules::TYPE)
    );
    assert_eq!(
        check(json!({"extra": {"$link": CID}})),
        one("/extra", rules::TYPE)
    );
    assert_eq!(
        check(json!({"extra": blob("image/png", 1)})),
        one("/extra", rules::TYPE)
    );
    assert_eq!(
        check(json!({"extra": {"$type": 7}})),
        one("/extra/$type", rules::DATA_MODEL)
    );
}

#[test]
fn refs_to_tokens_and_unresolved_refs() {
    assert_eq!(check(json!({"tok": "com.example.test#tok"})), none());
    assert_eq!(
        check(json!({"tok": "com.example.test#other"})),
        one("/tok", rules::TOKEN)
    );
    assert_eq!(check(json!({"tok": 1})), one("/tok", rules::TOKEN));
    assert_eq!(
        check(json!({"missing": {}})),
        one("/missing", rules::UNRESOLVED_REF)
    );
}

#[test]
fn every_error_is_reported_in_document_order() {
    let r = json!({
        "count": 0,
        "extra": {"f": 0.5},
        "kind": "z",
        "$type": "com.example.test",
        "items": [true],
        "text": "x"
    });
    let f = pr(&validate_record(&catalog(), &r, None));
    assert_eq!(
        f,
        vec![
            ("/count".to_string(), rules::MINIMUM),
            ("/extra/f".to_string(), rules::DATA_MODEL),
            ("/kind".to_string(), rules::ENUM),
            ("/items/0".to_string(), rules::TYPE),
            ("/text".to_string(), rules::MIN_LENGTH),
        ]
    );
}

#[test]
fn record_type_and_key_checks() {
    let c = catalog();
    let empty = json!({"$type": "com.example.any"});
    assert_eq!(
        pr(&validate_record(&c, &empty, Some("any.key:~_-"))),
        none()
    );
    assert_eq!(
        pr(&validate_record(&c, &empty, Some("a/b"))),
        one("", rules::RECORD_KEY)
    );
    assert_eq!(
        pr(&validate_record(&c, &empty, Some(".."))),
        one("", rules::RECORD_KEY)
    );
    let t = json!({"$type": "com.example.test", "text": "hi"});
    assert_eq!(pr(&validate_record(&c, &t, Some(TID))), none());
    assert_eq!(
        pr(&validate_record(&c, &t, Some("self"))),
        one("", rules::RECORD_KEY)
    );
    let n = json!({"$type": "com.example.byNsid"});
    assert_eq!(
        pr(&validate_record(&c, &n, Some("com.example.thing"))),
        none()
    );
    assert_eq!(
        pr(&validate_record(&c, &n, Some(TID))),
        one("", rules::RECORD_KEY)
    );
    let s = json!({"$type": "com.example.self"});
    assert_eq!(pr(&validate_record(&c, &s, Some("self"))), none());
    assert_eq!(
        pr(&validate_record(&c, &s, Some("selfie"))),
        one("", rules::RECORD_KEY)
    );

    assert_eq!(
        pr(&validate_record(&c, &json!({}), None)),
        one("/$type", rules::REQUIRED)
    );
    assert_eq!(
        pr(&validate_record(
            &c,
            &json!({"$type": "com.example.nope", "f": 1.5}),
            None
        )),
        vec![
            ("/$type".to_string(), rules::UNKNOWN_TYPE),
            ("/f".to_string(), rules::DATA_MODEL),
        ]
    );
    assert_eq!(
        pr(&validate_record(
            &c,
            &json!({"$type": "com.example.other", "n": 1}),
            None
        )),
        one("/$type", rules::RECORD_TYPE)
    );
    assert_eq!(
        pr(&validate_record(&c, &json!({"$type": ""}), None)),
        one("/$type", rules::DATA_MODEL)
    );
    assert_eq!(
        pr(&validate_record(&c, &json!("blah"), None)),
        one("", rules::TYPE)
    );
    assert_eq!(
        pr(&validate_record(&c, &json!([1]), Some(TID))),
        one("", rules::TYPE)
    );
    // `#main` is accepted in a record $type too.
    let main = json!({"$type": "com.example.test#main", "text": "hi"});
    assert_eq!(pr(&validate_record(&c, &main, None)), none());
}

#[test]
fn validate_value_against_any_def() {
    let c = catalog();
    assert_eq!(
        pr(&validate_value(
            &c,
            "com.example.test#part",
            &json!({"text": "hi"})
        )),
        none()
    );
    assert_eq!(
        pr(&validate_value(&c, "com.example.test#part", &json!({}))),
        one("/text", rules::REQUIRED)
    );
    assert_eq!(
        pr(&validate_value(&c, "com.example.other", &json!({"n": 1}))),
        none()
    );
    assert_eq!(
        pr(&validate_value(&c, "com.example.test", &json!({"text": 1}))),
        one("/text", rules::TYPE)
    );
    assert_eq!(
        pr(&validate_value(
            &c,
            "com.example.test#handle",
            &json!("not a handle")
        )),
        one("", rules::FORMAT)
    );
    assert_eq!(
        pr(&validate_value(&c, "com.example.test#nope", &json!({}))),
        one("", rules::UNKNOWN_TYPE)
    );
    assert_eq!(
        pr(&validate_value(&c, "com.example.query", &json!({}))),
        one("", rules::DEF_KIND)
    );
}

/// Builds `{"children": [{"children": [… {"v": 1.5} …]}]}` `levels` deep
/// without recursion.
fn deep_tree(levels: usize) -> Value {
    // Built by moving, not with `json!`, which would copy (serialize) `v`
    // recursively at every level.
    let mut v = json!({"v": 1.5});
    for _ in 0..levels {
        let mut map = Map::new();
        map.insert("children".to_string(), Value::Array(vec![v]));
        v = Value::Object(map);
    }
    v
}

/// Takes a deep value apart iteratively: the default recursive drop could
/// overflow the test thread's stack.
fn drop_deep(v: Value) {
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

#[test]
fn deep_nesting_is_one_depth_finding_not_a_stack_overflow() {
    let c = catalog();
    // 10,000 levels through a recursive ref (#node → children → #node).
    let mut r = rec(json!({}));
    r["tree"] = deep_tree(10_000);
    let f = validate_record(&c, &r, None);
    assert_eq!(f.len(), 1, "{:?}", pr(&f));
    assert_eq!(f[0].rule, rules::DEPTH);
    // The record is container 1, then each level adds an object and an array.
    let segments = f[0].path.matches('/').count();
    assert_eq!(segments, DEFAULT_MAX_DEPTH);
    assert!(f[0].path.starts_with("/tree/children/0/children/0/"));
    drop_deep(r);

    // The same inside `unknown` (data-model walk only) and as bare arrays.
    let mut arrays = json!(1.5);
    for _ in 0..10_000 {
        arrays = Value::Array(vec![arrays]);
    }
    let mut r = rec(json!({"extra": {}}));
    r["extra"]["a"] = arrays;
    let f = validate_record(&c, &r, None);
    assert_eq!(pr(&f).len(), 1);
    assert_eq!(f[0].rule, rules::DEPTH);
    drop_deep(r);
}

#[test]
fn depth_limit_boundary() {
    let c = catalog();
    // The record is container 1; deep_tree(n) adds 2n + 1 containers.
    // 1 + 2*63 + 1 = 128 containers: at the limit, the float is reported.
    let mut r = rec(json!({}));
    r["tree"] = deep_tree(63);
    let f = validate_record(&c, &r, None);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].rule, rules::DATA_MODEL);
    // With a lower limit the same data is too deep.
    let f = Validator::new(&c).max_depth(127).record(&r, None);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].rule, rules::DEPTH);
    let f = Validator::new(&c).max_depth(0).record(&r, None);
    assert_eq!(pr(&f), one("", rules::DEPTH));
}

#[test]
fn recursive_refs_terminate_on_finite_data() {
    let tree = json!({"children": [{"children": []}, {"v": "x", "children": [{"v": 2}]}]});
    assert_eq!(
        check(json!({"tree": tree})),
        one("/tree/children/1/v", rules::TYPE)
    );
}

#[test]
fn params_as_json_and_from_query_strings() {
    let c = catalog();
    let ok: Map<String, Value> =
        serde_json::from_value(json!({"q": "x", "limit": 5, "tags": ["a"], "unknownParam": "z"}))
            .unwrap();
    assert_eq!(pr(&validate_params(&c, "com.example.query", &ok)), none());
    let bad: Map<String, Value> =
        serde_json::from_value(json!({"limit": "5", "tags": ["abcd"]})).unwrap();
    assert_eq!(
        pr(&validate_params(&c, "com.example.query", &bad)),
        vec![
            ("/q".to_string(), rules::REQUIRED),
            ("/limit".to_string(), rules::TYPE),
            ("/tags/0".to_string(), rules::MAX_LENGTH),
        ]
    );

    let pairs = [
        ("q", "x"),
        ("limit", "5"),
        ("tags", "a"),
        ("tags", "b"),
        ("flag", "true"),
    ];
    let coerced = coerce_query_params(&c, "com.example.query", pairs);
    assert_eq!(
        Value::Object(coerced),
        json!({"q": "x", "limit": 5, "tags": ["a", "b"], "flag": true})
    );
    assert_eq!(
        pr(&validate_query_string(&c, "com.example.query", pairs)),
        none()
    );
    assert_eq!(
        pr(&validate_query_string(
            &c,
            "com.example.query",
            [
                ("q", "x"),
                ("limit", "abc"),
                ("flag", "yes"),
                ("filter", "{\"a\":1}")
            ]
        )),
        vec![
            ("/limit".to_string(), rules::TYPE),
            ("/flag".to_string(), rules::TYPE),
        ]
    );
    assert_eq!(
        pr(&validate_query_string(
            &c,
            "com.example.query",
            [("q", "x"), ("limit", "0"), ("limit", "101"), ("limit", "5")]
        )),
        one("/limit", rules::TYPE)
    );
    assert_eq!(
        pr(&validate_query_string(
            &c,
            "com.example.query",
            [
                ("q", "x"),
                ("limit", "101"),
                ("tags", "a"),
                ("tags", "b"),
                ("tags", "c"),
                ("tags", "d")
            ]
        )),
        vec![
            ("/limit".to_string(), rules::MAXIMUM),
            ("/tags".to_string(), rules::ARRAY_LENGTH),
        ]
    );
    assert_eq!(
        pr(&validate_params(&c, "com.example.nope", &Map::new())),
        one("", rules::UNKNOWN_TYPE)
    );
    assert_eq!(
        pr(&validate_params(&c, "com.example.other", &Map::new())),
        one("", rules::DEF_KIND)
    );
}

#[test]
fn xrpc_bodies() {
    let c = catalog();
    assert_eq!(
        pr(&validate_input(&c, "com.example.proc", &json!({"a": 1}))),
        none()
    );
    assert_eq!(
        pr(&validate_input(&c, "com.example.proc", &json!({"a": 1.5}))),
        one("/a", rules::DATA_MODEL)
    );
    assert_eq!(
        pr(&validate_input(&c, "com.example.proc", &json!([]))),
        one("", rules::TYPE)
    );
    assert_eq!(
        pr(&validate_output(
            &c,
            "com.example.proc",
            &json!({"$type": "com.example.other", "n": 1})
        )),
        none()
    );
    assert_eq!(
        pr(&validate_output(&c, "com.example.proc", &json!({"n": 1}))),
        one("", rules::UNION_TYPE)
    );
    assert_eq!(
        pr(&validate_output(&c, "com.example.query", &json!({"n": 1}))),
        none()
    );
    assert_eq!(
        pr(&validate_output(&c, "com.example.query", &json!({}))),
        one("/n", rules::REQUIRED)
    );
    assert_eq!(
        pr(&validate_input(&c, "com.example.query", &json!({}))),
        one("", rules::DEF_KIND)
    );
    assert_eq!(
        pr(&validate_input(&c, "com.example.noinput", &json!({}))),
        one("", rules::BODY)
    );
    // A non-JSON input (no schema) has nothing to check beyond the data model.
    assert_eq!(
        pr(&validate_input(&c, "com.example.upload", &json!({"x": 1}))),
        none()
    );
}

#[test]
fn subscription_messages() {
    let c = catalog();
    let commit = json!({"$type": "com.example.sub#commit", "seq": 1});
    assert_eq!(
        pr(&validate_message(&c, "com.example.sub", &commit)),
        none()
    );
    assert_eq!(
        pr(&validate_message(
            &c,
            "com.example.sub",
            &json!({"$type": "com.example.sub#commit", "seq": -1})
        )),
        one("/seq", rules::MINIMUM)
    );
    assert_eq!(
        pr(&validate_message(&c, "com.example.sub", &json!({"seq": 1}))),
        one("", rules::UNION_TYPE)
    );
    // Frame bodies carry their type in the header.
    assert_eq!(
        pr(&validate_message_of_type(
            &c,
            "com.example.sub",
            "#commit",
            &json!({"seq": 1})
        )),
        none()
    );
    assert_eq!(
        pr(&validate_message_of_type(
            &c,
            "com.example.sub",
            "com.example.sub#commit",
            &json!({})
        )),
        one("/seq", rules::REQUIRED)
    );
    assert_eq!(
        pr(&validate_message_of_type(
            &c,
            "com.example.sub",
            "#other",
            &json!({})
        )),
        one("", rules::CLOSED_UNION)
    );
    let cursor: Map<String, Value> = serde_json::from_value(json!({"cursor": 5})).unwrap();
    assert_eq!(pr(&validate_params(&c, "com.example.sub", &cursor)), none());
}

fn fixture(path: &str) -> Vec<Value> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/interop")
        .join(path);
    serde_json::from_str(&std::fs::read_to_string(p).expect("fixture")).expect("JSON")
}

/// The data-model fixtures, placed in an `unknown` field, where only the
/// data-model rules apply.
#[test]
fn interop_data_model_fixtures() {
    let mut valid = fixture("data-model/data-model-valid.json");
    valid.extend(
        fixture("data-model/data-model-fixtures.json")
            .into_iter()
            .map(|case| json!({"json": case["json"].clone()})),
    );
    for case in &valid {
        let f = check(json!({"extra": case["json"].clone()}));
        assert_eq!(f, none(), "{case}");
    }
    let invalid = fixture("data-model/data-model-invalid.json");
    assert_eq!(invalid.len(), 12);
    for case in &invalid {
        let f = check(json!({"extra": case["json"].clone()}));
        assert!(!f.is_empty(), "accepted: {}", case["note"]);
        let expected = if case["json"].is_object() {
            rules::DATA_MODEL
        } else {
            rules::TYPE
        };
        assert!(
            f.iter().all(|(_, rule)| *rule == expected),
            "{}: {f:?}",
            case["note"]
        );
    }
}

#[test]
fn large_records_validate_in_one_pass() {
    let c = catalog();
    let n = 200_000;
    let parts: Vec<Value> = (0..n).map(|_| json!({"text": "abc"})).collect();
    let mut r = rec(json!({"content": {"parts": parts}}));
    r["content"]["parts"][n - 1] = json!({"text": "toolong"});
    let start = std::time::Instant::now();
    let f = validate_record(&c, &r, Some(TID));
    let elapsed = start.elapsed();
    assert_eq!(
        pr(&f),
        one(&format!("/content/parts/{}/text", n - 1), rules::MAX_LENGTH)
    );
    eprintln!("validated {n} parts in {elapsed:?}");
}

#[test]
fn every_rule_is_documented_once() {
    let mut seen = std::collections::HashSet::new();
    for rule in rules::ALL {
        assert!(seen.insert(rule), "duplicate {rule}");
        assert!(
            rule.chars().all(|c| c.is_ascii_lowercase() || c == '-'),
            "{rule} is not kebab-case"
        );
    }
}
