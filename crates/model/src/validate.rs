//! The atproto data model rules, checked on [`Ipld`] values.
//!
//! Both directions (JSON and DAG-CBOR) end up here, so the two encodings
//! accept exactly the same set of values.

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;

use super::MAX_DEPTH;
use super::cid::{RAW_CODEC, check_blessed_cid};
use super::error::{DataModelError, Result};

/// Checks that a value is valid atproto data model.
///
/// Rules: no floats; integers fit in `i64`; links are blessed CIDs; lists and
/// maps nest at most [`MAX_DEPTH`] deep; every `$type` is a non-empty string;
/// maps with `"$type": "blob"` have the blob shape; no map uses the keys
/// `$link` or `$bytes` (reserved by the JSON encoding).
///
/// Recursion stops at `MAX_DEPTH + 1`, so this is safe on any value.
pub fn check_data_model(value: &Ipld) -> Result<()> {
    check_value(value, 0)
}

/// Checks that a value is a valid record: a valid data-model map.
pub fn check_record(value: &Ipld) -> Result<()> {
    match value {
        Ipld::Map(_) => check_data_model(value),
        other => Err(DataModelError::RecordNotObject {
            found: kind_name(other),
        }),
    }
}

/// `depth` is the number of lists/maps enclosing `value`.
pub(crate) fn check_value(value: &Ipld, depth: usize) -> Result<()> {
    match value {
        Ipld::Null | Ipld::Bool(_) | Ipld::String(_) | Ipld::Bytes(_) => Ok(()),
        Ipld::Integer(i) => check_integer(*i).map(|_| ()),
        Ipld::Float(f) => Err(DataModelError::Float {
            detail: format!("float value {f}"),
        }),
        Ipld::Link(cid) => check_blessed_cid(cid),
        Ipld::List(items) => {
            let depth = enter(depth)?;
            items.iter().try_for_each(|item| check_value(item, depth))
        }
        Ipld::Map(map) => {
            let depth = enter(depth)?;
            check_map_keys(map)?;
            map.values().try_for_each(|item| check_value(item, depth))
        }
    }
}

/// Depth of the children of a container at `depth`; errors past [`MAX_DEPTH`].
pub(crate) fn enter(depth: usize) -> Result<usize> {
    let inner = depth + 1;
    if inner > MAX_DEPTH {
        Err(DataModelError::TooDeep { max: MAX_DEPTH })
    } else {
        Ok(inner)
    }
}

/// The integer as `i64`, or an error if it is out of range.
pub(crate) fn check_integer(i: i128) -> Result<i64> {
    i64::try_from(i).map_err(|_| DataModelError::IntegerOutOfRange {
        detail: format!("{i} does not fit in a signed 64-bit integer"),
    })
}

/// The rules that look at one map's own keys (not at nested values):
/// reserved keys, `$type`, and the blob shape.
pub(crate) fn check_map_keys(map: &BTreeMap<String, Ipld>) -> Result<()> {
    for key in ["$link", "$bytes"] {
        if map.contains_key(key) {
            return Err(DataModelError::ReservedKey {
                key: key.to_owned(),
            });
        }
    }
    match map.get("$type") {
        None => Ok(()),
        Some(Ipld::String(t)) if t.is_empty() => Err(DataModelError::InvalidType {
            reason: "must not be empty".to_owned(),
        }),
        Some(Ipld::String(t)) if t == "blob" => check_blob(map),
        Some(Ipld::String(_)) => Ok(()),
        Some(other) => Err(DataModelError::InvalidType {
            reason: format!("must be a string, found {}", kind_name(other)),
        }),
    }
}

/// A blob is exactly `{"$type": "blob", "ref": <raw link>, "mimeType":
/// <non-empty string>, "size": <integer >= 1>}`.
fn check_blob(map: &BTreeMap<String, Ipld>) -> Result<()> {
    let fail = |reason: String| Err(DataModelError::InvalidBlob { reason });
    if let Some(extra) = map
        .keys()
        .find(|k| !matches!(k.as_str(), "$type" | "ref" | "mimeType" | "size"))
    {
        return fail(format!("unexpected key {extra:?}"));
    }
    match map.get("ref") {
        Some(Ipld::Link(cid)) if cid.codec() == RAW_CODEC => {}
        Some(Ipld::Link(_)) => return fail("ref must be a CID with the raw codec".to_owned()),
        Some(other) => return fail(format!("ref must be a link, found {}", kind_name(other))),
        None => return fail("missing ref".to_owned()),
    }
    match map.get("mimeType") {
        Some(Ipld::String(m)) if !m.is_empty() => {}
        Some(Ipld::String(_)) => return fail("mimeType must not be empty".to_owned()),
        Some(other) => {
            return fail(format!(
                "mimeType must be a string, found {}",
                kind_name(other)
            ));
        }
        None => return fail("missing mimeType".to_owned()),
    }
    match map.get("size") {
        Some(Ipld::Integer(n)) if *n >= 1 && *n <= i128::from(i64::MAX) => Ok(()),
        Some(Ipld::Integer(n)) => fail(format!("size must be a positive integer, found {n}")),
        Some(other) => fail(format!(
            "size must be an integer, found {}",
            kind_name(other)
        )),
        None => fail("missing size".to_owned()),
    }
}

/// A short name of the value's kind, for error messages.
pub(crate) fn kind_name(value: &Ipld) -> &'static str {
    match value {
        Ipld::Null => "null",
        Ipld::Bool(_) => "boolean",
        Ipld::Integer(_) => "integer",
        Ipld::Float(_) => "float",
        Ipld::String(_) => "string",
        Ipld::Bytes(_) => "bytes",
        Ipld::List(_) => "list",
        Ipld::Map(_) => "map",
        Ipld::Link(_) => "link",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cid::{cid_for_blob, cid_for_cbor};

    fn map(entries: &[(&str, Ipld)]) -> Ipld {
        Ipld::Map(
            entries
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
        )
    }

    fn blob(r: Ipld, mime: Ipld, size: Ipld) -> Ipld {
        map(&[
            ("$type", Ipld::String("blob".into())),
            ("ref", r),
            ("mimeType", mime),
            ("size", size),
        ])
    }

    #[test]
    fn accepts_plain_values() {
        let ok = map(&[
            ("$type", Ipld::String("com.example.x".into())),
            ("a", Ipld::Integer(i64::MIN.into())),
            ("b", Ipld::List(vec![Ipld::Null, Ipld::Bool(true)])),
            ("c", Ipld::Link(cid_for_cbor(b"x"))),
            (
                "d",
                blob(
                    Ipld::Link(cid_for_blob(b"x")),
                    Ipld::String("image/png".into()),
                    Ipld::Integer(1),
                ),
            ),
        ]);
        check_record(&ok).unwrap();
    }

    #[test]
    fn rejects_bad_values() {
        let cases = [
            Ipld::Float(1.0),
            Ipld::Integer(i128::from(i64::MAX) + 1),
            map(&[("$type", Ipld::Null)]),
            map(&[("$type", Ipld::String(String::new()))]),
            map(&[("$link", Ipld::String("x".into()))]),
            map(&[("$bytes", Ipld::String("x".into()))]),
            blob(
                Ipld::Link(cid_for_cbor(b"x")),
                Ipld::String("a/b".into()),
                Ipld::Integer(1),
            ),
            blob(
                Ipld::Link(cid_for_blob(b"x")),
                Ipld::String(String::new()),
                Ipld::Integer(1),
            ),
            blob(
                Ipld::Link(cid_for_blob(b"x")),
                Ipld::String("a/b".into()),
                Ipld::Integer(0),
            ),
            blob(
                Ipld::String("x".into()),
                Ipld::String("a/b".into()),
                Ipld::Integer(1),
            ),
        ];
        for case in cases {
            assert!(check_data_model(&case).is_err(), "{case:?} accepted");
        }
    }

    #[test]
    fn depth_limit_is_exact() {
        let mut v = Ipld::Null;
        for _ in 0..MAX_DEPTH {
            v = Ipld::List(vec![v]);
        }
        check_data_model(&v).unwrap();
        let v = Ipld::List(vec![v]);
        assert_eq!(
            check_data_model(&v),
            Err(DataModelError::TooDeep { max: MAX_DEPTH })
        );
    }

    #[test]
    fn record_must_be_map() {
        assert!(matches!(
            check_record(&Ipld::List(vec![])),
            Err(DataModelError::RecordNotObject { found: "list" })
        ));
    }
}
