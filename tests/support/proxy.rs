//! A loopback HTTP/1.1 proxy in front of the real PDS, for the sync failure
//! tests. It forwards every request unchanged (one request per connection:
//! it answers `Connection: close`) and can be told to misbehave:
//!
//! - [`Proxy::set_down`]: refuse connections (the listening socket is
//!   closed, so clients get "connection refused"), as an unreachable PDS;
//! - [`Proxy::expire_next`]: answer the next call of an XRPC method with
//!   `400 {"error":"ExpiredToken"}` without forwarding it, as the PDS does
//!   for an expired access token;
//! - [`Proxy::tamper_get_repo`]: flip a byte of every
//!   `com.atproto.sync.getRepo` CAR it passes back;
//! - [`Proxy::hold_apply_writes_after`]: pass `n` `applyWrites` calls
//!   through, then forward the next ones to the PDS (which commits them) but
//!   never answer them, as a connection lost after the PDS's commit.
//!
//! It only needs std (threads and blocking sockets).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The proxy's switches and counters, shared with its threads.
#[derive(Default)]
struct State {
    down: AtomicBool,
    stop: AtomicBool,
    tamper_car: AtomicBool,
    /// XRPC methods whose next call is answered `ExpiredToken`, and the
    /// HTTP status to answer it with.
    expire: Mutex<Vec<(String, u16)>>,
    /// Pass this many applyWrites through, then hold the answers.
    hold_after: Mutex<Option<usize>>,
    release: AtomicBool,
    held: AtomicUsize,
    /// Requests seen, by XRPC method.
    seen: Mutex<HashMap<String, usize>>,
    /// Answers rewritten into ExpiredToken, by XRPC method.
    expired: Mutex<HashMap<String, usize>>,
}

/// A running proxy; stops on drop.
pub struct Proxy {
    /// The proxy's base URL, `http://127.0.0.1:PORT`.
    pub url: String,
    state: Arc<State>,
    accept: Option<JoinHandle<()>>,
}

const APPLY_WRITES: &str = "com.atproto.repo.applyWrites";
const GET_REPO: &str = "com.atproto.sync.getRepo";

impl Proxy {
    /// Starts a proxy on a free loopback port in front of `upstream`
    /// (`http://127.0.0.1:PORT`).
    pub fn start(upstream: &str) -> Proxy {
        let upstream = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(State::default());
        let accept = {
            let state = state.clone();
            std::thread::spawn(move || accept_loop(Some(listener), port, &upstream, &state))
        };
        Proxy {
            url: format!("http://127.0.0.1:{port}"),
            state,
            accept: Some(accept),
        }
    }

    /// Closes (`true`) or reopens (`false`) the listening socket. Returns
    /// once the change has been made.
    pub fn set_down(&self, down: bool) {
        self.state.down.store(down, SeqCst);
        let port = self.url.rsplit(':').next().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let refused = TcpStream::connect(format!("127.0.0.1:{port}")).is_err();
            if refused == down {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the proxy did not go down={down}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Answers the next call of `method` with `ExpiredToken` (400) without
    /// forwarding it. Several calls queue up.
    pub fn expire_next(&self, method: &str) {
        self.expire_next_with(method, 400);
    }

    /// [`Proxy::expire_next`] with another HTTP status (401: how other
    /// servers than the reference PDS refuse an expired token).
    pub fn expire_next_with(&self, method: &str, status: u16) {
        self.state
            .expire
            .lock()
            .unwrap()
            .push((method.to_owned(), status));
    }

    /// Flips a byte of every getRepo CAR from now on (or stops doing so).
    pub fn tamper_get_repo(&self, on: bool) {
        self.state.tamper_car.store(on, SeqCst);
    }

    /// Lets `n` more applyWrites calls through normally; later ones are
    /// forwarded but not answered until [`Proxy::release`].
    pub fn hold_apply_writes_after(&self, n: usize) {
        let passed = self.seen(APPLY_WRITES);
        self.state.release.store(false, SeqCst);
        *self.state.hold_after.lock().unwrap() = Some(passed + n);
    }

    /// Stops holding: held connections are closed without an answer, and
    /// applyWrites calls are answered again.
    pub fn release(&self) {
        *self.state.hold_after.lock().unwrap() = None;
        self.state.release.store(true, SeqCst);
    }

    /// How many answers are (or were) held back.
    pub fn held(&self) -> usize {
        self.state.held.load(SeqCst)
    }

    /// Waits until at least `n` answers are held back.
    pub fn wait_held(&self, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.held() < n {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    /// Requests seen for an XRPC method (including rewritten ones).
    pub fn seen(&self, method: &str) -> usize {
        *self.state.seen.lock().unwrap().get(method).unwrap_or(&0)
    }

    /// Answers of `method` rewritten into `ExpiredToken`.
    pub fn expired(&self, method: &str) -> usize {
        *self.state.expired.lock().unwrap().get(method).unwrap_or(&0)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stop.store(true, SeqCst);
        self.state.release.store(true, SeqCst);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

/// Accepts connections (polling, so it can close and reopen the socket and
/// notice `stop`), one thread per connection.
fn accept_loop(mut listener: Option<TcpListener>, port: u16, upstream: &str, state: &Arc<State>) {
    while !state.stop.load(SeqCst) {
        if state.down.load(SeqCst) {
            listener = None;
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        let l = match &listener {
            Some(l) => l,
            None => match TcpListener::bind(("127.0.0.1", port)) {
                Ok(l) => listener.insert(l),
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            },
        };
        l.set_nonblocking(true).unwrap();
        match l.accept() {
            Ok((client, _)) => {
                client.set_nonblocking(false).unwrap();
                let state = state.clone();
                let upstream = upstream.to_owned();
                std::thread::spawn(move || {
                    if let Err(e) = serve(client, &upstream, &state) {
                        eprintln!("proxy: {e}");
                    }
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => eprintln!("proxy: accept: {e}"),
        }
    }
}

/// A parsed HTTP/1.1 message head plus its (de-chunked) body.
struct Message {
    start: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Message {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The message with `Connection: close` and an exact `Content-Length`
    /// instead of its own framing headers.
    fn encode(&self) -> Vec<u8> {
        let mut out = format!("{}\r\n", self.start).into_bytes();
        for (k, v) in &self.headers {
            let framing = [
                "connection",
                "keep-alive",
                "content-length",
                "transfer-encoding",
            ];
            if !framing.iter().any(|f| k.eq_ignore_ascii_case(f)) {
                out.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
            }
        }
        out.extend_from_slice(
            format!(
                "content-length: {}\r\nconnection: close\r\n\r\n",
                self.body.len()
            )
            .as_bytes(),
        );
        out.extend_from_slice(&self.body);
        out
    }
}

/// Reads a start line and headers (the body is left empty).
fn read_head(r: &mut impl BufRead) -> std::io::Result<Option<Message>> {
    let mut start = String::new();
    if r.read_line(&mut start)? == 0 {
        return Ok(None);
    }
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line)?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    Ok(Some(Message {
        start: start.trim_end().to_owned(),
        headers,
        body: Vec::new(),
    }))
}

/// Reads a message body: chunked, by length, or (`to_eof`) until the peer
/// closes.
fn read_body(r: &mut impl BufRead, head: &Message, to_eof: bool) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    if head
        .header("transfer-encoding")
        .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let mut size = String::new();
            r.read_line(&mut size)?;
            let size = size.trim().split(';').next().unwrap_or("0");
            let size = usize::from_str_radix(size, 16)
                .map_err(|e| std::io::Error::other(format!("bad chunk size {size:?}: {e}")))?;
            if size == 0 {
                // Trailers, then the blank line.
                while read_head_line(r)? {}
                break;
            }
            let mut chunk = vec![0; size];
            r.read_exact(&mut chunk)?;
            body.extend_from_slice(&chunk);
            let mut crlf = [0; 2];
            r.read_exact(&mut crlf)?;
        }
    } else if let Some(len) = head.header("content-length") {
        let len: usize = len
            .parse()
            .map_err(|e| std::io::Error::other(format!("bad content-length: {e}")))?;
        body.resize(len, 0);
        r.read_exact(&mut body)?;
    } else if to_eof {
        r.read_to_end(&mut body)?;
    }
    Ok(body)
}

fn read_head_line(r: &mut impl BufRead) -> std::io::Result<bool> {
    let mut line = String::new();
    let n = r.read_line(&mut line)?;
    Ok(n > 0 && !line.trim().is_empty())
}

fn read_message(r: &mut impl BufRead, to_eof: bool) -> std::io::Result<Option<Message>> {
    let Some(mut m) = read_head(r)? else {
        return Ok(None);
    };
    m.body = read_body(r, &m, to_eof)?;
    Ok(Some(m))
}

/// The XRPC method of a request line (`POST /xrpc/NSID?... HTTP/1.1`).
fn xrpc_method(start: &str) -> String {
    let path = start.split_whitespace().nth(1).unwrap_or("");
    let path = path.split('?').next().unwrap_or("");
    path.strip_prefix("/xrpc/").unwrap_or(path).to_owned()
}

fn expired_answer(status: u16) -> Message {
    let reason = if status == 401 {
        "Unauthorized"
    } else {
        "Bad Request"
    };
    Message {
        start: format!("HTTP/1.1 {status} {reason}"),
        headers: vec![("content-type".into(), "application/json".into())],
        body: br#"{"error":"ExpiredToken","message":"Token has expired"}"#.to_vec(),
    }
}

/// Serves one connection: one request, one answer (or none, when held).
fn serve(client: TcpStream, upstream: &str, state: &State) -> std::io::Result<()> {
    client.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut reader = BufReader::new(client.try_clone()?);
    let Some(request) = read_message(&mut reader, false)? else {
        return Ok(());
    };
    let method = xrpc_method(&request.start);
    let nth = {
        let mut seen = state.seen.lock().unwrap();
        let n = seen.entry(method.clone()).or_default();
        *n += 1;
        *n
    };
    let mut client = client;

    let expire = {
        let mut expire = state.expire.lock().unwrap();
        expire
            .iter()
            .position(|(m, _)| *m == method)
            .map(|i| expire.remove(i).1)
    };
    if let Some(status) = expire {
        *state.expired.lock().unwrap().entry(method).or_default() += 1;
        client.write_all(&expired_answer(status).encode())?;
        return Ok(());
    }

    let mut answer = forward(&request, upstream)?;

    if method == GET_REPO
        && state.tamper_car.load(SeqCst)
        && answer.start.contains(" 200 ")
        && let Some(last) = answer.body.last_mut()
    {
        *last ^= 0x55;
    }
    let hold = method == APPLY_WRITES
        && state
            .hold_after
            .lock()
            .unwrap()
            .is_some_and(|passed| nth > passed);
    if hold {
        // The PDS has committed; the client never learns it.
        state.held.fetch_add(1, SeqCst);
        while !state.release.load(SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = client.shutdown(Shutdown::Both);
        return Ok(());
    }
    client.write_all(&answer.encode())?;
    client.flush()
}

/// Sends `request` to the PDS on a fresh connection and reads its answer.
/// `Accept-Encoding` is dropped, so the answer is not compressed and a
/// tampered byte lands in the CAR itself rather than in a gzip stream.
fn forward(request: &Message, upstream: &str) -> std::io::Result<Message> {
    let mut pds = TcpStream::connect(upstream)?;
    pds.set_read_timeout(Some(Duration::from_secs(120)))?;
    let request = Message {
        start: request.start.clone(),
        headers: request
            .headers
            .iter()
            .filter(|(k, _)| !k.eq_ignore_ascii_case("accept-encoding"))
            .cloned()
            .collect(),
        body: request.body.clone(),
    };
    pds.write_all(&request.encode())?;
    let mut reader = BufReader::new(pds);
    read_message(&mut reader, true)?
        .ok_or_else(|| std::io::Error::other("the PDS closed the connection without an answer"))
}
