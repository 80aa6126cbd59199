//! Bad input against `gelstore serve`, over raw HTTP so that nothing is
//! cleaned up by a client: each request gets its XRPC error (name and
//! status), the server keeps serving, and nothing stored is lost or
//! half-written. Also: other `gelstore` commands on a served folder fail at
//! once, naming the server.

use crate::support::serve;

use std::process::Command;

use serde_json::{Value, json};
use serve::{Serve, http};

const NOTE: &str = "app.example.note";

struct Peer {
    serve: Serve,
    token: String,
}

impl Peer {
    fn post(&self, nsid: &str, body: &Value) -> serve::Response {
        self.raw_post(nsid, "application/json", body.to_string().as_bytes(), true)
    }

    fn raw_post(&self, nsid: &str, ctype: &str, body: &[u8], auth: bool) -> serve::Response {
        let bearer = format!("Bearer {}", self.token);
        let mut headers = vec![("content-type", ctype)];
        if auth {
            headers.push(("authorization", bearer.as_str()));
        }
        http(
            &self.serve.addr(),
            "POST",
            &format!("/xrpc/{nsid}"),
            &headers,
            body,
        )
    }

    fn get(&self, path_and_query: &str) -> serve::Response {
        http(
            &self.serve.addr(),
            "GET",
            &format!("/xrpc/{path_and_query}"),
            &[],
            b"",
        )
    }

    fn head(&self) -> Value {
        let r = self.get(&format!(
            "com.atproto.sync.getLatestCommit?did={}",
            enc(&self.serve.did)
        ));
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    }

    fn notes(&self) -> Vec<String> {
        let r = self.get(&format!(
            "com.atproto.repo.listRecords?repo={}&collection={NOTE}&limit=100&reverse=true",
            enc(&self.serve.did)
        ));
        assert_eq!(r.status, 200, "{}", r.text());
        serve::record_keys(&r.json())
    }

    fn create(&self, rkey: &str) -> serve::Response {
        self.post(
            "com.atproto.repo.createRecord",
            &json!({"repo": self.serve.did, "collection": NOTE, "rkey": rkey,
                    "record": {"$type": NOTE, "text": rkey}}),
        )
    }
}

fn enc(s: &str) -> String {
    s.replace('%', "%25").replace(':', "%3A")
}

/// The error, with a message a person can read.
#[track_caller]
fn expect(r: &serve::Response, status: u16, error: &str) {
    r.expect_error(status, error);
    assert!(r.json()["message"].is_string(), "no message: {}", r.text());
}

#[test]
fn bad_requests_get_named_errors_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let serve = Serve::start_in(
        &data,
        &["--max-body-bytes", "40000", "--max-blob-bytes", "50000"],
    );
    let token = serve.access_token();
    let peer = Peer { serve, token };
    for k in ["a", "b", "c"] {
        assert_eq!(peer.create(k).status, 200);
    }
    let head = peer.head();
    let did = peer.serve.did.clone();

    // Malformed bodies.
    let create = "com.atproto.repo.createRecord";
    let malformed: [(&str, &[u8]); 6] = [
        ("application/json", b"{\"repo\":"),
        ("application/json", b"[1,2]"),
        ("application/json", b"\xff\xfe"),
        ("application/cbor", b"\xa1\x63abc"),
        ("application/cbor", b"\xff\x00\x01"),
        ("text/plain", b"{}"),
    ];
    for (content_type, body) in malformed {
        expect(
            &peer.raw_post(create, content_type, body, true),
            400,
            "InvalidRequest",
        );
    }
    expect(
        &peer.post(
            create,
            &json!({"repo": did, "collection": NOTE, "record": "not an object"}),
        ),
        400,
        "InvalidRequest",
    );
    expect(
        &peer.post(
            create,
            &json!({"repo": did, "collection": "not an nsid", "record": {"$type": "x"}}),
        ),
        400,
        "InvalidRequest",
    );
    // Well-formed CBOR of a valid input is accepted like JSON.
    let cbor = gelstore::model::encode_dag_cbor(
        &gelstore::model::json_to_ipld(&json!({"repo": did, "collection": NOTE, "rkey": "cbor",
            "record": {"$type": NOTE, "text": "sent as CBOR"}}))
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        peer.raw_post(create, "application/cbor", &cbor, true)
            .status,
        200
    );

    // Oversize bodies and blobs: 413, declared or streamed.
    let big = vec![b' '; 50_000];
    expect(
        &peer.raw_post(create, "application/json", &big, true),
        413,
        "PayloadTooLarge",
    );
    let blob = vec![7u8; 60_000];
    expect(
        &peer.raw_post("com.atproto.repo.uploadBlob", "image/png", &blob, true),
        413,
        "PayloadTooLarge",
    );
    let small = vec![7u8; 40_000];
    assert_eq!(
        peer.raw_post("com.atproto.repo.uploadBlob", "image/png", &small, true)
            .status,
        200
    );

    // Invalid records of our lexicons, taken keys, swaps.
    expect(
        &peer.post(
            create,
            &json!({"repo": did, "collection": "chat.gel.assistant.message",
                    "record": {"$type": "chat.gel.assistant.message", "role": 42}}),
        ),
        400,
        "InvalidRecord",
    );
    expect(&peer.create("a"), 400, "InvalidSwap");
    expect(
        &peer.post(
            "com.atproto.repo.putRecord",
            &json!({"repo": did, "collection": NOTE, "rkey": "a", "swapRecord": null,
                    "record": {"$type": NOTE}}),
        ),
        400,
        "InvalidSwap",
    );
    expect(
        &peer.post(
            "com.atproto.repo.putRecord",
            &json!({"repo": did, "collection": NOTE, "rkey": "a", "swapRecord": "nonsense",
                    "record": {"$type": NOTE}}),
        ),
        400,
        "InvalidRequest",
    );
    // A batch with one bad write writes nothing.
    let before = peer.head();
    expect(
        &peer.post(
            "com.atproto.repo.applyWrites",
            &json!({"repo": did, "writes": [
                {"$type": "com.atproto.repo.applyWrites#create", "collection": NOTE, "rkey": "d",
                 "value": {"$type": NOTE}},
                {"$type": "com.atproto.repo.applyWrites#delete", "collection": NOTE, "rkey": "nope"},
            ]}),
        ),
        400,
        "RecordNotFound",
    );
    assert_eq!(peer.head(), before, "a failed batch made a commit");
    let too_many: Vec<Value> = (0..201)
        .map(|i| {
            json!({"$type": "com.atproto.repo.applyWrites#create", "collection": NOTE,
                         "rkey": format!("m{i}"), "value": {"$type": NOTE}})
        })
        .collect();
    expect(
        &peer.post(
            "com.atproto.repo.applyWrites",
            &json!({"repo": did, "writes": too_many}),
        ),
        400,
        "InvalidRequest",
    );

    // Auth.
    expect(
        &peer.raw_post(create, "application/json", b"{}", false),
        401,
        "AuthenticationRequired",
    );
    let addr = peer.serve.addr();
    let with = |auth: &str| {
        http(
            &addr,
            "POST",
            &format!("/xrpc/{create}"),
            &[
                ("content-type", "application/json"),
                ("authorization", auth),
            ],
            json!({"repo": did, "collection": NOTE, "record": {"$type": NOTE}})
                .to_string()
                .as_bytes(),
        )
    };
    expect(&with("Bearer nonsense"), 400, "InvalidToken");
    expect(&with("Basic dXNlcjpwYXNz"), 401, "AuthenticationRequired");
    let forged = serve::forged_jwt(&peer.token);
    expect(&with(&format!("Bearer {forged}")), 400, "InvalidToken");
    let login = http(
        &addr,
        "POST",
        "/xrpc/com.atproto.server.createSession",
        &[("content-type", "application/json")],
        json!({"identifier": did, "password": "wrong"})
            .to_string()
            .as_bytes(),
    );
    expect(&login, 401, "AuthenticationRequired");
    let login = http(
        &addr,
        "POST",
        "/xrpc/com.atproto.server.createSession",
        &[("content-type", "application/json")],
        json!({"identifier": did, "password": peer.serve.password})
            .to_string()
            .as_bytes(),
    );
    let refresh = login.json()["refreshJwt"].as_str().unwrap().to_owned();
    expect(&with(&format!("Bearer {refresh}")), 400, "InvalidToken");
    // Another account's repo.
    expect(
        &peer.post(
            create,
            &json!({"repo": "did:plc:abcdefghijklmnopqrstuvwx", "collection": NOTE,
                                    "record": {"$type": NOTE}}),
        ),
        400,
        "RepoNotFound",
    );

    // Methods.
    expect(
        &peer.get("com.example.nothing.here"),
        501,
        "MethodNotImplemented",
    );
    expect(&peer.get(create), 400, "InvalidRequest");
    expect(
        &peer.get(&format!("com.atproto.repo.listRecords?repo={}", enc(&did))),
        400,
        "InvalidRequest",
    );
    expect(
        &peer.get(&format!(
            "com.atproto.repo.listRecords?repo={}&collection={NOTE}&limit=1000",
            enc(&did)
        )),
        400,
        "InvalidRequest",
    );
    expect(
        &peer.get("com.atproto.sync.getRepo?did=x&since=nope"),
        400,
        "RepoNotFound",
    );
    expect(
        &peer.get(&format!(
            "com.atproto.sync.getRepo?did={}&since=nope",
            enc(&did)
        )),
        400,
        "InvalidRequest",
    );
    expect(
        &peer.get("com.atproto.repo.getRecord?repo=x&collection=a.b.c&rkey=%zz"),
        400,
        "InvalidRequest",
    );

    // Still serving, nothing lost: a, b, c and cbor are there, nothing else.
    assert_eq!(peer.notes(), ["a", "b", "c", "cbor"]);
    assert_ne!(peer.head(), head, "the CBOR create made one commit");

    // While it runs, commands that need the store fail at once and name it…
    let gel = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_gelstore"))
            .arg("--data")
            .arg(&data)
            .args(args)
            .env("GELSTORE_LOCK_WAIT_SECS", "60")
            .output()
            .unwrap()
    };
    let out = gel(&["repo", "check"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("pid {}", peer.serve.pid()))
            && stderr.contains(&peer.serve.service),
        "{stderr}"
    );
    // …and reads go through the server: the same answers as the store's.
    let served_ls = gel(&["repo", "ls", NOTE]);
    assert!(
        served_ls.status.success(),
        "{}",
        String::from_utf8_lossy(&served_ls.stderr)
    );
    assert!(String::from_utf8_lossy(&served_ls.stderr).contains("through gelstore serve"));
    let served_get = gel(&["repo", "get", NOTE, "a", "--format", "json"]);
    assert!(served_get.status.success());
    let missing = gel(&["repo", "get", NOTE, "nope"]);
    assert_eq!(
        missing.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
    let backup = data.parent().unwrap().join("live.car");
    let served_export = gel(&["repo", "export", "--out", backup.to_str().unwrap()]);
    assert!(
        served_export.status.success(),
        "{}",
        String::from_utf8_lossy(&served_export.stderr)
    );

    // Stopped, the store checks clean and holds the records.
    drop(peer);
    let local = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_gelstore"))
            .arg("--data")
            .arg(&data)
            .args(args)
            .output()
            .unwrap()
    };
    assert_eq!(local(&["repo", "ls", NOTE]).stdout, served_ls.stdout);
    assert_eq!(
        local(&["repo", "get", NOTE, "a", "--format", "json"]).stdout,
        served_get.stdout
    );
    let stopped = data.parent().unwrap().join("stopped.car");
    assert!(
        local(&["repo", "export", "--out", stopped.to_str().unwrap()])
            .status
            .success()
    );
    assert_eq!(
        std::fs::read(&backup).unwrap(),
        std::fs::read(&stopped).unwrap(),
        "the live backup is the store's export"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_gelstore"))
        .arg("--data")
        .arg(&data)
        .args(["repo", "check"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_gelstore"))
        .arg("--data")
        .arg(&data)
        .args(["repo", "ls", NOTE])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 4);
    assert!(!data.join("serve.json").exists(), "serve.json left behind");
}

#[test]
fn a_restarted_server_keeps_its_did_account_and_records() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let serve = Serve::start_in(&data, &["--handle", "alice.test"]);
    let did = serve.did.clone();
    let token = serve.access_token();
    let peer = Peer { serve, token };
    assert_eq!(peer.create("kept").status, 200);
    drop(peer);
    let serve = Serve::start_in(&data, &[]);
    assert_eq!(serve.did, did, "the DID is fixed at creation");
    assert_eq!(serve.handle, "alice.test");
    let token = serve.access_token();
    let peer = Peer { serve, token };
    assert_eq!(peer.notes(), ["kept"]);
}

#[test]
fn concurrent_writers_each_land_exactly_once() {
    let serve = Serve::start();
    let token = serve.access_token();
    let (addr, did) = (serve.addr(), serve.did.clone());
    let threads: Vec<_> = (0..4)
        .map(|w| {
            let (addr, did, token) = (addr.clone(), did.clone(), token.clone());
            std::thread::spawn(move || {
                for i in 0..10 {
                    let body = json!({"repo": did, "collection": NOTE, "rkey": format!("w{w}-{i}"),
                                      "record": {"$type": NOTE, "text": "x"}});
                    let r = http(
                        &addr,
                        "POST",
                        "/xrpc/com.atproto.repo.createRecord",
                        &[
                            ("content-type", "application/json"),
                            ("authorization", &format!("Bearer {token}")),
                        ],
                        body.to_string().as_bytes(),
                    );
                    assert_eq!(r.status, 200, "{}", r.text());
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let peer = Peer { serve, token };
    let mut expected: Vec<String> = (0..4)
        .flat_map(|w| (0..10).map(move |i| format!("w{w}-{i}")))
        .collect();
    expected.sort();
    assert_eq!(peer.notes(), expected);
}

/// Behind a proxy: `--public-url` names what clients use (the DID document's
/// endpoint and a new account's did:web), while commands on this machine
/// still reach the listen address. A URL a did:web cannot name is refused.
#[test]
fn a_public_url_names_the_service_and_the_did() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let serve = Serve::start_at(
        &data,
        &listen,
        &["--public-url", "https://PDS.example.test/"],
    );
    assert_eq!(serve.service, "https://pds.example.test");
    assert_eq!(serve.did, "did:web:pds.example.test");
    let doc = serve::http(&listen, "GET", "/.well-known/did.json", &[], b"").json();
    assert_eq!(doc["id"], "did:web:pds.example.test");
    assert_eq!(
        doc["service"][0]["serviceEndpoint"],
        "https://pds.example.test"
    );
    let marker: serde_json::Value =
        serde_json::from_slice(&std::fs::read(data.join("serve.json")).unwrap()).unwrap();
    assert_eq!(marker["url"], format!("http://localhost:{port}"));
    let ls = Command::new(env!("CARGO_BIN_EXE_gelstore"))
        .arg("--data")
        .arg(&data)
        .args(["repo", "ls"])
        .output()
        .unwrap();
    assert!(
        ls.status.success(),
        "{}",
        String::from_utf8_lossy(&ls.stderr)
    );
    drop(serve);

    let refused = Command::new(env!("CARGO_BIN_EXE_gelstore"))
        .arg("--data")
        .arg(dir.path().join("other"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--public-url",
            "https://10.0.0.1",
        ])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("not an IP address"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}
