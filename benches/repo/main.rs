//! Repository store throughput on the default engine (redb): building a
//! 100,000-record repository (single-record commits, then batches of 200),
//! one update at 100k records, CAR export, one `listRecords` page of the 50
//! newest records (the reverse MST walk against the old walk from the
//! collection's start), import + verification, and the size on disk.
//!
//! Then, side by side with `@atproto/repo` (the `reference` module; its npm
//! packages are installed into `tests/reference` on first run): 20,000
//! records as 100 commits of 200, one create on the 100k store, export,
//! verify, import and open, by whole `gelstore` processes as a user runs
//! them, against the reference in memory in one Node process.
//!
//! Run: `cargo bench --bench repo` (release profile). Each commit is signed
//! and flushed to disk (fsync) before it returns, as in real use. Records
//! are `chat.gel.assistant.message` records (sealed content of 300–900
//! bytes), validated against the lexicon on write like any other.
//!
//! `GELSTORE_BENCH_RECORDS` sets the repository size (default 100,000).
//!
//! One create is a whole process against one in-memory `applyWrites`, so
//! the process start is its floor (the bench prints `gelstore --version`
//! under the table). The reference keeps no store of its own: its "open"
//! is reading the CAR back into memory. Figures of past runs:
//! `benches/RESULTS.md#repo`.

use std::time::Instant;

use gelstore::model::Cid;
use gelstore::repo::blocks::{BlockSource, StoreError};
use gelstore::repo::mst::Mst;
use gelstore::repo::repository::{ImportOptions, Repository, Write, verify_car};
use gelstore::repo::tid::Tid;

#[path = "../common/http.rs"]
mod http;
#[path = "../common/measure.rs"]
mod measure;
#[path = "../common/records.rs"]
mod records;
use measure::{du, median, ms};
use records::message;

#[allow(dead_code)] // the tests' support module: `npm_ci`, and starting `serve`
#[path = "../../tests/support/launch.rs"]
mod launch;
mod reference;
#[path = "../../tests/support/reference_harness.rs"]
mod reference_harness;

const COLL: &str = "chat.gel.assistant.message";
const SINGLE: usize = 5_000;
const BATCH: usize = 200;
const UPDATES: usize = 300;
/// A `listRecords` page (its default limit).
const PAGE: usize = 50;
const PAGE_RUNS: usize = 20;

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
    println!(
        "repo bench: {total} chat.gel.assistant.message records, {}, fsync per commit",
        repo.engine().name()
    );

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
        "store on disk: {:.1} MB (engine size_on_disk {:.1} MB) for {total} records",
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
    // 6. One newest-first listRecords page.
    newest_page(&repo, total);

    let head = repo.head();
    drop(repo);

    // 7. Verify only, then import + verify into a fresh store.
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
    drop(copy);

    // 8. The same work side by side with @atproto/repo.
    reference::side_by_side(dir.path(), &data, &car_path, total);
}

/// The 50 newest records' keys, as `listRecords` (reverse=false) takes
/// them: the old way (walk the collection from its start, keep the last
/// page) against the reverse MST walk, each on a cold tree (every node read
/// from the store and checked; blocks read counted) and on the repository's warm
/// tree (nodes already in memory). Median of `PAGE_RUNS` runs.
fn newest_page(repo: &Repository, total: usize) {
    let root = repo.mst().root();
    let cold = |page: fn(&Mst<&Counting<'_>>) -> Vec<(String, Cid)>| {
        let mut times = Vec::with_capacity(PAGE_RUNS);
        let mut reads = 0;
        let mut keys = Vec::new();
        for _ in 0..PAGE_RUNS {
            let counting = Counting {
                inner: repo.mst().store(),
                reads: std::cell::Cell::new(0),
            };
            let started = Instant::now();
            let tree = Mst::load(&counting, root).expect("load root");
            keys = page(&tree);
            times.push(started.elapsed());
            reads = counting.reads.get();
        }
        (median(times), reads, keys)
    };
    let (old_cold, old_reads, old_keys) = cold(page_walk_from_start);
    let (new_cold, new_reads, new_keys) = cold(page_reverse_walk);
    assert_eq!(old_keys, new_keys, "both ways give the same page");
    assert_eq!(new_keys.len(), (PAGE + 1).min(total));

    let warm = |page: &dyn Fn() -> Vec<(String, Cid)>| {
        page();
        median((0..PAGE_RUNS).map(|_| {
            let started = Instant::now();
            std::hint::black_box(page());
            started.elapsed()
        }))
    };
    // The server's own calls: the old loop over `list`, the new `list_rev`.
    let old_warm = warm(&|| {
        let all: Vec<(String, Cid)> = repo
            .list(Some(COLL))
            .expect("list")
            .map(|e| e.expect("entry"))
            .collect();
        all.into_iter().rev().take(PAGE + 1).collect()
    });
    let new_warm = warm(&|| {
        repo.list_rev(COLL, None)
            .expect("list_rev")
            .take(PAGE + 1)
            .map(|e| e.expect("entry"))
            .collect()
    });
    println!(
        "listRecords page of {PAGE} newest of {total}, walk from start: cold {:.2} ms ({old_reads} blocks read), warm {:.3} ms",
        ms(old_cold),
        ms(old_warm)
    );
    println!(
        "listRecords page of {PAGE} newest of {total}, reverse walk:    cold {:.3} ms ({new_reads} blocks read), warm {:.3} ms ({:.0}x / {:.0}x faster)",
        ms(new_cold),
        ms(new_warm),
        old_cold.as_secs_f64() / new_cold.as_secs_f64(),
        old_warm.as_secs_f64() / new_warm.as_secs_f64()
    );
}

/// What `listRecords` did before the reverse walk (kept to compare): every
/// key of the collection from its start, then the last `PAGE + 1` reversed.
fn page_walk_from_start(tree: &Mst<&Counting<'_>>) -> Vec<(String, Cid)> {
    let all: Vec<(String, Cid)> = tree
        .entries_with_prefix(&format!("{COLL}/"))
        .map(|e| e.expect("entry"))
        .collect();
    all.into_iter().rev().take(PAGE + 1).collect()
}

/// The reverse walk from the collection's end (`Repository::list_rev`).
fn page_reverse_walk(tree: &Mst<&Counting<'_>>) -> Vec<(String, Cid)> {
    let prefix = format!("{COLL}/");
    tree.entries_before(&format!("{COLL}0"))
        .map(|e| e.expect("entry"))
        .take_while(|(key, _)| key.starts_with(&prefix))
        .take(PAGE + 1)
        .collect()
}

/// A block source that counts reads.
struct Counting<'a> {
    inner: &'a dyn BlockSource,
    reads: std::cell::Cell<usize>,
}

impl BlockSource for Counting<'_> {
    fn get(&self, cid: &Cid) -> Result<Option<Vec<u8>>, StoreError> {
        self.reads.set(self.reads.get() + 1);
        self.inner.get(cid)
    }
}
