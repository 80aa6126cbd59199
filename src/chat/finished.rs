//! The replies this data folder has seen finished, kept in
//! `chat-finished.log` so that none is ever generated twice.
//!
//! A pending reply's record opens however often it is replayed: its
//! authenticator is what a device wrote, and an old version is still
//! authentic. A server that deletes a finished reply and later puts its
//! pending version back would have the assistant run it again (and its
//! approved tools with it). Reply keys are created and filled exactly
//! once, so a key once seen finished, or deleted, is remembered here, from
//! every writer (this store's own finishes, a sync, a server's clients), by
//! following the event log, and a pending reply at such a key is refused.
//! (A deleted reply counts because a finish and the deletion can reach this
//! folder in one batch; a retry always takes the next attempt's key.)
//! When the event log cannot tell what changed (pruned), every record is
//! looked at: a reply finished and deleted entirely within such a gap is
//! not remembered.
//!
//! The file is append-only, one reply key per line, synced after each
//! append; a line that is not a reply key (a torn last line) is skipped.
//! Where the log was followed to is kept beside it (`chat-finished.seq`,
//! written after the keys it covers, a cache: without it every record is
//! looked at once).

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::keys::ReplyKey;
use super::store::MESSAGE;
use crate::repo::events::OpAction;
use crate::repo::repository::{Changes, Follower, RepoError, Repository};

/// The file in the data folder.
pub const FINISHED_LOG: &str = "chat-finished.log";
/// The event seq the log covers, beside it.
pub const FINISHED_SEQ: &str = "chat-finished.seq";

/// Longest line read back (a reply key is far shorter).
const MAX_LINE: usize = 512;

/// Why the log could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FinishedError {
    /// The file failed.
    #[error("finished-reply log {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// What failed.
        source: std::io::Error,
    },
    /// Reading the records failed.
    #[error(transparent)]
    Repo(Box<RepoError>),
}

impl From<RepoError> for FinishedError {
    fn from(e: RepoError) -> Self {
        FinishedError::Repo(Box::new(e))
    }
}

/// The set of reply keys seen finished (see the module docs).
#[derive(Debug)]
pub struct FinishedReplies {
    path: PathBuf,
    keys: HashSet<String>,
    follower: Follower,
    /// The file ends in a torn line: the next append starts a new one.
    torn: bool,
}

impl FinishedReplies {
    /// Reads the log of data folder `dir` (none yet: empty).
    pub fn load(dir: &Path) -> Result<FinishedReplies, FinishedError> {
        let path = dir.join(FINISHED_LOG);
        let io = |source| FinishedError::Io {
            path: path.display().to_string(),
            source,
        };
        let mut keys = HashSet::new();
        let mut torn = false;
        match File::open(&path) {
            Ok(f) => {
                for line in BufReader::new(f).split(b'\n') {
                    let line = line.map_err(io)?;
                    torn = false;
                    match std::str::from_utf8(&line) {
                        Ok(k) if k.len() <= MAX_LINE && ReplyKey::parse(k).is_ok() => {
                            keys.insert(k.to_owned());
                        }
                        _ => torn = !line.is_empty(),
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
        let follower = std::fs::read_to_string(dir.join(FINISHED_SEQ))
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
            .map_or_else(Follower::new, Follower::at);
        Ok(FinishedReplies {
            path,
            keys,
            follower,
            torn,
        })
    }

    /// Whether reply `key` was seen finished.
    pub fn contains(&self, key: &str) -> bool {
        self.keys.contains(key)
    }

    /// Remembers `keys` (those not known yet), durably.
    pub fn note<'a>(
        &mut self,
        keys: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), FinishedError> {
        let new: Vec<&str> = keys
            .into_iter()
            .filter(|k| !self.keys.contains(*k))
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        let io = |source| FinishedError::Io {
            path: self.path.display().to_string(),
            source,
        };
        let mut text = String::new();
        if self.torn {
            text.push('\n');
        }
        for k in &new {
            text.push_str(k);
            text.push('\n');
        }
        let mut options = OpenOptions::new();
        options.append(true).create(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let mut file = options.open(&self.path).map_err(io)?;
        file.write_all(text.as_bytes()).map_err(io)?;
        file.sync_data().map_err(io)?;
        self.torn = false;
        self.keys.extend(new.into_iter().map(str::to_owned));
        Ok(())
    }

    /// Takes in every reply the repository shows finished since the last
    /// look (all of them on the first look, or when the log cannot tell).
    pub fn follow(&mut self, repo: &Repository) -> Result<(), FinishedError> {
        let before = self.follower.seq();
        let keys: Vec<String> = match self.follower.next(repo, |_| None)? {
            Changes::None => return Ok(()),
            Changes::Ops(ops) => ops
                .into_iter()
                .filter_map(|(action, path)| {
                    let (collection, rkey) = path.split_once('/')?;
                    let gone = action == OpAction::Delete && ReplyKey::parse(rkey).is_ok();
                    (collection == MESSAGE && (gone || finished_in(repo, rkey)))
                        .then(|| rkey.to_owned())
                })
                .collect(),
            Changes::Rebuild => {
                let mut out = Vec::new();
                for item in repo.list(Some(MESSAGE))? {
                    let (path, _) = item?;
                    let rkey = path.rsplit('/').next().unwrap_or_default();
                    if !self.keys.contains(rkey) && finished_in(repo, rkey) {
                        out.push(rkey.to_owned());
                    }
                }
                out
            }
        };
        self.note(keys.iter().map(String::as_str))?;
        if let Some(seq) = self.follower.seq().filter(|s| Some(*s) != before) {
            // A cache (see the module docs): not synced, and a failure only
            // costs a full look next time.
            let _ = std::fs::write(self.path.with_file_name(FINISHED_SEQ), seq.to_string());
        }
        Ok(())
    }
}

/// Whether the record at `rkey` is a reply whose status is past `pending`.
fn finished_in(repo: &Repository, rkey: &str) -> bool {
    if ReplyKey::parse(rkey).is_err() {
        return false;
    }
    let Ok(Some(entry)) = repo.get(MESSAGE, rkey) else {
        return false;
    };
    entry.value.get("role").and_then(Value::as_str) != Some("user")
        && entry
            .value
            .get("status")
            .and_then(Value::as_str)
            .is_some_and(|s| s != "pending")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_survive_a_reload_and_a_torn_line_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = FinishedReplies::load(dir.path()).unwrap();
        log.note(["3lbqzdw5pzk22.r0", "3lbqzdw5pzk22.r1"]).unwrap();
        log.note(["3lbqzdw5pzk22.r0"]).unwrap();
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.path().join(FINISHED_LOG))
            .unwrap();
        f.write_all(b"3lbqzdw5pz").unwrap();
        let mut again = FinishedReplies::load(dir.path()).unwrap();
        assert!(again.contains("3lbqzdw5pzk22.r0"));
        assert!(again.contains("3lbqzdw5pzk22.r1"));
        assert_eq!(again.keys.len(), 2);
        // The next key starts on a line of its own.
        again.note(["3lbqzdw5pzk23.r0"]).unwrap();
        let third = FinishedReplies::load(dir.path()).unwrap();
        assert!(third.contains("3lbqzdw5pzk23.r0"));
        assert_eq!(third.keys.len(), 3);
        let text = std::fs::read_to_string(dir.path().join(FINISHED_LOG)).unwrap();
        assert_eq!(text.matches("3lbqzdw5pzk22.r0").count(), 1);
    }
}
