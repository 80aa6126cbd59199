//! The log's rules, each tried the way a removed device or a server would.

use super::*;
use crate::DeviceKey;

const DID: &str = "did:plc:ewvi7nxzyoun6zhxrhs64oiz";

struct Dev {
    id: String,
    key: DeviceKey,
}

impl Dev {
    fn new(id: &str, seed: u8) -> Dev {
        Dev {
            id: id.to_string(),
            key: DeviceKey::from_secret_bytes([seed; 32]),
        }
    }

    fn member(&self) -> (String, Member) {
        (
            self.id.clone(),
            Member {
                public_key: self.key.public_key(),
                signing_key: Some(self.key.signing_key().public_key().to_did_key()),
            },
        )
    }
}

fn roster(devs: &[&Dev]) -> Roster {
    devs.iter().map(|d| d.member()).collect()
}

fn change(epoch: u64, key: &str, prev: &[&SignedChange], devs: &[&Dev], signer: &Dev) -> Change {
    let mut prev: Vec<Cid> = prev.iter().map(|c| c.cid).collect();
    prev.sort_by_key(|c| c.to_bytes());
    Change {
        epoch,
        account_key_id: key.to_string(),
        account_public_key: [epoch as u8 + 1; 32],
        prev,
        roster: roster(devs),
        removed: Vec::new(),
        signer: signer.id.clone(),
        created_at: "2026-12-01T12:00:00.000Z".into(),
    }
}

fn sign(c: Change, by: &Dev) -> SignedChange {
    c.sign(DID, &by.key.signing_key()).unwrap()
}

fn with_removed(mut c: Change, removed: &[&str]) -> Change {
    c.removed = removed.iter().map(|s| s.to_string()).collect();
    c
}

/// a founds the account, admits b and c (one change each).
fn founded() -> (Dev, Dev, Dev, Log, Vec<SignedChange>) {
    let (a, b, c) = (Dev::new("a", 1), Dev::new("b", 2), Dev::new("c", 3));
    let g = sign(change(0, "account:0:00", &[], &[&a], &a), &a);
    let mut log = Log::new(DID, g.clone()).unwrap();
    let ab = sign(change(0, "account:0:00", &[&g], &[&a, &b], &a), &a);
    log.accept(ab.clone()).unwrap();
    let abc = sign(change(0, "account:0:00", &[&ab], &[&a, &b, &c], &b), &b);
    log.accept(abc.clone()).unwrap();
    (a, b, c, log, vec![g, ab, abc])
}

fn refused(log: &mut Log, c: SignedChange) -> String {
    match log.accept(c) {
        Err(SealError::MembershipLog { reason }) => reason,
        other => panic!("accepted: {other:?}"),
    }
}

#[test]
fn a_log_of_admissions_and_a_removal_verifies_from_its_records() {
    let (a, b, _c, mut log, mut all) = founded();
    let removal = with_removed(change(1, "account:1:00", &[&all[2]], &[&a, &b], &a), &["c"]);
    let removal = sign(removal, &a);
    log.accept(removal.clone()).unwrap();
    all.push(removal.clone());
    match log.standing() {
        Standing::Settled {
            epoch,
            key_id,
            roster,
            ..
        } => {
            assert_eq!((*epoch, key_id.as_str()), (1, "account:1:00"));
            assert_eq!(roster.keys().collect::<Vec<_>>(), ["a", "b"]);
        }
        other => panic!("{other:?}"),
    }
    assert!(log.removed("c"));
    // b was admitted by the second change: from its records alone (in any
    // order), anchored there, it verifies the same log.
    let mut shuffled = all.clone();
    shuffled.reverse();
    let from_records = Log::verify(DID, &shuffled, &all[1].cid, &[]).unwrap();
    assert_eq!(from_records.heads(), vec![removal.cid]);
    assert!(from_records.refused().is_empty());
    // Losing the removal is refused once it was seen; a stored record
    // that went missing from the anchor's history is refused always.
    let err = Log::verify(DID, &all[..3], &all[1].cid, &[removal.cid]).unwrap_err();
    assert!(err.to_string().contains("went backwards"), "{err}");
    let err = Log::verify(DID, &all[1..], &all[1].cid, &[]).unwrap_err();
    assert!(err.to_string().contains("is missing"), "{err}");
    // And for another account the signatures do not hold.
    let err = Log::verify("did:plc:someoneelse", &all, &all[1].cid, &[]).unwrap_err();
    assert!(err.to_string().contains("signature"), "{err}");
}

#[test]
fn signatures_bind_every_field_and_the_signer_must_be_admitted() {
    let (a, b, c, mut log, all) = founded();
    let head = &all[2];
    // A field edited after signing.
    let mut edited = sign(change(0, "account:0:00", &[head], &[&a, &b, &c], &a), &a);
    edited.value["createdAt"] = "2030-01-01T00:00:00.000Z".into();
    let edited = SignedChange::from_value(edited.value).unwrap();
    assert!(refused(&mut log, edited).contains("signature"));
    // A field added after signing.
    let mut extra = sign(change(0, "account:0:00", &[head], &[&a, &b, &c], &a), &a);
    extra.value["note"] = "hi".into();
    let extra = SignedChange::from_value(extra.value).unwrap();
    assert!(refused(&mut log, extra).contains("signature"));
    // Signed by someone the change it follows never admitted.
    let m = Dev::new("m", 9);
    let forged = sign(
        change(0, "account:0:00", &[head], &[&a, &b, &c, &m], &m),
        &m,
    );
    assert!(refused(&mut log, forged).contains("not admitted"));
    // Signed with another key than the roster names for the signer.
    let wrong = change(0, "account:0:00", &[head], &[&a, &b, &c], &a);
    let wrong = wrong.sign(DID, &m.key.signing_key()).unwrap();
    assert!(refused(&mut log, wrong).contains("signature"));
    // A signer that drops itself.
    let gone = with_removed(change(1, "account:1:00", &[head], &[&b, &c], &a), &["a"]);
    assert!(refused(&mut log, sign(gone, &a)).contains("not in its roster"));
}

#[test]
fn admissions_only_add_and_rotations_only_keep() {
    let (a, b, c, mut log, all) = founded();
    let head = &all[2];
    // Dropping c without a new key.
    let drop = with_removed(change(0, "account:0:00", &[head], &[&a, &b], &a), &["c"]);
    assert!(refused(&mut log, sign(drop, &a)).contains("removals rotate"));
    // A rotation that skips an epoch, reuses a key, or misstates removed.
    let skip = with_removed(change(2, "account:2:00", &[head], &[&a, &b], &a), &["c"]);
    assert!(refused(&mut log, sign(skip, &a)).contains("epoch"));
    let reuse = with_removed(change(1, "account:0:00", &[head], &[&a, &b], &a), &["c"]);
    assert!(refused(&mut log, sign(reuse, &a)).contains("changes the epoch"));
    let lie = change(1, "account:1:00", &[head], &[&a, &b], &a);
    assert!(refused(&mut log, sign(lie, &a)).contains("removed list"));
    // A rotation that admits a device never admitted.
    let m = Dev::new("m", 9);
    let sneak = change(1, "account:1:00", &[head], &[&a, &b, &c, &m], &a);
    assert!(refused(&mut log, sign(sneak, &a)).contains("did not all keep"));
    // After a removal, the removed device signs nothing that follows it.
    let removal = sign(
        with_removed(change(1, "account:1:00", &[head], &[&a, &b], &a), &["c"]),
        &a,
    );
    log.accept(removal.clone()).unwrap();
    let back = change(1, "account:1:00", &[&removal], &[&a, &b, &c], &c);
    assert!(refused(&mut log, sign(back, &c)).contains("not admitted"));
    let back = change(2, "account:2:c0", &[&removal], &[&a, &b, &c], &c);
    assert!(refused(&mut log, sign(back, &c)).contains("not admitted"));
}

#[test]
fn forks_settle_on_a_removal_or_wait_for_a_rotation_to_what_all_kept() {
    let (a, b, c, log0, all) = founded();
    let head = &all[2];
    let d = Dev::new("d", 4);
    // c, about to be removed, signs a rotation from before its removal
    // that keeps everyone: the removal's key is held only by devices both
    // heads kept, so it stays in force.
    let mut log = log0.clone();
    let removal = sign(
        with_removed(change(1, "account:1:aa", &[head], &[&a, &b], &a), &["c"]),
        &a,
    );
    let forged = sign(change(1, "account:1:cc", &[head], &[&a, &b, &c], &c), &c);
    log.accept(removal.clone()).unwrap();
    // Not under the removal's keyId, which is taken.
    let thief = sign(
        with_removed(change(1, "account:1:aa", &[head], &[&a, &b], &c), &["c"]),
        &c,
    );
    assert!(refused(&mut log, thief).contains("not in its roster"));
    let thief = sign(change(1, "account:1:aa", &[head], &[&a, &b, &c], &c), &c);
    assert!(refused(&mut log, thief).contains("another change put in force"));
    log.accept(forged.clone()).unwrap();
    assert_eq!(log.heads().len(), 2);
    match log.standing() {
        Standing::Settled { key_id, roster, .. } => {
            assert_eq!(key_id, "account:1:aa");
            assert_eq!(roster.keys().collect::<Vec<_>>(), ["a", "b"]);
        }
        other => panic!("{other:?}"),
    }
    // Worse: c, removed, signs a rotation from before its removal that
    // removes b. Its side is disputed (a removed c; c did not remove a):
    // the removal stands and b stays.
    let mut log = log0.clone();
    let kick = sign(
        with_removed(change(1, "account:1:cc", &[head], &[&a, &c], &c), &["b"]),
        &c,
    );
    log.accept(removal.clone()).unwrap();
    log.accept(kick.clone()).unwrap();
    match log.standing() {
        Standing::Settled { key_id, roster, .. } => {
            assert_eq!(key_id, "account:1:aa");
            assert_eq!(roster.keys().collect::<Vec<_>>(), ["a", "b"]);
        }
        other => panic!("{other:?}"),
    }
    // b can still change membership after it: it answers to a's side only.
    let admit_d = sign(
        change(1, "account:1:aa", &[&removal, &kick], &[&a, &b, &d], &b),
        &b,
    );
    log.accept(admit_d).unwrap();
    assert_eq!(log.heads().len(), 1);
    // Two devices removing each other: both removals hold.
    let mut log = log0.clone();
    let a_drops_b = sign(
        with_removed(change(1, "account:1:aa", &[head], &[&a, &c], &a), &["b"]),
        &a,
    );
    let b_drops_a = sign(
        with_removed(change(1, "account:1:bb", &[head], &[&b, &c], &b), &["a"]),
        &b,
    );
    log.accept(a_drops_b).unwrap();
    log.accept(b_drops_a).unwrap();
    let Standing::Forked { kept, .. } = log.standing() else {
        panic!("{:?}", log.standing());
    };
    assert_eq!(kept.keys().collect::<Vec<_>>(), ["c"]);
    // Two removals at once: neither key is held only by devices both kept.
    let mut log = log0.clone();
    let admit_d = sign(
        change(0, "account:0:00", &[head], &[&a, &b, &c, &d], &a),
        &a,
    );
    log.accept(admit_d.clone()).unwrap();
    let by_a = sign(
        with_removed(
            change(1, "account:1:aa", &[&admit_d], &[&a, &b, &d], &a),
            &["c"],
        ),
        &a,
    );
    let by_b = sign(
        with_removed(
            change(1, "account:1:bb", &[&admit_d], &[&a, &b, &c], &b),
            &["d"],
        ),
        &b,
    );
    log.accept(by_a.clone()).unwrap();
    log.accept(by_b.clone()).unwrap();
    let Standing::Forked {
        epoch,
        kept,
        left_out,
        ..
    } = log.standing()
    else {
        panic!("{:?}", log.standing());
    };
    assert_eq!(*epoch, 1);
    assert_eq!(kept.keys().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(*left_out, ["c", "d"]);
    // An admission cannot follow a fork; a rotation to more than what both
    // kept is refused; one to what both kept resolves it.
    let admit = change(1, "account:1:aa", &[&by_a, &by_b], &[&a, &b, &d], &a);
    assert!(refused(&mut log, sign(admit, &a)).contains("epoch"));
    let too_many = with_removed(
        change(2, "account:2:aa", &[&by_a, &by_b], &[&a, &b, &c], &a),
        &["d"],
    );
    assert!(refused(&mut log, sign(too_many, &a)).contains("did not all keep"));
    let resolve = sign(
        with_removed(
            change(2, "account:2:aa", &[&by_a, &by_b], &[&a, &b], &a),
            &["c", "d"],
        ),
        &a,
    );
    log.accept(resolve).unwrap();
    assert!(matches!(log.standing(), Standing::Settled { epoch: 2, .. }));
    // Two admissions at once under one key merge: nobody was removed.
    let mut log = log0;
    let e = Dev::new("e", 5);
    let one = sign(
        change(0, "account:0:00", &[head], &[&a, &b, &c, &d], &a),
        &a,
    );
    let two = sign(
        change(0, "account:0:00", &[head], &[&a, &b, &c, &e], &b),
        &b,
    );
    log.accept(one).unwrap();
    log.accept(two).unwrap();
    match log.standing() {
        Standing::Settled {
            epoch: 0, roster, ..
        } => assert_eq!(roster.len(), 5),
        other => panic!("{other:?}"),
    }
}

#[test]
fn malformed_records_are_named_errors() {
    let (a, _b, _c, _log, all) = founded();
    let mut bad = all[1].value.clone();
    bad["roster"] = serde_json::json!([bad["roster"][1], bad["roster"][0]]);
    let err = SignedChange::from_value(bad).unwrap_err();
    assert!(err.to_string().contains("record key order"), "{err}");
    let mut bad = all[1].value.clone();
    bad["epoch"] = (-1).into();
    assert!(SignedChange::from_value(bad).is_err());
    let mut bad = all[1].value.clone();
    bad["accountPublicKey"] = serde_json::json!({"$bytes": "AAAA"});
    assert!(SignedChange::from_value(bad).is_err());
    // A second first change is never verified.
    let other = sign(change(0, "account:0:ff", &[], &[&a], &a), &a);
    let mut records = all.clone();
    records.push(other);
    let log = Log::verify(DID, &records, &all[2].cid, &[]).unwrap();
    assert_eq!(log.refused().len(), 1, "{:?}", log.refused());
}
