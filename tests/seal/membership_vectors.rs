//! Golden vectors for the signed membership records (`fixtures/seal/
//! membership-*.json`): a first change and an admission that follows it,
//! from fixed device secrets, so another client can check its signing
//! key derivation, signing message, signature and CIDs byte for byte
//! (`fixtures/seal/verify.py` does, with nothing of ours).
//! `GELSTORE_WRITE_SEAL_FIXTURES=1` rewrites the files.

use gelstore::model::record_to_dag_cbor;
use gelstore::seal::DeviceKey;
use gelstore::seal::membership::{Change, Log, Member, Roster, SignedChange, signing_message};
use serde_json::{Value, json};

const DID: &str = "did:plc:ewvi7nxzyoun6zhxrhs64oiz";
const CREATED_AT: &str = "2026-12-01T12:00:00.000Z";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn member(key: &DeviceKey) -> Member {
    Member {
        public_key: key.public_key(),
        signing_key: Some(key.signing_key().public_key().to_did_key()),
    }
}

fn vector(description: &str, secret: &[u8; 32], c: &SignedChange) -> Value {
    let mut unsigned = c.value.clone();
    unsigned.as_object_mut().unwrap().remove("sig");
    json!({
        "description": description,
        "did": DID,
        "signerSecret": hex(secret),
        "signerSigningKey": c.change.roster[&c.change.signer].signing_key,
        "record": c.value,
        "unsignedCbor": hex(&record_to_dag_cbor(&unsigned).unwrap()),
        "signingMessage": hex(&signing_message(DID, &c.value).unwrap()),
        "signedCbor": hex(&record_to_dag_cbor(&c.value).unwrap()),
        "cid": c.cid.to_string(),
    })
}

fn check(name: &str, got: Value) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/seal")
        .join(name);
    if std::env::var_os("GELSTORE_WRITE_SEAL_FIXTURES").is_some() {
        std::fs::write(&path, serde_json::to_string_pretty(&got).unwrap() + "\n").unwrap();
    }
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let want: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(want, got, "{name}");
}

#[test]
fn membership_golden_vectors_match_fixtures() {
    let (a_secret, b_secret) = ([0xa1u8; 32], [0xb2u8; 32]);
    let (a, b) = (
        DeviceKey::from_secret_bytes(a_secret),
        DeviceKey::from_secret_bytes(b_secret),
    );
    let account_public = DeviceKey::from_secret_bytes([0xac; 32]).public_key();
    let mut roster = Roster::new();
    roster.insert("3laaaaaaaaaa2".into(), member(&a));
    let genesis = Change {
        epoch: 0,
        account_key_id: "account:0:0011223344556677".into(),
        account_public_key: account_public,
        prev: Vec::new(),
        roster: roster.clone(),
        removed: Vec::new(),
        signer: "3laaaaaaaaaa2".into(),
        created_at: CREATED_AT.into(),
    }
    .sign(DID, &a.signing_key())
    .unwrap();
    roster.insert("3lbbbbbbbbbb2".into(), member(&b));
    let admission = Change {
        prev: vec![genesis.cid],
        roster,
        ..genesis.change.clone()
    }
    .sign(DID, &a.signing_key())
    .unwrap();
    // Both verify as a log anchored at the admission (as b would).
    let log = Log::verify(
        DID,
        &[genesis.clone(), admission.clone()],
        &admission.cid,
        &[],
    )
    .unwrap();
    assert_eq!(log.heads(), vec![admission.cid]);
    // Signing is deterministic (RFC 6979), so the vectors are too.
    check(
        "membership-genesis.json",
        vector(
            "The first membership change of an account: device 3laaaaaaaaaa2 admits itself at epoch 0. Its signing key is P-256 from HKDF-SHA256(salt = 'gelstore/device-signing-key/v1', IKM = signerSecret, info = 0x00), 32 bytes as the scalar.",
            &a_secret,
            &genesis,
        ),
    );
    check(
        "membership-admission.json",
        vector(
            "An admission that follows the first change: 3laaaaaaaaaa2 admits 3lbbbbbbbbbb2 under the same account key.",
            &a_secret,
            &admission,
        ),
    );
}
