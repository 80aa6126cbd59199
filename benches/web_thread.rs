//! Opening a 1,000-message thread in the browser, next to the same open in
//! Rust: the same records, in the same run.
//!
//! Run: `cargo bench --bench web_thread` (release profile; needs Node, the
//! page's npm packages, installed on first use, and `/usr/bin/chromium`).
//!
//! A CLI data folder gets a chat of 500 exchanges (a user message of
//! 150–700 characters and a finished reply of 600–4,000, sealed and padded
//! as `gelstore chat` writes them: 1,000 message records). It is synced
//! to a `gelstore serve`; headless Chromium signs in, is paired by the CLI
//! as a new device, and opens the chat several times. The page exposes
//! its timings as performance marks and measures (`gel:*`, see
//! `loadThread` in `web/app/src/main.ts`), read through the test driver:
//!
//! - *newest painted*: from the click to the paint of the newest messages;
//! - *all opened*: from the click until every record is opened and shown;
//! - *open records*: the time in `openRecord` (the envelope checked, the
//!   record key derived, XChaCha20-Poly1305, the DAG-CBOR read), per record;
//! - *fetch*: the `getThread` pages (JSON over loopback HTTP).
//!
//! Rust opens the same records from the CLI's folder: `ChatStore::thread`
//! in this process, and `gelstore chat show` as a whole process (start,
//! keyring, open, print). Each row is the best of the runs; the browser's
//! first run (cold JIT) is reported on its own.
//!
//! Figures of past runs, and what profiling found: `benches/RESULTS.md#web_thread`.

#[allow(dead_code)] // the tests\' support module; a bench uses a part
#[path = "../tests/support/browser.rs"]
mod browser;
#[allow(dead_code)] // the tests\' support module; a bench uses a part
#[path = "../tests/support/launch.rs"]
mod launch;
#[allow(dead_code)] // the tests\' support module; a bench uses a part
#[path = "../tests/support/serve.rs"]
mod serve;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use browser::{Browser, chromium_present};
use gelstore::chat::approval::NoApproval;
use gelstore::chat::keys::Attempt;
use gelstore::chat::reply::Reply;
use gelstore::chat::store::ChatStore;
use serde_json::{Value, json};
use serve::{PASSWORD, Serve, gel_ok};

const EXCHANGES: usize = 500;
const RUNS: usize = 5;
const TITLE: &str = "A long thread";

/// Deterministic filler text (a small LCG), `len` characters of words.
struct Words(u64);

impl Words {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn between(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() as usize) % (hi - lo)
    }
    fn text(&mut self, len: usize) -> String {
        const WORDS: &[&str] = &[
            "the",
            "sealed",
            "record",
            "opens",
            "in",
            "a",
            "browser",
            "with",
            "its",
            "chat",
            "key",
            "and",
            "every",
            "reply",
            "keeps",
            "attempt",
            "numbers",
            "so",
            "that",
            "you",
            "can",
            "switch",
            "between",
            "them;",
            "the",
            "server",
            "stores",
            "ciphertext",
            "only,",
            "which",
            "is",
            "why",
            "it",
            "cannot",
            "render",
            "anything.",
            "Here",
            "is",
            "a",
            "longer",
            "explanation:",
            "first,",
            "then",
            "finally",
        ];
        let mut s = String::with_capacity(len + 16);
        while s.len() < len {
            if !s.is_empty() {
                s.push(if self.next().is_multiple_of(23) {
                    '\n'
                } else {
                    ' '
                });
            }
            s.push_str(WORDS[self.next() as usize % WORDS.len()]);
        }
        s
    }
}

/// A recorded run whose reply is `text`, in 60-character deltas.
fn run_of(text: &str) -> String {
    let mut lines = vec![
        json!({"type": "model", "provider": "anthropic", "id": "claude-sonnet-4-5"}),
        json!({"type": "text_start", "contentIndex": 0}),
    ];
    let chars: Vec<char> = text.chars().collect();
    for chunk in chars.chunks(60) {
        lines.push(json!({"type": "text_delta", "contentIndex": 0, "delta": chunk.iter().collect::<String>()}));
    }
    lines.push(json!({"type": "text_end", "contentIndex": 0, "content": text}));
    lines.push(json!({"type": "done", "stopReason": "stop", "usage": {"inputTokens": 900, "outputTokens": 400}}));
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// The chat, written through `ChatStore` as `gelstore chat` does; its key
/// and the newest reply's text.
fn build_chat(phone: &Path) -> (String, String) {
    gelstore::device::init(phone, Some("phone"), &mut gelstore::seal::os_rng()).unwrap();
    let mut store = ChatStore::open(phone).unwrap();
    let chat = store.create_chat(Some(TITLE), None).unwrap();
    let mut words = Words(17);
    let mut parent = None;
    let mut newest = String::new();
    for i in 0..EXCHANGES {
        let len = words.between(150, 700);
        let ask = format!("Question {i}: {}", words.text(len));
        let msg = store.send(&chat, &ask, parent, Attempt::FIRST).unwrap();
        let pending = store.start_reply(msg, None).unwrap();
        let len = words.between(600, 4000);
        newest = format!("Answer {i}: {}", words.text(len));
        let f = Reply::new(pending.key, Arc::new(NoApproval)).run_jsonl(&run_of(&newest));
        store.finish_reply(&pending, &f.reply).unwrap();
        parent = Some(pending.key);
    }
    (chat, newest)
}

fn best(runs: &[Duration]) -> Duration {
    runs.iter().copied().min().unwrap()
}

fn sync(data: &Path, serve: &Serve) {
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
    );
}

/// One open of the chat in the page: the `gel:*` entries, by name.
fn open_in_page(b: &mut Browser, chat: &str) -> std::collections::BTreeMap<String, Value> {
    b.run(json!({"do": "marks", "clear": true}));
    b.click(&format!("button[data-chat=\"{chat}\"]"));
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut got = std::collections::BTreeMap::new();
    while !(got.contains_key("gel:all-opened") && got.contains_key("gel:newest-painted")) {
        assert!(
            Instant::now() < deadline,
            "the page did not finish opening: {got:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
        for m in b.run(json!({"do": "marks"}))["marks"].as_array().unwrap() {
            got.insert(m["name"].as_str().unwrap().to_owned(), m.clone());
        }
    }
    got
}

fn ms(d: f64) -> String {
    format!("{d:>9.1} ms")
}

fn main() {
    if !chromium_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let phone = dir.path().join("phone");
    let srv = dir.path().join("server");

    let t = Instant::now();
    let (chat, newest) = build_chat(&phone);
    let sealed_bytes: u64 = walk_size(&phone);
    println!(
        "built {EXCHANGES} exchanges ({} messages) in {:.1} s; the data folder: {:.1} MB",
        2 * EXCHANGES,
        t.elapsed().as_secs_f64(),
        sealed_bytes as f64 / 1e6
    );
    let records = 2 * EXCHANGES;

    // Rust: the library's open of the thread, and the CLI as a process.
    let store = ChatStore::open(&phone).unwrap();
    let mut lib = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        let thread = store.thread(&chat).unwrap();
        lib.push(t.elapsed());
        assert_eq!(thread.states.len(), records);
    }
    drop(store);
    let mut cli = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_gelstore"))
            .arg("--data")
            .arg(&phone)
            .args(["chat", "show", "--chat", &chat])
            .output()
            .unwrap();
        cli.push(t.elapsed());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let head: String = newest.chars().take(40).collect();
        assert!(String::from_utf8_lossy(&out.stdout).contains(&head));
    }

    // The browser: the same records through the server.
    let serve = Serve::start_in(&srv, &[]);
    sync(&phone, &serve);
    let shots = dir.path().join("shots");
    std::fs::create_dir_all(&shots).unwrap();
    let mut b = Browser::launch(&shots);
    b.goto(&serve.service);
    b.type_in("#handle", &serve.handle);
    b.type_in("#password", PASSWORD);
    b.click("#signin-submit");
    b.click("#pair-start");
    b.wait_text("#pair-code", "gp1-");
    let code = b.text("#pair-code");
    sync(&phone, &serve);
    gel_ok(&phone, &["device", "approve", code.trim()]);
    sync(&phone, &serve);
    b.wait_text_for("#chat-list", TITLE, 60_000);

    let mut opens = Vec::new();
    for _ in 0..RUNS + 1 {
        let marks = open_in_page(&mut b, &chat);
        b.wait_text("#messages", &newest.chars().take(40).collect::<String>());
        opens.push(marks);
    }
    let dur = |m: &std::collections::BTreeMap<String, Value>, name: &str| {
        m[name]["duration"].as_f64().unwrap()
    };
    let at = |m: &std::collections::BTreeMap<String, Value>, name: &str| {
        m[name]["start"].as_f64().unwrap()
    };
    let shown = opens[0]["gel:open-records"]["detail"]["records"]
        .as_u64()
        .unwrap() as usize;
    assert_eq!(shown, records, "the page opened every message");
    let rows = |f: &dyn Fn(&std::collections::BTreeMap<String, Value>) -> f64| {
        let cold = f(&opens[0]);
        let warm = opens[1..].iter().map(f).fold(f64::INFINITY, f64::min);
        (cold, warm)
    };
    let per = |total_ms: f64| format!("{:>7.1} µs/record", total_ms * 1000.0 / records as f64);

    println!(
        "\nopening a thread of {records} messages (Rust: best of {RUNS}; browser: the first open, then the best of the next {RUNS})"
    );
    println!("  {:<44} {:>12} {:>12}", "", "first", "best");
    let line = |name: &str, cold: Option<f64>, warm: f64, per_record: bool| {
        println!(
            "  {name:<44} {:>12} {}  {}",
            cold.map(ms).unwrap_or_default(),
            ms(warm),
            if per_record { per(warm) } else { String::new() }
        );
    };
    let (c, w) = rows(&|m| dur(m, "gel:newest-painted"));
    line(
        "browser: click → newest messages painted",
        Some(c),
        w,
        false,
    );
    let (c, w) = rows(&|m| dur(m, "gel:all-opened"));
    line("browser: click → all opened and shown", Some(c), w, true);
    let (c, w) = rows(&|m| at(m, "gel:thread-fetched") - at(m, "gel:thread-keys"));
    line(
        "browser: getThread (fetch and parse JSON)",
        Some(c),
        w,
        true,
    );
    let (c, w) = rows(&|m| dur(m, "gel:open-records"));
    line("browser: openRecord of every message", Some(c), w, true);
    line(
        "rust: ChatStore::thread",
        None,
        best(&lib).as_secs_f64() * 1e3,
        true,
    );
    line(
        "rust: gelstore chat show (whole process)",
        None,
        best(&cli).as_secs_f64() * 1e3,
        true,
    );
}

fn walk_size(dir: &Path) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        n += if p.is_dir() {
            walk_size(&p)
        } else {
            e.metadata().map(|m| m.len()).unwrap_or(0)
        };
    }
    n
}
