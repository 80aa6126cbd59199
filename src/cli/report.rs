//! Printing findings per input (for people, for scripts, as GitHub
//! workflow annotations or as a SARIF log for code scanning), and turning
//! them into an exit status (the same for every format).

use super::Outcome;
use super::locate::{Position, locate_all};
use clap::ValueEnum;
use gelstore_lexicon::Finding;
use serde_json::json;
use std::io::Write;

/// How the `lex` commands print their findings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LexFormat {
    /// `FILE:/json/path: message [rule]` lines, then a summary on stderr.
    #[default]
    Human,
    /// One `{"file","valid","errors":[{"path","message","rule"}]}` object
    /// per input.
    Json,
    /// GitHub Actions workflow commands (`::error file=…,line=…,col=…`):
    /// annotations on the line of each finding.
    Github,
    /// One SARIF 2.1.0 log (for code scanning), with the line and column
    /// of each finding.
    Sarif,
}

/// What one input (a lexicon file, a record file) produced.
pub struct InputReport {
    pub file: String,
    /// Problems: any of them makes the run exit 1.
    pub errors: Vec<Finding>,
    /// Informational lines (e.g. safe lexicon changes): printed, never fatal.
    pub notes: Vec<Finding>,
}

impl InputReport {
    pub fn new(file: impl Into<String>) -> Self {
        InputReport {
            file: file.into(),
            errors: Vec::new(),
            notes: Vec::new(),
        }
    }
}

/// Prints every report to stdout and a one-line summary to stderr (human
/// format only). `what` names the inputs in the summary ("lexicon files").
pub fn print(reports: &[InputReport], format: LexFormat, what: &str) -> Outcome {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let error_count: usize = reports.iter().map(|r| r.errors.len()).sum();
    // A closed stdout (e.g. `| head`) is not worth a panic or an error exit.
    let _ = match format {
        LexFormat::Human => reports.iter().try_for_each(|r| print_human(&mut out, r)),
        LexFormat::Json => reports.iter().try_for_each(|r| print_json(&mut out, r)),
        LexFormat::Github => reports.iter().try_for_each(|r| print_github(&mut out, r)),
        LexFormat::Sarif => print_sarif(&mut out, reports),
    };
    let _ = out.flush();
    if format == LexFormat::Human {
        let failing = reports.iter().filter(|r| !r.errors.is_empty()).count();
        eprintln!(
            "{} {what} checked: {error_count} finding(s) in {failing} file(s)",
            reports.len()
        );
    }
    if error_count == 0 {
        Outcome::Clean
    } else {
        Outcome::Findings
    }
}

fn print_human(out: &mut impl Write, r: &InputReport) -> std::io::Result<()> {
    for f in &r.errors {
        writeln!(out, "{f}")?;
    }
    for f in &r.notes {
        let path = if f.path.is_empty() { "/" } else { &f.path };
        writeln!(out, "{}:{}: note: {} [{}]", f.file, path, f.message, f.rule)?;
    }
    Ok(())
}

fn print_json(out: &mut impl Write, r: &InputReport) -> std::io::Result<()> {
    let mut line = json!({
        "file": r.file,
        "valid": r.errors.is_empty(),
        "errors": r.errors,
    });
    if !r.notes.is_empty() {
        line["notes"] = json!(r.notes);
    }
    writeln!(out, "{line}")
}

/// The position of each finding of `r` in its file (its errors, then its
/// notes), the file read and parsed once; an input that is not a readable
/// file, such as stdin, puts its findings on line 1.
fn places(r: &InputReport) -> Vec<Position> {
    let findings = r.errors.iter().chain(&r.notes);
    let pointers: Vec<&str> = findings.map(|f| f.path.as_str()).collect();
    match std::fs::read_to_string(&r.file) {
        Ok(text) if !pointers.is_empty() => locate_all(&text, &pointers),
        _ => vec![Position::START; pointers.len()],
    }
}

/// Each finding of `r` with its level name and position.
fn placed<'a>(
    r: &'a InputReport,
    error: &'static str,
    note: &'static str,
) -> impl Iterator<Item = (&'static str, &'a Finding, Position)> {
    let levels =
        std::iter::repeat_n(error, r.errors.len()).chain(std::iter::repeat_n(note, r.notes.len()));
    levels
        .zip(r.errors.iter().chain(&r.notes))
        .zip(places(r))
        .map(|((level, f), at)| (level, f, at))
}

/// Escapes workflow-command data (`%`, CR, LF) and, for properties, also
/// `:` and `,`.
fn github_escape(s: &str, property: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '%' => out.push_str("%25"),
            '\r' => out.push_str("%0D"),
            '\n' => out.push_str("%0A"),
            ':' if property => out.push_str("%3A"),
            ',' if property => out.push_str("%2C"),
            c => out.push(c),
        }
    }
    out
}

fn print_github(out: &mut impl Write, r: &InputReport) -> std::io::Result<()> {
    for (level, f, Position { line, column }) in placed(r, "error", "notice") {
        let path = if f.path.is_empty() { "/" } else { &f.path };
        writeln!(
            out,
            "::{level} file={},line={line},col={column},title={}::{}",
            github_escape(&f.file, true),
            github_escape(f.rule, true),
            github_escape(&format!("{path}: {}", f.message), false),
        )?;
    }
    Ok(())
}

/// A file name as a SARIF `artifactLocation.uri`: an RFC 3986 URI
/// reference, every byte but the unreserved ones and `/` percent-encoded
/// (spaces, `%`, `:`, `#`, non-ASCII as UTF-8); an absolute path becomes a
/// `file://` URI, a relative one stays relative (code scanning takes it
/// from the repository's root).
fn artifact_uri(file: &str) -> String {
    let mut out = String::with_capacity(file.len() + 8);
    if file.starts_with('/') {
        out.push_str("file://");
    }
    for &b in file.as_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn print_sarif(out: &mut impl Write, reports: &[InputReport]) -> std::io::Result<()> {
    let mut rules: Vec<&str> = Vec::new();
    let mut results = Vec::new();
    for r in reports {
        for (level, f, Position { line, column }) in placed(r, "error", "note") {
            if !rules.contains(&f.rule) {
                rules.push(f.rule);
            }
            let path = if f.path.is_empty() { "/" } else { &f.path };
            results.push(json!({
                "ruleId": f.rule,
                "level": level,
                "message": {"text": format!("{path}: {}", f.message)},
                "locations": [{
                    "physicalLocation": {
                        "artifactLocation": {"uri": artifact_uri(&f.file)},
                        "region": {"startLine": line, "startColumn": column},
                    },
                    "logicalLocations": [{"fullyQualifiedName": path, "kind": "member"}],
                }],
            }));
        }
    }
    let log = json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "gelstore",
                "version": env!("CARGO_PKG_VERSION"),
                "rules": rules.iter().map(|id| json!({"id": id})).collect::<Vec<_>>(),
            }},
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    });
    writeln!(out, "{log}")
}

/// Groups findings by their `file`, keeping `files` (every input, also the
/// clean ones) in order and appending files only findings mention.
pub fn group_by_file(files: Vec<String>, findings: Vec<Finding>) -> Vec<InputReport> {
    let mut reports: Vec<InputReport> = files.into_iter().map(InputReport::new).collect();
    let mut index: std::collections::HashMap<String, usize> = reports
        .iter()
        .enumerate()
        .map(|(i, r)| (r.file.clone(), i))
        .collect();
    for f in findings {
        let i = *index.entry(f.file.clone()).or_insert_with(|| {
            reports.push(InputReport::new(f.file.clone()));
            reports.len() - 1
        });
        reports[i].errors.push(f);
    }
    reports
}
