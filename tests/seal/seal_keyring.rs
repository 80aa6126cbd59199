//! The keyring: pairing through a shown secret, admission, rotation on
//! removal, chat keys per epoch, planted records, the device key file, and
//! the keyWrap records it writes against the lexicon.

use crate::support::seal_rng;

use gelstore::model::now_datetime;
use gelstore::model::{ipld_to_json, record_from_json};
use gelstore::seal::{
    DeviceKey, KeyLookup, KeySet, KeyWrap, Keyring, Padding, PairingCode, Place, Recipient,
    SealError, SealOptions, WRAP_ALG_V1, open_record, pair_request, seal_record,
};
use gelstore_lexicon::catalog::Catalog;
use gelstore_lexicon::validate;
use seal_rng::HashRng;
use serde_json::json;

const DID: &str = "did:plc:ewvi7nxzyoun6zhxrhs64oiz";

fn device(rng: &mut HashRng) -> DeviceKey {
    DeviceKey::generate(rng)
}

/// The first device of an account, with its records.
fn create(id: &str, rng: &mut HashRng) -> (Keyring, KeySet) {
    let key = device(rng);
    let code = pair_request(&key, rng).code().clone();
    Keyring::create(DID, id, key, &code, rng).unwrap()
}

/// The signing key a device proves when it publishes its record.
fn signing(key: &DeviceKey) -> Option<String> {
    Some(key.signing_key().public_key().to_did_key())
}

fn wraps(wraps: Vec<KeyWrap>) -> KeySet {
    KeySet {
        wraps,
        changes: Vec::new(),
    }
}

/// Device A founds the account, B pairs through A. Returns both keyrings
/// and every record written so far (the "repo").
fn two_devices(rng: &mut HashRng) -> (Keyring, Keyring, KeySet) {
    let (mut a, mut repo) = create("3laaaaaaaaaa2", rng);
    let b_key = device(rng);
    let request = pair_request(&b_key, rng);
    // The code goes from B's screen to A as text.
    let code: PairingCode = request.code().to_string().parse().unwrap();
    repo.extend(
        a.approve(&code, "3lbbbbbbbbbb2", signing(&b_key), rng)
            .unwrap(),
    );
    let (b, report) = Keyring::join(DID, "3lbbbbbbbbbb2", b_key, &request, &repo).unwrap();
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    (a, b, repo)
}

#[test]
fn a_paired_device_reads_what_the_other_sealed() {
    let mut rng = HashRng::new("pair");
    let (mut a, mut b, mut repo) = two_devices(&mut rng);
    assert_eq!(a.current_account().key_id(), b.current_account().key_id());
    assert_eq!(a.devices(), b.devices());
    assert_eq!(a.devices().len(), 2);

    let (ck, wrap) = a.chat_key_for_seal("3lchat0000002", &mut rng).unwrap();
    repo.wraps.push(wrap.expect("a new chat key is wrapped"));
    let record = record_from_json(&json!({
        "$type": "chat.gel.assistant.chat", "createdAt": "2025-11-29T19:41:00.000Z"
    }))
    .unwrap();
    let place = Place {
        did: DID,
        collection: "chat.gel.assistant.chat",
        rkey: "3lchat0000002",
    };
    let fields = record_from_json(&json!({"title": "Plans"})).unwrap();
    let sealed = seal_record(
        &record,
        &place,
        &fields,
        &[],
        &ck,
        &SealOptions {
            padding: Padding::Padme,
        },
        &mut rng,
    )
    .unwrap();

    assert!(matches!(
        open_record(&sealed, &place, &b),
        Err(SealError::UnknownKey { .. })
    ));
    let report = b.absorb(&repo);
    assert_eq!(report.chat_keys, 1);
    assert_eq!(open_record(&sealed, &place, &b).unwrap().content, fields);
    // B reuses the same chat key for that chat in this epoch.
    let (ck_b, none) = b.chat_key_for_seal("3lchat0000002", &mut rng).unwrap();
    assert!(none.is_none());
    assert_eq!(ck_b.key_id(), ck.key_id());
}

#[test]
fn pairing_needs_the_secret_shown_on_the_new_device() {
    let mut rng = HashRng::new("secret");
    let (mut a, mut repo) = create("3laaaaaaaaaa2", &mut rng);
    let b_key = device(&mut rng);
    let request = pair_request(&b_key, &mut rng);
    // Someone approves B with a code whose secret is not the one B showed.
    let forged_request = pair_request(&b_key, &mut rng);
    repo.extend(
        a.approve(forged_request.code(), "3lbbbbbbbbbb2", None, &mut rng)
            .unwrap(),
    );
    let err = Keyring::join(DID, "3lbbbbbbbbbb2", b_key.clone(), &request, &repo).unwrap_err();
    assert!(
        matches!(err, SealError::AuthenticationFailed { .. }),
        "{err}"
    );
    // A device record alone (no approval at all) gets nothing.
    let c_key = device(&mut rng);
    let c_request = pair_request(&c_key, &mut rng);
    let err = Keyring::join(DID, "3lcccccccccc2", c_key, &c_request, &repo).unwrap_err();
    assert!(matches!(err, SealError::NotRecipient { .. }), "{err}");
    assert!(err.to_string().contains("approve"), "{err}");
    // Bound to the account DID too.
    let err = Keyring::join(
        "did:plc:someoneelse",
        "3lbbbbbbbbbb2",
        b_key.clone(),
        &forged_request,
        &repo,
    )
    .unwrap_err();
    assert!(matches!(err, SealError::AuthenticationFailed { .. }));
    assert!(Keyring::join(DID, "3lbbbbbbbbbb2", b_key, &forged_request, &repo).is_ok());
}

#[test]
fn pairing_codes_parse_strictly() {
    let mut rng = HashRng::new("codes");
    let request = pair_request(&device(&mut rng), &mut rng);
    let text = request.code().to_string();
    assert!(text.starts_with("gp1-"), "{text}");
    assert_eq!(text.parse::<PairingCode>().unwrap(), *request.code());
    // Case, spaces and dashes do not matter.
    let loose = text.to_uppercase().replace('-', " ");
    assert_eq!(loose.parse::<PairingCode>().unwrap(), *request.code());
    // One changed character is caught by the checksum (or the alphabet).
    let mut chars: Vec<char> = text.chars().collect();
    let i = chars.len() - 10;
    chars[i] = if chars[i] == 'a' { 'b' } else { 'a' };
    let typo: String = chars.into_iter().collect();
    assert!(matches!(
        typo.parse::<PairingCode>(),
        Err(SealError::InvalidPairingCode { .. })
    ));
    assert!(matches!(
        text[..text.len() - 4].parse::<PairingCode>(),
        Err(SealError::InvalidPairingCode { .. })
    ));
    assert!(matches!(
        "gp1-0000".parse::<PairingCode>(),
        Err(SealError::InvalidPairingCode { .. })
    ));
    assert!(matches!(
        "hello".parse::<PairingCode>(),
        Err(SealError::InvalidPairingCode { .. })
    ));
    // The secret never shows in Debug output.
    assert!(!format!("{request:?}").contains(&text[40..50]));
}

#[test]
fn removing_a_device_starts_a_new_epoch_that_it_cannot_read() {
    let mut rng = HashRng::new("remove");
    let (mut a, mut b, mut repo) = two_devices(&mut rng);
    // C pairs through B (so A learns of C only through the admission).
    let c_key = device(&mut rng);
    let c_req = pair_request(&c_key, &mut rng);
    repo.extend(
        b.approve(c_req.code(), "3lcccccccccc2", signing(&c_key), &mut rng)
            .unwrap(),
    );
    let (mut c, _) = Keyring::join(DID, "3lcccccccccc2", c_key, &c_req, &repo).unwrap();
    a.absorb(&repo);
    assert_eq!(a.devices().len(), 3);

    let old_epoch = a.account_epoch();
    let (old_ck, w) = a.chat_key_for_seal("3lchat0000002", &mut rng).unwrap();
    repo.wraps.extend(w);

    // A removes C.
    let rotation = a.remove_device("3lcccccccccc2", &mut rng).unwrap();
    assert_eq!(a.account_epoch(), old_epoch + 1);
    // Wrapped to A and B, not C; the old key chained to the new one; one
    // signed change that keeps A and B.
    assert_eq!(rotation.changes.len(), 1);
    assert_eq!(rotation.changes[0].change.removed, ["3lcccccccccc2"]);
    let to_devices: Vec<&str> = rotation
        .wraps
        .iter()
        .filter_map(|w| match &w.recipient {
            Recipient::Device { device } => Some(device.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(to_devices, ["3laaaaaaaaaa2", "3lbbbbbbbbbb2"]);
    repo.extend(rotation);

    let report = b.absorb(&repo);
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    assert_eq!(b.account_epoch(), old_epoch + 1);
    assert_eq!(b.devices().len(), 2);
    let report = c.absorb(&repo);
    assert_eq!(report.accounts, 0, "C gets nothing new");
    assert!(!c.account_keys().any(|k| k.epoch() > old_epoch));
    assert!(
        matches!(
            c.sealing_account(),
            Err(SealError::NotAdmitted { removed: true, .. })
        ),
        "C learns it was removed"
    );

    // Later records use new keys, which C cannot open.
    let (new_ck, w) = a.chat_key_for_seal("3lchat0000002", &mut rng).unwrap();
    assert_ne!(new_ck.key_id(), old_ck.key_id());
    repo.wraps.extend(w);
    b.absorb(&repo);
    c.absorb(&repo);
    assert!(b.chat_key(new_ck.key_id()).is_some());
    assert!(c.chat_key(new_ck.key_id()).is_none());
    assert!(
        c.chat_key(old_ck.key_id()).is_some(),
        "C keeps what it could already read"
    );

    // A device paired after the rotation can read the history.
    let d_key = device(&mut rng);
    let d_req = pair_request(&d_key, &mut rng);
    repo.extend(
        b.approve(d_req.code(), "3ldddddddddd2", None, &mut rng)
            .unwrap(),
    );
    let (d, report) = Keyring::join(DID, "3ldddddddddd2", d_key, &d_req, &repo).unwrap();
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    assert_eq!(d.account_keys().count(), 2);
    assert!(d.chat_key(old_ck.key_id()).is_some());
    assert!(d.chat_key(new_ck.key_id()).is_some());
    assert_eq!(d.devices().len(), 3);

    // Removing an unknown device, or oneself, is refused.
    assert!(matches!(
        a.remove_device("3lcccccccccc2", &mut rng),
        Err(SealError::Keyring { .. })
    ));
    assert!(matches!(
        a.remove_device("3laaaaaaaaaa2", &mut rng),
        Err(SealError::Keyring { .. })
    ));
}

#[test]
fn wraps_planted_by_someone_without_the_keys_are_refused() {
    let mut rng = HashRng::new("planted");
    let (mut a, mut b, mut repo) = two_devices(&mut rng);
    // An outsider (a PDS) founds its own "account" and writes records as
    // if they were ours: a chat key, an admission of its device.
    let (mut mallory, _) = create("3lmmmmmmmmmm2", &mut rng);
    let (_, planted_ck) = mallory
        .chat_key_for_seal("3lchat0000002", &mut rng)
        .unwrap();
    let mut planted = planted_ck.unwrap();
    // Re-address it to our account key.
    planted.recipient = Recipient::Account {
        key_id: a.current_account().key_id().to_string(),
        epoch: 0,
    };
    repo.wraps.push(planted);
    let m_dev = device(&mut rng);
    let m_req = pair_request(&m_dev, &mut rng);
    let fake = mallory
        .approve(m_req.code(), "3lmmmmmmmmmm3", signing(&m_dev), &mut rng)
        .unwrap();
    repo.extend(fake);
    let report = b.absorb(&repo);
    assert_eq!(report.chat_keys + report.changes + report.accounts, 0);
    assert_eq!(
        report.refused_changes.len(),
        1,
        "its admission follows nothing we know"
    );
    assert_eq!(report.rejected.len(), 1, "{:?}", report.rejected);
    assert!(
        report
            .rejected
            .iter()
            .all(|(_, e)| matches!(e, SealError::AuthenticationFailed { .. }))
    );
    assert_eq!(b.devices().len(), 2, "the planted device is not admitted");
    // So a rotation does not wrap to it.
    let rotation = a.remove_device("3lbbbbbbbbbb2", &mut rng).unwrap();
    assert!(rotation.wraps.iter().all(
        |w| !matches!(&w.recipient, Recipient::Device { device } if device.starts_with("3lmmm"))
    ));
    // A wrap edited in place (epoch, keyId, recipient) does not open either.
    let (_, w) = a.chat_key_for_seal("3lchat0000003", &mut rng).unwrap();
    let w = w.unwrap();
    let mut edited = w.clone();
    edited.ciphertext[0] ^= 1;
    let mut b2 = b.clone();
    let r = b2.absorb(&wraps(vec![edited]));
    assert_eq!(r.chat_keys, 0);
}

#[test]
fn wraps_are_valid_keywrap_records_and_round_trip() {
    let mut rng = HashRng::new("records");
    let (mut a, _, mut repo) = two_devices(&mut rng);
    repo.wraps
        .extend(a.chat_key_for_seal("3lchat0000002", &mut rng).unwrap().1);
    let root = env!("CARGO_MANIFEST_DIR");
    let (catalog, findings) = Catalog::load_paths(&[format!("{root}/lexicons")]).unwrap();
    assert!(findings.is_empty(), "{findings:?}");
    for change in &repo.changes {
        let errors = validate::validate_record(&catalog, &change.value, Some("3lchangeaaa22"));
        assert!(errors.is_empty(), "{}: {errors:?}", change.value);
    }
    for wrap in &repo.wraps {
        assert_eq!(wrap.alg, WRAP_ALG_V1);
        assert_eq!(wrap.enc.len(), 32);
        assert_eq!(wrap.ciphertext.len(), 48);
        let ipld = wrap.to_ipld();
        assert_eq!(&KeyWrap::from_ipld(&ipld).unwrap(), wrap);
        let json = ipld_to_json(&ipld).unwrap();
        let errors = validate::validate_record(&catalog, &json, Some("3lwrapaaaaaa2"));
        assert!(errors.is_empty(), "{json}: {errors:?}");
    }
    // An unknown alg is refused before any crypto.
    let mut b = a.clone();
    let mut w = repo.wraps.last().unwrap().clone();
    w.alg = "hpke-x25519-hkdf-sha256-aes128gcm-v1".into();
    w.key_id = "chat:3lchat0000009:0:00".into();
    let r = b.absorb(&wraps(vec![w]));
    assert!(matches!(r.rejected[0].1, SealError::UnsupportedAlg { .. }));
    assert!(gelstore_lexicon::syntax::check_datetime(&now_datetime()).is_ok());
}

#[test]
fn device_key_file_is_owner_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("device.key");
    let mut rng = HashRng::new("file");
    let key = device(&mut rng);
    key.save(&path).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    assert_eq!(
        DeviceKey::load(&path).unwrap().public_key(),
        key.public_key()
    );
    // Never overwritten.
    assert!(matches!(key.save(&path), Err(SealError::KeyFile { .. })));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = DeviceKey::load(&path).unwrap_err();
        assert!(err.to_string().contains("chmod 600"), "{err}");
    }
    // Debug never prints the secret.
    let text = std::fs::read_to_string(&path).unwrap();
    let secret_line = text.lines().nth(1).unwrap();
    assert!(!format!("{key:?}").contains(secret_line));
}

#[test]
fn rejoin_takes_only_the_pinned_pairing_wrap() {
    let mut rng = HashRng::new("rejoin");
    let (mut a, mut repo) = create("3laaaaaaaaaa2", &mut rng);
    let b_key = device(&mut rng);
    let request = pair_request(&b_key, &mut rng);
    repo.extend(
        a.approve(request.code(), "3lbbbbbbbbbb2", None, &mut rng)
            .unwrap(),
    );
    let (b, _) = Keyring::join(DID, "3lbbbbbbbbbb2", b_key.clone(), &request, &repo).unwrap();
    let admitted = b.admitted_with().to_string();
    assert_eq!(admitted, a.current_account().key_id());
    assert_eq!(a.admitted_with(), admitted, "the first device made it");

    // Someone who saw B's code plants a pairing wrap of an account key of
    // their own (with the log it is bound to), ahead of the real one.
    let (mut mallory, mut planted) = create("3lmmmmmmmmmm2", &mut rng);
    planted.wraps.clear();
    planted.extend(
        mallory
            .approve(request.code(), "3lbbbbbbbbbb2", None, &mut rng)
            .unwrap(),
    );
    planted.extend(repo.clone());
    let (fooled, _) =
        Keyring::join(DID, "3lbbbbbbbbbb2", b_key.clone(), &request, &planted).unwrap();
    assert_ne!(fooled.admitted_with(), admitted, "join takes the first");
    // Rebuilt with the keyId it kept, B takes only its own account key.
    let (again, _) = Keyring::rejoin(
        DID,
        "3lbbbbbbbbbb2",
        b_key.clone(),
        &request,
        &admitted,
        &[],
        &planted,
    )
    .unwrap();
    assert_eq!(again.current_account().key_id(), admitted);
    assert_eq!(again.devices(), a.devices());
    // Pinned to a key with no wrap for it: a named error.
    let err = Keyring::rejoin(
        DID,
        "3lbbbbbbbbbb2",
        b_key,
        &request,
        "account:0:0000000000000000",
        &[],
        &repo,
    )
    .unwrap_err();
    assert!(matches!(err, SealError::NotRecipient { .. }), "{err}");
    // The request survives its text form (as the state file keeps it).
    let kept =
        gelstore::seal::PairingRequest::from_code(request.code().to_string().parse().unwrap());
    assert_eq!(kept.code(), request.code());
}
