//! Sync with a PDS (see docs/sync.md), the store in the replica
//! role: it mirrors the account's repository on the PDS and applies its own
//! writes on top.
//!
//! One [`sync`] run:
//!
//! 1. login (`connect`): `createSession`; a store linked to another
//!    account is refused; the `#atproto` key of the DID document (PLC
//!    directory for did:plc, the host's `/.well-known/did.json` for
//!    did:web: `identity::resolve`) is resolved before anything is written.
//! 2. pull ([`mirror::fetch`]): nothing when `getLatestCommit` names the
//!    mirrored head; else `getRepo?since=<mirrored rev>`, verified over the
//!    mirror's rebuilt tree and the local record blocks, or the full
//!    `getRepo` (first time, or when the partial CAR does not verify on what
//!    is held here). Signature, MST and every record are checked.
//! 3. merge ([`merge::merge`]): the `chat.gel.assistant.*` records other
//!    devices changed are lexicon-checked and taken into the local store in
//!    one commit; a key changed on both sides keeps the PDS's version and
//!    the local one goes to `sync-conflicts.jsonl`. The mirror in the store
//!    ([`stored`]) then moves to the new head: the rows of the keys that
//!    changed and the head, in one engine batch.
//! 4. push ([`push`]): local records whose CID differs from the mirror's go
//!    out in `applyWrites` batches (≤ 200 writes) with `swapCommit` = the
//!    mirrored head, so a batch lands on exactly the repository mirrored
//!    here or not at all ([`SyncError::RemoteMoved`]: pull again, retry).
//!    The new commit is fetched (`getBlocks`), its signature checked, and
//!    its `data` must equal the root computed here over the mirror with the
//!    batch applied — else [`SyncError::DataMismatch`], the mirror is
//!    re-pulled in full and the run fails (exit 1). A batch the PDS answers
//!    with 500 (a create on a taken key) is redone record by record:
//!    creates as `putRecord` with `"swapRecord": null`, updates and deletes
//!    with the mirrored CID as `swapRecord`.
//! 5. the final check: the root over the local records (plus the mirrored
//!    other collections) equals the PDS's `data`.
//!
//! [`status`] compares without changing anything: `getLatestCommit`
//! against the mirrored head, MST diffs for the counts.
//!
//! After the first pull, before any push, a store whose device seals for its own
//! did:key (started offline) is sealed again for the account's DID, once,
//! in one commit (`device::reseal`); before the push, a store whose
//! re-seal is unfinished or missing is refused
//! ([`SyncError::Reseal`]), so nothing sealed for the did:key reaches the
//! PDS. Devices that join through the PDS then seal for the account's DID,
//! which their own login gave (`device::join_synced`).
//!
//! Blobs go with their records: the push uploads those a batch names
//! before it, the pull downloads those of the records it changed (see
//! docs/sync.md).
//!
//! **Modules**, one job each: `error.rs` is [`SyncError`]; `push.rs` the
//! push engine ([`push`]); `run.rs` the run that orders login, pull,
//! merge, re-seal, push and the final check ([`sync`]); [`mirror`],
//! [`merge`], [`stored`], [`status`](mod@status) and the transport (`client.rs`,
//! `auth.rs`, `batch.rs`, [`progress`]) as named. The first three
//! are private and re-exported here, so callers name `sync::…` as before.

mod auth;
mod batch;
mod client;
mod error;
pub mod merge;
pub mod mirror;
pub mod progress;
mod push;
mod run;
pub mod status;
pub mod stored;

use std::collections::BTreeMap;

use cid::Cid;
use serde::{Deserialize, Serialize};

pub use crate::device::reseal::ResealOutcome;
pub use client::Session;
pub use error::SyncError;
pub use merge::MergeReport;
pub use mirror::RemoteHead;
pub use progress::{NoProgress, Progress};
pub(crate) use push::split_key;
pub use push::{PushReport, push};
pub(crate) use run::connect;
pub use run::{
    DEFAULT_PLC, PullReport, SyncOptions, SyncReport, pull_verify, signing_key, sync,
    sync_with_progress, verify_remote,
};
pub use status::{StatusReport, status};

/// The collections sync pushes.
pub const COLLECTION_PREFIX: &str = "chat.gel.assistant.";

/// Most writes in one `applyWrites` call (the PDS's limit; the body size
/// is bounded too, see [`batch::MAX_BATCH_BYTES`]).
pub const MAX_BATCH: usize = 200;

pub use batch::MAX_BATCH_BYTES;

/// The file older versions kept the mirror in, in the data folder; now
/// only read once, to take it into the store ([`stored`]).
pub const STATE_FILE: &str = "sync.json";

/// The sync state and the mirror of the remote repository (see
/// [`mirror`]): which account this store syncs with, the remote head the
/// mirror is at, and the CID of every remote record. Kept in the store
/// (`Table::Mirror` and `Meta` rows, see [`stored`]); this is the copy a
/// run works on. (Serde: the `sync.json` format of older versions, CIDs
/// as strings; in memory they are [`Cid`]s.)
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SyncState {
    /// The account's DID (set by the first sync).
    pub did: Option<String>,
    /// The PDS last synced with.
    pub service: Option<String>,
    /// `collection/rkey` → CID of our records on the PDS, as acknowledged
    /// by a push or seen in a pull.
    #[serde(with = "cid_strings")]
    pub pushed: BTreeMap<String, Cid>,
    /// The remote head the mirror is at (`None`: never pulled, or the
    /// mirror is to be re-pulled in full).
    #[serde(default)]
    pub remote: Option<RemoteHead>,
    /// `collection/rkey` → CID of the remote records of other collections
    /// (keys and CIDs only; their bodies are not kept).
    #[serde(default, with = "cid_strings")]
    pub others: BTreeMap<String, Cid>,
}

/// Serde of a `collection/rkey → CID` map with each CID as its string, as
/// `sync.json` held it (a CID that does not parse is an error naming its
/// key).
mod cid_strings {
    use std::collections::BTreeMap;

    use cid::Cid;
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(map: &BTreeMap<String, Cid>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(map.iter().map(|(k, c)| (k, c.to_string())))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, Cid>, D::Error> {
        BTreeMap::<String, String>::deserialize(d)?
            .into_iter()
            .map(|(k, c)| match crate::model::parse_cid(&c) {
                Ok(cid) => Ok((k, cid)),
                Err(e) => Err(D::Error::custom(format!("the CID of {k}: {e}"))),
            })
            .collect()
    }
}

pub(crate) fn parse_marker_cid(key: &str, cid: &str) -> Result<Cid, SyncError> {
    crate::model::parse_cid(cid).map_err(|e| SyncError::Io {
        what: format!("read the mirrored CID of {key}"),
        reason: e.to_string(),
    })
}
