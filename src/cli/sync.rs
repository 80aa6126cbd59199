//! `gelstore sync`: pull and merge what other devices pushed, push this
//! store's `chat.gel.assistant.*` changes, check the PDS's new root (see
//! `crate::sync`); `gelstore sync status` compares only
//! (`cli/sync_status.rs`).
//!
//! Exit codes: 0 synced; 1 refused (bad credentials, a PDS error, a
//! repository that fails verification, a pulled record that fails
//! validation, a data-root mismatch, another account than the one this
//! store is linked to); 2 usage or environment (PDS unreachable, local I/O,
//! no repository). A failed pull leaves the local store as it was.

use std::path::Path;

use clap::Args;
use serde_json::json;

use super::{Format, Outcome, progress, say};
use crate::sync::{self, DEFAULT_PLC, SyncOptions};

/// The environment variable read when `--password` is not given.
pub const PASSWORD_ENV: &str = "GELSTORE_PASSWORD";

#[derive(Args, Debug)]
pub struct SyncArgs {
    #[command(subcommand)]
    pub command: Option<SyncCommand>,
    /// `None` only with a subcommand (clap enforces `--pds` and
    /// `--identifier` otherwise).
    #[command(flatten)]
    pub login: Option<LoginArgs>,
}

#[derive(clap::Subcommand, Debug)]
pub enum SyncCommand {
    /// Compare the store with the PDS without changing either: in sync, or
    /// how many records are to push and to pull.
    Status(LoginArgs),
}

/// The PDS, the account and the output format (shared by `sync` and `sync
/// status`).
#[derive(Args, Debug)]
pub struct LoginArgs {
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
    /// The PLC directory a did:plc account's DID document comes from (a
    /// did:web's comes from its own host).
    #[arg(long, value_name = "URL", default_value = DEFAULT_PLC)]
    pub plc: String,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

/// The options of a login, the password from the environment if not given.
pub(super) fn login_options(args: &LoginArgs) -> Option<SyncOptions> {
    let Some(password) = args
        .password
        .clone()
        .or_else(|| std::env::var(PASSWORD_ENV).ok())
    else {
        eprintln!("error: no password: give --password or set {PASSWORD_ENV}");
        return None;
    };
    Some(SyncOptions {
        service: args.pds.clone(),
        identifier: args.identifier.clone(),
        password,
        plc: args.plc.clone(),
    })
}

pub(super) fn sync_failed(e: sync::SyncError) -> Outcome {
    eprintln!("error: sync: {e}");
    if e.is_environment() {
        Outcome::Failed
    } else {
        Outcome::Findings
    }
}

pub fn run(data: &Path, args: SyncArgs) -> Outcome {
    if let Some(SyncCommand::Status(login)) = args.command {
        return super::sync_status::run(data, &login);
    }
    let Some(args) = args.login else {
        eprintln!("error: sync needs --pds URL and --identifier HANDLE_OR_DID");
        return Outcome::Failed;
    };
    let Some(opts) = login_options(&args) else {
        return Outcome::Failed;
    };
    // A progress bar for long pushes (records) and downloads (bytes) goes
    // to stderr on a terminal only; the report on stdout is the same
    // either way.
    let report = match sync::sync_with_progress(data, &opts, progress::for_stderr()) {
        Ok(r) => r,
        Err(e) => return sync_failed(e),
    };
    if let sync::ResealOutcome::Resealed(r) = &report.reseal
        && !r.left_behind.is_empty()
    {
        eprintln!(
            "device(s) {} were paired from an exported CAR and cannot follow the re-seal for {} (their pairing secrets never left them): pair each again (`gelstore device pair --publish` in a new data folder there, `gelstore device approve CODE` here), and `gelstore device remove ID` the old ones",
            r.left_behind.join(", "),
            r.to
        );
    }
    match args.format {
        Format::Json => say(json!(report)),
        Format::Human => {
            match &report.reseal {
                sync::ResealOutcome::Resealed(r) => {
                    say(format_args!(
                        "sealed again for {} (was {}) before the first push: {} sealed record(s), {} rewritten, {} key wrap(s), {} membership change(s)",
                        r.to, r.from, r.sealed, r.rewritten, r.wraps, r.changes
                    ));
                    if !r.dropped.is_empty() {
                        say(format_args!(
                            "left out of the re-seal (not accepted by this device's keyring, or another device's pairing wrap): {}",
                            r.dropped.join(", ")
                        ));
                    }
                    if !r.left_unopened.is_empty() {
                        say(format_args!(
                            "left as they are (sealed records from the PDS that do not open here): {}",
                            r.left_unopened.join(", ")
                        ));
                    }
                }
                sync::ResealOutcome::Finished { did } => {
                    say(format_args!("finished the interrupted re-seal for {did}"))
                }
                sync::ResealOutcome::Earlier { did } => say(format_args!(
                    "this store seals for {did}, as linked by an earlier gelstore (not re-sealed)"
                )),
                sync::ResealOutcome::NotNeeded => {}
            }
            let p = &report.push;
            say(format_args!(
                "pushed to {} ({}): {} created, {} updated, {} deleted, {} unchanged",
                report.service, report.did, p.created, p.updated, p.deleted, p.unchanged
            ));
            let m = &report.merged;
            say(format_args!(
                "pulled: {} created, {} updated, {} deleted{}",
                m.created,
                m.updated,
                m.deleted,
                if m.conflicts > 0 {
                    format!(
                        "; {} conflict(s): the PDS's version kept, this device's in {}",
                        m.conflicts,
                        sync::merge::CONFLICTS_FILE
                    )
                } else {
                    String::new()
                }
            ));
            let r = &report.pull;
            say(format_args!(
                "PDS repository at rev {}: {} records ({} ours), signed by {}; downloaded {} bytes ({} full, {} since pulls)",
                r.rev,
                r.records,
                r.our_records,
                r.signing_key,
                r.car_bytes,
                r.full_pulls,
                r.since_pulls
            ));
            say(format_args!(
                "in sync: data {} matches the local root",
                r.data
            ));
        }
    }
    if !report.merged.refused.is_empty() {
        eprintln!(
            "refused {} remote change(s) that would lower security ({}): device and keyWrap records only grow, and a message with sealed content is never replaced by one without; this device's versions were kept (and pushed back), a refused message saved in {}. Someone with the account's password or the PDS may be trying to undo a device removal or forge a message.",
            report.merged.refused.len(),
            report.merged.refused.join(", "),
            sync::merge::CONFLICTS_FILE
        );
        return Outcome::Findings;
    }
    Outcome::Clean
}
