//! Printing findings per input, in the human or JSON format, and turning
//! them into an exit status.

use super::{Format, Outcome};
use gelstore_codegen::Finding;
use serde_json::json;
use std::io::Write;

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
pub fn print(reports: &[InputReport], format: Format, what: &str) -> Outcome {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut error_count = 0;
    for r in reports {
        error_count += r.errors.len();
        // A closed stdout (e.g. `| head`) is not worth a panic or an error exit.
        let _ = match format {
            Format::Human => print_human(&mut out, r),
            Format::Json => print_json(&mut out, r),
        };
    }
    let _ = out.flush();
    if format == Format::Human {
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
