//! `gelstore serve --plc URL`: the account is a did:plc registered with a
//! real PLC directory (the in-memory one of the reference PDS harness,
//! `tests/pds`), and standard clients resolve it there: @atproto/identity
//! finds our key and endpoint, @atproto/repo verifies getRepo and proofs,
//! @atproto/sync's Firehose verifies #commit frames, and `gelstore sync`
//! pushes and pull-verifies against it as against the reference PDS.

use crate::support::pds;
use crate::support::serve;

use std::process::Command;

use pds::Pds;
use serve::{Serve, drive};

#[test]
fn a_did_plc_account_works_with_the_standard_clients_and_gelstore_sync() {
    let pds = Pds::start();
    let serve = Serve::start_with_plc(&pds.plc);
    assert!(serve.did.starts_with("did:plc:"), "{}", serve.did);
    let env = [("PLC", pds.plc.as_str())];
    let run = |mode: &str, extra: &[(&str, &str)]| {
        let mut all = env.to_vec();
        all.extend_from_slice(extra);
        drive(
            mode,
            &serve.service,
            &serve.did,
            &serve.handle,
            &serve.password,
            &all,
        )
    };
    run("api", &[]);
    let verified = run("verify", &[]);
    let key = gelstore::repo::key_file::load_key(&serve.data)
        .unwrap()
        .unwrap();
    assert_eq!(verified["key"], key.public_key().to_did_key().as_str());
    let live = run("firehose", &[("WRITES", "3")]);
    assert_eq!(live["verifiedByFirehose"], 3, "{live}");
    assert_eq!(live["inductiveChecked"], 3, "{live}");

    let local = tempfile::tempdir().unwrap();
    let gel = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_gelstore"))
            .arg("--data")
            .arg(local.path())
            .args(args)
            .env("GELSTORE_PASSWORD", &serve.password)
            .output()
            .unwrap()
    };
    assert!(gel(&["device", "init"]).status.success());
    let chat = String::from_utf8(gel(&["chat", "new", "--title", "plc"]).stdout).unwrap();
    assert!(
        gel(&["chat", "send", "--chat", chat.trim(), "hello"])
            .status
            .success()
    );
    let out = gel(&[
        "sync",
        "--pds",
        &serve.service,
        "--identifier",
        &serve.handle,
        "--plc",
        &serve.plc,
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("matches the local root"), "{text}");
}

/// A new handle or a new address after the first start reaches the
/// directory: the next operation, chained to the last, signed with the
/// server's key (the directory checks both).
#[test]
fn a_new_handle_and_address_are_sent_to_the_directory() {
    let pds = Pds::start();
    let serve = Serve::start_with_plc(&pds.plc);
    let did = serve.did.clone();
    let data = serve.data.clone();
    let keep = serve.stop();
    assert!(data.join("plc.json").is_file());
    // Restarted without --plc, on another port, with another handle.
    let serve = Serve::start_in(&data, &["--handle", "renamed.test"]);
    assert_eq!(serve.did, did);
    let doc = http_get_json(&format!("{}/{did}", pds.plc));
    assert_eq!(
        doc["alsoKnownAs"],
        serde_json::json!(["at://renamed.test"]),
        "{doc}"
    );
    let endpoint = doc["service"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == "#atproto_pds"))
        .map(|s| s["serviceEndpoint"].clone());
    assert_eq!(endpoint, Some(serve.service.clone().into()), "{doc}");
    let log = http_get_json(&format!("{}/{did}/log", pds.plc));
    assert_eq!(log.as_array().map(Vec::len), Some(2), "{log}");
    // Nothing changed: no operation.
    let service = serve.service.clone();
    drop(serve);
    let listen = service
        .trim_start_matches("http://")
        .replace("localhost", "127.0.0.1");
    let serve = Serve::start_at(&data, &listen, &["--handle", "renamed.test"]);
    let log = http_get_json(&format!("{}/{did}/log", pds.plc));
    assert_eq!(log.as_array().map(Vec::len), Some(2), "{log}");
    drop(serve);
    drop(keep);
}

fn http_get_json(url: &str) -> serde_json::Value {
    let rest = url.trim_start_matches("http://");
    let (addr, path) = rest.split_once('/').unwrap();
    let r = serve::http(
        &addr.replace("localhost", "127.0.0.1"),
        "GET",
        &format!("/{path}"),
        &[],
        b"",
    );
    assert_eq!(r.status, 200, "{url}: {}", r.text());
    r.json()
}
