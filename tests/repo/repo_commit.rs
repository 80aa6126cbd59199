//! Signed commits: sign → encode → decode → verify, tampering, strict
//! decoding of untrusted bytes, and revs from the TID clock.

use std::collections::BTreeMap;

use gelstore::crypto::{KeyAlgorithm, SignatureError, SigningKey};
use gelstore::model::{Cid, DataModelError, Ipld, cid_for_blob, cid_for_cbor, encode_dag_cbor};
use gelstore::repo::commit::{Commit, CommitError, UnsignedCommit};
use gelstore::repo::tid::{Tid, TidClock};

const DID: &str = "did:plc:ewvi7nxzyoun6zhxrhs64oiz";

fn key(alg: KeyAlgorithm) -> SigningKey {
    SigningKey::from_bytes(alg, &[0x5a; 32]).unwrap()
}

fn root(n: u8) -> Cid {
    cid_for_cbor(&[0xa1, 0x61, b'n', n & 0x17])
}

fn sample(prev: Option<Cid>) -> UnsignedCommit {
    UnsignedCommit::new(DID, root(1), Tid::parse("3l5qsnqbdrm2c").unwrap(), prev).unwrap()
}

/// The commit as a data model map, to edit and re-encode.
fn as_map(commit: &Commit) -> BTreeMap<String, Ipld> {
    match gelstore::model::decode_dag_cbor(&commit.to_cbor()).unwrap() {
        Ipld::Map(m) => m,
        other => panic!("not a map: {other:?}"),
    }
}

fn encode(map: BTreeMap<String, Ipld>) -> Vec<u8> {
    encode_dag_cbor(&Ipld::Map(map)).unwrap()
}

#[test]
fn round_trip_both_curves() {
    for alg in [KeyAlgorithm::K256, KeyAlgorithm::P256] {
        for prev in [None, Some(cid_for_cbor(b"\x80"))] {
            let key = key(alg);
            let commit = sample(prev).sign(&key);
            assert_eq!(commit.sig().len(), 64);
            let bytes = commit.to_cbor();
            let decoded = Commit::from_cbor(&bytes).unwrap();
            assert_eq!(decoded, commit);
            assert_eq!(decoded.to_cbor(), bytes, "re-encoding is byte-identical");
            assert_eq!(decoded.cid(), cid_for_cbor(&bytes));
            assert_eq!(decoded.did(), DID);
            assert_eq!(decoded.data(), root(1));
            assert_eq!(decoded.prev(), prev);
            assert_eq!(decoded.rev().to_string(), "3l5qsnqbdrm2c");
            decoded.verify(&key.public_key()).unwrap();
            decoded
                .verify_did_key(&key.public_key().to_did_key())
                .unwrap();
        }
    }
}

#[test]
fn generated_key_round_trip() {
    let key = SigningKey::generate(KeyAlgorithm::K256).unwrap();
    let commit = sample(None).sign(&key);
    let decoded = Commit::from_cbor(&commit.to_cbor()).unwrap();
    decoded.verify(&key.public_key()).unwrap();
    let other = SigningKey::generate(KeyAlgorithm::K256).unwrap();
    assert_eq!(
        decoded.verify(&other.public_key()),
        Err(CommitError::Signature(SignatureError::Mismatch))
    );
}

#[test]
fn prev_is_always_present() {
    let commit = sample(None).sign(&key(KeyAlgorithm::K256));
    let map = as_map(&commit);
    assert_eq!(map.get("prev"), Some(&Ipld::Null));
    assert_eq!(map.get("version"), Some(&Ipld::Integer(3)));
    assert_eq!(map.len(), 6);
}

#[test]
fn any_changed_field_fails_verification() {
    let key = key(KeyAlgorithm::K256);
    let public = key.public_key();
    let commit = sample(None).sign(&key);
    let sig = commit.sig().to_vec();
    let rev = commit.rev();
    let tampered = [
        UnsignedCommit::new("did:plc:ewvi7nxzyoun6zhxrhs64oia", root(1), rev, None).unwrap(),
        UnsignedCommit::new(DID, root(2), rev, None).unwrap(),
        UnsignedCommit::new(DID, root(1), Tid::from_u64(rev.as_u64() + 1), None).unwrap(),
        UnsignedCommit::new(DID, root(1), rev, Some(root(1))).unwrap(),
    ];
    for unsigned in tampered {
        let forged = Commit::from_parts(unsigned.clone(), sig.clone());
        // Through the wire too.
        let forged = Commit::from_cbor(&forged.to_cbor()).unwrap();
        assert_eq!(
            forged.verify(&public),
            Err(CommitError::Signature(SignatureError::Mismatch)),
            "{unsigned:?}"
        );
    }
    // A changed signature.
    let mut bad_sig = sig.clone();
    bad_sig[10] ^= 1;
    let forged = Commit::from_parts(commit.unsigned().clone(), bad_sig);
    assert!(forged.verify(&public).is_err());
    // The wrong curve's key with the same scalar.
    let p256 = SigningKey::from_bytes(KeyAlgorithm::P256, &[0x5a; 32]).unwrap();
    assert!(commit.verify(&p256.public_key()).is_err());
    // The untouched commit still verifies.
    commit.verify(&public).unwrap();
}

#[test]
fn every_single_byte_flip_is_caught() {
    let key = key(KeyAlgorithm::P256);
    let public = key.public_key();
    let bytes = sample(Some(root(9))).sign(&key).to_cbor();
    for i in 0..bytes.len() {
        for bit in [0x01, 0x80] {
            let mut b = bytes.clone();
            b[i] ^= bit;
            if let Ok(commit) = Commit::from_cbor(&b) {
                assert!(
                    commit.verify(&public).is_err(),
                    "byte {i} ^ {bit:#x} still verifies"
                );
            }
        }
    }
}

#[test]
fn signature_shape_errors() {
    let key = key(KeyAlgorithm::K256);
    let commit = sample(None).sign(&key);
    let mut map = as_map(&commit);
    map.insert("sig".into(), Ipld::Bytes(vec![0x30; 71]));
    let der = Commit::from_cbor(&encode(map)).unwrap();
    assert_eq!(
        der.verify(&key.public_key()),
        Err(CommitError::Signature(SignatureError::NotCompact {
            len: 71,
            der_like: true
        }))
    );
    assert!(matches!(
        commit.verify_did_key("did:web:example.com"),
        Err(CommitError::Key(_))
    ));
}

#[test]
fn decode_errors_are_named() {
    let commit = sample(None).sign(&key(KeyAlgorithm::K256));
    let base = as_map(&commit);
    let with = |k: &str, v: Ipld| {
        let mut m = base.clone();
        m.insert(k.to_owned(), v);
        encode(m)
    };
    let without = |k: &str| {
        let mut m = base.clone();
        m.remove(k);
        encode(m)
    };
    let err = |bytes: &[u8]| Commit::from_cbor(bytes).unwrap_err();

    // Not CBOR / not canonical / not a map.
    assert!(matches!(
        err(&[]),
        CommitError::Cbor(DataModelError::Truncated { .. })
    ));
    assert!(matches!(err(&[0xff]), CommitError::Cbor(_)));
    let mut trailing = commit.to_cbor();
    trailing.push(0);
    assert!(matches!(
        err(&trailing),
        CommitError::Cbor(DataModelError::TrailingBytes { .. })
    ));
    assert_eq!(err(&[0x80]), CommitError::NotAMap { found: "a list" });

    // Versions.
    assert_eq!(
        err(&with("version", Ipld::Integer(2))),
        CommitError::UnsupportedVersion(2)
    );
    assert_eq!(
        err(&with("version", Ipld::Integer(4))),
        CommitError::UnsupportedVersion(4)
    );
    assert!(matches!(
        err(&with("version", Ipld::String("3".into()))),
        CommitError::WrongType {
            field: "version",
            ..
        }
    ));

    // Missing fields, each one.
    for f in ["did", "version", "data", "rev", "prev", "sig"] {
        assert!(
            matches!(err(&without(f)), CommitError::MissingField(x) if x == f),
            "{f}: {}",
            err(&without(f))
        );
    }
    // Extra field.
    assert_eq!(
        err(&with("extra", Ipld::Null)),
        CommitError::UnexpectedField("extra".into())
    );

    // Wrong types.
    for (f, v) in [
        ("did", Ipld::Integer(1)),
        ("data", Ipld::Null),
        ("data", Ipld::String(root(1).to_string())),
        ("rev", Ipld::Integer(1)),
        ("prev", Ipld::String("x".into())),
        ("sig", Ipld::String("x".into())),
    ] {
        assert!(
            matches!(err(&with(f, v.clone())), CommitError::WrongType { field, .. } if field == f),
            "{f} = {v:?}"
        );
    }

    // Bad values.
    assert!(matches!(
        err(&with("did", Ipld::String("not a did".into()))),
        CommitError::BadDid { .. }
    ));
    assert!(matches!(
        err(&with("did", Ipld::String("did:plc:".into()))),
        CommitError::BadDid { .. }
    ));
    for rev in [
        "",
        "3l5qsnqbdrm2",
        "3L5QSNQBDRM2C",
        "kzzzzzzzzzzzz",
        "2024-01-01",
    ] {
        assert!(
            matches!(
                err(&with("rev", Ipld::String(rev.into()))),
                CommitError::BadRev(_)
            ),
            "{rev:?}"
        );
    }
    assert_eq!(
        err(&with("data", Ipld::Link(cid_for_blob(b"x")))),
        CommitError::WrongCodec {
            field: "data",
            codec: 0x55
        }
    );
    assert_eq!(
        err(&with("prev", Ipld::Link(cid_for_blob(b"x")))),
        CommitError::WrongCodec {
            field: "prev",
            codec: 0x55
        }
    );
}

#[test]
fn revs_from_the_clock_increase_along_a_chain() {
    let key = key(KeyAlgorithm::K256);
    let mut clock = TidClock::new();
    let mut prev_commit: Option<Commit> = None;
    for i in 0..200u8 {
        let rev = match &prev_commit {
            Some(c) => clock.next_after(c.rev()).unwrap(),
            None => clock.next_tid().unwrap(),
        };
        let unsigned =
            UnsignedCommit::new(DID, root(i), rev, prev_commit.as_ref().map(Commit::cid)).unwrap();
        let commit = Commit::from_cbor(&unsigned.sign(&key).to_cbor()).unwrap();
        commit.verify(&key.public_key()).unwrap();
        if let Some(p) = &prev_commit {
            assert!(commit.rev() > p.rev());
            assert!(commit.rev().to_string() > p.rev().to_string());
            assert_eq!(commit.prev(), Some(p.cid()));
        }
        prev_commit = Some(commit);
    }
    // A rev far in the future (from another writer) is still exceeded.
    let future = Tid::from_parts(8_000_000_000_000_000, 1023).unwrap();
    let next = clock.next_after(future).unwrap();
    assert!(next > future);
    assert!(clock.next_tid().unwrap() > next);
}
