//! Merging a verified pull into the local store (see docs/sync.md).
//!
//! Only keys whose remote CID changed since the mirrored head are looked
//! at; for each, with `old` the mirrored CID, `remote` the new one and
//! `local` the store's:
//!
//! | local            | what happens |
//! |------------------|--------------|
//! | `== remote`      | nothing (both sides already agree) |
//! | `== old`         | the remote version is taken (create, update or delete) |
//! | anything else    | a conflict: this device changed the record since the last push and so did another device. The PDS is the history, so the remote version is taken; the local one is not lost: it is appended to `sync-conflicts.jsonl` (sealed content stays sealed) and counted |

//!
//! **Key records only grow.** `device`, `keyWrap` and `membership` records are never
//! updated or deleted by gelstore; a remote delete or change of one this
//! store holds is what a hostile PDS (or anyone with the password) would do
//! to undo a device removal. It is refused: the local record stays (the push
//! then puts it back on the PDS), and the key is listed in
//! [`MergeReport::refused`]. Likewise a message with sealed content is never
//! replaced by a version without any (whose clear fields nothing
//! authenticates): the local one stays, the remote one is saved beside the
//! conflicts, and the key is listed as refused.
//!
//! Keys the remote did not change keep their local version, which the push
//! then sends with the mirrored CID as its swap — a local change wins only
//! if nobody else changed the record first.
//!
//! Every incoming record is decoded and checked against our lexicons before
//! anything is written ([`SyncError::InvalidRecord`] leaves the store as it
//! was), re-encoded here to the same CID, and all of them land in one local
//! commit.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;

use cid::Cid;
use serde::Serialize;
use serde_json::{Value, json};

use super::mirror::Pulled;
use super::{SyncError, split_key};
use crate::lexicon_runtime::{Data, Path as LexPath};
use crate::model::{decode_dag_cbor, ipld_to_json};
use crate::repo::blocks::BlockSource;
use crate::repo::records::prepare_record;
use crate::repo::repository::{RepoError, Repository, Write};

/// Where conflicting local versions are kept.
pub const CONFLICTS_FILE: &str = "sync-conflicts.jsonl";

/// What a merge did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MergeReport {
    /// Remote records created locally.
    pub created: usize,
    /// Local records replaced by the remote version.
    pub updated: usize,
    /// Local records deleted because the remote deleted them.
    pub deleted: usize,
    /// Keys changed on both sides; the local version went to
    /// `sync-conflicts.jsonl`.
    pub conflicts: usize,
    /// Key records (`device`, `keyWrap`, `membership`) the remote deleted or changed:
    /// kept here, not merged.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<String>,
    /// Blobs of the merged records downloaded.
    pub blobs: usize,
    /// Blobs a merged record names that the PDS does not have (CIDs).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub blobs_missing: Vec<String>,
}

/// Message records: one with sealed content is never replaced by one
/// without.
const MESSAGE: &str = crate::lexicon::chat::gel::assistant::message::NSID;

/// The collections whose records are never updated or deleted.
const APPEND_ONLY: [&str; 3] = [
    crate::device::records::DEVICE_COLLECTION,
    crate::lexicon::chat::gel::assistant::key_wrap::NSID,
    crate::lexicon::chat::gel::assistant::membership::NSID,
];

/// Checks an incoming record against our lexicons.
fn validate(key: &str, value: &ipld_core::ipld::Ipld) -> Result<(), SyncError> {
    let (collection, _) = split_key(key);
    let invalid = |reason: String| SyncError::InvalidRecord {
        key: key.to_owned(),
        reason,
    };
    let data = Data(value.clone());
    match data.type_id() {
        Some(t) if t == collection => {}
        other => {
            return Err(invalid(format!(
                "its $type is {other:?}, not the collection {collection}"
            )));
        }
    }
    let mut errors = Vec::new();
    if !crate::lexicon::validate_by_type(collection, &data, &LexPath::Root, &mut errors) {
        return Err(invalid(format!(
            "{collection} is not a lexicon this build knows"
        )));
    }
    if let Some(first) = errors.first() {
        return Err(invalid(first.to_string()));
    }
    Ok(())
}

/// The write that makes the local `key` the remote version (`None`:
/// absent), checked and re-encoded to the remote CID.
fn remote_write(
    key: &str,
    remote: Option<Cid>,
    local: Option<Cid>,
    blocks: &[&dyn BlockSource],
) -> Result<Write, SyncError> {
    let (collection, rkey) = split_key(key);
    let Some(cid) = remote else {
        return Ok(Write::Delete {
            collection: collection.to_owned(),
            rkey: rkey.to_owned(),
            swap: local,
        });
    };
    let mut bytes = None;
    for source in blocks {
        if let Some(b) = source
            .get(&cid)
            .map_err(|e| SyncError::from(RepoError::Corrupt(e.to_string())))?
        {
            bytes = Some(b);
            break;
        }
    }
    let bytes = bytes.ok_or_else(|| SyncError::InvalidRecord {
        key: key.to_owned(),
        reason: format!("its block {cid} did not come with the pull"),
    })?;
    let invalid = |reason: String| SyncError::InvalidRecord {
        key: key.to_owned(),
        reason,
    };
    let ipld = decode_dag_cbor(&bytes).map_err(|e| invalid(e.to_string()))?;
    validate(key, &ipld)?;
    let value = ipld_to_json(&ipld).map_err(|e| invalid(e.to_string()))?;
    let prepared = prepare_record(&gelstore_types::lexicons(), collection, rkey, &value)
        .map_err(|e| invalid(e.to_string()))?;
    if prepared.cid != cid {
        return Err(SyncError::RecordCidMismatch {
            key: key.to_owned(),
            local: prepared.cid.to_string(),
            remote: cid.to_string(),
        });
    }
    Ok(match local {
        None => Write::create(collection, rkey, value),
        Some(l) => Write::Update {
            collection: collection.to_owned(),
            rkey: rkey.to_owned(),
            value,
            swap: Some(l),
        },
    })
}

/// Merges the remote changes of our collections into `repo` (see the
/// module docs). `old` is the mirror before the pull.
pub fn merge(
    data: &Path,
    repo: &mut Repository,
    old: &BTreeMap<String, Cid>,
    pulled: &Pulled,
) -> Result<MergeReport, SyncError> {
    let mut keys: Vec<&String> = old
        .keys()
        .chain(pulled.entries.keys())
        .filter(|k| Pulled::ours(k))
        .collect();
    keys.sort();
    keys.dedup();
    let store = repo.mst().store().clone();
    let sources: [&dyn BlockSource; 2] = [&pulled.blocks, &store];
    let mut report = MergeReport::default();
    let mut writes = Vec::new();
    let mut conflicts = Vec::new();
    for key in keys {
        let (was, now) = (old.get(key).copied(), pulled.entries.get(key).copied());
        if was == now {
            continue;
        }
        let (collection, rkey) = split_key(key);
        let local = repo.get_cid(collection, rkey)?;
        if local == now {
            continue;
        }
        if local.is_some() && APPEND_ONLY.contains(&collection) {
            report.refused.push(key.clone());
            continue;
        }
        if local != was {
            let value = match local {
                Some(_) => repo.get(collection, rkey)?.map(|r| r.value),
                None => None,
            };
            conflicts.push(json!({
                "key": key,
                "localCid": local.map(|c| c.to_string()),
                "remoteCid": now.map(|c| c.to_string()),
                "value": value.unwrap_or(Value::Null),
            }));
        }
        let write = remote_write(key, now, local, &sources)?;
        if let Write::Update { value, .. } = &write
            && collection == MESSAGE
            && value.get("content").is_none()
            && repo
                .get(collection, rkey)?
                .is_some_and(|r| r.value.get("content").is_some())
        {
            // A sealed message replaced by one without content (a finished
            // reply turned back into a pending one, or its content cut
            // off): the clear fields of the new one are not
            // authenticated. Both are kept: the local one here, the remote
            // one beside the conflicts.
            conflicts.push(json!({
                "key": key,
                "localCid": local.map(|c| c.to_string()),
                "remoteCid": now.map(|c| c.to_string()),
                "refusedRemote": value,
            }));
            report.refused.push(key.clone());
            continue;
        }
        match (local, now) {
            (None, Some(_)) => report.created += 1,
            (Some(_), Some(_)) => report.updated += 1,
            (_, None) => report.deleted += 1,
        }
        writes.push(write);
    }
    report.conflicts = conflicts
        .iter()
        .filter(|c| c.get("refusedRemote").is_none())
        .count();
    if !conflicts.is_empty() {
        keep_conflicts(data, &conflicts)?;
    }
    if !writes.is_empty() {
        repo.apply(&writes)?;
    }
    Ok(report)
}

/// Appends the losing local versions to [`CONFLICTS_FILE`] (fsynced before
/// the merge commit replaces them).
fn keep_conflicts(data: &Path, conflicts: &[Value]) -> Result<(), SyncError> {
    let path = data.join(CONFLICTS_FILE);
    let io = |e: std::io::Error| SyncError::Io {
        what: format!("write {}", path.display()),
        reason: e.to_string(),
    };
    let mut options = std::fs::OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut f = options.open(&path).map_err(io)?;
    for c in conflicts {
        writeln!(f, "{c}").map_err(io)?;
    }
    f.sync_all().map_err(io)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::crypto::{KeyAlgorithm, SigningKey};
    use crate::repo::blocks::MemoryBlocks;
    use crate::repo::mst::Mst;
    use crate::repo::records::prepare_record;
    use crate::store::MemoryEngine;
    use crate::sync::RemoteHead;
    use serde_json::json;

    const CHAT: &str = "chat.gel.assistant.chat";

    fn chat(day: u32) -> Value {
        json!({"$type": CHAT, "createdAt": format!("2026-01-{day:02}T00:00:00.000Z")})
    }

    fn cid_of(rkey: &str, value: &Value) -> Cid {
        prepare_record(&gelstore_types::lexicons(), CHAT, rkey, value)
            .unwrap()
            .cid
    }

    fn key(rkey: &str) -> String {
        format!("{CHAT}/{rkey}")
    }

    /// A pull whose records are `remote` (rkey → value), bodies included.
    fn pulled(remote: &[(&str, Value)]) -> Pulled {
        let mut blocks = MemoryBlocks::default();
        let mut entries = BTreeMap::new();
        for (rkey, value) in remote {
            let r = prepare_record(&gelstore_types::lexicons(), CHAT, rkey, value).unwrap();
            blocks.insert(r.cid, r.bytes);
            entries.insert(r.key, r.cid);
        }
        let data = Mst::from_entries(MemoryBlocks::default(), entries.clone())
            .unwrap()
            .root();
        Pulled {
            head: RemoteHead {
                commit: data.to_string(),
                rev: "3lbqzdw5pzk22".into(),
                data: data.to_string(),
            },
            entries,
            blocks,
            car_bytes: 0,
            partial: false,
        }
    }

    #[test]
    fn each_case_of_the_merge_table() {
        let dir = tempfile::tempdir().unwrap();
        let key_ = SigningKey::generate(KeyAlgorithm::K256).unwrap();
        let mut repo = Repository::init_engine(Arc::new(MemoryEngine::new()), key_).unwrap();
        // Mirrored: a, b, c, d, e at day 1. Locally: b and c changed, e
        // deleted; f created here only.
        let names = ["a", "b", "c", "d", "e"].map(|n| format!("3lbqzdw5pzk2{n}"));
        let mut old = BTreeMap::new();
        let writes: Vec<Write> = names
            .iter()
            .map(|n| {
                old.insert(key(n), cid_of(n, &chat(1)));
                Write::create(CHAT, n, chat(1))
            })
            .collect();
        repo.apply(&writes).unwrap();
        let f = "3lbqzdw5pzk2f";
        repo.apply(&[
            Write::update(CHAT, &names[1], chat(2)),
            Write::update(CHAT, &names[2], chat(3)),
            Write::delete(CHAT, &names[4]),
            Write::create(CHAT, f, chat(1)),
        ])
        .unwrap();
        // Remote: a changed (local unchanged: taken), b changed differently
        // (conflict: the PDS wins), c changed the same way (nothing), d
        // deleted (local unchanged: deleted), e unchanged (the local delete
        // stays, to be pushed), g created.
        let g = "3lbqzdw5pzk2g";
        let remote = pulled(&[
            (&names[0], chat(5)),
            (&names[1], chat(6)),
            (&names[2], chat(3)),
            (&names[4], chat(1)),
            (g, chat(7)),
        ]);
        let report = merge(dir.path(), &mut repo, &old, &remote).unwrap();
        assert_eq!(
            report,
            MergeReport {
                created: 1,
                updated: 2,
                deleted: 1,
                conflicts: 1,
                ..MergeReport::default()
            }
        );
        let day = |n: &str| {
            repo.get(CHAT, n)
                .unwrap()
                .map(|r| r.value["createdAt"].as_str().unwrap()[8..10].to_owned())
        };
        assert_eq!(day(&names[0]).as_deref(), Some("05"));
        assert_eq!(day(&names[1]).as_deref(), Some("06"));
        assert_eq!(day(&names[2]).as_deref(), Some("03"));
        assert_eq!(day(&names[3]), None);
        assert_eq!(day(&names[4]), None);
        assert_eq!(day(f).as_deref(), Some("01"));
        assert_eq!(day(g).as_deref(), Some("07"));
        let kept = std::fs::read_to_string(dir.path().join(CONFLICTS_FILE)).unwrap();
        let kept: Value = serde_json::from_str(kept.trim()).unwrap();
        assert_eq!(kept["key"], key(&names[1]));
        assert_eq!(kept["value"]["createdAt"], "2026-01-02T00:00:00.000Z");

        // The same pull again changes nothing.
        let head = repo.head();
        let again = merge(dir.path(), &mut repo, &remote.entries, &remote).unwrap();
        assert_eq!(again, MergeReport::default());
        assert_eq!(repo.head(), head);
    }

    fn ipld(v: Value) -> ipld_core::ipld::Ipld {
        crate::model::record_from_json(&v).unwrap()
    }

    #[test]
    fn validation_names_the_record_and_the_rule() {
        let ok =
            json!({"$type": "chat.gel.assistant.chat", "createdAt": "2026-01-01T00:00:00.000Z"});
        validate("chat.gel.assistant.chat/3lbqzdw5pzk22", &ipld(ok)).unwrap();
        let bad = json!({"$type": "chat.gel.assistant.chat", "createdAt": "yesterday"});
        let e = validate("chat.gel.assistant.chat/3lbqzdw5pzk22", &ipld(bad)).unwrap_err();
        assert!(matches!(e, SyncError::InvalidRecord { .. }), "{e}");
        assert!(
            e.to_string()
                .contains("chat.gel.assistant.chat/3lbqzdw5pzk22"),
            "{e}"
        );
        let wrong =
            json!({"$type": "chat.gel.assistant.device", "createdAt": "2026-01-01T00:00:00.000Z"});
        let e = validate("chat.gel.assistant.chat/3lbqzdw5pzk22", &ipld(wrong)).unwrap_err();
        assert!(e.to_string().contains("not the collection"), "{e}");
    }
}
