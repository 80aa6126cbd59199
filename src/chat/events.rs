//! Stream out (see fixtures/streams/README.md): `AssistantEvent`, what a live client
//! sees of a reply while it is generated, as JSON with a `type` tag.
//!
//! - `text_delta` (`messageId`, `text`): a chunk of text; `message`
//!   (`messageId`, `text`, `model`): the complete text for that
//!   `messageId`, which a delta-aware client puts in place of the deltas
//!   (never appends). A `message` is also sent for a text part that never
//!   got its end, when its turn closes, so the client ends up with exactly
//!   the recorded text.
//! - `tool_call` (`callId`, `tool`, `args`, `label`, `effects`): sent once a
//!   call's arguments are complete; `tool_result` (`callId`, `tool`, `label`,
//!   `outcome`, `ok`, `body`, `jobId`, `effects`, `subject`, `elapsedMs`,
//!   `decision`).
//! - `observation` (`id`: the call, `jobId`, `state`, `text`, `reason`):
//!   what became of the work an `accepted` call queued.
//! - `confirm_required` (`id`: the call's pending-action id, `callId`,
//!   `tool`, `label`, `effects`, `confirmation`): the stream ends after these
//!   until the approval is answered.
//! - `error` (`code`, `message`) and `done` (`reason`).
//!
//! Partial tool arguments and private reasoning are never emitted: there is
//! no event that could carry them.
//!
//! The value enums are the generated `subscribeReply` ones, and
//! [`AssistantEvent::to_frame`] gives the `chat.gel.assistant.subscribeReply`
//! message an XRPC subscription sends.

use serde::{Deserialize, Serialize};

use crate::lexicon::chat::gel::assistant::subscribe_reply::{
    self as sub, Confirmation, DoneReason, Effects, ErrorCode, ObservationReason, ObservationState,
    Subject, SubscribeReplyMessage, ToolResultDecision, ToolResultOutcome,
};
use ipld_core::ipld::Ipld;

use crate::lexicon_runtime::{self as support, Data, Path};
use crate::model::encode_dag_cbor;

/// One event of the output stream (seed 000).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum AssistantEvent {
    TextDelta {
        message_id: String,
        text: String,
    },
    Message {
        message_id: String,
        text: String,
        /// The provider's id of the model that wrote it, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
    },
    ToolCall {
        call_id: String,
        tool: String,
        /// The parsed arguments object.
        args: serde_json::Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label: Option<String>,
        /// What the call may do, as its tool declares it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        effects: Option<Effects>,
    },
    ToolResult {
        call_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label: Option<String>,
        outcome: ToolResultOutcome,
        /// False when the tool reported an error.
        ok: bool,
        /// The output: a string for text, the JSON value for structured
        /// output.
        body: serde_json::Value,
        /// With `accepted`: the queued work's id.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        effects: Option<Effects>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subject: Option<Subject>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        elapsed_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        decision: Option<ToolResultDecision>,
        /// The whole output, sealed, when `body` is only its start.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output_blob: Option<Box<support::BlobRef>>,
    },
    /// What became of the work an `accepted` call queued.
    Observation {
        /// The call whose work it is (its `callId`).
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job_id: Option<String>,
        state: ObservationState,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<ObservationReason>,
    },
    ConfirmRequired {
        /// The pending action's id (the waiting call's `pendingId`).
        id: String,
        call_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        effects: Option<Effects>,
        confirmation: Confirmation,
    },
    Error {
        code: ErrorCode,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    Done {
        reason: DoneReason,
    },
}

impl AssistantEvent {
    /// The event as one JSON line (no newline).
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).expect("events always serialize")
    }

    /// Whether the stream ends after this event (`done`, or
    /// `confirm_required`: the run paused).
    pub fn ends_stream(&self) -> bool {
        matches!(
            self,
            AssistantEvent::Done { .. } | AssistantEvent::ConfirmRequired { .. }
        )
    }

    /// The `chat.gel.assistant.subscribeReply` message for this event, with
    /// sequence number `seq`: the same fields as [`AssistantEvent::to_json_line`]
    /// (`#message.model` is the model's id, as seed 000 has it). Tool `args` that are not a valid lexicon
    /// `unknown` (non-integer numbers, which the atproto data model cannot
    /// hold; objects that read as bytes, links, blobs or a known `$type`
    /// they do not match) go as JSON text in `argsJson` instead.
    pub fn to_frame(&self, seq: i64) -> SubscribeReplyMessage {
        let extra = Default::default;
        match self.clone() {
            AssistantEvent::TextDelta { message_id, text } => {
                SubscribeReplyMessage::TextDelta(sub::TextDelta {
                    seq,
                    message_id,
                    text,
                    extra: extra(),
                })
            }
            AssistantEvent::Message {
                message_id,
                text,
                model,
            } => SubscribeReplyMessage::Message(sub::Message {
                seq,
                message_id,
                text,
                model,
                extra: extra(),
            }),
            AssistantEvent::ToolCall {
                call_id,
                tool,
                args,
                label,
                effects,
            } => {
                let (args, args_json) = if args.is_null() {
                    (None, None)
                } else {
                    as_data_or_json(args)
                };
                SubscribeReplyMessage::ToolCall(sub::ToolCall {
                    seq,
                    call_id,
                    tool,
                    args,
                    args_json,
                    label,
                    effects,
                    automatic: None,
                    extra: extra(),
                })
            }
            AssistantEvent::ToolResult {
                call_id,
                tool,
                label,
                outcome,
                ok,
                body,
                job_id,
                effects,
                subject,
                elapsed_ms,
                decision,
                output_blob,
            } => {
                let (body, body_json) = as_data_or_json(body);
                SubscribeReplyMessage::ToolResult(sub::ToolResult {
                    seq,
                    call_id,
                    tool,
                    label,
                    outcome,
                    elapsed_ms: elapsed_ms.map(|ms| i64::try_from(ms).unwrap_or(i64::MAX)),
                    decision,
                    ok: Some(ok),
                    body,
                    body_json,
                    job_id,
                    effects,
                    subject,
                    output_blob: output_blob.map(|b| *b),
                    history: None,
                    render: None,
                    automatic: None,
                    extra: extra(),
                })
            }
            AssistantEvent::Observation {
                id,
                job_id,
                state,
                text,
                reason,
            } => SubscribeReplyMessage::Observation(sub::Observation {
                seq,
                id,
                job_id,
                state,
                text,
                reason,
                extra: extra(),
            }),
            AssistantEvent::ConfirmRequired {
                id,
                call_id,
                tool,
                label,
                effects,
                confirmation,
            } => SubscribeReplyMessage::ConfirmRequired(sub::ConfirmRequired {
                seq,
                id,
                call_id,
                tool,
                label,
                effects,
                confirmation,
                extra: extra(),
            }),
            AssistantEvent::Error { code, message } => SubscribeReplyMessage::Error(sub::Error {
                seq,
                code,
                message,
                extra: extra(),
            }),
            AssistantEvent::Done { reason } => SubscribeReplyMessage::Done(sub::Done {
                seq,
                reason,
                extra: extra(),
            }),
        }
    }
}

impl AssistantEvent {
    /// The event as the binary message of an XRPC subscription, with
    /// sequence number `seq`: the header `{op: 1, t: "#name"}` then the
    /// body (the [`AssistantEvent::to_frame`] message without `$type`),
    /// both DAG-CBOR.
    pub fn frame_bytes(&self, seq: u64) -> Result<Vec<u8>, String> {
        let message = self.to_frame(i64::try_from(seq).unwrap_or(i64::MAX));
        let name = message.type_id().rsplit('#').next().unwrap_or_default();
        let header = Ipld::Map(
            [
                ("op".to_owned(), Ipld::Integer(1)),
                ("t".to_owned(), Ipld::String(format!("#{name}"))),
            ]
            .into(),
        );
        let mut body = ipld_core::serde::to_ipld(&message).map_err(|e| e.to_string())?;
        if let Ipld::Map(m) = &mut body {
            m.remove("$type");
        }
        let mut out = encode_dag_cbor(&header).map_err(|e| e.to_string())?;
        out.extend(encode_dag_cbor(&body).map_err(|e| e.to_string())?);
        Ok(out)
    }
}

/// Why a frame is not an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("a {0} frame is not one this version reads")]
    Unknown(String),
    #[error("{field} is not valid JSON: {reason}")]
    BadJson { field: &'static str, reason: String },
}

impl AssistantEvent {
    /// The event a `subscribeReply` frame carries, with its seq: the
    /// inverse of [`AssistantEvent::to_frame`], for clients that read the
    /// frames with the generated types.
    pub fn from_frame(frame: &SubscribeReplyMessage) -> Result<(i64, AssistantEvent), FrameError> {
        let json = |field: &'static str, text: &str| {
            serde_json::from_str(text).map_err(|e| FrameError::BadJson {
                field,
                reason: e.to_string(),
            })
        };
        let value = |field, data: &Option<Data>, text: &Option<String>| match (data, text) {
            (Some(d), _) => Ok(serde_json::to_value(d).expect("data is JSON")),
            (None, Some(t)) => json(field, t),
            (None, None) => Ok(serde_json::Value::Null),
        };
        Ok(match frame.clone() {
            SubscribeReplyMessage::TextDelta(f) => (
                f.seq,
                AssistantEvent::TextDelta {
                    message_id: f.message_id,
                    text: f.text,
                },
            ),
            SubscribeReplyMessage::Message(f) => (
                f.seq,
                AssistantEvent::Message {
                    message_id: f.message_id,
                    text: f.text,
                    model: f.model,
                },
            ),
            SubscribeReplyMessage::ToolCall(f) => (
                f.seq,
                AssistantEvent::ToolCall {
                    args: value("argsJson", &f.args, &f.args_json)?,
                    call_id: f.call_id,
                    tool: f.tool,
                    label: f.label,
                    effects: f.effects,
                },
            ),
            SubscribeReplyMessage::ToolResult(f) => (
                f.seq,
                AssistantEvent::ToolResult {
                    body: value("bodyJson", &f.body, &f.body_json)?,
                    call_id: f.call_id,
                    tool: f.tool,
                    label: f.label,
                    outcome: f.outcome,
                    ok: f.ok.unwrap_or(true),
                    job_id: f.job_id,
                    effects: f.effects,
                    subject: f.subject,
                    elapsed_ms: f.elapsed_ms.and_then(|ms| u64::try_from(ms).ok()),
                    decision: f.decision,
                    output_blob: f.output_blob.map(Box::new),
                },
            ),
            SubscribeReplyMessage::Observation(f) => (
                f.seq,
                AssistantEvent::Observation {
                    id: f.id,
                    job_id: f.job_id,
                    state: f.state,
                    text: f.text,
                    reason: f.reason,
                },
            ),
            SubscribeReplyMessage::ConfirmRequired(f) => (
                f.seq,
                AssistantEvent::ConfirmRequired {
                    id: f.id,
                    call_id: f.call_id,
                    tool: f.tool,
                    label: f.label,
                    effects: f.effects,
                    confirmation: f.confirmation,
                },
            ),
            SubscribeReplyMessage::Error(f) => (
                f.seq,
                AssistantEvent::Error {
                    code: f.code,
                    message: f.message,
                },
            ),
            SubscribeReplyMessage::Done(f) => (f.seq, AssistantEvent::Done { reason: f.reason }),
            other => {
                return Err(FrameError::Unknown(
                    format!("{other:?}").chars().take(64).collect(),
                ));
            }
        })
    }
}

/// A JSON value as a frame carries it: as data (a lexicon `unknown`) when
/// it is one, else as JSON text beside it (`argsJson`, `bodyJson`).
fn as_data_or_json(value: serde_json::Value) -> (Option<Data>, Option<String>) {
    let text = value.to_string();
    match as_unknown(value) {
        Some(d) => (Some(d), None),
        None => (None, Some(text)),
    }
}

/// The value as a lexicon `unknown`, if it is one.
fn as_unknown(value: serde_json::Value) -> Option<Data> {
    let d: Data = serde_json::from_value(value).ok()?;
    let mut errors = Vec::new();
    support::unknown(
        &d,
        crate::lexicon::validate_by_type,
        &Path::Root,
        &mut errors,
    );
    errors.is_empty().then_some(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lexicon_runtime::Validate;
    use serde_json::json;

    #[test]
    fn tool_call_args_the_data_model_cannot_hold_go_as_json_text() {
        let call = |args: serde_json::Value| AssistantEvent::ToolCall {
            call_id: "c1".into(),
            tool: "mcp_calc_add".into(),
            args,
            label: None,
            effects: None,
        };
        let SubscribeReplyMessage::ToolCall(f) =
            call(json!({"a": 2.5, "b": [1, 0.125]})).to_frame(3)
        else {
            panic!("a toolCall frame")
        };
        assert!(f.args.is_none());
        let text = f.args_json.as_deref().unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(text).unwrap(),
            json!({"a": 2.5, "b": [1, 0.125]})
        );
        SubscribeReplyMessage::ToolCall(f.clone())
            .validate()
            .unwrap();
        // Integers and strings go as data, with no text beside them.
        let SubscribeReplyMessage::ToolCall(f) = call(json!({"a": 2, "q": "x"})).to_frame(4) else {
            panic!("a toolCall frame")
        };
        assert!(f.args.is_some() && f.args_json.is_none());
    }

    #[test]
    fn wire_form_is_seed_000() {
        let e = AssistantEvent::ToolResult {
            call_id: "c1".into(),
            tool: Some("search".into()),
            label: None,
            outcome: ToolResultOutcome::Refused,
            ok: false,
            body: json!("denied"),
            job_id: None,
            effects: None,
            subject: None,
            elapsed_ms: Some(4),
            decision: Some(ToolResultDecision::Declined),
            output_blob: None,
        };
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!({"type":"tool_result","callId":"c1","tool":"search","outcome":"refused","ok":false,"body":"denied","elapsedMs":4,"decision":"declined"})
        );
        let back: AssistantEvent = serde_json::from_str(&e.to_json_line()).unwrap();
        assert_eq!(back, e);
        let err = AssistantEvent::Error {
            code: ErrorCode::OperationInterrupted,
            message: None,
        };
        assert_eq!(
            err.to_json_line(),
            r#"{"type":"error","code":"operation_interrupted"}"#
        );
    }

    #[test]
    fn frames_validate() {
        let events = [
            AssistantEvent::TextDelta {
                message_id: "k:0".into(),
                text: "hi".into(),
            },
            AssistantEvent::ToolCall {
                call_id: "c".into(),
                tool: "t".into(),
                args: json!({"a": 1, "f": 0.5}),
                label: None,
                effects: None,
            },
            AssistantEvent::ToolCall {
                call_id: "c".into(),
                tool: "t".into(),
                args: json!({"$type": "chat.gel.assistant.defs#textPart"}),
                label: None,
                effects: None,
            },
            AssistantEvent::Done {
                reason: DoneReason::End,
            },
        ];
        for (i, e) in events.iter().enumerate() {
            let f = e.to_frame(i as i64);
            f.validate().unwrap();
            if let SubscribeReplyMessage::ToolCall(c) = &f {
                assert!(c.args.is_none(), "not a valid unknown: {c:?}");
            }
        }
    }
}
