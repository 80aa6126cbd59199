//! `gelstore serve` driven by the standard npm clients, unchanged
//! (tests/clients/drive.mjs): @atproto/api for sessions and record calls,
//! @atproto/identity + @atproto/repo to resolve our did:web and verify the
//! getRepo CAR and sync.getRecord proofs against the key it names.

mod common_serve;

use common_serve::{Serve, drive};

#[test]
fn atproto_api_and_repo_clients_work_against_gelstore_serve() {
    let serve = Serve::start();
    let api = drive(
        "api",
        &serve.service,
        &serve.did,
        &serve.handle,
        &serve.password,
        &[],
    );
    assert_eq!(api["serverDid"], serve.did.as_str());
    let verified = drive(
        "verify",
        &serve.service,
        &serve.did,
        &serve.handle,
        &serve.password,
        &[],
    );
    assert_eq!(
        verified["rev"], api["rev"],
        "the CAR is at the head the API saw"
    );
    // The key the DID document names is the store's signing key.
    let key = gelstore::repo::identity::load_key(&serve.data)
        .unwrap()
        .unwrap();
    assert_eq!(verified["key"], key.public_key().to_did_key().as_str());
}
