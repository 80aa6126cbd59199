//! A did:plc for the account, registered with a PLC directory (`serve
//! --plc URL`): the genesis operation names the store's signing key as both
//! rotation key and `#atproto` key, the handle, and this server as
//! `#atproto_pds`. The DID is the first 24 characters of the base32 SHA-256
//! of the signed operation's DAG-CBOR, as the PLC spec defines.
//!
//! TODO(issue 8): no later operations: a new handle or a new address after
//! the first start is not sent to the directory.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use data_encoding::BASE32_NOPAD;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::model::{encode_dag_cbor, json_to_ipld};
use crate::repo::keys::SigningKey;

/// Why registering failed.
#[derive(Debug, thiserror::Error)]
pub enum PlcError {
    /// The operation could not be encoded (a bug).
    #[error("cannot encode the PLC operation: {0}")]
    Encode(String),
    /// The directory could not be reached.
    #[error("the PLC directory at {url} cannot be reached: {reason}")]
    Unreachable {
        /// The directory.
        url: String,
        /// Why.
        reason: String,
    },
    /// The directory refused the operation.
    #[error("the PLC directory at {url} refused the genesis operation: HTTP {status}: {body}")]
    Refused {
        /// The directory.
        url: String,
        /// The status.
        status: u16,
        /// What it said (cut).
        body: String,
    },
}

fn cbor(op: &Value) -> Result<Vec<u8>, PlcError> {
    json_to_ipld(op)
        .and_then(|ipld| encode_dag_cbor(&ipld))
        .map_err(|e| PlcError::Encode(e.to_string()))
}

/// The signed genesis operation and its DID.
pub fn genesis(key: &SigningKey, handle: &str, service: &str) -> Result<(String, Value), PlcError> {
    let did_key = key.public_key().to_did_key();
    let mut op = json!({
        "type": "plc_operation",
        "rotationKeys": [did_key],
        "verificationMethods": {"atproto": did_key},
        "alsoKnownAs": [format!("at://{handle}")],
        "services": {
            "atproto_pds": {"type": "AtprotoPersonalDataServer", "endpoint": service}
        },
        "prev": null,
    });
    let sig = key.sign(&cbor(&op)?);
    op["sig"] = B64URL.encode(sig).into();
    let hash = Sha256::digest(cbor(&op)?);
    let did = format!(
        "did:plc:{}",
        &BASE32_NOPAD.encode(&hash).to_ascii_lowercase()[..24]
    );
    Ok((did, op))
}

/// Registers the genesis operation with the directory at `plc`.
pub async fn register(plc: &str, did: &str, op: &Value) -> Result<(), PlcError> {
    let url = format!("{}/{did}", plc.trim_end_matches('/'));
    let response = reqwest::Client::new()
        .post(&url)
        .json(op)
        .send()
        .await
        .map_err(|e| PlcError::Unreachable {
            url: plc.to_owned(),
            reason: e.to_string(),
        })?;
    let status = response.status();
    if !status.is_success() {
        let body = response.text().await.unwrap_or_default();
        return Err(PlcError::Refused {
            url: plc.to_owned(),
            status: status.as_u16(),
            body: body.chars().take(500).collect(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::keys::KeyAlgorithm;

    #[test]
    fn the_did_is_the_hash_of_the_signed_operation() {
        let key = SigningKey::from_bytes(KeyAlgorithm::K256, &[7u8; 32]).unwrap();
        let (did, op) = genesis(&key, "a.test", "http://localhost:1").unwrap();
        assert_eq!(did.len(), "did:plc:".len() + 24);
        gelstore_codegen::syntax::check_did(&did).unwrap();
        let mut unsigned = op.clone();
        let sig = unsigned.as_object_mut().unwrap().remove("sig").unwrap();
        let sig = B64URL.decode(sig.as_str().unwrap()).unwrap();
        key.public_key()
            .verify(&cbor(&unsigned).unwrap(), &sig)
            .unwrap();
    }
}
