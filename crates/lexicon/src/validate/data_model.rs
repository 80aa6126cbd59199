//! The atproto data model as seen in JSON: which shape a node has (integer,
//! bytes, link, blob …) and whether that shape is well formed. These checks
//! hold whatever the schema says, so they also run on fields the schema does
//! not declare and inside `unknown` values.

use serde_json::{Map, Number, Value};

use super::rules;
use super::{Path, Sink};
use crate::syntax::Format;

/// One data node, classified once. Malformed special objects have already
/// been reported when a `Kind` exists, so schema checks only add their own
/// findings.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind<'v> {
    Null,
    Bool(bool),
    Int(i64),
    /// A float or an integer outside 64 bits (already reported).
    BadNumber,
    Str(&'v str),
    Array(&'v [Value]),
    /// A plain object, possibly carrying a (well-formed or reported) `$type`.
    Object(&'v Map<String, Value>),
    /// A `$bytes` object: the decoded length when well formed.
    Bytes(Option<u64>),
    /// A `$link` object (well formed or reported).
    Link,
    /// A `$type: "blob"` object.
    Blob(BlobRef<'v>),
}

/// The parts of a blob the schema constrains; `None` where the data was
/// malformed (and reported).
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlobRef<'v> {
    pub size: Option<i64>,
    pub mime_type: Option<&'v str>,
}

/// Integer view of a JSON number under the data model.
pub(crate) enum Num {
    Int(i64),
    /// Has a fractional part (or is not finite).
    Float,
    /// Integral, but outside the signed 64-bit range.
    TooBig,
}

const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;

/// `123` and `123.0` are integers (the data-model fixtures accept the
/// latter); `123.5` is a float, which the data model forbids.
pub(crate) fn number(n: &Number) -> Num {
    if let Some(i) = n.as_i64() {
        return Num::Int(i);
    }
    if n.is_u64() {
        return Num::TooBig;
    }
    match n.as_f64() {
        Some(f) if f.is_finite() && f.fract() == 0.0 => {
            if (-TWO_POW_63..TWO_POW_63).contains(&f) {
                // In range and integral, so the cast is exact.
                Num::Int(f as i64)
            } else {
                Num::TooBig
            }
        }
        _ => Num::Float,
    }
}

/// Classifies `v` and reports what makes this node (not its children)
/// invalid under the data model.
pub(crate) fn classify<'v>(v: &'v Value, path: &Path<'_>, sink: &mut Sink) -> Kind<'v> {
    match v {
        Value::Null => Kind::Null,
        Value::Bool(b) => Kind::Bool(*b),
        Value::Number(n) => match number(n) {
            Num::Int(i) => Kind::Int(i),
            Num::Float => {
                sink.report(
                    path,
                    rules::DATA_MODEL,
                    format!(
                        "{} is the float {n}; the atproto data model has no floats",
                        path.subject()
                    ),
                );
                Kind::BadNumber
            }
            Num::TooBig => {
                sink.report(
                    path,
                    rules::DATA_MODEL,
                    format!(
                        "{} is {n}, outside the signed 64-bit integer range",
                        path.subject()
                    ),
                );
                Kind::BadNumber
            }
        },
        Value::String(s) => Kind::Str(s),
        Value::Array(items) => Kind::Array(items),
        Value::Object(map) => classify_object(map, path, sink),
    }
}

fn classify_object<'v>(map: &'v Map<String, Value>, path: &Path<'_>, sink: &mut Sink) -> Kind<'v> {
    if let Some(link) = map.get("$link") {
        check_only_key(map, "$link", path, sink);
        match link {
            Value::String(s) => {
                if let Err(reason) = check_link(s) {
                    sink.report(
                        path,
                        rules::DATA_MODEL,
                        format!("{} has a $link that {reason}", path.subject()),
                    );
                }
            }
            other => sink.report(
                path,
                rules::DATA_MODEL,
                format!(
                    "{}: $link must be a CID string, found {}",
                    path.subject(),
                    describe(other)
                ),
            ),
        }
        return Kind::Link;
    }
    if let Some(bytes) = map.get("$bytes") {
        check_only_key(map, "$bytes", path, sink);
        let len = match bytes {
            Value::String(s) => match base64_len(s) {
                Ok(len) => Some(len),
                Err(reason) => {
                    sink.report(
                        path,
                        rules::DATA_MODEL,
                        format!("{}: $bytes is not valid base64: {reason}", path.subject()),
                    );
                    None
                }
            },
            other => {
                sink.report(
                    path,
                    rules::DATA_MODEL,
                    format!(
                        "{}: $bytes must be a base64 string, found {}",
                        path.subject(),
                        describe(other)
                    ),
                );
                None
            }
        };
        return Kind::Bytes(len);
    }
    match map.get("$type") {
        None => Kind::Object(map),
        Some(Value::String(t)) if t == "blob" => Kind::Blob(check_blob(map, path, sink)),
        Some(Value::String(t)) if !t.is_empty() => Kind::Object(map),
        Some(other) => {
            let type_path = path.key("$type");
            sink.report(
                &type_path,
                rules::DATA_MODEL,
                format!(
                    "$type must be a non-empty string, found {}",
                    describe(other)
                ),
            );
            Kind::Object(map)
        }
    }
}

fn check_only_key(map: &Map<String, Value>, key: &str, path: &Path<'_>, sink: &mut Sink) {
    if map.len() > 1 {
        let extra: Vec<&str> = map
            .keys()
            .filter(|k| *k != key)
            .take(5)
            .map(String::as_str)
            .collect();
        sink.report(
            path,
            rules::DATA_MODEL,
            format!(
                "{}: a {key} object must have no other keys, found {}",
                path.subject(),
                extra.join(", ")
            ),
        );
    }
}

/// A `$link` (or legacy blob `cid`) must be a CID: CIDv1 syntax, and it
/// must decode.
pub(crate) fn check_link(s: &str) -> Result<(), String> {
    Format::Cid.check(s).map_err(|e| format!("is {}", e))?;
    cid::Cid::try_from(s)
        .map(|_| ())
        .map_err(|e| format!("does not decode as a CID: {e}"))
}

/// Checks the blob fields; extra keys are allowed (forward compatibility).
fn check_blob<'v>(map: &'v Map<String, Value>, path: &Path<'_>, sink: &mut Sink) -> BlobRef<'v> {
    let subject = || path.subject();
    match map.get("ref") {
        Some(Value::Object(r)) if r.contains_key("$link") => {}
        Some(other) => sink.report(
            &path.key("ref"),
            rules::DATA_MODEL,
            format!(
                "blob ref must be a {{\"$link\": cid}} object, found {}",
                describe(other)
            ),
        ),
        None => sink.report(
            path,
            rules::DATA_MODEL,
            format!("{} is a blob without a ref", subject()),
        ),
    }
    let mime_type = match map.get("mimeType") {
        Some(Value::String(m)) if !m.is_empty() => Some(m.as_str()),
        Some(other) => {
            sink.report(
                &path.key("mimeType"),
                rules::DATA_MODEL,
                format!(
                    "blob mimeType must be a non-empty string, found {}",
                    describe(other)
                ),
            );
            None
        }
        None => {
            sink.report(
                path,
                rules::DATA_MODEL,
                format!("{} is a blob without a mimeType", subject()),
            );
            None
        }
    };
    let size = match map.get("size") {
        Some(Value::Number(n)) => match number(n) {
            Num::Int(i) if i >= 0 => Some(i),
            Num::Int(i) => {
                sink.report(
                    &path.key("size"),
                    rules::DATA_MODEL,
                    format!("blob size must not be negative, found {i}"),
                );
                None
            }
            // The float or overflow itself is reported when the child is walked.
            Num::Float | Num::TooBig => None,
        },
        Some(other) => {
            sink.report(
                &path.key("size"),
                rules::DATA_MODEL,
                format!("blob size must be an integer, found {}", describe(other)),
            );
            None
        }
        None => {
            sink.report(
                path,
                rules::DATA_MODEL,
                format!("{} is a blob without a size", subject()),
            );
            None
        }
    };
    BlobRef { size, mime_type }
}

/// The decoded length of standard base64 (RFC 4648 §4), padding optional,
/// without decoding. Non-zero trailing bits are accepted: the interop
/// fixtures use `"123"`, which strict decoders reject for that reason.
pub(crate) fn base64_len(s: &str) -> Result<u64, String> {
    let b = s.as_bytes();
    let mut body = b;
    for _ in 0..2 {
        if let [rest @ .., b'='] = body {
            body = rest;
        }
    }
    let padded = body.len() != b.len();
    if !all_base64(body)
        && let Some(pos) = body.iter().position(|&c| !is_base64(c))
    {
        let c = s[pos..].chars().next().unwrap_or('?');
        return Err(format!("{c:?} at position {pos} is not a base64 character"));
    }
    if padded && !b.len().is_multiple_of(4) {
        return Err("padding does not complete a 4-character group".to_string());
    }
    let rem = body.len() % 4;
    if rem == 1 {
        return Err(format!("{} characters can not be base64", body.len()));
    }
    let full = (body.len() / 4) as u64 * 3;
    Ok(full + [0, 0, 1, 2][rem])
}

/// Whether every byte is a base64 character. Sealed records are mostly
/// `$bytes`, so this runs over most of a record's size: chunks folded
/// without an early exit compile to vector compares (the byte-by-byte
/// search for a bad character runs only when a chunk has one).
fn all_base64(b: &[u8]) -> bool {
    b.chunks(64)
        .all(|chunk| chunk.iter().fold(true, |ok, &c| ok & is_base64(c)))
}

fn is_base64(c: u8) -> bool {
    // `| 0x20` folds A–Z onto a–z; bytes ≥ 0x80 fall outside every range.
    ((c | 0x20).wrapping_sub(b'a') < 26) | (c.wrapping_sub(b'0') < 10) | (c == b'+') | (c == b'/')
}

/// Names the data-model kind of a value for messages ("a string", "bytes" …).
pub(crate) fn describe(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) => match number(n) {
            Num::Int(_) => "an integer",
            Num::Float => "a float",
            Num::TooBig => "an out-of-range integer",
        },
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(m) => {
            if m.contains_key("$link") {
                "a cid-link"
            } else if m.contains_key("$bytes") {
                "bytes"
            } else if m.get("$type").and_then(Value::as_str) == Some("blob") {
                "a blob"
            } else {
                "an object"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn integral_floats_are_integers_and_others_are_not() {
        let n = |v: Value| match v {
            Value::Number(n) => number(&n),
            _ => unreachable!(),
        };
        assert!(matches!(n(json!(123)), Num::Int(123)));
        assert!(matches!(n(json!(123.0)), Num::Int(123)));
        assert!(matches!(n(json!(-0.0)), Num::Int(0)));
        assert!(matches!(n(json!(123.5)), Num::Float));
        assert!(matches!(n(json!(u64::MAX)), Num::TooBig));
        assert!(matches!(n(json!(i64::MIN)), Num::Int(i64::MIN)));
        assert!(matches!(n(json!(9.3e18)), Num::TooBig));
        assert!(matches!(n(json!(-TWO_POW_63)), Num::Int(i64::MIN)));
        assert!(matches!(n(json!(TWO_POW_63)), Num::TooBig));
    }

    #[test]
    fn base64_lengths_without_decoding() {
        assert_eq!(base64_len(""), Ok(0));
        assert_eq!(base64_len("b25l"), Ok(3));
        assert_eq!(base64_len("b24"), Ok(2));
        assert_eq!(base64_len("b24="), Ok(2));
        assert_eq!(base64_len("bw"), Ok(1));
        assert_eq!(base64_len("bw=="), Ok(1));
        // Non-zero trailing bits, as in the interop valid fixture.
        assert_eq!(base64_len("123"), Ok(2));
        assert_eq!(
            base64_len("nFERjvLLiw9qm45JrqH9QTzyC2Lu1Xb4ne6+sBrCzI0"),
            Ok(32)
        );
        for bad in [
            "b", "b25lb", "bw=", "b===", "b2-l", "b2_l", "b2 l", "é", "=", "bw===",
        ] {
            assert!(base64_len(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn links_must_be_decodable_cidv1() {
        assert!(check_link("bafyreiclp443lavogvhj3d2ob2cxbfuscni2k5jk7bebjzg7khl3esabwq").is_ok());
        assert!(check_link(".").is_err());
        assert!(check_link("QmYwAPJzv5CZsnA625s3Xf2nemtYgPpHdWEz79ojWnPbdG").is_err());
        // Well-formed base32 but not a CID.
        assert!(check_link("baaaaaaaaaaaaa").is_err());
    }
}
