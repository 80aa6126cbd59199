//! Stream out (see fixtures/streams/README.md): `AssistantEvent`, what a live client
//! sees of a reply while it is generated, as JSON with a `type` tag.
//!
//! - `text_delta` (`messageId`, `text`): a chunk of text; `message`
//!   (`messageId`, `text`, `model`): the complete text for that
//!   `messageId`, which a delta-aware client puts in place of the deltas
//!   (never appends). A `message` is also sent for a text part that never
//!   got its end, when its turn closes, so the client ends up with exactly
//!   the recorded text.
//! - `tool_call` (`callId`, `tool`, `args`, `label`): sent once a call's
//!   arguments are complete; `tool_result` (`callId`, `tool`, `label`,
//!   `outcome`, `elapsedMs`, `decision`).
//! - `confirm_required` (`id`: the waiting reply's record key, `callId`,
//!   `tool`, `label`, `confirmation`): the stream ends after these until the
//!   approval is answered.
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
    self as sub, Confirmation, DoneReason, ErrorCode, SubscribeReplyMessage, ToolResultDecision,
    ToolResultOutcome,
};
use crate::lexicon::support::{self, Data, Path};

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
    },
    ToolResult {
        call_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label: Option<String>,
        outcome: ToolResultOutcome,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        elapsed_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        decision: Option<ToolResultDecision>,
    },
    ConfirmRequired {
        /// The pending action: the waiting reply's record key.
        id: String,
        call_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label: Option<String>,
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

/// Error codes of seed 000 that the generated `ErrorCode` knows only as
/// `Other`.
pub mod codes {
    /// The model's stream was cut before it ended.
    pub const OPERATION_INTERRUPTED: &str = "operation_interrupted";
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
            } => {
                let text = (!args.is_null()).then(|| args.to_string());
                let (args, args_json) = match frame_args(args) {
                    Some(d) => (Some(d), None),
                    None => (None, text),
                };
                SubscribeReplyMessage::ToolCall(sub::ToolCall {
                    seq,
                    call_id,
                    tool,
                    args,
                    args_json,
                    label,
                    extra: extra(),
                })
            }
            AssistantEvent::ToolResult {
                call_id,
                tool,
                label,
                outcome,
                elapsed_ms,
                decision,
            } => SubscribeReplyMessage::ToolResult(sub::ToolResult {
                seq,
                call_id,
                tool,
                label,
                outcome,
                elapsed_ms: elapsed_ms.map(|ms| i64::try_from(ms).unwrap_or(i64::MAX)),
                decision,
                extra: extra(),
            }),
            AssistantEvent::ConfirmRequired {
                id,
                call_id,
                tool,
                label,
                confirmation,
            } => SubscribeReplyMessage::ConfirmRequired(sub::ConfirmRequired {
                seq,
                id,
                call_id,
                tool,
                label,
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

/// The arguments as a frame's `args` (a lexicon `unknown`), if they are
/// one.
fn frame_args(args: serde_json::Value) -> Option<Data> {
    let d: Data = serde_json::from_value(args).ok()?;
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
    use crate::lexicon::support::Validate;
    use serde_json::json;

    #[test]
    fn tool_call_args_the_data_model_cannot_hold_go_as_json_text() {
        let call = |args: serde_json::Value| AssistantEvent::ToolCall {
            call_id: "c1".into(),
            tool: "mcp_calc_add".into(),
            args,
            label: None,
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
            elapsed_ms: Some(4),
            decision: Some(ToolResultDecision::Declined),
        };
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!({"type":"tool_result","callId":"c1","tool":"search","outcome":"refused","elapsedMs":4,"decision":"declined"})
        );
        let back: AssistantEvent = serde_json::from_str(&e.to_json_line()).unwrap();
        assert_eq!(back, e);
        let err = AssistantEvent::Error {
            code: ErrorCode::Other(codes::OPERATION_INTERRUPTED.into()),
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
            },
            AssistantEvent::ToolCall {
                call_id: "c".into(),
                tool: "t".into(),
                args: json!({"$type": "chat.gel.assistant.defs#textPart"}),
                label: None,
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
