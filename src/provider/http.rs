//! One model turn over HTTP: post the request, map an HTTP error before
//! the stream to a named failure, cut the body into [`Frame`]s and drive
//! the format's [`Decoder`], handing each output on as soon as it is
//! decoded (no buffering of the reply).
//!
//! Retries happen only where the provider says it is safe and nothing
//! was handed on yet: a 429, a 5xx or 529, an `overloaded` error event
//! first thing, or a refused connection; at most [`MAX_RETRIES`] times,
//! waiting `retry-after` (capped at [`MAX_RETRY_WAIT`]) or a short
//! backoff.

use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};

use super::parts::says_context_too_large;
use super::{
    Decoder, Finish, Frame, Output, ProviderConfig, ProviderError, TurnRequest, WireFormat,
};
use crate::lexicon::chat::gel::assistant::subscribe_reply::ErrorCode;

/// Retries of one turn at most.
pub const MAX_RETRIES: u32 = 2;
/// The longest `retry-after` honoured; a longer one fails the turn.
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(30);
/// The longest NDJSON line or SSE event taken, in bytes.
pub const MAX_FRAME: usize = 8 * 1024 * 1024;
/// The most of an error body read, in bytes.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// A client for one provider.
#[derive(Clone, Debug)]
pub struct ProviderClient {
    http: reqwest::Client,
    config: ProviderConfig,
    /// A stream silent this long is cut.
    idle: Duration,
}

impl ProviderClient {
    /// A client for `config`; a body silent for `idle` is cut.
    pub fn new(config: ProviderConfig, idle: Duration) -> Result<ProviderClient, ProviderError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .user_agent(concat!("gelstore/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ProviderError::new(ErrorCode::Internal, format!("HTTP client: {e}")))?;
        Ok(ProviderClient { http, config, idle })
    }

    pub fn config(&self) -> &ProviderConfig {
        &self.config
    }

    /// Runs one turn, handing each output to `sink`. `Ok(Finish::Cut)`
    /// when the body ended early; an error names what to fix.
    pub async fn stream_turn(
        &self,
        request: &TurnRequest<'_>,
        sink: &mut (dyn FnMut(Output) + Send),
    ) -> Result<Finish, ProviderError> {
        let body = self.config.format.encode(request);
        let mut attempt = 0;
        loop {
            let mut handed = false;
            let mut counted = |o| {
                handed = true;
                sink(o)
            };
            let result = self.try_turn(&body, request.model, &mut counted).await;
            match result {
                Err(e) if e.retryable && !handed && attempt < MAX_RETRIES => {
                    let wait = e
                        .retry_after
                        .map(Duration::from_secs)
                        .unwrap_or(Duration::from_millis(500 << attempt));
                    if wait > MAX_RETRY_WAIT {
                        return Err(e);
                    }
                    tracing::info!(
                        "provider {}: {} (retrying in {} ms)",
                        self.config.name,
                        e.message,
                        wait.as_millis()
                    );
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    async fn try_turn(
        &self,
        body: &serde_json::Value,
        model: &str,
        sink: &mut (dyn FnMut(Output) + Send),
    ) -> Result<Finish, ProviderError> {
        let url = self.config.endpoint();
        let mut post = self.http.post(&url).json(body);
        post = match self.config.format {
            WireFormat::Anthropic => post
                .header("anthropic-version", "2023-06-01")
                .header("accept", "text/event-stream"),
            WireFormat::OpenAiChat | WireFormat::OpenAiResponses => {
                post.header("accept", "text/event-stream")
            }
            WireFormat::Ollama => post,
        };
        if let Some(key) = &self.config.key {
            post = match self.config.format {
                WireFormat::Anthropic => post.header("x-api-key", key.expose()),
                _ => post.bearer_auth(key.expose()),
            };
        }
        let response = match tokio::time::timeout(self.idle, post.send()).await {
            Err(_) => {
                return Err(timeout(format!(
                    "{} did not answer within {} s",
                    self.config.base_url,
                    self.idle.as_secs()
                )));
            }
            Ok(Err(e)) => {
                let mut err = ProviderError::new(
                    ErrorCode::AssistantProvider,
                    format!(
                        "could not reach {}: {}",
                        self.config.base_url,
                        self.scrub(&without_url(&e))
                    ),
                );
                err.retryable = e.is_connect();
                return Err(err);
            }
            Ok(Ok(r)) => r,
        };
        let status = response.status();
        if !status.is_success() {
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok());
            let text = read_capped(response, MAX_ERROR_BODY).await;
            let message = self.scrub(&error_message(&text));
            return Err(status_error(
                &self.config,
                model,
                status.as_u16(),
                &message,
                retry_after,
            ));
        }
        let body = response.bytes_stream();
        drive(self.config.format, body, self.idle, sink).await
    }

    /// `text` with the key (and anything shaped like one) removed: some
    /// providers echo part of a refused key in their error.
    fn scrub(&self, text: &str) -> String {
        let mut out = text.to_owned();
        if let Some(key) = &self.config.key
            && !key.expose().is_empty()
        {
            out = out.replace(key.expose(), "[key]");
        }
        out.split(' ')
            .map(|w| if w.starts_with("sk-") { "[key]" } else { w })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn timeout(message: String) -> ProviderError {
    let mut e = ProviderError::new(ErrorCode::RequestTimeout, message);
    e.interrupted = true;
    e
}

/// A reqwest error's text without its URL's query (none of ours has one;
/// the key is never in a URL) — kept short.
fn without_url(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s.chars().take(500).collect()
}

async fn read_capped(response: reqwest::Response, cap: usize) -> String {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(Ok(chunk)) = stream.next().await {
        body.extend_from_slice(&chunk[..chunk.len().min(cap - body.len())]);
        if body.len() >= cap {
            break;
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

/// The provider's own words from an error body: `{"error":{"message"}}`
/// (OpenAI, Anthropic), `{"error":"…"}` (Ollama), else the text itself.
fn error_message(text: &str) -> String {
    let v: Option<serde_json::Value> = serde_json::from_str(text).ok();
    let found = v.as_ref().and_then(|v| {
        let e = v.get("error")?;
        e.get("message")
            .and_then(|m| m.as_str())
            .or_else(|| e.as_str())
            .map(str::to_owned)
    });
    let s = found.unwrap_or_else(|| text.trim().to_owned());
    s.chars().take(1000).collect()
}

/// The failure for an HTTP error status before the stream.
fn status_error(
    config: &ProviderConfig,
    model: &str,
    status: u16,
    message: &str,
    retry_after: Option<u64>,
) -> ProviderError {
    let said = if message.is_empty() {
        String::new()
    } else {
        format!(": {message}")
    };
    let key_var = match config.format {
        WireFormat::Anthropic => "ANTHROPIC_API_KEY",
        WireFormat::Ollama => "the server's credentials",
        _ => "OPENAI_API_KEY",
    };
    let (code, text, retryable) = match status {
        401 | 403 => (
            ErrorCode::AssistantAuth,
            format!(
                "{} refused the credentials (HTTP {status}); check {key_var}{said}",
                config.name
            ),
            false,
        ),
        404 => (
            ErrorCode::AssistantModelNotOffered,
            format!(
                "{} does not offer model {model:?} at {} (HTTP 404){said}",
                config.name,
                config.endpoint()
            ),
            false,
        ),
        408 => (
            ErrorCode::RequestTimeout,
            format!("{} timed out the request (HTTP 408){said}", config.name),
            true,
        ),
        413 => (
            ErrorCode::AssistantContextTooLarge,
            format!("the chat is too long for {model:?} (HTTP 413){said}"),
            false,
        ),
        429 => (
            ErrorCode::RateLimited,
            match retry_after {
                Some(s) => format!(
                    "{} is rate limiting (HTTP 429; retry after {s} s){said}",
                    config.name
                ),
                None => format!("{} is rate limiting (HTTP 429){said}", config.name),
            },
            true,
        ),
        529 => (
            ErrorCode::AssistantCapacity,
            format!("{} is overloaded (HTTP 529){said}", config.name),
            true,
        ),
        400 | 422 if says_context_too_large(message) => (
            ErrorCode::AssistantContextTooLarge,
            format!("the chat is too long for {model:?} (HTTP {status}){said}"),
            false,
        ),
        500..=599 => (
            ErrorCode::AssistantProvider,
            format!("{} failed (HTTP {status}){said}", config.name),
            true,
        ),
        _ => (
            ErrorCode::AssistantProvider,
            format!("{} refused the request (HTTP {status}){said}", config.name),
            false,
        ),
    };
    ProviderError {
        code,
        message: text,
        retryable,
        retry_after,
        interrupted: false,
    }
}

/// Frames `body` by `format` and drives a fresh decoder over it, handing
/// each output to `sink`. A body silent for `idle`, or one whose
/// connection fails, is cut (`interrupted`).
pub async fn drive<S, E>(
    format: WireFormat,
    body: S,
    idle: Duration,
    sink: &mut (dyn FnMut(Output) + Send),
) -> Result<Finish, ProviderError>
where
    S: Stream<Item = Result<Bytes, E>> + Send + Unpin,
    E: std::error::Error + Send + Sync + 'static,
{
    let mut decoder = format.decoder();
    let mut out = Vec::new();
    let fed = if format.is_sse() {
        drive_sse(decoder.as_mut(), body, idle, &mut out, sink).await
    } else {
        drive_ndjson(decoder.as_mut(), body, idle, &mut out, sink).await
    };
    let flush = |out: &mut Vec<Output>, sink: &mut (dyn FnMut(Output) + Send)| {
        for o in out.drain(..) {
            sink(o);
        }
    };
    flush(&mut out, sink);
    fed?;
    let finish = decoder.finish(&mut out);
    flush(&mut out, sink);
    finish
}

fn cut(message: String) -> ProviderError {
    let mut e = ProviderError::new(ErrorCode::AssistantProvider, message);
    e.interrupted = true;
    e
}

async fn drive_sse<S, E>(
    decoder: &mut dyn Decoder,
    body: S,
    idle: Duration,
    out: &mut Vec<Output>,
    sink: &mut (dyn FnMut(Output) + Send),
) -> Result<(), ProviderError>
where
    S: Stream<Item = Result<Bytes, E>> + Send + Unpin,
    E: std::error::Error + Send + Sync + 'static,
{
    let mut events = sse_stream::SseStream::from_bytes_stream(body);
    loop {
        let sse = match tokio::time::timeout(idle, events.next()).await {
            Err(_) => {
                return Err(timeout(format!(
                    "the provider sent nothing for {} s",
                    idle.as_secs()
                )));
            }
            Ok(None) => return Ok(()),
            Ok(Some(Err(e))) => return Err(cut(format!("the provider's stream broke off: {e}"))),
            Ok(Some(Ok(sse))) => sse,
        };
        let Some(data) = sse.data.as_deref() else {
            continue;
        };
        if data.len() > MAX_FRAME {
            return Err(ProviderError::malformed(format!(
                "an event over {MAX_FRAME} bytes"
            )));
        }
        decoder.feed(
            Frame {
                event: sse.event.as_deref(),
                data,
            },
            out,
        )?;
        for o in out.drain(..) {
            sink(o);
        }
    }
}

async fn drive_ndjson<S, E>(
    decoder: &mut dyn Decoder,
    mut body: S,
    idle: Duration,
    out: &mut Vec<Output>,
    sink: &mut (dyn FnMut(Output) + Send),
) -> Result<(), ProviderError>
where
    S: Stream<Item = Result<Bytes, E>> + Send + Unpin,
    E: std::error::Error + Send + Sync + 'static,
{
    let mut pending: Vec<u8> = Vec::new();
    let mut feed_line = |line: &[u8], out: &mut Vec<Output>| -> Result<(), ProviderError> {
        let line = std::str::from_utf8(line)
            .map_err(|_| ProviderError::malformed("a line that is not UTF-8"))?;
        let line = line.trim();
        if line.is_empty() {
            return Ok(());
        }
        decoder.feed(
            Frame {
                event: None,
                data: line,
            },
            out,
        )
    };
    loop {
        let chunk = match tokio::time::timeout(idle, body.next()).await {
            Err(_) => {
                return Err(timeout(format!(
                    "the provider sent nothing for {} s",
                    idle.as_secs()
                )));
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(cut(format!("the provider's stream broke off: {e}"))),
            Ok(Some(Ok(c))) => c,
        };
        let mut rest: &[u8] = &chunk;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            if pending.is_empty() {
                feed_line(&rest[..nl], out)?;
            } else {
                pending.extend_from_slice(&rest[..nl]);
                let line = std::mem::take(&mut pending);
                feed_line(&line, out)?;
            }
            rest = &rest[nl + 1..];
            for o in out.drain(..) {
                sink(o);
            }
        }
        pending.extend_from_slice(rest);
        if pending.len() > MAX_FRAME {
            return Err(ProviderError::malformed(format!(
                "a line over {MAX_FRAME} bytes"
            )));
        }
    }
    if !pending.is_empty() {
        let line = std::mem::take(&mut pending);
        feed_line(&line, out)?;
    }
    Ok(())
}

/// Decodes a whole recorded body, cut into `chunks` as a network might
/// (for the corpus tests and benches): every output, and how it ended.
pub fn decode_chunks(
    format: WireFormat,
    chunks: &[&[u8]],
) -> (Vec<Output>, Result<Finish, ProviderError>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime");
    let owned: Vec<Result<Bytes, std::io::Error>> = chunks
        .iter()
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let mut outputs = Vec::new();
    let end = runtime.block_on(drive(
        format,
        futures_util::stream::iter(owned),
        Duration::from_secs(3600),
        &mut |o| outputs.push(o),
    ));
    (outputs, end)
}
