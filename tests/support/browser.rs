//! The chat page in headless Chromium, for `tests/serve/web_app_browser.rs` and
//! `benches/web_thread.rs`: `npm ci` of the page's packages on first use,
//! and [`Browser`], which drives `web/app/test/drive.mjs` (pinned
//! `puppeteer-core` with the system's `/usr/bin/chromium`) one JSON
//! command at a time.

use super::launch;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Mutex, OnceLock};

use serde_json::{Value, json};

pub const CHROMIUM: &str = "/usr/bin/chromium";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `npm ci` in `web/seal` and `web/app` when their packages are missing
/// (once per test binary).
pub fn installed() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    static LOCK: Mutex<()> = Mutex::new(());
    DIR.get_or_init(|| {
        let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let seal = root().join("web/seal");
        if !seal.join("node_modules/@hpke/core/package.json").exists() {
            launch::npm_ci(&seal, &[], "the web/app tests");
        }
        let app = root().join("web/app");
        if !app.join("node_modules/esbuild/package.json").exists()
            || !app
                .join("node_modules/puppeteer-core/package.json")
                .exists()
        {
            launch::npm_ci(&app, &[], "the web/app tests");
        }
        app
    })
}

/// The browser, one JSON command at a time.
pub struct Browser {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    shots: PathBuf,
}

impl Browser {
    pub fn launch(shots: &Path) -> Browser {
        let app = installed();
        let mut child = Command::new("node")
            .arg("test/drive.mjs")
            .current_dir(app)
            .env("CHROMIUM", CHROMIUM)
            .env("SCREENSHOTS", shots)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("node runs");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Browser {
            child,
            stdin,
            stdout,
            shots: shots.to_path_buf(),
        }
    }

    /// Runs `command`; panics with the driver's error if it failed.
    pub fn run(&mut self, command: Value) -> Value {
        writeln!(self.stdin, "{command}").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let answer: Value = serde_json::from_str(line.trim())
            .unwrap_or_else(|e| panic!("the driver answered {line:?} ({e}) to {command}"));
        assert!(
            answer["ok"] == true,
            "{command} failed: {} (see {}/failed-*.png)",
            answer["error"],
            self.shots.display()
        );
        answer
    }

    pub fn goto(&mut self, url: &str) {
        self.run(json!({"do": "goto", "url": url}));
    }
    pub fn type_in(&mut self, sel: &str, text: &str) {
        self.run(json!({"do": "type", "sel": sel, "text": text}));
    }
    pub fn click(&mut self, sel: &str) {
        self.run(json!({"do": "click", "sel": sel}));
    }
    pub fn wait_text(&mut self, sel: &str, text: &str) -> Value {
        self.wait_text_for(sel, text, 20_000)
    }
    pub fn wait_text_for(&mut self, sel: &str, text: &str, ms: u64) -> Value {
        self.run(json!({"do": "waitText", "sel": sel, "text": text, "timeout": ms}))
    }
    pub fn text(&mut self, sel: &str) -> String {
        self.run(json!({"do": "text", "sel": sel}))["text"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    }
    pub fn value(&mut self, sel: &str) -> String {
        self.run(json!({"do": "value", "sel": sel}))["value"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    }
    pub fn screenshot(&mut self, name: &str) -> PathBuf {
        let path = self.shots.join(format!("{name}.png"));
        self.run(json!({"do": "screenshot", "path": path, "fullPage": true}));
        path
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "{}", json!({"do": "close"}));
        let _ = self.stdin.flush();
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether the browser test can run here; panics on CI without Chromium.
pub fn chromium_present() -> bool {
    if Path::new(CHROMIUM).exists() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{CHROMIUM} is missing and CI is set: install Debian's chromium and chromium-driver"
    );
    eprintln!(
        "SKIPPED: {CHROMIUM} is missing (apt-get install chromium chromium-driver); \
         the browser test runs where it is installed and fails on CI without it"
    );
    false
}
