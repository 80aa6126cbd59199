//! The membership log: every change of who holds the account key, as
//! signed `chat.gel.assistant.membership` records chained by CID.
//!
//! **Why.** Key wraps alone cannot say who rotated, or whom a rotation
//! removed: a removed device still holds the old account key, so its wraps
//! open like anyone's, and a server that deletes the newest wraps puts
//! every device back on the old key. Each change here is signed by a device
//! admitted before it, names the account key it puts in force (keyId and
//! public key) and the roster it keeps, and links the changes it follows by
//! their CIDs. A device trusts the change it was admitted by (its pairing
//! wrap is bound to that change's CID, see [`super::keyring`]), hence that
//! change's whole history by hashes, and from there every change whose
//! signature and rules check out. It remembers the heads it has verified,
//! so a log that loses them is refused, not merged.
//!
//! **Rules** for a change `C` that follows the changes `P` (all verified):
//! - the signer is in `C`'s roster and in the roster of every `P`, with the
//!   same keys, and `sig` verifies with the signing key those rosters give;
//! - an *admission* keeps the account key of `P`'s [`Standing`] and its
//!   epoch, and keeps every device of its roster;
//! - a *rotation* puts a new account key in force at the next epoch and
//!   keeps only devices the standing allows (its roster, or during a fork
//!   the devices every head kept); `removed` lists exactly who it drops.
//!
//! **Forks.** Two changes that follow the same one are a fork. The log's
//! standing is then settled only if some head's key is held by devices
//! every head kept (a change that added a device on one side and a removal
//! on the other: the removal's key is current). Otherwise nothing new is
//! sealed until a rotation that follows every head goes to the devices they
//! all kept, so every removal holds. A removed device that signs a change
//! from before its removal can force such a rotation (a denial of service),
//! but it is never in the roster the rotation keeps.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::error::{Result, SealError};
use super::keys::KEY_LEN;
use gelstore_crypto::{PublicKey, SigningKey};
use gelstore_model::{Cid, record_cid, record_to_dag_cbor};
use gelstore_types::lexicon::chat::gel::assistant::membership::{
    Member as MemberRecord, Membership as ChangeRecord,
};
use gelstore_types::lexicon_runtime::{Bytes, CidLink, Datetime, Did, RecordKey};

/// Collection of membership change records.
pub const MEMBERSHIP_COLLECTION: &str =
    gelstore_types::lexicon::chat::gel::assistant::membership::NSID;

/// Label that starts every signed message.
const SIGN_LABEL: &[u8] = b"gelstore/membership/v1";

/// An admitted device as a roster names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its X25519 public key.
    pub public_key: [u8; KEY_LEN],
    /// Its signing key as a did:key, if it proved one at pairing.
    pub signing_key: Option<String>,
}

/// Devices by record key.
pub type Roster = BTreeMap<String, Member>;

/// One change, before or after signing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// The account epoch in force after it.
    pub epoch: u64,
    /// The account key in force after it.
    pub account_key_id: String,
    /// That key's X25519 public key.
    pub account_public_key: [u8; KEY_LEN],
    /// The changes it follows (none for the first device's).
    pub prev: Vec<Cid>,
    /// Every device admitted after it.
    pub roster: Roster,
    /// The devices it drops.
    pub removed: Vec<String>,
    /// The device that signs it.
    pub signer: String,
    /// When it was made.
    pub created_at: String,
}

/// A change with its signature, its record and the record's CID.
#[derive(Clone, Debug, PartialEq)]
pub struct SignedChange {
    /// What it says.
    pub change: Change,
    /// The signature.
    pub sig: Vec<u8>,
    /// The record, as stored.
    pub value: Value,
    /// The record's CID (what later changes name in `prev`).
    pub cid: Cid,
}

fn malformed(reason: impl Into<String>) -> SealError {
    SealError::MembershipLog {
        reason: reason.into(),
    }
}

/// The message a change's signature covers: the label, the account DID and
/// the record without `sig`, so a change cannot be moved to another account.
pub fn signing_message(did: &str, value: &Value) -> Result<Vec<u8>> {
    let mut unsigned = value.clone();
    if let Some(map) = unsigned.as_object_mut() {
        map.remove("sig");
    }
    let body = record_to_dag_cbor(&unsigned).map_err(|e| malformed(e.to_string()))?;
    let mut out = Vec::with_capacity(SIGN_LABEL.len() + did.len() + body.len() + 2);
    out.extend_from_slice(SIGN_LABEL);
    out.push(0);
    out.extend_from_slice(did.as_bytes());
    out.push(0);
    out.extend_from_slice(&body);
    Ok(out)
}

impl Change {
    /// The record of this change carrying `sig`.
    fn to_value(&self, sig: &[u8]) -> Result<Value> {
        let bad = |e: &dyn std::fmt::Display| malformed(e.to_string());
        let record = ChangeRecord {
            epoch: i64::try_from(self.epoch).map_err(|e| bad(&e))?,
            account_key_id: self.account_key_id.clone(),
            account_public_key: Bytes(self.account_public_key.to_vec()),
            prev: self.prev.iter().map(|c| CidLink(*c)).collect(),
            roster: self
                .roster
                .iter()
                .map(|(device, m)| {
                    Ok(MemberRecord {
                        device: RecordKey::new(device.clone()).map_err(|e| bad(&e))?,
                        public_key: Bytes(m.public_key.to_vec()),
                        signing_key: m
                            .signing_key
                            .clone()
                            .map(Did::new)
                            .transpose()
                            .map_err(|e| bad(&e))?,
                        extra: Default::default(),
                    })
                })
                .collect::<Result<_>>()?,
            removed: self
                .removed
                .iter()
                .map(|d| RecordKey::new(d.clone()).map_err(|e| bad(&e)))
                .collect::<Result<_>>()?,
            signer: RecordKey::new(self.signer.clone()).map_err(|e| bad(&e))?,
            created_at: Datetime::new(self.created_at.clone()).map_err(|e| bad(&e))?,
            sig: Bytes(sig.to_vec()),
            extra: Default::default(),
        };
        let mut value = serde_json::to_value(&record).map_err(|e| bad(&e))?;
        if let Some(map) = value.as_object_mut() {
            map.insert("$type".into(), MEMBERSHIP_COLLECTION.into());
        }
        Ok(value)
    }

    /// Signs the change for account `did` with `key` (the signer's).
    pub fn sign(self, did: &str, key: &SigningKey) -> Result<SignedChange> {
        let placeholder = self.to_value(&[0u8; 64])?;
        let sig = key.sign(&signing_message(did, &placeholder)?).to_vec();
        let value = self.to_value(&sig)?;
        let cid = record_cid(&value).map_err(|e| malformed(e.to_string()))?;
        Ok(SignedChange {
            change: self,
            sig,
            value,
            cid,
        })
    }
}

impl SignedChange {
    /// Parses a stored record (structure only; [`Log::verify`] checks the
    /// signature and the rules).
    pub fn from_value(value: Value) -> Result<SignedChange> {
        let record: ChangeRecord =
            serde_json::from_value(value.clone()).map_err(|e| malformed(e.to_string()))?;
        let epoch = u64::try_from(record.epoch).map_err(|_| malformed("a negative epoch"))?;
        let account_public_key: [u8; KEY_LEN] =
            record
                .account_public_key
                .0
                .as_slice()
                .try_into()
                .map_err(|_| malformed("accountPublicKey is not 32 bytes"))?;
        let prev: Vec<Cid> = record.prev.iter().map(|c| c.0).collect();
        if !strictly_ascending(prev.iter().map(|c| c.to_bytes())) {
            return Err(malformed("prev is not in byte order without repeats"));
        }
        let mut roster = Roster::new();
        let mut last: Option<String> = None;
        for m in record.roster {
            let device = m.device.into_string();
            if last.as_ref().is_some_and(|l| *l >= device) {
                return Err(malformed(
                    "roster is not in record key order without repeats",
                ));
            }
            let public_key: [u8; KEY_LEN] =
                m.public_key.0.as_slice().try_into().map_err(|_| {
                    malformed(format!("the public key of {device:?} is not 32 bytes"))
                })?;
            last = Some(device.clone());
            roster.insert(
                device,
                Member {
                    public_key,
                    signing_key: m.signing_key.map(|d| d.into_string()),
                },
            );
        }
        let removed: Vec<String> = record
            .removed
            .into_iter()
            .map(|d| d.into_string())
            .collect();
        if !strictly_ascending(removed.iter()) {
            return Err(malformed("removed is not in order without repeats"));
        }
        let cid = record_cid(&value).map_err(|e| malformed(e.to_string()))?;
        Ok(SignedChange {
            change: Change {
                epoch,
                account_key_id: record.account_key_id,
                account_public_key,
                prev,
                roster,
                removed,
                signer: record.signer.into_string(),
                created_at: record.created_at.into_string(),
            },
            sig: record.sig.0,
            value,
            cid,
        })
    }

    /// Checks the signature with the signing key `roster` gives the signer.
    fn check_signature(&self, did: &str, roster: &Roster) -> Result<()> {
        let signer = &self.change.signer;
        let Some(key) = roster.get(signer).and_then(|m| m.signing_key.as_deref()) else {
            return Err(malformed(format!(
                "change {} is signed by {signer:?}, which has no signing key there",
                self.cid
            )));
        };
        let public = PublicKey::from_did_key(key)
            .map_err(|e| malformed(format!("the signing key of {signer:?} does not parse: {e}")))?;
        public
            .verify(&signing_message(did, &self.value)?, &self.sig)
            .map_err(|e| malformed(format!("change {}: the signature {e}", self.cid)))
    }
}

fn strictly_ascending<T: Ord>(items: impl Iterator<Item = T>) -> bool {
    let mut last = None;
    for item in items {
        if last.as_ref().is_some_and(|l| *l >= item) {
            return false;
        }
        last = Some(item);
    }
    true
}

/// What the log says holds now (or after a set of changes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// One account key is in force.
    Settled {
        /// Its epoch.
        epoch: u64,
        /// Its keyId.
        key_id: String,
        /// Its public key.
        public_key: [u8; KEY_LEN],
        /// The devices admitted under it.
        roster: Roster,
    },
    /// Heads that cannot be reconciled without a rotation.
    Forked {
        /// The highest epoch among the heads.
        epoch: u64,
        /// The keyIds the heads put in force.
        key_ids: Vec<String>,
        /// The devices every head kept.
        kept: Roster,
        /// Devices some head kept and another did not.
        left_out: Vec<String>,
    },
}

impl Standing {
    /// The epoch in force (the highest one for a fork).
    pub fn epoch(&self) -> u64 {
        match self {
            Standing::Settled { epoch, .. } | Standing::Forked { epoch, .. } => *epoch,
        }
    }

    /// The devices new seals may go to: the roster, or what a fork kept.
    pub fn roster(&self) -> &Roster {
        match self {
            Standing::Settled { roster, .. } => roster,
            Standing::Forked { kept, .. } => kept,
        }
    }
}

/// The verified membership log of one account.
#[derive(Clone, Debug, Default)]
pub struct Log {
    did: String,
    verified: BTreeMap<Cid, SignedChange>,
    /// Verified changes no verified change follows.
    heads: BTreeSet<Cid>,
    /// Changes refused, with why.
    refused: Vec<String>,
    /// The standing after `heads`, kept as they move: every seal asks.
    standing: Standing,
}

impl Default for Standing {
    /// What an empty log settles: nothing.
    fn default() -> Standing {
        Standing::Forked {
            epoch: 0,
            key_ids: Vec::new(),
            kept: Roster::new(),
            left_out: Vec::new(),
        }
    }
}

impl Log {
    /// A log that starts with `genesis`, the first device's own change.
    pub fn new(did: &str, genesis: SignedChange) -> Result<Log> {
        check_genesis(did, &genesis)?;
        let mut log = Log {
            did: did.to_string(),
            ..Log::default()
        };
        log.heads.insert(genesis.cid);
        log.verified.insert(genesis.cid, genesis);
        log.standing = log.standing_after(&log.heads);
        Ok(log)
    }

    /// Verifies the stored changes of an account, trusting `anchor` (the
    /// change this device was admitted by, found through its pairing wrap)
    /// and, through its hashes, its history. Every change that follows
    /// verified ones and keeps the rules is verified too; the rest are
    /// refused and listed in [`refused`](Self::refused). Fails if the
    /// anchor's history is incomplete or does not verify, or if a head in
    /// `known_heads` (what this device verified before) is gone.
    pub fn verify(
        did: &str,
        changes: &[SignedChange],
        anchor: &Cid,
        known_heads: &[Cid],
    ) -> Result<Log> {
        let mut parsed: BTreeMap<Cid, SignedChange> = BTreeMap::new();
        let mut refused = Vec::new();
        for c in changes {
            parsed.entry(c.cid).or_insert_with(|| c.clone());
        }
        // The anchor's history, authenticated by hashes alone.
        let mut history = BTreeSet::new();
        let mut stack = vec![*anchor];
        let mut roots = Vec::new();
        while let Some(cid) = stack.pop() {
            if !history.insert(cid) {
                continue;
            }
            let Some(c) = parsed.get(&cid) else {
                return Err(malformed(format!(
                    "change {cid}, in the history of the change that admitted this device, is missing"
                )));
            };
            if c.change.prev.is_empty() {
                roots.push(cid);
            }
            stack.extend(c.change.prev.iter().copied());
        }
        let [root] = roots[..] else {
            return Err(malformed(format!(
                "the history of the change that admitted this device has {} first changes",
                roots.len()
            )));
        };
        let genesis = parsed.remove(&root).expect("the root was found above");
        let mut log = Log::new(did, genesis)?;

        // Kahn's order over what follows the root: a change is checked once
        // every change it names is verified.
        let mut waiting: BTreeMap<Cid, usize> = BTreeMap::new();
        let mut followers: BTreeMap<Cid, Vec<Cid>> = BTreeMap::new();
        let mut ready = Vec::new();
        for (cid, c) in &parsed {
            if c.change.prev.is_empty() {
                continue; // another first change: never verified
            }
            waiting.insert(*cid, c.change.prev.len());
            for p in &c.change.prev {
                followers.entry(*p).or_default().push(*cid);
            }
        }
        let unlock = |cid: &Cid, ready: &mut Vec<Cid>, waiting: &mut BTreeMap<Cid, usize>| {
            for f in followers.get(cid).into_iter().flatten() {
                if let Some(n) = waiting.get_mut(f) {
                    *n -= 1;
                    if *n == 0 {
                        ready.push(*f);
                    }
                }
            }
        };
        unlock(&root, &mut ready, &mut waiting);
        while let Some(cid) = ready.pop() {
            waiting.remove(&cid);
            let change = parsed.remove(&cid).expect("each change is ready once");
            match log.accept(change) {
                Ok(()) => unlock(&cid, &mut ready, &mut waiting),
                Err(e) => refused.push(e.to_string()),
            }
        }
        for (cid, c) in &parsed {
            let why = if c.change.prev.is_empty() {
                "a second first change"
            } else {
                "it follows a change that is missing or refused"
            };
            refused.push(format!("change {cid}: {why}"));
        }
        if let Some(bad) = history.iter().find(|c| !log.verified.contains_key(c)) {
            return Err(malformed(format!(
                "change {bad}, in the history of the change that admitted this device, does not verify"
            )));
        }
        if let Some(lost) = known_heads.iter().find(|c| !log.verified.contains_key(c)) {
            return Err(malformed(format!(
                "change {lost}, which this device verified before, is missing or no longer verifies: the log went backwards"
            )));
        }
        log.refused = refused;
        Ok(log)
    }

    /// Adds `c` if its signature and the rules hold (see the module docs).
    pub fn accept(&mut self, c: SignedChange) -> Result<()> {
        if self.verified.contains_key(&c.cid) {
            return Ok(());
        }
        check_change(self, &c)?;
        for p in &c.change.prev {
            self.heads.remove(p);
        }
        self.heads.insert(c.cid);
        self.verified.insert(c.cid, c);
        self.standing = self.standing_after(&self.heads);
        Ok(())
    }

    /// The standing after every verified change.
    pub fn standing(&self) -> &Standing {
        &self.standing
    }

    /// The verified changes no verified change follows, in CID order.
    pub fn heads(&self) -> Vec<Cid> {
        self.heads.iter().copied().collect()
    }

    /// The heads whose side of a fork stands (see `undisputed`): what a
    /// rotation's epoch, removed list and PSK are taken from.
    pub fn live_heads(&self) -> Vec<&Change> {
        self.undisputed(&self.heads)
            .iter()
            .map(|h| &self.verified[h].change)
            .collect()
    }

    /// Changes that did not verify, with why.
    pub fn refused(&self) -> &[String] {
        &self.refused
    }

    /// The verified change `cid`.
    pub fn get(&self, cid: &Cid) -> Option<&SignedChange> {
        self.verified.get(cid)
    }

    /// Every verified change, by CID.
    pub fn changes(&self) -> impl Iterator<Item = &SignedChange> {
        self.verified.values()
    }

    /// The account public key a verified change puts in force under
    /// `key_id`, if one does.
    pub fn account_public_key(&self, key_id: &str) -> Option<&[u8; KEY_LEN]> {
        self.verified
            .values()
            .find(|c| c.change.account_key_id == key_id)
            .map(|c| &c.change.account_public_key)
    }

    /// Whether some verified change removed `device`.
    pub fn removed(&self, device: &str) -> bool {
        self.verified
            .values()
            .any(|c| c.change.removed.iter().any(|d| d == device))
    }

    /// The devices admitted under any key of `epoch`, by record key.
    pub fn roster_at(&self, epoch: u64) -> Roster {
        let mut out = Roster::new();
        for c in self.verified.values().filter(|c| c.change.epoch == epoch) {
            out.extend(c.change.roster.iter().map(|(d, m)| (d.clone(), m.clone())));
        }
        out
    }

    /// The standing after the changes `set` (verified ones).
    fn standing_after(&self, set: &BTreeSet<Cid>) -> Standing {
        let live = self.undisputed(set);
        let changes: Vec<&Change> = live
            .iter()
            .filter_map(|c| self.verified.get(c))
            .map(|c| &c.change)
            .collect();
        let Some(first) = changes.first() else {
            return Standing::Forked {
                epoch: 0,
                key_ids: Vec::new(),
                kept: Roster::new(),
                left_out: Vec::new(),
            };
        };
        let union = union_of(changes.iter().map(|c| &c.roster));
        let same_key = changes
            .iter()
            .all(|c| c.account_key_id == first.account_key_id);
        if same_key && let Some(roster) = union.clone() {
            return settled(first, roster);
        }
        let kept = intersection_of(changes.iter().map(|c| &c.roster));
        // The holders of a key: every device a change before (or in) `set`
        // admitted under it.
        let history = self.history_of(set);
        let holders = |key_id: &str| {
            union_of(
                history
                    .iter()
                    .filter_map(|c| self.verified.get(c))
                    .filter(|c| c.change.account_key_id == key_id)
                    .map(|c| &c.change.roster),
            )
        };
        let chosen = changes
            .iter()
            .filter(|c| holders(&c.account_key_id).is_some_and(|h| within(&h, &kept)))
            .max_by(|a, b| (a.epoch, &a.account_key_id).cmp(&(b.epoch, &b.account_key_id)));
        if let Some(c) = chosen {
            let roster = union_of(
                changes
                    .iter()
                    .filter(|o| o.account_key_id == c.account_key_id)
                    .map(|o| &o.roster),
            )
            .expect("rosters within `kept` agree");
            return settled(c, roster);
        }
        let all: BTreeSet<&String> = changes.iter().flat_map(|c| c.roster.keys()).collect();
        let mut key_ids: Vec<String> = changes.iter().map(|c| c.account_key_id.clone()).collect();
        key_ids.sort();
        key_ids.dedup();
        Standing::Forked {
            epoch: changes.iter().map(|c| c.epoch).max().unwrap_or(0),
            key_ids,
            left_out: all
                .into_iter()
                .filter(|d| !kept.contains_key(*d))
                .cloned()
                .collect(),
            kept,
        }
    }

    /// The changes of `set` whose side of the fork no other side
    /// disputes: a side is disputed when a device that signed a change on
    /// it is removed on another side whose own signers this side does not
    /// remove. That is a removed device's change from before its removal
    /// (its remover's authority stands), not two devices removing each
    /// other (then both removals hold). All of `set` if none is left.
    fn undisputed(&self, set: &BTreeSet<Cid>) -> BTreeSet<Cid> {
        if set.len() < 2 {
            return set.clone();
        }
        // Each head's own side: what it follows that no other head does.
        let sides: Vec<(Cid, BTreeSet<&str>, BTreeSet<&str>)> = set
            .iter()
            .map(|h| {
                let others: BTreeSet<Cid> = set.iter().filter(|o| *o != h).copied().collect();
                let shared = self.history_of(&others);
                let mut signers = BTreeSet::new();
                let mut removed = BTreeSet::new();
                for cid in self.history_of(&BTreeSet::from([*h])) {
                    if shared.contains(&cid) {
                        continue;
                    }
                    if let Some(c) = self.verified.get(&cid) {
                        signers.insert(c.change.signer.as_str());
                        removed.extend(c.change.removed.iter().map(String::as_str));
                    }
                }
                (*h, signers, removed)
            })
            .collect();
        let disputed = |(h, signers, removed): &(Cid, BTreeSet<&str>, BTreeSet<&str>)| {
            sides.iter().any(|(o, o_signers, o_removed)| {
                o != h && !signers.is_disjoint(o_removed) && o_signers.is_disjoint(removed)
            })
        };
        let live: BTreeSet<Cid> = sides
            .iter()
            .filter(|side| !disputed(side))
            .map(|(h, _, _)| *h)
            .collect();
        if live.is_empty() { set.clone() } else { live }
    }

    /// `set` and every verified change before it.
    fn history_of(&self, set: &BTreeSet<Cid>) -> BTreeSet<Cid> {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<Cid> = set.iter().copied().collect();
        while let Some(cid) = stack.pop() {
            if seen.insert(cid)
                && let Some(c) = self.verified.get(&cid)
            {
                stack.extend(c.change.prev.iter().copied());
            }
        }
        seen
    }

    /// The next change this device would make: it follows every head.
    pub fn next_change(&self, epoch: u64, key_id: &str, public_key: [u8; KEY_LEN]) -> Change {
        Change {
            epoch,
            account_key_id: key_id.to_string(),
            account_public_key: public_key,
            prev: self.heads(),
            roster: Roster::new(),
            removed: Vec::new(),
            signer: String::new(),
            created_at: gelstore_model::now_datetime(),
        }
    }
}

fn settled(c: &Change, roster: Roster) -> Standing {
    Standing::Settled {
        epoch: c.epoch,
        key_id: c.account_key_id.clone(),
        public_key: c.account_public_key,
        roster,
    }
}

/// The union of rosters, or `None` if two name one device differently.
fn union_of<'a>(rosters: impl Iterator<Item = &'a Roster>) -> Option<Roster> {
    let mut out = Roster::new();
    for r in rosters {
        for (d, m) in r {
            match out.get(d) {
                Some(known) if known != m => return None,
                Some(_) => {}
                None => {
                    out.insert(d.clone(), m.clone());
                }
            }
        }
    }
    Some(out)
}

fn intersection_of<'a>(mut rosters: impl Iterator<Item = &'a Roster>) -> Roster {
    let Some(first) = rosters.next() else {
        return Roster::new();
    };
    let mut out = first.clone();
    for r in rosters {
        out.retain(|d, m| r.get(d) == Some(m));
    }
    out
}

/// Whether every device of `inner` is in `outer` with the same keys.
fn within(inner: &Roster, outer: &Roster) -> bool {
    inner.iter().all(|(d, m)| outer.get(d) == Some(m))
}

fn check_genesis(did: &str, g: &SignedChange) -> Result<()> {
    let c = &g.change;
    if !c.prev.is_empty() || c.epoch != 0 || !c.removed.is_empty() {
        return Err(malformed(format!(
            "change {} is not a first change (epoch 0, following nothing, removing no one)",
            g.cid
        )));
    }
    if c.roster.len() != 1 || !c.roster.contains_key(&c.signer) {
        return Err(malformed(format!(
            "first change {} must admit exactly its signer",
            g.cid
        )));
    }
    check_key_id(g)?;
    g.check_signature(did, &c.roster)
}

fn check_key_id(g: &SignedChange) -> Result<()> {
    let c = &g.change;
    let prefix = format!("account:{}:", c.epoch);
    if !c.account_key_id.starts_with(&prefix) || c.account_key_id.len() > 128 {
        return Err(malformed(format!(
            "change {} puts key {:?} in force at epoch {}",
            g.cid, c.account_key_id, c.epoch
        )));
    }
    Ok(())
}

/// The rules for a change that follows verified ones (see the module docs).
fn check_change(log: &Log, g: &SignedChange) -> Result<()> {
    let c = &g.change;
    let fail = |why: String| Err(malformed(format!("change {}: {why}", g.cid)));
    if c.prev.is_empty() {
        return fail("a second first change".into());
    }
    if let Some(p) = c.prev.iter().find(|p| !log.verified.contains_key(p)) {
        return fail(format!("it follows {p}, which is not verified"));
    }
    let prev: BTreeSet<Cid> = c.prev.iter().copied().collect();
    // The signer answers to the sides of a fork that stand, not to one a
    // removed device made.
    let parents: Vec<&Change> = log
        .undisputed(&prev)
        .iter()
        .map(|p| &log.verified[p].change)
        .collect();
    let Some(me) = c.roster.get(&c.signer) else {
        return fail(format!("its signer {:?} is not in its roster", c.signer));
    };
    // The signer answers to what the changes it follows settle on: their
    // roster, or during a fork the devices every side kept (so a device
    // one side of two concurrent admissions let in may sign next).
    let standing = log.standing_after(&prev);
    if standing.roster().get(&c.signer) != Some(me) {
        return fail(format!(
            "its signer {:?} is not admitted, with these keys, after the changes it follows (epoch {})",
            c.signer,
            standing.epoch()
        ));
    }
    g.check_signature(&log.did, &c.roster)?;
    let union = union_of(parents.iter().map(|p| &p.roster)).unwrap_or_default();
    match &standing {
        Standing::Settled {
            epoch,
            key_id,
            public_key,
            roster,
        } if *key_id == c.account_key_id => {
            if c.epoch != *epoch || c.account_public_key != *public_key {
                return fail("an admission that changes the epoch or the key's public half".into());
            }
            if !within(roster, &c.roster) {
                return fail("an admission that drops a device (removals rotate the key)".into());
            }
            if !c.removed.is_empty() {
                return fail("an admission that lists removed devices".into());
            }
        }
        _ => {
            let next = parents.iter().map(|p| p.epoch).max().unwrap_or(0) + 1;
            if c.epoch != next {
                return fail(format!(
                    "a rotation to epoch {} after epoch {}",
                    c.epoch,
                    next - 1
                ));
            }
            check_key_id(g)?;
            if log
                .verified
                .values()
                .any(|o| o.change.account_key_id == c.account_key_id)
            {
                return fail(format!(
                    "a rotation to key {:?}, which another change put in force",
                    c.account_key_id
                ));
            }
            if !within(&c.roster, standing.roster()) {
                return fail(
                    "a rotation that admits a device the changes it follows did not all keep"
                        .into(),
                );
            }
            let removed: Vec<&String> = union
                .keys()
                .filter(|d| !c.roster.contains_key(*d))
                .collect();
            if removed != c.removed.iter().collect::<Vec<_>>() {
                return fail("its removed list is not the devices it drops".into());
            }
        }
    }
    Ok(())
}

/// The proof a pending device publishes beside its signing key: HMAC-SHA256
/// of the did:key under a key derived from the pairing secret and public
/// key, which only the device and whoever reads its pairing code know.
pub fn signing_key_proof(
    secret: &[u8],
    device_public: &[u8; KEY_LEN],
    signing_key: &str,
) -> [u8; 32] {
    use hmac::{KeyInit, Mac};
    use sha2::{Digest, Sha256};
    let mut k = Sha256::new();
    k.update(b"gelstore/signing-key-proof/v1\0");
    k.update(device_public);
    k.update(secret);
    let key = k.finalize();
    let mut mac =
        hmac::Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes a key of any length");
    mac.update(signing_key.as_bytes());
    mac.finalize().into_bytes().into()
}

#[cfg(test)]
mod tests;
