//! The atproto data model: atproto JSON ⇄ data model value ⇄ DAG-CBOR ⇄ CID.
//!
//! The in-memory form of a value is [`Ipld`]. Every conversion checks the
//! atproto data-model rules (<https://atproto.com/specs/data-model>), so JSON
//! and DAG-CBOR accept exactly the same set of values and round-trip through
//! each other:
//!
//! - JSON → value: [`json_to_ipld`], [`record_from_json`].
//! - value → JSON: [`ipld_to_json`].
//! - value ⇄ DAG-CBOR: [`encode_dag_cbor`], [`decode_dag_cbor`] (safe on
//!   untrusted bytes); [`Checked`] writes the same bytes into a [`Sink`]
//!   (a buffer, a hash) without building them first.
//! - CIDs: [`cid_for_cbor`], [`cid_for_blob`] (or [`cid_for_blob_digest`]), [`record_cid`], [`parse_cid`].
//! - Rules alone: [`check_data_model`], [`check_record`].
//!
//! Decisions worth knowing:
//!
//! - Integers are signed 64-bit. A JSON number written as a float (`123.0`)
//!   is accepted when it is a whole number within ±(2^53 - 1); any other
//!   non-integer number is a float and is rejected.
//! - CIDs must be in the atproto blessed set: CIDv1, codec dag-cbor or raw,
//!   sha2-256. In JSON they must be in canonical base32 (`b...`) form.
//! - `$bytes` accepts base64 with or without `=` padding and writes it
//!   without padding.
//! - Maps may not use the keys `$link` or `$bytes` (their JSON form would be
//!   ambiguous); `$type`, where present, must be a non-empty string; a map
//!   with `"$type": "blob"` must have exactly `ref` (raw-codec link),
//!   `mimeType` (non-empty string) and `size` (integer ≥ 1).
//! - Limits: [`MAX_DEPTH`] nested lists/maps and [`MAX_CBOR_SIZE`] bytes per
//!   DAG-CBOR block, on both encode and decode.
//!
//! ```
//! use gelstore_model::{cid_for_cbor, decode_dag_cbor, encode_dag_cbor, ipld_to_json, json_to_ipld};
//!
//! let json = serde_json::json!({"$type": "com.example.note", "text": "hi", "n": 3});
//! let value = json_to_ipld(&json).unwrap();
//! let block = encode_dag_cbor(&value).unwrap();
//! assert_eq!(decode_dag_cbor(&block).unwrap(), value);
//! assert_eq!(ipld_to_json(&value).unwrap(), json);
//! println!("{}", cid_for_cbor(&block)); // bafyrei…
//! // Floats are not in the data model.
//! assert!(json_to_ipld(&serde_json::json!({"x": 1.5})).is_err());
//! ```

mod cbor;
mod cid;
mod error;
mod json;
mod scan;
mod time;
mod validate;
mod write;

pub use ::cid::Cid;
pub use ipld_core::ipld::Ipld;

pub use self::cbor::{check_record_cbor, decode_dag_cbor, encode_dag_cbor};
pub use self::cid::{
    DAG_CBOR_CODEC, RAW_CODEC, SHA2_256, check_blessed_cid, cid_for_blob, cid_for_blob_digest,
    cid_for_cbor, cid_from_bytes, parse_cid,
};
pub use self::error::{DataModelError, Result};
pub use self::json::BASE64;
pub use self::json::{ipld_to_json, json_to_ipld, record_from_json};
pub use self::scan::{Scalar, Visit, walk as walk_dag_cbor};
pub use self::time::now_datetime;
pub use self::validate::{check_data_model, check_record};
pub use self::write::{Checked, Sink};

/// Maximum nesting of lists and maps (a scalar at the top level is depth 0,
/// `[]` is depth 1). Links and bytes are scalars and do not count.
pub const MAX_DEPTH: usize = 64;

/// Maximum size of one DAG-CBOR block, in bytes (2 MiB).
pub const MAX_CBOR_SIZE: usize = 2 * 1024 * 1024;

/// Converts an atproto JSON record (top level must be an object) to its
/// canonical DAG-CBOR bytes.
pub fn record_to_dag_cbor(json: &serde_json::Value) -> Result<Vec<u8>> {
    encode_dag_cbor(&record_from_json(json)?)
}

/// The CID (v1, dag-cbor, sha2-256) of an atproto JSON record's canonical
/// DAG-CBOR encoding.
pub fn record_cid(json: &serde_json::Value) -> Result<Cid> {
    Ok(cid_for_cbor(&record_to_dag_cbor(json)?))
}
