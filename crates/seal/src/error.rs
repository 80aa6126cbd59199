//! The one error type of the seal module.

use thiserror::Error;

/// Why sealing or opening failed.
///
/// Opening checks structure first (alg on the allow-list, nonce length,
/// sizes, field types) and only then runs any cryptography, so a malformed
/// envelope is always reported as what it is, never as an authentication
/// failure. No variant ever carries plaintext.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum SealError {
    /// The `alg` names a scheme that is not on this reader's allow-list.
    #[error("unsupported alg {alg:?}: this reader only accepts {allowed}")]
    UnsupportedAlg {
        /// The alg found (cut to 128 characters).
        alg: String,
        /// The names this reader accepts.
        allowed: &'static str,
    },

    /// The nonce is not the 24 bytes XChaCha20-Poly1305 needs.
    #[error("malformed nonce: {len} bytes, expected {expected}")]
    MalformedNonce {
        /// Its length.
        len: usize,
        /// The length the alg needs.
        expected: usize,
    },

    /// Sealing would exceed a lexicon limit (or opening met input over one).
    #[error("{what} of {size} bytes is over the limit of {max} bytes{hint}")]
    Oversize {
        /// What is too large.
        what: &'static str,
        /// Its size.
        size: u64,
        /// The limit.
        max: u64,
        /// What to do instead (may be empty).
        hint: &'static str,
    },

    /// The input ends before it should: a ciphertext shorter than its tag, a
    /// blob stream without its final chunk, a blob shorter than recorded.
    #[error("truncated {what}: {detail}")]
    Truncated {
        /// What was cut short.
        what: &'static str,
        /// How.
        detail: String,
    },

    /// No key with this `keyId` is held.
    #[error("unknown key {key_id:?}: this keyring holds no key with that keyId")]
    UnknownKey {
        /// The keyId asked for.
        key_id: String,
    },

    /// The ciphertext, its associated data or the key do not match: the record
    /// was moved, edited or forged, or the key is the wrong one. No plaintext
    /// is released.
    #[error("authentication failed: {what} does not verify under this key and context")]
    AuthenticationFailed {
        /// What failed to verify.
        what: &'static str,
    },

    /// A key wrap is not addressed to any key this keyring can open it with.
    #[error("not a recipient: {detail}")]
    NotRecipient {
        /// Whom the wrap is for.
        detail: String,
    },

    /// The decrypted bytes are not a valid plaintext frame or content.
    #[error("invalid plaintext: {reason}")]
    InvalidPlaintext {
        /// What is wrong.
        reason: String,
    },

    /// A blob's bytes do not hash to the CID the record names.
    #[error("blob CID mismatch: the record names {expected}, the bytes hash to {actual}")]
    BlobCidMismatch {
        /// The CID in the record.
        expected: String,
        /// The CID of the bytes given.
        actual: String,
    },

    /// A blob's size is not the size the record names.
    #[error("blob size mismatch: the record names {expected} bytes, got {actual}")]
    BlobSizeMismatch {
        /// The size in the record.
        expected: u64,
        /// The size of the bytes given (or read so far).
        actual: u64,
    },

    /// The envelope (`encryptedContent`) or a `keyWrap` record is not shaped
    /// as its lexicon says.
    #[error("malformed {what}: {reason}")]
    Malformed {
        /// `encryptedContent`, `keyWrap`, `record`, …
        what: &'static str,
        /// What is wrong.
        reason: String,
    },

    /// The record's `$type` has no sealed field.
    #[error("records of type {record_type:?} have no sealed field")]
    NotSealable {
        /// The `$type`.
        record_type: String,
    },

    /// A pairing code that does not parse or whose checksum is wrong.
    #[error("invalid pairing code: {reason}")]
    InvalidPairingCode {
        /// What is wrong.
        reason: String,
    },

    /// Two membership changes started the same account epoch with
    /// different rosters (removals on two devices at once, or a rotation
    /// forged by a removed device): nothing new is sealed until a rotation
    /// to the devices every change kept resolves it.
    #[error(
        "two membership changes started account epoch {epoch} with different devices (a removal made on two devices at once, or a rotation forged by a removed device); nothing new is sealed until `gelstore device resolve` starts epoch {next} for the devices every change kept{}",
        if left_out.is_empty() { String::new() } else { format!(" (it leaves out {})", left_out.join(", ")) }
    )]
    MembershipFork {
        /// The forked epoch.
        epoch: u64,
        /// The epoch a resolution starts.
        next: u64,
        /// Devices some change kept and another did not.
        left_out: Vec<String>,
    },
    /// The membership log does not verify: a change is missing, forged,
    /// or breaks the rules, or a change this device verified before is gone.
    #[error("membership log: {reason}")]
    MembershipLog {
        /// What is wrong, naming the change.
        reason: String,
    },

    /// This device is not in the roster the membership log has now: it was
    /// removed, or its admission has not arrived.
    #[error("this device is not admitted in account epoch {epoch}{}", if *removed { " (a change removed it)" } else { "" })]
    NotAdmitted {
        /// The epoch in force.
        epoch: u64,
        /// Whether a verified change removed it.
        removed: bool,
    },

    /// The account key the membership log names for the epoch in force has
    /// not reached this device yet (its wrap is on its way).
    #[error(
        "the account key {key_id:?} of epoch {epoch} has not reached this device yet; sync again"
    )]
    AccountKeyPending {
        /// The key the log names.
        key_id: String,
        /// Its epoch.
        epoch: u64,
    },

    /// A keyring operation that cannot be done in its state.
    #[error("keyring: {reason}")]
    Keyring {
        /// Why.
        reason: String,
    },

    /// A key file could not be read or written, or is readable by others.
    #[error("key file {path}: {reason}")]
    KeyFile {
        /// The file.
        path: String,
        /// What went wrong.
        reason: String,
    },
}

impl SealError {
    /// [`SealError::Malformed`]: `what` (a field, a record) is not in its shape.
    pub fn malformed(what: &'static str, reason: impl Into<String>) -> SealError {
        SealError::Malformed {
            what,
            reason: reason.into(),
        }
    }

    /// [`SealError::InvalidPlaintext`]: opened bytes that are not the content.
    pub fn invalid_plaintext(reason: impl Into<String>) -> SealError {
        SealError::InvalidPlaintext {
            reason: reason.into(),
        }
    }
}

/// Result with [`SealError`].
pub type Result<T, E = SealError> = std::result::Result<T, E>;
