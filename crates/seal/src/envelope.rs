//! `chat.gel.assistant.defs#encryptedContent`: the sealed envelope as it
//! sits in a record, parsed with every structural check done before any
//! cryptography.

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;

use super::aad::BlobBinding;
use super::error::{Result, SealError};
use gelstore_model::{Cid, RAW_CODEC, check_blessed_cid};

/// The record-seal scheme of version 1 (see the module docs of
/// [the crate docs](crate)).
pub const SEAL_ALG_V1: &str = "xchacha20poly1305-hkdf-sha256-v1";
/// Every record-seal alg this reader opens.
pub const SEAL_ALGS: &[&str] = &[SEAL_ALG_V1];
/// Nonce length of XChaCha20-Poly1305.
pub const NONCE_LEN: usize = 24;
/// Poly1305 tag length.
pub const TAG_LEN: usize = 16;
/// `encryptedContent.ciphertext` maxLength in the lexicon.
pub const MAX_CIPHERTEXT: usize = 1_000_000;
/// `encryptedContent.keyId` maxLength in the lexicon.
pub const MAX_KEY_ID: usize = 128;
/// `encryptedContent.alg` maxLength in the lexicon.
pub const MAX_ALG: usize = 128;
/// `encryptedContent.blobs` maxLength in the lexicon.
pub const MAX_BLOBS: usize = 100;
/// `$type` an `encryptedContent` object may carry.
pub const ENCRYPTED_CONTENT_TYPE: &str = "chat.gel.assistant.defs#encryptedContent";
/// MIME type given to the encrypted blobs listed in the envelope.
pub const SEALED_BLOB_MIME: &str = "application/octet-stream";

/// A parsed `encryptedContent`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// Scheme name, on the allow-list.
    pub alg: String,
    /// The chat key's id.
    pub key_id: String,
    /// The 24-byte nonce.
    pub nonce: [u8; NONCE_LEN],
    /// Ciphertext with its 16-byte tag at the end.
    pub ciphertext: Vec<u8>,
    /// The encrypted blobs, in order.
    pub blobs: Vec<BlobBinding>,
    /// Whether the envelope carries `$type` (it may only be
    /// [`ENCRYPTED_CONTENT_TYPE`]); bound into the AAD, so a PDS cannot add
    /// or drop it.
    pub typed: bool,
}

/// Refuses an alg that is not on the allow-list.
pub fn check_alg(alg: &str) -> Result<()> {
    if SEAL_ALGS.contains(&alg) {
        Ok(())
    } else {
        Err(SealError::UnsupportedAlg {
            alg: alg.chars().take(MAX_ALG).collect(),
            allowed: SEAL_ALG_V1,
        })
    }
}

fn field<'a>(map: &'a BTreeMap<String, Ipld>, name: &str) -> Result<&'a Ipld> {
    map.get(name)
        .ok_or_else(|| SealError::malformed("encryptedContent", format!("no {name}")))
}

fn wrong_type(name: &str, expected: &str) -> SealError {
    SealError::malformed("encryptedContent", format!("{name} is not {expected}"))
}

/// A parsed `encryptedContent` that borrows its strings and ciphertext from
/// the value it was parsed from (what opening needs: no copy of the
/// ciphertext before the one that is decrypted in place).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvelopeRef<'a> {
    /// Scheme name, on the allow-list.
    pub alg: &'a str,
    /// The chat key's id.
    pub key_id: &'a str,
    /// The 24-byte nonce.
    pub nonce: [u8; NONCE_LEN],
    /// Ciphertext with its 16-byte tag at the end.
    pub ciphertext: &'a [u8],
    /// The encrypted blobs, in order.
    pub blobs: Vec<BlobBinding>,
    /// Whether the envelope carries `$type` (see [`Envelope::typed`]).
    pub typed: bool,
}

impl<'a> EnvelopeRef<'a> {
    /// Parses and checks an `encryptedContent` value. Checks, in order: it is
    /// a map with no unknown fields; `alg` is on the allow-list; `keyId` is a
    /// non-empty string ≤ 128 bytes; `nonce` is 24 bytes; `ciphertext` is at
    /// least a tag long and at most 1,000,000 bytes; `blobs` (optional) is a
    /// list of ≤ 100 blob refs with raw-codec CIDs.
    pub fn parse(value: &'a Ipld) -> Result<EnvelopeRef<'a>> {
        let Ipld::Map(map) = value else {
            return Err(SealError::malformed("encryptedContent", "not a map"));
        };
        if let Some(unknown) = map.keys().find(|k| {
            !matches!(
                k.as_str(),
                "alg" | "keyId" | "nonce" | "ciphertext" | "blobs" | "$type"
            )
        }) {
            return Err(SealError::malformed(
                "encryptedContent",
                format!("unknown field {unknown:?}"),
            ));
        }
        let alg = match field(map, "alg")? {
            Ipld::String(s) => s,
            _ => return Err(wrong_type("alg", "a string")),
        };
        check_alg(alg)?;
        if let Some(t) = map.get("$type")
            && t != &Ipld::String(ENCRYPTED_CONTENT_TYPE.into())
        {
            return Err(SealError::malformed(
                "encryptedContent",
                format!("$type is not {ENCRYPTED_CONTENT_TYPE:?}"),
            ));
        }
        let key_id = match field(map, "keyId")? {
            Ipld::String(s) => s,
            _ => return Err(wrong_type("keyId", "a string")),
        };
        if key_id.is_empty() || key_id.len() > MAX_KEY_ID {
            return Err(SealError::malformed(
                "encryptedContent",
                format!("keyId of {} bytes (must be 1..={MAX_KEY_ID})", key_id.len()),
            ));
        }
        let nonce = match field(map, "nonce")? {
            Ipld::Bytes(b) => b,
            _ => return Err(wrong_type("nonce", "bytes")),
        };
        let nonce: [u8; NONCE_LEN] =
            nonce
                .as_slice()
                .try_into()
                .map_err(|_| SealError::MalformedNonce {
                    len: nonce.len(),
                    expected: NONCE_LEN,
                })?;
        let ciphertext = match field(map, "ciphertext")? {
            Ipld::Bytes(b) => b,
            _ => return Err(wrong_type("ciphertext", "bytes")),
        };
        if ciphertext.len() > MAX_CIPHERTEXT {
            return Err(SealError::Oversize {
                what: "ciphertext",
                size: ciphertext.len() as u64,
                max: MAX_CIPHERTEXT as u64,
                hint: "",
            });
        }
        if ciphertext.len() < TAG_LEN {
            return Err(SealError::Truncated {
                what: "ciphertext",
                detail: format!(
                    "{} bytes, shorter than the {TAG_LEN}-byte tag",
                    ciphertext.len()
                ),
            });
        }
        let blobs = match map.get("blobs") {
            None => Vec::new(),
            Some(Ipld::List(items)) => {
                if items.len() > MAX_BLOBS {
                    return Err(SealError::malformed(
                        "encryptedContent",
                        format!("{} blobs, over the limit of {MAX_BLOBS}", items.len()),
                    ));
                }
                items
                    .iter()
                    .enumerate()
                    .map(|(i, b)| parse_blob(i, b))
                    .collect::<Result<_>>()?
            }
            Some(_) => return Err(wrong_type("blobs", "a list")),
        };
        Ok(EnvelopeRef {
            alg,
            key_id,
            nonce,
            ciphertext,
            blobs,
            typed: map.contains_key("$type"),
        })
    }

    /// The envelope's `$type` as the AAD binds it: `""` when it has none.
    pub fn envelope_type(&self) -> &'static str {
        if self.typed {
            ENCRYPTED_CONTENT_TYPE
        } else {
            ""
        }
    }

    /// The owned envelope.
    pub fn to_envelope(&self) -> Envelope {
        Envelope {
            alg: self.alg.to_string(),
            key_id: self.key_id.to_string(),
            nonce: self.nonce,
            ciphertext: self.ciphertext.to_vec(),
            blobs: self.blobs.clone(),
            typed: self.typed,
        }
    }
}

impl Envelope {
    /// Parses and checks an `encryptedContent` value, with the checks of
    /// [`EnvelopeRef::parse`].
    pub fn from_ipld(value: &Ipld) -> Result<Envelope> {
        EnvelopeRef::parse(value).map(|view| view.to_envelope())
    }

    /// A borrowed view of this envelope.
    pub fn view(&self) -> EnvelopeRef<'_> {
        EnvelopeRef {
            alg: &self.alg,
            key_id: &self.key_id,
            nonce: self.nonce,
            ciphertext: &self.ciphertext,
            blobs: self.blobs.clone(),
            typed: self.typed,
        }
    }

    /// The envelope's `$type` as the AAD binds it: `""` when it has none.
    pub fn envelope_type(&self) -> &'static str {
        if self.typed {
            ENCRYPTED_CONTENT_TYPE
        } else {
            ""
        }
    }

    /// The `encryptedContent` value (`$type` only if [`Envelope::typed`];
    /// `blobs` only when there are some).
    pub fn to_ipld(&self) -> Ipld {
        self.clone().into_ipld()
    }

    /// [`Envelope::to_ipld`], moving the ciphertext into the value instead
    /// of copying it.
    pub fn into_ipld(self) -> Ipld {
        let mut map = BTreeMap::new();
        if self.typed {
            map.insert(
                "$type".to_string(),
                Ipld::String(ENCRYPTED_CONTENT_TYPE.into()),
            );
        }
        map.insert("alg".to_string(), Ipld::String(self.alg));
        map.insert("keyId".to_string(), Ipld::String(self.key_id));
        map.insert("nonce".to_string(), Ipld::Bytes(self.nonce.to_vec()));
        map.insert("ciphertext".to_string(), Ipld::Bytes(self.ciphertext));
        if !self.blobs.is_empty() {
            map.insert(
                "blobs".to_string(),
                Ipld::List(self.blobs.iter().map(blob_ref).collect()),
            );
        }
        Ipld::Map(map)
    }
}

/// The atproto blob ref of an encrypted blob.
pub fn blob_ref(blob: &BlobBinding) -> Ipld {
    let mut map = BTreeMap::new();
    map.insert("$type".to_string(), Ipld::String("blob".into()));
    map.insert("ref".to_string(), Ipld::Link(blob.cid));
    map.insert("mimeType".to_string(), Ipld::String(blob.mime_type.clone()));
    map.insert("size".to_string(), Ipld::Integer(i128::from(blob.size)));
    Ipld::Map(map)
}

fn parse_blob(index: usize, value: &Ipld) -> Result<BlobBinding> {
    let bad = |reason: &str| {
        SealError::malformed("encryptedContent", format!("blobs[{index}]: {reason}"))
    };
    let Ipld::Map(map) = value else {
        return Err(bad("not a map"));
    };
    if map.get("$type") != Some(&Ipld::String("blob".into())) {
        return Err(bad("$type is not \"blob\""));
    }
    let cid: Cid = match map.get("ref") {
        Some(Ipld::Link(cid)) => *cid,
        _ => return Err(bad("ref is not a link")),
    };
    if check_blessed_cid(&cid).is_err() || cid.codec() != RAW_CODEC {
        return Err(bad("ref is not a raw sha2-256 CIDv1"));
    }
    let mime_type = match map.get("mimeType") {
        Some(Ipld::String(s)) if !s.is_empty() => s.clone(),
        _ => return Err(bad("mimeType is not a non-empty string")),
    };
    let size = match map.get("size") {
        Some(Ipld::Integer(n)) if *n >= 1 => {
            u64::try_from(*n).map_err(|_| bad("size too large"))?
        }
        _ => return Err(bad("size is not an integer ≥ 1")),
    };
    if map.len() != 4 {
        return Err(bad("unexpected fields in the blob ref"));
    }
    Ok(BlobBinding {
        cid,
        size,
        mime_type,
    })
}
