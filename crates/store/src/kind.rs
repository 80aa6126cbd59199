//! Which engine a store folder is kept in: the one already there, or, for a
//! new folder, the one asked for.

use std::path::Path;
use std::sync::Arc;

use super::redb::REDB_FILE;
use super::{Engine, EngineError, RedbEngine, SledEngine};

/// The environment variable that chooses the engine of a *new* store:
/// `redb` or `sled`. A store that exists keeps its engine whatever it says.
pub const ENGINE_ENV: &str = "GELSTORE_STORE_ENGINE";

/// The engines a store folder can hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EngineKind {
    /// [`RedbEngine`].
    Redb,
    /// [`SledEngine`].
    Sled,
}

impl EngineKind {
    /// The engine of new stores: redb keeps the folder near its live data
    /// under many small commits, where sled 0.34 grows to 100× (see
    /// `benches/store_engines.rs`).
    pub const DEFAULT: EngineKind = EngineKind::Redb;

    /// Every engine.
    pub const ALL: [EngineKind; 2] = [EngineKind::Redb, EngineKind::Sled];

    /// The engine's name, as [`ENGINE_ENV`] and `--engine` take it.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Redb => "redb",
            EngineKind::Sled => "sled",
        }
    }

    /// The engine called `name` (any case).
    pub fn parse(name: &str) -> Result<EngineKind, EngineError> {
        let name = name.trim();
        EngineKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| EngineError::UnknownEngine {
                name: name.chars().take(40).collect(),
            })
    }

    /// The engine whose files are in store folder `folder`, if any.
    pub fn detect(folder: &Path) -> Result<Option<EngineKind>, EngineError> {
        let redb = folder.join(REDB_FILE).exists();
        // sled 0.34 writes `conf` and `db` when it creates a database.
        let sled = folder.join("db").exists() || folder.join("conf").exists();
        match (redb, sled) {
            (true, true) => Err(EngineError::TwoEngines {
                path: folder.display().to_string(),
            }),
            (true, false) => Ok(Some(EngineKind::Redb)),
            (false, true) => Ok(Some(EngineKind::Sled)),
            (false, false) => Ok(None),
        }
    }

    /// The engine for a new store: [`ENGINE_ENV`] if set (and not empty),
    /// else [`EngineKind::DEFAULT`].
    pub fn for_new_store() -> Result<EngineKind, EngineError> {
        match std::env::var(ENGINE_ENV) {
            Ok(v) if !v.trim().is_empty() => EngineKind::parse(&v),
            _ => Ok(EngineKind::DEFAULT),
        }
    }

    /// Opens (creating if needed) a store of this engine in `folder`.
    pub fn open(self, folder: &Path) -> Result<Arc<dyn Engine>, EngineError> {
        Ok(match self {
            EngineKind::Redb => Arc::new(RedbEngine::open(folder)?),
            EngineKind::Sled => Arc::new(SledEngine::open(folder)?),
        })
    }
}

impl std::fmt::Display for EngineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for EngineKind {
    type Err = EngineError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EngineKind::parse(s)
    }
}

/// Opens the store in `folder` with the engine it holds; a folder that
/// holds none yet gets `new` (None: [`EngineKind::for_new_store`]).
pub fn open_store(folder: &Path, new: Option<EngineKind>) -> Result<Arc<dyn Engine>, EngineError> {
    let kind = match EngineKind::detect(folder)? {
        Some(kind) => kind,
        None => match new {
            Some(kind) => kind,
            None => EngineKind::for_new_store()?,
        },
    };
    kind.open(folder)
}
