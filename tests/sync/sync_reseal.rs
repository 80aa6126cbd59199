//! A store started offline (sealed for its own did:key) linked to an
//! account by its first `gelstore sync`: everything is sealed again for the
//! account's DID before anything is pushed, once; a device joining through
//! the PDS then uses the account's DID without guessing; a device paired
//! earlier from an exported CAR is told to pair again and keeps its copy;
//! a re-seal cut by a crash on either side of its commit is finished or
//! redone, never pushed half done; key wraps a hostile PDS planted before
//! the first sync are left out of the re-seal, by name, and block nothing.
//!
//! Every scenario runs against both peers of tests/support/peer.rs.

use crate::support::peer;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gelstore::device::Device;
use gelstore::repo::repository::Repository;
use serde_json::Value;

use peer::{Peer, gel, message, on_both_peers, show};

const MARKER: &str = "RESEAL-PLAINTEXT-7Qm2";
const SEALED: [&str; 3] = [
    "chat.gel.assistant.chat",
    "chat.gel.assistant.message",
    "chat.gel.assistant.settings",
];

fn ok(data: &Path, args: &[&str]) -> String {
    peer::ok(data, args).trim_end().to_owned()
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn sync_args(pds: &Peer) -> Vec<&str> {
    peer::sync_args(pds, &pds.service, &pds.password)
}

fn sync(data: &Path, pds: &Peer) -> Value {
    json_of(&ok(data, &sync_args(pds)))
}

fn get(url: &str) -> Vec<u8> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let resp = reqwest::get(url).await.unwrap();
            assert!(resp.status().is_success(), "{url}: {}", resp.status());
            resp.bytes().await.unwrap().to_vec()
        })
}

fn repo_car(pds: &Peer) -> Vec<u8> {
    get(&format!(
        "{}/xrpc/com.atproto.sync.getRepo?did={}",
        pds.service,
        pds.did_param()
    ))
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

fn device_did(data: &Path) -> String {
    json_of(&ok(data, &["device", "ls", "--format", "json"]))["did"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// An offline store: a device, settings, a chat, a message and a pending
/// reply to it. Returns (chat, message, pending reply).
fn offline_store(a: &Path) -> (String, String, String) {
    ok(a, &["device", "init", "--name", "laptop"]);
    ok(a, &["settings", "set", "--model", "openai/gpt-test"]);
    let chat = ok(a, &["chat", "new", "--title", &format!("Plans {MARKER}")]);
    let msg = ok(
        a,
        &["chat", "send", "--chat", &chat, &format!("Hello {MARKER}")],
    );
    let reply = ok(a, &["chat", "ask", "--to", &msg]);
    (chat, msg, reply)
}

/// Every sealed record in the store of `data` opens on its device for the
/// DID that device seals for, and every message's `chat` names it.
fn all_open(data: &Path) -> usize {
    all_open_but(data, &[])
}

/// [`all_open`], leaving out the records `skip` names (`collection/rkey`).
fn all_open_but(data: &Path, skip: &[String]) -> usize {
    let device = Device::open(data).unwrap();
    let did = device.account_did().to_owned();
    let mut n = 0;
    for collection in SEALED {
        let keys: Vec<String> = device
            .repo()
            .list(Some(collection))
            .unwrap()
            .map(|r| r.unwrap().0)
            .collect();
        for key in keys.into_iter().filter(|k| !skip.contains(k)) {
            let rkey = key.split_once('/').unwrap().1;
            device
                .open_sealed(collection, rkey)
                .unwrap_or_else(|e| panic!("{key} does not open for {did}: {e}"));
            let value = device.repo().get(collection, rkey).unwrap().unwrap().value;
            if let Some(uri) = value["chat"].as_str() {
                assert!(uri.starts_with(&format!("at://{did}/")), "{key}: {uri}");
            }
            n += 1;
        }
    }
    n
}

/// A new device paired through the PDS with A; returns its data folder's
/// join report.
fn pair_through_pds(a: &Path, b: &Path, pds: &Peer) -> Value {
    let paired = json_of(&ok(b, &["device", "pair", "--publish", "--format", "json"]));
    let code = paired["code"].as_str().unwrap().to_owned();
    sync(b, pds);
    sync(a, pds);
    ok(a, &["device", "approve", &code]);
    sync(a, pds);
    sync(b, pds);
    json_of(&ok(b, &["device", "join", "--format", "json"]))
}

on_both_peers!(
    an_offline_store_is_resealed_once_before_its_first_push,
    a_reseal_cut_before_its_commit_is_redone_and_after_it_finished,
    key_wraps_planted_before_the_first_sync_are_dropped_not_blocking,
    sealed_records_planted_before_the_first_sync_are_left_not_blocking,
);

fn an_offline_store_is_resealed_once_before_its_first_push(pds: Peer) {
    let dirs = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let (a, b, c) = (dirs.0.path(), dirs.1.path(), dirs.2.path());
    let (chat, msg, reply) = offline_store(a);
    let old_did = device_did(a);
    assert!(old_did.starts_with("did:key:"), "{old_did}");
    assert_ne!(old_did, pds.did);

    // C pairs offline, from A's exported CAR (a read-only copy).
    let code = ok(c, &["device", "pair"]);
    let c_id = json_of(&ok(a, &["device", "approve", &code, "--format", "json"]))["device"]
        .as_str()
        .unwrap()
        .to_owned();
    let car = export(a, c, "before.car");
    ok(c, &["device", "join", "--from", car.to_str().unwrap()]);
    let before = show(c, &chat);
    let opened = all_open(a);
    assert!(opened >= 4, "chat, settings, message, reply: {opened}");

    // The first sync re-seals, then pushes.
    let first = sync(a, &pds);
    let resealed = &first["reseal"]["resealed"];
    assert_eq!(resealed["from"], old_did.as_str(), "{first}");
    assert_eq!(resealed["to"], pds.did.as_str(), "{first}");
    assert_eq!(resealed["sealed"], opened, "{first}");
    assert_eq!(resealed["changes"], 2, "genesis and C's admission: {first}");
    assert_eq!(resealed["leftBehind"], serde_json::json!([c_id]), "{first}");
    assert!(first["push"]["created"].as_u64().unwrap() >= 6, "{first}");
    assert_eq!(first["pull"]["data_matches"], true, "{first}");
    assert_eq!(device_did(a), pds.did);
    assert_eq!(all_open(a), opened);

    // Nothing sealed for (or naming) the did:key reached the PDS; no
    // plaintext either.
    let on_pds = repo_car(&pds);
    assert!(!contains(&on_pds, &old_did), "the did:key reached the PDS");
    assert!(!contains(&on_pds, MARKER), "plaintext reached the PDS");

    // A reads what it wrote, the pending reply still authenticated.
    let thread = show(a, &chat);
    assert_eq!(
        message(&thread, &msg)["content"]["parts"][0]["text"],
        format!("Hello {MARKER}").as_str()
    );
    assert_eq!(message(&thread, &reply)["status"], "pending");
    assert_eq!(message(&thread, &reply)["state"], "empty", "{thread}");

    // A second sync re-seals nothing and pushes nothing.
    let second = sync(a, &pds);
    assert_eq!(second["reseal"], "notNeeded", "{second}");
    let p = &second["push"];
    assert_eq!(
        (&p["created"], &p["updated"], &p["deleted"]),
        (&0.into(), &0.into(), &0.into())
    );

    // B joins through the PDS: the login gave the account's DID, nothing is
    // guessed, and every record opens for it.
    let joined = pair_through_pds(a, b, &pds);
    assert_eq!(joined["did"], pds.did.as_str(), "{joined}");
    assert_eq!(joined["newlyPaired"], true);
    assert_eq!(all_open(b), opened);
    assert_eq!(show(b, &chat), show(a, &chat));
    assert_eq!(
        json_of(&ok(b, &["settings", "show", "--format", "json"])),
        json_of(&ok(a, &["settings", "show", "--format", "json"]))
    );
    // B's own writes are sealed for the account too, and A reads them.
    let more = ok(b, &["chat", "send", "--chat", &chat, "From B"]);
    sync(b, &pds);
    sync(a, &pds);
    assert_eq!(
        message(&show(a, &chat), &more)["content"]["parts"][0]["text"],
        "From B"
    );
    assert!(!contains(&repo_car(&pds), &old_did));

    // C, paired from a CAR, cannot follow: told so, its copy kept.
    let car = export(a, c, "after.car");
    let out = gel(c, &["device", "join", "--from", car.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot follow") && err.contains("Pair this device again"),
        "{err}"
    );
    assert_eq!(show(c, &chat), before);

    // A device paired from a CAR after the link: the export is the local
    // did:key repository, so the account's DID is given.
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    let code = ok(d, &["device", "pair"]);
    ok(a, &["device", "approve", &code]);
    let car = export(a, d, "linked.car");
    let out = gel(d, &["device", "join", "--from", car.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("does not open for {old_did}")) && err.contains("--account-did"),
        "{err}"
    );
    let joined = json_of(&ok(
        d,
        &[
            "device",
            "join",
            "--from",
            car.to_str().unwrap(),
            "--account-did",
            &pds.did,
            "--format",
            "json",
        ],
    ));
    assert_eq!(joined["did"], pds.did.as_str(), "{joined}");
    assert_eq!(show(d, &chat), show(a, &chat));
}

fn a_reseal_cut_before_its_commit_is_redone_and_after_it_finished(pds: Peer) {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path();

    // Cut before the commit: the marker is written, the records are not.
    let (chat, _, _) = offline_store(a);
    let old_did = device_did(a);
    let state = read_state(a);
    let mut cut = state.clone();
    cut["resealPending"] = serde_json::json!({
        "accountDid": pds.did,
        // The head of a log that was never committed.
        "heads": [gelstore::model::cid_for_cbor(b"never committed").to_string()],
    });
    write_state(a, &cut);
    let head = Repository::open(a).unwrap().head();
    // Still the did:key store: it opens as before (nothing was committed).
    assert!(show(a, &chat)["messages"].as_array().unwrap().len() >= 2);
    assert_eq!(Repository::open(a).unwrap().head(), head);
    let first = sync(a, &pds);
    assert_eq!(
        first["reseal"]["resealed"]["to"],
        pds.did.as_str(),
        "{first}"
    );
    assert!(read_state(a).get("resealPending").is_none());
    assert_eq!(first["reseal"]["resealed"]["from"], old_did.as_str());
    assert!(!contains(&repo_car(&pds), &old_did));
    assert_eq!(device_did(a), pds.did);

    // Cut after the commit: the records are re-sealed, the state file still
    // names the did:key and the marker.
    let c = tempfile::tempdir().unwrap();
    let c = c.path();
    let (chat, msg, _) = offline_store(c);
    let before = read_state(c);
    {
        let mut repo = Repository::open(c).unwrap();
        let out = gelstore::device::reseal::reseal_for_account(
            c,
            &mut repo,
            &pds.did,
            &BTreeMap::new(),
            &mut gelstore::seal::os_rng(),
        )
        .unwrap();
        assert!(matches!(
            out,
            gelstore::device::reseal::ResealOutcome::Resealed(_)
        ));
    }
    let after = read_state(c);
    let mut cut = before.clone();
    cut["resealPending"] = serde_json::json!({
        "accountDid": pds.did,
        "heads": after["membershipHeads"],
    });
    write_state(c, &cut);
    // A push now is refused until the re-seal is finished; opening the
    // device finishes it (the commit is there).
    let err = gelstore::device::reseal::check_ready(
        c,
        &Repository::open(c).unwrap(),
        &pds.did,
        &BTreeMap::new(),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("not yet sealed for the account"),
        "{err}"
    );
    assert_eq!(
        message(&show(c, &chat), &msg)["content"]["parts"][0]["text"],
        format!("Hello {MARKER}").as_str()
    );
    assert_eq!(read_state(c), after);
    assert_eq!(device_did(c), pds.did);

    // A store still sealed for its did:key is refused a push by the check
    // itself, whatever calls it.
    let d = tempfile::tempdir().unwrap();
    offline_store(d.path());
    let err = gelstore::device::reseal::check_ready(
        d.path(),
        &Repository::open(d.path()).unwrap(),
        &pds.did,
        &BTreeMap::new(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("nothing is pushed"), "{err}");
}

const KEY_WRAP: &str = "chat.gel.assistant.keyWrap";

/// A logged-in XRPC call as the attacker (the account's password: what a
/// PDS operator has); the answer's JSON.
fn attacker_post(pds: &Peer, token: Option<&str>, method: &str, body: &Value) -> Value {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let mut req = reqwest::Client::new()
                .post(format!("{}/xrpc/{method}", pds.service))
                .json(body);
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            let resp = req.send().await.unwrap();
            let status = resp.status();
            let v: Value = resp.json().await.unwrap_or(Value::Null);
            assert!(status.is_success(), "{method}: {status} {v}");
            v
        })
}

/// The records of `collection` in the store of `data`, by rkey.
fn local_records(data: &Path, collection: &str) -> BTreeMap<String, Value> {
    let repo = Repository::open(data).unwrap();
    let keys: Vec<String> = repo
        .list(Some(collection))
        .unwrap()
        .map(|r| r.unwrap().0)
        .collect();
    keys.into_iter()
        .map(|k| {
            let rkey = k.split_once('/').unwrap().1.to_owned();
            let value = repo.get(collection, &rkey).unwrap().unwrap().value;
            (rkey, value)
        })
        .collect()
}

/// The attacker's access token (a session with the account password).
fn attacker_token(pds: &Peer) -> String {
    let session = attacker_post(
        pds,
        None,
        "com.atproto.server.createSession",
        &serde_json::json!({"identifier": pds.handle, "password": pds.password}),
    );
    session["accessJwt"].as_str().unwrap().to_owned()
}

/// Writes `record` into `collection` on the PDS as the attacker (at
/// `rkey`, or a fresh one); returns its `collection/rkey`.
fn plant(pds: &Peer, token: &str, collection: &str, rkey: Option<&str>, record: &Value) -> String {
    let mut body = serde_json::json!({"repo": pds.did, "collection": collection, "record": record});
    if let Some(k) = rkey {
        body["rkey"] = k.into();
    }
    let made = attacker_post(pds, Some(token), "com.atproto.repo.createRecord", &body);
    let rkey = made["uri"].as_str().unwrap().rsplit('/').next().unwrap();
    format!("{collection}/{rkey}")
}

/// The key wrap records of the store in `data`, by rkey.
fn local_wraps(data: &Path) -> BTreeMap<String, Value> {
    local_records(data, KEY_WRAP)
}

/// The rkeys of the key wraps on the PDS.
fn remote_wrap_rkeys(pds: &Peer) -> Vec<String> {
    let page = json_of(
        &String::from_utf8(get(&format!(
            "{}/xrpc/com.atproto.repo.listRecords?repo={}&collection={KEY_WRAP}&limit=100",
            pds.service,
            pds.did_param()
        )))
        .unwrap(),
    );
    page["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r["uri"]
                .as_str()
                .unwrap()
                .rsplit('/')
                .next()
                .unwrap()
                .to_owned()
        })
        .collect()
}

/// A hostile PDS plants key wraps before an offline store's first sync,
/// hoping the re-seal (which must make every wrap again for the account's
/// DID) chokes on one and so refuses every push: one addressed to the
/// device with its own key's id that does not open, one of an epoch that
/// does not exist, a chat key wrap of a chat key nobody holds, and two
/// copied from another store (another account's: its pairing wrap and a
/// chat key wrap). The test hands the attacker the store's own records to
/// copy from (a PDS would see them only after the push): the worst case.
/// The sync succeeds; the re-seal makes again only the wraps the keyring
/// accepts and names each planted one as dropped; the next device reads
/// everything.
fn key_wraps_planted_before_the_first_sync_are_dropped_not_blocking(pds: Peer) {
    let dirs = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let (a, b, x) = (dirs.0.path(), dirs.1.path(), dirs.2.path());
    let (chat, msg, _) = offline_store(a);
    let own = local_wraps(a);
    let opened = all_open(a);
    // Another store (another account's key records), with a chat key.
    ok(x, &["device", "init", "--name", "elsewhere"]);
    ok(x, &["chat", "new", "--title", "elsewhere"]);
    let foreign = local_wraps(x);
    assert_eq!(foreign.len(), 2, "pairing and chat key wraps: {foreign:?}");

    let pairing = own
        .values()
        .find(|w| w["recipient"]["device"].is_string())
        .unwrap_or_else(|| panic!("no pairing wrap in {own:?}"));
    let chat_wrap = own
        .values()
        .find(|w| w["keyId"].as_str().unwrap().starts_with("chat:"))
        .unwrap_or_else(|| panic!("no chat key wrap in {own:?}"));
    let mut planted = Vec::new();
    // Addressed to this device, its own account key's id: does not open.
    let mut w = pairing.clone();
    w["createdAt"] = "2020-01-01T00:00:00.000Z".into();
    planted.push(w);
    // An epoch that does not exist.
    let mut w = pairing.clone();
    w["epoch"] = 7.into();
    w["keyId"] = "account:7:ffffffffffffffff".into();
    planted.push(w);
    // A chat key nobody holds, wrapped to the account key.
    let mut w = chat_wrap.clone();
    w["keyId"] = "chat:3lbqzzzzzzzzz:0:ffffffffffffffff".into();
    planted.push(w);
    // Another account's wraps, as they are.
    planted.extend(foreign.values().cloned());

    let token = attacker_token(&pds);
    let mut names: Vec<String> = planted
        .iter()
        .map(|record| plant(&pds, &token, KEY_WRAP, None, record))
        .collect();
    names.sort();

    // The first sync pulls them, re-seals without them, and pushes.
    let first = sync(a, &pds);
    let resealed = &first["reseal"]["resealed"];
    assert_eq!(resealed["to"], pds.did.as_str(), "{first}");
    assert_eq!(resealed["wraps"], own.len(), "only its own wraps: {first}");
    assert_eq!(resealed["sealed"], opened, "{first}");
    let mut dropped: Vec<String> = resealed["dropped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap().to_owned())
        .collect();
    dropped.sort();
    assert_eq!(dropped, names, "each planted wrap, by name: {first}");
    assert_eq!(
        resealed["leftBehind"],
        serde_json::json!([]),
        "no device is left behind: {first}"
    );
    assert_eq!(first["pull"]["data_matches"], true, "{first}");
    assert_eq!(device_did(a), pds.did);
    assert_eq!(all_open(a), opened);
    // Dropped: gone from the store and from the PDS.
    let remote = remote_wrap_rkeys(&pds);
    for name in &names {
        let rkey = name.rsplit('/').next().unwrap();
        assert!(
            !remote.iter().any(|r| r == rkey),
            "{name} is still on the PDS"
        );
        assert!(!local_wraps(a).contains_key(rkey), "{name} is still here");
    }
    assert_eq!(remote.len(), own.len());
    let second = sync(a, &pds);
    assert_eq!(second["reseal"], "notNeeded", "{second}");

    // Another device joins through the PDS and reads everything.
    let joined = pair_through_pds(a, b, &pds);
    assert_eq!(joined["did"], pds.did.as_str(), "{joined}");
    assert_eq!(all_open(b), opened);
    assert_eq!(show(b, &chat), show(a, &chat));
    assert_eq!(
        message(&show(b, &chat), &msg)["content"]["parts"][0]["text"],
        format!("Hello {MARKER}").as_str()
    );
}

/// A hostile PDS plants sealed records of ours (a chat and a message
/// copied from another store, sealed for its DID) before an offline
/// store's first sync, hoping the re-seal (which refuses to go on while a
/// record of the store does not open, so as not to lose it) refuses every
/// push. They came from the PDS, so they are not the store's to seal
/// again: the re-seal leaves them as they are and names them, seals its
/// own records again, and the next device reads everything.
fn sealed_records_planted_before_the_first_sync_are_left_not_blocking(pds: Peer) {
    let dirs = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let (a, b, x) = (dirs.0.path(), dirs.1.path(), dirs.2.path());
    let (chat, msg, _) = offline_store(a);
    let opened = all_open(a);
    ok(x, &["device", "init", "--name", "elsewhere"]);
    let x_chat = ok(x, &["chat", "new", "--title", "elsewhere"]);
    ok(x, &["chat", "send", "--chat", &x_chat, "not yours"]);

    let token = attacker_token(&pds);
    let mut names = Vec::new();
    for collection in ["chat.gel.assistant.chat", "chat.gel.assistant.message"] {
        for (rkey, record) in local_records(x, collection) {
            names.push(plant(&pds, &token, collection, Some(&rkey), &record));
        }
    }
    names.sort();
    assert_eq!(names.len(), 2, "{names:?}");

    let first = sync(a, &pds);
    let resealed = &first["reseal"]["resealed"];
    assert_eq!(resealed["to"], pds.did.as_str(), "{first}");
    assert_eq!(resealed["sealed"], opened, "its own records: {first}");
    let mut left: Vec<String> = resealed["leftUnopened"]
        .as_array()
        .unwrap_or_else(|| panic!("no leftUnopened: {first}"))
        .iter()
        .map(|d| d.as_str().unwrap().to_owned())
        .collect();
    left.sort();
    assert_eq!(left, names, "each planted record, by name: {first}");
    assert_eq!(device_did(a), pds.did);
    assert_eq!(all_open_but(a, &names), opened);
    let second = sync(a, &pds);
    assert_eq!(second["reseal"], "notNeeded", "{second}");

    let joined = pair_through_pds(a, b, &pds);
    assert_eq!(joined["did"], pds.did.as_str(), "{joined}");
    assert_eq!(all_open_but(b, &names), opened);
    assert_eq!(
        message(&show(b, &chat), &msg)["content"]["parts"][0]["text"],
        format!("Hello {MARKER}").as_str()
    );
}

fn read_state(data: &Path) -> Value {
    json_of(&std::fs::read_to_string(data.join("device.json")).unwrap())
}

fn write_state(data: &Path, state: &Value) {
    use std::os::unix::fs::PermissionsExt;
    let path = data.join("device.json");
    std::fs::write(&path, serde_json::to_string_pretty(state).unwrap()).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

fn export(data: &Path, beside: &Path, name: &str) -> PathBuf {
    let car = beside.parent().unwrap().join(format!(
        "{}-{name}",
        beside.file_name().unwrap().to_string_lossy()
    ));
    ok(data, &["repo", "export", "--out", car.to_str().unwrap()]);
    car
}
