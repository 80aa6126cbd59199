//! Writing chats and user messages.

use super::replies::pending_write;
use super::*;

impl ChatStore {
    /// Creates a chat; returns its record key (a TID).
    pub fn create_chat(&mut self, title: Option<&str>, model: Option<ModelRef>) -> Result<String> {
        let rkey = self.next_tid()?.to_string();
        let record = Chat {
            sealed: None,
            model,
            tools: None,
            effort: None,
            created_at: Self::now()?,
            extra: Default::default(),
        };
        let fields = SealedFields {
            title: title.map(str::to_string),
            system_prompt: None,
            extra: Default::default(),
        };
        self.seal_and_apply(SealedWrite::new(
            &rkey,
            &rkey,
            &record,
            &fields,
            SealedAction::Create,
        )?)?;
        Ok(rkey)
    }

    pub(super) fn seal_and_apply(&mut self, write: SealedWrite) -> Result<Cid> {
        self.device.apply_sealed(&[write], &mut os_rng())?;
        self.save_index()?;
        Ok(self.device.repo().head().commit)
    }

    /// Sends a user message with `text` to `chat`, continuing from `parent`
    /// (absent on a chat's first message) and asking for reply `attempt`.
    /// Returns its key (a TID). A message continuing from a waiting reply
    /// is that reply's answer (see [`ChatStore::approve`]).
    pub fn send(
        &mut self,
        chat: &str,
        text: &str,
        parent: Option<ReplyKey>,
        attempt: Attempt,
    ) -> Result<Tid> {
        self.write_user(chat, text_content(text), parent, attempt, None, false)
    }

    /// [`ChatStore::send`] with the rest of the generation request (the
    /// model, tools and effort the reply should use; `request.attempt` is
    /// ignored for `attempt`).
    pub fn send_with(
        &mut self,
        chat: &str,
        text: &str,
        parent: Option<ReplyKey>,
        attempt: Attempt,
        request: &GenerationRequest,
    ) -> Result<Tid> {
        self.write_user(
            chat,
            text_content(text),
            parent,
            attempt,
            Some(request),
            false,
        )
    }

    pub(super) fn write_user(
        &mut self,
        chat: &str,
        content: PlainContent,
        parent: Option<ReplyKey>,
        attempt: Attempt,
        request: Option<&GenerationRequest>,
        ask: bool,
    ) -> Result<Tid> {
        self.ensure_index()?;
        self.chat(chat)?;
        if let Some(p) = parent {
            let missing = || ChatStoreError::NoParent {
                parent: p.to_string(),
                chat: chat.to_string(),
            };
            let (m, _) = self.message(&p.to_string()).map_err(|e| match e {
                ChatStoreError::NoMessage { .. } => missing(),
                e => e,
            })?;
            if chat_of(&m) != Some(chat) {
                return Err(missing());
            }
        }
        let key = self.next_tid()?;
        let mut record = user_message(self.chat_uri(chat)?, parent, attempt, Self::now()?);
        if let (Some(asked), Some(r)) = (request, record.request.as_mut()) {
            r.model = asked.model.clone();
            r.tools = asked.tools.clone();
            r.effort = asked.effort.clone();
        }
        use crate::lexicon_runtime::Validate;
        record
            .validate()
            .map_err(|e| invalid("message request", e))?;
        content
            .validate()
            .map_err(|e| invalid("message content", e))?;
        let mut writes = vec![SealedWrite::new(
            key.to_string(),
            chat,
            &record,
            &content,
            SealedAction::Create,
        )?];
        // Asked for, the pending reply lands in the same commit.
        if ask {
            let reply = ReplyKey::new(key, attempt);
            let pending = pending_reply(record.chat.clone(), Self::now()?);
            writes.push(pending_write(&reply, chat, &pending)?);
        }
        self.device.apply_sealed(&writes, &mut os_rng())?;
        // A user message continuing from a waiting reply answers it.
        if let Some(p) = parent {
            self.index.remove(&p.to_string());
        }
        self.save_index()?;
        Ok(key)
    }
}

/// A user message's content: one text part.
fn text_content(text: &str) -> PlainContent {
    PlainContent {
        parts: vec![PlainContentPartsItem::TextPart(TextPart {
            provider_data: None,
            text: text.to_string(),
            extra: Default::default(),
        })],
        error: None,
        extra: Default::default(),
    }
}
