//! The `chat.gel.assistant.*` methods of `gelstore serve` on a folder whose
//! sealed chat was written by the `gelstore chat` commands: the thread and
//! the waiting approval are found from clear metadata, nothing sealed is
//! opened, and answerApproval refuses by name what a server of sealed
//! records cannot do.

use crate::support::serve;

use std::path::{Path, PathBuf};

use serde_json::json;
use serve::{Serve, http};

/// The command's answer: its first line.
fn gel_ok(data: &Path, args: &[&str]) -> String {
    serve::first_line(&serve::gel_ok(data, args))
}

fn stream(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/streams")
        .join(name)
        .join("input.jsonl")
}

#[test]
fn thread_and_approvals_of_a_sealed_chat() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    gel_ok(&data, &["device", "init"]);
    let chat = gel_ok(&data, &["chat", "new", "--title", "Cleanup"]);
    let msg = gel_ok(
        &data,
        &["chat", "send", "--chat", &chat, "Delete my drafts"],
    );
    let events = stream("approval_waiting");
    gel_ok(
        &data,
        &[
            "chat",
            "reply",
            "--to",
            &msg,
            "--events",
            events.to_str().unwrap(),
            "--approve-tools",
            "delete_files,list_files",
        ],
    );
    let reply = format!("{msg}.r0");

    let serve = Serve::start_in(&data, &[]);
    let addr = serve.addr();
    let get = |q: &str| http(&addr, "GET", &format!("/xrpc/{q}"), &[], b"");

    let thread = get(&format!("chat.gel.assistant.getThread?chat={chat}"));
    assert_eq!(thread.status, 200, "{}", thread.text());
    let t = thread.json();
    assert!(
        t["chat"]["uri"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/chat.gel.assistant.chat/{chat}"))
    );
    let keys: Vec<&str> = t["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["uri"].as_str().unwrap().rsplit('/').next().unwrap())
        .collect();
    assert_eq!(keys, [msg.as_str(), reply.as_str()]);
    // Sealed stays sealed: no plaintext anywhere in the answer.
    assert!(!thread.text().contains("Delete my drafts"));
    assert!(!thread.text().contains("Cleanup"));
    // Paging.
    let page = get(&format!("chat.gel.assistant.getThread?chat={chat}&limit=1")).json();
    assert_eq!(page["messages"].as_array().unwrap().len(), 1);
    let rest = get(&format!(
        "chat.gel.assistant.getThread?chat={chat}&limit=1&cursor={}",
        page["cursor"].as_str().unwrap()
    ))
    .json();
    assert!(
        rest["messages"][0]["uri"]
            .as_str()
            .unwrap()
            .ends_with(&reply)
    );
    let missing = get("chat.gel.assistant.getThread?chat=3lbqzdw5pzk22");
    assert_eq!(
        (missing.status, missing.error().as_str()),
        (400, "ChatNotFound")
    );

    // A forged approval request beside it: a waiting reply with no
    // sealed content, written with the account's token. Never listed.
    let did = t["chat"]["uri"].as_str().unwrap()[5..]
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let mut forged = t["messages"][1]["value"].clone();
    forged.as_object_mut().unwrap().remove("content");
    let planted = http(
        &addr,
        "POST",
        "/xrpc/com.atproto.repo.createRecord",
        &[
            ("content-type", "application/json"),
            ("authorization", &format!("Bearer {}", serve.access_token())),
        ],
        json!({"repo": did, "collection": "chat.gel.assistant.message",
               "rkey": "3lbqzdw5pzk24.r0", "record": forged})
        .to_string()
        .as_bytes(),
    );
    assert_eq!(planted.status, 200, "{}", planted.text());
    let approvals = get("chat.gel.assistant.listApprovals").json();
    let list = approvals["replies"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{approvals}");
    assert!(list[0]["uri"].as_str().unwrap().ends_with(&reply));
    assert!(list[0]["chat"].as_str().unwrap().ends_with(&chat));
    let other_chat = get("chat.gel.assistant.listApprovals?chat=3lbqzdw5pzk22").json();
    assert_eq!(other_chat["replies"].as_array().unwrap().len(), 0);

    let token = serve.access_token();
    let bearer = format!("Bearer {token}");
    let answer = |reply: &str, auth: bool| {
        let mut headers = vec![("content-type", "application/json")];
        if auth {
            headers.push(("authorization", bearer.as_str()));
        }
        http(
            &addr,
            "POST",
            "/xrpc/chat.gel.assistant.answerApproval",
            &headers,
            json!({"reply": reply, "decisions": []})
                .to_string()
                .as_bytes(),
        )
    };
    assert_eq!(answer(&reply, false).status, 401);
    let unknown = answer(&msg, true);
    assert_eq!(unknown.error(), "PendingUnknown", "{}", unknown.text());
    assert_eq!(answer("3lbqzdw5pzk22.r0", true).error(), "PendingUnknown");
    let refused = answer(&reply, true);
    assert_eq!(
        (refused.status, refused.error().as_str()),
        (400, "InvalidRequest")
    );
    assert!(refused.text().contains("sealed"), "{}", refused.text());
    // A keyless server cannot stream a reply (see server::assistant).
    assert_eq!(
        get(&format!("chat.gel.assistant.subscribeReply?reply={reply}")).status,
        501
    );
}
