//! Membership attacks, tried as an attacker with the account's password
//! (what a PDS operator, or whoever shares the password, has) against
//! devices syncing through both peers (the reference PDS and `gelstore
//! serve`): the attacker edits the PDS's copy of the repository through
//! XRPC, the devices sync, and each attack must fail with what a user sees
//! (the sync's exit status and message, `device ls`), with no plaintext
//! sealed after a removal readable on the removed device. Also: a sealed
//! message stripped of its content or turned back into a pending reply.

use crate::support::peer;

use std::path::Path;

use gelstore::repo::repository::{Repository, Write};
use peer::{Peer, gel, ok, on_both_peers};
use serde_json::{Value, json};

const KEY_WRAP: &str = "chat.gel.assistant.keyWrap";
const MEMBERSHIP: &str = "chat.gel.assistant.membership";
const DEVICE: &str = "chat.gel.assistant.device";

fn json_of(text: &str) -> Value {
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn login(peer: &Peer) -> Vec<&str> {
    vec![
        "--pds",
        &peer.service,
        "--identifier",
        &peer.handle,
        "--password",
        &peer.password,
        "--plc",
        peer.plc_arg(),
        "--format",
        "json",
    ]
}

fn sync(data: &Path, peer: &Peer) -> Value {
    let mut args = vec!["sync"];
    args.extend(login(peer));
    json_of(&ok(data, &args))
}

/// A sync expected to refuse: its exit status, report and message.
fn sync_refused(data: &Path, peer: &Peer) -> (Value, String) {
    let mut args = vec!["sync"];
    args.extend(login(peer));
    let out = gel(data, &args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(1),
        "the sync should refuse: {stderr}"
    );
    (json_of(&String::from_utf8_lossy(&out.stdout)), stderr)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn xrpc(
    peer: &Peer,
    method: &str,
    token: Option<&str>,
    body: Option<&Value>,
    query: &str,
) -> Value {
    rt().block_on(async {
        let url = format!("{}/xrpc/{method}{query}", peer.service);
        let client = reqwest::Client::new();
        let mut req = match body {
            Some(b) => client.post(&url).json(b),
            None => client.get(&url),
        };
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

/// The attacker: a session with the account's password.
fn attacker(peer: &Peer) -> String {
    let s = xrpc(
        peer,
        "com.atproto.server.createSession",
        None,
        Some(&json!({"identifier": peer.handle, "password": peer.password})),
        "",
    );
    s["accessJwt"].as_str().unwrap().to_owned()
}

fn key_wraps(peer: &Peer) -> Vec<Value> {
    records(peer, KEY_WRAP)
}

/// Every record of `collection` on the PDS, as `listRecords` gives them.
fn records(peer: &Peer, collection: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = xrpc(
            peer,
            "com.atproto.repo.listRecords",
            None,
            None,
            &format!(
                "?repo={}&collection={collection}&limit=100{cursor}",
                peer.did_param()
            ),
        );
        let records = page["records"].as_array().unwrap().clone();
        let done = records.len() < 100;
        out.extend(records);
        match page["cursor"].as_str() {
            Some(c) if !done => cursor = format!("&cursor={c}"),
            _ => return out,
        }
    }
}

fn rkey_of(record: &Value) -> String {
    record["uri"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned()
}

/// Pairs a new device in `data` through the PDS with device `a`.
fn pair(a: &Path, data: &Path, name: &str, peer: &Peer) -> String {
    let paired = json_of(&ok(
        data,
        &[
            "device",
            "pair",
            "--publish",
            "--name",
            name,
            "--format",
            "json",
        ],
    ));
    let code = paired["code"].as_str().unwrap().to_owned();
    sync(data, peer);
    sync(a, peer);
    ok(a, &["device", "approve", &code]);
    sync(a, peer);
    sync(data, peer);
    ok(data, &["device", "join"]);
    paired["device"].as_str().unwrap().to_owned()
}

/// A device's status in a `device ls --format json` listing.
fn status_in(ls: &Value, id: &str) -> String {
    ls["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == id)
        .map(|d| d["status"].as_str().unwrap().to_owned())
        .unwrap_or_else(|| panic!("{id} not listed: {ls}"))
}

fn epoch(data: &Path) -> u64 {
    json_of(&ok(data, &["device", "ls", "--format", "json"]))["epoch"]
        .as_u64()
        .unwrap()
}

fn shown(data: &Path, chat: &str) -> String {
    ok(data, &["chat", "show", "--chat", chat, "--format", "json"])
}

/// Attack 1: after `device remove TABLET`, the attacker deletes the new
/// epoch's key wraps on the PDS, hoping every device falls back to the
/// old epoch, which the tablet still holds.
fn deleting_the_new_epochs_wraps_does_not_undo_a_removal(peer: Peer) {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let (a, b, tablet) = (dirs[0].path(), dirs[1].path(), dirs[2].path());
    ok(a, &["device", "init", "--name", "laptop"]);
    let chat = ok(a, &["chat", "new", "--title", "plans"])
        .trim()
        .to_owned();
    ok(a, &["chat", "send", "--chat", &chat, "before the removal"]);
    sync(a, &peer);
    pair(a, b, "phone", &peer);
    let tablet_id = pair(a, tablet, "tablet", &peer);
    assert!(shown(tablet, &chat).contains("before the removal"));

    ok(a, &["device", "remove", &tablet_id]);
    sync(a, &peer);
    sync(b, &peer);
    assert_eq!((epoch(a), epoch(b)), (1, 1));

    // The attacker deletes every epoch-1 wrap.
    let token = attacker(&peer);
    let newer: Vec<Value> = key_wraps(&peer)
        .into_iter()
        .filter(|w| w["value"]["epoch"] == 1)
        .collect();
    assert!(!newer.is_empty());
    for w in &newer {
        xrpc(
            &peer,
            "com.atproto.repo.deleteRecord",
            Some(&token),
            Some(&json!({"repo": peer.did, "collection": KEY_WRAP, "rkey": rkey_of(w)})),
            "",
        );
    }
    assert!(key_wraps(&peer).iter().all(|w| w["value"]["epoch"] != 1));
    // And the signed change that started epoch 1.
    let changes: Vec<Value> = records(&peer, MEMBERSHIP)
        .into_iter()
        .filter(|c| c["value"]["epoch"] == 1)
        .collect();
    assert_eq!(changes.len(), 1);
    xrpc(
        &peer,
        "com.atproto.repo.deleteRecord",
        Some(&token),
        Some(&json!({"repo": peer.did, "collection": MEMBERSHIP, "rkey": rkey_of(&changes[0])})),
        "",
    );

    // Each device refuses the deletions, keeps its records and says so;
    // the first to sync puts them back on the PDS.
    let (report, message) = sync_refused(b, &peer);
    assert_eq!(
        report["merged"]["refused"].as_array().unwrap().len(),
        newer.len() + 1,
        "{report}"
    );
    assert!(message.contains("undo a device removal"), "{message}");
    assert_eq!(epoch(b), 1);
    let back = key_wraps(&peer)
        .into_iter()
        .filter(|w| w["value"]["epoch"] == 1)
        .count();
    assert_eq!(back, newer.len(), "the refused records are pushed back");
    assert_eq!(
        records(&peer, MEMBERSHIP)
            .iter()
            .filter(|c| c["value"]["epoch"] == 1)
            .count(),
        1
    );
    sync(a, &peer);
    assert_eq!(epoch(a), 1);

    // What a device writes next is sealed for epoch 1: the tablet, synced,
    // cannot open it, and still opens what it could before.
    ok(
        a,
        &["chat", "send", "--chat", &chat, "SECRET-AFTER-REMOVAL"],
    );
    sync(a, &peer);
    sync(tablet, &peer);
    let seen = shown(tablet, &chat);
    assert!(seen.contains("before the removal"), "{seen}");
    assert!(
        !seen.contains("SECRET-AFTER-REMOVAL"),
        "the removed tablet read a later message"
    );
    sync(b, &peer);
    assert!(shown(b, &chat).contains("SECRET-AFTER-REMOVAL"));
}

/// A store that loses its newer key records anyway (restored from an old
/// backup, edited by hand): the device remembers the epoch it held and
/// refuses to seal below it, and `device ls` says why.
fn a_device_never_seals_below_the_epoch_it_held(peer: Peer) {
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let (a, tablet) = (dirs[0].path(), dirs[1].path());
    ok(a, &["device", "init", "--name", "laptop"]);
    let chat = ok(a, &["chat", "new"]).trim().to_owned();
    ok(a, &["chat", "send", "--chat", &chat, "hello"]);
    sync(a, &peer);
    let tablet_id = pair(a, tablet, "tablet", &peer);
    ok(a, &["device", "remove", &tablet_id]);
    assert_eq!(epoch(a), 1);
    // Drop the epoch-1 wraps from the local store itself.
    {
        let mut repo = Repository::open(a).unwrap();
        let rkeys: Vec<String> = repo
            .list(Some(KEY_WRAP))
            .unwrap()
            .map(|e| e.unwrap().0.rsplit('/').next().unwrap().to_owned())
            .collect();
        let gone: Vec<Write> = rkeys
            .iter()
            .filter(|r| repo.get(KEY_WRAP, r).unwrap().unwrap().value["epoch"] == 1)
            .map(|r| Write::delete(KEY_WRAP, r))
            .collect();
        assert!(!gone.is_empty());
        repo.apply(&gone).unwrap();
    }
    let out = gel(
        a,
        &["chat", "send", "--chat", &chat, "must not seal for epoch 0"],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("held account epoch 1"), "{err}");
    let ls = gel(a, &["device", "ls", "--format", "json"]);
    let listing = json_of(&String::from_utf8_lossy(&ls.stdout));
    assert_eq!(listing["rolledBack"], true, "{listing}");
    assert_eq!(listing["heldEpoch"], 1);
}

/// Attack 2: two removals at once (the laptop removes C while the phone
/// removes D, before either synced). Each device then holds two epoch-1
/// keys with different rosters: a fork. Nothing new is sealed until `device
/// resolve` starts epoch 2 for the devices both removals kept, and neither
/// removed device reads what comes after.
fn two_removals_at_once_both_hold(peer: Peer) {
    let dirs: Vec<tempfile::TempDir> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let (a, b, c, d) = (
        dirs[0].path(),
        dirs[1].path(),
        dirs[2].path(),
        dirs[3].path(),
    );
    ok(a, &["device", "init", "--name", "laptop"]);
    let chat = ok(a, &["chat", "new"]).trim().to_owned();
    ok(a, &["chat", "send", "--chat", &chat, "before"]);
    sync(a, &peer);
    pair(a, b, "phone", &peer);
    let c_id = pair(a, c, "tablet", &peer);
    let d_id = pair(a, d, "watch", &peer);
    sync(b, &peer);
    ok(a, &["device", "remove", &c_id]);
    ok(b, &["device", "remove", &d_id]);
    sync(a, &peer);
    sync(b, &peer);
    sync(a, &peer);
    for device in [a, b] {
        let ls = json_of(&ok(device, &["device", "ls", "--format", "json"]));
        assert_eq!(ls["fork"]["epoch"], 1, "{ls}");
        let mut left: Vec<String> = ls["fork"]["leftOut"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect();
        left.sort();
        let mut want = vec![c_id.clone(), d_id.clone()];
        want.sort();
        assert_eq!(left, want);
        let out = gel(
            device,
            &["chat", "send", "--chat", &chat, "not while forked"],
        );
        assert_eq!(out.status.code(), Some(1));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("device resolve"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let resolved = json_of(&ok(a, &["device", "resolve", "--format", "json"]));
    assert_eq!(resolved["epoch"], 2);
    sync(a, &peer);
    sync(b, &peer);
    assert_eq!(epoch(b), 2);
    ok(
        b,
        &[
            "chat",
            "send",
            "--chat",
            &chat,
            "SECRET-AFTER-BOTH-REMOVALS",
        ],
    );
    sync(b, &peer);
    sync(a, &peer);
    assert!(shown(a, &chat).contains("SECRET-AFTER-BOTH-REMOVALS"));
    for removed in [c, d] {
        sync(removed, &peer);
        let seen = shown(removed, &chat);
        assert!(seen.contains("before"), "{seen}");
        assert!(
            !seen.contains("SECRET-AFTER-BOTH-REMOVALS"),
            "a removed device read a later message"
        );
    }
}

/// A first device in `a` with one chat, a question and its finished reply,
/// pushed: `(chat, question key)`.
fn answered_chat(a: &Path, peer: &Peer) -> (String, String) {
    ok(a, &["device", "init"]);
    let chat = ok(a, &["chat", "new"]).trim().to_owned();
    let msg = ok(a, &["chat", "send", "--chat", &chat, "question"])
        .trim()
        .to_owned();
    let input = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/streams/plain_text_small_deltas/input.jsonl");
    ok(
        a,
        &[
            "chat",
            "reply",
            "--to",
            &msg,
            "--events",
            input.to_str().unwrap(),
        ],
    );
    sync(a, peer);
    (chat, msg)
}

/// Attack 4: the attacker strips the sealed content off a finished reply
/// (turning it back into a content-less `pending` one). A device that
/// syncs keeps its sealed version and says so; a content-less finished
/// message is shown as tampered, not as empty.
fn a_reply_stripped_of_its_content_is_refused_and_shown_tampered(peer: Peer) {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path();
    let (chat, msg) = answered_chat(a, &peer);
    let reply = format!("{msg}.r0");
    let token = attacker(&peer);
    let record = xrpc(
        &peer,
        "com.atproto.repo.getRecord",
        None,
        None,
        &format!(
            "?repo={}&collection=chat.gel.assistant.message&rkey={reply}",
            peer.did_param()
        ),
    );
    let mut value = record["value"].clone();
    value.as_object_mut().unwrap().remove("content");
    value["status"] = "pending".into();
    for k in ["model", "usage", "stopReason"] {
        value.as_object_mut().unwrap().remove(k);
    }
    xrpc(
        &peer,
        "com.atproto.repo.putRecord",
        Some(&token),
        Some(
            &json!({"repo": peer.did, "collection": "chat.gel.assistant.message", "rkey": reply, "record": value}),
        ),
        "",
    );
    let (report, message) = sync_refused(a, &peer);
    assert_eq!(
        report["merged"]["refused"],
        json!([format!("chat.gel.assistant.message/{reply}")]),
        "{report}"
    );
    assert!(message.contains("forge a message"), "{message}");
    let thread = json_of(&shown(a, &chat));
    let kept = thread["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["key"] == reply.as_str())
        .unwrap();
    assert_eq!(kept["status"], "complete", "{kept}");
    assert_eq!(kept["state"], "open");

    // Stripped in place, without the status change: shown as tampered.
    {
        let mut repo = Repository::open(a).unwrap();
        let mut v = repo
            .get("chat.gel.assistant.message", &reply)
            .unwrap()
            .unwrap()
            .value;
        v.as_object_mut().unwrap().remove("content");
        repo.apply(&[Write::update("chat.gel.assistant.message", &reply, v)])
            .unwrap();
    }
    let thread = json_of(&shown(a, &chat));
    let stripped = thread["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["key"] == reply.as_str())
        .unwrap();
    assert_eq!(stripped["state"], "missing", "{stripped}");
    let human = ok(a, &["chat", "show", "--chat", &chat]);
    assert!(human.contains("tampered"), "{human}");
}

/// Attack 3: a removed device signs a change from before its removal (it
/// had not synced since): it removes the phone, so that only it and the
/// laptop would hold the next key. Its signature is valid, but its side of
/// the fork is disputed (the laptop removed it, it did not remove the
/// laptop): every device keeps the laptop's removal, the phone stays
/// admitted, nothing forks, and the tablet reads nothing written after.
fn a_removed_device_forging_a_change_from_before_its_removal_changes_nothing(peer: Peer) {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let (a, b, tablet) = (dirs[0].path(), dirs[1].path(), dirs[2].path());
    ok(a, &["device", "init", "--name", "laptop"]);
    let chat = ok(a, &["chat", "new"]).trim().to_owned();
    ok(a, &["chat", "send", "--chat", &chat, "before"]);
    sync(a, &peer);
    let b_id = pair(a, b, "phone", &peer);
    let tablet_id = pair(a, tablet, "tablet", &peer);
    sync(b, &peer);
    ok(a, &["device", "remove", &tablet_id]);
    sync(a, &peer);
    // The tablet, not yet aware, removes the phone and pushes it.
    ok(tablet, &["device", "remove", &b_id]);
    sync(tablet, &peer);
    for device in [a, b] {
        sync(device, &peer);
        let ls = json_of(&ok(device, &["device", "ls", "--format", "json"]));
        assert!(ls["fork"].is_null(), "{ls}");
        assert_eq!(ls["epoch"], 1, "{ls}");
        let status = |id: &str| status_in(&ls, id);
        assert_eq!(status(&b_id), "admitted", "{ls}");
        assert_eq!(status(&tablet_id), "removed", "{ls}");
    }
    ok(
        b,
        &["chat", "send", "--chat", &chat, "SECRET-AFTER-THE-FORGERY"],
    );
    sync(b, &peer);
    sync(a, &peer);
    assert!(shown(a, &chat).contains("SECRET-AFTER-THE-FORGERY"));
    sync(tablet, &peer);
    let seen = shown(tablet, &chat);
    assert!(seen.contains("before"), "{seen}");
    assert!(!seen.contains("SECRET-AFTER-THE-FORGERY"), "{seen}");
    // It holds only the key it made itself, which nobody else takes, and
    // may seal nothing.
    let human = ok(tablet, &["device", "ls"]);
    assert!(human.contains("this device was removed"), "{human}");
    let out = gel(
        tablet,
        &["chat", "send", "--chat", &chat, "from the tablet"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("not admitted"), "{stderr}");
}

/// Attack 5: records that verify nothing change nothing a user sees: a
/// key wrap claiming epoch 99, and a second device record with a pending
/// device's public key (and a signing key of the attacker's) placed ahead
/// of the real one, hoping the approval goes to it.
fn planted_records_change_nothing_a_user_sees(peer: Peer) {
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let (a, b) = (dirs[0].path(), dirs[1].path());
    ok(a, &["device", "init", "--name", "laptop"]);
    let chat = ok(a, &["chat", "new"]).trim().to_owned();
    sync(a, &peer);
    let token = attacker(&peer);

    // A wrap of "epoch 99".
    let mut wrap = key_wraps(&peer)[0]["value"].clone();
    wrap["epoch"] = 99.into();
    wrap["keyId"] = "account:99:ffffffffffffffff".into();
    xrpc(
        &peer,
        "com.atproto.repo.createRecord",
        Some(&token),
        Some(&json!({"repo": peer.did, "collection": KEY_WRAP, "record": wrap})),
        "",
    );
    sync(a, &peer);
    let ls = json_of(&ok(a, &["device", "ls", "--format", "json"]));
    assert_eq!(
        (&ls["epoch"], &ls["newestEpoch"]),
        (&json!(0), &json!(0)),
        "{ls}"
    );
    let human = ok(a, &["device", "ls"]);
    assert!(!human.contains("removed"), "{human}");
    ok(a, &["chat", "send", "--chat", &chat, "still sealing"]);

    // A pending phone publishes its record; the attacker plants another
    // with the same public key, its own signing key and a made-up proof,
    // under a record key that sorts first.
    let paired = json_of(&ok(
        b,
        &[
            "device",
            "pair",
            "--publish",
            "--name",
            "phone",
            "--format",
            "json",
        ],
    ));
    let code = paired["code"].as_str().unwrap().to_owned();
    sync(b, &peer);
    let real = records(&peer, DEVICE)
        .into_iter()
        .find(|d| {
            d["uri"]
                .as_str()
                .unwrap()
                .ends_with(paired["device"].as_str().unwrap())
        })
        .unwrap();
    let mut planted = real["value"].clone();
    planted["signingKey"] = "did:key:zDnaerDaTF5BXEavCrfRZEk316dpbLsfPDZ3WJ5hRTPFU2169".into();
    planted["signingKeyProof"] = json!({"$bytes": "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"});
    xrpc(
        &peer,
        "com.atproto.repo.createRecord",
        Some(&token),
        Some(
            &json!({"repo": peer.did, "collection": DEVICE, "rkey": "2222222222222", "record": planted}),
        ),
        "",
    );
    sync(a, &peer);
    ok(a, &["device", "approve", &code]);
    sync(a, &peer);
    sync(b, &peer);
    ok(b, &["device", "join"]);
    let ls = json_of(&ok(a, &["device", "ls", "--format", "json"]));
    let status = |id: &str| status_in(&ls, id);
    assert_eq!(
        status(paired["device"].as_str().unwrap()),
        "admitted",
        "{ls}"
    );
    assert_eq!(status("2222222222222"), "not-admitted", "{ls}");
    assert!(shown(b, &chat).contains("still sealing"));

    // The real record rewritten with the attacker's signing key: approval
    // is refused, by name, rather than admitting a key the phone never had.
    let dirs2: Vec<tempfile::TempDir> = (0..1).map(|_| tempfile::tempdir().unwrap()).collect();
    let c = dirs2[0].path();
    let paired = json_of(&ok(
        c,
        &[
            "device",
            "pair",
            "--publish",
            "--name",
            "tablet",
            "--format",
            "json",
        ],
    ));
    sync(c, &peer);
    let rkey = paired["device"].as_str().unwrap();
    let mut swapped = records(&peer, DEVICE)
        .into_iter()
        .find(|d| d["uri"].as_str().unwrap().ends_with(rkey))
        .unwrap()["value"]
        .clone();
    swapped["signingKey"] = planted["signingKey"].clone();
    xrpc(
        &peer,
        "com.atproto.repo.putRecord",
        Some(&token),
        Some(&json!({"repo": peer.did, "collection": DEVICE, "rkey": rkey, "record": swapped})),
        "",
    );
    sync(a, &peer);
    let out = gel(a, &["device", "approve", paired["code"].as_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("signingKeyProof"), "{stderr}");
}

/// Attack 4, the other ways: the attacker injects replies of its own (a
/// pending one, which an assistant would run, and a finished one with a
/// made-up model and no content) and edits a real reply's `model`. Each
/// device that syncs shows every one of them as tampered, by name, and
/// never as a normal message.
fn injected_and_edited_replies_are_shown_tampered(peer: Peer) {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path();
    let (chat, msg) = answered_chat(a, &peer);
    let token = attacker(&peer);
    let message = "chat.gel.assistant.message";
    let reply = format!("{msg}.r0");
    let real = xrpc(
        &peer,
        "com.atproto.repo.getRecord",
        None,
        None,
        &format!(
            "?repo={}&collection={message}&rkey={reply}",
            peer.did_param()
        ),
    )["value"]
        .clone();
    let put = |rkey: &str, record: &Value| {
        xrpc(
            &peer,
            "com.atproto.repo.putRecord",
            Some(&token),
            Some(&json!({"repo": peer.did, "collection": message, "rkey": rkey, "record": record})),
            "",
        );
    };
    let mut pending = real.clone();
    for k in ["content", "model", "usage", "stopReason"] {
        pending.as_object_mut().unwrap().remove(k);
    }
    pending["status"] = "pending".into();
    put(&format!("{msg}.r1"), &pending);
    let mut evil = real.clone();
    evil.as_object_mut().unwrap().remove("content");
    evil["model"] = json!({"provider": "evil", "id": "evil"});
    put(&format!("{msg}.r2"), &evil);
    let mut edited = real.clone();
    edited["model"] = json!({"provider": "evil", "id": "evil"});
    put(&reply, &edited);

    sync(a, &peer);
    let thread = json_of(&shown(a, &chat));
    let state = |key: &str| {
        thread["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["key"] == key)
            .map(|m| m["state"].as_str().unwrap().to_owned())
            .unwrap_or_else(|| panic!("{key} not shown: {thread}"))
    };
    assert_eq!(state(&format!("{msg}.r1")), "unauthenticated", "{thread}");
    assert_eq!(state(&format!("{msg}.r2")), "missing", "{thread}");
    assert_eq!(state(&reply), "unreadable", "{thread}");
    let human = ok(a, &["chat", "show", "--chat", &chat]);
    assert_eq!(human.matches("tampered").count(), 2, "{human}");
    assert!(human.contains("does not open"), "{human}");
}

on_both_peers!(
    injected_and_edited_replies_are_shown_tampered,
    a_removed_device_forging_a_change_from_before_its_removal_changes_nothing,
    planted_records_change_nothing_a_user_sees,
    a_reply_stripped_of_its_content_is_refused_and_shown_tampered,
    deleting_the_new_epochs_wraps_does_not_undo_a_removal,
    a_device_never_seals_below_the_epoch_it_held,
    two_removals_at_once_both_hold,
);
