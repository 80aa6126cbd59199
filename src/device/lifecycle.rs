//! Membership changes after pairing, on an admitted device: [`remove`] a
//! device and [`resolve`] a fork, each a rotation to the next account
//! epoch signed by this device and committed through its [`Device`]
//! handle.

use std::path::Path;

use rand_core::CryptoRng;

use super::error::DeviceError;
use super::handle::Device;
use super::records::key_writes;
use crate::repo::tid::TidClock;

/// Resolves a forked account epoch on the admitted device of `dir` (see
/// `seal::Fork`): starts the next epoch for the devices every rotation kept.
/// Returns the new epoch.
pub fn resolve(dir: impl AsRef<Path>, rng: &mut impl CryptoRng) -> Result<u64, DeviceError> {
    let mut device = Device::open(dir)?;
    if !device.repo.is_writable() {
        return Err(DeviceError::ReadOnlyCopy {
            did: device.repo.did().to_string(),
        });
    }
    let mut keyring = device.keyring.clone();
    let set = keyring.resolve_fork(rng)?;
    let epoch = keyring.account_epoch();
    let writes = key_writes(&set, &mut TidClock::new())?;
    device.commit(keyring, &writes, set)?;
    Ok(epoch)
}

/// Removes device `id` on the admitted device of `dir`: starts the next
/// account epoch, wrapped to every other admitted device; later seals use
/// keys the removed device never gets. Returns the new epoch.
pub fn remove(
    dir: impl AsRef<Path>,
    id: &str,
    rng: &mut impl CryptoRng,
) -> Result<u64, DeviceError> {
    let mut device = Device::open(dir)?;
    // A removal during a fork resolves it too (it rotates to the devices
    // every rotation kept, less `id`), so only the copy and the held epoch
    // are checked here.
    if !device.repo.is_writable() {
        return Err(DeviceError::ReadOnlyCopy {
            did: device.repo.did().to_string(),
        });
    }
    if let Some(held) = device.rolled_back() {
        return Err(DeviceError::MembershipRolledBack {
            held,
            now: device.keyring.held_epoch(),
        });
    }
    let mut keyring = device.keyring.clone();
    let set = keyring.remove_device(id, rng)?;
    let epoch = keyring.account_epoch();
    let writes = key_writes(&set, &mut TidClock::new())?;
    device.commit(keyring, &writes, set)?;
    Ok(epoch)
}
