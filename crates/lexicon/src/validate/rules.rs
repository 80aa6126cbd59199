//! The `rule` of every finding the validator reports. These strings are
//! stable: CI users grep for them and may allow-list them.

/// The value breaks the atproto data model whatever the schema says: a
/// float, an integer outside 64 bits, a `$type` that is not a non-empty
/// string, or a malformed `$bytes`, `$link` or blob object.
pub const DATA_MODEL: &str = "data-model";
/// Data nested deeper than the validator's limit (128 containers by
/// default). The branch below the limit is not checked.
pub const DEPTH: &str = "depth";
/// The JSON type does not match the schema (a string where an integer is
/// expected, bytes where an object is expected …).
pub const TYPE: &str = "type";
/// A field listed in `required` is absent.
pub const REQUIRED: &str = "required";
/// A field is `null` but not listed in the object's `nullable`.
pub const NULLABLE: &str = "nullable";
/// A string is longer than `maxLength` (counted in UTF-8 bytes).
pub const MAX_LENGTH: &str = "max-length";
/// A string is shorter than `minLength` (counted in UTF-8 bytes).
pub const MIN_LENGTH: &str = "min-length";
/// A string has more than `maxGraphemes` extended grapheme clusters.
pub const MAX_GRAPHEMES: &str = "max-graphemes";
/// A string has fewer than `minGraphemes` extended grapheme clusters.
pub const MIN_GRAPHEMES: &str = "min-graphemes";
/// An integer is below `minimum`.
pub const MINIMUM: &str = "minimum";
/// An integer is above `maximum`.
pub const MAXIMUM: &str = "maximum";
/// A string or integer is not one of the schema's `enum` values.
pub const ENUM: &str = "enum";
/// A string, integer or boolean differs from the schema's `const`.
pub const CONST: &str = "const";
/// A string does not match its `format` (did, handle, datetime …).
pub const FORMAT: &str = "format";
/// An array has fewer than `minLength` or more than `maxLength` items.
pub const ARRAY_LENGTH: &str = "array-length";
/// Bytes decode to fewer than `minLength` or more than `maxLength` bytes.
pub const BYTES_LENGTH: &str = "bytes-length";
/// A blob's `size` is over the schema's `maxSize`.
pub const BLOB_SIZE: &str = "blob-size";
/// A blob's `mimeType` matches none of the schema's `accept` patterns.
pub const BLOB_ACCEPT: &str = "blob-accept";
/// A union value is not an object carrying a `$type`.
pub const UNION_TYPE: &str = "union-type";
/// A closed union value has a `$type` outside the union's `refs`.
pub const CLOSED_UNION: &str = "closed-union";
/// A record's (or requested) type id names no definition in the catalog.
pub const UNKNOWN_TYPE: &str = "unknown-type";
/// A record's `$type` names a definition that is not a record.
pub const RECORD_TYPE: &str = "record-type";
/// The record key is not valid for the record's `key` scheme.
pub const RECORD_KEY: &str = "record-key";
/// The value of a ref to a `token` is not that token's type id.
pub const TOKEN: &str = "token";
/// A schema reference does not resolve in the catalog, so the value at
/// this place could not be checked against it (fail closed).
pub const UNRESOLVED_REF: &str = "unresolved-ref";
/// Schema references chain into each other without reaching a concrete
/// type (a `ref` to a `ref` loop in a broken catalog).
pub const REF_CYCLE: &str = "ref-cycle";
/// The definition asked for (or reached through a ref) is of a kind data
/// can not be checked against (a query where an object is needed …).
pub const DEF_KIND: &str = "def-kind";
/// An XRPC body, parameter set or message was validated against a method
/// that declares none.
pub const BODY: &str = "body";

/// Every rule, for documentation and tests.
pub const ALL: &[&str] = &[
    DATA_MODEL,
    DEPTH,
    TYPE,
    REQUIRED,
    NULLABLE,
    MAX_LENGTH,
    MIN_LENGTH,
    MAX_GRAPHEMES,
    MIN_GRAPHEMES,
    MINIMUM,
    MAXIMUM,
    ENUM,
    CONST,
    FORMAT,
    ARRAY_LENGTH,
    BYTES_LENGTH,
    BLOB_SIZE,
    BLOB_ACCEPT,
    UNION_TYPE,
    CLOSED_UNION,
    UNKNOWN_TYPE,
    RECORD_TYPE,
    RECORD_KEY,
    TOKEN,
    UNRESOLVED_REF,
    REF_CYCLE,
    DEF_KIND,
    BODY,
];
