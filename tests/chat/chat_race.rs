//! Several `gelstore` processes on one data folder at once. The store's file
//! lock lets one process hold the store at a time; the others wait for it
//! (`GELSTORE_LOCK_WAIT_SECS`, 30 s by default) and then meet the first
//! one's writes: a taken reply key (`ReplyTaken`), an answered approval
//! (`pending_resolved`). Never a lock or I/O error, and the store stays
//! whole (`repo check`).

use std::io::{BufRead as _, Read as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How many processes race for one reply key.
const REPLIERS: usize = 6;
/// How many processes race to answer one waiting reply.
const APPROVERS: usize = 3;

fn streams() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/streams")
}

fn command(data: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gelstore"));
    c.arg("--data").arg(data).args(args);
    // Whatever the environment says, the racers get the default wait.
    c.env_remove("GELSTORE_LOCK_WAIT_SECS");
    c
}

fn gel(data: &Path, args: &[&str]) -> Output {
    command(data, args).output().unwrap()
}

fn spawn(data: &Path, args: &[&str]) -> Child {
    command(data, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs and expects exit 0; returns stdout's first line.
fn ok(data: &Path, args: &[&str]) -> String {
    let out = gel(data, args);
    assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

fn json(data: &Path, args: &[&str]) -> Value {
    serde_json::from_str(&ok(data, args)).unwrap()
}

/// A data folder with a device, a chat and one user message.
fn chat_with_message() -> (tempfile::TempDir, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["device", "init"]);
    let chat = ok(d, &["chat", "new", "--title", "Race"]);
    let msg = ok(d, &["chat", "send", "--chat", &chat, "Who wins?"]);
    (dir, chat, msg)
}

fn check(data: &Path) -> Value {
    let report = json(data, &["repo", "check", "--format", "json"]);
    assert_eq!(report["signatureChecked"], true, "{report}");
    report
}

/// The `error: …` line a refused command printed (the other stderr lines
/// are notes, such as the one about waiting for the store).
fn error_line(stderr: &str) -> &str {
    stderr
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line in {stderr:?}"))
}

/// Whether a message is about the store's lock or I/O rather than the
/// record the command meant to write.
fn is_environmental(line: &str) -> bool {
    let l = line.to_lowercase();
    [
        "lock",
        "in use",
        "storage engine",
        "i/o",
        "os error",
        "resource",
    ]
    .iter()
    .any(|w| l.contains(w))
}

/// Starts every command at once and waits for all of them.
fn race(data: &Path, commands: &[Vec<String>]) -> Vec<Output> {
    let children: Vec<Child> = commands
        .iter()
        .map(|args| {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            spawn(data, &args)
        })
        .collect();
    children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect()
}

/// Splits the outcomes into the winners' and the losers' stderr, with
/// every exit code 0 or 1 (never 2, an environment failure).
fn winners_and_losers(outputs: &[Output]) -> (Vec<String>, Vec<String>) {
    let mut won = Vec::new();
    let mut lost = Vec::new();
    for out in outputs {
        let stderr = text(&out.stderr);
        match out.status.code() {
            Some(0) => won.push(stderr),
            Some(1) => lost.push(stderr),
            other => panic!("exit {other:?}: {stderr}"),
        }
    }
    (won, lost)
}

#[test]
fn concurrent_replies_to_one_key_have_one_winner() {
    let (dir, chat, msg) = chat_with_message();
    let d = dir.path();
    let records_before = check(d)["records"].as_u64().unwrap();
    let input = streams().join("plain_text_small_deltas/input.jsonl");
    let input = input.to_str().unwrap().to_string();
    let args: Vec<String> = ["chat", "reply", "--to", &msg, "--attempt", "1", "--events"]
        .iter()
        .map(|s| s.to_string())
        .chain([input])
        .collect();
    let outputs = race(d, &vec![args; REPLIERS]);

    let (won, lost) = winners_and_losers(&outputs);
    assert_eq!(won.len(), 1, "winners: {won:?}; losers: {lost:?}");
    assert_eq!(lost.len(), REPLIERS - 1);
    let key = format!("{msg}.r1");
    for stderr in &lost {
        let line = error_line(stderr);
        assert!(
            line.contains(&format!("reply {key} already exists")),
            "{stderr}"
        );
        assert!(!is_environmental(line), "{stderr}");
    }
    // The winner streamed the whole reply.
    let winner = outputs.iter().find(|o| o.status.success()).unwrap();
    assert!(text(&winner.stdout).contains("\"done\""));
    assert!(
        won[0].contains(&format!("reply {key}: complete")),
        "{}",
        won[0]
    );

    // Exactly one reply, at .r1, finished; the store is whole.
    let thread = json(d, &["chat", "show", "--chat", &chat, "--format", "json"]);
    let replies: Vec<&Value> = thread["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .collect();
    assert_eq!(replies.len(), 1, "{thread}");
    assert_eq!(replies[0]["key"], key.as_str());
    assert_eq!(replies[0]["status"], "complete");
    assert_eq!(
        check(d)["records"].as_u64().unwrap(),
        records_before + 1,
        "one record more: the reply"
    );
}

#[test]
fn concurrent_answers_to_one_waiting_reply_have_one_winner() {
    let (dir, chat, msg) = chat_with_message();
    let d = dir.path();
    let input = streams().join("approval_waiting/input.jsonl");
    let out = gel(
        d,
        &[
            "chat",
            "reply",
            "--to",
            &msg,
            "--events",
            input.to_str().unwrap(),
            "--approve-tools",
            "delete_files,list_files",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let reply = format!("{msg}.r0");
    let records_before = check(d)["records"].as_u64().unwrap();

    // Different answers to the same question: allow, deny, allow both, ...
    let answers: Vec<Vec<String>> = (0..APPROVERS)
        .map(|i| {
            let mut a: Vec<String> = ["chat", "approve", "--reply", &reply]
                .iter()
                .map(|s| s.to_string())
                .collect();
            match i % 3 {
                0 => a.extend(["--allow".into(), "toolu_11".into()]),
                1 => a.extend(["--deny".into(), "toolu_11".into()]),
                _ => a.extend([
                    "--allow".into(),
                    "toolu_11".into(),
                    "--allow".into(),
                    "toolu_12".into(),
                ]),
            }
            a.extend(["--reason".into(), format!("answer {i}")]);
            a
        })
        .collect();
    let outputs = race(d, &answers);

    let (won, lost) = winners_and_losers(&outputs);
    assert_eq!(won.len(), 1, "winners: {won:?}; losers: {lost:?}");
    assert_eq!(lost.len(), APPROVERS - 1);
    for stderr in &lost {
        let line = error_line(stderr);
        assert!(line.contains("pending_resolved"), "{stderr}");
        assert!(!is_environmental(line), "{stderr}");
    }
    let winner = outputs.iter().find(|o| o.status.success()).unwrap();
    let answer = text(&winner.stdout).trim().to_string();

    // One answer continues from the reply; nothing waits; the store is whole.
    let thread = json(d, &["chat", "show", "--chat", &chat, "--format", "json"]);
    let answers: Vec<&Value> = thread["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["parent"] == reply.as_str())
        .collect();
    assert_eq!(answers.len(), 1, "{thread}");
    assert_eq!(answers[0]["key"], answer.as_str());
    let waiting = gel(d, &["chat", "approvals", "--format", "json"]);
    assert!(waiting.status.success());
    assert!(text(&waiting.stdout).trim().is_empty());
    assert_eq!(check(d)["records"].as_u64().unwrap(), records_before + 1);
}

#[test]
fn a_held_store_is_waited_for_then_refused_by_name() {
    let (dir, _chat, _msg) = chat_with_message();
    let d = dir.path();
    let held = gelstore::repo::repository::Repository::open(d).unwrap();

    let started = Instant::now();
    let out = command(d, &["chat", "ls"])
        .env("GELSTORE_LOCK_WAIT_SECS", "1")
        .output()
        .unwrap();
    let waited = started.elapsed();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(waited >= Duration::from_secs(1), "{waited:?}");
    assert_eq!(
        stderr.matches("waiting for the store at").count(),
        1,
        "{stderr}"
    );
    assert!(
        stderr.contains("(held by another gelstore process)"),
        "{stderr}"
    );
    let line = error_line(&stderr);
    assert!(
        line.contains("still in use by another gelstore process after waiting 1 s"),
        "{stderr}"
    );
    assert!(line.contains("GELSTORE_LOCK_WAIT_SECS"), "{stderr}");
    assert!(!line.contains("could not acquire lock"), "{stderr}");
    assert!(!line.to_lowercase().contains("os error"), "{stderr}");

    // With the default wait, a store released meanwhile is simply opened:
    // the store is let go once the second process says it waits.
    let mut child = spawn(d, &["chat", "ls"]);
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    assert!(first.starts_with("waiting for the store at"), "{first:?}");
    drop(held);
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{first}{rest}");
    assert_eq!(text(&out.stdout).lines().count(), 1);
}
