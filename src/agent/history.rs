//! The branch a reply answers, as the provider-neutral [`Conversation`]
//! one model turn is asked with.
//!
//! - User messages give their text (and the extracted text of attached
//!   files); an approval answer has none and is left out: its effect is in
//!   the reply to it, which repeats the decided calls with their results.
//! - An assistant reply is cut into turns at its tool results: the text,
//!   reasoning and calls of one model turn, then the results of those
//!   calls. A call without a result in its reply (waiting, cut, never run)
//!   is left out, so every call the provider sees has its result.
//! - A result whose call queued work (`accepted`, a `jobId`) gives its
//!   output followed by what became of the work: the result it captured
//!   (the observation's `output`), or how it ended without one.
//! - `providerData` goes back only to the provider that wrote it.
//! - Consecutive assistant turns (a waiting reply's text, then the reply
//!   to its answer) are merged into one.

use std::collections::{HashMap, HashSet};

use crate::chat::ChatRecord;
use crate::lexicon::chat::gel::assistant::defs::{
    PlainContentPartsItem, ProviderData, ToolObservationState, ToolResultPart,
};
use crate::lexicon::chat::gel::assistant::message::MessageRole;
use crate::provider::{AssistantPart, Conversation, ToolResultItem, Turn};

/// The history for a turn of `provider` from the opened `branch` (oldest
/// first; records that did not open are left out).
pub fn conversation(system: Option<String>, branch: &[ChatRecord], provider: &str) -> Conversation {
    let mut turns = Vec::new();
    for record in branch {
        let Some(content) = &record.content else {
            continue;
        };
        if record.message.role == MessageRole::User {
            if let Some(text) = user_text(&content.parts) {
                turns.push(Turn::User { text });
            }
        } else {
            let same = record
                .message
                .model
                .as_ref()
                .is_some_and(|m| m.provider == provider);
            turns.extend(assistant_turns(&content.parts, same));
        }
    }
    Conversation {
        system: system.filter(|s| !s.is_empty()),
        turns: merge_assistant_runs(turns),
    }
}

/// The text a user message gives the model, if any.
fn user_text(parts: &[PlainContentPartsItem]) -> Option<String> {
    let mut out: Vec<String> = Vec::new();
    for p in parts {
        match p {
            PlainContentPartsItem::TextPart(t) => out.push(t.text.clone()),
            PlainContentPartsItem::FilePart(f) => {
                if let Some(x) = &f.extracted {
                    let name = f.name.as_deref().unwrap_or("attachment");
                    out.push(format!("[{name}]\n{}", x.text));
                }
            }
            _ => {}
        }
    }
    (!out.is_empty()).then(|| out.join("\n\n"))
}

/// One reply's parts as model turns and tool results. `same_provider`:
/// keep `providerData`.
pub fn assistant_turns(parts: &[PlainContentPartsItem], same_provider: bool) -> Vec<Turn> {
    let answered: HashSet<&str> = parts
        .iter()
        .filter_map(|p| match p {
            PlainContentPartsItem::ToolResultPart(r) => Some(r.call_id.as_str()),
            _ => None,
        })
        .collect();
    let data = |d: &Option<ProviderData>| {
        if same_provider {
            d.as_ref().map(|d| d.0.clone())
        } else {
            None
        }
    };
    let mut names: HashMap<&str, &str> = HashMap::new();
    let mut turns = Vec::new();
    let mut current: Vec<AssistantPart> = Vec::new();
    let mut results: Vec<ToolResultItem> = Vec::new();
    let flush = |current: &mut Vec<AssistantPart>,
                 results: &mut Vec<ToolResultItem>,
                 turns: &mut Vec<Turn>| {
        if !current.is_empty() {
            turns.push(Turn::Assistant {
                parts: std::mem::take(current),
            });
        }
        if !results.is_empty() {
            turns.push(Turn::ToolResults {
                results: std::mem::take(results),
            });
        }
    };
    for p in parts {
        let part = match p {
            PlainContentPartsItem::TextPart(t) => AssistantPart::Text {
                text: t.text.clone(),
                provider_data: data(&t.provider_data),
            },
            PlainContentPartsItem::ReasoningPart(r) => AssistantPart::Reasoning {
                text: r.text.clone(),
                provider_data: data(&r.provider_data),
            },
            PlainContentPartsItem::ToolCallPart(c) => {
                let Some(arguments) = &c.arguments else {
                    continue;
                };
                if !answered.contains(c.call_id.as_str()) {
                    continue;
                }
                names.insert(&c.call_id, &c.name);
                AssistantPart::ToolCall {
                    id: c.call_id.clone(),
                    name: c.name.clone(),
                    arguments: arguments.clone(),
                    provider_data: data(&c.provider_data),
                }
            }
            PlainContentPartsItem::ToolResultPart(r) => {
                let Some(name) = names.get(r.call_id.as_str()) else {
                    continue;
                };
                results.push(ToolResultItem {
                    call_id: r.call_id.clone(),
                    name: (*name).to_owned(),
                    output: with_job(r),
                    is_error: r.is_error.unwrap_or(false),
                });
                continue;
            }
            _ => continue,
        };
        // A model part after results starts the next turn.
        if !results.is_empty() {
            flush(&mut current, &mut results, &mut turns);
        }
        current.push(part);
    }
    flush(&mut current, &mut results, &mut turns);
    turns
}

/// A result's output as the model reads it: for queued work, followed by
/// its captured result, or by how it ended without one.
fn with_job(r: &ToolResultPart) -> String {
    let (Some(job), Some(seen)) = (&r.job_id, &r.observations) else {
        return r.output.clone();
    };
    if let Some(captured) = seen
        .iter()
        .rev()
        .find(|o| o.state == ToolObservationState::Captured)
    {
        let result = captured
            .output
            .as_deref()
            .or(captured.text.as_deref())
            .unwrap_or("");
        return format!("{}\n\n[the result of {job}]\n{result}", r.output);
    }
    match seen.last() {
        Some(last) if last.state != ToolObservationState::Awaited => {
            let reason = last
                .reason
                .as_ref()
                .map(|r| format!(" ({})", r.as_str()))
                .unwrap_or_default();
            let text = last
                .text
                .as_deref()
                .map(|t| format!(": {t}"))
                .unwrap_or_default();
            format!(
                "{}\n\n[{job} gave no result: {}{reason}{text}]",
                r.output,
                last.state.as_str()
            )
        }
        _ => r.output.clone(),
    }
}

/// Appends `turns` (the reply being made) to `conversation`, merging an
/// assistant turn into one it follows.
pub fn append(conversation: &mut Conversation, turns: Vec<Turn>) {
    let mut all = std::mem::take(&mut conversation.turns);
    all.extend(turns);
    conversation.turns = merge_assistant_runs(all);
}

fn merge_assistant_runs(turns: Vec<Turn>) -> Vec<Turn> {
    let mut out: Vec<Turn> = Vec::with_capacity(turns.len());
    for t in turns {
        match (out.last_mut(), t) {
            (Some(Turn::Assistant { parts }), Turn::Assistant { parts: more }) => {
                parts.extend(more)
            }
            (_, t) => out.push(t),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::record::{pending_reply, user_message};
    use crate::chat::{Attempt, ChatRecord};
    use crate::lexicon::chat::gel::assistant::defs::{
        ModelRef, PlainContent, ReasoningPart, TextPart, ToolCallPart, ToolCallPartApproval,
        ToolResultPart,
    };
    use crate::lexicon::chat::gel::assistant::message::MessageStatus;
    use crate::lexicon_runtime::{AtUri, Datetime};

    fn chat() -> AtUri {
        AtUri::new("at://did:plc:ewvi7nxzyoun6zhxrhs64oiz/chat.gel.assistant.chat/3lbqzcx2ss222")
            .unwrap()
    }

    fn now() -> Datetime {
        Datetime::new("2026-12-01T00:00:00.000Z").unwrap()
    }

    fn content(parts: Vec<PlainContentPartsItem>) -> Option<PlainContent> {
        Some(PlainContent {
            error: None,
            parts,
            extra: Default::default(),
        })
    }

    fn text(t: &str) -> PlainContentPartsItem {
        PlainContentPartsItem::TextPart(TextPart {
            provider_data: None,
            text: t.into(),
            extra: Default::default(),
        })
    }

    fn call(id: &str, approval: Option<ToolCallPartApproval>) -> PlainContentPartsItem {
        PlainContentPartsItem::ToolCallPart(ToolCallPart {
            confirmation: None,
            label: None,
            effects: None,
            approval,
            pending_id: None,
            call_id: id.into(),
            arguments: Some("{}".into()),
            provider_data: Some(ProviderData(r#"{"id":"fc_1"}"#.into())),
            source: None,
            name: "f".into(),
            extra: Default::default(),
        })
    }

    fn result(id: &str) -> PlainContentPartsItem {
        PlainContentPartsItem::ToolResultPart(ToolResultPart {
            outcome: None,
            elapsed_ms: None,
            label: None,
            call_id: id.into(),
            is_error: None,
            output: "out".into(),
            output_blob: None,
            job_id: None,
            subject: None,
            observations: None,
            output_format: None,
            extra: Default::default(),
        })
    }

    fn reply(provider: &str, parts: Vec<PlainContentPartsItem>) -> ChatRecord {
        let mut m = pending_reply(chat(), now());
        m.status = MessageStatus::Complete;
        m.model = Some(ModelRef {
            provider: provider.into(),
            id: "x".into(),
            extra: Default::default(),
        });
        ChatRecord::new("3lbqzdw5pzk22.r0", m, content(parts))
    }

    fn user(t: &str) -> ChatRecord {
        ChatRecord::new(
            "3lbqzdw5pzk22",
            user_message(chat(), None, Attempt::FIRST, now()),
            content(vec![text(t)]),
        )
    }

    #[test]
    fn replies_become_turns_cut_at_results_with_provider_data_only_for_its_provider() {
        let reasoning = PlainContentPartsItem::ReasoningPart(ReasoningPart {
            provider_data: Some(ProviderData(r#"{"signature":"s"}"#.into())),
            text: "hm".into(),
            extra: Default::default(),
        });
        let branch = vec![
            user("q"),
            reply(
                "anthropic",
                vec![
                    reasoning,
                    call("a", None),
                    result("a"),
                    text("done"),
                    call("cut", None),
                ],
            ),
            user("again"),
        ];
        let same = conversation(Some("sys".into()), &branch, "anthropic");
        assert_eq!(same.system.as_deref(), Some("sys"));
        assert_eq!(same.turns.len(), 5, "{:#?}", same.turns);
        let Turn::Assistant { parts } = &same.turns[1] else {
            panic!()
        };
        assert!(
            matches!(&parts[0], AssistantPart::Reasoning { provider_data: Some(d), .. } if d == r#"{"signature":"s"}"#)
        );
        assert!(
            matches!(&same.turns[2], Turn::ToolResults { results } if results[0].call_id == "a" && results[0].name == "f")
        );
        // The call without a result never ran: left out.
        let Turn::Assistant { parts } = &same.turns[3] else {
            panic!()
        };
        assert_eq!(parts.len(), 1);
        // Another provider gets no providerData at all.
        let other = conversation(None, &branch, "openai");
        for t in &other.turns {
            if let Turn::Assistant { parts } = t {
                for p in parts {
                    let data = match p {
                        AssistantPart::Text { provider_data, .. }
                        | AssistantPart::Reasoning { provider_data, .. }
                        | AssistantPart::ToolCall { provider_data, .. } => provider_data,
                    };
                    assert!(data.is_none(), "{p:?}");
                }
            }
        }
    }

    #[test]
    fn queued_work_gives_its_captured_result_after_the_output() {
        use crate::lexicon::chat::gel::assistant::defs::{ToolObservation, ToolObservationReason};
        let seen = |state, text: &str, output: Option<&str>, reason| ToolObservation {
            seq: None,
            state,
            text: Some(text.into()),
            output: output.map(str::to_owned),
            reason,
            extra: Default::default(),
        };
        let accepted = |observations| {
            let PlainContentPartsItem::ToolResultPart(mut r) = result("a") else {
                unreachable!()
            };
            r.job_id = Some("t1".into());
            r.observations = Some(observations);
            r
        };
        let captured = accepted(vec![
            seen(ToolObservationState::Awaited, "working...", None, None),
            seen(
                ToolObservationState::Captured,
                "# Report",
                Some("# Report\nbody"),
                None,
            ),
        ]);
        assert_eq!(
            with_job(&captured),
            "out\n\n[the result of t1]\n# Report\nbody"
        );
        let silent = accepted(vec![seen(
            ToolObservationState::Silent,
            "no result within 2 s",
            None,
            Some(ToolObservationReason::Exhausted),
        )]);
        assert_eq!(
            with_job(&silent),
            "out\n\n[t1 gave no result: silent (exhausted): no result within 2 s]"
        );
        let waiting = accepted(vec![seen(ToolObservationState::Awaited, "w", None, None)]);
        assert_eq!(with_job(&waiting), "out");
        let PlainContentPartsItem::ToolResultPart(plain) = result("a") else {
            unreachable!()
        };
        assert_eq!(with_job(&plain), "out");
    }

    #[test]
    fn an_answered_wait_merges_into_one_assistant_turn() {
        let waiting = reply(
            "anthropic",
            vec![
                text("let me"),
                call("w", Some(ToolCallPartApproval::Pending)),
            ],
        );
        let answer = ChatRecord::new(
            "3lbqzdw5pzk33",
            user_message(chat(), None, Attempt::FIRST, now()),
            content(vec![]),
        );
        let after = reply(
            "anthropic",
            vec![
                call("w", Some(ToolCallPartApproval::Approved)),
                result("w"),
                text("ok"),
            ],
        );
        let c = conversation(None, &[user("q"), waiting, answer, after], "anthropic");
        let kinds: Vec<&str> = c
            .turns
            .iter()
            .map(|t| match t {
                Turn::User { .. } => "user",
                Turn::Assistant { .. } => "assistant",
                Turn::ToolResults { .. } => "results",
            })
            .collect();
        assert_eq!(kinds, ["user", "assistant", "results", "assistant"]);
        let Turn::Assistant { parts } = &c.turns[1] else {
            panic!()
        };
        assert_eq!(
            parts.len(),
            2,
            "the waiting text and the repeated call: {parts:?}"
        );
    }
}
