//! `gelstore lex …` driven as a user would: the real binary, real files,
//! exit codes and both output formats.

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

fn gelstore(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gelstore"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run gelstore")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json_lines(o: &Output) -> Vec<Value> {
    stdout(o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect()
}

#[test]
fn our_lexicons_lint_clean() {
    let o = gelstore(&["lex", "lint"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        stdout(&o),
        String::from_utf8_lossy(&o.stderr)
    );
    let o = gelstore(&["lex", "lint", "lexicons", "--format", "json"]);
    let lines = json_lines(&o);
    assert!(lines.len() >= 6, "one line per lexicon file: {lines:?}");
    assert!(
        lines
            .iter()
            .all(|l| l["valid"] == true && l["errors"] == serde_json::json!([]))
    );
}

#[test]
fn chat_record_fixtures_check_as_expected() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/records");
    let expectations: Value =
        serde_json::from_slice(&std::fs::read(dir.join("expectations.json")).unwrap()).unwrap();
    let expectations = expectations.as_object().unwrap();
    assert!(expectations.len() >= 20, "a real corpus of fixtures");
    let mut failures = Vec::new();
    for (name, expect) in expectations {
        let sub = if expect["valid"] == true {
            "valid"
        } else {
            "invalid"
        };
        let file = format!("fixtures/records/{sub}/{name}");
        let mut args = vec!["lex", "check", "--format", "json"];
        let rkey = expect["rkey"].as_str();
        if let Some(rkey) = rkey {
            args.extend(["--rkey", rkey]);
        }
        args.push(&file);
        let o = gelstore(&args);
        let lines = json_lines(&o);
        let want_code = if expect["valid"] == true { 0 } else { 1 };
        let got_paths: Vec<&str> = lines
            .first()
            .and_then(|l| l["errors"].as_array())
            .map(|errs| errs.iter().filter_map(|e| e["path"].as_str()).collect())
            .unwrap_or_default();
        let want_paths: Vec<&str> = expect["errors"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if o.status.code() != Some(want_code) || got_paths != want_paths {
            failures.push(format!(
                "{file}: exit {:?} (want {want_code}), paths {got_paths:?} (want {want_paths:?}): {}",
                o.status.code(),
                stdout(&o)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Many files in one call (checked on every core): one report per file,
/// in the order given, each verdict the same as checking it alone; an
/// unreadable one among them is named and the exit is 2.
#[test]
fn many_files_are_reported_in_the_order_given() {
    const RKEY: &str = "3lbqzdw5pzk22.r0";
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/records");
    let expectations: Value =
        serde_json::from_slice(&std::fs::read(dir.join("expectations.json")).unwrap()).unwrap();
    let mut files = Vec::new();
    let mut verdicts = Vec::new();
    for (name, expect) in expectations.as_object().unwrap() {
        // One --rkey for the call: the files written at this key.
        if expect["rkey"] != RKEY {
            continue;
        }
        let sub = if expect["valid"] == true {
            "valid"
        } else {
            "invalid"
        };
        files.push(format!("fixtures/records/{sub}/{name}"));
        verdicts.push(expect["valid"] == true);
    }
    assert!(files.len() >= 10, "{files:?}");
    // Reversed, so the order is not the folder's.
    files.reverse();
    verdicts.reverse();
    let mut args = vec!["lex", "check", "--format", "json", "--rkey", RKEY];
    args.extend(files.iter().map(String::as_str));
    let lines = json_lines(&gelstore(&args));
    let got: Vec<(&str, bool)> = lines
        .iter()
        .map(|l| (l["file"].as_str().unwrap(), l["valid"] == true))
        .collect();
    let want: Vec<(&str, bool)> = files.iter().map(String::as_str).zip(verdicts).collect();
    assert_eq!(got, want);

    args.insert(6 + files.len() / 2, "/nonexistent/middle.json");
    let o = gelstore(&args);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("/nonexistent/middle.json"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        json_lines(&o).len(),
        files.len(),
        "the others still reported"
    );
}

#[test]
fn human_output_is_file_path_message_lines() {
    let o = gelstore(&["lex", "lint", "fixtures/lint"]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(!out.is_empty());
    for line in out.lines() {
        let (file, rest) = line
            .split_once(":/")
            .unwrap_or_else(|| panic!("no FILE:/path in {line}"));
        assert!(file.ends_with(".json"), "{line}");
        assert!(rest.contains(": ") && rest.ends_with(']'), "{line}");
    }
}

#[test]
fn check_reads_stdin_and_reports_all_errors() {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_gelstore"))
        .args(["lex", "check", "--format", "json", "-"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(br#"{"$type":"chat.gel.assistant.message","role":7,"createdAt":"yesterday"}"#)
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let lines = json_lines(&o);
    let paths: Vec<&str> = lines[0]["errors"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["path"].as_str())
        .collect();
    assert!(
        paths.contains(&"/role") && paths.contains(&"/createdAt"),
        "{paths:?}"
    );
}

#[test]
fn io_and_usage_errors_exit_2_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let not_json = dir.path().join("broken.json");
    std::fs::write(&not_json, b"{ not json").unwrap();
    let bin_garbage = dir.path().join("garbage.json");
    std::fs::write(&bin_garbage, [0xff, 0xfe, 0x00, 0x81]).unwrap();
    for args in [
        vec!["lex", "lint", not_json.to_str().unwrap()],
        vec!["lex", "lint", bin_garbage.to_str().unwrap()],
        vec!["lex", "lint", "/nonexistent/lexicons"],
        vec!["lex", "check", "/nonexistent/record.json"],
        vec!["lex", "check", not_json.to_str().unwrap()],
        vec!["lex", "frobnicate"],
    ] {
        let o = gelstore(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(!err.trim().is_empty(), "{args:?}: says nothing");
    }
}

#[test]
fn diff_reports_breaking_changes_and_exits_1() {
    let same = gelstore(&["lex", "diff", "lexicons", "lexicons"]);
    assert_eq!(same.status.code(), Some(0), "{}", stdout(&same));
    assert!(stdout(&same).is_empty());

    // Lower a limit in a copy of our lexicons: a breaking change.
    let dir = tempfile::tempdir().unwrap();
    let new = dir.path().join("lexicons/chat/gel/assistant");
    std::fs::create_dir_all(&new).unwrap();
    for entry in std::fs::read_dir("lexicons/chat/gel/assistant").unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), new.join(entry.file_name())).unwrap();
    }
    let defs_path = new.join("defs.json");
    let defs = std::fs::read_to_string(&defs_path).unwrap();
    assert!(defs.contains("500000"));
    std::fs::write(&defs_path, defs.replacen("500000", "400000", 1)).unwrap();
    let o = gelstore(&[
        "lex",
        "diff",
        "lexicons",
        dir.path().join("lexicons").to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let lines = json_lines(&o);
    let defs_line = lines
        .iter()
        .find(|l| l["file"].as_str().is_some_and(|f| f.ends_with("defs.json")))
        .unwrap();
    assert_eq!(defs_line["valid"], false);
    assert!(
        defs_line["errors"][0]["path"]
            .as_str()
            .unwrap()
            .ends_with("maxLength")
    );
}

#[test]
fn lex_gen_check_passes_on_the_checked_in_code_and_reports_drift() {
    let o = gelstore(&["lex", "gen", "--check"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let o = gelstore(&["lex", "gen", "--check", "--out", out]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("[generated-drift]"), "{}", stdout(&o));
    let o = gelstore(&["lex", "gen", "--out", out]);
    assert_eq!(o.status.code(), Some(0));
    let o = gelstore(&["lex", "gen", "--check", "--out", out]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
}

/// A lexicon with two findings at known lines, in a temporary folder.
fn two_findings() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("com/example/media.json");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(
        &file,
        "{\n  \"lexicon\": 1,\n  \"id\": \"com.example.media\",\n  \"defs\": {\n    \"main\": {\n      \"type\": \"object\",\n      \"properties\": {\n        \"a\": {\"type\": \"blob\", \"accept\": []},\n        \"b\": {\"type\": \"blob\", \"accept\": [\"image/png\", \"50%,\\nx\"]}\n      }\n    }\n  }\n}\n",
    )
    .unwrap();
    let file = file.to_str().unwrap().to_owned();
    (dir, file)
}

#[test]
fn github_format_annotates_the_line_of_each_finding() {
    let (_dir, file) = two_findings();
    let o = gelstore(&["lex", "lint", "--format", "github", &file]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "the exit status of the other formats"
    );
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines[0].starts_with(&format!(
            "::error file={file},line=8,col=31,title=bad-accept::/defs/main/properties/a/accept: "
        )),
        "{}",
        lines[0]
    );
    // The second entry of b's accept list; the message's newline and %
    // are escaped so the annotation stays one command.
    assert!(lines[1].contains(",line=9,col=55,"), "{}", lines[1]);
    assert!(lines[1].contains("50%25,%0Ax"), "{}", lines[1]);
}

#[test]
fn sarif_format_is_one_log_with_regions() {
    let (_dir, file) = two_findings();
    let o = gelstore(&["lex", "lint", "--format", "sarif", &file]);
    assert_eq!(o.status.code(), Some(1));
    let log: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(log["version"], "2.1.0");
    let run = &log["runs"][0];
    assert_eq!(run["tool"]["driver"]["name"], "gelstore");
    assert_eq!(run["tool"]["driver"]["rules"][0]["id"], "bad-accept");
    let results = run["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    let place = &results[0]["locations"][0]["physicalLocation"];
    // An absolute path as a file URI (tests/lex/lex_formats.rs checks
    // the encoding of spaces and non-ASCII names).
    assert_eq!(place["artifactLocation"]["uri"], format!("file://{file}"));
    assert_eq!(place["region"]["startLine"], 8);
    assert_eq!(place["region"]["startColumn"], 31);
    assert_eq!(results[0]["level"], "error");
    // A clean run is an empty log, exit 0.
    let clean = gelstore(&["lex", "lint", "--format", "sarif", "lexicons"]);
    assert_eq!(clean.status.code(), Some(0));
    let log: Value = serde_json::from_str(&stdout(&clean)).unwrap();
    assert_eq!(log["runs"][0]["results"], serde_json::json!([]));
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `lex diff --base REV DIR`: the folder as committed at REV (read from
/// git; the work tree is not touched) against the folder as it is.
#[test]
fn diff_against_a_git_revision_reads_the_old_set_from_git() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    git(root, &["init", "-q"]);
    let dir = root.join("lexicons/chat/gel/assistant");
    std::fs::create_dir_all(&dir).unwrap();
    let ours = Path::new(env!("CARGO_MANIFEST_DIR")).join("lexicons/chat/gel/assistant/chat.json");
    let original = std::fs::read_to_string(&ours).unwrap();
    std::fs::write(dir.join("chat.json"), &original).unwrap();
    git(root, &["add", "."]);
    git(root, &["commit", "-q", "-m", "lexicons"]);
    let lexicons = root.join("lexicons");
    let lexicons = lexicons.to_str().unwrap();

    let same = gelstore(&["lex", "diff", "--base", "HEAD", lexicons]);
    assert_eq!(same.status.code(), Some(0), "{}", stdout(&same));

    // A new required field, uncommitted: breaking against HEAD.
    let mut doc: Value = serde_json::from_str(&original).unwrap();
    doc["defs"]["main"]["record"]["required"]
        .as_array_mut()
        .unwrap()
        .push("owner".into());
    doc["defs"]["main"]["record"]["properties"]["owner"] = serde_json::json!({"type": "string"});
    std::fs::write(
        dir.join("chat.json"),
        serde_json::to_string_pretty(&doc).unwrap(),
    )
    .unwrap();
    let o = gelstore(&[
        "lex", "diff", "--base", "HEAD", lexicons, "--format", "json",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let text = stdout(&o);
    assert!(text.contains("breaking"), "{text}");
    // The committed file is what git has, the work tree kept its change.
    assert!(
        std::fs::read_to_string(dir.join("chat.json"))
            .unwrap()
            .contains("owner")
    );

    let bad = gelstore(&["lex", "diff", "--base", "no-such-rev", lexicons]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("git ls-tree"));
    let usage = gelstore(&["lex", "diff", lexicons]);
    assert_eq!(usage.status.code(), Some(2));
}

/// `lex new`: a template per primary type that lints clean, never
/// written over an existing file.
#[test]
fn new_lexicons_start_from_templates_that_lint_clean() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    for kind in ["record", "query", "procedure", "subscription"] {
        let nsid = format!("com.example.fresh.{kind}");
        let o = gelstore(&["lex", "new", kind, &nsid, "--out", out]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            stdout(&o)
                .trim()
                .ends_with(&format!("com/example/fresh/{kind}.json"))
        );
    }
    let lint = gelstore(&["lex", "lint", out]);
    assert_eq!(lint.status.code(), Some(0), "{}", stdout(&lint));
    let summary = String::from_utf8_lossy(&lint.stderr);
    assert!(
        summary.contains("4 lexicon file(s) checked: 0 finding(s)"),
        "{summary}"
    );
    let again = gelstore(&[
        "lex",
        "new",
        "record",
        "com.example.fresh.record",
        "--out",
        out,
    ]);
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("not overwritten"));
    let bad = gelstore(&["lex", "new", "record", "not an nsid", "--out", out]);
    assert_eq!(bad.status.code(), Some(1));
}
