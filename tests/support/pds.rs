//! The reference PDS (plus an in-memory PLC) on loopback, for integration
//! tests: `tests/pds/` holds the team's tested recipe (`package.json`,
//! `package-lock.json`, `start-pds.mjs`). The first use installs it with
//! `npm ci` (about 1.5–2 min: better-sqlite3 compiles), later uses start in
//! ~5 s. Needs Node 20+, npm, g++, make and python3 (`.ci/run` checks them).

use super::launch;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// A running PDS + PLC pair, stopped (SIGTERM) on drop.
pub struct Pds {
    child: Child,
    /// The PDS base URL, e.g. `http://127.0.0.1:40123`.
    pub service: String,
    /// The PLC directory URL.
    pub plc: String,
    /// The test account's DID.
    pub did: String,
    /// Its handle.
    pub handle: String,
    /// Its password.
    pub password: String,
}

fn pds_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pds")
}

/// Installs `tests/pds` once (per machine: `node_modules` is kept).
fn ensure_installed() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    static LOCK: Mutex<()> = Mutex::new(());
    DIR.get_or_init(|| {
        let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let dir = pds_dir();
        let built = dir.join("node_modules/better-sqlite3/build/Release/better_sqlite3.node");
        if built.exists() && dir.join("node_modules/@atproto/pds/package.json").exists() {
            return dir;
        }
        // `--nodedir=/usr`: node-gyp takes the Node headers from
        // /usr/include/node instead of downloading them. better-sqlite3
        // compiles from source: g++, make and python3.
        let nodedir: &[&str] = if Path::new("/usr/include/node/node.h").exists() {
            &["--nodedir=/usr"]
        } else {
            &[]
        };
        launch::npm_ci(&dir, nodedir, "the PDS tests (tests/pds)");
        assert!(built.exists(), "npm ci did not build better-sqlite3");
        dir
    })
}

impl Pds {
    /// Installs if needed, starts PDS + PLC on free loopback ports, and
    /// waits for their JSON line.
    pub fn start() -> Pds {
        let dir = ensure_installed();
        let mut child = Command::new("node")
            .arg("start-pds.mjs")
            .current_dir(dir)
            .env("PDS_PORT", "0")
            .env("PLC_PORT", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start node start-pds.mjs");
        let info = launch::ready_json(&mut child, "start-pds.mjs", Duration::from_secs(90));
        let field = |name: &str| launch::field(&info, name);
        Pds {
            service: field("service"),
            plc: field("plc"),
            did: field("did"),
            handle: field("handle"),
            password: field("password"),
            child,
        }
    }

    /// The process id of the launcher.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Pds {
    fn drop(&mut self) {
        // SIGTERM lets the launcher close both servers and delete its data
        // folder.
        launch::terminate(&mut self.child);
    }
}
