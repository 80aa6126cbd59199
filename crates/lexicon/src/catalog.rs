//! A set of lexicon documents, loaded from files or folders, with reference
//! resolution (`#local`, `nsid`, `nsid#name`).

use crate::finding::Finding;
use crate::schema::{Def, Document, parse_document};
use indexmap::IndexMap;
use serde_json::Value;
use std::fmt;
use std::path::{Path, PathBuf};

/// Rule reported when two files declare the same `id`.
pub const DUPLICATE_ID: &str = "duplicate-id";

/// Lexicon files larger than this are refused before parsing (the biggest
/// real-world lexicons are a few tens of KB).
pub const MAX_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// One loaded document and where it came from.
#[derive(Clone, Debug)]
pub struct Entry {
    pub doc: Document,
    /// The path as the user gave it (or as found under a folder), for reports.
    pub file: String,
}

/// The documents of a lexicon set, keyed by NSID, in load order.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    entries: IndexMap<String, Entry>,
}

/// A reference resolved to its definition.
#[derive(Clone, Copy, Debug)]
pub struct Resolved<'a> {
    pub nsid: &'a str,
    pub name: &'a str,
    pub def: &'a Def,
}

impl Resolved<'_> {
    /// The `$type` a value of this def carries: `nsid` for `main`, else `nsid#name`.
    pub fn type_id(&self) -> String {
        type_id(self.nsid, self.name)
    }
}

/// The `$type` string for def `name` of lexicon `nsid`.
pub fn type_id(nsid: &str, name: &str) -> String {
    if name == "main" {
        nsid.to_string()
    } else {
        format!("{nsid}#{name}")
    }
}

/// Why a reference does not resolve.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("'{0}' is not a reference (expected #name, nsid or nsid#name)")]
    Malformed(String),
    #[error("no lexicon '{0}' in the catalog")]
    UnknownLexicon(String),
    #[error("lexicon '{nsid}' has no def '{name}'")]
    UnknownDef { nsid: String, name: String },
}

/// A file could not be read or is not JSON: a usage/I-O problem rather than
/// a finding in a lexicon.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: cannot read: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not valid JSON: {source}")]
    Json {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: file is {size} bytes, over the {MAX_FILE_BYTES}-byte limit for a lexicon")]
    TooLarge { path: String, size: u64 },
}

impl Catalog {
    pub fn new() -> Self {
        Self::default()
    }

    /// Loads every `*.json` file under each path (folders are walked
    /// recursively, in sorted order so reports are stable). Returns the
    /// structural findings; lint rules are separate.
    pub fn load_paths<P: AsRef<Path>>(paths: &[P]) -> Result<(Catalog, Vec<Finding>), LoadError> {
        let mut files = Vec::new();
        for p in paths {
            collect_json_files(p.as_ref(), &mut files)?;
        }
        let mut catalog = Catalog::new();
        let mut findings = Vec::new();
        for file in files {
            let label = file.display().to_string();
            let value = read_json(&file)?;
            findings.extend(catalog.add(&label, &value));
        }
        Ok((catalog, findings))
    }

    /// Adds one document. `file` labels findings and is kept for the
    /// id-matches-path lint.
    pub fn add(&mut self, file: &str, value: &Value) -> Vec<Finding> {
        let (doc, mut findings) = parse_document(value, file);
        if let Some(doc) = doc {
            if let Some(prev) = self.entries.get(&doc.id) {
                findings.push(Finding::new(
                    file,
                    "/id",
                    DUPLICATE_ID,
                    format!("lexicon '{}' is already defined in {}", doc.id, prev.file),
                ));
            } else {
                let entry = Entry {
                    doc,
                    file: file.to_string(),
                };
                self.entries.insert(entry.doc.id.clone(), entry);
            }
        }
        findings
    }

    pub fn get(&self, nsid: &str) -> Option<&Document> {
        self.entries.get(nsid).map(|e| &e.doc)
    }

    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Resolves `reference` as written inside lexicon `from`.
    pub fn resolve<'a>(
        &'a self,
        from: &'a str,
        reference: &'a str,
    ) -> Result<Resolved<'a>, ResolveError> {
        let (nsid, name) = split_ref(from, reference)?;
        let doc = self
            .entries
            .get(nsid)
            .map(|e| &e.doc)
            .ok_or_else(|| ResolveError::UnknownLexicon(nsid.to_string()))?;
        let (name, def) = doc
            .defs
            .get_key_value(name)
            .ok_or_else(|| ResolveError::UnknownDef {
                nsid: nsid.to_string(),
                name: name.to_string(),
            })?;
        Ok(Resolved {
            nsid: &doc.id,
            name,
            def,
        })
    }

    /// Resolves a `$type` value found in data (`nsid` or `nsid#name`).
    pub fn resolve_type_id<'a>(&'a self, type_id: &'a str) -> Result<Resolved<'a>, ResolveError> {
        if type_id.starts_with('#') || type_id.is_empty() {
            return Err(ResolveError::Malformed(type_id.to_string()));
        }
        self.resolve("", type_id)
    }
}

/// Splits a reference into (nsid, def name), with `from` as the local lexicon.
pub fn split_ref<'a>(
    from: &'a str,
    reference: &'a str,
) -> Result<(&'a str, &'a str), ResolveError> {
    let malformed = || ResolveError::Malformed(reference.to_string());
    match reference.split_once('#') {
        Some(("", name)) if !name.is_empty() && !from.is_empty() => Ok((from, name)),
        Some((nsid, name)) if !nsid.is_empty() && !name.is_empty() && !name.contains('#') => {
            Ok((nsid, name))
        }
        Some(_) => Err(malformed()),
        None if !reference.is_empty() => Ok((reference, "main")),
        None => Err(malformed()),
    }
}

impl fmt::Display for Resolved<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.nsid, self.name)
    }
}

fn collect_json_files(path: &Path, out: &mut Vec<PathBuf>) -> Result<(), LoadError> {
    let io = |source| LoadError::Io {
        path: path.display().to_string(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if meta.is_file() {
        out.push(path.to_path_buf());
        return Ok(());
    }
    let mut children: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(io)?;
    children.sort();
    for child in children {
        if child.is_dir() {
            collect_json_files(&child, out)?;
        } else if child.extension().is_some_and(|e| e == "json") {
            out.push(child);
        }
    }
    Ok(())
}

/// Reads a JSON file with a size cap, mapping failures to [`LoadError`].
pub fn read_json(path: &Path) -> Result<Value, LoadError> {
    let label = || path.display().to_string();
    let size = std::fs::metadata(path)
        .map_err(|source| LoadError::Io {
            path: label(),
            source,
        })?
        .len();
    if size > MAX_FILE_BYTES {
        return Err(LoadError::TooLarge {
            path: label(),
            size,
        });
    }
    let text = std::fs::read(path).map_err(|source| LoadError::Io {
        path: label(),
        source,
    })?;
    serde_json::from_slice(&text).map_err(|source| LoadError::Json {
        path: label(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn catalog() -> Catalog {
        let mut c = Catalog::new();
        let f = c.add(
            "a.json",
            &json!({"lexicon": 1, "id": "com.example.a", "defs": {
                "main": {"type": "record", "key": "tid", "record": {"type": "object"}},
                "part": {"type": "object"}
            }}),
        );
        assert!(f.is_empty(), "{f:?}");
        c
    }

    #[test]
    fn resolves_local_global_and_main_refs() {
        let c = catalog();
        assert_eq!(
            c.resolve("com.example.a", "#part").unwrap().type_id(),
            "com.example.a#part"
        );
        assert_eq!(
            c.resolve("x.y.z", "com.example.a#part").unwrap().name,
            "part"
        );
        assert_eq!(
            c.resolve("x.y.z", "com.example.a").unwrap().type_id(),
            "com.example.a"
        );
        assert_eq!(
            c.resolve_type_id("com.example.a#main").unwrap().type_id(),
            "com.example.a"
        );
    }

    #[test]
    fn unresolvable_refs_say_why() {
        let c = catalog();
        assert_eq!(
            c.resolve("com.example.a", "#nope").unwrap_err(),
            ResolveError::UnknownDef {
                nsid: "com.example.a".into(),
                name: "nope".into()
            }
        );
        assert!(matches!(
            c.resolve("a", "com.other.b"),
            Err(ResolveError::UnknownLexicon(_))
        ));
        for bad in ["", "#", "a#", "a#b#c"] {
            assert!(
                matches!(
                    c.resolve("com.example.a", bad),
                    Err(ResolveError::Malformed(_))
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            c.resolve_type_id("#part"),
            Err(ResolveError::Malformed(_))
        ));
    }

    #[test]
    fn duplicate_ids_are_reported() {
        let mut c = catalog();
        let f = c.add(
            "b.json",
            &json!({"lexicon": 1, "id": "com.example.a", "defs": {"x": {"type": "token"}}}),
        );
        assert_eq!(f[0].rule, DUPLICATE_ID);
        assert_eq!(c.len(), 1);
    }
}
