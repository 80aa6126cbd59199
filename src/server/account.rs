//! The one account a server holds: handle, password hash and the secret its
//! session tokens are signed with, kept in `DATA/account.json` (mode 0600,
//! replaced atomically). The password itself is never stored: only a
//! PBKDF2-HMAC-SHA256 hash with a random salt.
//!
//! Defaults (no flags on a fresh machine): handle [`DEFAULT_HANDLE`], and a
//! random password that is printed once on stderr when the account is
//! created. `--password` (or `GELSTORE_PASSWORD`) sets a new one at any
//! start; `--handle` changes the handle.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD_NO_PAD as B64;
use hmac::Hmac;
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// The account file's name in the data folder.
pub const ACCOUNT_FILE: &str = "account.json";

/// The handle of a new account when none is given.
pub const DEFAULT_HANDLE: &str = "gelstore.test";

/// PBKDF2 rounds for new hashes (OWASP's 2023 figure for PBKDF2-HMAC-SHA256
/// is 600 000; a debug build takes seconds for that, so the stored hash
/// names its own count and can be raised without breaking old ones).
const PBKDF2_ROUNDS: u32 = 210_000;

/// Why the account file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    /// Reading or writing it failed.
    #[error("account file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// It is not what this server writes.
    #[error("account file {path} is malformed: {reason}")]
    Malformed {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// A handle that is not valid handle syntax.
    #[error("invalid handle {handle:?}: {reason}")]
    InvalidHandle {
        /// The handle given.
        handle: String,
        /// Why.
        reason: String,
    },
    /// The system's random source failed.
    #[error("no randomness: {0}")]
    Random(String),
}

/// The shortest HS256 key accepted for session tokens.
pub const MIN_TOKEN_KEY: usize = 32;

/// The stored account.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Account {
    /// The handle (lower case).
    pub handle: String,
    /// `pbkdf2-sha256$ROUNDS$SALT$HASH` (base64, no padding).
    pub password_hash: String,
    /// The HS256 key of session tokens (base64); replacing it ends every
    /// session.
    pub token_secret: String,
}

/// What [`Account::load_or_create`] did about the password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PasswordNote {
    /// The stored hash was kept.
    Kept,
    /// The password given was set.
    Set,
    /// A new account got this generated password (show it once).
    Generated(String),
}

impl Account {
    /// Loads `DATA/account.json`, creating it if missing; applies a new
    /// handle or password if given.
    pub fn load_or_create(
        dir: &Path,
        handle: Option<&str>,
        password: Option<&str>,
    ) -> Result<(Account, PasswordNote), AccountError> {
        let path = dir.join(ACCOUNT_FILE);
        let shown = path.display().to_string();
        if let Some(h) = handle {
            gelstore_codegen::syntax::check_handle(h).map_err(|e| AccountError::InvalidHandle {
                handle: h.chars().take(100).collect(),
                reason: e.reason,
            })?;
        }
        let existing = match fs::read(&path) {
            Ok(bytes) => {
                let account = serde_json::from_slice::<Account>(&bytes).map_err(|e| {
                    AccountError::Malformed {
                        path: shown.clone(),
                        reason: e.to_string(),
                    }
                })?;
                // Fail closed: a short or undecodable key would let anyone
                // forge session tokens.
                if account.token_key().is_none() {
                    return Err(AccountError::Malformed {
                        path: shown,
                        reason: format!(
                            "tokenSecret is not base64 of at least {MIN_TOKEN_KEY} bytes"
                        ),
                    });
                }
                Some(account)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => {
                return Err(AccountError::Io {
                    path: shown,
                    source,
                });
            }
        };
        let (mut account, mut note, mut changed) = match existing {
            Some(a) => (a, PasswordNote::Kept, false),
            None => {
                let generated = random_token(18)?;
                let account = Account {
                    handle: DEFAULT_HANDLE.to_owned(),
                    password_hash: hash_password(&generated)?,
                    token_secret: B64.encode(random_bytes::<32>()?),
                };
                (account, PasswordNote::Generated(generated), true)
            }
        };
        if let Some(h) = handle {
            let h = h.to_ascii_lowercase();
            if h != account.handle {
                account.handle = h;
                changed = true;
            }
        }
        if let Some(pw) = password
            && !verify_password(pw, &account.password_hash)
        {
            account.password_hash = hash_password(pw)?;
            // A new password ends every session made with the old one.
            account.token_secret = B64.encode(random_bytes::<32>()?);
            note = PasswordNote::Set;
            changed = true;
        }
        if changed {
            write_private(
                &path,
                &serde_json::to_vec_pretty(&account).unwrap_or_default(),
            )
            .map_err(|source| AccountError::Io {
                path: shown,
                source,
            })?;
        }
        Ok((account, note))
    }

    /// The token key bytes; `None` if the stored secret is not base64 of
    /// at least [`MIN_TOKEN_KEY`] bytes.
    pub fn token_key(&self) -> Option<Vec<u8>> {
        B64.decode(&self.token_secret)
            .ok()
            .filter(|key| key.len() >= MIN_TOKEN_KEY)
    }
}

/// Hashes a password with a fresh random salt.
pub fn hash_password(password: &str) -> Result<String, AccountError> {
    let salt = random_bytes::<16>()?;
    let hash = pbkdf2_sha256(password.as_bytes(), &salt, PBKDF2_ROUNDS);
    Ok(format!(
        "pbkdf2-sha256${PBKDF2_ROUNDS}${}${}",
        B64.encode(salt),
        B64.encode(hash)
    ))
}

/// Whether `password` matches a stored hash (constant-time comparison).
pub fn verify_password(password: &str, stored: &str) -> bool {
    let mut parts = stored.split('$');
    let (Some("pbkdf2-sha256"), Some(rounds), Some(salt), Some(hash), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return false;
    };
    let (Ok(rounds), Ok(salt), Ok(hash)) =
        (rounds.parse::<u32>(), B64.decode(salt), B64.decode(hash))
    else {
        return false;
    };
    if rounds == 0 || rounds > 10_000_000 || hash.len() != 32 {
        return false;
    }
    let computed = pbkdf2_sha256(password.as_bytes(), &salt, rounds);
    // Constant time: every byte is compared whatever the earlier ones were.
    computed
        .iter()
        .zip(hash.iter())
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0
}

fn pbkdf2_sha256(password: &[u8], salt: &[u8], rounds: u32) -> [u8; 32] {
    let mut out = [0u8; 32];
    pbkdf2::pbkdf2::<Hmac<Sha256>>(password, salt, rounds, &mut out)
        .expect("HMAC takes keys of any length");
    out
}

/// `N` random bytes from the OS.
pub fn random_bytes<const N: usize>() -> Result<[u8; N], AccountError> {
    let mut out = [0u8; N];
    getrandom::fill(&mut out).map_err(|e| AccountError::Random(e.to_string()))?;
    Ok(out)
}

/// A random URL-safe string of `n` bytes' entropy.
pub fn random_token(n: usize) -> Result<String, AccountError> {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).map_err(|e| AccountError::Random(e.to_string()))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_verifies_against_its_hash_only() {
        let stored = hash_password("hunter2").unwrap();
        assert!(!stored.contains("hunter2"));
        assert!(verify_password("hunter2", &stored));
        assert!(!verify_password("hunter3", &stored));
        assert!(!verify_password("hunter2", "pbkdf2-sha256$1$AAAA"));
        assert!(!verify_password("hunter2", "garbage"));
        // Two hashes of one password differ (salt).
        assert_ne!(stored, hash_password("hunter2").unwrap());
    }

    #[test]
    fn an_account_with_a_short_or_broken_token_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (a, _) = Account::load_or_create(dir.path(), None, None).unwrap();
        for secret in ["", "not base64!", "AAAA"] {
            let broken = Account {
                token_secret: secret.to_owned(),
                ..a.clone()
            };
            fs::write(
                dir.path().join(ACCOUNT_FILE),
                serde_json::to_vec(&broken).unwrap(),
            )
            .unwrap();
            let err = Account::load_or_create(dir.path(), None, None).unwrap_err();
            assert!(
                matches!(err, AccountError::Malformed { .. }),
                "{secret:?}: {err}"
            );
        }
    }

    #[test]
    fn a_new_account_gets_a_generated_password_and_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let (a, note) = Account::load_or_create(dir.path(), None, None).unwrap();
        let PasswordNote::Generated(pw) = note else {
            panic!("no generated password: {note:?}")
        };
        assert_eq!(a.handle, DEFAULT_HANDLE);
        let text = fs::read_to_string(dir.path().join(ACCOUNT_FILE)).unwrap();
        assert!(!text.contains(&pw), "the password is stored in clear");
        let (b, note) = Account::load_or_create(dir.path(), None, Some(&pw)).unwrap();
        assert_eq!(note, PasswordNote::Kept);
        assert_eq!(a.token_secret, b.token_secret);
        let (c, note) = Account::load_or_create(dir.path(), Some("x.test"), Some("new")).unwrap();
        assert_eq!(note, PasswordNote::Set);
        assert_ne!(
            c.token_secret, b.token_secret,
            "a new password keeps the old sessions"
        );
        assert!(Account::load_or_create(dir.path(), Some("not a handle"), None).is_err());
    }
}
