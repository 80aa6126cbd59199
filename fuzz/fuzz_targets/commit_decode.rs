//! Decodes arbitrary bytes as a signed commit. Decoding may fail, but must
//! not panic; an accepted commit re-encodes to exactly the input bytes, and
//! verifying it (against a fixed key, or its own did when that is a
//! did:key) returns an answer instead of panicking.

#![no_main]

use gelstore::model::cid_for_cbor;
use gelstore::repo::commit::Commit;
use gelstore::crypto::{KeyAlgorithm, SigningKey};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(commit) = Commit::from_cbor(data) else {
        return;
    };
    assert_eq!(commit.to_cbor(), data, "re-encoding changed the bytes");
    assert_eq!(commit.cid(), cid_for_cbor(data));
    let decoded_again = Commit::from_cbor(&commit.unsigned().clone().sign(&key()).to_cbor())
        .expect("a re-signed commit must decode");
    decoded_again
        .verify(&key().public_key())
        .expect("a re-signed commit must verify");
    let _ = commit.verify(&key().public_key());
    let _ = commit.verify_did_key(commit.did());
});

fn key() -> SigningKey {
    SigningKey::from_bytes(KeyAlgorithm::K256, &[0x11; 32]).expect("a fixed valid key")
}
