//! Semantic lint rules over a loaded [`Catalog`]: what the parser cannot see
//! from one JSON value alone (references into other lexicons, names, limits
//! that contradict each other, values a field can never hold …). The
//! structural findings (wrong JSON types, unknown fields, types out of place)
//! come from loading; see `schema::parse`.
//!
//! Findings come out in catalog order, then document order: each document is
//! walked once, def by def in source order, each node before its children.
//! Every lookup is a hash lookup, so a lint run is linear in catalog size.
//!
//! The parser leaves out list entries it cannot read (a number in `refs`, an
//! error without a name …), so in a document that also has structural
//! findings an index in a lint path counts only the readable entries.
//!
//! One job per file: `walk` visits the model and calls the checks in
//! `document` (id, path, primary defs), `names`, `refs`, `limits`, `values`
//! (enum, knownValues, default, const, format), `object` (required,
//! nullable), `mime` (blob accept, body encoding) and `permission`.

mod document;
mod limits;
mod mime;
mod names;
mod object;
mod permission;
mod refs;
pub mod rules;
mod values;
mod walk;

pub use rules::ALL_RULES;

use crate::catalog::{Catalog, Entry};
use crate::finding::Finding;

/// Runs every lint rule over every document of `catalog`.
pub fn lint(catalog: &Catalog) -> Vec<Finding> {
    let mut findings = Vec::new();
    for entry in catalog.entries() {
        let mut cx = Cx {
            catalog,
            entry,
            findings: Vec::new(),
        };
        walk::document(&mut cx);
        findings.append(&mut cx.findings);
    }
    findings
}

/// The document being linted, the catalog its references resolve in, and
/// the findings so far.
struct Cx<'a> {
    catalog: &'a Catalog,
    entry: &'a Entry,
    findings: Vec<Finding>,
}

impl<'a> Cx<'a> {
    /// The id of the document being linted (the base of `#local` refs).
    fn id(&self) -> &'a str {
        &self.entry.doc.id
    }

    fn report(&mut self, path: &str, rule: &'static str, message: impl Into<String>) {
        self.findings
            .push(Finding::new(&self.entry.file, path, rule, message));
    }
}

/// "a def of type 'query'": a type name in a message, without a/an trouble.
fn kind(type_name: &str) -> String {
    format!("a def of type '{type_name}'")
}

#[cfg(test)]
mod test_support {
    use crate::catalog::Catalog;
    use serde_json::Value;

    /// Lints documents given as (file, JSON) pairs and returns
    /// `(file, path, rule)` triples; panics on structural findings so a
    /// test cannot pass by accident on a broken document.
    pub fn lint_docs(docs: &[(&str, Value)]) -> Vec<(String, String, &'static str)> {
        let mut catalog = Catalog::new();
        for (file, value) in docs {
            let structural = catalog.add(file, value);
            assert!(structural.is_empty(), "{structural:?}");
        }
        super::lint(&catalog)
            .into_iter()
            .map(|f| (f.file, f.path, f.rule))
            .collect()
    }

    /// Lints one document filed under its id, returning `(path, rule)` pairs.
    pub fn lint_one(value: Value) -> Vec<(String, &'static str)> {
        let id = value["id"].as_str().unwrap().replace('.', "/");
        lint_docs(&[(&format!("lexicons/{id}.json"), value)])
            .into_iter()
            .map(|(_, path, rule)| (path, rule))
            .collect()
    }
}
