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
//! - [`key_file`]: the local signing key file.
//! - [`events`]: the `subscribeRepos` `#commit` event stream: frames written
//!   with each commit, cursors and retention, strict decoding and the
//!   consumer's inductive check.
//!
//! ```
//! use std::sync::Arc;
//! use gelstore_crypto::{KeyAlgorithm, SigningKey};
//! use gelstore_repo::repository::{ImportOptions, Repository, Write, verify_car};
//! use gelstore_store::MemoryEngine;
//!
//! let key = SigningKey::generate(KeyAlgorithm::K256).unwrap();
//! let mut repo = Repository::init_engine(Arc::new(MemoryEngine::new()), key).unwrap();
//! let note = serde_json::json!({"$type": "com.example.note", "text": "hi"});
//! repo.apply(&[Write::create("com.example.note", "3kabc", note.clone())]).unwrap();
//! assert_eq!(repo.get("com.example.note", "3kabc").unwrap().unwrap().value, note);
//!
//! // The whole repository as a CAR, verified as an untrusted peer would.
//! let (car, _) = repo.export(Vec::new(), None).unwrap();
//! let verified = verify_car(&car[..], &ImportOptions::default()).unwrap();
//! assert_eq!(verified.summary().record_count, 1);
//! ```

pub mod blobs;
pub mod blocks;
pub mod car;
pub mod commit;
pub mod events;
pub mod export;
pub mod key_file;

pub mod mst;
pub mod proof;
pub mod records;
pub mod repository;
pub mod tid;
pub mod verify;
