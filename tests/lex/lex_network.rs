//! Lexicons on the network, end to end: `gelstore lex publish` puts this
//! repository's lexicons on a real PDS, a real DNS server on loopback holds
//! the `_lexicon` TXT record, and `lex resolve`, `lex pull` (with its lock)
//! and `lex check-dns` find them through DNS, the DID document and a
//! verified `com.atproto.sync.getRecord` proof. Every scenario runs against
//! the reference PDS (did:plc) and `gelstore serve` (did:web).

use crate::support::dns;
use crate::support::peer;

use std::path::{Path, PathBuf};
use std::process::Output;

use peer::{Peer, gel, on_both_peers};
use serde_json::{Value, json};

const NSID: &str = "chat.gel.assistant.message";

fn lexicons() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("lexicons")
}

fn run(args: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    gel(dir.path(), args)
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    stdout(&out)
}

/// Exit 1 (refused); returns stderr.
fn refused(args: &[&str]) -> String {
    let out = run(args);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
    stderr(&out)
}

fn publish_args<'a>(peer: &'a Peer, paths: &'a str) -> Vec<&'a str> {
    vec![
        "lex",
        "publish",
        paths,
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

fn json_of(text: &str) -> Value {
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn read(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn json_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| match p.is_dir() {
            true => json_files(&p),
            false => usize::from(p.extension().is_some_and(|x| x == "json")),
        })
        .sum()
}

fn publish_resolve_and_pull_with_a_lock(peer: Peer) {
    let lexicons = lexicons();
    let lexicons = lexicons.to_str().unwrap();
    let count = json_files(Path::new(lexicons));

    // Published once; the second time nothing changes.
    let first = json_of(&ok(&publish_args(&peer, lexicons)));
    assert_eq!(first["did"], peer.did.as_str());
    assert_eq!(first["created"].as_array().unwrap().len(), count, "{first}");
    let again = json_of(&ok(&publish_args(&peer, lexicons)));
    assert_eq!(
        again["unchanged"].as_array().unwrap().len(),
        count,
        "{again}"
    );
    assert!(again["created"].as_array().unwrap().is_empty());

    let dns = dns::start(
        "chat.",
        &[("_lexicon.assistant.gel.chat", &format!("did={}", peer.did))],
    );
    let addr = dns.addr.to_string();
    let with = ["--dns", &addr, "--plc", peer.plc_arg()];
    let mut args = vec!["lex", "resolve", NSID, "--format", "json"];
    args.extend(with);
    let got = json_of(&ok(&args));
    assert_eq!(got["did"], peer.did.as_str());
    assert_eq!(
        got["schema"],
        read(&Path::new(lexicons).join("chat/gel/assistant/message.json"))
    );
    assert!(got["cid"].as_str().unwrap().starts_with("bafyrei"));

    // status: every local lexicon is published as it is.
    let mut args = vec!["lex", "status", lexicons];
    args.extend(with);
    let shown = ok(&args);
    assert_eq!(
        shown.lines().filter(|l| l.starts_with("same\t")).count(),
        count,
        "{shown}"
    );

    // check-dns: the record is there for this DID, not for another.
    let mut args = vec!["lex", "check-dns", lexicons, "--did", &peer.did];
    args.extend(with);
    let shown = ok(&args);
    assert!(
        shown.starts_with("ok\t_lexicon.assistant.gel.chat"),
        "{shown}"
    );
    let mut args = vec![
        "lex",
        "check-dns",
        lexicons,
        "--did",
        "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa",
    ];
    args.extend(with);
    let err = refused(&args);
    assert!(err.contains("1 of 1 TXT record(s)"), "{err}");

    // An app's lexicon that uses ours: pull brings ours in, transitively,
    // with a lock of record CIDs.
    let app = tempfile::tempdir().unwrap();
    std::fs::write(
        app.path().join("thing.json"),
        serde_json::to_string(&json!({
            "lexicon": 1,
            "id": "com.example.app.thing",
            "defs": {"main": {"type": "record", "key": "tid", "record": {
                "type": "object",
                "required": ["model"],
                "properties": {"model": {"type": "ref", "ref": "chat.gel.assistant.defs#modelRef"}},
            }}},
        }))
        .unwrap(),
    )
    .unwrap();
    let out = tempfile::tempdir().unwrap();
    let (app_dir, out_dir) = (app.path().to_str().unwrap(), out.path().to_str().unwrap());
    let pull = |locked: bool| {
        let mut args = vec![
            "lex",
            "pull",
            "--lexicons",
            app_dir,
            "--out",
            out_dir,
            "--format",
            "json",
        ];
        if locked {
            args.push("--locked");
        }
        args.extend(with);
        run(&args)
    };
    let pulled = pull(false);
    assert!(pulled.status.success(), "{}", stderr(&pulled));
    let pulled = json_of(&stdout(&pulled));
    let names: Vec<&str> = pulled["pulled"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(names.contains(&"chat.gel.assistant.defs"), "{pulled}");
    assert_eq!(
        read(&out.path().join("chat/gel/assistant/defs.json")),
        read(&Path::new(lexicons).join("chat/gel/assistant/defs.json"))
    );
    let lock = read(&out.path().join("lexicons.lock.json"));
    assert_eq!(
        lock["lexicons"].as_object().unwrap().len(),
        names.len(),
        "{lock}"
    );
    // Locked and unchanged: the same.
    let again = pull(true);
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(
        json_of(&stdout(&again))["changed"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    // A safe change published: a locked pull now fails and writes nothing.
    let changed = tempfile::tempdir().unwrap();
    let mut defs = read(&Path::new(lexicons).join("chat/gel/assistant/defs.json"));
    defs["description"] = json!("Shared definitions, described anew.");
    let file = changed.path().join("defs.json");
    std::fs::write(&file, serde_json::to_string_pretty(&defs).unwrap()).unwrap();
    let updated = json_of(&ok(&publish_args(&peer, file.to_str().unwrap())));
    assert_eq!(
        updated["updated"],
        json!(["chat.gel.assistant.defs"]),
        "{updated}"
    );
    // status now names the one that differs (exit 1).
    let mut args = vec!["lex", "status", lexicons, "--format", "json"];
    args.extend(with);
    let out_status = run(&args);
    assert_eq!(out_status.status.code(), Some(1), "{}", stderr(&out_status));
    let differs: Vec<Value> = stdout(&out_status)
        .lines()
        .map(json_of)
        .filter(|l| l["state"] != "same")
        .collect();
    assert_eq!(
        differs,
        [json!({"nsid": "chat.gel.assistant.defs", "state": "differs"})]
    );
    let before = std::fs::read(out.path().join("lexicons.lock.json")).unwrap();
    let drift = pull(true);
    assert_eq!(drift.status.code(), Some(1), "{}", stderr(&drift));
    assert!(
        stderr(&drift).contains("but the lock file holds"),
        "{}",
        stderr(&drift)
    );
    assert_eq!(
        std::fs::read(out.path().join("lexicons.lock.json")).unwrap(),
        before
    );
    let unlocked = pull(false);
    assert!(unlocked.status.success());
    assert_eq!(
        json_of(&stdout(&unlocked))["changed"],
        json!(["chat.gel.assistant.defs"])
    );

    // An NSID named on the command line, as `lex install` takes them.
    let named = tempfile::tempdir().unwrap();
    let mut args = vec![
        "lex",
        "pull",
        "chat.gel.assistant.settings",
        "--out",
        named.path().to_str().unwrap(),
        "--format",
        "json",
    ];
    args.extend(with);
    let got = json_of(&ok(&args));
    assert!(
        got["pulled"]
            .as_array()
            .unwrap()
            .contains(&json!("chat.gel.assistant.settings")),
        "{got}"
    );
    assert!(
        named
            .path()
            .join("chat/gel/assistant/settings.json")
            .exists()
    );
}

/// A breaking change is refused unless forced, and nothing is written.
fn a_breaking_publish_is_refused_unless_forced(peer: Peer) {
    let dir = tempfile::tempdir().unwrap();
    let mut message = read(&lexicons().join("chat/gel/assistant/message.json"));
    let file = dir.path().join("message.json");
    std::fs::write(&file, serde_json::to_string(&message).unwrap()).unwrap();
    let path = file.to_str().unwrap().to_owned();
    ok(&publish_args(&peer, &path));
    // A new required property breaks every record written before.
    let required = message["defs"]["main"]["record"]["required"]
        .as_array_mut()
        .unwrap();
    required.push(json!("newField"));
    message["defs"]["main"]["record"]["properties"]["newField"] = json!({"type": "string"});
    std::fs::write(&file, serde_json::to_string(&message).unwrap()).unwrap();
    let err = refused(&publish_args(&peer, &path));
    assert!(
        err.contains("would break") && err.contains("--force"),
        "{err}"
    );
    // The same check as a diff against what is published, in a CI format:
    // the finding is annotated on the local file.
    let diff_published = || {
        run(&[
            "lex",
            "diff",
            "--published",
            &path,
            "--did",
            &peer.did,
            "--plc",
            peer.plc_arg(),
            "--format",
            "github",
        ])
    };
    let diff = diff_published();
    assert_eq!(diff.status.code(), Some(1), "{}", stderr(&diff));
    let annotations = stdout(&diff);
    assert!(
        annotations.lines().any(|l| l.starts_with("::error file=")
            && l.contains("message.json")
            && l.contains("newField")),
        "{annotations}"
    );
    let mut forced = publish_args(&peer, &path);
    forced.push("--force");
    assert_eq!(json_of(&ok(&forced))["updated"], json!([NSID]));
    // Published as it is now: nothing breaks.
    let diff = diff_published();
    assert_eq!(diff.status.code(), Some(0), "{}", stderr(&diff));
}

/// What resolution refuses, each by name: no TXT record, a DID without
/// the schema, a schema record that is not the NSID's lexicon.
fn missing_and_tampered_schemas_are_named(peer: Peer) {
    let dns = dns::start(
        "chat.",
        &[("_lexicon.assistant.gel.chat", &format!("did={}", peer.did))],
    );
    let addr = dns.addr.to_string();
    let resolve = |nsid: &str| {
        refused(&[
            "lex",
            "resolve",
            nsid,
            "--dns",
            &addr,
            "--plc",
            peer.plc_arg(),
        ])
    };
    let err = resolve("chat.nowhere.app.thing");
    assert!(
        err.contains("no TXT record at _lexicon.app.nowhere.chat"),
        "{err}"
    );
    let err = resolve(NSID);
    assert!(
        err.contains(&format!("publishes no schema record for {NSID}")),
        "{err}"
    );

    // Whoever holds the account password can write any record there: a
    // schema record whose id is another lexicon's is not this one.
    let dir = tempfile::tempdir().unwrap();
    let mut forged = read(&lexicons().join("chat/gel/assistant/chat.json"));
    forged["id"] = json!(NSID);
    let file = dir.path().join("forged.json");
    std::fs::write(&file, serde_json::to_string(&forged).unwrap()).unwrap();
    ok(&publish_args(&peer, file.to_str().unwrap()));
    let mut forged = read(&file);
    forged["id"] = json!("chat.gel.assistant.chat");
    forged["$type"] = json!("com.atproto.lexicon.schema");
    put_record(&peer, NSID, &forged);
    let err = resolve(NSID);
    assert!(
        err.contains("is not its lexicon") && err.contains("not the record key"),
        "{err}"
    );
}

/// `com.atproto.repo.putRecord` as the account, bypassing `lex publish`.
fn put_record(peer: &Peer, rkey: &str, record: &Value) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = reqwest::Client::new();
        let session: Value = client
            .post(format!(
                "{}/xrpc/com.atproto.server.createSession",
                peer.service
            ))
            .json(&json!({"identifier": peer.handle, "password": peer.password}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let token = session["accessJwt"].as_str().unwrap();
        let resp = client
            .post(format!("{}/xrpc/com.atproto.repo.putRecord", peer.service))
            .bearer_auth(token)
            .json(&json!({
                "repo": peer.did,
                "collection": "com.atproto.lexicon.schema",
                "rkey": rkey,
                "record": record,
            }))
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "{}", resp.text().await.unwrap());
    });
}

fn unpublish_args<'a>(peer: &'a Peer, targets: &[&'a str], more: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["lex", "unpublish"];
    args.extend(targets);
    args.extend([
        "--pds",
        &peer.service,
        "--identifier",
        &peer.handle,
        "--password",
        &peer.password,
    ]);
    args.extend(more);
    args
}

/// `lex resolve NSID --did` against the peer's account (no DNS).
fn resolve_at(peer: &Peer, nsid: &str) -> Output {
    run(&[
        "lex",
        "resolve",
        nsid,
        "--did",
        &peer.did,
        "--plc",
        peer.plc_arg(),
        "--format",
        "json",
    ])
}

/// Unpublish: one schema record deleted; one another published schema
/// references refused by name unless forced; nothing to delete is no
/// error; a folder's worth in one commit; and a plan made on a head that
/// moved deletes nothing.
fn unpublish_deletes_in_one_commit_and_keeps_references_whole(peer: Peer) {
    let lexicons = lexicons();
    let lexicons = lexicons.to_str().unwrap();
    let count = json_files(Path::new(lexicons));
    ok(&publish_args(&peer, lexicons));
    let device = "chat.gel.assistant.device";
    let reply = "chat.gel.assistant.subscribeReply";
    let json = ["--format", "json"];

    // Nobody references device: deleted, and resolving it now names the
    // record that is missing.
    let done = json_of(&ok(&unpublish_args(&peer, &[device], &json)));
    assert_eq!(done["deleted"], json!([device]), "{done}");
    assert_eq!(done["did"], peer.did.as_str());
    assert!(done["commit"].as_str().unwrap().starts_with("bafyrei"));
    let gone = resolve_at(&peer, device);
    assert_eq!(gone.status.code(), Some(1), "{}", stderr(&gone));
    assert!(
        stderr(&gone).contains(&format!("{} (at ", peer.did))
            && stderr(&gone).contains(&format!(") publishes no schema record for {device}")),
        "{}",
        stderr(&gone)
    );
    assert!(resolve_at(&peer, NSID).status.success());

    // Again: nothing to delete, said so, exit 0.
    let again = ok(&unpublish_args(&peer, &[device], &[]));
    assert!(again.contains(&format!("absent\t{device}")), "{again}");
    assert!(again.contains("nothing to unpublish"), "{again}");

    // defs references subscribeReply and stays: refused, both named, and
    // nothing deleted.
    let err = refused(&unpublish_args(&peer, &[reply], &[]));
    assert!(
        err.contains(&format!(
            "chat.gel.assistant.defs references {reply} and stays published"
        )) && err.contains("--force"),
        "{err}"
    );
    assert!(resolve_at(&peer, reply).status.success());
    // A dry run shows the plan and deletes nothing.
    let mut dry = json.to_vec();
    dry.extend(["--dry-run", "--force"]);
    let plan = json_of(&ok(&unpublish_args(&peer, &[reply], &dry)));
    assert_eq!(plan["deleted"], json!([reply]), "{plan}");
    assert_eq!(plan["dry_run"], json!(true));
    assert!(resolve_at(&peer, reply).status.success());

    // A plan made on one head, then another write: the delete is refused
    // whole (swapCommit) and the record stays.
    let session =
        gelstore::sync::Session::login(&peer.service, &peer.handle, &peer.password).unwrap();
    let thread = "chat.gel.assistant.getThread".to_owned();
    let planned =
        gelstore::lexnet::unpublish::plan(&session, std::slice::from_ref(&thread), false).unwrap();
    assert_eq!(planned.delete.keys().collect::<Vec<_>>(), [&thread]);
    let mut keywrap = read(&Path::new(lexicons).join("chat/gel/assistant/keyWrap.json"));
    keywrap["description"] = json!("Described anew while an unpublish was planned.");
    keywrap["$type"] = json!("com.atproto.lexicon.schema");
    put_record(&peer, "chat.gel.assistant.keyWrap", &keywrap);
    let moved = gelstore::lexnet::unpublish::apply(&session, &planned).unwrap_err();
    assert!(
        matches!(moved, gelstore::lexnet::LexNetError::Moved { .. }),
        "{moved:?}"
    );
    assert!(moved.to_string().contains("nothing was deleted"), "{moved}");
    assert!(resolve_at(&peer, &thread).status.success());

    // --force: deleted, with a warning naming the schema left dangling.
    let mut forced = json.to_vec();
    forced.push("--force");
    let out = run(&unpublish_args(&peer, &[reply], &forced));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(json_of(&stdout(&out))["deleted"], json!([reply]));
    assert!(
        stderr(&out).contains(&format!("chat.gel.assistant.defs references {reply}")),
        "{}",
        stderr(&out)
    );
    let gone = resolve_at(&peer, reply);
    assert!(
        stderr(&gone).contains(&format!("publishes no schema record for {reply}")),
        "{}",
        stderr(&gone)
    );

    // The folder: everything still published goes in one commit (their
    // references to each other go with them), the two gone are absent.
    let all = json_of(&ok(&unpublish_args(&peer, &[lexicons], &json)));
    assert_eq!(all["deleted"].as_array().unwrap().len(), count - 2, "{all}");
    assert_eq!(all["absent"], json!([device, reply]));
    let gone = resolve_at(&peer, NSID);
    assert_eq!(gone.status.code(), Some(1));
}

on_both_peers!(
    publish_resolve_and_pull_with_a_lock,
    a_breaking_publish_is_refused_unless_forced,
    missing_and_tampered_schemas_are_named,
    unpublish_deletes_in_one_commit_and_keeps_references_whole,
);

/// What the hostile PDS below serves for `getRecord`.
#[derive(Clone, Copy, PartialEq)]
enum Serve {
    /// The proof as the repository makes it.
    Honest,
    /// One byte of the schema record changed.
    Altered,
    /// The proof, but its DID document names another key.
    OtherKey,
    /// The commit and tree without the record block.
    WithoutRecord,
}

/// A PDS an attacker controls, on loopback: a did:web whose document and
/// `com.atproto.sync.getRecord` it serves itself, from a repository it
/// signed; told what to tamper with.
struct HostilePds {
    did: String,
    mode: std::sync::Arc<std::sync::Mutex<Serve>>,
}

impl HostilePds {
    fn start(nsid: &str, schema: &Value) -> HostilePds {
        use gelstore::crypto::{KeyAlgorithm, SigningKey};
        use gelstore::repo::repository::{Repository, Write};
        use std::io::{BufRead, BufReader, Write as _};

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let did = format!("did:web:localhost%3A{port}");
        let key = SigningKey::generate(KeyAlgorithm::K256).unwrap();
        let other = SigningKey::generate(KeyAlgorithm::K256).unwrap();
        let engine = std::sync::Arc::new(gelstore::store::MemoryEngine::new());
        let mut repo = Repository::init_engine_as(engine, key.clone(), did.clone()).unwrap();
        let mut record = schema.clone();
        record["$type"] = json!("com.atproto.lexicon.schema");
        repo.apply(&[Write::create("com.atproto.lexicon.schema", nsid, record)])
            .unwrap();
        let path = format!("com.atproto.lexicon.schema/{nsid}");
        let head = repo.head().commit;
        let proof = gelstore::repo::proof::record_proof(repo.mst().store(), head, &path).unwrap();
        let record_cid = repo
            .get_cid("com.atproto.lexicon.schema", nsid)
            .unwrap()
            .unwrap();
        let car = gelstore::repo::car::Car::from_slice(&proof).unwrap();
        let block = car.get(&record_cid).unwrap();
        // The record's CAR section: varint length, CID, block.
        let mut section = record_cid.to_bytes();
        section.extend_from_slice(block);
        let start = proof
            .windows(section.len())
            .position(|w| w == section.as_slice())
            .unwrap();
        // A byte inside the description text: the block still decodes,
        // but no longer hashes to the CID the tree names.
        let mut altered = proof.clone();
        let text = block.windows(5).position(|w| w == b"Made ").unwrap();
        altered[start + section.len() - block.len() + text] ^= 0x20;
        let mut varint = Vec::new();
        let mut n = section.len();
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            varint.push(if n == 0 { byte } else { byte | 0x80 });
            if n == 0 {
                break;
            }
        }
        assert_eq!(&proof[start - varint.len()..start], varint.as_slice());
        let mut without = proof[..start - varint.len()].to_vec();
        without.extend_from_slice(&proof[start + section.len()..]);

        let mode = std::sync::Arc::new(std::sync::Mutex::new(Serve::Honest));
        let shared = mode.clone();
        let doc_did = did.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut line = String::new();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
                        break;
                    }
                }
                let mode = *shared.lock().unwrap();
                let signer = if mode == Serve::OtherKey {
                    &other
                } else {
                    &key
                };
                let (kind, body) = if line.contains("/.well-known/did.json") {
                    let doc = json!({
                        "id": doc_did,
                        "verificationMethod": [{
                            "id": format!("{doc_did}#atproto"),
                            "type": "Multikey",
                            "controller": doc_did,
                            "publicKeyMultibase": signer.public_key().to_multikey(),
                        }],
                        "service": [{
                            "id": "#atproto_pds",
                            "type": "AtprotoPersonalDataServer",
                            "serviceEndpoint": format!("http://localhost:{port}"),
                        }],
                    });
                    ("application/json", serde_json::to_vec(&doc).unwrap())
                } else {
                    let car = match mode {
                        Serve::Altered => altered.clone(),
                        Serve::WithoutRecord => without.clone(),
                        Serve::Honest | Serve::OtherKey => proof.clone(),
                    };
                    ("application/vnd.ipld.car", car)
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(&body);
            }
        });
        HostilePds { did, mode }
    }

    fn serve(&self, mode: Serve) {
        *self.mode.lock().unwrap() = mode;
    }
}

/// The schema comes from a PDS the attacker runs: what it serves must be
/// what the DID's key signed, whole, or it is refused by name.
#[test]
fn a_schema_the_did_did_not_sign_is_refused() {
    let nsid = "com.example.lex.thing";
    let schema = json!({
        "lexicon": 1,
        "id": nsid,
        "description": "Made for the attack test.",
        "defs": {"main": {"type": "record", "key": "tid", "record": {"type": "object", "properties": {}}}},
    });
    let pds = HostilePds::start(nsid, &schema);
    let dns = dns::start(
        "com.",
        &[("_lexicon.lex.example.com", &format!("did={}", pds.did))],
    );
    let addr = dns.addr.to_string();
    let resolve = || run(&["lex", "resolve", nsid, "--dns", &addr, "--format", "json"]);

    let honest = resolve();
    assert!(honest.status.success(), "{}", stderr(&honest));
    assert_eq!(json_of(&stdout(&honest))["schema"], schema);

    for (mode, says) in [
        (Serve::Altered, "does not match its CID"),
        (Serve::OtherKey, "bad signature"),
        (Serve::WithoutRecord, "the proof lacks the record's block"),
    ] {
        pds.serve(mode);
        let out = resolve();
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("fails verification") && err.contains(says),
            "{err}"
        );
        assert!(stdout(&out).is_empty());
    }
}
