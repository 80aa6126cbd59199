//! A file named on the command line for a command's output (`--out`).
//!
//! A regular file (or a new name) is written beside itself and renamed into
//! place once synced, so a failure never leaves a truncated file under the
//! asked name. A device or a pipe (`/dev/null`, a FIFO, `/dev/stdout`) is
//! written where it is: renaming over it would replace the device with a
//! regular file.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use super::Failure;

/// An output being written; see the module docs.
pub(super) struct OutputFile {
    target: PathBuf,
    /// The temporary file renamed onto `target` at the end; `None` when
    /// the target is written in place.
    temp: Option<PathBuf>,
}

impl OutputFile {
    /// Opens where the bytes for `target` go.
    pub fn create(target: &Path) -> Result<(OutputFile, File), Failure> {
        let in_place = fs::metadata(target).is_ok_and(|m| !m.is_file());
        let (temp, opened) = if in_place {
            (None, OpenOptions::new().write(true).open(target))
        } else {
            let temp = temp_path(target);
            let opened = File::create(&temp);
            (Some(temp), opened)
        };
        let output = OutputFile {
            target: target.to_path_buf(),
            temp,
        };
        let file = opened.map_err(|e| output.failure(e))?;
        Ok((output, file))
    }

    /// Makes `file` (the one [`create`](Self::create) returned, written)
    /// the target: synced and renamed into place. On failure the temporary
    /// file is removed.
    pub fn commit(self, file: File) -> Result<(), Failure> {
        let Some(temp) = &self.temp else {
            return Ok(());
        };
        let done = file.sync_all().map_err(|e| self.failure(e)).and_then(|()| {
            fs::rename(temp, &self.target)
                .map_err(|e| Failure::env(format!("{}: {e}", self.target.display())))
        });
        if done.is_err() {
            self.discard();
        }
        done
    }

    /// Removes the temporary file after a failed write.
    pub fn discard(self) {
        if let Some(temp) = &self.temp {
            let _ = fs::remove_file(temp);
        }
    }

    fn failure(&self, e: io::Error) -> Failure {
        let path = self.temp.as_deref().unwrap_or(&self.target);
        Failure::env(format!("{}: {e}", path.display()))
    }
}

fn temp_path(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "output".into());
    target.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}
