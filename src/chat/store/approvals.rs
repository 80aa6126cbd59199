//! Waiting approvals: listing them from the approval index, answering
//! them, and keeping the index current.

use super::*;

impl ChatStore {
    /// The replies waiting for an approval answer, across all chats, from
    /// the index.
    pub fn approvals(&mut self) -> Result<Vec<WaitingApproval>> {
        if self.keeps_index {
            self.ensure_index()?;
        } else {
            self.load_index()?;
        }
        let mut out = Vec::with_capacity(self.index.entries().len());
        for e in self.index.entries() {
            let (m, _) = self.message(&e.reply)?;
            let (content, state) = self.open_content(&e.reply, &m);
            out.push(WaitingApproval {
                reply: e.reply.clone(),
                chat: e.chat.clone(),
                calls: content.as_ref().map(calls_of).unwrap_or_default(),
                readable: content.is_some(),
                state: state.name().to_owned(),
            });
        }
        Ok(out)
    }

    /// The waiting calls of reply `reply`, opened (`None` if it does not
    /// open here): one reply, without the index.
    pub fn waiting_calls(&self, reply: &str) -> Result<Option<Vec<WaitingCall>>> {
        let (m, _) = self.message(reply)?;
        let (content, _) = self.open_content(reply, &m);
        Ok(content.as_ref().map(calls_of))
    }

    /// Writes the answer to the waiting reply `reply`: a user message
    /// continuing from it whose content holds one `toolApprovalPart` per
    /// waiting call (calls `decisions` does not mention are denied).
    /// Refusals are [`ChatStoreError::Approval`] (`pending_resolved`,
    /// `pending_unknown`, `pending_superseded`, …). Returns the answer's key.
    pub fn approve(&mut self, reply: &str, decisions: &[ToolApprovalPart]) -> Result<Tid> {
        self.answer(reply, decisions, false)
    }

    /// [`ChatStore::approve`], and the pending reply to the answer in the
    /// same commit (for a host that generates it): both or neither.
    pub fn approve_and_ask(
        &mut self,
        reply: &str,
        decisions: &[ToolApprovalPart],
    ) -> Result<(Tid, PendingReply)> {
        let answer = self.answer(reply, decisions, true)?;
        let pending = self.pending_reply(&ReplyKey::first(answer))?;
        Ok((answer, pending))
    }

    pub(super) fn answer(
        &mut self,
        reply: &str,
        decisions: &[ToolApprovalPart],
        ask: bool,
    ) -> Result<Tid> {
        let key = ReplyKey::parse(reply).map_err(|e| {
            ApprovalError::PendingUnknown(format!("{reply:?} is not a reply key: {e}"))
        })?;
        let (message, _) = self.message(reply).map_err(|e| match e {
            ChatStoreError::NoMessage { .. } => {
                ApprovalError::PendingUnknown(format!("no reply {reply}")).into()
            }
            e => e,
        })?;
        let chat = own_chat(&message, "reply")?;
        let (records, _) = self.chat_records(&chat)?;
        let resolution = check_answer(&records, reply, decisions)?;
        let answer = self.write_user(
            &chat,
            resolution.answer_content(),
            Some(key),
            Attempt::FIRST,
            None,
            ask,
        )?;
        Ok(answer)
    }

    pub(super) fn load_index(&mut self) -> Result<()> {
        let head = self.device.repo().head().commit.to_string();
        if !self.index.read(&head) {
            self.rebuild_index()?;
            self.save_index()?;
        }
        Ok(())
    }

    /// Rebuilds the approval index from the records: every `waiting` reply
    /// that no newer attempt replaced and no user message continues from.
    pub fn rebuild_index(&mut self) -> Result<()> {
        let messages = self.all_messages()?;
        self.index
            .rebuild(messages.iter().map(|(k, m, _)| (k.as_str(), m)));
        Ok(())
    }

    /// Saves the index with the current head. Called after every commit
    /// this store makes.
    pub(super) fn save_index(&self) -> Result<()> {
        if !self.keeps_index {
            return Ok(());
        }
        let head = self.device.repo().head().commit.to_string();
        self.index
            .save(&head)
            .map_err(|source| ChatStoreError::Index {
                path: self.index.display_path(),
                source,
            })
    }
}

pub(super) fn calls_of(content: &PlainContent) -> Vec<WaitingCall> {
    waiting_calls(content)
        .map(|c| WaitingCall {
            call_id: c.call_id.clone(),
            name: c.name.clone(),
            arguments: c.arguments.clone(),
        })
        .collect()
}
