//! `gelstore sync status`: compares the store with the PDS, changes
//! neither. Exit 0 whether in sync or not (the counts say which); 1 or 2
//! as for `gelstore sync` when the comparison itself fails.

use std::path::Path;

use serde_json::json;

use super::sync::{LoginArgs, login_options, sync_failed};
use super::{Format, Outcome, say};
use crate::sync;

pub fn run(data: &Path, args: &LoginArgs) -> Outcome {
    let Some(opts) = login_options(args) else {
        return Outcome::Failed;
    };
    let report = match sync::status(data, &opts) {
        Ok(r) => r,
        Err(e) => return sync_failed(e),
    };
    match args.format {
        Format::Json => say(json!(report)),
        Format::Human => {
            if report.in_sync {
                say(format_args!(
                    "in sync with {} ({}) at rev {}",
                    report.service, report.did, report.remote_rev
                ));
            } else {
                let (p, q) = (&report.to_push, &report.to_pull);
                say(format_args!(
                    "not in sync with {} ({}), PDS at rev {}",
                    report.service, report.did, report.remote_rev
                ));
                say(format_args!(
                    "to push: {} created, {} updated, {} deleted",
                    p.created, p.updated, p.deleted
                ));
                say(format_args!(
                    "to pull: {} created, {} updated, {} deleted",
                    q.created, q.updated, q.deleted
                ));
            }
        }
    }
    Outcome::Clean
}
