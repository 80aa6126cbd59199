//! What the `chat.gel.assistant.*` queries need from the message records'
//! clear fields, kept in memory and brought up to date from the
//! repository's `#commit` event log before each use.
//!
//! Without it every call read and decoded the whole message collection.
//! With it a thread page costs O(log n + page) and an approval page
//! O(log n + page); keeping it current costs O(records a commit
//! touched) per commit, read from the event log (a full rebuild at the
//! first use and when the reader fell behind the log's retention).
//!
//! Only clear metadata is held: `chat`, `role`, `status`, `parent`,
//! `createdAt` and the CID. The repository stays the truth: the index is
//! derived, never written anywhere, and rebuilt whenever in doubt.

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;

use crate::chat::keys::ReplyKey;
use crate::chat::store::MESSAGE;
use crate::repo::repository::{Changes, Follower, RepoError, Repository, WriteHints};

/// The clear fields of one message record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageMeta {
    /// Its CID.
    pub cid: String,
    /// The chat's at-uri.
    pub chat: String,
    /// `user` or `assistant` (or a value this version does not know).
    pub role: String,
    /// `pending`, `complete`, `waiting`, …
    pub status: String,
    /// For a user message: the reply it continues from.
    pub parent: Option<String>,
    /// `createdAt`.
    pub created_at: String,
    /// Whether it carries sealed content (a waiting reply without any is
    /// not one a device of the account wrote).
    pub sealed: bool,
}

impl MessageMeta {
    fn from_value(cid: String, v: &Value) -> MessageMeta {
        let field = |name: &str| v.get(name).and_then(Value::as_str).unwrap_or("").to_owned();
        MessageMeta {
            cid,
            chat: field("chat"),
            role: field("role"),
            status: field("status"),
            parent: v.get("parent").and_then(Value::as_str).map(str::to_owned),
            created_at: field("createdAt"),
            sealed: v.get("content").is_some_and(Value::is_object),
        }
    }
}

/// The index.
#[derive(Debug, Default)]
pub struct ChatIndex {
    /// Where the index stands in the event log (no cursor until built).
    follower: Follower,
    messages: HashMap<String, MessageMeta>,
    /// Chat at-uri → its messages' keys, in key order.
    by_chat: HashMap<String, BTreeSet<String>>,
    /// Reply key → how many user messages continue from it.
    continued: HashMap<String, usize>,
    /// User message key → the attempts of its replies.
    attempts: HashMap<String, BTreeSet<u16>>,
    /// Replies with status `waiting`, in key order.
    waiting: BTreeSet<String>,
}

impl ChatIndex {
    /// Brings the index up to the repository's last event (a `tooBig`
    /// commit's ops from `hints`, else a rebuild).
    pub fn catch_up(&mut self, repo: &Repository, hints: &WriteHints) -> Result<(), RepoError> {
        match self.follower.next(repo, |c| hints.get(c))? {
            Changes::None => Ok(()),
            Changes::Rebuild => self.rebuild(repo),
            Changes::Ops(ops) => {
                let touched: BTreeSet<String> = ops
                    .into_iter()
                    .filter_map(|(_, path)| {
                        path.strip_prefix(MESSAGE)
                            .and_then(|r| r.strip_prefix('/'))
                            .map(str::to_owned)
                    })
                    .collect();
                // The records as they are now: later commits of the same
                // key are already in the repository.
                for rkey in touched {
                    let now = repo
                        .get(MESSAGE, &rkey)?
                        .map(|e| MessageMeta::from_value(e.cid.to_string(), &e.value));
                    self.set(&rkey, now);
                }
                Ok(())
            }
        }
    }

    fn rebuild(&mut self, repo: &Repository) -> Result<(), RepoError> {
        // The follower already stands at the log's last event.
        let follower = std::mem::take(&mut self.follower);
        *self = ChatIndex {
            follower,
            ..ChatIndex::default()
        };
        for item in repo.list(Some(MESSAGE))? {
            let (path, _) = item?;
            let rkey = &path[MESSAGE.len() + 1..];
            if let Some(e) = repo.get(MESSAGE, rkey)? {
                let meta = MessageMeta::from_value(e.cid.to_string(), &e.value);
                self.set(rkey, Some(meta));
            }
        }
        Ok(())
    }

    /// Replaces what the index holds for `rkey` (`None`: deleted).
    fn set(&mut self, rkey: &str, meta: Option<MessageMeta>) {
        // The replies whose waiting state this change can move: `rkey`'s
        // attempts (a newer one supersedes) and the reply a user message
        // continues from (it answers it), before and after.
        let mut affected = Vec::new();
        if let Some(old) = self.messages.remove(rkey) {
            affected.extend(self.related(rkey, &old));
            self.unlink(rkey, &old);
        }
        if let Some(new) = meta {
            affected.extend(self.related(rkey, &new));
            self.link(rkey, &new);
            self.messages.insert(rkey.to_owned(), new);
        }
        for reply in affected {
            self.recheck_waiting(&reply);
        }
    }

    /// The replies whose waiting state depends on message `rkey`.
    fn related(&self, rkey: &str, m: &MessageMeta) -> Vec<String> {
        if m.role == "user" {
            return m.parent.iter().cloned().collect();
        }
        let Ok(key) = ReplyKey::parse(rkey) else {
            return Vec::new();
        };
        let mut out = vec![rkey.to_owned()];
        if let Some(attempts) = self.attempts.get(&key.message().to_string()) {
            out.extend(attempts.iter().filter_map(|&a| {
                crate::chat::keys::Attempt::new(i64::from(a))
                    .ok()
                    .map(|a| ReplyKey::new(key.message(), a).to_string())
            }));
        }
        out
    }

    /// Puts `reply` in the waiting set iff it waits: status `waiting`, the
    /// newest attempt, not answered.
    fn recheck_waiting(&mut self, reply: &str) {
        let waits = match (self.messages.get(reply), ReplyKey::parse(reply)) {
            (Some(m), Ok(key)) => {
                m.role != "user"
                    && m.status == "waiting"
                    && !self.is_superseded(&key)
                    && !self.is_answered(reply)
            }
            _ => false,
        };
        if waits {
            self.waiting.insert(reply.to_owned());
        } else {
            self.waiting.remove(reply);
        }
    }

    fn link(&mut self, rkey: &str, m: &MessageMeta) {
        self.by_chat
            .entry(m.chat.clone())
            .or_default()
            .insert(rkey.to_owned());
        if m.role == "user" {
            if let Some(p) = &m.parent {
                *self.continued.entry(p.clone()).or_default() += 1;
            }
        } else if let Ok(key) = ReplyKey::parse(rkey) {
            self.attempts
                .entry(key.message().to_string())
                .or_default()
                .insert(key.attempt().get());
        }
    }

    fn unlink(&mut self, rkey: &str, m: &MessageMeta) {
        if let Some(set) = self.by_chat.get_mut(&m.chat) {
            set.remove(rkey);
            if set.is_empty() {
                self.by_chat.remove(&m.chat);
            }
        }
        if m.role == "user" {
            if let Some(p) = &m.parent
                && let Some(n) = self.continued.get_mut(p)
            {
                *n -= 1;
                if *n == 0 {
                    self.continued.remove(p);
                }
            }
        } else if let Ok(key) = ReplyKey::parse(rkey) {
            let user = key.message().to_string();
            if let Some(set) = self.attempts.get_mut(&user) {
                set.remove(&key.attempt().get());
                if set.is_empty() {
                    self.attempts.remove(&user);
                }
            }
            self.waiting.remove(rkey);
        }
    }

    /// A message's clear fields.
    pub fn get(&self, rkey: &str) -> Option<&MessageMeta> {
        self.messages.get(rkey)
    }

    /// The keys of chat `chat_uri`'s messages after `cursor`, in key order.
    pub fn thread<'a>(
        &'a self,
        chat_uri: &str,
        cursor: Option<&str>,
    ) -> impl Iterator<Item = &'a String> + 'a {
        use std::ops::Bound;
        let lower = cursor.map_or(Bound::Unbounded, |c| Bound::Excluded(c.to_owned()));
        self.by_chat
            .get(chat_uri)
            .into_iter()
            .flat_map(move |set| set.range((lower.clone(), Bound::Unbounded)))
    }

    /// Whether a newer attempt of the same user message exists.
    pub fn is_superseded(&self, reply: &ReplyKey) -> bool {
        self.attempts
            .get(&reply.message().to_string())
            .and_then(|a| a.last())
            .is_some_and(|&newest| newest > reply.attempt().get())
    }

    /// Whether a user message continues from `reply`.
    pub fn is_answered(&self, reply: &str) -> bool {
        self.continued.contains_key(reply)
    }

    /// The replies waiting for an answer (status `waiting`, newest
    /// attempt, not answered) with keys below `before`, newest first: the
    /// set holds exactly those, so a page costs O(log n + page).
    pub fn waiting(&self, before: Option<&str>) -> impl Iterator<Item = (&String, &MessageMeta)> {
        use std::ops::Bound;
        let upper = before.map_or(Bound::Unbounded, |b| Bound::Excluded(b.to_owned()));
        self.waiting
            .range((Bound::Unbounded, upper))
            .rev()
            .filter_map(|rkey| Some((rkey, self.messages.get(rkey)?)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::crypto::{KeyAlgorithm, SigningKey};
    use crate::repo::repository::Write;
    use crate::store::MemoryEngine;

    const CHAT_A: &str = "at://did:plc:abc/chat.gel.assistant.chat/3lbqzdw5pzk22";
    const CHAT_B: &str = "at://did:plc:abc/chat.gel.assistant.chat/3lbqzdw5pzk23";

    fn message(chat: &str, role: &str, status: &str, parent: Option<&str>) -> Value {
        let mut v = json!({
            "$type": MESSAGE,
            "chat": chat,
            "role": role,
            "status": status,
            "createdAt": "2026-01-01T00:00:00.000Z",
        });
        if let Some(p) = parent {
            v["parent"] = p.into();
        }
        v
    }

    fn snapshot(i: &ChatIndex) -> (Vec<(String, MessageMeta)>, Vec<String>, Vec<String>) {
        let mut messages: Vec<_> = i
            .messages
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        messages.sort_by(|a, b| a.0.cmp(&b.0));
        let waiting = i.waiting(None).map(|(k, _)| k.clone()).collect();
        let thread = i.thread(CHAT_A, None).cloned().collect();
        (messages, waiting, thread)
    }

    /// Kept current commit by commit, the index equals one rebuilt from
    /// the records, through creates, updates (pending → waiting), answers,
    /// new attempts and deletes.
    #[test]
    fn incremental_equals_rebuilt() {
        let engine = Arc::new(MemoryEngine::new());
        let key = SigningKey::from_bytes(KeyAlgorithm::K256, &[3u8; 32]).unwrap();
        let mut repo = Repository::init_engine(engine, key).unwrap();
        let mut live = ChatIndex::default();
        live.catch_up(&repo, &WriteHints::default()).unwrap();
        let u1 = "3lbqzdw5pzk32";
        let u2 = "3lbqzdw5pzk42";
        let r10 = format!("{u1}.r0");
        let r11 = format!("{u1}.r1");
        let steps: Vec<Vec<Write>> = vec![
            vec![
                Write::create(MESSAGE, u1, message(CHAT_A, "user", "complete", None)),
                Write::create(MESSAGE, &r10, message(CHAT_A, "assistant", "pending", None)),
            ],
            vec![Write::update(
                MESSAGE,
                &r10,
                message(CHAT_A, "assistant", "waiting", None),
            )],
            vec![Write::create(
                MESSAGE,
                "3lbqzdw5pzk52",
                message(CHAT_B, "user", "complete", None),
            )],
            vec![Write::create(
                MESSAGE,
                &r11,
                message(CHAT_A, "assistant", "waiting", None),
            )],
            vec![Write::create(
                MESSAGE,
                u2,
                message(CHAT_A, "user", "complete", Some(&r11)),
            )],
            vec![Write::delete(MESSAGE, u2)],
            vec![Write::delete(MESSAGE, &r11)],
        ];
        let mut waiting_seen = Vec::new();
        for writes in steps {
            repo.apply(&writes).unwrap();
            live.catch_up(&repo, &WriteHints::default()).unwrap();
            let mut fresh = ChatIndex::default();
            fresh.catch_up(&repo, &WriteHints::default()).unwrap();
            assert_eq!(snapshot(&live), snapshot(&fresh));
            waiting_seen.push(snapshot(&live).1);
        }
        assert_eq!(
            waiting_seen,
            vec![
                vec![],
                vec![r10.clone()],
                vec![r10.clone()],
                vec![r11.clone()], // r0 superseded by r1
                vec![],            // r1 answered
                vec![r11.clone()], // the answer deleted
                vec![r10.clone()], // r1 deleted: r0 is the newest again
            ]
        );
    }
}
