//! The approval index of a data folder: which replies wait for an answer,
//! across all chats, kept in `chat-approvals.json` so `chat approvals`
//! need not open every record.
//!
//! The file holds keys only (tool names and arguments are sealed content)
//! and the repository head it reflects. It is a cache: missing, torn,
//! unreadable or at another head, it is rebuilt from the records.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::keys::{Attempt, MessageKey, ReplyKey};
use crate::lexicon::chat::gel::assistant::message::{Message, MessageRole, MessageStatus};
use crate::repo::tid::Tid;

/// The index file's name in the data folder.
pub const APPROVAL_INDEX: &str = "chat-approvals.json";

/// One waiting reply: its key and its chat's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IndexEntry {
    pub reply: String,
    pub chat: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct IndexFile {
    version: u32,
    /// The repository head this index reflects.
    head: String,
    waiting: Vec<IndexEntry>,
}

/// The waiting replies, by reply key.
#[derive(Debug)]
pub struct ApprovalIndex {
    dir: PathBuf,
    waiting: BTreeMap<String, IndexEntry>,
    /// How it was last loaded: `true` if rebuilt from records.
    rebuilt: bool,
}

impl ApprovalIndex {
    /// An empty index for the data folder `dir` (nothing read yet).
    pub fn new(dir: &Path) -> ApprovalIndex {
        ApprovalIndex {
            dir: dir.to_path_buf(),
            waiting: BTreeMap::new(),
            rebuilt: false,
        }
    }

    fn path(&self) -> PathBuf {
        self.dir.join(APPROVAL_INDEX)
    }

    /// Reads the file if it reflects `head`; otherwise (or when it cannot
    /// be read) returns `false` and leaves the index as it was.
    pub fn read(&mut self, head: &str) -> bool {
        let loaded = std::fs::read(self.path())
            .ok()
            .and_then(|b| serde_json::from_slice::<IndexFile>(&b).ok())
            .filter(|f| f.version == 1 && f.head == head);
        let Some(f) = loaded else {
            return false;
        };
        self.waiting = f
            .waiting
            .into_iter()
            .map(|w| (w.reply.clone(), w))
            .collect();
        true
    }

    /// Rebuilds from the message records (`(key, record)`): every
    /// `waiting` reply that no newer attempt replaced and no user message
    /// continues from.
    pub fn rebuild<'a>(&mut self, messages: impl IntoIterator<Item = (&'a str, &'a Message)>) {
        let messages: Vec<(&str, &Message)> = messages.into_iter().collect();
        let answered: HashSet<&str> = messages
            .iter()
            .filter(|(_, m)| m.role == MessageRole::User)
            .filter_map(|(_, m)| m.parent.as_ref().map(|p| p.as_str()))
            .collect();
        let mut newest: BTreeMap<Tid, Attempt> = BTreeMap::new();
        for (k, _) in &messages {
            if let Ok(MessageKey::Reply(r)) = MessageKey::parse(k) {
                let e = newest.entry(r.message()).or_insert(r.attempt());
                *e = (*e).max(r.attempt());
            }
        }
        let mut waiting = BTreeMap::new();
        for (k, m) in &messages {
            let Ok(MessageKey::Reply(r)) = MessageKey::parse(k) else {
                continue;
            };
            if m.status != MessageStatus::Waiting
                || answered.contains(k)
                || newest.get(&r.message()).is_some_and(|&a| a > r.attempt())
            {
                continue;
            }
            let Some(chat) = super::store::chat_of(m) else {
                continue;
            };
            waiting.insert(
                k.to_string(),
                IndexEntry {
                    reply: k.to_string(),
                    chat: chat.to_string(),
                },
            );
        }
        self.waiting = waiting;
        self.rebuilt = true;
    }

    /// Whether the last load rebuilt it from the records.
    pub fn rebuilt(&self) -> bool {
        self.rebuilt
    }

    /// Saves it as reflecting `head` (atomically: a temporary file renamed
    /// over it; no fsync: a file lost or torn in a crash is at another
    /// head, or does not parse, and is rebuilt at the next open).
    pub fn save(&self, head: &str) -> std::io::Result<()> {
        let file = IndexFile {
            version: 1,
            head: head.to_owned(),
            waiting: self.waiting.values().cloned().collect(),
        };
        let bytes = serde_json::to_vec_pretty(&file)?;
        let tmp = self.dir.join(format!("{APPROVAL_INDEX}.tmp"));
        {
            use std::io::Write as _;
            let mut opts = std::fs::OpenOptions::new();
            opts.write(true).create(true).truncate(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
            opts.open(&tmp)?.write_all(&bytes)?;
        }
        std::fs::rename(&tmp, self.path())
    }

    /// The file's path, for errors.
    pub fn display_path(&self) -> String {
        self.path().display().to_string()
    }

    /// A reply now waits.
    pub fn insert(&mut self, reply: &str, chat: &str) {
        self.waiting.insert(
            reply.to_owned(),
            IndexEntry {
                reply: reply.to_owned(),
                chat: chat.to_owned(),
            },
        );
    }

    /// A reply was answered.
    pub fn remove(&mut self, reply: &str) {
        self.waiting.remove(reply);
    }

    /// A newer attempt `attempt` of `message` supersedes its older waiting
    /// replies.
    pub fn supersede(&mut self, message: Tid, attempt: Attempt) {
        self.waiting.retain(|k, _| match ReplyKey::parse(k) {
            Ok(w) => !(w.message() == message && w.attempt() < attempt),
            Err(_) => true,
        });
    }

    /// The waiting replies, in key order.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = &IndexEntry> {
        self.waiting.values()
    }
}
