//! A device's keyring: its device key, the account key epochs it holds, the
//! chat keys, and the roster of admitted devices; pairing, approval,
//! removal (rotation) and chat keys, producing and absorbing `keyWrap`
//! records (see [`super::wrap`] for their cryptography).
//!
//! **Key ids.** `account:<epoch>:<16 hex>` for an account key,
//! `chat:<chat rkey>:<epoch>:<16 hex>` for a chat key (its epoch is the
//! account epoch it was made in), `device:<device rkey>` for an admission.
//! The random part keeps ids apart when two devices make a key at once.
//!
//! **Pairing.** The new device makes a [`PairingRequest`] and shows its
//! [`PairingCode`] (its public key and a 10-byte secret). An admitted device,
//! given the code, [`Keyring::approve`]s: it wraps the current account key to
//! the new device in HPKE PSK mode with a PSK derived from the secret, and
//! writes an *admission* (the new device's public key, wrapped to the account
//! key) so every device can later tell admitted devices from device records
//! that merely appeared. The new device [`Keyring::join`]s with the wraps; it
//! accepts the account key only from a wrap made with its pairing secret.
//!
//! **Rotation.** [`Keyring::remove_device`] starts account epoch `N+1`: it
//! wraps the new key to every other admitted device (PSK: the epoch-`N`
//! account key, which a PDS does not hold), chains the old key to the new one
//! (so devices paired later can read history), re-admits the remaining
//! devices under `N+1`, and from then on [`Keyring::chat_key_for_seal`] hands
//! out new chat keys made in epoch `N+1`. The removed device keeps what it
//! could already read, and nothing sealed after.
//!
//! **Forks.** Two keys of one epoch are two rotations from the same epoch:
//! removals made on two devices before either synced, or a rotation forged
//! by a removed device (it still holds the epoch-`N` key, so its wraps open
//! like a real rotation's). Each key has the roster its rotation admitted.
//! Equal rosters are harmless (the greater keyId is current); different
//! ones are a [`Fork`]: the keyring seals nothing new
//! ([`SealError::MembershipFork`]) until [`Keyring::resolve_fork`] starts the
//! next epoch for the devices in *every* roster, so every removal holds and
//! a forger, kept by its own rotation only, is left out. A forger can still
//! make forks (a denial of service, not a disclosure): telling who rotated
//! needs signed membership changes, not built yet.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use data_encoding::BASE32_NOPAD;
use rand_core::CryptoRng;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use super::error::{Result, SealError};
use super::keys::{AccountKey, ChatKey, DeviceKey, KEY_LEN, KeyLookup, X25519Pair, random_hex};
use super::wrap::{KeyWrap, Psk, Recipient, open_wrap, seal_wrap};
use crate::model::now_datetime;

/// Bytes of secret in a pairing code.
pub const PAIRING_SECRET_LEN: usize = 10;
/// Prefix of a pairing code's text form.
pub const PAIRING_CODE_PREFIX: &str = "gp1";
const PAIRING_CHECKSUM_LEN: usize = 2;

/// What a new device shows so an admitted device can approve it: its public
/// key and a one-time secret.
///
/// Text form: `gp1-` then base32 (RFC 4648, lower case, no padding) of
/// `public key (32) ‖ secret (10) ‖ SHA-256(public key ‖ secret)[0..2]`,
/// in groups of four separated by `-`. Parsing ignores case, spaces and
/// dashes.
#[derive(Clone, PartialEq, Eq)]
pub struct PairingCode {
    /// The new device's X25519 public key.
    pub public_key: [u8; KEY_LEN],
    secret: Zeroizing<[u8; PAIRING_SECRET_LEN]>,
}

impl PairingCode {
    fn checksum(&self) -> [u8; PAIRING_CHECKSUM_LEN] {
        let mut h = Sha256::new();
        h.update(self.public_key);
        h.update(self.secret.as_ref());
        let d = h.finalize();
        [d[0], d[1]]
    }
}

impl fmt::Display for PairingCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut raw = Zeroizing::new(Vec::with_capacity(44));
        raw.extend_from_slice(&self.public_key);
        raw.extend_from_slice(self.secret.as_ref());
        raw.extend_from_slice(&self.checksum());
        let text = Zeroizing::new(BASE32_NOPAD.encode(&raw).to_ascii_lowercase());
        f.write_str(PAIRING_CODE_PREFIX)?;
        for group in text.as_bytes().chunks(4) {
            f.write_str("-")?;
            f.write_str(std::str::from_utf8(group).map_err(|_| fmt::Error)?)?;
        }
        Ok(())
    }
}

impl fmt::Debug for PairingCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PairingCode")
            .field("public_key", &super::keys::hex(&self.public_key))
            .finish_non_exhaustive()
    }
}

impl FromStr for PairingCode {
    type Err = SealError;

    fn from_str(s: &str) -> Result<PairingCode> {
        let bad = |reason: &str| SealError::InvalidPairingCode {
            reason: reason.to_string(),
        };
        let cleaned: String = s
            .chars()
            .filter(|c| !c.is_whitespace() && *c != '-')
            .collect::<String>()
            .to_ascii_uppercase();
        let body = cleaned
            .strip_prefix(&PAIRING_CODE_PREFIX.to_ascii_uppercase())
            .ok_or_else(|| bad("it does not start with gp1-"))?;
        let raw = Zeroizing::new(
            BASE32_NOPAD
                .decode(body.as_bytes())
                .map_err(|_| bad("it is not base32 (letters a-z and digits 2-7)"))?,
        );
        if raw.len() != KEY_LEN + PAIRING_SECRET_LEN + PAIRING_CHECKSUM_LEN {
            return Err(bad("it has the wrong length; was a character lost?"));
        }
        let mut public_key = [0u8; KEY_LEN];
        public_key.copy_from_slice(&raw[..KEY_LEN]);
        let mut secret = Zeroizing::new([0u8; PAIRING_SECRET_LEN]);
        secret.copy_from_slice(&raw[KEY_LEN..KEY_LEN + PAIRING_SECRET_LEN]);
        let code = PairingCode { public_key, secret };
        if code.checksum()[..] != raw[KEY_LEN + PAIRING_SECRET_LEN..] {
            return Err(bad("the checksum does not match; check for a typo"));
        }
        Ok(code)
    }
}

/// The new device's side of a pairing: keep it until the approval arrives.
#[derive(Clone)]
pub struct PairingRequest {
    code: PairingCode,
}

impl PairingRequest {
    /// The code to show (or encode as a QR code) on the new device.
    pub fn code(&self) -> &PairingCode {
        &self.code
    }

    /// The request a code was made for, as kept by the new device (in its
    /// owner-only state file) until, and after, the approval arrives: the
    /// secret is what lets it re-open the pairing wrap when it rebuilds its
    /// keyring from the records.
    pub fn from_code(code: PairingCode) -> PairingRequest {
        PairingRequest { code }
    }
}

impl fmt::Debug for PairingRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PairingRequest")
            .field("code", &self.code)
            .finish()
    }
}

/// Starts pairing on a new device: a fresh secret from `rng` next to the
/// device's public key.
pub fn pair_request(device: &DeviceKey, rng: &mut impl CryptoRng) -> PairingRequest {
    let mut secret = Zeroizing::new([0u8; PAIRING_SECRET_LEN]);
    rng.fill_bytes(secret.as_mut());
    PairingRequest {
        code: PairingCode {
            public_key: device.public_key(),
            secret,
        },
    }
}

/// What a keyId names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum KeyKind {
    Account { epoch: u64 },
    Chat { chat: String, epoch: u64 },
    Admission { device: String },
}

fn parse_key_id(key_id: &str) -> Option<KeyKind> {
    if let Some(rest) = key_id.strip_prefix("account:") {
        let (epoch, _rand) = rest.split_once(':')?;
        return Some(KeyKind::Account {
            epoch: epoch.parse().ok()?,
        });
    }
    if let Some(rest) = key_id.strip_prefix("chat:") {
        let mut parts = rest.rsplitn(3, ':');
        let _rand = parts.next()?;
        let epoch = parts.next()?.parse().ok()?;
        let chat = parts.next()?;
        if chat.is_empty() {
            return None;
        }
        return Some(KeyKind::Chat {
            chat: chat.to_string(),
            epoch,
        });
    }
    if let Some(device) = key_id.strip_prefix("device:")
        && !device.is_empty()
    {
        return Some(KeyKind::Admission {
            device: device.to_string(),
        });
    }
    None
}

#[derive(Clone)]
struct ChatEntry {
    key: ChatKey,
    chat: String,
    epoch: u64,
}

/// What [`Keyring::absorb`] learned and refused.
#[derive(Debug, Default)]
pub struct AbsorbReport {
    /// Account key epochs newly held.
    pub accounts: usize,
    /// Chat keys newly held.
    pub chat_keys: usize,
    /// Devices newly known to be admitted.
    pub devices: usize,
    /// Wraps addressed to a key this keyring holds that it refused, with why
    /// (a forged or damaged wrap shows up here).
    pub rejected: Vec<(String, SealError)>,
}

/// A device's keys (see the module docs).
#[derive(Clone)]
pub struct Keyring {
    did: String,
    device_id: String,
    device: DeviceKey,
    accounts: BTreeMap<(u64, String), AccountKey>,
    chat_keys: BTreeMap<String, ChatEntry>,
    /// Admitted devices by account key (epoch, keyId): device rkey →
    /// public key. Keyed by key, not epoch: two rotations of one epoch
    /// admit their own rosters.
    roster: BTreeMap<(u64, String), BTreeMap<String, [u8; KEY_LEN]>>,
    /// The keyId of the account key this device was given by pairing (or,
    /// for the first device, made).
    admitted_with: String,
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring")
            .field("did", &self.did)
            .field("device_id", &self.device_id)
            .field("accounts", &self.accounts.keys().collect::<Vec<_>>())
            .field("chat_keys", &self.chat_keys.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Keyring {
    /// The first device of an account: makes account key epoch 0 and admits
    /// itself. Returns the keyring and the wraps to store (its admission).
    pub fn create(
        did: &str,
        device_id: &str,
        device: DeviceKey,
        rng: &mut impl CryptoRng,
    ) -> Result<(Keyring, Vec<KeyWrap>)> {
        let account = new_account_key(0, rng);
        let mut ring = Keyring::holding(did, device_id, device, account.clone());
        let me = (ring.device_id.clone(), ring.device.public_key());
        let wrap = ring.admission(&account, &me.0, &me.1, rng)?;
        ring.roster
            .entry((0, account.key_id.clone()))
            .or_default()
            .insert(me.0, me.1);
        Ok((ring, vec![wrap]))
    }

    /// A keyring admitted with `account`, holding only that key.
    fn holding(did: &str, device_id: &str, device: DeviceKey, account: AccountKey) -> Keyring {
        let mut accounts = BTreeMap::new();
        let admitted_with = account.key_id.clone();
        accounts.insert((account.epoch, account.key_id.clone()), account);
        Keyring {
            did: did.to_string(),
            device_id: device_id.to_string(),
            device,
            accounts,
            chat_keys: BTreeMap::new(),
            roster: BTreeMap::new(),
            admitted_with,
        }
    }

    /// A new device joins with the wraps it found: it takes the account key
    /// only from a wrap addressed to `device_id` that opens with its pairing
    /// secret, then absorbs the rest (older epochs, chat keys, roster).
    pub fn join(
        did: &str,
        device_id: &str,
        device: DeviceKey,
        request: &PairingRequest,
        wraps: &[KeyWrap],
    ) -> Result<(Keyring, AbsorbReport)> {
        Keyring::join_pinned(did, device_id, device, request, None, wraps)
    }

    /// Rebuilds the keyring of a device that joined before, from the records
    /// and what it keeps locally: like [`join`](Self::join), but only the
    /// pairing wrap of `account_key_id` (the key it was admitted with, see
    /// [`admitted_with`](Self::admitted_with)) is accepted, so a pairing wrap
    /// planted later (by someone who saw the code) changes nothing.
    pub fn rejoin(
        did: &str,
        device_id: &str,
        device: DeviceKey,
        request: &PairingRequest,
        account_key_id: &str,
        wraps: &[KeyWrap],
    ) -> Result<(Keyring, AbsorbReport)> {
        Keyring::join_pinned(did, device_id, device, request, Some(account_key_id), wraps)
    }

    fn join_pinned(
        did: &str,
        device_id: &str,
        device: DeviceKey,
        request: &PairingRequest,
        pin: Option<&str>,
        wraps: &[KeyWrap],
    ) -> Result<(Keyring, AbsorbReport)> {
        if request.code.public_key != device.public_key() {
            return Err(SealError::Keyring {
                reason: "the pairing request was made for another device key".into(),
            });
        }
        let psk = Psk::pairing(request.code.secret.as_ref(), &request.code.public_key);
        let mut last_error = None;
        let mut found = None;
        for wrap in wraps {
            let for_me =
                matches!(&wrap.recipient, Recipient::Device { device } if device == device_id);
            let Some(KeyKind::Account { epoch }) = parse_key_id(&wrap.key_id) else {
                continue;
            };
            if !for_me || epoch != wrap.epoch || pin.is_some_and(|k| k != wrap.key_id) {
                continue;
            }
            match open_wrap(did, wrap, device.0.secret_bytes(), &psk) {
                Ok(secret) => {
                    found = Some(AccountKey {
                        key_id: wrap.key_id.clone(),
                        epoch: wrap.epoch,
                        pair: X25519Pair::from_bytes(*secret),
                    });
                    break;
                }
                Err(e) => last_error = Some(e),
            }
        }
        let account = match (found, last_error) {
            (Some(a), _) => a,
            (None, Some(e)) => return Err(e),
            (None, None) => {
                return Err(SealError::NotRecipient {
                    detail: format!(
                        "no account key wrap is addressed to device {device_id:?}; \
                         approve its pairing code on a device that is already paired"
                    ),
                });
            }
        };
        let mut ring = Keyring::holding(did, device_id, device, account);
        let report = ring.absorb(wraps);
        Ok((ring, report))
    }

    /// Learns what it can from `wraps` (in any order, repeating until nothing
    /// new opens): rotations to this device, older account keys chained to
    /// newer ones, chat keys and admissions wrapped to account keys it holds.
    /// Wraps for other devices or for keys it does not hold are skipped;
    /// wraps addressed to its keys that do not open are reported.
    pub fn absorb(&mut self, wraps: &[KeyWrap]) -> AbsorbReport {
        let mut report = AbsorbReport::default();
        let mut done = vec![false; wraps.len()];
        loop {
            let mut progress = false;
            for (i, wrap) in wraps.iter().enumerate() {
                if done[i] {
                    continue;
                }
                match self.try_absorb(wrap, &mut report) {
                    Step::Done => {
                        done[i] = true;
                        progress = true;
                    }
                    Step::Rejected(e) => {
                        done[i] = true;
                        report.rejected.push((wrap.key_id.clone(), e));
                    }
                    Step::Ignored => done[i] = true,
                    Step::Later => {}
                }
            }
            if !progress {
                break;
            }
        }
        report
    }

    fn try_absorb(&mut self, wrap: &KeyWrap, report: &mut AbsorbReport) -> Step {
        let Some(kind) = parse_key_id(&wrap.key_id) else {
            return Step::Ignored;
        };
        match (&wrap.recipient, kind) {
            (Recipient::Device { device }, KeyKind::Account { epoch }) => {
                if *device != self.device_id || epoch != wrap.epoch {
                    return Step::Ignored;
                }
                if self.accounts.contains_key(&(epoch, wrap.key_id.clone())) {
                    return Step::Ignored;
                }
                let Some(prev_epoch) = epoch.checked_sub(1) else {
                    return Step::Ignored; // epoch 0 arrives by pairing only
                };
                let prevs: Vec<AccountKey> = self.accounts_at(prev_epoch).cloned().collect();
                if prevs.is_empty() {
                    return Step::Later;
                }
                let mut error = None;
                for prev in prevs {
                    let psk = Psk::account(prev.pair.secret_bytes(), &prev.key_id);
                    match open_wrap(&self.did, wrap, self.device.0.secret_bytes(), &psk) {
                        Ok(secret) => {
                            self.add_account(wrap, &secret);
                            report.accounts += 1;
                            return Step::Done;
                        }
                        Err(e) => error = Some(e),
                    }
                }
                Step::Rejected(error.expect("at least one previous key was tried"))
            }
            (Recipient::Device { .. }, _) => Step::Ignored,
            (Recipient::Account { key_id, epoch }, kind) => {
                let Some(holder) = self.accounts.get(&(*epoch, key_id.clone())).cloned() else {
                    return Step::Later;
                };
                let consistent = match &kind {
                    KeyKind::Account { epoch: e } => *e == wrap.epoch && wrap.epoch < *epoch,
                    KeyKind::Chat { epoch: e, .. } => *e == wrap.epoch && wrap.epoch == *epoch,
                    KeyKind::Admission { .. } => wrap.epoch == *epoch,
                };
                if !consistent {
                    return Step::Rejected(SealError::malformed(
                        "keyWrap",
                        "keyId, epoch and recipient epoch do not agree",
                    ));
                }
                let already = match &kind {
                    KeyKind::Account { epoch } => {
                        self.accounts.contains_key(&(*epoch, wrap.key_id.clone()))
                    }
                    KeyKind::Chat { .. } => self.chat_keys.contains_key(&wrap.key_id),
                    KeyKind::Admission { device } => self
                        .roster
                        .get(&(*epoch, key_id.clone()))
                        .is_some_and(|r| r.contains_key(device)),
                };
                if already {
                    return Step::Ignored;
                }
                let psk = Psk::account(holder.pair.secret_bytes(), &holder.key_id);
                let secret = match open_wrap(&self.did, wrap, holder.pair.secret_bytes(), &psk) {
                    Ok(s) => s,
                    Err(e) => return Step::Rejected(e),
                };
                match kind {
                    KeyKind::Account { .. } => {
                        self.add_account(wrap, &secret);
                        report.accounts += 1;
                    }
                    KeyKind::Chat { chat, epoch } => {
                        self.chat_keys.insert(
                            wrap.key_id.clone(),
                            ChatEntry {
                                key: ChatKey::new(wrap.key_id.clone(), *secret),
                                chat,
                                epoch,
                            },
                        );
                        report.chat_keys += 1;
                    }
                    KeyKind::Admission { device } => {
                        self.roster
                            .entry((*epoch, key_id.clone()))
                            .or_default()
                            .insert(device, *secret);
                        report.devices += 1;
                    }
                }
                Step::Done
            }
        }
    }

    fn add_account(&mut self, wrap: &KeyWrap, secret: &[u8; KEY_LEN]) {
        self.accounts.insert(
            (wrap.epoch, wrap.key_id.clone()),
            AccountKey {
                key_id: wrap.key_id.clone(),
                epoch: wrap.epoch,
                pair: X25519Pair::from_bytes(*secret),
            },
        );
    }

    fn accounts_at(&self, epoch: u64) -> impl Iterator<Item = &AccountKey> {
        self.accounts
            .range((epoch, String::new())..)
            .take_while(move |((e, _), _)| *e == epoch)
            .map(|(_, k)| k)
    }

    /// The account key new seals use: of the keys whose rotation admitted
    /// this device (with its own public key), the highest epoch, and of
    /// two rotations at once the greater keyId, so devices agree. A key
    /// nobody was admitted with (a bare forged rotation wrap) never
    /// becomes current.
    pub fn current_account(&self) -> &AccountKey {
        let me = self.device.public_key();
        self.accounts
            .iter()
            .rev()
            .find(|(id, _)| {
                self.roster
                    .get(id)
                    .is_some_and(|r| r.get(&self.device_id) == Some(&me))
            })
            .map(|(_, k)| k)
            // A device not yet in any roster (its admission still on its
            // way) seals with the key it was admitted with.
            .or_else(|| {
                self.accounts
                    .values()
                    .find(|k| k.key_id == self.admitted_with)
            })
            .or_else(|| self.accounts.values().next_back())
            .expect("a keyring always holds an account key")
    }

    /// The current account epoch.
    pub fn account_epoch(&self) -> u64 {
        self.current_account().epoch
    }

    /// Every account key held, oldest first.
    pub fn account_keys(&self) -> impl Iterator<Item = &AccountKey> {
        self.accounts.values()
    }

    /// The account DID the keyring's wraps are bound to.
    pub fn did(&self) -> &str {
        &self.did
    }

    /// This device's record key.
    pub fn device_id(&self) -> &str {
        &self.device_id
    }

    /// This device's public key.
    pub fn device_public_key(&self) -> [u8; KEY_LEN] {
        self.device.public_key()
    }

    /// The devices admitted in the current epoch, by record key: during a
    /// [`Fork`], only those every rotation of the epoch admitted.
    pub fn devices(&self) -> BTreeMap<String, [u8; KEY_LEN]> {
        let epoch = self.account_epoch();
        let mut rosters = self.rosters_at(epoch).map(|(_, r)| r);
        let Some(first) = rosters.next() else {
            return BTreeMap::new();
        };
        let mut kept = first.clone();
        for r in rosters {
            kept.retain(|d, k| r.get(d) == Some(k));
        }
        kept
    }

    /// The devices admitted in account epoch `epoch` by any of its keys
    /// (empty for an epoch whose key this keyring does not hold), by record
    /// key.
    pub fn devices_at(&self, epoch: u64) -> BTreeMap<String, [u8; KEY_LEN]> {
        let mut all = BTreeMap::new();
        for (_, r) in self.rosters_at(epoch) {
            all.extend(r.iter().map(|(d, k)| (d.clone(), *k)));
        }
        all
    }

    /// The rosters of the keys of `epoch` this keyring holds, by keyId.
    fn rosters_at(
        &self,
        epoch: u64,
    ) -> impl Iterator<Item = (&str, &BTreeMap<String, [u8; KEY_LEN]>)> {
        self.accounts_at(epoch).filter_map(move |a| {
            self.roster
                .get(&(epoch, a.key_id.clone()))
                .map(|r| (a.key_id.as_str(), r))
        })
    }

    /// Two rotations of the current epoch that admitted different devices,
    /// if there are (see the module docs).
    pub fn fork(&self) -> Option<Fork> {
        let epoch = self.account_epoch();
        let me = self.device.public_key();
        let rosters: Vec<(&str, &BTreeMap<String, [u8; KEY_LEN]>)> = self
            .rosters_at(epoch)
            .filter(|(_, r)| r.get(&self.device_id) == Some(&me))
            .collect();
        if rosters.windows(2).all(|w| w[0].1 == w[1].1) {
            return None;
        }
        let kept = self.devices();
        let left_out: BTreeSet<String> = self
            .devices_at(epoch)
            .into_keys()
            .filter(|d| !kept.contains_key(d))
            .collect();
        Some(Fork {
            epoch,
            key_ids: rosters.iter().map(|(k, _)| (*k).to_owned()).collect(),
            left_out: left_out.into_iter().collect(),
        })
    }

    /// Refuses while the current epoch is forked.
    fn not_forked(&self) -> Result<()> {
        match self.fork() {
            None => Ok(()),
            Some(f) => Err(SealError::MembershipFork {
                epoch: f.epoch,
                next: f.epoch + 1,
                left_out: f.left_out,
            }),
        }
    }

    /// The keyId of the account key this device was admitted with: made by
    /// [`create`](Self::create), or opened from its pairing wrap by
    /// [`join`](Self::join). Keep it to [`rejoin`](Self::rejoin) later.
    pub fn admitted_with(&self) -> &str {
        &self.admitted_with
    }

    fn admission(
        &self,
        account: &AccountKey,
        device_id: &str,
        public: &[u8; KEY_LEN],
        rng: &mut impl CryptoRng,
    ) -> Result<KeyWrap> {
        seal_wrap(
            &self.did,
            &format!("device:{device_id}"),
            account.epoch,
            Recipient::Account {
                key_id: account.key_id.clone(),
                epoch: account.epoch,
            },
            account.pair.public(),
            &Psk::account(account.pair.secret_bytes(), &account.key_id),
            public,
            now_datetime(),
            rng,
        )
    }

    /// Approves a new device from its pairing code: wraps the current account
    /// key to it with the pairing PSK and admits it. `device_id` is the
    /// record key of its `device` record (whose `publicKey` must be the one
    /// in the code). Returns the wraps to store.
    pub fn approve(
        &mut self,
        code: &PairingCode,
        device_id: &str,
        rng: &mut impl CryptoRng,
    ) -> Result<Vec<KeyWrap>> {
        self.not_forked()?;
        let account = self.current_account().clone();
        if let Some(known) = self
            .roster
            .get(&(account.epoch, account.key_id.clone()))
            .and_then(|r| r.get(device_id))
            && *known != code.public_key
        {
            return Err(SealError::Keyring {
                reason: format!("device {device_id:?} is already admitted with another public key"),
            });
        }
        let psk = Psk::pairing(code.secret.as_ref(), &code.public_key);
        let pairing = seal_wrap(
            &self.did,
            &account.key_id,
            account.epoch,
            Recipient::Device {
                device: device_id.to_string(),
            },
            &code.public_key,
            &psk,
            account.pair.secret_bytes(),
            now_datetime(),
            rng,
        )?;
        let admission = self.admission(&account, device_id, &code.public_key, rng)?;
        self.roster
            .entry((account.epoch, account.key_id.clone()))
            .or_default()
            .insert(device_id.to_string(), code.public_key);
        Ok(vec![pairing, admission])
    }

    /// Removes a device: starts the next account epoch, wraps it to every
    /// other admitted device, chains the old account key to the new one and
    /// re-admits the remaining devices. Returns the wraps to store.
    pub fn remove_device(
        &mut self,
        device_id: &str,
        rng: &mut impl CryptoRng,
    ) -> Result<Vec<KeyWrap>> {
        if device_id == self.device_id {
            return Err(SealError::Keyring {
                reason: "a device cannot remove itself; remove it from another device".into(),
            });
        }
        let mut remaining = self.devices();
        if remaining.remove(device_id).is_none() {
            return Err(SealError::Keyring {
                reason: format!(
                    "device {device_id:?} is not admitted in epoch {}",
                    self.account_epoch()
                ),
            });
        }
        self.rotate(remaining, rng)
    }

    /// Rotates the account key without removing anyone: the next epoch for
    /// the devices admitted now. Returns the wraps to store.
    pub fn rotate_account_key(&mut self, rng: &mut impl CryptoRng) -> Result<Vec<KeyWrap>> {
        self.not_forked()?;
        let remaining = self.devices();
        self.rotate(remaining, rng)
    }

    /// Resolves a [`Fork`]: starts the next epoch for the devices every
    /// rotation of the current one admitted. Returns the wraps to store.
    pub fn resolve_fork(&mut self, rng: &mut impl CryptoRng) -> Result<Vec<KeyWrap>> {
        if self.fork().is_none() {
            return Err(SealError::Keyring {
                reason: format!("account epoch {} is not forked", self.account_epoch()),
            });
        }
        let remaining = self.devices();
        if !remaining.contains_key(&self.device_id) {
            return Err(SealError::Keyring {
                reason: "this device is not kept by every rotation of the epoch; resolve it on one that is".into(),
            });
        }
        self.rotate(remaining, rng)
    }

    /// Starts the next epoch for `remaining` (this device among them).
    fn rotate(
        &mut self,
        remaining: BTreeMap<String, [u8; KEY_LEN]>,
        rng: &mut impl CryptoRng,
    ) -> Result<Vec<KeyWrap>> {
        let prev = self.current_account().clone();
        let epoch = prev.epoch + 1;
        let next = new_account_key(epoch, rng);
        let rotation_psk = Psk::account(prev.pair.secret_bytes(), &prev.key_id);
        let mut wraps = Vec::new();
        for (device, public) in &remaining {
            wraps.push(seal_wrap(
                &self.did,
                &next.key_id,
                epoch,
                Recipient::Device {
                    device: device.clone(),
                },
                public,
                &rotation_psk,
                next.pair.secret_bytes(),
                now_datetime(),
                rng,
            )?);
        }
        let chain_psk = Psk::account(next.pair.secret_bytes(), &next.key_id);
        let olds: Vec<AccountKey> = self.accounts_at(prev.epoch).cloned().collect();
        for old in olds {
            wraps.push(seal_wrap(
                &self.did,
                &old.key_id,
                old.epoch,
                Recipient::Account {
                    key_id: next.key_id.clone(),
                    epoch,
                },
                next.pair.public(),
                &chain_psk,
                old.pair.secret_bytes(),
                now_datetime(),
                rng,
            )?);
        }
        for (device, public) in &remaining {
            wraps.push(self.admission(&next, device, public, rng)?);
        }
        self.roster.insert((epoch, next.key_id.clone()), remaining);
        self.accounts.insert((epoch, next.key_id.clone()), next);
        Ok(wraps)
    }

    /// The chat key to seal a record of chat `chat` with: the chat's key of
    /// the current account epoch, made (and wrapped to the account key) if
    /// there is none yet. Returns the wrap to store when a key was made.
    pub fn chat_key_for_seal(
        &mut self,
        chat: &str,
        rng: &mut impl CryptoRng,
    ) -> Result<(ChatKey, Option<KeyWrap>)> {
        self.not_forked()?;
        let account = self.current_account().clone();
        if let Some(entry) = self
            .chat_keys
            .values()
            .find(|e| e.chat == chat && e.epoch == account.epoch)
        {
            return Ok((entry.key.clone(), None));
        }
        let key_id = format!("chat:{chat}:{}:{}", account.epoch, random_hex(rng, 8));
        if key_id.len() > 128 {
            return Err(SealError::Keyring {
                reason: format!("chat rkey {chat:?} is too long for a keyId"),
            });
        }
        let key = ChatKey::generate(key_id.clone(), rng);
        let wrap = seal_wrap(
            &self.did,
            &key_id,
            account.epoch,
            Recipient::Account {
                key_id: account.key_id.clone(),
                epoch: account.epoch,
            },
            account.pair.public(),
            &Psk::account(account.pair.secret_bytes(), &account.key_id),
            key.secret(),
            now_datetime(),
            rng,
        )?;
        self.chat_keys.insert(
            key_id,
            ChatEntry {
                key: key.clone(),
                chat: chat.to_string(),
                epoch: account.epoch,
            },
        );
        Ok((key, Some(wrap)))
    }

    /// The keyIds of every chat key held.
    pub fn chat_key_ids(&self) -> BTreeSet<String> {
        self.chat_keys.keys().cloned().collect()
    }
}

impl KeyLookup for Keyring {
    fn chat_key(&self, key_id: &str) -> Option<&ChatKey> {
        self.chat_keys.get(key_id).map(|e| &e.key)
    }
}

/// Two rotations of one epoch with different rosters (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fork {
    /// The forked epoch.
    pub epoch: u64,
    /// The keys of that epoch, one per rotation.
    pub key_ids: Vec<String>,
    /// Devices some rotation kept and another did not.
    pub left_out: Vec<String>,
}

enum Step {
    Done,
    Rejected(SealError),
    Ignored,
    Later,
}

fn new_account_key(epoch: u64, rng: &mut impl CryptoRng) -> AccountKey {
    let key_id = format!("account:{epoch}:{}", random_hex(rng, 8));
    AccountKey {
        key_id,
        epoch,
        pair: X25519Pair::generate(rng),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_ids_parse() {
        assert_eq!(
            parse_key_id("account:3:00ff"),
            Some(KeyKind::Account { epoch: 3 })
        );
        assert_eq!(
            parse_key_id("chat:3lbq:x:1:ab"),
            Some(KeyKind::Chat {
                chat: "3lbq:x".into(),
                epoch: 1
            })
        );
        assert_eq!(
            parse_key_id("device:3lbqwz4uv7c22"),
            Some(KeyKind::Admission {
                device: "3lbqwz4uv7c22".into()
            })
        );
        assert_eq!(parse_key_id("ak-0"), None);
        assert_eq!(parse_key_id("chat::1:ab"), None);
    }

    const DID: &str = "did:plc:ewvi7nxzyoun6zhxrhs64oiz";

    /// Devices `a` (first) and the others paired by `a`, each keyring
    /// having absorbed every wrap made so far.
    fn account(others: &[&str]) -> (BTreeMap<String, Keyring>, Vec<KeyWrap>) {
        let mut rng = super::super::os_rng();
        let (mut a, mut wraps) =
            Keyring::create(DID, "a", DeviceKey::generate(&mut rng), &mut rng).unwrap();
        let mut pending = Vec::new();
        for id in others {
            let key = DeviceKey::generate(&mut rng);
            let request = pair_request(&key, &mut rng);
            wraps.extend(a.approve(request.code(), id, &mut rng).unwrap());
            pending.push((id.to_string(), key, request));
        }
        let mut rings = BTreeMap::new();
        for (id, key, request) in pending {
            let (ring, _) = Keyring::join(DID, &id, key, &request, &wraps).unwrap();
            rings.insert(id, ring);
        }
        rings.insert("a".into(), a);
        (rings, wraps)
    }

    fn absorb_all(rings: &mut BTreeMap<String, Keyring>, wraps: &[KeyWrap]) {
        for r in rings.values_mut() {
            r.absorb(wraps);
        }
    }

    #[test]
    fn two_removals_at_once_are_a_fork_resolved_for_the_devices_both_kept() {
        let mut rng = super::super::os_rng();
        let (mut rings, mut wraps) = account(&["b", "c", "d"]);
        // a removes c while b removes d, before either sees the other's.
        let ra = rings
            .get_mut("a")
            .unwrap()
            .remove_device("c", &mut rng)
            .unwrap();
        let rb = rings
            .get_mut("b")
            .unwrap()
            .remove_device("d", &mut rng)
            .unwrap();
        wraps.extend(ra);
        wraps.extend(rb);
        absorb_all(&mut rings, &wraps);
        for id in ["a", "b"] {
            let f = rings[id].fork().expect("a fork");
            assert_eq!(
                (f.epoch, f.left_out.clone()),
                (1, vec!["c".to_string(), "d".to_string()]),
                "{id}"
            );
            let e = rings
                .get_mut(id)
                .unwrap()
                .chat_key_for_seal("3lbqzcx2ss222", &mut rng)
                .unwrap_err();
            assert!(
                matches!(
                    e,
                    SealError::MembershipFork {
                        epoch: 1,
                        next: 2,
                        ..
                    }
                ),
                "{e}"
            );
        }
        // d, removed by b, holds a's epoch-1 key: it must not get the next.
        assert!(rings["d"].account_keys().any(|k| k.epoch == 1));
        let resolved = rings.get_mut("a").unwrap().resolve_fork(&mut rng).unwrap();
        wraps.extend(resolved);
        absorb_all(&mut rings, &wraps);
        for id in ["a", "b"] {
            assert_eq!(rings[id].account_epoch(), 2, "{id}");
            assert!(rings[id].fork().is_none(), "{id}");
            assert_eq!(rings[id].devices().keys().collect::<Vec<_>>(), ["a", "b"]);
        }
        for id in ["c", "d"] {
            assert!(
                !rings[id].account_keys().any(|k| k.epoch == 2),
                "{id} got the resolved epoch"
            );
        }
        // The next chat key is made in epoch 2, which c and d never hold.
        let (key, wrap) = rings
            .get_mut("a")
            .unwrap()
            .chat_key_for_seal("3lbqzcx2ss222", &mut rng)
            .unwrap();
        let wrap = wrap.unwrap();
        assert_eq!(wrap.epoch, 2);
        for id in ["c", "d"] {
            rings
                .get_mut(id)
                .unwrap()
                .absorb(std::slice::from_ref(&wrap));
            assert!(
                rings[id].chat_key(key.key_id()).is_none(),
                "{id} opened the new chat key"
            );
        }
        assert!(
            rings
                .get_mut("b")
                .unwrap()
                .absorb(std::slice::from_ref(&wrap))
                .chat_keys
                == 1
        );
    }

    #[test]
    fn a_removed_device_forging_a_rotation_is_left_out_and_a_bare_wrap_never_becomes_current() {
        let mut rng = super::super::os_rng();
        let (mut rings, mut wraps) = account(&["b", "c"]);
        let removal = rings
            .get_mut("a")
            .unwrap()
            .remove_device("c", &mut rng)
            .unwrap();
        wraps.extend(removal);
        absorb_all(&mut rings, &wraps);
        let current = rings["a"].current_account().key_id.clone();
        // c still holds epoch 0 and forges an epoch-1 rotation keeping
        // everyone. First only the wraps to the others, no admissions.
        let mut stale = account_stale(&rings["c"]);
        let forged = stale.rotate_account_key(&mut rng).unwrap();
        let bare: Vec<KeyWrap> = forged
            .iter()
            .filter(|w| matches!(w.recipient, Recipient::Device { .. }))
            .cloned()
            .collect();
        absorb_all(&mut rings, &bare);
        assert!(
            rings["a"].account_keys().filter(|k| k.epoch == 1).count() == 2,
            "the forged key opens"
        );
        assert_eq!(
            rings["a"].current_account().key_id,
            current,
            "a bare forged key never becomes current"
        );
        assert!(rings["a"].fork().is_none());
        // With its admissions: a fork whose resolution leaves c out.
        absorb_all(&mut rings, &forged);
        let f = rings["a"].fork().expect("a fork");
        assert_eq!(f.left_out, ["c"]);
        wraps.extend(forged);
        let resolved = rings.get_mut("a").unwrap().resolve_fork(&mut rng).unwrap();
        wraps.extend(resolved);
        absorb_all(&mut rings, &wraps);
        assert_eq!(rings["b"].account_epoch(), 2);
        assert!(!rings["c"].account_keys().any(|k| k.epoch == 2));
        assert_eq!(rings["a"].devices().keys().collect::<Vec<_>>(), ["a", "b"]);
    }

    /// `c`'s keyring as it was before it learnt of its removal.
    fn account_stale(c: &Keyring) -> Keyring {
        let mut stale = c.clone();
        stale.accounts.retain(|(e, _), _| *e == 0);
        stale.roster.retain(|(e, _), _| *e == 0);
        stale
    }

    #[test]
    fn datetime_is_valid() {
        let now = now_datetime();
        assert!(
            gelstore_codegen::syntax::check_datetime(&now).is_ok(),
            "{now}"
        );
        assert!(now.starts_with("20"), "{now}");
    }
}
