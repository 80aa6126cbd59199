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
//! The sealed content keeps what the events alone carried: each call's
//! label, effects and (while it waits) its confirmation and pending-action
//! id, each result's outcome, elapsed time, label, job id, subject and
//! observations, and the error the run ended with. A record from before those were kept gets them inferred: an
//! outcome of `refused` for a denied call and `succeeded` otherwise, no
//! elapsed time or labels, the default confirmation wording, the reply key
//! as the pending id, and a generic error.

use super::approval::{MAX_WORDS, default_confirmation, truncate_words};
use super::assemble::FinishedCall;
use super::events::AssistantEvent;
use super::keys::ReplyKey;
use super::results::{CallFacts, group_observations, result_event};
use crate::lexicon::chat::gel::assistant::defs::{
    PlainContent, PlainContentPartsItem, ToolCallPartApproval,
};
use crate::lexicon::chat::gel::assistant::message::{Message, MessageStatus, MessageStopReason};
use crate::lexicon::chat::gel::assistant::subscribe_reply::{DoneReason, ErrorCode};

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
    // The tool results since the last other part.
    let mut group = Vec::new();
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
                    label: c.label.clone(),
                    effects: c.effects.clone(),
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
                        label: c.label.clone(),
                        effects: c.effects.clone(),
                        confirmation: c
                            .confirmation
                            .clone()
                            .unwrap_or_else(|| default_confirmation(&call)),
                    });
                }
            }
            PlainContentPartsItem::ToolResultPart(r) => {
                let call = parts.iter().find_map(|p| match p {
                    PlainContentPartsItem::ToolCallPart(c) if c.call_id == r.call_id => Some(c),
                    _ => None,
                });
                events.push(result_event(r, call.map(CallFacts::of).unwrap_or_default()));
                group.push(r);
                // The group's observations follow its last result.
                if !matches!(
                    parts.get(pos + 1),
                    Some(PlainContentPartsItem::ToolResultPart(_))
                ) {
                    events.extend(group_observations(&group));
                    group.clear();
                }
            }
            // Reasoning is private; other parts have no event.
            _ => {}
        }
    }
    let done = |reason| AssistantEvent::Done { reason };
    // The error the run ended with, as it reported it.
    let stored_error = content
        .and_then(|c| c.error.as_ref())
        .map(|e| AssistantEvent::Error {
            code: crate::lexicon_runtime::StringEnum::from_string(e.code.clone())
                .unwrap_or_else(ErrorCode::Other),
            message: e.message.clone(),
        });
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
            events.push(stored_error.unwrap_or_else(|| AssistantEvent::Error {
                code: ErrorCode::AssistantProvider,
                message: Some(truncate_words("the reply failed", MAX_WORDS)),
            }));
            events.push(done(DoneReason::Interrupted));
        }
        MessageStatus::Interrupted => {
            if let Some(e) = stored_error {
                events.push(e);
            } else if record.stop_reason != Some(MessageStopReason::Aborted) {
                events.push(AssistantEvent::Error {
                    code: ErrorCode::OperationInterrupted,
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

/// The live run's events with each message's deltas (and snapshots)
/// folded into one `message` with its final text, where it first showed:
/// what a client that joined after the run sees, and what [`replay`] of
/// the finished record equals. `model` is the record's model id.
pub fn fold_deltas(live: &[AssistantEvent], model: Option<String>) -> Vec<AssistantEvent> {
    let mut finals: std::collections::HashMap<String, String> = Default::default();
    let mut snapshots: std::collections::HashMap<String, String> = Default::default();
    for e in live {
        match e {
            AssistantEvent::TextDelta { message_id, text } => {
                finals.entry(message_id.clone()).or_default().push_str(text);
            }
            AssistantEvent::Message {
                message_id, text, ..
            } => {
                snapshots.insert(message_id.clone(), text.clone());
            }
            _ => {}
        }
    }
    finals.extend(snapshots);
    let mut shown = std::collections::HashSet::new();
    let mut out = Vec::new();
    for e in live {
        match e {
            AssistantEvent::TextDelta { message_id, .. }
            | AssistantEvent::Message { message_id, .. } => {
                if shown.insert(message_id.clone()) {
                    out.push(AssistantEvent::Message {
                        message_id: message_id.clone(),
                        text: finals[message_id].clone(),
                        model: model.clone(),
                    });
                }
            }
            other => out.push(other.clone()),
        }
    }
    out
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

    /// For every stream fixture, the events replayed from the finished
    /// record equal the live run's, field for field, with deltas folded
    /// into whole `message`s.
    #[test]
    fn replay_equals_the_live_run_with_deltas_folded() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/streams");
        let mut cases: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("input.jsonl").is_file())
            .collect();
        cases.sort();
        assert!(cases.len() >= 15, "{cases:?}");
        for case in cases {
            let name = case.file_name().unwrap().to_string_lossy().into_owned();
            let input = std::fs::read_to_string(case.join("input.jsonl")).unwrap();
            let options: serde_json::Value = std::fs::read_to_string(case.join("options.json"))
                .ok()
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or_default();
            let key = ReplyKey::first(Tid::parse("3lbqzdw5pzk22").unwrap());
            let policy = Arc::new(AskFor::from_fixture_options(&options));
            let finished = Reply::new(key, policy).run_jsonl(&input);
            let mut record = pending_record();
            finished.reply.fill(&mut record);
            let replayed = replay(&key, &record, Some(&finished.reply.content));
            let model = record.model.as_ref().map(|m| m.id.clone());
            assert_eq!(replayed, fold_deltas(&finished.events, model), "{name}");
        }
    }

    #[test]
    fn pending_replays_nothing() {
        let key = ReplyKey::first(Tid::parse("3lbqzdw5pzk22").unwrap());
        let record = pending_record();
        assert!(replay(&key, &record, None).is_empty());
    }
}
