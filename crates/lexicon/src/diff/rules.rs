//! The rule names [`diff`](super::diff) reports, one per kind of change.
//!
//! Each constant says what changed; whether the change is breaking depends,
//! for most rules, on the direction the data flows at that place (see the
//! table in the [module docs](super)). The text after "Breaking:" gives that
//! condition for each rule.

/// A lexicon (NSID) is gone from the new set. Breaking: always.
pub const LEXICON_REMOVED: &str = "lexicon-removed";
/// A new lexicon (NSID). Breaking: never.
pub const LEXICON_ADDED: &str = "lexicon-added";
/// A named def is gone from a lexicon that still exists. Breaking: always
/// (other lexicons and old data may refer to it).
pub const DEF_REMOVED: &str = "def-removed";
/// A new named def. Breaking: never.
pub const DEF_ADDED: &str = "def-added";
/// A named def now has another `type` (e.g. `object` → `string`, `query` →
/// `procedure`). Breaking: always.
pub const DEF_TYPE_CHANGED: &str = "def-type-changed";
/// A property, items or body schema now has another `type`. Breaking: always.
pub const TYPE_CHANGED: &str = "type-changed";
/// A `description` (or a permission set's `title`/`detail`) changed, was added
/// or removed. Breaking: never.
pub const DESCRIPTION_CHANGED: &str = "description-changed";

/// A new optional property or parameter. Breaking: never (unexpected fields
/// are ignored, and old data simply lacks it).
pub const PROPERTY_ADDED: &str = "property-added";
/// A property or parameter is gone. Breaking: outbound (old readers lose a
/// field they were built to read; the freed name could later come back with
/// another type). Inbound only (inputs, params) it is safe: old writers'
/// extra field is ignored.
pub const PROPERTY_REMOVED: &str = "property-removed";
/// A property or parameter is now required, or a new required one was added.
/// Breaking: inbound (old data lacks it).
pub const REQUIRED_ADDED: &str = "required-added";
/// A required property or parameter became optional. Breaking: outbound (old
/// readers count on it being present).
pub const REQUIRED_REMOVED: &str = "required-removed";
/// A property became nullable. Breaking: outbound (old readers reject `null`).
pub const NULLABLE_ADDED: &str = "nullable-added";
/// A property is no longer nullable. Breaking: inbound (old data may hold
/// `null`).
pub const NULLABLE_REMOVED: &str = "nullable-removed";

/// A limit got stricter: `maxLength`, `maxGraphemes`, `maximum`, `maxSize`
/// (strings, bytes, arrays, integers, blobs) lowered or added, or a minimum
/// raised or added. Breaking: inbound (old data may be outside it).
pub const LIMIT_NARROWED: &str = "limit-narrowed";
/// A limit got looser: a maximum raised or removed, a minimum lowered or
/// removed. Breaking: outbound (old readers reject the new values).
pub const LIMIT_WIDENED: &str = "limit-widened";

/// An `enum` was added where there was none. Breaking: inbound.
pub const ENUM_ADDED: &str = "enum-added";
/// An `enum` was dropped: any value is now allowed. Breaking: outbound.
pub const ENUM_REMOVED: &str = "enum-removed";
/// An `enum` allows more values. Breaking: outbound.
pub const ENUM_VALUE_ADDED: &str = "enum-value-added";
/// An `enum` allows fewer values. Breaking: inbound.
pub const ENUM_VALUE_REMOVED: &str = "enum-value-removed";
/// `knownValues` changed. Breaking: never (they are suggestions, not
/// validated).
pub const KNOWN_VALUES_CHANGED: &str = "known-values-changed";
/// An open `knownValues` list became a closed `enum`. Breaking: inbound.
pub const KNOWN_VALUES_TO_ENUM: &str = "known-values-to-enum";
/// A `const` was added. Breaking: inbound.
pub const CONST_ADDED: &str = "const-added";
/// A `const` was dropped. Breaking: outbound.
pub const CONST_REMOVED: &str = "const-removed";
/// A `const` has another value. Breaking: always.
pub const CONST_CHANGED: &str = "const-changed";
/// A `default` has another value: data that omits the field now means
/// something else. Breaking: always.
pub const DEFAULT_CHANGED: &str = "default-changed";
/// A `default` was added where there was none. Breaking: never.
pub const DEFAULT_ADDED: &str = "default-added";
/// A `default` was dropped. Breaking: never.
pub const DEFAULT_REMOVED: &str = "default-removed";

/// A string `format` was added. Breaking: inbound.
pub const FORMAT_ADDED: &str = "format-added";
/// A string `format` was dropped. Breaking: outbound.
pub const FORMAT_REMOVED: &str = "format-removed";
/// A string `format` changed. Breaking: always, except a move to a format
/// that accepts a superset (`did`/`handle` → `at-identifier`, `tid`/`nsid` →
/// `record-key`, `at-uri` → `uri`: outbound) or a subset (the reverse:
/// inbound).
pub const FORMAT_CHANGED: &str = "format-changed";

/// A blob's `accept` list admits fewer MIME types. Breaking: inbound.
pub const BLOB_ACCEPT_NARROWED: &str = "blob-accept-narrowed";
/// A blob's `accept` list admits more MIME types. Breaking: outbound.
pub const BLOB_ACCEPT_WIDENED: &str = "blob-accept-widened";

/// A `ref` points at another def that is not equivalent (or is a record,
/// whose `$type` would change). Breaking: always.
pub const REF_CHANGED: &str = "ref-changed";
/// A `ref` points at a def with another name but a compatible schema (data
/// behind a `ref` carries no `$type`). Breaking: never.
pub const REF_RENAMED: &str = "ref-renamed";
/// A `ref` was replaced by an inline schema of the def it pointed at.
/// Breaking: never by itself (differences are reported separately).
pub const REF_INLINED: &str = "ref-inlined";
/// An inline schema was moved to a named def and replaced by a `ref`.
/// Breaking: never by itself (differences are reported separately).
pub const REF_EXTRACTED: &str = "ref-extracted";
/// A union gained a ref. Breaking: never for an open union (that is what
/// open means); outbound for a closed one.
pub const UNION_REF_ADDED: &str = "union-ref-added";
/// A union lost a ref (a `$type` old data or old clients use). Breaking:
/// always — the spec lets unions gain types, never lose them.
pub const UNION_REF_REMOVED: &str = "union-ref-removed";
/// An open union became closed. Breaking: inbound.
pub const UNION_CLOSED: &str = "union-closed";
/// A closed union became open. Breaking: outbound.
pub const UNION_OPENED: &str = "union-opened";

/// A record's `key` type changed. Breaking: always.
pub const RECORD_KEY_CHANGED: &str = "record-key-changed";
/// An XRPC `input`/`output` or subscription `message` appeared. Breaking:
/// inbound (old clients send no input body).
pub const BODY_ADDED: &str = "body-added";
/// An XRPC `input`/`output` or subscription `message` is gone. Breaking:
/// always.
pub const BODY_REMOVED: &str = "body-removed";
/// A body that had no `schema` now has one. Breaking: inbound.
pub const BODY_SCHEMA_ADDED: &str = "body-schema-added";
/// A body lost its `schema` (anything goes now). Breaking: outbound.
pub const BODY_SCHEMA_REMOVED: &str = "body-schema-removed";
/// A body's `encoding` (MIME type) changed. Breaking: always.
pub const ENCODING_CHANGED: &str = "encoding-changed";
/// A new error name. Breaking: never (clients must handle unknown errors).
pub const ERROR_ADDED: &str = "error-added";
/// An error name is gone. Breaking: always (clients match on names).
pub const ERROR_REMOVED: &str = "error-removed";

/// A permission set grants a new permission. Breaking: never.
pub const PERMISSION_ADDED: &str = "permission-added";
/// A permission set no longer grants a permission apps rely on. Breaking:
/// always.
pub const PERMISSION_REMOVED: &str = "permission-removed";

/// Every rule above, for documentation and exhaustive tests.
pub const ALL: &[&str] = &[
    LEXICON_REMOVED,
    LEXICON_ADDED,
    DEF_REMOVED,
    DEF_ADDED,
    DEF_TYPE_CHANGED,
    TYPE_CHANGED,
    DESCRIPTION_CHANGED,
    PROPERTY_ADDED,
    PROPERTY_REMOVED,
    REQUIRED_ADDED,
    REQUIRED_REMOVED,
    NULLABLE_ADDED,
    NULLABLE_REMOVED,
    LIMIT_NARROWED,
    LIMIT_WIDENED,
    ENUM_ADDED,
    ENUM_REMOVED,
    ENUM_VALUE_ADDED,
    ENUM_VALUE_REMOVED,
    KNOWN_VALUES_CHANGED,
    KNOWN_VALUES_TO_ENUM,
    CONST_ADDED,
    CONST_REMOVED,
    CONST_CHANGED,
    DEFAULT_CHANGED,
    DEFAULT_ADDED,
    DEFAULT_REMOVED,
    FORMAT_ADDED,
    FORMAT_REMOVED,
    FORMAT_CHANGED,
    BLOB_ACCEPT_NARROWED,
    BLOB_ACCEPT_WIDENED,
    REF_CHANGED,
    REF_RENAMED,
    REF_INLINED,
    REF_EXTRACTED,
    UNION_REF_ADDED,
    UNION_REF_REMOVED,
    UNION_CLOSED,
    UNION_OPENED,
    RECORD_KEY_CHANGED,
    BODY_ADDED,
    BODY_REMOVED,
    BODY_SCHEMA_ADDED,
    BODY_SCHEMA_REMOVED,
    ENCODING_CHANGED,
    ERROR_ADDED,
    ERROR_REMOVED,
    PERMISSION_ADDED,
    PERMISSION_REMOVED,
];
