//! Ollama's native chat (`POST /api/chat`, `stream: true`): NDJSON.
//!
//! Each line is `{model, created_at, message: {role, content, thinking?,
//! tool_calls?}, done: false}`; the last has `done: true`, `done_reason`
//! and the counts. A failure is a line `{"error": "…"}`. Tool calls come
//! whole (arguments as an object) in one message; calls without an `id`
//! get `call_0`, `call_1` … in the order of the turn.

use serde_json::{Map, Value, json};

use super::parts::{
    Parts, bad_arguments, model_line, obj, parse_frame, says_context_too_large, short, str_of,
    u64_of, usage,
};
use super::{AssistantPart, Decoder, Finish, Frame, Output, ProviderError, Turn, TurnRequest};
use crate::lexicon::chat::gel::assistant::message::MessageStopReason;
use crate::lexicon::chat::gel::assistant::subscribe_reply::ErrorCode;

/// The `provider` the records name for this format.
pub const PROVIDER: &str = "ollama";

/// Decodes one `/api/chat` stream.
#[derive(Debug, Default)]
pub struct ChatDecoder {
    parts: Parts,
    model_seen: bool,
    /// The text or thinking part open now.
    open: Option<usize>,
    calls: usize,
    ended: bool,
}

impl ChatDecoder {
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

    fn call(&mut self, call: &Value, out: &mut Vec<Output>) -> Result<(), ProviderError> {
        let call = obj(call, "a tool call")?;
        let f = obj(
            call.get("function").unwrap_or(&Value::Null),
            "a tool call's function",
        )?;
        let name = str_of(f, "name")
            .filter(|s| !s.is_empty())
            .ok_or_else(|| ProviderError::malformed("a tool call without a name"))?;
        let id = str_of(call, "id")
            .filter(|s| !s.is_empty())
            .map_or_else(|| format!("call_{}", self.calls), str::to_owned);
        let arguments = match f.get("arguments") {
            None | Some(Value::Null) => "{}".to_owned(),
            Some(v @ Value::Object(_)) => v.to_string(),
            // Some builds send the arguments as JSON text.
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(bad_arguments(&id, "not a JSON object")),
        };
        self.close_open(out)?;
        self.calls += 1;
        let part = self.parts.start_call(&id, name, out);
        self.parts.push(part, &arguments, out);
        self.parts
            .end_call(part, None, out)
            .map_err(|reason| bad_arguments(&id, &reason))
    }

    fn line(
        &mut self,
        line: &Map<String, Value>,
        out: &mut Vec<Output>,
    ) -> Result<(), ProviderError> {
        if !self.model_seen
            && let Some(m) = str_of(line, "model").filter(|m| !m.is_empty())
        {
            self.model_seen = true;
            out.push(model_line(PROVIDER, m));
        }
        if let Some(m) = line.get("message").filter(|m| !m.is_null()) {
            let m = obj(m, "a message")?;
            if let Some(t) = str_of(m, "thinking").filter(|t| !t.is_empty()) {
                self.text(true, t, out)?;
            }
            if let Some(t) = str_of(m, "content").filter(|t| !t.is_empty()) {
                self.text(false, t, out)?;
            }
            match m.get("tool_calls") {
                None | Some(Value::Null) => {}
                Some(Value::Array(calls)) => {
                    for c in calls {
                        self.call(c, out)?;
                    }
                }
                Some(_) => return Err(ProviderError::malformed("tool_calls that is not an array")),
            }
        }
        if line.get("done").and_then(Value::as_bool) == Some(true) {
            let length = str_of(line, "done_reason") == Some("length");
            self.open = None;
            self.parts.close_all(length, out)?;
            let stop = if length {
                MessageStopReason::Length
            } else {
                self.parts.stop()
            };
            let (input, output) = (
                u64_of(line, "prompt_eval_count"),
                u64_of(line, "eval_count"),
            );
            let usage = (input.is_some() || output.is_some())
                .then(|| usage(input, None, None, output, None));
            out.push(Output::End {
                stop_reason: stop,
                usage,
            });
            self.ended = true;
        }
        Ok(())
    }
}

impl Decoder for ChatDecoder {
    fn feed(&mut self, frame: Frame<'_>, out: &mut Vec<Output>) -> Result<(), ProviderError> {
        let data = frame.data.trim();
        if data.is_empty() {
            return Ok(());
        }
        if self.ended {
            return Err(ProviderError::malformed("a line after done"));
        }
        let v = parse_frame(data)?;
        let line = obj(&v, "a line")?;
        if let Some(e) = line.get("error").filter(|e| !e.is_null()) {
            let message = e
                .as_str()
                .or_else(|| e.get("message").and_then(Value::as_str))
                .unwrap_or("an error");
            let code = if says_context_too_large(message) {
                ErrorCode::AssistantContextTooLarge
            } else {
                ErrorCode::AssistantProvider
            };
            return Err(ProviderError::new(
                code,
                format!("Ollama reported: {}", short(message)),
            ));
        }
        self.line(line, out)
    }

    fn finish(&mut self, _out: &mut Vec<Output>) -> Result<Finish, ProviderError> {
        Ok(if self.ended {
            Finish::Ended
        } else {
            Finish::Cut
        })
    }
}

fn joined<'a>(texts: impl Iterator<Item = &'a String>) -> String {
    texts
        .filter(|t| !t.is_empty())
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join("\n\n")
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
                let content = joined(parts.iter().filter_map(|p| match p {
                    AssistantPart::Text { text, .. } => Some(text),
                    _ => None,
                }));
                let thinking = joined(parts.iter().filter_map(|p| match p {
                    AssistantPart::Reasoning { text, .. } => Some(text),
                    _ => None,
                }));
                let calls: Vec<Value> = parts
                    .iter()
                    .filter_map(|p| match p {
                        AssistantPart::ToolCall { id, name, arguments, .. } => {
                            let arguments = match serde_json::from_str::<Value>(arguments) {
                                Ok(v @ Value::Object(_)) => v,
                                _ => json!({}),
                            };
                            Some(json!({"id": id, "function": {"name": name, "arguments": arguments}}))
                        }
                        _ => None,
                    })
                    .collect();
                if content.is_empty() && thinking.is_empty() && calls.is_empty() {
                    continue;
                }
                let mut m = json!({"role": "assistant", "content": content});
                if !thinking.is_empty() {
                    m["thinking"] = json!(thinking);
                }
                if !calls.is_empty() {
                    m["tool_calls"] = Value::Array(calls);
                }
                messages.push(m);
            }
            Turn::ToolResults { results } => {
                for r in results {
                    messages.push(json!({
                        "role": "tool",
                        "content": r.output,
                        "tool_name": r.name,
                        "tool_call_id": r.call_id,
                    }));
                }
            }
        }
    }
    let mut body = json!({"model": request.model, "messages": messages});
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
    body["stream"] = json!(true);
    if let Some(effort) = request.effort {
        body["think"] = json!(effort != "none");
    }
    body["options"] = json!({"num_predict": request.max_tokens});
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::StreamLine;
    use crate::chat::input::AssistantMessageEvent as E;
    use crate::provider::parts::garbage;
    use crate::provider::{Conversation, ToolResultItem, ToolSpec};

    fn decode(lines: &[&str]) -> (Vec<Output>, Result<Finish, ProviderError>) {
        crate::provider::parts::decode_frames(ChatDecoder::default(), lines)
    }

    #[test]
    fn encodes_history_tools_and_think() {
        let c = Conversation {
            system: Some("Be brief.".into()),
            turns: vec![
                Turn::User {
                    text: "Weather?".into(),
                },
                Turn::Assistant {
                    parts: vec![
                        AssistantPart::Reasoning {
                            text: "Use the tool.".into(),
                            provider_data: Some(r#"{"signature":"x"}"#.into()),
                        },
                        AssistantPart::Text {
                            text: "Checking.".into(),
                            provider_data: Some("{}".into()),
                        },
                        AssistantPart::ToolCall {
                            id: "call_0".into(),
                            name: "weather".into(),
                            arguments: r#"{"city":"Oslo"}"#.into(),
                            provider_data: None,
                        },
                    ],
                },
                Turn::ToolResults {
                    results: vec![ToolResultItem {
                        call_id: "call_0".into(),
                        name: "weather".into(),
                        output: "4 °C".into(),
                        is_error: false,
                    }],
                },
            ],
        };
        let tools = vec![ToolSpec {
            name: "weather".into(),
            description: Some("Current weather".into()),
            input_schema: json!({"type": "object"}),
        }];
        let body = encode(&TurnRequest {
            model: "qwen3:8b",
            conversation: &c,
            tools: &tools,
            effort: Some("none"),
            max_tokens: 512,
        });
        assert_eq!(
            body,
            json!({
                "model": "qwen3:8b",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Weather?"},
                    {"role": "assistant", "content": "Checking.", "thinking": "Use the tool.", "tool_calls": [
                        {"id": "call_0", "function": {"name": "weather", "arguments": {"city": "Oslo"}}}
                    ]},
                    {"role": "tool", "content": "4 °C", "tool_name": "weather", "tool_call_id": "call_0"},
                ],
                "tools": [{"type": "function", "function": {"name": "weather", "description": "Current weather", "parameters": {"type": "object"}}}],
                "stream": true,
                "think": false,
                "options": {"num_predict": 512},
            })
        );
        for (effort, think) in [
            (None, None),
            (Some("low"), Some(true)),
            (Some("max"), Some(true)),
        ] {
            let b = encode(&TurnRequest {
                model: "m",
                conversation: &c,
                tools: &[],
                effort,
                max_tokens: 1,
            });
            assert_eq!(b.get("think").and_then(Value::as_bool), think);
        }
    }

    #[test]
    fn calls_get_ids_in_turn_order() {
        let (out, end) = decode(&[
            r#"{"model":"llama3.1:8b","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"a","arguments":{}}},{"id":"call_x","function":{"name":"b","arguments":{"q":1}}},{"function":{"name":"c"}}]},"done":false}"#,
            r#"{"model":"llama3.1:8b","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":7,"eval_count":3}"#,
        ]);
        assert_eq!(end, Ok(Finish::Ended));
        let ids: Vec<&str> = out
            .iter()
            .filter_map(|o| match o {
                Output::Line(StreamLine::Event(E::ToolcallEnd { tool_call, .. })) => {
                    Some(tool_call.id.as_str())
                }
                _ => None,
            })
            .collect();
        assert_eq!(ids, ["call_0", "call_x", "call_2"]);
        assert!(matches!(
            out.last(),
            Some(Output::End {
                stop_reason: MessageStopReason::ToolUse,
                ..
            })
        ));
    }

    #[test]
    fn arguments_that_are_not_an_object_fail() {
        let (_, end) = decode(&[
            r#"{"model":"m","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"a","arguments":[1]}}]},"done":false}"#,
        ]);
        assert!(end.is_err());
        let (_, end) = decode(&[r#"{"error":"model 'x' not found"}"#]);
        assert!(end.unwrap_err().message.contains("model 'x' not found"));
    }

    #[test]
    fn garbage_never_panics() {
        let samples = [
            r#"{"model":"m","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":"a","thinking":"b"},"done":false}"#,
            r#"{"model":"m","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{"x":0}}}]},"done":false}"#,
            r#"{"model":"m","message":{"role":"assistant","content":""},"done":true,"done_reason":"length","prompt_eval_count":0,"eval_count":0}"#,
            r#"{"error":"boom"}"#,
        ];
        for seed in 0..40 {
            let mut d = ChatDecoder::default();
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
