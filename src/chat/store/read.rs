//! Reading the chats back: records opened with the device's keys, the
//! thread view, and following what others wrote.

use super::*;

impl ChatStore {
    /// The chat record at `chat`.
    pub fn chat(&self, chat: &str) -> Result<Chat> {
        let (value, _) = self.record(CHAT, chat, |chat| ChatStoreError::NoChat { chat })?;
        serde_json::from_value(value).map_err(|e| invalid("chat record", e))
    }

    pub(super) fn message(&self, key: &str) -> Result<(Message, Cid)> {
        let (value, cid) = self.record(MESSAGE, key, |key| ChatStoreError::NoMessage { key })?;
        let m = serde_json::from_value(value).map_err(|e| invalid("message record", e))?;
        Ok((m, cid))
    }

    /// The record at `collection/key`; `missing` names it (its key cut to
    /// 64 characters when it is not even a record key) when absent.
    fn record(
        &self,
        collection: &str,
        key: &str,
        missing: impl Fn(String) -> ChatStoreError,
    ) -> Result<(Value, Cid)> {
        let entry = self
            .device
            .repo()
            .get(collection, key)
            .map_err(|e| match e {
                RepoError::Record(_) => missing(key.chars().take(64).collect()),
                e => DeviceError::from(e).into(),
            })?
            .ok_or_else(|| missing(key.to_string()))?;
        Ok((entry.value, entry.cid))
    }

    /// Follows writes made around this store (a server applying its
    /// clients' writes through [`ChatStore::repo_mut`], a sync): if the
    /// repository moved, the keyring is re-derived, and the approval index
    /// is reloaded (rebuilt if stale) before its next use — not now: a
    /// server refreshes before every read, and most reads never need it.
    pub fn refresh(&mut self) -> Result<()> {
        if self.device.reload_if_moved()? {
            self.index_stale = true;
            self.finished.follow(self.device.repo())?;
        }
        Ok(())
    }

    /// Reloads the approval index if others wrote since it was loaded.
    /// Every path that reads or changes the index calls this first (before
    /// its own commit, so a reload sees the records it missed).
    pub(super) fn ensure_index(&mut self) -> Result<()> {
        if !self.keeps_index {
            return Ok(());
        }
        if self.index_stale {
            self.load_index()?;
            self.index_stale = false;
        }
        Ok(())
    }

    /// The repository, for writes this store does not make (call
    /// [`ChatStore::refresh`] before the next chat operation).
    pub fn repo_mut(&mut self) -> &mut crate::repo::repository::Repository {
        self.device.repo_mut()
    }

    /// Every message record of `chat`, opened where this device can, with
    /// each one's content state.
    pub(super) fn chat_records(
        &self,
        chat: &str,
    ) -> Result<(Vec<ChatRecord>, BTreeMap<String, ContentState>)> {
        let mut records = Vec::new();
        let mut states = BTreeMap::new();
        for (key, message, cid) in self.all_messages()? {
            let _ = cid;
            if chat_of(&message) != Some(chat) {
                continue;
            }
            let (content, state) = self.open_content(&key, &message);
            states.insert(key.clone(), state);
            records.push(ChatRecord::new(key, message, content));
        }
        Ok((records, states))
    }

    pub(super) fn open_content(
        &self,
        key: &str,
        message: &Message,
    ) -> (Option<PlainContent>, ContentState) {
        let pending = message.role != MessageRole::User && message.status == MessageStatus::Pending;
        if message.content.is_none() {
            if message.authenticator.is_none() {
                let state = if pending {
                    ContentState::Unauthenticated
                } else {
                    ContentState::Missing
                };
                return (None, state);
            }
            // Only a pending reply goes without content, authenticated.
            if !pending {
                return (None, ContentState::Missing);
            }
            return match self.device.open_sealed(MESSAGE, key) {
                Ok(o) if o.field == crate::seal::AUTHENTICATOR_FIELD => (None, ContentState::Empty),
                Ok(_) => (None, ContentState::Unauthenticated),
                Err(DeviceError::Seal(SealError::UnknownKey { .. })) => {
                    (None, ContentState::UnknownKey)
                }
                Err(e) => (None, ContentState::Unreadable(e.to_string())),
            };
        }
        match self.device.open_sealed_json(MESSAGE, key) {
            Ok(v) => match serde_json::from_value::<PlainContent>(v) {
                Ok(c) => (Some(c), ContentState::Open),
                Err(e) => (None, ContentState::Unreadable(e.to_string())),
            },
            Err(DeviceError::Seal(SealError::UnknownKey { .. })) => {
                (None, ContentState::UnknownKey)
            }
            Err(e) => (None, ContentState::Unreadable(e.to_string())),
        }
    }

    /// The content state of message `key`, as this device sees it.
    pub fn content_state(&self, key: &str) -> Result<ContentState> {
        let (message, _) = self.message(key)?;
        Ok(self.open_content(key, &message).1)
    }

    /// Every message record: `(key, record, cid)`, in key order. Records
    /// that do not decode are skipped.
    pub(super) fn all_messages(&self) -> Result<Vec<(String, Message, Cid)>> {
        let repo = self.device.repo();
        let mut out = Vec::new();
        for item in repo.list(Some(MESSAGE)).map_err(DeviceError::from)? {
            let (path, cid) = item.map_err(DeviceError::from)?;
            let key = path.rsplit('/').next().unwrap_or_default().to_string();
            let Some(entry) = repo.get(MESSAGE, &key).map_err(DeviceError::from)? else {
                continue;
            };
            if let Ok(m) = serde_json::from_value::<Message>(entry.value) {
                out.push((key, m, cid));
            }
        }
        Ok(out)
    }

    /// The chats: `(record key, record)`, in key (creation) order.
    pub fn chats(&self) -> Result<Vec<(String, Chat)>> {
        let repo = self.device.repo();
        let mut out = Vec::new();
        for item in repo.list(Some(CHAT)).map_err(DeviceError::from)? {
            let (path, _) = item.map_err(DeviceError::from)?;
            let key = path.rsplit('/').next().unwrap_or_default().to_string();
            if let Ok(c) = self.chat(&key) {
                out.push((key, c));
            }
        }
        Ok(out)
    }

    /// The chat (its record key) message `message` belongs to.
    pub fn chat_of_message(&self, message: Tid) -> Result<String> {
        let (m, _) = self.message(&message.to_string())?;
        own_chat(&m, "message")
    }

    /// The chat's sealed fields (title, system prompt), if they open here.
    pub fn chat_fields(&self, chat: &str) -> Option<SealedFields> {
        self.device
            .open_sealed_json(CHAT, chat)
            .ok()
            .and_then(|v| serde_json::from_value::<SealedFields>(v).ok())
    }

    /// The chat's thread, opened.
    pub fn thread(&self, chat: &str) -> Result<ChatThread> {
        let record = self.chat(chat)?;
        let fields = self.chat_fields(chat);
        let (records, states) = self.chat_records(chat)?;
        Ok(ChatThread {
            chat: chat.to_string(),
            record,
            fields,
            thread: Thread::build(records),
            states,
        })
    }
}
