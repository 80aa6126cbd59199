//! The assistant's path (`gelstore serve --assistant`) against assembling
//! the same reply locally, in the same run.
//!
//! Run: `cargo bench --bench assistant` (release; both sides are the
//! release `gelstore` binary). The model is `cat` of one recorded run of
//! `GELSTORE_BENCH_DELTAS` (20,000) one-character text deltas.
//!
//! - local: `gelstore chat reply --events FILE` on a device folder
//!   (assemble, seal, write the reply; events printed to stdout, discarded).
//! - served: a client writes the pending reply (`createRecord`) and
//!   `S` subscribers (1, then 8) read every `subscribeReply` frame until
//!   the stream closes; timed from the `createRecord` to the last
//!   subscriber's close, which is after the sealed reply is written.
//!
//! Both include a process start (the local CLI; the model command). Every
//! loop is bounded by count and by a 120 s socket timeout.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[allow(dead_code)] // the tests\' support module; a bench uses a part
#[path = "../tests/support/launch.rs"]
mod launch;

fn gel(data: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_gelstore"))
        .arg("--data")
        .arg(data)
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .expect("run gelstore");
    assert!(out.status.success(), "gelstore {args:?} failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .to_owned()
}

/// A raw HTTP/1.1 request (one per connection); the JSON body of a 200.
fn call(addr: &str, method: &str, path: &str, token: Option<&str>, body: &Value) -> Value {
    let mut s = TcpStream::connect(addr).expect("connect");
    let body = body.to_string();
    let auth = token.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n{auth}content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(
        head.starts_with("HTTP/1.1 200"),
        "{method} {path}: {head}\n{body}"
    );
    serde_json::from_str(body).expect("JSON")
}

/// Starts the server; returns it and its ready line.
fn serve(data: &Path, model: &str) -> (std::process::Child, Value) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gelstore"))
        .arg("--data")
        .arg(data)
        .args(["serve", "--listen", "127.0.0.1:0", "--password", "pw"])
        .args(["--assistant", model])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start gelstore serve");
    let ready = launch::ready_json(&mut child, "gelstore serve", Duration::from_secs(60));
    (child, ready)
}

fn stop(mut child: std::process::Child) {
    launch::terminate(&mut child);
}

/// Reads every frame of `reply` until the server closes; the frame count.
fn subscribe(addr: &str, token: &str, reply: &str) -> usize {
    let url = format!("ws://{addr}/xrpc/chat.gel.assistant.subscribeReply?reply={reply}");
    let mut request = tungstenite::client::IntoClientRequest::into_client_request(url).unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let (mut socket, _) = tungstenite::client(request, stream).expect("upgrade");
    let mut frames = 0;
    loop {
        match socket.read() {
            Ok(tungstenite::Message::Binary(_)) => frames += 1,
            Ok(tungstenite::Message::Close(_)) => return frames,
            Ok(_) => {}
            Err(_) => return frames,
        }
    }
}

fn main() {
    let deltas: usize = std::env::var("GELSTORE_BENCH_DELTAS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run.jsonl");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&run).unwrap());
        writeln!(
            f,
            "{}",
            json!({"type": "model", "provider": "bench", "id": "cat"})
        )
        .unwrap();
        writeln!(f, "{}", json!({"type": "text_start", "contentIndex": 0})).unwrap();
        for _ in 0..deltas {
            writeln!(
                f,
                "{}",
                json!({"type": "text_delta", "contentIndex": 0, "delta": "x"})
            )
            .unwrap();
        }
        let text = "x".repeat(deltas);
        writeln!(
            f,
            "{}",
            json!({"type": "text_end", "contentIndex": 0, "content": text})
        )
        .unwrap();
        writeln!(f, "{}", json!({"type": "done", "stopReason": "stop"})).unwrap();
    }
    let run_s = run.to_str().unwrap();
    println!("assistant bench: one reply of {deltas} one-character deltas");

    // Local: the CLI assembles, seals and writes the same reply.
    let local = dir.path().join("local");
    gel(&local, &["device", "init"]);
    let chat = gel(&local, &["chat", "new"]);
    let msg = gel(&local, &["chat", "send", "--chat", &chat, "go"]);
    let start = Instant::now();
    gel(&local, &["chat", "reply", "--to", &msg, "--events", run_s]);
    let t = start.elapsed();
    println!(
        "local  chat reply:        {:>8.1} ms  ({:.0} events/s)",
        t.as_secs_f64() * 1e3,
        (deltas + 3) as f64 / t.as_secs_f64()
    );

    // Served: the server runs `cat` of the run and streams it.
    let data = dir.path().join("server");
    let model = format!("cat {run_s}");
    let (child, _) = serve(&data, &model);
    stop(child);
    let chat = gel(&data, &["chat", "new"]);
    let messages: Vec<String> = (0..2)
        .map(|_| gel(&data, &["chat", "send", "--chat", &chat, "go"]))
        .collect();
    let (child, ready) = serve(&data, &model);
    let addr = ready["service"]
        .as_str()
        .unwrap()
        .trim_start_matches("http://")
        .replace("localhost", "127.0.0.1");
    let did = ready["did"].as_str().unwrap().to_owned();
    let session = call(
        &addr,
        "POST",
        "/xrpc/com.atproto.server.createSession",
        None,
        &json!({"identifier": ready["handle"], "password": "pw"}),
    );
    let token = session["accessJwt"].as_str().unwrap().to_owned();
    for (message, subscribers) in messages.iter().zip([1usize, 8]) {
        let reply = format!("{message}.r0");
        let start = Instant::now();
        call(
            &addr,
            "POST",
            "/xrpc/com.atproto.repo.createRecord",
            Some(&token),
            &json!({
                "repo": did,
                "collection": "chat.gel.assistant.message",
                "rkey": reply,
                "record": {
                    "$type": "chat.gel.assistant.message",
                    "chat": format!("at://{did}/chat.gel.assistant.chat/{chat}"),
                    "role": "assistant",
                    "status": "pending",
                    "createdAt": "2026-11-30T00:00:00.000Z",
                },
            }),
        );
        let frames: Vec<usize> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..subscribers)
                .map(|_| scope.spawn(|| subscribe(&addr, &token, &reply)))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let t = start.elapsed();
        assert!(
            frames.iter().all(|&f| f == frames[0] && f >= deltas),
            "every subscriber reads every frame: {frames:?}"
        );
        println!(
            "served {subscribers} subscriber(s):  {:>8.1} ms  ({:.0} frames/s per subscriber, {} frames each)",
            t.as_secs_f64() * 1e3,
            frames[0] as f64 / t.as_secs_f64(),
            frames[0]
        );
    }
    stop(child);
}
