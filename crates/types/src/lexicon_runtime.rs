//! The runtime of the generated lexicon types: hand-written, and kept out
//! of the generated tree (`gelstore::lexicon`, written by `gelstore lex gen`),
//! which imports it as `support`. Code generated for other lexicons, in
//! another crate, uses it too (`lex gen --support gelstore::lexicon_runtime`).
//!
//! Every generated type serializes with serde to both wire forms of the
//! atproto data model: atproto JSON (`serde_json`: bytes as `{"$bytes"}`,
//! links as `{"$link"}`) and DAG-CBOR (`serde_ipld_dagcbor`: CBOR byte
//! strings, tag-42 links). The types here carry the difference:
//!
//! - [`Bytes`], [`CidLink`] and [`Data`] write the JSON form when the
//!   serializer is human readable and the binary form otherwise. They *read*
//!   either form whatever the deserializer says, because serde's buffering
//!   (`#[serde(flatten)]`, which keeps unknown fields) reports every buffered
//!   value as human readable even when it came from CBOR.
//! - [`Extra`] holds the fields a newer lexicon added, so decode → encode
//!   keeps them (an old client never destroys a new client's data).
//! - Unions are `$type`-tagged enums: decoding buffers the value as [`Data`],
//!   reads `$type` and decodes the variant from the buffer ([`union_parts`],
//!   [`from_ipld`]); encoding adds `$type` in front of the variant's fields
//!   ([`Tagged`]).
//! - Records carry `$type` = their NSID on the wire; the Rust struct does
//!   not ([`Record`], [`serialize_record`], [`deserialize_record`]).
//!
//! Generated `validate()` methods ([`Validate`]) report [`ValidationError`]s
//! with JSON-pointer paths and the rule names of the dynamic validator
//! ([`gelstore_lexicon::validate::rules`]), using the checks below. String
//! formats are newtypes ([`Did`], [`Datetime`] …) whose constructors run
//! the same `gelstore_lexicon::syntax` checks as the dynamic validator, so
//! a value of one of these types is always valid.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use cid::Cid;
use serde::de::{self, DeserializeOwned, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use gelstore_lexicon::syntax::{Format, SyntaxError};
pub use gelstore_lexicon::validate::rules;
use gelstore_lexicon::validate::{count_graphemes, mime_accepted};
pub use ipld_core::ipld::Ipld;

use gelstore_model::{self as model, BASE64};

/// Reads `$bytes` like the dynamic validator: padding optional, non-zero
/// trailing bits accepted (the interop fixtures use `"123"`). Writing uses
/// the data model's canonical form (no padding).
const BASE64_READ: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

// ---------------------------------------------------------------------------
// Validation results

/// One constraint a value breaks: where (`path`, a JSON pointer into the
/// value, `""` for the root), what (`message`), and which rule (one of
/// [`rules`], the same names the dynamic validator reports).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidationError {
    pub path: String,
    pub message: String,
    pub rule: &'static str,
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "/"
        } else {
            &self.path
        };
        write!(f, "{path}: {} [{}]", self.message, self.rule)
    }
}

/// Every constraint a value breaks, in the order the checks met them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ValidationErrors(pub Vec<ValidationError>);

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ValidationErrors {}

/// The list generated checks push to.
pub type Errors = Vec<ValidationError>;

/// Compiled lexicon constraints. Generated for every lexicon type; the
/// checks are plain code (no schema is looked up at run time).
pub trait Validate {
    /// Checks `self`, found at `path`, pushing every broken constraint.
    fn validate_at(&self, path: &Path<'_>, errors: &mut Errors);

    /// Checks `self` as a whole value (paths start at the root).
    fn validate(&self) -> Result<(), ValidationErrors> {
        let mut errors = Vec::new();
        self.validate_at(&Path::Root, &mut errors);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ValidationErrors(errors))
        }
    }
}

impl<T: Validate> Validate for Box<T> {
    fn validate_at(&self, path: &Path<'_>, errors: &mut Errors) {
        (**self).validate_at(path, errors)
    }
}

/// A JSON pointer built on the stack; rendered only when a check fails.
#[derive(Clone, Copy, Debug)]
pub enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl<'a> Path<'a> {
    pub fn key(&'a self, key: &'a str) -> Path<'a> {
        Path::Key(self, key)
    }

    pub fn index(&'a self, i: usize) -> Path<'a> {
        Path::Index(self, i)
    }

    /// The RFC 6901 pointer (`""` for the root).
    pub fn render(&self) -> String {
        let mut segments = Vec::new();
        let mut at = self;
        loop {
            match at {
                Path::Root => break,
                Path::Key(parent, key) => {
                    segments.push((*key).to_string());
                    at = parent;
                }
                Path::Index(parent, i) => {
                    segments.push(i.to_string());
                    at = parent;
                }
            }
        }
        let mut out = String::new();
        for s in segments.iter().rev() {
            out = gelstore_lexicon::finding::pointer_push(&out, s);
        }
        out
    }

    /// A name for the value in messages: the field name, `tags[2]`, `value`.
    pub fn subject(&self) -> String {
        match self {
            Path::Root => "value".to_string(),
            Path::Key(_, key) => (*key).to_string(),
            Path::Index(parent, i) => format!("{}[{i}]", parent.subject()),
        }
    }

    fn report(&self, errors: &mut Errors, rule: &'static str, message: String) {
        errors.push(ValidationError {
            path: self.render(),
            message,
            rule,
        });
    }
}

// ---------------------------------------------------------------------------
// Checks called by generated `validate_at` bodies

fn plural(n: u64, unit: &str) -> String {
    if n == 1 {
        format!("1 {unit}")
    } else {
        format!("{n} {unit}s")
    }
}

/// `maxLength` of a string, in UTF-8 bytes.
pub fn max_length(s: &str, max: u64, path: &Path<'_>, errors: &mut Errors) {
    let n = s.len() as u64;
    if n > max {
        let m = format!(
            "{} is {} of UTF-8, over the maximum of {max}",
            path.subject(),
            plural(n, "byte")
        );
        path.report(errors, rules::MAX_LENGTH, m);
    }
}

/// `minLength` of a string, in UTF-8 bytes.
pub fn min_length(s: &str, min: u64, path: &Path<'_>, errors: &mut Errors) {
    let n = s.len() as u64;
    if n < min {
        let m = format!(
            "{} is {} of UTF-8, under the minimum of {min}",
            path.subject(),
            plural(n, "byte")
        );
        path.report(errors, rules::MIN_LENGTH, m);
    }
}

/// `maxGraphemes`: counted only when the byte length leaves it open.
pub fn max_graphemes(s: &str, max: u64, path: &Path<'_>, errors: &mut Errors) {
    if s.len() as u64 > max && count_graphemes(s, max.saturating_add(1)) > max {
        let n = count_graphemes(s, u64::MAX);
        let m = format!(
            "{} is {}, over the maximum of {max}",
            path.subject(),
            plural(n, "grapheme")
        );
        path.report(errors, rules::MAX_GRAPHEMES, m);
    }
}

/// `minGraphemes`.
pub fn min_graphemes(s: &str, min: u64, path: &Path<'_>, errors: &mut Errors) {
    let n = count_graphemes(s, min);
    if n < min {
        let m = format!(
            "{} is {}, under the minimum of {min}",
            path.subject(),
            plural(n, "grapheme")
        );
        path.report(errors, rules::MIN_GRAPHEMES, m);
    }
}

/// A string `const`.
pub fn const_str(s: &str, expected: &str, path: &Path<'_>, errors: &mut Errors) {
    if s != expected {
        let m = format!("{} must be {expected:?}, found {s:?}", path.subject());
        path.report(errors, rules::CONST, m);
    }
}

/// A string `enum` where the Rust type is a plain string.
pub fn enum_str(s: &str, values: &[&str], path: &Path<'_>, errors: &mut Errors) {
    if !values.contains(&s) {
        let m = format!(
            "{} is {s:?}, which is not one of {values:?}",
            path.subject()
        );
        path.report(errors, rules::ENUM, m);
    }
}

/// A string `format` where the Rust type is not already a format newtype
/// (a `knownValues` or `enum` string with a format).
pub fn format(s: &str, format: Format, path: &Path<'_>, errors: &mut Errors) {
    if let Err(e) = format.check(s) {
        let m = format!("{} {s:?} is {e}", path.subject());
        path.report(errors, rules::FORMAT, m);
    }
}

/// An integer `const`.
pub fn const_int(i: i64, expected: i64, path: &Path<'_>, errors: &mut Errors) {
    if i != expected {
        let m = format!("{} must be {expected}, found {i}", path.subject());
        path.report(errors, rules::CONST, m);
    }
}

/// An integer `enum`.
pub fn enum_int(i: i64, values: &[i64], path: &Path<'_>, errors: &mut Errors) {
    if !values.contains(&i) {
        let m = format!("{} is {i}, which is not one of {values:?}", path.subject());
        path.report(errors, rules::ENUM, m);
    }
}

/// An integer `minimum`.
pub fn minimum(i: i64, min: i64, path: &Path<'_>, errors: &mut Errors) {
    if i < min {
        let m = format!("{} is {i}, under the minimum of {min}", path.subject());
        path.report(errors, rules::MINIMUM, m);
    }
}

/// An integer `maximum`.
pub fn maximum(i: i64, max: i64, path: &Path<'_>, errors: &mut Errors) {
    if i > max {
        let m = format!("{} is {i}, over the maximum of {max}", path.subject());
        path.report(errors, rules::MAXIMUM, m);
    }
}

/// A boolean `const`.
pub fn const_bool(b: bool, expected: bool, path: &Path<'_>, errors: &mut Errors) {
    if b != expected {
        let m = format!("{} must be {expected}, found {b}", path.subject());
        path.report(errors, rules::CONST, m);
    }
}

/// An array's `maxLength`.
pub fn max_items(n: usize, max: u64, path: &Path<'_>, errors: &mut Errors) {
    if n as u64 > max {
        let m = format!(
            "{} has {}, over the maximum of {max}",
            path.subject(),
            plural(n as u64, "item")
        );
        path.report(errors, rules::ARRAY_LENGTH, m);
    }
}

/// An array's `minLength`.
pub fn min_items(n: usize, min: u64, path: &Path<'_>, errors: &mut Errors) {
    if (n as u64) < min {
        let m = format!(
            "{} has {}, under the minimum of {min}",
            path.subject(),
            plural(n as u64, "item")
        );
        path.report(errors, rules::ARRAY_LENGTH, m);
    }
}

/// `maxLength` of bytes.
pub fn max_bytes(b: &Bytes, max: u64, path: &Path<'_>, errors: &mut Errors) {
    let n = b.0.len() as u64;
    if n > max {
        let m = format!(
            "{} is {}, over the maximum of {max}",
            path.subject(),
            plural(n, "byte")
        );
        path.report(errors, rules::BYTES_LENGTH, m);
    }
}

/// `minLength` of bytes.
pub fn min_bytes(b: &Bytes, min: u64, path: &Path<'_>, errors: &mut Errors) {
    let n = b.0.len() as u64;
    if n < min {
        let m = format!(
            "{} is {}, under the minimum of {min}",
            path.subject(),
            plural(n, "byte")
        );
        path.report(errors, rules::BYTES_LENGTH, m);
    }
}

/// A blob's `maxSize` (typed blobs only: legacy blobs have no size).
pub fn max_size(b: &BlobRef, max: u64, path: &Path<'_>, errors: &mut Errors) {
    if let BlobRef::Typed(blob) = b
        && blob.size > 0
        && blob.size as u64 > max
    {
        let m = format!(
            "{} is a blob of {}, over the maximum of {max}",
            path.subject(),
            plural(blob.size as u64, "byte")
        );
        path.report(errors, rules::BLOB_SIZE, m);
    }
}

/// A blob's `accept` MIME patterns.
pub fn accept(b: &BlobRef, patterns: &[&str], path: &Path<'_>, errors: &mut Errors) {
    let mime = b.mime_type();
    if !patterns.is_empty() && !patterns.iter().any(|p| mime_accepted(p, mime)) {
        let m = format!(
            "{} has MIME type {mime:?}, which is not accepted (accepted: {})",
            path.subject(),
            patterns.join(", ")
        );
        path.report(errors, rules::BLOB_ACCEPT, m);
    }
}

/// A `ref` to a token: the string must be the token's type id.
pub fn token(s: &str, type_id: &str, path: &Path<'_>, errors: &mut Errors) {
    if s != type_id {
        let m = format!(
            "{} must be the token {type_id:?}, found {s:?}",
            path.subject()
        );
        path.report(errors, rules::TOKEN, m);
    }
}

/// Checks a value of a type the generated code knows by `$type` (an
/// `unknown` field or an open union's unknown variant). Generated as
/// `validate_by_type` at the root of the generated tree; returns false when
/// it does not know the type.
pub type ByType = fn(&str, &Data, &Path<'_>, &mut Errors) -> bool;

/// A lexicon `unknown`: any object, but not bytes, a link or a blob. One
/// whose `$type` the generated code knows is checked as that type.
pub fn unknown(d: &Data, by_type: ByType, path: &Path<'_>, errors: &mut Errors) {
    match &d.0 {
        Ipld::Map(map) if !is_blob_map(map) => {
            data_model(&d.0, path, errors);
            if let Some(Ipld::String(t)) = map.get("$type") {
                by_type(t, d, path, errors);
            }
        }
        other => {
            let m = format!(
                "{} must be an object, found {}",
                path.subject(),
                describe(other)
            );
            path.report(errors, rules::TYPE, m);
        }
    }
}

/// The unknown variant of an open union: checked as its `$type` when the
/// generated code knows it, else only against the data model.
pub fn open_variant(d: &Data, by_type: ByType, path: &Path<'_>, errors: &mut Errors) {
    data_model(&d.0, path, errors);
    if let Some(t) = d.type_id() {
        by_type(t, d, path, errors);
    }
}

/// Fields the lexicon does not declare: only the data-model rules apply.
pub fn extra(extra: &Extra, path: &Path<'_>, errors: &mut Errors) {
    for (k, v) in extra {
        data_model(&v.0, &path.key(k), errors);
    }
}

/// Decodes `d` as `T` and validates it (for [`ByType`] implementations).
pub fn validate_data<T: DeserializeOwned + Validate>(
    d: &Data,
    path: &Path<'_>,
    errors: &mut Errors,
) -> bool {
    let mut ipld = d.0.clone();
    if let Ipld::Map(map) = &mut ipld {
        map.remove("$type");
    }
    match from_ipld::<T>(ipld) {
        Ok(v) => v.validate_at(path, errors),
        Err(e) => {
            let m = format!("{} does not decode as its $type: {e}", path.subject());
            path.report(errors, rules::TYPE, m);
        }
    }
    true
}

fn is_blob_map(map: &BTreeMap<String, Ipld>) -> bool {
    matches!(map.get("$type"), Some(Ipld::String(t)) if t == "blob")
}

fn describe(v: &Ipld) -> &'static str {
    match v {
        Ipld::Null => "null",
        Ipld::Bool(_) => "a boolean",
        Ipld::Integer(_) => "an integer",
        Ipld::Float(_) => "a float",
        Ipld::String(_) => "a string",
        Ipld::Bytes(_) => "bytes",
        Ipld::List(_) => "an array",
        Ipld::Map(m) if is_blob_map(m) => "a blob",
        Ipld::Map(_) => "an object",
        Ipld::Link(_) => "a cid-link",
    }
}

/// The data-model rules the decoder leaves to validation, as the dynamic
/// validator reports them: `$type` is a non-empty string, and a
/// `$type: "blob"` object has a link `ref`, a non-empty `mimeType` and a
/// non-negative integer `size`.
fn data_model(v: &Ipld, path: &Path<'_>, errors: &mut Errors) {
    match v {
        Ipld::List(items) => {
            for (i, item) in items.iter().enumerate() {
                data_model(item, &path.index(i), errors);
            }
        }
        Ipld::Map(map) => {
            match map.get("$type") {
                None => {}
                Some(Ipld::String(t)) if t == "blob" => blob_shape(map, path, errors),
                Some(Ipld::String(t)) if !t.is_empty() => {}
                Some(other) => {
                    let m = format!(
                        "$type must be a non-empty string, found {}",
                        describe(other)
                    );
                    path.key("$type").report(errors, rules::DATA_MODEL, m);
                }
            }
            for (k, child) in map {
                data_model(child, &path.key(k), errors);
            }
        }
        _ => {}
    }
}

fn blob_shape(map: &BTreeMap<String, Ipld>, path: &Path<'_>, errors: &mut Errors) {
    if !matches!(map.get("ref"), Some(Ipld::Link(_))) {
        let m = format!("{} is a blob without a link ref", path.subject());
        path.report(errors, rules::DATA_MODEL, m);
    }
    if !matches!(map.get("mimeType"), Some(Ipld::String(s)) if !s.is_empty()) {
        let m = format!("{} is a blob without a mimeType", path.subject());
        path.report(errors, rules::DATA_MODEL, m);
    }
    if !matches!(map.get("size"), Some(Ipld::Integer(i)) if *i >= 0) {
        let m = format!("{} is a blob without a non-negative size", path.subject());
        path.report(errors, rules::DATA_MODEL, m);
    }
}

// ---------------------------------------------------------------------------
// Data: any data-model value

/// Fields a lexicon does not declare, kept so they survive a round trip.
pub type Extra = BTreeMap<String, Data>;

/// Any value of the atproto data model (lexicon `unknown`, undeclared
/// fields, unknown union variants). Reads atproto JSON and DAG-CBOR; a
/// JSON number written as a float is accepted when it is a whole number
/// within ±(2^53 - 1), as in [`gelstore_model`]; other floats are refused.
#[derive(Clone, Debug, PartialEq)]
pub struct Data(pub Ipld);

impl Data {
    /// The `$type` of a map value, if it has a string one.
    pub fn type_id(&self) -> Option<&str> {
        match &self.0 {
            Ipld::Map(m) => match m.get("$type") {
                Some(Ipld::String(t)) => Some(t),
                _ => None,
            },
            _ => None,
        }
    }

    /// Puts `$type` back on a union body (for unknown variants).
    pub fn with_type(type_id: &str, mut body: Ipld) -> Data {
        if let Ipld::Map(m) = &mut body {
            m.insert("$type".to_string(), Ipld::String(type_id.to_string()));
        }
        Data(body)
    }
}

impl From<Ipld> for Data {
    fn from(v: Ipld) -> Data {
        Data(v)
    }
}

struct IpldRef<'a>(&'a Ipld);

impl Serialize for IpldRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        match self.0 {
            Ipld::Null => s.serialize_unit(),
            Ipld::Bool(b) => s.serialize_bool(*b),
            Ipld::Integer(i) => match i64::try_from(*i) {
                Ok(i) => s.serialize_i64(i),
                Err(_) => Err(S::Error::custom("integer outside the signed 64-bit range")),
            },
            Ipld::Float(_) => Err(S::Error::custom("the atproto data model has no floats")),
            Ipld::String(v) => s.serialize_str(v),
            Ipld::Bytes(b) => BytesRef(b).serialize(s),
            Ipld::Link(c) => CidLink(*c).serialize(s),
            Ipld::List(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&IpldRef(item))?;
                }
                seq.end()
            }
            Ipld::Map(map) => {
                let mut m = s.serialize_map(Some(map.len()))?;
                for (k, v) in map {
                    m.serialize_entry(k, &IpldRef(v))?;
                }
                m.end()
            }
        }
    }
}

impl Serialize for Data {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        IpldRef(&self.0).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Data {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Data, D::Error> {
        d.deserialize_any(DataVisitor).map(Data)
    }
}

/// Largest integer magnitude a double holds exactly.
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

struct DataVisitor;

impl<'de> Visitor<'de> for DataVisitor {
    type Value = Ipld;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an atproto data model value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Ipld, E> {
        Ok(Ipld::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Ipld, E> {
        Ok(Ipld::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Ipld, D::Error> {
        d.deserialize_any(DataVisitor)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Ipld, E> {
        Ok(Ipld::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Ipld, E> {
        Ok(Ipld::Integer(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Ipld, E> {
        i64::try_from(v)
            .map(|v| Ipld::Integer(v.into()))
            .map_err(|_| E::custom(format!("{v} does not fit in a signed 64-bit integer")))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Ipld, E> {
        i64::try_from(v)
            .map(|v| Ipld::Integer(v.into()))
            .map_err(|_| E::custom(format!("{v} does not fit in a signed 64-bit integer")))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Ipld, E> {
        i64::try_from(v)
            .map(|v| Ipld::Integer(v.into()))
            .map_err(|_| E::custom(format!("{v} does not fit in a signed 64-bit integer")))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Ipld, E> {
        if v.is_finite() && v.fract() == 0.0 && v.abs() <= MAX_SAFE_INTEGER {
            Ok(Ipld::Integer(v as i128))
        } else {
            Err(E::custom(format!(
                "the float {v}: the atproto data model has no floats"
            )))
        }
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Ipld, E> {
        Ok(Ipld::String(v.to_string()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Ipld, E> {
        Ok(Ipld::String(v))
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Ipld, E> {
        Ok(Ipld::Bytes(v.to_vec()))
    }

    fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Ipld, E> {
        Ok(Ipld::Bytes(v))
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Ipld, D::Error> {
        d.deserialize_bytes(CidBytesVisitor).map(Ipld::Link)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Ipld, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(item) = seq.next_element::<Data>()? {
            items.push(item.0);
        }
        Ok(Ipld::List(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ipld, A::Error> {
        let mut out = BTreeMap::new();
        while let Some((k, v)) = map.next_entry::<String, Data>()? {
            out.insert(k, v.0);
        }
        special_map(out).map_err(de::Error::custom)
    }
}

/// `{"$link": cid}` and `{"$bytes": base64}` are a link and bytes.
fn special_map(map: BTreeMap<String, Ipld>) -> Result<Ipld, String> {
    for key in ["$link", "$bytes"] {
        if let Some(v) = map.get(key) {
            if map.len() != 1 {
                return Err(format!("a {key} object must have no other keys"));
            }
            let Ipld::String(s) = v else {
                return Err(format!("the {key} value must be a string"));
            };
            return if key == "$link" {
                model::parse_cid(s)
                    .map(Ipld::Link)
                    .map_err(|e| e.to_string())
            } else {
                BASE64_READ
                    .decode(s)
                    .map(Ipld::Bytes)
                    .map_err(|e| format!("$bytes is not valid base64: {e}"))
            };
        }
    }
    Ok(Ipld::Map(map))
}

struct CidBytesVisitor;

impl<'de> Visitor<'de> for CidBytesVisitor {
    type Value = Cid;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a binary CID")
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Cid, E> {
        // DAG-CBOR's tag 42 payload starts with the 0x00 multibase prefix;
        // decoders strip it, but accept it here too.
        let v = match v {
            [0, rest @ ..] => rest,
            _ => v,
        };
        model::cid_from_bytes(v).map_err(E::custom)
    }
}

// ---------------------------------------------------------------------------
// Bytes, links, blobs

/// Lexicon `bytes`: `{"$bytes": base64}` in JSON, a byte string in CBOR.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bytes(pub Vec<u8>);

impl From<Vec<u8>> for Bytes {
    fn from(v: Vec<u8>) -> Bytes {
        Bytes(v)
    }
}

struct BytesRef<'a>(&'a [u8]);

impl Serialize for BytesRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            let mut m = s.serialize_map(Some(1))?;
            m.serialize_entry("$bytes", &BASE64.encode(self.0))?;
            m.end()
        } else {
            s.serialize_bytes(self.0)
        }
    }
}

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        BytesRef(&self.0).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        match d.deserialize_any(DataVisitor)? {
            Ipld::Bytes(b) => Ok(Bytes(b)),
            other => Err(de::Error::custom(format!(
                "expected bytes ({{\"$bytes\": base64}}), found {}",
                describe(&other)
            ))),
        }
    }
}

/// Lexicon `cid-link`: `{"$link": cid}` in JSON, tag 42 in CBOR.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CidLink(pub Cid);

impl Serialize for CidLink {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            let mut m = s.serialize_map(Some(1))?;
            m.serialize_entry("$link", &self.0.to_string())?;
            m.end()
        } else {
            self.0.serialize(s)
        }
    }
}

impl<'de> Deserialize<'de> for CidLink {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<CidLink, D::Error> {
        match d.deserialize_any(DataVisitor)? {
            Ipld::Link(c) => Ok(CidLink(c)),
            other => Err(de::Error::custom(format!(
                "expected a cid-link ({{\"$link\": cid}}), found {}",
                describe(&other)
            ))),
        }
    }
}

/// Lexicon `blob`: a typed blob, or the legacy `{cid, mimeType}` form that
/// readers must still accept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlobRef {
    Typed(Blob),
    Legacy(LegacyBlob),
}

/// `{"$type": "blob", "ref": link, "mimeType", "size"}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blob {
    pub r#ref: CidLink,
    pub mime_type: String,
    pub size: i64,
}

/// The deprecated blob form: no size, the CID as a string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LegacyBlob {
    pub cid: String,
    pub mime_type: String,
}

impl BlobRef {
    pub fn mime_type(&self) -> &str {
        match self {
            BlobRef::Typed(b) => &b.mime_type,
            BlobRef::Legacy(b) => &b.mime_type,
        }
    }
}

impl Serialize for BlobRef {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            BlobRef::Typed(b) => {
                let mut m = s.serialize_map(Some(4))?;
                m.serialize_entry("$type", "blob")?;
                m.serialize_entry("ref", &b.r#ref)?;
                m.serialize_entry("mimeType", &b.mime_type)?;
                m.serialize_entry("size", &b.size)?;
                m.end()
            }
            BlobRef::Legacy(b) => {
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("cid", &b.cid)?;
                m.serialize_entry("mimeType", &b.mime_type)?;
                m.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for BlobRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<BlobRef, D::Error> {
        let v = d.deserialize_any(DataVisitor)?;
        blob_from_ipld(v).map_err(de::Error::custom)
    }
}

fn blob_from_ipld(v: Ipld) -> Result<BlobRef, String> {
    let Ipld::Map(mut m) = v else {
        return Err(format!("expected a blob, found {}", describe(&v)));
    };
    let mime = |m: &mut BTreeMap<String, Ipld>| match m.remove("mimeType") {
        Some(Ipld::String(s)) if !s.is_empty() => Ok(s),
        _ => Err("a blob needs a non-empty string mimeType".to_string()),
    };
    if is_blob_map(&m) {
        m.remove("$type");
        let r#ref = match m.remove("ref") {
            Some(Ipld::Link(c)) => CidLink(c),
            _ => return Err("a blob's ref must be a cid-link".to_string()),
        };
        let mime_type = mime(&mut m)?;
        let size = match m.remove("size") {
            Some(Ipld::Integer(i)) => {
                i64::try_from(i).map_err(|_| "blob size out of range".to_string())?
            }
            _ => return Err("a blob needs an integer size".to_string()),
        };
        if let Some(k) = m.keys().next() {
            return Err(format!("a blob has no field {k:?}"));
        }
        Ok(BlobRef::Typed(Blob {
            r#ref,
            mime_type,
            size,
        }))
    } else if !m.contains_key("$type") && m.contains_key("cid") && m.contains_key("mimeType") {
        let cid = match m.remove("cid") {
            Some(Ipld::String(s)) if model::parse_cid(&s).is_ok() => s,
            _ => return Err("a legacy blob's cid must be a CID string".to_string()),
        };
        let mime_type = mime(&mut m)?;
        if let Some(k) = m.keys().next() {
            return Err(format!("a legacy blob has no field {k:?}"));
        }
        Ok(BlobRef::Legacy(LegacyBlob { cid, mime_type }))
    } else {
        Err("expected a blob ({\"$type\": \"blob\", ref, mimeType, size})".to_string())
    }
}

// ---------------------------------------------------------------------------
// String formats

macro_rules! format_newtype {
    ($(#[$doc:meta])* $name:ident, $format:expr) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            /// Checks the syntax and wraps the string.
            pub fn new(s: impl Into<String>) -> Result<Self, SyntaxError> {
                let s = s.into();
                $format.check(&s)?;
                Ok($name(s))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = SyntaxError;
            fn from_str(s: &str) -> Result<Self, SyntaxError> {
                $name::new(s)
            }
        }

        impl TryFrom<String> for $name {
            type Error = SyntaxError;
            fn try_from(s: String) -> Result<Self, SyntaxError> {
                $name::new(s)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                $name::new(s).map_err(de::Error::custom)
            }
        }
    };
}

format_newtype!(
    /// `format: at-identifier`: a handle or a DID.
    AtIdentifier,
    Format::AtIdentifier
);
format_newtype!(
    /// `format: at-uri`.
    AtUri,
    Format::AtUri
);
format_newtype!(
    /// `format: cid` (a CID as a string, not a cid-link).
    CidString,
    Format::Cid
);
format_newtype!(
    /// `format: datetime` (RFC 3339 with the atproto restrictions).
    Datetime,
    Format::Datetime
);
format_newtype!(
    /// `format: did`.
    Did,
    Format::Did
);
format_newtype!(
    /// `format: handle`.
    Handle,
    Format::Handle
);
format_newtype!(
    /// `format: language` (a BCP 47 tag).
    Language,
    Format::Language
);
format_newtype!(
    /// `format: nsid`.
    Nsid,
    Format::Nsid
);
format_newtype!(
    /// `format: record-key`.
    RecordKey,
    Format::RecordKey
);
format_newtype!(
    /// `format: tid`.
    Tid,
    Format::Tid
);
format_newtype!(
    /// `format: uri`.
    Uri,
    Format::Uri
);

// ---------------------------------------------------------------------------
// String enums (`knownValues`, `enum`, method errors)

/// A generated enum over strings. Open ones (`knownValues`, errors) have an
/// `Other(String)` case and always decode; closed ones (`enum`) refuse
/// other strings.
pub trait StringEnum: Sized {
    fn as_str(&self) -> &str;
    /// The value for `s`, or why there is none.
    fn from_string(s: String) -> Result<Self, String>;
}

/// `Serialize` for a [`StringEnum`].
pub fn serialize_str_enum<T: StringEnum, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(v.as_str())
}

/// `Deserialize` for a [`StringEnum`].
pub fn deserialize_str_enum<'de, T: StringEnum, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
    T::from_string(String::deserialize(d)?).map_err(de::Error::custom)
}

// ---------------------------------------------------------------------------
// Optional and nullable fields

/// `deserialize_with` for optional fields that are not nullable: `null` is
/// an error (the lexicon does not allow it) rather than "absent".
pub fn some<'de, T: Deserialize<'de>, D: Deserializer<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// `deserialize_with` for optional nullable fields (`Option<Option<T>>`):
/// absent is `None` (with `#[serde(default)]`), `null` is `Some(None)`.
pub fn nullable<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// `deserialize_with` for required nullable fields: the field must be
/// present (serde would otherwise treat a missing `Option` as `None`).
pub fn required_nullable<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    Option::<T>::deserialize(d)
}

// ---------------------------------------------------------------------------
// Unions

/// Why a union value did not decode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DecodeError(pub String);

/// Reads a union value: an object with a non-empty string `$type`. Returns
/// the type and the rest of the object (without `$type`).
pub fn union_parts<'de, D: Deserializer<'de>>(d: D) -> Result<(String, Ipld), D::Error> {
    let v = d.deserialize_any(DataVisitor)?;
    let Ipld::Map(mut m) = v else {
        return Err(de::Error::custom(format!(
            "a union value must be an object with a $type, found {}",
            describe(&v)
        )));
    };
    match m.remove("$type") {
        Some(Ipld::String(t)) if !t.is_empty() => Ok((t, Ipld::Map(m))),
        Some(_) => Err(de::Error::custom("$type must be a non-empty string")),
        None => Err(de::Error::custom(
            "a union value must name its type in $type",
        )),
    }
}

/// Decodes a buffered value as `T`.
///
/// The value goes through DAG-CBOR bytes rather than `Ipld`'s own
/// deserializer: that one hands integers to visitors as `i128`, which
/// serde's `flatten` buffering (the `extra` map) refuses.
pub fn from_ipld<T: DeserializeOwned>(v: Ipld) -> Result<T, DecodeError> {
    let bytes = serde_ipld_dagcbor::to_vec(&Data(v)).map_err(|e| DecodeError(e.to_string()))?;
    serde_ipld_dagcbor::from_slice(&bytes).map_err(|e| DecodeError(e.to_string()))
}

/// The error for a `$type` a closed union does not list.
pub fn closed_union<T>(type_id: &str, refs: &[&str]) -> Result<T, DecodeError> {
    Err(DecodeError(format!(
        "$type {type_id:?} is not one of the closed union's types: {}",
        refs.join(", ")
    )))
}

/// An event-stream frame type (`#commit`, relative to the subscription
/// `nsid`, or a full `nsid#name`) as a `$type`.
pub fn frame_type(nsid: &str, t: &str) -> String {
    match t.strip_prefix('#') {
        Some(name) => format!("{nsid}#{name}"),
        None => t.to_string(),
    }
}

/// A value with `$type` written in front of its fields.
#[derive(Serialize)]
pub struct Tagged<'a, T: Serialize> {
    #[serde(rename = "$type")]
    pub type_id: &'a str,
    #[serde(flatten)]
    pub value: &'a T,
}

/// Serializes `value` with `$type: type_id`.
pub fn tagged<S: Serializer, T: Serialize>(
    s: S,
    type_id: &str,
    value: &T,
) -> Result<S::Ok, S::Error> {
    Tagged { type_id, value }.serialize(s)
}

// ---------------------------------------------------------------------------
// XRPC methods

/// How an XRPC method is called: over HTTP GET, HTTP POST, or a websocket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MethodKind {
    Query,
    Procedure,
    Subscription,
}

/// What a lexicon says about calling one of its methods; each generated
/// method module has one as `METHOD`, and the root lists them in `METHODS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Method {
    pub nsid: &'static str,
    pub kind: MethodKind,
    /// The MIME type of the input body (`*/*` for any), if it takes one.
    pub input: Option<&'static str>,
    /// The MIME type of the output body, if it has one.
    pub output: Option<&'static str>,
}

/// A parameter's type as a query string carries it (anything but an
/// integer or a boolean reads as a string).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamType {
    String,
    Integer,
    Boolean,
}

/// One parameter of a method, as its lexicon declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamField {
    pub name: &'static str,
    pub ty: ParamType,
    /// Given by repeating the name (`?tag=a&tag=b`).
    pub array: bool,
    pub required: bool,
}

/// A method's generated `…Params` type: read from a query string by
/// [`params_from_query`].
pub trait Params: DeserializeOwned + Validate {
    const FIELDS: &'static [ParamField];
}

/// Reads `T` from a query string's (already percent-decoded) pairs: each
/// value typed as the lexicon says, then the lexicon's checks. For a
/// scalar given twice the first counts; names the lexicon does not declare
/// are kept as strings (in the type's `extra`). The error is a message
/// for the caller (an XRPC `InvalidRequest`).
pub fn params_from_query<T: Params>(pairs: &[(String, String)]) -> Result<T, String> {
    let mut object = serde_json::Map::new();
    for (name, raw) in pairs {
        let field = T::FIELDS.iter().find(|f| f.name == name);
        let value = match field.map(|f| f.ty) {
            Some(ParamType::Integer) => raw
                .parse::<i64>()
                .map(serde_json::Value::from)
                .map_err(|_| format!("{name} must be an integer"))?,
            Some(ParamType::Boolean) => match raw.as_str() {
                "true" => true.into(),
                "false" => false.into(),
                _ => return Err(format!("{name} must be a boolean")),
            },
            Some(ParamType::String) | None => raw.as_str().into(),
        };
        if field.is_some_and(|f| f.array) {
            let list = object
                .entry(name.as_str())
                .or_insert_with(|| serde_json::Value::Array(Vec::new()));
            if let serde_json::Value::Array(items) = list {
                items.push(value);
            }
        } else {
            object.entry(name.as_str()).or_insert(value);
        }
    }
    if let Some(missing) = T::FIELDS
        .iter()
        .find(|f| f.required && !object.contains_key(f.name))
    {
        return Err(format!(
            "Params must have the property \"{}\"",
            missing.name
        ));
    }
    let params: T = serde_json::from_value(serde_json::Value::Object(object))
        .map_err(|e| format!("Invalid params: {e}"))?;
    params
        .validate()
        .map_err(|e| format!("Invalid params: {e}"))?;
    Ok(params)
}

// ---------------------------------------------------------------------------
// Records

/// A record's key scheme (`key` of the record def).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyType {
    Tid,
    Nsid,
    Any,
    /// `literal:<value>`: the only key the collection allows.
    Literal(&'static str),
}

impl KeyType {
    /// Whether `rkey` is a valid key for this scheme.
    pub fn check(self, rkey: &str) -> Result<(), String> {
        Format::RecordKey.check(rkey).map_err(|e| e.to_string())?;
        match self {
            KeyType::Any => Ok(()),
            KeyType::Tid => Format::Tid.check(rkey).map_err(|e| e.to_string()),
            KeyType::Nsid => Format::Nsid.check(rkey).map_err(|e| e.to_string()),
            KeyType::Literal(k) if k == rkey => Ok(()),
            KeyType::Literal(k) => Err(format!("the only key this collection allows is {k:?}")),
        }
    }
}

/// A generated record type. On the wire a record carries `$type` = its
/// NSID; [`serialize_record`] writes it and [`deserialize_record`] checks
/// it (`nsid` and `nsid#main` are both accepted; absent is accepted too,
/// as for a record body inside a union).
pub trait Record: Sized {
    const NSID: &'static str;
    const KEY: KeyType;
    /// The derived serializer of the fields (without `$type`).
    fn serialize_fields<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error>;
    /// The derived deserializer of the fields (`$type` lands in `extra`).
    fn deserialize_fields<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error>;
    fn extra_mut(&mut self) -> &mut Extra;
}

struct RecordFields<'a, R>(&'a R);

impl<R: Record> Serialize for RecordFields<'_, R> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize_fields(s)
    }
}

/// `Serialize` for a [`Record`].
pub fn serialize_record<R: Record, S: Serializer>(r: &R, s: S) -> Result<S::Ok, S::Error> {
    tagged(s, R::NSID, &RecordFields(r))
}

/// `Deserialize` for a [`Record`].
pub fn deserialize_record<'de, R: Record, D: Deserializer<'de>>(d: D) -> Result<R, D::Error> {
    let mut r = R::deserialize_fields(d)?;
    match r.extra_mut().remove("$type") {
        None => Ok(r),
        Some(Data(Ipld::String(t))) if t == R::NSID || t.strip_suffix("#main") == Some(R::NSID) => {
            Ok(r)
        }
        Some(other) => Err(de::Error::custom(format!(
            "$type {:?} is not {}",
            other.0,
            R::NSID
        ))),
    }
}

// ---------------------------------------------------------------------------
// Encoding helpers

/// Decodes atproto JSON text as `T`.
pub fn from_json<T: DeserializeOwned>(json: &[u8]) -> Result<T, serde_json::Error> {
    serde_json::from_slice(json)
}

/// Encodes `v` as atproto JSON.
pub fn to_json<T: Serialize>(v: &T) -> Result<serde_json::Value, serde_json::Error> {
    serde_json::to_value(v)
}

/// Encodes `v` as canonical DAG-CBOR.
pub fn to_dag_cbor<T: Serialize>(v: &T) -> Result<Vec<u8>, DecodeError> {
    serde_ipld_dagcbor::to_vec(v).map_err(|e| DecodeError(e.to_string()))
}

/// Decodes DAG-CBOR bytes as `T`.
pub fn from_dag_cbor<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    serde_ipld_dagcbor::from_slice(bytes).map_err(|e| DecodeError(e.to_string()))
}

/// The CID of `v`'s canonical DAG-CBOR encoding.
pub fn cid<T: Serialize>(v: &T) -> Result<Cid, DecodeError> {
    Ok(model::cid_for_cbor(&to_dag_cbor(v)?))
}
