//! What can go wrong on the way from an NSID to its published schema.

use thiserror::Error;

use crate::identity::IdentityError;

/// A lexicon-network failure, each named for what the user can do about it.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum LexNetError {
    /// Not an NSID, or one with no authority to look up.
    #[error("{nsid:?} is not an NSID: {reason}")]
    BadNsid { nsid: String, reason: String },
    /// The authority has no `_lexicon` TXT record.
    #[error(
        "no TXT record at {name}: the authority has published no lexicons (`gelstore lex check-dns` says what to add)"
    )]
    NoTxtRecord { name: String },
    /// TXT records exist, but none says `did=…`.
    #[error("the TXT records at {name} name no DID (want \"did=<DID>\", found {found:?})")]
    NoDidInTxt { name: String, found: Vec<String> },
    /// TXT records name more than one DID.
    #[error("the TXT records at {name} name more than one DID: {dids:?}")]
    AmbiguousTxt { name: String, dids: Vec<String> },
    /// The DNS query itself failed (no answer, a timeout).
    #[error("cannot look up {name}: {reason}")]
    Dns { name: String, reason: String },
    /// The DID document could not be found or read, or names no key.
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// The DID document names no PDS.
    #[error("the DID document of {did} names no PDS (service #atproto_pds)")]
    NoPds { did: String },
    /// An HTTP request failed or was answered with an error.
    #[error("{url}: {reason}")]
    Http { url: String, reason: String },
    /// The repository holds no schema record for the NSID.
    #[error("{did} (at {pds}) publishes no schema record for {nsid}")]
    NotPublished {
        nsid: String,
        did: String,
        pds: String,
    },
    /// The proof of the schema record does not verify: not signed by the
    /// DID's key, a block altered, or the record missing from it.
    #[error("the schema record of {nsid} from {did} fails verification: {reason}")]
    Proof {
        nsid: String,
        did: String,
        reason: String,
    },
    /// The record verifies but is not a lexicon document for the NSID.
    #[error("the schema record of {nsid} is not its lexicon: {reason}")]
    BadSchema { nsid: String, reason: String },
    /// A publish would change a published lexicon in a breaking way.
    #[error("publishing {nsid} would break what is published: {changes}; --force publishes anyway")]
    Breaking { nsid: String, changes: String },
    /// `--locked`: what resolves now is not what the lock file holds.
    #[error(
        "{nsid} resolves to {found}, but the lock file holds {locked}; pull without --locked to update it"
    )]
    LockDrift {
        nsid: String,
        locked: String,
        found: String,
    },
    /// An unpublish would leave a schema that stays published referencing
    /// one that is gone.
    #[error(
        "{by} references {nsid} and stays published: unpublishing {nsid} alone would leave {by} unresolvable; unpublish {by} too, or --force"
    )]
    StillReferenced { nsid: String, by: String },
    /// More deletes than one `applyWrites` takes.
    #[error(
        "{count} schema records to delete, more than one commit takes ({max}); unpublish fewer at a time"
    )]
    TooManyDeletes { count: usize, max: usize },
    /// The repository's head moved between the plan and the write, which
    /// was refused whole (`swapCommit`).
    #[error(
        "the repository changed after the plan was made on commit {head}: nothing was deleted; run unpublish again"
    )]
    Moved { head: String },
    /// Logging in or writing to the account's PDS failed.
    #[error(transparent)]
    Publish(#[from] crate::sync::SyncError),
    /// Local files.
    #[error("cannot {what}: {reason}")]
    Io { what: String, reason: String },
}

impl LexNetError {
    /// The environment's failure (exit 2: the network, local I/O) rather
    /// than a refusal (exit 1).
    pub fn is_environment(&self) -> bool {
        match self {
            LexNetError::Dns { .. } | LexNetError::Http { .. } | LexNetError::Io { .. } => true,
            LexNetError::Identity(e) => matches!(e, IdentityError::Unreachable { .. }),
            LexNetError::Publish(e) => e.is_environment(),
            _ => false,
        }
    }
}
