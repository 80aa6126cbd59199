//! `gelstore repo …`: the local repository (in the `--data` folder) and CAR
//! files.
//!
//! Exit codes: 0 success; 1 the operation was refused or failed on its input
//! (a bad write, a record that does not exist, a CAR that does not verify, a
//! corrupt store), with a message on stderr and nothing changed; 2 usage, or
//! an environment failure (I/O, the store is locked by another process).

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write as _};
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde_json::{Map, Value, json};

use super::background_file::BackgroundFile;
use super::output_file::OutputFile;
use super::{Failure, Format, Outcome, finish, say};
use crate::crypto::PublicKey;
use crate::local_repo;
use crate::model::parse_cid;
use crate::repo::key_file::KeyFileError;
use crate::repo::mst::RecordOp;
use crate::repo::repository::{
    CommitInfo, ImportOptions, RepoError, Repository, Write, verify_car,
};
use crate::repo::tid::Tid;
use crate::store::EngineKind;

/// Longest line `repo apply` reads (a record block is at most 2 MiB of
/// DAG-CBOR; its JSON, with base64 bytes, is larger).
const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;

#[derive(Subcommand, Debug)]
pub enum RepoCommand {
    /// Create the repository and its identity if missing; print the DID.
    Init(InitArgs),
    /// Apply JSON-lines writes from stdin as one signed commit.
    ///
    /// Each line: {"action": "create"|"update"|"delete", "collection",
    /// "rkey", "value" (create, update), "swap" (optional for update and
    /// delete: the CID the record must have now)}. Nothing is written unless
    /// every line is valid and every write succeeds.
    Apply(FormatArg),
    /// Print a record's JSON.
    Get(GetArgs),
    /// List records (`collection/rkey cid`), all or of one collection.
    Ls(LsArgs),
    /// Export the repository (or the changes since a rev) as a CAR file.
    Export(ExportArgs),
    /// Import a repository CAR into an empty data folder, verifying it.
    Import(ImportArgs),
    /// Verify a repository CAR: commit signature, MST, records.
    Verify(VerifyArgs),
    /// Print the DID, head commit, rev, MST root, record count and the retained event window.
    Info(FormatArg),
    /// Check the local store against all its invariants.
    Check(FormatArg),
}

#[derive(Args, Debug)]
pub struct FormatArg {
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct InitArgs {
    /// The store engine of a new store: redb (the default) or sled; also
    /// `GELSTORE_STORE_ENGINE`. A store that exists keeps its engine.
    #[arg(long, value_name = "ENGINE")]
    pub engine: Option<EngineKind>,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct GetArgs {
    /// Collection NSID.
    pub collection: String,
    /// Record key.
    pub rkey: String,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct LsArgs {
    /// Only this collection.
    pub collection: Option<String>,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// The CAR file to write (`-` for stdout). A file appears whole or not
    /// at all (written beside it, then renamed); a pipe or a device is
    /// written in place.
    #[arg(long, value_name = "FILE.car")]
    pub out: PathBuf,
    /// Only the blocks created after this rev (a TID).
    #[arg(long, value_name = "REV")]
    pub since: Option<String>,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// The CAR file (`-` for stdin).
    pub file: PathBuf,
    #[command(flatten)]
    pub check: CheckArgs,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The CAR file (`-` for stdin).
    pub file: PathBuf,
    #[command(flatten)]
    pub check: CheckArgs,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The DID the commit must be by.
    #[arg(long)]
    pub did: Option<String>,
    /// The key the commit must be signed with (a did:key). Defaults to the
    /// commit's DID when that is a did:key.
    #[arg(long, value_name = "DID_KEY")]
    pub key: Option<String>,
}

impl From<RepoError> for Failure {
    fn from(e: RepoError) -> Self {
        let environment = matches!(
            &e,
            RepoError::Engine(_)
                | RepoError::KeyFile(KeyFileError::Io { .. })
                | RepoError::Car(crate::repo::car::CarError::Io(_))
        );
        let message = e.to_string();
        if environment {
            Failure::env(message)
        } else {
            Failure::input(message)
        }
    }
}

type Result<T> = std::result::Result<T, Failure>;

pub fn run(data: &Path, cmd: RepoCommand) -> Outcome {
    let result = match cmd {
        RepoCommand::Init(a) => init(data, a.engine, a.format),
        RepoCommand::Apply(a) => apply(data, a.format),
        RepoCommand::Get(a) => get(data, a),
        RepoCommand::Ls(a) => ls(data, a),
        RepoCommand::Export(a) => export(data, a),
        RepoCommand::Import(a) => import(data, a),
        RepoCommand::Verify(a) => verify(a),
        RepoCommand::Info(a) => info(data, a.format),
        RepoCommand::Check(a) => check(data, a.format),
    };
    finish(result)
}

fn init(data: &Path, engine: Option<EngineKind>, format: Format) -> Result<()> {
    let repo = match engine {
        Some(engine) => local_repo::init_with_engine(data, engine)?,
        None => local_repo::init(data)?,
    };
    match format {
        Format::Human => say(repo.did()),
        Format::Json => say(head_json(&repo)),
    }
    Ok(())
}

fn head_json(repo: &Repository) -> Value {
    let head = repo.head();
    json!({
        "did": repo.did(),
        "commit": head.commit.to_string(),
        "rev": head.rev.to_string(),
        "data": head.data.to_string(),
        "records": repo.record_count(),
    })
}

fn apply(data: &Path, format: Format) -> Result<()> {
    let writes = read_writes(io::stdin().lock())?;
    if writes.is_empty() {
        return Err(Failure::input("no writes on stdin: nothing to commit"));
    }
    let mut repo = local_repo::open(data)?;
    let info = repo.apply(&writes)?;
    match format {
        Format::Human => say(format_args!(
            "{} {} ({} op(s), {} block(s) written, {} deleted)",
            info.head.rev,
            info.head.commit,
            info.ops.len(),
            info.blocks.written,
            info.blocks.deleted
        )),
        Format::Json => say(commit_json(&info)),
    }
    Ok(())
}

fn commit_json(info: &CommitInfo) -> Value {
    let ops: Vec<Value> = info.ops.iter().map(op_json).collect();
    json!({
        "rev": info.head.rev.to_string(),
        "commit": info.head.commit.to_string(),
        "data": info.head.data.to_string(),
        "prev": info.prev.map(|c| c.to_string()),
        "ops": ops,
        "blocksWritten": info.blocks.written,
        "blocksDeleted": info.blocks.deleted,
    })
}

fn op_json(op: &RecordOp) -> Value {
    let action = match (op.prev, op.cid) {
        (None, _) => "create",
        (Some(_), Some(_)) => "update",
        (Some(_), None) => "delete",
    };
    json!({
        "action": action,
        "path": op.key,
        "cid": op.cid.map(|c| c.to_string()),
        "prev": op.prev.map(|c| c.to_string()),
    })
}

/// Reads and parses every line first, so a bad line changes nothing.
fn read_writes(input: impl BufRead) -> Result<Vec<Write>> {
    let mut writes = Vec::new();
    let mut input = input.take(u64::MAX);
    let mut line = Vec::new();
    for number in 1.. {
        line.clear();
        input.set_limit(MAX_LINE_BYTES as u64 + 1);
        let n = input
            .read_until(b'\n', &mut line)
            .map_err(|e| Failure::env(format!("reading stdin: {e}")))?;
        if n == 0 {
            break;
        }
        if line.len() > MAX_LINE_BYTES {
            return Err(Failure::input(format!(
                "line {number}: longer than the {MAX_LINE_BYTES}-byte limit"
            )));
        }
        let text = String::from_utf8_lossy(&line);
        if text.trim().is_empty() {
            continue;
        }
        let write =
            parse_write(&text).map_err(|m| Failure::input(format!("line {number}: {m}")))?;
        writes.push(write);
    }
    Ok(writes)
}

fn parse_write(text: &str) -> std::result::Result<Write, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("malformed JSON: {e}"))?;
    let Value::Object(mut obj) = value else {
        return Err("a write must be a JSON object".into());
    };
    if let Some(k) = obj
        .keys()
        .find(|k| !["action", "collection", "rkey", "value", "swap"].contains(&k.as_str()))
    {
        return Err(format!(
            "unknown field {:?} (allowed: action, collection, rkey, value, swap)",
            k.chars().take(50).collect::<String>()
        ));
    }
    let string = |obj: &mut Map<String, Value>, name: &str| match obj.remove(name) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(format!("{name:?} must be a string")),
        None => Err(format!("missing {name:?}")),
    };
    enum Action {
        Create,
        Update,
        Delete,
    }
    let action = match string(&mut obj, "action")?.as_str() {
        "create" => Action::Create,
        "update" => Action::Update,
        "delete" => Action::Delete,
        other => {
            return Err(format!(
                "unknown action {:?} (create, update or delete)",
                other.chars().take(50).collect::<String>()
            ));
        }
    };
    let collection = string(&mut obj, "collection")?;
    let rkey = string(&mut obj, "rkey")?;
    let swap = match obj.remove("swap") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => {
            Some(parse_cid(&s).map_err(|e| format!("\"swap\" is not a CID: {e}"))?)
        }
        Some(_) => return Err("\"swap\" must be a CID string".into()),
    };
    let value = obj.remove("value");
    match action {
        Action::Create => {
            if swap.is_some() {
                return Err("create takes no \"swap\"".into());
            }
            let value = value.ok_or("create needs a \"value\"")?;
            Ok(Write::Create {
                collection,
                rkey,
                value,
            })
        }
        Action::Update => Ok(Write::Update {
            collection,
            rkey,
            value: value.ok_or("update needs a \"value\"")?,
            swap,
        }),
        Action::Delete => {
            if value.is_some() {
                return Err("delete takes no \"value\"".into());
            }
            Ok(Write::Delete {
                collection,
                rkey,
                swap,
            })
        }
    }
}

fn get(data: &Path, args: GetArgs) -> Result<()> {
    let repo = local_repo::open(data)?;
    let Some(entry) = repo.get(&args.collection, &args.rkey)? else {
        return Err(Failure::input(format!(
            "record {}/{} does not exist",
            args.collection, args.rkey
        )));
    };
    match args.format {
        Format::Human => {
            say(serde_json::to_string_pretty(&entry.value)
                .unwrap_or_else(|_| entry.value.to_string()))
        }
        Format::Json => say(json!({
            "collection": args.collection,
            "rkey": args.rkey,
            "cid": entry.cid.to_string(),
            "value": entry.value,
        })),
    }
    Ok(())
}

fn ls(data: &Path, args: LsArgs) -> Result<()> {
    let repo = local_repo::open(data)?;
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    for item in repo.list(args.collection.as_deref())? {
        let (key, cid) = item?;
        let line = match args.format {
            Format::Human => format!("{key} {cid}"),
            Format::Json => {
                let (collection, rkey) = key.split_once('/').unwrap_or((&key, ""));
                json!({"collection": collection, "rkey": rkey, "cid": cid.to_string()}).to_string()
            }
        };
        if writeln!(out, "{line}").is_err() {
            return Ok(());
        }
    }
    let _ = out.flush();
    Ok(())
}

fn export(data: &Path, args: ExportArgs) -> Result<()> {
    let since = match &args.since {
        Some(s) => Some(Tid::parse(s).map_err(|e| Failure::input(format!("--since: {e}")))?),
        None => None,
    };
    let repo = local_repo::open(data)?;
    let stats = if args.out == Path::new("-") {
        let (mut out, stats) = repo.export(BufWriter::new(io::stdout().lock()), since)?;
        out.flush()
            .map_err(|e| Failure::env(format!("writing stdout: {e}")))?;
        stats
    } else {
        let (output, file) = OutputFile::create(&args.out)?;
        let written = BackgroundFile::new(file)
            .map_err(|e| Failure::env(format!("{}: {e}", args.out.display())))
            .and_then(|out| Ok(repo.export(out, since)?))
            .and_then(|(out, stats)| {
                let file = out
                    .finish()
                    .map_err(|e| Failure::env(format!("{}: {e}", args.out.display())))?;
                Ok((file, stats))
            });
        match written {
            Ok((file, stats)) => {
                output.commit(file)?;
                stats
            }
            Err(e) => {
                output.discard();
                return Err(e);
            }
        }
    };
    let head = repo.head();
    match args.format {
        Format::Human => eprintln!(
            "exported {} block(s), {} bytes, rev {}{}",
            stats.blocks,
            stats.bytes,
            head.rev,
            since.map(|s| format!(" (since {s})")).unwrap_or_default()
        ),
        Format::Json => say(json!({
            "file": args.out.display().to_string(),
            "commit": head.commit.to_string(),
            "rev": head.rev.to_string(),
            "since": since.map(|s| s.to_string()),
            "blocks": stats.blocks,
            "bytes": stats.bytes,
        })),
    }
    Ok(())
}

/// Writes `bytes` to `out` (`-`: stdout; a file as [`OutputFile`] does).
pub(super) fn write_output(out: &Path, bytes: &[u8]) -> Result<()> {
    if out == Path::new("-") {
        let mut stdout = io::stdout().lock();
        return stdout
            .write_all(bytes)
            .and_then(|()| stdout.flush())
            .map_err(|e| Failure::env(format!("writing stdout: {e}")));
    }
    let (output, mut file) = OutputFile::create(out)?;
    match file.write_all(bytes) {
        Ok(()) => output.commit(file),
        Err(e) => {
            output.discard();
            Err(Failure::env(format!("{}: {e}", out.display())))
        }
    }
}

fn open_input(file: &Path) -> Result<Box<dyn Read>> {
    if file == Path::new("-") {
        return Ok(Box::new(BufReader::new(io::stdin())));
    }
    let f = File::open(file).map_err(|e| Failure::env(format!("{}: {e}", file.display())))?;
    Ok(Box::new(BufReader::new(f)))
}

fn parse_key(check: &CheckArgs) -> Result<Option<PublicKey>> {
    check
        .key
        .as_deref()
        .map(|k| PublicKey::from_did_key(k).map_err(|e| Failure::input(format!("--key: {e}"))))
        .transpose()
}

fn import(data: &Path, args: ImportArgs) -> Result<()> {
    let key = parse_key(&args.check)?;
    let options = ImportOptions {
        did: args.check.did.as_deref(),
        key: key.as_ref(),
        limits: None,
    };
    let input = open_input(&args.file)?;
    let (repo, stats) = Repository::import(data, input, &options)?;
    match args.format {
        Format::Human => say(format_args!(
            "imported {} record(s) of {} at rev {} ({} block(s); {} unreachable block(s) skipped){}",
            stats.records,
            repo.did(),
            repo.head().rev,
            stats.blocks,
            stats.unreachable_blocks,
            if repo.is_writable() {
                ""
            } else {
                "; read-only: no signing key for this DID"
            }
        )),
        Format::Json => {
            let mut v = head_json(&repo);
            v["blocks"] = json!(stats.blocks);
            v["unreachableBlocks"] = json!(stats.unreachable_blocks);
            v["writable"] = json!(repo.is_writable());
            v["engine"] = json!(repo.engine().name());
            say(v)
        }
    }
    Ok(())
}

fn verify(args: VerifyArgs) -> Result<()> {
    let key = parse_key(&args.check)?;
    let options = ImportOptions {
        did: args.check.did.as_deref(),
        key: key.as_ref(),
        limits: None,
    };
    let input = open_input(&args.file)?;
    let verified = verify_car(input, &options)?;
    let s = verified.summary();
    match args.format {
        Format::Human => say(format_args!(
            "ok: {} rev {} commit {} data {} ({} record(s), signature verified)",
            s.did, s.rev, s.commit_cid, s.data_cid, s.record_count
        )),
        Format::Json => say(json!({
            "did": s.did,
            "rev": s.rev.to_string(),
            "commit": s.commit_cid.to_string(),
            "data": s.data_cid.to_string(),
            "records": s.record_count,
        })),
    }
    Ok(())
}

fn info(data: &Path, format: Format) -> Result<()> {
    let mut repo = local_repo::open(data)?;
    // The firehose's retained events: what the store holds beside the
    // repository itself.
    let (events, event_bytes) = repo.event_window()?;
    match format {
        Format::Human => {
            let head = repo.head();
            say(format_args!("did      {}", repo.did()));
            say(format_args!("commit   {}", head.commit));
            say(format_args!("rev      {}", head.rev));
            say(format_args!("data     {}", head.data));
            say(format_args!("records  {}", repo.record_count()));
            say(format_args!("engine   {}", repo.engine().name()));
            say(format_args!(
                "events   {events} kept, {:.1} MB (window: the last {}, at most {:.1} MB)",
                event_bytes as f64 / 1e6,
                repo.event_retention(),
                repo.event_retention_bytes() as f64 / 1e6
            ));
            say(format_args!(
                "writable {}",
                if repo.is_writable() { "yes" } else { "no" }
            ));
        }
        Format::Json => {
            let mut v = head_json(&repo);
            v["writable"] = json!(repo.is_writable());
            v["engine"] = json!(repo.engine().name());
            v["events"] = json!({"count": events, "bytes": event_bytes});
            say(v)
        }
    }
    Ok(())
}

fn check(data: &Path, format: Format) -> Result<()> {
    let repo = local_repo::open(data)?;
    let report = repo.check()?;
    match format {
        Format::Human => say(format_args!(
            "ok: {} rev {}: {} record(s), {} MST node(s), {} block(s){}",
            report.did,
            report.rev,
            report.records,
            report.nodes,
            report.blocks,
            if report.signature_checked {
                ", signature verified"
            } else {
                ", signature not checked (no key for this DID)"
            }
        )),
        Format::Json => say(json!({
            "did": report.did,
            "rev": report.rev,
            "commit": report.commit.to_string(),
            "data": report.data.to_string(),
            "records": report.records,
            "nodes": report.nodes,
            "blocks": report.blocks,
            "signatureChecked": report.signature_checked,
        })),
    }
    Ok(())
}
