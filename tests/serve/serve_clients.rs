//! `gelstore serve` driven by the standard npm clients, unchanged
//! (tests/clients/drive.mjs): @atproto/api for sessions and record calls,
//! @atproto/identity + @atproto/repo to resolve our did:web and verify the
//! getRepo CAR and sync.getRecord proofs against the key it names.

use crate::support::serve;

use serve::{Serve, drive};

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
    assert_eq!(api["loggedOut"], true, "{api}");
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
    let key = gelstore::repo::key_file::load_key(&serve.data)
        .unwrap()
        .unwrap();
    assert_eq!(verified["key"], key.public_key().to_did_key().as_str());
}

#[test]
fn the_firehose_is_verified_by_atproto_sync_and_inductively() {
    let serve = Serve::start();
    let run = |env: &[(&str, &str)]| {
        drive(
            "firehose",
            &serve.service,
            &serve.did,
            &serve.handle,
            &serve.password,
            env,
        )
    };
    // Live (no cursor): the frames of the writes made while subscribed.
    let live = run(&[("WRITES", "4")]);
    assert_eq!(live["frames"], 4, "{live}");
    assert_eq!(live["verifiedByFirehose"], 4, "{live}");
    assert_eq!(live["inductiveChecked"], 4, "{live}");
    // Replay from cursor 0: the first commit (seq 1), the 4 above, then 2
    // live ones; every op verified by @atproto/sync, every commit inverted
    // to its prevData by @atproto/repo's MST.
    let replay = run(&[("CURSOR", "0"), ("EXPECT_OLD", "5"), ("WRITES", "2")]);
    assert_eq!(replay["frames"], 7, "{replay}");
    assert_eq!(replay["lastSeq"], 7, "{replay}");
    assert_eq!(replay["verifiedByFirehose"], 6, "{replay}");
    assert_eq!(replay["inductiveChecked"], 6, "{replay}");
    let future = drive(
        "futurecursor",
        &serve.service,
        &serve.did,
        &serve.handle,
        &serve.password,
        &[],
    );
    assert_eq!(future["error"], "FutureCursor");
}
