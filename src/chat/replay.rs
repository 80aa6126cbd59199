//! The events of a reply that already ended, rebuilt from its record: what
//! `subscribeReply` sends a client that asks after the run (or after the
//! server that ran it restarted).
//!
//! A record keeps less than the run streamed, so the replay is the run's
//! *result*, not its history: one `message` per text part (the complete
//! text, never deltas), `tool_call` per finished call (not the decided
//! calls a reply to an answer repeats), `tool_result` per
//! result, `confirm_required` per call still waiting, then the ending the
//! status implies. Reasoning is private and never sent; a call that never
//! ended (no `arguments`) is not announced, as in the live run.
//!
//! What the record does not hold is left out or inferred: a result's
//! `outcome` is `refused` for a call the user denied and `succeeded`
//! otherwise (a stored result means the tool ran), `elapsedMs` and labels
//! are absent, and a waiting call's confirmation is the default wording.

use super::approval::{MAX_WORDS, default_confirmation, truncate_words};
use super::assemble::FinishedCall;
use super::events::{AssistantEvent, codes};
use super::keys::ReplyKey;
use crate::lexicon::chat::gel::assistant::defs::{
    PlainContent, PlainContentPartsItem, ToolCallPartApproval,
};
use crate::lexicon::chat::gel::assistant::message::{Message, MessageStatus, MessageStopReason};
use crate::lexicon::chat::gel::assistant::subscribe_reply::{
    DoneReason, ErrorCode, ToolResultDecision, ToolResultOutcome,
};

/// The events for reply `key` as its record stands; empty while it is
/// `pending` (nothing ended yet). `content` is the opened content (`None`
/// if it did not open: then only the ending is sent).
pub fn replay(
    key: &ReplyKey,
    record: &Message,
    content: Option<&PlainContent>,
) -> Vec<AssistantEvent> {
    if record.status == MessageStatus::Pending {
        return Vec::new();
    }
    let mut events = Vec::new();
    let mut waiting = Vec::new();
    let model = record.model.as_ref().map(|m| m.id.clone());
    let parts = content.map(|c| c.parts.as_slice()).unwrap_or_default();
    for (pos, part) in parts.iter().enumerate() {
        match part {
            PlainContentPartsItem::TextPart(t) => events.push(AssistantEvent::Message {
                message_id: format!("{key}/{pos}"),
                text: t.text.clone(),
                model: model.clone(),
            }),
            PlainContentPartsItem::ToolCallPart(c) => {
                let Some(arguments) = &c.arguments else {
                    continue;
                };
                // A decided call is the repeat a reply to an answer starts
                // with: announced in the waiting reply, not again.
                if matches!(
                    c.approval,
                    Some(ToolCallPartApproval::Approved | ToolCallPartApproval::Denied)
                ) {
                    continue;
                }
                let args = serde_json::from_str(arguments).unwrap_or(serde_json::Value::Null);
                events.push(AssistantEvent::ToolCall {
                    call_id: c.call_id.clone(),
                    tool: c.name.clone(),
                    args: args.clone(),
                    label: None,
                });
                if c.approval == Some(ToolCallPartApproval::Pending) {
                    let call = FinishedCall {
                        call_id: c.call_id.clone(),
                        name: c.name.clone(),
                        args,
                        arguments: arguments.clone(),
                    };
                    waiting.push(AssistantEvent::ConfirmRequired {
                        // A record from before pending ids named the reply.
                        id: c.pending_id.clone().unwrap_or_else(|| key.to_string()),
                        call_id: c.call_id.clone(),
                        tool: Some(c.name.clone()),
                        label: None,
                        confirmation: default_confirmation(&call),
                    });
                }
            }
            PlainContentPartsItem::ToolResultPart(r) => {
                let call = parts.iter().find_map(|p| match p {
                    PlainContentPartsItem::ToolCallPart(c) if c.call_id == r.call_id => Some(c),
                    _ => None,
                });
                let decision = call.and_then(|c| match c.approval {
                    Some(ToolCallPartApproval::Approved) => Some(ToolResultDecision::Approved),
                    Some(ToolCallPartApproval::Denied) => Some(ToolResultDecision::Declined),
                    _ => None,
                });
                events.push(AssistantEvent::ToolResult {
                    call_id: r.call_id.clone(),
                    tool: call.map(|c| c.name.clone()),
                    label: None,
                    outcome: if decision == Some(ToolResultDecision::Declined) {
                        ToolResultOutcome::Refused
                    } else {
                        ToolResultOutcome::Succeeded
                    },
                    elapsed_ms: None,
                    decision,
                });
            }
            // Reasoning is private; other parts have no event.
            _ => {}
        }
    }
    let done = |reason| AssistantEvent::Done { reason };
    match &record.status {
        MessageStatus::Waiting => events.extend(waiting),
        MessageStatus::Complete => events.push(done(
            if record.stop_reason == Some(MessageStopReason::Length) {
                DoneReason::Budget
            } else {
                DoneReason::End
            },
        )),
        MessageStatus::Failed => {
            events.push(AssistantEvent::Error {
                code: ErrorCode::AssistantProvider,
                message: Some(truncate_words("the reply failed", MAX_WORDS)),
            });
            events.push(done(DoneReason::Interrupted));
        }
        MessageStatus::Interrupted => {
            if record.stop_reason != Some(MessageStopReason::Aborted) {
                events.push(AssistantEvent::Error {
                    code: ErrorCode::Other(codes::OPERATION_INTERRUPTED.into()),
                    message: Some("the model's stream ended before the reply finished".into()),
                });
            }
            events.push(done(DoneReason::Interrupted));
        }
        // Pending is handled above; a status this version does not know
        // ends the stream without a reason it cannot vouch for.
        _ => events.push(done(DoneReason::Interrupted)),
    }
    events
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::chat::{AskFor, Reply};
    use crate::repo::tid::Tid;

    fn pending_record() -> Message {
        serde_json::from_value(serde_json::json!({
            "$type": "chat.gel.assistant.message",
            "chat": "at://did:plc:abc/chat.gel.assistant.chat/3lbqzdw5pzk22",
            "role": "assistant",
            "status": "pending",
            "createdAt": "2026-01-01T00:00:00Z",
        }))
        .unwrap()
    }

    /// A replay of a finished run carries the same complete texts, calls
    /// and ending as the live run (which also sent deltas).
    #[test]
    fn replay_matches_the_live_run_without_deltas() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/streams");
        for case in [
            "plain_text_small_deltas",
            "approval_waiting",
            "tool_calls_split_arguments",
            "cut_before_toolcall_end",
            "provider_error",
        ] {
            let input = std::fs::read_to_string(dir.join(case).join("input.jsonl")).unwrap();
            let options: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(dir.join(case).join("options.json")).unwrap(),
            )
            .unwrap();
            let tools: Vec<String> = options["approvalTools"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|t| t.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            let key = ReplyKey::first(Tid::parse("3lbqzdw5pzk22").unwrap());
            let finished = Reply::new(key, Arc::new(AskFor::tools(tools))).run_jsonl(&input);
            let mut record = pending_record();
            finished.reply.fill(&mut record);
            let replayed = replay(&key, &record, Some(&finished.reply.content));
            let live: Vec<&AssistantEvent> = finished
                .events
                .iter()
                .filter(|e| !matches!(e, AssistantEvent::TextDelta { .. }))
                .collect();
            // Same kinds of events, in the same order, apart from the
            // snapshots: the live run may send a `message` only for parts
            // without an end, the replay one per text part.
            let kinds = |es: &mut dyn Iterator<Item = &AssistantEvent>| -> Vec<String> {
                es.filter(|e| !matches!(e, AssistantEvent::Message { .. }))
                    .map(|e| e.to_json_line().split('"').nth(3).unwrap_or("").to_owned())
                    .collect()
            };
            assert_eq!(
                kinds(&mut replayed.iter()),
                kinds(&mut live.iter().copied()),
                "{case}"
            );
            // Each replayed text is what a live client ended up showing
            // for that message id: the live run's last `message` for it,
            // or its deltas put together.
            let mut texts: Vec<(String, String)> = replayed
                .iter()
                .filter_map(|e| match e {
                    AssistantEvent::Message {
                        message_id, text, ..
                    } => Some((message_id.clone(), text.clone())),
                    _ => None,
                })
                .collect();
            let mut shown: std::collections::BTreeMap<String, String> = Default::default();
            let mut snapshot: std::collections::BTreeMap<String, String> = Default::default();
            for e in &finished.events {
                match e {
                    AssistantEvent::TextDelta { message_id, text } => {
                        shown.entry(message_id.clone()).or_default().push_str(text);
                    }
                    AssistantEvent::Message {
                        message_id, text, ..
                    } => {
                        snapshot.insert(message_id.clone(), text.clone());
                    }
                    _ => {}
                }
            }
            shown.extend(snapshot);
            let live: Vec<(String, String)> = shown.into_iter().collect();
            texts.sort();
            assert_eq!(texts, live, "{case}");
        }
    }

    #[test]
    fn pending_replays_nothing() {
        let key = ReplyKey::first(Tid::parse("3lbqzdw5pzk22").unwrap());
        let record = pending_record();
        assert!(replay(&key, &record, None).is_empty());
    }
}
