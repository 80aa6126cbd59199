//! Session tokens: HS256 JWTs signed with the account's token secret.
//!
//! Two kinds, told apart by `scope` (and the header's `typ`), as the
//! reference PDS does: an access token (`com.atproto.access`, 2 hours) for
//! every authenticated call and a refresh token (`com.atproto.refresh`,
//! 90 days) that only `refreshSession` and `deleteSession` take. Access
//! tokens are stateless: they end when they expire or when the secret in
//! `account.json` is replaced. Refresh tokens also carry an id (`jti`) that
//! must be live in `sessions.json` (see `sessions`): single use, revocable.

use axum::http::HeaderMap;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::error::XrpcError;

/// The scope of access tokens.
pub const ACCESS_SCOPE: &str = "com.atproto.access";
/// The scope of refresh tokens.
pub const REFRESH_SCOPE: &str = "com.atproto.refresh";

const ACCESS_SECS: u64 = 2 * 60 * 60;
/// Sets a shorter access-token lifetime in seconds (1 to the default), so
/// tests see a session expire; read once.
pub const ACCESS_ENV: &str = "GELSTORE_ACCESS_TOKEN_SECS";

fn access_secs() -> u64 {
    static SECS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SECS.get_or_init(|| {
        std::env::var(ACCESS_ENV)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|s| (1..=ACCESS_SECS).contains(s))
            .unwrap_or(ACCESS_SECS)
    })
}
/// The lifetime of a refresh token.
pub const REFRESH_SECS: u64 = 90 * 24 * 60 * 60;

/// The claims this server puts in its tokens.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Claims {
    /// `com.atproto.access` or `com.atproto.refresh`.
    pub scope: String,
    /// The account DID.
    pub sub: String,
    /// The server's DID.
    pub aud: String,
    /// Issued at (Unix seconds).
    pub iat: u64,
    /// Expires at (Unix seconds).
    pub exp: u64,
    /// A unique id (refresh tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jti: Option<String>,
}

/// Signs and checks tokens with one key.
#[derive(Clone)]
pub struct TokenKeys {
    key: Vec<u8>,
    audience: String,
}

impl std::fmt::Debug for TokenKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenKeys")
            .field("audience", &self.audience)
            .finish_non_exhaustive()
    }
}

/// The time in Unix seconds.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl TokenKeys {
    /// Keys for a server whose DID is `audience`.
    pub fn new(key: Vec<u8>, audience: String) -> Self {
        TokenKeys { key, audience }
    }

    fn mac(&self) -> Hmac<Sha256> {
        <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key).expect("HMAC takes keys of any length")
    }

    /// An access token for `did`, issued at `iat`.
    pub fn access(&self, did: &str, iat: u64) -> String {
        let claims = Claims {
            scope: ACCESS_SCOPE.into(),
            sub: did.into(),
            aud: self.audience.clone(),
            iat,
            exp: iat + access_secs(),
            jti: None,
        };
        self.sign("at+jwt", &claims)
    }

    /// A refresh token for `did` with the id `jti` (which the caller
    /// records as live).
    pub fn refresh(&self, did: &str, jti: &str, iat: u64, exp: u64) -> String {
        let claims = Claims {
            scope: REFRESH_SCOPE.into(),
            sub: did.into(),
            aud: self.audience.clone(),
            iat,
            exp,
            jti: Some(jti.to_owned()),
        };
        self.sign("refresh+jwt", &claims)
    }

    fn sign(&self, typ: &str, claims: &Claims) -> String {
        let header = serde_json::json!({"typ": typ, "alg": "HS256"});
        let signing_input = format!(
            "{}.{}",
            B64URL.encode(header.to_string()),
            B64URL.encode(serde_json::to_vec(claims).unwrap_or_default())
        );
        let mut mac = self.mac();
        mac.update(signing_input.as_bytes());
        let sig = mac.finalize().into_bytes();
        format!("{signing_input}.{}", B64URL.encode(sig))
    }

    /// Checks a token's signature, expiry, audience and scope.
    pub fn verify(&self, token: &str, scope: &str) -> Result<Claims, XrpcError> {
        self.check(token, scope, true)
    }

    /// [`TokenKeys::verify`] without the expiry: `deleteSession` ends an
    /// expired session too, as the reference's does.
    pub fn verify_allow_expired(&self, token: &str, scope: &str) -> Result<Claims, XrpcError> {
        self.check(token, scope, false)
    }

    fn check(&self, token: &str, scope: &str, expiry: bool) -> Result<Claims, XrpcError> {
        let bad = || XrpcError::invalid_token("Token could not be verified");
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(sig), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let header: serde_json::Value = B64URL
            .decode(header)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(bad)?;
        if header["alg"] != "HS256" {
            return Err(bad());
        }
        let sig = B64URL.decode(sig).map_err(|_| bad())?;
        let mut mac = self.mac();
        mac.update(&token.as_bytes()[..header_len(token)]);
        mac.verify_slice(&sig).map_err(|_| bad())?;
        let claims: Claims = B64URL
            .decode(payload)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(bad)?;
        if claims.aud != self.audience {
            return Err(bad());
        }
        if expiry && claims.exp <= now() {
            return Err(XrpcError::expired_token());
        }
        if claims.scope != scope {
            return Err(XrpcError::invalid_token("Bad token scope"));
        }
        Ok(claims)
    }
}

/// The length of `header.payload` in a JWT (what the signature covers).
fn header_len(token: &str) -> usize {
    token.rfind('.').unwrap_or(0)
}

/// The bearer token of a request, if any.
pub fn bearer(headers: &HeaderMap) -> Result<&str, XrpcError> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)
        .ok_or_else(|| XrpcError::auth_required("Authentication Required"))?;
    let value = value
        .to_str()
        .map_err(|_| XrpcError::auth_required("Malformed authorization header"))?;
    match value.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() => {
            Ok(token.trim())
        }
        _ => Err(XrpcError::auth_required(
            "Unexpected authorization type (expected Bearer)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_verify_only_with_their_key_scope_and_audience() {
        let keys = TokenKeys::new(b"secret".to_vec(), "did:web:localhost%3A1".into());
        let (access, refresh) = (
            keys.access("did:web:localhost%3A1", now()),
            keys.refresh("did:web:localhost%3A1", "id", now(), now() + 60),
        );
        assert_eq!(
            keys.verify(&refresh, REFRESH_SCOPE).unwrap().jti.as_deref(),
            Some("id")
        );
        assert_eq!(
            keys.verify(&access, ACCESS_SCOPE).unwrap().sub,
            "did:web:localhost%3A1"
        );
        assert!(keys.verify(&refresh, REFRESH_SCOPE).is_ok());
        assert_eq!(
            keys.verify(&refresh, ACCESS_SCOPE).unwrap_err().error,
            "InvalidToken"
        );
        let other = TokenKeys::new(b"other".to_vec(), "did:web:localhost%3A1".into());
        assert!(other.verify(&access, ACCESS_SCOPE).is_err());
        let mut tampered = access.clone();
        tampered.insert(tampered.len() - 5, 'A');
        assert!(keys.verify(&tampered, ACCESS_SCOPE).is_err());
        assert!(keys.verify("a.b", ACCESS_SCOPE).is_err());
        let expired = Claims {
            scope: ACCESS_SCOPE.into(),
            sub: "did:web:localhost%3A1".into(),
            aud: "did:web:localhost%3A1".into(),
            iat: 1,
            exp: 2,
            jti: None,
        };
        let expired = keys.sign("at+jwt", &expired);
        assert_eq!(
            keys.verify(&expired, ACCESS_SCOPE).unwrap_err().error,
            "ExpiredToken"
        );
        assert!(keys.verify_allow_expired(&expired, ACCESS_SCOPE).is_ok());
        let old_refresh = keys.refresh("did:web:localhost%3A1", "id", 1, 2);
        assert_eq!(
            keys.verify(&old_refresh, REFRESH_SCOPE).unwrap_err().error,
            "ExpiredToken"
        );
        assert!(
            keys.verify_allow_expired(&old_refresh, REFRESH_SCOPE)
                .is_ok()
        );
        assert!(
            other
                .verify_allow_expired(&old_refresh, REFRESH_SCOPE)
                .is_err()
        );
        let other_aud = TokenKeys::new(b"secret".to_vec(), "did:web:elsewhere".into());
        assert!(other_aud.verify(&access, ACCESS_SCOPE).is_err());
        assert!(keys.verify("", ACCESS_SCOPE).is_err());
    }
}
