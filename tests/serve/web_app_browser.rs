//! The chat page (`web/app/`, served by `gelstore serve` at `/`) in real
//! headless Chromium, driven by `web/app/test/drive.mjs` (pinned
//! `puppeteer-core` with the system's `/usr/bin/chromium`; nothing is
//! downloaded at run time). The scenario is here; the driver only clicks,
//! types and reads what it is told.
//!
//! - `the_checked_in_page_is_what_its_sources_build`: `web/app/dist/` is
//!   rebuilt into a temp dir with the pinned esbuild and compared byte for
//!   byte (as `lex gen --check` does for the generated Rust types).
//! - `the_page_is_served_with_a_strict_policy`: `/` and its assets, with the
//!   Content-Security-Policy.
//! - `the_page_pairs_reads_writes_streams_and_approves`: a CLI device
//!   writes a chat; the page signs in (a wrong password first), pairs as a
//!   new device approved by the CLI, shows the chat with its two attempts,
//!   sends a message the CLI reads after a sync, streams a reply, answers
//!   an approval, regenerates, opens a tool output kept as a sealed blob
//!   (and says so when the blob is missing or altered), makes a chat; then a session that ends (the
//!   draft kept), one that expires (refreshed), a record that does not
//!   open, and the server going away mid-stream. The server's folder holds
//!   no plaintext the page typed. Screenshots go to
//!   `target/web-screenshots/`.
//! - `the_page_signs_in_at_the_pds_the_account_lives_on`: the account lives
//!   on the reference PDS; `gelstore serve --web-pds` serves the page,
//!   which signs in there, pairs, reads the CLI's synced chat, writes a
//!   message with its pending reply that the CLI fills (`chat reply
//!   --asked`) and syncs back, and answers an approval by writing the
//!   sealed answer itself. The PDS holds no plaintext the page typed.
//!
//! Needs Node 20.19+ and npm (`npm ci` in `web/seal` and `web/app` on
//! first use). The browser test needs `/usr/bin/chromium` (Debian's
//! `chromium`); without it the test is skipped with a message, unless `CI`
//! is set, where it fails.

use crate::support::browser;
use crate::support::fixtures::files_under;
use crate::support::pds::Pds;
use crate::support::serve;

use std::path::Path;
use std::process::{Command, Stdio};

use browser::{Browser, chromium_present, installed};
use serde_json::{Value, json};
use serve::{PASSWORD, Serve, first_line, gel_ok, http};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_checked_in_page_is_what_its_sources_build() {
    let app = installed();
    let out = tempfile::tempdir().unwrap();
    let run = Command::new("node")
        .arg("build.mjs")
        .arg("--out")
        .arg(out.path())
        .current_dir(app)
        .stdin(Stdio::null())
        .output()
        .expect("node runs");
    assert!(
        run.status.success(),
        "build.mjs failed:\n{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    for name in ["index.html", "app.js", "app.css"] {
        let built = std::fs::read(out.path().join(name)).unwrap();
        let checked_in = std::fs::read(app.join("dist").join(name)).unwrap();
        assert!(
            built == checked_in,
            "web/app/dist/{name} is stale: rebuild it with \
             `cd web/seal && npm ci && cd ../app && npm ci && node build.mjs` and commit it"
        );
        let head = String::from_utf8_lossy(&checked_in[..checked_in.len().min(300)]).into_owned();
        assert!(head.contains("@generated"), "{name} is not marked: {head}");
    }
}

#[test]
fn the_page_is_served_with_a_strict_policy() {
    let serve = Serve::start();
    for (path, kind) in [
        ("/", "text/html"),
        ("/index.html", "text/html"),
        ("/app.js", "text/javascript"),
        ("/app.css", "text/css"),
    ] {
        let r = http(&serve.addr(), "GET", path, &[], b"");
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        assert!(
            r.header("content-type").unwrap().starts_with(kind),
            "{path}"
        );
        let csp = r.header("content-security-policy").expect("a policy");
        for directive in [
            "default-src 'self'",
            "script-src 'self';",
            "style-src 'self';",
            "object-src 'none'",
            "frame-ancestors 'none'",
            "base-uri 'none'",
        ] {
            assert!(csp.contains(directive), "{path}: {csp}");
        }
        let host = serve.addr();
        assert!(
            csp.contains(&format!("connect-src 'self' ws://{host} wss://{host};")),
            "{csp}"
        );
        assert!(!csp.contains("unsafe"), "{csp}");
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    }
    // No inline script or style: everything comes from the files above.
    let page = http(&serve.addr(), "GET", "/", &[], b"").text();
    assert!(
        !page.contains("<script>") && !page.contains("style="),
        "{page}"
    );
    // Other paths are still the server's.
    let did = http(&serve.addr(), "GET", "/.well-known/did.json", &[], b"");
    assert_eq!(did.status, 200);
}

fn sync(data: &Path, serve: &Serve) -> String {
    gel_ok(
        data,
        &[
            "sync",
            "--pds",
            &serve.service,
            "--identifier",
            &serve.handle,
            "--password",
            &serve.password,
        ],
    )
}

fn stream(case: &str) -> String {
    root()
        .join("fixtures/streams")
        .join(case)
        .join("input.jsonl")
        .display()
        .to_string()
}

/// The whole output of the `tool_result` line of stream `case`.
fn fixture_tool_output(case: &str) -> String {
    let input = std::fs::read_to_string(stream(case)).unwrap();
    input
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["type"] == "tool_result")
        .and_then(|v| v["output"].as_str().map(str::to_owned))
        .expect("a tool_result line")
}

fn assistant_args() -> Vec<String> {
    let script = root().join("tests/assistant/replay.py");
    vec![
        "--assistant".into(),
        format!("python3 {}", script.display()),
        "--approve-tools".into(),
        "delete_files".into(),
    ]
}

#[test]
fn the_page_pairs_reads_writes_streams_and_approves() {
    if !chromium_present() {
        return;
    }
    let shots = root().join("target/web-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let srv = dir.path().join("server");
    let phone = dir.path().join("phone");

    // The CLI device writes a chat: a question with two attempts of reply.
    gel_ok(&phone, &["device", "init", "--name", "phone"]);
    let chat = first_line(&gel_ok(&phone, &["chat", "new", "--title", "Pancakes"]));
    let question = first_line(&gel_ok(
        &phone,
        &[
            "chat",
            "send",
            "--chat",
            &chat,
            "What do I need for pancakes?",
        ],
    ));
    let plain = stream("plain_text_small_deltas");
    gel_ok(
        &phone,
        &["chat", "reply", "--to", &question, "--events", &plain],
    );
    let other = stream("end_replaces_deltas");
    gel_ok(
        &phone,
        &[
            "chat",
            "reply",
            "--to",
            &question,
            "--attempt",
            "1",
            "--events",
            &other,
        ],
    );

    // The server folder: the account (a keyless start), then paired as a
    // device of it, then started with the assistant.
    let serve = Serve::start_in(&srv, &[]);
    let listen = serve.addr();
    sync(&phone, &serve);
    serve.stop();
    let code = first_line(&gel_ok(&srv, &["device", "pair"]));
    gel_ok(&phone, &["device", "approve", &code]);
    let serve = Serve::start_at(&srv, &listen, &[]);
    sync(&phone, &serve);
    serve.stop();
    gel_ok(&srv, &["device", "join"]);
    let args = assistant_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let serve = Serve::start_at(&srv, &listen, &args);

    let mut b = Browser::launch(&shots);
    b.goto(&serve.service);

    // A wrong password: a clear message, the handle kept.
    b.type_in("#handle", &serve.handle);
    b.type_in("#password", "not the password");
    b.click("#signin-submit");
    b.wait_text("#signin-error", "Wrong handle or password");
    assert_eq!(b.value("#handle"), serve.handle);
    b.screenshot("01-wrong-password");

    // Sign in; pair this browser: the page shows the code, the CLI approves.
    b.type_in("#password", PASSWORD);
    b.click("#signin-submit");
    b.wait_text("#pair-body", "not a device of the account yet");
    b.click("#pair-start");
    b.wait_text("#pair-code", "gp1-");
    let code = b.text("#pair-code");
    b.screenshot("02-pairing-code");
    sync(&phone, &serve);
    gel_ok(&phone, &["device", "approve", code.trim()]);
    sync(&phone, &serve);
    let listed = gel_ok(&phone, &["device", "ls"]);
    assert!(listed.contains("Chromium (web)"), "{listed}");

    // The page joins and shows the CLI's chat, replies by attempt.
    b.wait_text_for("#chat-list", "Pancakes", 30_000);
    b.click(&format!("button[data-chat=\"{chat}\"]"));
    b.wait_text("#messages", "What do I need for pancakes?");
    b.wait_text("#messages", "Hello world");
    b.wait_text(".attempt-label", "Attempt 2 of 2");
    b.screenshot("03-thread-attempt-2");
    b.click("button[aria-label=\"Previous attempt\"]");
    b.wait_text(".attempt-label", "Attempt 1 of 2");
    b.wait_text("#messages", "42 is the answer");

    // A message sealed in the browser (sent with Ctrl+Enter); the assistant's
    // reply streams in over subscribeReply.
    b.type_in(
        "#draft",
        "Hello from the browser STREAM:plain_text_small_deltas",
    );
    b.run(json!({"do": "press", "sel": "#draft", "key": "Enter", "mods": ["Control"]}));
    b.wait_text("#messages", "Hello from the browser");
    b.wait_text_for(".msg.assistant:last-child", "Ça va?", 30_000);
    b.wait_text_for(".msg.assistant:last-child", "Attempt 1 of 1", 30_000);
    b.screenshot("04-streamed-reply");
    let log = b.run(json!({"do": "log"}));
    assert!(
        log["frames"].as_u64().unwrap() > 3,
        "the reply came over the websocket: {log}"
    );
    sync(&phone, &serve);
    let shown = gel_ok(
        &phone,
        &["chat", "show", "--chat", &chat, "--format", "json"],
    );
    assert!(shown.contains("Hello from the browser"), "{shown}");
    assert!(shown.contains("Ça va?"), "{shown}");

    // An approval: the call's name and arguments shown; allowed.
    b.type_in("#draft", "Delete my drafts STREAM:approval_waiting");
    b.click("#send");
    b.wait_text_for(".approval", "delete_files", 30_000);
    b.wait_text(".approval pre.args", "drafts/a.md");
    b.screenshot("05-approval");
    b.click("input[value=\"approved\"]");
    b.click(".approval .answer");
    b.wait_text_for("#messages", "ran delete_files", 30_000);
    b.wait_text("#messages", "Allowed call toolu_11");
    b.wait_text_for(".msg.assistant:last-child", "Ça va?", 30_000);

    // Regenerate: the next attempt of the last reply.
    b.click(".msg.assistant:last-child .regenerate");
    b.wait_text_for(
        ".msg.assistant:last-child .attempt-label",
        "Attempt 2 of 2",
        30_000,
    );
    b.wait_text_for(".msg.assistant:last-child", "Ça va?", 30_000);
    b.screenshot("06-regenerated");

    // A tool output too long for the record: the reply keeps its start and
    // a sealed blob; the page fetches the blob, checks it and opens it.
    b.type_in("#draft", "Logs? STREAM:tool_output_to_blob");
    b.click("#send");
    b.wait_text_for(
        ".msg.assistant:last-child .show-output",
        "Show the whole output",
        30_000,
    );
    b.wait_text(".msg.assistant:last-child", "The log shows 4000 requests.");
    let show = ".msg.assistant:last-child .show-output";
    b.click(show);
    b.wait_text(".msg.assistant:last-child .whole", "Download it");
    let whole = b.run(json!({"do": "text", "sel": ".whole-output", "raw": true}))["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        whole == fixture_tool_output("tool_output_to_blob"),
        "{} bytes shown",
        whole.len()
    );
    let href = b.run(json!({"do": "attr", "sel": ".download-output", "name": "href"}));
    assert!(
        href["value"].as_str().unwrap().starts_with("blob:"),
        "{href}"
    );
    b.screenshot("07-whole-output");
    let cid = b
        .run(json!({"do": "attr", "sel": ".msg.assistant:last-child .whole", "name": "data-cid"}))
        ["value"]
        .as_str()
        .unwrap()
        .to_owned();
    let blob_file = srv.join("blobs").join(&cid);
    let sealed = std::fs::read(&blob_file).unwrap();

    // The blob gone from the server, then changed on it: a clear message
    // each time (a fresh load, so nothing opened before is reused).
    std::fs::remove_file(&blob_file).unwrap();
    b.goto(&serve.service);
    b.click(&format!("button[data-chat=\"{chat}\"]"));
    b.click(show);
    b.wait_text(".output-problem", "not on the server");
    let mut altered = sealed.clone();
    altered[100] ^= 1;
    std::fs::write(&blob_file, &altered).unwrap();
    b.click(show);
    b.wait_text(".output-problem", "does not open");
    b.wait_text(".output-problem", "Nothing of it is shown");
    assert_eq!(
        b.run(json!({"do": "count", "sel": ".whole-output"}))["count"],
        0
    );
    b.screenshot("08-whole-output-altered");
    std::fs::write(&blob_file, &sealed).unwrap();

    // A chat made in the browser reaches the CLI.
    b.type_in("#new-title", "Made in the browser");
    b.click("#new-chat button");
    b.wait_text("#chat-list", "Made in the browser");
    b.wait_text("#thread-title", "Made in the browser");
    sync(&phone, &serve);
    let chats = gel_ok(&phone, &["chat", "ls"]);
    assert!(chats.contains("Made in the browser"), "{chats}");
    b.click(&format!("button[data-chat=\"{chat}\"]"));
    b.wait_text("#messages", "Delete my drafts");

    // On a phone-sized screen.
    b.run(json!({"do": "viewport", "width": 390, "height": 844}));
    b.screenshot("09-phone");
    b.run(json!({"do": "viewport", "width": 1100, "height": 900}));

    // A record that does not open: the question, edited on the server (a
    // clear field changed, as a hostile PDS could).
    let token = serve.access_token();
    let did = serve.did.replace('%', "%25");
    let r = http(
        &serve.addr(),
        "GET",
        &format!(
            "/xrpc/com.atproto.repo.getRecord?repo={did}&collection=chat.gel.assistant.message&rkey={question}"
        ),
        &[],
        b"",
    );
    let mut record = r.json()["value"].clone();
    record["createdAt"] = json!("2020-01-01T00:00:00.000Z");
    let put = http(
        &serve.addr(),
        "POST",
        "/xrpc/com.atproto.repo.putRecord",
        &[
            ("content-type", "application/json"),
            ("authorization", &format!("Bearer {token}")),
        ],
        json!({"repo": serve.did, "collection": "chat.gel.assistant.message", "rkey": question, "record": record})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(put.status, 200, "{}", put.text());
    b.click(&format!("button[data-chat=\"{chat}\"]"));
    b.wait_text(".unopened", "does not open");
    b.wait_text("#messages", "Hello from the browser");
    b.screenshot("10-record-does-not-open");

    // The session ends (a new password ends every session): the page asks
    // to sign in again and keeps the draft; a session that expires (2 s
    // tokens) is refreshed without a word.
    b.type_in("#draft", "Draft kept across sign-in");
    let serve = {
        serve.stop();
        Serve::start_with(
            &srv,
            &listen,
            &args,
            &[("GELSTORE_ACCESS_TOKEN_SECS", "2")],
            "a new password",
        )
    };
    b.click("#send");
    b.wait_text("#signin-error", "session has ended");
    b.screenshot("11-session-ended");
    b.type_in("#password", "a new password");
    b.click("#signin-submit");
    b.wait_text("#notice", "Signed in again");
    assert_eq!(b.value("#draft"), "Draft kept across sign-in");
    std::thread::sleep(std::time::Duration::from_secs(3));
    b.run(json!({"do": "click", "sel": "#ask"}));
    b.click("#send");
    b.wait_text("#messages", "Draft kept across sign-in");
    assert_eq!(b.value("#draft"), "");
    b.run(json!({"do": "click", "sel": "#ask"}));

    // The server goes away mid-stream: the page says so.
    b.type_in("#draft", "Think hard STREAM:hang");
    b.click("#send");
    b.wait_text_for(".live", "Thinking", 30_000);
    serve.stop();
    b.wait_text_for(".stream-problem", "server went away", 40_000);
    b.screenshot("12-server-gone");

    // Only this origin was asked for anything, and CSP refused nothing.
    let log = b.run(json!({"do": "log"}));
    let origin = format!("{}/", serve_origin(&listen));
    requests_only_to(&log, &[&origin, &format!("http://{listen}/")]);
    for url in log["sockets"].as_array().unwrap() {
        assert!(url.as_str().unwrap().starts_with("ws://"), "{url}");
    }
    no_policy_or_page_errors(&log);

    // The server's folder holds none of what the page typed.
    drop(b);
    for file in files_under(&srv) {
        let bytes = std::fs::read(&file).unwrap();
        for typed in [
            "Hello from the browser",
            "Delete my drafts",
            "Made in the browser",
            "Draft kept across sign-in",
            "Think hard",
        ] {
            assert!(
                !bytes.windows(typed.len()).any(|w| w == typed.as_bytes()),
                "{typed:?} is in {}",
                file.display()
            );
        }
    }
}

/// Every request in the driver's `log` went to one of `prefixes`.
fn requests_only_to(log: &Value, prefixes: &[&str]) {
    for url in log["requests"].as_array().unwrap() {
        let url = url.as_str().unwrap();
        assert!(
            prefixes.iter().any(|p| url.starts_with(p)),
            "a request elsewhere: {url}"
        );
    }
}

/// The page logged no CSP violation and no uncaught error.
fn no_policy_or_page_errors(log: &Value) {
    let errors: Vec<&str> = log["consoleErrors"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|e| e.contains("Content Security Policy") || e.starts_with("pageerror"))
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
}

/// `http://localhost:PORT` for a loopback `listen` (what the page is opened at).
fn serve_origin(listen: &str) -> String {
    let port = listen.rsplit(':').next().unwrap();
    format!("http://localhost:{port}")
}

/// `chat show --format json` of `chat` on `data`: the messages.
fn shown_messages(data: &Path, chat: &str) -> Vec<Value> {
    let shown: Value = serde_json::from_str(&gel_ok(
        data,
        &["chat", "show", "--chat", chat, "--format", "json"],
    ))
    .unwrap();
    shown["messages"].as_array().unwrap().clone()
}

/// The key of the user message whose text contains `text`.
fn user_key_with(messages: &[Value], text: &str) -> String {
    messages
        .iter()
        .find(|m| m["role"] == "user" && m["content"].to_string().contains(text))
        .and_then(|m| m["key"].as_str())
        .unwrap_or_else(|| panic!("no user message with {text:?}: {messages:?}"))
        .to_owned()
}

#[test]
fn the_page_signs_in_at_the_pds_the_account_lives_on() {
    if !chromium_present() {
        return;
    }
    let shots = root().join("target/web-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let phone = dir.path().join("phone");
    let pds = Pds::start();
    let sync = |data: &Path| {
        gel_ok(
            data,
            &[
                "sync",
                "--pds",
                &pds.service,
                "--identifier",
                &pds.handle,
                "--password",
                &pds.password,
                "--plc",
                &pds.plc,
            ],
        )
    };

    // The CLI device's chat, synced to the PDS.
    gel_ok(&phone, &["device", "init", "--name", "phone"]);
    let chat = first_line(&gel_ok(&phone, &["chat", "new", "--title", "On my PDS"]));
    let question = first_line(&gel_ok(
        &phone,
        &["chat", "send", "--chat", &chat, "Where do my chats live?"],
    ));
    let plain = stream("plain_text_small_deltas");
    gel_ok(
        &phone,
        &["chat", "reply", "--to", &question, "--events", &plain],
    );
    sync(&phone);

    // The page comes from a gelstore serve of its own (another account),
    // which lets it sign in at the PDS.
    let serve = Serve::start_in(&dir.path().join("server"), &["--web-pds", &pds.service]);
    let config = http(&serve.addr(), "GET", "/config.json", &[], b"");
    assert_eq!(config.json(), json!({"servers": [pds.service]}));
    let csp = config.header("content-security-policy").unwrap().to_owned();
    assert!(csp.contains(&format!(" {};", pds.service)), "{csp}");

    let mut b = Browser::launch(&shots);
    b.goto(&serve.service);
    b.wait_text("#service-field", "Your account's server");
    b.run(json!({"do": "select", "sel": "#service", "value": pds.service}));
    b.screenshot("20-pds-sign-in");
    b.type_in("#handle", &pds.handle);
    b.type_in("#password", "not the password");
    b.click("#signin-submit");
    b.wait_text("#signin-error", "Wrong handle or password");
    b.type_in("#password", &pds.password);
    b.click("#signin-submit");
    b.wait_text("#who", &pds.service);
    b.wait_text("#pair-body", "not a device of the account yet");
    b.click("#pair-start");
    b.wait_text("#pair-code", "gp1-");
    b.wait_text("#pair-commands", &format!("--pds {}", pds.service));
    let code = b.text("#pair-code");
    b.screenshot("21-pds-pairing-code");
    sync(&phone);
    gel_ok(&phone, &["device", "approve", code.trim()]);
    sync(&phone);

    // The page joins and reads the chat from the PDS.
    b.wait_text_for("#chat-list", "On my PDS", 30_000);
    b.click(&format!("button[data-chat=\"{chat}\"]"));
    b.wait_text("#messages", "Where do my chats live?");
    b.wait_text("#messages", "42 is the answer");

    // A message with its pending reply; the CLI device fills the reply
    // after a sync, and the page shows it once it is back on the PDS.
    b.type_in("#draft", "Written on the PDS");
    b.click("#send");
    b.wait_text("#messages", "Written on the PDS");
    b.wait_text(".pending-note", "syncs it to your PDS");
    b.screenshot("22-pds-pending");
    sync(&phone);
    let written = user_key_with(&shown_messages(&phone, &chat), "Written on the PDS");
    let other = stream("end_replaces_deltas");
    gel_ok(
        &phone,
        &[
            "chat", "reply", "--to", &written, "--asked", "--events", &other,
        ],
    );
    sync(&phone);
    b.wait_text_for(".msg.assistant:last-child", "Hello world", 30_000);
    b.wait_text(".msg.assistant:last-child .attempt-label", "Attempt 1 of 1");

    // Two messages without a reply, one after the other: both are shown,
    // in order (they continue from the same reply).
    b.run(json!({"do": "click", "sel": "#ask"}));
    b.type_in("#draft", "First without a reply");
    b.click("#send");
    b.wait_text("#messages", "First without a reply");
    b.type_in("#draft", "Second without a reply");
    b.click("#send");
    b.wait_text("#messages", "Second without a reply");
    let shown = b.text("#messages");
    let first = shown
        .find("First without a reply")
        .expect("the first is still shown");
    assert!(
        first < shown.find("Second without a reply").unwrap(),
        "{shown}"
    );
    b.run(json!({"do": "click", "sel": "#ask"}));

    // An approval: the CLI's reply waits; the page writes the answer.
    b.type_in("#draft", "Delete my drafts on the PDS");
    b.click("#send");
    b.wait_text("#messages", "Delete my drafts on the PDS");
    sync(&phone);
    let ask = user_key_with(
        &shown_messages(&phone, &chat),
        "Delete my drafts on the PDS",
    );
    let waiting = stream("approval_waiting");
    gel_ok(
        &phone,
        &[
            "chat",
            "reply",
            "--to",
            &ask,
            "--asked",
            "--events",
            &waiting,
            "--approve-tools",
            "delete_files",
        ],
    );
    sync(&phone);
    b.wait_text_for(".approval", "delete_files", 30_000);
    b.wait_text(".approval pre.args", "drafts/a.md");
    b.wait_text("#messages", "First without a reply");
    b.screenshot("23-pds-approval");
    b.click("input[value=\"approved\"]");
    b.click(".approval .answer");
    b.wait_text_for("#messages", "Allowed call toolu_11", 30_000);
    sync(&phone);
    let messages = shown_messages(&phone, &chat);
    let answer = messages
        .iter()
        .find(|m| m["parent"] == format!("{ask}.r0"))
        .unwrap_or_else(|| panic!("no answer to {ask}.r0: {messages:?}"));
    let part = &answer["content"]["parts"][0];
    assert_eq!(part["callId"], "toolu_11", "{answer}");
    assert_eq!(part["decision"], "approved", "{answer}");
    let answer = answer["key"].as_str().unwrap().to_owned();
    assert!(
        messages
            .iter()
            .any(|m| m["key"] == format!("{answer}.r0") && m["status"] == "pending"),
        "the answer asks for its reply: {messages:?}"
    );
    gel_ok(
        &phone,
        &[
            "chat",
            "reply",
            "--to",
            &answer,
            "--asked",
            "--events",
            &plain,
            "--tool-output",
            "toolu_11=deleted 1 file",
        ],
    );
    sync(&phone);
    b.wait_text_for(".msg.assistant:last-child", "deleted 1 file", 30_000);
    b.wait_text(".msg.assistant:last-child", "Result (succeeded)");
    b.wait_text(".msg.assistant:last-child", "Ça va?");
    b.screenshot("24-pds-answered");

    // Only the page's server and the PDS were asked for anything.
    let log = b.run(json!({"do": "log"}));
    let page = format!("{}/", serve_origin(&serve.addr()));
    requests_only_to(
        &log,
        &[
            &page,
            &format!("{}/", serve.service),
            &format!("{}/", pds.service),
        ],
    );
    no_policy_or_page_errors(&log);
    drop(b);

    // The PDS stores only what was sealed: none of the page's words.
    let did = pds.did.replace('%', "%25");
    let port = pds.service.trim_start_matches("http://");
    let stored = http(
        port,
        "GET",
        &format!("/xrpc/com.atproto.sync.getRepo?did={did}"),
        &[],
        b"",
    );
    assert_eq!(stored.status, 200);
    for typed in ["Written on the PDS", "Delete my drafts on the PDS"] {
        assert!(
            !stored
                .body
                .windows(typed.len())
                .any(|w| w == typed.as_bytes()),
            "{typed:?} is on the PDS"
        );
    }
}
