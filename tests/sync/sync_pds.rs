//! `gelstore sync` against each peer (tests/support/peer.rs): the real
//! reference PDS (tests/pds, started by tests/support/pds.rs on free loopback
//! ports; installed on first use) and `gelstore serve` (tests/support/serve.rs).
//! Every scenario runs against both, as `SCENARIO::pds` and
//! `SCENARIO::serve`.

use crate::support::peer;

use std::path::{Path, PathBuf};

use gelstore::crypto::{KeyAlgorithm, PublicKey};
use gelstore::repo::blocks::MemoryBlocks;
use gelstore::repo::mst::Mst;
use gelstore::repo::repository::{Repository, Write};
use gelstore::repo::verify::{SignatureCheck, SignatureStatus, VerifyOptions, verify_repo_car};
use gelstore::sync;
use serde_json::Value;

use peer::{Kind, Peer, add_chat_records, gel, mirror, ok, on_both_peers, sync_args};

/// Text that must never reach the PDS in the clear.
const MARKER: &str = "PLAINTEXT-MARKER-q7Zx";

fn streams() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/streams")
}

/// A blocking GET of a URL (the test's own view of the PDS, not the
/// client under test).
fn get(url: &str) -> (u16, Vec<u8>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let resp = reqwest::get(url).await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.bytes().await.unwrap().to_vec())
    })
}

fn get_json(url: &str) -> Value {
    let (status, body) = get(url);
    assert_eq!(status, 200, "{url}: {}", String::from_utf8_lossy(&body));
    serde_json::from_slice(&body).unwrap()
}

/// Every record of a collection, through listRecords' cursor.
fn list_records(pds: &Peer, collection: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = get_json(&format!(
            "{}/xrpc/com.atproto.repo.listRecords?repo={}&collection={collection}&limit=100&cursor={cursor}",
            pds.service,
            pds.did_param()
        ));
        let records = page["records"].as_array().unwrap();
        out.extend(records.iter().cloned());
        match page["cursor"].as_str() {
            Some(c) if !records.is_empty() => cursor = c.to_owned(),
            _ => return out,
        }
    }
}

/// The `#atproto` key of the peer's DID document, fetched by the test
/// itself: from the PLC (did:plc) or the server's own host (did:web).
fn pds_key(pds: &Peer) -> PublicKey {
    let doc = match &pds.plc {
        Some(plc) => get_json(&format!("{plc}/{}", pds.did)),
        None => get_json(&format!("{}/.well-known/did.json", pds.service)),
    };
    assert_eq!(doc["id"], pds.did.as_str(), "{doc}");
    let method = doc["verificationMethod"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"].as_str().unwrap().ends_with("#atproto"))
        .unwrap();
    let multibase = method["publicKeyMultibase"].as_str().unwrap();
    match method["type"].as_str().unwrap() {
        // The PLC directory's legacy form: the bare uncompressed point.
        "EcdsaSecp256k1VerificationKey2019" => {
            PublicKey::from_legacy_multibase(KeyAlgorithm::K256, multibase).unwrap()
        }
        _ => PublicKey::from_multikey(multibase).unwrap(),
    }
}

/// The MST root over the local store's `chat.gel.assistant.*` records.
fn local_root(data: &Path) -> (gelstore::model::Cid, usize) {
    let repo = Repository::open(data).unwrap();
    let entries: Vec<_> = repo
        .mst()
        .entries_with_prefix("chat.gel.assistant.")
        .map(|e| e.unwrap())
        .collect();
    let n = entries.len();
    (
        Mst::from_entries(MemoryBlocks::default(), entries)
            .unwrap()
            .root(),
        n,
    )
}

on_both_peers!(
    harness_starts_on_loopback,
    device_chat_sync_verify_and_resync,
    large_push_goes_in_batches_of_200,
    get_blocks_serves_known_blocks_and_refuses_missing_ones,
);

fn harness_starts_on_loopback(pds: Peer) {
    let addr = match pds.kind {
        Kind::Pds => {
            let plc = pds.plc.as_deref().unwrap();
            assert!(plc.starts_with("http://127.0.0.1:"), "{plc}");
            assert!(pds.did.starts_with("did:plc:"), "{}", pds.did);
            pds.service.strip_prefix("http://").unwrap().to_owned()
        }
        Kind::Serve => {
            // did:web on its own host: the port's colon is `%3A`.
            assert!(pds.plc.is_none());
            let port = pds.service.strip_prefix("http://localhost:").unwrap();
            assert_eq!(pds.did, format!("did:web:localhost%3A{port}"));
            format!("127.0.0.1:{port}")
        }
    };
    assert!(addr.starts_with("127.0.0.1:"), "{}", pds.service);
    std::net::TcpStream::connect(addr).expect("the peer accepts connections");
}

fn device_chat_sync_verify_and_resync(pds: Peer) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    // Device A: a chat with a message and a streamed reply.
    ok(d, &["device", "init"]);
    let title = format!("Title {MARKER}");
    let chat = ok(d, &["chat", "new", "--title", &title]);
    let chat = chat.lines().next().unwrap();
    let msg = ok(
        d,
        &[
            "chat",
            "send",
            "--chat",
            chat,
            &format!("Say hello {MARKER}"),
        ],
    );
    let msg = msg.lines().next().unwrap();
    let events = streams().join("plain_text_small_deltas/input.jsonl");
    ok(
        d,
        &[
            "chat",
            "reply",
            "--to",
            msg,
            "--events",
            events.to_str().unwrap(),
        ],
    );
    let head_before = Repository::open(d).unwrap().head();

    // Bad password: a named error, exit 1, nothing written anywhere.
    let out = gel(d, &sync_args(&pds, &pds.service, "not-the-password"));
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad credentials"), "{err}");
    // The store is not even linked to the account.
    assert_eq!(mirror(d), sync::SyncState::default());

    // PDS-specific: a did:plc's document comes from the PLC URL given, so
    // a wrong or unreachable one can be tried. (`gelstore serve`'s did:web
    // is resolved from its own host; its `--plc` is already the dead
    // port 9, and every sync below succeeding shows it is never asked.)
    if pds.kind == Kind::Pds {
        // A DID document that cannot be had (the PLC URL is wrong): a
        // named error before anything is pushed.
        let mut args = sync_args(&pds, &pds.service, &pds.password);
        args[8] = &pds.service;
        let out = gel(d, &args);
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("cannot resolve the key of"), "{err}");
        assert!(list_records(&pds, "chat.gel.assistant.message").is_empty());

        // An unreachable PLC directory: exit 2.
        let mut args = sync_args(&pds, &pds.service, &pds.password);
        args[8] = "http://127.0.0.1:9";
        let out = gel(d, &args);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("cannot reach http://127.0.0.1:9"), "{err}");
    }

    // Unreachable PDS: exit 2.
    let out = gel(
        d,
        &[
            "sync",
            "--pds",
            "http://127.0.0.1:9",
            "--identifier",
            &pds.handle,
            "--password",
            &pds.password,
            "--plc",
            pds.plc_arg(),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot reach http://127.0.0.1:9"), "{err}");

    // First sync: everything goes up, the repository verifies.
    let report: Value =
        serde_json::from_str(&ok(d, &sync_args(&pds, &pds.service, &pds.password))).unwrap();
    let (root, ours) = local_root(d);
    assert_eq!(report["did"], pds.did.as_str());
    assert_eq!(report["push"]["created"], ours as u64, "{report}");
    assert_eq!(report["push"]["unchanged"], 0);
    assert_eq!(report["pull"]["our_records"], ours as u64);
    assert_eq!(report["pull"]["data_matches"], true, "{report}");
    // The replica check: the PDS's MST root is the one computed here over the same
    // records (the test account holds nothing else).
    assert_eq!(report["pull"]["records"], ours as u64, "{report}");
    assert_eq!(report["pull"]["data"], root.to_string());
    // The failed runs wrote nothing; the first sync re-sealed the store for
    // the account (one local commit, before the push), so what went up is
    // sealed for the account's DID.
    assert_eq!(
        report["reseal"]["resealed"]["to"],
        pds.did.as_str(),
        "{report}"
    );
    assert_ne!(Repository::open(d).unwrap().head(), head_before);

    // listRecords shows the messages under their local keys and CIDs.
    let repo = Repository::open(d).unwrap();
    let messages = list_records(&pds, "chat.gel.assistant.message");
    let local: Vec<(String, gelstore::model::Cid)> = repo
        .list(Some("chat.gel.assistant.message"))
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    assert!(local.len() >= 2, "{local:?}");
    assert_eq!(messages.len(), local.len());
    for (key, cid) in &local {
        let uri = format!("at://{}/{key}", pds.did);
        let remote = messages.iter().find(|m| m["uri"] == uri.as_str());
        let remote = remote.unwrap_or_else(|| panic!("{uri} not listed"));
        assert_eq!(remote["cid"], cid.to_string(), "{uri}");
    }
    let msg_uri = format!("at://{}/chat.gel.assistant.message/{msg}", pds.did);
    assert!(messages.iter().any(|m| m["uri"] == msg_uri.as_str()));
    assert!(
        messages
            .iter()
            .any(|m| m["uri"] == format!("{msg_uri}.r0").as_str())
    );
    drop(repo);

    // The test's own getRepo: verifies against the DID document's key, and
    // carries no plaintext.
    let (status, car) = get(&format!(
        "{}/xrpc/com.atproto.sync.getRepo?did={}",
        pds.service,
        pds.did_param()
    ));
    assert_eq!(status, 200);
    let key = pds_key(&pds);
    let verified = verify_repo_car(
        &car,
        &VerifyOptions::new(SignatureCheck::Key(&key)).expect_did(&pds.did),
    )
    .unwrap();
    assert_eq!(verified.repo.summary.signature, SignatureStatus::Verified);
    assert_eq!(verified.repo.summary.data_cid, root);
    assert!(
        !car.windows(MARKER.len()).any(|w| w == MARKER.as_bytes()),
        "plaintext reached the PDS"
    );
    let rev = verified.repo.summary.rev;

    // Second sync (logging in with the DID this time): nothing new is
    // pushed, no new commit on the PDS.
    let mut args = sync_args(&pds, &pds.service, &pds.password);
    args[4] = &pds.did;
    let again: Value = serde_json::from_str(&ok(d, &args)).unwrap();
    assert_eq!(again["push"]["created"], 0, "{again}");
    assert_eq!(again["push"]["updated"], 0);
    assert_eq!(again["push"]["deleted"], 0);
    assert_eq!(again["push"]["batches"], 0);
    assert_eq!(again["push"]["unchanged"], ours as u64);
    assert_eq!(again["pull"]["rev"], rev.to_string());
    assert_eq!(again["pull"]["data_matches"], true);
    assert_eq!(
        list_records(&pds, "chat.gel.assistant.message").len(),
        local.len()
    );

    // The marker and mirror lost (a crash before the first save): the full
    // pull re-learns what the PDS holds, every record equals the local one,
    // so nothing is merged, nothing pushed and no new commit is made.
    {
        let repo = Repository::open(d).unwrap();
        sync::SyncState::default().save_all(&repo).unwrap();
    }
    assert_eq!(mirror(d), sync::SyncState::default());
    let retry: Value =
        serde_json::from_str(&ok(d, &sync_args(&pds, &pds.service, &pds.password))).unwrap();
    assert_eq!(retry["push"]["retried"], 0, "{retry}");
    assert_eq!(retry["push"]["created"], 0, "{retry}");
    assert_eq!(retry["push"]["unchanged"], ours as u64, "{retry}");
    assert_eq!(
        retry["merged"],
        serde_json::json!({"created": 0, "updated": 0, "deleted": 0, "conflicts": 0, "blobs": 0})
    );
    assert_eq!(retry["pull"]["rev"], rev.to_string());
    assert_eq!(retry["pull"]["data_matches"], true);

    // A local update and a local delete go out as #update and #delete.
    {
        let mut repo = Repository::open(d).unwrap();
        let mut chat_record = repo
            .get("chat.gel.assistant.chat", chat)
            .unwrap()
            .unwrap()
            .value;
        chat_record["createdAt"] = "2026-01-02T03:04:05.000Z".into();
        repo.apply(&[
            Write::update("chat.gel.assistant.chat", chat, chat_record),
            Write::delete("chat.gel.assistant.message", format!("{msg}.r0")),
        ])
        .unwrap();
    }
    let changed: Value =
        serde_json::from_str(&ok(d, &sync_args(&pds, &pds.service, &pds.password))).unwrap();
    assert_eq!(changed["push"]["updated"], 1, "{changed}");
    assert_eq!(changed["push"]["deleted"], 1, "{changed}");
    assert_eq!(changed["push"]["created"], 0, "{changed}");
    assert_eq!(changed["push"]["batches"], 1, "{changed}");
    assert_eq!(changed["pull"]["data_matches"], true, "{changed}");
    let (root, ours) = local_root(d);
    assert_eq!(changed["pull"]["data"], root.to_string());
    assert_eq!(changed["pull"]["records"], ours as u64);
    assert_eq!(
        list_records(&pds, "chat.gel.assistant.message").len(),
        local.len() - 1
    );

    // Another account (on the same PDS; for `gelstore serve`, which serves
    // one account per data folder, on a second server): this store is
    // linked to the first one's.
    let bob = pds.another_account();
    let mut args = sync_args(&pds, &pds.service, &bob.password);
    args[2] = &bob.service;
    args[4] = &bob.handle;
    let out = gel(d, &args);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("this store is linked to {}", pds.did)),
        "{err}"
    );
    let bobs = get_json(&format!(
        "{}/xrpc/com.atproto.repo.listRecords?repo={}&collection=chat.gel.assistant.message",
        bob.service,
        bob.did_param()
    ));
    assert_eq!(bobs["records"], serde_json::json!([]), "{bobs}");
}

fn large_push_goes_in_batches_of_200(pds: Peer) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["device", "init"]);
    add_chat_records(d, 1_700_000_000_000_000, 250, 0);
    let opts = pds.options();
    let report = sync::sync(d, &opts).unwrap();
    // Taken after the sync: its re-seal (before the push) changed the
    // key records' CIDs.
    let (root, ours) = local_root(d);
    assert!(ours >= 250);
    assert_eq!(report.push.created, ours);
    assert_eq!(report.push.batches, ours.div_ceil(200));
    assert_eq!(report.push.retried, 0);
    assert_eq!(report.pull.records, ours);
    assert_eq!(report.pull.data, root.to_string());
    assert!(report.pull.data_matches);
    let again = sync::sync(d, &opts).unwrap();
    assert_eq!((again.push.created, again.push.batches), (0, 0));
    assert_eq!(again.pull.rev, report.pull.rev);
}

/// `com.atproto.sync.getBlocks`, which sync uses to fetch a push's commit:
/// a CAR of the named blocks; a CID the repository lacks fails the call
/// with HTTP 400: `InvalidRequest` from the reference PDS (its handler
/// throws that), the lexicon's `BlockNotFound` from gelstore serve.
fn get_blocks_serves_known_blocks_and_refuses_missing_ones(pds: Peer) {
    let head = get_json(&format!(
        "{}/xrpc/com.atproto.sync.getLatestCommit?did={}",
        pds.service,
        pds.did_param()
    ));
    let commit = head["cid"].as_str().unwrap();
    let (status, car) = get(&format!(
        "{}/xrpc/com.atproto.sync.getBlocks?did={}&cids={commit}",
        pds.service,
        pds.did_param()
    ));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&car));
    let car = gelstore::repo::car::Car::from_slice(&car).unwrap();
    let cid = gelstore::model::parse_cid(commit).unwrap();
    let block = car.get(&cid).expect("the commit block");
    assert_eq!(gelstore::model::cid_for_cbor(block), cid);

    // A well-formed CID of a block nobody stored.
    let absent = gelstore::model::cid_for_cbor(b"\xa1aa\x01");
    let (status, body) = get(&format!(
        "{}/xrpc/com.atproto.sync.getBlocks?did={}&cids={commit}&cids={absent}",
        pds.service,
        pds.did_param()
    ));
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 400, "{body}");
    let expected = match pds.kind {
        Kind::Pds => "InvalidRequest",
        Kind::Serve => "BlockNotFound",
    };
    assert_eq!(body["error"], expected, "{body}");
}
