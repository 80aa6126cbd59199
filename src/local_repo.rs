//! The data folder's repository as this program opens it: with the
//! `chat.gel.assistant` lexicons, so that every record of those collections
//! is validated before it is written, by every command and the server alike.
//!
//! The repository crate validates against whatever catalog its caller
//! gives; this is the one place the program gives its own. A plain import
//! (`repo import`, a read-only copy) needs no catalog and calls the
//! repository directly.

use std::io::Read;
use std::path::Path;

use crate::repo::repository::{ImportOptions, ImportStats, Refresh, RepoError, Repository};
use crate::store::EngineKind;

/// [`Repository::open`], validating with the chat lexicons.
pub fn open(dir: &Path) -> Result<Repository, RepoError> {
    Ok(Repository::open(dir)?.with_lexicons(gelstore_types::lexicons()))
}

/// [`Repository::init`], validating with the chat lexicons.
pub fn init(dir: &Path) -> Result<Repository, RepoError> {
    Ok(Repository::init(dir)?.with_lexicons(gelstore_types::lexicons()))
}

/// [`Repository::init_with_engine`], validating with the chat lexicons.
pub fn init_with_engine(dir: &Path, engine: EngineKind) -> Result<Repository, RepoError> {
    Ok(Repository::init_with_engine(dir, engine)?.with_lexicons(gelstore_types::lexicons()))
}

/// [`Repository::init_as`], validating with the chat lexicons.
pub fn init_as(dir: &Path, did: &str) -> Result<Repository, RepoError> {
    Ok(Repository::init_as(dir, did)?.with_lexicons(gelstore_types::lexicons()))
}

/// [`Repository::refresh`] (a device's copy replaced by an export),
/// validating what the device writes next with the chat lexicons.
pub fn refresh(
    dir: &Path,
    car: impl Read,
    options: &ImportOptions<'_>,
) -> Result<(Repository, ImportStats, Refresh), RepoError> {
    let (repo, stats, refresh) = Repository::refresh(dir, car, options)?;
    Ok((
        repo.with_lexicons(gelstore_types::lexicons()),
        stats,
        refresh,
    ))
}
