//! The store engines side by side, in one run, on the same records: redb
//! (the default) and sled 0.34.
//!
//! Run: `cargo bench --bench store_engines` (release profile). For each
//! engine, through `Repository` on a data folder, every commit signed and
//! fsynced before it returns:
//!
//! 1. `SINGLE` one-record commits of small notes (the load `serve` puts on a
//!    store: one `createRecord` per commit), then the data folder against
//!    the CAR export and the event window (goal: folder within 2 × CAR +
//!    window), and again after closing and reopening;
//! 2. in a fresh folder, `BATCHES` commits of 200 sealed
//!    `chat.gel.assistant.message` records;
//! 3. on that store: open time (median of `Repository::open`), reading
//!    every record by key in a shuffled order, a full export, and the open
//!    after a process died mid-use (the child aborts without closing, as a
//!    `kill -9` would leave it).
//!
//! `GELSTORE_BENCH_SINGLE` (20,000), `GELSTORE_BENCH_BATCHES` (100),
//! `GELSTORE_BENCH_ENGINES` (`redb,sled`). The figures of a run are in
//! `benches/RESULTS.md`.

use std::path::Path;
use std::time::{Duration, Instant};

use gelstore::repo::repository::{Repository, Write};
use gelstore::repo::tid::Tid;
use gelstore::store::{EngineKind, Table};
use serde_json::json;

#[allow(dead_code)] // the shared helpers; this bench does not use `ms_since`
#[path = "common/measure.rs"]
mod measure;
#[path = "common/records.rs"]
mod records;
use measure::{du, median, ms};
use records::{message, next};

const NOTE: &str = "app.example.note";
const MESSAGE: &str = "chat.gel.assistant.message";
const BATCH: usize = 200;
const OPENS: usize = 9;
/// Set in the child that opens a store and dies without closing it.
const CHILD_ENV: &str = "GELSTORE_BENCH_ABORT_IN";

fn main() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        die_holding(Path::new(&dir));
    }
    let env = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let single = env("GELSTORE_BENCH_SINGLE", 20_000);
    let batches = env("GELSTORE_BENCH_BATCHES", 100);
    let engines: Vec<EngineKind> = std::env::var("GELSTORE_BENCH_ENGINES")
        .unwrap_or_else(|_| "redb,sled".into())
        .split(',')
        .map(|name| EngineKind::parse(name).expect("GELSTORE_BENCH_ENGINES"))
        .collect();
    println!(
        "store engines bench: {single} one-record commits, {batches} commits of {BATCH}, fsync per commit"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let mut rows = Vec::new();
    for &kind in &engines {
        let single_figures = singles(&dir.path().join(format!("{kind}-single")), kind, single);
        let batch_figures = batched(&dir.path().join(format!("{kind}-batch")), kind, batches);
        rows.push((kind, single_figures, batch_figures));
    }
    println!();
    println!(
        "| engine | {single} × 1-record commits | folder / CAR (after reopen) | within 2 × CAR + window | {batches} × {BATCH} records | open | open after a crash | reads by key | export |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (kind, s, b) in rows {
        println!(
            "| {kind} | {:.0} commits/s | {:.1} MB / {:.2} MB = {:.1}× ({:.1}×) | {} | {:.0} records/s | {:.1} ms | {:.1} ms | {:.0} records/s | {:.1} MB/s |",
            s.commits_per_s,
            s.folder as f64 / 1e6,
            s.car as f64 / 1e6,
            s.folder as f64 / s.car as f64,
            s.reopened as f64 / s.car as f64,
            if s.folder <= 2 * s.car + s.window {
                "yes"
            } else {
                "no"
            },
            b.records_per_s,
            ms(b.open),
            ms(b.crash_open),
            b.reads_per_s,
            b.export_mb_s,
        );
    }
}

struct Singles {
    commits_per_s: f64,
    folder: u64,
    reopened: u64,
    car: u64,
    window: u64,
}

/// One-record commits of small notes, then the folder against the CAR.
fn singles(data: &Path, kind: EngineKind, n: usize) -> Singles {
    let mut repo = Repository::init_with_engine(data, kind).expect("init");
    assert_eq!(repo.engine().name(), kind.name());
    let base = Tid::parse("3lbqzdw5pzk22").unwrap().as_u64();
    let started = Instant::now();
    for i in 0..n {
        let rkey = Tid::from_u64(base + (i as u64) * 1024).to_string();
        let value = json!({"$type": NOTE, "text": format!("note {i}: {}", "x".repeat(60))});
        repo.apply(&[Write::create(NOTE, rkey, value)])
            .expect("apply");
    }
    let t = started.elapsed();
    let (car, _) = repo.export(Vec::new(), None).expect("export");
    let car = car.len() as u64;
    let (events, window) = repo.event_window().expect("window");
    let rows: u64 = Table::ALL
        .iter()
        .map(|&t| {
            repo.engine()
                .scan(t, b"")
                .map(|r| r.map(|(k, v)| (k.len() + v.len()) as u64).unwrap())
                .sum::<u64>()
        })
        .sum();
    let folder = du(data);
    drop(repo);
    let repo = reopen(data);
    let reopened = du(data);
    drop(repo);
    let commits_per_s = n as f64 / t.as_secs_f64();
    println!(
        "{kind}: {n} one-record commits in {:.2} s = {commits_per_s:.0} commits/s ({:.2} ms/commit); \
         folder {:.1} MB, rows {:.1} MB, CAR {:.2} MB, window {events} events {:.2} MB: folder {:.1}× CAR \
         (goal 2 × CAR + window = {:.1} MB: {}); after reopen {:.1} MB ({:.1}× CAR)",
        t.as_secs_f64(),
        t.as_secs_f64() * 1e3 / n as f64,
        folder as f64 / 1e6,
        rows as f64 / 1e6,
        car as f64 / 1e6,
        window as f64 / 1e6,
        folder as f64 / car as f64,
        (2 * car + window) as f64 / 1e6,
        if folder <= 2 * car + window {
            "within"
        } else {
            "over"
        },
        reopened as f64 / 1e6,
        reopened as f64 / car as f64,
    );
    Singles {
        commits_per_s,
        folder,
        reopened,
        car,
        window,
    }
}

struct Batched {
    records_per_s: f64,
    open: Duration,
    crash_open: Duration,
    reads_per_s: f64,
    export_mb_s: f64,
}

/// Commits of 200 sealed messages, then opens, reads and an export.
fn batched(data: &Path, kind: EngineKind, batches: usize) -> Batched {
    let mut repo = Repository::init_with_engine(data, kind).expect("init");
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let base = Tid::parse("3lbqzdw5pzk22").unwrap().as_u64();
    let rkey = |i: usize| format!("{}.r0", Tid::from_u64(base + (i as u64) * 1024));
    let total = batches * BATCH;
    let started = Instant::now();
    for b in 0..batches {
        let writes: Vec<Write> = (b * BATCH..(b + 1) * BATCH)
            .map(|i| Write::create(MESSAGE, rkey(i), message(i, &mut rng)))
            .collect();
        repo.apply(&writes).expect("apply batch");
    }
    let t = started.elapsed();
    let records_per_s = total as f64 / t.as_secs_f64();
    let folder = du(data);
    drop(repo);

    let open = median((0..OPENS).map(|_| {
        std::thread::sleep(Duration::from_millis(100));
        let started = Instant::now();
        let repo = Repository::open(data).expect("open");
        let t = started.elapsed();
        drop(repo);
        t
    }));

    // Every record by key, in a shuffled order, on a freshly opened store.
    let repo = reopen(data);
    let mut order: Vec<usize> = (0..total).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, (next(&mut rng) % (i as u64 + 1)) as usize);
    }
    let started = Instant::now();
    for &i in &order {
        let entry = repo.get(MESSAGE, &rkey(i)).expect("get");
        assert!(entry.is_some());
    }
    let reads_per_s = total as f64 / started.elapsed().as_secs_f64();
    let started = Instant::now();
    let (car, _) = repo.export(Vec::new(), None).expect("export");
    let export_mb_s = car.len() as f64 / 1e6 / started.elapsed().as_secs_f64();
    drop(repo);

    // A process that dies holding the store: the next open recovers it.
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .env(CHILD_ENV, data)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("child");
    assert!(!status.success(), "the child was to abort");
    let started = Instant::now();
    let repo = Repository::open(data).expect("open after a crash");
    let crash_open = started.elapsed();
    assert_eq!(repo.record_count() as usize, total + 1);
    drop(repo);
    println!(
        "{kind}: {batches} commits of {BATCH} in {:.2} s = {records_per_s:.0} records/s ({:.1} ms/commit); \
         folder {:.1} MB, CAR {:.2} MB; open {:.1} ms (median of {OPENS}), open after a crash {:.1} ms; \
         {total} reads by key {reads_per_s:.0}/s; export {export_mb_s:.1} MB/s",
        t.as_secs_f64(),
        t.as_secs_f64() * 1e3 / batches as f64,
        folder as f64 / 1e6,
        car.len() as f64 / 1e6,
        ms(open),
        ms(crash_open),
    );
    Batched {
        records_per_s,
        open,
        crash_open,
        reads_per_s,
        export_mb_s,
    }
}

/// The child: one commit, then gone without closing anything.
fn die_holding(data: &Path) -> ! {
    let mut repo = Repository::open(data).expect("open");
    let value = json!({"$type": NOTE, "text": "the last one"});
    repo.apply(&[Write::create(NOTE, "3lbqzdw5pzk2z", value)])
        .expect("apply");
    std::process::abort()
}

/// Opens a folder closed a moment ago (past sled's lag in letting its
/// lock go, which `Repository::open` would wait out inside the timing).
fn reopen(data: &Path) -> Repository {
    std::thread::sleep(Duration::from_millis(100));
    Repository::open(data).expect("open")
}
