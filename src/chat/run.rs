//! A reply's run as the host drives it: lines fed one at a time as they
//! arrive (a provider's stream, a recorded run), the reply to an approval
//! answer started with its settled calls. Pure: no storage, no sealing.

use std::collections::BTreeMap;

use super::approval::{Decision, Resolution, ResolvedCall, Settled};
use super::input::{LineError, StreamLine};
use super::reply::{End, Finished, Reply};
use super::store::{ChatStoreError, PendingReply, invalid};
use super::{ApprovalPolicy, AssistantEvent, StreamError, ToolRun};
use crate::lexicon::chat::gel::assistant::defs::ModelRef;

/// The approved calls of `resolution` run by the host (`tool_runs`, by
/// call id) and the denied ones refused. An approved call without a result,
/// or a result for a call that is not an approved one, is refused.
pub fn settle_answer(
    resolution: &Resolution,
    tool_runs: &BTreeMap<String, ToolRun>,
) -> Result<Vec<Settled>, ChatStoreError> {
    let approved = |c: &&ResolvedCall| c.decision == Decision::Approved;
    let missing: Vec<&str> = resolution
        .calls
        .iter()
        .filter(approved)
        .filter(|c| !tool_runs.contains_key(&c.call.call_id))
        .map(|c| c.call.call_id.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(invalid(
            "tool results",
            format!(
                "approved call(s) {} need a result (the host runs the tool)",
                missing.join(", ")
            ),
        ));
    }
    if let Some(extra) = tool_runs.keys().find(|k| {
        !resolution
            .calls
            .iter()
            .filter(approved)
            .any(|c| &c.call.call_id == *k)
    }) {
        return Err(invalid(
            "tool results",
            format!(
                "call {extra:?} is not an approved call of reply {}",
                resolution.reply
            ),
        ));
    }
    Ok(resolution.settle(|c| tool_runs[&c.call_id].clone()))
}

/// The run of a pending reply: a fresh one, or (for the reply to an
/// approval answer) one that starts with the `settled` calls repeated.
/// Returns the run and the events its start makes.
pub fn begin_reply(
    pending: &PendingReply,
    policy: std::sync::Arc<dyn ApprovalPolicy + Send + Sync>,
    settled: Option<&[Settled]>,
) -> Result<(LineRun, Vec<AssistantEvent>), ChatStoreError> {
    let (reply, first) = match settled {
        None => (Reply::new(pending.key, policy), Vec::new()),
        Some(settled) => Reply::resume(pending.key, policy, settled)
            .map_err(|e| invalid("reply to the answer", e))?,
    };
    Ok((LineRun::new(reply), first))
}

/// A recorded run fed line by line (what [`Reply::run_jsonl`] does for a
/// whole string, for input that arrives over time: events come out as
/// each line goes in).
#[derive(Debug)]
pub struct LineRun {
    reply: Reply,
    end: Option<End>,
    line: usize,
    stopped: bool,
}

impl LineRun {
    pub fn new(reply: Reply) -> LineRun {
        LineRun {
            reply,
            end: None,
            line: 0,
            stopped: false,
        }
    }

    /// Whether the run took its end or failed: later lines are not read.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Runs a whole recorded run (JSON lines, blank lines skipped) to its
    /// end: all the events, and the finished reply.
    pub fn run_all(mut self, input: &str) -> Finished {
        let mut events = Vec::new();
        for line in input.lines() {
            self.feed(line, &mut events);
            if self.stopped {
                break;
            }
        }
        let mut finished = self.end();
        events.append(&mut finished.events);
        finished.events = events;
        finished
    }

    /// Feeds one line; the events it makes go to `events`.
    pub fn feed(&mut self, line: &str, events: &mut Vec<AssistantEvent>) {
        if line.trim().is_empty() {
            self.line += 1;
            return;
        }
        match StreamLine::parse(line) {
            Ok(l) => self.apply(l, events),
            Err(error) => self.refuse_with(error),
        }
    }

    /// Applies one line the host made itself (an adapter's event, a tool
    /// result), as [`LineRun::feed`] does for a parsed line. A line after
    /// the end fails the reply.
    pub fn apply(&mut self, line: StreamLine, events: &mut Vec<AssistantEvent>) {
        self.line += 1;
        if self.stopped {
            return;
        }
        if self.end.is_some() {
            self.fail_line(LineError::Malformed {
                kind: "line".into(),
                reason: "a line after the end of the run".into(),
            });
            return;
        }
        self.end = self.reply.apply(line, events);
        if self.reply.failure().is_some() {
            self.stopped = true;
        }
    }

    /// The current line does not parse: the reply fails, keeping what it
    /// had.
    fn refuse_with(&mut self, error: LineError) {
        self.line += 1;
        if !self.stopped {
            self.fail_line(error);
        }
    }

    fn fail_line(&mut self, error: LineError) {
        self.reply.fail(StreamError::Line {
            line: self.line,
            error,
        });
        self.stopped = true;
    }

    /// Ends the run as the host decided (a provider failure with its
    /// code, a cut with its reason, the step budget).
    pub fn end_with(&mut self, end: End) {
        if self.end.is_none() {
            self.end = Some(end);
        }
        self.stopped = true;
    }

    /// See [`Reply::set_source`].
    pub fn set_source(&mut self, call_id: &str, source: &str) -> bool {
        self.reply.set_source(call_id, source)
    }

    /// The reply being run.
    pub fn reply(&self) -> &Reply {
        &self.reply
    }

    /// The model that answers, once the run named it.
    pub fn model(&self) -> Option<&ModelRef> {
        self.reply.model()
    }

    /// Whether the run took its end (`done`, `error`, `abort`).
    pub fn ended(&self) -> bool {
        self.end.is_some()
    }

    /// Refuses the next line without parsing it (input the host cannot
    /// take as a line: too long, not UTF-8): the reply fails, keeping
    /// what it had, as for a malformed line.
    pub fn refuse(&mut self, reason: impl Into<String>) {
        self.refuse_with(LineError::Malformed {
            kind: "line".into(),
            reason: reason.into(),
        });
    }

    /// The input failed to read: the run is cut where it is.
    pub fn cut_by(&mut self, _e: std::io::Error) {
        self.stopped = true;
    }

    /// Finishes the run (a run without an end is a cut); the returned
    /// events are the ones the end makes.
    pub fn end(self) -> Finished {
        self.reply.finish(self.end.unwrap_or(End::Cut))
    }
}
