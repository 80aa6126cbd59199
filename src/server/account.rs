//! The one account a server holds: handle, password hash and the secret its
//! session tokens are signed with, kept in `DATA/account.json` (mode 0600,
//! replaced atomically; a file group or others may read is refused, as the
//! key files are). The password itself is never stored: only an Argon2id
//! hash with a random salt, as a PHC string
//! (`$argon2id$v=19$m=19456,t=2,p=1$SALT$HASH`, OWASP's parameters). A
//! hash of an earlier version (`pbkdf2-sha256$ROUNDS$SALT$HASH`) still
//! verifies, and is replaced with an Argon2id one the next time the
//! password is given (a login, or `--password` at a start).
//!
//! Defaults (no flags on a fresh machine): handle [`DEFAULT_HANDLE`], and a
//! random password that is printed once on stderr when the account is
//! created. `--password` (or `GELSTORE_PASSWORD`) sets a new one at any
//! start; `--handle` changes the handle.

use std::path::Path;

use argon2::{Argon2, PasswordHash, PasswordHasher as _, PasswordVerifier as _};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD_NO_PAD as B64;
use hmac::Hmac;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use subtle::ConstantTimeEq as _;

use crate::crypto::private_file::{PrivateFileError, read_private};
use crate::store::files::write_private;

/// The account file's name in the data folder.
pub const ACCOUNT_FILE: &str = "account.json";
/// Longest account file read: its password hash, token key and sessions.
const MAX_ACCOUNT_BYTES: u64 = 64 * 1024 * 1024;

/// The handle of a new account when none is given.
pub const DEFAULT_HANDLE: &str = "gelstore.test";

/// Argon2id memory cost of new hashes, in KiB (OWASP: 19 MiB).
const ARGON2_M_KIB: u32 = 19 * 1024;
/// Argon2id passes (OWASP: 2 with 19 MiB).
const ARGON2_T: u32 = 2;
/// Argon2id lanes (OWASP: 1).
const ARGON2_P: u32 = 1;

/// The largest costs a stored Argon2 hash may name (1 GiB, 20 passes, 16
/// lanes): a damaged file must not make every login take minutes.
const ARGON2_MAX: (u32, u32, u32) = (1024 * 1024, 20, 16);

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
    /// Group or others may read or change it.
    #[error(
        "account file {path}: mode {mode:03o} lets other users read or change it; run `chmod 600` on it"
    )]
    Permissions {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// The system's random source failed.
    #[error("no randomness: {0}")]
    Random(String),
    /// The password could not be hashed.
    #[error("cannot hash the password: {0}")]
    Hash(String),
}

/// The shortest HS256 key accepted for session tokens.
pub const MIN_TOKEN_KEY: usize = 32;

/// The stored account.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Account {
    /// The handle (lower case).
    pub handle: String,
    /// An Argon2id PHC string, or an old `pbkdf2-sha256$ROUNDS$SALT$HASH`
    /// (base64, no padding).
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
            gelstore_lexicon::syntax::check_handle(h).map_err(|e| AccountError::InvalidHandle {
                handle: h.chars().take(100).collect(),
                reason: e.reason,
            })?;
        }
        let existing = Account::load(&path)?;
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
        if let Some(pw) = password {
            match check_password(pw, &account.password_hash) {
                Checked::Right => {}
                Checked::RightOutdated => {
                    // The same password: sessions stay, the hash improves.
                    account.password_hash = hash_password(pw)?;
                    changed = true;
                }
                Checked::Wrong => {
                    account.password_hash = hash_password(pw)?;
                    // A new password ends every session made with the old one.
                    account.token_secret = B64.encode(random_bytes::<32>()?);
                    note = PasswordNote::Set;
                    changed = true;
                }
            }
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

    /// Reads `path` (`None` if there is none): private, well-formed, with
    /// a usable token key.
    fn load(path: &Path) -> Result<Option<Account>, AccountError> {
        let shown = path.display().to_string();
        let bytes = match read_private(path, MAX_ACCOUNT_BYTES) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return Ok(None),
            Err(PrivateFileError::Io(source)) => {
                return Err(AccountError::Io {
                    path: shown,
                    source,
                });
            }
            Err(PrivateFileError::Exposed { mode }) => {
                return Err(AccountError::Permissions { path: shown, mode });
            }
            Err(e @ PrivateFileError::TooLarge { .. }) => {
                return Err(AccountError::Malformed {
                    path: shown,
                    reason: e.to_string(),
                });
            }
        };
        let account =
            serde_json::from_slice::<Account>(&bytes).map_err(|e| AccountError::Malformed {
                path: shown.clone(),
                reason: e.to_string(),
            })?;
        // Fail closed: a short or undecodable key would let anyone forge
        // session tokens.
        if account.token_key().is_none() {
            return Err(AccountError::Malformed {
                path: shown,
                reason: format!("tokenSecret is not base64 of at least {MIN_TOKEN_KEY} bytes"),
            });
        }
        Ok(Some(account))
    }

    /// Replaces the stored password hash `old` with `new` in
    /// `DIR/account.json`, keeping everything else (the sessions too); a
    /// file whose hash is no longer `old` is left alone.
    pub fn replace_hash(dir: &Path, old: &str, new: &str) -> Result<(), AccountError> {
        let path = dir.join(ACCOUNT_FILE);
        let shown = path.display().to_string();
        let Some(mut account) = Account::load(&path)? else {
            return Err(AccountError::Io {
                path: shown,
                source: std::io::ErrorKind::NotFound.into(),
            });
        };
        if account.password_hash != old {
            return Ok(());
        }
        new.clone_into(&mut account.password_hash);
        write_private(
            &path,
            &serde_json::to_vec_pretty(&account).unwrap_or_default(),
        )
        .map_err(|source| AccountError::Io {
            path: shown,
            source,
        })
    }

    /// The token key bytes; `None` if the stored secret is not base64 of
    /// at least [`MIN_TOKEN_KEY`] bytes.
    pub fn token_key(&self) -> Option<Vec<u8>> {
        B64.decode(&self.token_secret)
            .ok()
            .filter(|key| key.len() >= MIN_TOKEN_KEY)
    }
}

/// What a password is to a stored hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checked {
    /// Not the password (or the hash is not one this server reads).
    Wrong,
    /// The password, hashed as new hashes are.
    Right,
    /// The password, in a hash of an older kind: hash it anew.
    RightOutdated,
}

impl Checked {
    /// Whether the password is right.
    pub fn is_right(self) -> bool {
        self != Checked::Wrong
    }
}

fn argon2id() -> Result<Argon2<'static>, AccountError> {
    let params = argon2::Params::new(ARGON2_M_KIB, ARGON2_T, ARGON2_P, Some(32))
        .map_err(|e| AccountError::Hash(e.to_string()))?;
    Ok(Argon2::new(
        argon2::Algorithm::Argon2id,
        argon2::Version::V0x13,
        params,
    ))
}

/// Hashes a password with Argon2id and a fresh random salt; a PHC string.
pub fn hash_password(password: &str) -> Result<String, AccountError> {
    let salt = random_bytes::<16>()?;
    let hash = argon2id()?
        .hash_password_with_salt(password.as_bytes(), &salt)
        .map_err(|e| AccountError::Hash(e.to_string()))?;
    Ok(hash.to_string())
}

/// Whether `password` matches a stored hash (constant-time comparison).
#[cfg(test)]
pub fn verify_password(password: &str, stored: &str) -> bool {
    check_password(password, stored).is_right()
}

/// Checks `password` against a stored hash of either kind (the hashes are
/// compared in constant time).
pub fn check_password(password: &str, stored: &str) -> Checked {
    if stored.starts_with('$') {
        match verify_argon2(password, stored) {
            None => Checked::Wrong,
            Some(true) => Checked::Right,
            Some(false) => Checked::RightOutdated,
        }
    } else if verify_pbkdf2(password, stored) {
        Checked::RightOutdated
    } else {
        Checked::Wrong
    }
}

/// An Argon2 PHC string: `None` if the password is wrong or the string
/// unusable, else whether it has the costs new hashes get (or more).
fn verify_argon2(password: &str, stored: &str) -> Option<bool> {
    let hash = PasswordHash::new(stored).ok()?;
    if hash.algorithm != argon2::ARGON2ID_IDENT {
        return None;
    }
    let params = argon2::Params::try_from(&hash).ok()?;
    let (m, t, p) = (params.m_cost(), params.t_cost(), params.p_cost());
    if m > ARGON2_MAX.0 || t > ARGON2_MAX.1 || p > ARGON2_MAX.2 {
        return None;
    }
    Argon2::default()
        .verify_password(password.as_bytes(), &hash)
        .ok()?;
    Some(m >= ARGON2_M_KIB && t >= ARGON2_T)
}

/// A hash of the first version: `pbkdf2-sha256$ROUNDS$SALT$HASH`.
fn verify_pbkdf2(password: &str, stored: &str) -> bool {
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
    computed.ct_eq(hash.as_slice()).into()
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

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    #[test]
    fn a_password_verifies_against_its_hash_only() {
        let stored = hash_password("hunter2").unwrap();
        assert!(
            stored.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"),
            "{stored}"
        );
        assert!(!stored.contains("hunter2"));
        assert_eq!(check_password("hunter2", &stored), Checked::Right);
        assert!(!verify_password("hunter3", &stored));
        assert!(!verify_password("hunter2", "pbkdf2-sha256$1$AAAA"));
        assert!(!verify_password("hunter2", "garbage"));
        assert!(!verify_password("hunter2", "$argon2id$garbage"));
        // Two hashes of one password differ (salt).
        assert_ne!(stored, hash_password("hunter2").unwrap());
        // Weaker Argon2 costs, or another variant, are not kept.
        let weak = Argon2::new(
            argon2::Algorithm::Argon2id,
            argon2::Version::V0x13,
            argon2::Params::new(1024, 1, 1, Some(32)).unwrap(),
        )
        .hash_password_with_salt(b"hunter2", b"saltsaltsalt")
        .unwrap()
        .to_string();
        assert_eq!(check_password("hunter2", &weak), Checked::RightOutdated);
        let argon2i = weak.replacen("argon2id", "argon2i", 1);
        assert_eq!(check_password("hunter2", &argon2i), Checked::Wrong);
    }

    /// A hash of the first version, as it wrote them.
    fn old_hash(password: &str, rounds: u32) -> String {
        let salt = [7u8; 16];
        let hash = pbkdf2_sha256(password.as_bytes(), &salt, rounds);
        format!(
            "pbkdf2-sha256${rounds}${}${}",
            B64.encode(salt),
            B64.encode(hash)
        )
    }

    #[test]
    fn an_old_pbkdf2_hash_verifies_and_is_replaced_at_a_start_with_the_password() {
        let old = old_hash("hunter2", 1000);
        assert_eq!(check_password("hunter2", &old), Checked::RightOutdated);
        assert_eq!(check_password("hunter3", &old), Checked::Wrong);
        let dir = tempfile::tempdir().unwrap();
        let (a, _) = Account::load_or_create(dir.path(), None, None).unwrap();
        let with_old = Account {
            password_hash: old.clone(),
            ..a.clone()
        };
        write_private(
            &dir.path().join(ACCOUNT_FILE),
            &serde_json::to_vec(&with_old).unwrap(),
        )
        .unwrap();
        let (b, note) = Account::load_or_create(dir.path(), None, Some("hunter2")).unwrap();
        assert_eq!(note, PasswordNote::Kept);
        assert!(
            b.password_hash.starts_with("$argon2id$"),
            "{}",
            b.password_hash
        );
        assert_eq!(b.token_secret, a.token_secret, "the sessions end");
        let (c, _) = Account::load_or_create(dir.path(), None, None).unwrap();
        assert_eq!(c.password_hash, b.password_hash);
        // A login's upgrade replaces only the hash it checked.
        Account::replace_hash(dir.path(), &old, "$argon2id$other").unwrap();
        let (d, _) = Account::load_or_create(dir.path(), None, None).unwrap();
        assert_eq!(d.password_hash, b.password_hash);
    }

    #[cfg(unix)]
    #[test]
    fn an_account_file_others_may_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        Account::load_or_create(dir.path(), None, None).unwrap();
        let path = dir.path().join(ACCOUNT_FILE);
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let err = Account::load_or_create(dir.path(), None, None).unwrap_err();
        assert!(
            matches!(err, AccountError::Permissions { mode: 0o644, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("chmod 600"), "{err}");
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
