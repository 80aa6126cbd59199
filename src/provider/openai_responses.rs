//! OpenAI Responses (`POST /responses`, `stream: true`): typed SSE events.
//!
//! Output items (`message`, `reasoning`, `function_call`) are announced by
//! `response.output_item.added` and closed by `response.output_item.done`;
//! text streams per content part (`response.output_text.delta/.done`),
//! reasoning as summary or reasoning text deltas, call arguments as
//! `response.function_call_arguments.delta/.done`. The turn ends with
//! `response.completed`, `response.incomplete` or `response.failed`.
//!
//! We ask with `store: false`, so nothing is kept server-side: a reasoning
//! item's `encrypted_content` (and its id) is the part's provider data and
//! goes back in the next request, as does a call item's `fc_…` id.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value, json};

use super::parts::{
    Parts, bad_arguments, model_line, obj, openai_effort, openai_error, parse_frame, provider_data,
    refused, str_of, u64_of, usage,
};
use super::{AssistantPart, Decoder, Finish, Frame, Output, ProviderError, Turn, TurnRequest};
use crate::lexicon::chat::gel::assistant::message::MessageStopReason;
use crate::lexicon::chat::gel::assistant::subscribe_reply::ErrorCode;

/// The `provider` the records name for this format.
pub const PROVIDER: &str = "openai";

#[derive(Debug)]
enum Item {
    /// A message: our text part for each `output_text` content index.
    Message { texts: BTreeMap<u64, usize> },
    Reasoning {
        part: usize,
        /// The summary (or reasoning-text) piece the deltas are in, to
        /// separate pieces with a blank line.
        piece: Option<(bool, u64)>,
    },
    Call {
        part: usize,
        item_id: Option<String>,
    },
    /// Items we do not ask for (built-in tools …).
    Other,
}

/// Decodes one Responses stream.
#[derive(Debug, Default)]
pub struct ResponsesDecoder {
    parts: Parts,
    model_seen: bool,
    /// By `output_index`.
    items: HashMap<u64, Item>,
    /// Item id → `output_index`, for events that name only the id.
    ids: HashMap<String, u64>,
    ended: bool,
}

impl ResponsesDecoder {
    fn model(&mut self, response: Option<&Value>, out: &mut Vec<Output>) {
        if self.model_seen {
            return;
        }
        if let Some(m) = response
            .and_then(|r| r.get("model"))
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty())
        {
            self.model_seen = true;
            out.push(model_line(PROVIDER, m));
        }
    }

    /// The `output_index` an event addresses.
    fn index_of(&self, e: &Map<String, Value>) -> Result<u64, ProviderError> {
        if let Some(i) = u64_of(e, "output_index") {
            return Ok(i);
        }
        str_of(e, "item_id")
            .and_then(|id| self.ids.get(id).copied())
            .ok_or_else(|| ProviderError::malformed("an event for no known output item"))
    }

    fn item(&mut self, e: &Map<String, Value>) -> Result<&mut Item, ProviderError> {
        let i = self.index_of(e)?;
        self.items.get_mut(&i).ok_or_else(|| {
            ProviderError::malformed(format!("an event for output item {i} before it was added"))
        })
    }

    fn added(
        &mut self,
        index: u64,
        item: &Map<String, Value>,
        out: &mut Vec<Output>,
    ) -> Result<(), ProviderError> {
        if self.items.contains_key(&index) {
            return Err(ProviderError::malformed(format!(
                "output item {index} added twice"
            )));
        }
        if let Some(id) = str_of(item, "id") {
            self.ids.insert(id.to_owned(), index);
        }
        let state = match str_of(item, "type").unwrap_or("") {
            "message" => Item::Message {
                texts: BTreeMap::new(),
            },
            "reasoning" => Item::Reasoning {
                part: self.parts.start_thinking(out),
                piece: None,
            },
            "function_call" => {
                let id = str_of(item, "call_id")
                    .or_else(|| str_of(item, "id"))
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| {
                        ProviderError::malformed("a function_call item without a call_id")
                    })?;
                let name = str_of(item, "name")
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| {
                        ProviderError::malformed("a function_call item without a name")
                    })?;
                let part = self.parts.start_call(id, name, out);
                self.parts
                    .push(part, str_of(item, "arguments").unwrap_or(""), out);
                Item::Call {
                    part,
                    item_id: str_of(item, "id").map(str::to_owned),
                }
            }
            _ => Item::Other,
        };
        self.items.insert(index, state);
        Ok(())
    }

    /// Our text part for content part `content` of a message item,
    /// started if new.
    fn text_part(
        &mut self,
        e: &Map<String, Value>,
        out: &mut Vec<Output>,
    ) -> Result<usize, ProviderError> {
        let content = u64_of(e, "content_index").unwrap_or(0);
        let i = self.index_of(e)?;
        let Some(Item::Message { texts }) = self.items.get_mut(&i) else {
            return match self.items.get(&i) {
                None => Err(ProviderError::malformed(format!(
                    "text for output item {i} before it was added"
                ))),
                Some(_) => Err(ProviderError::malformed(format!(
                    "text for output item {i}, which is not a message"
                ))),
            };
        };
        if let Some(&part) = texts.get(&content) {
            return Ok(part);
        }
        let part = self.parts.start_text(out);
        texts.insert(content, part);
        Ok(part)
    }

    fn reasoning_delta(
        &mut self,
        e: &Map<String, Value>,
        summary: bool,
        out: &mut Vec<Output>,
    ) -> Result<(), ProviderError> {
        let key = (
            summary,
            u64_of(
                e,
                if summary {
                    "summary_index"
                } else {
                    "content_index"
                },
            )
            .unwrap_or(0),
        );
        let delta = str_of(e, "delta").unwrap_or("");
        let Item::Reasoning { part, piece } = self.item(e)? else {
            return Err(ProviderError::malformed(
                "reasoning for an output item that is not reasoning",
            ));
        };
        let part = *part;
        let new_piece = *piece != Some(key);
        *piece = Some(key);
        if !self.parts.is_open(part) {
            return Err(ProviderError::malformed(
                "reasoning after its item was done",
            ));
        }
        if new_piece && self.parts.has_text(part) && !delta.is_empty() {
            self.parts.push(part, "\n\n", out);
        }
        self.parts.push(part, delta, out);
        Ok(())
    }

    fn end_call(
        &mut self,
        part: usize,
        item_id: Option<&str>,
        arguments: Option<&str>,
        incomplete: bool,
        out: &mut Vec<Output>,
    ) -> Result<(), ProviderError> {
        if !self.parts.is_open(part) {
            return Ok(());
        }
        match self.parts.end_call(part, arguments, out) {
            Ok(()) => {
                if let Some(id) = item_id {
                    out.push(provider_data(part, &json!({"id": id})));
                }
                Ok(())
            }
            // A call cut by max_output_tokens: kept open, never runs.
            Err(_) if incomplete => Ok(()),
            Err(reason) => Err(bad_arguments(self.parts.call_id(part), &reason)),
        }
    }

    fn item_done(
        &mut self,
        index: u64,
        item: &Map<String, Value>,
        out: &mut Vec<Output>,
    ) -> Result<(), ProviderError> {
        if !self.items.contains_key(&index) {
            // Announced only by its done: take it as added now.
            self.added(index, item, out)?;
        }
        let texts = |key: &str, kind: &str| -> Vec<(u64, String)> {
            item.get(key)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .enumerate()
                        .filter(|(_, c)| c.get("type").and_then(Value::as_str) == Some(kind))
                        .filter_map(|(n, c)| Some((n as u64, c.get("text")?.as_str()?.to_owned())))
                        .collect()
                })
                .unwrap_or_default()
        };
        match self.items.get(&index) {
            Some(Item::Message { .. }) => {
                if let Some(r) = texts("content", "refusal").first() {
                    return Err(refused(&format!("the model refused: {}", r.1)));
                }
                let mut seen = match self.items.get_mut(&index) {
                    Some(Item::Message { texts }) => std::mem::take(texts),
                    _ => BTreeMap::new(),
                };
                for (content, text) in texts("content", "output_text") {
                    let part = match seen.get(&content) {
                        Some(&part) => part,
                        None => {
                            // Text the server did not stream.
                            let part = self.parts.start_text(out);
                            self.parts.push(part, &text, out);
                            seen.insert(content, part);
                            part
                        }
                    };
                    self.parts.end(part, Some(text), out);
                }
                for &part in seen.values() {
                    self.parts.end(part, None, out);
                }
                if let Some(Item::Message { texts }) = self.items.get_mut(&index) {
                    *texts = seen;
                }
            }
            Some(Item::Reasoning { part, .. }) => {
                let part = *part;
                let join = |v: Vec<(u64, String)>| {
                    let v: Vec<String> = v
                        .into_iter()
                        .map(|(_, t)| t)
                        .filter(|t| !t.is_empty())
                        .collect();
                    (!v.is_empty()).then(|| v.join("\n\n"))
                };
                let text = join(texts("summary", "summary_text"))
                    .or_else(|| join(texts("content", "reasoning_text")));
                if self.parts.is_open(part) {
                    self.parts.end(part, text, out);
                    let mut data = Map::new();
                    if let Some(id) = str_of(item, "id") {
                        data.insert("id".into(), json!(id));
                    }
                    if let Some(c) = str_of(item, "encrypted_content") {
                        data.insert("encryptedContent".into(), json!(c));
                    }
                    if !data.is_empty() {
                        out.push(provider_data(part, &Value::Object(data)));
                    }
                }
            }
            Some(Item::Call { part, item_id }) => {
                let (part, item_id) = (*part, item_id.clone());
                let incomplete = str_of(item, "status") == Some("incomplete");
                self.end_call(
                    part,
                    item_id.as_deref(),
                    str_of(item, "arguments"),
                    incomplete,
                    out,
                )?;
            }
            Some(Item::Other) | None => {}
        }
        Ok(())
    }

    fn end(
        &mut self,
        stop: MessageStopReason,
        response: Option<&Value>,
        out: &mut Vec<Output>,
    ) -> Result<(), ProviderError> {
        self.model(response, out);
        let length = stop == MessageStopReason::Length;
        // Parts the server left open close in order; calls with their item ids.
        let calls: HashMap<usize, Option<String>> = self
            .items
            .values()
            .filter_map(|item| match item {
                Item::Call { part, item_id } => Some((*part, item_id.clone())),
                _ => None,
            })
            .collect();
        for i in 0..self.parts.len() {
            match calls.get(&i) {
                Some(id) => self.end_call(i, id.as_deref(), None, length, out)?,
                None => self.parts.close(i, length, out)?,
            }
        }
        let stop = if length { stop } else { self.parts.stop() };
        let usage = response
            .and_then(|r| r.get("usage"))
            .and_then(Value::as_object)
            .map(|u| {
                let details =
                    |k: &str, f: &str| u.get(k).and_then(|d| d.get(f)).and_then(Value::as_u64);
                let cached = details("input_tokens_details", "cached_tokens");
                usage(
                    u64_of(u, "input_tokens").map(|n| n.saturating_sub(cached.unwrap_or(0))),
                    cached,
                    None,
                    u64_of(u, "output_tokens"),
                    details("output_tokens_details", "reasoning_tokens"),
                )
            });
        out.push(Output::End {
            stop_reason: stop,
            usage,
        });
        self.ended = true;
        Ok(())
    }

    fn event(
        &mut self,
        kind: &str,
        e: &Map<String, Value>,
        out: &mut Vec<Output>,
    ) -> Result<(), ProviderError> {
        match kind {
            "response.created" | "response.in_progress" | "response.queued" => {
                self.model(e.get("response"), out)
            }
            "response.output_item.added" | "response.output_item.done" => {
                let index = u64_of(e, "output_index").ok_or_else(|| {
                    ProviderError::malformed(format!("{kind} without an output_index"))
                })?;
                let item = obj(e.get("item").unwrap_or(&Value::Null), "an output item")?;
                if kind.ends_with("added") {
                    self.added(index, item, out)?;
                } else {
                    self.item_done(index, item, out)?;
                }
            }
            "response.content_part.added" | "response.content_part.done" => {
                let p = e.get("part");
                if p.and_then(|p| p.get("type")).and_then(Value::as_str) == Some("output_text") {
                    let part = self.text_part(e, out)?;
                    let text = p.and_then(|p| p.get("text")).and_then(Value::as_str);
                    if kind.ends_with("added") {
                        self.parts.push(part, text.unwrap_or(""), out);
                    } else {
                        self.parts.end(part, text.map(str::to_owned), out);
                    }
                }
            }
            "response.output_text.delta" => {
                let part = self.text_part(e, out)?;
                if !self.parts.is_open(part) {
                    return Err(ProviderError::malformed("text after its part was done"));
                }
                self.parts.push(part, str_of(e, "delta").unwrap_or(""), out);
            }
            "response.output_text.done" => {
                let part = self.text_part(e, out)?;
                self.parts
                    .end(part, str_of(e, "text").map(str::to_owned), out);
            }
            "response.refusal.done" => {
                return Err(refused(&format!(
                    "the model refused: {}",
                    str_of(e, "refusal").unwrap_or("")
                )));
            }
            "response.reasoning_summary_text.delta" => self.reasoning_delta(e, true, out)?,
            "response.reasoning_text.delta" => self.reasoning_delta(e, false, out)?,
            "response.function_call_arguments.delta" | "response.function_call_arguments.done" => {
                let Item::Call { part, item_id } = self.item(e)? else {
                    return Err(ProviderError::malformed(
                        "arguments for an output item that is not a function call",
                    ));
                };
                let (part, item_id) = (*part, item_id.clone());
                if kind.ends_with("delta") {
                    if !self.parts.is_open(part) {
                        return Err(ProviderError::malformed(
                            "arguments after the call was done",
                        ));
                    }
                    self.parts.push(part, str_of(e, "delta").unwrap_or(""), out);
                } else {
                    self.end_call(part, item_id.as_deref(), str_of(e, "arguments"), false, out)?;
                }
            }
            "response.completed" => self.end(MessageStopReason::Stop, e.get("response"), out)?,
            "response.incomplete" => {
                let response = e.get("response");
                let reason = response
                    .and_then(|r| r.get("incomplete_details"))
                    .and_then(|d| d.get("reason"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if reason == "content_filter" {
                    return Err(ProviderError::new(
                        ErrorCode::AssistantProvider,
                        "the content filter stopped the model (OpenAI response incomplete: content_filter)",
                    ));
                }
                self.end(MessageStopReason::Length, response, out)?;
            }
            "response.failed" => {
                let error = e
                    .get("response")
                    .and_then(|r| r.get("error"))
                    .filter(|x| !x.is_null());
                return Err(match error {
                    Some(x) => openai_error(x, "OpenAI"),
                    None => openai_error(&json!({"code": "response.failed"}), "OpenAI"),
                });
            }
            "error" => {
                // The event's own fields, or (some versions) an `error` object.
                let error = e
                    .get("error")
                    .filter(|x| x.is_object())
                    .cloned()
                    .unwrap_or_else(|| Value::Object(e.clone()));
                return Err(openai_error(&error, "OpenAI"));
            }
            // Lifecycle, annotations, refusal deltas, built-in tools' progress.
            _ => {}
        }
        Ok(())
    }
}

/// Events that carry content (after the end they break the format).
fn is_content(kind: &str) -> bool {
    [
        "response.output_",
        "response.content_part",
        "response.function_call_arguments",
        "response.reasoning",
        "response.refusal",
    ]
    .iter()
    .any(|p| kind.starts_with(p))
}

impl Decoder for ResponsesDecoder {
    fn feed(&mut self, frame: Frame<'_>, out: &mut Vec<Output>) -> Result<(), ProviderError> {
        let data = frame.data.trim();
        if data == "[DONE]" || data.is_empty() || data == "null" {
            return Ok(());
        }
        let v = parse_frame(data)?;
        let e = obj(&v, "an event")?;
        let kind = str_of(e, "type").or(frame.event).unwrap_or("");
        if self.ended {
            return if is_content(kind) {
                Err(ProviderError::malformed(format!(
                    "{kind} after the response ended"
                )))
            } else {
                Ok(())
            };
        }
        self.event(kind, e, out)
    }

    fn finish(&mut self, _out: &mut Vec<Output>) -> Result<Finish, ProviderError> {
        Ok(if self.ended {
            Finish::Ended
        } else {
            Finish::Cut
        })
    }
}

/// The reasoning item for a part's provider data, if it has what a
/// stateless request needs (the encrypted content).
fn reasoning_item(text: &str, provider_data: Option<&str>) -> Option<Value> {
    let data: Value = serde_json::from_str(provider_data?).ok()?;
    let encrypted = data.get("encryptedContent")?.as_str()?;
    let mut item = json!({"type": "reasoning"});
    if let Some(id) = data.get("id").and_then(Value::as_str) {
        item["id"] = json!(id);
    }
    item["summary"] = if text.is_empty() {
        json!([])
    } else {
        json!([{"type": "summary_text", "text": text}])
    };
    item["encrypted_content"] = json!(encrypted);
    Some(item)
}

/// The `fc_…` id kept with a call, if its provider data has one.
fn call_item_id(provider_data: Option<&str>) -> Option<String> {
    let data: Value = serde_json::from_str(provider_data?).ok()?;
    Some(data.get("id")?.as_str()?.to_owned())
}

/// The streaming request body.
pub fn encode(request: &TurnRequest<'_>) -> Value {
    let mut input = Vec::new();
    for turn in &request.conversation.turns {
        match turn {
            Turn::User { text } => input
                .push(json!({"role": "user", "content": [{"type": "input_text", "text": text}]})),
            Turn::Assistant { parts } => {
                for p in parts {
                    match p {
                        AssistantPart::Text { text, .. } => {
                            if !text.is_empty() {
                                input.push(json!({
                                    "type": "message",
                                    "role": "assistant",
                                    "content": [{"type": "output_text", "text": text}],
                                }));
                            }
                        }
                        AssistantPart::Reasoning {
                            text,
                            provider_data,
                        } => {
                            // Without its encrypted content a reasoning item cannot be sent.
                            if let Some(item) = reasoning_item(text, provider_data.as_deref()) {
                                input.push(item);
                            }
                        }
                        AssistantPart::ToolCall {
                            id,
                            name,
                            arguments,
                            provider_data,
                        } => {
                            let mut item = json!({"type": "function_call"});
                            if let Some(fc) = call_item_id(provider_data.as_deref()) {
                                item["id"] = json!(fc);
                            }
                            item["call_id"] = json!(id);
                            item["name"] = json!(name);
                            item["arguments"] = json!(arguments);
                            input.push(item);
                        }
                    }
                }
            }
            Turn::ToolResults { results } => {
                for r in results {
                    input.push(json!({"type": "function_call_output", "call_id": r.call_id, "output": r.output}));
                }
            }
        }
    }
    let mut body = json!({"model": request.model});
    if let Some(system) = &request.conversation.system {
        body["instructions"] = json!(system);
    }
    body["input"] = Value::Array(input);
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| {
                let mut f = json!({"type": "function", "name": t.name});
                if let Some(d) = &t.description {
                    f["description"] = json!(d);
                }
                f["parameters"] = t.input_schema.clone();
                // Strict mode (the default here) refuses most MCP schemas.
                f["strict"] = json!(false);
                f
            })
            .collect();
    }
    if let Some(e) = openai_effort(request.effort) {
        body["reasoning"] = json!({"effort": e});
    }
    body["max_output_tokens"] = json!(request.max_tokens);
    body["include"] = json!(["reasoning.encrypted_content"]);
    body["store"] = json!(false);
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
        crate::provider::parts::decode_frames(ResponsesDecoder::default(), frames)
    }

    #[test]
    fn encodes_history_with_reasoning_items() {
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
                            provider_data: Some(
                                r#"{"id":"rs_1","encryptedContent":"gAAA"}"#.into(),
                            ),
                        },
                        // Another provider's shape: dropped.
                        AssistantPart::Reasoning {
                            text: "signed".into(),
                            provider_data: Some(r#"{"signature":"abc"}"#.into()),
                        },
                        AssistantPart::Reasoning {
                            text: "bare".into(),
                            provider_data: None,
                        },
                        AssistantPart::Text {
                            text: "Checking.".into(),
                            provider_data: None,
                        },
                        AssistantPart::ToolCall {
                            id: "call_1".into(),
                            name: "weather".into(),
                            arguments: r#"{"city":"Oslo"}"#.into(),
                            provider_data: Some(r#"{"id":"fc_1"}"#.into()),
                        },
                        AssistantPart::ToolCall {
                            id: "call_2".into(),
                            name: "weather".into(),
                            arguments: "{}".into(),
                            provider_data: Some("[1".into()),
                        },
                    ],
                },
                Turn::ToolResults {
                    results: vec![ToolResultItem {
                        call_id: "call_1".into(),
                        name: "weather".into(),
                        output: "4 °C".into(),
                        is_error: true,
                    }],
                },
            ],
        };
        let tools = vec![ToolSpec {
            name: "weather".into(),
            description: None,
            input_schema: json!({"type": "object"}),
        }];
        let body = encode(&TurnRequest {
            model: "gpt-5",
            conversation: &c,
            tools: &tools,
            effort: Some("max"),
            max_tokens: 2000,
        });
        assert_eq!(
            body,
            json!({
                "model": "gpt-5",
                "instructions": "Be brief.",
                "input": [
                    {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
                    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Use the tool."}], "encrypted_content": "gAAA"},
                    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
                    {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "weather", "arguments": "{\"city\":\"Oslo\"}"},
                    {"type": "function_call", "call_id": "call_2", "name": "weather", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": "call_1", "output": "4 °C"},
                ],
                "tools": [{"type": "function", "name": "weather", "parameters": {"type": "object"}, "strict": false}],
                "reasoning": {"effort": "high"},
                "max_output_tokens": 2000,
                "include": ["reasoning.encrypted_content"],
                "store": false,
                "stream": true,
            })
        );
        for (effort, want) in [
            (None, None),
            (Some("none"), None),
            (Some("low"), Some("low")),
            (Some("medium"), Some("medium")),
        ] {
            let b = encode(&TurnRequest {
                model: "m",
                conversation: &c,
                tools: &[],
                effort,
                max_tokens: 1,
            });
            assert_eq!(
                b.get("reasoning").map(|r| r["effort"].clone()),
                want.map(|w| json!(w))
            );
            assert!(b.get("tools").is_none());
        }
    }

    #[test]
    fn a_message_that_was_not_streamed_still_ends() {
        let (out, end) = decode(&[
            r#"{"type":"response.created","response":{"id":"resp_1","model":"gpt-5-mini","status":"in_progress"}}"#,
            r#"{"type":"response.output_item.done","output_index":0,"item":{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"output_text","text":"Hi"}]}}"#,
            r#"{"type":"response.completed","response":{"model":"gpt-5-mini","status":"completed","usage":{"input_tokens":5,"output_tokens":1}}}"#,
        ]);
        assert_eq!(end, Ok(Finish::Ended));
        assert!(out.iter().any(|o| matches!(o, Output::Line(StreamLine::Event(E::TextEnd { content, .. })) if content == "Hi")));
    }

    #[test]
    fn calls_left_open_close_at_completed_with_their_ids() {
        let (out, end) = decode(&[
            r#"{"type":"response.output_item.added","output_index":0,"item":{"id":"fc_9","type":"function_call","call_id":"call_9","name":"f","arguments":""}}"#,
            r#"{"type":"response.function_call_arguments.delta","item_id":"fc_9","delta":"{\"a\":1}"}"#,
            r#"{"type":"response.completed","response":{"model":"gpt-5","status":"completed"}}"#,
        ]);
        assert_eq!(end, Ok(Finish::Ended));
        // The model (named only at the end), the call's end, its item id.
        assert!(matches!(&out[2], Output::Line(StreamLine::Model(m)) if m.id == "gpt-5"));
        assert!(matches!(
            &out[3],
            Output::Line(StreamLine::Event(E::ToolcallEnd { .. }))
        ));
        assert!(
            matches!(&out[4], Output::Line(StreamLine::ProviderData { content_index: 0, provider_data }) if provider_data == r#"{"id":"fc_9"}"#)
        );
        assert!(matches!(
            out.last(),
            Some(Output::End {
                stop_reason: MessageStopReason::ToolUse,
                usage: None
            })
        ));
        // Broken arguments at completed are an error, never repaired.
        let (_, end) = decode(&[
            r#"{"type":"response.output_item.added","output_index":0,"item":{"id":"fc_9","type":"function_call","call_id":"call_9","name":"f"}}"#,
            r#"{"type":"response.function_call_arguments.delta","output_index":0,"delta":"{\"a\":"}"#,
            r#"{"type":"response.completed","response":{}}"#,
        ]);
        assert!(end.is_err());
    }

    #[test]
    fn errors_name_the_provider_code() {
        let (_, end) = decode(&[
            r#"{"type":"error","code":"rate_limit_exceeded","message":"Slow down","param":null,"sequence_number":3}"#,
        ]);
        let e = end.unwrap_err();
        assert_eq!(e.code, ErrorCode::RateLimited);
        assert!(e.retryable && e.message.contains("Slow down"), "{e:?}");
    }

    #[test]
    fn garbage_never_panics() {
        let samples = [
            r#"{"type":"response.created","response":{"model":"m"}}"#,
            r#"{"type":"response.output_item.added","output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}}"#,
            r#"{"type":"response.reasoning_summary_text.delta","item_id":"rs_1","output_index":0,"summary_index":0,"delta":"x"}"#,
            r#"{"type":"response.output_item.done","output_index":0,"item":{"id":"rs_1","type":"reasoning","encrypted_content":"e","summary":[{"type":"summary_text","text":"x"}]}}"#,
            r#"{"type":"response.output_item.added","output_index":1,"item":{"id":"fc_1","type":"function_call","call_id":"c","name":"f","arguments":""}}"#,
            r#"{"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":1,"delta":"{}"}"#,
            r#"{"type":"response.output_text.delta","item_id":"m","output_index":2,"content_index":0,"delta":"a"}"#,
            r#"{"type":"response.completed","response":{"usage":{"input_tokens":0}}}"#,
            r#"{"type":"response.incomplete","response":{"incomplete_details":{"reason":"max_output_tokens"}}}"#,
        ];
        for seed in 0..40 {
            let mut d = ResponsesDecoder::default();
            let mut out = Vec::new();
            for f in garbage(seed, &samples, 30) {
                let _ = d.feed(
                    Frame {
                        event: Some("x"),
                        data: &f,
                    },
                    &mut out,
                );
            }
            let _ = d.finish(&mut out);
        }
    }
}
