//! A data folder's blobs (uploaded with `com.atproto.repo.uploadBlob`,
//! fetched by `sync`, or sealed by this device for a record), one file per
//! blob in `DATA/blobs/` named by its CID (raw codec, SHA-256), with its
//! MIME type in a `.mime` file beside it, and the blob references a record
//! holds ([`blob_refs_in`]).
//!
//! An upload is written and fsynced to a temporary file first (outside the
//! repository lock), then moved into place under the lock
//! ([`BlobStore::place`]), so a blob file is whole or absent, and placing,
//! checking a record's references and deleting never interleave. A blob no
//! record references is *temporary*, as on the reference PDS: `getBlob`
//! does not serve it, and it is deleted once it is older than the
//! temporary window (its file's modification time, renewed by every
//! upload of the same bytes) — see [`BlobStore::sweep`] and
//! `server::blob_refs` for who references what.

use std::fs;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use cid::Cid;
use serde_json::Value;

use gelstore_model::{cid_for_blob, parse_cid};

/// How long an unreferenced upload is kept by default.
pub const DEFAULT_TEMP_WINDOW: Duration = Duration::from_secs(3600);

/// The variable that overrides the window (in seconds; tests shorten it).
pub const TEMP_WINDOW_ENV: &str = "GELSTORE_BLOB_TEMP_SECS";

/// A temporary file (a staged upload, or one a crash left) this old is
/// removed by the sweep whatever the window: an upload takes far less.
const STALE_TMP: Duration = Duration::from_secs(600);

/// The temporary window from [`TEMP_WINDOW_ENV`], or the default.
pub fn temp_window_from_env() -> Result<Duration, String> {
    match std::env::var(TEMP_WINDOW_ENV) {
        Err(_) => Ok(DEFAULT_TEMP_WINDOW),
        Ok(s) => s
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|&n| (1..=30 * 24 * 3600).contains(&n))
            .map(Duration::from_secs)
            .ok_or_else(|| format!("{TEMP_WINDOW_ENV} must be whole seconds from 1 to 2592000")),
    }
}

/// A blob reference found in a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobRef {
    /// `ref.$link`.
    pub cid: Cid,
    /// `mimeType`, if given as a string.
    pub mime: Option<String>,
    /// `size`, if given as a whole number.
    pub size: Option<u64>,
}

/// Every blob reference in `value`, depth first.
pub fn blob_refs_in(value: &Value) -> Vec<BlobRef> {
    let mut out = Vec::new();
    collect(value, &mut out);
    out
}

fn collect(value: &Value, out: &mut Vec<BlobRef>) {
    match value {
        Value::Object(map) => {
            if map.get("$type").and_then(Value::as_str) == Some("blob")
                && let Some(link) = map
                    .get("ref")
                    .and_then(|r| r.get("$link"))
                    .and_then(Value::as_str)
                && let Ok(cid) = parse_cid(link)
            {
                out.push(BlobRef {
                    cid,
                    mime: map
                        .get("mimeType")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    size: map.get("size").and_then(Value::as_u64),
                });
                return;
            }
            map.values().for_each(|v| collect(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| collect(v, out)),
        _ => {}
    }
}

/// The blob folder of a data folder.
#[derive(Debug, Clone)]
pub struct BlobStore {
    dir: PathBuf,
}

/// A blob read back.
#[derive(Debug)]
pub struct Blob {
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// The MIME type given when it was uploaded.
    pub mime: String,
}

/// What a stored blob is, without its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobMeta {
    /// Its size in bytes.
    pub size: u64,
    /// The MIME type given when it was uploaded.
    pub mime: String,
}

/// An upload written to a temporary file, not yet in place.
#[derive(Debug)]
pub struct Staged {
    tmp: PathBuf,
    /// The blob's CID.
    pub cid: Cid,
}

impl Drop for Staged {
    fn drop(&mut self) {
        // Placed or abandoned: either way the temporary file goes.
        let _ = fs::remove_file(&self.tmp);
    }
}

impl BlobStore {
    /// The store in `DATA/blobs` (created on first write).
    pub fn new(data: &Path) -> Self {
        BlobStore {
            dir: data.join("blobs"),
        }
    }

    fn path(&self, cid: &Cid) -> PathBuf {
        self.dir.join(cid.to_string())
    }

    /// Writes `bytes` to a temporary file (fsynced): no lock needed.
    pub fn stage(&self, bytes: &[u8]) -> std::io::Result<Staged> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        fs::create_dir_all(&self.dir)?;
        let cid = cid_for_blob(bytes);
        let tmp = self
            .dir
            .join(format!("upload.{}.{n}.tmp", std::process::id()));
        let staged = Staged { tmp, cid };
        let mut file = private_file(&staged.tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        Ok(staged)
    }

    /// Puts a staged upload in place (under the repository lock). A blob
    /// already stored keeps its file, gets its window renewed, and keeps
    /// its MIME type when records reference it (`referenced`), as their
    /// references were checked against it; an unreferenced one takes the
    /// new type.
    pub fn place(&self, staged: Staged, mime: &str, referenced: bool) -> std::io::Result<()> {
        let path = self.path(&staged.cid);
        let mime_path = path.with_extension("mime");
        if path.exists() {
            fs::File::options()
                .write(true)
                .open(&path)?
                .set_modified(SystemTime::now())?;
            if !referenced {
                write_atomic(&mime_path, mime.as_bytes())?;
            }
            return Ok(());
        }
        // The type first: a blob file never lacks its `.mime`.
        write_atomic(&mime_path, mime.as_bytes())?;
        fs::rename(&staged.tmp, &path)?;
        sync_dir(&self.dir);
        Ok(())
    }

    /// Stores `bytes` whole (staged, then placed) as a blob not yet
    /// referenced; returns its CID. For a writer that holds the folder
    /// alone (a command, or the server's own assistant).
    pub fn put(&self, bytes: &[u8], mime: &str) -> std::io::Result<Cid> {
        let staged = self.stage(bytes)?;
        let cid = staged.cid;
        self.place(staged, mime, false)?;
        Ok(cid)
    }

    /// Size and MIME type of the blob with `cid`, if stored.
    pub fn meta(&self, cid: &Cid) -> std::io::Result<Option<BlobMeta>> {
        let path = self.path(cid);
        let size = match fs::metadata(&path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        Ok(Some(BlobMeta {
            size,
            mime: read_mime(&path),
        }))
    }

    /// The blob with `cid`, if stored.
    pub fn get(&self, cid: &Cid) -> std::io::Result<Option<Blob>> {
        let path = self.path(cid);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        Ok(Some(Blob {
            bytes,
            mime: read_mime(&path),
        }))
    }

    /// Deletes the blob with `cid` (no error if it is not there). Only for
    /// a blob no committed record references: the caller holds the lock.
    pub fn delete(&self, cid: &Cid) -> std::io::Result<()> {
        let path = self.path(cid);
        for p in [path.clone(), path.with_extension("mime")] {
            match fs::remove_file(&p) {
                Err(e) if e.kind() != ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }

    /// The blobs whose files are older than `window` (candidates for the
    /// sweep; read without the lock, so the listing never stalls commits),
    /// removing temporary files crashed uploads left.
    pub fn older_than(&self, window: Duration) -> std::io::Result<Vec<Cid>> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut old = Vec::new();
        for entry in entries {
            let path = entry?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if name.ends_with(".tmp") {
                if age(&path).is_some_and(|a| a > STALE_TMP.max(window)) {
                    let _ = fs::remove_file(&path);
                }
                continue;
            }
            if let Ok(cid) = parse_cid(name)
                && age(&path).is_some_and(|a| a >= window)
            {
                old.push(cid);
            }
        }
        Ok(old)
    }

    /// Removes every temporary file in the folder (staged uploads and
    /// half-written `.mime` files): only for a folder no running server
    /// holds, where each is a killed server's leftover. How many went.
    pub fn remove_leftovers(&self) -> std::io::Result<usize> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
        let mut removed = 0;
        for entry in entries {
            let entry = entry?;
            let is_tmp = entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.ends_with(".tmp"));
            if is_tmp && entry.file_type()?.is_file() {
                match fs::remove_file(entry.path()) {
                    Ok(()) => removed += 1,
                    Err(e) if e.kind() == ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
        }
        if removed > 0 {
            sync_dir(&self.dir);
        }
        Ok(removed)
    }

    /// Deletes the blob with `cid` if its file is (still) older than
    /// `window`: an upload since the listing renewed it. Under the lock,
    /// for a blob no record references.
    pub fn delete_if_older(&self, cid: &Cid, window: Duration) -> std::io::Result<bool> {
        if age(&self.path(cid)).is_some_and(|a| a >= window) {
            self.delete(cid)?;
            return Ok(true);
        }
        Ok(false)
    }
}

/// How long ago the file at `path` was last modified (`None` if it is gone).
fn age(path: &Path) -> Option<Duration> {
    let modified = fs::metadata(path).and_then(|m| m.modified()).ok()?;
    Some(
        SystemTime::now()
            .duration_since(modified)
            .unwrap_or_default(),
    )
}

fn read_mime(path: &Path) -> String {
    fs::read_to_string(path.with_extension("mime"))
        .unwrap_or_else(|_| "application/octet-stream".into())
}

fn private_file(path: &Path) -> std::io::Result<fs::File> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    gelstore_store::files::write_private(path, bytes)
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_old_blobs_are_swept() {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::new(dir.path());
        let a = store.stage(b"a").unwrap();
        let cid_a = a.cid;
        store.place(a, "text/plain", false).unwrap();
        let b = store.stage(b"b").unwrap();
        let cid_b = b.cid;
        store.place(b, "text/plain", false).unwrap();
        // Young: nothing is old enough.
        assert!(
            store
                .older_than(Duration::from_secs(60))
                .unwrap()
                .is_empty()
        );
        let mut old = store.older_than(Duration::ZERO).unwrap();
        old.sort();
        let mut both = vec![cid_a, cid_b];
        both.sort();
        assert_eq!(old, both);
        assert!(
            !store
                .delete_if_older(&cid_b, Duration::from_secs(60))
                .unwrap()
        );
        assert!(store.delete_if_older(&cid_b, Duration::ZERO).unwrap());
        assert!(store.get(&cid_a).unwrap().is_some());
        assert!(store.meta(&cid_b).unwrap().is_none());
        // No temporary file is left behind by uploads.
        let names: Vec<_> = fs::read_dir(dir.path().join("blobs"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
        // A killed server's staged upload is removed at the next start.
        let staged = store.stage(b"cut short").unwrap();
        let left = staged.tmp.clone();
        std::mem::forget(staged);
        fs::write(dir.path().join("blobs/x.mime.1.2.tmp"), b"text/pl").unwrap();
        assert!(left.exists());
        assert_eq!(store.remove_leftovers().unwrap(), 2);
        assert!(!left.exists());
        assert!(store.get(&cid_a).unwrap().is_some());
    }
}
