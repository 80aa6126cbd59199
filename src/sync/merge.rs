//! Merging a verified pull into the local store (DESIGN §7/§8).
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
use crate::lexicon::support::{Data, Path as LexPath};
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
}

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
    let prepared = prepare_record(collection, rkey, &value).map_err(|e| invalid(e.to_string()))?;
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
        match (local, now) {
            (None, Some(_)) => report.created += 1,
            (Some(_), Some(_)) => report.updated += 1,
            (_, None) => report.deleted += 1,
        }
        writes.push(remote_write(key, now, local, &sources)?);
    }
    report.conflicts = conflicts.len();
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
    use super::*;
    use serde_json::json;

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
