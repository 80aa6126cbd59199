//! Stream in (see fixtures/streams/README.md): builds the parts of one model turn from
//! [`AssistantMessageEvent`]s.
//!
//! - One part per `contentIndex`. A part starts with `*_start`; starts come
//!   in index order (`0, 1, 2 …`, the position the part takes in the turn's
//!   content), so a stream can never make the assembler allocate for an
//!   index it has not reached.
//! - Deltas grow a part (pushed onto a `String`: linear in the reply's
//!   size); the `*_end` content is authoritative and **replaces** what the
//!   deltas built (never appended to it).
//! - Tool-call arguments stream as JSON text. The deltas are kept only to
//!   bound them; at `toolcall_end` the end's `toolCall` is authoritative: its
//!   `type` must be `toolCall`, its `arguments` a JSON object, stored as the
//!   canonical JSON text (see [`canonical_arguments`]).
//! - A tool call with no end (stream cut, length stop) becomes a
//!   `toolCallPart` **without `arguments`** and without a result: "never ran"
//!   in the lexicon's words. Its partial argument text is never stored,
//!   emitted or "repaired"; [`TurnParts::cut_calls`] reports it to the host.
//! - Provider data (such as a reasoning signature) has no field in the
//!   seed's events; [`Assembler::attach_provider_data`] attaches it to any
//!   part, kept byte-exact (it must be JSON text ≤ 100,000 bytes).
//! - Every lexicon limit is checked as the part grows; an event that would
//!   break one is refused with [`StreamError::TooLarge`] and leaves the part
//!   as it was, so what was assembled always makes a valid record.
//!
//! An event refused with a [`StreamError`] changes nothing; the caller
//! (`chat::reply::Reply`) then finishes the reply as `failed`, keeping the
//! parts assembled so far.

use std::fmt;

use thiserror::Error;

use super::input::{AssistantMessageEvent, LineError, ToolCall};
use crate::lexicon::chat::gel::assistant::defs::{
    PlainContentPartsItem, ProviderData, ReasoningPart, TextPart, ToolCallPart,
};

/// The lexicon's limits (`chat.gel.assistant.defs`), in UTF-8 bytes.
pub mod limits {
    /// `textPart.text`.
    pub const TEXT: usize = 500_000;
    /// `reasoningPart.text`.
    pub const REASONING: usize = 500_000;
    /// `toolCallPart.arguments`.
    pub const ARGUMENTS: usize = 200_000;
    /// `toolCallPart.callId`, `toolResultPart.callId`.
    pub const CALL_ID: usize = 256;
    /// `toolCallPart.name`.
    pub const TOOL_NAME: usize = 128;
    /// `providerData`.
    pub const PROVIDER_DATA: usize = 100_000;
    /// `plainContent.parts`.
    pub const PARTS: usize = 1000;
    /// `toolResultPart.output`.
    pub const TOOL_OUTPUT: usize = 500_000;
}

/// The kind of a part in the input stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartKind {
    Text,
    Thinking,
    ToolCall,
}

impl fmt::Display for PartKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PartKind::Text => "text",
            PartKind::Thinking => "thinking",
            PartKind::ToolCall => "toolcall",
        })
    }
}

/// Why the input stream was refused. Each names the event and the
/// `contentIndex` it addressed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum StreamError {
    /// A delta or end for the next index, which has not started.
    #[error("{event} for content {index} before its start")]
    NotStarted { index: usize, event: &'static str },
    /// A start for an index that already started.
    #[error("{event} for content {index}, which has already started")]
    AlreadyStarted { index: usize, event: &'static str },
    /// A delta or end for a part that has ended.
    #[error("{event} for content {index}, which has already ended")]
    AlreadyEnded { index: usize, event: &'static str },
    /// An index past the next one: starts come in index order.
    #[error("{event} for unknown content index {index} (the next new index is {next})")]
    UnknownIndex {
        index: usize,
        next: usize,
        event: &'static str,
    },
    /// An event of one kind for a part of another (`text_delta` on a
    /// thinking part).
    #[error("{event} for content {index}, which is a {part} part")]
    WrongKind {
        index: usize,
        event: &'static str,
        part: PartKind,
    },
    /// A `toolcall_end` whose call is not a `toolCall` with an object of
    /// arguments.
    #[error("toolcall_end for content {index}: {reason}")]
    InvalidToolCall { index: usize, reason: String },
    /// A value over a lexicon limit.
    #[error("content {index}: {field} would be {size} bytes, over the limit of {limit}")]
    TooLarge {
        index: usize,
        field: &'static str,
        size: usize,
        limit: usize,
    },
    /// A tool-call id that another call of the reply already has (results
    /// are matched to calls by id).
    #[error("{event} for content {index}: call id {call_id:?} is already used in this reply")]
    DuplicateCallId {
        index: usize,
        event: &'static str,
        call_id: String,
    },
    /// More parts than `plainContent.parts` holds.
    #[error("content {index}: a reply holds at most {limit} parts")]
    TooManyParts { index: usize, limit: usize },
    /// Provider data that is not JSON text.
    #[error("provider data for content {index} is not JSON text: {reason}")]
    InvalidProviderData { index: usize, reason: String },
    /// The stream ended normally while a part had no end.
    #[error("the model stopped while content {index} ({part}) had no end")]
    NotEnded { index: usize, part: PartKind },
    /// A line that is not an event.
    #[error("line {line}: {error}")]
    Line { line: usize, error: LineError },
    /// Metadata (model, usage, stop reason, tool result) the record cannot
    /// hold.
    #[error("invalid {what}: {reason}")]
    InvalidMetadata { what: &'static str, reason: String },
}

/// A tool call whose `toolcall_end` arrived.
#[derive(Clone, Debug, PartialEq)]
pub struct FinishedCall {
    pub call_id: String,
    pub name: String,
    /// The arguments object as the end carried it.
    pub args: serde_json::Value,
    /// Its canonical JSON text (what `toolCallPart.arguments` stores).
    pub arguments: String,
}

#[derive(Debug)]
enum Body {
    Text(String),
    Thinking(String),
    ToolCall {
        call_id: String,
        name: String,
        /// The streamed argument text: bounded, never stored or emitted.
        partial: String,
        finished: Option<FinishedCall>,
    },
}

#[derive(Debug)]
struct Slot {
    body: Body,
    ended: bool,
    provider_data: Option<String>,
}

impl Slot {
    fn kind(&self) -> PartKind {
        match self.body {
            Body::Text(_) => PartKind::Text,
            Body::Thinking(_) => PartKind::Thinking,
            Body::ToolCall { .. } => PartKind::ToolCall,
        }
    }
}

/// What an accepted event did, for the output stream.
#[derive(Debug, PartialEq)]
pub enum Step<'a> {
    /// Nothing to show (starts, thinking, tool-argument deltas, empty deltas).
    Quiet,
    /// Text grew by `delta`.
    TextDelta { index: usize, delta: String },
    /// A text part ended with `text` (which replaces its deltas).
    TextEnd { index: usize, text: &'a str },
    /// A tool call is complete.
    ToolCallEnd {
        index: usize,
        call: &'a FinishedCall,
    },
}

/// A tool call that never ended: recorded without arguments, never run.
#[derive(Clone, Debug, PartialEq)]
pub struct CutCall {
    /// Index in the turn.
    pub index: usize,
    pub call_id: String,
    pub name: String,
    /// Bytes of argument text that had streamed (the text is dropped).
    pub partial_len: usize,
}

/// The parts of a closed turn.
#[derive(Debug, Default)]
pub struct TurnParts {
    /// One part per content index, in index order.
    pub parts: Vec<PlainContentPartsItem>,
    /// Indexes of parts that had no `*_end` (kept as their deltas built
    /// them; tool calls among them are also in `cut_calls`).
    pub unended: Vec<(usize, PartKind)>,
    pub cut_calls: Vec<CutCall>,
}

/// Assembles one model turn (one `contentIndex` space).
#[derive(Debug)]
pub struct Assembler {
    slots: Vec<Slot>,
    /// How many parts this turn may add (the reply's remaining room).
    max_parts: usize,
}

impl Default for Assembler {
    fn default() -> Self {
        Assembler::new(limits::PARTS)
    }
}

impl Assembler {
    /// An assembler for a turn that may add at most `max_parts` parts.
    pub fn new(max_parts: usize) -> Assembler {
        Assembler {
            slots: Vec::new(),
            max_parts,
        }
    }

    /// Number of parts started.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The text a text or thinking part holds now (after an end, the end's
    /// content).
    pub fn text(&self, index: usize) -> Option<&str> {
        match &self.slots.get(index)?.body {
            Body::Text(t) | Body::Thinking(t) => Some(t),
            Body::ToolCall { .. } => None,
        }
    }

    /// The call at `index`, once its end arrived.
    pub fn finished_call(&self, index: usize) -> Option<&FinishedCall> {
        match &self.slots.get(index)?.body {
            Body::ToolCall { finished, .. } => finished.as_ref(),
            _ => None,
        }
    }

    fn start(&mut self, index: usize, event: &'static str, body: Body) -> Result<(), StreamError> {
        let next = self.slots.len();
        if index < next {
            return Err(StreamError::AlreadyStarted { index, event });
        }
        if index > next {
            return Err(StreamError::UnknownIndex { index, next, event });
        }
        if next >= self.max_parts {
            return Err(StreamError::TooManyParts {
                index,
                limit: limits::PARTS,
            });
        }
        self.slots.push(Slot {
            body,
            ended: false,
            provider_data: None,
        });
        Ok(())
    }

    /// The started part at `index`.
    fn slot(&mut self, index: usize, event: &'static str) -> Result<&mut Slot, StreamError> {
        let next = self.slots.len();
        match self.slots.get_mut(index) {
            Some(s) => Ok(s),
            None if index == next => Err(StreamError::NotStarted { index, event }),
            None => Err(StreamError::UnknownIndex { index, next, event }),
        }
    }

    /// The open part at `index`, which must be of `kind`.
    fn open(
        &mut self,
        index: usize,
        event: &'static str,
        kind: PartKind,
    ) -> Result<&mut Slot, StreamError> {
        let slot = self.slot(index, event)?;
        if slot.kind() != kind {
            return Err(StreamError::WrongKind {
                index,
                event,
                part: slot.kind(),
            });
        }
        if slot.ended {
            return Err(StreamError::AlreadyEnded { index, event });
        }
        Ok(slot)
    }

    /// Refuses `call_id` if a call at another index has it.
    fn check_unique(
        &self,
        index: usize,
        event: &'static str,
        call_id: &str,
    ) -> Result<(), StreamError> {
        let taken = self.slots.iter().enumerate().any(|(i, s)| {
            i != index && matches!(&s.body, Body::ToolCall { call_id: c, .. } if c == call_id)
        });
        if taken {
            return Err(StreamError::DuplicateCallId {
                index,
                event,
                call_id: call_id.chars().take(256).collect(),
            });
        }
        Ok(())
    }

    /// Applies one event. A refused event changes nothing.
    pub fn push(&mut self, event: AssistantMessageEvent) -> Result<Step<'_>, StreamError> {
        use AssistantMessageEvent as E;
        let name = event.name();
        match event {
            E::TextStart { content_index } => {
                self.start(content_index, name, Body::Text(String::new()))?;
                Ok(Step::Quiet)
            }
            E::ThinkingStart { content_index } => {
                self.start(content_index, name, Body::Thinking(String::new()))?;
                Ok(Step::Quiet)
            }
            E::ToolcallStart {
                content_index,
                id,
                tool_name,
            } => {
                check_call(content_index, &id, &tool_name)?;
                self.check_unique(content_index, name, &id)?;
                self.start(
                    content_index,
                    name,
                    Body::ToolCall {
                        call_id: id,
                        name: tool_name,
                        partial: String::new(),
                        finished: None,
                    },
                )?;
                Ok(Step::Quiet)
            }
            E::TextDelta {
                content_index,
                delta,
            } => {
                let slot = self.open(content_index, name, PartKind::Text)?;
                let Body::Text(text) = &mut slot.body else {
                    unreachable!("kind checked")
                };
                grow(text, &delta, content_index, "text", limits::TEXT)?;
                if delta.is_empty() {
                    Ok(Step::Quiet)
                } else {
                    Ok(Step::TextDelta {
                        index: content_index,
                        delta,
                    })
                }
            }
            E::ThinkingDelta {
                content_index,
                delta,
            } => {
                let slot = self.open(content_index, name, PartKind::Thinking)?;
                let Body::Thinking(text) = &mut slot.body else {
                    unreachable!("kind checked")
                };
                grow(text, &delta, content_index, "reasoning", limits::REASONING)?;
                Ok(Step::Quiet)
            }
            E::ToolcallDelta {
                content_index,
                delta,
            } => {
                let slot = self.open(content_index, name, PartKind::ToolCall)?;
                let Body::ToolCall { partial, .. } = &mut slot.body else {
                    unreachable!("kind checked")
                };
                grow(
                    partial,
                    &delta,
                    content_index,
                    "arguments",
                    limits::ARGUMENTS,
                )?;
                Ok(Step::Quiet)
            }
            E::TextEnd {
                content_index,
                content,
            } => {
                let slot = self.open(content_index, name, PartKind::Text)?;
                limit(content_index, "text", content.len(), limits::TEXT)?;
                slot.ended = true;
                let Body::Text(text) = &mut slot.body else {
                    unreachable!("kind checked")
                };
                *text = content;
                Ok(Step::TextEnd {
                    index: content_index,
                    text,
                })
            }
            E::ThinkingEnd {
                content_index,
                content,
            } => {
                let slot = self.open(content_index, name, PartKind::Thinking)?;
                limit(content_index, "reasoning", content.len(), limits::REASONING)?;
                slot.ended = true;
                slot.body = Body::Thinking(content);
                Ok(Step::Quiet)
            }
            E::ToolcallEnd {
                content_index,
                tool_call,
            } => {
                self.open(content_index, name, PartKind::ToolCall)?;
                self.check_unique(content_index, name, &tool_call.id)?;
                let call = finish_call(content_index, tool_call)?;
                let slot = &mut self.slots[content_index];
                slot.ended = true;
                let Body::ToolCall {
                    call_id,
                    name,
                    partial,
                    finished,
                } = &mut slot.body
                else {
                    unreachable!("kind checked")
                };
                // The end is authoritative: its id and name replace the start's.
                call_id.clone_from(&call.call_id);
                name.clone_from(&call.name);
                *partial = String::new();
                let call = finished.insert(call);
                Ok(Step::ToolCallEnd {
                    index: content_index,
                    call,
                })
            }
        }
    }

    /// Attaches provider data (JSON text, kept byte-exact) to a started
    /// part, replacing any attached before.
    pub fn attach_provider_data(
        &mut self,
        index: usize,
        provider_data: String,
    ) -> Result<(), StreamError> {
        let slot = self.slot(index, "provider_data")?;
        limit(
            index,
            "providerData",
            provider_data.len(),
            limits::PROVIDER_DATA,
        )?;
        if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(&provider_data) {
            return Err(StreamError::InvalidProviderData {
                index,
                reason: e.to_string(),
            });
        }
        slot.provider_data = Some(provider_data);
        Ok(())
    }

    /// Closes the turn: the parts in index order.
    pub fn finish(self) -> TurnParts {
        let mut out = TurnParts::default();
        for (index, slot) in self.slots.into_iter().enumerate() {
            if !slot.ended {
                out.unended.push((index, slot.kind()));
            }
            let provider_data = slot.provider_data.map(ProviderData);
            let part = match slot.body {
                Body::Text(text) => PlainContentPartsItem::TextPart(TextPart {
                    provider_data,
                    text,
                    extra: Default::default(),
                }),
                Body::Thinking(text) => PlainContentPartsItem::ReasoningPart(ReasoningPart {
                    provider_data,
                    text,
                    extra: Default::default(),
                }),
                Body::ToolCall {
                    call_id,
                    name,
                    partial,
                    finished,
                } => {
                    if finished.is_none() {
                        out.cut_calls.push(CutCall {
                            index,
                            call_id: call_id.clone(),
                            name: name.clone(),
                            partial_len: partial.len(),
                        });
                    }
                    PlainContentPartsItem::ToolCallPart(ToolCallPart {
                        approval: None,
                        pending_id: None,
                        label: None,
                        confirmation: None,
                        effects: None,
                        call_id,
                        arguments: finished.map(|f| f.arguments),
                        provider_data,
                        source: None,
                        name,
                        extra: Default::default(),
                    })
                }
            };
            out.parts.push(part);
        }
        out
    }
}

fn limit(index: usize, field: &'static str, size: usize, limit: usize) -> Result<(), StreamError> {
    if size > limit {
        Err(StreamError::TooLarge {
            index,
            field,
            size,
            limit,
        })
    } else {
        Ok(())
    }
}

fn grow(
    buf: &mut String,
    delta: &str,
    index: usize,
    field: &'static str,
    max: usize,
) -> Result<(), StreamError> {
    limit(index, field, buf.len().saturating_add(delta.len()), max)?;
    buf.push_str(delta);
    Ok(())
}

fn check_call(index: usize, id: &str, name: &str) -> Result<(), StreamError> {
    limit(index, "callId", id.len(), limits::CALL_ID)?;
    limit(index, "name", name.len(), limits::TOOL_NAME)
}

/// `toolCallPart.arguments` for an arguments object: compact JSON (no
/// insignificant whitespace), members in the order the provider sent them,
/// strings and numbers as `serde_json` writes them (integers exactly;
/// floats in their shortest round-trip form, so `1.50` is written `1.5`).
/// The same object always gives the same bytes.
pub fn canonical_arguments(args: &serde_json::Map<String, serde_json::Value>) -> String {
    serde_json::to_string(args).expect("a JSON map always serializes")
}

fn finish_call(index: usize, call: ToolCall) -> Result<FinishedCall, StreamError> {
    let invalid = |reason: String| StreamError::InvalidToolCall { index, reason };
    if call.kind != ToolCall::KIND {
        return Err(invalid(format!(
            "type is {:?}, not \"toolCall\"",
            call.kind.chars().take(64).collect::<String>()
        )));
    }
    check_call(index, &call.id, &call.name)?;
    let serde_json::Value::Object(map) = &call.arguments else {
        return Err(invalid("arguments is not a JSON object".to_string()));
    };
    let arguments = canonical_arguments(map);
    limit(index, "arguments", arguments.len(), limits::ARGUMENTS)?;
    Ok(FinishedCall {
        call_id: call.id,
        name: call.name,
        args: call.arguments,
        arguments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(v: serde_json::Value) -> AssistantMessageEvent {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn end_replaces_deltas() {
        let mut a = Assembler::default();
        a.push(ev(json!({"type":"text_start","contentIndex":0})))
            .unwrap();
        for d in ["Hel", "lo"] {
            a.push(ev(json!({"type":"text_delta","contentIndex":0,"delta":d})))
                .unwrap();
        }
        assert_eq!(a.text(0), Some("Hello"));
        let step = a
            .push(ev(
                json!({"type":"text_end","contentIndex":0,"content":"Hello!"}),
            ))
            .unwrap();
        assert_eq!(
            step,
            Step::TextEnd {
                index: 0,
                text: "Hello!"
            }
        );
        let t = a.finish();
        assert!(t.unended.is_empty());
        match &t.parts[0] {
            PlainContentPartsItem::TextPart(p) => assert_eq!(p.text, "Hello!"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn order_errors() {
        let mut a = Assembler::default();
        let e = |a: &mut Assembler, v| a.push(ev(v)).unwrap_err();
        assert!(matches!(
            e(
                &mut a,
                json!({"type":"text_delta","contentIndex":0,"delta":"x"})
            ),
            StreamError::NotStarted { index: 0, .. }
        ));
        assert!(matches!(
            e(&mut a, json!({"type":"text_start","contentIndex":3})),
            StreamError::UnknownIndex {
                index: 3,
                next: 0,
                ..
            }
        ));
        a.push(ev(json!({"type":"thinking_start","contentIndex":0})))
            .unwrap();
        assert!(matches!(
            e(&mut a, json!({"type":"text_start","contentIndex":0})),
            StreamError::AlreadyStarted { index: 0, .. }
        ));
        assert!(matches!(
            e(
                &mut a,
                json!({"type":"text_delta","contentIndex":0,"delta":"x"})
            ),
            StreamError::WrongKind {
                part: PartKind::Thinking,
                ..
            }
        ));
        a.push(ev(
            json!({"type":"thinking_end","contentIndex":0,"content":"t"}),
        ))
        .unwrap();
        assert!(matches!(
            e(
                &mut a,
                json!({"type":"thinking_delta","contentIndex":0,"delta":"x"})
            ),
            StreamError::AlreadyEnded { .. }
        ));
        assert!(matches!(
            e(
                &mut a,
                json!({"type":"thinking_delta","contentIndex":7,"delta":"x"})
            ),
            StreamError::UnknownIndex { index: 7, .. }
        ));
    }

    #[test]
    fn tool_call_end_is_authoritative_and_cut_calls_have_no_arguments() {
        let mut a = Assembler::default();
        a.push(ev(
            json!({"type":"toolcall_start","contentIndex":0,"id":"c1","toolName":"search"}),
        ))
        .unwrap();
        a.push(ev(
            json!({"type":"toolcall_delta","contentIndex":0,"delta":"{\"q\": \"ca"}),
        ))
        .unwrap();
        a.push(ev(json!({"type":"toolcall_end","contentIndex":0,
            "toolCall":{"type":"toolCall","id":"c1","name":"search","arguments":{"q":"cats","n":1.50}}})))
            .unwrap();
        a.push(ev(
            json!({"type":"toolcall_start","contentIndex":1,"id":"c2","toolName":"search"}),
        ))
        .unwrap();
        a.push(ev(
            json!({"type":"toolcall_delta","contentIndex":1,"delta":"{\"q\": \"do"}),
        ))
        .unwrap();
        let t = a.finish();
        let PlainContentPartsItem::ToolCallPart(done) = &t.parts[0] else {
            panic!()
        };
        assert_eq!(done.arguments.as_deref(), Some(r#"{"q":"cats","n":1.5}"#));
        let PlainContentPartsItem::ToolCallPart(cut) = &t.parts[1] else {
            panic!()
        };
        assert_eq!(cut.arguments, None);
        assert_eq!(cut.call_id, "c2");
        assert_eq!(
            t.cut_calls,
            vec![CutCall {
                index: 1,
                call_id: "c2".into(),
                name: "search".into(),
                partial_len: 9
            }]
        );
    }

    #[test]
    fn call_ids_are_unique() {
        let mut a = Assembler::default();
        a.push(ev(
            json!({"type":"toolcall_start","contentIndex":0,"id":"c1","toolName":"n"}),
        ))
        .unwrap();
        assert!(matches!(
            a.push(ev(
                json!({"type":"toolcall_start","contentIndex":1,"id":"c1","toolName":"n"})
            )),
            Err(StreamError::DuplicateCallId { index: 1, .. })
        ));
        a.push(ev(
            json!({"type":"toolcall_start","contentIndex":1,"id":"c2","toolName":"n"}),
        ))
        .unwrap();
        // The end may not rename a call to another call's id.
        assert!(matches!(
            a.push(ev(json!({"type":"toolcall_end","contentIndex":1,
                "toolCall":{"type":"toolCall","id":"c1","name":"n","arguments":{}}}))),
            Err(StreamError::DuplicateCallId { index: 1, .. })
        ));
        a.push(ev(json!({"type":"toolcall_end","contentIndex":1,
            "toolCall":{"type":"toolCall","id":"c2b","name":"n","arguments":{}}})))
            .unwrap();
        assert_eq!(a.finished_call(1).unwrap().call_id, "c2b");
    }

    #[test]
    fn refuses_bad_tool_calls() {
        for call in [
            json!({"type":"function","id":"c","name":"n","arguments":{}}),
            json!({"type":"toolCall","id":"c","name":"n","arguments":"{}"}),
            json!({"type":"toolCall","id":"c","name":"n","arguments":[1]}),
        ] {
            let mut a = Assembler::default();
            a.push(ev(
                json!({"type":"toolcall_start","contentIndex":0,"id":"c","toolName":"n"}),
            ))
            .unwrap();
            assert!(matches!(
                a.push(ev(
                    json!({"type":"toolcall_end","contentIndex":0,"toolCall":call})
                )),
                Err(StreamError::InvalidToolCall { .. })
            ));
            assert!(a.finished_call(0).is_none());
        }
    }

    #[test]
    fn limits_leave_the_part_valid() {
        let mut a = Assembler::default();
        a.push(ev(json!({"type":"text_start","contentIndex":0})))
            .unwrap();
        let big = "x".repeat(limits::TEXT);
        a.push(ev(
            json!({"type":"text_delta","contentIndex":0,"delta":big}),
        ))
        .unwrap();
        assert!(matches!(
            a.push(ev(
                json!({"type":"text_delta","contentIndex":0,"delta":"y"})
            )),
            Err(StreamError::TooLarge {
                field: "text",
                size: 500_001,
                ..
            })
        ));
        assert_eq!(a.text(0).map(str::len), Some(limits::TEXT));
        assert!(matches!(
            a.attach_provider_data(0, "{not json".into()),
            Err(StreamError::InvalidProviderData { .. })
        ));
        assert!(matches!(
            a.attach_provider_data(0, format!("\"{}\"", "s".repeat(limits::PROVIDER_DATA))),
            Err(StreamError::TooLarge { .. })
        ));
        let long_id = "i".repeat(257);
        assert!(matches!(
            a.push(ev(
                json!({"type":"toolcall_start","contentIndex":1,"id":long_id,"toolName":"n"})
            )),
            Err(StreamError::TooLarge {
                field: "callId",
                ..
            })
        ));
        let mut small = Assembler::new(1);
        small
            .push(ev(json!({"type":"text_start","contentIndex":0})))
            .unwrap();
        assert!(matches!(
            small.push(ev(json!({"type":"text_start","contentIndex":1}))),
            Err(StreamError::TooManyParts { .. })
        ));
    }

    #[test]
    fn provider_data_is_kept_byte_exact() {
        let mut a = Assembler::default();
        a.push(ev(json!({"type":"thinking_start","contentIndex":0})))
            .unwrap();
        let pd = r#"{ "signature" : "EqQBCkYIBxgCKkD+/=",  "n": 1.50 }"#;
        a.attach_provider_data(0, pd.into()).unwrap();
        a.push(ev(
            json!({"type":"thinking_end","contentIndex":0,"content":"hmm"}),
        ))
        .unwrap();
        let PlainContentPartsItem::ReasoningPart(r) = &a.finish().parts[0] else {
            panic!()
        };
        assert_eq!(r.provider_data.as_ref().unwrap().0, pd);
        assert_eq!(r.text, "hmm");
    }
}
