//! What the test peers (`gelstore serve`, the reference PDS launcher in
//! `tests/pds`) share: each prints one JSON line on stdout once it is
//! ready. Included by `common_serve` and `common_pds` with `#[path]`.

use std::io::{BufRead, BufReader};
use std::process::Child;
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
