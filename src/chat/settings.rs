//! The user's assistant settings: the `chat.gel.assistant.settings`
//! record (key `self`), its defaults in the clear and its approval rules
//! and MCP servers sealed under the settings' own key (a chat key named
//! `self`, which no chat's TID key can be).

use super::store::{ChatStore, ChatStoreError};
use crate::device::{SealedAction, SealedWrite};
use crate::lexicon::chat::gel::assistant::settings::{SealedFields, Settings};
use crate::lexicon_runtime::Validate;
use crate::model::Cid;
use crate::seal::os_rng;

/// The settings collection.
pub const SETTINGS: &str = crate::lexicon::chat::gel::assistant::settings::NSID;
/// The settings record's key (and the name of the key it is sealed with).
pub const SELF_KEY: &str = "self";

/// The settings, opened.
#[derive(Clone, Debug, PartialEq)]
pub struct UserSettings {
    pub record: Settings,
    /// `None` when the sealed part does not open on this device.
    pub sealed: Option<SealedFields>,
}

impl UserSettings {
    /// Settings with nothing chosen yet.
    pub fn empty(now: crate::lexicon_runtime::Datetime) -> UserSettings {
        UserSettings {
            record: Settings {
                model: None,
                effort: None,
                tools: None,
                sealed: None,
                updated_at: now,
                extra: Default::default(),
            },
            sealed: Some(SealedFields {
                approval_tools: None,
                mcp_servers: None,
                extra: Default::default(),
            }),
        }
    }

    /// Whether calls to `tool` wait for approval.
    pub fn needs_approval(&self, tool: &str) -> bool {
        self.sealed
            .as_ref()
            .and_then(|s| s.approval_tools.as_ref())
            .is_some_and(|t| t.iter().any(|n| n == "*" || n == tool))
    }
}

impl ChatStore {
    /// The settings record and its CID, if the user wrote one.
    pub fn settings(&self) -> Result<Option<(UserSettings, Cid)>, ChatStoreError> {
        let repo = self.device().repo();
        let Some(entry) = repo
            .get(SETTINGS, SELF_KEY)
            .map_err(crate::device::DeviceError::from)?
        else {
            return Ok(None);
        };
        let record: Settings =
            serde_json::from_value(entry.value).map_err(|e| ChatStoreError::Invalid {
                what: "settings record".into(),
                reason: e.to_string(),
            })?;
        let sealed = if record.sealed.is_some() {
            self.device()
                .open_sealed_json(SETTINGS, SELF_KEY)
                .ok()
                .and_then(|v| serde_json::from_value(v).ok())
        } else {
            None
        };
        Ok(Some((UserSettings { record, sealed }, entry.cid)))
    }

    /// Writes `settings` (created, or updated swapped on `previous`, the
    /// CID read with them). The sealed part must be present.
    pub fn put_settings(
        &mut self,
        settings: &UserSettings,
        previous: Option<Cid>,
    ) -> Result<Cid, ChatStoreError> {
        let invalid = |what: &str, e: String| ChatStoreError::Invalid {
            what: what.into(),
            reason: e,
        };
        let sealed = settings.sealed.as_ref().ok_or_else(|| {
            invalid(
                "settings",
                "the sealed settings do not open on this device".into(),
            )
        })?;
        sealed
            .validate()
            .map_err(|e| invalid("settings", e.to_string()))?;
        let mut record = settings.record.clone();
        record.sealed = None;
        record
            .validate()
            .map_err(|e| invalid("settings", e.to_string()))?;
        let action = match previous {
            Some(cid) => SealedAction::Update { swap: Some(cid) },
            None => SealedAction::Create,
        };
        let write = SealedWrite::new(SELF_KEY, SELF_KEY, &record, sealed, action)?;
        self.device_mut().apply_sealed(&[write], &mut os_rng())?;
        self.device()
            .repo()
            .get_cid(SETTINGS, SELF_KEY)
            .map_err(crate::device::DeviceError::from)?
            .ok_or_else(|| invalid("settings", "missing after its commit".into()))
    }
}
