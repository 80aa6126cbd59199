//! The account's identity as the server shows it: a `did:web` on the
//! server's own host, whose DID document is served at
//! `/.well-known/did.json`.
//!
//! On a loopback address the host is `localhost`: `@atproto/identity`'s
//! did:web resolver fetches `https://HOST/.well-known/did.json` but switches
//! to plain http when the host name is exactly `localhost`, so a standard
//! client resolves `did:web:localhost%3APORT` against this server unchanged.
//! The DID is fixed when the repository is created; a server restarted on
//! another port still signs as the first DID (and says so on stderr).

use std::net::SocketAddr;

use serde_json::{Value, json};

use crate::repo::keys::PublicKey;

/// The base URL and the did:web of a server bound to `addr`.
pub fn service_for(addr: SocketAddr) -> (String, String) {
    let host = if addr.ip().is_loopback() {
        "localhost".to_owned()
    } else {
        match addr.ip() {
            std::net::IpAddr::V4(ip) => ip.to_string(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        }
    };
    let service = format!("http://{host}:{}", addr.port());
    // The port's colon is percent-encoded in a did:web.
    let did = format!("did:web:{}%3A{}", host.replace(':', "%3A"), addr.port());
    (service, did)
}

/// The DID document: the signing key as `#atproto` (Multikey), the handle
/// as `at://` alias, and this server as `#atproto_pds`.
pub fn did_document(did: &str, handle: &str, key: &PublicKey, service: &str) -> Value {
    json!({
        "@context": [
            "https://www.w3.org/ns/did/v1",
            "https://w3id.org/security/multikey/v1"
        ],
        "id": did,
        "alsoKnownAs": [format!("at://{handle}")],
        "verificationMethod": [{
            "id": format!("{did}#atproto"),
            "type": "Multikey",
            "controller": did,
            "publicKeyMultibase": key.to_multikey(),
        }],
        "service": [{
            "id": "#atproto_pds",
            "type": "AtprotoPersonalDataServer",
            "serviceEndpoint": service,
        }]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_localhost_with_an_encoded_port() {
        let (service, did) = service_for("127.0.0.1:2583".parse().unwrap());
        assert_eq!(service, "http://localhost:2583");
        assert_eq!(did, "did:web:localhost%3A2583");
        gelstore_codegen::syntax::check_did(&did).unwrap();
    }
}
