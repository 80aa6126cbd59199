//! The corners of the write inputs, over raw HTTP: `null` for an optional
//! field is absent, the account is checked before the rest of the input,
//! a record is checked by the repository (its lexicon first), and the
//! answers keep their shapes.

use crate::support::serve;

use serde_json::{Value, json};
use serve::{Serve, http};

const NOTE: &str = "app.example.note";
const MESSAGE: &str = "chat.gel.assistant.message";

struct Peer {
    serve: Serve,
    token: String,
}

impl Peer {
    fn start() -> Peer {
        let serve = Serve::start();
        let token = serve.access_token();
        Peer { serve, token }
    }

    fn post(&self, nsid: &str, body: &Value) -> serve::Response {
        let bearer = format!("Bearer {}", self.token);
        http(
            &self.serve.addr(),
            "POST",
            &format!("/xrpc/{nsid}"),
            &[
                ("content-type", "application/json"),
                ("authorization", &bearer),
            ],
            body.to_string().as_bytes(),
        )
    }

    fn did(&self) -> &str {
        &self.serve.did
    }
}

#[track_caller]
fn ok(r: &serve::Response) -> Value {
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn enc(s: &str) -> String {
    s.replace('%', "%25").replace(':', "%3A")
}

fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    k.sort();
    k
}

#[test]
fn null_optional_fields_read_as_absent() {
    let peer = Peer::start();
    let did = peer.did().to_owned();
    let created = ok(&peer.post(
        "com.atproto.repo.createRecord",
        &json!({"repo": did, "collection": NOTE, "rkey": null, "validate": null,
                "swapCommit": null, "record": {"$type": NOTE, "text": "a", "gone": null}}),
    ));
    assert_eq!(keys(&created), ["cid", "commit", "uri", "validationStatus"]);
    assert_eq!(keys(&created["commit"]), ["cid", "rev"]);
    assert_eq!(created["validationStatus"], "unknown");
    let rkey = created["uri"].as_str().unwrap().rsplit('/').next().unwrap();
    // The record keeps its null member.
    let got = http(
        &peer.serve.addr(),
        "GET",
        &format!(
            "/xrpc/com.atproto.repo.getRecord?repo={}&collection={NOTE}&rkey={rkey}",
            enc(&did)
        ),
        &[],
        b"",
    );
    assert_eq!(ok(&got)["value"]["gone"], Value::Null);

    // putRecord: an absent swapRecord overwrites; a null one creates only.
    let put = ok(&peer.post(
        "com.atproto.repo.putRecord",
        &json!({"repo": did, "collection": NOTE, "rkey": "p", "swapRecord": null,
                "swapCommit": null, "validate": null, "record": {"$type": NOTE}}),
    ));
    assert_eq!(keys(&put), ["cid", "commit", "uri", "validationStatus"]);
    peer.post(
        "com.atproto.repo.putRecord",
        &json!({"repo": did, "collection": NOTE, "rkey": "p", "swapRecord": null,
                    "record": {"$type": NOTE, "text": "other"}}),
    )
    .expect_error(400, "InvalidSwap");
    // The same record again is a no-op without a commit.
    let same = ok(&peer.post(
        "com.atproto.repo.putRecord",
        &json!({"repo": did, "collection": NOTE, "rkey": "p", "record": {"$type": NOTE}}),
    ));
    assert_eq!(keys(&same), ["cid", "uri", "validationStatus"]);
    assert_eq!(same["cid"], put["cid"]);

    // deleteRecord: a null swapRecord is no swap; absent is a no-op.
    let gone = ok(&peer.post(
        "com.atproto.repo.deleteRecord",
        &json!({"repo": did, "collection": NOTE, "rkey": "nothing", "swapRecord": null,
                "swapCommit": null}),
    ));
    assert_eq!(gone, json!({}));
    let deleted = ok(&peer.post(
        "com.atproto.repo.deleteRecord",
        &json!({"repo": did, "collection": NOTE, "rkey": "p", "swapRecord": null}),
    ));
    assert_eq!(keys(&deleted), ["commit"]);

    // applyWrites: null rkey and swapCommit; a null value is a missing one.
    let applied = ok(&peer.post(
        "com.atproto.repo.applyWrites",
        &json!({"repo": did, "validate": null, "swapCommit": null, "writes": [
            {"$type": "com.atproto.repo.applyWrites#create", "collection": NOTE,
             "rkey": null, "value": {"$type": NOTE}},
        ]}),
    ));
    assert_eq!(keys(&applied), ["commit", "results"]);
    peer.post(
        "com.atproto.repo.applyWrites",
        &json!({"repo": did, "writes": [
            {"$type": "com.atproto.repo.applyWrites#create", "collection": NOTE,
             "value": null},
        ]}),
    )
    .expect_error(400, "InvalidRequest");

    // createSession: the fields the server does not read are not read.
    let login = http(
        &peer.serve.addr(),
        "POST",
        "/xrpc/com.atproto.server.createSession",
        &[("content-type", "application/json")],
        json!({"identifier": did, "password": peer.serve.password,
               "authFactorToken": null, "allowTakendown": "yes"})
        .to_string()
        .as_bytes(),
    );
    let session = ok(&login);
    assert_eq!(
        keys(&session),
        [
            "accessJwt",
            "active",
            "did",
            "didDoc",
            "handle",
            "refreshJwt"
        ]
    );
}

#[test]
fn the_account_is_checked_before_the_rest_of_the_input() {
    let peer = Peer::start();
    let did = peer.did().to_owned();
    let foreign = [
        "did:plc:abcdefghijklmnopqrstuvwx",
        "bob.example.com",
        "x",
        "",
    ];
    for repo in foreign {
        peer.post(
            "com.atproto.repo.createRecord",
            &json!({"repo": repo, "collection": NOTE, "record": {"$type": NOTE}}),
        )
        .expect_error(400, "RepoNotFound");
        // A malformed collection or write is the repository's to find.
        peer.post(
            "com.atproto.repo.createRecord",
            &json!({"repo": repo, "collection": "not an nsid", "record": {"$type": NOTE}}),
        )
        .expect_error(400, "RepoNotFound");
        peer.post(
            "com.atproto.repo.applyWrites",
            &json!({"repo": repo, "writes": [{"$type": "nonsense"}]}),
        )
        .expect_error(400, "RepoNotFound");
    }
    // A repo that is not a string is not an account.
    peer.post(
        "com.atproto.repo.deleteRecord",
        &json!({"repo": 42, "collection": NOTE, "rkey": "a"}),
    )
    .expect_error(400, "InvalidRequest");
    peer.post(
        "com.atproto.repo.putRecord",
        &json!({"repo": did, "collection": "not an nsid", "rkey": "a",
                    "record": {"$type": NOTE}}),
    )
    .expect_error(400, "InvalidRequest");
}

#[test]
fn records_are_checked_by_the_repository_lexicon_first() {
    let peer = Peer::start();
    let did = peer.did().to_owned();
    // A known lexicon: a float or a bad link is an invalid record.
    for bad in [json!(1.5), json!({"$link": "nope"}), json!({"$bytes": 7})] {
        peer.post(
            "com.atproto.repo.createRecord",
            &json!({"repo": did, "collection": MESSAGE,
                        "record": {"$type": MESSAGE, "role": "user", "odd": bad}}),
        )
        .expect_error(400, "InvalidRecord");
    }
    // No lexicon: the data model's own errors.
    for bad in [
        json!(1.5),
        json!({"$link": "nope"}),
        json!({"$bytes": "123"}),
        json!({"$type": ""}),
    ] {
        peer.post(
            "com.atproto.repo.applyWrites",
            &json!({"repo": did, "writes": [
                {"$type": "com.atproto.repo.applyWrites#create", "collection": NOTE,
                 "value": {"$type": NOTE, "odd": bad}},
            ]}),
        )
        .expect_error(400, "InvalidRequest");
    }
    for record in [json!(null), json!("text"), json!({"$type": "other.kind"})] {
        peer.post(
            "com.atproto.repo.createRecord",
            &json!({"repo": did, "collection": NOTE, "record": record}),
        )
        .expect_error(400, "InvalidRequest");
    }
    // Bytes and links come back as they were written.
    let cid = "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm";
    let record = json!({"$type": NOTE, "b": {"$bytes": "aGVsbG8"}, "l": {"$link": cid}});
    let created = ok(&peer.post(
        "com.atproto.repo.createRecord",
        &json!({"repo": did, "collection": NOTE, "rkey": "bl", "record": record}),
    ));
    assert_eq!(created["validationStatus"], "unknown");
    let got = http(
        &peer.serve.addr(),
        "GET",
        &format!(
            "/xrpc/com.atproto.repo.getRecord?repo={}&collection={NOTE}&rkey=bl",
            enc(&did)
        ),
        &[],
        b"",
    );
    let got = ok(&got);
    assert_eq!(keys(&got), ["cid", "uri", "value"]);
    assert_eq!(got["value"], record);
    assert_eq!(got["cid"], created["cid"]);
}

#[test]
fn apply_writes_answers_each_write() {
    let peer = Peer::start();
    let did = peer.did().to_owned();
    let create = |rkey: &str, text: &str| {
        json!({"$type": "com.atproto.repo.applyWrites#create", "collection": NOTE,
               "rkey": rkey, "value": {"$type": NOTE, "text": text}})
    };
    let applied = ok(&peer.post(
        "com.atproto.repo.applyWrites",
        &json!({"repo": did, "writes": [
            create("a", "a"),
            create("b", "b"),
            {"$type": "com.atproto.repo.applyWrites#update", "collection": NOTE, "rkey": "a",
             "value": {"$type": NOTE, "text": "a2"}},
            {"$type": "com.atproto.repo.applyWrites#delete", "collection": NOTE, "rkey": "b",
             "value": 1.5},
        ]}),
    ));
    let results = applied["results"].as_array().unwrap();
    let types: Vec<&str> = results
        .iter()
        .map(|r| r["$type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "com.atproto.repo.applyWrites#createResult",
            "com.atproto.repo.applyWrites#createResult",
            "com.atproto.repo.applyWrites#updateResult",
            "com.atproto.repo.applyWrites#deleteResult",
        ]
    );
    assert_eq!(
        keys(&results[0]),
        ["$type", "cid", "uri", "validationStatus"]
    );
    assert_eq!(keys(&results[3]), ["$type"]);
    assert_eq!(results[0]["uri"], format!("at://{did}/{NOTE}/a"));
    // Each created record has a CID, even the one a later write deleted.
    assert!(results[1]["cid"].is_string(), "{applied}");
    assert_eq!(results[0]["cid"], results[2]["cid"]);
}

#[test]
fn read_answers_keep_their_shapes() {
    let peer = Peer::start();
    let did = peer.did().to_owned();
    let get = |path: &str| {
        let bearer = format!("Bearer {}", peer.token);
        ok(&http(
            &peer.serve.addr(),
            "GET",
            &format!("/xrpc/{path}"),
            &[("authorization", &bearer)],
            b"",
        ))
    };
    for rkey in ["a", "b"] {
        ok(&peer.post(
            "com.atproto.repo.createRecord",
            &json!({"repo": did, "collection": NOTE, "rkey": rkey, "record": {"$type": NOTE}}),
        ));
    }
    let repo = enc(&did);
    let page = get(&format!(
        "com.atproto.repo.listRecords?repo={repo}&collection={NOTE}&limit=1"
    ));
    assert_eq!(keys(&page), ["cursor", "records"]);
    assert_eq!(page["cursor"], "b");
    assert_eq!(keys(&page["records"][0]), ["cid", "uri", "value"]);
    let all = get(&format!(
        "com.atproto.repo.listRecords?repo={repo}&collection={NOTE}"
    ));
    assert_eq!(keys(&all), ["records"]);
    let described = get(&format!("com.atproto.repo.describeRepo?repo={repo}"));
    assert_eq!(
        keys(&described),
        ["collections", "did", "didDoc", "handle", "handleIsCorrect"]
    );
    assert_eq!(described["collections"], json!([NOTE]));
    assert_eq!(described["handleIsCorrect"], true);
    assert_eq!(described["didDoc"]["id"], did);

    let bearer = format!("Bearer {}", peer.token);
    let uploaded = ok(&http(
        &peer.serve.addr(),
        "POST",
        "/xrpc/com.atproto.repo.uploadBlob",
        &[("content-type", "image/png"), ("authorization", &bearer)],
        b"not really a png",
    ));
    assert_eq!(keys(&uploaded), ["blob"]);
    assert_eq!(
        keys(&uploaded["blob"]),
        ["$type", "mimeType", "ref", "size"]
    );
    assert_eq!(uploaded["blob"]["$type"], "blob");
    assert_eq!(uploaded["blob"]["mimeType"], "image/png");
    assert_eq!(uploaded["blob"]["size"], 16);
    assert_eq!(keys(&uploaded["blob"]["ref"]), ["$link"]);

    let server = get("com.atproto.server.describeServer");
    assert_eq!(
        keys(&server),
        [
            "availableUserDomains",
            "did",
            "inviteCodeRequired",
            "links",
            "phoneVerificationRequired"
        ]
    );
    assert_eq!(server["links"], json!({}));
    assert_eq!(server["availableUserDomains"], json!([]));
    let session = get("com.atproto.server.getSession");
    assert_eq!(keys(&session), ["active", "did", "didDoc", "handle"]);
    assert_eq!(session["didDoc"], described["didDoc"]);
    let resolved = get(&format!(
        "com.atproto.identity.resolveHandle?handle={}",
        peer.serve.handle
    ));
    assert_eq!(resolved, json!({"did": did}));

    let latest = get(&format!("com.atproto.sync.getLatestCommit?did={repo}"));
    assert_eq!(keys(&latest), ["cid", "rev"]);
    let status = get(&format!("com.atproto.sync.getRepoStatus?did={repo}"));
    assert_eq!(keys(&status), ["active", "did", "rev"]);
    assert_eq!(status["rev"], latest["rev"]);
    let repos = get("com.atproto.sync.listRepos");
    assert_eq!(
        repos,
        json!({"repos": [{"did": did, "head": latest["cid"], "rev": latest["rev"],
                          "active": true}]})
    );
    assert_eq!(
        get("com.atproto.sync.listRepos?cursor=x"),
        json!({"repos": []})
    );
}
