//! `gelstore chat …` through the real binary: each call is its own process,
//! so every step is also a restart.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::support::fixtures::files_under;
use serde_json::Value;

fn streams() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/streams")
}

fn gel(data: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gelstore"))
        .arg("--data")
        .arg(data)
        .args(args)
        .output()
        .unwrap()
}

fn gel_stdin(data: &Path, args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gelstore"))
        .arg("--data")
        .arg(data)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

/// Runs and expects exit 0; returns stdout's first line.
fn ok(data: &Path, args: &[&str]) -> String {
    let out = gel(data, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Runs and expects exit 1; returns stderr.
fn refused(data: &Path, args: &[&str]) -> String {
    let out = gel(data, args);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stderr).unwrap()
}

fn device() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    ok(dir.path(), &["device", "init"]);
    dir
}

fn show(data: &Path, chat: &str) -> Value {
    serde_json::from_str(&ok(
        data,
        &["chat", "show", "--chat", chat, "--format", "json"],
    ))
    .unwrap()
}

fn message<'a>(thread: &'a Value, key: &str) -> &'a Value {
    thread["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["key"] == key)
        .unwrap_or_else(|| panic!("no message {key} in {thread}"))
}

fn approvals(data: &Path) -> Vec<Value> {
    let out = gel(data, &["chat", "approvals", "--format", "json"]);
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn without_a_device_it_says_to_init() {
    let dir = tempfile::tempdir().unwrap();
    let err = refused(dir.path(), &["chat", "new", "--title", "x"]);
    assert!(err.contains("gelstore device init"), "{err}");
}

#[test]
fn new_send_reply_show() {
    let dir = device();
    let d = dir.path();
    let chat = ok(
        d,
        &[
            "chat",
            "new",
            "--title",
            "Greetings",
            "--model",
            "anthropic/claude-sonnet-4-5",
        ],
    );
    let msg = ok(d, &["chat", "send", "--chat", &chat, "Say hello"]);
    let case = streams().join("plain_text_small_deltas");
    let out = gel(
        d,
        &[
            "chat",
            "reply",
            "--to",
            &msg,
            "--events",
            case.join("input.jsonl").to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The live events, as the stream fixtures expect them for this key.
    let expected = std::fs::read_to_string(case.join("expected.events.jsonl"))
        .unwrap()
        .replace("3lbqzdw5pzk22.r0", &format!("{msg}.r0"));
    let got: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let want: Vec<Value> = expected
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(got, want);

    // Read back (another process): the record's content is the fixture's.
    let thread = show(d, &chat);
    assert_eq!(thread["title"], "Greetings");
    assert_eq!(thread["model"], "anthropic/claude-sonnet-4-5");
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(case.join("expected.record.json")).unwrap())
            .unwrap();
    let reply = message(&thread, &format!("{msg}.r0"));
    assert_eq!(reply["status"], "complete");
    assert_eq!(reply["state"], "open");
    assert_eq!(reply["content"], record["content"]);
    assert_eq!(
        message(&thread, &msg)["content"]["parts"][0]["text"],
        "Say hello"
    );

    // The attempt is taken: refused, never overwritten.
    let err = refused(
        d,
        &[
            "chat",
            "reply",
            "--to",
            &msg,
            "--events",
            case.join("input.jsonl").to_str().unwrap(),
        ],
    );
    assert!(err.contains("already exists"), "{err}");

    // A regeneration from stdin, and a continuation from it.
    let input = std::fs::read(streams().join("end_replaces_deltas/input.jsonl")).unwrap();
    let out = gel_stdin(
        d,
        &[
            "chat",
            "reply",
            "--to",
            &msg,
            "--attempt",
            "1",
            "--events",
            "-",
        ],
        &input,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let next = ok(
        d,
        &[
            "chat",
            "send",
            "--chat",
            &chat,
            "--parent",
            &format!("{msg}.r1"),
            "And then?",
        ],
    );
    let thread = show(d, &chat);
    let keys: Vec<&str> = thread["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["key"].as_str().unwrap())
        .collect();
    let (r0, r1) = (format!("{msg}.r0"), format!("{msg}.r1"));
    assert_eq!(
        keys,
        vec![msg.as_str(), r0.as_str(), r1.as_str(), next.as_str()]
    );
    assert_eq!(message(&thread, &next)["parent"], r1);

    // Human output names the chat and its messages.
    let human = String::from_utf8(gel(d, &["chat", "show", "--chat", &chat]).stdout).unwrap();
    assert!(
        human.contains("Greetings") && human.contains("And then?"),
        "{human}"
    );

    // Named refusals.
    let err = refused(d, &["chat", "show", "--chat", "3lbqzdw5pzk22"]);
    assert!(err.contains("no chat"), "{err}");
    let err = refused(
        d,
        &[
            "chat",
            "send",
            "--chat",
            &chat,
            "--parent",
            "3lbqzdw5pzk22.r0",
            "x",
        ],
    );
    assert!(err.contains("no reply 3lbqzdw5pzk22.r0"), "{err}");
}

#[test]
fn approval_round_trip_across_restarts() {
    let dir = device();
    let d = dir.path();
    let chat = ok(d, &["chat", "new", "--title", "Cleanup"]);
    let msg = ok(d, &["chat", "send", "--chat", &chat, "Delete my drafts"]);
    let input = streams().join("approval_waiting/input.jsonl");
    let input = input.to_str().unwrap();
    let reply = format!("{msg}.r0");
    let out = gel(
        d,
        &[
            "chat",
            "reply",
            "--to",
            &msg,
            "--events",
            input,
            "--approve-tools",
            "delete_files,list_files",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        events.matches("\"confirm_required\"").count(),
        2,
        "{events}"
    );
    assert!(!events.contains("\"done\""), "{events}");

    // Listed by a new process, and again after the index file is lost.
    let listed = approvals(d);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["reply"], reply);
    assert_eq!(listed[0]["chat"], chat);
    let calls: Vec<&str> = listed[0]["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["callId"].as_str().unwrap())
        .collect();
    assert_eq!(calls, vec!["toolu_11", "toolu_12"]);
    // The index holds keys only: tool names and arguments stay sealed.
    let index = std::fs::read_to_string(d.join("chat-approvals.json")).unwrap();
    assert!(index.contains(&reply), "{index}");
    assert!(
        !index.contains("delete_files") && !index.contains("drafts"),
        "{index}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.join("chat-approvals.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
    }
    std::fs::remove_file(d.join("chat-approvals.json")).unwrap();
    assert_eq!(approvals(d), listed);
    assert!(d.join("chat-approvals.json").exists());

    // Named refusals: an unknown call, a reply that does not wait.
    let err = refused(
        d,
        &["chat", "approve", "--reply", &reply, "--allow", "toolu_99"],
    );
    assert!(err.contains("pending_unknown"), "{err}");
    let err = refused(d, &["chat", "approve", "--reply", &format!("{msg}.r5")]);
    assert!(err.contains("pending_unknown"), "{err}");

    // The answer: toolu_11 allowed; toolu_12 not mentioned, so denied.
    let answer = ok(
        d,
        &[
            "chat", "approve", "--reply", &reply, "--allow", "toolu_11", "--reason", "ok",
        ],
    );
    let thread = show(d, &chat);
    let a = message(&thread, &answer);
    assert_eq!(a["parent"], reply);
    let parts = a["content"]["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 2);
    assert_eq!(parts[0]["callId"], "toolu_11");
    assert_eq!(parts[0]["decision"], "approved");
    assert_eq!(parts[0]["reason"], "ok");
    assert_eq!(parts[1]["callId"], "toolu_12");
    assert_eq!(parts[1]["decision"], "denied");
    // The waiting copy shows the decisions.
    let w = message(&thread, &reply);
    assert_eq!(w["status"], "waiting");
    assert_eq!(w["content"]["parts"][1]["approval"], "approved");
    assert_eq!(w["content"]["parts"][2]["approval"], "denied");

    // Nothing waits any more; a second answer is refused.
    assert!(approvals(d).is_empty());
    let err = refused(
        d,
        &["chat", "approve", "--reply", &reply, "--deny", "toolu_11"],
    );
    assert!(err.contains("pending_resolved"), "{err}");

    // The reply to the answer: an approved call without its result is
    // refused and nothing is written; then the calls are repeated with
    // their results (the denied one refused) before the model's turn.
    let next = streams().join("plain_text_small_deltas/input.jsonl");
    let next = next.to_str().unwrap();
    let err = refused(d, &["chat", "reply", "--to", &answer, "--events", next]);
    assert!(err.contains("toolu_11 need a result"), "{err}");
    let err = refused(
        d,
        &[
            "chat",
            "reply",
            "--to",
            &answer,
            "--events",
            next,
            "--tool-output",
            "toolu_12=x",
            "--tool-output",
            "toolu_11=y",
        ],
    );
    assert!(
        err.contains("\"toolu_12\" is not an approved call"),
        "{err}"
    );
    let out = gel(
        d,
        &[
            "chat",
            "reply",
            "--to",
            &answer,
            "--events",
            next,
            "--tool-output",
            "toolu_11=deleted 1 file",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events[0]["type"], "tool_result");
    assert_eq!(events[0]["decision"], "approved");
    assert_eq!(events[1]["callId"], "toolu_12");
    assert_eq!(events[1]["outcome"], "refused");
    assert_eq!(events[1]["decision"], "declined");
    let thread = show(d, &chat);
    // The waiting reply shows the resolved copies with their results.
    let w = &message(&thread, &reply)["content"]["parts"];
    assert_eq!(w[1]["approval"], "approved");
    assert_eq!(w[2]["output"], "deleted 1 file");
    assert_eq!(w[3]["approval"], "denied");
    assert_eq!(w[4]["isError"], true);
    let r = message(&thread, &format!("{answer}.r0"));
    assert_eq!(r["status"], "complete");
    assert!(
        r["content"]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("Grüße!"),
        "{r}"
    );
}

#[test]
fn a_newer_attempt_supersedes_a_waiting_reply() {
    let dir = device();
    let d = dir.path();
    let chat = ok(d, &["chat", "new"]);
    let msg = ok(d, &["chat", "send", "--chat", &chat, "Delete my drafts"]);
    let input = streams().join("approval_waiting/input.jsonl");
    let input = input.to_str().unwrap();
    for attempt in ["0", "1"] {
        ok(
            d,
            &[
                "chat",
                "reply",
                "--to",
                &msg,
                "--attempt",
                attempt,
                "--events",
                input,
                "--approve-tools",
                "delete_files",
            ],
        );
    }
    let listed = approvals(d);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["reply"], format!("{msg}.r1"));
    let err = refused(d, &["chat", "approve", "--reply", &format!("{msg}.r0")]);
    assert!(err.contains("pending_superseded"), "{err}");
    // Rebuilt from the records, the index says the same.
    std::fs::remove_file(d.join("chat-approvals.json")).unwrap();
    assert_eq!(approvals(d), listed);
    // Deny everything by mentioning nothing.
    let answer = ok(d, &["chat", "approve", "--reply", &format!("{msg}.r1")]);
    let thread = show(d, &chat);
    assert_eq!(
        message(&thread, &answer)["content"]["parts"][0]["decision"],
        "denied"
    );
}

/// A second device holds a read-only copy: it reads the chats it was
/// admitted to, sees content sealed after its removal as `unknownKey`, and
/// writes nothing.
#[test]
fn a_second_device_reads_what_it_was_admitted_to() {
    let a = device();
    let (a, b) = (a, tempfile::tempdir().unwrap());
    let (da, db) = (a.path(), b.path());
    let car = da.join("export.car");
    let car = car.to_str().unwrap();
    let chat = ok(da, &["chat", "new", "--title", "Shared"]);
    let msg = ok(da, &["chat", "send", "--chat", &chat, "before removal"]);

    let code = ok(db, &["device", "pair"]);
    ok(da, &["device", "approve", &code]);
    ok(da, &["repo", "export", "--out", car]);
    let id_b = ok(db, &["device", "join", "--from", car]);
    let thread = show(db, &chat);
    assert_eq!(thread["title"], "Shared");
    assert_eq!(
        message(&thread, &msg)["content"]["parts"][0]["text"],
        "before removal"
    );
    let err = refused(db, &["chat", "send", "--chat", &chat, "from the copy"]);
    assert!(err.contains("read-only"), "{err}");

    // Removed: later records are sealed with keys B never gets.
    ok(da, &["device", "remove", &id_b]);
    let later = ok(da, &["chat", "new", "--title", "Private"]);
    let secret = ok(da, &["chat", "send", "--chat", &later, "after removal"]);
    std::fs::remove_file(da.join("export.car")).unwrap();
    ok(da, &["repo", "export", "--out", car]);
    ok(db, &["device", "join", "--from", car]);
    let thread = show(db, &later);
    assert_eq!(thread["title"], Value::Null);
    let m = message(&thread, &secret);
    assert_eq!(m["state"], "unknownKey");
    assert_eq!(m["content"], Value::Null);
    // What it was admitted to still opens.
    let thread = show(db, &chat);
    assert_eq!(message(&thread, &msg)["state"], "open");
}

/// What the user and the model wrote is in no file of the data folder in
/// the clear: not in the store, not in the approval index, not in an
/// export.
#[test]
fn plaintext_stays_sealed_on_disk() {
    let dir = device();
    let d = dir.path();
    let chat = ok(d, &["chat", "new", "--title", "TitleMarker7731"]);
    let msg = ok(d, &["chat", "send", "--chat", &chat, "UserMarker5512"]);
    let input = streams().join("approval_waiting/input.jsonl");
    ok(
        d,
        &[
            "chat",
            "reply",
            "--to",
            &msg,
            "--events",
            input.to_str().unwrap(),
            "--approve-tools",
            "delete_files",
        ],
    );
    ok(
        d,
        &[
            "chat",
            "approve",
            "--reply",
            &format!("{msg}.r0"),
            "--reason",
            "ReasonMarker9034",
        ],
    );
    ok(
        d,
        &["repo", "export", "--out", d.join("x.car").to_str().unwrap()],
    );
    let all = files_under(d);
    // The scan sees clear metadata (the model that answered), so it would
    // see a plaintext leak.
    let control = b"claude-sonnet-4-5";
    assert!(all.iter().any(|f| {
        let bytes = std::fs::read(f).unwrap();
        bytes.windows(control.len()).any(|w| w == control)
    }));
    for f in all {
        let bytes = std::fs::read(&f).unwrap();
        for marker in [
            "TitleMarker7731",
            "UserMarker5512",
            "ReasonMarker9034",
            "drafts/a.md",
            "I will delete the drafts",
        ] {
            assert!(
                !bytes.windows(marker.len()).any(|w| w == marker.as_bytes()),
                "{marker} in {}",
                f.display()
            );
        }
    }
}

/// A replayed stream that fails leaves the reply `failed` (kept) and exits
/// 1 with the code on stderr.
#[test]
fn a_failed_reply_exits_1_with_its_code() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_gelstore"))
            .arg("--data")
            .arg(data)
            .args(args)
            .output()
            .unwrap()
    };
    assert!(run(&["device", "init"]).status.success());
    let chat = String::from_utf8(run(&["chat", "new"]).stdout)
        .unwrap()
        .trim()
        .to_owned();
    let msg = String::from_utf8(run(&["chat", "send", "--chat", &chat, "hi"]).stdout)
        .unwrap()
        .trim()
        .to_owned();
    let input = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/streams/provider_error/input.jsonl");
    let out = run(&[
        "chat",
        "reply",
        "--to",
        &msg,
        "--events",
        input.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("failed: [assistant_provider]"), "{stderr}");
    let shown =
        String::from_utf8(run(&["chat", "show", "--chat", &chat, "--format", "json"]).stdout)
            .unwrap();
    assert!(
        shown.contains("\"failed\""),
        "the failed reply is kept: {shown}"
    );
}

/// A tool output longer than a record keeps: the reply keeps its start and
/// references a sealed blob in the data folder that holds it whole;
/// `chat output` opens it, and a blob altered or lost is refused by name.
#[test]
fn a_long_tool_output_is_kept_whole_in_a_sealed_blob() {
    let dir = device();
    let d = dir.path();
    let chat = ok(d, &["chat", "new", "--title", "logs"]);
    let msg = ok(d, &["chat", "send", "--chat", &chat, "Read the api log"]);
    let input = streams().join("tool_output_to_blob/input.jsonl");
    ok(
        d,
        &[
            "chat",
            "reply",
            "--to",
            &msg,
            "--events",
            input.to_str().unwrap(),
        ],
    );
    let whole = std::fs::read_to_string(&input)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["type"] == "tool_result")
        .unwrap()["output"]
        .as_str()
        .unwrap()
        .to_owned();
    let reply = format!("{msg}.r0");
    let thread = show(d, &chat);
    let parts = message(&thread, &reply)["content"]["parts"].clone();
    let result = parts
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["callId"] == "toolu_71" && p.get("output").is_some())
        .unwrap();
    assert!(result["output"].as_str().unwrap().len() <= 100_000);
    let cid = result["outputBlob"]["ref"]["$link"].as_str().unwrap();

    // The blob is in the folder, sealed: none of the output in the clear.
    let blob = d.join("blobs").join(cid);
    let sealed = std::fs::read(&blob).unwrap();
    let marker = b"GET /items/3999 ";
    assert!(whole.as_bytes().windows(marker.len()).any(|w| w == marker));
    assert!(!sealed.windows(marker.len()).any(|w| w == marker));

    let out = gel(
        d,
        &["chat", "output", "--reply", &reply, "--call", "toolu_71"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8(out.stdout).unwrap(), format!("{whole}\n"));
    let shown: Value = serde_json::from_str(&ok(
        d,
        &[
            "chat", "output", "--reply", &reply, "--call", "toolu_71", "--format", "json",
        ],
    ))
    .unwrap();
    assert_eq!(shown["fromBlob"], true);
    assert_eq!(shown["output"], whole.as_str());

    // One flipped byte: the bytes are no longer the ones the seal binds.
    let mut altered = sealed.clone();
    let at = altered.len() - 20;
    altered[at] ^= 1;
    std::fs::write(&blob, &altered).unwrap();
    let err = refused(
        d,
        &["chat", "output", "--reply", &reply, "--call", "toolu_71"],
    );
    assert!(err.contains("blob CID mismatch"), "{err}");

    std::fs::remove_file(&blob).unwrap();
    let err = refused(
        d,
        &["chat", "output", "--reply", &reply, "--call", "toolu_71"],
    );
    assert!(err.contains("not in this data folder"), "{err}");
    let err = refused(d, &["chat", "output", "--reply", &reply, "--call", "nope"]);
    assert!(err.contains("no result for call"), "{err}");
}

#[test]
fn asked_fills_the_pending_reply_another_device_wrote() {
    let dir = device();
    let d = dir.path();
    let chat = ok(d, &["chat", "new", "--title", "Asked"]);
    let msg = ok(d, &["chat", "send", "--chat", &chat, "Say hello"]);
    let events = streams().join("plain_text_small_deltas/input.jsonl");
    let events = events.to_str().unwrap();

    // Nothing asked yet: --asked writes nothing and says why.
    let err = refused(
        d,
        &["chat", "reply", "--to", &msg, "--asked", "--events", events],
    );
    assert!(err.contains(&format!("no pending reply {msg}.r0")), "{err}");
    assert!(show(d, &chat)["messages"].as_array().unwrap().len() == 1);

    // The pending reply, as another device (the page) would have written it.
    let pending = ok(d, &["chat", "ask", "--to", &msg]);
    assert_eq!(pending, format!("{msg}.r0"));
    // Without --asked the key is taken: a run never overwrites it.
    let err = refused(d, &["chat", "reply", "--to", &msg, "--events", events]);
    assert!(err.contains("already exists"), "{err}");
    // With --asked the run fills it, once.
    ok(
        d,
        &["chat", "reply", "--to", &msg, "--asked", "--events", events],
    );
    let reply = message(&show(d, &chat), &pending).clone();
    assert_eq!(reply["status"], "complete", "{reply}");
    assert!(reply.to_string().contains("42 is the answer"), "{reply}");
    let err = refused(
        d,
        &["chat", "reply", "--to", &msg, "--asked", "--events", events],
    );
    assert!(err.contains("already finished"), "{err}");

    // A regeneration elsewhere writes the next attempt; --asked takes the
    // newest one without being told.
    let next = ok(d, &["chat", "ask", "--to", &msg, "--attempt", "1"]);
    assert_eq!(next, format!("{msg}.r1"));
    ok(
        d,
        &["chat", "reply", "--to", &msg, "--asked", "--events", events],
    );
    assert_eq!(message(&show(d, &chat), &next)["status"], "complete");
}
