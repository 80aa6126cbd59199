//! `--format sarif` and `--format github` checked against the formats
//! themselves, not only against what we expect to print:
//!
//! - every SARIF log `lex lint`, `lex check` and `lex diff` print is
//!   validated against the SARIF 2.1.0 JSON Schema by `tests/sarif`
//!   (Ajv, the schema from `@microsoft/jest-sarif`; installed here with
//!   `npm ci` when its `node_modules` is missing), which also insists that
//!   each `artifactLocation.uri` is a percent-encoded URI reference;
//! - every GitHub annotation line is parsed by the workflow-command grammar
//!   below (`::error file=F,line=L,col=C,title=T::MESSAGE`; `%25 %0D %0A`
//!   escaped in the message, and `%3A %2C` too in properties), a parser
//!   shown to reject malformed lines.
//!
//! The inputs live under a folder whose name has a space, a comma, a colon
//! and non-ASCII letters, and the findings sit on lines with non-ASCII text
//! before them, so the URI encoding, the property escaping and the columns
//! (Unicode code points) are all exercised.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};

use serde_json::Value;

use crate::support::launch;

/// The folder every input is under.
const AWKWARD: &str = "lex ünï, a:b 🦀";

fn gelstore(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gelstore"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run gelstore")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("UTF-8 output")
}

/// Runs a `lex` command that must report findings (exit 1); its stdout.
fn findings(cwd: &Path, args: &[&str]) -> String {
    let o = gelstore(cwd, args);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{args:?}: {}{}",
        stdout(&o),
        String::from_utf8_lossy(&o.stderr)
    );
    stdout(&o)
}

/// Line and column (1-based, Unicode code points) where `needle` first
/// occurs in the file.
fn position_of(file: &Path, needle: &str) -> (u64, u64) {
    let text = std::fs::read_to_string(file).unwrap();
    let at = text
        .find(needle)
        .unwrap_or_else(|| panic!("{needle} not in {}", file.display()));
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map_or(0, |i| i + 1);
    (line as u64, before[start..].chars().count() as u64 + 1)
}

/// The inputs: a lexicon that lints with findings, a lexicon and a record
/// that fails it, and two versions of a lexicon with a breaking change.
struct Inputs {
    /// The temporary folder (the commands run here, with relative paths).
    root: tempfile::TempDir,
}

const MEDIA: &str = "{\n  \"lexicon\": 1,\n  \"id\": \"com.example.media\",\n  \"defs\": {\n    \"main\": {\n      \"type\": \"object\",\n      \"properties\": {\n        \"a\": {\"description\": \"ünï 🦀 é\", \"type\": \"blob\", \"accept\": []},\n        \"b\": {\"type\": \"blob\", \"accept\": [\"image/png\", \"50%,\\nx\"]}\n      }\n    }\n  }\n}\n";

const NOTE: &str = "{\n  \"lexicon\": 1,\n  \"id\": \"com.example.note\",\n  \"defs\": {\n    \"main\": {\n      \"type\": \"record\",\n      \"key\": \"tid\",\n      \"record\": {\n        \"type\": \"object\",\n        \"required\": [\"text\"],\n        \"properties\": {\n          \"text\": {\"type\": \"string\", \"maxGraphemes\": 3},\n          \"count\": {\"type\": \"integer\", \"maximum\": 2}\n        }\n      }\n    }\n  }\n}\n";

const RECORD: &str = "{\n  \"$type\": \"com.example.note\",\n  \"ñame\": \"ünï 🦀\", \"text\": \"🦀🦀🦀🦀\",\n  \"count\": 5\n}\n";

impl Inputs {
    fn new() -> Inputs {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().join(AWKWARD);
        let write = |rel: &str, text: &str| {
            let file = base.join(rel);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, text).unwrap();
        };
        write("lint/com/example/media.json", MEDIA);
        write("lexicons/com/example/note.json", NOTE);
        write("records/récord #1.json", RECORD);
        write("old/com/example/note.json", NOTE);
        // `count` made required: records written before may lack it.
        write(
            "new/com/example/note.json",
            &NOTE.replace("[\"text\"]", "[\"text\", \"count\"]"),
        );
        Inputs { root }
    }

    fn cwd(&self) -> &Path {
        self.root.path()
    }

    /// A path relative to [`Inputs::cwd`].
    fn rel(&self, rel: &str) -> String {
        format!("{AWKWARD}/{rel}")
    }

    fn abs(&self, rel: &str) -> PathBuf {
        self.root.path().join(AWKWARD).join(rel)
    }
}

// ---------------------------------------------------------------- SARIF

fn sarif_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sarif")
}

/// Installs `tests/sarif` once (per machine: `node_modules` is kept).
fn sarif_harness() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    static LOCK: Mutex<()> = Mutex::new(());
    DIR.get_or_init(|| {
        let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let dir = sarif_dir();
        let installed = ["ajv-draft-04", "ajv-formats", "@microsoft/jest-sarif"]
            .iter()
            .all(|p| {
                dir.join("node_modules")
                    .join(p)
                    .join("package.json")
                    .exists()
            });
        if !installed {
            launch::npm_ci(&dir, &[], "the SARIF schema check (tests/sarif)");
        }
        dir
    })
}

/// What `tests/sarif/validate.mjs` says of `log`: `Ok` when it is valid
/// SARIF 2.1.0, else its errors.
fn validate_sarif(log: &str) -> Result<(), String> {
    let dir = sarif_harness();
    let mut child = Command::new("node")
        .arg("validate.mjs")
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run node (the SARIF check needs Node 20+)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(log.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    match out.status.code() {
        Some(0) => Ok(()),
        Some(1) => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
        other => panic!(
            "validate.mjs failed ({other:?}): {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// Percent-decodes a URI path (UTF-8).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
            out.push(u8::from_str_radix(hex, 16).unwrap());
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// The results of a SARIF log that must validate.
fn valid_results(log: &str) -> Vec<Value> {
    if let Err(e) = validate_sarif(log) {
        panic!("not valid SARIF 2.1.0:\n{e}\n{log}");
    }
    let log: Value = serde_json::from_str(log).unwrap();
    log["runs"][0]["results"].as_array().unwrap().clone()
}

/// The result whose message starts with `pointer` (`/json/path: …`), its
/// decoded file and its (line, column).
fn located(results: &[Value], pointer: &str) -> (String, (u64, u64), Value) {
    let r = results
        .iter()
        .find(|r| {
            r["message"]["text"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{pointer}: "))
        })
        .unwrap_or_else(|| panic!("no result at {pointer}: {results:?}"));
    let place = &r["locations"][0]["physicalLocation"];
    let uri = place["artifactLocation"]["uri"].as_str().unwrap();
    let region = &place["region"];
    (
        percent_decode(uri),
        (
            region["startLine"].as_u64().unwrap(),
            region["startColumn"].as_u64().unwrap(),
        ),
        r.clone(),
    )
}

#[test]
fn sarif_of_lint_check_and_diff_is_valid_and_points_at_the_findings() {
    let inputs = Inputs::new();
    let cwd = inputs.cwd();

    // lint, a relative path: a relative URI reference, encoded.
    let lint = inputs.rel("lint");
    let log = findings(cwd, &["lex", "lint", "--format", "sarif", &lint]);
    let results = valid_results(&log);
    let (file, at, result) = located(&results, "/defs/main/properties/a/accept");
    assert_eq!(file, inputs.rel("lint/com/example/media.json"));
    let media = inputs.abs("lint/com/example/media.json");
    // The pointer's property name, after "ünï 🦀 é" on its line.
    assert_eq!(at, position_of(&media, "\"accept\": []"));
    assert_eq!(at, (8, 57));
    assert_eq!(result["ruleId"], "bad-accept");
    assert_eq!(result["level"], "error");
    assert_eq!(
        result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
        "lex%20%C3%BCn%C3%AF%2C%20a%3Ab%20%F0%9F%A6%80/lint/com/example/media.json"
    );
    let (_, at, _) = located(&results, "/defs/main/properties/b/accept/1");
    assert_eq!(at, position_of(&media, "\"50%"));

    // check, an absolute path: a file URI.
    let lexicons = inputs.abs("lexicons");
    let record = inputs.abs("records/récord #1.json");
    let log = findings(
        cwd,
        &[
            "lex",
            "check",
            "--format",
            "sarif",
            "--lexicons",
            lexicons.to_str().unwrap(),
            record.to_str().unwrap(),
        ],
    );
    let results = valid_results(&log);
    assert_eq!(results.len(), 2, "{log}");
    for (pointer, needle) in [("/text", "\"text\""), ("/count", "\"count\"")] {
        let (file, at, _) = located(&results, pointer);
        assert_eq!(file, format!("file://{}", record.display()));
        assert_eq!(at, position_of(&record, needle), "{pointer}");
    }
    assert_eq!(located(&results, "/text").1, (3, 20));

    // diff: the breaking change, in the new file.
    let log = findings(
        cwd,
        &[
            "lex",
            "diff",
            "--format",
            "sarif",
            &inputs.rel("old"),
            &inputs.rel("new"),
        ],
    );
    let results = valid_results(&log);
    assert!(!results.is_empty(), "{log}");
    let (file, at, result) = located(&results, "/defs/main/record/properties/count");
    assert_eq!(file, inputs.rel("new/com/example/note.json"), "{result}");
    assert_eq!(result["ruleId"], "required-added");
    assert_eq!(
        at,
        position_of(&inputs.abs("new/com/example/note.json"), "\"count\": {")
    );
    assert_eq!(at, (13, 11));
}

/// The validator is not a rubber stamp: logs that break the schema or
/// carry a raw file name are refused, each with a reason.
#[test]
fn the_sarif_check_rejects_invalid_logs() {
    let good = serde_json::json!({
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "t", "rules": [{"id": "r"}]}},
            "results": [{
                "ruleId": "r",
                "level": "error",
                "message": {"text": "m"},
                "locations": [{"physicalLocation": {
                    "artifactLocation": {"uri": "a%20b/%C3%A9.json"},
                    "region": {"startLine": 1, "startColumn": 1},
                }}],
            }],
        }],
    });
    validate_sarif(&good.to_string()).unwrap();
    let broken: [(&str, &str, Value); 5] = [
        ("/version", "allowed values", Value::from("2.0.0")),
        (
            "/runs/0/results/0/level",
            "allowed values",
            Value::from("fatal"),
        ),
        (
            "/runs/0/results/0/locations/0/physicalLocation/region/startLine",
            ">= 1",
            Value::from(0),
        ),
        (
            "/runs/0/results/0/locations/0/physicalLocation/artifactLocation/uri",
            "percent-encoded",
            Value::from("a b/é.json"),
        ),
        (
            "/runs/0/tool/driver",
            "required property 'name'",
            serde_json::json!({}),
        ),
    ];
    for (pointer, says, value) in broken {
        let mut log = good.clone();
        *log.pointer_mut(pointer).unwrap() = value;
        let err = validate_sarif(&log.to_string()).expect_err(pointer);
        assert!(err.contains(says), "{pointer}: {err}");
    }
}

// --------------------------------------------------------------- GitHub

/// One parsed workflow command.
#[derive(Debug, PartialEq, Eq)]
struct Annotation {
    command: String,
    /// Properties, unescaped.
    properties: BTreeMap<String, String>,
    /// The message, unescaped.
    message: String,
}

/// Undoes workflow-command escaping; every `%` must start one of
/// `escapes`, and no raw CR, LF (or, in a property, `:` or `,`) may occur.
fn unescape(s: &str, property: bool) -> Result<String, String> {
    let escapes: &[(&str, char)] = if property {
        &[
            ("%25", '%'),
            ("%0D", '\r'),
            ("%0A", '\n'),
            ("%3A", ':'),
            ("%2C", ','),
        ]
    } else {
        &[("%25", '%'), ("%0D", '\r'), ("%0A", '\n')]
    };
    let mut out = String::new();
    let mut rest = s;
    while let Some(c) = rest.chars().next() {
        match c {
            '%' => {
                let (code, ch) = escapes
                    .iter()
                    .find(|(code, _)| rest.starts_with(code))
                    .ok_or_else(|| format!("a bare % in {s:?}"))?;
                out.push(*ch);
                rest = &rest[code.len()..];
                continue;
            }
            '\r' | '\n' => return Err(format!("a raw line break in {s:?}")),
            ':' | ',' if property => return Err(format!("a raw {c:?} in property {s:?}")),
            c => out.push(c),
        }
        rest = &rest[c.len_utf8()..];
    }
    Ok(out)
}

/// A positive decimal integer, no sign, no leading zero.
fn positive(s: &str) -> Result<u64, String> {
    let ok = !s.is_empty() && !s.starts_with('0') && s.bytes().all(|b| b.is_ascii_digit());
    ok.then(|| s.parse().ok())
        .flatten()
        .ok_or_else(|| format!("{s:?} is not a positive integer"))
}

/// Parses one annotation line: `::CMD PROPS::MESSAGE`, CMD one of error,
/// warning, notice; PROPS `key=value` joined by `,`, keys among file, line,
/// endLine, col, endColumn, title, each once, file required, the numbers
/// positive.
fn parse_annotation(line: &str) -> Result<Annotation, String> {
    let rest = line
        .strip_prefix("::")
        .ok_or("a workflow command starts with ::")?;
    let (head, message) = rest
        .split_once("::")
        .ok_or("no :: between the command and its message")?;
    let (command, props) = head.split_once(' ').unwrap_or((head, ""));
    if !["error", "warning", "notice"].contains(&command) {
        return Err(format!("{command:?} is not an annotation command"));
    }
    let mut properties = BTreeMap::new();
    for prop in props.split(',').filter(|_| !props.is_empty()) {
        if prop.is_empty() {
            return Err("an empty property".into());
        }
        let (key, value) = prop
            .split_once('=')
            .ok_or_else(|| format!("property {prop:?} has no ="))?;
        if !["file", "line", "endLine", "col", "endColumn", "title"].contains(&key) {
            return Err(format!("unknown property {key:?}"));
        }
        let value = unescape(value, true)?;
        if ["line", "endLine", "col", "endColumn"].contains(&key) {
            positive(&value)?;
        }
        if properties.insert(key.to_owned(), value).is_some() {
            return Err(format!("property {key:?} given twice"));
        }
    }
    if !properties.contains_key("file") {
        return Err("no file property".into());
    }
    Ok(Annotation {
        command: command.to_owned(),
        properties,
        message: unescape(message, false)?,
    })
}

#[test]
fn the_annotation_parser_takes_the_grammar_and_nothing_else() {
    let parsed =
        parse_annotation("::error file=a%2Cb%3Ac %25.json,line=3,col=4,title=t%3Ax::50%25%0Ax: y")
            .unwrap();
    assert_eq!(parsed.command, "error");
    assert_eq!(parsed.properties["file"], "a,b:c %.json");
    assert_eq!(parsed.properties["line"], "3");
    assert_eq!(parsed.properties["title"], "t:x");
    assert_eq!(parsed.message, "50%\nx: y");
    assert!(parse_annotation("::notice file=f::").is_ok());
    for bad in [
        "error file=a,line=1::m",          // no leading ::
        "::fail file=a::m",                // not an annotation command
        "::error file=a,line=1",           // no message separator
        "::error file=a,b.json,line=1::m", // a raw comma in a property
        "::error file=a:b,line=1::m",      // a raw colon in a property
        "::error file=a,line=0::m",        // lines start at 1
        "::error file=a,line=01::m",       // no leading zero
        "::error file=a,col=x::m",         // not a number
        "::error file=a,line=1,line=2::m", // twice
        "::error file=a,colour=2::m",      // unknown property
        "::error file=a,,line=1::m",       // empty property
        "::error line=1::m",               // no file
        "::error file=a::50% off",         // a bare % in the message
        "::error file=a%2::m",             // a bad escape in a property
        "::error file=a%3A::m%3A",         // %3A is no message escape
        "::error file=a::two\nlines",      // a raw line break
        "::error file=a\r::m",             // a raw CR in a property
    ] {
        assert!(parse_annotation(bad).is_err(), "accepted {bad:?}");
    }
}

#[test]
fn github_annotations_follow_the_workflow_command_grammar() {
    let inputs = Inputs::new();
    let cwd = inputs.cwd();
    let media = inputs.rel("lint/com/example/media.json");
    let lexicons = inputs.rel("lexicons");
    let record = inputs.rel("records/récord #1.json");
    let (lint, old, new) = (inputs.rel("lint"), inputs.rel("old"), inputs.rel("new"));
    let runs: [(Vec<&str>, usize); 3] = [
        (vec!["lex", "lint", "--format", "github", &lint], 2),
        (
            vec![
                "lex",
                "check",
                "--format",
                "github",
                "--lexicons",
                &lexicons,
                &record,
            ],
            2,
        ),
        (vec!["lex", "diff", "--format", "github", &old, &new], 1),
    ];
    let mut all = Vec::new();
    for (args, at_least) in runs {
        let out = findings(cwd, &args);
        let parsed: Vec<Annotation> = out
            .lines()
            .map(|l| parse_annotation(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
            .collect();
        assert!(parsed.len() >= at_least, "{args:?}: {out}");
        all.extend(parsed);
    }
    let find = |file: &str, pointer: &str| {
        all.iter()
            .find(|a| {
                a.properties["file"] == file && a.message.starts_with(&format!("{pointer}: "))
            })
            .unwrap_or_else(|| panic!("no annotation at {file}{pointer}: {all:?}"))
    };
    let at = |a: &Annotation| {
        (
            a.properties["line"].parse::<u64>().unwrap(),
            a.properties["col"].parse::<u64>().unwrap(),
        )
    };
    let media_abs = inputs.abs("lint/com/example/media.json");
    let a = find(&media, "/defs/main/properties/a/accept");
    assert_eq!(a.command, "error");
    assert_eq!(a.properties["title"], "bad-accept");
    assert_eq!(at(a), position_of(&media_abs, "\"accept\": []"));
    // The accept entry "50%,\nx" comes back whole through the escaping.
    let b = find(&media, "/defs/main/properties/b/accept/1");
    assert!(b.message.contains("50%,\nx"), "{:?}", b.message);
    assert_eq!(at(b), position_of(&media_abs, "\"50%"));
    let record_abs = inputs.abs("records/récord #1.json");
    assert_eq!(
        at(find(&record, "/count")),
        position_of(&record_abs, "\"count\"")
    );
    let new_file = inputs.rel("new/com/example/note.json");
    assert_eq!(
        at(find(&new_file, "/defs/main/record/properties/count")),
        position_of(&inputs.abs("new/com/example/note.json"), "\"count\": {")
    );
}
