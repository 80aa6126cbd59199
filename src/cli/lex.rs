//! `gelstore lex …`: the lexicon toolchain for CI pipelines.

use super::Outcome;
use super::report::{self, InputReport, LexFormat};
use clap::{Args, Subcommand};
use gelstore_codegen::emit;
use gelstore_lexicon::catalog::{Catalog, LoadError};
use gelstore_lexicon::schema::Def;
use gelstore_lexicon::{Finding, diff, lint, validate};
use serde_json::Value;
use std::io::Read;
use std::path::PathBuf;

/// Records larger than this are refused before parsing (the biggest
/// chat record the lexicons allow is about 1.3 MB of JSON).
const MAX_RECORD_BYTES: u64 = 16 * 1024 * 1024;

#[derive(Subcommand, Debug)]
pub enum LexCommand {
    /// Lint lexicon files: structure, refs, limits, names, formats.
    Lint(LintArgs),
    /// Validate JSON records (with `$type`) against a lexicon catalog.
    Check(CheckArgs),
    /// Compare two versions of a lexicon set; breaking changes are findings.
    Diff(DiffArgs),
    /// Generate Rust types from the lexicons (`--check`: only compare).
    Gen(GenArgs),
    /// Find NSIDs' published schemas (DNS TXT → DID → PDS), verified by
    /// their commit signature and proof, and print them.
    Resolve(super::lex_net::ResolveArgs),
    /// Pull the lexicons a folder references, transitively, into a folder,
    /// with a lock file of NSID → record CID (`--locked` fails on drift).
    Pull(super::lex_net::PullArgs),
    /// Publish a folder's lexicons as schema records on the account's PDS
    /// (only those that changed; a breaking change needs --force).
    Publish(super::lex_net::PublishArgs),
    /// Delete schema records from the account's PDS, in one commit (a
    /// schema another published one references needs --force).
    Unpublish(super::lex_net::UnpublishArgs),
    /// The `_lexicon` TXT records a folder's authorities need, and (with
    /// --did) whether DNS has them.
    CheckDns(super::lex_net::CheckDnsArgs),
    /// Compare local lexicons with their published copies (exit 1 unless
    /// every one is published as it is).
    Status(super::lex_net::StatusArgs),
    /// Start a lexicon from a template of its primary type.
    New(super::lex_net::NewArgs),
}

#[derive(Args, Debug)]
pub struct LintArgs {
    /// Lexicon files or folders (walked recursively for *.json).
    #[arg(default_value = "lexicons")]
    pub paths: Vec<PathBuf>,
    /// Do not report this rule (repeatable), e.g. `--allow unresolved-lexicon`.
    #[arg(long = "allow", value_name = "RULE")]
    pub allow: Vec<String>,
    /// How findings are printed (the exit status is the same for each).
    #[arg(long, value_enum, default_value_t)]
    pub format: LexFormat,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The lexicon catalog to validate against (folder or file).
    #[arg(long, default_value = "lexicons", value_name = "DIR")]
    pub lexicons: Vec<PathBuf>,
    /// Also check this record key against the record's key type.
    #[arg(long)]
    pub rkey: Option<String>,
    /// JSON record files; `-` reads one record from stdin.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<String>,
    /// How findings are printed (the exit status is the same for each).
    #[arg(long, value_enum, default_value_t)]
    pub format: LexFormat,
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// OLD NEW: the lexicon sets before and after the change; with
    /// --base or --published, one folder, compared with an older version
    /// of itself.
    #[arg(required = true, num_args = 1..=2, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// A git revision: the old set is PATH as committed there (read from
    /// git, without a checkout).
    #[arg(long, value_name = "REV", conflicts_with = "published")]
    pub base: Option<String>,
    /// The old set is what is published: each lexicon of PATH resolved and
    /// verified as `lex resolve` does (one not published yet is new).
    #[arg(long)]
    pub published: bool,
    /// With --published: the DID whose repository holds them, instead of
    /// asking DNS.
    #[arg(long, requires = "published")]
    pub did: Option<String>,
    #[command(flatten)]
    pub with: super::lex_net::ResolveWith,
    /// How findings are printed (the exit status is the same for each).
    #[arg(long, value_enum, default_value_t)]
    pub format: LexFormat,
}

#[derive(Args, Debug)]
pub struct GenArgs {
    /// The lexicon catalog to generate from (folders or files).
    #[arg(long, default_value = "lexicons", value_name = "DIR")]
    pub lexicons: Vec<PathBuf>,
    /// The folder of the generated module (its `mod.rs` is the root).
    #[arg(long, default_value = "crates/types/src/lexicon", value_name = "DIR")]
    pub out: PathBuf,
    /// The Rust path of the generated root module.
    #[arg(long, default_value = "crate::lexicon", value_name = "PATH")]
    pub root: String,
    /// The Rust path of the hand-written runtime the generated code uses
    /// (`gelstore::lexicon_runtime` from another crate).
    #[arg(long, default_value = "crate::lexicon_runtime", value_name = "PATH")]
    pub support: String,
    /// Write nothing; report every file that differs (exit 1 on drift).
    #[arg(long)]
    pub check: bool,
    /// How findings are printed (the exit status is the same for each).
    #[arg(long, value_enum, default_value_t)]
    pub format: LexFormat,
}

pub fn run(cmd: LexCommand) -> Outcome {
    let result = match cmd {
        LexCommand::Lint(args) => run_lint(args),
        LexCommand::Check(args) => run_check(args),
        LexCommand::Diff(args) => run_diff(args),
        LexCommand::Gen(args) => return run_gen(args),
        LexCommand::Resolve(args) => return super::lex_net::resolve(args),
        LexCommand::Pull(args) => return super::lex_net::pull(args),
        LexCommand::Publish(args) => return super::lex_net::publish(args),
        LexCommand::Unpublish(args) => return super::lex_net::unpublish(args),
        LexCommand::CheckDns(args) => return super::lex_net::check_dns(args),
        LexCommand::Status(args) => return super::lex_net::status(args),
        LexCommand::New(args) => return super::lex_net::new(args),
    };
    result.unwrap_or_else(|e| {
        eprintln!("error: {e}");
        Outcome::Failed
    })
}

fn run_lint(args: LintArgs) -> Result<Outcome, LoadError> {
    let (catalog, mut findings) = Catalog::load_paths(&args.paths)?;
    findings.extend(lint::lint(&catalog));
    findings.retain(|f| !args.allow.iter().any(|rule| rule == f.rule));
    let files = catalog.entries().map(|e| e.file.clone()).collect();
    let reports = report::group_by_file(files, findings);
    Ok(report::print(&reports, args.format, "lexicon file(s)"))
}

fn run_check(args: CheckArgs) -> Result<Outcome, LoadError> {
    let catalog = load_catalog_quietly(&args.lexicons)?;
    let check = |file: &String| -> Result<InputReport, String> {
        let value = read_record(file)?;
        let mut r = InputReport::new(file.clone());
        r.errors = check_value(&catalog, &value, args.rkey.as_deref())
            .into_iter()
            .map(|f| Finding {
                file: file.clone(),
                ..f
            })
            .collect();
        Ok(r)
    };
    // Files are independent and a large one is mostly parsing: they are
    // checked on every core, each thread a contiguous run of them, and the
    // results are reported in the order the files were given.
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(args.files.len())
        .max(1);
    let per_thread = args.files.len().div_ceil(threads).max(1);
    let results: Vec<Result<InputReport, String>> = std::thread::scope(|scope| {
        let runs: Vec<_> = args
            .files
            .chunks(per_thread)
            .map(|run| scope.spawn(|| run.iter().map(check).collect::<Vec<_>>()))
            .collect();
        runs.into_iter()
            .flat_map(|run| run.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let mut reports = Vec::with_capacity(results.len());
    let mut io_failed = false;
    for (file, result) in args.files.iter().zip(results) {
        match result {
            Ok(r) => reports.push(r),
            Err(message) => {
                eprintln!("error: {file}: {message}");
                io_failed = true;
            }
        }
    }
    let outcome = report::print(&reports, args.format, "record(s)");
    Ok(if io_failed { Outcome::Failed } else { outcome })
}

fn run_diff(args: DiffArgs) -> Result<Outcome, LoadError> {
    let (old, new) = match (&args.base, args.paths.as_slice()) {
        (None, [path]) if args.published => {
            let new = load_catalog_quietly(std::slice::from_ref(path))?;
            match super::lex_net::published_catalog(&new, args.did.as_deref(), &args.with) {
                Ok(old) => (old, new),
                Err(f) => {
                    eprintln!("error: {}", f.message);
                    return Ok(f.outcome);
                }
            }
        }
        (None, _) if args.published => {
            eprintln!("error: with --published, lex diff takes one PATH");
            return Ok(Outcome::Failed);
        }
        (None, [old, new]) => (
            load_catalog_quietly(std::slice::from_ref(old))?,
            load_catalog_quietly(std::slice::from_ref(new))?,
        ),
        (Some(rev), [path]) => match super::git_base::catalog_at(rev, path) {
            Ok(old) => (old, load_catalog_quietly(std::slice::from_ref(path))?),
            Err(e) => {
                eprintln!("error: {e}");
                return Ok(Outcome::Failed);
            }
        },
        (None, _) => {
            eprintln!("error: lex diff takes OLD NEW, --base REV PATH or --published PATH");
            return Ok(Outcome::Failed);
        }
        (Some(_), _) => {
            eprintln!("error: with --base, lex diff takes one PATH");
            return Ok(Outcome::Failed);
        }
    };
    let mut files: Vec<String> = new.entries().map(|e| e.file.clone()).collect();
    files.extend(
        old.entries()
            .filter(|e| new.get(&e.doc.id).is_none())
            .map(|e| e.file.clone()),
    );
    let mut reports: Vec<InputReport> = files.into_iter().map(InputReport::new).collect();
    for change in diff::diff(&old, &new) {
        let finding = change.to_finding();
        let i = match reports.iter().position(|r| r.file == finding.file) {
            Some(i) => i,
            None => {
                reports.push(InputReport::new(finding.file.clone()));
                reports.len() - 1
            }
        };
        match change.severity {
            diff::Severity::Breaking => reports[i].errors.push(finding),
            diff::Severity::Safe => reports[i].notes.push(finding),
        }
    }
    Ok(report::print(&reports, args.format, "lexicon file(s)"))
}

/// Rule of a `lex gen --check` finding: a generated file differs from (or
/// is missing from, or is left over in) what the lexicons generate.
const GENERATED_DRIFT: &str = "generated-drift";

fn run_gen(args: GenArgs) -> Outcome {
    let catalog = match Catalog::load_paths(&args.lexicons) {
        Ok((catalog, findings)) if findings.is_empty() => catalog,
        Ok((_, findings)) => {
            // A structurally broken catalog would generate wrong code.
            let reports = report::group_by_file(Vec::new(), findings);
            report::print(&reports, args.format, "lexicon file(s)");
            return Outcome::Findings;
        }
        Err(e) => {
            eprintln!("error: {e}");
            return Outcome::Failed;
        }
    };
    let opts = emit::Options {
        support: args.support.clone(),
        root: args.root.clone(),
        command: "gelstore lex gen".into(),
    };
    let files = match emit::generate(&catalog, &opts) {
        Ok(files) => files,
        Err(problems) => {
            for p in problems {
                eprintln!("error: {p}");
            }
            return Outcome::Findings;
        }
    };
    match sync_generated(&args.out, &files, args.check) {
        Ok(drift) => {
            let label = |f: &str| args.out.join(f).display().to_string();
            let names = files.iter().map(|f| label(&f.path)).collect();
            let findings = drift
                .into_iter()
                .map(|(file, message)| Finding::new(label(&file), "", GENERATED_DRIFT, message))
                .collect();
            let reports = report::group_by_file(names, findings);
            report::print(&reports, args.format, "generated file(s)")
        }
        Err(e) => {
            eprintln!("error: {e}");
            Outcome::Failed
        }
    }
}

/// Compares (`check`) or writes the generated files under `out`. Returns
/// the differences as (relative path, message); when writing, only
/// problems that writing did not fix are returned (none). Files under
/// `out` that carry the generated marker but are no longer generated are
/// reported, or deleted when writing; hand-written files are left alone.
pub fn sync_generated(
    out: &std::path::Path,
    files: &[emit::File],
    check: bool,
) -> std::io::Result<Vec<(String, String)>> {
    let mut drift = Vec::new();
    for f in files {
        let path = out.join(&f.path);
        match std::fs::read_to_string(&path) {
            Ok(old) if old == f.contents => continue,
            Ok(_) if check => drift.push((
                f.path.clone(),
                "differs from what the lexicons generate; run `gelstore lex gen`".to_string(),
            )),
            Err(e) if check && e.kind() == std::io::ErrorKind::NotFound => drift.push((
                f.path.clone(),
                "is missing; run `gelstore lex gen`".to_string(),
            )),
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                std::fs::write(&path, &f.contents)?;
            }
        }
    }
    let wanted: std::collections::BTreeSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
    for stale in generated_files(out, out)? {
        if wanted.contains(stale.as_str()) {
            continue;
        }
        if check {
            drift.push((
                stale,
                "is generated but no lexicon produces it any more; run `gelstore lex gen`"
                    .to_string(),
            ));
        } else {
            std::fs::remove_file(out.join(&stale))?;
        }
    }
    Ok(drift)
}

/// The `.rs` files under `dir` whose first line carries the generated marker.
fn generated_files(base: &std::path::Path, dir: &std::path::Path) -> std::io::Result<Vec<String>> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    let mut paths: Vec<PathBuf> = entries
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    paths.sort();
    for p in paths {
        if p.is_dir() {
            out.extend(generated_files(base, &p)?);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&p)?;
            if text
                .lines()
                .next()
                .is_some_and(|l| l.contains(emit::GENERATED_MARKER))
            {
                let rel = p.strip_prefix(base).unwrap_or(&p);
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    Ok(out)
}

/// Validates a record, or — when `$type` names a non-record def such as
/// `chat.gel.assistant.defs#plainContent` (the content inside a seal) — that
/// object. The record key only applies to records.
fn check_value(catalog: &Catalog, value: &Value, rkey: Option<&str>) -> Vec<Finding> {
    let non_record_type = value.get("$type").and_then(Value::as_str).filter(|t| {
        catalog
            .resolve_type_id(t)
            .is_ok_and(|r| !matches!(r.def, Def::Record(_)))
    });
    match non_record_type {
        Some(type_id) => validate::validate_value(catalog, type_id, value),
        None => validate::validate_record(catalog, value, rkey),
    }
}

/// Loads a catalog to check against; its own lint problems go to stderr as a
/// warning (they are `lex lint`'s business) but do not stop the command.
fn load_catalog_quietly(paths: &[PathBuf]) -> Result<Catalog, LoadError> {
    let (catalog, findings) = Catalog::load_paths(paths)?;
    if !findings.is_empty() {
        eprintln!(
            "warning: the lexicon catalog has {} structural problem(s); run `gelstore lex lint` on it",
            findings.len()
        );
    }
    Ok(catalog)
}

/// Reads one JSON record from a file or `-` (stdin), with a size cap.
fn read_record(file: &str) -> Result<Value, String> {
    let mut bytes = Vec::new();
    let limited = |r: &mut dyn Read, bytes: &mut Vec<u8>| {
        r.take(MAX_RECORD_BYTES + 1)
            .read_to_end(bytes)
            .map_err(|e| format!("cannot read: {e}"))
    };
    if file == "-" {
        limited(&mut std::io::stdin().lock(), &mut bytes)?;
    } else {
        let mut f = std::fs::File::open(file).map_err(|e| format!("cannot read: {e}"))?;
        limited(&mut f, &mut bytes)?;
    }
    if bytes.len() as u64 > MAX_RECORD_BYTES {
        return Err(format!(
            "over the {MAX_RECORD_BYTES}-byte limit for a record"
        ));
    }
    serde_json::from_slice(&bytes).map_err(|e| format!("not valid JSON: {e}"))
}
