//! The Rust emitter: one module per lexicon, for every lexicon construct,
//! with serde for atproto JSON and DAG-CBOR and a compiled `validate()`.
//!
//! The output is plain text already in `rustfmt` layout (default settings),
//! so it needs no formatter at build time and `cargo fmt --check` passes on
//! the checked-in copy; [`generate`] is deterministic (catalog and document
//! order, sorted module lists, no hash-map iteration).
//!
//! Generated code depends on a hand-written runtime module (the
//! bytes/link/blob/data types, format newtypes, checks, union and record
//! helpers) that lives outside the generated tree; [`Options::support`]
//! names its path and every generated file imports it as `support`.

mod checks;
mod items;
pub mod names;
mod writer;

use std::collections::{BTreeMap, BTreeSet};

use gelstore_lexicon::catalog::{Catalog, Resolved};
use gelstore_lexicon::schema::{Def, Document, Type};
use names::Names;

/// The first line of every generated file; tools skip files that carry it.
pub const GENERATED_MARKER: &str = "@generated";

/// Where the generated code lives and what it depends on.
#[derive(Clone, Debug)]
pub struct Options {
    /// The Rust path of the generated tree's root module, e.g. `crate::lexicon`.
    pub root: String,
    /// The Rust path of the runtime module, e.g. `crate::lexicon_runtime`
    /// (imported as `support` by every generated file that uses it).
    pub support: String,
    /// The command that regenerates the files, named in their header.
    pub command: String,
}

impl Options {
    /// The settings for gelstore's own `crates/types/src/lexicon/`.
    pub fn gelstore() -> Options {
        Options {
            root: "crate::lexicon".into(),
            support: "crate::lexicon_runtime".into(),
            command: "gelstore lex gen".into(),
        }
    }
}

/// One generated file, its path relative to the output folder (`/`-separated).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct File {
    pub path: String,
    pub contents: String,
}

/// What a named def becomes in Rust.
#[derive(Clone, Debug)]
pub(crate) enum Kind {
    /// A struct (record or object; `record` marks records).
    Struct { record: bool },
    /// A `pub const` holding the token's type id.
    Token,
    /// An enum over strings (`knownValues` or `enum`).
    StrEnum,
    /// A `$type`-tagged enum.
    Union,
    /// A transparent newtype over another type (strings, arrays …).
    Newtype,
    /// A method or permission set: not a data type.
    Method,
}

#[derive(Clone, Debug)]
pub(crate) struct DefInfo {
    /// The item's name in its module.
    pub name: String,
    pub kind: Kind,
}

/// Everything the emitters share: the catalog, the names given to every
/// def, and the options.
pub(crate) struct Ctx<'c> {
    pub catalog: &'c Catalog,
    pub opts: &'c Options,
    /// (nsid, def name) → its Rust item.
    pub defs: BTreeMap<(String, String), DefInfo>,
    /// Type names taken in each module (defs first, inline types later).
    pub type_names: BTreeMap<String, Names>,
    pub problems: Vec<String>,
}

/// Generates the Rust modules for every lexicon of `catalog`. Fails with a
/// list of problems (a ref to a method, say) without writing anything.
pub fn generate(catalog: &Catalog, opts: &Options) -> Result<Vec<File>, Vec<String>> {
    let mut ctx = Ctx {
        catalog,
        opts,
        defs: BTreeMap::new(),
        type_names: BTreeMap::new(),
        problems: Vec::new(),
    };
    for entry in catalog.entries() {
        ctx.name_defs(&entry.doc);
    }
    let mut modules: BTreeMap<Vec<String>, String> = BTreeMap::new();
    for entry in catalog.entries() {
        let body = items::module(&mut ctx, &entry.doc);
        modules.insert(module_path(&entry.doc.id), body);
    }
    if !ctx.problems.is_empty() {
        return Err(ctx.problems);
    }
    let docs = catalog
        .entries()
        .map(|e| {
            (
                module_path(&e.doc.id),
                (e.doc.id.clone(), e.doc.description.clone()),
            )
        })
        .collect();
    Ok(layout(&ctx, modules, &docs))
}

/// `chat.gel.assistant.getThread` → [chat, gel, assistant, get_thread].
pub(crate) fn module_path(nsid: &str) -> Vec<String> {
    nsid.split('.').map(names::snake).collect()
}

impl<'c> Ctx<'c> {
    fn name_defs(&mut self, doc: &Document) {
        let module = module_path(&doc.id).join("::");
        let mut names = Names::default();
        let last = doc.id.rsplit('.').next().unwrap_or(&doc.id);
        for (name, def) in &doc.defs {
            let kind = match def {
                Def::Record(_) => Kind::Struct { record: true },
                Def::Type(Type::Object(_) | Type::Params(_)) => Kind::Struct { record: false },
                Def::Type(Type::Token(_)) => Kind::Token,
                Def::Type(Type::String(s)) if s.r#enum.is_some() || s.known_values.is_some() => {
                    Kind::StrEnum
                }
                Def::Type(Type::Union(_)) => Kind::Union,
                Def::Type(_) => Kind::Newtype,
                _ => Kind::Method,
            };
            let wanted = if name == "main" {
                names::camel(last)
            } else {
                names::camel(name)
            };
            let rust = match kind {
                Kind::Token => names::screaming(name),
                Kind::Method => wanted.clone(),
                _ => names.claim(&wanted, "Def"),
            };
            self.defs
                .insert((doc.id.clone(), name.clone()), DefInfo { name: rust, kind });
        }
        self.type_names.insert(module, names);
    }

    pub fn info(&self, r: &Resolved<'_>) -> &DefInfo {
        &self.defs[&(r.nsid.to_string(), r.name.to_string())]
    }

    /// The Rust path of a def's item as seen from module `from` (an NSID).
    pub fn path_to(&self, from: &str, r: &Resolved<'_>) -> String {
        let name = &self.info(r).name;
        if r.nsid == from {
            name.clone()
        } else {
            format!(
                "{}::{}::{name}",
                self.opts.root,
                module_path(r.nsid).join("::")
            )
        }
    }

    /// True when a value of def `to` can contain (by value, not through a
    /// `Vec`) a value of def `from`: a field of type `to` inside `from`
    /// must then be boxed.
    pub fn reaches(&self, to: &Resolved<'_>, from: (&str, &str)) -> bool {
        let mut seen = BTreeSet::new();
        let mut stack = vec![(to.nsid.to_string(), to.name.to_string())];
        while let Some((nsid, name)) = stack.pop() {
            if nsid == from.0 && name == from.1 {
                return true;
            }
            if !seen.insert((nsid.clone(), name.clone())) {
                continue;
            }
            let Some(def) = self.catalog.get(&nsid).and_then(|d| d.defs.get(&name)) else {
                continue;
            };
            let mut targets = Vec::new();
            match def {
                Def::Record(r) => {
                    for t in r.record.properties.values() {
                        by_value_refs(t, &mut targets);
                    }
                }
                Def::Type(t) => by_value_refs(t, &mut targets),
                _ => {}
            }
            for target in targets {
                if let Ok(r) = self.catalog.resolve(&nsid, &target) {
                    stack.push((r.nsid.to_string(), r.name.to_string()));
                }
            }
        }
        false
    }
}

/// The refs a type holds by value (arrays hold theirs on the heap).
fn by_value_refs(t: &Type, out: &mut Vec<String>) {
    match t {
        Type::Ref(r) => out.push(r.target.clone()),
        Type::Union(u) => out.extend(u.refs.iter().cloned()),
        Type::Object(o) => {
            for p in o.properties.values() {
                by_value_refs(p, out);
            }
        }
        Type::Params(p) => {
            for t in p.properties.values() {
                by_value_refs(t, out);
            }
        }
        _ => {}
    }
}

/// Lays the modules out as files: a module with submodules is `x/mod.rs`,
/// a leaf `x.rs`; the root is `mod.rs` with the `validate_by_type` table.
fn layout(
    ctx: &Ctx<'_>,
    modules: BTreeMap<Vec<String>, String>,
    docs: &BTreeMap<Vec<String>, (String, Option<String>)>,
) -> Vec<File> {
    let mut children: BTreeMap<Vec<String>, BTreeSet<String>> = BTreeMap::new();
    for path in modules.keys() {
        for i in 0..path.len() {
            children
                .entry(path[..i].to_vec())
                .or_default()
                .insert(path[i].clone());
        }
    }
    let mut all: BTreeSet<Vec<String>> = children.keys().cloned().collect();
    all.extend(modules.keys().cloned());
    let mut files = Vec::new();
    for path in all {
        let kids = children.get(&path);
        let file = if path.is_empty() {
            "mod.rs".to_string()
        } else if kids.is_some() {
            format!("{}/mod.rs", unraw(&path).join("/"))
        } else {
            format!("{}.rs", unraw(&path).join("/"))
        };
        let mut w = writer::Writer::default();
        let doc = docs
            .get(&path)
            .map(|(nsid, d)| (nsid.as_str(), d.as_deref()));
        w.header(ctx.opts, path.is_empty(), doc);
        let mods: Vec<String> = kids
            .map(|k| k.iter().cloned().collect())
            .unwrap_or_default();
        if !mods.is_empty() {
            w.blank();
            for m in &mods {
                w.line(&format!("pub mod {m};"));
            }
        }
        if path.is_empty() {
            items::root_table(ctx, &mut w);
            items::method_table(ctx, &mut w);
        }
        if let Some(body) = modules.get(&path) {
            w.raw(body);
        }
        files.push(File {
            path: file,
            contents: w.finish(),
        });
    }
    files
}

fn unraw(path: &[String]) -> Vec<&str> {
    path.iter()
        .map(|s| s.strip_prefix("r#").unwrap_or(s))
        .collect()
}

/// The `use` line that brings the runtime module in as `support`.
pub(crate) fn use_support(opts: &Options) -> String {
    match opts.support.rsplit("::").next() {
        Some("support") => format!("use {};", opts.support),
        _ => format!("use {} as support;", opts.support),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn generate_one(defs: serde_json::Value) -> String {
        let mut c = Catalog::new();
        let f = c.add(
            "a.json",
            &json!({"lexicon": 1, "id": "com.example.a", "defs": defs}),
        );
        assert!(f.is_empty(), "{f:?}");
        let mut c2 = c.clone();
        let f = c2.add(
            "b.json",
            &json!({"lexicon": 1, "id": "com.example.b", "defs": {"main": {"type": "object"}}}),
        );
        assert!(f.is_empty());
        let files = generate(&c2, &Options::gelstore()).unwrap();
        assert_eq!(
            files,
            generate(&c2, &Options::gelstore()).unwrap(),
            "deterministic"
        );
        let file = files.iter().find(|f| f.path == "com/example/a.rs").unwrap();
        assert!(file.contents.starts_with("// @generated"));
        file.contents.clone()
    }

    #[test]
    fn unions_accept_both_spellings_of_main_and_box_recursive_refs() {
        let code = generate_one(json!({
            "main": {"type": "object", "properties": {
                "u": {"type": "union", "refs": ["com.example.b", "#node", "com.example.gone#x"]},
                "ext": {"type": "ref", "ref": "com.example.gone#y"}
            }},
            "node": {"type": "object", "properties": {
                "child": {"type": "ref", "ref": "#node"},
                "children": {"type": "array", "items": {"type": "ref", "ref": "#node"}}
            }}
        }));
        assert!(
            code.contains("\"com.example.b\" | \"com.example.b#main\" =>"),
            "{code}"
        );
        assert!(code.contains("pub child: Option<Box<Node>>,"), "{code}");
        assert!(code.contains("pub children: Option<Vec<Node>>,"), "{code}");
        // Lexicons outside the catalog are kept as data.
        assert!(code.contains("pub ext: Option<support::Data>,"), "{code}");
        assert!(code.contains("Unknown(support::Data),"), "{code}");
    }

    #[test]
    fn refs_to_methods_are_problems() {
        let mut c = Catalog::new();
        c.add(
            "a.json",
            &json!({"lexicon": 1, "id": "com.example.a", "defs": {
                "main": {"type": "query"},
                "o": {"type": "object", "properties": {"q": {"type": "ref", "ref": "#main"}}}
            }}),
        );
        let problems = generate(&c, &Options::gelstore()).unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
    }
}
