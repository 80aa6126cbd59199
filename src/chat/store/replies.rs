//! A reply's life in the store: its pending record (created once at its
//! key), the inputs its run reads, the run, and its finished record
//! (written once, by swap on the pending version).

use super::*;

impl ChatStore {
    /// Creates the `pending` reply `{message}.r{attempt}` (create-if-absent:
    /// a taken key is [`ChatStoreError::ReplyTaken`]). `attempt` defaults
    /// to the one the user message asks for. Returns what
    /// [`ChatStore::finish_reply`] needs.
    pub fn start_reply(&mut self, message: Tid, attempt: Option<Attempt>) -> Result<PendingReply> {
        self.ensure_index()?;
        let (key, user) = self.reply_key_for(message, attempt)?;
        let chat = own_chat(&user, "message")?;
        let record = pending_reply(user.chat.clone(), Self::now()?);
        self.device
            .apply_sealed(&[pending_write(&key, &chat, &record)?], &mut os_rng())
            .map_err(|e| taken(e, &key.to_string()))?;
        let cid = self
            .device
            .repo()
            .get_cid(MESSAGE, &key.to_string())
            .map_err(DeviceError::from)?
            .ok_or_else(|| invalid("reply", "the pending reply is missing after its commit"))?;
        // A newer attempt supersedes a waiting one.
        self.index.supersede(message, key.attempt());
        self.save_index()?;
        Ok(PendingReply {
            key,
            chat,
            record,
            cid,
        })
    }

    /// The reply key a run of user message `message` fills: `attempt`, or
    /// the one the message asks for, else the first.
    pub(super) fn reply_key_for(
        &self,
        message: Tid,
        attempt: Option<Attempt>,
    ) -> Result<(ReplyKey, Message)> {
        let (user, _) = self.message(&message.to_string())?;
        if user.role != MessageRole::User {
            return Err(ChatStoreError::NotAUserMessage {
                key: message.to_string(),
            });
        }
        let attempt = match attempt {
            Some(a) => a,
            None => {
                requested_reply(&message.to_string(), &user).map_or(Attempt::FIRST, |k| k.attempt())
            }
        };
        Ok((ReplyKey::new(message, attempt), user))
    }

    /// The newest attempt of a reply to `message` in the repository.
    pub(super) fn newest_attempt(&self, message: Tid) -> Result<Option<ReplyKey>> {
        let mut newest: Option<ReplyKey> = None;
        let keys = self
            .device
            .repo()
            .list_prefix(MESSAGE, &format!("{message}.r"))
            .map_err(DeviceError::from)?;
        for entry in keys {
            let (path, _) = entry.map_err(DeviceError::from)?;
            let rkey = path.rsplit('/').next().unwrap_or_default();
            if let Ok(k) = ReplyKey::parse(rkey)
                && k.message() == message
                && newest.is_none_or(|n| k.attempt() > n.attempt())
            {
                newest = Some(k);
            }
        }
        Ok(newest)
    }

    /// The pending reply a run `to` its message fills: written now
    /// ([`ChatStore::start_reply`]) or, for [`ReplyStart::Asked`], the one
    /// already in the repository, which another device (the chat page, a
    /// phone) wrote with the message ([`ChatStore::pending_reply`] checks
    /// it is pending and authentic); without `attempt`, the newest attempt
    /// there. Either way the finish is swapped on
    /// the pending record's CID, so only one run of a key is ever kept.
    pub fn reply_to_fill(&mut self, to: ReplyTo) -> Result<PendingReply> {
        let ReplyTo {
            message,
            attempt,
            start,
        } = to;
        match start {
            ReplyStart::Write => self.start_reply(message, attempt),
            ReplyStart::Asked => {
                self.ensure_index()?;
                let (mut key, _) = self.reply_key_for(message, attempt)?;
                if attempt.is_none() {
                    // A regeneration elsewhere wrote the next attempt
                    // without changing the message: take the newest.
                    if let Some(newest) = self.newest_attempt(message)? {
                        key = newest;
                    }
                }
                self.pending_reply(&key).map_err(|e| match e {
                    ChatStoreError::NoMessage { .. } => ChatStoreError::NotAsked {
                        key: key.to_string(),
                    },
                    e => e,
                })
            }
        }
    }

    /// Writes the finished reply: its blobs stored first (so no record
    /// names a blob the folder lacks), its clear fields into the pending
    /// record, its content sealed, swapped on the pending version's CID. A second
    /// finish (of this or any run of the key) is
    /// [`ChatStoreError::ReplyAlreadyFinished`]. Returns the new CID.
    pub fn finish_reply(
        &mut self,
        pending: &PendingReply,
        finished: &FinishedReply,
    ) -> Result<Cid> {
        self.ensure_index()?;
        if finished.key != pending.key {
            return Err(invalid(
                "finished reply",
                format!("it is for {}, not {}", finished.key, pending.key),
            ));
        }
        let key = pending.key.to_string();
        let blobs = BlobStore::new(&self.dir);
        for blob in &finished.blobs {
            blobs
                .put(&blob.bytes, SEALED_BLOB_MIME)
                .map_err(|source| ChatStoreError::Blob {
                    cid: blob.seal.cid.to_string(),
                    source,
                })?;
        }
        let mut record = pending.record.clone();
        finished.fill(&mut record);
        // The content takes the authenticator's place.
        record.authenticator = None;
        let write = SealedWrite::new(
            &key,
            &pending.chat,
            &record,
            &finished.content,
            SealedAction::Update {
                swap: Some(pending.cid),
            },
        )?
        .with_blobs(finished.blobs.iter().map(|b| b.seal.clone()).collect());
        self.device
            .apply_sealed(&[write], &mut os_rng())
            .map_err(|e| match e {
                DeviceError::Repo(r)
                    if matches!(
                        *r,
                        RepoError::SwapMismatch { .. } | RepoError::RecordNotFound { .. }
                    ) =>
                {
                    ChatStoreError::ReplyAlreadyFinished { key: key.clone() }
                }
                e => e.into(),
            })?;
        self.finished.note([key.as_str()])?;
        if finished.status == MessageStatus::Waiting {
            self.index.insert(&key, &pending.chat);
        }
        self.save_index()?;
        self.device
            .repo()
            .get_cid(MESSAGE, &key)
            .map_err(DeviceError::from)?
            .ok_or_else(|| invalid("reply", "missing after its commit"))
    }

    /// Starts the reply and runs a recorded run (JSON lines) through it,
    /// calling `on_event` with each event as it is made, then finishes it.
    pub fn run_reply(
        &mut self,
        message: Tid,
        attempt: Option<Attempt>,
        policy: std::sync::Arc<dyn crate::chat::ApprovalPolicy + Send + Sync>,
        lines: impl IntoIterator<Item = std::io::Result<String>>,
        on_event: impl FnMut(&AssistantEvent),
    ) -> Result<(PendingReply, FinishedReply)> {
        let to = ReplyTo {
            message,
            attempt,
            start: ReplyStart::Write,
        };
        self.run_reply_with(to, policy, &BTreeMap::new(), lines, on_event)
    }

    /// [`ChatStore::run_reply`] of the reply `to`, whose message may be an
    /// approval answer
    /// (a user message of `toolApprovalPart`s continuing from a waiting
    /// reply): then the reply starts with the decided calls repeated, each
    /// followed by its result (`Reply::resume`). `tool_runs` holds the
    /// results of the approved calls, by call id (the host ran them);
    /// denied calls get a refused error result. An approved call without
    /// a result is refused before anything is written.
    pub fn run_reply_with(
        &mut self,
        to: ReplyTo,
        policy: std::sync::Arc<dyn crate::chat::ApprovalPolicy + Send + Sync>,
        tool_runs: &BTreeMap<String, crate::chat::ToolRun>,
        lines: impl IntoIterator<Item = std::io::Result<String>>,
        mut on_event: impl FnMut(&AssistantEvent),
    ) -> Result<(PendingReply, FinishedReply)> {
        let message = to.message;
        let settled = match self.answer_resolution(message)? {
            Some(resolution) => Some(settle_answer(&resolution, tool_runs)?),
            None if !tool_runs.is_empty() => {
                return Err(invalid(
                    "tool results",
                    format!(
                        "{message} is not an approval answer; there is no call to give a result to"
                    ),
                ));
            }
            None => None,
        };
        let pending = self.reply_to_fill(to)?;
        let (mut run, first) = begin_reply(&pending, policy, settled.as_deref())?;
        for e in &first {
            on_event(e);
        }
        let mut events = Vec::new();
        for line in lines {
            match line {
                Ok(line) => run.feed(&line, &mut events),
                Err(e) => {
                    run.cut_by(e);
                }
            }
            for e in events.drain(..) {
                on_event(&e);
            }
            if run.stopped() {
                break;
            }
        }
        let finished = run.end();
        for e in &finished.events {
            on_event(e);
        }
        self.finish_reply(&pending, &finished.reply)?;
        Ok((pending, finished.reply))
    }

    /// The pending reply `key` as [`ChatStore::finish_reply`] needs it
    /// (for a host that runs replies others created). A reply that is not
    /// `pending` any more is [`ChatStoreError::ReplyAlreadyFinished`]; one
    /// whose authenticator is missing or does not open here is
    /// [`ChatStoreError::UnauthenticatedReply`] (a host must not generate
    /// for it).
    pub fn pending_reply(&self, key: &ReplyKey) -> Result<PendingReply> {
        let (record, cid) = self.message(&key.to_string())?;
        if record.role == MessageRole::User || record.status != MessageStatus::Pending {
            return Err(ChatStoreError::ReplyAlreadyFinished {
                key: key.to_string(),
            });
        }
        let chat = own_chat(&record, "reply")?;
        let reason = match self.open_content(&key.to_string(), &record).1 {
            ContentState::Empty => None,
            ContentState::Unauthenticated | ContentState::Missing => {
                Some("it has no authenticator".to_string())
            }
            ContentState::UnknownKey => {
                Some("its authenticator is sealed with a key this device does not hold".into())
            }
            ContentState::Unreadable(r) => Some(format!("its authenticator does not open: {r}")),
            ContentState::Open => Some("it has content".into()),
        };
        if let Some(reason) = reason {
            return Err(ChatStoreError::UnauthenticatedReply {
                key: key.to_string(),
                reason,
            });
        }
        // Authentic, but an old version put back (see `chat::finished`).
        if self.finished.contains(&key.to_string()) {
            return Err(ChatStoreError::ReplayedReply {
                key: key.to_string(),
            });
        }
        Ok(PendingReply {
            key: *key,
            chat,
            record,
            cid,
        })
    }

    /// If user message `message` answers a waiting reply: the answer,
    /// checked against the chat as it was before it (without the
    /// continuations of the waiting reply). `None` for any other message.
    pub(super) fn answer_resolution(&self, message: Tid) -> Result<Option<Resolution>> {
        let (m, _) = self.message(&message.to_string())?;
        let Some(chat) = chat_of(&m) else {
            return Ok(None);
        };
        if crate::chat::record::parent_reply(&m).is_none() {
            return Ok(None);
        }
        let (records, _) = self.chat_records(chat)?;
        resolution_in(&records, message)
    }

    /// What a host needs to run the reply to user message `message`, from
    /// one read of its chat: the branch it continues (from the chat's first
    /// message along `parent` links to `message` itself, opened where this
    /// device can: what a model is given as history) and, for an approval
    /// answer, the checked answer ([`ChatStore::answer_resolution`]).
    pub fn reply_inputs(&self, message: Tid) -> Result<(Vec<ChatRecord>, Option<Resolution>)> {
        let (m, _) = self.message(&message.to_string())?;
        let chat = own_chat(&m, "message")?;
        let (records, _) = self.chat_records(&chat)?;
        let resolution = resolution_in(&records, message)?;
        Ok((branch_in(records, message), resolution))
    }
}

/// The pending reply `record` at `key` as a sealed write (its
/// authenticator sealed in place of content).
pub(super) fn pending_write(key: &ReplyKey, chat: &str, record: &Message) -> Result<SealedWrite> {
    Ok(SealedWrite::pending_reply(key.to_string(), chat, record)?)
}

pub(super) fn taken(e: DeviceError, key: &str) -> ChatStoreError {
    match e {
        DeviceError::Repo(r) if matches!(*r, RepoError::RecordExists { .. }) => {
            ChatStoreError::ReplyTaken {
                key: key.to_string(),
            }
        }
        e => e.into(),
    }
}

/// [`ChatStore::answer_resolution`] over the chat's opened `records`.
pub(super) fn resolution_in(records: &[ChatRecord], message: Tid) -> Result<Option<Resolution>> {
    let key = message.to_string();
    let Some(answer) = records.iter().find(|r| r.key == key) else {
        return Ok(None);
    };
    let Some(parent) = crate::chat::record::parent_reply(&answer.message) else {
        return Ok(None);
    };
    let parent_key = parent.to_string();
    let is_waiting = records
        .iter()
        .any(|r| r.key == parent_key && r.message.status == MessageStatus::Waiting);
    let decisions: Vec<ToolApprovalPart> = answer
        .content
        .iter()
        .flat_map(|c| &c.parts)
        .filter_map(|p| match p {
            PlainContentPartsItem::ToolApprovalPart(a) => Some(a.clone()),
            _ => None,
        })
        .collect();
    if !is_waiting || decisions.is_empty() {
        return Ok(None);
    }
    // The answer as it was made: the chat without the continuations of
    // the waiting reply (this answer among them).
    let before: Vec<ChatRecord> = records
        .iter()
        .filter(|r| {
            !(r.message.role == MessageRole::User
                && r.message.parent.as_ref().map(|p| p.as_str()) == Some(parent_key.as_str()))
        })
        .cloned()
        .collect();
    Ok(Some(check_answer(&before, &parent_key, &decisions)?))
}

/// The branch of [`ChatStore::reply_inputs`] over the chat's opened `records`.
pub(super) fn branch_in(records: Vec<ChatRecord>, message: Tid) -> Vec<ChatRecord> {
    let mut by_key: BTreeMap<String, ChatRecord> =
        records.into_iter().map(|r| (r.key.clone(), r)).collect();
    let mut out = Vec::new();
    let mut next = Some(message.to_string());
    // Each step moves to an older TID (a parent reply belongs to an
    // earlier message), and a record is taken out once: no cycles.
    while let Some(key) = next.take() {
        let Some(user) = by_key.remove(&key) else {
            break;
        };
        if let Some(parent) = crate::chat::record::parent_reply(&user.message)
            && let Some(reply) = by_key.remove(&parent.to_string())
        {
            next = Some(parent.message().to_string());
            out.push(user);
            out.push(reply);
            continue;
        }
        out.push(user);
    }
    out.reverse();
    out
}
