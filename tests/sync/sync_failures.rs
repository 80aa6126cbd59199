//! Sync when things go wrong, against each peer of tests/support/peer.rs (the
//! real reference PDS and `gelstore serve`, as `SCENARIO::pds` and
//! `SCENARIO::serve`) behind a loopback proxy (tests/support/proxy.rs) that can
//! go down, expire the session, tamper with the repository CAR or hold back
//! applyWrites answers.

use crate::support::peer;
use crate::support::proxy;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gelstore::repo::repository::Repository;
use gelstore::sync::{self, Progress, SyncError, SyncOptions};
use serde_json::Value;

use peer::{Peer, add_chat_records, gel, gel_command, mirror, ok, on_both_peers, sync_args};
use proxy::Proxy;

const PREFIX: &str = "chat.gel.assistant.";

/// `gelstore sync` through `service` (the proxy) with the PDS's account.
fn options(pds: &Peer, service: &str) -> SyncOptions {
    pds.options_via(service)
}

/// A blocking GET straight to the PDS (the test's own view of it).
fn get_json(url: &str) -> Value {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let resp = reqwest::get(url).await.unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{url}");
        resp.json().await.unwrap()
    })
}

/// Every `chat.gel.assistant.*` record on the PDS as `collection/rkey` →
/// CID: describeRepo's collections, each read through listRecords' cursor.
/// Panics on a key listed twice.
fn remote_records(pds: &Peer) -> BTreeMap<String, String> {
    let described = get_json(&format!(
        "{}/xrpc/com.atproto.repo.describeRepo?repo={}",
        pds.service,
        pds.did_param()
    ));
    let mut out = BTreeMap::new();
    for collection in described["collections"].as_array().unwrap() {
        let collection = collection.as_str().unwrap();
        if !collection.starts_with(PREFIX) {
            continue;
        }
        let mut cursor = String::new();
        loop {
            let page = get_json(&format!(
                "{}/xrpc/com.atproto.repo.listRecords?repo={}&collection={collection}&limit=100&cursor={cursor}",
                pds.service,
                pds.did_param()
            ));
            let records = page["records"].as_array().unwrap();
            for r in records {
                let uri = r["uri"].as_str().unwrap();
                let key = uri
                    .strip_prefix(&format!("at://{}/", pds.did))
                    .unwrap()
                    .to_owned();
                let cid = r["cid"].as_str().unwrap().to_owned();
                assert!(out.insert(key.clone(), cid).is_none(), "{key} listed twice");
            }
            match page["cursor"].as_str() {
                Some(c) if !records.is_empty() => cursor = c.to_owned(),
                _ => break,
            }
        }
    }
    out
}

/// The local store's `chat.gel.assistant.*` records as key → CID.
fn local_records(data: &Path) -> BTreeMap<String, String> {
    let repo = Repository::open(data).unwrap();
    repo.mst()
        .entries_with_prefix(PREFIX)
        .map(|e| {
            let (k, cid) = e.unwrap();
            (k, cid.to_string())
        })
        .collect()
}

/// The marker's key → CID map.
fn marker(data: &Path) -> BTreeMap<String, String> {
    mirror(data)
        .pushed
        .into_iter()
        .map(|(k, c)| (k, c.to_string()))
        .collect()
}

fn head(data: &Path) -> String {
    Repository::open(data).unwrap().head().commit.to_string()
}

/// A device with a chat and one message.
fn device_with_chat(data: &Path) -> String {
    ok(data, &["device", "init"]);
    let chat = ok(data, &["chat", "new", "--title", "offline"]);
    let chat = chat.lines().next().unwrap().to_owned();
    ok(data, &["chat", "send", "--chat", &chat, "first message"]);
    chat
}

/// `n` chat records written straight into the store (TID keys).
fn add_chats(data: &Path, n: u64) {
    add_chat_records(data, 1_700_000_000_000_000, n, 0);
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

on_both_peers!(
    offline_writes_reach_the_pds_once_it_is_back,
    an_expired_session_is_refreshed_once_and_the_call_repeated,
    a_sync_killed_mid_push_is_finished_by_the_next_run,
    a_tampered_repository_car_is_refused,
    the_progress_bar_shows_on_a_terminal_only,
    large_records_go_in_batches_under_the_pds_body_limit,
);

fn offline_writes_reach_the_pds_once_it_is_back(pds: Peer) {
    let proxy = Proxy::start(&pds.service);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let chat = device_with_chat(d);
    ok(d, &sync_args(&pds, &proxy.url, &pds.password));
    assert_eq!(remote_records(&pds), local_records(d));

    // Bad credentials through the proxy: named, exit 1, nothing changes.
    let marker_before = mirror(d);
    let out = gel(d, &sync_args(&pds, &proxy.url, "wrong-password"));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("bad credentials"), "{}", stderr(&out));

    // The PDS goes away; the device keeps writing.
    proxy.set_down(true);
    ok(d, &["chat", "send", "--chat", &chat, "written offline 1"]);
    ok(d, &["chat", "send", "--chat", &chat, "written offline 2"]);
    ok(d, &["chat", "new", "--title", "a chat made offline"]);
    let head_offline = head(d);
    let local_offline = local_records(d);
    assert!(local_offline.len() > marker(d).len());

    let out = gel(d, &sync_args(&pds, &proxy.url, &pds.password));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("cannot reach {}", proxy.url)),
        "{}",
        stderr(&out)
    );
    assert!(out.stdout.is_empty(), "no report on failure");
    // Local data untouched: the store, its records and the marker.
    assert_eq!(head(d), head_offline);
    assert_eq!(local_records(d), local_offline);
    assert_eq!(mirror(d), marker_before);
    // The PDS still holds only what the first sync sent.
    assert!(remote_records(&pds).len() < local_offline.len());

    // Back online: everything written offline goes up exactly once.
    proxy.set_down(false);
    let report: Value =
        serde_json::from_str(&ok(d, &sync_args(&pds, &proxy.url, &pds.password))).unwrap();
    assert_eq!(report["pull"]["data_matches"], true, "{report}");
    assert_eq!(report["push"]["retried"], 0, "{report}");
    let local = local_records(d);
    assert_eq!(local, local_offline);
    assert_eq!(remote_records(&pds), local);
    assert_eq!(marker(d), local);
    // And a second run has nothing left to do.
    let again: Value =
        serde_json::from_str(&ok(d, &sync_args(&pds, &proxy.url, &pds.password))).unwrap();
    assert_eq!(again["push"]["batches"], 0, "{again}");
    assert_eq!(remote_records(&pds), local);
}

/// Records what the progress hooks were told.
#[derive(Default)]
struct Recorder {
    push_total: Mutex<Vec<u64>>,
    pushed: Mutex<u64>,
    pulled: Mutex<u64>,
    pulls: Mutex<usize>,
}

impl Progress for Recorder {
    fn push_started(&self, total: u64) {
        self.push_total.lock().unwrap().push(total);
    }
    fn pushed(&self, done: u64) {
        *self.pushed.lock().unwrap() += done;
    }
    fn pull_started(&self, _total: Option<u64>) {
        *self.pulls.lock().unwrap() += 1;
    }
    fn pulled(&self, bytes: u64) {
        *self.pulled.lock().unwrap() += bytes;
    }
}

fn an_expired_session_is_refreshed_once_and_the_call_repeated(pds: Peer) {
    let proxy = Proxy::start(&pds.service);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    device_with_chat(d);
    add_chats(d, 250);

    // The first applyWrites (400 ExpiredToken, as the reference PDS says
    // it) and then getRepo (401, as other servers say it) are refused as
    // expired: each time the session is refreshed (the second refresh needs
    // the refresh token the first one returned) and the call made again.
    proxy.expire_next("com.atproto.repo.applyWrites");
    proxy.expire_next_with("com.atproto.sync.getRepo", 401);
    let recorder = Arc::new(Recorder::default());
    let report = sync::sync_with_progress(d, &options(&pds, &proxy.url), recorder.clone()).unwrap();
    assert_eq!(proxy.expired("com.atproto.repo.applyWrites"), 1);
    assert_eq!(proxy.expired("com.atproto.sync.getRepo"), 1);
    assert_eq!(proxy.seen("com.atproto.server.refreshSession"), 2);
    assert_eq!(
        proxy.seen("com.atproto.repo.applyWrites"),
        report.push.batches + 1
    );
    assert_eq!(report.push.retried, 0);
    assert!(report.pull.data_matches, "{report:?}");
    let local = local_records(d);
    assert_eq!(report.push.created, local.len());
    assert_eq!(remote_records(&pds), local);
    assert_eq!(marker(d), local);

    // The progress hooks saw every write and the bytes of every CAR
    // downloaded (the refused getRepo answer was not counted; a sync that
    // pulls more than once counts them all).
    assert_eq!(
        *recorder.push_total.lock().unwrap(),
        vec![local.len() as u64]
    );
    assert_eq!(*recorder.pushed.lock().unwrap(), local.len() as u64);
    assert!(*recorder.pulls.lock().unwrap() >= 1);
    let pulled = *recorder.pulled.lock().unwrap();
    assert!(report.pull.car_bytes > 0);
    assert!(
        pulled >= report.pull.car_bytes as u64,
        "{pulled} {report:?}"
    );

    // When refreshSession is refused too: a named error, nothing lost.
    add_chats_after(d, 3);
    let head_before = head(d);
    let marker_before = marker(d);
    proxy.expire_next("com.atproto.repo.applyWrites");
    proxy.expire_next("com.atproto.server.refreshSession");
    let e = sync::sync(d, &options(&pds, &proxy.url)).unwrap_err();
    assert!(matches!(e, SyncError::SessionExpired { .. }), "{e}");
    assert!(e.to_string().contains("could not be refreshed"), "{e}");
    assert!(e.to_string().contains("ExpiredToken"), "{e}");
    assert_eq!(head(d), head_before);
    assert_eq!(marker(d), marker_before);
    assert_eq!(remote_records(&pds), marker_before);
    // The CLI: exit 1 with the same message.
    proxy.expire_next("com.atproto.repo.applyWrites");
    proxy.expire_next("com.atproto.server.refreshSession");
    let out = gel(d, &sync_args(&pds, &proxy.url, &pds.password));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("could not be refreshed"),
        "{}",
        stderr(&out)
    );
    // With the PDS answering normally again, the new records go up.
    ok(d, &sync_args(&pds, &proxy.url, &pds.password));
    assert_eq!(remote_records(&pds), local_records(d));
}

/// `n` more chat records, with keys after those of [`add_chats`].
fn add_chats_after(data: &Path, n: u64) {
    add_chat_records(data, 1_800_000_000_000_000, n, 0);
}

fn a_sync_killed_mid_push_is_finished_by_the_next_run(pds: Peer) {
    let proxy = Proxy::start(&pds.service);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    device_with_chat(d);
    add_chats(d, 650);

    // The first batch is answered; the second reaches the PDS (which
    // commits it) but its answer never comes back; the process is killed
    // while it waits.
    proxy.hold_apply_writes_after(1);
    let mut child = gel_command(d, &sync_args(&pds, &proxy.url, &pds.password))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let held = proxy.wait_held(1, Duration::from_secs(120));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(held, "the second applyWrites never came");
    // The run re-sealed the store for the account before its push: the
    // records as they are now are what goes up.
    let local = local_records(d);
    assert!(local.len() > 600);

    // The marker has the first batch only; the PDS has two.
    assert_eq!(marker(d).len(), sync::MAX_BATCH);
    assert_eq!(remote_records(&pds).len(), 2 * sync::MAX_BATCH);
    proxy.release();
    // The session expires during the rerun's record-by-record retry too
    // (putRecord is posted as plain JSON, outside atrium's client).
    proxy.expire_next("com.atproto.repo.putRecord");

    // Rerun: the committed-but-unacknowledged batch is not sent as new
    // creates again (a push retries it record by record as create-if-absent
    // no-ops; a sync that pulls first finds it on the PDS); the rest goes
    // up. Nothing is created twice.
    let report: Value =
        serde_json::from_str(&ok(d, &sync_args(&pds, &proxy.url, &pds.password))).unwrap();
    assert!(
        report["push"]["retried"].as_u64().unwrap() <= sync::MAX_BATCH as u64,
        "{report}"
    );
    let created = report["push"]["created"].as_u64().unwrap();
    assert!(
        created <= (local.len() - sync::MAX_BATCH) as u64
            && created >= (local.len() - 2 * sync::MAX_BATCH) as u64,
        "{report}"
    );
    assert_eq!(report["pull"]["data_matches"], true, "{report}");
    assert_eq!(remote_records(&pds), local);
    assert_eq!(marker(d), local);
    assert_eq!(local_records(d), local);
    if proxy.seen("com.atproto.repo.putRecord") > 0 {
        assert_eq!(proxy.expired("com.atproto.repo.putRecord"), 1);
        assert_eq!(proxy.seen("com.atproto.server.refreshSession"), 1);
    }
}

fn a_tampered_repository_car_is_refused(pds: Peer) {
    let proxy = Proxy::start(&pds.service);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    device_with_chat(d);
    let head_before = head(d);
    let local_before = local_records(d);

    proxy.tamper_get_repo(true);
    let out = gel(d, &sync_args(&pds, &proxy.url, &pds.password));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the PDS's repository CAR failed verification"),
        "{}",
        stderr(&out)
    );
    assert!(out.stdout.is_empty());
    assert_eq!(proxy.seen("com.atproto.sync.getRepo"), 1);
    assert_eq!(head(d), head_before);
    assert_eq!(local_records(d), local_before);

    // The same PDS without the proxy's damage verifies.
    proxy.tamper_get_repo(false);
    let report: Value =
        serde_json::from_str(&ok(d, &sync_args(&pds, &proxy.url, &pds.password))).unwrap();
    assert_eq!(report["pull"]["data_matches"], true, "{report}");
    // What went up is the store as re-sealed for the account by this run.
    assert_eq!(remote_records(&pds), local_records(d));
    assert_eq!(local_records(d).len(), local_before.len());
}

fn the_progress_bar_shows_on_a_terminal_only(pds: Peer) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    device_with_chat(d);
    add_chats(d, 250);
    let total = local_records(d).len();

    // Through a pseudo-terminal (python3's pty module): the bar is drawn on
    // stderr, and the JSON report still comes out whole.
    let data = d.to_str().unwrap();
    let mut args = vec!["--data", data];
    args.extend(sync_args(&pds, &pds.service, &pds.password));
    let out = Command::new("python3")
        .args([
            "-c",
            "import os, pty, sys; sys.exit(os.waitstatus_to_exitcode(pty.spawn(sys.argv[1:])))",
            env!("CARGO_BIN_EXE_gelstore"),
        ])
        .args(&args)
        .env_remove("GELSTORE_PASSWORD")
        .stdin(Stdio::null())
        .output()
        .expect("python3 runs gelstore in a pty");
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{screen}");
    assert!(screen.contains("pushing ["), "{screen}");
    assert!(screen.contains(&format!("/{total} records")), "{screen}");
    assert!(screen.contains("\"data_matches\":true"), "{screen}");

    // Piped: no bar, stderr empty, stdout is the JSON report alone.
    add_chats_after(d, 3);
    let out = gel(d, &sync_args(&pds, &pds.service, &pds.password));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["push"]["created"], 3, "{report}");
}

fn large_records_go_in_batches_under_the_pds_body_limit(pds: Peer) {
    // 150 records of ~4 KiB: 600 KiB, four times the reference PDS's
    // 150 KiB JSON body limit (a single batch of 150 would get HTTP 413).
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["device", "init"]);
    add_chat_records(d, 1_700_000_000_000_000, 150, 4000);
    let report = sync::sync(d, &options(&pds, &pds.service)).unwrap();
    let local = local_records(d);
    assert_eq!(report.push.created, local.len());
    assert!(report.push.batches >= 5, "{report:?}");
    assert_eq!(report.push.retried, 0);
    assert!(report.pull.data_matches);
    assert_eq!(remote_records(&pds), local);
}
