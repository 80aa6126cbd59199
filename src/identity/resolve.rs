//! Finding an account's DID document, and reading its `#atproto` key and
//! PDS from it.
//!
//! - `did:plc:…` → `{plc}/{did}` (the PLC directory the caller names).
//! - `did:web:host` (port as `%3A`) → `https://host/.well-known/did.json`;
//!   plain `http` only for `localhost` and 127.0.0.0/8, the rule
//!   `@atproto/identity` follows (a did:web with a path is not an atproto
//!   DID, so it is refused, as there).
//!
//! Anything else is [`IdentityError::Unsupported`] and no request is made.
//! Callers take a [`DidResolver`], so a command resolves through
//! [`HttpResolver`] and a test or an embedding application through its own.

use std::time::Duration;

use serde_json::Value;

use crate::crypto::{KeyAlgorithm, KeyError, PublicKey};
use crate::net::error_chain;

/// Why a DID document could not be had or used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// Not a DID this resolver can look up (did:plc and host-only did:web
    /// are); nothing was fetched.
    #[error("cannot resolve the DID document of {did}: {reason}")]
    Unsupported {
        /// The DID.
        did: String,
        /// Why.
        reason: String,
    },
    /// The directory or host did not answer (the environment's failure).
    #[error("cannot reach {url}: {reason}")]
    Unreachable {
        /// The URL asked.
        url: String,
        /// The transport's reason.
        reason: String,
    },
    /// An answer came, but it is not `did`'s document or lacks what was
    /// needed of it.
    #[error("cannot resolve the key of {did} from {url}: {reason}")]
    Document {
        /// The DID.
        did: String,
        /// Where the document was looked up.
        url: String,
        /// What was wrong.
        reason: String,
    },
}

/// Looks up DID documents.
pub trait DidResolver {
    /// `did`'s document; its `id` is `did`.
    fn resolve(&self, did: &str) -> Result<DidDocument, IdentityError>;
}

/// A DID document, checked to be the one asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct DidDocument {
    did: String,
    url: String,
    value: Value,
}

impl DidDocument {
    /// `value` as `did`'s document, fetched from `url` (named in errors):
    /// refused unless its `id` is `did`.
    pub fn new(did: &str, url: &str, value: Value) -> Result<DidDocument, IdentityError> {
        let document = DidDocument {
            did: did.to_owned(),
            url: url.to_owned(),
            value,
        };
        if document.value["id"].as_str() != Some(did) {
            let id = document.value["id"].to_string();
            return Err(document.error(format!("the document is for {id}")));
        }
        Ok(document)
    }

    /// The DID.
    pub fn did(&self) -> &str {
        &self.did
    }

    /// Where it came from.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The `#atproto` signing key (Multikey, or the legacy secp256k1 and
    /// P-256 verification key types).
    pub fn atproto_key(&self) -> Result<PublicKey, IdentityError> {
        let methods = self.value["verificationMethod"]
            .as_array()
            .ok_or_else(|| self.error("no verificationMethod".into()))?;
        let full_id = format!("{}#atproto", self.did);
        let method = methods
            .iter()
            .find(|m| {
                m["id"]
                    .as_str()
                    .is_some_and(|id| id == "#atproto" || id == full_id)
            })
            .ok_or_else(|| self.error("no #atproto verification method".into()))?;
        let multikey = method["publicKeyMultibase"]
            .as_str()
            .ok_or_else(|| self.error("#atproto has no publicKeyMultibase".into()))?;
        let key = match method["type"].as_str() {
            Some("EcdsaSecp256k1VerificationKey2019") => {
                PublicKey::from_legacy_multibase(KeyAlgorithm::K256, multikey)
            }
            Some("EcdsaSecp256r1VerificationKey2019") => {
                PublicKey::from_legacy_multibase(KeyAlgorithm::P256, multikey)
            }
            _ => PublicKey::from_multikey(multikey),
        };
        key.map_err(|e: KeyError| self.error(e.to_string()))
    }

    /// The `#atproto_pds` service endpoint, if it names one.
    pub fn pds_endpoint(&self) -> Option<String> {
        self.value["service"].as_array()?.iter().find_map(|s| {
            let id = s["id"].as_str()?;
            (id == "#atproto_pds" || id.ends_with("#atproto_pds"))
                .then(|| s["serviceEndpoint"].as_str().map(str::to_owned))
                .flatten()
        })
    }

    fn error(&self, reason: String) -> IdentityError {
        IdentityError::Document {
            did: self.did.clone(),
            url: self.url.clone(),
            reason,
        }
    }
}

/// The URL of `did`'s document (`plc` is used for did:plc only).
pub fn document_url(did: &str, plc: &str) -> Result<String, IdentityError> {
    let unsupported = |reason: &str| IdentityError::Unsupported {
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

/// The largest DID document read (a real one is a few hundred bytes).
const MAX_DOCUMENT: usize = 256 * 1024;

/// Resolves over HTTP: did:plc at a PLC directory, did:web at its host.
/// Blocking: it runs its requests on a runtime of its own.
pub struct HttpResolver {
    plc: String,
    http: reqwest::Client,
    rt: tokio::runtime::Runtime,
}

impl std::fmt::Debug for HttpResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpResolver")
            .field("plc", &self.plc)
            .finish_non_exhaustive()
    }
}

impl HttpResolver {
    /// A resolver asking the PLC directory at `plc`, each request given
    /// at most `timeout`.
    pub fn new(plc: &str, timeout: Duration) -> std::io::Result<HttpResolver> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let http = reqwest::Client::builder()
            .connect_timeout(timeout)
            .timeout(timeout)
            .build()
            .map_err(std::io::Error::other)?;
        Ok(HttpResolver {
            plc: plc.to_owned(),
            http,
            rt,
        })
    }

    async fn fetch(&self, did: &str, url: &str) -> Result<Value, IdentityError> {
        let unreachable = |e: reqwest::Error| IdentityError::Unreachable {
            url: url.to_owned(),
            reason: error_chain(&e),
        };
        let bad = |reason: String| IdentityError::Document {
            did: did.to_owned(),
            url: url.to_owned(),
            reason,
        };
        let response = self.http.get(url).send().await.map_err(unreachable)?;
        let status = response.status();
        if !status.is_success() {
            return Err(bad(format!("HTTP {status}")));
        }
        if response.content_length().unwrap_or(0) > MAX_DOCUMENT as u64 {
            return Err(bad(format!("a document over {MAX_DOCUMENT} bytes")));
        }
        let body = response.bytes().await.map_err(unreachable)?;
        if body.len() > MAX_DOCUMENT {
            return Err(bad(format!("a document over {MAX_DOCUMENT} bytes")));
        }
        serde_json::from_slice(&body).map_err(|e| bad(format!("not JSON: {e}")))
    }
}

impl DidResolver for HttpResolver {
    fn resolve(&self, did: &str) -> Result<DidDocument, IdentityError> {
        let url = document_url(did, &self.plc)?;
        let value = self.rt.block_on(self.fetch(did, &url))?;
        DidDocument::new(did, &url, value)
    }
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
            Err(IdentityError::Unsupported { .. })
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
            assert!(matches!(e, IdentityError::Unsupported { .. }), "{did}: {e}");
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
            let key = DidDocument::new(did, "u", d)
                .unwrap()
                .atproto_key()
                .unwrap();
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
        let url = "http://localhost:2583/.well-known/did.json";
        for d in cases {
            let e = DidDocument::new(did, url, d.clone())
                .and_then(|doc| doc.atproto_key())
                .unwrap_err();
            assert!(matches!(e, IdentityError::Document { .. }), "{d}: {e}");
            assert!(e.to_string().contains("cannot resolve the key of"), "{e}");
        }
    }

    #[test]
    fn the_pds_is_the_atproto_pds_service() {
        let did = "did:plc:ewvi7nxzyoun6zhxrhs64oiz";
        let with = |service: Value| {
            DidDocument::new(did, "u", serde_json::json!({"id": did, "service": service}))
                .unwrap()
                .pds_endpoint()
        };
        assert_eq!(
            with(serde_json::json!([
                {"id": "#other", "serviceEndpoint": "https://x.example"},
                {"id": "#atproto_pds", "type": "AtprotoPersonalDataServer",
                 "serviceEndpoint": "https://pds.example"}
            ])),
            Some("https://pds.example".into())
        );
        assert_eq!(
            with(serde_json::json!([{"id": format!("{did}#atproto_pds"),
                "serviceEndpoint": "https://full.example"}])),
            Some("https://full.example".into())
        );
        assert_eq!(with(serde_json::json!([{"id": "#atproto_pds"}])), None);
        assert_eq!(with(serde_json::json!("not a list")), None);
    }

    /// A loopback HTTP server that answers one request with `status` and
    /// the body `body` makes for its port; returns the did:web naming it.
    fn serve_once(status: u16, body: impl FnOnce(&str) -> Vec<u8>) -> String {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let did = format!(
            "did:web:127.0.0.1%3A{}",
            listener.local_addr().unwrap().port()
        );
        let body = body(&did);
        std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut head = [0u8; 4096];
            let _ = conn.read(&mut head);
            let reply = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = conn.write_all(reply.as_bytes());
            let _ = conn.write_all(&body);
        });
        did
    }

    fn resolver() -> HttpResolver {
        HttpResolver::new("http://unused.invalid", Duration::from_secs(5)).unwrap()
    }

    #[test]
    fn a_document_is_resolved_over_http() {
        let multikey = "zQ3shokFTS3brHcDQrn82RUDfCZESWL1ZdCEJwekUDPQiYBme";
        let did = serve_once(200, |did| {
            serde_json::json!({
                "id": did,
                "verificationMethod": [{"id": "#atproto", "type": "Multikey",
                    "publicKeyMultibase": multikey}],
                "service": [{"id": "#atproto_pds", "serviceEndpoint": "http://localhost:1"}],
            })
            .to_string()
            .into_bytes()
        });
        let doc = resolver().resolve(&did).unwrap();
        assert_eq!(doc.did(), did);
        assert!(doc.url().ends_with("/.well-known/did.json"));
        assert_eq!(doc.atproto_key().unwrap().to_multikey(), multikey);
        assert_eq!(doc.pds_endpoint().as_deref(), Some("http://localhost:1"));
    }

    #[test]
    fn http_answers_that_are_not_a_document_are_named_errors() {
        let resolver = resolver();
        let fails = |status, body: &[u8]| {
            let body = body.to_vec();
            resolver.resolve(&serve_once(status, |_| body)).unwrap_err()
        };
        let e = fails(404, b"{}");
        assert!(matches!(e, IdentityError::Document { .. }), "{e}");
        assert!(e.to_string().contains("404"), "{e}");
        let e = fails(200, b"<html>");
        assert!(e.to_string().contains("not JSON"), "{e}");
        // Too big to be a DID document: refused by its length, unread.
        let e = fails(200, &vec![b' '; MAX_DOCUMENT + 1]);
        assert!(e.to_string().contains("over"), "{e}");
        let e = fails(200, br#"{"id": "did:web:elsewhere.example"}"#);
        assert!(e.to_string().contains("the document is for"), "{e}");
        // Nobody listening: the environment's failure, not the document's.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let e = resolver
            .resolve(&format!("did:web:127.0.0.1%3A{port}"))
            .unwrap_err();
        assert!(matches!(e, IdentityError::Unreachable { .. }), "{e}");
    }
}
