//! A typed model of Lexicon v1 documents, and the parser that builds it
//! from JSON while reporting every structural problem it meets.
//!
//! The parser is forgiving in one way only: a definition or field it cannot
//! understand is reported and left out, so one bad def does not hide the
//! findings in the rest of the file. Semantic rules (ref targets,
//! contradicting limits, names) live in `lint`, which walks this model.

mod parse;

pub use parse::parse_document;

use indexmap::IndexMap;
use serde_json::Value;

/// One lexicon file: `{"lexicon": 1, "id", "revision"?, "description"?, "defs"}`.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    pub id: String,
    pub revision: Option<i64>,
    pub description: Option<String>,
    /// In source order, so generated code and reports follow the file.
    pub defs: IndexMap<String, Def>,
}

impl Document {
    pub fn main(&self) -> Option<&Def> {
        self.defs.get("main")
    }
}

/// A named definition under `defs`.
// A document has a handful of defs, so variant size does not matter here.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Def {
    Record(Record),
    Query(Query),
    Procedure(Procedure),
    Subscription(Subscription),
    PermissionSet(PermissionSet),
    /// Any non-primary type allowed as a named def (object, token, string, array …).
    Type(Type),
}

impl Def {
    /// The `type` name as written in the lexicon.
    pub fn type_name(&self) -> &'static str {
        match self {
            Def::Record(_) => "record",
            Def::Query(_) => "query",
            Def::Procedure(_) => "procedure",
            Def::Subscription(_) => "subscription",
            Def::PermissionSet(_) => "permission-set",
            Def::Type(t) => t.type_name(),
        }
    }

    /// Primary types may only appear as `main`, at most once per file.
    pub fn is_primary(&self) -> bool {
        !matches!(self, Def::Type(_))
    }

    pub fn description(&self) -> Option<&str> {
        match self {
            Def::Record(r) => r.description.as_deref(),
            Def::Query(q) => q.description.as_deref(),
            Def::Procedure(p) => p.description.as_deref(),
            Def::Subscription(s) => s.description.as_deref(),
            Def::PermissionSet(p) => p.description.as_deref(),
            Def::Type(t) => t.description(),
        }
    }
}

/// A record's key scheme (`key` of a record def).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordKey {
    Tid,
    Nsid,
    Any,
    /// `literal:<value>`: the only key the collection may use.
    Literal(String),
}

impl RecordKey {
    pub fn parse(s: &str) -> Option<RecordKey> {
        match s {
            "tid" => Some(RecordKey::Tid),
            "nsid" => Some(RecordKey::Nsid),
            "any" => Some(RecordKey::Any),
            _ => s
                .strip_prefix("literal:")
                .map(|v| RecordKey::Literal(v.to_string())),
        }
    }

    pub fn as_string(&self) -> String {
        match self {
            RecordKey::Tid => "tid".into(),
            RecordKey::Nsid => "nsid".into(),
            RecordKey::Any => "any".into(),
            RecordKey::Literal(v) => format!("literal:{v}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub description: Option<String>,
    pub key: RecordKey,
    pub record: Object,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Query {
    pub description: Option<String>,
    pub parameters: Option<Params>,
    pub output: Option<Body>,
    pub errors: Vec<ErrorDef>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Procedure {
    pub description: Option<String>,
    pub parameters: Option<Params>,
    pub input: Option<Body>,
    pub output: Option<Body>,
    pub errors: Vec<ErrorDef>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Subscription {
    pub description: Option<String>,
    pub parameters: Option<Params>,
    pub message: Option<Message>,
    pub errors: Vec<ErrorDef>,
}

/// An XRPC request or response body.
#[derive(Clone, Debug, PartialEq)]
pub struct Body {
    pub description: Option<String>,
    /// MIME type, e.g. `application/json`.
    pub encoding: String,
    /// An object, ref or union; absent for non-JSON bodies.
    pub schema: Option<Type>,
}

/// A subscription's message schema (a union of the frame types).
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    pub description: Option<String>,
    pub schema: Type,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ErrorDef {
    pub name: String,
    pub description: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PermissionSet {
    pub description: Option<String>,
    pub title: Option<String>,
    pub title_lang: IndexMap<String, String>,
    pub detail: Option<String>,
    pub detail_lang: IndexMap<String, String>,
    pub permissions: Vec<Permission>,
}

/// One permission of a permission set. The parameters depend on the
/// resource (`repo`: collection/action, `rpc`: lxm/aud/inheritAud …), so they
/// are kept as the JSON the author wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct Permission {
    pub resource: String,
    pub params: IndexMap<String, Value>,
}

/// Every field type of Lexicon v1 (anything that can sit under `properties`,
/// `items`, a body schema, or a non-primary named def).
#[derive(Clone, Debug, PartialEq)]
pub enum Type {
    Null(Common),
    Boolean(Boolean),
    Integer(Integer),
    String(StringType),
    Bytes(Bytes),
    CidLink(Common),
    Blob(Blob),
    Array(Array),
    Object(Object),
    Params(Params),
    Token(Common),
    Ref(Ref),
    Union(Union),
    Unknown(Common),
}

impl Type {
    pub fn type_name(&self) -> &'static str {
        match self {
            Type::Null(_) => "null",
            Type::Boolean(_) => "boolean",
            Type::Integer(_) => "integer",
            Type::String(_) => "string",
            Type::Bytes(_) => "bytes",
            Type::CidLink(_) => "cid-link",
            Type::Blob(_) => "blob",
            Type::Array(_) => "array",
            Type::Object(_) => "object",
            Type::Params(_) => "params",
            Type::Token(_) => "token",
            Type::Ref(_) => "ref",
            Type::Union(_) => "union",
            Type::Unknown(_) => "unknown",
        }
    }

    pub fn description(&self) -> Option<&str> {
        match self {
            Type::Null(c) | Type::CidLink(c) | Type::Token(c) | Type::Unknown(c) => {
                c.description.as_deref()
            }
            Type::Boolean(t) => t.description.as_deref(),
            Type::Integer(t) => t.description.as_deref(),
            Type::String(t) => t.description.as_deref(),
            Type::Bytes(t) => t.description.as_deref(),
            Type::Blob(t) => t.description.as_deref(),
            Type::Array(t) => t.description.as_deref(),
            Type::Object(t) => t.description.as_deref(),
            Type::Params(t) => t.description.as_deref(),
            Type::Ref(t) => t.description.as_deref(),
            Type::Union(t) => t.description.as_deref(),
        }
    }
}

/// The fields shared by types that have nothing but a description.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Common {
    pub description: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Boolean {
    pub description: Option<String>,
    pub default: Option<bool>,
    pub r#const: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Integer {
    pub description: Option<String>,
    pub minimum: Option<i64>,
    pub maximum: Option<i64>,
    pub r#enum: Option<Vec<i64>>,
    pub default: Option<i64>,
    pub r#const: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct StringType {
    pub description: Option<String>,
    /// The format name as written; `lint` reports names the spec does not define.
    pub format: Option<String>,
    /// Lengths in UTF-8 bytes.
    pub min_length: Option<u64>,
    pub max_length: Option<u64>,
    /// Lengths in extended grapheme clusters.
    pub min_graphemes: Option<u64>,
    pub max_graphemes: Option<u64>,
    pub known_values: Option<Vec<String>>,
    pub r#enum: Option<Vec<String>>,
    pub default: Option<String>,
    pub r#const: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Bytes {
    pub description: Option<String>,
    pub min_length: Option<u64>,
    pub max_length: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Blob {
    pub description: Option<String>,
    /// MIME types or patterns (`image/*`, `*/*`); absent means any.
    pub accept: Option<Vec<String>>,
    /// Bytes.
    pub max_size: Option<u64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    pub description: Option<String>,
    pub items: Box<Type>,
    pub min_length: Option<u64>,
    pub max_length: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Object {
    pub description: Option<String>,
    pub required: Vec<String>,
    pub nullable: Vec<String>,
    pub properties: IndexMap<String, Type>,
}

/// XRPC query parameters: like an object, but only booleans, integers,
/// strings, arrays of those, and unknown.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Params {
    pub description: Option<String>,
    pub required: Vec<String>,
    pub properties: IndexMap<String, Type>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Ref {
    pub description: Option<String>,
    /// `#local`, `nsid` or `nsid#name`, as written.
    pub target: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Union {
    pub description: Option<String>,
    pub refs: Vec<String>,
    /// Closed unions reject `$type`s outside `refs`; the default is open.
    pub closed: bool,
}
