//! Two devices of one account through the real reference PDS (tests/pds,
//! started by tests/support/pds.rs): the replica role (docs/sync.md) — each
//! store mirrors the account's repository, pushes its own writes and
//! merges the other device's — pairing through the PDS, an approval
//! answered on the second device, `sync status`, and a pulled record that
//! fails our lexicon validation.
//!
//! Every scenario runs against both peers of tests/support/peer.rs (the
//! reference PDS and `gelstore serve`), as `SCENARIO::pds` and
//! `SCENARIO::serve`. With `gelstore serve`, devices A and B both log into
//! the server's one account.

use crate::support::peer;

use std::path::{Path, PathBuf};

use gelstore::repo::blobs::BlobStore;
use gelstore::repo::repository::Repository;
use serde_json::{Value, json};

use peer::{Kind, Peer, gel, message, mirror, on_both_peers, show};

/// Text that must never reach the PDS in the clear.
const MARKER: &str = "PLAINTEXT-MARKER-b3Vk";

fn streams() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/streams")
}

/// [`peer::ok`] without the trailing newline.
fn ok(data: &Path, args: &[&str]) -> String {
    peer::ok(data, args).trim_end().to_owned()
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn login(pds: &Peer) -> Vec<&str> {
    vec![
        "--pds",
        &pds.service,
        "--identifier",
        &pds.handle,
        "--password",
        &pds.password,
        "--plc",
        pds.plc_arg(),
        "--format",
        "json",
    ]
}

fn sync(data: &Path, pds: &Peer) -> Value {
    let mut args = vec!["sync"];
    args.extend(login(pds));
    json_of(&ok(data, &args))
}

fn status(data: &Path, pds: &Peer) -> Value {
    let mut args = vec!["sync", "status"];
    args.extend(login(pds));
    json_of(&ok(data, &args))
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The test's own view of the PDS (not the client under test).
fn get(url: &str) -> Vec<u8> {
    rt().block_on(async {
        let resp = reqwest::get(url).await.unwrap();
        assert!(resp.status().is_success(), "{url}: {}", resp.status());
        resp.bytes().await.unwrap().to_vec()
    })
}

fn post(url: &str, token: Option<&str>, body: &Value) -> (u16, Value) {
    rt().block_on(async {
        let mut req = reqwest::Client::new().post(url).json(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    })
}

fn list_records(pds: &Peer, collection: &str) -> Vec<Value> {
    let page: Value = serde_json::from_slice(&get(&format!(
        "{}/xrpc/com.atproto.repo.listRecords?repo={}&collection={collection}&limit=100",
        pds.service,
        pds.did_param()
    )))
    .unwrap();
    page["records"].as_array().unwrap().clone()
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

fn approvals(data: &Path) -> Vec<Value> {
    ok(data, &["chat", "approvals", "--format", "json"])
        .lines()
        .map(json_of)
        .collect()
}

fn counts(v: &Value) -> (u64, u64, u64) {
    (
        v["created"].as_u64().unwrap(),
        v["updated"].as_u64().unwrap(),
        v["deleted"].as_u64().unwrap(),
    )
}

on_both_peers!(
    a_long_tool_output_travels_to_the_other_device_as_a_sealed_blob,
    second_device_pairs_through_the_pds_and_answers_an_approval,
    a_pulled_record_that_fails_validation_is_refused_and_nothing_changes,
    a_record_changed_on_both_devices_keeps_the_pds_version_and_saves_the_local_one,
    a_push_on_a_moved_head_is_refused_whole_then_pulled_and_retried,
    a_wrong_mirror_fails_the_data_check_loudly_and_is_re_pulled,
    a_sync_json_of_an_older_version_is_taken_into_the_store,
);

fn second_device_pairs_through_the_pds_and_answers_an_approval(pds: Peer) {
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (dirs.0.path(), dirs.1.path());

    // Device A: a chat, a message, a streamed reply that waits on approvals.
    ok(a, &["device", "init", "--name", "A"]);
    let title = format!("Cleanup {MARKER}");
    let chat = ok(a, &["chat", "new", "--title", &title]);
    let text = format!("Delete my drafts {MARKER}");
    let msg = ok(a, &["chat", "send", "--chat", &chat, &text]);
    let input = streams().join("approval_waiting/input.jsonl");
    ok(
        a,
        &[
            "chat",
            "reply",
            "--to",
            &msg,
            "--events",
            input.to_str().unwrap(),
            "--approve-tools",
            "delete_files,list_files",
        ],
    );
    let reply = format!("{msg}.r0");
    assert_eq!(approvals(a).len(), 1);

    // A syncs: everything goes up; the PDS's data is the root computed here.
    let first = sync(a, &pds);
    assert!(first["push"]["created"].as_u64().unwrap() >= 3, "{first}");
    assert_eq!(first["pull"]["full_pulls"], 1, "{first}");
    assert_eq!(first["pull"]["data_matches"], true);
    let messages = list_records(&pds, "chat.gel.assistant.message");
    let uris: Vec<&str> = messages
        .iter()
        .map(|m| m["uri"].as_str().unwrap())
        .collect();
    for key in [&msg, &reply] {
        let uri = format!("at://{}/chat.gel.assistant.message/{key}", pds.did);
        assert!(uris.contains(&uri.as_str()), "{uri} not in {uris:?}");
    }
    // Ciphertext only: the message's listed value has sealed content, and
    // no plaintext anywhere in the repository.
    let listed = messages
        .iter()
        .find(|m| m["uri"].as_str().unwrap().ends_with(&format!("/{msg}")))
        .unwrap();
    assert!(listed["value"]["content"].is_object(), "{listed}");
    assert!(!listed.to_string().contains(MARKER));
    assert!(
        !contains(&repo_car(&pds), MARKER),
        "plaintext reached the PDS"
    );

    // In sync: nothing downloaded to say so.
    let st = status(a, &pds);
    assert_eq!(st["in_sync"], true, "{st}");
    assert_eq!(st["car_bytes"], 0);

    // Device B pairs through the PDS: it publishes its device record and
    // syncs (pulling A's records into its own store, pushing the record).
    let paired = json_of(&ok(b, &["device", "pair", "--publish", "--format", "json"]));
    let code = paired["code"].as_str().unwrap().to_owned();
    let b_id = paired["device"].as_str().unwrap().to_owned();
    // Never synced: everything here is to push, everything there to pull.
    let st = status(b, &pds);
    assert_eq!(st["in_sync"], false, "{st}");
    assert_eq!(counts(&st["to_push"]), (1, 0, 0), "{st}");
    let on_pds = first["push"]["created"].as_u64().unwrap();
    assert_eq!(counts(&st["to_pull"]), (on_pds, 0, 0), "{st}");
    let b_first = sync(b, &pds);
    assert_eq!(b_first["push"]["created"], 1, "{b_first}");
    assert_eq!(
        b_first["merged"]["created"], first["push"]["created"],
        "{b_first}"
    );
    // B is not admitted yet: it holds A's records but cannot open them.
    let out = gel(b, &["chat", "show", "--chat", &chat]);
    assert_eq!(out.status.code(), Some(1));

    // A pulls B's record and approves B's code (finding that record), and
    // pushes the wraps.
    let a_pull = sync(a, &pds);
    assert_eq!(a_pull["merged"]["created"], 1, "{a_pull}");
    // After the first time, only what changed since the mirrored rev.
    assert_eq!(a_pull["pull"]["full_pulls"], 0, "{a_pull}");
    assert_eq!(a_pull["pull"]["since_pulls"], 1, "{a_pull}");
    let approved = json_of(&ok(a, &["device", "approve", &code, "--format", "json"]));
    assert_eq!(approved["device"], b_id.as_str());
    assert_eq!(approved["recordCreated"], false);
    let a_wraps = sync(a, &pds);
    assert!(
        a_wraps["push"]["created"].as_u64().unwrap() >= 1,
        "{a_wraps}"
    );

    // B pulls the wraps and joins from its own synced records.
    let b_pull = sync(b, &pds);
    assert_eq!(
        (
            &b_pull["pull"]["full_pulls"],
            &b_pull["pull"]["since_pulls"]
        ),
        (&json!(0), &json!(1)),
        "{b_pull}"
    );
    assert_eq!(
        b_pull["merged"],
        json!({"created": a_wraps["push"]["created"], "updated": 0, "deleted": 0, "conflicts": 0, "blobs": 0}),
        "{b_pull}"
    );
    // The records are sealed for the account's DID (A re-sealed them
    // before its first push): another DID opens nothing.
    let a_did = json_of(&ok(a, &["device", "ls", "--format", "json"]))["did"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = gel(
        b,
        &[
            "device",
            "join",
            "--account-did",
            "did:key:zQ3shokFTS3brHcDQrn82RUDfCZESWL1ZdCEJwekUDPQiYBme",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("does not open for did:key:") && err.contains("--account-did"),
        "{err}"
    );
    let joined = json_of(&ok(b, &["device", "join", "--format", "json"]));
    assert_eq!(joined["did"], a_did.as_str());
    assert_eq!(a_did, pds.did);
    assert_eq!(joined["newlyPaired"], true, "{joined}");
    assert_eq!(joined["device"], b_id.as_str());
    assert_eq!(joined["refresh"], "synced");

    // B decrypts the same thread A sees.
    let (ta, tb) = (show(a, &chat), show(b, &chat));
    assert_eq!(ta, tb);
    assert_eq!(
        message(&tb, &msg)["content"]["parts"][0]["text"],
        text.as_str()
    );
    assert_eq!(message(&tb, &reply)["status"], "waiting");

    // B answers the approval and syncs.
    let waiting = approvals(b);
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert_eq!(waiting[0]["reply"], reply.as_str());
    let answer = ok(
        b,
        &["chat", "approve", "--reply", &reply, "--allow", "toolu_11"],
    );
    let b_push = sync(b, &pds);
    assert_eq!(b_push["push"]["created"], 1, "{b_push}");
    assert_eq!(b_push["pull"]["data_matches"], true);

    // A's status counts the remote-only change as to pull, nothing to push.
    let st = status(a, &pds);
    assert_eq!(st["in_sync"], false, "{st}");
    assert_eq!(counts(&st["to_pull"]), (1, 0, 0), "{st}");
    assert_eq!(counts(&st["to_push"]), (0, 0, 0), "{st}");

    // A syncs and sees the answer; nothing waits any more on either side.
    let a_last = sync(a, &pds);
    assert_eq!(a_last["merged"]["created"], 1, "{a_last}");
    let ta = show(a, &chat);
    let got = message(&ta, &answer);
    assert_eq!(got["parent"], reply.as_str());
    assert_eq!(got["content"]["parts"][0]["callId"], "toolu_11");
    assert_eq!(got["content"]["parts"][0]["decision"], "approved");
    assert_eq!(got["content"]["parts"][1]["decision"], "denied");
    assert!(approvals(a).is_empty());
    assert_eq!(ta, show(b, &chat));
    assert_eq!(status(a, &pds)["in_sync"], true);

    // A local write: counted as to push until synced.
    ok(a, &["chat", "send", "--chat", &chat, "Thanks"]);
    let st = status(a, &pds);
    assert_eq!(st["in_sync"], false);
    assert_eq!(counts(&st["to_push"]), (1, 0, 0), "{st}");
    assert_eq!(counts(&st["to_pull"]), (0, 0, 0), "{st}");
    sync(a, &pds);
    assert_eq!(status(a, &pds)["in_sync"], true);
    assert!(
        !contains(&repo_car(&pds), MARKER),
        "plaintext reached the PDS"
    );
}

/// A reply whose tool output went to a sealed blob: the push uploads the
/// blob before the record (the PDS keeps it, ciphertext only), the other
/// device's pull downloads it, and that device reads the whole output.
fn a_long_tool_output_travels_to_the_other_device_as_a_sealed_blob(pds: Peer) {
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (dirs.0.path(), dirs.1.path());
    ok(a, &["device", "init", "--name", "A"]);
    let chat = ok(a, &["chat", "new", "--title", "logs"]);
    let msg = ok(a, &["chat", "send", "--chat", &chat, "Read the api log"]);
    let input = streams().join("tool_output_to_blob/input.jsonl");
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
    let reply = format!("{msg}.r0");
    let output = ["chat", "output", "--reply", &reply, "--call", "toolu_71"];
    let whole = ok(a, &output);
    assert!(whole.len() > 100_000);

    let first = sync(a, &pds);
    assert_eq!(first["push"]["blobs"], 1, "{first}");
    // The record on the PDS names the blob in the clear (so the PDS keeps
    // it); the PDS serves exactly the sealed bytes, which show nothing.
    let listed = list_records(&pds, "chat.gel.assistant.message");
    let record = listed
        .iter()
        .find(|m| m["uri"].as_str().unwrap().ends_with(&format!("/{reply}")))
        .unwrap();
    let cid = record["value"]["content"]["blobs"][0]["ref"]["$link"]
        .as_str()
        .unwrap_or_else(|| panic!("no blob in {record}"))
        .to_owned();
    let served = get(&format!(
        "{}/xrpc/com.atproto.sync.getBlob?did={}&cid={cid}",
        pds.service,
        pds.did_param()
    ));
    assert_eq!(served, std::fs::read(a.join("blobs").join(&cid)).unwrap());
    assert!(!contains(&served, "GET /items/3999 "));
    assert!(whole.contains("GET /items/3999 "));
    // Nothing new: the next sync uploads nothing.
    assert_eq!(sync(a, &pds)["push"]["blobs"], 0);

    // B pairs through the PDS; its first pull fetches the blob with the
    // reply, and once admitted it reads the whole output.
    let paired = json_of(&ok(b, &["device", "pair", "--publish", "--format", "json"]));
    let code = paired["code"].as_str().unwrap().to_owned();
    let b_first = sync(b, &pds);
    assert_eq!(b_first["merged"]["blobs"], 1, "{b_first}");
    assert!(b.join("blobs").join(&cid).exists());
    sync(a, &pds);
    ok(a, &["device", "approve", &code]);
    sync(a, &pds);
    sync(b, &pds);
    ok(b, &["device", "join"]);
    assert_eq!(ok(b, &output), whole);
}

fn a_pulled_record_that_fails_validation_is_refused_and_nothing_changes(pds: Peer) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["device", "init"]);
    sync(d, &pds);

    // Another client writes a chat record our lexicon refuses. The
    // reference PDS does not know the lexicon, so it stores it; `gelstore
    // serve` validates `chat.gel.assistant.*` writes (issue 8), so there it
    // is refused at the door and never reaches any device.
    let (status_code, session) = post(
        &format!("{}/xrpc/com.atproto.server.createSession", pds.service),
        None,
        &json!({"identifier": pds.handle, "password": pds.password}),
    );
    assert_eq!(status_code, 200, "{session}");
    let token = session["accessJwt"].as_str().unwrap();
    let (status_code, created) = post(
        &format!("{}/xrpc/com.atproto.repo.putRecord", pds.service),
        Some(token),
        &json!({
            "repo": pds.did,
            "collection": "chat.gel.assistant.chat",
            "rkey": "3lbqzdw5pzk22",
            "record": {"$type": "chat.gel.assistant.chat", "createdAt": "not a date"},
        }),
    );
    if pds.kind == Kind::Serve {
        assert_eq!(status_code, 400, "{created}");
        assert_eq!(created["error"], "InvalidRecord", "{created}");
        assert!(list_records(&pds, CHAT).is_empty());
        let again = sync(d, &pds);
        assert_eq!(counts(&again["merged"]), (0, 0, 0), "{again}");
        assert_eq!(again["pull"]["data_matches"], true, "{again}");
        return;
    }
    assert_eq!(status_code, 200, "{created}");

    let head = Repository::open(d).unwrap().head();
    let marker = mirror(d);
    let mut args = vec!["sync"];
    args.extend(login(&pds));
    let out = gel(d, &args);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("record chat.gel.assistant.chat/3lbqzdw5pzk22 from the PDS fails validation"),
        "{err}"
    );
    assert_eq!(Repository::open(d).unwrap().head(), head);
    assert_eq!(mirror(d), marker);

    // Once the record is gone from the PDS, sync goes through again.
    let (status_code, deleted) = post(
        &format!("{}/xrpc/com.atproto.repo.deleteRecord", pds.service),
        Some(token),
        &json!({"repo": pds.did, "collection": "chat.gel.assistant.chat", "rkey": "3lbqzdw5pzk22"}),
    );
    assert_eq!(status_code, 200, "{deleted}");
    let again = sync(d, &pds);
    assert_eq!(again["pull"]["data_matches"], true, "{again}");
}

const CHAT: &str = "chat.gel.assistant.chat";

fn chat_record(created: &str) -> Value {
    json!({"$type": CHAT, "createdAt": created})
}

fn opts(pds: &Peer) -> gelstore::sync::SyncOptions {
    pds.options()
}

fn apply(data: &Path, writes: &[gelstore::repo::repository::Write]) {
    Repository::open(data).unwrap().apply(writes).unwrap();
}

fn a_record_changed_on_both_devices_keeps_the_pds_version_and_saves_the_local_one(pds: Peer) {
    use gelstore::repo::repository::Write;
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (dirs.0.path(), dirs.1.path());
    ok(a, &["repo", "init"]);
    ok(b, &["repo", "init"]);
    let (k1, k2) = ("3lbqzdw5pzk22", "3lbqzdw5pzk33");
    apply(
        a,
        &[
            Write::create(CHAT, k1, chat_record("2026-01-01T00:00:00.000Z")),
            Write::create(CHAT, k2, chat_record("2026-01-01T00:00:00.000Z")),
        ],
    );
    sync(a, &pds);
    let b_first = sync(b, &pds);
    assert_eq!(b_first["merged"]["created"], 2, "{b_first}");

    // Both change k1 before either syncs; A is first.
    apply(
        a,
        &[Write::update(
            CHAT,
            k1,
            chat_record("2026-02-02T00:00:00.000Z"),
        )],
    );
    apply(
        b,
        &[Write::update(
            CHAT,
            k1,
            chat_record("2026-03-03T00:00:00.000Z"),
        )],
    );
    let a_push = sync(a, &pds);
    assert_eq!(a_push["push"]["updated"], 1, "{a_push}");

    // B: the PDS's version wins; B's is kept in sync-conflicts.jsonl.
    let b_sync = sync(b, &pds);
    assert_eq!(b_sync["merged"]["updated"], 1, "{b_sync}");
    assert_eq!(b_sync["merged"]["conflicts"], 1, "{b_sync}");
    assert_eq!(b_sync["push"]["updated"], 0, "{b_sync}");
    let held = Repository::open(b).unwrap().get(CHAT, k1).unwrap().unwrap();
    assert_eq!(held.value["createdAt"], "2026-02-02T00:00:00.000Z");
    let kept = std::fs::read_to_string(b.join("sync-conflicts.jsonl")).unwrap();
    let kept: Vec<Value> = kept.lines().map(json_of).collect();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0]["key"], format!("{CHAT}/{k1}"));
    assert_eq!(kept[0]["value"]["createdAt"], "2026-03-03T00:00:00.000Z");

    // A change only B made wins (its swap is the PDS's CID) and reaches A.
    apply(
        b,
        &[Write::update(
            CHAT,
            k2,
            chat_record("2026-04-04T00:00:00.000Z"),
        )],
    );
    let b_push = sync(b, &pds);
    assert_eq!(b_push["push"]["updated"], 1, "{b_push}");
    let a_pull = sync(a, &pds);
    assert_eq!(a_pull["merged"]["updated"], 1, "{a_pull}");
    assert_eq!(a_pull["merged"]["conflicts"], 0, "{a_pull}");
    let held = Repository::open(a).unwrap().get(CHAT, k2).unwrap().unwrap();
    assert_eq!(held.value["createdAt"], "2026-04-04T00:00:00.000Z");
    // A remote delete reaches the other store too.
    apply(a, &[Write::delete(CHAT, k2)]);
    sync(a, &pds);
    let b_del = sync(b, &pds);
    assert_eq!(b_del["merged"]["deleted"], 1, "{b_del}");
    assert!(
        Repository::open(b)
            .unwrap()
            .get(CHAT, k2)
            .unwrap()
            .is_none()
    );
    assert_eq!(status(a, &pds)["in_sync"], true);
    assert_eq!(status(b, &pds)["in_sync"], true);
}

fn a_push_on_a_moved_head_is_refused_whole_then_pulled_and_retried(pds: Peer) {
    use gelstore::repo::repository::Write;
    use gelstore::sync::{self, PushReport, Session, SyncError, SyncState};
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (dirs.0.path(), dirs.1.path());
    ok(a, &["repo", "init"]);
    ok(b, &["repo", "init"]);
    sync::sync(a, &opts(&pds)).unwrap();
    sync::sync(b, &opts(&pds)).unwrap();

    // B pushes; A's mirror still names the older head.
    apply(
        b,
        &[Write::create(
            CHAT,
            "3lbqzdw5pzk22",
            chat_record("2026-01-01T00:00:00.000Z"),
        )],
    );
    sync::sync(b, &opts(&pds)).unwrap();
    apply(
        a,
        &[Write::create(
            CHAT,
            "3lbqzdw5pzk33",
            chat_record("2026-01-01T00:00:00.000Z"),
        )],
    );

    // A push pinned to the stale head: refused whole, nothing lands.
    let session = Session::login(&pds.service, &pds.handle, &pds.password).unwrap();
    let key = sync::signing_key(&session, pds.plc_arg()).unwrap();
    let repo = Repository::open(a).unwrap();
    let mut state = SyncState::load(a, &repo).unwrap();
    let mut report = PushReport::default();
    let e = sync::push(
        &session,
        &key,
        &repo,
        &BlobStore::new(a),
        &mut state,
        &mut report,
    )
    .unwrap_err();
    assert!(matches!(e, SyncError::RemoteMoved), "{e}");
    assert_eq!(report.created, 0);
    assert_eq!(list_records(&pds, CHAT).len(), 1);
    drop(repo);

    // A full sync pulls B's record first, then pushes A's on the new head.
    let done = sync::sync(a, &opts(&pds)).unwrap();
    assert_eq!(done.merged.created, 1);
    assert_eq!(done.push.created, 1);
    assert!(done.pull.data_matches);
    assert_eq!(list_records(&pds, CHAT).len(), 2);
}

fn a_wrong_mirror_fails_the_data_check_loudly_and_is_re_pulled(pds: Peer) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["device", "init"]);
    sync(d, &pds);

    // The mirror claims a record the PDS does not hold.
    {
        let repo = Repository::open(d).unwrap();
        let mut state = gelstore::sync::SyncState::load(d, &repo).unwrap();
        let some_cid = *state.pushed.values().next().unwrap();
        let bogus = "app.example.thing/3lbqzdw5pzk22";
        state.others.insert(bogus.into(), some_cid);
        state.save_keys(&repo, [bogus]).unwrap();
    }
    assert_eq!(mirror(d).others.len(), 1);

    // The push lands, but its commit's data is not the root computed over
    // the mirror: a named error, exit 1.
    ok(d, &["chat", "new", "--title", "x"]);
    let mut args = vec!["sync"];
    args.extend(login(&pds));
    let out = gel(d, &args);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("replica out of step"), "{err}");

    // The mirror was re-pulled: the next sync is clean and pushes nothing.
    assert!(mirror(d).others.is_empty(), "{:?}", mirror(d).others);
    let again = sync(d, &pds);
    assert_eq!(again["push"]["created"], 0, "{again}");
    assert_eq!(again["pull"]["data_matches"], true, "{again}");
    assert_eq!(status(d, &pds)["in_sync"], true);

    // The human forms say the same.
    let mut args = vec!["sync", "status"];
    args.extend(&login(&pds)[..8]);
    let human = ok(d, &args);
    assert!(human.starts_with("in sync with "), "{human}");
    // A new chat: its record and the wrap of its chat key.
    ok(d, &["chat", "new"]);
    let human = ok(d, &args);
    assert!(
        human.contains("to push: 2 created, 0 updated, 0 deleted"),
        "{human}"
    );
    let mut args = vec!["sync"];
    args.extend(&login(&pds)[..8]);
    let human = ok(d, &args);
    assert!(
        human.contains("pushed to ") && human.contains(": 2 created"),
        "{human}"
    );
    assert!(human.contains("pulled: 0 created"), "{human}");
    assert!(human.contains("in sync: data "), "{human}");
}

on_both_peers!(a_push_without_a_mirrored_head_over_records_already_there_is_redone_one_by_one);

/// A push pinned to no head (no mirror: `sync::push` called before any
/// pull) whose creates are already on the peer. The batch is refused — the
/// reference PDS answers HTTP 500 for a create on a taken key, `gelstore
/// serve` the named `InvalidSwap` (issue 8: a taken key is a named error) —
/// and sync redoes it record by record as create-if-absent (`putRecord`
/// with `swapRecord: null`), which both peers answer for an identical
/// record with its CID and no new commit. A different record under a taken
/// key is refused on both (`InvalidSwap`).
fn a_push_without_a_mirrored_head_over_records_already_there_is_redone_one_by_one(pds: Peer) {
    use gelstore::repo::repository::Write;
    use gelstore::sync::{self, PushReport, Session, SyncError, SyncState};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["repo", "init"]);
    let (k1, k2) = ("3lbqzdw5pzk22", "3lbqzdw5pzk33");
    apply(
        d,
        &[
            Write::create(CHAT, k1, chat_record("2026-01-01T00:00:00.000Z")),
            Write::create(CHAT, k2, chat_record("2026-01-01T00:00:00.000Z")),
        ],
    );
    sync::sync(d, &opts(&pds)).unwrap();
    let head = get(&format!(
        "{}/xrpc/com.atproto.sync.getLatestCommit?did={}",
        pds.service,
        pds.did_param()
    ));

    // The marker and mirror forgotten: every record goes out as a create.
    let repo = Repository::open(d).unwrap();
    let mut state = SyncState::load(d, &repo).unwrap();
    state.pushed.clear();
    state.remote = None;
    let session = Session::login(&pds.service, &pds.handle, &pds.password).unwrap();
    let key = sync::signing_key(&session, pds.plc_arg()).unwrap();
    let mut report = PushReport::default();
    sync::push(
        &session,
        &key,
        &repo,
        &BlobStore::new(d),
        &mut state,
        &mut report,
    )
    .unwrap();
    assert_eq!((report.created, report.retried), (2, 2), "{report:?}");
    assert_eq!(state.pushed.len(), 2);
    // No-ops: the peer made no commit.
    let after = get(&format!(
        "{}/xrpc/com.atproto.sync.getLatestCommit?did={}",
        pds.service,
        pds.did_param()
    ));
    assert_eq!(head, after);
    drop(repo);

    // A different record under a taken key: refused by both, named.
    apply(
        d,
        &[Write::update(
            CHAT,
            k1,
            chat_record("2026-05-05T00:00:00.000Z"),
        )],
    );
    state.pushed.clear();
    let repo = Repository::open(d).unwrap();
    let mut report = PushReport::default();
    let e = sync::push(
        &session,
        &key,
        &repo,
        &BlobStore::new(d),
        &mut state,
        &mut report,
    )
    .unwrap_err();
    assert!(
        matches!(&e, SyncError::Xrpc { error, .. } if error == "InvalidSwap"),
        "{e}"
    );
    assert_eq!(list_records(&pds, CHAT).len(), 2);
}

/// A store synced by a version that kept the mirror in `sync.json`: the
/// file is read once, its mirror written into the store, and the file
/// renamed; nothing is pulled again nor pushed twice.
fn a_sync_json_of_an_older_version_is_taken_into_the_store(pds: Peer) {
    use gelstore::sync::SyncState;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["device", "init"]);
    sync(d, &pds);
    let held = mirror(d);
    let head = held.remote.clone().unwrap();
    assert!(!held.pushed.is_empty());

    // The older version's layout: the mirror in sync.json (CIDs as
    // strings), none in the store.
    let strings = |m: &std::collections::BTreeMap<String, gelstore::model::Cid>| {
        m.iter()
            .map(|(k, c)| (k.clone(), c.to_string()))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let old = json!({
        "did": held.did,
        "service": held.service,
        "pushed": strings(&held.pushed),
        "remote": {"commit": head.commit, "rev": head.rev, "data": head.data},
        "others": strings(&held.others),
    });
    std::fs::write(
        d.join("sync.json"),
        serde_json::to_vec_pretty(&old).unwrap(),
    )
    .unwrap();
    {
        let repo = Repository::open(d).unwrap();
        SyncState::default().save_all(&repo).unwrap();
    }

    // status takes it in: the mirrored head is the PDS's, nothing is
    // downloaded (an empty mirror would pull the whole repository).
    let report = status(d, &pds);
    assert_eq!(report["in_sync"], true, "{report}");
    assert_eq!(report["car_bytes"], 0, "{report}");
    assert_eq!(
        report["mirrored"]["commit"],
        head.commit.as_str(),
        "{report}"
    );
    assert!(!d.join("sync.json").exists());
    assert!(d.join("sync.json.migrated").exists());
    assert_eq!(mirror(d), held);

    // A sync after it pushes only the new chat, without a full pull.
    ok(d, &["chat", "new", "--title", "after the migration"]);
    let done = sync(d, &pds);
    assert_eq!(done["push"]["created"], 2, "{done}");
    assert_eq!(done["push"]["unchanged"], held.pushed.len(), "{done}");
    assert_eq!(done["pull"]["full_pulls"], 0, "{done}");
    assert_eq!(done["pull"]["data_matches"], true, "{done}");
    assert!(!d.join("sync.json").exists());
}
