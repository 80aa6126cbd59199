//! What `gelstore serve` does about clients that hold sockets, send badly
//! or guess passwords, over raw sockets against the real binary:
//! connections past the bound close the longest-quiet one so a normal
//! client keeps its answers (also with few open files); idle, slow and
//! stalled connections are closed after their timeouts while a websocket
//! lives on; a malformed chunked body is a 400; a 429 says when to come
//! back; behind a proxy the limiter takes the address the proxy appended,
//! and the account takes a bounded number of failures from all addresses.

use crate::support::serve;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::json;
use serve::{PASSWORD, Serve, http, http_raw};

const DESCRIBE: &str = "/xrpc/com.atproto.server.describeServer";

fn describe(addr: &str) -> u16 {
    http(addr, "GET", DESCRIBE, &[], b"").status
}

fn upload(addr: &str, token: &str, bytes: &[u8]) -> serve::Response {
    let bearer = format!("Bearer {token}");
    http(
        addr,
        "POST",
        "/xrpc/com.atproto.repo.uploadBlob",
        &[("content-type", "image/png"), ("authorization", &bearer)],
        bytes,
    )
}

/// Whether the server closed `stream` (end of file or reset); whatever
/// it sent before is read and dropped.
fn is_closed(mut stream: &TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false;
            }
            Err(_) => return true,
        }
    }
}

/// How long until the server closes `stream`, waiting at most `within`
/// (`None`: still open then).
fn closed_after(stream: &mut TcpStream, within: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        let left = within.checked_sub(start.elapsed())?;
        stream
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match stream.read(&mut buf) {
            Ok(0) => return Some(start.elapsed()),
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return Some(start.elapsed()),
        }
    }
}

/// Reads one response from a kept-alive connection: its status and body
/// (by its Content-Length).
fn read_one_response(stream: &mut TcpStream) -> (u16, Vec<u8>) {
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut buf).expect("read the response head");
        assert!(n > 0, "closed before the response");
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
    let status = head[9..12].parse().unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse().unwrap())
        .expect("a content-length");
    while raw.len() < head_end + length {
        let n = stream.read(&mut buf).expect("read the response body");
        assert!(n > 0, "closed inside the response");
        raw.extend_from_slice(&buf[..n]);
    }
    (status, raw[head_end..head_end + length].to_vec())
}

/// Sockets that hold the server: every other one connects and sends
/// nothing, the others send a request head that never ends.
fn hold(addr: &str, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|i| {
            let mut s = TcpStream::connect(addr).expect("connect");
            if i % 2 == 1 {
                s.write_all(
                    b"POST /xrpc/com.atproto.repo.uploadBlob HTTP/1.1\r\nHost: x\r\nX-Slow: a",
                )
                .unwrap();
            }
            s
        })
        .collect()
}

/// Writes one more byte of the never-ending head on the slow sockets
/// every 300 ms until `stop`.
fn trickle(sockets: &[TcpStream], stop: &std::sync::atomic::AtomicBool) {
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        for s in sockets.iter().skip(1).step_by(2) {
            let _ = (&*s).write_all(b"a");
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// More idle and slow sockets than `--max-connections` allows: each new
/// connection closes the one quiet the longest, so a normal client's
/// connection (the newest) is served — `describeServer`, `createSession`
/// and `uploadBlob` all answer — and the server holds no more sockets
/// than the bound. The timeouts are long here: the bound alone does it.
#[test]
fn idle_and_slow_sockets_past_the_bound_do_not_starve_a_client() {
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::start_in(
        &dir.path().join("data"),
        &[
            "--max-connections",
            "16",
            "--header-timeout-secs",
            "300",
            "--idle-timeout-secs",
            "300",
        ],
    );
    let addr = serve.addr();
    let mut held: Vec<TcpStream> = Vec::new();
    for _ in 0..6 {
        held.extend(hold(&addr, 10));
        assert_eq!(describe(&addr), 200, "with {} sockets held", held.len());
    }
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| trickle(&held, &stop));
        for _ in 0..10 {
            assert_eq!(describe(&addr), 200);
        }
        let token = serve.access_token();
        let r = upload(&addr, &token, &[9u8; 20_000]);
        assert_eq!(r.status, 200, "{}", r.text());
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    std::thread::sleep(Duration::from_millis(300));
    let open = held.iter().filter(|s| !is_closed(s)).count();
    assert!(
        open <= 16,
        "{open} of {} held sockets are open: more than the bound",
        held.len()
    );
}

/// The case: a server allowed 256 open files, and 400 idle or
/// slow sockets. The default bound is fitted under the limit, so the
/// sockets never take the files the store and the uploads need.
#[test]
fn with_256_open_files_400_held_sockets_do_not_starve_a_client() {
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::spawn(
        &dir.path().join("data"),
        &["--listen", "127.0.0.1:0", "--password", PASSWORD],
        &[],
        PASSWORD,
        Some(256),
    );
    let addr = serve.addr();
    let mut held: Vec<TcpStream> = Vec::new();
    for _ in 0..8 {
        held.extend(hold(&addr, 50));
        assert_eq!(describe(&addr), 200, "with {} sockets held", held.len());
    }
    let token = serve.access_token();
    for i in 0..5u8 {
        let r = upload(&addr, &token, &[i; 50_000]);
        assert_eq!(r.status, 200, "upload {i}: {}", r.text());
    }
    assert_eq!(describe(&addr), 200);
    std::thread::sleep(Duration::from_millis(300));
    let open = held.iter().filter(|s| !is_closed(s)).count();
    assert!(open < 256, "{open} held sockets are open");
}

/// Short timeouts (header 2 s, idle 4 s, body 2 s): a kept-alive
/// connection waits longer than the header timeout between requests and is
/// closed after the idle timeout, a connection that sends nothing and one that trickles a head
/// after the header timeout, a body that stops coming gets 408 — and a
/// websocket outlives them all and still gets its events.
#[test]
fn idle_slow_and_stalled_connections_are_closed_after_their_timeouts() {
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::start_in(
        &dir.path().join("data"),
        &[
            "--header-timeout-secs",
            "2",
            "--idle-timeout-secs",
            "4",
            "--body-timeout-secs",
            "2",
        ],
    );
    let addr = serve.addr();
    let token = serve.access_token();
    let within = Duration::from_secs(15);
    std::thread::scope(|scope| {
        let kept_alive = scope.spawn(|| {
            let mut s = TcpStream::connect(&addr).unwrap();
            for _ in 0..2 {
                s.write_all(format!("GET {DESCRIBE} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
                    .unwrap();
                let (status, _) = read_one_response(&mut s);
                assert_eq!(status, 200);
                // More than the header timeout, less than the idle one.
                std::thread::sleep(Duration::from_millis(2500));
            }
            s.write_all(format!("GET {DESCRIBE} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
                .unwrap();
            assert_eq!(read_one_response(&mut s).0, 200);
            closed_after(&mut s, within)
        });
        let silent = scope.spawn(|| {
            let mut s = TcpStream::connect(&addr).unwrap();
            closed_after(&mut s, within)
        });
        let slow_head = scope.spawn(|| {
            let mut s = TcpStream::connect(&addr).unwrap();
            let start = Instant::now();
            s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                .unwrap();
            // A byte every 150 ms: always sending, never done.
            while start.elapsed() < within {
                if s.write_all(b"a").is_err() || is_closed(&s) {
                    return Some(start.elapsed());
                }
                std::thread::sleep(Duration::from_millis(150));
            }
            None
        });
        let stalled_body = scope.spawn(|| {
            let mut s = TcpStream::connect(&addr).unwrap();
            let start = Instant::now();
            s.write_all(
                b"POST /xrpc/com.atproto.server.createSession HTTP/1.1\r\nHost: x\r\n\
                  Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"ident",
            )
            .unwrap();
            let (status, body) = read_one_response(&mut s);
            (
                status,
                String::from_utf8_lossy(&body).into_owned(),
                start.elapsed(),
            )
        });
        let websocket = scope.spawn(|| {
            let url = format!("ws://{addr}/xrpc/com.atproto.sync.subscribeRepos");
            let stream = TcpStream::connect(&addr).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(20)))
                .unwrap();
            let (mut socket, _) = tungstenite::client(url, stream).expect("websocket upgrade");
            // Past every timeout, then a commit: its event still comes.
            std::thread::sleep(Duration::from_secs(5));
            let bearer = format!("Bearer {token}");
            let r = http(
                &addr,
                "POST",
                "/xrpc/com.atproto.repo.createRecord",
                &[
                    ("content-type", "application/json"),
                    ("authorization", &bearer),
                ],
                json!({"repo": serve.did, "collection": "app.example.note",
                       "record": {"$type": "app.example.note", "text": "still here"}})
                .to_string()
                .as_bytes(),
            );
            assert_eq!(r.status, 200, "{}", r.text());
            loop {
                match socket.read().expect("an event after the timeouts") {
                    tungstenite::Message::Binary(bytes) => return bytes.len(),
                    _ => continue,
                }
            }
        });

        // Each is closed within the watch (15 s, generous for a loaded
        // machine) and not before its timeout.
        let idle = kept_alive
            .join()
            .unwrap()
            .expect("an idle connection stays open");
        assert!(
            idle >= Duration::from_millis(3800),
            "idle connection closed after {idle:?} (idle timeout 4 s)"
        );
        let silent = silent
            .join()
            .unwrap()
            .expect("a silent connection stays open");
        assert!(
            silent >= Duration::from_millis(1800),
            "silent connection closed after {silent:?} (header timeout 2 s)"
        );
        let slow = slow_head
            .join()
            .unwrap()
            .expect("a trickled head keeps its connection");
        assert!(
            slow >= Duration::from_millis(1800),
            "slow head closed after {slow:?} (header timeout 2 s)"
        );
        let (status, body, stalled) = stalled_body.join().unwrap();
        assert_eq!(status, 408, "{body}");
        assert!(body.contains("RequestTimeout"), "{body}");
        assert!(
            stalled >= Duration::from_millis(1800),
            "stalled body answered after {stalled:?} (body timeout 2 s)"
        );
        assert!(websocket.join().unwrap() > 0);
    });
    // The server itself is fine.
    assert_eq!(describe(&addr), 200);
}

fn chunked(path: &str, token: &str, ctype: &str, chunks: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: {ctype}\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    .into_bytes();
    r.extend_from_slice(chunks);
    r
}

fn chunk(data: &[u8]) -> Vec<u8> {
    let mut c = format!("{:x}\r\n", data.len()).into_bytes();
    c.extend_from_slice(data);
    c.extend_from_slice(b"\r\n");
    c
}

/// A chunked body with broken framing is the client's error (400
/// `InvalidRequest`); one that is too large is still 413, and a good one
/// is taken.
#[test]
fn a_malformed_chunked_body_is_a_400_and_a_large_one_a_413() {
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::start_in(
        &dir.path().join("data"),
        &["--max-body-bytes", "1000", "--max-blob-bytes", "3000"],
    );
    let addr = serve.addr();
    let token = serve.access_token();
    let create = "/xrpc/com.atproto.repo.createRecord";
    let record = json!({"repo": serve.did, "collection": "app.example.note", "rkey": "chunked",
                        "record": {"$type": "app.example.note", "text": "sent in chunks"}})
    .to_string();
    let expect = |r: serve::Response, status: u16, error: &str| {
        assert_eq!(
            (r.status, r.error().as_str()),
            (status, error),
            "{}",
            r.text()
        );
    };
    let malformed: [&[u8]; 3] = [
        // Not a hex size.
        b"zz\r\n{}\r\n0\r\n\r\n",
        // Data longer than its size says.
        b"2\r\n{}XX\r\n0\r\n\r\n",
        // A size past any integer.
        b"fffffffffffffffffffff\r\n{}\r\n0\r\n\r\n",
    ];
    for body in malformed {
        expect(
            http_raw(&addr, &chunked(create, &token, "application/json", body)),
            400,
            "InvalidRequest",
        );
    }
    let mut big = chunk(&[b' '; 800]);
    big.extend(chunk(&[b' '; 800]));
    big.extend_from_slice(b"0\r\n\r\n");
    expect(
        http_raw(&addr, &chunked(create, &token, "application/json", &big)),
        413,
        "PayloadTooLarge",
    );
    let mut blob = chunk(&[5u8; 2000]);
    blob.extend(chunk(&[5u8; 2000]));
    blob.extend_from_slice(b"0\r\n\r\n");
    expect(
        http_raw(
            &addr,
            &chunked(
                "/xrpc/com.atproto.repo.uploadBlob",
                &token,
                "image/png",
                &blob,
            ),
        ),
        413,
        "PayloadTooLarge",
    );
    let (a, b) = record.as_bytes().split_at(10);
    let mut good = chunk(a);
    good.extend(chunk(b));
    good.extend_from_slice(b"0\r\n\r\n");
    let r = http_raw(&addr, &chunked(create, &token, "application/json", &good));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(describe(&addr), 200);
}

/// Behind `--public-url` (one proxy, the default `--trusted-proxies 1`):
/// the limiter takes the right-most `X-Forwarded-For` entry, the one the
/// proxy appended, so a guesser who writes a new first entry each time is
/// still one client: locked out after 30 failures, with `Retry-After` and
/// the `RateLimit-*` headers. Other clients are not, until the account
/// has taken 100 failures in the hour from all of them: then every
/// address is refused, the right password too.
#[test]
fn forged_forwarded_addresses_do_not_evade_the_limits() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let serve = Serve::start_at(
        &dir.path().join("data"),
        &listen,
        &["--public-url", "https://pds.example.test"],
    );
    let attempt = |forwarded: &str, password: &str| {
        http(
            &listen,
            "POST",
            "/xrpc/com.atproto.server.createSession",
            &[
                ("content-type", "application/json"),
                ("x-forwarded-for", forwarded),
            ],
            json!({"identifier": serve.handle, "password": password})
                .to_string()
                .as_bytes(),
        )
    };
    let expect = |r: &serve::Response, status: u16, error: &str| {
        assert_eq!(
            (r.status, r.error().as_str()),
            (status, error),
            "{}",
            r.text()
        );
    };
    // The proxy saw 198.51.100.7; the client wrote the rest.
    for i in 0..30 {
        let forged = format!("203.0.113.{i}, 10.{i}.0.1, 198.51.100.7");
        expect(&attempt(&forged, "wrong"), 401, "AuthenticationRequired");
    }
    let locked = attempt("192.0.2.99, 198.51.100.7", "wrong");
    expect(&locked, 429, "RateLimitExceeded");
    let header = |name: &str| {
        locked
            .header(name)
            .unwrap_or_else(|| panic!("no {name} on the 429: {:?}", locked.headers))
            .to_owned()
    };
    let retry: u64 = header("retry-after").parse().unwrap();
    assert!((1..=300).contains(&retry), "Retry-After {retry}");
    assert_eq!(header("ratelimit-limit"), "30");
    assert_eq!(header("ratelimit-remaining"), "0");
    assert_eq!(header("ratelimit-policy"), "30;w=300");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let reset: u64 = header("ratelimit-reset").parse().unwrap();
    assert!(
        (now + retry - 2..=now + retry + 2).contains(&reset),
        "RateLimit-Reset {reset}, now {now}, Retry-After {retry}"
    );
    expect(
        &attempt("198.51.100.7", &serve.password),
        429,
        "RateLimitExceeded",
    );
    // Another client behind the proxy logs in.
    expect(
        &attempt("198.51.100.8", "wrong"),
        401,
        "AuthenticationRequired",
    );
    assert_eq!(attempt("198.51.100.8", &serve.password).status, 200);

    // 31 failures so far; 69 more from as many addresses, none of which
    // reaches its own limit, fill the account's hour.
    for i in 0..69 {
        let other = format!("203.0.113.1, 198.51.100.{}", 10 + i);
        expect(&attempt(&other, "wrong"), 401, "AuthenticationRequired");
    }
    let fresh = attempt("198.51.100.200", "wrong");
    expect(&fresh, 429, "RateLimitExceeded");
    assert_eq!(fresh.header("ratelimit-limit"), Some("100"));
    assert_eq!(fresh.header("ratelimit-policy"), Some("100;w=3600"));
    let retry: u64 = fresh.header("retry-after").unwrap().parse().unwrap();
    assert!((3000..=3600).contains(&retry), "Retry-After {retry}");
    expect(
        &attempt("198.51.100.201", &serve.password),
        429,
        "RateLimitExceeded",
    );
    // Everything else keeps working.
    assert_eq!(describe(&listen), 200);
}
