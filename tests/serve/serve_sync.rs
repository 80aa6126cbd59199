//! `gelstore sync` against `gelstore serve`, as `tests/sync/sync_pds.rs` runs it
//! against the reference PDS: push the local sealed chat, pull-verify the
//! server's repository against the key of its DID document, compare the
//! data roots; a second sync pushes nothing; a wrong password is refused.
//!
//! The DID document comes from the server's PLC-style `GET /{did}` (sync
//! asks a PLC directory, and the account is a did:web); see
//! `server::plc_style_did`.

use crate::support::serve;

use std::path::Path;
use std::process::{Command, Output};

use serve::{Serve, http};

fn gel(data: &Path, args: &[&str], password: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gelstore"))
        .arg("--data")
        .arg(data)
        .args(args)
        .env("GELSTORE_PASSWORD", password)
        .output()
        .unwrap()
}

fn ok(data: &Path, args: &[&str]) -> String {
    let out = gel(data, args, "");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn gelstore_sync_pushes_to_and_verifies_gelstore_serve() {
    let serve = Serve::start();
    let local = tempfile::tempdir().unwrap();
    let l = local.path();
    ok(l, &["device", "init"]);
    let chat = ok(l, &["chat", "new", "--title", "Sync me"])
        .trim()
        .to_owned();
    ok(l, &["chat", "send", "--chat", &chat, "first message"]);
    let sync = |password: &str| {
        gel(
            l,
            &[
                "sync",
                "--pds",
                &serve.service,
                "--identifier",
                &serve.handle,
                "--plc",
                &serve.service,
            ],
            password,
        )
    };
    let first = sync(&serve.password);
    let text = String::from_utf8_lossy(&first.stdout).into_owned();
    assert!(
        first.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(text.contains("matches the local root"), "{text}");
    assert!(text.contains(&serve.did), "{text}");
    let second = sync(&serve.password);
    let text = String::from_utf8_lossy(&second.stdout).into_owned();
    assert!(second.status.success(), "{text}");
    assert!(text.contains(" 0 created, 0 updated, 0 deleted"), "{text}");

    // The pushed records are the server's, with the local CIDs; sealed.
    let did = serve.did.replace('%', "%25").replace(':', "%3A");
    let listed = http(
        &serve.addr(),
        "GET",
        &format!(
            "/xrpc/com.atproto.repo.listRecords?repo={did}&collection=chat.gel.assistant.message"
        ),
        &[],
        b"",
    );
    assert_eq!(
        listed.json()["records"].as_array().unwrap().len(),
        1,
        "{}",
        listed.text()
    );
    assert!(!listed.text().contains("first message"));

    let refused = sync("wrong password");
    assert_eq!(
        refused.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}
