//! The one error type of the data model module.

use thiserror::Error;

/// Why a value was rejected as atproto data model, or why DAG-CBOR bytes were
/// rejected.
///
/// Variants that come from the binary decoder carry the byte `offset` in the
/// input where the problem starts.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DataModelError {
    /// A record (JSON or CBOR) must be an object/map at the top level.
    #[error("a record must be an object at the top level, found {found}")]
    RecordNotObject {
        /// The kind of value that was found instead.
        found: &'static str,
    },

    /// The atproto data model has no floating point numbers.
    #[error("floats are not allowed in the atproto data model ({detail})")]
    Float {
        /// What was found and where (a JSON number, a CBOR float head at an offset, ...).
        detail: String,
    },

    /// Integers must fit in a signed 64-bit integer.
    #[error("integer out of range: {detail}")]
    IntegerOutOfRange {
        /// The value or the reason it cannot be represented.
        detail: String,
    },

    /// Containers (lists and maps) are nested deeper than allowed.
    #[error("nesting deeper than the limit of {max} lists/maps")]
    TooDeep {
        /// The maximum nesting depth.
        max: usize,
    },

    /// The DAG-CBOR block is larger than allowed.
    #[error("DAG-CBOR block of {size} bytes is larger than the limit of {max} bytes")]
    TooLarge {
        /// Size of the input (or of the encoded output).
        size: usize,
        /// The maximum size.
        max: usize,
    },

    /// A `$type` field that is not a non-empty string.
    #[error("invalid $type: {reason}")]
    InvalidType {
        /// What is wrong with it.
        reason: String,
    },

    /// A malformed `{"$link": ...}` JSON object.
    #[error("invalid $link object: {reason}")]
    InvalidLink {
        /// What is wrong with it.
        reason: String,
    },

    /// A malformed `{"$bytes": ...}` JSON object.
    #[error("invalid $bytes object: {reason}")]
    InvalidBytes {
        /// What is wrong with it.
        reason: String,
    },

    /// A map with `"$type": "blob"` that does not have the blob shape.
    #[error("invalid blob: {reason}")]
    InvalidBlob {
        /// What is wrong with it.
        reason: String,
    },

    /// A data-model map uses a key reserved for the JSON encoding (`$link`,
    /// `$bytes`), which would make its JSON form ambiguous.
    #[error("map key {key:?} is reserved by the atproto JSON encoding")]
    ReservedKey {
        /// The offending key.
        key: String,
    },

    /// A CID that cannot be parsed (bad string, bad binary form, trailing bytes).
    #[error("invalid CID: {reason}")]
    InvalidCid {
        /// What is wrong with it.
        reason: String,
    },

    /// A well-formed CID outside the atproto "blessed" set (CIDv1, dag-cbor or
    /// raw codec, sha2-256 digest of 32 bytes).
    #[error("CID {cid} is not allowed in atproto: {reason}")]
    DisallowedCid {
        /// The CID, as a string.
        cid: String,
        /// Which rule it breaks.
        reason: &'static str,
    },

    /// The input ended in the middle of a CBOR item.
    #[error("DAG-CBOR input truncated at offset {offset}: {detail}")]
    Truncated {
        /// Where the missing data should have started.
        offset: usize,
        /// What was being read.
        detail: &'static str,
    },

    /// More bytes follow the single top-level CBOR item.
    #[error("{count} trailing byte(s) after the DAG-CBOR item at offset {offset}")]
    TrailingBytes {
        /// Where the extra bytes start.
        offset: usize,
        /// How many extra bytes there are.
        count: usize,
    },

    /// An integer, length or tag argument not in its shortest form.
    #[error("non-minimal {what} encoding at offset {offset}")]
    NonMinimalEncoding {
        /// Where the CBOR head starts.
        offset: usize,
        /// What the argument was (integer, length, tag).
        what: &'static str,
    },

    /// Indefinite-length strings, arrays and maps are not DAG-CBOR.
    #[error("indefinite-length item at offset {offset}")]
    IndefiniteLength {
        /// Where the CBOR head starts.
        offset: usize,
    },

    /// A CBOR head byte that is not well-formed CBOR (reserved additional
    /// information, or a stray "break").
    #[error("malformed CBOR head byte 0x{byte:02x} at offset {offset}")]
    MalformedHead {
        /// The head byte.
        byte: u8,
        /// Where it is.
        offset: usize,
    },

    /// A CBOR simple value other than `false`, `true` and `null` (for example `undefined`).
    #[error("unsupported CBOR simple value (head byte 0x{byte:02x}) at offset {offset}")]
    UnsupportedSimpleValue {
        /// The head byte.
        byte: u8,
        /// Where it is.
        offset: usize,
    },

    /// A CBOR tag other than 42 (CID link).
    #[error("unsupported CBOR tag {tag} at offset {offset} (only tag 42 is allowed)")]
    UnsupportedTag {
        /// The tag number.
        tag: u64,
        /// Where the tag head starts.
        offset: usize,
    },

    /// A map key that is not a text string.
    #[error("map key at offset {offset} is not a text string")]
    NonStringMapKey {
        /// Where the key starts.
        offset: usize,
    },

    /// Map keys out of the canonical order (length first, then bytewise).
    #[error("map key at offset {offset} is out of canonical order")]
    MapKeyOrder {
        /// Where the key starts.
        offset: usize,
    },

    /// The same key twice in one map.
    #[error("duplicate map key at offset {offset}")]
    DuplicateMapKey {
        /// Where the second occurrence starts.
        offset: usize,
    },

    /// A text string (or map key) that is not valid UTF-8.
    #[error("invalid UTF-8 in text string at offset {offset}")]
    InvalidUtf8 {
        /// Where the string's head starts.
        offset: usize,
    },

    /// The input decodes, but re-encoding does not give the same bytes.
    #[error("DAG-CBOR input is not in canonical form")]
    NotCanonical,

    /// An error reported by the underlying DAG-CBOR library.
    #[error("DAG-CBOR codec error: {0}")]
    Codec(String),
}

/// Result type of the data model module.
pub type Result<T, E = DataModelError> = std::result::Result<T, E>;
