//! Garbage collection on each real engine: updating one record over and
//! over keeps the store's block count fixed and its size on disk bounded.

use gelstore::repo::repository::{Repository, Write};
use gelstore::store::{EngineKind, Table};
use serde_json::json;

const COLL: &str = "com.example.gc";

/// Bytes of all files under `dir`.
fn du(dir: &std::path::Path) -> u64 {
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

fn blocks(repo: &Repository) -> usize {
    repo.engine().scan(Table::Blocks, b"").count()
}

#[test]
fn ten_thousand_updates_of_one_record_keep_the_redb_store_bounded() {
    updates_keep_the_store_bounded(EngineKind::Redb);
}

#[test]
fn ten_thousand_updates_of_one_record_keep_the_sled_store_bounded() {
    updates_keep_the_store_bounded(EngineKind::Sled);
}

fn updates_keep_the_store_bounded(engine: EngineKind) {
    let dir = tempfile::tempdir().unwrap();
    let mut repo = Repository::init_with_engine(dir.path(), engine).unwrap();
    assert_eq!(repo.engine().name(), engine.name());
    let writes: Vec<Write> = (0..500)
        .map(|i| Write::create(COLL, format!("k{i:04}"), json!({"$type": COLL, "n": i})))
        .collect();
    repo.apply(&writes).unwrap();
    let base_blocks = blocks(&repo);
    let mut sizes = Vec::new();
    for i in 0..10_000 {
        let value = json!({"$type": COLL, "n": i, "text": "an update of one record"});
        repo.apply(&[Write::update(COLL, "k0250", value)]).unwrap();
        if (i + 1) % 2_000 == 0 {
            assert_eq!(blocks(&repo), base_blocks, "after {} updates", i + 1);
            sizes.push((repo.size_on_disk().unwrap(), du(dir.path())));
        }
    }
    let report = repo.check().unwrap();
    assert_eq!(report.records, 500);
    eprintln!(
        "{engine}: blocks {base_blocks}; (size_on_disk, bytes of files) every 2,000 updates: {sizes:?}"
    );
    // sled's log grows until its segment cleaner catches up, redb's file
    // until freed pages are reused; either must level off, not grow with
    // the number of updates.
    let (first, first_files) = sizes[0];
    let (last, last_files) = *sizes.last().unwrap();
    assert!(last < first * 3, "size on disk keeps growing: {sizes:?}");
    assert!(
        last_files < first_files * 3,
        "files keep growing: {sizes:?}"
    );
    assert!(last_files < 64 * 1024 * 1024, "{sizes:?}");
}
