//! Where the mirror ([`SyncState`]) is kept: in the store itself, next to
//! the repository, so each change is one atomic, durable engine batch.
//!
//! Layout (tables of the store, see `store`):
//!
//! | table | key | value |
//! |---|---|---|
//! | `Mirror` | `collection/rkey` (UTF-8) | the record's CID (binary) |
//! | `Meta` | `sync.did` | the linked account's DID |
//! | `Meta` | `sync.service` | the PDS last synced with |
//! | `Meta` | `sync.remote` | the mirrored head, JSON `{commit, rev, data}` (absent: never pulled, or to be pulled in full) |
//!
//! `pushed` and `others` of [`SyncState`] share the `Mirror` table; they
//! are told apart by [`COLLECTION_PREFIX`] on load. The rows are not
//! repository blocks: no reference counts, nothing `Repository::check` or
//! the GC looks at.
//!
//! Writes touch only the rows named ([`SyncState::save_keys`]) plus the
//! three `Meta` rows, in one batch: a pushed batch of 200 records costs
//! 200 rows whatever the mirror's size, and a crash leaves the old rows or
//! the new ones, never a mix.
//!
//! Older versions kept the mirror in `sync.json` in the data folder,
//! rewritten whole after every batch. [`SyncState::load`] takes such a file
//! in once (one batch), then renames it `sync.json.migrated`.

use std::collections::BTreeMap;
use std::path::Path;

use cid::Cid;

use super::mirror::RemoteHead;
use super::{COLLECTION_PREFIX, STATE_FILE, SyncError, SyncState};
use crate::repo::repository::{RepoError, Repository};
use crate::store::{Batch, Engine, Table};

/// `Meta` row: the linked DID.
const META_SYNC_DID: &[u8] = b"sync.did";
/// `Meta` row: the PDS.
const META_SYNC_SERVICE: &[u8] = b"sync.service";
/// `Meta` row: the mirrored head (JSON).
const META_SYNC_REMOTE: &[u8] = b"sync.remote";

/// What an old `sync.json` is renamed to once taken into the store.
const MIGRATED_SUFFIX: &str = ".migrated";

impl SyncState {
    /// Reads the mirror of the store in `data` from `repo`'s engine, after
    /// taking in a `sync.json` an older version left there (see the module
    /// docs). Empty if the store was never synced.
    pub fn load(data: &Path, repo: &Repository) -> Result<SyncState, SyncError> {
        if let Some(old) = read_legacy(data)? {
            // A store already linked (its account row is written by every
            // sync, the remote head not always) took this file in before
            // and lost the rename: the store's mirror is newer; only the
            // rename is redone.
            let taken = repo
                .engine()
                .get(Table::Meta, META_SYNC_DID)
                .map_err(|e| SyncError::Io {
                    what: "read the mirror".into(),
                    reason: e.to_string(),
                })?
                .is_some();
            if !taken {
                old.save_all(repo)?;
            }
            let path = data.join(STATE_FILE);
            let done = data.join(format!("{STATE_FILE}{MIGRATED_SUFFIX}"));
            std::fs::rename(&path, &done).map_err(|e| SyncError::Io {
                what: format!("rename {} to {}", path.display(), done.display()),
                reason: e.to_string(),
            })?;
            tracing::info!(
                records = old.pushed.len() + old.others.len(),
                "sync.json taken into the store"
            );
        }
        read(&**repo.engine())
    }

    /// Writes the `Meta` rows (account, PDS, head) and the mirror rows of
    /// `keys` as this state holds them now (a key it no longer holds is
    /// deleted), in one durable batch. Rows of other keys are untouched.
    pub fn save_keys<'a>(
        &self,
        repo: &Repository,
        keys: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), SyncError> {
        let mut batch = self.meta_batch();
        for key in keys {
            match self.get(key) {
                Some(cid) => batch.put(Table::Mirror, key, cid.to_bytes()),
                None => batch.delete(Table::Mirror, key),
            }
        }
        write(repo, batch)
    }

    /// Writes the `Meta` rows only (the account link, the head).
    pub fn save_meta(&self, repo: &Repository) -> Result<(), SyncError> {
        self.save_keys(repo, std::iter::empty())
    }

    /// Replaces every stored row by this state, in one durable batch: reads
    /// the whole table, so O(mirror). For a migration or a mirror edited
    /// by hand; sync itself saves only what changed ([`Self::save_keys`]).
    pub fn save_all(&self, repo: &Repository) -> Result<(), SyncError> {
        let mut batch = self.meta_batch();
        for row in repo.engine().scan(Table::Mirror, b"") {
            let (key, _) = row.map_err(RepoError::from)?;
            let held = std::str::from_utf8(&key).is_ok_and(|k| self.get(k).is_some());
            if !held {
                batch.delete(Table::Mirror, key);
            }
        }
        for (key, cid) in self.pushed.iter().chain(self.others.iter()) {
            batch.put(Table::Mirror, key.as_str(), cid.to_bytes());
        }
        write(repo, batch)
    }

    /// The CID this state mirrors for `key`.
    fn get(&self, key: &str) -> Option<&Cid> {
        if key.starts_with(COLLECTION_PREFIX) {
            self.pushed.get(key)
        } else {
            self.others.get(key)
        }
    }

    fn meta_batch(&self) -> Batch {
        let mut batch = Batch::new();
        let mut text = |name: &[u8], value: &Option<String>| match value {
            Some(v) => batch.put(Table::Meta, name, v.as_bytes()),
            None => batch.delete(Table::Meta, name),
        };
        text(META_SYNC_DID, &self.did);
        text(META_SYNC_SERVICE, &self.service);
        let remote = self
            .remote
            .as_ref()
            .map(|h| serde_json::to_string(h).expect("a RemoteHead always encodes"));
        text(META_SYNC_REMOTE, &remote);
        batch
    }
}

/// The keys whose CID differs between two mirrors (present in one only,
/// or with another CID): what a pull from `old` to `new` must write.
pub fn changed_keys<'a>(
    old: &'a BTreeMap<String, Cid>,
    new: &'a BTreeMap<String, Cid>,
) -> Vec<&'a str> {
    let mut out: Vec<&str> = new
        .iter()
        .filter(|(k, c)| old.get(*k) != Some(c))
        .map(|(k, _)| k.as_str())
        .collect();
    out.extend(
        old.keys()
            .filter(|k| !new.contains_key(*k))
            .map(String::as_str),
    );
    out
}

fn write(repo: &Repository, batch: Batch) -> Result<(), SyncError> {
    repo.engine().write(batch).map_err(RepoError::from)?;
    Ok(())
}

fn corrupt(what: String) -> SyncError {
    SyncError::from(RepoError::Corrupt(format!("sync mirror: {what}")))
}

/// The mirror as the store holds it.
fn read(engine: &dyn Engine) -> Result<SyncState, SyncError> {
    let text = |name: &[u8]| -> Result<Option<String>, SyncError> {
        match engine.get(Table::Meta, name).map_err(RepoError::from)? {
            None => Ok(None),
            Some(bytes) => String::from_utf8(bytes)
                .map(Some)
                .map_err(|_| corrupt(format!("{} is not UTF-8", String::from_utf8_lossy(name)))),
        }
    };
    let mut state = SyncState {
        did: text(META_SYNC_DID)?,
        service: text(META_SYNC_SERVICE)?,
        ..SyncState::default()
    };
    if let Some(json) = text(META_SYNC_REMOTE)? {
        let head: RemoteHead = serde_json::from_str(&json)
            .map_err(|e| corrupt(format!("the mirrored head {json:?}: {e}")))?;
        state.remote = Some(head);
    }
    for row in engine.scan(Table::Mirror, b"") {
        let (key, value) = row.map_err(RepoError::from)?;
        let key =
            String::from_utf8(key).map_err(|e| corrupt(format!("a key is not UTF-8: {e}")))?;
        let cid = Cid::try_from(value.as_slice())
            .map_err(|e| corrupt(format!("the CID of {key}: {e}")))?;
        let map = if key.starts_with(COLLECTION_PREFIX) {
            &mut state.pushed
        } else {
            &mut state.others
        };
        map.insert(key, cid);
    }
    Ok(state)
}

/// The `sync.json` of an older version, if there is one.
fn read_legacy(data: &Path) -> Result<Option<SyncState>, SyncError> {
    let path = data.join(STATE_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| SyncError::Io {
                what: format!("read {} (the mirror of an older version)", path.display()),
                reason: e.to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(SyncError::Io {
            what: format!("read {}", path.display()),
            reason: e.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::crypto::{KeyAlgorithm, SigningKey};
    use crate::store::MemoryEngine;

    fn cid(n: u64) -> Cid {
        crate::model::cid_for_cbor(&n.to_be_bytes())
    }

    fn repo() -> (Arc<MemoryEngine>, Repository) {
        let engine = Arc::new(MemoryEngine::new());
        let key = SigningKey::generate(KeyAlgorithm::K256).unwrap();
        let repo = Repository::init_engine(engine.clone(), key).unwrap();
        (engine, repo)
    }

    fn state() -> SyncState {
        let mut s = SyncState {
            did: Some("did:plc:aaaaaaaaaaaaaaaaaaaaaaaa".into()),
            service: Some("http://localhost:2583".into()),
            remote: Some(RemoteHead {
                commit: cid(1).to_string(),
                rev: "3lbqzdw5pzk22".into(),
                data: cid(2).to_string(),
            }),
            ..SyncState::default()
        };
        for n in 0..5 {
            s.pushed
                .insert(format!("chat.gel.assistant.chat/r{n}"), cid(n));
        }
        s.others
            .insert("app.bsky.actor.profile/self".into(), cid(9));
        s
    }

    #[test]
    fn a_saved_mirror_reads_back_and_only_named_rows_change() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, repo) = repo();
        assert_eq!(
            SyncState::load(dir.path(), &repo).unwrap(),
            SyncState::default()
        );
        let mut s = state();
        s.save_all(&repo).unwrap();
        assert_eq!(SyncState::load(dir.path(), &repo).unwrap(), s);
        assert_eq!(engine.len(Table::Mirror), 6);

        // One update, one create, one delete: three rows written.
        s.pushed
            .insert("chat.gel.assistant.chat/r1".into(), cid(11));
        s.pushed.insert("chat.gel.assistant.chat/r7".into(), cid(7));
        s.pushed.remove("chat.gel.assistant.chat/r2");
        s.remote = None;
        // A row the state changed but was not named stays as it was.
        s.pushed
            .insert("chat.gel.assistant.chat/r3".into(), cid(33));
        s.save_keys(
            &repo,
            [
                "chat.gel.assistant.chat/r1",
                "chat.gel.assistant.chat/r7",
                "chat.gel.assistant.chat/r2",
            ],
        )
        .unwrap();
        let back = SyncState::load(dir.path(), &repo).unwrap();
        assert_eq!(back.remote, None);
        assert_eq!(back.pushed["chat.gel.assistant.chat/r1"], cid(11));
        assert_eq!(back.pushed["chat.gel.assistant.chat/r7"], cid(7));
        assert!(!back.pushed.contains_key("chat.gel.assistant.chat/r2"));
        assert_eq!(back.pushed["chat.gel.assistant.chat/r3"], cid(3));
        assert_eq!(back.others, s.others);

        // save_all drops rows the state no longer has.
        let mut fewer = s.clone();
        fewer.others.clear();
        fewer.save_all(&repo).unwrap();
        assert_eq!(SyncState::load(dir.path(), &repo).unwrap(), fewer);

        // The repository itself is untouched by the mirror's rows.
        repo.check().unwrap();
    }

    #[test]
    fn an_old_sync_json_is_taken_in_once_and_renamed() {
        let dir = tempfile::tempdir().unwrap();
        let (_engine, repo) = repo();
        let old = state();
        std::fs::write(
            dir.path().join(STATE_FILE),
            serde_json::to_vec_pretty(&old).unwrap(),
        )
        .unwrap();
        assert_eq!(SyncState::load(dir.path(), &repo).unwrap(), old);
        assert!(!dir.path().join(STATE_FILE).exists());
        assert!(dir.path().join("sync.json.migrated").exists());
        // Read from the store from now on.
        assert_eq!(SyncState::load(dir.path(), &repo).unwrap(), old);

        // A damaged file is a named error, and is left where it is.
        std::fs::write(dir.path().join(STATE_FILE), b"{not json").unwrap();
        let e = SyncState::load(dir.path(), &repo).unwrap_err();
        assert!(matches!(e, SyncError::Io { .. }), "{e}");
        assert!(e.to_string().contains("sync.json"), "{e}");
        assert!(dir.path().join(STATE_FILE).exists());
    }

    /// The file exactly as an older version wrote it (pretty JSON, every
    /// CID a string) is read into the mirror's CIDs; a CID that does not
    /// parse is a named error naming its key, and the file stays.
    #[test]
    fn a_sync_json_with_string_cids_reads_into_cids() {
        let dir = tempfile::tempdir().unwrap();
        let (_engine, repo) = repo();
        let text = format!(
            r#"{{
  "did": "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa",
  "service": "http://localhost:2583",
  "pushed": {{
    "chat.gel.assistant.chat/r0": "{c0}"
  }},
  "remote": {{ "commit": "{c1}", "rev": "3lbqzdw5pzk22", "data": "{c2}" }},
  "others": {{ "app.bsky.actor.profile/self": "{c9}" }}
}}"#,
            c0 = cid(0),
            c1 = cid(1),
            c2 = cid(2),
            c9 = cid(9)
        );
        std::fs::write(dir.path().join(STATE_FILE), &text).unwrap();
        let state = SyncState::load(dir.path(), &repo).unwrap();
        assert_eq!(state.pushed["chat.gel.assistant.chat/r0"], cid(0));
        assert_eq!(state.others["app.bsky.actor.profile/self"], cid(9));
        assert_eq!(state.remote.unwrap().commit, cid(1).to_string());
        // Written back by serde, it is the same shape again.
        let again: serde_json::Value =
            serde_json::to_value(SyncState::load(dir.path(), &repo).unwrap()).unwrap();
        assert_eq!(
            again["pushed"]["chat.gel.assistant.chat/r0"],
            cid(0).to_string()
        );

        let (_engine, repo) = self::repo();
        let bad = text.replace(&cid(0).to_string(), "bafynotacid");
        std::fs::write(dir.path().join(STATE_FILE), bad).unwrap();
        let e = SyncState::load(dir.path(), &repo).unwrap_err();
        assert!(matches!(e, SyncError::Io { .. }), "{e}");
        assert!(e.to_string().contains("chat.gel.assistant.chat/r0"), "{e}");
        assert!(dir.path().join(STATE_FILE).exists());
    }

    #[test]
    fn damaged_rows_are_named_errors() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, repo) = repo();
        let mut batch = Batch::new();
        batch.put(
            Table::Mirror,
            "chat.gel.assistant.chat/r1",
            b"not a cid".to_vec(),
        );
        engine.write(batch).unwrap();
        let e = SyncState::load(dir.path(), &repo).unwrap_err();
        assert!(e.to_string().contains("chat.gel.assistant.chat/r1"), "{e}");

        let mut batch = Batch::new();
        batch.delete(Table::Mirror, "chat.gel.assistant.chat/r1");
        batch.put(Table::Meta, META_SYNC_REMOTE, b"{".to_vec());
        engine.write(batch).unwrap();
        let e = SyncState::load(dir.path(), &repo).unwrap_err();
        assert!(e.to_string().contains("mirrored head"), "{e}");
    }

    #[test]
    fn changed_keys_are_the_difference_both_ways() {
        let old: BTreeMap<String, Cid> = [
            ("a".into(), cid(1)),
            ("b".into(), cid(2)),
            ("c".into(), cid(3)),
        ]
        .into();
        let new: BTreeMap<String, Cid> = [
            ("a".into(), cid(1)),
            ("b".into(), cid(5)),
            ("d".into(), cid(4)),
        ]
        .into();
        let mut keys = changed_keys(&old, &new);
        keys.sort();
        assert_eq!(keys, ["b", "c", "d"]);
    }
}
