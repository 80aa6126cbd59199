//! Membership under a hostile server, as a property over random runs.
//!
//! Each run is one account at the keyring level (no repository, no
//! network): 4–6 devices over the run, and a random interleaving of
//! pair/approve, remove, rotate, resolve a fork, make a chat key
//! (`chat_key_for_seal`), and sync. The "PDS" holding the records is
//! hostile: at each sync it may drop records, reorder them, withhold the
//! newest ones, or delete membership or keyWrap records for good (a
//! rollback). A device that syncs pushes the records it holds (the PDS may
//! lose them again), then either absorbs the view into the keyring it kept,
//! or rebuilds from scratch with `Keyring::rejoin` and the heads it verified
//! before (what `Device::open` does), and a pending device tries to join.
//!
//! Properties, checked throughout and at the end:
//! - **(a) confidentiality.** For each chat key made, the devices its
//!   sealer's verified log had admitted but its roster no longer held
//!   (removed, or left out by a fork) never hold that key. Devices admitted
//!   later, or concurrently on a side the sealer had not seen, may: they
//!   hold that epoch's account key by design (history stays readable).
//! - **Rollback.** A rebuild from a view that lost a change the device
//!   verified is refused (`MembershipLog`), never accepted; one that is
//!   accepted keeps every head the device knew.
//! - **(b) convergence.** After a final honest sync (every record, in
//!   order), every device verifies the same heads and standing; admitted
//!   devices all seal with the same key, or all report the same fork; after
//!   one of the devices every head kept resolves it, all converge on one
//!   key, the others are refused (`NotAdmitted`). A rebuild from the same
//!   records in another order gives the same keys.
//! - **(c) refusals.** Nothing panics, and every refusal is a `SealError`
//!   of the kinds an operation may name (counted and printed at the end).
//!
//! Seeds: `MEMBERSHIP_SEEDS` runs (300 by default) from seed 0;
//! `MEMBERSHIP_SEED=N` replays one run and prints its steps. A failure
//! names its seed and the last steps.

use crate::support::seal_rng;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, Ordering};

use gelstore::model::Cid;
use gelstore::seal::{
    DeviceKey, KeyLookup, KeySet, KeyWrap, Keyring, PairingRequest, Recipient, SealError,
    SignedChange, Standing, pair_request,
};
use seal_rng::HashRng;

const DID: &str = "did:plc:ewvi7nxzyoun6zhxrhs64oiz";
const CHATS: [&str; 3] = ["3lchataaaaa22", "3lchatbbbbb22", "3lchatccccc22"];
const STEPS: usize = 26;

/// The kinds of refusal each operation may name.
/// MembershipLog for the operations that make a change: the keyring's own
/// log refused it (see `Stats::own_change_refused`).
const ALLOWED: &[(&str, &[&str])] = &[
    (
        "approve",
        &[
            "MembershipFork",
            "NotAdmitted",
            "AccountKeyPending",
            "Keyring",
            "MembershipLog",
        ],
    ),
    (
        "remove",
        &[
            "MembershipFork",
            "NotAdmitted",
            "AccountKeyPending",
            "Keyring",
            "MembershipLog",
        ],
    ),
    (
        "rotate",
        &[
            "MembershipFork",
            "NotAdmitted",
            "AccountKeyPending",
            "Keyring",
            "MembershipLog",
        ],
    ),
    (
        "resolve",
        &["AccountKeyPending", "Keyring", "MembershipLog"],
    ),
    (
        "seal",
        &["MembershipFork", "NotAdmitted", "AccountKeyPending"],
    ),
    (
        "join",
        &["NotRecipient", "MembershipLog", "AuthenticationFailed"],
    ),
    (
        "rejoin",
        &["NotRecipient", "MembershipLog", "AuthenticationFailed"],
    ),
    // Wraps an absorb refused (AbsorbReport::rejected).
    ("absorb", &["MembershipLog", "AuthenticationFailed"]),
];

thread_local! {
    /// The current run's steps, printed when it fails.
    static TRACE: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

fn trace(line: String) {
    TRACE.with(|t| t.borrow_mut().push(line));
}

/// Choices (not key material): splitmix64.
struct Dice(u64);

impl Dice {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> Option<T> {
        (!items.is_empty()).then(|| items[self.below(items.len())])
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i + 1));
        }
    }
}

#[derive(Clone)]
enum Rec {
    Wrap(KeyWrap),
    Change(Box<SignedChange>),
}

struct Dev {
    id: String,
    key: DeviceKey,
    request: PairingRequest,
    ring: Option<Keyring>,
    /// The heads it verified last (what `device.json` keeps).
    known: Vec<Cid>,
    /// The records it holds (by sequence number).
    local: BTreeSet<usize>,
}

struct Made {
    sealer: String,
    epoch: u64,
    /// Devices that must never hold the key.
    forbidden: BTreeSet<String>,
}

#[derive(Default)]
struct Stats {
    refusals: BTreeMap<(String, String), usize>,
    ops: BTreeMap<&'static str, usize>,
    rollbacks_refused: usize,
    forks_at_end: usize,
    dead: usize,
    chat_keys: usize,
    /// Rebuilds refused though the view held every verified change.
    rejoin_refused_complete: Vec<String>,
    /// Rebuilds from the same records in another order that held other keys.
    order_dependent: Vec<String>,
    /// Seals with a chat key wrapped to another account key than the one
    /// in force.
    foreign_reuse: Vec<String>,
    /// Changes a keyring made that its own log refused (a device admitted
    /// on one side of concurrent admissions signs for both).
    own_change_refused: Vec<String>,
    time: BTreeMap<&'static str, std::time::Duration>,
}

impl Stats {
    fn merge(&mut self, o: Stats) {
        for (k, n) in o.refusals {
            *self.refusals.entry(k).or_default() += n;
        }
        for (k, n) in o.ops {
            *self.ops.entry(k).or_default() += n;
        }
        for (k, t) in o.time {
            *self.time.entry(k).or_default() += t;
        }
        self.rollbacks_refused += o.rollbacks_refused;
        self.forks_at_end += o.forks_at_end;
        self.dead += o.dead;
        self.chat_keys += o.chat_keys;
        self.rejoin_refused_complete
            .extend(o.rejoin_refused_complete);
        self.order_dependent.extend(o.order_dependent);
        self.foreign_reuse.extend(o.foreign_reuse);
        self.own_change_refused.extend(o.own_change_refused);
    }
}

struct World {
    seed: u64,
    dice: Dice,
    rng: HashRng,
    /// Every record ever written, by sequence number (the honest history).
    records: Vec<Rec>,
    /// What the PDS holds now.
    pds: BTreeSet<usize>,
    devs: Vec<Dev>,
    target: usize,
    made: BTreeMap<String, Made>,
}

fn kind(e: &SealError) -> String {
    let debug = format!("{e:?}");
    debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or_default()
        .to_string()
}

fn signing(key: &DeviceKey) -> Option<String> {
    Some(key.signing_key().public_key().to_did_key())
}

/// Every device a verified change of `ring`'s log admitted.
fn ever_admitted(ring: &Keyring) -> BTreeSet<String> {
    ring.log()
        .changes()
        .flat_map(|c| c.change.roster.keys().cloned())
        .collect()
}

impl World {
    fn new(seed: u64, stats: &mut Stats) -> World {
        let mut dice = Dice(seed ^ 0x6d65_6d62_6572_7368);
        let mut rng = HashRng::new(&format!("membership-property/{seed}"));
        let target = 4 + dice.below(3);
        let key = DeviceKey::generate(&mut rng);
        let request = pair_request(&key, &mut rng);
        let (ring, set) =
            Keyring::create(DID, "dev0", key.clone(), request.code(), &mut rng).unwrap();
        let mut w = World {
            seed,
            dice,
            rng,
            records: Vec::new(),
            pds: BTreeSet::new(),
            devs: vec![Dev {
                id: "dev0".into(),
                key,
                request,
                known: ring.heads(),
                ring: Some(ring),
                local: BTreeSet::new(),
            }],
            target,
            made: BTreeMap::new(),
        };
        w.publish(0, set);
        *stats.ops.entry("create").or_default() += 1;
        trace(format!(
            "seed {seed}: dev0 founds the account; {target} devices"
        ));
        w
    }

    #[track_caller]
    fn fail(&self, what: String) -> ! {
        panic!("seed {}: {what}", self.seed)
    }

    fn keyset(&self, seqs: impl IntoIterator<Item = usize>) -> KeySet {
        let mut set = KeySet::default();
        for s in seqs {
            match &self.records[s] {
                Rec::Wrap(w) => set.wraps.push(w.clone()),
                Rec::Change(c) => set.changes.push((**c).clone()),
            }
        }
        set
    }

    fn truth(&self) -> KeySet {
        self.keyset(0..self.records.len())
    }

    /// Stores what device `d` made: on the PDS, and in its own records.
    fn publish(&mut self, d: usize, set: KeySet) {
        let recs = set
            .changes
            .into_iter()
            .map(|c| Rec::Change(Box::new(c)))
            .chain(set.wraps.into_iter().map(Rec::Wrap));
        for r in recs {
            let seq = self.records.len();
            self.records.push(r);
            self.pds.insert(seq);
            self.devs[d].local.insert(seq);
        }
    }

    fn refusal(&self, stats: &mut Stats, op: &str, e: &SealError) {
        let k = kind(e);
        let allowed = ALLOWED
            .iter()
            .find(|(o, _)| *o == op)
            .map(|(_, ks)| *ks)
            .unwrap_or_default();
        if !allowed.contains(&k.as_str()) || e.to_string().is_empty() {
            self.fail(format!("{op} refused with an unexpected error: {e:?}"));
        }
        if matches!(op, "approve" | "remove" | "rotate" | "resolve")
            && matches!(e, SealError::MembershipLog { .. })
        {
            stats
                .own_change_refused
                .push(format!("seed {}: {op}: {e}", self.seed));
        }
        *stats.refusals.entry((op.to_string(), k)).or_default() += 1;
    }

    fn with_ring(&self) -> Vec<usize> {
        (0..self.devs.len())
            .filter(|&i| self.devs[i].ring.is_some())
            .collect()
    }

    fn step(&mut self, stats: &mut Stats) {
        let t = std::time::Instant::now();
        let r = self.dice.below(100);
        match r {
            0..15 => self.pair(stats),
            15..26 => self.remove(stats),
            26..33 => self.rotate(stats),
            33..40 => self.resolve(stats),
            40..60 => self.seal(stats),
            _ => self.sync(stats),
        }
        let name = match r {
            0..15 => "pair",
            15..26 => "remove",
            26..33 => "rotate",
            33..40 => "resolve",
            40..60 => "seal",
            _ => "sync",
        };
        *stats.time.entry(name).or_default() += t.elapsed();
    }

    fn pair(&mut self, stats: &mut Stats) {
        if self.devs.len() >= self.target {
            return self.sync(stats);
        }
        // Mostly a device that can seal approves; sometimes any (a refusal).
        let any = self.with_ring();
        let able: Vec<usize> = any
            .iter()
            .copied()
            .filter(|&i| {
                self.devs[i]
                    .ring
                    .as_ref()
                    .unwrap()
                    .sealing_account()
                    .is_ok()
            })
            .collect();
        let pool = if able.is_empty() || self.dice.chance(10) {
            any
        } else {
            able
        };
        let Some(a) = self.dice.pick(&pool) else {
            return self.sync(stats);
        };
        let id = format!("dev{}", self.devs.len());
        let key = DeviceKey::generate(&mut self.rng);
        let request = pair_request(&key, &mut self.rng);
        let mut ring = self.devs[a].ring.clone().unwrap();
        *stats.ops.entry("approve").or_default() += 1;
        match ring.approve(request.code(), &id, signing(&key), &mut self.rng) {
            Ok(set) => {
                trace(format!(
                    "{} approves {id} (epoch {})",
                    self.devs[a].id,
                    ring.account_epoch()
                ));
                self.devs[a].known = ring.heads();
                self.devs[a].ring = Some(ring);
                self.publish(a, set);
                self.devs.push(Dev {
                    id,
                    key,
                    request,
                    ring: None,
                    known: Vec::new(),
                    local: BTreeSet::new(),
                });
            }
            Err(e) => {
                trace(format!("{} cannot approve: {e}", self.devs[a].id));
                self.refusal(stats, "approve", &e);
            }
        }
    }

    fn remove(&mut self, stats: &mut Stats) {
        let Some(a) = self.dice.pick(&self.with_ring()) else {
            return;
        };
        let ring = self.devs[a].ring.as_ref().unwrap();
        let others: Vec<String> = ring
            .devices()
            .into_keys()
            .filter(|d| *d != self.devs[a].id)
            .collect();
        let Some(i) = self.dice.pick(&(0..others.len()).collect::<Vec<_>>()) else {
            return;
        };
        let target = others[i].clone();
        let mut ring = ring.clone();
        let result = ring.remove_device(&target, &mut self.rng);
        self.land(
            stats,
            a,
            ring,
            result,
            "remove",
            &format!("removes {target}"),
        );
    }

    /// Takes in the outcome of membership operation `op` on device `a`'s
    /// copy of its keyring: on success the device keeps it (and the heads)
    /// and publishes the records; a refusal is counted.
    fn land(
        &mut self,
        stats: &mut Stats,
        a: usize,
        ring: Keyring,
        result: Result<KeySet, SealError>,
        op: &'static str,
        what: &str,
    ) -> bool {
        *stats.ops.entry(op).or_default() += 1;
        match result {
            Ok(set) => {
                trace(format!(
                    "{} {what} (epoch {}, {:?})",
                    self.devs[a].id,
                    ring.account_epoch(),
                    ring.devices().keys().collect::<Vec<_>>()
                ));
                self.devs[a].known = ring.heads();
                self.devs[a].ring = Some(ring);
                self.publish(a, set);
                true
            }
            Err(e) => {
                trace(format!("{} cannot: {what}: {e}", self.devs[a].id));
                self.refusal(stats, op, &e);
                false
            }
        }
    }

    fn rotate(&mut self, stats: &mut Stats) {
        let Some(a) = self.dice.pick(&self.with_ring()) else {
            return;
        };
        let mut ring = self.devs[a].ring.clone().unwrap();
        let result = ring.rotate_account_key(&mut self.rng);
        self.land(stats, a, ring, result, "rotate", "rotates");
    }

    fn resolve(&mut self, stats: &mut Stats) {
        let any = self.with_ring();
        let forked: Vec<usize> = any
            .iter()
            .copied()
            .filter(|&i| self.devs[i].ring.as_ref().unwrap().fork().is_some())
            .collect();
        let pool = if forked.is_empty() || self.dice.chance(10) {
            any
        } else {
            forked
        };
        let Some(a) = self.dice.pick(&pool) else {
            return;
        };
        self.resolve_on(a, stats);
    }

    fn resolve_on(&mut self, a: usize, stats: &mut Stats) -> bool {
        let mut ring = self.devs[a].ring.clone().unwrap();
        let result = ring.resolve_fork(&mut self.rng);
        self.land(stats, a, ring, result, "resolve", "resolves the fork")
    }

    fn seal(&mut self, stats: &mut Stats) {
        let Some(a) = self.dice.pick(&self.with_ring()) else {
            return;
        };
        let chat = self.dice.pick(&CHATS).unwrap();
        self.seal_on(a, chat, stats);
    }

    fn seal_on(&mut self, a: usize, chat: &str, stats: &mut Stats) -> Option<String> {
        let mut ring = self.devs[a].ring.clone().unwrap();
        *stats.ops.entry("seal").or_default() += 1;
        match ring.chat_key_for_seal(chat, &mut self.rng) {
            Ok((key, wrap)) => {
                let roster = ring.devices();
                let me = &self.devs[a].id;
                if !roster.contains_key(me) {
                    self.fail(format!("{me} sealed outside its own roster {roster:?}"));
                }
                let forbidden: BTreeSet<String> = ever_admitted(&ring)
                    .into_iter()
                    .filter(|d| !roster.contains_key(d))
                    .collect();
                let account = ring.sealing_account().unwrap();
                let (epoch, account_id) = (account.epoch(), account.key_id().to_string());
                let key_id = key.key_id().to_string();
                // The chat key must be one wrapped to the account key in
                // force, not another key of the same epoch number (a side
                // of a fork that lost: its holders were not all kept).
                let under = wrap
                    .as_ref()
                    .map(|w| w.recipient.clone())
                    .or_else(|| self.chat_wrap_recipient(&key_id));
                if let Some(Recipient::Account { key_id: under, .. }) = &under
                    && *under != account_id
                {
                    trace(format!(
                        "{me} seals {chat} with {key_id}, made under {under}, while {account_id} is in force"
                    ));
                    stats.foreign_reuse.push(format!(
                        "seed {}: {me} sealed {chat} with {key_id}, wrapped to {under}, while the key in force is {account_id} (roster {:?}; holders of {under} include {:?})",
                        self.seed,
                        roster.keys().collect::<Vec<_>>(),
                        self.holders(under),
                    ));
                    self.devs[a].ring = Some(ring);
                    return None;
                }
                if !key_id.starts_with(&format!("chat:{chat}:{epoch}:")) {
                    self.fail(format!("{key_id} made at epoch {epoch}"));
                }
                trace(format!(
                    "{me} seals {chat} with {key_id}; never for {forbidden:?}"
                ));
                let made = self.made.entry(key_id).or_insert_with(|| Made {
                    sealer: me.clone(),
                    epoch,
                    forbidden: BTreeSet::new(),
                });
                made.forbidden.extend(forbidden);
                self.devs[a].ring = Some(ring);
                if let Some(w) = wrap {
                    stats.chat_keys += 1;
                    self.publish(
                        a,
                        KeySet {
                            wraps: vec![w],
                            changes: Vec::new(),
                        },
                    );
                }
                Some(key.key_id().to_string())
            }
            Err(e) => {
                trace(format!("{} cannot seal {chat}: {e}", self.devs[a].id));
                self.refusal(stats, "seal", &e);
                None
            }
        }
    }

    /// The recipient of the wrap of chat key `key_id`.
    fn chat_wrap_recipient(&self, key_id: &str) -> Option<Recipient> {
        self.records.iter().find_map(|r| match r {
            Rec::Wrap(w) if w.key_id == key_id => Some(w.recipient.clone()),
            _ => None,
        })
    }

    /// The devices holding account key `key_id` now.
    fn holders(&self, key_id: &str) -> Vec<String> {
        self.devs
            .iter()
            .filter(|d| {
                d.ring
                    .as_ref()
                    .is_some_and(|r| r.account_keys().any(|k| k.key_id() == key_id))
            })
            .map(|d| d.id.clone())
            .collect()
    }

    /// What the PDS hands one sync: some of what it holds, in some order;
    /// it may also delete records for good.
    fn hostile_view(&mut self) -> (Vec<usize>, String) {
        let mut seqs: Vec<usize> = self.pds.iter().copied().collect();
        if self.dice.chance(20) {
            return (seqs, "all".into());
        }
        let mut how = Vec::new();
        if self.dice.chance(40) {
            seqs.retain(|_| !self.dice.chance(25));
            how.push("drops some".to_string());
        }
        if self.dice.chance(30) {
            let k = 1 + self.dice.below(6);
            seqs.truncate(seqs.len().saturating_sub(k));
            how.push(format!("withholds the newest {k}"));
        }
        if self.dice.chance(25) {
            let gone: Vec<usize> = match self.dice.below(4) {
                0 => self
                    .pds
                    .iter()
                    .copied()
                    .filter(|s| matches!(self.records[*s], Rec::Change(_)))
                    .collect(),
                1 => self
                    .pds
                    .iter()
                    .copied()
                    .filter(|s| matches!(self.records[*s], Rec::Wrap(_)))
                    .collect(),
                2 => {
                    let mut d = Dice(self.dice.next());
                    self.pds.iter().copied().filter(|_| d.chance(50)).collect()
                }
                _ => {
                    let cut = self.records.len().saturating_sub(1 + self.dice.below(10));
                    self.pds.iter().copied().filter(|s| *s >= cut).collect()
                }
            };
            for s in &gone {
                self.pds.remove(s);
            }
            seqs.retain(|s| !gone.contains(s));
            how.push(format!("deletes {} for good", gone.len()));
        }
        match self.dice.below(3) {
            0 => {
                self.dice.shuffle(&mut seqs);
                how.push("shuffled".into());
            }
            1 => {
                seqs.reverse();
                how.push("reversed".into());
            }
            _ => {}
        }
        (seqs, how.join(", "))
    }

    fn sync(&mut self, stats: &mut Stats) {
        let d = self.dice.below(self.devs.len());
        if self.dice.chance(70) {
            let local = self.devs[d].local.clone();
            self.pds.extend(local);
        }
        let (seqs, how) = self.hostile_view();
        let view = self.keyset(seqs.iter().copied());
        let id = self.devs[d].id.clone();
        let rebuild = self.dice.chance(20);
        match self.devs[d].ring.clone() {
            None => {
                *stats.ops.entry("join").or_default() += 1;
                match Keyring::join(
                    DID,
                    &id,
                    self.devs[d].key.clone(),
                    &self.devs[d].request,
                    &view,
                ) {
                    Ok((ring, _)) => {
                        trace(format!("{id} joins from a view ({how})"));
                        self.devs[d].known = ring.heads();
                        self.devs[d].ring = Some(ring);
                    }
                    Err(e) => {
                        trace(format!("{id} cannot join ({how}): {e}"));
                        self.refusal(stats, "join", &e);
                    }
                }
            }
            Some(old) if rebuild => {
                let have: BTreeSet<Cid> = view.changes.iter().map(|c| c.cid).collect();
                let lost: Vec<Cid> = old
                    .log()
                    .changes()
                    .map(|c| c.cid)
                    .filter(|c| !have.contains(c))
                    .collect();
                *stats.ops.entry("rejoin").or_default() += 1;
                match Keyring::rejoin(
                    DID,
                    &id,
                    self.devs[d].key.clone(),
                    &self.devs[d].request,
                    old.admitted_with(),
                    &self.devs[d].known,
                    &view,
                ) {
                    Ok((ring, _)) => {
                        if !lost.is_empty() {
                            self.fail(format!(
                                "{id} rebuilt from a view ({how}) that lost {} verified changes: {lost:?}",
                                lost.len()
                            ));
                        }
                        if let Some(h) = self.devs[d]
                            .known
                            .iter()
                            .find(|h| ring.log().get(h).is_none())
                        {
                            self.fail(format!("{id}'s rebuild lost head {h}"));
                        }
                        trace(format!(
                            "{id} rebuilds from a view ({how}): epoch {}",
                            ring.account_epoch()
                        ));
                        self.devs[d].known = ring.heads();
                        self.devs[d].ring = Some(ring);
                    }
                    Err(e) => {
                        trace(format!("{id} refuses to rebuild from a view ({how}): {e}"));
                        self.refusal(stats, "rejoin", &e);
                        if lost.is_empty() {
                            if matches!(e, SealError::MembershipLog { .. }) {
                                stats
                                    .rejoin_refused_complete
                                    .push(format!("seed {}: {id}: {e}", self.seed));
                            }
                        } else if matches!(e, SealError::MembershipLog { .. }) {
                            stats.rollbacks_refused += 1;
                        }
                    }
                }
            }
            Some(mut ring) => {
                *stats.ops.entry("absorb").or_default() += 1;
                let report = ring.absorb(&view);
                for (_, e) in &report.rejected {
                    self.refusal(stats, "absorb", e);
                }
                trace(format!(
                    "{id} absorbs a view ({how}): epoch {}{}",
                    ring.account_epoch(),
                    if ring.fork().is_some() {
                        ", forked"
                    } else {
                        ""
                    }
                ));
                self.devs[d].known = ring.heads();
                self.devs[d].ring = Some(ring);
            }
        }
        self.devs[d].local.extend(seqs);
        self.check_confidential();
    }

    /// (a): no device holds a chat key its sealer had removed it from.
    fn check_confidential(&self) {
        for dev in &self.devs {
            let Some(ring) = &dev.ring else { continue };
            for (key_id, made) in &self.made {
                if made.forbidden.contains(&dev.id) && ring.chat_key(key_id).is_some() {
                    self.fail(format!(
                        "{} holds {key_id}, which {} sealed at epoch {} after a verified change left {} out",
                        dev.id, made.sealer, made.epoch, dev.id
                    ));
                }
            }
        }
    }

    /// Every device takes in every record, in order.
    fn honest_sync(&mut self, stats: &mut Stats) {
        let truth = self.truth();
        let all: BTreeSet<usize> = (0..self.records.len()).collect();
        for d in 0..self.devs.len() {
            let id = self.devs[d].id.clone();
            let ring = match self.devs[d].ring.clone() {
                None => {
                    match Keyring::join(
                        DID,
                        &id,
                        self.devs[d].key.clone(),
                        &self.devs[d].request,
                        &truth,
                    ) {
                        Ok((ring, _)) => ring,
                        Err(e) => self.fail(format!("{id} cannot join from every record: {e}")),
                    }
                }
                Some(mut ring) => {
                    let report = ring.absorb(&truth);
                    if !report.rejected.is_empty() {
                        self.fail(format!("{id} refused honest wraps: {:?}", report.rejected));
                    }
                    ring
                }
            };
            self.devs[d].known = ring.heads();
            self.devs[d].ring = Some(ring);
            self.devs[d].local = all.clone();
        }
        self.pds = all;
        *stats.ops.entry("honest sync").or_default() += 1;
        self.check_confidential();
    }

    /// (b): one log, one standing, one key (or one fork) for all.
    fn check_converged(&self) -> Standing {
        let rings: Vec<(&str, &Keyring)> = self
            .devs
            .iter()
            .map(|d| (d.id.as_str(), d.ring.as_ref().unwrap()))
            .collect();
        let (first_id, first) = rings[0];
        let standing = first.log().standing().clone();
        for (id, ring) in &rings {
            if ring.heads() != first.heads() {
                self.fail(format!(
                    "{id} and {first_id} verified other heads: {:?} / {:?}",
                    ring.heads(),
                    first.heads()
                ));
            }
            if *ring.log().standing() != standing {
                self.fail(format!("{id} and {first_id} stand differently"));
            }
        }
        match &standing {
            Standing::Settled { key_id, roster, .. } => {
                for (id, ring) in &rings {
                    let got = ring.sealing_account();
                    if roster.contains_key(*id) {
                        match got {
                            Ok(k) if k.key_id() == key_id => {}
                            other => self.fail(format!(
                                "{id} is admitted but does not seal with {key_id}: {other:?}"
                            )),
                        }
                    } else if !matches!(got, Err(SealError::NotAdmitted { .. })) {
                        self.fail(format!("{id} is not admitted but: {got:?}"));
                    }
                }
            }
            Standing::Forked { .. } => {
                let fork = first.fork();
                for (id, ring) in &rings {
                    if ring.fork() != fork || fork.is_none() {
                        self.fail(format!("{id} reports {:?}, not {fork:?}", ring.fork()));
                    }
                    if !matches!(
                        ring.sealing_account(),
                        Err(SealError::MembershipFork { .. })
                    ) {
                        self.fail(format!("{id} seals during a fork"));
                    }
                }
            }
        }
        standing
    }

    /// A rebuild from every record, in order and in another order, holds
    /// what the synced keyring holds.
    fn check_rebuilds(&mut self, stats: &mut Stats) {
        let truth = self.truth();
        let mut shuffled = truth.clone();
        self.dice.shuffle(&mut shuffled.wraps);
        self.dice.shuffle(&mut shuffled.changes);
        // One device, one order: a rebuild verifies the whole log, the
        // slowest thing here.
        let order = if self.dice.chance(60) {
            "shuffled"
        } else {
            "in order"
        };
        let chosen = [(self.dice.below(self.devs.len()), order)];
        for (d, order) in chosen {
            let dev = &self.devs[d];
            let records = if order == "shuffled" {
                &shuffled
            } else {
                &truth
            };
            let ring = dev.ring.as_ref().unwrap();
            let keys = |r: &Keyring| {
                (
                    r.account_keys()
                        .map(|k| k.key_id().to_string())
                        .collect::<BTreeSet<_>>(),
                    r.chat_key_ids(),
                )
            };
            {
                let (again, _) = match Keyring::rejoin(
                    DID,
                    &dev.id,
                    dev.key.clone(),
                    &dev.request,
                    ring.admitted_with(),
                    &dev.known,
                    records,
                ) {
                    Ok(r) => r,
                    Err(e) => self.fail(format!(
                        "{} cannot rebuild from every record ({order}): {e}",
                        dev.id
                    )),
                };
                if again.heads() != ring.heads() {
                    self.fail(format!("{}'s rebuild ({order}) has other heads", dev.id));
                }
                if keys(&again) != keys(ring) {
                    let (a, c) = keys(&again);
                    let (ra, rc) = keys(ring);
                    stats.order_dependent.push(format!(
                        "seed {}: {} rebuilt {order}: account keys {:?} missing, chat keys {:?} missing",
                        self.seed,
                        dev.id,
                        ra.difference(&a).collect::<Vec<_>>(),
                        rc.difference(&c).collect::<Vec<_>>(),
                    ));
                }
            }
        }
    }

    fn finish(&mut self, stats: &mut Stats) {
        trace("final honest sync".into());
        let t = std::time::Instant::now();
        self.honest_sync(stats);
        let standing = self.check_converged();
        *stats.time.entry("final sync").or_default() += t.elapsed();
        let t = std::time::Instant::now();
        self.check_rebuilds(stats);
        *stats.time.entry("rebuilds").or_default() += t.elapsed();
        if let Standing::Forked { kept, .. } = &standing {
            stats.forks_at_end += 1;
            let Some(r) = self.devs.iter().position(|d| kept.contains_key(&d.id)) else {
                // Every device was removed on some side: nobody may resolve.
                stats.dead += 1;
                trace("a fork no device is kept by".into());
                return;
            };
            if !self.resolve_on(r, stats) {
                self.fail(format!(
                    "{} was kept by every head but cannot resolve",
                    self.devs[r].id
                ));
            }
            self.honest_sync(stats);
            if let Standing::Forked { .. } = self.check_converged() {
                self.fail("still forked after a resolution".into());
            }
        }
        // A last key per chat from an admitted device reaches every admitted
        // device and no other.
        let Standing::Settled { roster, .. } =
            self.devs[0].ring.as_ref().unwrap().log().standing().clone()
        else {
            unreachable!()
        };
        let Some(a) = self.devs.iter().position(|d| roster.contains_key(&d.id)) else {
            return;
        };
        let foreign = stats.foreign_reuse.len();
        let ids: Vec<String> = CHATS
            .iter()
            .filter_map(|chat| self.seal_on(a, chat, stats))
            .collect();
        if ids.len() + stats.foreign_reuse.len() - foreign != CHATS.len() {
            self.fail(format!("{} is admitted but cannot seal", self.devs[a].id));
        }
        self.honest_sync(stats);
        for dev in &self.devs {
            let held = ids
                .iter()
                .filter(|k| dev.ring.as_ref().unwrap().chat_key(k).is_some())
                .count();
            let admitted = roster.contains_key(&dev.id);
            if held != if admitted { ids.len() } else { 0 } {
                self.fail(format!(
                    "{} (admitted: {admitted}) holds {held} of the last {} chat keys",
                    dev.id,
                    ids.len()
                ));
            }
        }
    }
}

fn run(seed: u64, stats: &mut Stats) {
    let mut w = World::new(seed, stats);
    for _ in 0..STEPS {
        w.step(stats);
    }
    w.finish(stats);
}

/// Runs `seed`, printing its steps if it fails (or if `verbose`).
fn replay(seed: u64, verbose: bool, failed: &AtomicBool, stats: &mut Stats) {
    TRACE.with(|t| t.borrow_mut().clear());
    let outcome = catch_unwind(AssertUnwindSafe(|| run(seed, stats)));
    if verbose || outcome.is_err() {
        TRACE.with(|t| {
            let t = t.borrow();
            let from = if verbose {
                0
            } else {
                t.len().saturating_sub(40)
            };
            eprintln!("--- seed {seed}, steps {from}..{}:", t.len());
            for line in &t[from..] {
                eprintln!("  {line}");
            }
        });
    }
    if let Err(panic) = outcome {
        failed.store(true, Ordering::Relaxed);
        eprintln!(
            "membership property failed at seed {seed}; replay: MEMBERSHIP_SEED={seed} cargo test --test seal membership_property -- --nocapture"
        );
        resume_unwind(panic);
    }
}

#[test]
fn membership_holds_against_a_hostile_pds() {
    let one: Option<u64> = std::env::var("MEMBERSHIP_SEED")
        .ok()
        .map(|s| s.parse().expect("MEMBERSHIP_SEED is a number"));
    let count: u64 = std::env::var("MEMBERSHIP_SEEDS")
        .ok()
        .map(|s| s.parse().expect("MEMBERSHIP_SEEDS is a number"))
        .unwrap_or(300);
    let seeds: Vec<u64> = match one {
        Some(s) => vec![s],
        None => (0..count).collect(),
    };
    let start = std::time::Instant::now();
    // The runs are independent: split them over the machine's cores.
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 4)
        .min(seeds.len());
    let failed = AtomicBool::new(false);
    let mut stats = Stats::default();
    let parts: Vec<std::thread::Result<Stats>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (seeds, failed) = (&seeds, &failed);
                scope.spawn(move || {
                    let mut stats = Stats::default();
                    for &seed in seeds.iter().skip(t).step_by(threads) {
                        if failed.load(Ordering::Relaxed) {
                            break;
                        }
                        replay(seed, one.is_some(), failed, &mut stats);
                    }
                    stats
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join()).collect()
    });
    for part in parts {
        match part {
            Ok(part) => stats.merge(part),
            Err(panic) => resume_unwind(panic),
        }
    }
    println!(
        "{} runs in {:.1} s; {} chat keys made; forks at the final sync: {} ({} with no device kept by every head); rebuilds from a rolled-back log refused: {}",
        seeds.len(),
        start.elapsed().as_secs_f64(),
        stats.chat_keys,
        stats.forks_at_end,
        stats.dead,
        stats.rollbacks_refused
    );
    println!("operations: {:?}", stats.ops);
    println!("time: {:?}", stats.time);
    println!("refusals (operation, kind): {:?}", stats.refusals);
    for line in &stats.rejoin_refused_complete {
        println!("rebuild refused with every verified change present: {line}");
    }
    for line in &stats.order_dependent {
        println!("order-dependent rebuild: {line}");
    }
    for line in stats.own_change_refused.iter().take(5) {
        println!("own change refused by its own log: {line}");
    }
    if stats.own_change_refused.len() > 5 {
        println!(
            "own change refused by its own log: {} in all",
            stats.own_change_refused.len()
        );
    }
    for line in &stats.foreign_reuse {
        println!("sealed under a key not in force: {line}");
    }
    assert!(
        stats.rejoin_refused_complete.is_empty()
            && stats.order_dependent.is_empty()
            && stats.foreign_reuse.is_empty(),
        "see the lines above"
    );
}

/// a founds the account and admits `others`; each joins from the records.
fn small_account(others: &[&str], rng: &mut HashRng) -> (BTreeMap<String, Keyring>, KeySet) {
    let key = DeviceKey::generate(rng);
    let code = pair_request(&key, rng).code().clone();
    let (mut a, mut records) = Keyring::create(DID, "a", key, &code, rng).unwrap();
    let mut pending = Vec::new();
    for id in others {
        let key = DeviceKey::generate(rng);
        let request = pair_request(&key, rng);
        records.extend(a.approve(request.code(), id, signing(&key), rng).unwrap());
        pending.push((id.to_string(), key, request));
    }
    let mut rings = BTreeMap::new();
    for (id, key, request) in pending {
        let (ring, _) = Keyring::join(DID, &id, key, &request, &records).unwrap();
        rings.insert(id, ring);
    }
    rings.insert("a".into(), a);
    (rings, records)
}

/// Found by the property above (seed 16 and others): a chat key is reused
/// by epoch *number*, so after a fork settles for one epoch-N key, the
/// chat key made under the other (the disputed side's, which the removed
/// device holds) keeps sealing new records.
#[test]
fn a_chat_key_made_under_a_disputed_key_is_not_reused() {
    let mut rng = HashRng::new("disputed-chat-key");
    let (mut rings, mut records) = small_account(&["b", "c"], &mut rng);
    // c, before it learns of its removal, rotates and seals in a chat.
    let mut stale_c = rings["c"].clone();
    let removal = rings
        .get_mut("a")
        .unwrap()
        .remove_device("c", &mut rng)
        .unwrap();
    let forged = stale_c.rotate_account_key(&mut rng).unwrap();
    let (c_key, c_wrap) = stale_c.chat_key_for_seal(CHATS[0], &mut rng).unwrap();
    records.extend(removal);
    records.extend(forged);
    records.wraps.extend(c_wrap);
    let b = rings.get_mut("b").unwrap();
    b.absorb(&records);
    // The removal stands (c's rotation is disputed): b seals under a's key.
    assert!(b.fork().is_none());
    let in_force = b.sealing_account().unwrap().key_id().to_string();
    assert_eq!(in_force, rings["a"].sealing_account().unwrap().key_id());
    let (key, wrap) = rings
        .get_mut("b")
        .unwrap()
        .chat_key_for_seal(CHATS[0], &mut rng)
        .unwrap();
    assert!(stale_c.chat_key(c_key.key_id()).is_some());
    assert!(
        key.key_id() != c_key.key_id() && wrap.is_some(),
        "b seals under {in_force} with {}, the chat key c made under its own rotation: c reads it",
        key.key_id()
    );
}

/// Found by the property above (the shuffled rebuilds): `absorb` takes a
/// rotation wrap it cannot open yet as refused, not as "later", when the
/// device holds another key of the epoch before; so whether a device gets
/// the resolution of a fork from the same records depends on their order.
#[test]
fn a_resolution_is_absorbed_whatever_the_order_of_the_wraps() {
    let mut rng = HashRng::new("resolution-order");
    let (mut rings, mut records) = small_account(&["b", "c", "d"], &mut rng);
    // b as it was before either removal: it holds only the epoch-0 key.
    let b_before = rings["b"].clone();
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
    records.extend(ra.clone());
    records.extend(rb.clone());
    rings.get_mut("a").unwrap().absorb(&records);
    let resolved = rings.get_mut("a").unwrap().resolve_fork(&mut rng).unwrap();
    let k2 = resolved.changes[0].change.account_key_id.clone();
    records.extend(resolved.clone());
    let to_b = |set: &KeySet| {
        set.wraps
            .iter()
            .find(|w| matches!(&w.recipient, Recipient::Device { device } if device == "b"))
            .unwrap()
            .clone()
    };
    // Each epoch-1 key's wrap to b first, then the resolution's, then the
    // rest: with the key that is not the resolution's PSK first, b tries
    // the resolution with it, refuses it, and never comes back to it.
    for first in [to_b(&ra), to_b(&rb)] {
        let mut ordered = records.clone();
        let resolution = to_b(&resolved);
        ordered
            .wraps
            .retain(|w| w.ciphertext != first.ciphertext && w.ciphertext != resolution.ciphertext);
        ordered.wraps.splice(0..0, [first.clone(), resolution]);
        let mut b = b_before.clone();
        let report = b.absorb(&ordered);
        assert!(
            b.account_keys().any(|k| k.key_id() == k2),
            "b did not take {k2} with {} first: {:?}",
            first.key_id,
            report.rejected
        );
    }
}
