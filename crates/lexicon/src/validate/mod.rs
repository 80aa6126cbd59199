//! Validates atproto data (JSON, as `serde_json::Value`) against the
//! lexicons of a [`Catalog`].
//!
//! The data is the atproto JSON encoding: bytes as `{"$bytes": base64}`,
//! links as `{"$link": cid}`, blobs as
//! `{"$type": "blob", "ref": {"$link": …}, "mimeType", "size"}` (and the
//! legacy `{"cid", "mimeType"}` blob where the schema expects a blob).
//!
//! Every function returns *all* problems it finds, in document order (for
//! one object: its missing required fields first, then its fields in the
//! order the data lists them). A [`Finding`] has an empty `file` (the caller
//! knows where the data came from), a JSON-pointer `path` into the data
//! (`""` is the root, `/content/parts/3/text` a nested field), one of the
//! stable [`rules`], and a message for a person.
//!
//! # Semantics
//!
//! - The atproto data model holds everywhere, including in fields the schema
//!   does not declare and inside `unknown`: no floats (`123.0` counts as an
//!   integer), integers fit in 64 bits, `$type` is a non-empty string,
//!   `$bytes` and `$link` objects have no other keys and hold valid base64 /
//!   a decodable CID, and `$type: "blob"` objects have a `ref` link, a
//!   non-empty `mimeType` and a non-negative integer `size`.
//! - Objects: `required` fields must be present; `null` is allowed only
//!   for fields listed in `nullable`; fields the schema does not declare are
//!   allowed (lexicons evolve by adding fields). Defaults only describe an
//!   absent field, so an absent field is never an error unless required.
//! - Strings: `minLength`/`maxLength` count UTF-8 bytes,
//!   `minGraphemes`/`maxGraphemes` count extended grapheme clusters (only
//!   when the byte length leaves the answer open); `enum` and `const` are
//!   exact; `knownValues` is open (any string passes); `format` uses
//!   [`crate::syntax`].
//! - Unions: the value must be an object with a `$type`. `nsid` and
//!   `nsid#main` name the same type. A closed union rejects other types. An
//!   open union accepts other types; when the catalog knows such a type as an
//!   object or record it is checked against it, otherwise it is accepted
//!   unchecked.
//! - `unknown`: any object, but not bytes, a link or a blob; an object whose
//!   `$type` the catalog knows (as an object or record) is checked against
//!   it, otherwise only the data-model rules apply.
//! - A `ref` to a `token` (which the spec forbids but the interop fixtures
//!   exercise) expects the token's type id as a string.
//! - A schema reference that does not resolve is reported
//!   ([`rules::UNRESOLVED_REF`]): the data could not be checked, so the
//!   validator fails closed.
//!
//! # Untrusted input
//!
//! Nothing here panics on any input. Nesting is bounded (default
//! [`DEFAULT_MAX_DEPTH`] containers; deeper data gets one
//! [`rules::DEPTH`] finding per branch), reference chains that consume no
//! data are bounded (a loop in a broken catalog gets [`rules::REF_CYCLE`]),
//! and every data node is visited once, so the cost is linear in the size of
//! the data. The happy path allocates nothing per field: paths are built on
//! the stack and rendered only for findings.

mod blob;
mod data_model;
mod path;
mod record;
pub mod rules;
mod strings;
mod walk;
mod xrpc;

/// MIME pattern matching for blob `accept` (`*/*`, `image/*`, exact).
pub use blob::mime_accepted;
/// Extended grapheme clusters in a string, counting no further than a limit.
pub use strings::count_graphemes;

use serde_json::{Map, Value};

use crate::catalog::Catalog;
use crate::finding::Finding;
pub(crate) use path::Path;
use walk::Walker;
use xrpc::Side;

/// Containers (objects and arrays) data may nest before the validator stops
/// descending. `serde_json` refuses to parse deeper than 128 as well.
pub const DEFAULT_MAX_DEPTH: usize = 128;

/// The findings of one validation run.
#[derive(Default)]
pub(crate) struct Sink {
    findings: Vec<Finding>,
}

impl Sink {
    pub(crate) fn report(
        &mut self,
        path: &Path<'_>,
        rule: &'static str,
        message: impl Into<String>,
    ) {
        self.findings
            .push(Finding::new(String::new(), path.render(), rule, message));
    }
}

/// A validator with settings; the free functions use the defaults.
///
/// ```
/// # use gelstore_lexicon::{catalog::Catalog, validate::Validator};
/// # let catalog = Catalog::new();
/// # let record = serde_json::json!({});
/// let findings = Validator::new(&catalog).max_depth(64).record(&record, None);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Validator<'c> {
    catalog: &'c Catalog,
    max_depth: usize,
    legacy_blobs: bool,
}

impl<'c> Validator<'c> {
    pub fn new(catalog: &'c Catalog) -> Self {
        Validator {
            catalog,
            max_depth: DEFAULT_MAX_DEPTH,
            legacy_blobs: true,
        }
    }

    /// Most containers data may nest (default [`DEFAULT_MAX_DEPTH`]).
    /// The walk recurses once per level (a few hundred bytes of stack each
    /// in debug builds), so keep this in the hundreds on a default 2 MiB
    /// thread.
    pub fn max_depth(mut self, max_depth: usize) -> Self {
        self.max_depth = max_depth;
        self
    }

    /// Whether a legacy `{"cid", "mimeType"}` blob is accepted where the
    /// schema expects a blob (default: yes, as the data-model spec asks of
    /// readers; its size is unknown, so `maxSize` can not be checked).
    pub fn legacy_blobs(mut self, allow: bool) -> Self {
        self.legacy_blobs = allow;
        self
    }

    fn run(&self, f: impl FnOnce(&mut Walker<'c>)) -> Vec<Finding> {
        let mut w = Walker {
            catalog: self.catalog,
            max_depth: self.max_depth,
            legacy_blobs: self.legacy_blobs,
            sink: Sink::default(),
        };
        f(&mut w);
        w.sink.findings
    }

    /// See [`validate_record`].
    pub fn record(&self, value: &Value, rkey: Option<&str>) -> Vec<Finding> {
        self.run(|w| record::record(w, value, rkey))
    }

    /// See [`validate_value`].
    pub fn value(&self, type_id: &str, value: &Value) -> Vec<Finding> {
        self.run(|w| {
            let root = Path::Root;
            let Some(resolved) = w.resolve_data_type(type_id) else {
                w.sink.report(
                    &root,
                    rules::UNKNOWN_TYPE,
                    format!("{type_id:?} is not a definition in the catalog"),
                );
                return;
            };
            if w.too_deep(value, &root, 0) {
                return;
            }
            let kind = data_model::classify(value, &root, &mut w.sink);
            w.def(resolved, value, kind, &root, 0, 0);
        })
    }

    /// See [`validate_params`].
    pub fn params(&self, nsid: &str, params: &Map<String, Value>) -> Vec<Finding> {
        self.run(|w| xrpc::params(w, nsid, params))
    }

    /// See [`validate_query_string`].
    pub fn query_string<'a>(
        &self,
        nsid: &str,
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Vec<Finding> {
        let params = xrpc::coerce(self.catalog, nsid, pairs);
        self.params(nsid, &params)
    }

    /// See [`validate_input`].
    pub fn input(&self, nsid: &str, body: &Value) -> Vec<Finding> {
        self.run(|w| xrpc::body(w, nsid, Side::Input, body))
    }

    /// See [`validate_output`].
    pub fn output(&self, nsid: &str, body: &Value) -> Vec<Finding> {
        self.run(|w| xrpc::body(w, nsid, Side::Output, body))
    }

    /// See [`validate_message`].
    pub fn message(&self, nsid: &str, message: &Value) -> Vec<Finding> {
        self.run(|w| xrpc::message(w, nsid, message))
    }

    /// See [`validate_message_of_type`].
    pub fn message_of_type(&self, nsid: &str, frame_type: &str, body: &Value) -> Vec<Finding> {
        self.run(|w| xrpc::message_of_type(w, nsid, frame_type, body))
    }
}

/// Validates a record. Its `$type` must name a `record` definition in the
/// catalog ([`rules::UNKNOWN_TYPE`], [`rules::RECORD_TYPE`]), and the body
/// must match that definition's object. With `rkey`, the record key must
/// have record-key syntax and fit the record's `key`: `tid` and `nsid` keys
/// must have that syntax, `literal:x` must be exactly `x`, `any` allows any
/// valid key ([`rules::RECORD_KEY`]; the key is not in the data, so those
/// findings have path `""`). When the type is unknown the data-model rules
/// still run over the whole record.
pub fn validate_record(catalog: &Catalog, value: &Value, rkey: Option<&str>) -> Vec<Finding> {
    Validator::new(catalog).record(value, rkey)
}

/// Validates `value` against one definition, named as a `$type` would name
/// it: `nsid` (the `main` def), `nsid#main` or `nsid#name`. Object and record
/// defs are the usual targets; any non-primary def (a string with a format,
/// an array …) works too.
pub fn validate_value(catalog: &Catalog, type_id: &str, value: &Value) -> Vec<Finding> {
    Validator::new(catalog).value(type_id, value)
}

/// Validates XRPC parameters of query, procedure or subscription `nsid`,
/// given as JSON values (`{"limit": 5, "tags": ["a", "b"]}`). Parameters the
/// method does not declare are allowed. For values straight from a URL query
/// string, where everything is a string, use [`validate_query_string`] or
/// [`coerce_query_params`] first.
pub fn validate_params(catalog: &Catalog, nsid: &str, params: &Map<String, Value>) -> Vec<Finding> {
    Validator::new(catalog).params(nsid, params)
}

/// Validates parameters as they arrive in a URL (`?limit=5&tag=a&tag=b`):
/// already percent-decoded `(name, value)` pairs, in order, repeated names
/// allowed. Values are first converted by the declared type
/// ([`coerce_query_params`]), then checked like [`validate_params`].
pub fn validate_query_string<'a>(
    catalog: &Catalog,
    nsid: &str,
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Vec<Finding> {
    Validator::new(catalog).query_string(nsid, pairs)
}

/// Converts query-string pairs to the JSON values [`validate_params`]
/// expects, by the declared parameter type: `integer` parses as a decimal
/// `i64`, `boolean` accepts `true`/`false`, `unknown` parses as JSON, and
/// `string` stays as is. A declared array collects every occurrence of its
/// name; any other name given more than once becomes an array too (which
/// validation then reports). A value that does not convert stays a string,
/// so validation reports it as a [`rules::TYPE`] finding.
pub fn coerce_query_params<'a>(
    catalog: &Catalog,
    nsid: &str,
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Map<String, Value> {
    xrpc::coerce(catalog, nsid, pairs)
}

/// Validates the JSON input body of procedure `nsid` against its
/// `input.schema`. A method without an `input` gets a [`rules::BODY`]
/// finding; an input without a schema (a non-JSON encoding) only gets the
/// data-model checks.
pub fn validate_input(catalog: &Catalog, nsid: &str, body: &Value) -> Vec<Finding> {
    Validator::new(catalog).input(nsid, body)
}

/// Validates the JSON output body of query or procedure `nsid` against its
/// `output.schema`, like [`validate_input`].
pub fn validate_output(catalog: &Catalog, nsid: &str, body: &Value) -> Vec<Finding> {
    Validator::new(catalog).output(nsid, body)
}

/// Validates one message of subscription `nsid` against its message schema
/// (a union, so the message must carry a `$type`). For event-stream frames,
/// whose body leaves the type to the frame header, use
/// [`validate_message_of_type`].
pub fn validate_message(catalog: &Catalog, nsid: &str, message: &Value) -> Vec<Finding> {
    Validator::new(catalog).message(nsid, message)
}

/// Validates an event-stream frame body whose type is given by the frame
/// header's `t` (`#commit`, relative to `nsid`, or a full `nsid#name`)
/// rather than by a `$type` in the body.
pub fn validate_message_of_type(
    catalog: &Catalog,
    nsid: &str,
    frame_type: &str,
    body: &Value,
) -> Vec<Finding> {
    Validator::new(catalog).message_of_type(nsid, frame_type, body)
}
