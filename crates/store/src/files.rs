//! Files of a data folder that only its owner reads (account, sessions,
//! blobs), each written whole or not at all.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` with mode 0600 through a temporary file, fsync
/// and rename: a crash leaves the old file or the new one.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    // Unique per call: two requests may write the same blob at once.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp: PathBuf = path.with_extension(format!("{}.{n}.tmp", std::process::id()));
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    fs::rename(&tmp, path)?;
    if let Some(parent) = path.parent()
        && let Ok(d) = fs::File::open(parent)
    {
        let _ = d.sync_all();
    }
    Ok(())
}
