//! The XRPC front door: `/xrpc/{nsid}` for every query and procedure.
//! It looks the method up (an unknown NSID is `MethodNotImplemented`),
//! checks the HTTP method, reads the body within the limit (a procedure
//! only), and hands a [`Request`] to the method's handler. Every failure
//! leaves as an [`XrpcError`]; no input reaches a panic.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::{HeaderMap, Method, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::error::XrpcError;
use super::routes;
use super::state::AppState;
use crate::lexicon_runtime::{MethodKind, Params, Validate, params_from_query};
use crate::model::{decode_dag_cbor, ipld_to_json};

/// One request as a handler sees it.
#[derive(Debug)]
pub struct Request {
    /// The query-string parameters, in order (a name may repeat).
    pub params: Vec<(String, String)>,
    /// The request headers.
    pub headers: HeaderMap,
    /// The body (empty for a query).
    pub body: Bytes,
    /// The client's address (the proxy's, behind one).
    pub peer: std::net::IpAddr,
}

impl Request {
    /// The first value of parameter `name`, unchecked.
    pub fn first(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The parameters as the method's generated `…Params` type: typed and
    /// checked as its lexicon says.
    pub fn params<T: Params>(&self) -> Result<T, XrpcError> {
        params_from_query(&self.params).map_err(XrpcError::invalid_request)
    }

    /// The body as atproto JSON: `application/json`, or DAG-CBOR
    /// (`application/cbor`) turned into the same JSON.
    pub fn json(&self) -> Result<Value, XrpcError> {
        let kind = content_type(&self.headers);
        match kind.as_deref() {
            Some("application/json") => serde_json::from_slice(&self.body).map_err(|e| {
                XrpcError::invalid_request(format!("Request body is not valid JSON: {e}"))
            }),
            Some("application/cbor") => decode_dag_cbor(&self.body)
                .and_then(|ipld| ipld_to_json(&ipld))
                .map_err(|e| {
                    XrpcError::invalid_request(format!("Request body is not valid DAG-CBOR: {e}"))
                }),
            Some(other) => Err(XrpcError::invalid_request(format!(
                "Wrong request encoding (Content-Type): {}; expected application/json",
                other.chars().take(100).collect::<String>()
            ))),
            None => Err(XrpcError::invalid_request(
                "Request encoding (Content-Type) required but not provided",
            )),
        }
    }

    /// The body as the method's generated `…Input` type, with its
    /// lexicon's checks; a shape or a broken constraint is `InvalidRequest`.
    pub fn valid_input<T: DeserializeOwned + Validate>(&self) -> Result<T, XrpcError> {
        let input: T = self.input()?;
        input
            .validate()
            .map_err(|e| XrpcError::invalid_request(format!("Invalid input: {e}")))?;
        Ok(input)
    }

    /// The JSON body decoded into `T`; a shape error is `InvalidRequest`.
    pub fn input<T: DeserializeOwned>(&self) -> Result<T, XrpcError> {
        decode_input(self.object()?)
    }

    /// The body as a JSON object, for a handler that looks at it before
    /// decoding it ([`decode_input`]).
    pub fn object(&self) -> Result<Map<String, Value>, XrpcError> {
        match self.json()? {
            Value::Object(object) => Ok(object),
            _ => Err(XrpcError::invalid_request("Input must be an object")),
        }
    }
}

/// An input object decoded into the method's generated `…Input` type (no
/// lexicon checks); a shape or format error is `InvalidRequest`. Fields
/// the lexicon does not declare land in the type's `extra`, so they too
/// must be data-model values (no floats).
pub fn decode_input<T: DeserializeOwned>(object: Map<String, Value>) -> Result<T, XrpcError> {
    serde_json::from_value(Value::Object(object))
        .map_err(|e| XrpcError::invalid_request(format!("Invalid input: {e}")))
}

/// Drops the members of `object` that are `null`, but those named in
/// `keep`. The server's inputs have always read `null` for an optional
/// field as absent; the generated types refuse it, as the lexicon does.
/// A `null` required field becomes a missing one: `InvalidRequest` either
/// way.
pub fn null_as_absent(object: &mut Map<String, Value>, keep: &[&str]) {
    object.retain(|k, v| !v.is_null() || keep.contains(&k.as_str()));
}

/// The MIME type of a request, without parameters, in lower case.
pub fn content_type(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let mime = v
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    (!mime.is_empty()).then_some(mime)
}

/// The handler of `/xrpc/{nsid}`.
pub async fn handle(
    State(state): State<Arc<AppState>>,
    Path(nsid): Path<String>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    method: Method,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Body,
) -> Response {
    match dispatch(state, nsid, peer.ip(), method, headers, query, body).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn dispatch(
    state: Arc<AppState>,
    nsid: String,
    peer: std::net::IpAddr,
    method: Method,
    headers: HeaderMap,
    query: Option<String>,
    body: Body,
) -> Result<Response, XrpcError> {
    let Some(route) = routes::route(&nsid) else {
        return Err(XrpcError::not_implemented(&nsid));
    };
    let query_like = route.method.kind == MethodKind::Query;
    let expected = if query_like {
        Method::GET
    } else {
        Method::POST
    };
    // HEAD is GET without the body, which the HTTP layer drops.
    if method != expected && !(query_like && method == Method::HEAD) {
        return Err(XrpcError::invalid_request(format!(
            "Incorrect HTTP method ({method}) expected {expected}"
        )));
    }
    let params = parse_query(query.as_deref().unwrap_or(""))?;
    let body = if query_like {
        Bytes::new()
    } else {
        let limit = if route.takes_blob() {
            state.limits.blob
        } else {
            state.limits.body
        };
        read_body(&headers, body, limit, state.limits.body_timeout).await?
    };
    let request = Request {
        peer,
        params,
        headers,
        body,
    };
    route.call(&state, request).await
}

/// The query string's pairs, percent-decoded, in order.
pub fn parse_query(query: &str) -> Result<Vec<(String, String)>, XrpcError> {
    let mut out = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        out.push((percent_decode(k)?, percent_decode(v)?));
    }
    Ok(out)
}

fn percent_decode(s: &str) -> Result<String, XrpcError> {
    let bad = || XrpcError::invalid_request("Malformed query string");
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).ok_or_else(bad)?;
                // Two hex digits exactly (`from_str_radix` alone takes `+f`).
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return Err(bad());
                }
                let hex = std::str::from_utf8(hex).map_err(|_| bad())?;
                out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| bad())
}

/// Reads a body of at most `limit` bytes: a larger declared length is
/// refused before reading, a larger streamed body when it passes the limit
/// (413). A body that breaks off or is malformed (bad chunked framing) is
/// a 400, and one that sends nothing for `patience` a 408.
async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    patience: std::time::Duration,
) -> Result<Bytes, XrpcError> {
    use futures_util::StreamExt as _;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(XrpcError::payload_too_large(limit));
    }
    let mut stream = body.into_data_stream();
    // Room for what is declared, up to 64 KiB: a declared length costs
    // nothing until the bytes come.
    let mut out = Vec::with_capacity(
        declared
            .and_then(|len| usize::try_from(len).ok())
            .unwrap_or(0)
            .min(limit)
            .min(64 * 1024),
    );
    loop {
        let chunk = match tokio::time::timeout(patience, stream.next()).await {
            Err(_) => return Err(XrpcError::body_timeout(patience)),
            Ok(None) => break,
            Ok(Some(Ok(chunk))) => chunk,
            Ok(Some(Err(e))) => {
                // The limit is checked here, so this is the body's own
                // fault: bad framing, or a connection that broke off (whose
                // client will not read the answer).
                tracing::debug!("request body: {e}");
                return Err(XrpcError::invalid_request(
                    "Request body is malformed or incomplete",
                ));
            }
        };
        if out.len() + chunk.len() > limit {
            return Err(XrpcError::payload_too_large(limit));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_strings_decode_or_fail_cleanly() {
        let p = parse_query("a=1&b=x%2Fy&c=&d&e=a+b").unwrap();
        assert_eq!(p[1], ("b".into(), "x/y".into()));
        assert_eq!(p[3], ("d".into(), "".into()));
        assert_eq!(p[4], ("e".into(), "a b".into()));
        assert!(parse_query("a=%zz").is_err());
        assert!(parse_query("a=%").is_err());
        assert!(parse_query("a=%ff").is_err());
        assert!(parse_query("a=%+f").is_err());
        assert!(parse_query("a=%-1").is_err());
    }
}
