//! atproto interop fixtures (CC0) for cryptography:
//! `fixtures/interop/crypto/*.json`. See `fixtures/interop/INVENTORY.md`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use cid::multibase::{self, Base};
use gelstore::crypto::{KeyAlgorithm, PublicKey, SignatureError, SigningKey};

use crate::support::fixtures;
use fixtures::{interop_cases, str_field};

fn b64(s: &str) -> Vec<u8> {
    STANDARD_NO_PAD
        .decode(s)
        .unwrap_or_else(|e| panic!("bad base64 {s:?}: {e}"))
}

fn hex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length: {s:?}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn base58(s: &str) -> Vec<u8> {
    let (base, bytes) = multibase::decode(format!("z{s}")).unwrap();
    assert_eq!(base, Base::Base58Btc);
    bytes
}

fn algorithm(name: &str) -> KeyAlgorithm {
    match name {
        "ES256K" => KeyAlgorithm::K256,
        "ES256" => KeyAlgorithm::P256,
        other => panic!("unknown algorithm {other:?}"),
    }
}

#[test]
fn signature_fixtures() {
    let cases = interop_cases("crypto/signature-fixtures.json");
    assert_eq!(cases.len(), 6);
    let (mut valid, mut high_s, mut der) = (0, 0, 0);
    for case in &cases {
        let comment = str_field(case, "comment");
        let alg = algorithm(str_field(case, "algorithm"));
        let message = b64(str_field(case, "messageBase64"));
        let signature = b64(str_field(case, "signatureBase64"));
        let did = str_field(case, "publicKeyDid");
        let expect_valid = case["validSignature"].as_bool().unwrap();
        let tags: Vec<&str> = case["tags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();

        let key = PublicKey::from_did_key(did).unwrap_or_else(|e| panic!("{comment}: {e}"));
        assert_eq!(key.algorithm(), alg, "{comment}");
        assert_eq!(key.to_did_key(), did, "{comment}: did:key round trip");
        // publicKeyMultibase is the bare compressed point, no multicodec.
        let (_, point) = multibase::decode(str_field(case, "publicKeyMultibase")).unwrap();
        assert_eq!(key.to_compressed().as_slice(), point, "{comment}");
        assert_eq!(PublicKey::from_compressed(alg, &point).unwrap(), key);

        let result = key.verify(&message, &signature);
        if expect_valid {
            assert_eq!(result, Ok(()), "{comment}");
            valid += 1;
        } else if tags.contains(&"high-s") {
            assert_eq!(result, Err(SignatureError::HighS), "{comment}");
            high_s += 1;
        } else if tags.contains(&"der-encoded") {
            assert!(
                matches!(
                    result,
                    Err(SignatureError::NotCompact { der_like: true, .. })
                ),
                "{comment}: {result:?}"
            );
            der += 1;
        } else {
            panic!("{comment}: invalid case without a known tag: {tags:?}");
        }
    }
    assert_eq!((valid, high_s, der), (2, 2, 2));
}

#[test]
fn w3c_did_key_k256() {
    let cases = interop_cases("crypto/w3c_didkey_K256.json");
    assert_eq!(cases.len(), 5);
    for case in &cases {
        let private = hex(str_field(case, "privateKeyBytesHex"));
        let expected = str_field(case, "publicDidKey");
        let key = SigningKey::from_bytes(KeyAlgorithm::K256, &private).unwrap();
        assert_eq!(key.public_key().to_did_key(), expected);
        assert_eq!(key.to_bytes().as_slice(), private.as_slice());
        assert_eq!(PublicKey::from_did_key(expected).unwrap(), key.public_key());
        check_signs_and_verifies(&key);
    }
}

#[test]
fn w3c_did_key_p256() {
    let cases = interop_cases("crypto/w3c_didkey_P256.json");
    assert_eq!(cases.len(), 1);
    for case in &cases {
        let private = base58(str_field(case, "privateKeyBytesBase58"));
        let expected = str_field(case, "publicDidKey");
        let key = SigningKey::from_bytes(KeyAlgorithm::P256, &private).unwrap();
        assert_eq!(key.public_key().to_did_key(), expected);
        assert_eq!(PublicKey::from_did_key(expected).unwrap(), key.public_key());
        check_signs_and_verifies(&key);
    }
}

fn check_signs_and_verifies(key: &SigningKey) {
    let sig = key.sign(b"interop");
    key.public_key().verify(b"interop", &sig).unwrap();
    assert_eq!(
        key.public_key().verify(b"interoq", &sig),
        Err(SignatureError::Mismatch)
    );
}
