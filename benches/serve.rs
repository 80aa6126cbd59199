//! Load on `gelstore serve` from a second process on loopback, and the same
//! load on the reference PDS (`tests/pds`, when installed) in the same run.
//!
//! Run: `cargo bench --bench serve` (release profile; the server is the
//! release `gelstore` binary). `W` writer threads each make `K`
//! `createRecord` calls (one commit each, fsynced) while `R` reader threads
//! loop on `getRecord`/`listRecords` until the writers finish. Each thread
//! keeps one HTTP/1.1 keep-alive connection. Reported: writes/s, p50/p99
//! latency of writes and reads, and afterwards a full `listRecords` walk
//! that must find every write exactly once (no lost, no doubled writes).
//!
//! After gelstore's load: its data folder's size, the CAR export's, their
//! ratio, and the event window's rows, against the goal of 2 × the CAR plus
//! the window.
//!
//! The size on disk is what the file system allocated (as `du` counts;
//! redb's file has a sparse end), with the files' lengths beside it.
//!
//! `GELSTORE_BENCH_WRITERS` (8), `GELSTORE_BENCH_WRITES` (100 per writer),
//! or `GELSTORE_BENCH_RECORDS` (a total, split between the writers),
//! `GELSTORE_BENCH_REFERENCE=0` (skip the reference PDS: at 100,000
//! records it takes far longer than gelstore),
//! `GELSTORE_BENCH_READERS` (4), `GELSTORE_BENCH_DEADLINE_SECS` (120);
//! `GELSTORE_BENCH_EVENT_WINDOW` and `GELSTORE_BENCH_EVENT_WINDOW_BYTES` are
//! passed to `serve --event-window/--event-window-bytes`. Every loop is
//! bounded by count and by the deadline; the servers listen on 127.0.0.1
//! only.

use std::collections::HashSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

#[allow(dead_code)] // the tests\' support module; a bench uses a part
#[path = "../tests/support/launch.rs"]
mod launch;
#[allow(dead_code)] // shared by the benches; this one uses the sizes
#[path = "common/measure.rs"]
mod measure;
use measure::{du, du_apparent};
#[path = "common/http.rs"]
mod http;
use http::Conn;

const COLL: &str = "app.example.note";

fn deadline() -> Duration {
    let secs = std::env::var("GELSTORE_BENCH_DEADLINE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(120);
    Duration::from_secs(secs)
}

struct Peer {
    name: &'static str,
    child: Child,
    addr: String,
    did: String,
    handle: String,
    password: String,
}

impl Drop for Peer {
    fn drop(&mut self) {
        launch::terminate(&mut self.child);
    }
}

fn start_gelstore(data: &Path) -> Peer {
    let mut window = Vec::new();
    for (var, flag) in [
        ("GELSTORE_BENCH_EVENT_WINDOW", "--event-window"),
        ("GELSTORE_BENCH_EVENT_WINDOW_BYTES", "--event-window-bytes"),
    ] {
        if let Ok(v) = std::env::var(var) {
            window.extend([flag.to_owned(), v]);
        }
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_gelstore"))
        .arg("--data")
        .arg(data)
        .args(["serve", "--listen", "127.0.0.1:0", "--password", "bench"])
        .args(&window)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start gelstore serve");
    let info = launch::ready_json(&mut child, "gelstore serve", Duration::from_secs(90));
    let service = info["service"].as_str().unwrap();
    Peer {
        name: "gelstore serve",
        addr: service
            .trim_start_matches("http://")
            .replace("localhost", "127.0.0.1"),
        did: launch::field(&info, "did"),
        handle: launch::field(&info, "handle"),
        password: "bench".into(),
        child,
    }
}

fn start_reference() -> Option<Peer> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pds");
    if !dir.join("node_modules/@atproto/pds/package.json").exists() {
        println!(
            "reference PDS: tests/pds is not installed (run the sync_pds tests once); skipped"
        );
        return None;
    }
    let mut child = Command::new("node")
        .arg("start-pds.mjs")
        .current_dir(&dir)
        .env("PDS_PORT", "0")
        .env("PLC_PORT", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let info = launch::ready_json(&mut child, "start-pds.mjs", Duration::from_secs(90));
    let service = info["service"].as_str()?;
    Some(Peer {
        name: "reference PDS",
        addr: service
            .trim_start_matches("http://")
            .replace("localhost", "127.0.0.1"),
        did: info["did"].as_str()?.to_owned(),
        handle: info["handle"].as_str()?.to_owned(),
        password: info["password"].as_str()?.to_owned(),
        child,
    })
}

fn enc(s: &str) -> String {
    s.replace('%', "%25").replace(':', "%3A")
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

fn load(peer: &Peer, writers: usize, writes: usize, readers: usize) {
    let mut conn = Conn::new(&peer.addr);
    let (status, session) = conn.request(
        "POST",
        "/xrpc/com.atproto.server.createSession",
        None,
        Some(&json!({"identifier": peer.handle, "password": peer.password})),
    );
    assert_eq!(status, 200, "{}: login {session}", peer.name);
    let token: Arc<str> = session["accessJwt"].as_str().unwrap().into();
    // One record to read while the writers run.
    let (status, first) = conn.request(
        "POST",
        "/xrpc/com.atproto.repo.createRecord",
        Some(&token),
        Some(
            &json!({"repo": peer.did, "collection": COLL, "rkey": "seed",
                     "record": {"$type": COLL, "text": "seed"}}),
        ),
    );
    assert_eq!(status, 200, "{}: seed {first}", peer.name);

    let started = Instant::now();
    let deadline = deadline();
    let done = Arc::new(AtomicBool::new(false));
    let mut write_threads = Vec::new();
    for w in 0..writers {
        let (addr, token, did) = (peer.addr.clone(), token.clone(), peer.did.clone());
        write_threads.push(std::thread::spawn(move || {
            let mut conn = Conn::new(&addr);
            let mut lat = Vec::with_capacity(writes);
            let mut failed = 0;
            for i in 0..writes {
                if started.elapsed() > deadline {
                    break;
                }
                let t = Instant::now();
                let (status, _) = conn.request(
                    "POST",
                    "/xrpc/com.atproto.repo.createRecord",
                    Some(&token),
                    Some(&json!({"repo": did, "collection": COLL,
                                 "record": {"$type": COLL, "text": format!("w{w}-{i}")}})),
                );
                lat.push(t.elapsed());
                if status != 200 {
                    failed += 1;
                }
            }
            (lat, failed)
        }));
    }
    let mut read_threads = Vec::new();
    for r in 0..readers {
        let (addr, did, done) = (peer.addr.clone(), peer.did.clone(), done.clone());
        read_threads.push(std::thread::spawn(move || {
            let mut conn = Conn::new(&addr);
            let mut lat = Vec::new();
            let mut n = 0u64;
            while !done.load(Ordering::Relaxed) && started.elapsed() < deadline {
                let path = if (n + r as u64).is_multiple_of(2) {
                    format!(
                        "/xrpc/com.atproto.repo.getRecord?repo={}&collection={COLL}&rkey=seed",
                        enc(&did)
                    )
                } else {
                    format!(
                        "/xrpc/com.atproto.repo.listRecords?repo={}&collection={COLL}&limit=20",
                        enc(&did)
                    )
                };
                let t = Instant::now();
                let (status, _) = conn.request("GET", &path, None, None);
                lat.push(t.elapsed());
                assert_eq!(status, 200, "read failed");
                n += 1;
            }
            lat
        }));
    }
    let mut wlat = Vec::new();
    let mut failed = 0;
    for t in write_threads {
        let (lat, f) = t.join().expect("writer");
        wlat.extend(lat);
        failed += f;
    }
    let elapsed = started.elapsed();
    done.store(true, Ordering::Relaxed);
    let mut rlat = Vec::new();
    for t in read_threads {
        rlat.extend(t.join().expect("reader"));
    }
    wlat.sort();
    rlat.sort();

    // Every write exactly once. A new connection: the first one sat idle
    // through the load, past the server's keep-alive timeout on long runs.
    let mut conn = Conn::new(&peer.addr);
    let mut seen: HashSet<String> = HashSet::new();
    let mut doubled = 0;
    let mut cursor: Option<String> = None;
    for _ in 0..1_000_000 {
        let mut path = format!(
            "/xrpc/com.atproto.repo.listRecords?repo={}&collection={COLL}&limit=100",
            enc(&peer.did)
        );
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let (status, page) = conn.request("GET", &path, None, None);
        assert_eq!(status, 200);
        for r in page["records"].as_array().unwrap() {
            let text = r["value"]["text"].as_str().unwrap_or("").to_owned();
            if !seen.insert(text) {
                doubled += 1;
            }
        }
        cursor = page["cursor"].as_str().map(str::to_owned);
        if cursor.is_none() {
            break;
        }
    }
    let expected: HashSet<String> = (0..writers)
        .flat_map(|w| (0..writes).map(move |i| format!("w{w}-{i}")))
        .chain(["seed".to_owned()])
        .collect();
    let lost = expected.difference(&seen).count();
    println!(
        "{:15} {} writes in {:.2} s = {:.0} writes/s ({writers} writers); write p50 {:.1} ms p99 {:.1} ms; \
         {} reads ({readers} readers) p50 {:.1} ms p99 {:.1} ms; failed {failed}, lost {lost}, doubled {doubled}",
        peer.name,
        wlat.len(),
        elapsed.as_secs_f64(),
        wlat.len() as f64 / elapsed.as_secs_f64(),
        pct(&wlat, 0.5),
        pct(&wlat, 0.99),
        rlat.len(),
        pct(&rlat, 0.5),
        pct(&rlat, 0.99),
    );
    assert_eq!(
        (failed, lost, doubled),
        (0, 0, 0),
        "{}: lost or doubled writes",
        peer.name
    );
}

/// The stopped server's data folder against its CAR export and event window.
fn report_size(data: &Path) {
    let folder = du(data);
    let store = du(&data.join(gelstore::repo::repository::STORE_DIR));
    let mut repo =
        gelstore::repo::repository::Repository::open(data).expect("open the data folder");
    let (car, _) = repo.export(Vec::new(), None).expect("export");
    let car = car.len() as u64;
    let (events, window) = repo.event_window().expect("event window");
    let rows: u64 = gelstore::store::Table::ALL
        .iter()
        .map(|&t| {
            repo.engine()
                .scan(t, b"")
                .map(|r| r.map(|(k, v)| (k.len() + v.len()) as u64).unwrap_or(0))
                .sum::<u64>()
        })
        .sum();
    let mb = |b: u64| b as f64 / 1e6;
    let bound = 2 * car + window;
    println!(
        "gelstore size   {} records: data folder {:.1} MB on disk ({:.1} MB of file lengths; store {:.1} MB, its rows {:.1} MB), \
         CAR {:.2} MB, folder/CAR {:.2}x; event window {events} events {:.2} MB (--event-window {}, --event-window-bytes {}); \
         goal 2 x CAR + window = {:.1} MB: {}",
        repo.record_count(),
        mb(folder),
        mb(du_apparent(data)),
        mb(store),
        mb(rows),
        mb(car),
        folder as f64 / car as f64,
        mb(window),
        repo.event_retention(),
        repo.event_retention_bytes(),
        mb(bound),
        if folder <= bound { "within" } else { "over" },
    );
}

fn main() {
    let env = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let writers = env("GELSTORE_BENCH_WRITERS", 8).max(1);
    let writes = match std::env::var("GELSTORE_BENCH_RECORDS") {
        Ok(_) => env("GELSTORE_BENCH_RECORDS", 800).div_ceil(writers),
        Err(_) => env("GELSTORE_BENCH_WRITES", 100),
    };
    let readers = env("GELSTORE_BENCH_READERS", 4);
    println!(
        "serve bench: {writers} writers x {writes} createRecord, {readers} readers (getRecord/listRecords), loopback, keep-alive"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    {
        let peer = start_gelstore(&data);
        load(&peer, writers, writes, readers);
    }
    report_size(&data);
    if std::env::var("GELSTORE_BENCH_REFERENCE").as_deref() == Ok("0") {
        println!("reference PDS: skipped (GELSTORE_BENCH_REFERENCE=0)");
    } else if let Some(peer) = start_reference() {
        load(&peer, writers, writes, readers);
    }
}
