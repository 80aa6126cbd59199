//! What the four adapters share: the part bookkeeping that numbers our
//! content indexes and emits the seed's events, and small JSON helpers.

use serde_json::{Map, Value};

use crate::chat::StreamLine;
use crate::chat::input::{AssistantMessageEvent as E, ToolCall};
use crate::lexicon::chat::gel::assistant::defs::{ModelRef, Usage};
use crate::lexicon::chat::gel::assistant::message::MessageStopReason;
use crate::lexicon::chat::gel::assistant::subscribe_reply::ErrorCode;
use crate::provider::{Output, ProviderError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Thinking,
    Call,
}

#[derive(Debug)]
struct Part {
    kind: Kind,
    open: bool,
    /// The text so far, or the call's arguments text so far.
    buf: String,
    id: String,
    name: String,
}

/// The parts of one response, numbered 0, 1, 2 … in start order.
#[derive(Debug, Default)]
pub(crate) struct Parts {
    parts: Vec<Part>,
}

fn ev(e: E) -> Output {
    Output::Line(StreamLine::Event(e))
}

impl Parts {
    fn start(&mut self, kind: Kind, id: &str, name: &str) -> usize {
        self.parts.push(Part {
            kind,
            open: true,
            buf: String::new(),
            id: id.to_owned(),
            name: name.to_owned(),
        });
        self.parts.len() - 1
    }

    pub(crate) fn start_text(&mut self, out: &mut Vec<Output>) -> usize {
        let i = self.start(Kind::Text, "", "");
        out.push(ev(E::TextStart { content_index: i }));
        i
    }

    pub(crate) fn start_thinking(&mut self, out: &mut Vec<Output>) -> usize {
        let i = self.start(Kind::Thinking, "", "");
        out.push(ev(E::ThinkingStart { content_index: i }));
        i
    }

    pub(crate) fn start_call(&mut self, id: &str, name: &str, out: &mut Vec<Output>) -> usize {
        let i = self.start(Kind::Call, id, name);
        out.push(ev(E::ToolcallStart {
            content_index: i,
            id: id.to_owned(),
            tool_name: name.to_owned(),
        }));
        i
    }

    fn kind(&self, i: usize) -> Option<Kind> {
        self.parts.get(i).map(|p| p.kind)
    }

    pub(crate) fn is_text(&self, i: usize) -> bool {
        self.kind(i) == Some(Kind::Text)
    }

    pub(crate) fn is_thinking(&self, i: usize) -> bool {
        self.kind(i) == Some(Kind::Thinking)
    }

    pub(crate) fn is_call(&self, i: usize) -> bool {
        self.kind(i) == Some(Kind::Call)
    }

    pub(crate) fn is_open(&self, i: usize) -> bool {
        self.parts.get(i).is_some_and(|p| p.open)
    }

    /// Whether part `i` has text (or arguments) so far.
    pub(crate) fn has_text(&self, i: usize) -> bool {
        self.parts.get(i).is_some_and(|p| !p.buf.is_empty())
    }

    /// Grows open part `i` by `delta` (nothing for an empty delta).
    pub(crate) fn push(&mut self, i: usize, delta: &str, out: &mut Vec<Output>) {
        let Some(p) = self.parts.get_mut(i).filter(|p| p.open) else {
            return;
        };
        if delta.is_empty() {
            return;
        }
        p.buf.push_str(delta);
        let delta = delta.to_owned();
        out.push(ev(match p.kind {
            Kind::Text => E::TextDelta {
                content_index: i,
                delta,
            },
            Kind::Thinking => E::ThinkingDelta {
                content_index: i,
                delta,
            },
            Kind::Call => E::ToolcallDelta {
                content_index: i,
                delta,
            },
        }));
    }

    /// Ends text or thinking part `i` with `content` (None: what the
    /// deltas built).
    pub(crate) fn end(&mut self, i: usize, content: Option<String>, out: &mut Vec<Output>) {
        let Some(p) = self
            .parts
            .get_mut(i)
            .filter(|p| p.open && p.kind != Kind::Call)
        else {
            return;
        };
        p.open = false;
        let content = content.unwrap_or_else(|| std::mem::take(&mut p.buf));
        out.push(ev(if p.kind == Kind::Text {
            E::TextEnd {
                content_index: i,
                content,
            }
        } else {
            E::ThinkingEnd {
                content_index: i,
                content,
            }
        }));
    }

    /// Ends call `i` with `arguments` (None: what the deltas built);
    /// `Err(reason)` (the call stays open) when they are not a JSON
    /// object.
    pub(crate) fn end_call(
        &mut self,
        i: usize,
        arguments: Option<&str>,
        out: &mut Vec<Output>,
    ) -> Result<(), String> {
        let Some(p) = self
            .parts
            .get_mut(i)
            .filter(|p| p.open && p.kind == Kind::Call)
        else {
            return Ok(());
        };
        let value = parse_arguments(arguments.unwrap_or(&p.buf))?;
        p.open = false;
        p.buf = String::new();
        out.push(ev(E::ToolcallEnd {
            content_index: i,
            tool_call: ToolCall {
                kind: ToolCall::KIND.to_owned(),
                id: p.id.clone(),
                name: p.name.clone(),
                arguments: value,
            },
        }));
        Ok(())
    }

    /// How many parts started.
    pub(crate) fn len(&self) -> usize {
        self.parts.len()
    }

    /// The id of call `i`.
    pub(crate) fn call_id(&self, i: usize) -> &str {
        self.parts.get(i).map_or("", |p| p.id.as_str())
    }

    /// Closes open part `i` from what its deltas built. A call whose
    /// arguments are not an object stays open at a `length` stop (it
    /// was cut and never runs), else it is an error.
    /// Closes the part in `open`, if any (formats without part
    /// boundaries keep one part open at a time).
    pub(crate) fn close_slot(
        &mut self,
        open: &mut Option<usize>,
        out: &mut Vec<Output>,
    ) -> Result<(), ProviderError> {
        match open.take() {
            Some(i) => self.close(i, false, out),
            None => Ok(()),
        }
    }

    /// Grows the text (or thinking) part in `open` with `delta`; a delta of
    /// the other kind, or after a call, closes it and starts a new part.
    pub(crate) fn stream_text(
        &mut self,
        open: &mut Option<usize>,
        thinking: bool,
        delta: &str,
        out: &mut Vec<Output>,
    ) -> Result<(), ProviderError> {
        let same = open.is_some_and(|i| {
            if thinking {
                self.is_thinking(i)
            } else {
                self.is_text(i)
            }
        });
        if !same {
            self.close_slot(open, out)?;
            *open = Some(if thinking {
                self.start_thinking(out)
            } else {
                self.start_text(out)
            });
        }
        if let Some(i) = *open {
            self.push(i, delta, out);
        }
        Ok(())
    }

    pub(crate) fn close(
        &mut self,
        i: usize,
        length: bool,
        out: &mut Vec<Output>,
    ) -> Result<(), ProviderError> {
        if !self.is_open(i) {
            return Ok(());
        }
        if !self.is_call(i) {
            self.end(i, None, out);
            return Ok(());
        }
        match self.end_call(i, None, out) {
            Err(_) if length => Ok(()),
            Err(reason) => Err(bad_arguments(self.call_id(i), &reason)),
            Ok(()) => Ok(()),
        }
    }

    /// Closes every open part in order (see [`Parts::close`]).
    pub(crate) fn close_all(
        &mut self,
        length: bool,
        out: &mut Vec<Output>,
    ) -> Result<(), ProviderError> {
        for i in 0..self.parts.len() {
            self.close(i, length, out)?;
        }
        Ok(())
    }

    /// `toolUse` if the response made a tool call, else `stop`.
    pub(crate) fn stop(&self) -> MessageStopReason {
        if self.parts.iter().any(|p| p.kind == Kind::Call) {
            MessageStopReason::ToolUse
        } else {
            MessageStopReason::Stop
        }
    }
}

/// Arguments text as a JSON object; empty text is `{}`.
pub(crate) fn parse_arguments(text: &str) -> Result<Value, String> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err("not a JSON object".into()),
        Err(e) => Err(e.to_string()),
    }
}

pub(crate) fn bad_arguments(id: &str, reason: &str) -> ProviderError {
    ProviderError::malformed(format!(
        "the arguments of tool call {:?} are not a JSON object ({reason})",
        short(id)
    ))
}

/// A frame's JSON.
pub(crate) fn parse_frame(data: &str) -> Result<Value, ProviderError> {
    serde_json::from_str(data)
        .map_err(|e| ProviderError::malformed(format!("a frame that is not JSON ({e})")))
}

pub(crate) fn obj<'a>(v: &'a Value, what: &str) -> Result<&'a Map<String, Value>, ProviderError> {
    v.as_object()
        .ok_or_else(|| ProviderError::malformed(format!("{what} that is not a JSON object")))
}

pub(crate) fn str_of<'a>(m: &'a Map<String, Value>, k: &str) -> Option<&'a str> {
    m.get(k).and_then(Value::as_str)
}

pub(crate) fn u64_of(m: &Map<String, Value>, k: &str) -> Option<u64> {
    m.get(k).and_then(Value::as_u64)
}

/// At most 300 characters of provider text for a message.
pub(crate) fn short(s: &str) -> String {
    let mut out: String = s.chars().take(300).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

pub(crate) fn model_line(provider: &str, id: &str) -> Output {
    Output::Line(StreamLine::Model(ModelRef {
        provider: provider.to_owned(),
        id: id.chars().take(256).collect(),
        extra: Default::default(),
    }))
}

pub(crate) fn provider_data(index: usize, data: &Value) -> Output {
    Output::Line(StreamLine::ProviderData {
        content_index: index,
        provider_data: data.to_string(),
    })
}

fn count(n: Option<u64>) -> Option<i64> {
    n.map(|n| i64::try_from(n).unwrap_or(i64::MAX))
}

/// Our usage; `input` is what was not read from the cache.
pub(crate) fn usage(
    input: Option<u64>,
    cache_read: Option<u64>,
    cache_write: Option<u64>,
    output: Option<u64>,
    reasoning: Option<u64>,
) -> Usage {
    Usage {
        input_tokens: count(input),
        output_tokens: count(output),
        reasoning_tokens: count(reasoning),
        cache_read_tokens: count(cache_read),
        cache_write_tokens: count(cache_write),
        extra: Default::default(),
    }
}

pub(crate) fn refused(message: &str) -> ProviderError {
    ProviderError::new(ErrorCode::AssistantProvider, short(message))
}

/// Words in an error that mean the prompt did not fit.
pub(crate) fn says_context_too_large(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "context length",
        "context_length",
        "context window",
        "prompt is too long",
        "too many tokens",
        "maximum context",
    ]
    .iter()
    .any(|w| m.contains(w))
}

/// An OpenAI error object (`{message, type, code}`, in a Chat chunk,
/// a Responses `error` event or `response.error`), or a bare string.
pub(crate) fn openai_error(e: &Value, who: &str) -> ProviderError {
    let field = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("");
    let message = e.as_str().unwrap_or_else(|| field("message"));
    let code = e.get("code").and_then(|c| {
        c.as_str()
            .map(str::to_owned)
            .or_else(|| c.as_u64().map(|n| n.to_string()))
    });
    let code = code.unwrap_or_default();
    let kind = field("type");
    let name = if code.is_empty() { kind } else { code.as_str() };
    let all = format!("{name} {kind}");
    let (code, retryable) = if all.contains("rate_limit") {
        (ErrorCode::RateLimited, true)
    } else if all.contains("overloaded")
        || all.contains("service_unavailable")
        || all.contains("slow_down")
    {
        (ErrorCode::AssistantCapacity, true)
    } else if all.contains("server_error")
        || all.contains("internal_error")
        || all.contains("api_error")
    {
        (ErrorCode::AssistantProvider, true)
    } else if all.contains("context_length") || says_context_too_large(message) {
        (ErrorCode::AssistantContextTooLarge, false)
    } else if all.contains("invalid_api_key") || all.contains("authentication") {
        (ErrorCode::AssistantAuth, false)
    } else if all.contains("model_not_found") {
        (ErrorCode::AssistantModelNotOffered, false)
    } else {
        (ErrorCode::AssistantProvider, false)
    };
    let text = match (name.is_empty(), message.is_empty()) {
        (true, true) => format!("{who} reported an error"),
        (true, false) => format!("{who} reported an error: {}", short(message)),
        (false, true) => format!("{who} reported {}", short(name)),
        (false, false) => format!("{who} reported {}: {}", short(name), short(message)),
    };
    let mut err = ProviderError::new(code, text);
    err.retryable = retryable;
    err
}

/// OpenAI's `reasoning_effort` / `reasoning.effort` for ours.
pub(crate) fn openai_effort(effort: Option<&str>) -> Option<&'static str> {
    match effort? {
        "low" => Some("low"),
        "medium" => Some("medium"),
        "high" | "max" => Some("high"),
        _ => None,
    }
}

/// Garbage and near-miss frames the decoders' no-panic tests feed.
#[cfg(test)]
pub(crate) fn garbage(seed: u64, samples: &[&str], n: usize) -> Vec<String> {
    let mut state = seed | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let pieces = [
        "{",
        "}",
        "[",
        "]",
        "\"",
        ":",
        ",",
        "null",
        "0",
        "-1",
        "1e999",
        "\"x\"",
        "{}",
        "[]",
        "\"type\"",
        "\"index\"",
        "\"delta\"",
        "\"content_block_start\"",
        "\"tool_use\"",
        "é",
        "\u{1F642}",
        "\\u0000",
        "true",
        "18446744073709551616",
    ];
    let mut out = Vec::new();
    for _ in 0..n {
        let r = next();
        let s = match r % 4 {
            0 => (0..(next() % 12))
                .map(|_| pieces[(next() % pieces.len() as u64) as usize])
                .collect(),
            1 => {
                // A sample with a byte range cut out.
                let s = samples[(next() % samples.len() as u64) as usize];
                let a = (next() as usize) % (s.len() + 1);
                let b = (next() as usize) % (s.len() + 1);
                let (a, b) = (a.min(b), a.max(b));
                let mut t = String::new();
                t.push_str(s.get(..a).unwrap_or(""));
                t.push_str(s.get(b..).unwrap_or(""));
                t
            }
            2 => {
                // A sample with one value replaced.
                let s = samples[(next() % samples.len() as u64) as usize];
                let rep = pieces[(next() % pieces.len() as u64) as usize];
                s.replacen("0", rep, 1).replacen("\"\"", rep, 1)
            }
            _ => samples[(next() % samples.len() as u64) as usize].to_owned(),
        };
        out.push(s);
    }
    out
}

/// Feeds `frames` (data only) to `decoder`, then finishes it: every output
/// and how it ended (for the adapters' unit tests).
#[cfg(test)]
pub(crate) fn decode_frames(
    mut decoder: impl crate::provider::Decoder,
    frames: &[&str],
) -> (Vec<Output>, Result<crate::provider::Finish, ProviderError>) {
    let mut out = Vec::new();
    for f in frames {
        let frame = crate::provider::Frame {
            event: None,
            data: f,
        };
        if let Err(e) = decoder.feed(frame, &mut out) {
            return (out, Err(e));
        }
    }
    let end = decoder.finish(&mut out);
    (out, end)
}
