//! Lexicon toolchain throughput: record validation on a corpus of realistic
//! chat messages, and parse+lint of a large catalog.
//!
//! Run: `cargo bench --bench lexicon` (release profile). Prints one line per
//! measurement; the JSON-parse line is the baseline the validator is read
//! against (validation alone, on already-parsed values, vs parsing the same bytes).
//!
//! Then the whole-process figure: `gelstore lex check` on 3,000 sealed
//! message records in files (mostly base64 ciphertext, ~300 MB), next to
//! `@atproto/lexicon` validating the same files in node in the same run
//! (`benches/lexicon-ref/`, installed with `npm ci` the first time; its
//! start-up and lexicon loading are not counted, ours are), and the
//! parse of the same files alone. Then the same on plaintext: 200 files
//! (99 MB) of plainContent (long emoji-heavy text parts, alt texts and
//! reasons near maxGraphemes) and chat sealedFields (29–30k-grapheme
//! prompts), see [`plaintext_corpus`].
//!
//! Figures of past runs: `benches/RESULTS.md#lexicon`.

use gelstore_lexicon::catalog::Catalog;
use gelstore_lexicon::{lint, validate};
use serde_json::{Value, json};
use std::hint::black_box;
use std::time::{Duration, Instant};

const RECORDS: usize = 2_000;
const MIN_TIME: Duration = Duration::from_secs(2);

fn main() {
    let root = env!("CARGO_MANIFEST_DIR");
    let (catalog, findings) = Catalog::load_paths(&[format!("{root}/lexicons")]).expect("lexicons");
    assert!(findings.is_empty(), "{findings:?}");

    let corpus = chat_corpus(RECORDS);
    let encoded: Vec<Vec<u8>> = corpus
        .iter()
        .map(|v| serde_json::to_vec(v).unwrap())
        .collect();
    let bytes: usize = encoded.iter().map(Vec::len).sum();
    for v in &corpus {
        let errors = validate_any(&catalog, v);
        assert!(errors.is_empty(), "corpus must be valid: {errors:?}");
    }
    println!(
        "corpus: {RECORDS} chat records (messages, sealed content, plain content), {:.1} MB of JSON",
        bytes as f64 / 1e6
    );

    let parse = measure(|| {
        for e in &encoded {
            black_box(serde_json::from_slice::<Value>(e).unwrap());
        }
    });
    report("baseline: serde_json parse only", parse, bytes);

    let check = measure(|| {
        for v in &corpus {
            black_box(validate_any(&catalog, v));
        }
    });
    report("validate (parsed values)", check, bytes);

    let both = measure(|| {
        for e in &encoded {
            let v: Value = serde_json::from_slice(e).unwrap();
            black_box(validate_any(&catalog, &v));
        }
    });
    report("parse + validate", both, bytes);

    lint_large_catalog(root);
    let dir = tempfile::tempdir().unwrap();
    let (files, bytes) = sealed_corpus(dir.path());
    whole_process_vs_reference(root, "sealed message records", &files, bytes);
    drop(dir);
    let dir = tempfile::tempdir().unwrap();
    let (files, bytes) = plaintext_corpus(dir.path(), &catalog);
    whole_process_vs_reference(
        root,
        "plaintext message contents and sealed chat fields (emoji-heavy, near the limits)",
        &files,
        bytes,
    );
}

/// 3,000 sealed message records (40–120 KB of ciphertext each) as files.
fn sealed_corpus(dir: &std::path::Path) -> (Vec<String>, usize) {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let chat = "at://did:plc:ewvi7nxzyoun6zhxrhs64oiz/chat.gel.assistant.chat/3lbqyb6tcmk22";
    let mut files = Vec::new();
    let mut bytes = 0;
    for i in 0..3000 {
        let record = json!({
            "$type": "chat.gel.assistant.message",
            "chat": chat,
            "role": if i % 2 == 0 { "user" } else { "assistant" },
            "status": "complete",
            "createdAt": "2026-11-29T19:39:31.000Z",
            "content": {"alg": "xchacha20poly1305-hkdf-sha256-v1", "keyId": "ck-3lbqyb6tcmk22-e1",
                        "nonce": {"$bytes": b64(&mut rng, 24, 1)},
                        "ciphertext": {"$bytes": b64(&mut rng, 40_000, 80_000)}},
        });
        let path = dir.join(format!("r{i:04}.json"));
        let text = serde_json::to_vec(&record).unwrap();
        bytes += text.len();
        std::fs::write(&path, text).unwrap();
        files.push(path.to_string_lossy().into_owned());
    }
    (files, bytes)
}

/// Graphemes the plaintext corpus is written in, each one extended
/// grapheme cluster on its own and after any other: ZWJ sequences, flags,
/// skin tones, a keycap, variation selectors, a combining mark, CJK, ASCII.
const GRAPHEMES: &[&str] = &[
    "👩\u{200d}👩\u{200d}👧\u{200d}👦",
    "🧑🏽\u{200d}💻",
    "🏳\u{fe0f}\u{200d}🌈",
    "🇩🇪",
    "🇯🇵",
    "👍🏿",
    "❤\u{fe0f}",
    "1\u{fe0f}\u{20e3}",
    "🦀",
    "😀",
    "e\u{301}",
    "ñ",
    "語",
    "テ",
    "a",
    "t",
    " ",
];

/// Exactly `graphemes` graphemes in at most `max_bytes` bytes, emoji-heavy:
/// where the next one would go over its share of the bytes, an ASCII letter
/// instead.
fn emoji_text(rng: &mut Rng, graphemes: usize, max_bytes: usize) -> String {
    let mut s = String::with_capacity(max_bytes);
    for i in 1..=graphemes {
        let g = GRAPHEMES[rng.below(GRAPHEMES.len() as u64) as usize];
        if s.len() + g.len() <= i * max_bytes / graphemes {
            s.push_str(g);
        } else {
            s.push('x');
        }
    }
    s
}

/// Plaintext as the lexicons bound it, near their limits: 100 message
/// contents (`chat.gel.assistant.defs#plainContent`, what a message's
/// sealed content holds) of two 300–495 KB text parts (maxLength 500,000
/// bytes), a reasoning part, four images whose alt text is 960–1,000
/// graphemes (maxGraphemes 1,000, maxLength 10,000) and two approvals with
/// 280–300-grapheme reasons (300, 3,000); and 100 chats' sealed fields
/// (`chat.gel.assistant.chat#sealedFields`: a 290–300-grapheme title, a
/// 29,000–30,000-grapheme system prompt in at most 100,000 bytes).
fn plaintext_corpus(dir: &std::path::Path, catalog: &Catalog) -> (Vec<String>, usize) {
    let mut rng = Rng(0xd1b5_4a32_d192_ed03);
    let blob = json!({"$type": "blob",
        "ref": {"$link": "bafkreiaozmjlyrrgaz375odwrfwuqlorsh7y3lz3w6ebssat4edvf3tj7e"},
        "mimeType": "image/jpeg", "size": 412_733});
    let mut files = Vec::new();
    let mut bytes = 0;
    let mut write = |name: String, record: Value| {
        assert!(
            validate_any(catalog, &record).is_empty(),
            "{name} must be valid"
        );
        let path = dir.join(name);
        let text = serde_json::to_vec(&record).unwrap();
        bytes += text.len();
        std::fs::write(&path, text).unwrap();
        files.push(path.to_string_lossy().into_owned());
    };
    for i in 0..100 {
        let mut parts = Vec::new();
        for _ in 0..2 {
            let size = 300_000 + rng.below(195_000) as usize;
            parts.push(json!({"$type": "chat.gel.assistant.defs#textPart",
                              "text": emoji_text(&mut rng, size / 4, size)}));
        }
        let size = 50_000 + rng.below(50_000) as usize;
        parts.push(json!({"$type": "chat.gel.assistant.defs#reasoningPart",
                          "text": emoji_text(&mut rng, size / 4, size)}));
        for _ in 0..4 {
            let graphemes = 960 + rng.below(41) as usize;
            let alt = emoji_text(&mut rng, graphemes, 10_000);
            assert_eq!(validate::count_graphemes(&alt, u64::MAX), graphemes as u64);
            parts.push(json!({"$type": "chat.gel.assistant.defs#imagePart",
                              "image": blob, "alt": alt, "width": 1600, "height": 1200}));
        }
        for _ in 0..2 {
            let graphemes = 280 + rng.below(21) as usize;
            let reason = emoji_text(&mut rng, graphemes, 3_000);
            parts.push(json!({"$type": "chat.gel.assistant.defs#toolApprovalPart",
                              "callId": format!("toolu_{:016x}", rng.next()),
                              "decision": "denied", "reason": reason}));
        }
        write(
            format!("plain{i:03}.json"),
            json!({"$type": "chat.gel.assistant.defs#plainContent", "parts": parts}),
        );
    }
    for i in 0..100 {
        let graphemes = 290 + rng.below(11) as usize;
        let title = emoji_text(&mut rng, graphemes, 3_000);
        let graphemes = 29_000 + rng.below(1_001) as usize;
        let prompt = emoji_text(&mut rng, graphemes, 100_000);
        assert_eq!(
            validate::count_graphemes(&prompt, u64::MAX),
            graphemes as u64
        );
        write(
            format!("fields{i:03}.json"),
            json!({"$type": "chat.gel.assistant.chat#sealedFields",
                   "title": title, "systemPrompt": prompt}),
        );
    }
    (files, bytes)
}

/// The fastest of three runs of `f`.
fn best_of_three(mut f: impl FnMut() -> Duration) -> Duration {
    (0..3).map(|_| f()).min().unwrap()
}

/// `gelstore lex check` (whole process) vs `@atproto/lexicon` on the same
/// files, after the read + parse alone; `what` names the corpus.
fn whole_process_vs_reference(root: &str, what: &str, files: &[String], bytes: usize) {
    let mb = bytes as f64 / 1e6;
    println!("whole process: {} {what} in files, {mb:.0} MB", files.len());
    let parse = best_of_three(|| {
        let start = Instant::now();
        for f in files {
            let bytes = std::fs::read(f).unwrap();
            black_box(serde_json::from_slice::<Value>(&bytes).unwrap());
        }
        start.elapsed()
    });
    println!(
        "  read + serde_json parse alone       {:>8.3} s {:>8.0} MB/s",
        parse.as_secs_f64(),
        mb / parse.as_secs_f64()
    );
    let ours = best_of_three(|| {
        let start = Instant::now();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_gelstore"))
            .args(["lex", "check", "--lexicons", &format!("{root}/lexicons")])
            .args(files)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        start.elapsed()
    });
    println!(
        "  gelstore lex check (whole process)  {:>8.3} s {:>8.0} MB/s",
        ours.as_secs_f64(),
        mb / ours.as_secs_f64()
    );
    let harness = std::path::Path::new(root).join("benches/lexicon-ref");
    if !harness.join("node_modules").exists() {
        let ok = std::process::Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--silent"])
            .current_dir(&harness)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            println!(
                "  @atproto/lexicon: not run (npm ci failed in {})",
                harness.display()
            );
            return;
        }
    }
    let reference = best_of_three(|| {
        let out = std::process::Command::new("node")
            .arg(harness.join("check.mjs"))
            .arg(format!("{root}/lexicons"))
            .args(files)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(line["invalid"], 0, "{line}");
        Duration::from_secs_f64(line["ms"].as_f64().unwrap() / 1e3)
    });
    println!(
        "  @atproto/lexicon (validation only)  {:>8.3} s {:>8.0} MB/s",
        reference.as_secs_f64(),
        mb / reference.as_secs_f64()
    );
    println!(
        "  ratio: {:.1}x",
        reference.as_secs_f64() / ours.as_secs_f64()
    );
}

fn validate_any(catalog: &Catalog, v: &Value) -> Vec<gelstore_lexicon::Finding> {
    let t = v["$type"].as_str().unwrap();
    if t.contains('#') {
        validate::validate_value(catalog, t, v)
    } else {
        validate::validate_record(catalog, v, None)
    }
}

/// Runs `f` (one pass over the corpus) until `MIN_TIME` has passed; returns time per pass.
fn measure(mut f: impl FnMut()) -> Duration {
    f(); // warm up
    let start = Instant::now();
    let mut passes = 0u32;
    while start.elapsed() < MIN_TIME {
        f();
        passes += 1;
    }
    start.elapsed() / passes
}

fn report(label: &str, per_pass: Duration, bytes: usize) {
    let secs = per_pass.as_secs_f64();
    println!(
        "{label:<34} {:>10.0} records/s {:>8.1} MB/s",
        RECORDS as f64 / secs,
        bytes as f64 / secs / 1e6
    );
}

/// A tiny deterministic PRNG (xorshift) so the corpus is the same every run.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const WORDS: &[&str] = &[
    "the",
    "model",
    "answered",
    "with",
    "a",
    "long",
    "careful",
    "reply",
    "über",
    "naïve",
    "données",
    "日本語",
    "テキスト",
    "emoji",
    "👩‍👩‍👧",
    "about",
    "rust",
    "records",
    "sealed",
    "atproto",
    "tool",
];

/// Text of `min` plus up to `spread` bytes.
fn prose(rng: &mut Rng, min: usize, spread: u64) -> String {
    let bytes = min + rng.below(spread) as usize;
    let mut s = String::with_capacity(bytes + 16);
    while s.len() < bytes {
        s.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
        s.push(' ');
    }
    s
}

/// Base64 of `min` plus up to `spread` random bytes.
fn b64(rng: &mut Rng, min: usize, spread: u64) -> String {
    use base64::Engine;
    let len = min + rng.below(spread) as usize;
    let raw: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
    base64::engine::general_purpose::STANDARD_NO_PAD.encode(raw)
}

/// A mix like a real chat store: user messages and replies (metadata + a
/// sealed content envelope), and the plainContent objects inside the seals
/// (text, reasoning, tool calls and results).
fn chat_corpus(n: usize) -> Vec<Value> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let chat = "at://did:plc:ewvi7nxzyoun6zhxrhs64oiz/chat.gel.assistant.chat/3lbqyb6tcmk22";
    (0..n)
        .map(|i| match i % 4 {
            0 => json!({
                "$type": "chat.gel.assistant.message",
                "chat": chat, "role": "user", "status": "complete",
                "parent": "3lbqzdw5pzk22.r0",
                "request": {"attempt": 0, "model": {"provider": "anthropic", "id": "claude-sonnet-4-5"},
                            "tools": ["web_search", "mcp_files_read"], "effort": "medium"},
                "createdAt": "2026-11-29T19:39:29.123Z",
                "content": {"alg": "xchacha20poly1305-hkdf-sha256-v1", "keyId": "ck-3lbqyb6tcmk22-e1",
                            "nonce": {"$bytes": b64(&mut rng, 24, 1)},
                            "ciphertext": {"$bytes": b64(&mut rng, 200, 4000)}},
            }),
            1 => json!({
                "$type": "chat.gel.assistant.message",
                "chat": chat, "role": "assistant", "status": "complete",
                "model": {"provider": "anthropic", "id": "claude-sonnet-4-5"},
                "usage": {"inputTokens": 1200, "outputTokens": 800, "reasoningTokens": 300},
                "stopReason": "stop",
                "createdAt": "2026-11-29T19:39:31Z",
                "content": {"alg": "xchacha20poly1305-hkdf-sha256-v1", "keyId": "ck-3lbqyb6tcmk22-e1",
                            "nonce": {"$bytes": b64(&mut rng, 24, 1)},
                            "ciphertext": {"$bytes": b64(&mut rng, 1000, 12000)}},
            }),
            _ => {
                let parts: Vec<Value> = (0..1 + rng.below(6))
                    .map(|_| match rng.below(4) {
                        0 => json!({"$type": "chat.gel.assistant.defs#reasoningPart",
                                    "text": prose(&mut rng, 300, 3000),
                                    "providerData": "{\"signature\":\"EqQBCkgIARABGAIiQL\"}"}),
                        1 => json!({"$type": "chat.gel.assistant.defs#toolCallPart",
                                    "callId": format!("toolu_{:016x}", rng.next()), "name": "web_search",
                                    "arguments": "{\"query\":\"atproto lexicon validation\",\"limit\":5}"}),
                        2 => json!({"$type": "chat.gel.assistant.defs#toolResultPart",
                                    "callId": format!("toolu_{:016x}", rng.next()),
                                    "output": prose(&mut rng, 500, 5000)}),
                        _ => json!({"$type": "chat.gel.assistant.defs#textPart",
                                    "text": prose(&mut rng, 100, 8000)}),
                    })
                    .collect();
                json!({"$type": "chat.gel.assistant.defs#plainContent", "parts": parts})
            }
        })
        .collect()
}

/// Parse + lint a large catalog: our lexicons copied under many namespaces
/// (refs rewritten so they resolve), plus the interop catalog.
fn lint_large_catalog(root: &str) {
    const COPIES: usize = 500;
    let mut docs = Vec::new();
    for entry in std::fs::read_dir(format!("{root}/lexicons/chat/gel/assistant")).unwrap() {
        let path = entry.unwrap().path();
        docs.push(std::fs::read_to_string(path).unwrap());
    }
    let copies: Vec<(String, Value)> = (0..COPIES)
        .flat_map(|i| {
            docs.iter().map(move |text| {
                let text = text.replace("chat.gel.assistant.", &format!("chat.gel.copy{i}."));
                let v: Value = serde_json::from_str(&text).unwrap();
                (format!("copy{i}/{}.json", v["id"].as_str().unwrap()), v)
            })
        })
        .collect();
    let total_docs = copies.len();
    let start = Instant::now();
    let mut catalog = Catalog::new();
    for (file, v) in &copies {
        black_box(catalog.add(file, v));
    }
    let parsed = start.elapsed();
    let findings = lint::lint(&catalog);
    let linted = start.elapsed() - parsed;
    // id-path is expected to fire: the copies are not laid out by NSID.
    let unexpected = findings.iter().filter(|f| f.rule != "id-path").count();
    assert_eq!(unexpected, 0, "{:?}", &findings[..findings.len().min(5)]);
    println!(
        "lint: {total_docs} lexicon docs: parse {:.1} ms, lint {:.1} ms ({:.0} docs/s end to end)",
        parsed.as_secs_f64() * 1e3,
        linted.as_secs_f64() * 1e3,
        total_docs as f64 / (parsed + linted).as_secs_f64()
    );
}
