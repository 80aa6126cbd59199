//! Re-sealing a store for its account's DID.
//!
//! A store started offline seals for its own repository's did:key. When it
//! is first linked to an account (the first `gelstore sync` with a login,
//! after its pull), [`reseal_for_account`] seals everything again for the
//! account's DID before anything is pushed: every sealed record (chats, messages and
//! their pending-reply authenticators, settings), with any at-uri that
//! names the old DID rewritten (a message's `chat`), every key wrap, and
//! the membership log, signed again change by change (new CIDs, so new
//! `prev` links). All of it is one repository commit.
//!
//! **Crash safety.** `device.json` gets `resealPending` (the account DID
//! and the heads of the re-signed log) before the commit, and
//! `accountDid` (the store now seals for the account) after it, with the
//! new heads. If a crash comes between the two, the repository says which
//! side of the commit it is on: it holds the new heads only if the commit
//! landed. [`Device::open`](super::Device::open) then finishes the state
//! file; otherwise the next sync redoes the re-seal from the old records.
//! [`check_ready`] refuses a push while either is unfinished.
//!
//! **What cannot follow.** Only this device's signing key is here, so the
//! re-seal needs a log whose every change it signed (true of a store
//! started offline: it was the only writer). The pairing wraps of devices
//! paired from an exported CAR need their pairing secrets, which never
//! left those devices: they are dropped, and those devices pair again
//! ([`ResealReport::left_behind`]). A store linked by an earlier version
//! (its records already on the PDS, sealed for its did:key) is not
//! re-sealed: the other devices hold those records as they are.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use ipld_core::ipld::Ipld;
use rand_core::CryptoRng;
use serde::Serialize;

use super::error::{DeviceError, not_paired};
use super::handle::derive;
use super::records::{DEVICE_COLLECTION, wrap_from_value, wrap_to_value};
use super::state::{DeviceState, PendingReseal, load_device_key};
use crate::model::{Cid, ipld_to_json, record_from_json};
use crate::repo::repository::{RepoError, Repository, Write};
use crate::seal::membership::MEMBERSHIP_COLLECTION;
use crate::seal::wrap::KEY_WRAP_COLLECTION;
use crate::seal::{
    Envelope, KeyLookup, KeySet, KeyWrap, Keyring, Place, ResealedWrap, SealError, SealOptions,
    SignedChange, open_record, seal_record, sealed_fields,
};

/// The collections a store seals and pushes.
const PREFIX: &str = "chat.gel.assistant.";

/// What [`reseal_for_account`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ResealOutcome {
    /// Nothing to do: no admitted device here, or it seals for the
    /// account's DID already.
    NotNeeded,
    /// The store seals for a DID of an earlier link (records on the PDS
    /// already sealed for it); it is left as it is.
    Earlier {
        /// The DID it seals for.
        did: String,
    },
    /// A re-seal whose commit had landed was finished (the state file).
    Finished {
        /// The account's DID.
        did: String,
    },
    /// Everything was sealed again for the account's DID.
    Resealed(ResealReport),
}

/// What one re-seal changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResealReport {
    /// The DID the records were sealed for.
    pub from: String,
    /// The account's DID they are sealed for now.
    pub to: String,
    /// Sealed records sealed again.
    pub sealed: usize,
    /// Clear records whose at-uris were rewritten.
    pub rewritten: usize,
    /// Key wraps made again.
    pub wraps: usize,
    /// Membership changes signed again.
    pub changes: usize,
    /// Records dropped, as `collection/rkey`: other devices' pairing wraps
    /// (see `left_behind`), key wraps this device's keyring does not accept
    /// (planted by the PDS, or damaged: they open for nobody here) and
    /// membership changes that never verified.
    pub dropped: Vec<String>,
    /// Devices paired from an exported CAR: their pairing wraps cannot be
    /// made without their pairing secrets, so they must pair again.
    pub left_behind: Vec<String>,
    /// Sealed records, as `collection/rkey`, that came from the PDS (it
    /// holds them as they are here) and do not open for this store's old
    /// DID: not this store's to seal again, so left as they are (a PDS
    /// that plants one cannot block the re-seal with it).
    pub left_unopened: Vec<String>,
}

/// Seals the store of `dir` (its open repository `repo`) again for
/// `account`, the DID of the account it is being linked to, if its device
/// seals for its own did:key (see the module docs). `pushed` is the sync
/// mirror's `collection/rkey → CID` of the PDS's records of our
/// collections: a store whose membership records are among them was
/// linked by an earlier version and is left as it is. Finishes a re-seal
/// a crash interrupted. On error nothing was changed (or only
/// `resealPending`, which the next run redoes).
pub fn reseal_for_account(
    dir: &Path,
    repo: &mut Repository,
    account: &str,
    pushed: &BTreeMap<String, Cid>,
    rng: &mut impl CryptoRng,
) -> Result<ResealOutcome, DeviceError> {
    let Some(mut state) = DeviceState::load(dir)? else {
        return Ok(ResealOutcome::NotNeeded);
    };
    if !state.is_admitted() {
        return Ok(ResealOutcome::NotNeeded);
    }
    if let Some(pending) = &state.reseal {
        if pending.account_did != account {
            return Err(refused(
                account,
                format!(
                    "a re-seal for {} was started here and not finished; sync with that account to finish it",
                    pending.account_did
                ),
            ));
        }
        if finish_pending(dir, repo, &mut state)? {
            return Ok(ResealOutcome::Finished {
                did: account.to_owned(),
            });
        }
    }
    let from = sealing_did(&state, repo);
    if from == account {
        if state.reseal.take().is_some() {
            state.save(dir)?; // a stale marker: it already seals for the account
        }
        return Ok(ResealOutcome::NotNeeded);
    }
    if from != repo.did() || linked_earlier(repo, pushed)? {
        return Ok(ResealOutcome::Earlier { did: from });
    }
    if !repo.is_writable() {
        return Err(DeviceError::ReadOnlyCopy {
            did: repo.did().to_owned(),
        });
    }
    let key = load_device_key(dir)?;
    let (_, keyring, _, _) = derive(repo, &key, &state)?;
    if keyring.held_epoch() < state.held_epoch {
        return Err(DeviceError::MembershipRolledBack {
            held: state.held_epoch,
            now: keyring.held_epoch(),
        });
    }
    let plan = plan(repo, &keyring, &state, (&from, account), pushed, rng)
        .map_err(|e| refused(account, e.to_string()))?;
    verify_plan(&key, &state, &keyring, account, &plan)
        .map_err(|e| refused(account, e.to_string()))?;

    // The marker first: a crash after the commit is then recognised.
    state.reseal = Some(PendingReseal {
        account_did: account.to_owned(),
        heads: plan.heads.clone(),
    });
    state.save(dir)?;
    repo.apply(&plan.writes)?;
    finish_pending(dir, repo, &mut state)?;
    Ok(ResealOutcome::Resealed(plan.report))
}

/// Refuses a push from the store of `dir` to `account` while a re-seal is
/// unfinished, or while its device seals for its own did:key (the records
/// would reach the PDS sealed for it). `pushed` as for
/// [`reseal_for_account`].
pub fn check_ready(
    dir: &Path,
    repo: &Repository,
    account: &str,
    pushed: &BTreeMap<String, Cid>,
) -> Result<(), DeviceError> {
    let Some(state) = DeviceState::load(dir)? else {
        return Ok(());
    };
    if !state.is_admitted() {
        return Ok(());
    }
    if let Some(pending) = &state.reseal {
        return Err(DeviceError::ResealPending {
            account: pending.account_did.clone(),
        });
    }
    let from = sealing_did(&state, repo);
    if from == account || from != repo.did() || linked_earlier(repo, pushed)? {
        return Ok(());
    }
    Err(DeviceError::ResealPending {
        account: account.to_owned(),
    })
}

/// Where `resealPending` is set: if the repository holds the re-signed
/// log's heads, the commit landed and the state file is finished
/// (`accountDid`, the heads). Returns whether it was.
pub(super) fn finish_pending(
    dir: &Path,
    repo: &Repository,
    state: &mut DeviceState,
) -> Result<bool, DeviceError> {
    let Some(pending) = state.reseal.clone() else {
        return Ok(false);
    };
    let held: BTreeSet<Cid> = change_records(repo)?
        .into_iter()
        .filter_map(|(_, _, c)| c.ok().map(|c| c.cid))
        .collect();
    if !pending.heads.iter().all(|h| held.contains(h)) {
        return Ok(false);
    }
    let mut next = state.clone();
    next.account_did = (pending.account_did != repo.did()).then_some(pending.account_did);
    next.membership_heads = pending.heads;
    next.reseal = None;
    next.save(dir)?;
    *state = next;
    Ok(true)
}

fn refused(account: &str, reason: String) -> DeviceError {
    DeviceError::Reseal {
        account: account.to_owned(),
        reason,
    }
}

fn sealing_did(state: &DeviceState, repo: &Repository) -> String {
    state
        .account_did
        .clone()
        .unwrap_or_else(|| repo.did().to_owned())
}

/// Whether the PDS already holds one of this store's membership records as
/// it is here (pushed by an earlier version, sealed for its did:key).
fn linked_earlier(repo: &Repository, pushed: &BTreeMap<String, Cid>) -> Result<bool, DeviceError> {
    for item in repo.list(Some(MEMBERSHIP_COLLECTION))? {
        let (key, cid) = item?;
        if pushed.get(&key) == Some(&cid) {
            return Ok(true);
        }
    }
    Ok(false)
}

type ChangeRecord = (String, Cid, Result<SignedChange, SealError>);

/// The membership records: rkey, record CID, parsed change.
fn change_records(repo: &Repository) -> Result<Vec<ChangeRecord>, DeviceError> {
    let mut out = Vec::new();
    for (rkey, cid, value) in records_in(repo, MEMBERSHIP_COLLECTION)? {
        out.push((rkey, cid, SignedChange::from_value(value)));
    }
    Ok(out)
}

fn records_in(
    repo: &Repository,
    collection: &str,
) -> Result<Vec<(String, Cid, serde_json::Value)>, DeviceError> {
    let keys: Vec<(String, Cid)> = repo
        .list(Some(collection))?
        .collect::<Result<_, RepoError>>()?;
    let mut out = Vec::with_capacity(keys.len());
    for (key, cid) in keys {
        let rkey = key.split_once('/').map_or(key.as_str(), |(_, r)| r);
        if let Some(entry) = repo.get(collection, rkey)? {
            out.push((rkey.to_owned(), cid, entry.value));
        }
    }
    Ok(out)
}

/// The writes of a re-seal and what they will leave.
struct Plan {
    writes: Vec<Write>,
    /// The records re-sealed, to open once more before the commit.
    sealed: Vec<(String, String, Ipld)>,
    /// The key records after.
    keys: KeySet,
    heads: Vec<Cid>,
    report: ResealReport,
}

fn plan(
    repo: &Repository,
    keyring: &Keyring,
    state: &DeviceState,
    (from, to): (&str, &str),
    pushed: &BTreeMap<String, Cid>,
    rng: &mut impl CryptoRng,
) -> Result<Plan, DeviceError> {
    let mut report = ResealReport {
        from: from.to_owned(),
        to: to.to_owned(),
        sealed: 0,
        rewritten: 0,
        wraps: 0,
        changes: 0,
        dropped: Vec::new(),
        left_behind: Vec::new(),
        left_unopened: Vec::new(),
    };
    let mut writes = Vec::new();
    let mut keys = KeySet::default();

    // Key wraps that do not decode are no wraps this store made: left as
    // they are (they open for nobody).
    let mut wrap_rkeys = Vec::new();
    let mut wraps: Vec<KeyWrap> = Vec::new();
    for (rkey, cid, value) in records_in(repo, KEY_WRAP_COLLECTION)? {
        if let Ok(w) = wrap_from_value(value) {
            wrap_rkeys.push((rkey, cid));
            wraps.push(w);
        }
    }
    // Only the wraps the keyring accepts are made again; the others (another
    // device's pairing wrap, or one planted by the PDS) are dropped by name.
    let resealed = keyring.resealed_for(to, &state.request(), &wraps, rng)?;
    for ((rkey, cid), wrap) in wrap_rkeys.into_iter().zip(&resealed.wraps) {
        match wrap {
            ResealedWrap::Remade(w) => {
                writes.push(update(KEY_WRAP_COLLECTION, &rkey, wrap_to_value(w)?, cid));
                keys.wraps.push(w.clone());
                report.wraps += 1;
            }
            ResealedWrap::LeftBehind(_) | ResealedWrap::Refused(_) => {
                if let ResealedWrap::Refused(why) = wrap {
                    tracing::warn!(
                        record = %format!("{KEY_WRAP_COLLECTION}/{rkey}"),
                        why = %why,
                        "a key wrap this device does not accept is left out of the re-seal"
                    );
                }
                writes.push(Write::Delete {
                    collection: KEY_WRAP_COLLECTION.to_owned(),
                    rkey: rkey.clone(),
                    swap: Some(cid),
                });
                report.dropped.push(format!("{KEY_WRAP_COLLECTION}/{rkey}"));
            }
        }
    }
    report.left_behind = resealed.left_behind.iter().cloned().collect();
    for (rkey, cid, change) in change_records(repo)? {
        match change.ok().and_then(|c| resealed.changes.get(&c.cid)) {
            Some(new) => {
                writes.push(update(MEMBERSHIP_COLLECTION, &rkey, new.value.clone(), cid));
                keys.changes.push(new.clone());
                report.changes += 1;
            }
            // A change that never verified was never part of the log.
            None => {
                writes.push(Write::Delete {
                    collection: MEMBERSHIP_COLLECTION.to_owned(),
                    rkey: rkey.clone(),
                    swap: Some(cid),
                });
                report
                    .dropped
                    .push(format!("{MEMBERSHIP_COLLECTION}/{rkey}"));
            }
        }
    }
    if report.changes != resealed.changes.len() {
        return Err(SealError::Keyring {
            reason: "a verified membership change has no record here".into(),
        }
        .into());
    }

    // Every other record of ours: sealed ones opened and sealed again, clear
    // ones only if an at-uri names the old DID.
    let mut sealed = Vec::new();
    let mut unreadable = Vec::new();
    let entries: Vec<(String, Cid)> = repo.list(None)?.collect::<Result<_, RepoError>>()?;
    for (path, cid) in entries {
        let Some((collection, rkey)) = path.split_once('/') else {
            continue;
        };
        if !collection.starts_with(PREFIX)
            || [
                DEVICE_COLLECTION,
                KEY_WRAP_COLLECTION,
                MEMBERSHIP_COLLECTION,
            ]
            .contains(&collection)
        {
            continue;
        }
        let Some(entry) = repo.get(collection, rkey)? else {
            continue;
        };
        let original = record_from_json(&entry.value)
            .map_err(|e| SealError::malformed("record", format!("{path}: {e}")))?;
        let mut record = original.clone();
        let rewritten = rewrite_uris(&mut record, from, to);
        let Ipld::Map(map) = &original else {
            continue;
        };
        let record_type = match map.get("$type") {
            Some(Ipld::String(t)) => t.as_str(),
            _ => "",
        };
        let is_sealed = sealed_fields(record_type)
            .iter()
            .any(|f| map.contains_key(*f));
        if !is_sealed {
            if rewritten {
                let value = ipld_to_json(&record)
                    .map_err(|e| SealError::malformed("record", e.to_string()))?;
                writes.push(update(collection, rkey, value, cid));
                report.rewritten += 1;
            }
            continue;
        }
        let old = Place {
            did: from,
            collection,
            rkey,
        };
        let opened = match open_record(&original, &old, keyring) {
            Ok(o) => o,
            // The PDS's own copy, not sealed here: not ours to seal again.
            Err(e) if pushed.get(&path) == Some(&cid) => {
                tracing::warn!(
                    record = %path,
                    why = %e,
                    "a sealed record from the PDS that does not open here is left as it is"
                );
                report.left_unopened.push(path.clone());
                continue;
            }
            Err(e) => {
                unreadable.push(format!("{path} ({e})"));
                continue;
            }
        };
        let key_id = match map.get(opened.field).map(Envelope::from_ipld) {
            Some(Ok(envelope)) => envelope.key_id,
            _ => {
                unreadable.push(format!("{path} (its envelope)"));
                continue;
            }
        };
        let Some(chat_key) = keyring.chat_key(&key_id) else {
            unreadable.push(format!("{path} (key {key_id})"));
            continue;
        };
        let mut content = opened.content;
        rewrite_uris(&mut content, from, to);
        let new = Place {
            did: to,
            collection,
            rkey,
        };
        let value = seal_record(
            &record,
            &new,
            &content,
            &opened.blobs,
            chat_key,
            &SealOptions::default(),
            rng,
        )?;
        let json =
            ipld_to_json(&value).map_err(|e| SealError::malformed("record", e.to_string()))?;
        writes.push(update(collection, rkey, json, cid));
        sealed.push((collection.to_owned(), rkey.to_owned(), value));
        report.sealed += 1;
    }
    if !unreadable.is_empty() {
        let shown: Vec<&str> = unreadable.iter().take(5).map(String::as_str).collect();
        return Err(SealError::Keyring {
            reason: format!(
                "{} record(s) do not open for {from} here, so they cannot be sealed again: {}{}; delete them (or restore them) before linking",
                unreadable.len(),
                shown.join(", "),
                if unreadable.len() > shown.len() { ", …" } else { "" }
            ),
        }
        .into());
    }
    Ok(Plan {
        writes,
        sealed,
        keys,
        heads: resealed.heads,
        report,
    })
}

fn update(collection: &str, rkey: &str, value: serde_json::Value, cid: Cid) -> Write {
    Write::Update {
        collection: collection.to_owned(),
        rkey: rkey.to_owned(),
        value,
        swap: Some(cid),
    }
}

/// Before anything is written: the new key records give this device, for
/// the account's DID, the keyring it has now (same epoch, every chat key,
/// the new heads), and every re-sealed record opens with it.
fn verify_plan(
    key: &crate::seal::DeviceKey,
    state: &DeviceState,
    old: &Keyring,
    account: &str,
    plan: &Plan,
) -> Result<(), DeviceError> {
    let (Some(device), Some(account_key)) = (&state.device, &state.account_key_id) else {
        return Err(not_paired(state));
    };
    let (ring, _) = Keyring::rejoin(
        account,
        device,
        key.clone(),
        &state.request(),
        account_key,
        &[],
        &plan.keys,
    )?;
    let mut heads = plan.heads.clone();
    heads.sort();
    let fail = |reason: String| -> Result<(), DeviceError> {
        Err(SealError::Keyring {
            reason: format!("the re-sealed records do not check out: {reason}"),
        }
        .into())
    };
    if ring.heads() != heads {
        return fail("the re-signed log has other heads".into());
    }
    if ring.held_epoch() != old.held_epoch() || ring.account_epoch() != old.account_epoch() {
        return fail("the account epoch changed".into());
    }
    if !old.chat_key_ids().is_subset(&ring.chat_key_ids()) {
        return fail("a chat key is no longer reachable".into());
    }
    for (collection, rkey, value) in &plan.sealed {
        let place = Place {
            did: account,
            collection,
            rkey,
        };
        if let Err(e) = open_record(value, &place, &ring) {
            return fail(format!("{collection}/{rkey}: {e}"));
        }
    }
    Ok(())
}

/// Rewrites every string that is an at-uri of DID `from` (`at://from` or
/// `at://from/…`) to name `to`. Returns whether any was.
fn rewrite_uris(value: &mut Ipld, from: &str, to: &str) -> bool {
    match value {
        Ipld::String(s) => {
            let Some(rest) = s
                .strip_prefix("at://")
                .and_then(|r| r.strip_prefix(from))
                .filter(|r| r.is_empty() || r.starts_with('/'))
            else {
                return false;
            };
            *s = format!("at://{to}{rest}");
            true
        }
        // Every item is visited (no short circuit): all are rewritten.
        Ipld::List(items) => {
            let mut any = false;
            for v in items {
                any |= rewrite_uris(v, from, to);
            }
            any
        }
        Ipld::Map(map) => {
            let mut any = false;
            for v in map.values_mut() {
                any |= rewrite_uris(v, from, to);
            }
            any
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_at_uris_of_the_old_did_are_rewritten() {
        let from = "did:key:zQ3abc";
        let mut v = Ipld::Map(BTreeMap::from([
            (
                "chat".to_string(),
                Ipld::String(format!("at://{from}/chat.gel.assistant.chat/3lbq")),
            ),
            ("self".to_string(), Ipld::String(format!("at://{from}"))),
            (
                "longer".to_string(),
                Ipld::String(format!("at://{from}x/chat.gel.assistant.chat/3lbq")),
            ),
            ("text".to_string(), Ipld::String(format!("see {from}"))),
            (
                "list".to_string(),
                Ipld::List(vec![Ipld::String(format!("at://{from}/a/b"))]),
            ),
        ]));
        assert!(rewrite_uris(&mut v, from, "did:plc:new"));
        let Ipld::Map(m) = &v else { unreachable!() };
        assert_eq!(
            m["chat"],
            Ipld::String("at://did:plc:new/chat.gel.assistant.chat/3lbq".into())
        );
        assert_eq!(m["self"], Ipld::String("at://did:plc:new".into()));
        assert_eq!(
            m["longer"],
            Ipld::String(format!("at://{from}x/chat.gel.assistant.chat/3lbq"))
        );
        assert_eq!(m["text"], Ipld::String(format!("see {from}")));
        assert_eq!(
            m["list"],
            Ipld::List(vec![Ipld::String("at://did:plc:new/a/b".into())])
        );
        assert!(!rewrite_uris(&mut v, from, "did:plc:new"));
    }
}
