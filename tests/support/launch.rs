//! What the test peers (`gelstore serve`, the reference PDS launcher in
//! `tests/pds`) share: each prints one JSON line on stdout once it is
//! ready, and stops cleanly on SIGTERM; each harness installs its npm
//! packages with `npm ci` on first use. The support modules and the
//! benches that start peers use it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// Waits up to `timeout` for `child`'s ready line and returns it parsed;
/// kills the child and panics (naming `what`) if none comes. The rest of
/// its stdout is drained so it never blocks on a full pipe.
pub fn ready_json(child: &mut Child, what: &str, timeout: Duration) -> Value {
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        let _ = reader.read_line(&mut line);
        let _ = tx.send(line);
        let _ = std::io::copy(&mut reader, &mut std::io::sink());
    });
    let line = match rx.recv_timeout(timeout) {
        Ok(line) if !line.trim().is_empty() => line,
        other => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} printed no ready line: {other:?}");
        }
    };
    serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{what}: ready line {line:?}: {e}"))
}

/// Field `name` of a ready line, which must be a string.
pub fn field(info: &Value, name: &str) -> String {
    info[name]
        .as_str()
        .unwrap_or_else(|| panic!("ready line lacks {name}: {info}"))
        .to_owned()
}

/// Stops `child`: SIGTERM (a clean stop: the server closes its store, the
/// PDS launcher deletes its data), then SIGKILL if it has not gone in 10 s.
pub fn terminate(child: &mut Child) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    for _ in 0..100 {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// `npm ci` in `dir` (with `extra` arguments), for a harness whose
/// packages are missing; panics with npm's output if it fails. `needs`
/// says what the caller needs npm for, for the message when npm is absent.
pub fn npm_ci(dir: &Path, extra: &[&str], needs: &str) {
    let started = std::time::Instant::now();
    let output = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund"])
        .args(extra)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run npm ({e}): {needs} need Node 20+ and npm on PATH"));
    assert!(
        output.status.success(),
        "npm ci in {} failed:\n{}\n{}",
        dir.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!("installed {} in {:.1?}", dir.display(), started.elapsed());
}
