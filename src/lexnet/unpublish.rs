//! `lex unpublish`: deletes `com.atproto.lexicon.schema` records from the
//! account's repository. A plan comes first, made on one head commit: which
//! of the asked NSIDs are published, and whether a schema that stays
//! published references one of them (refused, naming both, unless forced,
//! since that schema would no longer resolve whole). The deletes then go in
//! one `applyWrites` pinned to that head (`swapCommit`), so a repository that
//! changed in between refuses the whole delete instead of losing a record
//! the plan never saw.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::pull::references;
use super::{LexNetError, SCHEMA_COLLECTION};
use crate::sync::{MAX_BATCH, Session, SyncError};
use gelstore_lexicon::catalog::Catalog;

/// What to unpublish: NSIDs, or lexicon files and folders whose NSIDs.
pub fn targets(args: &[String]) -> Result<Vec<String>, LexNetError> {
    let mut out = BTreeSet::new();
    for arg in args {
        let path = Path::new(arg);
        if path.exists() {
            let (catalog, _) =
                Catalog::load_paths(&[PathBuf::from(arg)]).map_err(|e| LexNetError::Io {
                    what: format!("read the lexicons in {arg}"),
                    reason: e.to_string(),
                })?;
            out.extend(catalog.entries().map(|e| e.doc.id.clone()));
        } else {
            gelstore_lexicon::syntax::check_nsid(arg).map_err(|e| LexNetError::BadNsid {
                nsid: arg.clone(),
                reason: format!("{e} (nor is it a file or folder)"),
            })?;
            out.insert(arg.clone());
        }
    }
    Ok(out.into_iter().collect())
}

/// The deletes an unpublish would make, and the head they were planned on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnpublishPlan {
    /// The account.
    pub did: String,
    /// The head commit the plan was made on (the deletes' `swapCommit`).
    pub head: cid::Cid,
    /// Schema records to delete: NSID → record CID.
    pub delete: BTreeMap<String, cid::Cid>,
    /// Asked for, but not published there.
    pub absent: Vec<String>,
    /// With `force`: (deleted NSID, the staying schema that references it).
    pub dangling: Vec<(String, String)>,
}

/// What an unpublish did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UnpublishReport {
    /// The account.
    pub did: String,
    /// Schema records deleted (with `dry_run`: that would be).
    pub deleted: Vec<String>,
    /// Only planned: nothing was deleted.
    pub dry_run: bool,
    /// Asked for, but not published.
    pub absent: Vec<String>,
    /// The commit of the delete (none when nothing was deleted).
    pub commit: Option<String>,
}

/// Plans deleting the schema records of `nsids` from the session's
/// account; refuses (unless `force`) when a schema that stays published
/// references one of them.
pub fn plan(
    session: &Session,
    nsids: &[String],
    force: bool,
) -> Result<UnpublishPlan, LexNetError> {
    // The head first: anything written after it makes the swap fail.
    let (head, _) = session.latest_commit()?;
    let published = session.list_records(SCHEMA_COLLECTION)?;
    let asked: BTreeSet<&str> = nsids.iter().map(String::as_str).collect();
    let delete: BTreeMap<String, cid::Cid> = published
        .iter()
        .filter(|(rkey, _, _)| asked.contains(rkey.as_str()))
        .map(|(rkey, _, cid)| (rkey.clone(), *cid))
        .collect();
    let absent = nsids
        .iter()
        .filter(|n| !delete.contains_key(*n))
        .cloned()
        .collect();
    let mut dangling = Vec::new();
    for (rkey, value, _) in &published {
        if delete.contains_key(rkey) {
            continue;
        }
        for target in references(value) {
            if delete.contains_key(&target) {
                dangling.push((target, rkey.clone()));
            }
        }
    }
    dangling.sort();
    if !force && let Some((nsid, by)) = dangling.first() {
        return Err(LexNetError::StillReferenced {
            nsid: nsid.clone(),
            by: by.clone(),
        });
    }
    if delete.len() > MAX_BATCH {
        return Err(LexNetError::TooManyDeletes {
            count: delete.len(),
            max: MAX_BATCH,
        });
    }
    Ok(UnpublishPlan {
        did: session.did().to_owned(),
        head,
        delete,
        absent,
        dangling,
    })
}

/// Carries a plan out: its deletes in one `applyWrites` whose `swapCommit`
/// is the plan's head. Returns the new commit (none for an empty plan).
pub fn apply(session: &Session, plan: &UnpublishPlan) -> Result<Option<String>, LexNetError> {
    use atrium_api::com::atproto::repo::apply_writes::{DeleteData, InputWritesItem};
    use atrium_api::types::string::{Nsid, RecordKey};

    if plan.delete.is_empty() {
        return Ok(None);
    }
    let collection = Nsid::new(SCHEMA_COLLECTION.to_owned()).map_err(|e| LexNetError::BadNsid {
        nsid: SCHEMA_COLLECTION.into(),
        reason: e.to_string(),
    })?;
    let writes = plan
        .delete
        .keys()
        .map(|nsid| {
            let rkey = RecordKey::new(nsid.clone()).map_err(|e| LexNetError::BadNsid {
                nsid: nsid.clone(),
                reason: e.to_string(),
            })?;
            Ok(InputWritesItem::Delete(Box::new(
                DeleteData {
                    collection: collection.clone(),
                    rkey,
                }
                .into(),
            )))
        })
        .collect::<Result<Vec<_>, LexNetError>>()?;
    match session.apply_writes(writes, Some(plan.head)) {
        Ok(out) => Ok(out.commit.map(|c| c.cid.as_ref().to_string())),
        Err(SyncError::Xrpc { ref error, .. })
            if error.starts_with("InvalidSwap") && session.latest_commit()?.0 != plan.head =>
        {
            Err(LexNetError::Moved {
                head: plan.head.to_string(),
            })
        }
        Err(e) => Err(e.into()),
    }
}

/// Plans and carries out an unpublish of `nsids` as the session's account.
pub fn unpublish(
    session: &Session,
    nsids: &[String],
    force: bool,
) -> Result<(UnpublishPlan, UnpublishReport), LexNetError> {
    let plan = plan(session, nsids, force)?;
    let commit = apply(session, &plan)?;
    let report = UnpublishReport {
        did: plan.did.clone(),
        deleted: plan.delete.keys().cloned().collect(),
        absent: plan.absent.clone(),
        dry_run: false,
        commit,
    };
    Ok((plan, report))
}
