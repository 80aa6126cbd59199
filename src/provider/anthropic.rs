//! Anthropic Messages (`POST /v1/messages`, `stream: true`): typed SSE
//! events.
//!
//! `message_start` names the model and the input usage; each content block
//! is `content_block_start` (text, thinking, redacted_thinking, tool_use),
//! `content_block_delta`s and `content_block_stop`; `message_delta` gives
//! the stop reason and the cumulative output usage; `message_stop` ends the
//! turn. A thinking block's signature (and a redacted block's data) is the
//! part's provider data, sent back with the block in the next request.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::parts::{
    Parts, bad_arguments, model_line, obj, parse_frame, provider_data, refused,
    says_context_too_large, short, str_of, u64_of, usage,
};
use super::{AssistantPart, Decoder, Finish, Frame, Output, ProviderError, Turn, TurnRequest};
use crate::lexicon::chat::gel::assistant::defs::Usage;
use crate::lexicon::chat::gel::assistant::message::MessageStopReason;
use crate::lexicon::chat::gel::assistant::subscribe_reply::ErrorCode;

/// The `provider` the records name for this format.
pub const PROVIDER: &str = "anthropic";

#[derive(Debug)]
enum Kind {
    Text,
    Thinking {
        signature: String,
    },
    Redacted {
        data: String,
    },
    Call {
        start_input: Option<String>,
    },
    /// Blocks we do not ask for (server tools, their results …).
    Ignored,
}

#[derive(Debug)]
struct Block {
    part: usize,
    kind: Kind,
    stopped: bool,
}

/// The usage counts as reported so far (`message_delta` repeats them,
/// cumulative).
#[derive(Debug, Default)]
struct Counts {
    input: Option<u64>,
    cache_read: Option<u64>,
    cache_write: Option<u64>,
    output: Option<u64>,
    seen: bool,
}

impl Counts {
    fn take(&mut self, u: &Map<String, Value>) {
        self.seen = true;
        let set = |slot: &mut Option<u64>, k: &str| {
            if let Some(n) = u64_of(u, k) {
                *slot = Some(n);
            }
        };
        set(&mut self.input, "input_tokens");
        set(&mut self.cache_read, "cache_read_input_tokens");
        set(&mut self.cache_write, "cache_creation_input_tokens");
        set(&mut self.output, "output_tokens");
    }

    fn usage(&self) -> Option<Usage> {
        self.seen.then(|| {
            usage(
                self.input,
                self.cache_read,
                self.cache_write,
                self.output,
                None,
            )
        })
    }
}

/// Decodes one Messages stream.
#[derive(Debug, Default)]
pub struct MessagesDecoder {
    parts: Parts,
    model_seen: bool,
    /// By the provider's block index.
    blocks: HashMap<u64, Block>,
    counts: Counts,
    stop: Option<MessageStopReason>,
    /// Calls the provider closed whose arguments are not an object: cut
    /// by `max_tokens` (kept open) or an error, as the stop reason says.
    held: Vec<(usize, String)>,
    ended: bool,
}

fn index(e: &Map<String, Value>) -> Result<u64, ProviderError> {
    u64_of(e, "index")
        .ok_or_else(|| ProviderError::malformed("a content block event without an index"))
}

/// The open block an event addresses.
fn block<'a>(
    blocks: &'a mut HashMap<u64, Block>,
    e: &Map<String, Value>,
) -> Result<&'a mut Block, ProviderError> {
    let i = index(e)?;
    match blocks.get_mut(&i) {
        Some(b) if b.stopped => Err(ProviderError::malformed(format!(
            "an event for content block {i} after its stop"
        ))),
        Some(b) => Ok(b),
        None => Err(ProviderError::malformed(format!(
            "an event for content block {i} before its start"
        ))),
    }
}

impl MessagesDecoder {
    fn fail_held(&self) -> Result<(), ProviderError> {
        match self.held.first() {
            Some((part, reason)) => Err(bad_arguments(self.parts.call_id(*part), reason)),
            None => Ok(()),
        }
    }

    fn start(
        &mut self,
        e: &Map<String, Value>,
        out: &mut Vec<Output>,
    ) -> Result<(), ProviderError> {
        let i = index(e)?;
        if self.blocks.contains_key(&i) {
            return Err(ProviderError::malformed(format!(
                "content block {i} started twice"
            )));
        }
        // A block after a call with broken arguments: the call was not cut.
        self.fail_held()?;
        let b = obj(
            e.get("content_block").unwrap_or(&Value::Null),
            "a content_block",
        )?;
        let (part, kind) = match str_of(b, "type").unwrap_or("") {
            "text" => {
                let part = self.parts.start_text(out);
                self.parts.push(part, str_of(b, "text").unwrap_or(""), out);
                (part, Kind::Text)
            }
            "thinking" => {
                let part = self.parts.start_thinking(out);
                self.parts
                    .push(part, str_of(b, "thinking").unwrap_or(""), out);
                let signature = str_of(b, "signature").unwrap_or("").to_owned();
                (part, Kind::Thinking { signature })
            }
            "redacted_thinking" => {
                let part = self.parts.start_thinking(out);
                let data = str_of(b, "data").unwrap_or("").to_owned();
                (part, Kind::Redacted { data })
            }
            "tool_use" => {
                let id = str_of(b, "id")
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| ProviderError::malformed("a tool_use block without an id"))?;
                let name = str_of(b, "name")
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| ProviderError::malformed("a tool_use block without a name"))?;
                let part = self.parts.start_call(id, name, out);
                // Streaming starts with `input: {}`; a proxy may send it whole.
                let start_input = b
                    .get("input")
                    .and_then(Value::as_object)
                    .filter(|m| !m.is_empty())
                    .map(|m| Value::Object(m.clone()).to_string());
                (part, Kind::Call { start_input })
            }
            _ => (usize::MAX, Kind::Ignored),
        };
        self.blocks.insert(
            i,
            Block {
                part,
                kind,
                stopped: false,
            },
        );
        Ok(())
    }

    fn delta(
        &mut self,
        e: &Map<String, Value>,
        out: &mut Vec<Output>,
    ) -> Result<(), ProviderError> {
        let d = obj(e.get("delta").unwrap_or(&Value::Null), "a delta")?;
        let kind = str_of(d, "type").unwrap_or("");
        let text = |k: &str| str_of(d, k).unwrap_or("");
        let block = block(&mut self.blocks, e)?;
        let part = block.part;
        let wrong = |block: &str| ProviderError::malformed(format!("{kind} for a {block} block"));
        match (&mut block.kind, kind) {
            (Kind::Ignored, _) => {}
            (Kind::Text, "text_delta") => self.parts.push(part, text("text"), out),
            (Kind::Thinking { .. }, "thinking_delta") => {
                self.parts.push(part, text("thinking"), out)
            }
            (Kind::Thinking { signature }, "signature_delta") => {
                signature.push_str(text("signature"))
            }
            (Kind::Call { .. }, "input_json_delta") => {
                self.parts.push(part, text("partial_json"), out)
            }
            (Kind::Text, "input_json_delta" | "thinking_delta" | "signature_delta") => {
                return Err(wrong("text"));
            }
            (Kind::Thinking { .. } | Kind::Redacted { .. }, "text_delta" | "input_json_delta") => {
                return Err(wrong("thinking"));
            }
            (Kind::Call { .. }, "text_delta" | "thinking_delta" | "signature_delta") => {
                return Err(wrong("tool_use"));
            }
            // citations_delta and what later versions add.
            _ => {}
        }
        Ok(())
    }

    fn stop_block(
        &mut self,
        e: &Map<String, Value>,
        out: &mut Vec<Output>,
    ) -> Result<(), ProviderError> {
        let block = block(&mut self.blocks, e)?;
        block.stopped = true;
        let part = block.part;
        match &block.kind {
            Kind::Text => self.parts.end(part, None, out),
            Kind::Thinking { signature } => {
                let data = (!signature.is_empty()).then(|| json!({"signature": signature}));
                self.parts.end(part, None, out);
                if let Some(d) = data {
                    out.push(provider_data(part, &d));
                }
            }
            Kind::Redacted { data } => {
                let d = json!({"redactedData": data});
                self.parts.end(part, Some(String::new()), out);
                out.push(provider_data(part, &d));
            }
            Kind::Call { start_input } => {
                let whole = start_input.clone().filter(|_| !self.parts.has_text(part));
                if let Err(reason) = self.parts.end_call(part, whole.as_deref(), out) {
                    self.held.push((part, reason));
                }
            }
            Kind::Ignored => {}
        }
        Ok(())
    }

    fn message_delta(&mut self, e: &Map<String, Value>) -> Result<(), ProviderError> {
        if let Some(u) = e.get("usage").and_then(Value::as_object) {
            self.counts.take(u);
        }
        let Some(reason) = e
            .get("delta")
            .and_then(|d| d.get("stop_reason"))
            .and_then(Value::as_str)
        else {
            return Ok(());
        };
        let stop = match reason {
            "refusal" => {
                return Err(refused(
                    "the model refused to continue (Anthropic stop_reason refusal)",
                ));
            }
            "max_tokens" | "pause_turn" | "model_context_window_exceeded" => {
                MessageStopReason::Length
            }
            _ => {
                self.fail_held()?;
                self.parts.stop()
            }
        };
        self.stop = Some(stop);
        Ok(())
    }

    fn end(&mut self, out: &mut Vec<Output>) -> Result<(), ProviderError> {
        let length = self.stop == Some(MessageStopReason::Length);
        if !length {
            self.fail_held()?;
        }
        self.parts.close_all(length, out)?;
        let stop = match self.stop.clone() {
            Some(s) => s,
            None => self.parts.stop(),
        };
        out.push(Output::End {
            stop_reason: stop,
            usage: self.counts.usage(),
        });
        self.ended = true;
        Ok(())
    }
}

/// An `error` event's `{type, message}` as our failure.
fn stream_error(e: &Map<String, Value>) -> ProviderError {
    let error = e.get("error");
    let kind = error
        .and_then(|x| x.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("error");
    let message = error
        .and_then(|x| x.get("message"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let (code, retryable) = match kind {
        "overloaded_error" => (ErrorCode::AssistantCapacity, true),
        "rate_limit_error" => (ErrorCode::RateLimited, true),
        "api_error" => (ErrorCode::AssistantProvider, true),
        "timeout_error" => (ErrorCode::RequestTimeout, true),
        "authentication_error" | "permission_error" => (ErrorCode::AssistantAuth, false),
        "not_found_error" => (ErrorCode::AssistantModelNotOffered, false),
        "request_too_large" => (ErrorCode::AssistantContextTooLarge, false),
        "invalid_request_error" if says_context_too_large(message) => {
            (ErrorCode::AssistantContextTooLarge, false)
        }
        _ => (ErrorCode::AssistantProvider, false),
    };
    let text = if message.is_empty() {
        format!("Anthropic reported {}", short(kind))
    } else {
        format!("Anthropic reported {}: {}", short(kind), short(message))
    };
    let mut err = ProviderError::new(code, text);
    err.retryable = retryable;
    err
}

impl Decoder for MessagesDecoder {
    fn feed(&mut self, frame: Frame<'_>, out: &mut Vec<Output>) -> Result<(), ProviderError> {
        let data = frame.data.trim();
        if data.is_empty() {
            return Ok(());
        }
        let v = parse_frame(data)?;
        let e = obj(&v, "an event")?;
        let kind = str_of(e, "type").or(frame.event).unwrap_or("");
        if self.ended {
            return match kind {
                "ping" | "message_stop" | "error" => Ok(()),
                _ => Err(ProviderError::malformed(format!(
                    "{kind} after message_stop"
                ))),
            };
        }
        match kind {
            "message_start" => {
                let m = e.get("message").and_then(Value::as_object);
                if !self.model_seen
                    && let Some(id) = m.and_then(|m| str_of(m, "model")).filter(|s| !s.is_empty())
                {
                    self.model_seen = true;
                    out.push(model_line(PROVIDER, id));
                }
                if let Some(u) = m.and_then(|m| m.get("usage")).and_then(Value::as_object) {
                    self.counts.take(u);
                }
            }
            "content_block_start" => self.start(e, out)?,
            "content_block_delta" => self.delta(e, out)?,
            "content_block_stop" => self.stop_block(e, out)?,
            "message_delta" => self.message_delta(e)?,
            "message_stop" => self.end(out)?,
            "error" => return Err(stream_error(e)),
            // ping, and events later versions add.
            _ => {}
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<Output>) -> Result<Finish, ProviderError> {
        if self.ended {
            return Ok(Finish::Ended);
        }
        if self.stop.is_some() {
            // The stop reason came; the body ended before message_stop.
            self.end(out)?;
            return Ok(Finish::Ended);
        }
        Ok(Finish::Cut)
    }
}

/// Thinking budgets by effort.
fn budget(effort: Option<&str>) -> Option<u32> {
    match effort? {
        "low" => Some(2048),
        "medium" => Some(8192),
        "high" => Some(16384),
        "max" => Some(32000),
        _ => None,
    }
}

/// A reasoning part as a block, if its provider data lets it go back.
fn reasoning_block(text: &str, provider_data: Option<&str>) -> Option<Value> {
    let data: Value = serde_json::from_str(provider_data?).ok()?;
    if let Some(sig) = data
        .get("signature")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        return Some(json!({"type": "thinking", "thinking": text, "signature": sig}));
    }
    let redacted = data
        .get("redactedData")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())?;
    Some(json!({"type": "redacted_thinking", "data": redacted}))
}

/// The streaming request body.
pub fn encode(request: &TurnRequest<'_>) -> Value {
    let mut messages = Vec::new();
    for turn in &request.conversation.turns {
        match turn {
            Turn::User { text } => messages.push(json!({"role": "user", "content": text})),
            Turn::Assistant { parts } => {
                let mut content = Vec::new();
                for p in parts {
                    match p {
                        AssistantPart::Reasoning {
                            text,
                            provider_data,
                        } => {
                            // Unsigned thinking cannot go back.
                            if let Some(b) = reasoning_block(text, provider_data.as_deref()) {
                                content.push(b);
                            }
                        }
                        AssistantPart::Text { text, .. } => {
                            if !text.is_empty() {
                                content.push(json!({"type": "text", "text": text}));
                            }
                        }
                        AssistantPart::ToolCall {
                            id,
                            name,
                            arguments,
                            ..
                        } => {
                            let input = match serde_json::from_str::<Value>(arguments) {
                                Ok(v @ Value::Object(_)) => v,
                                _ => json!({}),
                            };
                            content.push(
                                json!({"type": "tool_use", "id": id, "name": name, "input": input}),
                            );
                        }
                    }
                }
                if !content.is_empty() {
                    messages.push(json!({"role": "assistant", "content": content}));
                }
            }
            Turn::ToolResults { results } => {
                let content: Vec<Value> = results
                    .iter()
                    .map(|r| {
                        json!({
                            "type": "tool_result",
                            "tool_use_id": r.call_id,
                            "content": r.output,
                            "is_error": r.is_error,
                        })
                    })
                    .collect();
                if !content.is_empty() {
                    messages.push(json!({"role": "user", "content": content}));
                }
            }
        }
    }
    let mut max_tokens = request.max_tokens;
    let thinking = budget(request.effort).map(|b| {
        if max_tokens <= b {
            // Room for the answer on top of the thinking.
            max_tokens = b.saturating_add(request.max_tokens.max(1));
        }
        json!({"type": "enabled", "budget_tokens": b})
    });
    let mut body = json!({"model": request.model, "max_tokens": max_tokens});
    if let Some(system) = request
        .conversation
        .system
        .as_deref()
        .filter(|s| !s.is_empty())
    {
        body["system"] = json!(system);
    }
    body["messages"] = Value::Array(messages);
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| {
                let mut v = json!({"name": t.name});
                if let Some(d) = &t.description {
                    v["description"] = json!(d);
                }
                v["input_schema"] = t.input_schema.clone();
                v
            })
            .collect();
    }
    if let Some(t) = thinking {
        body["thinking"] = t;
    }
    body["stream"] = json!(true);
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::StreamLine;
    use crate::chat::input::AssistantMessageEvent as E;
    use crate::provider::parts::garbage;
    use crate::provider::{Conversation, ToolResultItem, ToolSpec};

    fn decode(frames: &[&str]) -> (Vec<Output>, Result<Finish, ProviderError>) {
        crate::provider::parts::decode_frames(MessagesDecoder::default(), frames)
    }

    fn history() -> Conversation {
        Conversation {
            system: Some("Be brief.".into()),
            turns: vec![
                Turn::User {
                    text: "Weather?".into(),
                },
                Turn::Assistant {
                    parts: vec![
                        AssistantPart::Reasoning {
                            text: "Use the tool.".into(),
                            provider_data: Some(r#"{"signature":"EqQB"}"#.into()),
                        },
                        AssistantPart::Reasoning {
                            text: String::new(),
                            provider_data: Some(r#"{"redactedData":"EmwK"}"#.into()),
                        },
                        // Another provider's shape, none, and not JSON: dropped.
                        AssistantPart::Reasoning {
                            text: "x".into(),
                            provider_data: Some(
                                r#"{"id":"rs_1","encryptedContent":"gAAA"}"#.into(),
                            ),
                        },
                        AssistantPart::Reasoning {
                            text: "y".into(),
                            provider_data: None,
                        },
                        AssistantPart::Reasoning {
                            text: "z".into(),
                            provider_data: Some("{".into()),
                        },
                        AssistantPart::Text {
                            text: "Checking.".into(),
                            provider_data: None,
                        },
                        AssistantPart::ToolCall {
                            id: "toolu_1".into(),
                            name: "weather".into(),
                            arguments: r#"{"city":"Oslo"}"#.into(),
                            provider_data: None,
                        },
                    ],
                },
                Turn::ToolResults {
                    results: vec![ToolResultItem {
                        call_id: "toolu_1".into(),
                        name: "weather".into(),
                        output: "no data".into(),
                        is_error: true,
                    }],
                },
            ],
        }
    }

    #[test]
    fn encodes_history_thinking_and_tools() {
        let c = history();
        let tools = vec![ToolSpec {
            name: "weather".into(),
            description: Some("Current weather".into()),
            input_schema: json!({"type": "object"}),
        }];
        let body = encode(&TurnRequest {
            model: "claude-sonnet-4-5",
            conversation: &c,
            tools: &tools,
            effort: Some("medium"),
            max_tokens: 16000,
        });
        assert_eq!(
            body,
            json!({
                "model": "claude-sonnet-4-5",
                "max_tokens": 16000,
                "system": "Be brief.",
                "messages": [
                    {"role": "user", "content": "Weather?"},
                    {"role": "assistant", "content": [
                        {"type": "thinking", "thinking": "Use the tool.", "signature": "EqQB"},
                        {"type": "redacted_thinking", "data": "EmwK"},
                        {"type": "text", "text": "Checking."},
                        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}},
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "no data", "is_error": true},
                    ]},
                ],
                "tools": [{"name": "weather", "description": "Current weather", "input_schema": {"type": "object"}}],
                "thinking": {"type": "enabled", "budget_tokens": 8192},
                "stream": true,
            })
        );
    }

    #[test]
    fn effort_sets_a_budget_below_max_tokens() {
        let c = Conversation::default();
        let body = |effort, max_tokens| {
            encode(&TurnRequest {
                model: "m",
                conversation: &c,
                tools: &[],
                effort,
                max_tokens,
            })
        };
        for (effort, budget) in [
            ("low", 2048),
            ("medium", 8192),
            ("high", 16384),
            ("max", 32000),
        ] {
            let b = body(Some(effort), 4096);
            assert_eq!(b["thinking"]["budget_tokens"], json!(budget));
            assert!(b["max_tokens"].as_u64().unwrap() > budget, "{effort}: {b}");
        }
        assert_eq!(body(Some("low"), 4096)["max_tokens"], json!(4096));
        assert_eq!(body(Some("high"), 4096)["max_tokens"], json!(16384 + 4096));
        for effort in [None, Some("none"), Some("bogus")] {
            let b = body(effort, 4096);
            assert!(b.get("thinking").is_none());
            assert_eq!(b["max_tokens"], json!(4096));
            assert!(b.get("system").is_none() && b.get("tools").is_none());
        }
    }

    #[test]
    fn a_tool_without_arguments_gets_an_empty_object() {
        let (out, end) = decode(&[
            r#"{"type":"message_start","message":{"model":"claude-haiku-4-5","usage":{"input_tokens":3,"output_tokens":1}}}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"now","input":{}}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":""}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}"#,
            r#"{"type":"message_stop"}"#,
            r#"{"type":"ping"}"#,
        ]);
        assert_eq!(end, Ok(Finish::Ended));
        assert!(out.iter().any(|o| matches!(o, Output::Line(StreamLine::Event(E::ToolcallEnd { tool_call, .. })) if tool_call.arguments == json!({}))));
        let Output::End { stop_reason, usage } = out.last().unwrap() else {
            panic!()
        };
        assert_eq!(*stop_reason, MessageStopReason::ToolUse);
        assert_eq!(usage.as_ref().unwrap().output_tokens, Some(9));
    }

    #[test]
    fn error_types_map_to_codes() {
        for (kind, message, code, retryable) in [
            (
                "overloaded_error",
                "Overloaded",
                ErrorCode::AssistantCapacity,
                true,
            ),
            ("rate_limit_error", "slow", ErrorCode::RateLimited, true),
            (
                "api_error",
                "Internal server error",
                ErrorCode::AssistantProvider,
                true,
            ),
            (
                "authentication_error",
                "invalid x-api-key",
                ErrorCode::AssistantAuth,
                false,
            ),
            (
                "not_found_error",
                "model: claude-x",
                ErrorCode::AssistantModelNotOffered,
                false,
            ),
            (
                "invalid_request_error",
                "prompt is too long: 210000 tokens > 200000 maximum",
                ErrorCode::AssistantContextTooLarge,
                false,
            ),
            (
                "invalid_request_error",
                "messages: roles must alternate",
                ErrorCode::AssistantProvider,
                false,
            ),
        ] {
            let frame =
                json!({"type": "error", "error": {"type": kind, "message": message}}).to_string();
            let (_, end) = decode(&[&frame]);
            let e = end.unwrap_err();
            assert_eq!((e.code, e.retryable), (code, retryable), "{kind}");
            assert!(
                e.message.contains(kind) && e.message.contains(message),
                "{}",
                e.message
            );
        }
    }

    #[test]
    fn broken_arguments_fail_unless_max_tokens_cut_them() {
        let frames = |stop: &str| {
            vec![
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"f","input":{}}}"#.to_owned(),
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\": [1,"}}"#.to_owned(),
                r#"{"type":"content_block_stop","index":0}"#.to_owned(),
                format!(r#"{{"type":"message_delta","delta":{{"stop_reason":"{stop}"}},"usage":{{"output_tokens":4}}}}"#),
                r#"{"type":"message_stop"}"#.to_owned(),
            ]
        };
        let f = frames("tool_use");
        let (_, end) = decode(&f.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(end.unwrap_err().message.contains("toolu_1"));
        let f = frames("max_tokens");
        let (out, end) = decode(&f.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(end, Ok(Finish::Ended));
        assert!(matches!(
            out.last(),
            Some(Output::End {
                stop_reason: MessageStopReason::Length,
                ..
            })
        ));
    }

    #[test]
    fn garbage_never_panics() {
        let samples = [
            r#"{"type":"message_start","message":{"model":"m","usage":{"input_tokens":1}}}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"s"}}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t","name":"n","input":{}}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{}"}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":0}}"#,
            r#"{"type":"message_stop"}"#,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ];
        for seed in 0..40 {
            let mut d = MessagesDecoder::default();
            let mut out = Vec::new();
            for f in garbage(seed, &samples, 30) {
                let _ = d.feed(
                    Frame {
                        event: None,
                        data: &f,
                    },
                    &mut out,
                );
            }
            let _ = d.finish(&mut out);
        }
    }
}
