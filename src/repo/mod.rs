//! The atproto repository (v3): MST, signed commits, CAR files, proofs.
//!
//! - [`blobs`]: the data folder's blob files and the blob references in records.
//! - [`blocks`]: the block source/sink traits every part reads and writes.
//! - [`mst`]: the Merkle Search Tree.
//! - [`commit`], [`tid`]: signed commits and revisions (keys: `gelstore_crypto`).
//! - [`car`]: CAR v1 reading and writing.
//! - [`export`]: a whole repository as a CAR, in streamable order.
//! - [`verify`]: checking a whole repository (CAR or block source) from
//!   untrusted input.
//! - [`proof`]: record proofs (one record's value or absence, signed).
//! - [`repository`]: one account's repository in a store: signed, atomic
//!   commits of record writes, garbage collection, CAR export/import.
//! - [`records`]: checks a record before it is written (names, `$type`,
//!   the project's lexicons, data model).
//! - [`identity`]: the local signing key file.
//! - [`events`]: the `subscribeRepos` `#commit` event stream: frames written
//!   with each commit, cursors and retention, strict decoding and the
//!   consumer's inductive check.

pub mod blobs;
pub mod blocks;
pub mod car;
pub mod commit;
pub mod events;
pub mod export;
pub mod identity;

pub mod mst;
pub mod proof;
pub mod records;
pub mod repository;
pub mod tid;
pub mod verify;
