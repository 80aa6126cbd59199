//! `gelstore repo …` driven as a user would: the real binary, a real data
//! folder, stdin, exit codes, both output formats.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

const THING: &str = "com.example.thing";

fn gelstore(data: &Path, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gelstore"))
        .arg("--data")
        .arg(data)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run gelstore");
    // A command that does not read stdin may exit before we finish writing.
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    child.wait_with_output().expect("wait for gelstore")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[track_caller]
fn ok(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(o), stderr(o));
    stdout(o)
}

#[track_caller]
fn fails(o: &Output, needle: &str) {
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(o), stderr(o));
    assert!(
        stderr(o).contains(needle),
        "stderr lacks {needle:?}: {}",
        stderr(o)
    );
    assert!(!stderr(o).contains("panicked"), "{}", stderr(o));
}

fn json_out(o: &Output) -> Value {
    let text = ok(o);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("not JSON: {text}: {e}"))
}

fn line(action: &str, rkey: &str, value: Option<Value>) -> String {
    let mut w = json!({"action": action, "collection": THING, "rkey": rkey});
    if let Some(v) = value {
        w["value"] = v;
    }
    format!("{w}\n")
}

fn thing(n: i64) -> Value {
    json!({"$type": THING, "n": n})
}

fn info(data: &Path) -> Value {
    json_out(&gelstore(data, &["repo", "info", "--format", "json"], ""))
}

#[test]
fn init_is_idempotent_and_keeps_the_key_private() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let did = ok(&gelstore(&data, &["repo", "init"], ""));
    assert!(did.trim().starts_with("did:key:z"), "{did}");
    let again = ok(&gelstore(&data, &["repo", "init"], ""));
    assert_eq!(did, again);
    let head = info(&data);
    assert_eq!(head["did"], did.trim());
    assert_eq!(head["records"], 0);
    assert_eq!(head["events"]["count"], 1, "the init commit's event");
    assert!(head["events"]["bytes"].as_u64().unwrap() > 0, "{head}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&data.join("signing.key")), 0o600);
        assert_eq!(mode(&data), 0o700);
    }
    // The key is not in any block of the repository.
    let car = dir.path().join("repo.car");
    ok(&gelstore(
        &data,
        &["repo", "export", "--out", car.to_str().unwrap()],
        "",
    ));
    let key_hex = std::fs::read_to_string(data.join("signing.key")).unwrap();
    let key_hex = key_hex.split_whitespace().nth(1).unwrap().to_owned();
    let car_bytes = std::fs::read(&car).unwrap();
    assert!(!String::from_utf8_lossy(&car_bytes).contains(&key_hex));
}

#[test]
fn apply_get_ls_info() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    ok(&gelstore(data, &["repo", "init"], ""));
    let batch = [
        line("create", "a", Some(thing(1))),
        line("create", "b", Some(thing(2))),
        "\n".to_owned(),
        format!(
            "{}\n",
            json!({"action": "create", "collection": "chat.gel.assistant.chat",
                   "rkey": "3lbqzcx2ss222",
                   "value": {"$type": "chat.gel.assistant.chat",
                             "createdAt": "2025-11-29T19:41:00.000Z"}})
        ),
    ]
    .concat();
    let commit = json_out(&gelstore(
        data,
        &["repo", "apply", "--format", "json"],
        &batch,
    ));
    assert_eq!(commit["ops"].as_array().unwrap().len(), 3);
    let head = info(data);
    assert_eq!(head["commit"], commit["commit"]);
    assert_eq!(head["rev"], commit["rev"]);
    assert_eq!(head["records"], 3);

    let got: Value =
        serde_json::from_str(&ok(&gelstore(data, &["repo", "get", THING, "a"], ""))).unwrap();
    assert_eq!(got, thing(1));
    let got = json_out(&gelstore(
        data,
        &["repo", "get", THING, "b", "--format", "json"],
        "",
    ));
    assert_eq!(got["value"], thing(2));
    fails(
        &gelstore(data, &["repo", "get", THING, "nope"], ""),
        "does not exist",
    );

    let all = ok(&gelstore(data, &["repo", "ls"], ""));
    assert_eq!(all.lines().count(), 3);
    assert!(all.starts_with("chat.gel.assistant.chat/3lbqzcx2ss222 bafy"));
    let things = ok(&gelstore(
        data,
        &["repo", "ls", THING, "--format", "json"],
        "",
    ));
    let rkeys: Vec<String> = things
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["rkey"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(rkeys, ["a", "b"]);

    // Update with swap, delete; the rev moves forward.
    let a_cid = got_cid(data, "a");
    let batch = format!(
        "{}{}",
        json!({"action": "update", "collection": THING, "rkey": "a", "value": thing(10), "swap": a_cid}),
        "\n"
    ) + &line("delete", "b", None);
    let second = json_out(&gelstore(
        data,
        &["repo", "apply", "--format", "json"],
        &batch,
    ));
    assert!(second["rev"].as_str().unwrap() > commit["rev"].as_str().unwrap());
    assert_eq!(second["prev"], commit["commit"]);
    assert_eq!(info(data)["records"], 2);
    let check = json_out(&gelstore(data, &["repo", "check", "--format", "json"], ""));
    assert_eq!(check["records"], 2);
    assert_eq!(check["signatureChecked"], true);
}

fn got_cid(data: &Path, rkey: &str) -> String {
    let got = json_out(&gelstore(
        data,
        &["repo", "get", THING, rkey, "--format", "json"],
        "",
    ));
    got["cid"].as_str().unwrap().to_owned()
}

#[test]
fn bad_input_is_a_named_error_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    fails(
        &gelstore(
            data,
            &["repo", "apply"],
            &line("create", "a", Some(thing(1))),
        ),
        "repo init",
    );
    fails(&gelstore(data, &["repo", "info"], ""), "repo init");
    ok(&gelstore(data, &["repo", "init"], ""));
    ok(&gelstore(
        data,
        &["repo", "apply"],
        &line("create", "a", Some(thing(1))),
    ));
    let before = info(data);
    let good = line("create", "new", Some(thing(5)));
    let cases: Vec<(String, &str)> = vec![
        (format!("{good}{{not json\n"), "line 2: malformed JSON"),
        (
            format!("{good}[1,2]\n"),
            "line 2: a write must be a JSON object",
        ),
        (
            format!(
                "{good}{}\n",
                json!({"action": "upsert", "collection": THING, "rkey": "x"})
            ),
            "unknown action \"upsert\"",
        ),
        (
            format!(
                "{}\n",
                json!({"action": "create", "collection": THING, "rkey": "x", "value": thing(1), "extra": 1})
            ),
            "unknown field \"extra\"",
        ),
        (
            format!(
                "{}\n",
                json!({"action": "create", "collection": THING, "rkey": "x"})
            ),
            "create needs a \"value\"",
        ),
        (
            format!(
                "{}\n",
                json!({"action": "create", "collection": "not an nsid", "rkey": "x", "value": thing(1)})
            ),
            "invalid collection",
        ),
        (line("create", "a/b", Some(thing(1))), "invalid record key"),
        (line("create", "..", Some(thing(1))), "invalid record key"),
        (
            line("create", "x", Some(json!({"$type": "com.example.other"}))),
            "$type must be",
        ),
        (
            line("create", "x", Some(json!({"$type": THING, "f": 1.5}))),
            "not valid data model",
        ),
        (
            format!(
                "{}\n",
                json!({"action": "create", "collection": "chat.gel.assistant.chat",
                       "rkey": "3lbqzcx2ss222", "value": {"$type": "chat.gel.assistant.chat"}})
            ),
            "is not a valid chat.gel.assistant.chat",
        ),
        (
            format!("{good}{}", line("create", "a", Some(thing(2)))),
            "com.example.thing/a already exists",
        ),
        (
            line("update", "missing", Some(thing(2))),
            "com.example.thing/missing does not exist",
        ),
        (
            line("delete", "missing", None),
            "com.example.thing/missing does not exist",
        ),
        (
            format!(
                "{}\n",
                json!({"action": "delete", "collection": THING, "rkey": "a",
                       "swap": "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm"})
            ),
            "not the expected",
        ),
        (
            format!(
                "{}\n",
                json!({"action": "delete", "collection": THING, "rkey": "a", "swap": "zzz"})
            ),
            "\"swap\" is not a CID",
        ),
        (String::new(), "nothing to commit"),
    ];
    for (stdin, needle) in cases {
        let o = gelstore(data, &["repo", "apply"], &stdin);
        fails(&o, needle);
        assert_eq!(info(data), before, "{stdin:?} changed the repository");
    }
    ok(&gelstore(data, &["repo", "check"], ""));
}

#[test]
fn record_fixtures_are_accepted_or_rejected_as_expected() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let expectations: Value = serde_json::from_slice(
        &std::fs::read(root.join("fixtures/records/expectations.json")).unwrap(),
    )
    .unwrap();
    let records = ["chat", "message", "device", "keyWrap"];
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    ok(&gelstore(data, &["repo", "init"], ""));
    let mut checked = 0;
    for (name, expect) in expectations.as_object().unwrap() {
        let sub = if expect["valid"] == true {
            "valid"
        } else {
            "invalid"
        };
        let value: Value = serde_json::from_slice(
            &std::fs::read(root.join("fixtures/records").join(sub).join(name)).unwrap(),
        )
        .unwrap();
        let Some(ty) = value.get("$type").and_then(Value::as_str) else {
            continue;
        };
        let Some(short) = ty.strip_prefix("chat.gel.assistant.") else {
            continue;
        };
        if !records.contains(&short) {
            continue;
        }
        let rkey = expect["rkey"].as_str().unwrap_or("3lbqzcx2ss222");
        let w = json!({"action": "create", "collection": ty, "rkey": rkey, "value": value});
        let o = gelstore(data, &["repo", "apply"], &format!("{w}\n"));
        if expect["valid"] == true {
            ok(&o);
            // Remove it again, so the next fixture can use the same key.
            let d = json!({"action": "delete", "collection": ty, "rkey": rkey});
            ok(&gelstore(data, &["repo", "apply"], &format!("{d}\n")));
        } else {
            assert_eq!(o.status.code(), Some(1), "{name} was accepted");
        }
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} fixtures");
    ok(&gelstore(data, &["repo", "check"], ""));
}

#[test]
fn export_verify_import_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    ok(&gelstore(&a, &["repo", "init"], ""));
    let batch: String = (0..150)
        .map(|i| line("create", &format!("r{i:03}"), Some(thing(i))))
        .collect();
    ok(&gelstore(&a, &["repo", "apply"], &batch));
    let first = info(&a);
    assert_eq!(first["events"]["count"], 2, "{first}");
    ok(&gelstore(
        &a,
        &["repo", "apply"],
        &line("update", "r007", Some(thing(-7))),
    ));
    let head = info(&a);

    let car = dir.path().join("a.car");
    let exported = json_out(&gelstore(
        &a,
        &[
            "repo",
            "export",
            "--out",
            car.to_str().unwrap(),
            "--format",
            "json",
        ],
        "",
    ));
    assert_eq!(exported["commit"], head["commit"]);
    let summary = json_out(&gelstore(
        &a,
        &["repo", "verify", car.to_str().unwrap(), "--format", "json"],
        "",
    ));
    assert_eq!(
        summary,
        json!({"did": head["did"], "rev": head["rev"], "commit": head["commit"],
               "data": head["data"], "records": 150})
    );
    let with_did = gelstore(
        &a,
        &[
            "repo",
            "verify",
            car.to_str().unwrap(),
            "--did",
            head["did"].as_str().unwrap(),
        ],
        "",
    );
    assert!(ok(&with_did).starts_with("ok: "));
    fails(
        &gelstore(
            &a,
            &[
                "repo",
                "verify",
                car.to_str().unwrap(),
                "--did",
                "did:plc:ewvi7nxzyoun6zhxrhs64oiz",
            ],
            "",
        ),
        "expected",
    );

    // Import into a fresh folder: same head, same bytes out, read-only.
    let b = dir.path().join("b");
    let imported = json_out(&gelstore(
        &b,
        &["repo", "import", car.to_str().unwrap(), "--format", "json"],
        "",
    ));
    assert_eq!(imported["commit"], head["commit"]);
    assert_eq!(imported["writable"], false);
    assert_eq!(info(&b)["records"], 150);
    ok(&gelstore(&b, &["repo", "check"], ""));
    let car_b = dir.path().join("b.car");
    ok(&gelstore(
        &b,
        &["repo", "export", "--out", car_b.to_str().unwrap()],
        "",
    ));
    assert_eq!(std::fs::read(&car).unwrap(), std::fs::read(&car_b).unwrap());
    fails(
        &gelstore(
            &b,
            &["repo", "apply"],
            &line("create", "zz", Some(thing(1))),
        ),
        "no signing key",
    );
    fails(
        &gelstore(&b, &["repo", "import", car.to_str().unwrap()], ""),
        "import needs an empty store",
    );

    // --since: only what changed after the first commit.
    let diff = dir.path().join("diff.car");
    let since = first["rev"].as_str().unwrap();
    let d = json_out(&gelstore(
        &a,
        &[
            "repo",
            "export",
            "--out",
            diff.to_str().unwrap(),
            "--since",
            since,
            "--format",
            "json",
        ],
        "",
    ));
    let full_blocks = exported["blocks"].as_u64().unwrap();
    let diff_blocks = d["blocks"].as_u64().unwrap();
    assert!(
        diff_blocks > 1 && diff_blocks < full_blocks / 4,
        "{diff_blocks} of {full_blocks}"
    );
    // A diff is not a whole repository.
    fails(
        &gelstore(&a, &["repo", "verify", diff.to_str().unwrap()], ""),
        "missing",
    );
    fails(
        &gelstore(
            &a,
            &[
                "repo",
                "export",
                "--out",
                diff.to_str().unwrap(),
                "--since",
                "nope",
            ],
            "",
        ),
        "--since",
    );
}

#[test]
fn broken_cars_are_rejected_without_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    ok(&gelstore(&a, &["repo", "init"], ""));
    let batch: String = (0..20)
        .map(|i| line("create", &format!("r{i:03}"), Some(thing(i))))
        .collect();
    ok(&gelstore(&a, &["repo", "apply"], &batch));
    let car = dir.path().join("a.car");
    ok(&gelstore(
        &a,
        &["repo", "export", "--out", car.to_str().unwrap()],
        "",
    ));
    let bytes = std::fs::read(&car).unwrap();

    let broken = dir.path().join("broken.car");
    let mut flipped = bytes.clone();
    let at = flipped.len() - 10;
    flipped[at] ^= 0x01;
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (flipped, "does not match"),
        (bytes[..bytes.len() - 7].to_vec(), "truncated"),
        (b"not a car at all".to_vec(), "CAR"),
        (Vec::new(), "CAR"),
    ];
    for (content, needle) in cases {
        std::fs::write(&broken, &content).unwrap();
        fails(
            &gelstore(&a, &["repo", "verify", broken.to_str().unwrap()], ""),
            needle,
        );
        let fresh = dir.path().join("fresh");
        fails(
            &gelstore(&fresh, &["repo", "import", broken.to_str().unwrap()], ""),
            needle,
        );
        assert!(!fresh.exists(), "a failed import created the data folder");
    }
    // The right key, the wrong key.
    let did = info(&a)["did"].as_str().unwrap().to_owned();
    ok(&gelstore(
        &a,
        &["repo", "verify", car.to_str().unwrap(), "--key", &did],
        "",
    ));
    fails(
        &gelstore(
            &a,
            &[
                "repo",
                "verify",
                car.to_str().unwrap(),
                "--key",
                "did:key:zQ3shokFTS3brHcDQrn82RUDfCZESWL1ZdCEJwekUDPQiYBme",
            ],
            "",
        ),
        "signature",
    );
    fails(
        &gelstore(
            &a,
            &["repo", "verify", car.to_str().unwrap(), "--key", "nope"],
            "",
        ),
        "--key",
    );
    let o = gelstore(&a, &["repo", "verify", "/nonexistent/x.car"], "");
    assert_eq!(o.status.code(), Some(2));
}

/// A repository in `dir/a` holding one record.
fn one_record_repo(dir: &Path) -> PathBuf {
    let a = dir.join("a");
    ok(&gelstore(&a, &["repo", "init"], ""));
    ok(&gelstore(
        &a,
        &["repo", "apply"],
        &line("create", "one", Some(thing(1))),
    ));
    a
}

#[test]
fn export_to_stdout_and_import_from_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let a = one_record_repo(dir.path());
    let o = gelstore(&a, &["repo", "export", "--out", "-"], "");
    assert_eq!(o.status.code(), Some(0));
    let car = o.stdout;
    assert!(car.len() > 100);
    let b = dir.path().join("b");
    let mut child = Command::new(env!("CARGO_BIN_EXE_gelstore"))
        .args(["--data", b.to_str().unwrap(), "repo", "import", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&car).unwrap();
    let o = child.wait_with_output().unwrap();
    ok(&o);
    assert_eq!(info(&b)["commit"], info(&a)["commit"]);
}

/// `--out` naming a pipe (or a device such as `/dev/null`) writes into it:
/// the write-beside-and-rename that protects a regular file would replace
/// the pipe with a regular file.
#[test]
fn export_into_a_named_pipe_writes_through_it() {
    use std::os::unix::fs::FileTypeExt as _;
    let dir = tempfile::tempdir().unwrap();
    let a = one_record_repo(dir.path());
    let fifo = dir.path().join("car.pipe");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success(), "mkfifo");
    // Blocks in open until the export opens the pipe for writing.
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    ok(&gelstore(
        &a,
        &["repo", "export", "--out", fifo.to_str().unwrap()],
        "",
    ));
    let kind = std::fs::symlink_metadata(&fifo).unwrap().file_type();
    assert!(kind.is_fifo(), "the pipe was replaced: {kind:?}");
    let through_pipe = reader.join().unwrap();
    let to_stdout = gelstore(&a, &["repo", "export", "--out", "-"], "");
    assert_eq!(through_pipe, to_stdout.stdout);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
