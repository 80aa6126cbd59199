//! What a store of many single-record commits holds (the load `serve` puts
//! on it): exactly the repository's blocks, their counts, and the event
//! window, which stays within its count and bytes. The engine's own space
//! on top of that is printed, not asserted: sled 0.34 does not keep it
//! bounded (see `cargo bench --bench serve`).

use gelstore::repo::repository::{Repository, Write};
use gelstore::repo::tid::TidClock;
use gelstore::store::Table;
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
fn single_record_commits_keep_only_the_repository_and_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let mut repo = Repository::init(dir.path()).unwrap();
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
        "{COMMITS} commits: CAR {car} B, rows {rows} B ({:.2}× CAR), window {events} events {window} B, \
         folder {folder} B ({:.1}× CAR)",
        rows as f64 / car as f64,
        folder as f64 / car as f64
    );
}
