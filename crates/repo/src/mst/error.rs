//! The error type of the MST module.

use cid::Cid;

use crate::blocks::StoreError;
use gelstore_model::DataModelError;

/// Why an MST operation failed, or why a node block was rejected.
///
/// Errors about a node carry the `cid` of the block they were found in
/// (boxed, to keep the error small).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MstError {
    /// A key that is not a valid MST key (see [`check_key`](super::check_key)).
    #[error("invalid MST key {key:?}: {reason}")]
    InvalidKey {
        /// The key, shortened to 100 characters.
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// A CID outside the allowed set: record values must be atproto
    /// "blessed" CIDs, links between nodes must also use the dag-cbor codec.
    #[error("disallowed CID {cid}: {reason}")]
    DisallowedCid {
        /// The CID.
        cid: Box<Cid>,
        /// Why it is not allowed.
        reason: String,
    },

    /// A node block the operation needs is not in the block source. Partial
    /// trees (proofs, CAR slices) give this when an operation leaves the part
    /// they cover.
    #[error("MST node block {cid} is missing")]
    MissingBlock {
        /// The CID of the missing block.
        cid: Box<Cid>,
    },

    /// The block source failed.
    #[error(transparent)]
    Store(#[from] StoreError),

    /// The bytes stored under a CID do not hash to that CID.
    #[error("block {cid} does not match its CID")]
    CidMismatch {
        /// The CID the block was stored under.
        cid: Box<Cid>,
    },

    /// The block is not one canonical DAG-CBOR value.
    #[error("MST node {cid} is not valid DAG-CBOR: {source}")]
    BadCbor {
        /// The block.
        cid: Box<Cid>,
        /// What the decoder found.
        source: Box<DataModelError>,
    },

    /// The block is DAG-CBOR but not an MST node: missing, extra or
    /// wrongly typed fields.
    #[error("MST node {cid} has the wrong shape: {reason}")]
    BadShape {
        /// The block.
        cid: Box<Cid>,
        /// What is wrong.
        reason: String,
    },

    /// A key is not greater than the previous key of the node, or falls
    /// outside the key range its parent gives the node.
    #[error("MST node {cid}: key {key:?} is out of order")]
    KeyOrder {
        /// The block.
        cid: Box<Cid>,
        /// The offending key (shortened).
        key: String,
    },

    /// An entry's prefix length `p` is not the number of bytes its key
    /// shares with the previous key (0 for the first entry).
    #[error("MST node {cid}: entry {index} has a bad prefix length {prefix_len}: {reason}")]
    BadPrefixLength {
        /// The block.
        cid: Box<Cid>,
        /// Index of the entry in the node.
        index: usize,
        /// The prefix length found.
        prefix_len: u64,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// A key sits in a node of the wrong layer, or a subtree is not exactly
    /// one layer below its parent.
    #[error("MST node {cid}: {reason}")]
    WrongLayer {
        /// The block.
        cid: Box<Cid>,
        /// Which key or link is at the wrong layer.
        reason: String,
    },

    /// A node with no entries and no subtree, which the spec only allows as
    /// the root of an empty tree.
    #[error("MST node {cid} is empty but is not the root of an empty tree")]
    EmptyNode {
        /// The block.
        cid: Box<Cid>,
    },

    /// The root has no entries and only points to a subtree; such a node
    /// must be trimmed from the top of the tree.
    #[error("MST root {cid} is an empty node that only points to a subtree")]
    UntrimmedRoot {
        /// The block.
        cid: Box<Cid>,
    },

    /// An operation given to [`Mst::apply`](super::Mst::apply) or
    /// [`Mst::invert`](super::Mst::invert) does not match the tree.
    #[error("operation on {key:?} does not match the tree: {reason}")]
    OpMismatch {
        /// The key of the operation.
        key: String,
        /// What did not match.
        reason: &'static str,
    },

    /// A node could not be encoded (a bug or an impossible value).
    #[error("MST node could not be encoded: {0}")]
    Encode(Box<DataModelError>),
}
