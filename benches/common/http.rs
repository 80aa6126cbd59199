//! One keep-alive HTTP/1.1 connection with JSON bodies, for the benches
//! that load a server from another process (`serve.rs`, `repo/`): no
//! client library's pooling or buffering between the bench and the wire.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;

/// One keep-alive HTTP/1.1 connection.
pub struct Conn {
    addr: String,
    stream: BufReader<TcpStream>,
}

impl Conn {
    pub fn new(addr: &str) -> Conn {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_nodelay(true).ok();
        stream.set_read_timeout(Some(Duration::from_secs(60))).ok();
        Conn {
            addr: addr.to_owned(),
            stream: BufReader::new(stream),
        }
    }

    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.addr);
        if let Some(t) = token {
            head.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        if method == "POST" {
            head.push_str("Content-Type: application/json\r\n");
        }
        head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
        let s = self.stream.get_mut();
        s.write_all(head.as_bytes()).expect("write");
        s.write_all(body.as_bytes()).expect("write");
        let mut status_line = String::new();
        self.stream.read_line(&mut status_line).expect("status");
        let status: u16 = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let mut len = 0usize;
        let mut chunked = false;
        loop {
            let mut line = String::new();
            self.stream.read_line(&mut line).expect("header");
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            }
            if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
                chunked = true;
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                let mut size = String::new();
                self.stream.read_line(&mut size).expect("chunk size");
                let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
                let mut chunk = vec![0u8; n + 2];
                self.stream.read_exact(&mut chunk).expect("chunk");
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        } else {
            body.resize(len, 0);
            self.stream.read_exact(&mut body).expect("body");
        }
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }
}
