//! A repository kept in a store: one account's records, their MST, and the
//! signed head commit, changed only by atomic, signed commits.
//!
//! # Data folder
//!
//! [`Repository::init`] / [`Repository::open`] work on a data folder:
//!
//! ```text
//! DATA/            created with mode 0700
//!   signing.key    the account key (see `repo::key_file`), mode 0600
//!   store/         the store: a redb file or a sled database (see `gelstore_store`)
//! ```
//!
//! # Store layout
//!
//! | table    | key                    | value |
//! |----------|------------------------|-------|
//! | `Meta`   | `format`               | `2` (the layout version; see `refs`) |
//! | `Meta`   | `did`                  | the account DID (UTF-8) |
//! | `Meta`   | `signer`               | the did:key of the signing key, when the DID is not that did:key (a did:web or did:plc account; absent in stores made before) |
//! | `Meta`   | `head`                 | CID bytes of the head commit |
//! | `Meta`   | `records`              | number of records (u64 BE) |
//! | `Meta`   | `nodes_written`        | `Nodes` rows written since that table was last repacked (u64 BE) |
//! | `Blocks` | creation rev (u64 BE) ‖ n (u32 BE) | CID bytes ‖ block bytes (commit, MST nodes, records) |
//! | `Refs`   | CID bytes              | the block's `Blocks` key ‖ reference count (u32 BE) (see `refs`) |
//! | `Meta`   | `event_seq`            | last event seq handed out (u64 BE) |
//! | `Events` | seq (u64 BE)           | the `#commit` event (see `repo::events`) |
//! | `EventSizes` | seq (u64 BE)       | the bytes of that `Events` row (u64 BE) |
//!
//! # Invariants (checked by [`Repository::check`])
//!
//! - The store holds exactly the blocks reachable from the head commit: the
//!   commit, every MST node, every record. Nothing else: unreachable blocks
//!   are deleted by the commit that makes them unreachable (reference
//!   counts; see `refs`), so the store's size follows the repository's, not
//!   its history. Only the head commit is kept; `prev` links to a commit
//!   that is no longer stored (as in any atproto repository export).
//! - Every change (record blocks, new MST nodes, the commit, the new head,
//!   counts, deletions) lands in one engine batch: all or nothing, durable
//!   before [`Repository::apply`] returns.
//! - Every commit this store signs appends its `#commit` event (issue 8,
//!   `repo::events`) in that same batch: an event exists iff its commit
//!   was stored. Imported or refreshed copies have no events.
//! - `rev` strictly increases from commit to commit; `prev` is the previous
//!   head.
//!
//! # `since` exports
//!
//! [`Repository::export`] with a `since` rev writes the head commit and the
//! reachable blocks that were created by commits after `since` (a range of
//! `Blocks`, whose keys start with the creating rev), in the same streamable order as a full export. Applied on top
//! of the repository as it was at `since`, they give every block of the
//! current one. A block that existed at `since`, was deleted and was later
//! created again counts as created later, so it is included.

pub use self::follow::{Changes, Follower, WriteHints};
mod check;
mod events;
mod export;
mod follow;
mod import;
mod migrate;
mod refs;
mod replica;
mod walk;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cid::Cid;
use serde_json::Value;

pub use self::check::CheckReport;
pub use self::export::ExportStats;
pub use self::import::{ImportOptions, ImportStats, VerifiedImport, verify_car};

pub use self::refs::BlockChanges;
pub use self::replica::Refresh;

use self::refs::{Accounting, Kind};
use super::blocks::{BlockSource, StoreError};
use super::car::CarError;
use super::commit::{Commit, CommitError, UnsignedCommit};
use super::events::{EventError, EventLog};
use super::export::ExportError;
use super::key_file::{self, KeyFileError};
use super::mst::{Mst, MstError, RecordOp};
use super::records::{RecordError, check_collection, prepare_record, repo_key};
use super::tid::{Tid, TidClock, TidError};
use super::verify::VerifyError;
use gelstore_crypto::SigningKey;
use gelstore_lexicon::catalog::Catalog;
use gelstore_model::{decode_dag_cbor, ipld_to_json};
use gelstore_store::{Batch, Direct, Engine, EngineError, EngineKind, Reader, Table, open_store};

/// The store layout version written in `Meta[format]` (see `refs`; a
/// format-1 store is migrated when it is opened).
pub const FORMAT: &[u8] = b"2";

/// The store folder inside a data folder.
pub const STORE_DIR: &str = "store";

pub(crate) const META_FORMAT: &[u8] = b"format";
pub(crate) const META_DID: &[u8] = b"did";
pub(crate) const META_HEAD: &[u8] = b"head";
pub(crate) const META_RECORDS: &[u8] = b"records";
pub(crate) const META_SIGNER: &[u8] = b"signer";
/// `Nodes` rows written since that table was last repacked (u64 BE).
pub(crate) const META_NODES_WRITTEN: &[u8] = b"nodes_written";

/// The fewest `Nodes` rows written before the table is repacked.
const REPACK_MIN_NODES: u64 = 4096;

/// Why a repository operation failed. Nothing was changed in the store when
/// an operation returns an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RepoError {
    /// The store holds no repository yet.
    #[error("no repository in {path}; run `gelstore repo init` first")]
    NotInitialized {
        /// The data folder (or `store` for an engine handed in).
        path: String,
    },
    /// A record, collection or record key was rejected.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// `create` of a key that already holds a record.
    #[error("record {path} already exists")]
    RecordExists {
        /// `collection/rkey`.
        path: String,
    },
    /// `update` or `delete` of a key that holds no record.
    #[error("record {path} does not exist")]
    RecordNotFound {
        /// `collection/rkey`.
        path: String,
    },
    /// `update` or `delete` whose expected current CID is not the record's.
    #[error("record {path} is {}, not the expected {expected}",
        found.as_ref().map_or("absent".to_owned(), |c| c.to_string()))]
    SwapMismatch {
        /// `collection/rkey`.
        path: String,
        /// The CID the caller expected.
        expected: Box<Cid>,
        /// The record's current CID.
        found: Option<Box<Cid>>,
    },
    /// The head commit is not the one the caller expected.
    #[error("the head commit is {found}, not the expected {expected}")]
    CommitSwapMismatch {
        /// The commit the caller expected.
        expected: Box<Cid>,
        /// The current head.
        found: Box<Cid>,
    },
    /// A batch with no writes.
    #[error("empty batch: nothing to write")]
    EmptyBatch,
    /// The store has no signing key for the repository's DID.
    #[error("no signing key for {did} in this store: it can be read and exported, not written")]
    ReadOnly {
        /// The repository's DID.
        did: String,
    },
    /// The identity key does not belong to the repository's DID.
    #[error("the identity key ({key_did}) does not belong to the repository's DID {did}")]
    IdentityMismatch {
        /// The repository's DID.
        did: String,
        /// The key's did:key.
        key_did: String,
    },
    /// Import into a store that already holds a repository.
    #[error("import needs an empty store, but this one holds the repository of {did}")]
    NotEmpty {
        /// The DID of the repository already there.
        did: String,
    },
    /// A repository was to be created for a string that is not a DID.
    #[error("cannot create a repository for {did:?}: {reason}")]
    InvalidDid {
        /// The string (cut to 100 characters).
        did: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The store's layout version is not one this build knows.
    #[error("unsupported store format {0:?} (this build reads format 1)")]
    UnsupportedFormat(String),
    /// The identity key file failed.
    #[error(transparent)]
    KeyFile(#[from] KeyFileError),
    /// The storage engine failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The MST failed (a malformed node, a storage error while loading).
    #[error(transparent)]
    Mst(#[from] MstError),
    /// A commit could not be built, decoded or verified.
    #[error(transparent)]
    Commit(#[from] CommitError),
    /// Reading or writing a CAR failed.
    #[error(transparent)]
    Car(#[from] CarError),
    /// A CAR given to import failed verification.
    #[error("the CAR does not verify: {0}")]
    Verify(#[from] VerifyError),
    /// Exporting failed.
    #[error(transparent)]
    Export(#[from] ExportError),
    /// The signature of an imported CAR cannot be checked: its DID is not a
    /// did:key and no key was given.
    #[error("cannot check the signature of {did} offline: give its signing key (a did:key)")]
    NoVerificationKey {
        /// The commit's DID.
        did: String,
    },
    /// No further TID can be made (the clock is past year 2255).
    #[error(transparent)]
    Tid(#[from] TidError),
    /// A firehose cursor past the last event (the `FutureCursor` error).
    #[error("cursor {cursor} is in the future: the last event is {last}")]
    FutureCursor {
        /// The cursor given.
        cursor: u64,
        /// The last event's seq (0: none yet).
        last: u64,
    },
    /// Events a reader had not read yet were pruned (it fell more than the
    /// retention behind; a server answers `ConsumerTooSlow`).
    #[error("events from {expected} were pruned before they were read (oldest kept: {oldest})")]
    EventsPruned {
        /// The seq the reader expected next.
        expected: u64,
        /// The next seq still kept.
        oldest: u64,
    },
    /// An event could not be written.
    #[error(transparent)]
    Event(#[from] EventError),
    /// The store does not hold what its invariants promise.
    #[error("the store is corrupt: {0}")]
    Corrupt(String),
    /// A refresh of a store that holds the signing key of its repository:
    /// it is the authority, changed by its own commits, never replaced.
    #[error(
        "this store signs the repository of {did} itself; only a read-only copy is refreshed from a CAR"
    )]
    NotACopy {
        /// The repository's DID.
        did: String,
    },
    /// A refresh with a CAR older than the copy already held.
    #[error("the CAR is at rev {found}, older than the copy held (rev {held}); nothing changed")]
    OlderCopy {
        /// The rev held.
        held: String,
        /// The CAR's rev.
        found: String,
    },
}

/// One change of a batch given to [`Repository::apply`].
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Adds a record; the key must be free.
    Create {
        /// Collection NSID.
        collection: String,
        /// Record key.
        rkey: String,
        /// The record (atproto JSON, with `$type` = collection).
        value: Value,
    },
    /// Replaces a record; the key must hold one (and, with `swap`, exactly
    /// that CID).
    Update {
        /// Collection NSID.
        collection: String,
        /// Record key.
        rkey: String,
        /// The new record.
        value: Value,
        /// The CID the record must have now (compare-and-swap).
        swap: Option<Cid>,
    },
    /// Removes a record; the key must hold one (and, with `swap`, exactly
    /// that CID).
    Delete {
        /// Collection NSID.
        collection: String,
        /// Record key.
        rkey: String,
        /// The CID the record must have now (compare-and-swap).
        swap: Option<Cid>,
    },
}

impl Write {
    /// A create.
    pub fn create(collection: impl Into<String>, rkey: impl Into<String>, value: Value) -> Self {
        Write::Create {
            collection: collection.into(),
            rkey: rkey.into(),
            value,
        }
    }

    /// An update without swap.
    pub fn update(collection: impl Into<String>, rkey: impl Into<String>, value: Value) -> Self {
        Write::Update {
            collection: collection.into(),
            rkey: rkey.into(),
            value,
            swap: None,
        }
    }

    /// A delete without swap.
    pub fn delete(collection: impl Into<String>, rkey: impl Into<String>) -> Self {
        Write::Delete {
            collection: collection.into(),
            rkey: rkey.into(),
            swap: None,
        }
    }

    /// The collection written to.
    pub fn collection(&self) -> &str {
        match self {
            Write::Create { collection, .. }
            | Write::Update { collection, .. }
            | Write::Delete { collection, .. } => collection,
        }
    }

    /// The record key written to.
    pub fn rkey(&self) -> &str {
        match self {
            Write::Create { rkey, .. }
            | Write::Update { rkey, .. }
            | Write::Delete { rkey, .. } => rkey,
        }
    }
}

/// The head of a repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// CID of the head commit.
    pub commit: Cid,
    /// Its revision.
    pub rev: Tid,
    /// Its MST root.
    pub data: Cid,
}

/// What [`Repository::apply`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitInfo {
    /// The new head.
    pub head: Head,
    /// The previous head commit.
    pub prev: Option<Cid>,
    /// The record operations, sorted by key (from the MST diff, so a
    /// create-then-delete of one key in a batch leaves no op).
    pub ops: Vec<RecordOp>,
    /// Blocks written and deleted.
    pub blocks: BlockChanges,
    /// The seq of the commit's `#commit` event (issue 8).
    pub event_seq: u64,
}

/// A record read back.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordEntry {
    /// The record's CID.
    pub cid: Cid,
    /// The record as atproto JSON.
    pub value: Value,
}

/// Reads blocks from a store (its `Refs` row, then the `Blocks` row it
/// points at).
#[derive(Clone)]
pub struct StoreBlocks(Arc<dyn Engine>);

impl BlockSource for StoreBlocks {
    fn get(&self, cid: &Cid) -> Result<Option<Vec<u8>>, StoreError> {
        refs::read_block(&Direct(&*self.0), cid).map_err(StoreError::new)
    }
}

/// Reads blocks as [`StoreBlocks`] does, all from one [`Reader`]: for a
/// walk of the whole repository (an export, a check), whose reads then
/// cost only their lookups.
pub(crate) struct ReaderBlocks<'a>(Box<dyn Reader + 'a>);

impl BlockSource for ReaderBlocks<'_> {
    fn get(&self, cid: &Cid) -> Result<Option<Vec<u8>>, StoreError> {
        refs::read_block(&*self.0, cid).map_err(StoreError::new)
    }
}

/// One account's repository in a store.
pub struct Repository {
    engine: Arc<dyn Engine>,
    blocks: StoreBlocks,
    did: String,
    key: Option<SigningKey>,
    head: Head,
    records: u64,
    /// The current tree; nodes are loaded from the store as they are needed
    /// and stay cached.
    mst: Mst<StoreBlocks>,
    clock: TidClock,
    /// The `#commit` event log (issue 8).
    events: EventLog,
    /// The lexicons records are validated against before they are written
    /// (empty unless the caller gives some: then only the data model and
    /// `$type` are checked).
    lexicons: Arc<Catalog>,
    /// `Nodes` rows written since the table was last repacked (see
    /// [`Repository::repack_nodes_if_due`]).
    nodes_written: u64,
}

impl std::fmt::Debug for Repository {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repository")
            .field("did", &self.did)
            .field("head", &self.head)
            .field("records", &self.records)
            .field("writable", &self.key.is_some())
            .finish_non_exhaustive()
    }
}

impl Repository {
    /// Opens the repository in data folder `dir`, creating the folder, the
    /// identity (a new secp256k1 key, DID = its did:key) and an empty
    /// repository (one commit of an empty tree) if they are missing.
    /// Opening an existing repository changes nothing.
    pub fn init(dir: impl AsRef<Path>) -> Result<Repository, RepoError> {
        Repository::init_in(dir.as_ref(), None, None)
    }

    /// Like [`init`](Self::init), but a new store is made with `engine`
    /// (instead of `GELSTORE_STORE_ENGINE` or the default). A store that
    /// exists keeps the engine it has.
    pub fn init_with_engine(
        dir: impl AsRef<Path>,
        engine: EngineKind,
    ) -> Result<Repository, RepoError> {
        Repository::init_in(dir.as_ref(), None, Some(engine))
    }

    /// Like [`init`](Self::init), but the repository belongs to `did` (a
    /// did:web or did:plc whose document names this store's key), not to
    /// the key's did:key. An existing repository is opened as it is, whatever
    /// its DID: the caller compares [`did`](Self::did) with what it wanted.
    pub fn init_as(dir: impl AsRef<Path>, did: &str) -> Result<Repository, RepoError> {
        Repository::init_in(dir.as_ref(), Some(did), None)
    }

    /// [`init`](Self::init) (`did` None: the key's did:key) and
    /// [`init_as`](Self::init_as); `engine` for a new store.
    fn init_in(
        dir: &Path,
        did: Option<&str>,
        engine: Option<EngineKind>,
    ) -> Result<Repository, RepoError> {
        key_file::create_private_dir(dir)?;
        let engine = open_store(&store_path(dir), engine)?;
        if is_initialized(&*engine)? {
            let key = key_file::load_key(dir)?;
            return Repository::open_engine(engine, key).map_err(|e| with_path(e, dir));
        }
        let key = key_file::load_or_create_key(dir)?;
        match did {
            None => Repository::init_engine(engine, key),
            Some(did) => Repository::init_engine_as(engine, key, did.to_owned()),
        }
    }

    /// Opens the existing repository in data folder `dir`. Without a key
    /// file (an imported repository of another account) it is read-only.
    pub fn open(dir: impl AsRef<Path>) -> Result<Repository, RepoError> {
        let dir = dir.as_ref();
        if !store_path(dir).is_dir() {
            return Err(RepoError::NotInitialized {
                path: dir.display().to_string(),
            });
        }
        let engine = open_store(&store_path(dir), None)?;
        let key = key_file::load_key(dir)?;
        Repository::open_engine(engine, key).map_err(|e| with_path(e, dir))
    }

    /// Creates an empty repository signed by `key` (DID = its did:key) in an
    /// engine, or opens the one already there.
    pub fn init_engine(engine: Arc<dyn Engine>, key: SigningKey) -> Result<Repository, RepoError> {
        let did = key.public_key().to_did_key();
        Repository::init_engine_as(engine, key, did)
    }

    /// Creates an empty repository of `did` signed by `key` in an engine,
    /// or opens the one already there. When `did` is not the key's did:key,
    /// the key's did:key is kept in `Meta[signer]`, so that opening the
    /// store later checks the key against it.
    pub fn init_engine_as(
        engine: Arc<dyn Engine>,
        key: SigningKey,
        did: String,
    ) -> Result<Repository, RepoError> {
        if is_initialized(&*engine)? {
            return Repository::open_engine(engine, Some(key));
        }
        gelstore_lexicon::syntax::check_did(&did).map_err(|e| RepoError::InvalidDid {
            did: did.chars().take(100).collect(),
            reason: e.reason,
        })?;
        let key_did = key.public_key().to_did_key();
        let blocks = StoreBlocks(engine.clone());
        let mst = Mst::new(blocks.clone());
        let mut clock = TidClock::new();
        let rev = clock.next_tid()?;
        let mut nodes: Vec<(Cid, Vec<u8>)> = Vec::new();
        let data = mst.write_new_blocks(&mut nodes)?;
        let commit = UnsignedCommit::new(did.clone(), data, rev, None)?.sign(&key);
        let commit_bytes = commit.to_cbor();
        let commit_cid = commit.cid();

        let mut acc = Accounting::new();
        let event_blocks = nodes.iter().cloned().collect(); // issue 8
        for (cid, bytes) in nodes {
            acc.add(cid, 1);
            acc.provide(cid, Kind::Structure, bytes);
        }
        acc.add(commit_cid, 1);
        let mut batch = Batch::new();
        // Issue 8: the first commit's event (no ops, no since).
        let head = Head {
            commit: commit_cid,
            rev,
            data,
        };
        let mut log = EventLog::new();
        let event = events::stage_commit_event(
            &*engine,
            &mut log,
            &did,
            &mut batch,
            &mst,
            &[],
            (commit_cid, &commit_bytes),
            head,
            None,
            event_blocks,
        )?;
        acc.provide(commit_cid, Kind::Structure, commit_bytes);
        acc.finish(&*engine, rev, &mut batch)?;
        batch.put(Table::Meta, META_FORMAT, FORMAT);
        batch.put(Table::Meta, META_DID, did.as_bytes());
        if key_did != did {
            batch.put(Table::Meta, META_SIGNER, key_did.as_bytes());
        }
        batch.put(Table::Meta, META_RECORDS, 0u64.to_be_bytes());
        batch.put(Table::Meta, META_HEAD, commit_cid.to_bytes());
        engine.write(batch)?;
        log.committed(&event);
        Ok(Repository {
            engine,
            blocks,
            did,
            key: Some(key),
            head,
            records: 0,
            mst,
            clock,
            events: log,
            lexicons: Arc::default(),
            nodes_written: 0,
        })
    }

    /// Opens the repository in an engine. `key`, if given, must be the
    /// did:key of the repository's DID; without it the repository is
    /// read-only.
    pub fn open_engine(
        engine: Arc<dyn Engine>,
        key: Option<SigningKey>,
    ) -> Result<Repository, RepoError> {
        let meta = |name: &[u8]| engine.get(Table::Meta, name);
        let Some(format) = meta(META_FORMAT)? else {
            return Err(RepoError::NotInitialized {
                path: "store".into(),
            });
        };
        if format == b"1" {
            migrate::format_1_to_2(&*engine)?;
        } else if format != FORMAT {
            return Err(RepoError::UnsupportedFormat(
                String::from_utf8_lossy(&format).chars().take(20).collect(),
            ));
        }
        let missing =
            |what: &str| RepoError::Corrupt(format!("no {what} in the store's meta table"));
        let did = meta(META_DID)?.ok_or_else(|| missing("did"))?;
        let did =
            String::from_utf8(did).map_err(|_| RepoError::Corrupt("did is not UTF-8".into()))?;
        let head = meta(META_HEAD)?.ok_or_else(|| missing("head"))?;
        let head = Cid::try_from(head.as_slice())
            .map_err(|_| RepoError::Corrupt("head is not a CID".into()))?;
        let records = meta(META_RECORDS)?.ok_or_else(|| missing("record count"))?;
        let records = u64::from_be_bytes(
            records
                .try_into()
                .map_err(|_| RepoError::Corrupt("record count is not 8 bytes".into()))?,
        );
        let blocks = StoreBlocks(engine.clone());
        let commit = load_commit(&blocks, &head)?;
        if commit.did() != did {
            return Err(RepoError::Corrupt(format!(
                "head commit is by {}, the store's DID is {did}",
                commit.did()
            )));
        }
        if let Some(key) = &key {
            let key_did = key.public_key().to_did_key();
            let signer = match meta(META_SIGNER)? {
                Some(s) => String::from_utf8(s)
                    .map_err(|_| RepoError::Corrupt("signer is not UTF-8".into()))?,
                None => did.clone(),
            };
            if key_did != signer {
                return Err(RepoError::IdentityMismatch { did, key_did });
            }
        }
        let mst = Mst::load(blocks.clone(), commit.data())?;
        let events = EventLog::open(&*engine)?;
        let nodes_written = match meta(META_NODES_WRITTEN)? {
            Some(raw) => u64::from_be_bytes(raw.try_into().map_err(|_| {
                RepoError::Corrupt("the nodes_written count is not 8 bytes".into())
            })?),
            None => 0,
        };
        Ok(Repository {
            engine,
            blocks,
            did,
            key,
            head: Head {
                commit: head,
                rev: commit.rev(),
                data: commit.data(),
            },
            records,
            mst,
            clock: TidClock::new(),
            events,
            lexicons: Arc::default(),
            nodes_written,
        })
    }

    /// Validates every record written from now on against `lexicons` when
    /// its collection is there (see [`prepare_record`]).
    pub fn with_lexicons(mut self, lexicons: Arc<Catalog>) -> Repository {
        self.lexicons = lexicons;
        self
    }

    /// The lexicons records are validated against.
    pub fn lexicons(&self) -> &Arc<Catalog> {
        &self.lexicons
    }

    /// The account DID.
    pub fn did(&self) -> &str {
        &self.did
    }

    /// The head commit.
    pub fn head(&self) -> Head {
        self.head
    }

    /// Number of records.
    pub fn record_count(&self) -> u64 {
        self.records
    }

    /// Whether this store can sign commits for the repository.
    pub fn is_writable(&self) -> bool {
        self.key.is_some()
    }

    /// The storage engine.
    pub fn engine(&self) -> &Arc<dyn Engine> {
        &self.engine
    }

    /// The current MST (loaded lazily from the store).
    pub fn mst(&self) -> &Mst<StoreBlocks> {
        &self.mst
    }

    /// Bytes the store takes on disk.
    pub fn size_on_disk(&self) -> Result<u64, RepoError> {
        Ok(self.engine.size_on_disk()?)
    }

    /// The CID of the record at `collection/rkey`, if any.
    pub fn get_cid(&self, collection: &str, rkey: &str) -> Result<Option<Cid>, RepoError> {
        let key = repo_key(collection, rkey)?;
        Ok(self.mst.get(&key)?)
    }

    /// The record at `collection/rkey`, if any.
    pub fn get(&self, collection: &str, rkey: &str) -> Result<Option<RecordEntry>, RepoError> {
        let Some(cid) = self.get_cid(collection, rkey)? else {
            return Ok(None);
        };
        Ok(Some(RecordEntry {
            cid,
            value: self.record_json(&cid)?,
        }))
    }

    fn record_json(&self, cid: &Cid) -> Result<Value, RepoError> {
        let bytes = self
            .blocks
            .get(cid)
            .map_err(|e| RepoError::Engine(EngineError::engine(e)))?
            .ok_or_else(|| RepoError::Corrupt(format!("record block {cid} is missing")))?;
        let value = decode_dag_cbor(&bytes)
            .map_err(|e| RepoError::Corrupt(format!("record block {cid}: {e}")))?;
        ipld_to_json(&value).map_err(|e| RepoError::Corrupt(format!("record block {cid}: {e}")))
    }

    /// The `(collection/rkey, cid)` pairs of a collection (or of the whole
    /// repository), in key order.
    pub fn list(
        &self,
        collection: Option<&str>,
    ) -> Result<impl Iterator<Item = Result<(String, Cid), RepoError>> + '_, RepoError> {
        let entries = match collection {
            Some(c) => {
                check_collection(c)?;
                self.mst.entries_with_prefix(&format!("{c}/"))
            }
            None => self.mst.entries(),
        };
        Ok(entries.map(|r| r.map_err(RepoError::from)))
    }

    /// The `(collection/rkey, cid)` pairs of a collection whose record keys
    /// start with `rkey_prefix`, in key order: O(log n + matches).
    pub fn list_prefix(
        &self,
        collection: &str,
        rkey_prefix: &str,
    ) -> Result<impl Iterator<Item = Result<(String, Cid), RepoError>> + '_, RepoError> {
        check_collection(collection)?;
        Ok(self
            .mst
            .entries_with_prefix(&format!("{collection}/{rkey_prefix}"))
            .map(|r| r.map_err(RepoError::from)))
    }

    /// The `(collection/rkey, cid)` pairs of a collection with record keys
    /// below `before` (all of them without it), newest TID first: descending
    /// key order. Reads only the nodes on the way to the pairs taken, so a
    /// page costs O(log n + page) whatever the collection's size.
    pub fn list_rev(
        &self,
        collection: &str,
        before: Option<&str>,
    ) -> Result<impl Iterator<Item = Result<(String, Cid), RepoError>> + '_, RepoError> {
        check_collection(collection)?;
        let prefix = format!("{collection}/");
        let end = match before {
            Some(rkey) => format!("{prefix}{rkey}"),
            // Every "<nsid>/…" key sorts below "<nsid>0" ('0' follows '/').
            None => format!("{collection}0"),
        };
        // Below the collection's keys come other collections': stop there.
        Ok(self
            .mst
            .entries_before(&end)
            .take_while(move |entry| match entry {
                Ok((key, _)) => key.starts_with(&prefix),
                Err(_) => true,
            })
            .map(|r| r.map_err(RepoError::from)))
    }

    /// Applies a batch of writes as one signed commit. See
    /// [`apply_with`](Self::apply_with).
    pub fn apply(&mut self, writes: &[Write]) -> Result<CommitInfo, RepoError> {
        self.apply_with(writes, None)
    }

    /// Applies a batch of writes as one signed commit, in order (a later
    /// write sees the earlier ones). With `swap_commit`, the head must be
    /// that commit. On any error nothing is written.
    pub fn apply_with(
        &mut self,
        writes: &[Write],
        swap_commit: Option<Cid>,
    ) -> Result<CommitInfo, RepoError> {
        let Some(key) = self.key.clone() else {
            return Err(RepoError::ReadOnly {
                did: self.did.clone(),
            });
        };
        if writes.is_empty() {
            return Err(RepoError::EmptyBatch);
        }
        if let Some(expected) = swap_commit
            && expected != self.head.commit
        {
            return Err(RepoError::CommitSwapMismatch {
                expected: Box::new(expected),
                found: Box::new(self.head.commit),
            });
        }
        let mut tree = self.mst.clone();
        let mut record_blocks: HashMap<Cid, Vec<u8>> = HashMap::new();
        for write in writes {
            match write {
                Write::Create {
                    collection,
                    rkey,
                    value,
                } => {
                    let record = prepare_record(&self.lexicons, collection, rkey, value)?;
                    if tree.get(&record.key)?.is_some() {
                        return Err(RepoError::RecordExists { path: record.key });
                    }
                    tree.insert(&record.key, record.cid)?;
                    record_blocks.insert(record.cid, record.bytes);
                }
                Write::Update {
                    collection,
                    rkey,
                    value,
                    swap,
                } => {
                    let record = prepare_record(&self.lexicons, collection, rkey, value)?;
                    check_current(&tree, &record.key, *swap)?;
                    tree.insert(&record.key, record.cid)?;
                    record_blocks.insert(record.cid, record.bytes);
                }
                Write::Delete {
                    collection,
                    rkey,
                    swap,
                } => {
                    let key = repo_key(collection, rkey)?;
                    check_current(&tree, &key, *swap)?;
                    tree.delete(&key)?;
                }
            }
        }

        let diff = self.mst.diff(&tree)?;
        let mut acc = Accounting::new();
        let mut new_nodes: Vec<(Cid, Vec<u8>)> = Vec::new();
        // Marks the new nodes as stored; if the batch below fails, `tree` is
        // dropped, so no node wrongly marked survives.
        let data = tree.write_new_blocks(&mut new_nodes)?;
        // Issue 8: the new nodes and records also go into the event.
        let mut event_blocks: BTreeMap<Cid, Vec<u8>> = new_nodes.iter().cloned().collect();
        for (cid, bytes) in new_nodes {
            acc.provide(cid, Kind::Structure, bytes);
        }
        for cid in &diff.new_nodes {
            acc.add(*cid, 1);
        }
        for cid in &diff.removed_nodes {
            acc.add(*cid, -1);
        }
        let mut records = self.records;
        for op in &diff.ops {
            if let Some(cid) = op.cid {
                acc.add(cid, 1);
                if let Some(bytes) = record_blocks.remove(&cid) {
                    event_blocks.insert(cid, bytes.clone()); // issue 8
                    acc.provide(cid, Kind::Record, bytes);
                }
            }
            if let Some(prev) = op.prev {
                acc.add(prev, -1);
            }
            match (op.prev, op.cid) {
                (None, Some(_)) => records += 1,
                (Some(_), None) => records = records.saturating_sub(1),
                _ => {}
            }
        }

        let mut clock = self.clock.clone();
        let rev = clock.next_after(self.head.rev)?;
        let commit =
            UnsignedCommit::new(self.did.clone(), data, rev, Some(self.head.commit))?.sign(&key);
        let commit_cid = commit.cid();
        let commit_bytes = commit.to_cbor();
        acc.add(commit_cid, 1);
        acc.add(self.head.commit, -1);

        let mut batch = Batch::new();
        let new_head = Head {
            commit: commit_cid,
            rev,
            data,
        };
        // Issue 8: the commit's `#commit` event lands in the same batch.
        let event = events::stage_commit_event(
            &*self.engine,
            &mut self.events,
            &self.did,
            &mut batch,
            &tree,
            &diff.ops,
            (commit_cid, &commit_bytes),
            new_head,
            Some(self.head),
            event_blocks,
        )?;
        acc.provide(commit_cid, Kind::Structure, commit_bytes);
        let blocks = acc.finish(&*self.engine, rev, &mut batch)?;
        let nodes_written = self.nodes_written + blocks.nodes_written as u64;
        batch.put(Table::Meta, META_HEAD, commit_cid.to_bytes());
        batch.put(Table::Meta, META_RECORDS, records.to_be_bytes());
        batch.put(Table::Meta, META_NODES_WRITTEN, nodes_written.to_be_bytes());
        self.engine.write(batch)?;
        self.events.committed(&event);
        self.nodes_written = nodes_written;

        let prev = self.head.commit;
        self.head = new_head;
        self.mst = tree;
        self.records = records;
        self.clock = clock;
        self.repack_nodes_if_due();
        Ok(CommitInfo {
            head: self.head,
            prev: Some(prev),
            ops: diff.ops,
            blocks,
            event_seq: event.seq,
        })
    }

    /// Repacks `Nodes` once as many node rows have been written since its
    /// last repack as the table holds (about a third of the record count,
    /// counted as half to be safe): nearly every commit replaces the nodes
    /// on its path, and the holes the old ones leave behind the table's
    /// end are never refilled, so it would keep about half of its pages
    /// empty. The cost, one pass over the live nodes, is paid once per that
    /// many writes. The commit is already durable: a repack that fails is
    /// tried again after the next one.
    fn repack_nodes_if_due(&mut self) {
        if self.nodes_written < REPACK_MIN_NODES.max(self.records / 2) {
            return;
        }
        let mut batch = Batch::new();
        batch.put(Table::Meta, META_NODES_WRITTEN, 0u64.to_be_bytes());
        match self.engine.repack(Table::Nodes, batch) {
            Ok(()) => self.nodes_written = 0,
            Err(e) => tracing::warn!("repacking the MST nodes failed (tried again later): {e}"),
        }
    }

    /// The blocks, read from one [`Reader`] (see [`ReaderBlocks`]).
    pub(crate) fn reader_blocks(&self) -> Result<ReaderBlocks<'_>, RepoError> {
        Ok(ReaderBlocks(self.engine.reader()?))
    }

    /// The decoded head commit.
    pub fn commit(&self) -> Result<Commit, RepoError> {
        load_commit(&self.blocks, &self.head.commit)
    }
}

fn check_current(tree: &Mst<StoreBlocks>, key: &str, swap: Option<Cid>) -> Result<Cid, RepoError> {
    let current = tree.get(key)?;
    if let Some(expected) = swap
        && current != Some(expected)
    {
        return Err(RepoError::SwapMismatch {
            path: key.to_owned(),
            expected: Box::new(expected),
            found: current.map(Box::new),
        });
    }
    current.ok_or_else(|| RepoError::RecordNotFound {
        path: key.to_owned(),
    })
}

fn load_commit(blocks: &StoreBlocks, cid: &Cid) -> Result<Commit, RepoError> {
    let bytes = blocks
        .get(cid)
        .map_err(|e| RepoError::Engine(EngineError::engine(e)))?
        .ok_or_else(|| RepoError::Corrupt(format!("head commit block {cid} is missing")))?;
    Commit::from_cbor(&bytes).map_err(|e| RepoError::Corrupt(format!("head commit {cid}: {e}")))
}

fn is_initialized(engine: &dyn Engine) -> Result<bool, RepoError> {
    Ok(engine.get(Table::Meta, META_FORMAT)?.is_some())
}

/// The store folder of data folder `dir`.
pub fn store_path(dir: &Path) -> PathBuf {
    dir.join(STORE_DIR)
}

fn with_path(e: RepoError, dir: &Path) -> RepoError {
    match e {
        RepoError::NotInitialized { .. } => RepoError::NotInitialized {
            path: dir.display().to_string(),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests;
