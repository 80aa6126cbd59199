//! A device of the account: its keyring kept across restarts, on top of one
//! data folder (`--data`).
//!
//! **What lives where.** The device's X25519 secret stays in `device.key`
//! (0600) and its pairing state in `device.json` (0600), both in the data
//! folder and never in the repository (see [`state`]). Everything public —
//! device records, key wraps, admissions — is a repository record
//! (`chat.gel.assistant.device`, `chat.gel.assistant.keyWrap`) written
//! through [`Repository::apply`](crate::repo::repository::Repository::apply), so it travels with the repository like
//! any other record (see [`records`]). No unwrapped key is kept on disk:
//! [`Device::open`] re-derives the [`Keyring`](crate::seal::Keyring) from the records, the device
//! secret and the pairing secret at every open.
//!
//! **Flow.** The first device runs [`init`]: it makes the account key
//! (epoch 0) and admits itself by pairing with its own code (so it, like
//! every later device, re-opens the account key from a pairing wrap). A new
//! device runs [`pair`] and shows the code; an admitted device runs
//! [`approve`] with it, which writes the new device's `device` record (found
//! by public key if it is already there), the pairing wrap and the
//! admission. The new device then takes the records in with [`join`].
//! [`remove`] starts a new account epoch without the removed device.
//!
//! **Without a PDS** the repository is signed by one store (the first
//! device's), and other devices hold a read-only copy of it, refreshed from
//! that store's CAR export ([`join`] with the file, through
//! [`Repository::refresh`](crate::repo::repository::Repository::refresh)). They can open everything they were admitted to
//! but write nothing. **With a PDS** (`crate::sync`) every device keeps its
//! own writable store and the PDS's repository is the shared one: a new
//! device writes its own `device` record ([`publish`]), syncs, and after the
//! approval has been synced completes the pairing from the records in its
//! own store ([`join_synced`]). Records are sealed for the account's DID
//! ([`Device::account_did`], kept in `device.json`): a store started
//! offline seals for its own did:key until its first sync re-seals it
//! ([`reseal`]), and a device that joins through the PDS takes the DID its
//! login gave.
//!
//! **Modules**, one job each: `error.rs` is [`DeviceError`]; `handle.rs`
//! the opened [`Device`]; `pairing.rs` how a device is admitted ([`init`],
//! [`pair`], [`publish`], [`approve`], [`join`], [`join_synced`]);
//! `lifecycle.rs` the membership changes after it ([`remove`],
//! [`resolve`]); `sealed.rs` what a sealed write is ([`SealedWrite`]: a
//! generated record type and the generated type sealed into it); [`state`] and [`records`] what is kept in the data folder
//! and in the repository; [`reseal`] the re-seal for the account's DID at
//! the first sync. The first five are private and re-exported here, so
//! callers name `device::…` as before.

mod error;
mod handle;
mod lifecycle;
mod pairing;
pub mod records;
pub mod reseal;
mod sealed;
pub mod state;

pub use self::error::DeviceError;
pub use self::handle::{Device, DeviceListing, DeviceStatus};
pub use self::lifecycle::{remove, resolve};
pub use self::pairing::{
    ApproveOutcome, InitOutcome, JoinOutcome, PairOutcome, approve, init, join, join_synced, pair,
    publish,
};
pub use self::sealed::{Sealable, SealedAction, SealedWrite};
