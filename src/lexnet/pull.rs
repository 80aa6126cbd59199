//! `lex pull`: the lexicons a folder references but does not hold,
//! transitively, resolved and written into a folder, with a lock file of
//! NSID → schema record CID so a build is reproducible: with `locked`, a
//! schema that resolves to another CID than the lock's (or one the lock
//! lacks) fails the pull and nothing is written.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{LexNetError, Resolution, Resolver};
use gelstore_lexicon::catalog::Catalog;

/// The lock file, in the output folder.
pub const LOCK_FILE: &str = "lexicons.lock.json";

/// The lock file's shape.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lock {
    pub version: u32,
    /// NSID → where it resolved.
    pub lexicons: BTreeMap<String, Locked>,
}

/// One locked lexicon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Locked {
    /// The schema record's CID.
    pub cid: String,
    /// The DID that published it.
    pub did: String,
}

/// What a pull did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PullReport {
    /// Every lexicon pulled (referenced, directly or through another).
    pub pulled: Vec<String>,
    /// Of them, those whose CID differs from the previous lock (or new).
    pub changed: Vec<String>,
}

/// The NSIDs `doc` references (`ref`s and union `refs`), its own excluded.
pub fn references(doc: &Value) -> BTreeSet<String> {
    fn walk(v: &Value, out: &mut BTreeSet<String>) {
        match v {
            Value::Object(map) => {
                let refs = map.get("ref").into_iter().chain(
                    map.get("refs")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten(),
                );
                if map.get("type").and_then(Value::as_str).is_some() {
                    for r in refs.filter_map(Value::as_str) {
                        let nsid = r.split('#').next().unwrap_or_default();
                        if !nsid.is_empty() {
                            out.insert(nsid.to_owned());
                        }
                    }
                }
                map.values().for_each(|v| walk(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    walk(doc, &mut out);
    if let Some(own) = doc.get("id").and_then(Value::as_str) {
        out.remove(own);
    }
    out
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> LexNetError {
    move |e| LexNetError::Io {
        what,
        reason: e.to_string(),
    }
}

/// Pulls `nsids` and what the lexicons of `paths` reference into `out`,
/// with everything they reference in turn.
pub fn pull(
    nsids: &[String],
    paths: &[PathBuf],
    out: &Path,
    resolver: &Resolver,
    locked: bool,
) -> Result<PullReport, LexNetError> {
    let (catalog, _) = if paths.is_empty() {
        (Catalog::new(), Vec::new())
    } else {
        Catalog::load_paths(paths).map_err(|e| LexNetError::Io {
            what: "read the lexicons".into(),
            reason: e.to_string(),
        })?
    };
    let local: BTreeSet<String> = catalog.entries().map(|e| e.doc.id.clone()).collect();
    let mut wanted: Vec<String> = nsids.to_vec();
    for entry in catalog.entries() {
        let raw = gelstore_lexicon::catalog::read_json(Path::new(&entry.file)).map_err(|e| {
            LexNetError::Io {
                what: format!("read {}", entry.file),
                reason: e.to_string(),
            }
        })?;
        wanted.extend(references(&raw));
    }
    let lock_path = out.join(LOCK_FILE);
    let old: Lock = match std::fs::read(&lock_path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| LexNetError::Io {
            what: format!("read {}", lock_path.display()),
            reason: e.to_string(),
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Lock::default(),
        Err(e) => return Err(io(format!("read {}", lock_path.display()))(e)),
    };
    // Breadth first over references; the pulled schemas' own count too.
    let mut found: BTreeMap<String, Resolution> = BTreeMap::new();
    while let Some(nsid) = wanted.pop() {
        if local.contains(&nsid) || found.contains_key(&nsid) {
            continue;
        }
        let r = resolver.resolve(&nsid)?;
        wanted.extend(references(&r.schema));
        found.insert(nsid, r);
    }
    if locked {
        for (nsid, r) in &found {
            let held = old.lexicons.get(nsid).map(|l| l.cid.clone());
            if held.as_deref() != Some(r.cid.to_string().as_str()) {
                return Err(LexNetError::LockDrift {
                    nsid: nsid.clone(),
                    locked: held.unwrap_or_else(|| "nothing".into()),
                    found: r.cid.to_string(),
                });
            }
        }
    }
    std::fs::create_dir_all(out).map_err(io(format!("create {}", out.display())))?;
    let mut report = PullReport::default();
    let mut lock = Lock {
        version: 1,
        lexicons: BTreeMap::new(),
    };
    for (nsid, r) in &found {
        let file = out.join(format!("{}.json", nsid.replace('.', "/")));
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir).map_err(io(format!("create {}", dir.display())))?;
        }
        let text = serde_json::to_string_pretty(&r.schema).unwrap_or_default() + "\n";
        std::fs::write(&file, text).map_err(io(format!("write {}", file.display())))?;
        let cid = r.cid.to_string();
        if old.lexicons.get(nsid).map(|l| &l.cid) != Some(&cid) {
            report.changed.push(nsid.clone());
        }
        report.pulled.push(nsid.clone());
        lock.lexicons.insert(
            nsid.clone(),
            Locked {
                cid,
                did: r.did.clone(),
            },
        );
    }
    let text = serde_json::to_string_pretty(&lock).unwrap_or_default() + "\n";
    std::fs::write(&lock_path, text).map_err(io(format!("write {}", lock_path.display())))?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_other_lexicons_named_by_ref_and_refs() {
        let doc = serde_json::json!({
            "lexicon": 1,
            "id": "com.example.post",
            "defs": {
                "main": {"type": "record", "key": "tid", "record": {"type": "object", "properties": {
                    "a": {"type": "ref", "ref": "com.example.post#local"},
                    "b": {"type": "ref", "ref": "com.other.thing"},
                    "c": {"type": "union", "refs": ["com.other.more#x", "#self"]},
                    "d": {"type": "string", "description": "ref: not.a.ref"},
                }}},
                "local": {"type": "object", "properties": {}},
            }
        });
        let refs: Vec<String> = references(&doc).into_iter().collect();
        assert_eq!(refs, ["com.other.more", "com.other.thing"]);
    }
}
