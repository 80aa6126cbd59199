//! MCP over streamable HTTP on our reqwest (0.12): rmcp's own HTTP client
//! is built on reqwest 0.13, and the rest of gelstore (atrium-xrpc-client)
//! on 0.12, so rmcp's transport runs here over [`Http`], an
//! `rmcp::transport::streamable_http_client::StreamableHttpClient` of our
//! own: POST each JSON-RPC message (answered `202`, JSON, or an SSE
//! stream), GET the server's stream, DELETE the session at the end, with
//! `Mcp-Session-Id` carried between them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderName, HeaderValue};
use rmcp::ServiceExt;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse,
};
use sse_stream::{Sse, SseStream};

use super::tasks::Discovery;

const SESSION: &str = "mcp-session-id";
const LAST_EVENT: &str = "last-event-id";
const BOTH: &str = "application/json, text/event-stream";
/// The largest JSON answer taken, in bytes.
const MAX_JSON: usize = 16 * 1024 * 1024;

/// Connects to the server at `url`, sending `headers` with every request;
/// its answers are shown to `discovery` while it looks.
pub async fn connect(
    url: &str,
    headers: &BTreeMap<String, String>,
    discovery: Discovery,
) -> Result<RunningService<RoleClient, ()>, String> {
    let mut custom = HashMap::new();
    for (k, v) in headers {
        let name = HeaderName::try_from(k.as_str()).map_err(|e| format!("header {k:?}: {e}"))?;
        let value = HeaderValue::try_from(v.as_str()).map_err(|e| format!("header {k:?}: {e}"))?;
        custom.insert(name, value);
    }
    let http = reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(30))
        .build()
        .map_err(|e| e.to_string())?;
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
    config.custom_headers = custom;
    let transport = StreamableHttpClientTransport::with_client(Http(http, discovery), config);
    ().serve(transport).await.map_err(|e| e.to_string())
}

/// reqwest 0.12 as rmcp's HTTP client.
#[derive(Clone)]
pub struct Http(reqwest::Client, Discovery);

type Failure = StreamableHttpError<reqwest::Error>;

fn with_headers(
    mut request: reqwest::RequestBuilder,
    session: Option<&str>,
    auth: Option<String>,
    custom: HashMap<HeaderName, HeaderValue>,
) -> reqwest::RequestBuilder {
    if let Some(s) = session {
        request = request.header(SESSION, s);
    }
    if let Some(token) = auth {
        request = request.bearer_auth(token);
    }
    for (k, v) in custom {
        request = request.header(k, v);
    }
    request
}

fn session_of(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get(SESSION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn media(response: &reqwest::Response) -> String {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

fn events(
    response: reqwest::Response,
    discovery: Discovery,
) -> BoxStream<'static, Result<Sse, SseError>> {
    SseStream::from_bytes_stream(response.bytes_stream())
        .inspect(move |event| {
            if let Ok(Sse {
                data: Some(data), ..
            }) = event
                && discovery.open()
            {
                discovery.message(data.as_bytes());
            }
        })
        .boxed()
}

fn unexpected(what: String) -> Failure {
    StreamableHttpError::UnexpectedServerResponse(what.into())
}

impl StreamableHttpClient for Http {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Failure> {
        let request = self
            .0
            .post(uri.as_ref())
            .header(ACCEPT, BOTH)
            .json(&message);
        let request = with_headers(request, session_id.as_deref(), auth_header, custom_headers);
        let response = request.send().await.map_err(StreamableHttpError::Client)?;
        let status = response.status();
        if status == reqwest::StatusCode::ACCEPTED || status == reqwest::StatusCode::NO_CONTENT {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == reqwest::StatusCode::NOT_FOUND && session_id.is_some() {
            return Err(StreamableHttpError::SessionExpired);
        }
        if !status.is_success() {
            return Err(unexpected(format!("HTTP {status} to a message")));
        }
        let session = session_of(&response);
        match media(&response).as_str() {
            "text/event-stream" => Ok(StreamableHttpPostResponse::Sse(
                events(response, self.1.clone()),
                session,
            )),
            "application/json" => {
                let mut body = Vec::new();
                let mut stream = response.bytes_stream();
                while let Some(chunk) = stream.next().await {
                    body.extend_from_slice(&chunk.map_err(StreamableHttpError::Client)?);
                    if body.len() > MAX_JSON {
                        return Err(StreamableHttpError::ResponseBodyTooLarge {
                            max_size: MAX_JSON,
                        });
                    }
                }
                self.1.message(&body);
                let message: ServerJsonRpcMessage = serde_json::from_slice(&body)?;
                Ok(StreamableHttpPostResponse::Json(message, session))
            }
            other => Err(StreamableHttpError::UnexpectedContentType(Some(
                other.to_owned(),
            ))),
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Failure> {
        let request = with_headers(
            self.0.delete(uri.as_ref()),
            Some(&session_id),
            auth_header,
            custom_headers,
        );
        let response = request.send().await.map_err(StreamableHttpError::Client)?;
        // A server that keeps no sessions answers 405: nothing to end.
        if response.status() == reqwest::StatusCode::METHOD_NOT_ALLOWED
            || response.status().is_success()
        {
            Ok(())
        } else {
            Err(unexpected(format!(
                "HTTP {} to the session's end",
                response.status()
            )))
        }
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Failure> {
        let mut request = self.0.get(uri.as_ref()).header(ACCEPT, "text/event-stream");
        if let Some(id) = last_event_id {
            request = request.header(LAST_EVENT, id);
        }
        let request = with_headers(request, session_id.as_deref(), auth_header, custom_headers);
        let response = request.send().await.map_err(StreamableHttpError::Client)?;
        if response.status() == reqwest::StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        if !response.status().is_success() {
            return Err(unexpected(format!(
                "HTTP {} to the event stream",
                response.status()
            )));
        }
        if media(&response) != "text/event-stream" {
            return Err(StreamableHttpError::UnexpectedContentType(Some(media(
                &response,
            ))));
        }
        Ok(events(response, self.1.clone()))
    }
}
