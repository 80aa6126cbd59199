//! A tool call's whole output, read back from a reply: the result part's
//! `output`, or, when it was too long for the record, its sealed blob
//! (`outputBlob`) opened with the key the record's seal keeps.

use super::store::{ChatStore, ChatStoreError, invalid};
use crate::device::DeviceError;
use crate::lexicon::chat::gel::assistant::defs::{
    PlainContent, PlainContentPartsItem, ToolResultPartOutputFormat,
};
use crate::lexicon::chat::gel::assistant::message::NSID as MESSAGE;
use crate::lexicon_runtime::BlobRef;
use crate::model::{ipld_to_json, parse_cid};
use crate::repo::blobs::BlobStore;
use crate::seal::{SealError, open_blob};

/// A tool call's whole output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    /// The output: text, or JSON text when `json`.
    pub text: String,
    /// It is the tool's structured result as JSON text.
    pub json: bool,
    /// It was read from the reply's sealed blob.
    pub from_blob: bool,
}

impl ChatStore {
    /// The whole output of call `call_id` in reply `reply` (its last
    /// result, if the call was repeated). An output kept in a blob is read
    /// from this folder's blobs ([`ChatStoreError::BlobMissing`] if `sync`
    /// has not fetched it) and opened; a blob whose bytes do not open is
    /// the seal's error, as a record's would be.
    pub fn tool_output(&self, reply: &str, call_id: &str) -> Result<ToolOutput, ChatStoreError> {
        let opened = self.device().open_sealed(MESSAGE, reply)?;
        let content = ipld_to_json(&opened.content)
            .map_err(|e| invalid("reply content", e))
            .and_then(|v| {
                serde_json::from_value::<PlainContent>(v).map_err(|e| invalid("reply content", e))
            })?;
        let part = content
            .parts
            .iter()
            .rev()
            .find_map(|p| match p {
                PlainContentPartsItem::ToolResultPart(r) if r.call_id == call_id => Some(r),
                _ => None,
            })
            .ok_or_else(|| ChatStoreError::NoToolResult {
                reply: reply.to_owned(),
                call_id: call_id.chars().take(256).collect(),
            })?;
        let json = part.output_format == Some(ToolResultPartOutputFormat::Json);
        let Some(blob) = &part.output_blob else {
            return Ok(ToolOutput {
                text: part.output.clone(),
                json,
                from_blob: false,
            });
        };
        let cid = match blob {
            BlobRef::Typed(b) => b.r#ref.0,
            BlobRef::Legacy(b) => parse_cid(&b.cid).map_err(|e| invalid("outputBlob", e))?,
        };
        // The key is the seal's: a blob the envelope does not list (and so
        // the AAD does not bind) is not this record's to open.
        let seal = opened
            .blobs
            .iter()
            .find(|s| s.cid == cid)
            .ok_or_else(|| invalid("outputBlob", "the record's seal lists no such blob"))?;
        let stored = BlobStore::new(self.dir())
            .get(&cid)
            .map_err(|source| ChatStoreError::Blob {
                cid: cid.to_string(),
                source,
            })?
            .ok_or_else(|| ChatStoreError::BlobMissing {
                cid: cid.to_string(),
            })?;
        let bytes = open_blob(&stored.bytes, seal).map_err(DeviceError::from)?;
        let text = String::from_utf8(bytes)
            .map_err(|_| DeviceError::from(SealError::invalid_plaintext("output is not UTF-8")))?;
        Ok(ToolOutput {
            text,
            json,
            from_blob: true,
        })
    }
}
