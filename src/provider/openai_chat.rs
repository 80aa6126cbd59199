//! OpenAI Chat Completions (`POST /chat/completions`, `stream: true`), the
//! format every OpenAI-compatible server speaks (vLLM, llama.cpp,
//! DeepSeek, OpenRouter …).
//!
//! The stream is SSE `data:` chunks, then `data: [DONE]`. Each chunk's
//! `choices[0].delta` carries `content`, `reasoning_content` / `reasoning`
//! (compatible servers' thinking) or `tool_calls` fragments; the format
//! never closes a part, so a part ends when one of another kind or index
//! starts, or at `finish_reason`. With `stream_options.include_usage` the
//! usage comes in a last chunk with `choices: []`, so the turn ends at
//! `[DONE]` (or at the end of the body once `finish_reason` was seen).
//!
//! The module also holds what the four adapters share ([`shared`]).

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::parts::{self, Parts, model_line, obj, parse_frame, str_of, u64_of, usage};
use super::{AssistantPart, Decoder, Finish, Frame, Output, ProviderError, Turn, TurnRequest};
use crate::lexicon::chat::gel::assistant::defs::Usage;
use crate::lexicon::chat::gel::assistant::message::MessageStopReason;
use crate::lexicon::chat::gel::assistant::subscribe_reply::ErrorCode;

/// The `provider` the records name for this format.
pub const PROVIDER: &str = "openai-chat";

/// One tool call of the response.
#[derive(Debug)]
struct Call {
    id: String,
    /// Our content index.
    part: usize,
}

/// Decodes one Chat Completions stream.
#[derive(Debug, Default)]
pub struct ChatDecoder {
    parts: Parts,
    model_seen: bool,
    /// The part open now: the format has at most one.
    open: Option<usize>,
    calls: Vec<Call>,
    /// The last call (position in `calls`) with each server `index`, and id.
    by_index: HashMap<u64, usize>,
    by_id: HashMap<String, usize>,
    /// The mapped `finish_reason`, once seen.
    stop: Option<MessageStopReason>,
    usage: Option<Usage>,
    /// `delta.refusal` text (structured outputs' refusal).
    refusal: String,
    ended: bool,
}

impl ChatDecoder {
    /// Closes the open part; a call whose arguments are not an object is
    /// an error (another part started, so the call was meant complete).
    fn close_open(&mut self, out: &mut Vec<Output>) -> Result<(), ProviderError> {
        self.parts.close_slot(&mut self.open, out)
    }

    fn text(
        &mut self,
        thinking: bool,
        delta: &str,
        out: &mut Vec<Output>,
    ) -> Result<(), ProviderError> {
        self.parts.stream_text(&mut self.open, thinking, delta, out)
    }

    fn fragment(&mut self, f: &Value, out: &mut Vec<Output>) -> Result<(), ProviderError> {
        let f = obj(f, "a tool_calls entry")?;
        let index = f.get("index").and_then(Value::as_u64);
        let id = str_of(f, "id").filter(|s| !s.is_empty());
        let function = f.get("function").and_then(Value::as_object);
        let name = function
            .and_then(|x| str_of(x, "name"))
            .filter(|s| !s.is_empty());
        let arguments = match function.and_then(|x| x.get("arguments")) {
            None | Some(Value::Null) => "",
            Some(Value::String(s)) => s.as_str(),
            Some(_) => {
                return Err(ProviderError::malformed(
                    "tool call arguments that are not text",
                ));
            }
        };
        // Which call the fragment continues, if any.
        let target = if let Some(ix) = index {
            // The same index with another id is a new call.
            self.by_index
                .get(&ix)
                .copied()
                .filter(|&p| id.is_none_or(|id| id == self.calls[p].id))
        } else if let Some(id) = id {
            self.by_id.get(id).copied()
        } else {
            // The open call, if any, is the last one started.
            self.open
                .filter(|&i| self.parts.is_call(i))
                .and(self.calls.len().checked_sub(1))
        };
        let part = match target {
            Some(p) => {
                let part = self.calls[p].part;
                // Parallel calls may interleave their fragments (they are
                // keyed by index); all stay open until the finish reason.
                if !self.parts.is_open(part) {
                    return Err(ProviderError::malformed(format!(
                        "arguments for tool call {:?} after it ended",
                        self.calls[p].id
                    )));
                }
                part
            }
            None => {
                let Some(name) = name else {
                    return Err(ProviderError::malformed(
                        "a tool call fragment that continues no call and names no function",
                    ));
                };
                let id = id.map_or_else(|| format!("call_{}", self.calls.len()), str::to_owned);
                // A text part ends where a call starts; earlier calls stay
                // open for interleaved fragments.
                if self.open.is_some_and(|i| !self.parts.is_call(i)) {
                    self.close_open(out)?;
                }
                let part = self.parts.start_call(&id, name, out);
                if let Some(ix) = index {
                    self.by_index.insert(ix, self.calls.len());
                }
                self.by_id.insert(id.clone(), self.calls.len());
                self.calls.push(Call { id, part });
                self.open = Some(part);
                part
            }
        };
        self.parts.push(part, arguments, out);
        Ok(())
    }

    fn choice(
        &mut self,
        choice: &Map<String, Value>,
        out: &mut Vec<Output>,
    ) -> Result<(), ProviderError> {
        let empty = Map::new();
        let delta = match choice.get("delta") {
            None | Some(Value::Null) => &empty,
            Some(d) => obj(d, "a delta")?,
        };
        let nonempty = |k: &str| str_of(delta, k).filter(|s| !s.is_empty());
        let reasoning = nonempty("reasoning_content").or_else(|| nonempty("reasoning"));
        let content = content_pieces(delta.get("content"))?;
        let calls = match delta.get("tool_calls") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(a)) => a.as_slice(),
            Some(_) => return Err(ProviderError::malformed("tool_calls that is not an array")),
        };
        if self.stop.is_some() && (reasoning.is_some() || !content.is_empty() || !calls.is_empty())
        {
            return Err(ProviderError::malformed("content after finish_reason"));
        }
        if let Some(r) = reasoning {
            self.text(true, r, out)?;
        }
        for (thinking, c) in content {
            self.text(thinking, c, out)?;
        }
        if let Some(r) = nonempty("refusal") {
            self.refusal.push_str(r);
        }
        for f in calls {
            self.fragment(f, out)?;
        }
        if let Some(reason) = str_of(choice, "finish_reason")
            && self.stop.is_none()
        {
            self.finish_reason(reason, out)?;
        }
        Ok(())
    }

    fn finish_reason(&mut self, reason: &str, out: &mut Vec<Output>) -> Result<(), ProviderError> {
        if reason == "content_filter" {
            return Err(ProviderError::new(
                ErrorCode::AssistantProvider,
                "the content filter stopped the model (finish_reason content_filter)",
            ));
        }
        if !self.refusal.is_empty() {
            return Err(parts::refused(&format!(
                "the model refused: {}",
                self.refusal
            )));
        }
        let length = matches!(reason, "length" | "max_tokens");
        self.open = None;
        self.parts.close_all(length, out)?;
        self.stop = Some(if length {
            MessageStopReason::Length
        } else {
            self.parts.stop()
        });
        Ok(())
    }

    fn end(&mut self, out: &mut Vec<Output>) -> Result<(), ProviderError> {
        if self.stop.is_none() {
            // `[DONE]` without a finish_reason: the server says it is done.
            self.finish_reason("stop", out)?;
        }
        out.push(Output::End {
            stop_reason: self.stop.clone().unwrap_or(MessageStopReason::Stop),
            usage: self.usage.clone(),
        });
        self.ended = true;
        Ok(())
    }
}

impl Decoder for ChatDecoder {
    fn feed(&mut self, frame: Frame<'_>, out: &mut Vec<Output>) -> Result<(), ProviderError> {
        let data = frame.data.trim();
        if data == "[DONE]" {
            return if self.ended { Ok(()) } else { self.end(out) };
        }
        if data.is_empty() || data == "null" {
            return Ok(());
        }
        if self.ended {
            return Err(ProviderError::malformed("a chunk after [DONE]"));
        }
        let v = parse_frame(data)?;
        let chunk = obj(&v, "a chunk")?;
        if let Some(e) = chunk.get("error").filter(|e| !e.is_null()) {
            return Err(parts::openai_error(e, "OpenAI"));
        }
        if !self.model_seen
            && let Some(m) = str_of(chunk, "model").filter(|m| !m.is_empty())
        {
            self.model_seen = true;
            out.push(model_line(PROVIDER, m));
        }
        if let Some(u) = chunk.get("usage").and_then(Value::as_object) {
            self.usage = Some(chat_usage(u));
        }
        match chunk.get("choices") {
            None | Some(Value::Null) => {}
            Some(Value::Array(choices)) => {
                for c in choices {
                    let c = obj(c, "a choice")?;
                    // Only the first choice: we never ask for n > 1.
                    if c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0 {
                        self.choice(c, out)?;
                    }
                }
            }
            Some(_) => return Err(ProviderError::malformed("choices that is not an array")),
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<Output>) -> Result<Finish, ProviderError> {
        if self.ended {
            return Ok(Finish::Ended);
        }
        if self.stop.is_some() {
            // The body ended after finish_reason without `[DONE]`.
            self.end(out)?;
            return Ok(Finish::Ended);
        }
        Ok(Finish::Cut)
    }
}

/// `delta.content` as (thinking?, text) pieces: a string, or (Mistral's
/// reasoning models) an array of `{type: "text", text}` and
/// `{type: "thinking", thinking: [{type: "text", text}]}` chunks.
fn content_pieces(content: Option<&Value>) -> Result<Vec<(bool, &str)>, ProviderError> {
    let mut out = Vec::new();
    match content {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => out.push((false, s.as_str())),
        Some(Value::Array(chunks)) => {
            for c in chunks {
                match c.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        out.push((false, c.get("text").and_then(Value::as_str).unwrap_or("")))
                    }
                    Some("thinking") => match c.get("thinking") {
                        Some(Value::String(s)) => out.push((true, s.as_str())),
                        Some(Value::Array(inner)) => {
                            for t in inner {
                                out.push((
                                    true,
                                    t.get("text").and_then(Value::as_str).unwrap_or(""),
                                ));
                            }
                        }
                        _ => {}
                    },
                    // Images, references … are not text.
                    _ => {}
                }
            }
        }
        Some(_) => {
            return Err(ProviderError::malformed(
                "content that is neither text nor an array",
            ));
        }
    }
    out.retain(|(_, t)| !t.is_empty());
    Ok(out)
}

/// Chat usage: `prompt_tokens` include the cached ones (DeepSeek names
/// them `prompt_cache_hit_tokens`).
fn chat_usage(u: &Map<String, Value>) -> Usage {
    let details = |k: &str, f: &str| u.get(k).and_then(|d| d.get(f)).and_then(Value::as_u64);
    let cached = details("prompt_tokens_details", "cached_tokens")
        .or_else(|| u64_of(u, "prompt_cache_hit_tokens"));
    let prompt = u64_of(u, "prompt_tokens");
    usage(
        prompt.map(|p| p.saturating_sub(cached.unwrap_or(0))),
        cached,
        None,
        u64_of(u, "completion_tokens"),
        details("completion_tokens_details", "reasoning_tokens"),
    )
}

/// The streaming request body.
pub fn encode(request: &TurnRequest<'_>) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = &request.conversation.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    for turn in &request.conversation.turns {
        match turn {
            Turn::User { text } => messages.push(json!({"role": "user", "content": text})),
            Turn::Assistant { parts } => {
                let mut texts = Vec::new();
                let mut calls = Vec::new();
                for p in parts {
                    match p {
                        AssistantPart::Text { text, .. } if !text.is_empty() => {
                            texts.push(text.as_str())
                        }
                        AssistantPart::ToolCall {
                            id,
                            name,
                            arguments,
                            ..
                        } => calls.push(json!({
                            "id": id,
                            "type": "function",
                            "function": {"name": name, "arguments": arguments},
                        })),
                        // The format has no field for reasoning sent back.
                        _ => {}
                    }
                }
                if texts.is_empty() && calls.is_empty() {
                    continue;
                }
                let mut m = json!({"role": "assistant"});
                m["content"] = if texts.is_empty() {
                    Value::Null
                } else {
                    Value::String(texts.join("\n\n"))
                };
                if !calls.is_empty() {
                    m["tool_calls"] = Value::Array(calls);
                }
                messages.push(m);
            }
            Turn::ToolResults { results } => {
                for r in results {
                    messages.push(
                        json!({"role": "tool", "tool_call_id": r.call_id, "content": r.output}),
                    );
                }
            }
        }
    }
    let mut body = json!({
        "model": request.model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
        "max_completion_tokens": request.max_tokens,
    });
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| {
                let mut f = json!({"name": t.name});
                if let Some(d) = &t.description {
                    f["description"] = json!(d);
                }
                f["parameters"] = t.input_schema.clone();
                json!({"type": "function", "function": f})
            })
            .collect();
    }
    if let Some(e) = parts::openai_effort(request.effort) {
        body["reasoning_effort"] = json!(e);
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::StreamLine;
    use crate::chat::input::AssistantMessageEvent as E;
    use crate::provider::{Conversation, ToolResultItem, ToolSpec};

    fn decode(frames: &[&str]) -> (Vec<Output>, Result<Finish, ProviderError>) {
        crate::provider::parts::decode_frames(ChatDecoder::default(), frames)
    }

    fn history() -> Conversation {
        Conversation {
            system: Some("Be brief.".into()),
            turns: vec![
                Turn::User {
                    text: "Weather in Oslo?".into(),
                },
                Turn::Assistant {
                    parts: vec![
                        AssistantPart::Reasoning {
                            text: "Need the tool.".into(),
                            provider_data: Some(r#"{"signature":"abc"}"#.into()),
                        },
                        AssistantPart::Text {
                            text: "Checking.".into(),
                            provider_data: Some(r#"{"id":"msg_1"}"#.into()),
                        },
                        AssistantPart::ToolCall {
                            id: "call_9".into(),
                            name: "weather".into(),
                            arguments: r#"{"city":"Oslo"}"#.into(),
                            provider_data: Some("not json".into()),
                        },
                    ],
                },
                Turn::ToolResults {
                    results: vec![ToolResultItem {
                        call_id: "call_9".into(),
                        name: "weather".into(),
                        output: "4 °C".into(),
                        is_error: false,
                    }],
                },
                Turn::Assistant {
                    parts: vec![AssistantPart::Reasoning {
                        text: "only thoughts".into(),
                        provider_data: None,
                    }],
                },
            ],
        }
    }

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "weather".into(),
            description: Some("Current weather".into()),
            input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        }]
    }

    #[test]
    fn encodes_history_tools_and_effort() {
        let c = history();
        let tools = tools();
        let request = TurnRequest {
            model: "gpt-4.1",
            conversation: &c,
            tools: &tools,
            effort: Some("max"),
            max_tokens: 1000,
        };
        let body = encode(&request);
        assert_eq!(
            body,
            json!({
                "model": "gpt-4.1",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Weather in Oslo?"},
                    {"role": "assistant", "content": "Checking.", "tool_calls": [
                        {"id": "call_9", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "call_9", "content": "4 °C"},
                ],
                "stream": true,
                "stream_options": {"include_usage": true},
                "max_completion_tokens": 1000,
                "tools": [{"type": "function", "function": {
                    "name": "weather", "description": "Current weather",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}
                }}],
                "reasoning_effort": "high",
            })
        );
        for (effort, want) in [
            (None, None),
            (Some("none"), None),
            (Some("low"), Some("low")),
            (Some("medium"), Some("medium")),
            (Some("high"), Some("high")),
        ] {
            let r = TurnRequest {
                effort,
                tools: &[],
                ..request.clone()
            };
            let b = encode(&r);
            assert_eq!(
                b.get("reasoning_effort").and_then(Value::as_str),
                want,
                "{effort:?}"
            );
            assert!(b.get("tools").is_none());
        }
    }

    #[test]
    fn a_call_without_text_has_null_content() {
        let c = Conversation {
            system: None,
            turns: vec![Turn::Assistant {
                parts: vec![AssistantPart::ToolCall {
                    id: "c".into(),
                    name: "n".into(),
                    arguments: "{}".into(),
                    provider_data: None,
                }],
            }],
        };
        let body = encode(&TurnRequest {
            model: "m",
            conversation: &c,
            tools: &[],
            effort: None,
            max_tokens: 5,
        });
        assert_eq!(body["messages"][0]["content"], Value::Null);
        assert!(body.get("reasoning_effort").is_none());
    }

    #[test]
    fn the_usage_chunk_comes_after_finish_reason() {
        let (out, end) = decode(&[
            r#"{"id":"c","model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
            r#"{"id":"c","model":"gpt-4o","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#,
            r#"{"id":"c","model":"gpt-4o","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            r#"{"id":"c","model":"gpt-4o","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":4}}}"#,
            "[DONE]",
            "[DONE]",
        ]);
        assert_eq!(end, Ok(Finish::Ended));
        assert!(
            matches!(&out[0], Output::Line(StreamLine::Model(m)) if m.provider == "openai-chat" && m.id == "gpt-4o")
        );
        assert!(
            matches!(&out[3], Output::Line(StreamLine::Event(E::TextEnd { content, .. })) if content == "Hi")
        );
        let Output::End { stop_reason, usage } = out.last().unwrap() else {
            panic!()
        };
        assert_eq!(*stop_reason, MessageStopReason::Stop);
        let u = usage.as_ref().unwrap();
        assert_eq!(
            (u.input_tokens, u.cache_read_tokens, u.output_tokens),
            (Some(6), Some(4), Some(2))
        );
    }

    #[test]
    fn content_arrays_carry_thinking_and_text() {
        let (out, end) = decode(&[
            r#"{"model":"magistral-medium-2507","choices":[{"index":0,"delta":{"role":"assistant","content":[{"type":"thinking","thinking":[{"type":"text","text":"Hmm."}]}]}}]}"#,
            r#"{"model":"magistral-medium-2507","choices":[{"index":0,"delta":{"content":[{"type":"text","text":"Yes."}]},"finish_reason":"stop"}]}"#,
            "[DONE]",
        ]);
        assert_eq!(end, Ok(Finish::Ended));
        assert!(
            matches!(&out[3], Output::Line(StreamLine::Event(E::ThinkingEnd { content, .. })) if content == "Hmm.")
        );
        assert!(
            matches!(&out[6], Output::Line(StreamLine::Event(E::TextEnd { content, .. })) if content == "Yes.")
        );
    }

    #[test]
    fn after_the_end_only_done_is_quiet() {
        let (_, end) = decode(&[
            r#"{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}"#,
            "[DONE]",
            r#"{"choices":[]}"#,
        ]);
        assert!(end.is_err());
        let (out, end) = decode(&[r#"{"choices":[{"index":0,"delta":{"content":"a"}}]}"#]);
        assert_eq!(end, Ok(Finish::Cut));
        assert!(!out.iter().any(|o| matches!(o, Output::End { .. })));
    }

    #[test]
    fn bad_arguments_are_an_error_not_repaired() {
        let (_, end) = decode(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"x\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        ]);
        assert!(end.unwrap_err().message.contains("not a JSON object"));
        // At a length stop the cut call stays open instead.
        let (out, end) = decode(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"x\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#,
        ]);
        assert_eq!(end, Ok(Finish::Ended));
        assert!(
            !out.iter()
                .any(|o| matches!(o, Output::Line(StreamLine::Event(E::ToolcallEnd { .. }))))
        );
    }

    #[test]
    fn garbage_never_panics() {
        let samples = [
            r#"{"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"Hi","reasoning_content":"r"},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"1"}}]},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":0}}"#,
            r#"{"error":{"message":"x","type":"server_error"}}"#,
            "[DONE]",
            "null",
        ];
        for seed in 0..40 {
            let frames = parts::garbage(seed, &samples, 30);
            let mut d = ChatDecoder::default();
            let mut out = Vec::new();
            for f in &frames {
                let _ = d.feed(
                    Frame {
                        event: None,
                        data: f,
                    },
                    &mut out,
                );
            }
            let _ = d.finish(&mut out);
        }
    }
}
