//! Measuring helpers the benches share: medians, milliseconds, folder
//! sizes. Included with `#[path]` by `repo/main.rs`, `serve.rs` and
//! `store_engines.rs`.

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

/// The disk space the files under `path` take: the blocks the file system
/// allocated to them, as `du` counts (a sparse end of a file takes none).
pub fn du(path: &Path) -> u64 {
    sizes(path).0
}

/// The files' lengths under `path`, as `ls -l` shows them: more than
/// [`du`] where a file has a sparse end (redb grows its file by doubling
/// and writes the new half only as it fills it).
pub fn du_apparent(path: &Path) -> u64 {
    sizes(path).1
}

/// (allocated, apparent) bytes under `path` (symlinks counted, not followed).
fn sizes(path: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return (0, 0);
    };
    if !meta.is_dir() {
        return (meta.blocks() * 512, meta.len());
    }
    std::fs::read_dir(path)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| sizes(&e.path()))
                .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
        })
        .unwrap_or((0, 0))
}
