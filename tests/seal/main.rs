//! Sealing: known-answer vectors, records and blobs, the keyring and its
//! membership rules under attack, device pairing, and `@gelstore/seal`
//! (TypeScript) against the Rust code.

#[allow(dead_code, unused_imports, unused_macros)] // each binary uses a part of the shared support
#[path = "../support/mod.rs"]
mod support;

mod device_pairing;
mod membership_attacks;
mod membership_property;
mod membership_vectors;
mod seal_kat;
mod seal_keyring;
mod seal_records;
mod web_seal_interop;
