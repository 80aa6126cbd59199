//! A loopback mock model provider for the assistant loop's tests: a real
//! HTTP/1.1 server on a free port that answers each POST with the next
//! scripted response (a recorded transcript from `fixtures/providers/`,
//! an HTTP error, a stall) and records every request it received, so a
//! test can assert the history, tool results and providerData sent back.

use super::launch;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

/// One scripted answer.
#[derive(Clone, Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Sent in pieces of this many bytes, with `pause` between them.
    pub chunk: usize,
    pub pause: Duration,
    /// After this many bytes the server goes silent (holds the socket
    /// open) for `stall`.
    pub stall_after: Option<usize>,
    pub stall: Duration,
}

impl Answer {
    /// A 200 with this transcript body (SSE or NDJSON by `content_type`).
    pub fn stream(body: Vec<u8>, content_type: &str) -> Answer {
        Answer {
            status: 200,
            headers: vec![("content-type".into(), content_type.into())],
            body,
            chunk: 97,
            pause: Duration::ZERO,
            stall_after: None,
            stall: Duration::ZERO,
        }
    }

    /// A 200 SSE answer from a file under `fixtures/providers/`.
    pub fn sse(path: &str) -> Answer {
        Answer::stream(read_fixture(path), "text/event-stream")
    }

    /// A 200 NDJSON answer from a file under `fixtures/providers/`.
    pub fn ndjson(path: &str) -> Answer {
        Answer::stream(read_fixture(path), "application/x-ndjson")
    }

    /// An HTTP error with a JSON body.
    pub fn error(status: u16, body: Value) -> Answer {
        Answer {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_string().into_bytes(),
            chunk: usize::MAX,
            pause: Duration::ZERO,
            stall_after: None,
            stall: Duration::ZERO,
        }
    }

    pub fn with_header(mut self, name: &str, value: &str) -> Answer {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Goes silent after `bytes` for `stall`.
    pub fn stalling(mut self, bytes: usize, stall: Duration) -> Answer {
        self.stall_after = Some(bytes);
        self.stall = stall;
        self
    }
}

/// A provider key for tests: it must never reach a record, a log line, an
/// error or a file.
pub const KEY: &str = "sk-test-0123456789abcdef-secret";

/// The npm MCP servers of `tests/mcp` (installed with `npm ci` once per
/// test binary): the path of the `.bin` command `name`.
pub fn mcp_bin(name: &str) -> String {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp");
    INSTALL.call_once(|| {
        if !dir.join("node_modules/.bin/mcp-server-everything").exists() {
            launch::npm_ci(&dir, &[], "the MCP tool tests");
        }
    });
    dir.join("node_modules/.bin")
        .join(name)
        .display()
        .to_string()
}

/// `{"mcpServers": {"everything": {"command": …}}}`, the reference MCP
/// server with echo, get-sum and friends.
pub fn everything_config() -> serde_json::Value {
    serde_json::json!({"mcpServers": {"everything": {"command": mcp_bin("mcp-server-everything")}}})
}

/// The providers' transcripts folder.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/providers")
}

pub fn read_fixture(path: &str) -> Vec<u8> {
    let p = fixtures().join(path);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A request the mock received.
#[derive(Clone, Debug)]
pub struct Received {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The running mock.
pub struct MockProvider {
    /// `http://127.0.0.1:PORT`
    pub url: String,
    received: Arc<Mutex<Vec<Received>>>,
}

impl MockProvider {
    /// Serves `answers` in order, one per request; later requests get a
    /// 500 naming the exhausted script.
    pub fn start(answers: Vec<Answer>) -> MockProvider {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let received = Arc::new(Mutex::new(Vec::new()));
        let answers = Arc::new(Mutex::new(answers.into_iter()));
        let log = received.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let log = log.clone();
                let answers = answers.clone();
                std::thread::spawn(move || {
                    let _ = serve(stream, &log, &answers);
                });
            }
        });
        MockProvider { url, received }
    }

    /// Every request received so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

fn serve(
    stream: TcpStream,
    log: &Mutex<Vec<Received>>,
    answers: &Mutex<std::vec::IntoIter<Answer>>,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
    let mut headers = Vec::new();
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        reader.read_line(&mut h)?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
            headers.push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    log.lock().unwrap().push(Received {
        path,
        headers,
        body,
    });
    let answer = answers.lock().unwrap().next().unwrap_or_else(|| {
        Answer::error(
            500,
            serde_json::json!({"error": {"message": "the mock's script is exhausted"}}),
        )
    });
    let mut out = stream;
    let mut head = format!(
        "HTTP/1.1 {} Scripted\r\nconnection: close\r\n",
        answer.status
    );
    for (k, v) in &answer.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    let mut sent = 0;
    for piece in answer.body.chunks(answer.chunk.max(1)) {
        if let Some(limit) = answer.stall_after
            && sent + piece.len() > limit
        {
            let keep = limit.saturating_sub(sent);
            out.write_all(&piece[..keep])?;
            out.flush()?;
            std::thread::sleep(answer.stall);
            return Ok(());
        }
        out.write_all(piece)?;
        out.flush()?;
        sent += piece.len();
        if !answer.pause.is_zero() {
            std::thread::sleep(answer.pause);
        }
    }
    Ok(())
}
