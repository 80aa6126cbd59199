//! `gelstore serve --assistant CMD`: the server as a device of the account
//! that runs pending replies with a model command and streams them over
//! `chat.gel.assistant.subscribeReply`; `answerApproval` writes the sealed
//! answer and the pending reply to it. The command is
//! `tests/assistant/replay.py`, which replays recorded model streams.
//!
//! A websocket client (tungstenite) reads the frames; each is decoded with
//! the generated `SubscribeReplyMessage::from_frame` and validated against
//! the lexicon.

use crate::support::fixtures;
use crate::support::provider;
use crate::support::serve;

use std::net::TcpStream;
use std::path::Path;

use fixtures::split_frame;
use gelstore::lexicon::chat::gel::assistant::subscribe_reply::SubscribeReplyMessage;
use gelstore::lexicon_runtime::Validate;
use serde_json::{Value, json};
use serve::{Serve, first_line, gel_ok, http};
use tungstenite::Message;

fn assistant_args() -> Vec<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/assistant/replay.py");
    vec![
        "--assistant".into(),
        format!("python3 {}", script.display()),
        "--approve-tools".into(),
        "delete_files".into(),
    ]
}

fn start(data: &Path) -> Serve {
    start_with(data, &[])
}

fn start_with(data: &Path, extra: &[&str]) -> Serve {
    let mut args = assistant_args();
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Serve::start_in(data, &args)
}

/// One frame as the subscriber saw it.
#[derive(Debug, Clone)]
enum Frame {
    Event { t: String, body: Value },
    Error { error: String },
}

impl Frame {
    fn t(&self) -> &str {
        match self {
            Frame::Event { t, .. } => t,
            Frame::Error { error } => error,
        }
    }
    fn seq(&self) -> i64 {
        match self {
            Frame::Event { body, .. } => body["seq"].as_i64().unwrap(),
            Frame::Error { .. } => -1,
        }
    }
}

/// Subscribes to `reply` (with `cursor`) and reads every frame until the
/// server closes the stream.
fn subscribe(serve: &Serve, token: &str, reply: &str, cursor: Option<u64>) -> Vec<Frame> {
    let mut url = format!(
        "ws://{}/xrpc/chat.gel.assistant.subscribeReply?reply={reply}",
        serve.addr()
    );
    if let Some(c) = cursor {
        url.push_str(&format!("&cursor={c}"));
    }
    let mut request = tungstenite::client::IntoClientRequest::into_client_request(url).unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    let stream = TcpStream::connect(serve.addr()).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let (mut socket, _) = tungstenite::client(request, stream).expect("websocket upgrade");
    let mut frames = Vec::new();
    loop {
        match socket.read() {
            Ok(Message::Binary(bytes)) => {
                let (header, body) = split_frame(&bytes);
                let header = gelstore::model::ipld_to_json(&header).unwrap();
                if header["op"] == -1 {
                    let body = gelstore::model::ipld_to_json(&body).unwrap();
                    frames.push(Frame::Error {
                        error: body["error"].as_str().unwrap().to_owned(),
                    });
                    continue;
                }
                let t = header["t"].as_str().unwrap().to_owned();
                let message = SubscribeReplyMessage::from_frame(&t, body.clone())
                    .unwrap_or_else(|e| panic!("{t}: {e}"));
                assert!(
                    !matches!(message, SubscribeReplyMessage::Unknown(_)),
                    "unknown frame type {t}"
                );
                message
                    .validate()
                    .unwrap_or_else(|e| panic!("{t} does not validate: {e:?}"));
                frames.push(Frame::Event {
                    t,
                    body: gelstore::model::ipld_to_json(&body).unwrap(),
                });
            }
            Ok(Message::Close(_)) => break,
            Ok(_) => {}
            Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => break,
            Err(e) => panic!("websocket: {e}"),
        }
    }
    frames
}

fn kinds(frames: &[Frame]) -> Vec<&str> {
    frames.iter().map(Frame::t).collect()
}

fn post(serve: &Serve, token: &str, nsid: &str, body: Value) -> serve::Response {
    http(
        &serve.addr(),
        "POST",
        &format!("/xrpc/{nsid}"),
        &[
            ("content-type", "application/json"),
            ("authorization", &format!("Bearer {token}")),
        ],
        body.to_string().as_bytes(),
    )
}

fn get(serve: &Serve, path: &str) -> serve::Response {
    http(&serve.addr(), "GET", &format!("/xrpc/{path}"), &[], b"")
}

fn get_auth(serve: &Serve, token: &str, path: &str) -> serve::Response {
    http(
        &serve.addr(),
        "GET",
        &format!("/xrpc/{path}"),
        &[("authorization", &format!("Bearer {token}"))],
        b"",
    )
}

/// The pending reply to `message` as a device of the account writes it
/// (with its authenticator, sealed under the chat key), made with
/// `gelstore chat ask` on a copy of `data` while no server holds it: what a
/// client device then sends the server. Returns the reply key and record.
fn sealed_ask(data: &Path, message: &str) -> (String, Value) {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            let target = to.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                copy(&e.path(), &target);
            } else {
                std::fs::copy(e.path(), &target).unwrap();
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let device = dir.path().join("device");
    copy(data, &device);
    let reply = first_line(&gel_ok(&device, &["chat", "ask", "--to", message]));
    let record = gel_ok(
        &device,
        &["repo", "get", "chat.gel.assistant.message", &reply],
    );
    (reply, serde_json::from_str(&record).unwrap())
}

/// Asks for a reply the way a client device does: `createRecord` of the
/// pending reply it sealed (see [`sealed_ask`]).
fn ask(serve: &Serve, token: &str, asked: &(String, Value)) -> String {
    let (reply, record) = asked;
    let r = post(
        serve,
        token,
        "com.atproto.repo.createRecord",
        json!({
            "repo": serve.did,
            "collection": "chat.gel.assistant.message",
            "rkey": reply,
            "record": record,
        }),
    );
    assert_eq!(r.status, 200, "createRecord: {}", r.text());
    reply.clone()
}

/// A pending reply made of clear fields alone, as anyone who can write the
/// repository (the PDS, the password holder) can: no authenticator.
fn forge_ask(serve: &Serve, token: &str, chat: &str, message: &str) -> String {
    let reply = format!("{message}.r0");
    let r = post(
        serve,
        token,
        "com.atproto.repo.createRecord",
        json!({
            "repo": serve.did,
            "collection": "chat.gel.assistant.message",
            "rkey": reply,
            "record": {
                "$type": "chat.gel.assistant.message",
                "chat": format!("at://{}/chat.gel.assistant.chat/{chat}", serve.did),
                "role": "assistant",
                "status": "pending",
                "model": {"provider": "evil", "id": "evil"},
                "createdAt": "2026-11-30T00:00:00.000Z",
            },
        }),
    );
    assert_eq!(r.status, 200, "createRecord: {}", r.text());
    reply
}

fn status_of(serve: &Serve, reply: &str) -> String {
    let r = get(
        serve,
        &format!(
            "com.atproto.repo.getRecord?repo={}&collection=chat.gel.assistant.message&rkey={reply}",
            serve.did.replace('%', "%25")
        ),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["value"]["status"].as_str().unwrap().to_owned()
}

/// `gelstore sync` of the device in `data` through `serve`.
fn sync_with(data: &Path, serve: &Serve) -> String {
    gel_ok(
        data,
        &[
            "sync",
            "--pds",
            &serve.service,
            "--identifier",
            &serve.handle,
            "--password",
            &serve.password,
        ],
    )
}

/// Pairs the server folder `srv` like any device, approved on `phone`:
/// its code, the approval, a sync through a keyless server on `listen`,
/// the join.
fn pair_server(srv: &Path, phone: &Path, listen: &str) {
    let code = first_line(&gel_ok(srv, &["device", "pair"]));
    gel_ok(phone, &["device", "approve", &code]);
    let serve = Serve::start_at(srv, listen, &[]);
    sync_with(phone, &serve);
    serve.stop();
    gel_ok(srv, &["device", "join"]);
}

/// The expected event kinds of a fixture, as frame types.
fn fixture_kinds(case: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/streams")
        .join(case)
        .join("expected.events.jsonl");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let snake = v["type"].as_str().unwrap();
            let mut t = String::from("#");
            let mut up = false;
            for c in snake.chars() {
                if c == '_' {
                    up = true;
                } else if up {
                    t.extend(c.to_uppercase());
                    up = false;
                } else {
                    t.push(c);
                }
            }
            t
        })
        .collect()
}

#[test]
fn the_assistant_runs_streams_and_answers_approvals() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // First start: a new account; --assistant makes the server its first
    // device. Then the user writes a chat on the folder (server stopped).
    let serve = start(&data);
    let did = serve.did.clone();
    serve.stop();
    assert!(data.join("device.json").is_file());
    let chat = first_line(&gel_ok(&data, &["chat", "new", "--title", "Cleanup"]));
    let message = first_line(&gel_ok(
        &data,
        &[
            "chat",
            "send",
            "--chat",
            &chat,
            "Delete my drafts STREAM:approval_waiting",
        ],
    ));

    let asked = sealed_ask(&data, &message);
    let serve = start(&data);
    assert_eq!(serve.did, did);
    let token = serve.access_token();
    let reply = ask(&serve, &token, &asked);
    let frames = subscribe(&serve, &token, &reply, None);
    assert_eq!(kinds(&frames), fixture_kinds("approval_waiting"));
    let seqs: Vec<i64> = frames.iter().map(Frame::seq).collect();
    assert_eq!(seqs, (1..=frames.len() as i64).collect::<Vec<_>>());
    let Frame::Event { body, .. } = frames.last().unwrap() else {
        panic!()
    };
    let pending_id = body["id"].as_str().unwrap().to_owned();
    assert!(
        pending_id.starts_with("pa-"),
        "the call's own pending-action id: {body}"
    );
    assert_ne!(pending_id, reply.as_str());
    assert_eq!(body["callId"], "toolu_11");
    // The deltas add up to the message the next frame replaces them with.
    let deltas: String = frames
        .iter()
        .filter(|f| f.t() == "#textDelta")
        .map(|f| match f {
            Frame::Event { body, .. } => body["text"].as_str().unwrap().to_owned(),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(deltas, "I will delete the drafts after you confirm.");
    assert_eq!(status_of(&serve, &reply), "waiting");

    // A cursor resumes after the seq the client saw; one past the end is
    // FutureCursor.
    let resumed = subscribe(&serve, &token, &reply, Some(5));
    assert_eq!(resumed.first().map(Frame::seq), Some(6));
    assert_eq!(resumed.len(), frames.len() - 5);
    let future = subscribe(&serve, &token, &reply, Some(999));
    assert_eq!(kinds(&future), ["FutureCursor"]);
    let missing = subscribe(&serve, &token, "3lbqzdw5pzk22.r0", None);
    assert_eq!(kinds(&missing), ["ReplyNotFound"]);

    // The approval is listed with its calls (the server can open them),
    // to the account's clients only.
    assert_eq!(get(&serve, "chat.gel.assistant.listApprovals").status, 401);
    let approvals = get_auth(&serve, &token, "chat.gel.assistant.listApprovals").json();
    assert_eq!(approvals["replies"].as_array().unwrap().len(), 1);
    assert_eq!(
        approvals["replies"][0]["calls"],
        json!([{"callId": "toolu_11", "tool": "delete_files"}])
    );

    // A decision quoting another pending-action id is refused.
    let wrong = post(
        &serve,
        &token,
        "chat.gel.assistant.answerApproval",
        json!({"reply": reply, "decisions": [{"callId": "toolu_11", "pendingId": "pa-aaaaaaaaaaaaaaaaaaaaaaaaaa", "decision": "approved"}]}),
    );
    assert_eq!(wrong.error(), "PendingUnknown", "{}", wrong.text());
    // answerApproval writes the sealed answer and a pending reply to it,
    // which the assistant runs: the approved call's result first.
    let answer = post(
        &serve,
        &token,
        "chat.gel.assistant.answerApproval",
        json!({"reply": reply, "decisions": [{"callId": "toolu_11", "pendingId": pending_id, "decision": "approved"}]}),
    );
    assert_eq!(answer.status, 200, "{}", answer.text());
    let answer = answer.json();
    let next = answer["reply"].as_str().unwrap().to_owned();
    let answer_key = answer["uri"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned();
    assert_eq!(next, format!("{answer_key}.r0"));
    let again = post(
        &serve,
        &token,
        "chat.gel.assistant.answerApproval",
        json!({"reply": reply, "decisions": []}),
    );
    assert_eq!(again.error(), "PendingResolved");
    let resumed = subscribe(&serve, &token, &next, None);
    let mut want = vec!["#toolResult".to_owned()];
    want.extend(fixture_kinds("plain_text_small_deltas"));
    assert_eq!(kinds(&resumed), want);
    let Frame::Event { body, .. } = &resumed[0] else {
        panic!()
    };
    assert_eq!(
        (
            body["callId"].as_str(),
            body["decision"].as_str(),
            body["outcome"].as_str()
        ),
        (Some("toolu_11"), Some("approved"), Some("succeeded"))
    );
    assert_eq!(status_of(&serve, &next), "complete");
    let approvals = get_auth(&serve, &token, "chat.gel.assistant.listApprovals").json();
    assert_eq!(approvals["replies"], json!([]));
    // Nothing sealed is stored in the clear.
    let car = get(
        &serve,
        &format!("com.atproto.sync.getRepo?did={}", did.replace('%', "%25")),
    );
    assert!(!String::from_utf8_lossy(&car.body).contains("Delete my drafts"));
    serve.stop();

    // The thread, read on the folder: the answer and the reply to it, with
    // the tool's output.
    let shown = gel_ok(
        &data,
        &["chat", "show", "--chat", &chat, "--format", "json"],
    );
    assert!(shown.contains("ran delete_files"), "{shown}");
    assert!(shown.contains("Grüß"), "{shown}");

    // After a restart the runs are gone from memory: the records replay.
    let serve = start(&data);
    let token = serve.access_token();
    let replayed = subscribe(&serve, &token, &reply, None);
    assert_eq!(
        kinds(&replayed),
        ["#message", "#toolCall", "#toolCall", "#confirmRequired"]
    );
    let replayed = subscribe(&serve, &token, &next, None);
    assert_eq!(kinds(&replayed).first(), Some(&"#toolResult"));
    assert_eq!(kinds(&replayed).last(), Some(&"#done"));
}

#[test]
fn a_failing_command_fails_the_reply_and_keeps_what_it_made() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    start(&data).stop();
    let chat = first_line(&gel_ok(&data, &["chat", "new"]));
    let crash = first_line(&gel_ok(
        &data,
        &["chat", "send", "--chat", &chat, "STREAM:exit-1"],
    ));
    let garbage = first_line(&gel_ok(
        &data,
        &["chat", "send", "--chat", &chat, "STREAM:garbage"],
    ));
    let send = |text: &str| first_line(&gel_ok(&data, &["chat", "send", "--chat", &chat, text]));
    let linger = send("STREAM:linger");
    let hang = send("STREAM:hang");
    let [crash, garbage, linger, hang] =
        [&crash, &garbage, &linger, &hang].map(|m| sealed_ask(&data, m));
    let serve = start_with(&data, &["--assistant-idle-secs", "2"]);
    let token = serve.access_token();

    let reply = ask(&serve, &token, &crash);
    let frames = subscribe(&serve, &token, &reply, None);
    assert_eq!(
        kinds(&frames),
        ["#textDelta", "#message", "#error", "#done"],
        "{frames:?}"
    );
    assert_eq!(status_of(&serve, &reply), "failed");

    let reply = ask(&serve, &token, &garbage);
    let frames = subscribe(&serve, &token, &reply, None);
    assert_eq!(kinds(&frames), ["#error", "#done"], "{frames:?}");
    assert_eq!(status_of(&serve, &reply), "failed");

    // A command that ends its run but stays alive is stopped: the reply
    // completes at its end line, not when the command exits.
    let reply = ask(&serve, &token, &linger);
    let frames = subscribe(&serve, &token, &reply, None);
    assert_eq!(kinds(&frames), fixture_kinds("plain_text_small_deltas"));
    assert_eq!(status_of(&serve, &reply), "complete");
    // One that goes quiet is cut after --assistant-idle-secs: interrupted,
    // what it made kept.
    let reply = ask(&serve, &token, &hang);
    let frames = subscribe(&serve, &token, &reply, None);
    assert_eq!(
        kinds(&frames),
        ["#textDelta", "#message", "#error", "#done"],
        "{frames:?}"
    );
    assert_eq!(status_of(&serve, &reply), "interrupted");

    // Without a token the plaintext stream is refused before the upgrade.
    let r = get(
        &serve,
        &format!("chat.gel.assistant.subscribeReply?reply={reply}"),
    );
    assert_eq!(r.status, 401, "{}", r.text());
    // The server keeps serving.
    assert_eq!(get(&serve, "com.atproto.server.describeServer").status, 200);
}

#[test]
fn a_reply_left_pending_by_a_stop_is_run_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // A keyless server takes the pending reply (it cannot run it).
    let serve = Serve::start_in(&data, &[]);
    let token = serve.access_token();
    serve.stop();
    // The folder becomes the account's first device.
    start(&data).stop();
    let chat = first_line(&gel_ok(&data, &["chat", "new"]));
    let message = first_line(&gel_ok(&data, &["chat", "send", "--chat", &chat, "Hello"]));
    let asked = sealed_ask(&data, &message);
    let serve = Serve::start_in(&data, &[]);
    let _ = token;
    let token = serve.access_token();
    let reply = ask(&serve, &token, &asked);
    assert_eq!(status_of(&serve, &reply), "pending");
    serve.stop();
    let serve = start(&data);
    let token = serve.access_token();
    let frames = subscribe(&serve, &token, &reply, None);
    assert_eq!(kinds(&frames), fixture_kinds("plain_text_small_deltas"));
    assert_eq!(status_of(&serve, &reply), "complete");
}

/// The real shape: a phone holds the account's keys and syncs through the
/// server; the server folder is paired as a device of the account, runs
/// the reply the phone asked for, and the phone reads it after a sync.
#[test]
fn a_paired_server_answers_what_a_phone_asks() {
    let dir = tempfile::tempdir().unwrap();
    let srv = dir.path().join("server");
    let phone = dir.path().join("phone");
    let sync = |serve: &Serve| sync_with(&phone, serve);

    // The phone is the account's first device; it writes and asks.
    gel_ok(&phone, &["device", "init", "--name", "phone"]);
    let chat = first_line(&gel_ok(&phone, &["chat", "new", "--title", "Pancakes"]));
    let message = first_line(&gel_ok(
        &phone,
        &[
            "chat",
            "send",
            "--chat",
            &chat,
            "What do I need? STREAM:plain_text_small_deltas",
        ],
    ));
    let reply = first_line(&gel_ok(&phone, &["chat", "ask", "--to", &message]));
    assert_eq!(reply, format!("{message}.r0"));
    let serve = Serve::start_in(&srv, &[]);
    // Restarts keep the port: the did:web names it.
    let listen = serve.addr();
    sync(&serve);
    serve.stop();

    // The server folder pairs like any device: code, approval, sync, join.
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_gelstore"))
        .arg("--data")
        .arg(&srv)
        .args(["serve", "--listen", &listen, "--password", serve::PASSWORD])
        .args(assistant_args())
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("pair this folder first"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    pair_server(&srv, &phone, &listen);

    // With --assistant it finds the pending reply and runs it.
    let args = assistant_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let serve = Serve::start_at(&srv, &listen, &args);
    let token = serve.access_token();
    let frames = subscribe(&serve, &token, &reply, None);
    assert_eq!(kinds(&frames), fixture_kinds("plain_text_small_deltas"));
    assert_eq!(status_of(&serve, &reply), "complete");
    sync(&serve);
    let shown = gel_ok(
        &phone,
        &["chat", "show", "--chat", &chat, "--format", "json"],
    );
    assert!(shown.contains("Grüß"), "{shown}");
    assert!(shown.contains("\"complete\""), "{shown}");

    // A tool output too long for the record: the server's run seals it
    // into a blob it keeps and serves (ciphertext only); the live event
    // names it; the phone's sync fetches it and reads the whole output.
    let message = first_line(&gel_ok(
        &phone,
        &[
            "chat",
            "send",
            "--chat",
            &chat,
            "Logs? STREAM:tool_output_to_blob",
        ],
    ));
    let reply = first_line(&gel_ok(&phone, &["chat", "ask", "--to", &message]));
    sync(&serve);
    let frames = subscribe(&serve, &token, &reply, None);
    assert_eq!(kinds(&frames), fixture_kinds("tool_output_to_blob"));
    let Some(Frame::Event { body, .. }) = frames.iter().find(|f| f.t() == "#toolResult") else {
        panic!("no toolResult in {frames:?}")
    };
    let cid = body["outputBlob"]["ref"]["$link"]
        .as_str()
        .unwrap_or_else(|| panic!("no outputBlob in {body}"))
        .to_owned();
    let blob = get(
        &serve,
        &format!(
            "com.atproto.sync.getBlob?did={}&cid={cid}",
            serve.did.replace('%', "%25")
        ),
    );
    assert_eq!(blob.status, 200, "{}", blob.text());
    let marker = b"GET /items/3999 ";
    assert!(!blob.body.windows(marker.len()).any(|w| w == marker));
    sync(&serve);
    let whole = gel_ok(
        &phone,
        &["chat", "output", "--reply", &reply, "--call", "toolu_71"],
    );
    assert!(whole.len() > 100_000, "{}", whole.len());
    assert!(whole.contains("GET /items/3999 "));
}

/// `gelstore serve --assistant-model`: the built-in loop. A phone asks; the
/// paired server runs a two-turn tool conversation against the mock
/// provider (recorded Anthropic transcripts over loopback HTTP) and the
/// real `server-everything` MCP server; a websocket client sees the seed
/// 000 events; the phone reads the sealed result after a sync. The
/// provider key reaches no file of either folder.
#[test]
fn the_built_in_assistant_runs_a_tool_conversation_for_a_phone() {
    use provider::{Answer, KEY, MockProvider};
    let mock = MockProvider::start(vec![
        Answer::sse("loop/anthropic_think_and_echo.sse"),
        Answer::sse("loop/anthropic_final_text.sse"),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let srv = dir.path().join("server");
    let phone = dir.path().join("phone");
    let mcp = dir.path().join("mcp.json");
    std::fs::write(&mcp, provider::everything_config().to_string()).unwrap();
    let sync = |serve: &Serve| sync_with(&phone, serve);
    gel_ok(&phone, &["device", "init", "--name", "phone"]);
    let chat = first_line(&gel_ok(&phone, &["chat", "new", "--title", "Echoes"]));
    let message = first_line(&gel_ok(
        &phone,
        &[
            "chat",
            "send",
            "--chat",
            &chat,
            "--model",
            "anthropic/claude-sonnet-4-5",
            "say sealed hello",
        ],
    ));
    let reply = first_line(&gel_ok(&phone, &["chat", "ask", "--to", &message]));
    let serve = Serve::start_in(&srv, &[]);
    let listen = serve.addr();
    sync(&serve);
    serve.stop();
    pair_server(&srv, &phone, &listen);

    let mcp_arg = mcp.display().to_string();
    let serve = Serve::start_with(
        &srv,
        &listen,
        &[
            "--assistant-model",
            "ollama/unused",
            "--mcp-config",
            &mcp_arg,
        ],
        &[
            ("ANTHROPIC_BASE_URL", &mock.url),
            ("ANTHROPIC_API_KEY", KEY),
        ],
        serve::PASSWORD,
    );
    let token = serve.access_token();
    let frames = subscribe(&serve, &token, &reply, None);
    let kinds = kinds(&frames);
    assert_eq!(kinds.first(), Some(&"#textDelta"), "{kinds:?}");
    for k in ["#toolCall", "#toolResult", "#message", "#done"] {
        assert!(kinds.contains(&k), "{k} missing: {kinds:?}");
    }
    let tool_call = frames.iter().find(|f| f.t() == "#toolCall").unwrap();
    let Frame::Event { body, .. } = tool_call else {
        unreachable!()
    };
    assert_eq!(body["tool"], "mcp_everything_echo");
    assert_eq!(status_of(&serve, &reply), "complete");
    // The message asked for anthropic: the server's default (ollama) is
    // not used.
    assert_eq!(mock.received().len(), 2);
    sync(&serve);
    serve.stop();
    let shown = gel_ok(
        &phone,
        &["chat", "show", "--chat", &chat, "--format", "json"],
    );
    assert!(shown.contains("Echo: sealed hello"), "{shown}");
    assert!(shown.contains("The tool said"), "{shown}");
    for folder in [&srv, &phone] {
        for entry in fixtures::files_under(folder) {
            let bytes = std::fs::read(&entry).unwrap();
            assert!(
                !bytes.windows(KEY.len()).any(|w| w == KEY.as_bytes()),
                "the provider key is in {}",
                entry.display()
            );
        }
    }
}

/// A pending reply written in an `applyWrites` too big for its `#commit`
/// event to carry its blocks (a CAR over 1 MB: `tooBig`, no ops listed) is
/// still found and run at once, not at the next restart.
#[test]
fn a_pending_reply_in_a_too_big_commit_is_run() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    start(&data).stop();
    let chat = first_line(&gel_ok(&data, &["chat", "new"]));
    let message = first_line(&gel_ok(&data, &["chat", "send", "--chat", &chat, "Hello"]));
    let (reply, record) = sealed_ask(&data, &message);
    let serve = start(&data);
    let token = serve.access_token();
    let filler = "x".repeat(250_000);
    let mut writes: Vec<Value> = (0..5)
        .map(|i| {
            json!({
                "$type": "com.atproto.repo.applyWrites#create",
                "collection": "com.example.note",
                "rkey": format!("n{i:04}"),
                // Distinct texts: equal records would share one block.
                "value": {"$type": "com.example.note", "text": format!("{i}{filler}")},
            })
        })
        .collect();
    writes.push(json!({
        "$type": "com.atproto.repo.applyWrites#create",
        "collection": "chat.gel.assistant.message",
        "rkey": reply,
        "value": record,
    }));
    let r = post(
        &serve,
        &token,
        "com.atproto.repo.applyWrites",
        json!({"repo": serve.did, "writes": writes}),
    );
    assert_eq!(r.status, 200, "applyWrites: {}", r.text());
    let frames = subscribe(&serve, &token, &reply, None);
    assert_eq!(kinds(&frames), fixture_kinds("plain_text_small_deltas"));
    assert_eq!(status_of(&serve, &reply), "complete");
}

/// Attacks on the request to generate: whoever can write the repository
/// (the PDS operator, anyone with the account password) writes a pending
/// reply of clear fields, with a model and usage of their choosing, or
/// edits a real one. The assistant runs none of them; the real request
/// next to them is run as usual, and `getThread` names the forgeries.
#[test]
fn forged_or_edited_pending_replies_are_never_run() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    start(&data).stop();
    let chat = first_line(&gel_ok(&data, &["chat", "new"]));
    let send = |text: &str| first_line(&gel_ok(&data, &["chat", "send", "--chat", &chat, text]));
    let forged_for = send("STREAM:plain_text_small_deltas");
    let edited_for = send("STREAM:plain_text_small_deltas");
    let real_for = send("STREAM:plain_text_small_deltas");
    let (edited_key, mut edited) = sealed_ask(&data, &edited_for);
    edited["model"] = json!({"provider": "evil", "id": "evil"});
    let real = sealed_ask(&data, &real_for);
    let serve = start(&data);
    let token = serve.access_token();

    let forged = forge_ask(&serve, &token, &chat, &forged_for);
    let edited = ask(&serve, &token, &(edited_key, edited));
    // Written after both: once it is done, the watcher has seen them.
    let reply = ask(&serve, &token, &real);
    let frames = subscribe(&serve, &token, &reply, None);
    assert_eq!(kinds(&frames), fixture_kinds("plain_text_small_deltas"));
    assert_eq!(status_of(&serve, &reply), "complete");
    assert_eq!(status_of(&serve, &forged), "pending");
    assert_eq!(status_of(&serve, &edited), "pending");

    let thread = get_auth(
        &serve,
        &token,
        &format!("chat.gel.assistant.getThread?chat={chat}"),
    );
    assert_eq!(thread.status, 200, "{}", thread.text());
    let thread = thread.json();
    let state = |key: &str| {
        thread["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["uri"].as_str().unwrap().ends_with(&format!("/{key}")))
            .map(|m| m["state"].clone())
            .unwrap()
    };
    assert_eq!(state(&forged), "unauthenticated");
    assert_eq!(state(&edited), "unreadable");
    assert_eq!(state(&reply), "open");
    assert_eq!(state(&real_for), "open");
    // A client that subscribes to either is told so, instead of waiting
    // for a run that never comes.
    for key in [&forged, &edited] {
        assert_eq!(
            kinds(&subscribe(&serve, &token, key, None)),
            ["ReplyTampered"],
            "{key}"
        );
    }
}
