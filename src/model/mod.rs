//! UNFINISHED: atproto data model (JSON ⇄ DAG-CBOR ⇄ CID), being written.

mod cid;
mod error;
mod json;
mod validate;

/// Maximum nesting of lists and maps (a scalar at the top level is depth 0,
/// `[]` is depth 1). Links and bytes are scalars and do not count.
pub const MAX_DEPTH: usize = 64;

pub use ::cid::Cid;
pub use ipld_core::ipld::Ipld;

pub use self::cid::{
    DAG_CBOR_CODEC, RAW_CODEC, SHA2_256, check_blessed_cid, cid_for_blob, cid_for_cbor,
    cid_from_bytes, parse_cid,
};
pub use self::error::{DataModelError, Result};
pub use self::json::{ipld_to_json, json_to_ipld, record_from_json};
pub use self::validate::{check_data_model, check_record};
