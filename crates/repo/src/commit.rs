//! Signed repository commits (v3), <https://atproto.com/specs/repository>.
//!
//! A commit is a DAG-CBOR map with exactly these fields:
//!
//! | field     | type              |
//! |-----------|-------------------|
//! | `did`     | string (the account DID) |
//! | `version` | integer, always 3 |
//! | `data`    | link to the MST root (dag-cbor) |
//! | `rev`     | string, a TID; increases with every commit |
//! | `prev`    | link to the previous commit, or null; always present |
//! | `sig`     | bytes: signature over the unsigned commit |
//!
//! Signing: encode the commit without `sig` as DAG-CBOR, and sign those
//! bytes (SHA-256, low-S compact ECDSA; see [`keys`](gelstore_crypto)).
//!
//! Decoding untrusted bytes is strict: canonical DAG-CBOR (checked by
//! [`decode_dag_cbor`]), every field present with its type, no other
//! field, version 3, a syntactically valid DID and TID, and dag-cbor links.
//! The signature bytes are only checked by [`Commit::verify`].

use std::collections::BTreeMap;

use cid::Cid;
use ipld_core::ipld::Ipld;
use thiserror::Error;

use super::tid::{Tid, TidError};
use gelstore_crypto::{KeyError, PublicKey, SignatureError, SigningKey};
use gelstore_model::{
    DAG_CBOR_CODEC, DataModelError, cid_for_cbor, decode_dag_cbor, encode_dag_cbor,
};

/// The repository format version written and accepted.
pub const COMMIT_VERSION: i64 = 3;

const FIELDS: [&str; 6] = ["did", "version", "data", "rev", "prev", "sig"];

/// Why a commit could not be built, decoded or verified.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CommitError {
    /// The bytes are not a valid DAG-CBOR data model value.
    #[error("commit is not valid DAG-CBOR: {0}")]
    Cbor(#[from] DataModelError),

    /// The top-level value is not a map.
    #[error("commit must be a map, found {found}")]
    NotAMap {
        /// The kind of value found.
        found: &'static str,
    },

    /// A required field is absent.
    #[error("commit has no {0:?} field")]
    MissingField(&'static str),

    /// A field of the wrong type.
    #[error("commit field {field:?} must be {expected}, found {found}")]
    WrongType {
        /// The field.
        field: &'static str,
        /// The type it must have.
        expected: &'static str,
        /// The kind of value found.
        found: &'static str,
    },

    /// A field that is not part of a v3 commit.
    #[error("unexpected commit field {0:?}")]
    UnexpectedField(String),

    /// `version` is not 3.
    #[error("unsupported commit version {0} (only {COMMIT_VERSION} is supported)")]
    UnsupportedVersion(i128),

    /// `did` is not a valid DID.
    #[error("invalid commit did {did:?}: {reason}")]
    BadDid {
        /// The value (cut to 64 characters).
        did: String,
        /// What is wrong with it.
        reason: String,
    },

    /// `rev` is not a valid TID.
    #[error("invalid commit rev: {0}")]
    BadRev(#[from] TidError),

    /// `data` or `prev` links to something other than a dag-cbor block.
    #[error("commit field {field:?} must link to a dag-cbor block, found codec 0x{codec:x}")]
    WrongCodec {
        /// The field.
        field: &'static str,
        /// The codec found.
        codec: u64,
    },

    /// The key to verify against could not be parsed.
    #[error("bad verification key: {0}")]
    Key(#[from] KeyError),

    /// The signature is malformed or does not match.
    #[error("commit signature rejected: {0}")]
    Signature(#[from] SignatureError),
}

/// A commit before signing: everything but `sig`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsignedCommit {
    did: String,
    data: Cid,
    rev: Tid,
    prev: Option<Cid>,
}

impl UnsignedCommit {
    /// A new v3 commit of `data` (the MST root) by `did` at revision `rev`.
    ///
    /// Checks the DID syntax and that the links are dag-cbor.
    pub fn new(
        did: impl Into<String>,
        data: Cid,
        rev: Tid,
        prev: Option<Cid>,
    ) -> Result<Self, CommitError> {
        let did = did.into();
        check_did(&did)?;
        check_link("data", &data)?;
        if let Some(prev) = &prev {
            check_link("prev", prev)?;
        }
        Ok(UnsignedCommit {
            did,
            data,
            rev,
            prev,
        })
    }

    /// The account DID.
    pub fn did(&self) -> &str {
        &self.did
    }

    /// The MST root.
    pub fn data(&self) -> Cid {
        self.data
    }

    /// The revision.
    pub fn rev(&self) -> Tid {
        self.rev
    }

    /// The previous commit, if linked.
    pub fn prev(&self) -> Option<Cid> {
        self.prev
    }

    /// The DAG-CBOR bytes that are signed: the commit map without `sig`.
    pub fn to_cbor(&self) -> Vec<u8> {
        encode(self.to_map())
    }

    /// Signs the commit.
    pub fn sign(self, key: &SigningKey) -> Commit {
        let sig = key.sign(&self.to_cbor()).to_vec();
        Commit {
            unsigned: self,
            sig,
        }
    }

    fn to_map(&self) -> BTreeMap<String, Ipld> {
        BTreeMap::from([
            ("did".to_owned(), Ipld::String(self.did.clone())),
            ("version".to_owned(), Ipld::Integer(COMMIT_VERSION.into())),
            ("data".to_owned(), Ipld::Link(self.data)),
            ("rev".to_owned(), Ipld::String(self.rev.to_string())),
            ("prev".to_owned(), self.prev.map_or(Ipld::Null, Ipld::Link)),
        ])
    }
}

/// A signed v3 commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    unsigned: UnsignedCommit,
    sig: Vec<u8>,
}

impl Commit {
    /// The account DID.
    pub fn did(&self) -> &str {
        &self.unsigned.did
    }

    /// The MST root.
    pub fn data(&self) -> Cid {
        self.unsigned.data
    }

    /// The revision.
    pub fn rev(&self) -> Tid {
        self.unsigned.rev
    }

    /// The previous commit, if linked.
    pub fn prev(&self) -> Option<Cid> {
        self.unsigned.prev
    }

    /// The signature bytes, as stored (not checked until [`verify`](Self::verify)).
    pub fn sig(&self) -> &[u8] {
        &self.sig
    }

    /// The commit without its signature.
    pub fn unsigned(&self) -> &UnsignedCommit {
        &self.unsigned
    }

    /// Splits into the unsigned commit and the signature.
    pub fn into_parts(self) -> (UnsignedCommit, Vec<u8>) {
        (self.unsigned, self.sig)
    }

    /// Puts an unsigned commit and a signature made elsewhere together.
    /// Nothing is verified.
    pub fn from_parts(unsigned: UnsignedCommit, sig: Vec<u8>) -> Commit {
        Commit { unsigned, sig }
    }

    /// The canonical DAG-CBOR block of the signed commit.
    pub fn to_cbor(&self) -> Vec<u8> {
        let mut map = self.unsigned.to_map();
        map.insert("sig".to_owned(), Ipld::Bytes(self.sig.clone()));
        encode(map)
    }

    /// The commit's CID (dag-cbor, sha2-256 of [`to_cbor`](Self::to_cbor)).
    pub fn cid(&self) -> Cid {
        cid_for_cbor(&self.to_cbor())
    }

    /// Decodes a commit block from untrusted bytes. Does not verify the
    /// signature.
    pub fn from_cbor(bytes: &[u8]) -> Result<Commit, CommitError> {
        let map = match decode_dag_cbor(bytes)? {
            Ipld::Map(map) => map,
            other => {
                return Err(CommitError::NotAMap {
                    found: kind(&other),
                });
            }
        };
        if let Some(key) = map.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(CommitError::UnexpectedField(key.chars().take(64).collect()));
        }
        // Version first, so a v2 commit reports its version, not a missing rev.
        match field(&map, "version")? {
            Ipld::Integer(v) if *v == i128::from(COMMIT_VERSION) => {}
            Ipld::Integer(v) => return Err(CommitError::UnsupportedVersion(*v)),
            other => return Err(wrong_type("version", "an integer", other)),
        }
        let did = match field(&map, "did")? {
            Ipld::String(s) => s.clone(),
            other => return Err(wrong_type("did", "a string", other)),
        };
        let data = match field(&map, "data")? {
            Ipld::Link(cid) => *cid,
            other => return Err(wrong_type("data", "a link", other)),
        };
        let rev = match field(&map, "rev")? {
            Ipld::String(s) => Tid::parse(s)?,
            other => return Err(wrong_type("rev", "a string", other)),
        };
        let prev = match field(&map, "prev")? {
            Ipld::Null => None,
            Ipld::Link(cid) => Some(*cid),
            other => return Err(wrong_type("prev", "a link or null", other)),
        };
        let sig = match field(&map, "sig")? {
            Ipld::Bytes(b) => b.clone(),
            other => return Err(wrong_type("sig", "bytes", other)),
        };
        let unsigned = UnsignedCommit::new(did, data, rev, prev)?;
        Ok(Commit { unsigned, sig })
    }

    /// Verifies the signature against a public key.
    pub fn verify(&self, key: &PublicKey) -> Result<(), CommitError> {
        key.verify(&self.unsigned.to_cbor(), &self.sig)?;
        Ok(())
    }

    /// Verifies the signature against a `did:key` (for example the
    /// `#atproto` verification method of the account's DID document).
    pub fn verify_did_key(&self, did_key: &str) -> Result<(), CommitError> {
        self.verify(&PublicKey::from_did_key(did_key)?)
    }
}

fn encode(map: BTreeMap<String, Ipld>) -> Vec<u8> {
    // Cannot fail: every value is in the data model, no key is reserved, and
    // the size is bounded (a DID is at most 2 KiB; `sig` is 64 bytes when we
    // sign, and when decoded came from a block within the size limit).
    encode_dag_cbor(&Ipld::Map(map)).expect("a commit map is always encodable")
}

fn field<'a>(map: &'a BTreeMap<String, Ipld>, name: &'static str) -> Result<&'a Ipld, CommitError> {
    map.get(name).ok_or(CommitError::MissingField(name))
}

fn wrong_type(field: &'static str, expected: &'static str, found: &Ipld) -> CommitError {
    CommitError::WrongType {
        field,
        expected,
        found: kind(found),
    }
}

fn kind(value: &Ipld) -> &'static str {
    match value {
        Ipld::Null => "null",
        Ipld::Bool(_) => "a boolean",
        Ipld::Integer(_) => "an integer",
        Ipld::Float(_) => "a float",
        Ipld::String(_) => "a string",
        Ipld::Bytes(_) => "bytes",
        Ipld::List(_) => "a list",
        Ipld::Map(_) => "a map",
        Ipld::Link(_) => "a link",
    }
}

fn check_did(did: &str) -> Result<(), CommitError> {
    gelstore_lexicon::syntax::check_did(did).map_err(|e| CommitError::BadDid {
        did: did.chars().take(64).collect(),
        reason: e.reason,
    })
}

fn check_link(field: &'static str, cid: &Cid) -> Result<(), CommitError> {
    if cid.codec() != DAG_CBOR_CODEC {
        return Err(CommitError::WrongCodec {
            field,
            codec: cid.codec(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gelstore_crypto::KeyAlgorithm;
    use gelstore_model::cid_for_blob;

    const DID: &str = "did:plc:ewvi7nxzyoun6zhxrhs64oiz";

    fn unsigned() -> UnsignedCommit {
        UnsignedCommit::new(
            DID,
            cid_for_cbor(b"\xa0"),
            Tid::parse("3jzfcijpj2z2a").unwrap(),
            None,
        )
        .unwrap()
    }

    #[test]
    fn field_order_is_canonical() {
        // Keys sorted length-first: did, rev, sig, data, prev, version.
        let key = SigningKey::from_bytes(KeyAlgorithm::K256, &[1; 32]).unwrap();
        let bytes = unsigned().sign(&key).to_cbor();
        assert_eq!(&bytes[..5], &[0xa6, 0x63, b'd', b'i', b'd']);
        let text = String::from_utf8_lossy(&bytes);
        let positions: Vec<usize> = ["rev", "sig", "data", "prev", "version"]
            .iter()
            .map(|k| text.find(k).unwrap())
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
        // The unsigned form has no sig and 5 entries.
        let unsigned = unsigned().to_cbor();
        assert_eq!(unsigned[0], 0xa5);
        assert!(!String::from_utf8_lossy(&unsigned).contains("sig"));
    }

    #[test]
    fn new_checks_did_and_links() {
        let data = cid_for_cbor(b"\xa0");
        let rev = Tid::from_u64(1);
        assert!(matches!(
            UnsignedCommit::new("did:PLC:x", data, rev, None),
            Err(CommitError::BadDid { .. })
        ));
        assert_eq!(
            UnsignedCommit::new(DID, cid_for_blob(b"x"), rev, None),
            Err(CommitError::WrongCodec {
                field: "data",
                codec: 0x55
            })
        );
        assert_eq!(
            UnsignedCommit::new(DID, data, rev, Some(cid_for_blob(b"x"))),
            Err(CommitError::WrongCodec {
                field: "prev",
                codec: 0x55
            })
        );
    }
}
