//! The associated data (AAD) of a sealed record, and the hash of its clear
//! fields.
//!
//! Every variable-length input is written as a *field*: its length as a
//! 4-byte big-endian unsigned integer, then its bytes (`lp(x)` below).
//!
//! ```text
//! AAD = lp("gelstore/seal/aad/v2")
//!     ‖ lp(alg) ‖ lp(keyId) ‖ lp(nonce)
//!     ‖ lp(envelope $type)                 ("" when the envelope has none)
//!     ‖ lp(repo DID) ‖ lp(collection) ‖ lp(rkey) ‖ lp($type)
//!     ‖ lp(sealed field name)              ("content", "authenticator", "sealed")
//!     ‖ lp(clearHash)                      (32 bytes, below)
//!     ‖ u32be(number of blobs)
//!     ‖ for each blob, in the order of encryptedContent.blobs:
//!           lp(CID as binary CIDv1) ‖ u64be(size in bytes) ‖ lp(mimeType)
//! clearHash = SHA-256( DAG-CBOR( the record without its sealed field ) )
//! ```
//!
//! Strings are UTF-8. The DID is the account's (the repository's), never a
//! device's. `$type` is the record's own `$type`. Every byte of the
//! envelope other than the ciphertext is bound, so adding or dropping the
//! envelope's `$type` or editing a blob's `mimeType` fails authentication
//! like any other edit. The field name keeps a message's authenticator
//! (see [`AUTHENTICATOR_FIELD`]) from opening as its content, and back.

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;
use sha2::{Digest, Sha256};

use super::error::{Result, SealError};
use gelstore_model::{Checked, Cid};

/// Domain label that starts every AAD.
pub const AAD_LABEL: &str = "gelstore/seal/aad/v2";

/// Where a record lives: the account's repo DID, the collection and the
/// record key. All three are bound into the AAD, so a sealed record moved to
/// another place no longer opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place<'a> {
    /// The account's DID (the repository's), such as `did:plc:…`.
    pub did: &'a str,
    /// The collection NSID, such as `chat.gel.assistant.message`.
    pub collection: &'a str,
    /// The record key.
    pub rkey: &'a str,
}

/// A blob as the AAD binds it: its CID, size (of the encrypted bytes, as
/// stored) and the MIME type its ref in the envelope carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobBinding {
    /// CID (v1, raw, sha2-256) of the stored encrypted blob.
    pub cid: Cid,
    /// Its size in bytes.
    pub size: u64,
    /// The ref's `mimeType` (`application/octet-stream` as gelstore writes
    /// it; the real type is inside the sealed content).
    pub mime_type: String,
}

/// Appends `u32be(len) ‖ bytes`.
pub(crate) fn put_field(out: &mut Vec<u8>, bytes: &[u8]) {
    // Every input is capped far below 4 GiB (records are ≤ 2 MiB).
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(bytes);
}

/// The inputs of the AAD other than the envelope's own fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AadContext<'a> {
    /// Where the record lives.
    pub place: Place<'a>,
    /// The record's `$type`.
    pub record_type: &'a str,
    /// The name of the field the envelope sits in.
    pub field: &'a str,
    /// SHA-256 of the DAG-CBOR of the record without its sealed field.
    pub clear_hash: [u8; 32],
}

/// Builds the AAD (see the module docs for the layout). `envelope_type` is
/// the envelope's own `$type`, `""` when it has none.
pub fn record_aad(
    alg: &str,
    key_id: &str,
    nonce: &[u8],
    envelope_type: &str,
    ctx: &AadContext<'_>,
    blobs: &[BlobBinding],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(320 + blobs.len() * 80);
    put_field(&mut out, AAD_LABEL.as_bytes());
    put_field(&mut out, alg.as_bytes());
    put_field(&mut out, key_id.as_bytes());
    put_field(&mut out, nonce);
    put_field(&mut out, envelope_type.as_bytes());
    put_field(&mut out, ctx.place.did.as_bytes());
    put_field(&mut out, ctx.place.collection.as_bytes());
    put_field(&mut out, ctx.place.rkey.as_bytes());
    put_field(&mut out, ctx.record_type.as_bytes());
    put_field(&mut out, ctx.field.as_bytes());
    put_field(&mut out, &ctx.clear_hash);
    let count = u32::try_from(blobs.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&count.to_be_bytes());
    for blob in blobs {
        put_field(&mut out, &blob.cid.to_bytes());
        out.extend_from_slice(&blob.size.to_be_bytes());
        put_field(&mut out, blob.mime_type.as_bytes());
    }
    out
}

/// The field of a message that has no content yet (a pending reply): an
/// empty map sealed like content, so the message's clear fields are
/// authenticated under the chat key before there is anything to seal.
/// Filling the reply replaces it with `content`; a message never has both.
pub const AUTHENTICATOR_FIELD: &str = "authenticator";

/// The name of the sealed field of a record type: `content` for
/// `chat.gel.assistant.message`, `sealed` for `chat.gel.assistant.chat` and
/// `chat.gel.assistant.settings`. A message without content carries its
/// [`AUTHENTICATOR_FIELD`] instead (see [`sealed_fields`]).
pub fn sealed_field(record_type: &str) -> Option<&'static str> {
    match record_type {
        "chat.gel.assistant.message" => Some("content"),
        "chat.gel.assistant.chat" | "chat.gel.assistant.settings" => Some("sealed"),
        _ => None,
    }
}

/// Every field a record of `record_type` may hold its envelope in, the
/// main one first; a record holds exactly one of them.
pub fn sealed_fields(record_type: &str) -> &'static [&'static str] {
    match sealed_field(record_type) {
        Some("content") => &["content", AUTHENTICATOR_FIELD],
        Some(_) => &["sealed"],
        None => &[],
    }
}

/// The record's map and `$type`, checked.
pub(crate) fn record_parts(record: &Ipld) -> Result<(&BTreeMap<String, Ipld>, &str)> {
    let Ipld::Map(map) = record else {
        return Err(SealError::malformed("record", "not a map"));
    };
    match map.get("$type") {
        Some(Ipld::String(t)) if !t.is_empty() => Ok((map, t.as_str())),
        Some(_) => Err(SealError::malformed("record", "$type is not a string")),
        None => Err(SealError::malformed("record", "no $type")),
    }
}

/// SHA-256 of the canonical DAG-CBOR of `record` with `sealed_field`
/// removed (the clear fields, `$type` included).
pub fn clear_fields_hash(record: &BTreeMap<String, Ipld>, sealed_field: &str) -> Result<[u8; 32]> {
    // Streamed into the hash: the clear map is neither built nor encoded
    // into a buffer first.
    let clear = Checked::map_without(record, sealed_field)
        .map_err(|e| SealError::malformed("record", format!("clear fields: {e}")))?;
    let mut hash = Sha256::new();
    clear.write_to(&mut hash);
    Ok(hash.finalize().into())
}
