//! Repository store throughput on sled: building a 100,000-record repository
//! (single-record commits, then batches of 200), one update at 100k
//! records, CAR export, import + verification, and the size on disk.
//!
//! Run: `cargo bench --bench repo` (release profile). Each commit is signed
//! and flushed to disk (fsync) before it returns, as in real use. Records
//! are `chat.gel.assistant.message` records (sealed content of 300–900
//! bytes), validated against the lexicon on write like any other.
//!
//! `GELSTORE_BENCH_RECORDS` sets the repository size (default 100,000).

use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine as _;
use gelstore::repo::repository::{ImportOptions, Repository, Write, verify_car};
use gelstore::repo::tid::Tid;
use serde_json::{Value, json};

const COLL: &str = "chat.gel.assistant.message";
const SINGLE: usize = 5_000;
const BATCH: usize = 200;
const UPDATES: usize = 300;

fn main() {
    let total: usize = std::env::var("GELSTORE_BENCH_RECORDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("a");
    let mut repo = Repository::init(&data).expect("init");
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let base = Tid::parse("3lbqzdw5pzk22").unwrap().as_u64();
    let rkey = |i: usize| format!("{}.r0", Tid::from_u64(base + (i as u64) * 1024));
    println!("repo bench: {total} chat.gel.assistant.message records, sled, fsync per commit");

    // 1. Single-record commits.
    let single = SINGLE.min(total);
    let started = Instant::now();
    for i in 0..single {
        repo.apply(&[Write::create(COLL, rkey(i), message(i, &mut rng))])
            .expect("apply");
    }
    let t = started.elapsed();
    println!(
        "create, 1 record per commit:    {single:>7} records in {:>7.2} s = {:>8.0} records/s ({:.2} ms/commit)",
        t.as_secs_f64(),
        single as f64 / t.as_secs_f64(),
        t.as_secs_f64() * 1e3 / single as f64
    );

    // 2. Batches of 200 up to the total.
    let started = Instant::now();
    let mut i = single;
    let mut commits = 0;
    while i < total {
        let end = (i + BATCH).min(total);
        let writes: Vec<Write> = (i..end)
            .map(|j| Write::create(COLL, rkey(j), message(j, &mut rng)))
            .collect();
        repo.apply(&writes).expect("apply batch");
        i = end;
        commits += 1;
    }
    let t = started.elapsed();
    let n = total - single;
    println!(
        "create, {BATCH} records per commit: {n:>7} records in {:>7.2} s = {:>8.0} records/s ({:.1} ms/commit, {commits} commits)",
        t.as_secs_f64(),
        n as f64 / t.as_secs_f64(),
        t.as_secs_f64() * 1e3 / commits.max(1) as f64
    );
    assert_eq!(repo.record_count() as usize, total);

    // 3. One record update at full size.
    let mut latencies = Vec::with_capacity(UPDATES);
    let mut written = 0;
    let mut written_bytes = 0;
    let mut deleted = 0;
    for u in 0..UPDATES {
        let target = (u * 7_919) % total;
        let started = Instant::now();
        let info = repo
            .apply(&[Write::update(COLL, rkey(target), message(target, &mut rng))])
            .expect("update");
        latencies.push(started.elapsed());
        written += info.blocks.written;
        written_bytes += info.blocks.written_bytes;
        deleted += info.blocks.deleted;
    }
    latencies.sort();
    println!(
        "update 1 record at {total}: median {:.2} ms, p99 {:.2} ms; {:.1} blocks ({:.0} bytes) written and {:.1} deleted per commit",
        ms(latencies[UPDATES / 2]),
        ms(latencies[UPDATES * 99 / 100]),
        written as f64 / UPDATES as f64,
        written_bytes as f64 / UPDATES as f64,
        deleted as f64 / UPDATES as f64
    );

    // 4. Size on disk.
    println!(
        "store on disk: {:.1} MB (sled size_on_disk {:.1} MB) for {total} records",
        du(&data) as f64 / 1e6,
        repo.size_on_disk().unwrap() as f64 / 1e6
    );

    // 5. Export.
    let car_path = dir.path().join("repo.car");
    let started = Instant::now();
    let file = std::io::BufWriter::new(std::fs::File::create(&car_path).unwrap());
    let (file, stats) = repo.export(file, None).expect("export");
    drop(file);
    let t = started.elapsed();
    let mb = stats.bytes as f64 / 1e6;
    println!(
        "export CAR: {} blocks, {mb:.1} MB in {:.2} s = {:.1} MB/s",
        stats.blocks,
        t.as_secs_f64(),
        mb / t.as_secs_f64()
    );
    let head = repo.head();
    drop(repo);

    // 6. Verify only, then import + verify into a fresh store.
    let started = Instant::now();
    let verified = verify_car(
        std::io::BufReader::new(std::fs::File::open(&car_path).unwrap()),
        &ImportOptions::default(),
    )
    .expect("verify");
    let t = started.elapsed();
    assert_eq!(verified.summary().record_count, total);
    println!(
        "verify CAR (read, signature, MST, records): {:.2} s = {:.1} MB/s",
        t.as_secs_f64(),
        mb / t.as_secs_f64()
    );
    let copy_dir = dir.path().join("b");
    let started = Instant::now();
    let (copy, import) = Repository::import(
        &copy_dir,
        std::io::BufReader::new(std::fs::File::open(&car_path).unwrap()),
        &ImportOptions::default(),
    )
    .expect("import");
    let t = started.elapsed();
    assert_eq!(copy.head(), head);
    println!(
        "import CAR (verify + store, one batch): {} blocks in {:.2} s = {:.1} MB/s; imported store {:.1} MB on disk",
        import.blocks,
        t.as_secs_f64(),
        mb / t.as_secs_f64(),
        du(&copy_dir) as f64 / 1e6
    );
    let started = Instant::now();
    let report = copy.check().expect("check");
    println!(
        "full store check of the import ({} blocks, {} nodes): {:.2} s",
        report.blocks,
        report.nodes,
        started.elapsed().as_secs_f64()
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn du(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        total += if meta.is_dir() {
            du(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}

fn next(rng: &mut u64) -> u64 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    *rng
}

/// A sealed assistant message like the project's fixtures, with random
/// ciphertext of 300–900 bytes.
fn message(i: usize, rng: &mut u64) -> Value {
    let len = 300 + (next(rng) % 600) as usize;
    let ciphertext: Vec<u8> = (0..len).map(|_| next(rng) as u8).collect();
    let nonce: Vec<u8> = (0..24).map(|_| next(rng) as u8).collect();
    let b64 = base64::engine::general_purpose::STANDARD;
    json!({
        "$type": COLL,
        "chat": "at://did:plc:ewvi7nxzyoun6zhxrhs64oiz/chat.gel.assistant.chat/3lbqzcx2ss222",
        "role": if i.is_multiple_of(2) { "user" } else { "assistant" },
        "status": "complete",
        "content": {
            "alg": "xchacha20poly1305-hkdf-sha256-v1",
            "keyId": "ck-3lbqzcx2ss222-0",
            "nonce": {"$bytes": b64.encode(&nonce)},
            "ciphertext": {"$bytes": b64.encode(&ciphertext)},
        },
        "createdAt": "2025-11-29T19:41:07.250Z",
    })
}
