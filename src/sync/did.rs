//! Where an account's DID document lives, and its `#atproto` key.
//!
//! - `did:plc:…` → `{plc}/{did}` (the PLC directory given to sync).
//! - `did:web:host` (port as `%3A`) → `https://host/.well-known/did.json`;
//!   plain `http` only for `localhost` and 127.0.0.0/8, the rule
//!   `@atproto/identity` follows (a did:web with a path is not an atproto
//!   DID, so it is refused, as there).
//!
//! Anything else is [`SyncError::UnsupportedDid`]: no network call is made.

use serde_json::Value;

use super::SyncError;
use crate::crypto::{KeyAlgorithm, KeyError, PublicKey};

/// The URL of `did`'s document (`plc` is used for did:plc only).
pub fn document_url(did: &str, plc: &str) -> Result<String, SyncError> {
    let unsupported = |reason: &str| SyncError::UnsupportedDid {
        did: did.to_owned(),
        reason: reason.to_owned(),
    };
    if let Some(id) = did.strip_prefix("did:plc:") {
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(unsupported("not a did:plc identifier"));
        }
        return Ok(format!("{}/{did}", plc.trim_end_matches('/')));
    }
    let Some(rest) = did.strip_prefix("did:web:") else {
        return Err(unsupported("only did:plc and did:web are resolved"));
    };
    if rest.contains(':') {
        return Err(unsupported(
            "did:web with a path is not an atproto DID (only a host, optionally with %3A port)",
        ));
    }
    // The one escape a host-only did:web may carry is the port's colon.
    let host = rest.replace("%3A", ":").replace("%3a", ":");
    let valid = !host.is_empty()
        && host.matches(':').count() <= 1
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':'));
    if !valid {
        return Err(unsupported("the did:web host is not a host name"));
    }
    let scheme = if is_loopback_host(&host) {
        "http"
    } else {
        "https"
    };
    Ok(format!("{scheme}://{host}/.well-known/did.json"))
}

/// `localhost` or `127.x.x.x`, with or without a port.
fn is_loopback_host(host_port: &str) -> bool {
    let name = host_port.split(':').next().unwrap_or("");
    if name.eq_ignore_ascii_case("localhost") {
        return true;
    }
    name.parse::<std::net::Ipv4Addr>()
        .is_ok_and(|ip| ip.is_loopback())
}

/// The `#atproto` signing key of `doc`, which must be `did`'s document
/// (fetched from `url`, named in errors).
pub fn atproto_key(doc: &Value, did: &str, url: &str) -> Result<PublicKey, SyncError> {
    let fail = |reason: String| SyncError::DidResolution {
        did: did.to_owned(),
        url: url.to_owned(),
        reason,
    };
    if doc["id"].as_str() != Some(did) {
        return Err(fail(format!("the document is for {}", doc["id"])));
    }
    let methods = doc["verificationMethod"]
        .as_array()
        .ok_or_else(|| fail("no verificationMethod".into()))?;
    let method = methods
        .iter()
        .find(|m| {
            m["id"]
                .as_str()
                .is_some_and(|id| id == "#atproto" || id == format!("{did}#atproto"))
        })
        .ok_or_else(|| fail("no #atproto verification method".into()))?;
    let multikey = method["publicKeyMultibase"]
        .as_str()
        .ok_or_else(|| fail("#atproto has no publicKeyMultibase".into()))?;
    let key = match method["type"].as_str() {
        Some("EcdsaSecp256k1VerificationKey2019") => {
            PublicKey::from_legacy_multibase(KeyAlgorithm::K256, multikey)
        }
        Some("EcdsaSecp256r1VerificationKey2019") => {
            PublicKey::from_legacy_multibase(KeyAlgorithm::P256, multikey)
        }
        _ => PublicKey::from_multikey(multikey),
    };
    key.map_err(|e: KeyError| fail(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLC: &str = "http://127.0.0.1:2582/";

    #[test]
    fn plc_dids_go_to_the_directory() {
        assert_eq!(
            document_url("did:plc:ewvi7nxzyoun6zhxrhs64oiz", PLC).unwrap(),
            "http://127.0.0.1:2582/did:plc:ewvi7nxzyoun6zhxrhs64oiz"
        );
        assert!(matches!(
            document_url("did:plc:../x", PLC),
            Err(SyncError::UnsupportedDid { .. })
        ));
    }

    #[test]
    fn web_dids_use_https_except_on_loopback() {
        let url = |did| document_url(did, PLC).unwrap();
        assert_eq!(
            url("did:web:example.com"),
            "https://example.com/.well-known/did.json"
        );
        assert_eq!(
            url("did:web:pds.example.com%3A8443"),
            "https://pds.example.com:8443/.well-known/did.json"
        );
        assert_eq!(
            url("did:web:localhost%3A2583"),
            "http://localhost:2583/.well-known/did.json"
        );
        assert_eq!(
            url("did:web:localhost"),
            "http://localhost/.well-known/did.json"
        );
        assert_eq!(
            url("did:web:127.0.0.1%3a9"),
            "http://127.0.0.1:9/.well-known/did.json"
        );
    }

    #[test]
    fn a_host_that_only_looks_local_gets_https() {
        let url = |did| document_url(did, PLC).unwrap();
        assert_eq!(
            url("did:web:localhost.example.com"),
            "https://localhost.example.com/.well-known/did.json"
        );
        assert_eq!(
            url("did:web:127.0.0.1.nip.io"),
            "https://127.0.0.1.nip.io/.well-known/did.json"
        );
    }

    #[test]
    fn other_dids_are_named_errors() {
        for did in [
            "did:key:zQ3shokFTS3brHcDQrn82RUDfCZESWL1ZdCEJwekUDPQiYBme",
            "did:web:example.com:users:alice",
            "did:web:",
            "did:web:exa mple.com",
            "did:web:evil.com%2F..",
            "not a did",
        ] {
            let e = document_url(did, PLC).unwrap_err();
            assert!(matches!(e, SyncError::UnsupportedDid { .. }), "{did}: {e}");
            assert!(e.to_string().contains(did), "{e}");
        }
    }

    fn doc(did: &str, method: Value) -> Value {
        serde_json::json!({"id": did, "verificationMethod": [method]})
    }

    #[test]
    fn the_atproto_key_is_taken_in_both_id_forms() {
        let did = "did:web:localhost%3A2583";
        let multikey = "zQ3shokFTS3brHcDQrn82RUDfCZESWL1ZdCEJwekUDPQiYBme";
        for id in ["#atproto".to_owned(), format!("{did}#atproto")] {
            let d = doc(
                did,
                serde_json::json!({"id": id, "type": "Multikey", "controller": did,
                    "publicKeyMultibase": multikey}),
            );
            let key = atproto_key(&d, did, "u").unwrap();
            assert_eq!(key.to_multikey(), multikey);
        }
    }

    #[test]
    fn a_wrong_document_is_a_named_error() {
        let did = "did:web:localhost%3A2583";
        let cases = [
            serde_json::json!({"id": "did:web:other.example", "verificationMethod": []}),
            serde_json::json!({"id": did}),
            doc(
                did,
                serde_json::json!({"id": "#other", "publicKeyMultibase": "z"}),
            ),
            doc(did, serde_json::json!({"id": "#atproto"})),
            doc(
                did,
                serde_json::json!({"id": "#atproto", "type": "Multikey", "publicKeyMultibase": "zNotAKey"}),
            ),
        ];
        for d in cases {
            let e = atproto_key(&d, did, "http://localhost:2583/.well-known/did.json").unwrap_err();
            assert!(matches!(e, SyncError::DidResolution { .. }), "{d}: {e}");
            assert!(e.to_string().contains("cannot resolve the key of"), "{e}");
        }
    }
}
