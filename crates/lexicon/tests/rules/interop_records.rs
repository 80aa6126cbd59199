//! The atproto interop record fixtures (`fixtures/interop/lexicon/`, CC0):
//! every valid record passes with no findings, every invalid one gets at
//! least one. The catalog is all of `lexicon/catalog/*.json`; `procedure.json`
//! refs `app.bsky.actor.defs#preferences`, which is not there, and loading
//! must not mind (only validating that procedure's input would).

use std::path::PathBuf;

use gelstore_lexicon::catalog::Catalog;
use gelstore_lexicon::validate::{rules, validate_record};
use serde_json::Value;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/interop/lexicon")
}

fn catalog() -> Catalog {
    let (catalog, findings) = Catalog::load_paths(&[dir().join("catalog")]).expect("catalog loads");
    assert!(findings.is_empty(), "catalog findings: {findings:#?}");
    assert_eq!(catalog.len(), 5);
    catalog
}

/// `(name, rkey, data)` of each case in a fixture file.
fn cases(file: &str) -> Vec<(String, String, Value)> {
    let text = std::fs::read_to_string(dir().join(file)).expect("fixture file");
    let cases: Vec<Value> = serde_json::from_str(&text).expect("fixture JSON");
    cases
        .into_iter()
        .map(|c| {
            (
                c["name"].as_str().expect("name").to_string(),
                c["rkey"].as_str().expect("rkey").to_string(),
                c["data"].clone(),
            )
        })
        .collect()
}

#[test]
fn valid_records_have_no_findings() {
    let catalog = catalog();
    let cases = cases("record-data-valid.json");
    assert_eq!(cases.len(), 3);
    let mut failed = Vec::new();
    for (name, rkey, data) in &cases {
        let findings = validate_record(&catalog, data, Some(rkey));
        if !findings.is_empty() {
            failed.push(format!("{name}: {findings:#?}"));
        }
    }
    assert!(
        failed.is_empty(),
        "valid records rejected:\n{}",
        failed.join("\n")
    );
}

#[test]
fn invalid_records_have_findings() {
    let catalog = catalog();
    let cases = cases("record-data-invalid.json");
    assert_eq!(cases.len(), 50);
    let mut passed = Vec::new();
    for (name, rkey, data) in &cases {
        let findings = validate_record(&catalog, data, Some(rkey));
        if findings.is_empty() {
            passed.push(name.clone());
        }
        for f in &findings {
            assert!(
                rules::ALL.contains(&f.rule),
                "{name}: unlisted rule {}",
                f.rule
            );
            assert!(f.file.is_empty());
        }
    }
    assert!(passed.is_empty(), "invalid records accepted: {passed:#?}");
}

/// The rule each invalid case is expected to trip, so a case can not pass
/// for the wrong reason (say, a missing `integer` in a case about `unknown`).
#[test]
fn invalid_records_fail_for_the_stated_reason() {
    let catalog = catalog();
    let expected: &[(&str, &str, &str)] = &[
        ("missing required field", "/integer", rules::REQUIRED),
        ("invalid boolean field", "/boolean", rules::TYPE),
        ("invalid integer field", "/integer", rules::TYPE),
        (
            "invalid non-nullable string field",
            "/string",
            rules::NULLABLE,
        ),
        ("invalid string field", "/string", rules::TYPE),
        ("invalid bytes field", "/bytes", rules::TYPE),
        ("invalid bytes: empty object", "/bytes", rules::TYPE),
        ("invalid bytes: wrong type", "/bytes", rules::TYPE),
        ("invalid cid-link field", "/cid-link", rules::TYPE),
        ("invalid blob field", "/blob", rules::TYPE),
        ("invalid blob: wrong type", "/blob", rules::TYPE),
        ("invalid array", "/array", rules::TYPE),
        ("invalid array element", "/array/0", rules::TYPE),
        ("object wrong data type", "/object", rules::TYPE),
        ("object nested wrong data type", "/object/a", rules::TYPE),
        ("invalid token ref type", "/ref", rules::TYPE),
        ("invalid ref value", "/ref", rules::TYPE),
        (
            "invalid string format handle",
            "/formats/handle",
            rules::FORMAT,
        ),
        ("invalid string format did", "/formats/did", rules::FORMAT),
        (
            "invalid string format atidentifier",
            "/formats/atidentifier",
            rules::FORMAT,
        ),
        ("invalid string format nsid", "/formats/nsid", rules::FORMAT),
        (
            "invalid string format aturi",
            "/formats/aturi",
            rules::FORMAT,
        ),
        ("invalid string format cid", "/formats/cid", rules::FORMAT),
        (
            "invalid string format datetime",
            "/formats/datetime",
            rules::FORMAT,
        ),
        (
            "invalid string format language",
            "/formats/language",
            rules::FORMAT,
        ),
        ("invalid string format uri", "/formats/uri", rules::FORMAT),
        ("invalid string format tid", "/formats/tid", rules::FORMAT),
        (
            "invalid string format recordkey",
            "/formats/recordkey",
            rules::FORMAT,
        ),
        ("wrong const value", "/constInteger", rules::CONST),
        ("integer not in enum", "/enumInteger", rules::ENUM),
        ("out of integer range", "/rangeInteger", rules::MAXIMUM),
        ("string too short", "/lenString", rules::MIN_LENGTH),
        ("string too long", "/lenString", rules::MAX_LENGTH),
        (
            "string too short (graphemes)",
            "/graphemeString",
            rules::MIN_GRAPHEMES,
        ),
        (
            "string too long (graphemes)",
            "/graphemeString",
            rules::MAX_GRAPHEMES,
        ),
        ("out of enum string", "/enumString", rules::ENUM),
        ("bytes too short", "/sizeBytes", rules::BYTES_LENGTH),
        ("bytes too long", "/sizeBytes", rules::BYTES_LENGTH),
        ("array too short", "/lenArray", rules::ARRAY_LENGTH),
        ("array too long", "/lenArray", rules::ARRAY_LENGTH),
        ("blob too large", "/sizeBlob", rules::BLOB_SIZE),
        ("blob wrong type", "/acceptBlob", rules::BLOB_ACCEPT),
        ("open union wrong data type", "/union", rules::UNION_TYPE),
        ("open union missing $type", "/union", rules::UNION_TYPE),
        ("out of closed union", "/closedUnion", rules::CLOSED_UNION),
        ("unknown wrong type (bool)", "/unknown", rules::TYPE),
        ("unknown wrong type (bytes)", "/unknown", rules::TYPE),
        ("unknown wrong type (blob)", "/unknown", rules::TYPE),
    ];
    let cases = cases("record-data-invalid.json");
    let mut wrong = Vec::new();
    let mut seen = 0;
    for (name, rkey, data) in &cases {
        let findings = validate_record(&catalog, data, Some(rkey));
        if name == "union inner invalid" {
            // Two cases share this name: a variant outside the closed union,
            // and a bad field inside an open-union variant.
            let ok = findings.iter().any(|f| {
                (f.path == "/closedUnion" && f.rule == rules::CLOSED_UNION)
                    || (f.path == "/union/a" && f.rule == rules::TYPE)
            });
            if !ok {
                wrong.push(format!("{name}: {findings:#?}"));
            }
            seen += 1;
            continue;
        }
        let Some((_, path, rule)) = expected.iter().find(|(n, _, _)| n == name) else {
            wrong.push(format!("{name}: no expectation"));
            continue;
        };
        seen += 1;
        if !findings.iter().any(|f| f.path == *path && f.rule == *rule) {
            wrong.push(format!(
                "{name}: expected {rule} at {path}, got {findings:#?}"
            ));
        }
    }
    assert_eq!(seen, 50);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_record_key_must_match_the_literal_key() {
    let catalog = catalog();
    let data = &cases("record-data-valid.json")[0].2;
    let findings = validate_record(&catalog, data, Some("other"));
    assert_eq!(findings.len(), 1, "{findings:#?}");
    assert_eq!(findings[0].rule, rules::RECORD_KEY);
    assert_eq!(findings[0].path, "");
}
