//! A device's keyring: its device key, the account key epochs it holds, the
//! chat keys, and the verified membership log ([`super::membership`]);
//! pairing, approval, removal (rotation) and chat keys, producing and
//! absorbing `keyWrap` and `membership` records (see [`super::wrap`] for the
//! wraps' cryptography).
//!
//! **Key ids.** `account:<epoch>:<16 hex>` for an account key,
//! `chat:<chat rkey>:<epoch>:<16 hex>` for a chat key (its epoch is the
//! account epoch it was made in). The random part keeps ids apart when two
//! devices make a key at once.
//!
//! **Pairing.** The new device makes a [`PairingRequest`] and shows its
//! [`PairingCode`] (its public key and a 10-byte secret). An admitted device,
//! given the code, [`Keyring::approve`]s: it signs a membership change that
//! admits the new device, and wraps the current account key to it in HPKE
//! PSK mode with a PSK derived from the secret, bound to that change's CID.
//! The new device [`Keyring::join`]s with the records: it accepts the
//! account key only from a wrap made with its pairing secret, and trusts
//! the change that wrap names, hence the log's history by its hashes.
//!
//! **Rotation.** [`Keyring::remove_device`] signs a change that starts
//! account epoch `N+1` for the remaining devices, wraps the new key to each
//! (PSK: the epoch-`N` account key, which a PDS does not hold) and chains
//! the old key to the new one (so devices paired later can read history);
//! from then on [`Keyring::chat_key_for_seal`] hands out chat keys of epoch
//! `N+1`. The removed device keeps what it could already read, and nothing
//! sealed after: an account key counts only if a verified change names it
//! with its public key, and a removed device can sign no change that
//! follows its removal.
//!
//! **Forks.** Two changes that follow the same one (removals made on two
//! devices before either synced, or a change a removed device signed from
//! before its removal) are settled by the log's rules where one head's key
//! is held only by devices every head kept; otherwise the keyring seals
//! nothing new ([`SealError::MembershipFork`]) until
//! [`Keyring::resolve_fork`] (or a removal) starts the next epoch for the
//! devices every head kept, so every removal holds.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use data_encoding::BASE32_NOPAD;
use rand_core::CryptoRng;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use super::error::{Result, SealError};
use super::keys::{AccountKey, ChatKey, DeviceKey, KEY_LEN, KeyLookup, X25519Pair, random_hex};
use super::membership::{Change, Log, Member, Roster, SignedChange, Standing};
use super::wrap::{KeyWrap, Psk, Recipient, open_wrap, seal_wrap};
use gelstore_model::Cid;
use gelstore_model::now_datetime;

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
    /// The proof a device publishes beside its signing key `did_key`, made
    /// with this code's secret (see [`super::membership::signing_key_proof`]).
    pub fn signing_key_proof(&self, did_key: &str) -> [u8; 32] {
        super::membership::signing_key_proof(self.secret.as_ref(), &self.public_key, did_key)
    }

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
    None
}

#[derive(Clone)]
struct ChatEntry {
    key: ChatKey,
    chat: String,
    /// The keyId of the account key it is wrapped to: a chat key is reused
    /// only under that key (two keys of one epoch can be held, one of them
    /// made by a device another change removed).
    account: String,
}

/// The key records a keyring is built from and that its operations make:
/// key wraps and membership changes.
#[derive(Clone, Debug, Default)]
pub struct KeySet {
    /// Key wraps.
    pub wraps: Vec<KeyWrap>,
    /// Membership changes.
    pub changes: Vec<SignedChange>,
}

impl KeySet {
    /// Adds `other`'s records.
    pub fn extend(&mut self, other: KeySet) {
        self.wraps.extend(other.wraps);
        self.changes.extend(other.changes);
    }
}

/// What [`Keyring::absorb`] learned and refused.
#[derive(Debug, Default)]
pub struct AbsorbReport {
    /// Account key epochs newly held.
    pub accounts: usize,
    /// Chat keys newly held.
    pub chat_keys: usize,
    /// Membership changes newly verified.
    pub changes: usize,
    /// Wraps addressed to a key this keyring holds that it refused, with why
    /// (a forged or damaged wrap shows up here).
    pub rejected: Vec<(String, SealError)>,
    /// Membership changes that did not verify, as `CID: why`.
    pub refused_changes: Vec<String>,
}

/// A device's keys (see the module docs).
#[derive(Clone)]
pub struct Keyring {
    did: String,
    device_id: String,
    device: DeviceKey,
    accounts: BTreeMap<(u64, String), AccountKey>,
    chat_keys: BTreeMap<String, ChatEntry>,
    /// Who holds which account key, verified.
    log: Log,
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
            .field("heads", &self.log.heads())
            .finish_non_exhaustive()
    }
}

impl Keyring {
    /// The first device of an account: makes account key epoch 0 and the
    /// first membership change, admitting itself. `code` is its own pairing
    /// code: it wraps the account key to itself with it, so it re-opens the
    /// key from the records like any other device. Returns the keyring and
    /// the records to store.
    pub fn create(
        did: &str,
        device_id: &str,
        device: DeviceKey,
        code: &PairingCode,
        rng: &mut impl CryptoRng,
    ) -> Result<(Keyring, KeySet)> {
        if code.public_key != device.public_key() {
            return Err(SealError::Keyring {
                reason: "the pairing code is for another device key".into(),
            });
        }
        let account = new_account_key(0, rng);
        let signing = device.signing_key();
        let mut roster = Roster::new();
        roster.insert(
            device_id.to_string(),
            Member {
                public_key: device.public_key(),
                signing_key: Some(signing.public_key().to_did_key()),
            },
        );
        let genesis = Change {
            roster,
            signer: device_id.to_string(),
            ..Log::default().next_change(0, &account.key_id, *account.pair.public())
        }
        .sign(did, &signing)?;
        let log = Log::new(did, genesis.clone())?;
        let ring = Keyring::holding(did, device_id, device, account.clone(), log);
        let pairing = ring.pairing_wrap(&account, code, device_id, &genesis.cid, rng)?;
        Ok((
            ring,
            KeySet {
                wraps: vec![pairing],
                changes: vec![genesis],
            },
        ))
    }

    /// A keyring admitted with `account`, holding only that key.
    fn holding(
        did: &str,
        device_id: &str,
        device: DeviceKey,
        account: AccountKey,
        log: Log,
    ) -> Keyring {
        let mut accounts = BTreeMap::new();
        let admitted_with = account.key_id.clone();
        accounts.insert((account.epoch, account.key_id.clone()), account);
        Keyring {
            did: did.to_string(),
            device_id: device_id.to_string(),
            device,
            accounts,
            chat_keys: BTreeMap::new(),
            log,
            admitted_with,
        }
    }

    /// A new device joins with the records it found: it takes the account
    /// key only from a wrap addressed to `device_id` that opens with its
    /// pairing secret, bound to a membership change that admits it; that
    /// change anchors the log. Then it absorbs the rest (older epochs, chat
    /// keys, later changes).
    pub fn join(
        did: &str,
        device_id: &str,
        device: DeviceKey,
        request: &PairingRequest,
        records: &KeySet,
    ) -> Result<(Keyring, AbsorbReport)> {
        Keyring::join_pinned(did, device_id, device, request, None, &[], records)
    }

    /// Rebuilds the keyring of a device that joined before, from the records
    /// and what it keeps locally: like [`join`](Self::join), but only the
    /// pairing wrap of `account_key_id` (the key it was admitted with, see
    /// [`admitted_with`](Self::admitted_with)) is accepted, so a pairing wrap
    /// planted later (by someone who saw the code) changes nothing, and
    /// every change of `known_heads` (see [`heads`](Self::heads)) must still
    /// be there and verify, so a log that went backwards is refused.
    pub fn rejoin(
        did: &str,
        device_id: &str,
        device: DeviceKey,
        request: &PairingRequest,
        account_key_id: &str,
        known_heads: &[Cid],
        records: &KeySet,
    ) -> Result<(Keyring, AbsorbReport)> {
        Keyring::join_pinned(
            did,
            device_id,
            device,
            request,
            Some(account_key_id),
            known_heads,
            records,
        )
    }

    fn join_pinned(
        did: &str,
        device_id: &str,
        device: DeviceKey,
        request: &PairingRequest,
        pin: Option<&str>,
        known_heads: &[Cid],
        records: &KeySet,
    ) -> Result<(Keyring, AbsorbReport)> {
        if request.code.public_key != device.public_key() {
            return Err(SealError::Keyring {
                reason: "the pairing request was made for another device key".into(),
            });
        }
        let me = device.public_key();
        // The changes that admit this device with its key: one of them is
        // the pairing wrap's.
        let admissions: Vec<&SignedChange> = records
            .changes
            .iter()
            .filter(|c| {
                c.change
                    .roster
                    .get(device_id)
                    .is_some_and(|m| m.public_key == me)
            })
            .collect();
        let psk = Psk::pairing(request.code.secret.as_ref(), &request.code.public_key);
        let mut last_error = None;
        let mut found = None;
        'wraps: for wrap in &records.wraps {
            let for_me =
                matches!(&wrap.recipient, Recipient::Device { device } if device == device_id);
            let Some(KeyKind::Account { epoch }) = parse_key_id(&wrap.key_id) else {
                continue;
            };
            if !for_me || epoch != wrap.epoch || pin.is_some_and(|k| k != wrap.key_id) {
                continue;
            }
            for change in admissions
                .iter()
                .filter(|c| c.change.account_key_id == wrap.key_id)
            {
                match open_wrap(did, wrap, device.0.secret_bytes(), &psk, Some(&change.cid)) {
                    Ok(secret) => {
                        let pair = X25519Pair::from_bytes(*secret);
                        if *pair.public() != change.change.account_public_key {
                            last_error = Some(SealError::MembershipLog {
                                reason: format!(
                                    "the pairing wrap carries another key than change {} names",
                                    change.cid
                                ),
                            });
                            continue;
                        }
                        found = Some((
                            AccountKey {
                                key_id: wrap.key_id.clone(),
                                epoch: wrap.epoch,
                                pair,
                            },
                            change.cid,
                        ));
                        break 'wraps;
                    }
                    Err(e) => last_error = Some(e),
                }
            }
            if last_error.is_none() {
                last_error = Some(SealError::MembershipLog {
                    reason: format!(
                        "the pairing wrap of {:?} names no membership change that admits this device",
                        wrap.key_id
                    ),
                });
            }
        }
        let (account, anchor) = match (found, last_error) {
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
        let log = Log::verify(did, &records.changes, &anchor, known_heads)?;
        let mut ring = Keyring::holding(did, device_id, device, account, log);
        let mut report = ring.absorb(records);
        report.refused_changes = ring.log.refused().to_vec();
        Ok((ring, report))
    }

    /// Learns what it can from `records` (in any order): membership changes
    /// that follow verified ones and keep the rules, then (repeating until
    /// nothing new opens) rotations to this device, older account keys
    /// chained to newer ones, and chat keys wrapped to account keys it
    /// holds. An account key counts only if a verified change names it with
    /// the public key the wrap carries. Wraps for other devices or for keys
    /// it does not hold are skipped; wraps addressed to its keys that do not
    /// open or that no change names are reported.
    pub fn absorb(&mut self, records: &KeySet) -> AbsorbReport {
        let mut report = AbsorbReport::default();
        let mut pending: Vec<&SignedChange> = records
            .changes
            .iter()
            .filter(|c| self.log.get(&c.cid).is_none())
            .collect();
        loop {
            let before = pending.len();
            let mut errors = Vec::new();
            pending.retain(|c| {
                if c.change.prev.iter().any(|p| self.log.get(p).is_none()) {
                    return true; // what it follows may come later in the list
                }
                match self.log.accept((*c).clone()) {
                    Ok(()) => report.changes += 1,
                    Err(e) => errors.push(format!("{}: {e}", c.cid)),
                }
                false
            });
            report.refused_changes.extend(errors);
            if pending.len() == before {
                break;
            }
        }
        report.refused_changes.extend(
            pending
                .iter()
                .map(|c| format!("{}: it follows a change that is missing or refused", c.cid)),
        );

        let wraps = &records.wraps;
        let mut done = vec![false; wraps.len()];
        let mut retry: Vec<Option<SealError>> = vec![None; wraps.len()];
        loop {
            let mut progress = false;
            for (i, wrap) in wraps.iter().enumerate() {
                if done[i] {
                    continue;
                }
                match self.try_absorb(wrap, &mut report) {
                    Step::Done => {
                        done[i] = true;
                        retry[i] = None;
                        progress = true;
                    }
                    Step::Rejected(e) => {
                        done[i] = true;
                        report.rejected.push((wrap.key_id.clone(), e));
                    }
                    Step::Ignored => done[i] = true,
                    Step::Later => {}
                    Step::Retry(e) => retry[i] = Some(e),
                }
            }
            if !progress {
                break;
            }
        }
        for (i, e) in retry.into_iter().enumerate() {
            if let (false, Some(e)) = (done[i], e) {
                report.rejected.push((wraps[i].key_id.clone(), e));
            }
        }
        report
    }

    /// Takes the account key `secret` of `wrap` if the log names its keyId
    /// with that public key.
    fn take_account(&mut self, wrap: &KeyWrap, secret: &[u8; KEY_LEN]) -> Step {
        let pair = X25519Pair::from_bytes(*secret);
        match self.log.account_public_key(&wrap.key_id) {
            Some(named) if named == pair.public() => {
                self.accounts.insert(
                    (wrap.epoch, wrap.key_id.clone()),
                    AccountKey {
                        key_id: wrap.key_id.clone(),
                        epoch: wrap.epoch,
                        pair,
                    },
                );
                Step::Done
            }
            Some(_) => Step::Rejected(SealError::MembershipLog {
                reason: format!(
                    "a wrap of {:?} carries another key than the membership log names",
                    wrap.key_id
                ),
            }),
            None => Step::Rejected(SealError::MembershipLog {
                reason: format!(
                    "no verified membership change puts {:?} in force",
                    wrap.key_id
                ),
            }),
        }
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
                    match open_wrap(&self.did, wrap, self.device.0.secret_bytes(), &psk, None) {
                        Ok(secret) => {
                            let step = self.take_account(wrap, &secret);
                            if matches!(step, Step::Done) {
                                report.accounts += 1;
                            }
                            return step;
                        }
                        Err(e) => error = Some(e),
                    }
                }
                // The key of the epoch before that it was made with may
                // still come (another wrap in this batch): try again, and
                // report it only if nothing else opens it.
                Step::Retry(error.expect("at least one previous key was tried"))
            }
            (Recipient::Device { .. }, _) => Step::Ignored,
            (Recipient::Account { key_id, epoch }, kind) => {
                let Some(holder) = self.accounts.get(&(*epoch, key_id.clone())).cloned() else {
                    return Step::Later;
                };
                let consistent = match &kind {
                    KeyKind::Account { epoch: e } => *e == wrap.epoch && wrap.epoch < *epoch,
                    KeyKind::Chat { epoch: e, .. } => *e == wrap.epoch && wrap.epoch == *epoch,
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
                };
                if already {
                    return Step::Ignored;
                }
                let psk = Psk::account(holder.pair.secret_bytes(), &holder.key_id);
                let secret =
                    match open_wrap(&self.did, wrap, holder.pair.secret_bytes(), &psk, None) {
                        Ok(s) => s,
                        Err(e) => return Step::Rejected(e),
                    };
                match kind {
                    KeyKind::Account { .. } => {
                        let step = self.take_account(wrap, &secret);
                        if matches!(step, Step::Done) {
                            report.accounts += 1;
                        }
                        step
                    }
                    KeyKind::Chat { chat, .. } => {
                        self.chat_keys.insert(
                            wrap.key_id.clone(),
                            ChatEntry {
                                key: ChatKey::new(wrap.key_id.clone(), *secret),
                                chat,
                                account: key_id.clone(),
                            },
                        );
                        report.chat_keys += 1;
                        Step::Done
                    }
                }
            }
        }
    }

    fn accounts_at(&self, epoch: u64) -> impl Iterator<Item = &AccountKey> {
        self.accounts
            .range((epoch, String::new())..)
            .take_while(move |((e, _), _)| *e == epoch)
            .map(|(_, k)| k)
    }

    fn held(&self, key_id: &str) -> Option<&AccountKey> {
        let epoch = match parse_key_id(key_id) {
            Some(KeyKind::Account { epoch }) => epoch,
            _ => return None,
        };
        self.accounts.get(&(epoch, key_id.to_string()))
    }

    /// The account key new seals use: the one the membership log puts in
    /// force, if this device is admitted under it and holds it.
    pub fn sealing_account(&self) -> Result<&AccountKey> {
        match self.log.standing() {
            Standing::Settled {
                epoch,
                key_id,
                roster,
                ..
            } => {
                if roster.get(&self.device_id).map(|m| m.public_key)
                    != Some(self.device.public_key())
                {
                    return Err(SealError::NotAdmitted {
                        epoch: *epoch,
                        removed: self.log.removed(&self.device_id),
                    });
                }
                self.held(key_id)
                    .ok_or_else(|| SealError::AccountKeyPending {
                        key_id: key_id.clone(),
                        epoch: *epoch,
                    })
            }
            Standing::Forked {
                epoch, left_out, ..
            } => Err(SealError::MembershipFork {
                epoch: *epoch,
                next: epoch + 1,
                left_out: left_out.clone(),
            }),
        }
    }

    /// The account key this device reads and seals with as far as it can:
    /// the one in force if it holds it, else the newest it holds. For
    /// sealing, use [`sealing_account`](Self::sealing_account), which
    /// refuses when this device may not seal.
    pub fn current_account(&self) -> &AccountKey {
        if let Ok(k) = self.sealing_account() {
            return k;
        }
        self.accounts
            .values()
            .next_back()
            .expect("a keyring always holds an account key")
    }

    /// The epoch in force by the membership log (the highest one of a
    /// fork).
    pub fn account_epoch(&self) -> u64 {
        self.log.standing().epoch()
    }

    /// The epoch of [`current_account`](Self::current_account): the epoch
    /// in force if this device holds its key, else the newest it holds
    /// (below the one in force on a removed device).
    pub fn held_epoch(&self) -> u64 {
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

    /// The verified membership log.
    pub fn log(&self) -> &Log {
        &self.log
    }

    /// The newest verified membership changes (keep them to
    /// [`rejoin`](Self::rejoin) later).
    pub fn heads(&self) -> Vec<Cid> {
        self.log.heads()
    }

    /// The devices admitted now, by record key: during a [`Fork`], only
    /// those every head kept.
    pub fn devices(&self) -> BTreeMap<String, [u8; KEY_LEN]> {
        public_keys(self.log.standing().roster())
    }

    /// The devices admitted in account epoch `epoch` by any change, by
    /// record key.
    pub fn devices_at(&self, epoch: u64) -> BTreeMap<String, [u8; KEY_LEN]> {
        public_keys(&self.log.roster_at(epoch))
    }

    /// The heads of the log that cannot be reconciled without a rotation,
    /// if they cannot (see the module docs).
    pub fn fork(&self) -> Option<Fork> {
        match self.log.standing() {
            Standing::Settled { .. } => None,
            Standing::Forked {
                epoch,
                key_ids,
                left_out,
                ..
            } => Some(Fork {
                epoch: *epoch,
                key_ids: key_ids.clone(),
                left_out: left_out.clone(),
            }),
        }
    }

    /// The keyId of the account key this device was admitted with: made by
    /// [`create`](Self::create), or opened from its pairing wrap by
    /// [`join`](Self::join). Keep it to [`rejoin`](Self::rejoin) later.
    pub fn admitted_with(&self) -> &str {
        &self.admitted_with
    }

    /// The roster entry this device signs with, refusing if it has none.
    fn signer(&self) -> Result<gelstore_crypto::SigningKey> {
        let key = self.device.signing_key();
        let did_key = key.public_key().to_did_key();
        let standing = self.log.standing();
        let entry = standing.roster().get(&self.device_id);
        if entry.and_then(|m| m.signing_key.as_deref()) != Some(did_key.as_str()) {
            return Err(SealError::Keyring {
                reason: "this device has no signing key in the membership roster (it joined from an exported copy); change membership on a device that paired through the account's server".into(),
            });
        }
        Ok(key)
    }

    /// Signs `change` as this device and adds it to the log.
    fn commit_change(&mut self, mut change: Change) -> Result<SignedChange> {
        let key = self.signer()?;
        change.signer = self.device_id.clone();
        let signed = change.sign(&self.did, &key)?;
        self.log.accept(signed.clone())?;
        Ok(signed)
    }

    fn pairing_wrap(
        &self,
        account: &AccountKey,
        code: &PairingCode,
        device_id: &str,
        change: &Cid,
        rng: &mut impl CryptoRng,
    ) -> Result<KeyWrap> {
        seal_wrap(
            &self.did,
            &account.key_id,
            account.epoch,
            Recipient::Device {
                device: device_id.to_string(),
            },
            &code.public_key,
            &Psk::pairing(code.secret.as_ref(), &code.public_key),
            account.pair.secret_bytes(),
            now_datetime(),
            Some(change),
            rng,
        )
    }

    /// Approves a new device from its pairing code: a membership change
    /// admitting it (with `signing_key`, the did:key its device record
    /// proved with the code, if any), and the current account key wrapped to
    /// it with the pairing PSK, bound to that change. `device_id` is the
    /// record key of its `device` record (whose `publicKey` must be the one
    /// in the code). Returns the records to store.
    pub fn approve(
        &mut self,
        code: &PairingCode,
        device_id: &str,
        signing_key: Option<String>,
        rng: &mut impl CryptoRng,
    ) -> Result<KeySet> {
        let account = self.sealing_account()?.clone();
        let Standing::Settled { roster, .. } = self.log.standing() else {
            unreachable!("sealing_account refuses a fork");
        };
        let mut roster = roster.clone();
        if let Some(known) = roster.get(device_id)
            && known.public_key != code.public_key
        {
            return Err(SealError::Keyring {
                reason: format!("device {device_id:?} is already admitted with another public key"),
            });
        }
        roster.insert(
            device_id.to_string(),
            Member {
                public_key: code.public_key,
                signing_key,
            },
        );
        let change = Change {
            roster,
            ..self
                .log
                .next_change(account.epoch, &account.key_id, *account.pair.public())
        };
        let signed = self.commit_change(change)?;
        let pairing = self.pairing_wrap(&account, code, device_id, &signed.cid, rng)?;
        Ok(KeySet {
            wraps: vec![pairing],
            changes: vec![signed],
        })
    }

    /// Removes a device: starts the next account epoch, wraps it to every
    /// other admitted device and chains the old account key to the new one.
    /// During a fork it also resolves it (the roster is what every head
    /// kept, less `device_id`). Returns the records to store.
    pub fn remove_device(&mut self, device_id: &str, rng: &mut impl CryptoRng) -> Result<KeySet> {
        if device_id == self.device_id {
            return Err(SealError::Keyring {
                reason: "a device cannot remove itself; remove it from another device".into(),
            });
        }
        let mut remaining = self.log.standing().roster().clone();
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
    /// the devices admitted now. Returns the records to store.
    pub fn rotate_account_key(&mut self, rng: &mut impl CryptoRng) -> Result<KeySet> {
        self.sealing_account()?;
        let remaining = self.log.standing().roster().clone();
        self.rotate(remaining, rng)
    }

    /// Resolves a [`Fork`]: starts the next epoch for the devices every
    /// head kept. Returns the records to store.
    pub fn resolve_fork(&mut self, rng: &mut impl CryptoRng) -> Result<KeySet> {
        if self.fork().is_none() {
            return Err(SealError::Keyring {
                reason: format!("account epoch {} is not forked", self.account_epoch()),
            });
        }
        let remaining = self.log.standing().roster().clone();
        if !remaining.contains_key(&self.device_id) {
            return Err(SealError::Keyring {
                reason: "this device is not kept by every head of the membership log; resolve it on one that is".into(),
            });
        }
        self.rotate(remaining, rng)
    }

    /// Starts the next epoch for `remaining` (this device among them): a
    /// rotation change that follows every head, the new key wrapped to each
    /// device (PSK: a key of the epoch before, which every kept device
    /// holds) and the older keys chained to it.
    fn rotate(&mut self, remaining: Roster, rng: &mut impl CryptoRng) -> Result<KeySet> {
        let live: Vec<Change> = self.log.live_heads().into_iter().cloned().collect();
        let epoch = live.iter().map(|c| c.epoch).max().unwrap_or(0) + 1;
        // The PSK: the key of a head of the epoch before, which every kept
        // device holds (each is in every standing head's roster).
        let prev = live
            .iter()
            .filter(|c| c.epoch == epoch - 1)
            .find_map(|c| self.held(&c.account_key_id))
            .cloned()
            .ok_or_else(|| SealError::AccountKeyPending {
                key_id: live
                    .iter()
                    .map(|c| c.account_key_id.clone())
                    .next()
                    .unwrap_or_default(),
                epoch: epoch - 1,
            })?;
        let next = new_account_key(epoch, rng);
        let union: BTreeSet<String> = live.iter().flat_map(|c| c.roster.keys().cloned()).collect();
        // The keys of the heads this rotation follows, chained to the new
        // one (so devices paired later read what was sealed under them).
        let mut olds: Vec<AccountKey> = live
            .iter()
            .filter_map(|c| self.held(&c.account_key_id).cloned())
            .collect();
        olds.sort_by(|a, b| a.key_id.cmp(&b.key_id));
        olds.dedup_by(|a, b| a.key_id == b.key_id);
        let change = Change {
            removed: union
                .into_iter()
                .filter(|d| !remaining.contains_key(d))
                .collect(),
            roster: remaining.clone(),
            ..self
                .log
                .next_change(epoch, &next.key_id, *next.pair.public())
        };
        let signed = self.commit_change(change)?;
        let rotation_psk = Psk::account(prev.pair.secret_bytes(), &prev.key_id);
        let mut wraps = Vec::new();
        for (device, member) in &remaining {
            wraps.push(seal_wrap(
                &self.did,
                &next.key_id,
                epoch,
                Recipient::Device {
                    device: device.clone(),
                },
                &member.public_key,
                &rotation_psk,
                next.pair.secret_bytes(),
                now_datetime(),
                None,
                rng,
            )?);
        }
        let chain_psk = Psk::account(next.pair.secret_bytes(), &next.key_id);
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
                None,
                rng,
            )?);
        }
        self.accounts.insert((epoch, next.key_id.clone()), next);
        Ok(KeySet {
            wraps,
            changes: vec![signed],
        })
    }

    /// The chat key to seal a record of chat `chat` with: the chat's key of
    /// the current account epoch, made (and wrapped to the account key) if
    /// there is none yet. Returns the wrap to store when a key was made.
    pub fn chat_key_for_seal(
        &mut self,
        chat: &str,
        rng: &mut impl CryptoRng,
    ) -> Result<(ChatKey, Option<KeyWrap>)> {
        let account = self.sealing_account()?.clone();
        if let Some(entry) = self
            .chat_keys
            .values()
            .find(|e| e.chat == chat && e.account == account.key_id)
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
            None,
            rng,
        )?;
        self.chat_keys.insert(
            key_id,
            ChatEntry {
                key: key.clone(),
                chat: chat.to_string(),
                account: account.key_id.clone(),
            },
        );
        Ok((key, Some(wrap)))
    }

    /// The keyIds of every chat key held.
    pub fn chat_key_ids(&self) -> BTreeSet<String> {
        self.chat_keys.keys().cloned().collect()
    }

    /// The membership log and `wraps` made again for account `did`, with
    /// the same keys, keyIds, epochs, rosters and dates: every change
    /// re-signed in order (new CIDs, so new `prev` links), every wrap this
    /// keyring accepts sealed again with the new DID in its HPKE info (this
    /// device's pairing wrap bound to its admission's new CID). Only this
    /// device's signing key is here, so every verified change must be its
    /// own; another device's pairing wrap needs that device's pairing
    /// secret and is left out (listed in [`Resealed::left_behind`]).
    ///
    /// A wrap this keyring does not accept (one a PDS planted: it does not
    /// open with the keys held, carries another key than the one held
    /// under its keyId, or names a key, epoch or device the verified log
    /// does not) is no wrap of this account's: it is left out too,
    /// [`ResealedWrap::Refused`] with why, never an error, so a planted
    /// record cannot stop the re-seal (and with it every push).
    pub fn resealed_for(
        &self,
        did: &str,
        own: &PairingRequest,
        wraps: &[KeyWrap],
        rng: &mut impl CryptoRng,
    ) -> Result<Resealed> {
        let fail = |reason: String| Err(SealError::Keyring { reason });
        if self.fork().is_some() {
            return fail(
                "the membership log is forked; resolve it (`gelstore device resolve`) first".into(),
            );
        }
        let key = self.device.signing_key();
        let mine = key.public_key().to_did_key();
        // Parents first, so each change names its parents' new CIDs.
        let mut changes: BTreeMap<Cid, SignedChange> = BTreeMap::new();
        let mut left: Vec<&SignedChange> = self.log.changes().collect();
        while !left.is_empty() {
            let before = left.len();
            let mut rest = Vec::new();
            for c in left {
                if !c.change.prev.iter().all(|p| changes.contains_key(p)) {
                    rest.push(c);
                    continue;
                }
                let signer = &c.change.signer;
                let own_key = c
                    .change
                    .roster
                    .get(signer)
                    .and_then(|m| m.signing_key.as_deref());
                if *signer != self.device_id || own_key != Some(mine.as_str()) {
                    return fail(format!(
                        "membership change {} was signed by device {signer:?}, not by this one; only the device that signed every change of the log can sign it again",
                        c.cid
                    ));
                }
                let mut change = c.change.clone();
                change.prev = c.change.prev.iter().map(|p| changes[p].cid).collect();
                change.prev.sort_by_key(|c| c.to_bytes());
                changes.insert(c.cid, change.sign(did, &key)?);
            }
            if rest.len() == before {
                return fail("the membership log's links do not resolve".into());
            }
            left = rest;
        }

        let code = own.code();
        let own_psk = Psk::pairing(code.secret.as_ref(), &code.public_key);
        let mut out = Vec::with_capacity(wraps.len());
        let mut left_behind = BTreeSet::new();
        for wrap in wraps {
            let remade = match (&wrap.recipient, parse_key_id(&wrap.key_id)) {
                (Recipient::Device { device }, Some(KeyKind::Account { epoch }))
                    if epoch == wrap.epoch =>
                {
                    self.remade_device_wrap(did, wrap, device, &changes, &own_psk, rng)?
                }
                (Recipient::Account { key_id, epoch }, Some(kind)) => {
                    self.remade_account_wrap(did, wrap, key_id, *epoch, kind, rng)?
                }
                _ => ResealedWrap::Refused("it is of no kind this device makes".into()),
            };
            if let ResealedWrap::LeftBehind(device) = &remade {
                left_behind.insert(device.clone());
            }
            out.push(remade);
        }
        let mut heads: Vec<Cid> = self.log.heads().iter().map(|h| changes[h].cid).collect();
        heads.sort();
        Ok(Resealed {
            changes,
            wraps: out,
            left_behind,
            heads,
        })
    }

    /// A chat key or chain wrap (to account key `key_id` of `epoch`) made
    /// again for `did`, if this keyring accepts it: it holds that account
    /// key and the wrapped one, the epochs agree as [`absorb`](Self::absorb)
    /// wants them, and the wrap opens with the account key to the very key
    /// held under its keyId.
    fn remade_account_wrap(
        &self,
        did: &str,
        wrap: &KeyWrap,
        key_id: &str,
        epoch: u64,
        kind: KeyKind,
        rng: &mut impl CryptoRng,
    ) -> Result<ResealedWrap> {
        let refused = |reason: String| Ok(ResealedWrap::Refused(reason));
        let Some(holder) = self.accounts.get(&(epoch, key_id.to_owned())) else {
            return refused(format!(
                "it is wrapped to account key {key_id:?}, which this device does not hold"
            ));
        };
        let (consistent, held) = match &kind {
            KeyKind::Account { epoch: e } => (
                *e == wrap.epoch && wrap.epoch < epoch,
                self.held(&wrap.key_id).map(|k| *k.pair.secret_bytes()),
            ),
            KeyKind::Chat { epoch: e, .. } => (
                *e == wrap.epoch && wrap.epoch == epoch,
                self.chat_keys.get(&wrap.key_id).map(|e| *e.key.secret()),
            ),
        };
        if !consistent {
            return refused("its keyId, epoch and recipient epoch do not agree".into());
        }
        let Some(held) = held.map(Zeroizing::new) else {
            return refused(format!("this device does not hold {:?}", wrap.key_id));
        };
        let psk = Psk::account(holder.pair.secret_bytes(), &holder.key_id);
        match open_wrap(&self.did, wrap, holder.pair.secret_bytes(), &psk, None) {
            Ok(secret) if *secret == *held => {}
            Ok(_) => return refused("it carries another key than the one held".into()),
            Err(e) => return refused(format!("it does not open with {key_id:?}: {e}")),
        }
        seal_wrap(
            did,
            &wrap.key_id,
            wrap.epoch,
            wrap.recipient.clone(),
            holder.pair.public(),
            &psk,
            &held,
            wrap.created_at.clone(),
            None,
            rng,
        )
        .map(ResealedWrap::Remade)
    }

    /// An account key wrap to a device, made again for `did`: this
    /// device's own pairing wrap (it opens with the pairing secret, bound
    /// to a change that admits it) or rotation wrap (it opens with a key of
    /// the epoch before), or a rotation wrap to another device (which only
    /// that device can open: made again if the verified log's rotation to
    /// that key keeps the device); another admitted device's pairing wrap
    /// is left behind; anything else is refused.
    fn remade_device_wrap(
        &self,
        did: &str,
        wrap: &KeyWrap,
        device: &str,
        changes: &BTreeMap<Cid, SignedChange>,
        own_psk: &Psk,
        rng: &mut impl CryptoRng,
    ) -> Result<ResealedWrap> {
        let refused = |reason: String| Ok(ResealedWrap::Refused(reason));
        let Some(account) = self.held(&wrap.key_id) else {
            return refused(format!(
                "it wraps {:?}, which this device does not hold",
                wrap.key_id
            ));
        };
        let me = self.device.public_key();
        if device == self.device_id {
            let admission = self.log.changes().find(|c| {
                c.change.account_key_id == wrap.key_id
                    && c.change
                        .roster
                        .get(device)
                        .is_some_and(|m| m.public_key == me)
                    && open_wrap(
                        &self.did,
                        wrap,
                        self.device.0.secret_bytes(),
                        own_psk,
                        Some(&c.cid),
                    )
                    .is_ok()
            });
            if let Some(c) = admission {
                return seal_wrap(
                    did,
                    &wrap.key_id,
                    wrap.epoch,
                    wrap.recipient.clone(),
                    &me,
                    own_psk,
                    account.pair.secret_bytes(),
                    wrap.created_at.clone(),
                    Some(&changes[&c.cid].cid),
                    rng,
                )
                .map(ResealedWrap::Remade);
            }
            // Not the pairing wrap: a rotation wrap to this device must
            // open with a key of the epoch before, to the key held.
            let opens = wrap.epoch.checked_sub(1).is_some_and(|before| {
                self.accounts_at(before).any(|prev| {
                    let psk = Psk::account(prev.pair.secret_bytes(), &prev.key_id);
                    open_wrap(&self.did, wrap, self.device.0.secret_bytes(), &psk, None)
                        .is_ok_and(|s| *s == *account.pair.secret_bytes())
                })
            });
            if !opens {
                return refused("it is addressed to this device and does not open".into());
            }
        }
        // The rotation that put the key in force: its parents hold another.
        let rotation = self.log.changes().find(|c| {
            c.change.account_key_id == wrap.key_id
                && c.change.prev.iter().any(|p| {
                    self.log
                        .get(p)
                        .is_some_and(|p| p.change.account_key_id != wrap.key_id)
                })
        });
        let member = rotation.and_then(|r| r.change.roster.get(device).map(|m| (r, m)));
        let Some((rotation, member)) = member else {
            // Another device's pairing wrap, if a verified change admits it
            // under this key: only its pairing secret makes it again.
            let admitted = self.log.changes().any(|c| {
                c.change.account_key_id == wrap.key_id && c.change.roster.contains_key(device)
            });
            return if admitted && device != self.device_id {
                Ok(ResealedWrap::LeftBehind(device.to_owned()))
            } else {
                refused(format!(
                    "it is addressed to device {device:?}, which no verified change admits under {:?}",
                    wrap.key_id
                ))
            };
        };
        let prev = rotation
            .change
            .prev
            .iter()
            .filter_map(|p| self.log.get(p))
            .find_map(|p| self.held(&p.change.account_key_id));
        let Some(prev) = prev else {
            return Err(SealError::Keyring {
                reason: format!(
                    "this device does not hold the key before {:?}, so its rotation wraps cannot be made again",
                    wrap.key_id
                ),
            });
        };
        seal_wrap(
            did,
            &wrap.key_id,
            wrap.epoch,
            wrap.recipient.clone(),
            &member.public_key,
            &Psk::account(prev.pair.secret_bytes(), &prev.key_id),
            account.pair.secret_bytes(),
            wrap.created_at.clone(),
            None,
            rng,
        )
        .map(ResealedWrap::Remade)
    }
}

/// The key records of a keyring made again for another DID (see
/// [`Keyring::resealed_for`]).
#[derive(Debug, Clone)]
pub struct Resealed {
    /// Each verified change by its old CID, signed again for the new DID.
    pub changes: BTreeMap<Cid, SignedChange>,
    /// What became of each wrap given, in order.
    pub wraps: Vec<ResealedWrap>,
    /// The devices whose pairing wraps are left out.
    pub left_behind: BTreeSet<String>,
    /// The log's heads, by their new CIDs.
    pub heads: Vec<Cid>,
}

/// What [`Keyring::resealed_for`] made of one wrap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResealedWrap {
    /// Made again for the new DID.
    Remade(KeyWrap),
    /// Another admitted device's pairing wrap: only that device's pairing
    /// secret makes it, so it is left out (the device is in
    /// [`Resealed::left_behind`]).
    LeftBehind(String),
    /// A wrap this keyring does not accept (planted or damaged: see
    /// [`Keyring::resealed_for`]), with why: left out.
    Refused(String),
}

fn public_keys(roster: &Roster) -> BTreeMap<String, [u8; KEY_LEN]> {
    roster
        .iter()
        .map(|(d, m)| (d.clone(), m.public_key))
        .collect()
}

impl KeyLookup for Keyring {
    fn chat_key(&self, key_id: &str) -> Option<&ChatKey> {
        self.chat_keys.get(key_id).map(|e| &e.key)
    }
}

/// Heads of the membership log that cannot be reconciled without a
/// rotation (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fork {
    /// The highest epoch among the heads.
    pub epoch: u64,
    /// The keys the heads put in force.
    pub key_ids: Vec<String>,
    /// Devices some head kept and another did not.
    pub left_out: Vec<String>,
}

enum Step {
    Done,
    Rejected(SealError),
    Ignored,
    Later,
    /// Did not open with the keys held now: try again after others;
    /// rejected with this error if it never does.
    Retry(SealError),
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
        assert_eq!(parse_key_id("device:3lbqwz4uv7c22"), None);
        assert_eq!(parse_key_id("ak-0"), None);
        assert_eq!(parse_key_id("chat::1:ab"), None);
    }

    const DID: &str = "did:plc:ewvi7nxzyoun6zhxrhs64oiz";

    fn did_key(key: &DeviceKey) -> Option<String> {
        Some(key.signing_key().public_key().to_did_key())
    }

    /// Devices `a` (first) and the others paired by `a` (with signing
    /// keys), each keyring having absorbed every record made so far.
    fn account(
        others: &[&str],
    ) -> (
        BTreeMap<String, Keyring>,
        KeySet,
        BTreeMap<String, PairingRequest>,
    ) {
        let mut rng = super::super::os_rng();
        let a_key = DeviceKey::generate(&mut rng);
        let a_code = pair_request(&a_key, &mut rng).code().clone();
        let (mut a, mut records) = Keyring::create(DID, "a", a_key, &a_code, &mut rng).unwrap();
        let mut pending = Vec::new();
        for id in others {
            let key = DeviceKey::generate(&mut rng);
            let request = pair_request(&key, &mut rng);
            records.extend(
                a.approve(request.code(), id, did_key(&key), &mut rng)
                    .unwrap(),
            );
            pending.push((id.to_string(), key, request));
        }
        let mut rings = BTreeMap::new();
        let mut requests = BTreeMap::new();
        for (id, key, request) in pending {
            let (ring, report) = Keyring::join(DID, &id, key, &request, &records).unwrap();
            assert!(report.refused_changes.is_empty(), "{report:?}");
            rings.insert(id.clone(), ring);
            requests.insert(id, request);
        }
        rings.insert("a".into(), a);
        (rings, records, requests)
    }

    fn absorb_all(rings: &mut BTreeMap<String, Keyring>, records: &KeySet) {
        for r in rings.values_mut() {
            r.absorb(records);
        }
    }

    fn wraps_only(wraps: Vec<KeyWrap>) -> KeySet {
        KeySet {
            wraps,
            changes: Vec::new(),
        }
    }

    #[test]
    fn two_removals_at_once_are_a_fork_resolved_for_the_devices_both_kept() {
        let mut rng = super::super::os_rng();
        let (mut rings, mut records, _) = account(&["b", "c", "d"]);
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
        records.extend(ra);
        records.extend(rb);
        absorb_all(&mut rings, &records);
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
        records.extend(resolved);
        absorb_all(&mut rings, &records);
        for id in ["a", "b", "c", "d"] {
            assert_eq!(rings[id].account_epoch(), 2, "{id}");
            assert!(rings[id].fork().is_none(), "{id}");
            assert_eq!(rings[id].devices().keys().collect::<Vec<_>>(), ["a", "b"]);
        }
        for id in ["c", "d"] {
            assert!(
                !rings[id].account_keys().any(|k| k.epoch == 2),
                "{id} got the resolved epoch"
            );
            assert!(matches!(
                rings[id].sealing_account(),
                Err(SealError::NotAdmitted {
                    epoch: 2,
                    removed: true
                })
            ));
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
                .absorb(&wraps_only(vec![wrap.clone()]));
            assert!(
                rings[id].chat_key(key.key_id()).is_none(),
                "{id} opened the new chat key"
            );
        }
        let report = rings.get_mut("b").unwrap().absorb(&wraps_only(vec![wrap]));
        assert_eq!(report.chat_keys, 1);
    }

    #[test]
    fn a_removed_device_forging_a_rotation_changes_nothing() {
        let mut rng = super::super::os_rng();
        let (mut rings, mut records, _) = account(&["b", "c"]);
        // c as it was before it learnt of its removal: it holds epoch 0
        // and its signing key is in the roster it knows.
        let mut stale = rings["c"].clone();
        let removal = rings
            .get_mut("a")
            .unwrap()
            .remove_device("c", &mut rng)
            .unwrap();
        records.extend(removal);
        absorb_all(&mut rings, &records);
        let current = rings["a"].current_account().key_id.clone();

        // A rotation c signs from before its removal, keeping everyone:
        // signed by a device the change it follows admitted, so it
        // verifies, but its key is held by c, whom the other head removed.
        let forged = stale.rotate_account_key(&mut rng).unwrap();
        let report = rings.get_mut("a").unwrap().absorb(&forged);
        assert_eq!(report.changes, 1, "{report:?}");
        for id in ["a", "b"] {
            rings.get_mut(id).unwrap().absorb(&forged);
            assert!(rings[id].fork().is_none(), "{id}: the removal settles it");
            assert_eq!(rings[id].sealing_account().unwrap().key_id, current);
            assert_eq!(rings[id].devices().keys().collect::<Vec<_>>(), ["a", "b"]);
        }

        // A bare wrap of a new epoch-1 key that no change names.
        let mut bare = stale.clone();
        let bare_rotation = bare.rotate_account_key(&mut rng).unwrap();
        let report = rings
            .get_mut("b")
            .unwrap()
            .absorb(&wraps_only(bare_rotation.wraps));
        assert!(
            report
                .rejected
                .iter()
                .any(|(_, e)| matches!(e, SealError::MembershipLog { .. })),
            "{report:?}"
        );
        assert!(
            !rings["b"]
                .account_keys()
                .any(|k| k.key_id == bare_rotation.changes[0].change.account_key_id)
        );

        // A wrap that carries another secret under the key in force.
        let planted = seal_wrap(
            DID,
            &current,
            1,
            Recipient::Device { device: "b".into() },
            &rings["b"].device_public_key(),
            &Psk::account(
                stale.accounts_at(0).next().unwrap().pair.secret_bytes(),
                &stale.accounts_at(0).next().unwrap().key_id,
            ),
            &[7u8; KEY_LEN],
            now_datetime(),
            None,
            &mut rng,
        )
        .unwrap();
        let mut fresh_b = rings["b"].clone();
        fresh_b.accounts.retain(|(_, id), _| *id != current);
        let report = fresh_b.absorb(&wraps_only(vec![planted]));
        assert!(
            matches!(report.rejected[..], [(_, SealError::MembershipLog { .. })]),
            "{report:?}"
        );
        assert!(!fresh_b.accounts.keys().any(|(_, id)| *id == current));

        // c itself learns it was removed.
        records.extend(forged);
        rings.get_mut("c").unwrap().absorb(&records);
        assert!(matches!(
            rings["c"].sealing_account(),
            Err(SealError::NotAdmitted { removed: true, .. })
        ));
        assert!(!rings["c"].account_keys().any(|k| k.key_id == current));
    }

    #[test]
    fn a_log_that_loses_a_verified_change_is_refused() {
        let mut rng = super::super::os_rng();
        let (mut rings, mut records, requests) = account(&["b", "c"]);
        let removal = rings
            .get_mut("a")
            .unwrap()
            .remove_device("c", &mut rng)
            .unwrap();
        records.extend(removal.clone());
        let b = rings.get_mut("b").unwrap();
        b.absorb(&records);
        let known = b.heads();
        assert_eq!(known, vec![removal.changes[0].cid]);
        // The server drops the removal (and its wraps).
        let mut rolled_back = records.clone();
        rolled_back
            .changes
            .retain(|c| c.cid != removal.changes[0].cid);
        rolled_back.wraps.retain(|w| w.epoch == 0);
        let b_ring = &rings["b"];
        let rejoin = |known: &[Cid], records: &KeySet| {
            Keyring::rejoin(
                DID,
                "b",
                b_ring.device.clone(),
                &requests["b"],
                b_ring.admitted_with(),
                known,
                records,
            )
        };
        let err = rejoin(&known, &rolled_back).unwrap_err();
        assert!(
            matches!(&err, SealError::MembershipLog { reason } if reason.contains("went backwards")),
            "{err}"
        );
        // Without what it verified before, the same records rebuild the
        // old epoch (what a fresh copy of the device would see).
        let (old, _) = rejoin(&[], &rolled_back).unwrap();
        assert_eq!(old.account_epoch(), 0);
        let (now, _) = rejoin(&known, &records).unwrap();
        assert_eq!(now.account_epoch(), 1);
    }

    #[test]
    fn datetime_is_valid() {
        let now = now_datetime();
        assert!(
            gelstore_lexicon::syntax::check_datetime(&now).is_ok(),
            "{now}"
        );
        assert!(now.starts_with("20"), "{now}");
    }

    /// A re-seal makes again only the wraps this keyring accepts: its own
    /// pairing, rotation, chain and chat key wraps, and the rotation wraps
    /// of the devices the log kept; other devices' pairing wraps are left
    /// behind; anything a PDS could plant (a wrap to this device or of a
    /// key held that does not open, a key or epoch nobody holds, a device
    /// never admitted, epochs that disagree, another account's wraps) is
    /// refused by name, never an error.
    #[test]
    fn a_reseal_makes_again_only_the_wraps_it_accepts() {
        let mut rng = super::super::os_rng();
        let a_key = DeviceKey::generate(&mut rng);
        let a_req = pair_request(&a_key, &mut rng);
        let (mut a, mut records) =
            Keyring::create(DID, "a", a_key.clone(), a_req.code(), &mut rng).unwrap();
        for id in ["b", "c"] {
            let key = DeviceKey::generate(&mut rng);
            let request = pair_request(&key, &mut rng);
            records.extend(
                a.approve(request.code(), id, did_key(&key), &mut rng)
                    .unwrap(),
            );
        }
        let (_, w) = a.chat_key_for_seal("chat0", &mut rng).unwrap();
        records.wraps.extend(w);
        records.extend(a.remove_device("c", &mut rng).unwrap());
        let (_, w) = a.chat_key_for_seal("chat1", &mut rng).unwrap();
        records.wraps.extend(w);
        let own = records.wraps.clone();
        assert_eq!(
            own.len(),
            8,
            "3 pairings, 2 rotations, 1 chain, 2 chat keys"
        );

        let to = |d: &str| Recipient::Device { device: d.into() };
        let find = |f: &dyn Fn(&KeyWrap) -> bool| own.iter().find(|w| f(w)).unwrap().clone();
        let pairing = find(&|w| w.recipient == to("a") && w.epoch == 0);
        let rotation = find(&|w| w.recipient == to("a") && w.epoch == 1);
        let chat = find(&|w| w.key_id.starts_with("chat:chat1:"));
        let chain = find(&|w| {
            matches!(w.recipient, Recipient::Account { .. }) && w.key_id.starts_with("account:")
        });
        let mut planted = Vec::new();
        let mut w = pairing.clone();
        w.created_at = "2020-01-01T00:00:00.000Z".into();
        planted.push(w);
        let mut w = pairing.clone();
        (w.key_id, w.epoch) = ("account:7:ffffffffffffffff".into(), 7);
        planted.push(w);
        let mut w = rotation.clone();
        w.ciphertext[0] ^= 1;
        planted.push(w);
        let mut w = pairing.clone();
        w.recipient = to("zzz");
        planted.push(w);
        let mut w = chat.clone();
        w.key_id = "chat:chat9:1:ffffffffffffffff".into();
        planted.push(w);
        let mut w = chat.clone();
        w.epoch = 0;
        planted.push(w);
        let mut w = chain.clone();
        w.ciphertext[0] ^= 1;
        planted.push(w);
        // Another account's wraps: as they are, and re-addressed to ours.
        let m_key = DeviceKey::generate(&mut rng);
        let m_req = pair_request(&m_key, &mut rng);
        let (mut m, m_records) = Keyring::create(DID, "m", m_key, m_req.code(), &mut rng).unwrap();
        let (_, mw) = m.chat_key_for_seal("chat1", &mut rng).unwrap();
        let mut mw = mw.unwrap();
        planted.extend(m_records.wraps);
        planted.push(mw.clone());
        mw.recipient = Recipient::Account {
            key_id: pairing.key_id.clone(),
            epoch: 0,
        };
        planted.push(mw);

        let given: Vec<KeyWrap> = own.iter().chain(&planted).cloned().collect();
        let new_did = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa";
        let resealed = a.resealed_for(new_did, &a_req, &given, &mut rng).unwrap();
        assert_eq!(resealed.wraps.len(), given.len());
        for (w, r) in own.iter().zip(&resealed.wraps) {
            match (&w.recipient, r) {
                (Recipient::Device { device }, ResealedWrap::LeftBehind(d)) => {
                    assert_eq!((device, w.epoch), (d, 0));
                }
                (_, ResealedWrap::Remade(n)) => assert_eq!(
                    (&n.key_id, n.epoch, &n.recipient, &n.created_at),
                    (&w.key_id, w.epoch, &w.recipient, &w.created_at)
                ),
                other => panic!("{w:?}: {other:?}"),
            }
        }
        for (w, r) in planted.iter().zip(&resealed.wraps[own.len()..]) {
            assert!(matches!(r, ResealedWrap::Refused(_)), "{w:?}: {r:?}");
        }
        assert_eq!(
            resealed.left_behind,
            BTreeSet::from(["b".to_string(), "c".to_string()])
        );

        // What was made again gives this device the same keyring for the
        // new DID.
        let keys = KeySet {
            wraps: resealed
                .wraps
                .iter()
                .filter_map(|r| match r {
                    ResealedWrap::Remade(w) => Some(w.clone()),
                    _ => None,
                })
                .collect(),
            changes: resealed.changes.values().cloned().collect(),
        };
        let (ring, report) =
            Keyring::rejoin(new_did, "a", a_key, &a_req, a.admitted_with(), &[], &keys).unwrap();
        assert!(report.rejected.is_empty(), "{:?}", report.rejected);
        assert_eq!(ring.chat_key_ids(), a.chat_key_ids());
        assert_eq!((ring.held_epoch(), ring.heads()), (1, resealed.heads));
    }
}
