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

use crate::crypto::PublicKey;

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

/// The service URL and did:web of `--public-url URL`: the address clients
/// use (a TLS proxy in front, say), `http` or `https`, a host name and an
/// optional port, no path. The did:web is the host, with the port
/// percent-encoded if one is given.
pub fn service_for_url(url: &str) -> Result<(String, String), String> {
    let bad = |why: &str| format!("--public-url {url:?}: {why}");
    let parsed = reqwest::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad("must be http or https"));
    }
    // `domain()` is the host when it is a name, not an IP address.
    let host = match (parsed.domain(), parsed.host_str()) {
        (Some(d), _) => d.to_ascii_lowercase(),
        (None, Some(_)) => {
            return Err(bad(
                "must name a host, not an IP address (a did:web needs one)",
            ));
        }
        (None, None) => return Err(bad("has no host")),
    };
    if parsed.path() != "/" || parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(bad("must have no path, query or fragment"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(bad("must have no user or password"));
    }
    Ok(match parsed.port() {
        Some(port) => (
            format!("{}://{host}:{port}", parsed.scheme()),
            format!("did:web:{host}%3A{port}"),
        ),
        None => (
            format!("{}://{host}", parsed.scheme()),
            format!("did:web:{host}"),
        ),
    })
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
mod url_tests {
    use super::service_for_url;

    #[test]
    fn public_urls() {
        assert_eq!(
            service_for_url("https://PDS.example.com/").unwrap(),
            (
                "https://pds.example.com".into(),
                "did:web:pds.example.com".into()
            )
        );
        assert_eq!(
            service_for_url("http://localhost:8080").unwrap(),
            (
                "http://localhost:8080".into(),
                "did:web:localhost%3A8080".into()
            )
        );
        for bad in [
            "ftp://example.com",
            "https://10.0.0.1",
            "https://[::1]:80",
            "https://example.com/pds",
            "https://example.com/?a=b",
            "https://u:p@example.com",
            "example.com",
        ] {
            assert!(service_for_url(bad).is_err(), "{bad}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_localhost_with_an_encoded_port() {
        let (service, did) = service_for("127.0.0.1:2583".parse().unwrap());
        assert_eq!(service, "http://localhost:2583");
        assert_eq!(did, "did:web:localhost%3A2583");
        gelstore_lexicon::syntax::check_did(&did).unwrap();
    }
}
