//! atproto JSON ⇄ data model ([`Ipld`]).
//!
//! atproto JSON is plain JSON plus two conventions: `{"$link": "<cid>"}` is a
//! link and `{"$bytes": "<base64>"}` is a byte string.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::alphabet::STANDARD;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use ipld_core::ipld::Ipld;
use serde_json::{Map, Number, Value};

use super::cid::{check_blessed_cid, parse_cid};
use super::error::{DataModelError, Result};
use super::validate::{check_integer, check_map_keys, enter};

/// atproto `$bytes` base64: the standard alphabet; writes no padding; reads with or without
/// padding (the spec makes `=` optional); rejects non-zero trailing bits.
pub const BASE64: GeneralPurpose = GeneralPurpose::new(
    &STANDARD,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Largest integer magnitude a JSON number parsed as a double holds exactly
/// (2^53 - 1, JavaScript's `Number.MAX_SAFE_INTEGER`).
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// Converts atproto JSON to a data model value (any kind, not only records).
///
/// A number with a fraction part (`1.5`) is rejected as a float. A number
/// written as a float whose value is a whole number within ±(2^53 - 1), like
/// `123.0`, is accepted as the integer it equals. Integers must fit in `i64`.
pub fn json_to_ipld(json: &Value) -> Result<Ipld> {
    from_json(json, 0)
}

/// Converts an atproto JSON record to a data model value; the top level must
/// be an object.
pub fn record_from_json(json: &Value) -> Result<Ipld> {
    match json {
        Value::Object(_) => json_to_ipld(json),
        other => Err(DataModelError::RecordNotObject {
            found: json_kind(other),
        }),
    }
}

/// Converts a data model value to atproto JSON: links become `{"$link": ..}`
/// (base32 CID string) and bytes become `{"$bytes": ..}` (standard base64,
/// no padding).
///
/// The value is checked against the data model while converting, so an
/// invalid value (a float, a `$link` map key, ...) gives an error.
pub fn ipld_to_json(value: &Ipld) -> Result<Value> {
    to_json(value, 0)
}

fn from_json(json: &Value, depth: usize) -> Result<Ipld> {
    Ok(match json {
        Value::Null => Ipld::Null,
        Value::Bool(b) => Ipld::Bool(*b),
        Value::String(s) => Ipld::String(s.clone()),
        Value::Number(n) => Ipld::Integer(number_to_integer(n)?.into()),
        Value::Array(items) => {
            let depth = enter(depth)?;
            Ipld::List(
                items
                    .iter()
                    .map(|item| from_json(item, depth))
                    .collect::<Result<_>>()?,
            )
        }
        // `$link` and `$bytes` objects are scalars: they do not add depth.
        Value::Object(obj) if obj.contains_key("$link") => Ipld::Link(link_from_json(obj)?),
        Value::Object(obj) if obj.contains_key("$bytes") => Ipld::Bytes(bytes_from_json(obj)?),
        Value::Object(obj) => {
            let depth = enter(depth)?;
            {
                let map = obj
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), from_json(v, depth)?)))
                    .collect::<Result<BTreeMap<_, _>>>()?;
                check_map_keys(&map)?;
                Ipld::Map(map)
            }
        }
    })
}

fn number_to_integer(n: &Number) -> Result<i64> {
    if let Some(i) = n.as_i64() {
        return Ok(i);
    }
    if n.is_u64() {
        return Err(DataModelError::IntegerOutOfRange {
            detail: format!("{n} does not fit in a signed 64-bit integer"),
        });
    }
    let f = n.as_f64().unwrap_or(f64::NAN);
    if !f.is_finite() || f.fract() != 0.0 {
        return Err(DataModelError::Float {
            detail: format!("JSON number {n} is not an integer"),
        });
    }
    if f.abs() > MAX_SAFE_INTEGER {
        return Err(DataModelError::IntegerOutOfRange {
            detail: format!(
                "{n} is written as a float beyond ±(2^53-1), so its exact value is unknown"
            ),
        });
    }
    // Exact: a whole number within ±(2^53 - 1).
    Ok(f as i64)
}

fn only_key<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    if obj.len() == 1 { obj.get(key) } else { None }
}

fn link_from_json(obj: &Map<String, Value>) -> Result<::cid::Cid> {
    let fail = |reason: String| DataModelError::InvalidLink { reason };
    match only_key(obj, "$link") {
        None => Err(fail(format!(
            "a $link object must have exactly one key, found {}",
            obj.len()
        ))),
        Some(Value::String(s)) => parse_cid(s),
        Some(other) => Err(fail(format!(
            "the $link value must be a string, found {}",
            json_kind(other)
        ))),
    }
}

fn bytes_from_json(obj: &Map<String, Value>) -> Result<Vec<u8>> {
    let fail = |reason: String| DataModelError::InvalidBytes { reason };
    match only_key(obj, "$bytes") {
        None => Err(fail(format!(
            "a $bytes object must have exactly one key, found {}",
            obj.len()
        ))),
        Some(Value::String(s)) => BASE64
            .decode(s)
            .map_err(|e| fail(format!("bad base64: {e}"))),
        Some(other) => Err(fail(format!(
            "the $bytes value must be a string, found {}",
            json_kind(other)
        ))),
    }
}

fn to_json(value: &Ipld, depth: usize) -> Result<Value> {
    Ok(match value {
        Ipld::Null => Value::Null,
        Ipld::Bool(b) => Value::Bool(*b),
        Ipld::Integer(i) => Value::Number(check_integer(*i)?.into()),
        Ipld::Float(f) => {
            return Err(DataModelError::Float {
                detail: format!("float value {f}"),
            });
        }
        Ipld::String(s) => Value::String(s.clone()),
        Ipld::Bytes(b) => single("$bytes", BASE64.encode(b)),
        Ipld::Link(cid) => {
            check_blessed_cid(cid)?;
            single("$link", cid.to_string())
        }
        Ipld::List(items) => {
            let depth = enter(depth)?;
            Value::Array(
                items
                    .iter()
                    .map(|item| to_json(item, depth))
                    .collect::<Result<_>>()?,
            )
        }
        Ipld::Map(map) => {
            let depth = enter(depth)?;
            check_map_keys(map)?;
            Value::Object(
                map.iter()
                    .map(|(k, v)| Ok((k.clone(), to_json(v, depth)?)))
                    .collect::<Result<_>>()?,
            )
        }
    })
}

fn single(key: &str, value: String) -> Value {
    let mut obj = Map::with_capacity(1);
    obj.insert(key.to_owned(), Value::String(value));
    Value::Object(obj)
}

fn json_kind(json: &Value) -> &'static str {
    match json {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MAX_DEPTH;
    use serde_json::json;

    const LINK: &str = "bafyreidfayvfuwqa7qlnopdjiqrxzs6blmoeu4rujcjtnci5beludirz2a";

    #[test]
    fn numbers() {
        assert_eq!(json_to_ipld(&json!(123.0)).unwrap(), Ipld::Integer(123));
        assert_eq!(json_to_ipld(&json!(-0.0)).unwrap(), Ipld::Integer(0));
        assert_eq!(
            json_to_ipld(&json!(i64::MIN)).unwrap(),
            Ipld::Integer(i64::MIN.into())
        );
        assert_eq!(
            json_to_ipld(&json!(9_007_199_254_740_991.0)).unwrap(),
            Ipld::Integer(9_007_199_254_740_991)
        );
        assert!(matches!(
            json_to_ipld(&json!(1.5)),
            Err(DataModelError::Float { .. })
        ));
        assert!(matches!(
            json_to_ipld(&json!(u64::MAX)),
            Err(DataModelError::IntegerOutOfRange { .. })
        ));
        assert!(matches!(
            json_to_ipld(&json!(1e300)),
            Err(DataModelError::IntegerOutOfRange { .. })
        ));
    }

    #[test]
    fn bytes_padding_is_optional_and_output_unpadded() {
        let padded = json!({"$bytes": "YWJjZA=="});
        let unpadded = json!({"$bytes": "YWJjZA"});
        assert_eq!(
            json_to_ipld(&padded).unwrap(),
            Ipld::Bytes(b"abcd".to_vec())
        );
        assert_eq!(
            json_to_ipld(&unpadded).unwrap(),
            Ipld::Bytes(b"abcd".to_vec())
        );
        assert_eq!(
            ipld_to_json(&Ipld::Bytes(b"abcd".to_vec())).unwrap(),
            unpadded
        );
        for bad in ["YWJjZB", "YWJj ZA", "YWJjZA-_", "Y"] {
            assert!(
                matches!(
                    json_to_ipld(&json!({"$bytes": bad})),
                    Err(DataModelError::InvalidBytes { .. })
                ),
                "{bad:?} accepted"
            );
        }
    }

    #[test]
    fn links() {
        let v = json!({"$link": LINK});
        let ipld = json_to_ipld(&v).unwrap();
        assert!(matches!(ipld, Ipld::Link(_)));
        assert_eq!(ipld_to_json(&ipld).unwrap(), v);
        assert!(matches!(
            json_to_ipld(&json!({"$link": LINK, "$type": "x"})),
            Err(DataModelError::InvalidLink { .. })
        ));
        assert!(matches!(
            json_to_ipld(&json!({"$link": null})),
            Err(DataModelError::InvalidLink { .. })
        ));
    }

    #[test]
    fn record_top_level() {
        assert!(matches!(
            record_from_json(&json!([1])),
            Err(DataModelError::RecordNotObject { found: "array" })
        ));
        assert!(record_from_json(&json!({})).is_ok());
    }

    #[test]
    fn reserved_keys_in_map_are_not_written() {
        let map = Ipld::Map(BTreeMap::from([(
            "$link".to_owned(),
            Ipld::String(LINK.to_owned()),
        )]));
        assert!(matches!(
            ipld_to_json(&map),
            Err(DataModelError::ReservedKey { .. })
        ));
    }

    #[test]
    fn depth_limit() {
        let mut v = json!(1);
        for _ in 0..MAX_DEPTH {
            v = json!([v]);
        }
        let ipld = json_to_ipld(&v).unwrap();
        assert_eq!(ipld_to_json(&ipld).unwrap(), v);
        let v = json!({ "a": v });
        assert_eq!(
            json_to_ipld(&v),
            Err(DataModelError::TooDeep { max: MAX_DEPTH })
        );
    }

    #[test]
    fn links_and_bytes_do_not_add_depth() {
        // The same rule as the DAG-CBOR side, where they are scalars.
        for leaf in [json!({"$link": LINK}), json!({"$bytes": "AA"})] {
            let mut v = leaf;
            for _ in 0..MAX_DEPTH {
                v = json!([v]);
            }
            let ipld = json_to_ipld(&v).unwrap();
            assert_eq!(ipld_to_json(&ipld).unwrap(), v);
        }
    }
}
