//! `DATA/serve.json`: written by a running `gelstore serve` (its URL, pid
//! and DID), removed when it stops. Other `gelstore` commands read it
//! before opening the store, so that while a server holds the folder they
//! fail at once with a message naming the server, instead of waiting on the
//! store's lock (reads — `repo get|ls|export` — go through the server:
//! `cli::served`). A file left by a server that died (its pid is gone) is
//! ignored and replaced.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::store::files::write_private;

/// The marker's name in the data folder.
pub const MARKER_FILE: &str = "serve.json";

/// What the marker says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Running {
    /// The server's base URL.
    pub url: String,
    /// Its process id.
    pub pid: u32,
    /// The account DID it serves.
    pub did: String,
}

/// A live server holds the folder.
#[derive(Debug, thiserror::Error)]
#[error(
    "the data folder {data} is served by `gelstore serve` (pid {}, {}); stop it first, or use its XRPC API (repo get, ls and export go through it)",
    running.pid, running.url
)]
pub struct RunningError {
    /// The folder.
    pub data: String,
    /// The server.
    pub running: Running,
}

/// The live server holding `data`, if any.
pub fn running(data: &Path) -> Option<Running> {
    let bytes = std::fs::read(data.join(MARKER_FILE)).ok()?;
    let running: Running = serde_json::from_slice(&bytes).ok()?;
    (running.pid != std::process::id() && is_alive(running.pid)).then_some(running)
}

/// Fails if a live server holds `data`.
pub fn check_free(data: &Path) -> Result<(), RunningError> {
    match running(data) {
        Some(running) => Err(RunningError {
            data: data.display().to_string(),
            running,
        }),
        None => Ok(()),
    }
}

fn is_alive(pid: u32) -> bool {
    if cfg!(target_os = "linux") {
        Path::new(&format!("/proc/{pid}")).exists()
    } else {
        // Without /proc we cannot tell; trust the marker (the server
        // removes it when it stops).
        true
    }
}

/// The marker of this process; removed on drop.
#[derive(Debug)]
pub struct Marker {
    path: PathBuf,
}

impl Marker {
    /// Writes the marker for this process.
    pub fn write(data: &Path, url: &str, did: &str) -> std::io::Result<Marker> {
        let path = data.join(MARKER_FILE);
        let running = Running {
            url: url.to_owned(),
            pid: std::process::id(),
            did: did.to_owned(),
        };
        write_private(&path, &serde_json::to_vec(&running).unwrap_or_default())?;
        Ok(Marker { path })
    }
}

impl Drop for Marker {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
