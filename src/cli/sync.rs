//! `gelstore sync`: push the local `chat.gel.assistant.*` records to a PDS,
//! then fetch its repository and verify it (signature against the DID
//! document's `#atproto` key, MST, records).
//!
//! Exit codes: 0 synced; 1 refused (bad credentials, a PDS error, a
//! repository that fails verification, another account than the one this
//! store is linked to); 2 usage or environment (PDS unreachable, local I/O,
//! no repository). A failed sync leaves the local store as it was.

use std::path::Path;

use clap::Args;
use serde_json::json;

use super::{Format, Outcome, progress, say};
use crate::sync::{self, DEFAULT_PLC, SyncOptions};

/// The environment variable read when `--password` is not given.
pub const PASSWORD_ENV: &str = "GELSTORE_PASSWORD";

#[derive(Args, Debug)]
pub struct SyncArgs {
    /// The PDS URL (e.g. `https://pds.example.com`).
    #[arg(long, value_name = "URL")]
    pub pds: String,
    /// The account's handle or DID.
    #[arg(long)]
    pub identifier: String,
    /// The account's password (or app password); default: the
    /// GELSTORE_PASSWORD environment variable.
    #[arg(long)]
    pub password: Option<String>,
    /// The PLC directory the account's DID document comes from.
    #[arg(long, value_name = "URL", default_value = DEFAULT_PLC)]
    pub plc: String,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

pub fn run(data: &Path, args: SyncArgs) -> Outcome {
    let Some(password) = args
        .password
        .clone()
        .or_else(|| std::env::var(PASSWORD_ENV).ok())
    else {
        eprintln!("error: no password: give --password or set {PASSWORD_ENV}");
        return Outcome::Failed;
    };
    let opts = SyncOptions {
        service: args.pds.clone(),
        identifier: args.identifier.clone(),
        password,
        plc: args.plc.clone(),
    };
    // A progress bar for long pushes (records) and downloads (bytes) goes
    // to stderr on a terminal only; the report on stdout is the same
    // either way.
    let report = match sync::sync_with_progress(data, &opts, progress::for_stderr()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: sync: {e}");
            return if e.is_environment() {
                Outcome::Failed
            } else {
                Outcome::Findings
            };
        }
    };
    match args.format {
        Format::Json => say(json!(report)),
        Format::Human => {
            let p = &report.push;
            say(format_args!(
                "pushed to {} ({}): {} created, {} updated, {} deleted, {} unchanged",
                report.service, report.did, p.created, p.updated, p.deleted, p.unchanged
            ));
            let r = &report.pull;
            say(format_args!(
                "verified the PDS repository: rev {}, {} records ({} ours), signed by {}",
                r.rev, r.records, r.our_records, r.signing_key
            ));
            if r.data_matches {
                say(format_args!(
                    "in sync: data {} matches the local root",
                    r.data
                ));
            } else {
                say(format_args!(
                    "not in sync: the PDS's data {} differs from the local root {} (the PDS holds records this store does not)",
                    r.data, r.expected_data
                ));
            }
        }
    }
    Outcome::Clean
}
