//! What a sealed write is made of: a generated record type, the generated
//! type of what is sealed into it, and whether it creates or replaces.
//! [`Device::apply_sealed`](super::Device::apply_sealed) seals and commits
//! them.

use serde::Serialize;

use super::DeviceError;
use crate::lexicon::chat::gel::assistant::{chat, defs, message, settings};
use crate::lexicon_runtime::{Record, Validate};
use crate::model::{Cid, Ipld, record_from_json};
use crate::seal::{AUTHENTICATOR_FIELD, BlobSeal, SealError};

/// A record type that is written sealed, and the type sealed into it.
pub trait Sealable: Record + Serialize {
    /// What is sealed into its sealed field.
    type Content: Serialize + Validate;
}

impl Sealable for chat::Chat {
    type Content = chat::SealedFields;
}

impl Sealable for message::Message {
    type Content = defs::PlainContent;
}

impl Sealable for settings::Settings {
    type Content = settings::SealedFields;
}

/// What a sealed write does at its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SealedAction {
    /// Create the record: the key must be free.
    Create,
    /// Replace it; with `swap`, only if its CID is that one now
    /// (compare-and-swap), else whatever is there.
    Update { swap: Option<Cid> },
}

/// One record to seal and write with
/// [`Device::apply_sealed`](super::Device::apply_sealed).
#[derive(Debug, Clone)]
pub struct SealedWrite {
    pub(super) collection: &'static str,
    pub(super) rkey: String,
    /// The record key of the chat it belongs to (the chat's own for a chat
    /// record): the chat key is chosen by it.
    pub(super) chat: String,
    /// The clear fields, with `$type`; a sealed field in them is replaced.
    pub(super) record: Ipld,
    pub(super) content: Ipld,
    pub(super) action: SealedAction,
    /// The sealed blobs `content` references (already stored): their keys
    /// are sealed with it, their CIDs and sizes bound in the clear.
    pub(super) blobs: Vec<BlobSeal>,
}

impl SealedWrite {
    /// `record` at `rkey` in chat `chat`, with `content` sealed into it.
    pub fn new<R: Sealable>(
        rkey: impl Into<String>,
        chat: impl Into<String>,
        record: &R,
        content: &R::Content,
        action: SealedAction,
    ) -> Result<SealedWrite, DeviceError> {
        content
            .validate()
            .map_err(|e| SealError::invalid_plaintext(format!("content: {e}")))?;
        Ok(SealedWrite {
            collection: R::NSID,
            rkey: rkey.into(),
            chat: chat.into(),
            record: clear_fields::<R>(record, None)?,
            content: to_ipld(content)
                .map_err(|e| SealError::invalid_plaintext(format!("content: {e}")))?,
            action,
            blobs: Vec::new(),
        })
    }

    /// A pending reply (`record` has no content yet) at `rkey`, created: the
    /// empty map is sealed as its authenticator, which binds its clear
    /// fields, so a forged or altered pending reply does not open.
    pub fn pending_reply(
        rkey: impl Into<String>,
        chat: impl Into<String>,
        record: &message::Message,
    ) -> Result<SealedWrite, DeviceError> {
        Ok(SealedWrite {
            collection: <message::Message as Record>::NSID,
            rkey: rkey.into(),
            chat: chat.into(),
            // The placeholder tells the seal which field to fill.
            record: clear_fields(record, Some(AUTHENTICATOR_FIELD))?,
            content: Ipld::Map(Default::default()),
            action: SealedAction::Create,
            blobs: Vec::new(),
        })
    }

    /// With the sealed blobs its content references.
    pub fn with_blobs(mut self, blobs: Vec<BlobSeal>) -> SealedWrite {
        self.blobs = blobs;
        self
    }

    /// The same write with another action (an edit of what was created).
    pub fn with_action(mut self, action: SealedAction) -> SealedWrite {
        self.action = action;
        self
    }
}

/// `record`'s clear fields as the data model, with `$type` and, if given,
/// an empty `placeholder` field for the seal to fill.
fn clear_fields<R: Sealable>(record: &R, placeholder: Option<&str>) -> Result<Ipld, DeviceError> {
    let malformed = |e: String| SealError::malformed("record", e);
    let mut json = serde_json::to_value(record).map_err(|e| malformed(e.to_string()))?;
    if let (Some(field), Some(map)) = (placeholder, json.as_object_mut()) {
        map.insert(
            field.to_owned(),
            serde_json::Value::Object(Default::default()),
        );
    }
    Ok(record_from_json(&json).map_err(|e| malformed(e.to_string()))?)
}

fn to_ipld(value: &impl Serialize) -> Result<Ipld, String> {
    let json = serde_json::to_value(value).map_err(|e| e.to_string())?;
    record_from_json(&json).map_err(|e| e.to_string())
}
