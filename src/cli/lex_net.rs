//! `gelstore lex resolve | pull | publish | check-dns`: lexicons on the
//! network (see `lexnet`). Exit codes as for every command: 0 done, 1
//! refused (not published, a record that fails verification, a breaking
//! publish, lock drift, a TXT record missing), 2 the network or local I/O.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use serde_json::json;

use super::sync::{LoginArgs, login_options};
use super::{Failure, Format, finish, say};
use crate::cli::Outcome;
use crate::lexnet::{self, LexNetError, PublishOptions, Resolver, ResolverOptions, txt_name};
use gelstore_lexicon::catalog::Catalog;

/// Where resolution looks (shared by the commands that resolve).
#[derive(Args, Debug, Clone)]
pub struct ResolveWith {
    /// The DNS server to ask for `_lexicon` TXT records (HOST:PORT, UDP);
    /// default: the system's.
    #[arg(long, value_name = "ADDR")]
    pub dns: Option<SocketAddr>,
    /// The PLC directory a did:plc's document comes from.
    #[arg(long, value_name = "URL", default_value = crate::sync::DEFAULT_PLC)]
    pub plc: String,
    /// Seconds per DNS query and per HTTP request.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub timeout: u64,
}

impl ResolveWith {
    fn resolver(&self) -> Result<Resolver, Failure> {
        Resolver::new(&ResolverOptions {
            dns: self.dns,
            plc: self.plc.clone(),
            timeout: std::time::Duration::from_secs(self.timeout.max(1)),
        })
        .map_err(failure)
    }
}

/// The published copy of each lexicon of `local` (verified as `lex
/// resolve` does; in `did`'s repository, or where DNS says), as a catalog
/// to diff against. A lexicon that is not published yet is left out: to a
/// diff it is new. Any other resolution failure is the error.
pub(super) fn published_catalog(
    local: &Catalog,
    did: Option<&str>,
    with: &ResolveWith,
) -> Result<Catalog, Failure> {
    let resolver = with.resolver()?;
    let mut published = Catalog::new();
    for entry in local.entries() {
        let nsid = &entry.doc.id;
        let found = match did {
            Some(did) => resolver.resolve_at(nsid, did),
            None => resolver.resolve(nsid),
        };
        match found {
            Ok(r) => {
                let doc = lexnet::publish::lexicon_document(&r.schema);
                published.add(&format!("published {nsid}"), &doc);
            }
            Err(LexNetError::NotPublished { .. } | LexNetError::NoTxtRecord { .. }) => {}
            Err(e) => return Err(failure(e)),
        }
    }
    Ok(published)
}

#[derive(Args, Debug)]
pub struct ResolveArgs {
    /// The NSIDs to resolve.
    #[arg(required = true)]
    pub nsids: Vec<String>,
    /// Look in this DID's repository instead of asking DNS.
    #[arg(long)]
    pub did: Option<String>,
    #[command(flatten)]
    pub with: ResolveWith,
    /// human: where it came from, then the schema; json: one
    /// `{nsid, did, pds, cid, commit, rev, schema}` per line.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct PullArgs {
    /// NSIDs to pull (with what they reference).
    pub nsids: Vec<String>,
    /// Local lexicons whose references to pull (files or folders; default
    /// `lexicons` when no NSID is given).
    #[arg(long, value_name = "DIR")]
    pub lexicons: Vec<PathBuf>,
    /// Where the pulled lexicons and the lock file go.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Fail, writing nothing, when a lexicon resolves to another record
    /// than the lock file holds.
    #[arg(long)]
    pub locked: bool,
    #[command(flatten)]
    pub with: ResolveWith,
    /// human: one line per lexicon; json: `{pulled, changed}`.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct PublishArgs {
    /// The lexicons to publish (files or folders).
    #[arg(default_value = "lexicons")]
    pub paths: Vec<PathBuf>,
    /// Publish breaking changes too.
    #[arg(long)]
    pub force: bool,
    /// The account (its output format is this command's: human lines, or
    /// json `{did, created, updated, unchanged}`).
    #[command(flatten)]
    pub login: LoginArgs,
}

#[derive(Args, Debug)]
pub struct UnpublishArgs {
    /// NSIDs to unpublish, or lexicon files and folders whose NSIDs.
    #[arg(required = true, value_name = "NSID|DIR")]
    pub targets: Vec<String>,
    /// Unpublish even when a schema that stays published references one
    /// of them.
    #[arg(long)]
    pub force: bool,
    /// Only show the plan: what would be deleted.
    #[arg(long)]
    pub dry_run: bool,
    /// The account (its output format is this command's: human lines, or
    /// json `{did, deleted, absent, dry_run, commit}`).
    #[command(flatten)]
    pub login: LoginArgs,
}

#[derive(Args, Debug)]
pub struct CheckDnsArgs {
    /// The lexicons whose authorities to check (files or folders).
    #[arg(default_value = "lexicons")]
    pub paths: Vec<PathBuf>,
    /// The DID the records must name; without it, only what to add is shown.
    #[arg(long)]
    pub did: Option<String>,
    #[command(flatten)]
    pub with: ResolveWith,
    /// human: one line per TXT name; json: `{name, want, found, ok}` per line.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

fn failure(e: LexNetError) -> Failure {
    if e.is_environment() {
        Failure::env(e.to_string())
    } else {
        Failure::input(e.to_string())
    }
}

pub fn resolve(args: ResolveArgs) -> Outcome {
    finish((|| {
        let resolver = args.with.resolver()?;
        for nsid in &args.nsids {
            let r = match &args.did {
                Some(did) => resolver.resolve_at(nsid, did),
                None => resolver.resolve(nsid),
            }
            .map_err(failure)?;
            match args.format {
                Format::Human => {
                    say(format!(
                        "# {} from {} ({}), record {} at rev {}",
                        r.nsid, r.did, r.pds, r.cid, r.rev
                    ));
                    say(serde_json::to_string_pretty(&r.schema).unwrap_or_default());
                }
                Format::Json => say(json!({
                    "nsid": r.nsid,
                    "did": r.did,
                    "pds": r.pds,
                    "cid": r.cid.to_string(),
                    "commit": r.commit.to_string(),
                    "rev": r.rev,
                    "schema": r.schema,
                })),
            }
        }
        Ok(())
    })())
}

pub fn pull(args: PullArgs) -> Outcome {
    finish((|| {
        let resolver = args.with.resolver()?;
        let paths = if args.lexicons.is_empty() && args.nsids.is_empty() {
            vec![PathBuf::from("lexicons")]
        } else {
            args.lexicons.clone()
        };
        let report = lexnet::pull(&args.nsids, &paths, &args.out, &resolver, args.locked)
            .map_err(failure)?;
        match args.format {
            Format::Human => {
                for nsid in &report.pulled {
                    let mark = if report.changed.contains(nsid) {
                        "pulled"
                    } else {
                        "locked"
                    };
                    say(format!("{mark}\t{nsid}"));
                }
            }
            Format::Json => say(serde_json::to_value(&report).unwrap_or_default()),
        }
        Ok(())
    })())
}

pub fn publish(args: PublishArgs) -> Outcome {
    let Some(login) = login_options(&args.login) else {
        return Outcome::Failed;
    };
    finish((|| {
        let report = lexnet::publish(
            &args.paths,
            &PublishOptions {
                service: login.service,
                identifier: login.identifier,
                password: login.password,
                force: args.force,
            },
        )
        .map_err(failure)?;
        match args.login.format {
            Format::Human => {
                for (what, list) in [
                    ("created", &report.created),
                    ("updated", &report.updated),
                    ("unchanged", &report.unchanged),
                ] {
                    for nsid in list {
                        say(format!("{what}\t{nsid}"));
                    }
                }
            }
            Format::Json => say(serde_json::to_value(&report).unwrap_or_default()),
        }
        Ok(())
    })())
}

/// `lex unpublish`: plan, refuse a still-referenced schema, then delete in
/// one commit pinned to the planned head.
pub fn unpublish(args: UnpublishArgs) -> Outcome {
    let Some(login) = login_options(&args.login) else {
        return Outcome::Failed;
    };
    finish((|| {
        let nsids = lexnet::unpublish::targets(&args.targets).map_err(failure)?;
        let session =
            crate::sync::Session::login(&login.service, &login.identifier, &login.password)
                .map_err(|e| failure(e.into()))?;
        let (plan, report) = if args.dry_run {
            let plan = lexnet::unpublish::plan(&session, &nsids, args.force).map_err(failure)?;
            let report = lexnet::UnpublishReport {
                did: plan.did.clone(),
                deleted: plan.delete.keys().cloned().collect(),
                absent: plan.absent.clone(),
                dry_run: true,
                commit: None,
            };
            (plan, report)
        } else {
            lexnet::unpublish(&session, &nsids, args.force).map_err(failure)?
        };
        for (nsid, by) in &plan.dangling {
            eprintln!("warning: {by} references {nsid}, which is no longer published (--force)");
        }
        match args.login.format {
            Format::Human => {
                let what = if args.dry_run {
                    "would delete"
                } else {
                    "deleted"
                };
                for nsid in plan.delete.keys() {
                    say(format!("{what}\t{nsid}"));
                }
                for nsid in &report.absent {
                    say(format!("absent\t{nsid}"));
                }
                if plan.delete.is_empty() {
                    say(format!(
                        "nothing to unpublish: {} publishes none of the {} asked",
                        plan.did,
                        nsids.len()
                    ));
                }
            }
            Format::Json => say(serde_json::to_value(&report).unwrap_or_default()),
        }
        Ok(())
    })())
}

pub fn check_dns(args: CheckDnsArgs) -> Outcome {
    finish((|| {
        let (catalog, _) = Catalog::load_paths(&args.paths)
            .map_err(|e| Failure::env(format!("cannot read the lexicons: {e}")))?;
        let mut names: Vec<String> = catalog
            .entries()
            .map(|e| txt_name(&e.doc.id).map_err(failure))
            .collect::<Result<_, _>>()?;
        names.sort();
        names.dedup();
        let Some(did) = &args.did else {
            for name in &names {
                say(format!(
                    "{name}\tTXT\t\"did=<the publishing account's DID>\""
                ));
            }
            return Ok(());
        };
        let resolver = args.with.resolver()?;
        let want = format!("did={did}");
        let mut wrong = 0;
        for name in &names {
            let found = match resolver.txt(name) {
                Ok(texts) => texts,
                Err(LexNetError::NoTxtRecord { .. }) => Vec::new(),
                Err(e) => return Err(failure(e)),
            };
            let dids: Vec<&String> = found.iter().filter(|t| t.starts_with("did=")).collect();
            let ok = dids.len() == 1 && *dids[0] == want;
            if !ok {
                wrong += 1;
            }
            match args.format {
                Format::Human => say(format!(
                    "{}\t{name}\tTXT\t\"{want}\"{}",
                    if ok { "ok" } else { "add" },
                    if found.is_empty() || ok {
                        String::new()
                    } else {
                        format!("\t(found {found:?})")
                    }
                )),
                Format::Json => say(json!({"name": name, "want": want, "found": found, "ok": ok})),
            }
        }
        if wrong > 0 {
            return Err(Failure::input(format!(
                "{wrong} of {} TXT record(s) missing or naming another DID",
                names.len()
            )));
        }
        Ok(())
    })())
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The local lexicons (files or folders).
    #[arg(default_value = "lexicons")]
    pub paths: Vec<PathBuf>,
    /// Compare with this DID's repository instead of asking DNS.
    #[arg(long)]
    pub did: Option<String>,
    #[command(flatten)]
    pub with: ResolveWith,
    /// human: `same|differs|unpublished NSID`; json: `{nsid, state,
    /// breaking?}` per line. Exit 1 unless every lexicon is published as it is.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

/// `lex status`: each local lexicon against its published copy.
pub fn status(args: StatusArgs) -> Outcome {
    finish((|| {
        let (catalog, _) = Catalog::load_paths(&args.paths)
            .map_err(|e| Failure::env(format!("cannot read the lexicons: {e}")))?;
        let resolver = args.with.resolver()?;
        let mut behind = 0;
        for entry in catalog.entries() {
            let nsid = &entry.doc.id;
            let local = gelstore_lexicon::catalog::read_json(std::path::Path::new(&entry.file))
                .map_err(|e| Failure::env(format!("cannot read {}: {e}", entry.file)))?;
            let found = match &args.did {
                Some(did) => resolver.resolve_at(nsid, did),
                None => resolver.resolve(nsid),
            };
            let (state, breaking) = match found {
                Ok(r) if r.schema == local => ("same", String::new()),
                Ok(r) => (
                    "differs",
                    lexnet::publish::breaking_changes(nsid, &r.schema, &local),
                ),
                Err(LexNetError::NotPublished { .. } | LexNetError::NoTxtRecord { .. }) => {
                    ("unpublished", String::new())
                }
                Err(e) => return Err(failure(e)),
            };
            if state != "same" {
                behind += 1;
            }
            match args.format {
                Format::Human if breaking.is_empty() => say(format!("{state}\t{nsid}")),
                Format::Human => say(format!("{state}\t{nsid}\t(breaking: {breaking})")),
                Format::Json => {
                    let mut line = json!({"nsid": nsid, "state": state});
                    if !breaking.is_empty() {
                        line["breaking"] = breaking.into();
                    }
                    say(line)
                }
            }
        }
        if behind > 0 {
            return Err(Failure::input(format!(
                "{behind} of {} lexicon(s) not published as they are here",
                catalog.len()
            )));
        }
        Ok(())
    })())
}

/// The primary types a new lexicon can have.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum NewKind {
    Record,
    Query,
    Procedure,
    Subscription,
}

#[derive(Args, Debug)]
pub struct NewArgs {
    /// What the lexicon's main definition is.
    #[arg(value_enum)]
    pub kind: NewKind,
    /// Its NSID.
    pub nsid: String,
    /// The lexicon folder; the file goes to DIR/<nsid as a path>.json.
    #[arg(long, default_value = "lexicons", value_name = "DIR")]
    pub out: PathBuf,
}

/// A lexicon document to start from: it lints clean.
pub fn template(kind: NewKind, nsid: &str) -> serde_json::Value {
    let main = match kind {
        NewKind::Record => json!({
            "type": "record",
            "description": "TODO: what one record is.",
            "key": "tid",
            "record": {
                "type": "object",
                "required": ["createdAt"],
                "properties": {"createdAt": {"type": "string", "format": "datetime"}},
            },
        }),
        NewKind::Query => json!({
            "type": "query",
            "description": "TODO: what it answers.",
            "parameters": {"type": "params", "properties": {"limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 50}}},
            "output": {"encoding": "application/json", "schema": {"type": "object", "properties": {}}},
        }),
        NewKind::Procedure => json!({
            "type": "procedure",
            "description": "TODO: what it does.",
            "input": {"encoding": "application/json", "schema": {"type": "object", "properties": {}}},
            "output": {"encoding": "application/json", "schema": {"type": "object", "properties": {}}},
        }),
        NewKind::Subscription => json!({
            "type": "subscription",
            "description": "TODO: what it streams.",
            "parameters": {"type": "params", "properties": {"cursor": {"type": "integer"}}},
            "message": {"schema": {"type": "union", "refs": ["#event"]}},
        }),
    };
    let mut doc = json!({"lexicon": 1, "id": nsid, "defs": {"main": main}});
    if kind == NewKind::Subscription {
        doc["defs"]["event"] = json!({
            "type": "object",
            "required": ["seq"],
            "properties": {"seq": {"type": "integer"}},
        });
    }
    doc
}

/// `lex new`: writes a template, never over an existing file.
pub fn new(args: NewArgs) -> Outcome {
    finish((|| {
        gelstore_lexicon::syntax::check_nsid(&args.nsid)
            .map_err(|e| Failure::input(format!("{:?} is not an NSID: {e}", args.nsid)))?;
        let file = args
            .out
            .join(format!("{}.json", args.nsid.replace('.', "/")));
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| Failure::env(format!("cannot create {}: {e}", dir.display())))?;
        }
        let text = serde_json::to_string_pretty(&template(args.kind, &args.nsid))
            .unwrap_or_default()
            + "\n";
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&file)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => {
                    Failure::input(format!("{} exists; not overwritten", file.display()))
                }
                _ => Failure::env(format!("cannot write {}: {e}", file.display())),
            })?;
        std::io::Write::write_all(&mut out, text.as_bytes())
            .map_err(|e| Failure::env(format!("cannot write {}: {e}", file.display())))?;
        say(file.display());
        Ok(())
    })())
}
