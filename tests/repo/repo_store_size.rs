//! What a store of many single-record commits holds (the load `serve` puts
//! on it): exactly the repository's blocks, their counts, and the event
//! window, which stays within its count and bytes, on each engine. The
//! engine's own space on top of that: redb's folder is asserted within a
//! few times the rows (freed pages are reused, the file compacted when it
//! has doubled);
//! sled 0.34's is only printed, as it does not keep it bounded (~20× the
//! rows here; see `cargo bench --bench store_engines`).

use gelstore::repo::repository::{Repository, Write};
use gelstore::repo::tid::TidClock;
use gelstore::store::{EngineKind, Table};
use serde_json::json;

const COLL: &str = "app.example.note";
const COMMITS: u64 = 3_000;
const WINDOW: u64 = 200;
const WINDOW_BYTES: u64 = 256 * 1024;

fn du(path: &std::path::Path) -> u64 {
    let meta = std::fs::metadata(path).unwrap();
    if meta.is_file() {
        return meta.len();
    }
    std::fs::read_dir(path)
        .unwrap()
        .map(|e| du(&e.unwrap().path()))
        .sum()
}

fn table_bytes(repo: &Repository, table: Table) -> u64 {
    repo.engine()
        .scan(table, b"")
        .map(|r| r.map(|(k, v)| (k.len() + v.len()) as u64).unwrap())
        .sum()
}

#[test]
fn single_record_commits_keep_only_the_repository_and_the_window_redb() {
    single_record_commits(EngineKind::Redb);
}

#[test]
fn single_record_commits_keep_only_the_repository_and_the_window_sled() {
    single_record_commits(EngineKind::Sled);
}

fn single_record_commits(engine: EngineKind) {
    let dir = tempfile::tempdir().unwrap();
    let mut repo = Repository::init_with_engine(dir.path(), engine).unwrap();
    repo.set_event_retention(WINDOW);
    repo.set_event_retention_bytes(WINDOW_BYTES);
    let mut clock = TidClock::new();
    for i in 0..COMMITS {
        let rkey = clock.next_tid().unwrap().to_string();
        let value = json!({"$type": COLL, "text": format!("note {i}: {}", "x".repeat(60))});
        repo.apply(&[Write::create(COLL, rkey, value)]).unwrap();
    }
    let (car, _) = repo.export(Vec::new(), None).unwrap();
    let car = car.len() as u64;
    let (events, window) = repo.event_window().unwrap();
    assert!(
        events <= WINDOW && window <= WINDOW_BYTES,
        "{events} events, {window} bytes"
    );
    assert_eq!(window, table_bytes(&repo, Table::Events));
    // Only reachable blocks are kept: old MST nodes and commits are gone.
    let blocks = table_bytes(&repo, Table::Blocks);
    assert!(blocks <= car, "blocks {blocks} B, CAR {car} B");
    let rows: u64 = Table::ALL.iter().map(|&t| table_bytes(&repo, t)).sum();
    assert!(
        rows <= 2 * car + window,
        "rows {rows} B > 2 × CAR {car} B + window {window} B"
    );
    repo.check().unwrap();
    let folder = du(dir.path());
    eprintln!(
        "{engine}: {COMMITS} commits: CAR {car} B, rows {rows} B ({:.2}× CAR), window {events} events {window} B, \
         folder {folder} B ({:.1}× CAR)",
        rows as f64 / car as f64,
        folder as f64 / car as f64
    );
    drop(repo);
    // Opening again compacts a redb file that is mostly free space.
    let repo = Repository::open(dir.path()).unwrap();
    let reopened = du(dir.path());
    drop(repo);
    eprintln!(
        "{engine}: after reopening, folder {reopened} B ({:.2}× rows, {:.1}× CAR)",
        reopened as f64 / rows as f64,
        reopened as f64 / car as f64
    );
    if engine == EngineKind::Redb {
        // What redb meets here: its file is compacted whenever it has
        // doubled, and compact it is ~1.8× the rows (B-tree pages are
        // partly empty). Not yet the goal of 2 × CAR + window: the rows
        // alone are ~1.9× CAR (see benches/RESULTS.md). sled's
        // folder is ~20× its rows here.
        for (when, size) in [("open", folder), ("after reopening", reopened)] {
            assert!(
                size <= 5 * rows,
                "redb folder {size} B > 5 × rows {rows} B ({when})"
            );
        }
    }
}
