//! The local identity: the account's signing key, kept in a file beside the
//! store (never in the repository), readable by its owner only.
//!
//! The file holds one line, `<alg> <hex of the 32-byte private scalar>`,
//! where `<alg>` is the JWT name (`ES256K` for secp256k1, the default for new
//! identities, or `ES256` for P-256). On Unix it is created with mode 0600
//! (in a folder created with 0700), and a key file that group or others can
//! read is refused, as `ssh` refuses such keys. The local DID is the key's
//! `did:key`.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use gelstore_crypto::private_file::{PrivateFileError, read_private};
use gelstore_crypto::{KeyAlgorithm, KeyError, PRIVATE_KEY_LEN, SigningKey};

/// Why the identity file could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyFileError {
    /// Reading or writing the file failed.
    #[error("identity key file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not in the expected format.
    #[error("identity key file {path} is malformed: {reason}")]
    Malformed {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The file is readable or writable by group or others.
    #[error(
        "identity key file {path} has permissions {mode:o}; it must be readable by its owner only (chmod 600)"
    )]
    Permissions {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// The key itself was rejected.
    #[error("identity key file {path}: {source}")]
    Key {
        /// The file.
        path: String,
        /// Why.
        source: KeyError,
    },
}

/// The key file's name inside a data folder.
pub const KEY_FILE: &str = "signing.key";
/// Longest key file read (a key file is one short line).
const MAX_KEY_FILE_BYTES: u64 = 1024;

/// The key file of data folder `dir`.
pub fn key_path(dir: &Path) -> PathBuf {
    dir.join(KEY_FILE)
}

/// Creates `dir` (owner-only on Unix) if it does not exist.
pub fn create_private_dir(dir: &Path) -> Result<(), KeyFileError> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir).map_err(|source| KeyFileError::Io {
        path: dir.display().to_string(),
        source,
    })
}

/// Reads the key in `dir`, if the file exists.
pub fn load_key(dir: &Path) -> Result<Option<SigningKey>, KeyFileError> {
    let path = key_path(dir);
    let shown = path.display().to_string();
    let bytes = match read_private(&path, MAX_KEY_FILE_BYTES) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(None),
        Err(PrivateFileError::Io(source)) => {
            return Err(KeyFileError::Io {
                path: shown,
                source,
            });
        }
        Err(PrivateFileError::Exposed { mode }) => {
            return Err(KeyFileError::Permissions { path: shown, mode });
        }
        Err(PrivateFileError::TooLarge { .. }) => {
            return Err(KeyFileError::Malformed {
                path: shown,
                reason: format!("longer than {MAX_KEY_FILE_BYTES} bytes"),
            });
        }
    };
    let text = std::str::from_utf8(&bytes).map_err(|_| KeyFileError::Malformed {
        path: shown.clone(),
        reason: "not UTF-8 text".into(),
    })?;
    parse_key(text).map(Some).map_err(|reason| match reason {
        ParseError::Format(reason) => KeyFileError::Malformed {
            path: shown.clone(),
            reason,
        },
        ParseError::Key(source) => KeyFileError::Key {
            path: shown.clone(),
            source,
        },
    })
}

/// Writes a new key file in `dir` (which must exist); fails if one exists.
///
/// The key is written to a temporary file, fsynced, and linked into place
/// (a link, unlike a rename, never replaces an existing file), then the
/// folder is fsynced: a crash leaves either no key file or a complete one.
pub fn store_key(dir: &Path, key: &SigningKey) -> Result<(), KeyFileError> {
    let path = key_path(dir);
    let tmp = dir.join(format!(".{KEY_FILE}.{}.tmp", std::process::id()));
    let io = |p: &Path| {
        let shown = p.display().to_string();
        move |source| KeyFileError::Io {
            path: shown,
            source,
        }
    };
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    // A stale temporary file (from a crash) may have other permissions.
    let _ = fs::remove_file(&tmp);
    let result = (|| {
        let mut file = options.open(&tmp).map_err(io(&tmp))?;
        let alg = key.algorithm().jwt_name();
        let line = format!("{alg} {}\n", hex(&key.to_bytes()[..]));
        file.write_all(line.as_bytes()).map_err(io(&tmp))?;
        file.sync_all().map_err(io(&tmp))?;
        fs::hard_link(&tmp, &path).map_err(io(&path))
    })();
    let _ = fs::remove_file(&tmp);
    result?;
    #[cfg(unix)]
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))?;
    Ok(())
}

/// Loads the key in `dir`, creating a new secp256k1 key if there is none.
pub fn load_or_create_key(dir: &Path) -> Result<SigningKey, KeyFileError> {
    if let Some(key) = load_key(dir)? {
        return Ok(key);
    }
    let key = SigningKey::generate(KeyAlgorithm::K256).map_err(|source| KeyFileError::Key {
        path: key_path(dir).display().to_string(),
        source,
    })?;
    store_key(dir, &key)?;
    Ok(key)
}

enum ParseError {
    Format(String),
    Key(KeyError),
}

fn parse_key(text: &str) -> Result<SigningKey, ParseError> {
    let line = text.trim_end_matches(['\n', '\r']);
    let (alg, hex_key) = line
        .split_once(' ')
        .ok_or_else(|| ParseError::Format("expected `<alg> <hex key>`".into()))?;
    let alg = match alg {
        "ES256K" => KeyAlgorithm::K256,
        "ES256" => KeyAlgorithm::P256,
        other => {
            return Err(ParseError::Format(format!(
                "unknown algorithm {:?} (ES256K or ES256)",
                other.chars().take(20).collect::<String>()
            )));
        }
    };
    let bytes = unhex(hex_key).ok_or_else(|| {
        ParseError::Format(format!(
            "the key must be {} hex digits",
            2 * PRIVATE_KEY_LEN
        ))
    })?;
    SigningKey::from_bytes(alg, &bytes).map_err(ParseError::Key)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() != 2 * PRIVATE_KEY_LEN || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_once_then_loaded() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load_key(dir.path()).unwrap().is_none());
        let a = load_or_create_key(dir.path()).unwrap();
        let b = load_or_create_key(dir.path()).unwrap();
        assert_eq!(a.public_key(), b.public_key());
        assert_eq!(a.algorithm(), KeyAlgorithm::K256);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(key_path(dir.path()))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(store_key(dir.path(), &a).is_err(), "never overwritten");
    }

    #[cfg(unix)]
    #[test]
    fn readable_by_others_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        load_or_create_key(dir.path()).unwrap();
        let path = key_path(dir.path());
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            load_key(dir.path()),
            Err(KeyFileError::Permissions { mode: 0o644, .. })
        ));
    }

    #[test]
    fn malformed_files_are_named() {
        for text in ["", "ES256K", "ES256K zz", "RSA 00", "ES256K 0000"] {
            assert!(
                matches!(parse_key(text), Err(ParseError::Format(_))),
                "{text:?}"
            );
        }
        let zero = format!("ES256K {}", "0".repeat(64));
        assert!(matches!(parse_key(&zero), Err(ParseError::Key(_))));
        let key = SigningKey::from_bytes(KeyAlgorithm::P256, &[7; 32]).unwrap();
        let text = format!("ES256 {}\n", hex(&key.to_bytes()[..]));
        let back = parse_key(&text).ok().unwrap();
        assert_eq!(back.public_key(), key.public_key());
    }
}
