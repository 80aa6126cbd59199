//! Blobs uploaded with `com.atproto.repo.uploadBlob`, one file per blob in
//! `DATA/blobs/` named by its CID (raw codec, SHA-256), with its MIME type
//! in a `.mime` file beside it. Written through a temporary file and a
//! rename, so a blob file is whole or absent.
//!
//! TODO(issue 8): blobs no record references are never collected, and a
//! record's blob refs are not checked against the uploaded blobs.

use std::fs;
use std::io::ErrorKind;
use std::path::PathBuf;

use cid::Cid;

use super::account::write_private;
use crate::model::cid_for_blob;

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

impl BlobStore {
    /// The store in `DATA/blobs` (created on first write).
    pub fn new(data: &std::path::Path) -> Self {
        BlobStore {
            dir: data.join("blobs"),
        }
    }

    /// Stores `bytes` and returns their CID.
    pub fn put(&self, bytes: &[u8], mime: &str) -> std::io::Result<Cid> {
        let cid = cid_for_blob(bytes);
        fs::create_dir_all(&self.dir)?;
        let path = self.dir.join(cid.to_string());
        if !path.exists() {
            write_private(&path, bytes)?;
        }
        write_private(&path.with_extension("mime"), mime.as_bytes())?;
        Ok(cid)
    }

    /// The blob with `cid`, if stored.
    pub fn get(&self, cid: &Cid) -> std::io::Result<Option<Blob>> {
        let path = self.dir.join(cid.to_string());
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mime = fs::read_to_string(path.with_extension("mime"))
            .unwrap_or_else(|_| "application/octet-stream".into());
        Ok(Some(Blob { bytes, mime }))
    }
}
