//! [`DeviceError`], the one error type of `device`: every way a device
//! operation fails, named, with the message a user sees (most say what to
//! run next). Kept apart so the handle and the lifecycle functions share it
//! without either owning it.

use super::state::DeviceState;
use crate::repo::repository::RepoError;
use crate::seal::SealError;

/// Why a device operation failed. Nothing was written when one returns an
/// error, except where the variant says so.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// The data folder has no device key.
    #[error(
        "no device in {path}; run `gelstore device init` (first device of an account) or `gelstore device pair` (a new device)"
    )]
    NoDevice {
        /// The data folder.
        path: String,
    },
    /// The device waits for its pairing to be approved and taken in.
    #[error(
        "this device is not paired yet: approve its code ({code_hint}…) with `gelstore device approve` on a paired device, export that device's repository, and run `gelstore device join --from FILE.car` here"
    )]
    NotPaired {
        /// The start of the pending code (public part only).
        code_hint: String,
    },
    /// `device pair` on a device that is already admitted.
    #[error("this device is already paired, as {device}")]
    AlreadyPaired {
        /// Its record key.
        device: String,
    },
    /// `device init` where the account already has devices.
    #[error(
        "the repository of {did} already has paired devices; pair this device with `gelstore device pair` instead"
    )]
    AccountExists {
        /// The account DID.
        did: String,
    },
    /// A write on a read-only copy of the repository.
    #[error(
        "this data folder holds a read-only copy of {did}'s repository (taken in with `device join --from`); run this on the device that holds the repository, or pair this device through a PDS (`gelstore device pair --publish` in a new data folder)"
    )]
    ReadOnlyCopy {
        /// The account DID.
        did: String,
    },
    /// `device join` found no approval for this device in the records. The
    /// copy of the repository it took in is kept (it is refreshed again by
    /// the next `join`).
    #[error("not approved: {detail}")]
    NotApproved {
        /// What was looked for.
        detail: String,
    },
    /// The code given to `device approve` is this device's own.
    #[error("this is this device's own pairing code; approve it on another, already paired device")]
    OwnCode,
    /// A record to open or seal is not in the repository.
    #[error("record {path} does not exist")]
    RecordNotFound {
        /// `collection/rkey`.
        path: String,
    },
    /// The state file is unreadable or malformed.
    #[error("device state file {path}: {reason}")]
    StateFile {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A record could not be built from its generated type.
    #[error("cannot build a {collection} record: {reason}")]
    Record {
        /// Its collection.
        collection: &'static str,
        /// Why.
        reason: String,
    },
    /// The key records give an older account epoch than this device has
    /// held: records were deleted or rolled back (a PDS can do that). The
    /// device refuses to seal anything below the epoch it knows.
    #[error(
        "this device held account epoch {held}, but the key records now give only epoch {now}: key records were deleted or rolled back (by the PDS, or someone with the account's password). Nothing is sealed until a sync brings them back from a device that still holds them"
    )]
    MembershipRolledBack {
        /// The newest epoch this device held.
        held: u64,
        /// The epoch the records give now.
        now: u64,
    },
    /// The store could not be sealed again for the account's DID it is
    /// being linked to. Nothing was changed, and nothing is pushed.
    #[error(
        "cannot re-seal this store for the account {account}: {reason}; nothing was changed, and nothing is pushed until it is re-sealed"
    )]
    Reseal {
        /// The account's DID.
        account: String,
        /// Why.
        reason: String,
    },
    /// A re-seal for the account's DID is not finished (a crash, or an
    /// earlier failure): nothing is pushed until it is.
    #[error(
        "this store is not yet sealed for the account {account}; nothing is pushed until it is: run `gelstore sync` again, which finishes the re-seal first"
    )]
    ResealPending {
        /// The account's DID.
        account: String,
    },
    /// The pairing wrap addressed to this device does not open for the DID
    /// tried (its HPKE info binds the DID, its PSK the pairing secret).
    #[error(
        "the pairing wrap addressed to this device does not open for {did} (authentication failed): either it was made with another pairing code than this device's (approve the code this device shows), or the account's records are sealed for another DID: give it with --account-did (`gelstore device ls` on a paired device shows it; a store linked to an account seals for the account's DID, one linked by an earlier gelstore for its own did:key)"
    )]
    PairingWrapRefused {
        /// The DID tried.
        did: String,
    },
    /// A read-only copy paired from an exported CAR, whose account has
    /// since been re-sealed for its account's DID: its pairing wrap could
    /// not be made again (only this device knows its pairing secret). The
    /// copy was left as it was.
    #[error(
        "this read-only copy was paired for {did}, but the exported repository no longer opens for this device: the store it comes from was linked to an account and re-sealed for the account's DID, and a device paired from an exported CAR cannot follow (its pairing secret never left this device). The copy here is left as it was. Pair this device again: `gelstore device pair` in a new data folder, `gelstore device approve CODE` on the paired device, then sync through the PDS (`gelstore device pair --publish`) or `gelstore device join --from FILE.car --account-did DID`"
    )]
    CopyCannotFollow {
        /// The DID the copy was paired for.
        did: String,
    },
    /// Sealing, opening, pairing or a keyring operation failed.
    #[error(transparent)]
    Seal(#[from] SealError),
    /// The repository failed.
    #[error(transparent)]
    Repo(Box<RepoError>),
    /// Reading an input file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl From<RepoError> for DeviceError {
    fn from(e: RepoError) -> Self {
        DeviceError::Repo(Box::new(e))
    }
}

/// The error of a device that waits for its approval (only the public part
/// of its code is shown).
pub(super) fn not_paired(state: &DeviceState) -> DeviceError {
    let code = state.pairing.to_string();
    // The public key's first characters only: never the secret.
    DeviceError::NotPaired {
        code_hint: code.chars().take(14).collect(),
    }
}
