//! A tool call's result as the record keeps it (`toolResultPart`) and as a
//! client sees it (`tool_result`, `observation`).
//!
//! The live run builds the part first and the event from the part, and a
//! replay builds the event from the same part with the same function, so
//! the two cannot disagree on any field the record keeps.

use super::input::{Observed, ToolRun};
use crate::chat::events::AssistantEvent;
use crate::lexicon::chat::gel::assistant::defs::{
    ToolCallPart, ToolCallPartApproval, ToolObservation, ToolResultPart, ToolResultPartOutcome,
    ToolResultPartOutputFormat,
};
use crate::lexicon::chat::gel::assistant::subscribe_reply::{
    Effects, ObservationReason, ObservationState, ToolResultDecision, ToolResultOutcome,
};
use crate::lexicon::support::StringEnum;

/// The most observations one result keeps (the lexicon's limit).
pub const MAX_OBSERVATIONS: usize = 64;

/// The part that records `run` for call `call_id`.
pub fn result_part(call_id: &str, label: Option<String>, run: &ToolRun) -> ToolResultPart {
    ToolResultPart {
        call_id: call_id.to_owned(),
        is_error: run.is_error.then_some(true),
        outcome: Some(convert(&run.outcome)),
        elapsed_ms: run
            .elapsed_ms
            .map(|ms| i64::try_from(ms).unwrap_or(i64::MAX)),
        label,
        job_id: run.job_id.clone(),
        subject: run.subject.clone(),
        observations: None,
        output: run.output.clone(),
        output_format: run.json.then_some(ToolResultPartOutputFormat::Json),
        output_blob: None,
        extra: Default::default(),
    }
}

/// The call a result belongs to, as far as its event names it.
#[derive(Clone, Copy, Debug, Default)]
pub struct CallFacts<'a> {
    pub name: Option<&'a str>,
    pub effects: Option<&'a Effects>,
    /// How the user decided, for a call that waited.
    pub approval: Option<&'a ToolCallPartApproval>,
}

impl<'a> CallFacts<'a> {
    /// What the call part says.
    pub fn of(call: &'a ToolCallPart) -> CallFacts<'a> {
        CallFacts {
            name: Some(&call.name),
            effects: call.effects.as_ref(),
            approval: call.approval.as_ref(),
        }
    }
}

/// The `tool_result` event for `part`. A record from before outcomes were
/// kept gets one inferred: `refused` for a denied call, else `succeeded`.
pub fn result_event(part: &ToolResultPart, call: CallFacts<'_>) -> AssistantEvent {
    let decision = match call.approval {
        Some(ToolCallPartApproval::Approved) => Some(ToolResultDecision::Approved),
        Some(ToolCallPartApproval::Denied) => Some(ToolResultDecision::Declined),
        _ => None,
    };
    let inferred = if decision == Some(ToolResultDecision::Declined) {
        ToolResultOutcome::Refused
    } else {
        ToolResultOutcome::Succeeded
    };
    AssistantEvent::ToolResult {
        call_id: part.call_id.clone(),
        tool: call.name.map(str::to_owned),
        label: part.label.clone(),
        outcome: part.outcome.as_ref().map_or(inferred, convert),
        ok: part.is_error != Some(true),
        body: body(part),
        job_id: part.job_id.clone(),
        effects: call.effects.cloned(),
        subject: part.subject.clone(),
        elapsed_ms: part.elapsed_ms.and_then(|ms| u64::try_from(ms).ok()),
        decision,
    }
}

/// The output as the event's `body`: the JSON value for structured output
/// (text when it does not parse, as an older writer may have left it),
/// else the text.
fn body(part: &ToolResultPart) -> serde_json::Value {
    if part.output_format == Some(ToolResultPartOutputFormat::Json)
        && let Ok(v) = serde_json::from_str(&part.output)
    {
        return v;
    }
    serde_json::Value::String(part.output.clone())
}

/// The observation as a result part keeps it, `seq`th after its group of
/// results.
pub fn stored_observation(observed: &Observed, seq: usize) -> ToolObservation {
    ToolObservation {
        seq: Some(i64::try_from(seq).unwrap_or(i64::MAX)),
        state: convert(&observed.state),
        text: observed.text.clone(),
        output: observed.output.clone(),
        reason: observed.reason.as_ref().map(convert),
        extra: Default::default(),
    }
}

/// The `observation` events of a group of consecutive results, in the
/// order the run sent them (by `seq`; a kept observation without one
/// keeps its place).
pub fn group_observations(group: &[&ToolResultPart]) -> Vec<AssistantEvent> {
    let mut kept: Vec<(i64, usize, &ToolResultPart, &ToolObservation)> = Vec::new();
    for part in group {
        for o in part.observations.iter().flatten() {
            let place = kept.len();
            kept.push((o.seq.unwrap_or(i64::MAX), place, part, o));
        }
    }
    kept.sort_by_key(|&(seq, place, ..)| (seq, place));
    kept.into_iter()
        .map(|(_, _, part, o)| observation_event(part, o))
        .collect()
}

/// The `observation` event for a kept observation of `part`'s work
/// (`part` as it stands, without the observations: they are not read).
pub fn observation_event(part: &ToolResultPart, kept: &ToolObservation) -> AssistantEvent {
    AssistantEvent::Observation {
        id: part.call_id.clone(),
        job_id: part.job_id.clone(),
        state: convert::<_, ObservationState>(&kept.state),
        text: kept.text.clone(),
        reason: kept.reason.as_ref().map(convert::<_, ObservationReason>),
    }
}

/// One string enum as another that names the same values (the event and
/// record lexicons each have their own); a value only one knows is kept
/// as `Other`.
pub fn convert<A: StringEnum, B: StringEnum + OtherValue>(a: &A) -> B {
    B::from_string(a.as_str().to_owned()).unwrap_or_else(B::other)
}

/// The open-set catch-all of a generated string enum.
pub trait OtherValue {
    fn other(value: String) -> Self;
}

macro_rules! other_value {
    ($($t:ty),* $(,)?) => {$(
        impl OtherValue for $t {
            fn other(value: String) -> Self {
                <$t>::Other(value)
            }
        }
    )*};
}

other_value!(
    ToolResultOutcome,
    ToolResultPartOutcome,
    ObservationState,
    ObservationReason,
    crate::lexicon::chat::gel::assistant::defs::ToolObservationState,
    crate::lexicon::chat::gel::assistant::defs::ToolObservationReason,
);
