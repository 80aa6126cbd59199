//! Tool approvals as records (see docs/chat.md), pure logic.
//!
//! 1. **Policy.** The caller says which calls need approval
//!    ([`ApprovalPolicy`]: [`NoApproval`], [`AskFor`] a set of tool names,
//!    or [`AskIf`] a predicate) and, for those, the words of the
//!    confirmation. A reply that ends with such calls is `waiting`, the
//!    calls carry `approval: pending`, and the stream ends with one
//!    `confirm_required` per call whose `id` is the waiting reply's record
//!    key (`subscribeReply#confirmRequired`) — see `chat::reply`.
//! 2. **Answer.** [`check_answer`] checks an answer against the chat's
//!    records: the reply must be the newest attempt (`PendingSuperseded`),
//!    not answered yet (`PendingResolved`: any user message continuing from
//!    it is its answer), waiting, and every decision must name a call that
//!    waits in it (`PendingUnknown`). Calls the answer does not mention are
//!    denied. [`Resolution::answer_content`] is the answer message's
//!    content: one `toolApprovalPart` per waiting call.
//! 3. **Settle.** [`Resolution::settle`] runs the approved calls through
//!    the host's closure and gives denied ones an error result;
//!    [`repeat_parts`] is the start of the reply to the answer: each call
//!    again, marked `approved`/`denied`, followed by its result, so the
//!    provider history stays valid. `Reply::resume` starts that reply.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use thiserror::Error;

use super::assemble::FinishedCall;
use super::input::ToolRun;
use super::keys::{MessageKey, ReplyKey};
use super::record::ChatRecord;
use super::results::{OutputTooLarge, keep_result};
use crate::lexicon::chat::gel::assistant::answer_approval::AnswerApprovalError;
use crate::lexicon::chat::gel::assistant::defs::{
    PlainContent, PlainContentPartsItem, ToolApprovalPart, ToolApprovalPartDecision, ToolCallPart,
    ToolCallPartApproval,
};
use crate::lexicon::chat::gel::assistant::message::{MessageRole, MessageStatus};
use crate::lexicon::chat::gel::assistant::subscribe_reply::{
    Confirmation, Effects, ErrorCode, ToolResultDecision, ToolResultOutcome,
};
use crate::lexicon_runtime::Validate;
use crate::seal::{BlobKey, SealedBlob};

// ---------------------------------------------------------------------------
// Policy

/// Which tool calls wait for the user's approval, and how to ask.
pub trait ApprovalPolicy {
    /// Whether `call` needs approval.
    fn needs_approval(&self, call: &FinishedCall) -> bool;

    /// What the user is asked (`confirm_required.confirmation`).
    fn confirmation(&self, call: &FinishedCall) -> Confirmation {
        default_confirmation(call)
    }

    /// One line describing the call (`tool_call.label`, …), if any.
    fn label(&self, _call: &FinishedCall) -> Option<String> {
        None
    }

    /// What the call may do, as its tool declares it, if it says.
    fn effects(&self, _call: &FinishedCall) -> Option<Effects> {
        None
    }
}

/// No call needs approval.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoApproval;

impl ApprovalPolicy for NoApproval {
    fn needs_approval(&self, _call: &FinishedCall) -> bool {
        false
    }
}

/// Calls to these tools (by name) need approval.
#[derive(Clone, Debug, Default)]
pub struct AskFor {
    pub tools: BTreeSet<String>,
    /// What each tool (by name) declares it may do.
    pub effects: BTreeMap<String, Effects>,
}

impl AskFor {
    pub fn tools<I: IntoIterator<Item = S>, S: Into<String>>(tools: I) -> AskFor {
        AskFor {
            tools: tools.into_iter().map(Into::into).collect(),
            effects: BTreeMap::new(),
        }
    }

    /// The policy a stream fixture's `options.json` describes:
    /// `approvalTools` (names that wait) and `toolEffects` (name →
    /// effects). Parts it cannot read are left out.
    pub fn from_fixture_options(options: &serde_json::Value) -> AskFor {
        let tools = options["approvalTools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t.as_str().map(str::to_owned));
        let effects = options
            .get("toolEffects")
            .and_then(|e| serde_json::from_value(e.clone()).ok())
            .unwrap_or_default();
        AskFor::tools(tools).with_effects(effects)
    }

    /// The same policy, with what each tool declares it may do.
    pub fn with_effects(mut self, effects: BTreeMap<String, Effects>) -> AskFor {
        self.effects = effects;
        self
    }
}

impl ApprovalPolicy for AskFor {
    fn needs_approval(&self, call: &FinishedCall) -> bool {
        self.tools.contains(&call.name)
    }

    fn effects(&self, call: &FinishedCall) -> Option<Effects> {
        self.effects.get(&call.name).cloned()
    }
}

/// Calls for which the predicate holds need approval.
pub struct AskIf<F>(pub F);

impl<F: Fn(&FinishedCall) -> bool> ApprovalPolicy for AskIf<F> {
    fn needs_approval(&self, call: &FinishedCall) -> bool {
        (self.0)(call)
    }
}

/// Longest `confirmation.target` / `.consequence` / `label`, in bytes.
pub const MAX_WORDS: usize = 1000;

/// `s` cut to at most `max` bytes on a character boundary, with `…` when
/// cut.
pub fn truncate_words(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The default words: the tool and its arguments, and that it will run.
pub fn default_confirmation(call: &FinishedCall) -> Confirmation {
    Confirmation {
        target: truncate_words(&format!("{} {}", call.name, call.arguments), MAX_WORDS),
        consequence: truncate_words(
            &format!(
                "The assistant runs the tool '{}' with these arguments.",
                call.name
            ),
            MAX_WORDS,
        ),
        extra: Default::default(),
    }
}

// ---------------------------------------------------------------------------
// Answers

/// Why an answer is refused. The first three are the `answerApproval`
/// lexicon's errors; the others are malformed requests (`InvalidRequest`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ApprovalError {
    /// The reply was already answered.
    #[error("reply {reply} was already answered (by {answer})")]
    PendingResolved { reply: String, answer: String },
    /// The reply is not waiting, or a decision names a call that does not
    /// wait in it.
    #[error("{0}")]
    PendingUnknown(String),
    /// A newer attempt replaced the reply.
    #[error("reply {reply} was replaced by the newer attempt {newer}")]
    PendingSuperseded { reply: String, newer: String },
    /// Two decisions for one call.
    #[error("two decisions for call {call_id:?}")]
    DuplicateDecision { call_id: String },
    /// A decision that is neither `approved` nor `denied`, or a part the
    /// lexicon refuses (a reason over 300 graphemes …).
    #[error("decision for call {call_id:?}: {reason}")]
    InvalidDecision { call_id: String, reason: String },
}

impl ApprovalError {
    /// The XRPC error name (`PendingResolved` …, or `InvalidRequest`).
    pub fn xrpc_error(&self) -> AnswerApprovalError {
        match self {
            ApprovalError::PendingResolved { .. } => AnswerApprovalError::PendingResolved,
            ApprovalError::PendingUnknown(_) => AnswerApprovalError::PendingUnknown,
            ApprovalError::PendingSuperseded { .. } => AnswerApprovalError::PendingSuperseded,
            ApprovalError::DuplicateDecision { .. } | ApprovalError::InvalidDecision { .. } => {
                AnswerApprovalError::Other("InvalidRequest".into())
            }
        }
    }

    /// The stream error code (seed 000: `pending_resolved` …).
    pub fn code(&self) -> ErrorCode {
        match self {
            ApprovalError::PendingResolved { .. } => ErrorCode::PendingResolved,
            ApprovalError::PendingUnknown(_) => ErrorCode::PendingUnknown,
            ApprovalError::PendingSuperseded { .. } => ErrorCode::PendingSuperseded,
            _ => ErrorCode::InvalidRequest,
        }
    }
}

/// The user's decision on one waiting call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Approved,
    Denied,
}

impl Decision {
    pub fn approval(self) -> ToolCallPartApproval {
        match self {
            Decision::Approved => ToolCallPartApproval::Approved,
            Decision::Denied => ToolCallPartApproval::Denied,
        }
    }

    /// The word seed 000 uses on `tool_result.decision`.
    pub fn event_decision(self) -> ToolResultDecision {
        match self {
            Decision::Approved => ToolResultDecision::Approved,
            Decision::Denied => ToolResultDecision::Declined,
        }
    }
}

/// One waiting call and what the answer decided.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedCall {
    /// The waiting copy (`approval: pending`).
    pub call: ToolCallPart,
    pub decision: Decision,
    pub reason: Option<String>,
    /// False for a call the answer did not mention (denied).
    pub mentioned: bool,
}

/// A checked answer to a waiting reply.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolution {
    pub reply: ReplyKey,
    /// Every waiting call, in the reply's order.
    pub calls: Vec<ResolvedCall>,
}

/// The pending calls of a reply's content, in order.
pub fn waiting_calls(content: &PlainContent) -> impl Iterator<Item = &ToolCallPart> {
    content.parts.iter().filter_map(|p| match p {
        PlainContentPartsItem::ToolCallPart(c)
            if c.approval == Some(ToolCallPartApproval::Pending) =>
        {
            Some(c)
        }
        _ => None,
    })
}

/// Checks `decisions` as the answer to the reply with key `reply`, given
/// every message record of its chat (content opened). Order of checks:
/// the reply exists and is a reply; no newer attempt exists
/// (`PendingSuperseded`); no user message continues from it yet
/// (`PendingResolved`); it is `waiting` with pending calls
/// (`PendingUnknown`); each decision is well-formed, names a waiting call
/// (`PendingUnknown`) and is the only one for it.
pub fn check_answer(
    records: &[ChatRecord],
    reply: &str,
    decisions: &[ToolApprovalPart],
) -> Result<Resolution, ApprovalError> {
    let unknown = ApprovalError::PendingUnknown;
    let key = ReplyKey::parse(reply)
        .map_err(|e| unknown(format!("{reply:?} is not a reply key: {e}")))?;
    let record = records
        .iter()
        .find(|r| r.key == reply)
        .ok_or_else(|| unknown(format!("no reply {reply}")))?;
    if let Some(newer) = records
        .iter()
        .filter_map(|r| match r.parsed_key() {
            Some(MessageKey::Reply(k)) if k.message() == key.message() && k > key => Some(k),
            _ => None,
        })
        .max()
    {
        return Err(ApprovalError::PendingSuperseded {
            reply: reply.to_string(),
            newer: newer.to_string(),
        });
    }
    if let Some(answer) = records
        .iter()
        .filter(|r| {
            r.message.role == MessageRole::User
                && r.message.parent.as_ref().map(|p| p.as_str()) == Some(reply)
        })
        .min_by(|a, b| a.key.cmp(&b.key))
    {
        return Err(ApprovalError::PendingResolved {
            reply: reply.to_string(),
            answer: answer.key.clone(),
        });
    }
    if record.message.status != MessageStatus::Waiting {
        return Err(unknown(format!(
            "reply {reply} is {}, not waiting for approval",
            record.message.status.as_str()
        )));
    }
    let content = record
        .content
        .as_ref()
        .ok_or_else(|| unknown(format!("reply {reply} has no opened content")))?;
    let mut calls: Vec<ResolvedCall> = waiting_calls(content)
        .map(|c| ResolvedCall {
            call: c.clone(),
            decision: Decision::Denied,
            reason: None,
            mentioned: false,
        })
        .collect();
    if calls.is_empty() {
        return Err(unknown(format!("reply {reply} has no waiting call")));
    }
    // A decision names its call by callId, or by the call's pendingId
    // (what a confirm_required event showed): both resolve to the call.
    let index: HashMap<&str, usize> = calls
        .iter()
        .enumerate()
        .flat_map(|(i, c)| {
            std::iter::once((c.call.call_id.as_str(), i))
                .chain(c.call.pending_id.as_deref().map(|p| (p, i)))
        })
        .rev() // the first of two calls with one id wins
        .collect();
    let mut decided = vec![false; calls.len()];
    let mut out: Vec<(usize, Decision, Option<String>)> = Vec::new();
    for d in decisions {
        let invalid = |reason: String| ApprovalError::InvalidDecision {
            call_id: d.call_id.chars().take(256).collect(),
            reason,
        };
        d.validate().map_err(|e| invalid(e.to_string()))?;
        let decision = match d.decision {
            ToolApprovalPartDecision::Approved => Decision::Approved,
            ToolApprovalPartDecision::Denied => Decision::Denied,
            ToolApprovalPartDecision::Other(ref s) => {
                return Err(invalid(format!(
                    "{:?} is neither \"approved\" nor \"denied\"",
                    s.chars().take(64).collect::<String>()
                )));
            }
        };
        let Some(&i) = index.get(d.call_id.as_str()) else {
            return Err(unknown(format!(
                "call {:?} does not wait in reply {reply}",
                d.call_id.chars().take(256).collect::<String>()
            )));
        };
        if let Some(quoted) = &d.pending_id
            && calls[i].call.pending_id.as_deref() != Some(quoted.as_str())
        {
            return Err(unknown(format!(
                "pending action {:?} is not the one call {:?} waits as",
                quoted.chars().take(64).collect::<String>(),
                d.call_id.chars().take(256).collect::<String>()
            )));
        }
        if std::mem::replace(&mut decided[i], true) {
            return Err(ApprovalError::DuplicateDecision {
                call_id: d.call_id.clone(),
            });
        }
        out.push((i, decision, d.reason.clone()));
    }
    for (i, decision, reason) in out {
        let c = &mut calls[i];
        c.decision = decision;
        c.reason = reason;
        c.mentioned = true;
    }
    Ok(Resolution { reply: key, calls })
}

/// What a denied call's error result says (the model sees it).
pub fn denial_output(reason: Option<&str>) -> String {
    match reason {
        Some(r) if !r.is_empty() => format!("The user denied this tool call: {r}"),
        _ => "The user denied this tool call.".to_string(),
    }
}

/// A waiting call after the answer: decided, and (if approved) run.
#[derive(Clone, Debug, PartialEq)]
pub struct Settled {
    pub call: ToolCallPart,
    pub decision: Decision,
    pub run: ToolRun,
}

impl Resolution {
    /// The answer message's content: one `toolApprovalPart` per waiting
    /// call, the unmentioned ones written as `denied`.
    pub fn answer_content(&self) -> PlainContent {
        PlainContent {
            parts: self
                .calls
                .iter()
                .map(|c| {
                    PlainContentPartsItem::ToolApprovalPart(ToolApprovalPart {
                        call_id: c.call.call_id.clone(),
                        pending_id: c.call.pending_id.clone(),
                        decision: match c.decision {
                            Decision::Approved => ToolApprovalPartDecision::Approved,
                            Decision::Denied => ToolApprovalPartDecision::Denied,
                        },
                        reason: c.reason.clone(),
                        extra: Default::default(),
                    })
                })
                .collect(),
            error: None,
            extra: Default::default(),
        }
    }

    /// Runs each approved call with `run` (the host executes the tool);
    /// each denied call gets a refused error result carrying the reason.
    pub fn settle(&self, mut run: impl FnMut(&ToolCallPart) -> ToolRun) -> Vec<Settled> {
        self.calls
            .iter()
            .map(|c| {
                let run = match c.decision {
                    Decision::Approved => run(&c.call),
                    Decision::Denied => ToolRun {
                        is_error: true,
                        ..ToolRun::new(
                            ToolResultOutcome::Refused,
                            denial_output(c.reason.as_deref()),
                        )
                    },
                };
                Settled {
                    call: c.call.clone(),
                    decision: c.decision,
                    run,
                }
            })
            .collect()
    }
}

/// The start of the reply to an answer: each call again, marked
/// `approved`/`denied`, followed by its result (a denied call's is an
/// error), in the waiting reply's order; and the sealed blobs of outputs
/// too long for the record, each under `blob_key(call id, blobs so far)`.
pub fn repeat_parts(
    settled: &[Settled],
    mut blob_key: impl FnMut(&str, usize) -> BlobKey,
) -> Result<(Vec<PlainContentPartsItem>, Vec<SealedBlob>), OutputTooLarge> {
    let mut parts = Vec::with_capacity(settled.len() * 2);
    let mut blobs = Vec::new();
    for s in settled {
        let id = &s.call.call_id;
        let kept = keep_result(id, s.call.label.clone(), &s.run, || {
            blob_key(id, blobs.len())
        })?;
        let mut call = s.call.clone();
        call.approval = Some(s.decision.approval());
        // Decided: no longer a pending action.
        call.pending_id = None;
        call.confirmation = None;
        parts.push(PlainContentPartsItem::ToolCallPart(call));
        parts.push(PlainContentPartsItem::ToolResultPart(kept.part));
        blobs.extend(kept.blob);
    }
    Ok((parts, blobs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::keys::Attempt;
    use crate::chat::record::{pending_reply, user_message};
    use crate::lexicon_runtime::{AtUri, Datetime};

    const T: &str = "3lbqzdw5pzk22";

    fn call(id: &str, approval: Option<ToolCallPartApproval>) -> PlainContentPartsItem {
        PlainContentPartsItem::ToolCallPart(ToolCallPart {
            confirmation: None,
            label: None,
            effects: None,
            approval,
            pending_id: None,
            call_id: id.into(),
            arguments: Some("{}".into()),
            provider_data: None,
            source: None,
            name: "delete".into(),
            extra: Default::default(),
        })
    }

    fn chat() -> AtUri {
        AtUri::new("at://did:plc:abc/chat.gel.assistant.chat/3lbqzdw5aaaa2").unwrap()
    }

    fn now() -> Datetime {
        Datetime::new("2025-01-01T00:00:00Z").unwrap()
    }

    fn waiting(key: &str) -> ChatRecord {
        let mut m = pending_reply(chat(), now());
        m.status = MessageStatus::Waiting;
        let content = PlainContent {
            error: None,
            parts: vec![
                call("a", Some(ToolCallPartApproval::Pending)),
                call("b", Some(ToolCallPartApproval::Pending)),
                call("c", None),
            ],
            extra: Default::default(),
        };
        ChatRecord::new(key, m, Some(content))
    }

    fn decision(id: &str, d: ToolApprovalPartDecision) -> ToolApprovalPart {
        ToolApprovalPart {
            call_id: id.into(),
            pending_id: None,
            decision: d,
            reason: Some("no".into()),
            extra: Default::default(),
        }
    }

    #[test]
    fn unmentioned_calls_are_denied() {
        let key = format!("{T}.r0");
        let records = vec![waiting(&key)];
        let r = check_answer(
            &records,
            &key,
            &[decision("a", ToolApprovalPartDecision::Approved)],
        )
        .unwrap();
        assert_eq!(r.calls.len(), 2);
        assert_eq!(r.calls[0].decision, Decision::Approved);
        assert_eq!(
            (r.calls[1].decision, r.calls[1].mentioned),
            (Decision::Denied, false)
        );
        let answer = r.answer_content();
        answer.validate().unwrap();
        assert_eq!(answer.parts.len(), 2);
        let settled = r.settle(|_| ToolRun {
            elapsed_ms: Some(5),
            ..ToolRun::new(ToolResultOutcome::Succeeded, "ok")
        });
        let (parts, _) = repeat_parts(&settled, |_, _| BlobKey::from_bytes([0; 32])).unwrap();
        assert_eq!(parts.len(), 4);
        let PlainContentPartsItem::ToolResultPart(denied) = &parts[3] else {
            panic!()
        };
        assert_eq!(denied.is_error, Some(true));
        assert_eq!(denied.output, "The user denied this tool call.");
    }

    #[test]
    fn named_errors() {
        let key = format!("{T}.r0");
        let mut records = vec![waiting(&key)];
        let check = |records: &[ChatRecord], d: &[ToolApprovalPart]| {
            check_answer(records, &key, d).unwrap_err()
        };
        assert!(matches!(
            check(
                &records,
                &[decision("c", ToolApprovalPartDecision::Approved)]
            ),
            ApprovalError::PendingUnknown(_)
        ));
        assert!(matches!(
            check(
                &records,
                &[decision("zz", ToolApprovalPartDecision::Denied)]
            ),
            ApprovalError::PendingUnknown(_)
        ));
        assert!(matches!(
            check(
                &records,
                &[
                    decision("a", ToolApprovalPartDecision::Denied),
                    decision("a", ToolApprovalPartDecision::Approved)
                ]
            ),
            ApprovalError::DuplicateDecision { .. }
        ));
        assert!(matches!(
            check(
                &records,
                &[decision(
                    "a",
                    ToolApprovalPartDecision::Other("maybe".into())
                )]
            ),
            ApprovalError::InvalidDecision { .. }
        ));
        // An answer exists.
        let tid = crate::repo::tid::Tid::parse("3lbqzdw5pzk33").unwrap();
        let answer = user_message(
            chat(),
            Some(ReplyKey::parse(&key).unwrap()),
            Attempt::FIRST,
            now(),
        );
        records.push(ChatRecord::new(tid.to_string(), answer, None));
        let e = check(&records, &[]);
        assert!(matches!(e, ApprovalError::PendingResolved { .. }));
        assert_eq!(e.xrpc_error(), AnswerApprovalError::PendingResolved);
        assert_eq!(e.code(), ErrorCode::PendingResolved);
        // A newer attempt replaced it (checked first).
        records.push(waiting(&format!("{T}.r10")));
        let e = check(&records, &[]);
        assert!(
            matches!(e, ApprovalError::PendingSuperseded { ref newer, .. } if newer.ends_with(".r10"))
        );
        // Not waiting.
        let mut done = waiting(&key);
        done.message.status = MessageStatus::Complete;
        assert!(matches!(
            check(&[done], &[]),
            ApprovalError::PendingUnknown(_)
        ));
        assert!(matches!(
            check_answer(&[], "3lbqzdw5pzk22", &[]),
            Err(ApprovalError::PendingUnknown(_))
        ));
    }
}
