//! One reply's run (see docs/chat.md): feed the model's events in, get the
//! live events out, and finish with the fields that fill the pending reply
//! record.
//!
//! ```text
//! Reply::new(key, policy)            (or Reply::resume after an approval answer)
//!   push(event)      -> Option<AssistantEvent>      one per model event at most
//!   attach_provider_data(index, json)
//!   end_turn(stop, usage) -> events; tool_result(call, run) -> event; push … (agent loop)
//!   finish(End)      -> Finished { reply: FinishedReply, events }
//! ```
//!
//! How a run ends:
//!
//! | end | status | stopReason | last events |
//! |---|---|---|---|
//! | `Done{stop}` / `Done{toolUse}` | `complete` | as given | `done{end}` |
//! | `Done{length}` | `complete` | `length` | `done{budget}` |
//! | `Budget` (host's budget, between turns) | `complete` | the last turn's | `done{budget}` |
//! | any of the above with gated calls | `waiting` | as given | `confirm_required` per call, no `done` |
//! | `Done{error}` / `ProviderError` | `failed` | `error` | `error{assistant_provider}`, `done{interrupted}` |
//! | a refused event ([`StreamError`]) | `failed` | `error` | `error{assistant_provider}`, `done{interrupted}` |
//! | `Cut` (the stream ended without an end) | `interrupted` | — | `error{operation_interrupted}`, `done{interrupted}` |
//! | `Done{aborted}` / `Aborted` | `interrupted` | `aborted` | `done{interrupted}` |
//!
//! Whatever was assembled is kept in every case. A `Done{stop|toolUse}`
//! while a part still had no end is a stream error (`NotEnded`); with
//! `length` (and on a cut) unended parts are expected: text keeps what its
//! deltas built (and a `message` snapshot tells clients), a tool call is
//! kept without arguments and never runs.

use std::sync::Arc;

use super::approval::{ApprovalPolicy, MAX_WORDS, Settled, repeat_parts, truncate_words};
use super::assemble::{Assembler, CutCall, FinishedCall, PartKind, Step, StreamError, limits};
use super::events::AssistantEvent;
use super::input::{AssistantMessageEvent, Observed, StreamLine, ToolRun};
use super::keys::ReplyKey;
use super::results::{
    CallFacts, MAX_OBSERVATIONS, OutputTooLarge, keep_result, observation_event, result_event,
    stored_observation,
};
use crate::lexicon::chat::gel::assistant::defs::ReplyError as StoredError;
use crate::lexicon::chat::gel::assistant::defs::{
    ModelRef, PlainContent, PlainContentPartsItem, ToolCallPartApproval, ToolResultPart, Usage,
};
use crate::lexicon::chat::gel::assistant::message::{Message, MessageStatus, MessageStopReason};
use crate::lexicon::chat::gel::assistant::subscribe_reply::{
    Confirmation, DoneReason, Effects, ErrorCode, ToolResultOutcome,
};
use crate::lexicon_runtime::Validate;
use crate::seal::{BlobKey, SealedBlob};

fn random<const N: usize>() -> [u8; N] {
    let mut seed = [0u8; N];
    rand_core::Rng::fill_bytes(&mut crate::seal::os_rng(), &mut seed);
    seed
}

/// The key of a run's `index`th output blob, for call `call_id`:
/// SHA-256(seed ‖ reply key ‖ 0 ‖ call id ‖ 0 ‖ u64be(index)), so no two
/// blobs of a run share a key.
fn blob_key(seed: &[u8; 32], reply: &str, call_id: &str, index: usize) -> BlobKey {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(seed);
    h.update(reply.as_bytes());
    h.update([0]);
    h.update(call_id.as_bytes());
    h.update([0]);
    h.update((index as u64).to_be_bytes());
    BlobKey::from_bytes(h.finalize().into())
}

/// Longest `error.message` of the stream (`subscribeReply#error`), bytes.
const MAX_ERROR_MESSAGE: usize = 10_000;

/// Longest observation `text` (`subscribeReply#observation`), bytes.
const MAX_OBSERVATION_TEXT: usize = 10_000;

/// The tool results at the end of `content` (the last tool phase), in
/// order.
fn trailing_results(content: &mut [PlainContentPartsItem]) -> Vec<&mut ToolResultPart> {
    let start = content
        .iter()
        .rposition(|p| !matches!(p, PlainContentPartsItem::ToolResultPart(_)))
        .map_or(0, |i| i + 1);
    content[start..]
        .iter_mut()
        .filter_map(|p| match p {
            PlainContentPartsItem::ToolResultPart(r) => Some(r),
            _ => None,
        })
        .collect()
}

/// How a run ended (see the module's table).
#[derive(Clone, Debug, PartialEq)]
pub enum End {
    /// The model finished with this stop reason; `usage` is the last turn's.
    Done {
        stop_reason: MessageStopReason,
        usage: Option<Usage>,
    },
    /// The provider failed; `code` is what a UI shows
    /// (`assistant_provider` unless the host knows better).
    ProviderError {
        code: ErrorCode,
        message: String,
        usage: Option<Usage>,
    },
    /// The stream ended without an end (connection lost, end of input).
    Cut,
    /// The host cut the stream, knowing why (the provider went silent:
    /// `request_timeout`).
    CutBy { code: ErrorCode, message: String },
    /// The user or host stopped generation.
    Aborted,
    /// The host's step or token budget ran out between turns.
    Budget,
}

/// A host call the reply refuses; the reply is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplyError {
    #[error("a model turn is open; end it before adding tool results")]
    TurnOpen,
    #[error("no finished tool call {call_id:?} without a result in this reply")]
    UnknownCall { call_id: String },
    #[error("tool call {call_id:?} waits for approval; it cannot have a result yet")]
    AwaitingApproval { call_id: String },
    #[error("tool output of call {call_id:?} is {size} bytes, over the limit of {limit}")]
    OutputTooLarge {
        call_id: String,
        size: usize,
        limit: usize,
    },
    #[error("a reply holds at most {limit} parts")]
    TooManyParts { limit: usize },
    #[error("tool outcome {outcome:?} is not one of succeeded, accepted, refused, uncertain")]
    UnknownOutcome { outcome: String },
    #[error("call {call_id:?} queued no work (its result has no jobId) to observe")]
    NoJob { call_id: String },
    #[error("call {call_id:?} already has {limit} observations, the most a result keeps")]
    TooManyObservations { call_id: String, limit: usize },
    #[error("the reply already failed: {0}")]
    Failed(StreamError),
}

/// The fields of a finished reply.
#[derive(Clone, Debug, PartialEq)]
pub struct FinishedReply {
    pub key: ReplyKey,
    /// `complete`, `waiting`, `failed` or `interrupted`.
    pub status: MessageStatus,
    /// What the record's `content` seals.
    pub content: PlainContent,
    pub model: Option<ModelRef>,
    /// Summed over the reply's turns.
    pub usage: Option<Usage>,
    pub stop_reason: Option<MessageStopReason>,
    /// Why it failed (a refused event), if it did.
    pub error: Option<StreamError>,
    /// Call ids that wait for approval (status `waiting`).
    pub waiting: Vec<String>,
    /// Tool calls that never ended (kept without arguments, never run).
    pub cut_calls: Vec<CutCall>,
    /// The sealed blobs `content` references (tool outputs too long for the
    /// record): stored before the record, their keys sealed in it.
    pub blobs: Vec<SealedBlob>,
}

impl From<OutputTooLarge> for ReplyError {
    fn from(e: OutputTooLarge) -> ReplyError {
        ReplyError::OutputTooLarge {
            call_id: e.call_id,
            size: e.size,
            limit: e.limit,
        }
    }
}

impl FinishedReply {
    /// Fills the pending reply record's clear fields (status, model,
    /// usage, stopReason). Its `content` is `self.content` sealed, which
    /// the caller sets.
    pub fn fill(&self, pending: &mut Message) {
        pending.status = self.status.clone();
        pending.model = self.model.clone();
        pending.usage = self.usage.clone();
        pending.stop_reason = self.stop_reason.clone();
    }

    /// `{status, stopReason?, model?, usage?, content}` as atproto JSON
    /// (what the stream fixtures compare).
    pub fn summary_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        m.insert("status".into(), self.status.as_str().into());
        if let Some(s) = &self.stop_reason {
            m.insert("stopReason".into(), s.as_str().into());
        }
        if let Some(v) = &self.model {
            m.insert("model".into(), serde_json::to_value(v).expect("serializes"));
        }
        if let Some(v) = &self.usage {
            m.insert("usage".into(), serde_json::to_value(v).expect("serializes"));
        }
        m.insert(
            "content".into(),
            serde_json::to_value(&self.content).expect("serializes"),
        );
        serde_json::Value::Object(m)
    }
}

fn known_outcome(outcome: &ToolResultOutcome) -> Result<(), ReplyError> {
    match outcome {
        ToolResultOutcome::Other(s) => Err(ReplyError::UnknownOutcome {
            outcome: s.chars().take(64).collect(),
        }),
        _ => Ok(()),
    }
}

/// A finished run: the record's fields and the last events of the stream
/// (or, from [`Reply::run_jsonl`], all of them).
#[derive(Clone, Debug, PartialEq)]
pub struct Finished {
    pub reply: FinishedReply,
    pub events: Vec<AssistantEvent>,
}

#[derive(Debug)]
struct CallInfo {
    /// Position of the call part in the reply's content.
    pos: usize,
    call_id: String,
    name: String,
    label: Option<String>,
    effects: Option<Effects>,
    /// The confirmation, for a call that needs approval.
    gate: Option<Confirmation>,
    has_result: bool,
}

/// One reply being generated.
pub struct Reply {
    key: ReplyKey,
    key_text: String,
    policy: Arc<dyn ApprovalPolicy + Send + Sync>,
    content: Vec<PlainContentPartsItem>,
    turn: Option<Assembler>,
    calls: Vec<CallInfo>,
    model: Option<ModelRef>,
    usage: Option<Usage>,
    stop_reason: Option<MessageStopReason>,
    error: Option<StreamError>,
    cut_calls: Vec<CutCall>,
    /// The last messageId made, reused for runs of deltas.
    last_id: Option<(usize, String)>,
    /// Random per run: what pending-action ids are derived from, so they
    /// cannot be guessed from the reply key and the provider's call id.
    action_seed: [u8; 16],
    /// Random per run: what the keys of tool-output blobs are derived from.
    blob_seed: [u8; 32],
    /// The sealed blobs of outputs too long for the record, in order.
    blobs: Vec<SealedBlob>,
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reply")
            .field("key", &self.key_text)
            .field("parts", &self.content.len())
            .field("turn_open", &self.turn.is_some())
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl Reply {
    /// A new run for the reply `key`, asking for approval as `policy` says.
    pub fn new(key: ReplyKey, policy: Arc<dyn ApprovalPolicy + Send + Sync>) -> Reply {
        Reply {
            key,
            key_text: key.to_string(),
            policy,
            content: Vec::new(),
            turn: None,
            calls: Vec::new(),
            model: None,
            usage: None,
            stop_reason: None,
            error: None,
            cut_calls: Vec::new(),
            last_id: None,
            action_seed: random(),
            blob_seed: random(),
            blobs: Vec::new(),
        }
    }

    /// The same run with a fixed seed for the keys of its tool-output
    /// blobs, so a recorded run (a fixture) seals the same bytes every time.
    pub fn with_blob_seed(mut self, seed: [u8; 32]) -> Reply {
        self.blob_seed = seed;
        self
    }

    /// The same run with a fixed seed for its pending-action ids, so a
    /// recorded run (a fixture) gives the same ids every time.
    pub fn with_action_seed(mut self, seed: [u8; 16]) -> Reply {
        self.action_seed = seed;
        self
    }

    /// The pending-action id of call `call_id`: `pa-` then 26 base32
    /// characters of SHA-256(seed ‖ reply key ‖ 0 ‖ call id).
    fn pending_id(&self, call_id: &str) -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(self.action_seed);
        h.update(self.key_text.as_bytes());
        h.update([0]);
        h.update(call_id.as_bytes());
        let digest = h.finalize();
        let text = data_encoding::BASE32_NOPAD
            .encode(&digest[..16])
            .to_lowercase();
        format!("pa-{text}")
    }

    /// The reply to an approval answer: starts with the settled calls
    /// repeated (each marked `approved`/`denied`, then its result) and
    /// announces each result (`tool_result` with `decision`). The model's
    /// turn follows with [`Reply::push`].
    pub fn resume(
        key: ReplyKey,
        policy: Arc<dyn ApprovalPolicy + Send + Sync>,
        settled: &[Settled],
    ) -> Result<(Reply, Vec<AssistantEvent>), ReplyError> {
        let mut reply = Reply::new(key, policy);
        for s in settled {
            known_outcome(&s.run.outcome)?;
        }
        let (seed, key_text) = (reply.blob_seed, reply.key_text.clone());
        let (parts, blobs) =
            repeat_parts(settled, |call_id, n| blob_key(&seed, &key_text, call_id, n))?;
        reply.blobs = blobs;
        if parts.len() > limits::PARTS {
            return Err(ReplyError::TooManyParts {
                limit: limits::PARTS,
            });
        }
        let mut events = Vec::with_capacity(settled.len());
        for (i, s) in settled.iter().enumerate() {
            reply.calls.push(CallInfo {
                pos: 2 * i,
                call_id: s.call.call_id.clone(),
                name: s.call.name.clone(),
                // The label the waiting reply showed, kept with the call.
                label: s.call.label.clone(),
                effects: s.call.effects.clone(),
                gate: None,
                has_result: true,
            });
        }
        for pair in parts.chunks(2) {
            if let [
                PlainContentPartsItem::ToolCallPart(call),
                PlainContentPartsItem::ToolResultPart(result),
            ] = pair
            {
                events.push(result_event(result, CallFacts::of(call)));
            }
        }
        reply.content = parts;
        Ok((reply, events))
    }

    /// The model that answers, once the run named it.
    pub fn model(&self) -> Option<&ModelRef> {
        self.model.as_ref()
    }

    /// The finished calls without a result that need no approval: what
    /// the host runs before the next turn (a cut call never runs).
    pub fn calls_to_run(&self) -> Vec<FinishedCall> {
        self.calls
            .iter()
            .filter(|c| !c.has_result && c.gate.is_none())
            .filter_map(|c| match self.content.get(c.pos) {
                Some(PlainContentPartsItem::ToolCallPart(p)) => {
                    let arguments = p.arguments.clone()?;
                    Some(FinishedCall {
                        call_id: c.call_id.clone(),
                        name: c.name.clone(),
                        args: serde_json::from_str(&arguments).ok()?,
                        arguments,
                    })
                }
                _ => None,
            })
            .collect()
    }

    /// Records where call `call_id`'s tool lives (`toolCallPart.source`:
    /// an MCP server's URL or command); false if there is no such call.
    pub fn set_source(&mut self, call_id: &str, source: &str) -> bool {
        let Some(pos) = self
            .calls
            .iter()
            .rev()
            .find(|c| c.call_id == call_id)
            .map(|c| c.pos)
        else {
            return false;
        };
        match self.content.get_mut(pos) {
            Some(PlainContentPartsItem::ToolCallPart(p)) => {
                p.source = Some(truncate_words(source, 1024));
                true
            }
            _ => false,
        }
    }

    /// Whether a finished call waits for the user's approval.
    pub fn has_gated_calls(&self) -> bool {
        self.calls.iter().any(|c| c.gate.is_some() && !c.has_result)
    }

    /// The reply's parts so far, in order (the next turn's history).
    pub fn parts(&self) -> &[PlainContentPartsItem] {
        &self.content
    }

    pub fn key(&self) -> ReplyKey {
        self.key
    }

    /// The first refused event, once the reply has failed.
    pub fn failure(&self) -> Option<&StreamError> {
        self.error.as_ref()
    }

    /// Marks the reply failed (a host-side stream problem, such as an
    /// unreadable line); the first failure is kept.
    pub fn fail(&mut self, error: StreamError) {
        self.error.get_or_insert(error);
    }

    fn failed<T>(&mut self, error: StreamError) -> Result<T, StreamError> {
        self.fail(error.clone());
        Err(error)
    }

    /// The model that answers (shown on `message` events, kept on the
    /// record).
    pub fn set_model(&mut self, model: ModelRef) -> Result<(), StreamError> {
        if let Err(e) = model.validate() {
            return self.failed(StreamError::InvalidMetadata {
                what: "model",
                reason: e.to_string(),
            });
        }
        self.model = Some(model);
        Ok(())
    }

    fn message_id(&mut self, pos: usize) -> String {
        match &self.last_id {
            Some((p, id)) if *p == pos => id.clone(),
            _ => {
                let id = format!("{}/{pos}", self.key_text);
                self.last_id = Some((pos, id.clone()));
                id
            }
        }
    }

    fn turn(&mut self) -> &mut Assembler {
        let room = limits::PARTS - self.content.len().min(limits::PARTS);
        self.turn.get_or_insert_with(|| Assembler::new(room))
    }

    /// Applies one model event; returns the event a live client sees, if
    /// any. A refused event fails the reply (the error is returned, and
    /// again for every later call).
    pub fn push(
        &mut self,
        event: AssistantMessageEvent,
    ) -> Result<Option<AssistantEvent>, StreamError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let base = self.content.len();
        let id = match &event {
            AssistantMessageEvent::ToolcallStart { id, .. } => Some(id),
            AssistantMessageEvent::ToolcallEnd { tool_call, .. } => Some(&tool_call.id),
            _ => None,
        };
        if let Some(id) = id
            && self.calls.iter().any(|c| c.pos < base && c.call_id == *id)
        {
            return self.failed(StreamError::DuplicateCallId {
                index: event.content_index(),
                event: event.name(),
                call_id: id.chars().take(256).collect(),
            });
        }
        let step = match self.turn().push(event) {
            Ok(step) => step,
            Err(e) => return self.failed(e),
        };
        // Copy what the step borrows from the assembler before using self.
        let out = match step {
            Step::Quiet => None,
            Step::TextDelta { index, delta } => Some((index, Ok(delta))),
            Step::TextEnd { index, text } => Some((index, Err(Some(text.to_string())))),
            Step::ToolCallEnd { index, .. } => Some((index, Err(None))),
        };
        Ok(match out {
            None => None,
            Some((index, Ok(delta))) => Some(AssistantEvent::TextDelta {
                message_id: self.message_id(base + index),
                text: delta,
            }),
            Some((index, Err(Some(text)))) => Some(AssistantEvent::Message {
                message_id: self.message_id(base + index),
                text,
                model: self.model.as_ref().map(|m| m.id.clone()),
            }),
            Some((index, Err(None))) => Some(self.call_ended(base, index)),
        })
    }

    fn call_ended(&mut self, base: usize, index: usize) -> AssistantEvent {
        let call = self
            .turn
            .as_ref()
            .and_then(|t| t.finished_call(index))
            .expect("a call that just ended");
        let gate = self
            .policy
            .needs_approval(call)
            .then(|| self.policy.confirmation(call))
            .map(|c| Confirmation {
                target: truncate_words(&c.target, MAX_WORDS),
                consequence: truncate_words(&c.consequence, MAX_WORDS),
                extra: Default::default(),
            });
        let label = self
            .policy
            .label(call)
            .map(|l| truncate_words(&l, MAX_WORDS));
        let effects = self.policy.effects(call);
        let event = AssistantEvent::ToolCall {
            call_id: call.call_id.clone(),
            tool: call.name.clone(),
            args: call.args.clone(),
            label: label.clone(),
            effects: effects.clone(),
        };
        self.calls.push(CallInfo {
            pos: base + index,
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            label,
            effects,
            gate,
            has_result: false,
        });
        event
    }

    /// Attaches the provider's data (JSON text, kept byte-exact) to part
    /// `content_index` of the current turn.
    pub fn attach_provider_data(
        &mut self,
        content_index: usize,
        provider_data: String,
    ) -> Result<(), StreamError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        match self
            .turn()
            .attach_provider_data(content_index, provider_data)
        {
            Ok(()) => Ok(()),
            Err(e) => self.failed(e),
        }
    }

    fn add_usage(&mut self, usage: Option<Usage>) -> Result<(), StreamError> {
        let Some(u) = usage else { return Ok(()) };
        if let Err(e) = u.validate() {
            return self.failed(StreamError::InvalidMetadata {
                what: "usage",
                reason: e.to_string(),
            });
        }
        let sum = |a: Option<i64>, b: Option<i64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
        };
        let t = self.usage.take().unwrap_or(Usage {
            input_tokens: None,
            output_tokens: None,
            reasoning_tokens: None,
            cache_read_tokens: None,
            cache_write_tokens: None,
            extra: Default::default(),
        });
        self.usage = Some(Usage {
            input_tokens: sum(t.input_tokens, u.input_tokens),
            output_tokens: sum(t.output_tokens, u.output_tokens),
            reasoning_tokens: sum(t.reasoning_tokens, u.reasoning_tokens),
            cache_read_tokens: sum(t.cache_read_tokens, u.cache_read_tokens),
            cache_write_tokens: sum(t.cache_write_tokens, u.cache_write_tokens),
            extra: Default::default(),
        });
        Ok(())
    }

    /// Closes the open turn (if any): its parts join the content, and each
    /// text part that had no end gets a `message` snapshot. Returns the
    /// kinds of the parts that had no end.
    fn close_turn(&mut self, events: &mut Vec<AssistantEvent>) -> Vec<(usize, PartKind)> {
        let Some(turn) = self.turn.take() else {
            return Vec::new();
        };
        let base = self.content.len();
        let parts = turn.finish();
        for &(index, kind) in &parts.unended {
            if kind == PartKind::Text
                && let Some(PlainContentPartsItem::TextPart(t)) = parts.parts.get(index)
            {
                let text = t.text.clone();
                events.push(AssistantEvent::Message {
                    message_id: self.message_id(base + index),
                    text,
                    model: self.model.as_ref().map(|m| m.id.clone()),
                });
            }
        }
        self.cut_calls
            .extend(parts.cut_calls.into_iter().map(|mut c| {
                c.index += base;
                c
            }));
        self.content.extend(parts.parts);
        parts
            .unended
            .into_iter()
            .map(|(i, k)| (base + i, k))
            .collect()
    }

    fn check_stop(&mut self, stop: &MessageStopReason) -> Result<(), StreamError> {
        if let MessageStopReason::Other(s) = stop {
            return self.failed(StreamError::InvalidMetadata {
                what: "stopReason",
                reason: format!(
                    "{:?} is not one of stop, length, toolUse, error, aborted",
                    s.chars().take(64).collect::<String>()
                ),
            });
        }
        Ok(())
    }

    /// Ends one model turn (the host may then add tool results and start
    /// another turn with `push`). Returns the snapshot `message` events.
    pub fn end_turn(
        &mut self,
        stop_reason: MessageStopReason,
        usage: Option<Usage>,
    ) -> Result<Vec<AssistantEvent>, StreamError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        self.check_stop(&stop_reason)?;
        self.add_usage(usage)?;
        let mut events = Vec::new();
        let unended = self.close_turn(&mut events);
        if let Some(&(index, part)) = unended.first()
            && matches!(
                stop_reason,
                MessageStopReason::Stop | MessageStopReason::ToolUse
            )
        {
            self.stop_reason = Some(stop_reason);
            return self.failed(StreamError::NotEnded { index, part });
        }
        self.stop_reason = Some(stop_reason);
        Ok(events)
    }

    /// Records the result of a finished call the host ran (no turn may be
    /// open; calls waiting for approval cannot have results).
    pub fn tool_result(
        &mut self,
        call_id: &str,
        run: ToolRun,
    ) -> Result<AssistantEvent, ReplyError> {
        if let Some(e) = &self.error {
            return Err(ReplyError::Failed(e.clone()));
        }
        if self.turn.is_some() {
            return Err(ReplyError::TurnOpen);
        }
        let Some(at) = self
            .calls
            .iter()
            .rposition(|c| c.call_id == call_id && !c.has_result)
        else {
            return Err(ReplyError::UnknownCall {
                call_id: call_id.chars().take(256).collect(),
            });
        };
        if self.calls[at].gate.is_some() {
            return Err(ReplyError::AwaitingApproval {
                call_id: call_id.to_string(),
            });
        }
        known_outcome(&run.outcome)?;
        if self.content.len() >= limits::PARTS {
            return Err(ReplyError::TooManyParts {
                limit: limits::PARTS,
            });
        }
        let key = || blob_key(&self.blob_seed, &self.key_text, call_id, self.blobs.len());
        let kept = keep_result(call_id, self.calls[at].label.clone(), &run, key)?;
        self.blobs.extend(kept.blob);
        let call = &mut self.calls[at];
        call.has_result = true;
        let part = kept.part;
        let event = result_event(
            &part,
            CallFacts {
                name: Some(&call.name),
                effects: call.effects.as_ref(),
                approval: None,
            },
        );
        self.content
            .push(PlainContentPartsItem::ToolResultPart(part));
        Ok(event)
    }

    /// Records what the host saw of the work that call `call_id`'s result
    /// accepted (its `jobId`). Observations belong to the tool results
    /// the reply ends with: they come after those results and before the
    /// next model turn, which is where a replay puts them back.
    pub fn observe(
        &mut self,
        call_id: &str,
        observed: &Observed,
    ) -> Result<AssistantEvent, ReplyError> {
        if let Some(e) = &self.error {
            return Err(ReplyError::Failed(e.clone()));
        }
        if self.turn.is_some() {
            return Err(ReplyError::TurnOpen);
        }
        let group = trailing_results(&mut self.content);
        let seq = group
            .iter()
            .map(|r| r.observations.as_ref().map_or(0, Vec::len))
            .sum::<usize>();
        let Some(part) = group.into_iter().rev().find(|r| r.call_id == call_id) else {
            return Err(ReplyError::UnknownCall {
                call_id: call_id.chars().take(256).collect(),
            });
        };
        if part.job_id.is_none() {
            return Err(ReplyError::NoJob {
                call_id: call_id.to_owned(),
            });
        }
        if let Some(output) = &observed.output
            && output.len() > limits::TOOL_OUTPUT
        {
            return Err(ReplyError::OutputTooLarge {
                call_id: call_id.to_owned(),
                size: output.len(),
                limit: limits::TOOL_OUTPUT,
            });
        }
        let kept = part.observations.get_or_insert_with(Vec::new);
        if kept.len() >= MAX_OBSERVATIONS {
            return Err(ReplyError::TooManyObservations {
                call_id: call_id.to_owned(),
                limit: MAX_OBSERVATIONS,
            });
        }
        let mut stored = stored_observation(observed, seq);
        if let Some(t) = &mut stored.text {
            *t = truncate_words(t, MAX_OBSERVATION_TEXT);
        }
        kept.push(stored.clone());
        Ok(observation_event(part, &stored))
    }

    /// Finishes the run (see the module's table).
    pub fn finish(mut self, end: End) -> Finished {
        let mut events = Vec::new();
        // Metadata of the end first: a bad stop reason or usage fails the reply.
        let usage = match &end {
            End::Done { stop_reason, usage }
                if self.error.is_none() && self.check_stop(stop_reason).is_ok() =>
            {
                usage.clone()
            }
            End::ProviderError { usage, .. } => usage.clone(),
            _ => None,
        };
        if self.error.is_none() {
            let _ = self.add_usage(usage);
        }
        let unended = self.close_turn(&mut events);
        let mut end = end;
        if let End::Done { stop_reason, .. } = &end {
            match stop_reason {
                MessageStopReason::Error => {
                    end = End::ProviderError {
                        code: ErrorCode::AssistantProvider,
                        message: "the model stopped with an error".into(),
                        usage: None,
                    }
                }
                MessageStopReason::Aborted => end = End::Aborted,
                MessageStopReason::Stop | MessageStopReason::ToolUse => {
                    if let Some(&(index, part)) = unended.first() {
                        self.fail(StreamError::NotEnded { index, part });
                    }
                    self.stop_reason = Some(stop_reason.clone());
                }
                _ => self.stop_reason = Some(stop_reason.clone()),
            }
        }
        let done = |reason| AssistantEvent::Done { reason };
        let status = if let Some(e) = &self.error {
            self.stop_reason = Some(MessageStopReason::Error);
            events.push(AssistantEvent::Error {
                code: ErrorCode::AssistantProvider,
                message: Some(truncate_words(&e.to_string(), MAX_ERROR_MESSAGE)),
            });
            events.push(done(DoneReason::Interrupted));
            MessageStatus::Failed
        } else {
            match end {
                End::ProviderError { code, message, .. } => {
                    self.stop_reason = Some(MessageStopReason::Error);
                    events.push(AssistantEvent::Error {
                        code,
                        message: Some(truncate_words(&message, MAX_ERROR_MESSAGE)),
                    });
                    events.push(done(DoneReason::Interrupted));
                    MessageStatus::Failed
                }
                End::Cut => {
                    self.stop_reason = None;
                    events.push(AssistantEvent::Error {
                        code: ErrorCode::OperationInterrupted,
                        message: Some("the model's stream ended before the reply finished".into()),
                    });
                    events.push(done(DoneReason::Interrupted));
                    MessageStatus::Interrupted
                }
                End::CutBy { code, message } => {
                    self.stop_reason = None;
                    events.push(AssistantEvent::Error {
                        code,
                        message: Some(truncate_words(&message, MAX_ERROR_MESSAGE)),
                    });
                    events.push(done(DoneReason::Interrupted));
                    MessageStatus::Interrupted
                }
                End::Aborted => {
                    self.stop_reason = Some(MessageStopReason::Aborted);
                    events.push(done(DoneReason::Interrupted));
                    MessageStatus::Interrupted
                }
                End::Done { .. } | End::Budget => {
                    let budget = matches!(end, End::Budget)
                        || self.stop_reason == Some(MessageStopReason::Length);
                    if self.mark_waiting(&mut events) {
                        MessageStatus::Waiting
                    } else {
                        events.push(done(if budget {
                            DoneReason::Budget
                        } else {
                            DoneReason::End
                        }));
                        MessageStatus::Complete
                    }
                }
            }
        };
        // What a replay needs that the events alone carried: each call's
        // label, and the error the run ended with.
        for c in &self.calls {
            if let Some(PlainContentPartsItem::ToolCallPart(p)) = self.content.get_mut(c.pos)
                && p.call_id == c.call_id
            {
                p.label = c.label.clone();
                p.effects = c.effects.clone();
            }
        }
        let error = events.iter().rev().find_map(|e| match e {
            AssistantEvent::Error { code, message } => Some(StoredError {
                code: code.as_str().to_owned(),
                message: message.clone(),
                extra: Default::default(),
            }),
            _ => None,
        });
        let waiting = if status == MessageStatus::Waiting {
            self.calls
                .iter()
                .filter(|c| c.gate.is_some() && !c.has_result)
                .map(|c| c.call_id.clone())
                .collect()
        } else {
            Vec::new()
        };
        Finished {
            reply: FinishedReply {
                key: self.key,
                status,
                content: PlainContent {
                    parts: self.content,
                    error,
                    extra: Default::default(),
                },
                model: self.model,
                usage: self.usage,
                stop_reason: self.stop_reason,
                error: self.error,
                waiting,
                cut_calls: self.cut_calls,
                blobs: self.blobs,
            },
            events,
        }
    }

    /// Marks the finished gated calls without a result `pending` and emits
    /// their `confirm_required`; whether there were any.
    fn mark_waiting(&mut self, events: &mut Vec<AssistantEvent>) -> bool {
        let mut any = false;
        for c in self.calls.iter().filter(|c| !c.has_result) {
            let Some(confirmation) = &c.gate else {
                continue;
            };
            let id = self.pending_id(&c.call_id);
            if let Some(PlainContentPartsItem::ToolCallPart(p)) = self.content.get_mut(c.pos) {
                p.approval = Some(ToolCallPartApproval::Pending);
                p.pending_id = Some(id.clone());
                p.confirmation = Some(confirmation.clone());
            }
            events.push(AssistantEvent::ConfirmRequired {
                id,
                call_id: c.call_id.clone(),
                tool: Some(c.name.clone()),
                label: c.label.clone(),
                effects: c.effects.clone(),
                confirmation: confirmation.clone(),
            });
            any = true;
        }
        any
    }

    /// Applies one line of a recorded run; returns the end when the line
    /// ends the run. Refused lines fail the reply (see [`Reply::failure`]).
    pub fn apply(&mut self, line: StreamLine, events: &mut Vec<AssistantEvent>) -> Option<End> {
        match line {
            StreamLine::Event(e) => {
                if let Ok(Some(out)) = self.push(e) {
                    events.push(out);
                }
            }
            StreamLine::ProviderData {
                content_index,
                provider_data,
            } => {
                let _ = self.attach_provider_data(content_index, provider_data);
            }
            StreamLine::Model(m) => {
                let _ = self.set_model(m);
            }
            StreamLine::TurnEnd { stop_reason, usage } => {
                if let Ok(out) = self.end_turn(stop_reason, usage) {
                    events.extend(out);
                }
            }
            StreamLine::ToolResult { call_id, run } => match self.tool_result(&call_id, run) {
                Ok(out) => events.push(out),
                Err(ReplyError::Failed(_)) => {}
                Err(e) => self.fail(StreamError::InvalidMetadata {
                    what: "tool_result",
                    reason: e.to_string(),
                }),
            },
            StreamLine::Observation { call_id, observed } => {
                match self.observe(&call_id, &observed) {
                    Ok(out) => events.push(out),
                    Err(ReplyError::Failed(_)) => {}
                    Err(e) => self.fail(StreamError::InvalidMetadata {
                        what: "observation",
                        reason: e.to_string(),
                    }),
                }
            }
            StreamLine::Done { stop_reason, usage } => {
                return Some(End::Done { stop_reason, usage });
            }
            StreamLine::Error { message, usage } => {
                return Some(End::ProviderError {
                    code: ErrorCode::AssistantProvider,
                    message,
                    usage,
                });
            }
            StreamLine::Abort => return Some(End::Aborted),
        }
        None
    }

    /// Runs a recorded run (JSON lines, blank lines skipped) to its end:
    /// all the events, and the finished reply. A line that does not parse,
    /// or any line after the end, fails the reply; input that stops
    /// without an end is a cut.
    pub fn run_jsonl(self, input: &str) -> Finished {
        super::run::LineRun::new(self).run_all(input)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::approval::{AskFor, NoApproval};
    use serde_json::json;

    fn key() -> ReplyKey {
        ReplyKey::parse("3lbqzdw5pzk22.r0").unwrap()
    }

    fn ev(v: serde_json::Value) -> AssistantMessageEvent {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn agent_loop_with_tool_results() {
        let mut r = Reply::new(key(), Arc::new(NoApproval));
        r.push(ev(
            json!({"type":"toolcall_start","contentIndex":0,"id":"c1","toolName":"search"}),
        ))
        .unwrap();
        let out = r
            .push(ev(json!({"type":"toolcall_end","contentIndex":0,
                "toolCall":{"type":"toolCall","id":"c1","name":"search","arguments":{"q":"x"}}})))
            .unwrap();
        assert!(matches!(out, Some(AssistantEvent::ToolCall { .. })));
        assert_eq!(
            r.tool_result(
                "c1",
                ToolRun {
                    outcome: ToolResultOutcome::Succeeded,
                    output: "found".into(),
                    is_error: false,
                    elapsed_ms: Some(3),
                    json: false,
                    job_id: None,
                    subject: None,
                }
            ),
            Err(ReplyError::TurnOpen)
        );
        r.end_turn(
            MessageStopReason::ToolUse,
            Some(Usage {
                input_tokens: Some(10),
                output_tokens: Some(2),
                reasoning_tokens: None,
                cache_read_tokens: None,
                cache_write_tokens: None,
                extra: Default::default(),
            }),
        )
        .unwrap();
        let run = ToolRun {
            outcome: ToolResultOutcome::Succeeded,
            output: "found".into(),
            is_error: false,
            elapsed_ms: Some(3),
            json: false,
            job_id: None,
            subject: None,
        };
        r.tool_result("c1", run.clone()).unwrap();
        assert!(matches!(
            r.tool_result("c1", run),
            Err(ReplyError::UnknownCall { .. })
        ));
        // A later turn may not reuse a call id.
        let mut dup = Reply::new(key(), Arc::new(NoApproval));
        dup.push(ev(
            json!({"type":"toolcall_start","contentIndex":0,"id":"c1","toolName":"s"}),
        ))
        .unwrap();
        dup.push(ev(json!({"type":"toolcall_end","contentIndex":0,
            "toolCall":{"type":"toolCall","id":"c1","name":"s","arguments":{}}})))
            .unwrap();
        dup.end_turn(MessageStopReason::ToolUse, None).unwrap();
        assert!(matches!(
            dup.push(ev(
                json!({"type":"toolcall_start","contentIndex":0,"id":"c1","toolName":"s"})
            )),
            Err(StreamError::DuplicateCallId { .. })
        ));
        // Second turn: contentIndex starts at 0 again, after the result.
        r.push(ev(json!({"type":"text_start","contentIndex":0})))
            .unwrap();
        let d = r
            .push(ev(
                json!({"type":"text_delta","contentIndex":0,"delta":"ok"}),
            ))
            .unwrap();
        assert_eq!(
            d,
            Some(AssistantEvent::TextDelta {
                message_id: "3lbqzdw5pzk22.r0/2".into(),
                text: "ok".into()
            })
        );
        r.push(ev(
            json!({"type":"text_end","contentIndex":0,"content":"ok"}),
        ))
        .unwrap();
        let f = r.finish(End::Done {
            stop_reason: MessageStopReason::Stop,
            usage: Some(Usage {
                input_tokens: Some(20),
                output_tokens: None,
                reasoning_tokens: None,
                cache_read_tokens: None,
                cache_write_tokens: None,
                extra: Default::default(),
            }),
        });
        assert_eq!(f.reply.status, MessageStatus::Complete);
        assert_eq!(f.reply.content.parts.len(), 3);
        let u = f.reply.usage.unwrap();
        assert_eq!((u.input_tokens, u.output_tokens), (Some(30), Some(2)));
        assert_eq!(
            f.events,
            vec![AssistantEvent::Done {
                reason: DoneReason::End
            }]
        );
    }

    #[test]
    fn gated_calls_wait() {
        let mut r = Reply::new(key(), Arc::new(AskFor::tools(["delete"])));
        for (i, name) in ["delete", "search"].iter().enumerate() {
            r.push(ev(json!({"type":"toolcall_start","contentIndex":i,"id":format!("c{i}"),"toolName":name})))
                .unwrap();
            r.push(ev(json!({"type":"toolcall_end","contentIndex":i,
                "toolCall":{"type":"toolCall","id":format!("c{i}"),"name":name,"arguments":{}}})))
                .unwrap();
        }
        r.end_turn(MessageStopReason::ToolUse, None).unwrap();
        assert!(matches!(
            r.tool_result("c0", ToolRun::new(ToolResultOutcome::Succeeded, "")),
            Err(ReplyError::AwaitingApproval { .. })
        ));
        let f = r.finish(End::Done {
            stop_reason: MessageStopReason::ToolUse,
            usage: None,
        });
        assert_eq!(f.reply.status, MessageStatus::Waiting);
        assert_eq!(f.reply.waiting, vec!["c0".to_string()]);
        let [AssistantEvent::ConfirmRequired { id, call_id, .. }] = &f.events[..] else {
            panic!("{:?}", f.events)
        };
        assert_eq!(call_id, "c0");
        let PlainContentPartsItem::ToolCallPart(p) = &f.reply.content.parts[0] else {
            panic!()
        };
        assert_eq!(p.approval, Some(ToolCallPartApproval::Pending));
        assert_eq!(p.pending_id.as_ref(), Some(id));
        f.reply.content.validate().unwrap();
    }

    #[test]
    fn failure_keeps_the_partial_reply() {
        let mut r = Reply::new(key(), Arc::new(NoApproval));
        r.push(ev(json!({"type":"text_start","contentIndex":0})))
            .unwrap();
        r.push(ev(
            json!({"type":"text_delta","contentIndex":0,"delta":"par"}),
        ))
        .unwrap();
        let e = r
            .push(ev(
                json!({"type":"thinking_delta","contentIndex":0,"delta":"x"}),
            ))
            .unwrap_err();
        assert!(matches!(e, StreamError::WrongKind { .. }));
        assert_eq!(
            r.push(ev(
                json!({"type":"text_delta","contentIndex":0,"delta":"x"})
            )),
            Err(e)
        );
        let f = r.finish(End::Cut);
        assert_eq!(f.reply.status, MessageStatus::Failed);
        assert_eq!(f.reply.stop_reason, Some(MessageStopReason::Error));
        let PlainContentPartsItem::TextPart(t) = &f.reply.content.parts[0] else {
            panic!()
        };
        assert_eq!(t.text, "par");
        assert!(matches!(
            &f.events[..],
            [
                AssistantEvent::Message { text, .. },
                AssistantEvent::Error { code: ErrorCode::AssistantProvider, .. },
                AssistantEvent::Done { reason: DoneReason::Interrupted }
            ] if text == "par"
        ));
    }
}
