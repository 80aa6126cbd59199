//! The atproto repository (v3): MST, signed commits, CAR files, proofs.
//! UNFINISHED: being written.

pub mod blocks;
pub mod car;
pub mod commit;
pub mod keys;
pub mod mst;
pub mod tid;
