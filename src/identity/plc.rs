//! A did:plc for the account, registered with a PLC directory (`serve
//! --plc URL`): the genesis operation names the store's signing key as both
//! rotation key and `#atproto` key, the handle, and this server as
//! `#atproto_pds`. The DID is the first 24 characters of the base32 SHA-256
//! of the signed operation's DAG-CBOR, as the PLC spec defines.
//!
//! Later starts keep the directory current: `plc.json` in the data folder
//! remembers the directory, and when the handle or this server's URL
//! changed, [`update`] signs an operation chained to the last one (`prev` =
//! its CID) that keeps the keys and names the new handle and endpoint.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use data_encoding::BASE32_NOPAD;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use std::path::Path;

use crate::crypto::SigningKey;
use crate::model::{cid_for_cbor, encode_dag_cbor, json_to_ipld};
use crate::store::files::write_private;

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
    /// The account's signing key is no longer this server's: it moved.
    #[error(
        "the account's #atproto key is now {key}, not this server's: it moved to another server, so its document is left alone"
    )]
    Moved {
        /// The key the directory names.
        key: String,
    },
    /// The directory refused the operation.
    #[error("the PLC directory at {url} refused the operation: HTTP {status}: {body}")]
    Refused {
        /// The directory.
        url: String,
        /// The status.
        status: u16,
        /// What it said (cut).
        body: String,
    },
}

/// The directory a did:plc account is registered with, in the data folder.
pub const PLC_FILE: &str = "plc.json";

/// Remembers the directory `plc` for the account `did`.
pub fn save_directory(data: &Path, did: &str, plc: &str) -> std::io::Result<()> {
    let body = json!({"did": did, "directory": plc}).to_string();
    write_private(&data.join(PLC_FILE), body.as_bytes())
}

/// The directory `did` was registered with, if this folder remembers it.
pub fn load_directory(data: &Path, did: &str) -> Option<String> {
    let v: Value = serde_json::from_slice(&std::fs::read(data.join(PLC_FILE)).ok()?).ok()?;
    (v["did"] == did).then(|| v["directory"].as_str().map(str::to_owned))?
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

/// The operation after `last` (the directory's last operation for the
/// account) that names `handle` and `service`, signed with `key`; `None`
/// if `last` already names them.
pub fn next_operation(
    last: &Value,
    key: &SigningKey,
    handle: &str,
    service: &str,
) -> Result<Option<Value>, PlcError> {
    let invalid = |why: &str| PlcError::Encode(format!("the directory's last operation {why}"));
    if last["type"] != "plc_operation" {
        return Err(invalid("is not a plc_operation"));
    }
    let did_key = key.public_key().to_did_key();
    // An account whose signing key is another's moved to another server:
    // this one must not point it back at itself.
    if last["verificationMethods"]["atproto"].as_str() != Some(did_key.as_str()) {
        return Err(PlcError::Moved {
            key: last["verificationMethods"]["atproto"]
                .as_str()
                .unwrap_or("(none)")
                .chars()
                .take(200)
                .collect(),
        });
    }
    let rotation = last["rotationKeys"]
        .as_array()
        .ok_or_else(|| invalid("has no rotationKeys"))?;
    if !rotation
        .iter()
        .any(|k| k.as_str() == Some(did_key.as_str()))
    {
        return Err(PlcError::Encode(format!(
            "this server's key {did_key} is not a rotation key of the account"
        )));
    }
    let aka = json!([format!("at://{handle}")]);
    let endpoint = &last["services"]["atproto_pds"]["endpoint"];
    if last["alsoKnownAs"] == aka && endpoint.as_str() == Some(service) {
        return Ok(None);
    }
    let mut services = last["services"].clone();
    services["atproto_pds"] = json!({"type": "AtprotoPersonalDataServer", "endpoint": service});
    let mut op = json!({
        "type": "plc_operation",
        "rotationKeys": last["rotationKeys"],
        "verificationMethods": last["verificationMethods"],
        "alsoKnownAs": aka,
        "services": services,
        "prev": cid_for_cbor(&cbor(last)?).to_string(),
    });
    let sig = key.sign(&cbor(&op)?);
    op["sig"] = B64URL.encode(sig).into();
    Ok(Some(op))
}

/// Brings the directory's document of `did` up to date with this server:
/// if its handle or endpoint changed, sends the next operation. Returns
/// whether one was sent.
pub async fn update(
    plc: &str,
    did: &str,
    key: &SigningKey,
    handle: &str,
    service: &str,
) -> Result<bool, PlcError> {
    let url = format!("{}/{did}/log/last", plc.trim_end_matches('/'));
    let unreachable = |e: reqwest::Error| PlcError::Unreachable {
        url: plc.to_owned(),
        reason: e.to_string(),
    };
    let response = client()?.get(&url).send().await.map_err(unreachable)?;
    let status = response.status();
    if !status.is_success() {
        return Err(PlcError::Refused {
            url: plc.to_owned(),
            status: status.as_u16(),
            body: response
                .text()
                .await
                .unwrap_or_default()
                .chars()
                .take(500)
                .collect(),
        });
    }
    let body = response.bytes().await.map_err(unreachable)?;
    if body.len() > MAX_ANSWER {
        return Err(PlcError::Unreachable {
            url: plc.to_owned(),
            reason: format!("its answer is over {MAX_ANSWER} bytes"),
        });
    }
    let last: Value = serde_json::from_slice(&body).map_err(|e| PlcError::Unreachable {
        url: plc.to_owned(),
        reason: format!("its answer is not JSON: {e}"),
    })?;
    match next_operation(&last, key, handle, service)? {
        None => Ok(false),
        Some(op) => register(plc, did, &op).await.map(|()| true),
    }
}

/// The longest a PLC directory may take to answer.
const PLC_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// The largest answer read from it (an operation is a few hundred bytes).
const MAX_ANSWER: usize = 64 * 1024;

fn client() -> Result<reqwest::Client, PlcError> {
    reqwest::Client::builder()
        .timeout(PLC_TIMEOUT)
        .build()
        .map_err(|e| PlcError::Encode(e.to_string()))
}

/// Sends a signed operation (the genesis one or a later one) for `did` to
/// the directory at `plc`.
pub async fn register(plc: &str, did: &str, op: &Value) -> Result<(), PlcError> {
    let url = format!("{}/{did}", plc.trim_end_matches('/'));
    let response =
        client()?
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
    use crate::crypto::KeyAlgorithm;

    /// `op`'s `sig` is `key`'s signature of the rest.
    fn assert_signed_by(op: &Value, key: &SigningKey) {
        let mut unsigned = op.clone();
        let sig = unsigned.as_object_mut().unwrap().remove("sig").unwrap();
        let sig = B64URL.decode(sig.as_str().unwrap()).unwrap();
        key.public_key()
            .verify(&cbor(&unsigned).unwrap(), &sig)
            .unwrap();
    }

    #[test]
    fn an_update_chains_to_the_last_operation_and_keeps_the_keys() {
        let key = SigningKey::from_bytes(KeyAlgorithm::K256, &[7u8; 32]).unwrap();
        let (_, genesis_op) = genesis(&key, "a.test", "http://localhost:1").unwrap();
        assert!(
            next_operation(&genesis_op, &key, "a.test", "http://localhost:1")
                .unwrap()
                .is_none(),
            "nothing changed, nothing to send"
        );
        let op = next_operation(&genesis_op, &key, "b.test", "http://localhost:2")
            .unwrap()
            .unwrap();
        assert_eq!(op["alsoKnownAs"], json!(["at://b.test"]));
        assert_eq!(
            op["services"]["atproto_pds"]["endpoint"],
            "http://localhost:2"
        );
        assert_eq!(op["rotationKeys"], genesis_op["rotationKeys"]);
        assert_eq!(op["verificationMethods"], genesis_op["verificationMethods"]);
        assert_eq!(
            op["prev"],
            cid_for_cbor(&cbor(&genesis_op).unwrap()).to_string()
        );
        assert_signed_by(&op, &key);
        // Another key is not the account's: refused, nothing signed.
        let other = SigningKey::from_bytes(KeyAlgorithm::K256, &[9u8; 32]).unwrap();
        assert!(matches!(
            next_operation(&genesis_op, &other, "b.test", "http://x"),
            Err(PlcError::Moved { .. })
        ));
    }

    #[test]
    fn the_did_is_the_hash_of_the_signed_operation() {
        let key = SigningKey::from_bytes(KeyAlgorithm::K256, &[7u8; 32]).unwrap();
        let (did, op) = genesis(&key, "a.test", "http://localhost:1").unwrap();
        assert_eq!(did.len(), "did:plc:".len() + 24);
        gelstore_lexicon::syntax::check_did(&did).unwrap();
        assert_signed_by(&op, &key);
    }
}
