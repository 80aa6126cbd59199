//! atproto interop fixtures (CC0) for the data model:
//! `fixtures/interop/data-model/*.json`. See `fixtures/interop/INVENTORY.md`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use gelstore::model::{
    DataModelError, Ipld, cid_for_cbor, decode_dag_cbor, encode_dag_cbor, ipld_to_json, record_cid,
    record_from_json, record_to_dag_cbor,
};
use serde_json::Value;

use crate::support::fixtures;
use fixtures::{interop_cases, str_field};

fn field<'a>(case: &'a Value, key: &str) -> &'a Value {
    case.get(key)
        .unwrap_or_else(|| panic!("fixture case without {key:?}: {case}"))
}

#[test]
fn fixtures_json_to_cbor_to_cid_and_back() {
    let cases = interop_cases("data-model/data-model-fixtures.json");
    assert_eq!(cases.len(), 3, "fixture case count changed");
    for (i, case) in cases.iter().enumerate() {
        let json = field(case, "json");
        let expected_cbor = STANDARD_NO_PAD
            .decode(str_field(case, "cbor_base64"))
            .unwrap_or_else(|e| panic!("case {i}: bad cbor_base64: {e}"));
        let expected_cid = str_field(case, "cid");

        // JSON -> DAG-CBOR bytes.
        let cbor = record_to_dag_cbor(json).unwrap_or_else(|e| panic!("case {i}: {e}"));
        assert_eq!(
            STANDARD_NO_PAD.encode(&cbor),
            STANDARD_NO_PAD.encode(&expected_cbor),
            "case {i}: DAG-CBOR bytes differ"
        );

        // CID of those bytes, both ways of computing it.
        assert_eq!(cid_for_cbor(&cbor).to_string(), expected_cid, "case {i}");
        assert_eq!(
            record_cid(json).unwrap().to_string(),
            expected_cid,
            "case {i}"
        );

        // DAG-CBOR -> JSON gives the fixture JSON back.
        let decoded = decode_dag_cbor(&expected_cbor).unwrap_or_else(|e| panic!("case {i}: {e}"));
        assert_eq!(
            &ipld_to_json(&decoded).unwrap(),
            json,
            "case {i}: JSON differs"
        );

        // And the decoded value re-encodes to the same bytes.
        assert_eq!(
            encode_dag_cbor(&decoded).unwrap(),
            expected_cbor,
            "case {i}"
        );
    }
}

#[test]
fn valid_cases_are_accepted() {
    let cases = interop_cases("data-model/data-model-valid.json");
    assert_eq!(cases.len(), 5, "fixture case count changed");
    let mut failures = Vec::new();
    for case in &cases {
        let note = str_field(case, "note");
        let json = field(case, "json");
        let result = record_from_json(json).and_then(|value| {
            // Accepted values also survive a DAG-CBOR round trip.
            let bytes = encode_dag_cbor(&value)?;
            let back = decode_dag_cbor(&bytes)?;
            assert_eq!(back, value, "{note}: round trip changed the value");
            Ok(())
        });
        if let Err(e) = result {
            failures.push(format!("{note}: {e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "valid cases rejected:\n{}",
        failures.join("\n")
    );
}

#[test]
fn integer_like_float_is_read_as_integer() {
    let cases = interop_cases("data-model/data-model-valid.json");
    let case = cases
        .iter()
        .find(|c| str_field(c, "note") == "float, but integer-like")
        .expect("fixture case 'float, but integer-like'");
    let value = record_from_json(field(case, "json")).unwrap();
    let Ipld::Map(top) = &value else {
        panic!("not a map: {value:?}")
    };
    let Some(Ipld::Map(rcrd)) = top.get("rcrd") else {
        panic!("no rcrd map: {value:?}")
    };
    assert_eq!(rcrd.get("a"), Some(&Ipld::Integer(123)));
}

#[test]
fn invalid_cases_are_rejected() {
    let cases = interop_cases("data-model/data-model-invalid.json");
    assert_eq!(cases.len(), 12, "fixture case count changed");
    let mut accepted = Vec::new();
    for case in &cases {
        let note = str_field(case, "note");
        match record_from_json(field(case, "json")) {
            Ok(value) => accepted.push(format!("{note}: accepted as {value:?}")),
            Err(e) => {
                // Keep the reason honest: each case fails for its own reason.
                let expected = expected_error(note);
                assert!(
                    expected(&e),
                    "{note}: rejected for an unexpected reason: {e}"
                );
            }
        }
    }
    assert!(
        accepted.is_empty(),
        "invalid cases accepted:\n{}",
        accepted.join("\n")
    );
}

/// Which error each invalid fixture case should give, by its note.
fn expected_error(note: &str) -> fn(&DataModelError) -> bool {
    match note {
        "top-level not an object" => |e| matches!(e, DataModelError::RecordNotObject { .. }),
        "float" => |e| matches!(e, DataModelError::Float { .. }),
        "record with $type null"
        | "record with $type wrong type"
        | "record with empty $type string" => |e| matches!(e, DataModelError::InvalidType { .. }),
        "blob with string size" | "blob with missing key" => {
            |e| matches!(e, DataModelError::InvalidBlob { .. })
        }
        "bytes with wrong field type" | "bytes with extra fields" => {
            |e| matches!(e, DataModelError::InvalidBytes { .. })
        }
        "link with wrong field type" | "link with extra fields" => {
            |e| matches!(e, DataModelError::InvalidLink { .. })
        }
        "link with bogus CID" => |e| matches!(e, DataModelError::InvalidCid { .. }),
        other => panic!("unknown invalid fixture note {other:?}: update expected_error"),
    }
}
