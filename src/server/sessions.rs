//! The live refresh tokens: which refresh-token ids (`jti`) the server still
//! honours, kept in `DATA/sessions.json` (mode 0600, replaced atomically).
//!
//! This is what makes refresh tokens single-use, as the reference PDS does:
//!
//! - `createSession` adds the new token's id.
//! - `refreshSession` **rotates**: the presented id must be live; it gets a
//!   successor (`next`) and its own expiry is cut to a grace period
//!   ([`DEFAULT_GRACE_SECS`], 2 hours as the reference), so a client that
//!   lost the answer can ask again and gets a token with the same successor
//!   id. After the grace period the old token is refused.
//! - `deleteSession` removes the id: the token is refused at once.
//! - A new password replaces the token key (`account.rs`), which ends every
//!   session by itself; the ids are then cleared too ([`Sessions::clear`]).
//!
//! Every change is written to disk before the client gets the new token, so
//! a restart keeps revocations and rotations. Each write drops the expired
//! ids, so the file holds only live sessions; a change costs one rewrite of
//! the file, O(live sessions). As a last bound, at most [`MAX_LIVE`] sessions
//! are kept: beyond that the ones unused longest (oldest issue time) go.
//!
//! The ids are not secrets on their own (a token also needs the HMAC key in
//! `account.json`), but the file is private like the account's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::account::{AccountError, random_token};
use crate::store::files::write_private;

/// The file's name in the data folder.
pub const SESSIONS_FILE: &str = "sessions.json";

/// How long a rotated refresh token stays usable (the reference's figure).
pub const DEFAULT_GRACE_SECS: u64 = 2 * 60 * 60;

/// Sets another grace period in seconds (tests use 0); at most the
/// default.
pub const GRACE_ENV: &str = "GELSTORE_REFRESH_GRACE_SECS";

/// The most live sessions kept (see the module doc).
pub const MAX_LIVE: usize = 4096;

/// One live refresh-token id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Entry {
    /// Until when (Unix seconds) the id is honoured.
    exp: u64,
    /// When the token was issued (creation or the rotation that made it).
    iat: u64,
    /// The successor's id, once rotated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

/// The file's shape.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    /// id → entry.
    live: BTreeMap<String, Entry>,
}

/// The refresh token a rotation hands out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotated {
    /// Its id.
    pub jti: String,
    /// When it was issued (a retry within grace gets the first issue time).
    pub iat: u64,
    /// Its expiry.
    pub exp: u64,
}

/// Why a refresh token is not honoured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Unknown id: revoked, rotated and past its grace, or never issued.
    Revoked,
}

/// The live refresh-token ids of the account, loaded once, written through.
#[derive(Debug)]
pub struct Sessions {
    path: PathBuf,
    grace: u64,
    cap: usize,
    live: Mutex<BTreeMap<String, Entry>>,
}

impl Sessions {
    /// Loads `DATA/sessions.json` (none yet: no sessions). A file that is
    /// not ours fails the start rather than honouring unknown tokens.
    pub fn load(dir: &Path, grace: u64) -> Result<Sessions, AccountError> {
        let path = dir.join(SESSIONS_FILE);
        let live = match std::fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice::<File>(&bytes)
                    .map_err(|e| AccountError::Malformed {
                        path: path.display().to_string(),
                        reason: format!("{e} (delete it to end every session)"),
                    })?
                    .live
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(source) => {
                return Err(AccountError::Io {
                    path: path.display().to_string(),
                    source,
                });
            }
        };
        Ok(Sessions {
            path,
            grace,
            cap: MAX_LIVE,
            live: Mutex::new(live),
        })
    }

    /// How many ids are live (expired ones included until the next write).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }

    /// Forgets every session (a new password).
    pub fn clear(&self) -> Result<(), AccountError> {
        self.change(0, |live| {
            live.clear();
            Ok(())
        })
    }

    /// Records a new session's refresh-token id.
    pub fn add(&self, jti: &str, iat: u64, exp: u64) -> Result<(), AccountError> {
        self.change(iat, |live| {
            live.insert(
                jti.to_owned(),
                Entry {
                    exp,
                    iat,
                    next: None,
                },
            );
            Ok(())
        })
    }

    /// Rotates `jti` at time `now`: the successor the caller signs, whose
    /// expiry is `now + lifetime` the first time. The old id stays live
    /// for the grace period (never longer than it had), and asking again
    /// within it gives the same successor.
    pub fn rotate(
        &self,
        jti: &str,
        now: u64,
        lifetime: u64,
    ) -> Result<Result<Rotated, Refused>, AccountError> {
        let mut answer = Err(Refused::Revoked);
        self.change(now, |live| {
            let Some(old) = live.get_mut(jti).filter(|e| e.exp > now) else {
                return Ok(());
            };
            old.exp = old.exp.min(now.saturating_add(self.grace));
            let next = match &old.next {
                Some(next) => next.clone(),
                None => random_token(32)?,
            };
            old.next = Some(next.clone());
            let successor = live.entry(next.clone()).or_insert(Entry {
                exp: now.saturating_add(lifetime),
                iat: now,
                next: None,
            });
            answer = Ok(Rotated {
                jti: next,
                iat: successor.iat,
                exp: successor.exp,
            });
            Ok(())
        })?;
        Ok(answer)
    }

    /// Revokes `jti`; whether it was live.
    pub fn revoke(&self, jti: &str, now: u64) -> Result<bool, AccountError> {
        let mut found = false;
        self.change(now, |live| {
            found = live.remove(jti).is_some();
            // A predecessor still in its grace would bring the session back
            // by refreshing into `jti` again: it goes too. (The reference
            // PDS keeps it; logging out should end the session.)
            live.retain(|_, e| e.next.as_deref() != Some(jti));
            Ok(())
        })?;
        Ok(found)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Entry>> {
        // The map is replaced whole after a successful write, so a panic
        // cannot leave it half-changed.
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies `f` to a copy, prunes, writes the file, and only then makes
    /// the copy current: a failed write changes nothing.
    fn change(
        &self,
        now: u64,
        f: impl FnOnce(&mut BTreeMap<String, Entry>) -> Result<(), AccountError>,
    ) -> Result<(), AccountError> {
        let mut live = self.lock();
        let mut copy = live.clone();
        f(&mut copy)?;
        prune(&mut copy, now, self.cap);
        let file = File { live: copy };
        let io = |source| AccountError::Io {
            path: self.path.display().to_string(),
            source,
        };
        let bytes = serde_json::to_vec_pretty(&file).map_err(|e| io(std::io::Error::other(e)))?;
        write_private(&self.path, &bytes).map_err(io)?;
        *live = file.live;
        Ok(())
    }
}

/// Drops expired ids and, past `cap`, the ones issued longest ago.
fn prune(live: &mut BTreeMap<String, Entry>, now: u64, cap: usize) {
    live.retain(|_, e| e.exp > now);
    if live.len() > cap {
        let mut issued: Vec<u64> = live.values().map(|e| e.iat).collect();
        issued.sort_unstable();
        let cut = issued[live.len() - cap - 1];
        live.retain(|_, e| e.iat > cut);
        // Ties at the cut may drop a few more than needed; never too few.
    }
}

/// The grace period from [`GRACE_ENV`], or the default.
pub fn grace_from_env() -> Result<u64, String> {
    match std::env::var(GRACE_ENV) {
        Err(_) => Ok(DEFAULT_GRACE_SECS),
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(secs) if secs <= DEFAULT_GRACE_SECS => Ok(secs),
            _ => Err(format!(
                "{GRACE_ENV}={v:?}: expected whole seconds from 0 to {DEFAULT_GRACE_SECS}"
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: u64 = 24 * 60 * 60;

    #[test]
    fn a_refresh_token_rotates_once_and_retries_within_grace_get_the_same_successor() {
        let dir = tempfile::tempdir().unwrap();
        let s = Sessions::load(dir.path(), 100).unwrap();
        s.add("a", 1000, 1000 + 90 * DAY).unwrap();
        let b = s.rotate("a", 1010, 90 * DAY).unwrap().unwrap();
        assert_ne!(b.jti, "a");
        assert_eq!(b.exp, 1010 + 90 * DAY);
        // Within grace: the same successor, same expiry.
        assert_eq!(s.rotate("a", 1050, 90 * DAY).unwrap().unwrap(), b);
        // Past grace (1010 + 100): refused; the successor still rotates.
        assert_eq!(
            s.rotate("a", 1110, 90 * DAY).unwrap(),
            Err(Refused::Revoked)
        );
        let c = s.rotate(&b.jti, 1120, 90 * DAY).unwrap().unwrap();
        assert_ne!(c.jti, b.jti);
        // Reloaded from disk: the same state, and "a" is pruned.
        let again = Sessions::load(dir.path(), 100).unwrap();
        assert_eq!(*again.lock(), *s.lock());
        assert!(!again.lock().contains_key("a"));
    }

    #[test]
    fn revoked_cleared_and_unknown_ids_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let s = Sessions::load(dir.path(), 0).unwrap();
        s.add("a", 1, 1000).unwrap();
        s.add("b", 1, 1000).unwrap();
        assert!(s.revoke("a", 2).unwrap());
        assert!(!s.revoke("a", 2).unwrap());
        assert_eq!(s.rotate("a", 3, 1000).unwrap(), Err(Refused::Revoked));
        assert_eq!(s.rotate("zz", 3, 1000).unwrap(), Err(Refused::Revoked));
        // Grace 0: the old token is dead as soon as it is used.
        let b2 = s.rotate("b", 3, 1000).unwrap().unwrap();
        assert_eq!(s.rotate("b", 3, 1000).unwrap(), Err(Refused::Revoked));
        assert!(
            Sessions::load(dir.path(), 0)
                .unwrap()
                .lock()
                .contains_key(&b2.jti)
        );
        // A token past its own expiry is refused even if never used.
        assert_eq!(
            s.rotate(&b2.jti, 2000, 1000).unwrap(),
            Err(Refused::Revoked)
        );
        s.add("c", 1, 1000).unwrap();
        s.clear().unwrap();
        assert_eq!(Sessions::load(dir.path(), 0).unwrap().len(), 0);
    }

    #[test]
    fn expired_ids_are_pruned_and_the_count_is_capped() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Sessions::load(dir.path(), 0).unwrap();
        s.cap = 8;
        s.add("old", 1, 10).unwrap();
        s.add("new", 20, 100).unwrap();
        assert_eq!(s.len(), 1, "the expired id is dropped on the next write");
        for i in 0..13 {
            s.add(&format!("s{i}"), 100 + i, 1_000_000).unwrap();
        }
        assert_eq!(s.len(), 8);
        assert!(
            !s.lock().contains_key("new"),
            "the oldest-issued goes first"
        );
        assert!(!s.lock().contains_key("s4"));
        assert!(s.lock().contains_key("s5") && s.lock().contains_key("s12"));
    }

    #[test]
    fn a_malformed_file_fails_the_start() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(SESSIONS_FILE), b"{\"live\": 3}").unwrap();
        let err = Sessions::load(dir.path(), 0).unwrap_err();
        assert!(err.to_string().contains("delete it"), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn the_file_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let s = Sessions::load(dir.path(), 0).unwrap();
        s.add("a", 1, 100).unwrap();
        let mode = std::fs::metadata(dir.path().join(SESSIONS_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
