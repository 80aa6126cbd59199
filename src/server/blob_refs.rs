//! Which records reference which uploaded blobs: the server's blob index,
//! derived from the repository and kept in `DATA/blob-refs.json`.
//!
//! A blob reference is any JSON object with `"$type": "blob"` and
//! `ref.$link` = a CID, anywhere in a record (as the reference PDS finds
//! them). The index maps each record path with references to their CIDs.
//!
//! The repository is the truth; the file is a cache of what it derives. It
//! records the head commit and the last `#commit` event it reflects. The
//! index follows the repository by reading its own event log: after any
//! commit (whoever made it: a `com.atproto.repo.*` write, the chat
//! procedures, the assistant, or a command run while the server was down)
//! the paths the new events touched are re-read from the repository. A file
//! that is missing, unreadable, or behind by more events than the log keeps
//! is rebuilt from every record. So a crash anywhere leaves at worst a stale
//! file, which the next start catches up or rebuilds.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use cid::Cid;
use serde::{Deserialize, Serialize};

use crate::model::parse_cid;
use crate::repo::blobs::blob_refs_in;
use crate::repo::repository::{Changes, Follower, RepoError, Repository, WriteHints};

/// The index file in a data folder.
pub const BLOB_REFS_FILE: &str = "blob-refs.json";

const VERSION: u32 = 1;

/// The file's shape.
#[derive(Serialize, Deserialize)]
struct IndexFile {
    version: u32,
    /// The head commit the index reflects.
    head: String,
    /// The last event it reflects (`None`: the log was empty).
    seq: Option<u64>,
    /// Record path → the blob CIDs it references (only records with some).
    records: BTreeMap<String, BTreeSet<String>>,
}

/// The blob index (see the module docs).
#[derive(Debug)]
pub struct BlobRefs {
    path: PathBuf,
    head: Option<Cid>,
    seq: Option<u64>,
    by_record: BTreeMap<String, BTreeSet<Cid>>,
    /// How many records reference each blob.
    counts: HashMap<Cid, usize>,
    /// The references changed since the file was written.
    unsaved: bool,
    /// The event the file reflects.
    saved_seq: Option<u64>,
    /// How many times the index was rebuilt from every record (logged).
    rebuilds: u64,
}

/// With references unchanged, the file is rewritten only every this many
/// events: a start then catches up from the event log (which keeps 1000 by
/// default) rather than rereading every record.
const SAVE_EVERY: u64 = 256;

impl BlobRefs {
    /// Loads the index of the data folder `data`, brought up to date with
    /// `repo` (and saved when that changed anything), with the blobs that
    /// commits made since the file was written left unreferenced.
    pub fn load(data: &Path, repo: &Repository) -> Result<(BlobRefs, Vec<Cid>), RepoError> {
        let path = data.join(BLOB_REFS_FILE);
        let file = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<IndexFile>(&b).ok())
            .filter(|f| f.version == VERSION);
        let mut index = BlobRefs {
            path,
            head: None,
            seq: None,
            by_record: BTreeMap::new(),
            counts: HashMap::new(),
            unsaved: false,
            saved_seq: None,
            rebuilds: 0,
        };
        if file.and_then(|f| index.adopt(f)).is_none() {
            index.rebuild(repo)?;
            index.save();
            return Ok((index, Vec::new()));
        }
        // At load no write hints exist: a `tooBig` commit since the file means a rebuild.
        let dropped = index.catch_up(repo, &WriteHints::default())?;
        Ok((index, dropped))
    }

    /// Takes the file's contents; `None` if any CID in it does not parse.
    fn adopt(&mut self, file: IndexFile) -> Option<()> {
        self.head = Some(parse_cid(&file.head).ok()?);
        self.seq = file.seq;
        self.saved_seq = file.seq;
        for (path, cids) in file.records {
            let cids: BTreeSet<Cid> = cids
                .iter()
                .map(|c| parse_cid(c).ok())
                .collect::<Option<_>>()?;
            self.insert(path, cids);
        }
        self.unsaved = false;
        Some(())
    }

    /// Whether some record references `cid` (as of the index's head: see
    /// [`BlobRefs::is_current`] before deleting on its word).
    pub fn is_referenced(&self, cid: &Cid) -> bool {
        self.counts.contains_key(cid)
    }

    /// Whether the index reflects `repo`'s head.
    pub fn is_current(&self, repo: &Repository) -> bool {
        self.head == Some(repo.head().commit)
    }

    /// Brings the index up to the repository's head and returns the blobs
    /// that no record references any more (to delete: the commits that
    /// dropped them are durable). Saves the file when the references
    /// changed (or every [`SAVE_EVERY`] events). On an
    /// error the index is left marked stale (the next call rebuilds) and
    /// nothing is returned, so nothing is deleted on a guess.
    pub fn catch_up(
        &mut self,
        repo: &Repository,
        hints: &WriteHints,
    ) -> Result<Vec<Cid>, RepoError> {
        if Some(repo.head().commit) == self.head {
            return Ok(Vec::new());
        }
        // Candidates: blobs a re-read record stopped referencing (or, on a
        // rebuild, every blob referenced before); kept if still referenced.
        let mut dropped: Vec<Cid> = Vec::new();
        let touched = self.touched_paths(repo, hints);
        let result = match touched {
            Ok(Some(paths)) => self.reread(repo, paths, &mut dropped),
            Ok(None) => {
                dropped.extend(self.counts.keys().copied());
                self.rebuild(repo)
            }
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            // Partly applied: the next call rebuilds from the records.
            self.head = None;
            return Err(e);
        }
        let behind = self
            .seq
            .unwrap_or(0)
            .saturating_sub(self.saved_seq.unwrap_or(0));
        // The file is a cache the event log catches up: written every
        // SAVE_EVERY events (and at shutdown), not on every change.
        if behind >= SAVE_EVERY || (self.unsaved && self.saved_seq.is_none()) {
            self.save();
        }
        dropped.sort();
        dropped.dedup();
        dropped.retain(|c| !self.is_referenced(c));
        Ok(dropped)
    }

    /// The record paths of the events after the index's; `None` when the
    /// log does not tell (see `Follower`) or tells nothing although the
    /// head moved: rebuild.
    fn touched_paths(
        &self,
        repo: &Repository,
        hints: &WriteHints,
    ) -> Result<Option<BTreeSet<String>>, RepoError> {
        let mut follower = match (self.head, self.seq) {
            (Some(_), Some(seq)) => Follower::at(seq),
            (Some(_), None) => Follower::at(0),
            (None, _) => return Ok(None),
        };
        Ok(match follower.next(repo, |c| hints.get(c))? {
            Changes::Ops(ops) => Some(ops.into_iter().map(|(_, path)| path).collect()),
            // The head moved (the caller checked) with nothing logged.
            Changes::None | Changes::Rebuild => None,
        })
    }

    /// Re-reads `paths` from the repository.
    fn reread(
        &mut self,
        repo: &Repository,
        paths: BTreeSet<String>,
        dropped: &mut Vec<Cid>,
    ) -> Result<(), RepoError> {
        for path in paths {
            dropped.extend(self.remove(&path));
            let Some((collection, rkey)) = path.split_once('/') else {
                continue;
            };
            if let Some(entry) = repo.get(collection, rkey)? {
                let cids = blob_refs_in(&entry.value).into_iter().map(|r| r.cid);
                self.insert(path, cids.collect());
            }
        }
        self.mark_current(repo)
    }

    /// Rebuilds the index from every record of the repository.
    fn rebuild(&mut self, repo: &Repository) -> Result<(), RepoError> {
        self.by_record.clear();
        self.counts.clear();
        self.unsaved = true;
        let keys: Vec<String> = repo
            .list(None)?
            .map(|item| item.map(|(key, _)| key))
            .collect::<Result<_, _>>()?;
        self.rebuilds += 1;
        tracing::info!("blob index: rebuilding from {} records", keys.len());
        for key in keys {
            let Some((collection, rkey)) = key.split_once('/') else {
                continue;
            };
            if let Some(entry) = repo.get(collection, rkey)? {
                let cids = blob_refs_in(&entry.value).into_iter().map(|r| r.cid);
                self.insert(key, cids.collect());
            }
        }
        self.mark_current(repo)
    }

    fn mark_current(&mut self, repo: &Repository) -> Result<(), RepoError> {
        self.head = Some(repo.head().commit);
        self.seq = repo.last_event_seq()?;
        Ok(())
    }

    fn insert(&mut self, path: String, cids: BTreeSet<Cid>) {
        if cids.is_empty() {
            return;
        }
        for cid in &cids {
            *self.counts.entry(*cid).or_insert(0) += 1;
        }
        self.by_record.insert(path, cids);
        self.unsaved = true;
    }

    /// Forgets `path`'s references; returns the blobs it referenced.
    fn remove(&mut self, path: &str) -> BTreeSet<Cid> {
        let Some(cids) = self.by_record.remove(path) else {
            return BTreeSet::new();
        };
        self.unsaved = true;
        for cid in &cids {
            if let Some(n) = self.counts.get_mut(cid) {
                *n -= 1;
                if *n == 0 {
                    self.counts.remove(cid);
                }
            }
        }
        cids
    }

    /// Writes the file: a temporary file renamed over it, not fsynced. The
    /// file is only a cache: a stale one is caught up at start, a torn or
    /// empty one (a crash before the data reached the disk) rebuilt, so a
    /// failed write is logged, not fatal, and no commit waits on a sync.
    pub fn save(&mut self) {
        let Some(head) = self.head else { return };
        let file = IndexFile {
            version: VERSION,
            head: head.to_string(),
            seq: self.seq,
            records: self
                .by_record
                .iter()
                .map(|(p, cids)| (p.clone(), cids.iter().map(Cid::to_string).collect()))
                .collect(),
        };
        let tmp = self.path.with_extension("json.tmp");
        let written = serde_json::to_vec(&file)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, &self.path));
        match written {
            Ok(()) => {
                self.unsaved = false;
                self.saved_seq = self.seq;
            }
            Err(e) => tracing::warn!("could not write {}: {e}", self.path.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const A: &str = "bafkreibme22gw2h7y2h7tg2fhqotaqjucnbc24deqo72b6mkl2egezxhvy";

    #[test]
    fn finds_nested_refs_and_skips_look_alikes() {
        let record = json!({
            "$type": "x.y.z",
            "embed": {"images": [{"image": {
                "$type": "blob", "ref": {"$link": A}, "mimeType": "image/png", "size": 3
            }}]},
            "notBlob": {"$type": "blob", "ref": "plain string"},
            "other": {"ref": {"$link": A}},
        });
        let refs = blob_refs_in(&record);
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0].cid.to_string(), A);
        assert_eq!(refs[0].mime.as_deref(), Some("image/png"));
        assert_eq!(refs[0].size, Some(3));
    }

    fn post(text: &str, blob: Option<&str>) -> Value {
        let mut v = json!({"$type": "app.bsky.feed.post", "text": text, "createdAt": "2024-01-01T00:00:00Z"});
        if let Some(b) = blob {
            v["embed"] =
                json!({"$type": "blob", "ref": {"$link": b}, "mimeType": "image/png", "size": 1});
        }
        v
    }

    #[test]
    fn follows_commits_and_survives_reopening() {
        let mut hints = WriteHints::default();
        use crate::repo::repository::Write;
        let dir = tempfile::tempdir().unwrap();
        let mut repo = Repository::init(dir.path()).unwrap();
        let a: Cid = parse_cid(A).unwrap();
        repo.apply(&[
            Write::create("app.bsky.feed.post", "a1", post("one", Some(A))),
            Write::create("app.bsky.feed.post", "a2", post("two", Some(A))),
            Write::create("app.bsky.feed.post", "b", post("three", None)),
        ])
        .unwrap();
        // No file yet: rebuilt from the records.
        let (mut index, dropped) = BlobRefs::load(dir.path(), &repo).unwrap();
        assert!(dropped.is_empty() && index.is_referenced(&a));

        // One of two references goes: the blob stays referenced.
        repo.apply(&[Write::delete("app.bsky.feed.post", "a1")])
            .unwrap();
        assert!(index.catch_up(&repo, &hints).unwrap().is_empty());
        assert!(index.is_referenced(&a));

        // Behind by a commit (as after a crash before the save): the next
        // load catches up from the event log and reports the dropped blob.
        repo.apply(&[Write::update("app.bsky.feed.post", "a2", post("two", None))])
            .unwrap();
        let (mut index, dropped) = BlobRefs::load(dir.path(), &repo).unwrap();
        assert_eq!(dropped, vec![a]);
        assert!(!index.is_referenced(&a));
        // Saved (the server saves at shutdown, and every SAVE_EVERY events).
        index.save();

        // Current file: loaded as is.
        let (mut index, dropped) = BlobRefs::load(dir.path(), &repo).unwrap();
        assert!(dropped.is_empty() && !index.is_referenced(&a));

        // A commit that changes no reference does not rewrite the file; the
        // next load catches up over it.
        let file = std::fs::read(dir.path().join(BLOB_REFS_FILE)).unwrap();
        repo.apply(&[Write::create("app.bsky.feed.post", "e", post("e", None))])
            .unwrap();
        assert!(index.catch_up(&repo, &hints).unwrap().is_empty());
        assert_eq!(
            std::fs::read(dir.path().join(BLOB_REFS_FILE)).unwrap(),
            file
        );
        let (index, dropped) = BlobRefs::load(dir.path(), &repo).unwrap();
        assert!(dropped.is_empty() && !index.is_referenced(&a));
        assert_eq!(index.head, Some(repo.head().commit));

        // A corrupt file is rebuilt.
        std::fs::write(dir.path().join(BLOB_REFS_FILE), b"{not json").unwrap();
        repo.apply(&[Write::create(
            "app.bsky.feed.post",
            "c",
            post("four", Some(A)),
        )])
        .unwrap();
        let (mut index, _) = BlobRefs::load(dir.path(), &repo).unwrap();
        assert!(index.is_referenced(&a));
        assert_eq!(index.rebuilds, 1);

        // A commit too big for its event to list its ops: the caller's hint
        // spares a rebuild; without one the index rebuilds. Both are right.
        let many = |tag: &str, blob: Option<&str>| -> Vec<Write> {
            (0..=crate::repo::events::MAX_OPS)
                .map(|i| {
                    let b = if i == 0 { blob } else { None };
                    Write::create("app.bsky.feed.post", format!("{tag}{i}"), post(tag, b))
                })
                .collect()
        };
        repo.apply(&[Write::delete("app.bsky.feed.post", "c")])
            .unwrap();
        let info = repo.apply(&many("x", Some(A))).unwrap();
        hints.record(info.head.commit, &info.ops);
        assert!(index.catch_up(&repo, &hints).unwrap().is_empty());
        assert!(index.is_referenced(&a));
        assert_eq!(index.rebuilds, 1);
        repo.apply(&many("y", None)).unwrap();
        repo.apply(&[Write::delete("app.bsky.feed.post", "x0")])
            .unwrap();
        assert_eq!(index.catch_up(&repo, &hints).unwrap(), vec![a]);
        assert_eq!(index.rebuilds, 2);
    }
}
