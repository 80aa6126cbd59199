//! Measuring helpers the benches share: medians, milliseconds, folder
//! sizes. Included with `#[path]` by `repo/main.rs` and `store_engines.rs`.

use std::path::Path;
use std::time::{Duration, Instant};

/// The middle value of `values` (the upper middle of an even count).
pub fn median<T: PartialOrd>(values: impl IntoIterator<Item = T>) -> T {
    let mut values: Vec<T> = values.into_iter().collect();
    values.sort_by(|a, b| a.partial_cmp(b).expect("comparable measurements"));
    let middle = values.len() / 2;
    values.swap_remove(middle)
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub fn ms_since(started: Instant) -> f64 {
    ms(started.elapsed())
}

/// Bytes of every file under `path` (symlinks counted, not followed).
pub fn du(path: &Path) -> u64 {
    let meta = std::fs::symlink_metadata(path).expect("stat");
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(path)
        .expect("read folder")
        .map(|e| du(&e.expect("folder entry").path()))
        .sum()
}
