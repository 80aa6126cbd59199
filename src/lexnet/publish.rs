//! `lex publish`: a folder's lexicons as `com.atproto.lexicon.schema`
//! records on the account's PDS. Every document is planned before
//! anything is written: one that equals what is published is left alone,
//! and a breaking change to a published one refuses the whole publish
//! unless forced, so a refused publish writes nothing.

use std::path::PathBuf;

use serde::Serialize;
use serde_json::Value;

use super::{LexNetError, SCHEMA_COLLECTION};
use crate::sync::Session;
use gelstore_lexicon::catalog::{Catalog, read_json};
use gelstore_lexicon::diff::{self, Change};

/// Where and how to publish.
#[derive(Debug, Clone)]
pub struct PublishOptions {
    /// The PDS URL.
    pub service: String,
    /// Handle or DID.
    pub identifier: String,
    pub password: String,
    /// Publish breaking changes too.
    pub force: bool,
}

/// What a publish did, by NSID.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PublishReport {
    /// The account the records went to.
    pub did: String,
    /// Schema records created.
    pub created: Vec<String>,
    /// Published ones replaced.
    pub updated: Vec<String>,
    /// Already published as they are.
    pub unchanged: Vec<String>,
}

enum Plan {
    Create,
    Update(cid::Cid),
    Same,
}

/// Publishes the lexicons of `paths` (files or folders).
pub fn publish(paths: &[PathBuf], opts: &PublishOptions) -> Result<PublishReport, LexNetError> {
    let (catalog, findings) = Catalog::load_paths(paths).map_err(|e| LexNetError::Io {
        what: "read the lexicons".into(),
        reason: e.to_string(),
    })?;
    if let Some(f) = findings.first() {
        return Err(LexNetError::BadSchema {
            nsid: f.file.clone(),
            reason: format!("{} ({}); `gelstore lex lint` shows all", f.message, f.rule),
        });
    }
    let session = Session::login(&opts.service, &opts.identifier, &opts.password)?;
    let mut plans = Vec::new();
    let mut breaking = Vec::new();
    for entry in catalog.entries() {
        let nsid = entry.doc.id.clone();
        let mut record =
            read_json(std::path::Path::new(&entry.file)).map_err(|e| LexNetError::Io {
                what: format!("read {}", entry.file),
                reason: e.to_string(),
            })?;
        if let Value::Object(map) = &mut record {
            map.insert("$type".into(), SCHEMA_COLLECTION.into());
        }
        let plan = match session.get_record(SCHEMA_COLLECTION, &nsid)? {
            None => Plan::Create,
            Some((published, _)) if published == record => Plan::Same,
            Some((published, cid)) => {
                let changes = breaking_changes(&nsid, &published, &record);
                if !changes.is_empty() {
                    breaking.push((nsid.clone(), changes));
                }
                Plan::Update(cid)
            }
        };
        plans.push((nsid, record, plan));
    }
    if !opts.force
        && let Some((nsid, changes)) = breaking.into_iter().next()
    {
        return Err(LexNetError::Breaking { nsid, changes });
    }
    let mut report = PublishReport {
        did: session.did().to_owned(),
        ..PublishReport::default()
    };
    for (nsid, record, plan) in plans {
        match plan {
            Plan::Same => report.unchanged.push(nsid),
            Plan::Create => {
                session.create_if_absent(SCHEMA_COLLECTION, &nsid, &record)?;
                report.created.push(nsid);
            }
            Plan::Update(swap) => {
                session.put_swapped(SCHEMA_COLLECTION, &nsid, &record, swap)?;
                report.updated.push(nsid);
            }
        }
    }
    Ok(report)
}

/// The breaking changes from the published document to the new one, in
/// words (empty when there are none).
pub fn breaking_changes(nsid: &str, published: &Value, new: &Value) -> String {
    let (mut old_catalog, mut new_catalog) = (Catalog::new(), Catalog::new());
    old_catalog.add(&format!("published {nsid}"), &lexicon_document(published));
    new_catalog.add(nsid, &lexicon_document(new));
    diff::diff(&old_catalog, &new_catalog)
        .into_iter()
        .filter(Change::is_breaking)
        .map(|c| format!("{} ({} at {})", c.message, c.rule, c.path))
        .collect::<Vec<_>>()
        .join("; ")
}

/// A schema record's value as a lexicon document: the record's `$type`
/// (`com.atproto.lexicon.schema`) is not part of the lexicon.
pub fn lexicon_document(record: &Value) -> Value {
    let mut doc = record.clone();
    if let Value::Object(m) = &mut doc {
        m.remove("$type");
    }
    doc
}
