//! [`SyncError`], the one error type of `sync`: each way a run fails,
//! named, and whether it is the environment's fault (exit 2) or a refusal
//! (exit 1). Kept apart so the transport, the push and the run share it.

use thiserror::Error;

use crate::repo::repository::RepoError;
use crate::repo::verify::VerifyError;

/// Why a sync failed. Local data is never changed by a failed sync (the
/// marker only records what the PDS acknowledged).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SyncError {
    /// The PDS (or PLC) could not be reached.
    #[error("cannot reach {url}: {reason}")]
    Unreachable {
        /// The URL.
        url: String,
        /// The transport's reason.
        reason: String,
    },
    /// createSession refused the identifier/password.
    #[error("bad credentials: {service} refused the login of {identifier}")]
    BadCredentials {
        /// The handle or DID given.
        identifier: String,
        /// The PDS.
        service: String,
    },
    /// The access token expired and refreshSession refused the refresh
    /// token too: log in again.
    #[error("the session with {service} expired ({cause}) and could not be refreshed: {refresh}")]
    SessionExpired {
        /// The PDS.
        service: String,
        /// The refused call.
        cause: String,
        /// refreshSession's answer.
        refresh: String,
    },
    /// An XRPC call failed.
    #[error("{method} failed (HTTP {status}) {error}: {message}")]
    Xrpc {
        /// The method.
        method: &'static str,
        /// The HTTP status (0: the response could not be read).
        status: u16,
        /// The XRPC error name.
        error: String,
        /// Its message.
        message: String,
    },
    /// This data folder was synced with another account.
    #[error(
        "this store is linked to {linked}, not {got}: refusing to sync it with another account"
    )]
    AccountMismatch {
        /// The linked DID.
        linked: String,
        /// The DID logged in.
        got: String,
    },
    /// The account's DID document could not be had, or names no usable
    /// `#atproto` key.
    #[error(transparent)]
    Identity(#[from] crate::identity::IdentityError),
    /// The PDS's repository did not verify.
    #[error("the PDS's repository CAR failed verification: {0}")]
    Verify(Box<VerifyError>),
    /// The PDS stored a record under another CID than ours (its bytes
    /// differ: the data model round trip is broken).
    #[error("the PDS stored {key} as {remote}, but it is {local} here")]
    RecordCidMismatch {
        /// `collection/rkey`.
        key: String,
        /// Our CID.
        local: String,
        /// The PDS's.
        remote: String,
    },
    /// The data check failed (docs/sync.md): the commit the PDS made for a push has
    /// another MST root than the one computed here over the mirror with the
    /// same writes. The mirror is re-pulled in full before this is returned.
    #[error(
        "replica out of step: the PDS's commit {commit} has data {remote}, but the root computed here is {local}; the mirror is pulled again in full, run sync again"
    )]
    DataMismatch {
        /// The PDS's commit.
        commit: String,
        /// Its `data`.
        remote: String,
        /// The root computed here.
        local: String,
    },
    /// The PDS's head moved while pushing (another device wrote): the push
    /// was refused by `swapCommit`, nothing of it landed.
    #[error("the PDS's head moved during the push (another device wrote); pull again")]
    RemoteMoved,
    /// The PDS serves an older rev than the one mirrored here.
    #[error("the PDS's repository is at rev {found}, older than the rev {held} mirrored here")]
    OlderRemote {
        /// The mirrored rev.
        held: String,
        /// The PDS's rev.
        found: String,
    },
    /// A pulled record fails our lexicon validation (or cannot be decoded);
    /// nothing of the pull was merged.
    #[error("record {key} from the PDS fails validation: {reason}; nothing was merged")]
    InvalidRecord {
        /// `collection/rkey`.
        key: String,
        /// Why.
        reason: String,
    },
    /// A record to push names a blob this data folder does not hold.
    #[error(
        "record {key} names blob {cid}, which is not in this data folder; nothing of its batch was pushed"
    )]
    BlobMissing {
        /// `collection/rkey`.
        key: String,
        /// The blob's CID.
        cid: String,
    },
    /// The PDS stored an uploaded blob under another CID, or served bytes
    /// that are not the blob asked for.
    #[error("blob {expected}: the PDS {got}")]
    BlobCidMismatch {
        /// The CID the record names.
        expected: String,
        /// What came back instead.
        got: String,
    },
    /// The store could not be sealed for the account's DID before its
    /// first push, or a re-seal is unfinished: nothing was pushed.
    #[error(transparent)]
    Reseal(Box<crate::device::DeviceError>),
    /// The local repository.
    #[error(transparent)]
    Local(Box<RepoError>),
    /// Local I/O (the marker file, the runtime).
    #[error("cannot {what}: {reason}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        reason: String,
    },
}

impl From<RepoError> for SyncError {
    fn from(e: RepoError) -> Self {
        SyncError::Local(Box::new(e))
    }
}

impl From<VerifyError> for SyncError {
    fn from(e: VerifyError) -> Self {
        SyncError::Verify(Box::new(e))
    }
}

impl SyncError {
    /// Whether this is the environment's failure (exit 2: the PDS could not
    /// be reached, local I/O) rather than a refusal (exit 1).
    pub fn is_environment(&self) -> bool {
        matches!(
            self,
            SyncError::Unreachable { .. }
                | SyncError::Io { .. }
                | SyncError::Local(_)
                | SyncError::Identity(crate::identity::IdentityError::Unreachable { .. })
        )
    }
}
