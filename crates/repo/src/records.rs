//! Checking a record before it is written: the collection and record key,
//! the `$type`, the lexicon (for collections the caller's catalog knows),
//! and the data model; then its canonical DAG-CBOR block and CID.
//!
//! A record of a collection in the catalog must validate against its
//! lexicon (including its record-key type); a record of any other
//! collection only has to be valid data model with a matching `$type`.

use cid::Cid;
use gelstore_lexicon::catalog::Catalog;
use gelstore_lexicon::validate::validate_record;
use serde_json::Value;

use super::mst::check_key;
use gelstore_model::{DataModelError, cid_for_cbor, record_to_dag_cbor};

/// Why a record cannot be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The collection is not a valid NSID.
    #[error("invalid collection {collection:?}: {reason}")]
    InvalidCollection {
        /// The collection (cut to 100 characters).
        collection: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The record key is not valid record-key syntax.
    #[error("invalid record key {rkey:?}: {reason}")]
    InvalidRkey {
        /// The key (cut to 100 characters).
        rkey: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The record is not a JSON object.
    #[error("record {path} must be a JSON object")]
    NotAnObject {
        /// `collection/rkey`.
        path: String,
    },
    /// The record's `$type` is missing or is not the collection.
    #[error("record {path}: $type must be {expected:?}, found {found}")]
    TypeMismatch {
        /// `collection/rkey`.
        path: String,
        /// The collection.
        expected: String,
        /// What the record has (`none` when absent).
        found: String,
    },
    /// A record of a known lexicon that does not validate.
    #[error("record {path} is not a valid {collection}: {}", findings.join("; "))]
    Invalid {
        /// `collection/rkey`.
        path: String,
        /// The collection.
        collection: String,
        /// Each problem, as `/json/pointer: message [rule]`.
        findings: Vec<String>,
    },
    /// The record is not valid atproto data model (floats, bad `$link`, too
    /// large, too deep, ...).
    #[error("record {path} is not valid data model: {source}")]
    DataModel {
        /// `collection/rkey`.
        path: String,
        /// What the encoder found.
        source: DataModelError,
    },
}

/// A record ready to be stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedRecord {
    /// The MST key, `collection/rkey`.
    pub key: String,
    /// The record's CID.
    pub cid: Cid,
    /// Its canonical DAG-CBOR block.
    pub bytes: Vec<u8>,
}

/// Checks a collection NSID.
pub fn check_collection(collection: &str) -> Result<(), RecordError> {
    gelstore_lexicon::syntax::check_nsid(collection).map_err(|e| RecordError::InvalidCollection {
        collection: cut(collection),
        reason: e.reason,
    })
}

/// Checks the collection and record key and builds the MST key.
pub fn repo_key(collection: &str, rkey: &str) -> Result<String, RecordError> {
    check_collection(collection)?;
    gelstore_lexicon::syntax::check_record_key(rkey).map_err(|e| RecordError::InvalidRkey {
        rkey: cut(rkey),
        reason: e.reason,
    })?;
    let key = format!("{collection}/{rkey}");
    // NSID and record-key syntax already imply a valid MST key; this only
    // guards against the two rules drifting apart.
    check_key(&key).map_err(|e| RecordError::InvalidRkey {
        rkey: cut(rkey),
        reason: e.to_string(),
    })?;
    Ok(key)
}

/// Checks a record for `collection/rkey` (against its lexicon if
/// `lexicons` has one) and encodes it.
pub fn prepare_record(
    lexicons: &Catalog,
    collection: &str,
    rkey: &str,
    value: &Value,
) -> Result<PreparedRecord, RecordError> {
    let key = repo_key(collection, rkey)?;
    let Some(object) = value.as_object() else {
        return Err(RecordError::NotAnObject { path: key });
    };
    match object.get("$type") {
        Some(Value::String(t)) if t == collection => {}
        other => {
            return Err(RecordError::TypeMismatch {
                path: key,
                expected: collection.to_owned(),
                found: match other {
                    None => "none".to_owned(),
                    Some(Value::String(s)) => format!("{:?}", cut(s)),
                    Some(_) => "a non-string value".to_owned(),
                },
            });
        }
    }
    if lexicons.get(collection).is_some() {
        let findings = validate_record(lexicons, value, Some(rkey));
        if !findings.is_empty() {
            return Err(RecordError::Invalid {
                path: key,
                collection: collection.to_owned(),
                findings: findings
                    .iter()
                    .map(|f| {
                        let path = if f.path.is_empty() { "/" } else { &f.path };
                        format!("{path}: {} [{}]", f.message, f.rule)
                    })
                    .collect(),
            });
        }
    }
    let bytes = record_to_dag_cbor(value).map_err(|source| RecordError::DataModel {
        path: key.clone(),
        source,
    })?;
    Ok(PreparedRecord {
        cid: cid_for_cbor(&bytes),
        key,
        bytes,
    })
}

fn cut(s: &str) -> String {
    s.chars().take(100).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A catalog of one record lexicon, `com.example.strict` (TID keys, a
    /// required `n`).
    fn strict() -> Catalog {
        let mut catalog = Catalog::new();
        catalog.add(
            "strict.json",
            &json!({"lexicon": 1, "id": "com.example.strict", "defs": {"main": {
                "type": "record", "key": "tid", "record": {
                    "type": "object", "required": ["n"],
                    "properties": {"n": {"type": "integer"}}}}}}),
        );
        catalog
    }

    #[test]
    fn unknown_collections_need_only_a_matching_type() {
        let r = prepare_record(
            &Catalog::new(),
            "com.example.thing",
            "abc",
            &json!({"$type": "com.example.thing", "n": 1}),
        )
        .unwrap();
        assert_eq!(r.key, "com.example.thing/abc");
        assert_eq!(r.cid, cid_for_cbor(&r.bytes));
        assert!(matches!(
            prepare_record(
                &Catalog::new(),
                "com.example.thing",
                "abc",
                &json!({"$type": "com.example.other"})
            ),
            Err(RecordError::TypeMismatch { .. })
        ));
        assert!(matches!(
            prepare_record(
                &Catalog::new(),
                "com.example.thing",
                "abc",
                &json!({"n": 1})
            ),
            Err(RecordError::TypeMismatch { .. })
        ));
        assert!(matches!(
            prepare_record(&Catalog::new(), "com.example.thing", "abc", &json!([1])),
            Err(RecordError::NotAnObject { .. })
        ));
        assert!(matches!(
            prepare_record(
                &Catalog::new(),
                "com.example.thing",
                "abc",
                &json!({"$type": "com.example.thing", "f": 1.5})
            ),
            Err(RecordError::DataModel { .. })
        ));
    }

    #[test]
    fn names_are_checked() {
        assert!(matches!(
            repo_key("not an nsid", "abc"),
            Err(RecordError::InvalidCollection { .. })
        ));
        assert!(matches!(
            repo_key("com.example.thing", "a/b"),
            Err(RecordError::InvalidRkey { .. })
        ));
        assert!(matches!(
            repo_key("com.example.thing", ".."),
            Err(RecordError::InvalidRkey { .. })
        ));
        assert!(matches!(
            repo_key("com.example.thing", ""),
            Err(RecordError::InvalidRkey { .. })
        ));
    }

    #[test]
    fn collections_in_the_catalog_are_validated() {
        let catalog = strict();
        let tid = "3jzfcijpj2z2a";
        let valid = json!({"$type": "com.example.strict", "n": 1});
        prepare_record(&catalog, "com.example.strict", tid, &valid).unwrap();
        for (rkey, value) in [
            (tid, json!({"$type": "com.example.strict"})),
            (tid, json!({"$type": "com.example.strict", "n": "one"})),
            ("not-a-tid", valid.clone()),
        ] {
            match prepare_record(&catalog, "com.example.strict", rkey, &value) {
                Err(RecordError::Invalid { findings, .. }) => assert!(!findings.is_empty()),
                other => panic!("{rkey} {value}: {other:?}"),
            }
        }
        // Without the lexicon, the same record is only data model.
        prepare_record(&Catalog::new(), "com.example.strict", "not-a-tid", &valid).unwrap();
    }
}
