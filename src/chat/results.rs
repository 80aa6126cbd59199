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
use crate::lexicon_runtime::StringEnum;
use crate::lexicon_runtime::{Blob, BlobRef, CidLink};
use crate::seal::{BlobKey, SealedBlob, seal_blob_with_key};

/// The most observations one result keeps (the lexicon's limit).
pub const MAX_OBSERVATIONS: usize = 64;

/// The most of a tool's output a result part keeps as text. A reply is
/// sealed as one record (ciphertext at most 1,000,000 bytes), so a longer
/// output is kept whole in a sealed blob (`outputBlob`) and `output` holds
/// its start.
pub const OUTPUT_KEPT: usize = 100_000;

/// The longest tool output kept at all: sealed (padded, a tag per 64 KiB
/// chunk) it stays within `outputBlob`'s `maxSize` of 50,000,000 bytes.
pub const OUTPUT_MAX: usize = 49_000_000;

/// A tool output over [`OUTPUT_MAX`] bytes, which no result can keep.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("call {call_id:?}: tool output is {size} bytes, over the limit of {limit}")]
pub struct OutputTooLarge {
    pub call_id: String,
    pub size: usize,
    pub limit: usize,
}

/// A result part and, for an output over [`OUTPUT_KEPT`] bytes, the sealed
/// blob that holds the whole output (to store beside the record, and whose
/// key the record's seal keeps).
#[derive(Debug, Clone)]
pub struct KeptResult {
    pub part: ToolResultPart,
    pub blob: Option<SealedBlob>,
}

/// [`result_part`], with an output over [`OUTPUT_KEPT`] bytes sealed under
/// `blob_key()` into a blob the part references, and its start as `output`.
pub fn keep_result(
    call_id: &str,
    label: Option<String>,
    run: &ToolRun,
    blob_key: impl FnOnce() -> BlobKey,
) -> Result<KeptResult, OutputTooLarge> {
    let too_large = || OutputTooLarge {
        call_id: call_id.chars().take(256).collect(),
        size: run.output.len(),
        limit: OUTPUT_MAX,
    };
    if run.output.len() <= OUTPUT_KEPT {
        return Ok(KeptResult {
            part: result_part(call_id, label, run),
            blob: None,
        });
    }
    if run.output.len() > OUTPUT_MAX {
        return Err(too_large());
    }
    let blob = seal_blob_with_key(run.output.as_bytes(), blob_key()).map_err(|_| too_large())?;
    let mut part = result_part(call_id, label, run);
    let note = format!(
        "\n[{} bytes in all; the whole output is in outputBlob]",
        run.output.len()
    );
    part.output = cut_with_note(&run.output, OUTPUT_KEPT, &note);
    let binding = blob.seal.binding();
    part.output_blob = Some(BlobRef::Typed(Blob {
        r#ref: CidLink(binding.cid),
        mime_type: binding.mime_type,
        size: i64::try_from(binding.size).unwrap_or(i64::MAX),
    }));
    Ok(KeptResult {
        part,
        blob: Some(blob),
    })
}

/// The start of `text` and then `note`, at most `limit` bytes in all (cut
/// on a character boundary); `text` itself when it fits.
pub fn cut_with_note(text: &str, limit: usize, note: &str) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    let mut end = limit.saturating_sub(note.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{note}", &text[..end])
}

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
        output_blob: part.output_blob.clone().map(Box::new),
    }
}

/// The output as the event's `body`: the JSON value for structured output
/// (text when it does not parse, as an older writer may have left it),
/// else the text. With a blob, `output` is a summary: text.
fn body(part: &ToolResultPart) -> serde_json::Value {
    if part.output_format == Some(ToolResultPartOutputFormat::Json)
        && part.output_blob.is_none()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seal::{Padding, open_blob};

    fn key() -> BlobKey {
        BlobKey::from_bytes([9; 32])
    }

    fn run(output: String) -> ToolRun {
        ToolRun::new(ToolResultOutcome::Succeeded, output)
    }

    #[test]
    fn the_longest_kept_output_fits_output_blob_once_sealed() {
        let sealed = crate::seal::blob::sealed_len(OUTPUT_MAX as u64, Padding::Padme);
        assert!(sealed <= 50_000_000, "{sealed}");
    }

    #[test]
    fn an_output_at_the_limit_stays_in_the_part() {
        let kept = keep_result("c", None, &run("x".repeat(OUTPUT_KEPT)), key).unwrap();
        assert!(kept.blob.is_none());
        assert_eq!(kept.part.output.len(), OUTPUT_KEPT);
        assert!(kept.part.output_blob.is_none());
    }

    #[test]
    fn a_longer_output_goes_whole_to_a_blob_and_its_start_stays() {
        // Multi-byte characters across the cut.
        let whole = "ß€".repeat(OUTPUT_KEPT);
        let mut json = run(whole.clone());
        json.json = true;
        let kept = keep_result("c", None, &json, key).unwrap();
        let blob = kept.blob.unwrap();
        assert_eq!(
            open_blob(&blob.bytes, &blob.seal).unwrap(),
            whole.as_bytes()
        );
        let part = kept.part;
        assert!(part.output.len() <= OUTPUT_KEPT);
        assert!(part.output.ends_with(&format!(
            "[{} bytes in all; the whole output is in outputBlob]",
            whole.len()
        )));
        let Some(BlobRef::Typed(b)) = &part.output_blob else {
            panic!("a typed blob")
        };
        assert_eq!(b.r#ref.0, blob.seal.cid);
        assert_eq!(b.size as u64, blob.seal.size);
        // The format names the blob's content; the event's body is the
        // summary as text all the same.
        assert_eq!(part.output_format, Some(ToolResultPartOutputFormat::Json));
        let AssistantEvent::ToolResult {
            body, output_blob, ..
        } = result_event(&part, CallFacts::default())
        else {
            panic!("a tool_result")
        };
        assert_eq!(body, serde_json::Value::String(part.output.clone()));
        assert_eq!(output_blob.as_deref(), part.output_blob.as_ref());
    }

    #[test]
    fn an_output_past_the_blob_limit_is_refused_by_name() {
        let e = keep_result("c", None, &run("x".repeat(OUTPUT_MAX + 1)), key).unwrap_err();
        assert_eq!(e.size, OUTPUT_MAX + 1);
        assert_eq!(e.limit, OUTPUT_MAX);
    }
}
