//! The input stream (see fixtures/streams/README.md): `AssistantMessageEvent`, one
//! step of a model's streamed reply, as JSON lines; and [`StreamLine`], the
//! line format of a whole run (the seed's events plus the few lines that
//! carry what the seed's events do not: provider data, the model, the end
//! of a turn, tool results, the end of the stream).
//!
//! Wire form of the seed's events: the tag `type` in snake_case
//! (`text_start`, `toolcall_delta` …), fields in camelCase (`contentIndex`,
//! `toolName`, `toolCall`) or as the seed's Rust enum names them in snake
//! case (`content_index`, `tool_name`, `tool_call`); either may come bare
//! or inside the `message_update` envelope the seed says carries them
//! (`{"type":"message_update","assistantMessageEvent":{…}}`). Fields the
//! seed does not name are ignored (a provider's stream may carry more, such
//! as a `partial` snapshot or the envelope's `message`); a field of the
//! wrong JSON type is an error.

use serde::{Deserialize, Serialize};

use crate::lexicon::chat::gel::assistant::defs::{ModelRef, Usage};
use crate::lexicon::chat::gel::assistant::message::MessageStopReason;
use crate::lexicon::chat::gel::assistant::subscribe_reply::{
    ObservationReason, ObservationState, Subject, ToolResultOutcome,
};

/// One step of a streamed assistant message (seed 002).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum AssistantMessageEvent {
    TextStart {
        #[serde(alias = "content_index")]
        content_index: usize,
    },
    TextDelta {
        #[serde(alias = "content_index")]
        content_index: usize,
        delta: String,
    },
    TextEnd {
        #[serde(alias = "content_index")]
        content_index: usize,
        content: String,
    },
    ThinkingStart {
        #[serde(alias = "content_index")]
        content_index: usize,
    },
    ThinkingDelta {
        #[serde(alias = "content_index")]
        content_index: usize,
        delta: String,
    },
    ThinkingEnd {
        #[serde(alias = "content_index")]
        content_index: usize,
        content: String,
    },
    ToolcallStart {
        #[serde(alias = "content_index")]
        content_index: usize,
        id: String,
        #[serde(alias = "tool_name")]
        tool_name: String,
    },
    ToolcallDelta {
        #[serde(alias = "content_index")]
        content_index: usize,
        delta: String,
    },
    ToolcallEnd {
        #[serde(alias = "content_index")]
        content_index: usize,
        /// The finished call, as its content block (`type: "toolCall"`).
        #[serde(alias = "tool_call")]
        tool_call: ToolCall,
    },
}

impl AssistantMessageEvent {
    /// The `type` tags of the seed's events.
    pub const TYPES: [&'static str; 9] = [
        "text_start",
        "text_delta",
        "text_end",
        "thinking_start",
        "thinking_delta",
        "thinking_end",
        "toolcall_start",
        "toolcall_delta",
        "toolcall_end",
    ];

    /// The `contentIndex` the event addresses.
    pub fn content_index(&self) -> usize {
        match self {
            Self::TextStart { content_index }
            | Self::TextDelta { content_index, .. }
            | Self::TextEnd { content_index, .. }
            | Self::ThinkingStart { content_index }
            | Self::ThinkingDelta { content_index, .. }
            | Self::ThinkingEnd { content_index, .. }
            | Self::ToolcallStart { content_index, .. }
            | Self::ToolcallDelta { content_index, .. }
            | Self::ToolcallEnd { content_index, .. } => *content_index,
        }
    }

    /// The wire name of the event (`text_delta` …).
    pub fn name(&self) -> &'static str {
        let i = match self {
            Self::TextStart { .. } => 0,
            Self::TextDelta { .. } => 1,
            Self::TextEnd { .. } => 2,
            Self::ThinkingStart { .. } => 3,
            Self::ThinkingDelta { .. } => 4,
            Self::ThinkingEnd { .. } => 5,
            Self::ToolcallStart { .. } => 6,
            Self::ToolcallDelta { .. } => 7,
            Self::ToolcallEnd { .. } => 8,
        };
        Self::TYPES[i]
    }
}

/// A finished tool call as a content block: `{type: "toolCall", id, name,
/// arguments}`. `arguments` is kept as any JSON value here; the assembler
/// refuses anything but an object (and a `type` other than `toolCall`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    #[serde(rename = "type")]
    pub kind: String,
    pub id: String,
    pub name: String,
    pub arguments: serde_json::Value,
}

impl ToolCall {
    /// The `type` a tool-call content block carries.
    pub const KIND: &'static str = "toolCall";
}

/// The result of a tool the host ran (not from the model).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolRun {
    /// `succeeded`: it ran; `accepted`: queued to run later; `refused`: it
    /// did not run; `uncertain`: unknown whether it ran.
    pub outcome: ToolResultOutcome,
    /// Tool output as text or JSON-encoded data (≤ 500,000 bytes).
    #[serde(default)]
    pub output: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// Time spent running the tool alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elapsed_ms: Option<u64>,
    /// `output` is the tool's structured result as JSON text.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub json: bool,
    /// With `accepted`: the id of the work the tool queued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// What the call produced or acted on, where the tool says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<Subject>,
}

impl ToolRun {
    /// A finished run with this outcome and output (no error, no job).
    pub fn new(outcome: ToolResultOutcome, output: impl Into<String>) -> ToolRun {
        ToolRun {
            outcome,
            output: output.into(),
            is_error: false,
            elapsed_ms: None,
            json: false,
            job_id: None,
            subject: None,
        }
    }
}

/// What the host saw of the work an accepted call queued.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Observed {
    pub state: ObservationState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<ObservationReason>,
    /// With `captured`: the work's result as the model reads it (kept in
    /// the record for the next turn; the event shows only `text`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

/// One line of a recorded run (`fixtures/streams/*/input.jsonl`, the fuzz
/// target, `gelstore chat reply`): a seed event, or one of the lines below,
/// told apart by `type`. A stream that ends with neither `done`, `error` nor
/// `abort` was cut.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamLine {
    /// A seed 002 event.
    Event(AssistantMessageEvent),
    /// `{"type":"provider_data","contentIndex":N,"providerData":"<JSON text>"}`:
    /// the provider's opaque data for a part of the current turn (such as a
    /// reasoning signature), kept byte-exact. The seed's events have no field
    /// for it.
    ProviderData {
        content_index: usize,
        provider_data: String,
    },
    /// `{"type":"model","provider":"…","id":"…"}`: the model that answers
    /// (other fields are ignored).
    Model(ModelRef),
    /// `{"type":"turn_end","stopReason":"toolUse","usage":{…}}`: one model
    /// turn ended; the host runs tools and another turn may follow.
    TurnEnd {
        stop_reason: MessageStopReason,
        usage: Option<Usage>,
    },
    /// `{"type":"tool_result","callId":"…","outcome":"succeeded","output":"…"}`:
    /// the host ran a tool call.
    ToolResult { call_id: String, run: ToolRun },
    /// `{"type":"observation","callId":"…","state":"awaited","text":"…"}`:
    /// what the host saw of the work an accepted call queued (`reason`
    /// when none will come).
    Observation { call_id: String, observed: Observed },
    /// `{"type":"done","stopReason":"stop","usage":{…}}`: the model finished.
    Done {
        stop_reason: MessageStopReason,
        usage: Option<Usage>,
    },
    /// `{"type":"error","message":"…"}`: the provider failed.
    Error {
        message: String,
        usage: Option<Usage>,
    },
    /// `{"type":"abort"}`: the user or host stopped generation.
    Abort,
}

/// Why a line is not a [`StreamLine`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    #[error("not a JSON object with a string \"type\": {0}")]
    NoType(String),
    #[error("unknown event type {0:?}")]
    UnknownType(String),
    #[error("malformed {kind} event: {reason}")]
    Malformed { kind: String, reason: String },
}

#[derive(Deserialize)]
struct Tag<'a> {
    #[serde(rename = "type", borrow)]
    kind: std::borrow::Cow<'a, str>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProviderDataLine {
    content_index: usize,
    provider_data: String,
}

#[derive(Deserialize)]
struct ModelLine {
    provider: String,
    id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EndLine {
    stop_reason: MessageStopReason,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ErrorLine {
    #[serde(default)]
    message: String,
    #[serde(default)]
    usage: Option<Usage>,
}

/// `{"type":"message_update","assistantMessageEvent":{…}}` (the event
/// kept as raw JSON and parsed as a seed event).
#[derive(Deserialize)]
struct EnvelopeLine<'a> {
    #[serde(
        rename = "assistantMessageEvent",
        alias = "assistant_message_event",
        borrow
    )]
    event: &'a serde_json::value::RawValue,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObservationLine {
    call_id: String,
    #[serde(flatten)]
    observed: Observed,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolResultLine {
    call_id: String,
    #[serde(flatten)]
    run: ToolRun,
}

impl StreamLine {
    /// Parses one JSON line.
    pub fn parse(line: &str) -> Result<StreamLine, LineError> {
        let tag: Tag<'_> = serde_json::from_str(line).map_err(|e| LineError::NoType(short(&e)))?;
        let kind = tag.kind.as_ref();
        let malformed = |e: serde_json::Error| LineError::Malformed {
            kind: cut(kind),
            reason: short(&e),
        };
        Ok(match kind {
            k if AssistantMessageEvent::TYPES.contains(&k) => {
                StreamLine::Event(serde_json::from_str(line).map_err(malformed)?)
            }
            "provider_data" => {
                let l: ProviderDataLine = serde_json::from_str(line).map_err(malformed)?;
                StreamLine::ProviderData {
                    content_index: l.content_index,
                    provider_data: l.provider_data,
                }
            }
            "model" => {
                let l: ModelLine = serde_json::from_str(line).map_err(malformed)?;
                StreamLine::Model(ModelRef {
                    provider: l.provider,
                    id: l.id,
                    extra: Default::default(),
                })
            }
            "turn_end" | "done" => {
                let l: EndLine = serde_json::from_str(line).map_err(malformed)?;
                if kind == "done" {
                    StreamLine::Done {
                        stop_reason: l.stop_reason,
                        usage: l.usage,
                    }
                } else {
                    StreamLine::TurnEnd {
                        stop_reason: l.stop_reason,
                        usage: l.usage,
                    }
                }
            }
            "tool_result" => {
                let l: ToolResultLine = serde_json::from_str(line).map_err(malformed)?;
                StreamLine::ToolResult {
                    call_id: l.call_id,
                    run: l.run,
                }
            }
            "observation" => {
                let l: ObservationLine = serde_json::from_str(line).map_err(malformed)?;
                StreamLine::Observation {
                    call_id: l.call_id,
                    observed: l.observed,
                }
            }
            "error" => {
                let l: ErrorLine = serde_json::from_str(line).map_err(malformed)?;
                StreamLine::Error {
                    message: l.message,
                    usage: l.usage,
                }
            }
            "abort" => StreamLine::Abort,
            "message_update" => {
                let l: EnvelopeLine = serde_json::from_str(line).map_err(malformed)?;
                let inner: Tag<'_> = serde_json::from_str(l.event.get())
                    .map_err(|e| LineError::NoType(short(&e)))?;
                if !AssistantMessageEvent::TYPES.contains(&inner.kind.as_ref()) {
                    return Err(LineError::Malformed {
                        kind: "message_update".into(),
                        reason: format!(
                            "it carries {:?}, not one of the seed's events",
                            cut(inner.kind.as_ref())
                        ),
                    });
                }
                StreamLine::Event(serde_json::from_str(l.event.get()).map_err(malformed)?)
            }
            other => return Err(LineError::UnknownType(cut(other))),
        })
    }
}

impl StreamLine {
    /// The line as compact JSON (no newline), in the form [`StreamLine::parse`]
    /// reads back: `type` first, then the fields in camelCase. A model's
    /// extra fields are not written (the parser does not keep them).
    pub fn to_json_line(&self) -> String {
        use serde_json::{Value, json};
        let end = |kind: &str, stop: &MessageStopReason, usage: &Option<Usage>| {
            let mut v = json!({"type": kind, "stopReason": stop});
            if let Some(u) = usage {
                v["usage"] = json!(u);
            }
            v
        };
        let v: Value = match self {
            StreamLine::Event(e) => json!(e),
            StreamLine::ProviderData {
                content_index,
                provider_data,
            } => json!({
                "type": "provider_data",
                "contentIndex": content_index,
                "providerData": provider_data,
            }),
            StreamLine::Model(m) => json!({"type": "model", "provider": m.provider, "id": m.id}),
            StreamLine::TurnEnd { stop_reason, usage } => end("turn_end", stop_reason, usage),
            StreamLine::Done { stop_reason, usage } => end("done", stop_reason, usage),
            StreamLine::ToolResult { call_id, run } => {
                let mut v = json!({"type": "tool_result", "callId": call_id});
                if let (Value::Object(m), Value::Object(r)) = (&mut v, json!(run)) {
                    m.extend(r);
                }
                v
            }
            StreamLine::Observation { call_id, observed } => {
                let mut v = json!({"type": "observation", "callId": call_id});
                if let (Value::Object(m), Value::Object(r)) = (&mut v, json!(observed)) {
                    m.extend(r);
                }
                v
            }
            StreamLine::Error { message, usage } => {
                let mut v = json!({"type": "error", "message": message});
                if let Some(u) = usage {
                    v["usage"] = json!(u);
                }
                v
            }
            StreamLine::Abort => json!({"type": "abort"}),
        };
        v.to_string()
    }
}

fn cut(s: &str) -> String {
    s.chars().take(64).collect()
}

fn short(e: &serde_json::Error) -> String {
    let s = e.to_string();
    if s.len() > 200 {
        let mut end = 200;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &s[..end])
    } else {
        s
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn seed_snake_case_names_and_the_message_update_envelope() {
        let camel = StreamLine::parse(
            r#"{"type":"toolcall_start","contentIndex":1,"id":"a","toolName":"f"}"#,
        )
        .unwrap();
        let snake = StreamLine::parse(
            r#"{"type":"toolcall_start","content_index":1,"id":"a","tool_name":"f"}"#,
        )
        .unwrap();
        assert_eq!(camel, snake);
        let wrapped = StreamLine::parse(
            r#"{"type":"message_update","message":{"role":"assistant"},"assistantMessageEvent":{"type":"toolcall_start","content_index":1,"id":"a","tool_name":"f"}}"#,
        )
        .unwrap();
        assert_eq!(wrapped, camel);
        let end = StreamLine::parse(
            r#"{"type":"toolcall_end","content_index":0,"tool_call":{"type":"toolCall","id":"a","name":"f","arguments":{}}}"#,
        )
        .unwrap();
        assert!(matches!(
            end,
            StreamLine::Event(AssistantMessageEvent::ToolcallEnd { .. })
        ));
        // The envelope carries only the seed's events.
        for bad in [
            r#"{"type":"message_update","assistantMessageEvent":{"type":"done","stopReason":"stop"}}"#,
            r#"{"type":"message_update","assistantMessageEvent":{"type":"message_update"}}"#,
            r#"{"type":"message_update"}"#,
            r#"{"type":"message_update","assistantMessageEvent":7}"#,
        ] {
            assert!(StreamLine::parse(bad).is_err(), "{bad}");
        }
    }
    use super::*;
    use serde_json::json;

    #[test]
    fn seed_wire_form() {
        let e = AssistantMessageEvent::ToolcallStart {
            content_index: 2,
            id: "call_1".into(),
            tool_name: "web_search".into(),
        };
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!({"type": "toolcall_start", "contentIndex": 2, "id": "call_1", "toolName": "web_search"})
        );
        let line = r#"{"type":"toolcall_end","contentIndex":2,"toolCall":{"type":"toolCall","id":"c","name":"n","arguments":{"q":1}},"partial":{}}"#;
        match StreamLine::parse(line).unwrap() {
            StreamLine::Event(AssistantMessageEvent::ToolcallEnd {
                content_index: 2,
                tool_call,
            }) => {
                assert_eq!(tool_call.kind, "toolCall");
                assert_eq!(tool_call.arguments, json!({"q": 1}));
            }
            other => panic!("{other:?}"),
        }
        for e in AssistantMessageEvent::TYPES {
            assert!(matches!(
                StreamLine::parse(&format!(r#"{{"type":"{e}"}}"#)),
                Err(LineError::Malformed { .. })
            ));
        }
    }

    #[test]
    fn json_lines_round_trip() {
        let usage = Usage {
            input_tokens: Some(12),
            output_tokens: Some(3),
            reasoning_tokens: None,
            cache_read_tokens: Some(0),
            cache_write_tokens: None,
            extra: Default::default(),
        };
        let lines = [
            StreamLine::Event(AssistantMessageEvent::TextDelta {
                content_index: 0,
                delta: "Grüße \"x\"\n".into(),
            }),
            StreamLine::Event(AssistantMessageEvent::ToolcallEnd {
                content_index: 1,
                tool_call: ToolCall {
                    kind: ToolCall::KIND.into(),
                    id: "call_1".into(),
                    name: "f".into(),
                    arguments: json!({"b": 1, "a": [null]}),
                },
            }),
            StreamLine::ProviderData {
                content_index: 2,
                provider_data: r#"{"signature": "x=="}"#.into(),
            },
            StreamLine::Model(ModelRef {
                provider: "anthropic".into(),
                id: "claude-sonnet-4-5".into(),
                extra: Default::default(),
            }),
            StreamLine::TurnEnd {
                stop_reason: MessageStopReason::ToolUse,
                usage: Some(usage.clone()),
            },
            StreamLine::ToolResult {
                call_id: "call_1".into(),
                run: ToolRun {
                    outcome: ToolResultOutcome::Succeeded,
                    output: "ok".into(),
                    is_error: true,
                    elapsed_ms: Some(4),
                    json: false,
                    job_id: None,
                    subject: None,
                },
            },
            StreamLine::Done {
                stop_reason: MessageStopReason::Length,
                usage: None,
            },
            StreamLine::Error {
                message: "boom".into(),
                usage: Some(usage),
            },
            StreamLine::Abort,
        ];
        for line in lines {
            let text = line.to_json_line();
            assert!(
                text.starts_with(r#"{"type":"#) && !text.contains('\n'),
                "{text}"
            );
            assert_eq!(StreamLine::parse(&text).unwrap(), line, "{text}");
        }
        assert_eq!(
            StreamLine::Done {
                stop_reason: MessageStopReason::Stop,
                usage: None
            }
            .to_json_line(),
            r#"{"type":"done","stopReason":"stop"}"#
        );
    }

    #[test]
    fn control_lines() {
        assert_eq!(
            StreamLine::parse(r#"{"type":"done","stopReason":"stop"}"#).unwrap(),
            StreamLine::Done {
                stop_reason: MessageStopReason::Stop,
                usage: None
            }
        );
        assert!(matches!(
            StreamLine::parse(r#"{"type":"tool_result","callId":"a","outcome":"succeeded","output":"x","elapsedMs":3}"#).unwrap(),
            StreamLine::ToolResult { call_id, run } if call_id == "a" && run.elapsed_ms == Some(3)
        ));
        assert!(matches!(
            StreamLine::parse(r#"{"type":"nope"}"#),
            Err(LineError::UnknownType(_))
        ));
        assert!(matches!(
            StreamLine::parse("[1]"),
            Err(LineError::NoType(_))
        ));
        assert!(matches!(
            StreamLine::parse(r#"{"type":"text_delta","contentIndex":-1,"delta":""}"#),
            Err(LineError::Malformed { .. })
        ));
    }
}
