//! The reference TypeScript implementation (`@atproto/repo`, pinned in
//! `tests/reference/package.json`) behind `tests/reference/repo-ref.mjs`:
//! installed once with `npm ci`, then run with JSON in and JSON out.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

use super::launch;

/// `tests/reference`, its npm packages installed (once per process).
pub fn installed() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference");
        if !dir.join("node_modules/@atproto/repo/package.json").exists() {
            launch::npm_ci(&dir, &[], "the reference harness (tests/reference)");
        }
        dir
    })
}

/// Runs `repo-ref.mjs ARGS` with `input` on stdin; returns its JSON.
/// Panics unless it succeeds.
pub fn repo_ref(args: &[&str], input: Option<&Value>) -> Value {
    let mut child = Command::new("node")
        .arg("repo-ref.mjs")
        .args(args)
        .current_dir(installed())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run node ({e}): Node 20+ must be on PATH"));
    let body = input.map(|v| v.to_string()).unwrap_or_default();
    let mut stdin = child.stdin.take().expect("stdin");
    // Written from a thread: the harness may answer before reading it all.
    let writer = std::thread::spawn(move || stdin.write_all(body.as_bytes()));
    let output = child.wait_with_output().expect("wait for node");
    writer.join().expect("stdin writer").expect("write stdin");
    assert!(
        output.status.success(),
        "repo-ref.mjs {args:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "repo-ref.mjs {args:?}: bad output ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}
