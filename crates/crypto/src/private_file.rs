//! Reading a file that holds a secret (a key, a device's state): only its
//! owner may read or change it, and it is small.
//!
//! The mode and size checked are those of the open handle, the file that
//! is then read (not a second lookup of the name). The bytes come back in
//! a buffer that is wiped when dropped.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use k256::elliptic_curve::zeroize::Zeroizing;
use thiserror::Error;

/// Why a private file could not be read.
#[derive(Debug, Error)]
pub enum PrivateFileError {
    /// Opening or reading failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// Group or others may read or change it (Unix).
    #[error("mode {mode:03o} lets other users read or change it; run `chmod 600` on it")]
    Exposed {
        /// The file's permission bits.
        mode: u32,
    },
    /// Longer than the caller's limit.
    #[error("{len} bytes, more than the {max} such a file holds")]
    TooLarge {
        /// The file's length.
        len: u64,
        /// The limit.
        max: u64,
    },
}

/// The bytes of the file at `path`, or `None` if there is none. Refuses a
/// file that group or others may read or write (on Unix) and one longer
/// than `max` bytes.
pub fn read_private(path: &Path, max: u64) -> Result<Option<Zeroizing<Vec<u8>>>, PrivateFileError> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let meta = file.metadata()?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(PrivateFileError::Exposed { mode });
        }
    }
    // At most one byte past `max` is read, whatever the file holds now.
    let mut bytes = Zeroizing::new(Vec::with_capacity(meta.len().min(max) as usize));
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(PrivateFileError::TooLarge {
            len: meta.len().max(bytes.len() as u64),
            max,
        });
    }
    Ok(Some(bytes))
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn write(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn reads_a_private_file_and_refuses_the_others() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path();
        let ok = write(dir, "ok", b"secret", 0o600);
        assert_eq!(&**read_private(&ok, 6).unwrap().unwrap(), b"secret");
        assert!(read_private(&dir.join("absent"), 6).unwrap().is_none());
        for mode in [0o640, 0o604, 0o620, 0o602] {
            let exposed = write(dir, "exposed", b"secret", mode);
            let e = read_private(&exposed, 6).unwrap_err();
            assert!(
                matches!(e, PrivateFileError::Exposed { mode: m } if m == mode),
                "{e}"
            );
        }
        let long = write(dir, "long", b"secret!", 0o600);
        let e = read_private(&long, 6).unwrap_err();
        assert!(
            matches!(e, PrivateFileError::TooLarge { len: 7, max: 6 }),
            "{e}"
        );
        // A folder is not a file to read.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(matches!(
            read_private(dir, 1 << 20),
            Err(PrivateFileError::Io(_))
        ));
    }
}
