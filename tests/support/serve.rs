//! `gelstore serve` as a test peer: the real binary on a free loopback port
//! with a temporary data folder, killed on drop. Its fields have the names
//! of `pds::Pds`'s (`service`, `plc`, `did`, `handle`, `password`),
//! so a suite written against one peer runs against the other.
//!
//! Also: `clients()`, the npm client harness in `tests/clients` (pinned
//! `@atproto/api`, `@atproto/repo`, `@atproto/sync`; `npm ci` on first use),
//! and `http()`, a raw HTTP/1.1 request for inputs no client would send.

use super::launch;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use serde_json::Value;

/// A running `gelstore serve`, stopped (SIGTERM, then SIGKILL) on drop.
pub struct Serve {
    child: Child,
    /// The data folder (kept after the server stops, until `dir` drops).
    pub data: PathBuf,
    dir: Option<tempfile::TempDir>,
    /// The base URL, e.g. `http://localhost:40123`.
    pub service: String,
    /// The account DID (a did:web on the server's host).
    pub did: String,
    /// The handle.
    pub handle: String,
    /// The password.
    pub password: String,
    /// Where the account's DID document is served PLC-style (`GET
    /// {plc}/{did}`): the server itself (`gelstore sync --plc` takes it).
    pub plc: String,
}

/// The password tests start servers with.
pub const PASSWORD: &str = "correct horse battery staple";

impl Serve {
    /// A server on a new temporary data folder.
    pub fn start() -> Serve {
        let dir = tempfile::tempdir().expect("temp dir");
        let data = dir.path().join("data");
        let mut serve = Serve::start_in(&data, &[]);
        serve.dir = Some(dir);
        serve
    }

    /// A server on a new temporary data folder whose account is a did:plc
    /// registered with the PLC directory at `plc`.
    pub fn start_with_plc(plc: &str) -> Serve {
        let dir = tempfile::tempdir().expect("temp dir");
        let data = dir.path().join("data");
        let mut serve = Serve::start_in(&data, &["--plc", plc]);
        serve.dir = Some(dir);
        serve.plc = plc.to_owned();
        serve
    }

    /// A server on `data` (created if missing), with extra arguments.
    pub fn start_in(data: &Path, extra: &[&str]) -> Serve {
        Serve::start_at(data, "127.0.0.1:0", extra)
    }

    /// A server on `data` listening on `listen` (a restart keeps the port
    /// its did:web names).
    pub fn start_at(data: &Path, listen: &str, extra: &[&str]) -> Serve {
        Serve::start_with(data, listen, extra, &[], PASSWORD)
    }

    /// [`Serve::start_at`] with environment variables for the server and a
    /// password (another than [`PASSWORD`] sets a new one).
    pub fn start_with(
        data: &Path,
        listen: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        password: &str,
    ) -> Serve {
        let mut args = vec!["--listen", listen, "--password", password];
        args.extend_from_slice(extra);
        Serve::spawn(data, &args, env, password, None)
    }

    /// A server on `data` started with exactly `args` after `serve` (no
    /// `--password` unless they give one); `password` is what the tests
    /// log in with. `max_files`: the server's open-file limit (`ulimit
    /// -n`), if given.
    pub fn spawn(
        data: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        password: &str,
        max_files: Option<u64>,
    ) -> Serve {
        let binary = env!("CARGO_BIN_EXE_gelstore");
        let mut command = match max_files {
            None => Command::new(binary),
            Some(n) => {
                // The shell lowers the limit, then becomes the server.
                let mut c = Command::new("sh");
                c.args([
                    "-c",
                    &format!("ulimit -n {n} && exec \"$0\" \"$@\""),
                    binary,
                ]);
                c
            }
        };
        let mut child = command
            .arg("--data")
            .arg(data)
            .arg("serve")
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start gelstore serve");
        let info = launch::ready_json(&mut child, "gelstore serve", Duration::from_secs(60));
        let field = |name: &str| launch::field(&info, name);
        Serve {
            plc: field("service"),
            service: field("service"),
            did: field("did"),
            handle: field("handle"),
            password: password.to_owned(),
            data: data.to_path_buf(),
            dir: None,
            child,
        }
    }

    /// Kills the server at once (SIGKILL: no clean stop) and keeps the
    /// data folder; returns the temp dir guard, if this server owns it.
    pub fn kill(mut self) -> Option<tempfile::TempDir> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.dir.take()
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `host:port` of the service.
    pub fn addr(&self) -> String {
        let rest = self.service.trim_start_matches("http://");
        rest.replace("localhost", "127.0.0.1")
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Stops the server (SIGTERM, waiting for a clean exit) and keeps the
    /// data folder; returns the temp dir guard, if this server owns it.
    pub fn stop(mut self) -> Option<tempfile::TempDir> {
        self.terminate();
        self.dir.take()
    }

    fn terminate(&mut self) {
        launch::terminate(&mut self.child);
    }

    /// A session's access token (createSession over raw HTTP).
    pub fn access_token(&self) -> String {
        let body = serde_json::json!({"identifier": self.handle, "password": self.password});
        let r = http(
            &self.addr(),
            "POST",
            "/xrpc/com.atproto.server.createSession",
            &[("content-type", "application/json")],
            body.to_string().as_bytes(),
        );
        assert_eq!(r.status, 200, "createSession: {}", r.text());
        r.json()["accessJwt"]
            .as_str()
            .expect("accessJwt")
            .to_owned()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// Runs `gelstore --data DATA ARGS…`, which must succeed; its stdout.
pub fn gel_ok(data: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_gelstore"))
        .arg("--data")
        .arg(data)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The first line of `s`, trimmed (what a command printed as its answer).
pub fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").trim().to_owned()
}

/// The record keys of a `listRecords` answer, in its order.
pub fn record_keys(list: &Value) -> Vec<String> {
    list["records"]
        .as_array()
        .map(|records| {
            records
                .iter()
                .filter_map(|r| r["uri"].as_str()?.rsplit('/').next().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// An HTTP response.
#[derive(Debug)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The headers (names in lower case).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    /// The value of header `name` (lower case), if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The XRPC error name of an error response.
    pub fn error(&self) -> String {
        self.json()["error"].as_str().unwrap_or("").to_owned()
    }

    /// Asserts this is the XRPC error `name` with HTTP status `status`.
    #[track_caller]
    pub fn expect_error(&self, status: u16, name: &str) {
        assert_eq!(
            (self.status, self.error().as_str()),
            (status, name),
            "body: {}",
            self.text()
        );
    }
}

/// One HTTP/1.1 request on a new connection (`Connection: close`), as
/// given: no client-side checks, so malformed input reaches the server.
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(30))).ok();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-length"))
    {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).expect("write head");
    // The server may answer (413) and close before reading a large body.
    let _ = stream.write_all(body);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    parse_response(&raw)
}

/// Sends `request` (a whole HTTP/1.1 request, head and body, as given) on
/// a new connection and reads the answer until the server closes it.
pub fn http_raw(addr: &str, request: &[u8]) -> Response {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(30))).ok();
    let _ = stream.write_all(request);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    parse_response(&raw)
}

fn parse_response(raw: &[u8]) -> Response {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP head in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"))
    {
        body = dechunk(&body);
    }
    Response {
        status,
        headers,
        body,
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(end) = data.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size =
            usize::from_str_radix(String::from_utf8_lossy(&data[..end]).trim(), 16).unwrap_or(0);
        if size == 0 {
            return out;
        }
        let start = end + 2;
        out.extend_from_slice(&data[start..start + size]);
        data = &data[start + size + 2..];
    }
}

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// Installs `tests/clients` once per machine (`npm ci`) and returns it.
pub fn clients() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    static LOCK: Mutex<()> = Mutex::new(());
    DIR.get_or_init(|| {
        let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let dir = clients_dir();
        if dir.join("node_modules/@atproto/sync/package.json").exists()
            && dir.join("node_modules/@atproto/api/package.json").exists()
        {
            return dir;
        }
        launch::npm_ci(&dir, &[], "the client tests");
        dir
    })
}

/// Runs `node drive.mjs MODE` against a peer; returns its JSON summary
/// (the last stdout line) and panics with its output if it failed.
pub fn drive(
    mode: &str,
    service: &str,
    did: &str,
    handle: &str,
    password: &str,
    env: &[(&str, &str)],
) -> Value {
    let output = Command::new("node")
        .arg("drive.mjs")
        .arg(mode)
        .current_dir(clients())
        .env("SERVICE", service)
        .env("DID", did)
        .env("HANDLE", handle)
        .env("PASSWORD", password)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run node drive.mjs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().last().unwrap_or("");
    let summary: Value = serde_json::from_str(last).unwrap_or(Value::Null);
    assert!(
        output.status.success() && summary["ok"] == true,
        "drive.mjs {mode} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    summary
}

/// `jwt` with one character of its signature changed, so no verifier
/// takes it. Not the last character: that one of a 32-byte signature
/// carries two padding bits, which a lenient base64url decoder ignores
/// (`A`, `B`, `C` and `D` decode alike there).
pub fn forged_jwt(jwt: &str) -> String {
    let at = jwt.len() - 10;
    let mut forged = jwt.to_owned();
    let flipped = if &jwt[at..=at] == "A" { "B" } else { "A" };
    forged.replace_range(at..=at, flipped);
    forged
}
