//! What the integration-test binaries share: the interop fixtures and a
//! deterministic PRNG, peers to run against (the reference PDS, `gelstore
//! serve`, a proxy that misbehaves), a mock model provider, an in-process DNS
//! server and headless Chromium. Each binary includes it whole and uses a part.

pub mod browser;
pub mod dns;
pub mod fixtures;
pub mod launch;
pub mod pds;
pub mod peer;
pub mod provider;
pub mod proxy;
pub mod reference_harness;
pub mod seal_rng;
pub mod serve;
