//! `gelstore sync` against both peers (the reference PDS and `gelstore
//! serve`): devices, re-sealing, and failures behind a misbehaving proxy.

#[allow(dead_code, unused_imports, unused_macros)] // each binary uses a part of the shared support
#[path = "../support/mod.rs"]
mod support;

mod sync_devices;
mod sync_failures;
mod sync_pds;
mod sync_reseal;
