//! Interop between the Rust sealing code and `@gelstore/seal`, the
//! TypeScript package in `web/seal/`, run through Node:
//!
//! - the package's own tests (`node --test`), which reproduce every golden
//!   vector of `fixtures/seal/` byte-exactly and open it;
//! - a corpus sealed here (every content part type, blobs of one and two
//!   chunks, a pending reply's authenticator, a failed reply, chat and
//!   settings records, two account epochs with a chat key each, the key
//!   records of a device paired by its TS pairing code) that the TS side
//!   joins with and opens, comparing every plaintext;
//! - a corpus the TS side seals (with a chat key of ours and two it makes
//!   and wraps) that we open here;
//! - tampered records, blobs and wraps from both sides, which must fail
//!   with the same `SealError` category on both;
//! - the TS device's keyring rebuilt on both sides from attacked key
//!   records (a removed device's changes from before its removal, an edited
//!   or deleted rotation), which must reach the same verdict.
//!
//! Needs Node 20.19+ and npm. The first run installs the package with
//! `npm ci` into `web/seal/node_modules` (the npm registry only); every run
//! compiles the TypeScript with the pinned `tsc` (a few seconds), so what
//! runs is always the source in the tree and nothing compiled is checked in.

use crate::support::launch;
use crate::support::seal_rng;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use gelstore::model::{ipld_to_json, record_from_json};
use gelstore::repo::records::prepare_record;
use gelstore::seal::{
    BlobSeal, DeviceKey, KeyLookup, KeySet, KeyWrap, Keyring, Padding, PairingCode, PairingRequest,
    Place, SealError, SealOptions, SignedChange, Standing, open_blob, open_record, pair_request,
    seal_blob, seal_record,
};
use seal_rng::{HashRng, hex, unhex};
use serde_json::{Value, json};

const DID: &str = "did:plc:ewvi7nxzyoun6zhxrhs64oiz";
const A: &str = "3laaaaaaaaaa2";
const B: &str = "3lbbbbbbbbbb2";
const T: &str = "3ltttttttttt2";
/// The chat both sides seal into (the TS side uses our key of epoch 1).
const CHAT1: &str = "3lchatrustaa2";
const CHAT2: &str = "3lchatrustbb2";
const MESSAGE: &str = "chat.gel.assistant.message";
const CHAT: &str = "chat.gel.assistant.chat";
const SETTINGS: &str = "chat.gel.assistant.settings";

fn package_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("web/seal")
}

/// Installs the package's npm dependencies once if they are missing, and
/// compiles it (`tsc`) once per test run.
fn ensure_built() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = package_dir();
        if !dir.join("node_modules/typescript/package.json").exists()
            || !dir.join("node_modules/@hpke/core/package.json").exists()
        {
            launch::npm_ci(&dir, &[], "the web/seal interop tests");
        }
        let output = Command::new("node")
            .args(["node_modules/typescript/bin/tsc", "-p", "."])
            .current_dir(&dir)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run node ({e}): Node 20.19+ must be on PATH"));
        assert!(
            output.status.success(),
            "tsc in web/seal failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        dir
    })
}

/// Runs `node dist/tools/interop.js COMMAND DIR`.
fn interop(command: &str, dir: &Path) {
    let package = ensure_built();
    let output = Command::new("node")
        .arg("dist/tools/interop.js")
        .arg(command)
        .arg(dir)
        .current_dir(package)
        .stdin(Stdio::null())
        .output()
        .expect("node runs");
    assert!(
        output.status.success(),
        "interop.js {command} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn read_json(dir: &Path, name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join(name)).unwrap()).unwrap()
}

/// The category of an error, as the TS side names it (`SealError.kind`).
fn kind(e: &SealError) -> &'static str {
    match e {
        SealError::UnsupportedAlg { .. } => "UnsupportedAlg",
        SealError::MalformedNonce { .. } => "MalformedNonce",
        SealError::Oversize { .. } => "Oversize",
        SealError::Truncated { .. } => "Truncated",
        SealError::UnknownKey { .. } => "UnknownKey",
        SealError::AuthenticationFailed { .. } => "AuthenticationFailed",
        SealError::NotRecipient { .. } => "NotRecipient",
        SealError::InvalidPlaintext { .. } => "InvalidPlaintext",
        SealError::BlobCidMismatch { .. } => "BlobCidMismatch",
        SealError::BlobSizeMismatch { .. } => "BlobSizeMismatch",
        SealError::Malformed { .. } => "Malformed",
        SealError::NotSealable { .. } => "NotSealable",
        SealError::InvalidPairingCode { .. } => "InvalidPairingCode",
        SealError::MembershipFork { .. } => "MembershipFork",
        SealError::MembershipLog { .. } => "MembershipLog",
        SealError::NotAdmitted { .. } => "NotAdmitted",
        SealError::AccountKeyPending { .. } => "AccountKeyPending",
        SealError::Keyring { .. } => "Keyring",
        _ => "Other",
    }
}

/// Opens one corpus entry (the record, then each of its blobs) as the TS
/// side's `openEntry` does: `{name, field, content, blobs}` or `{name, error}`.
fn open_entry(corpus: &Value, entry: &Value, keys: &dyn KeyLookup) -> Value {
    let name = entry["name"].clone();
    let place = Place {
        did: corpus["did"].as_str().unwrap(),
        collection: entry["collection"].as_str().unwrap(),
        rkey: entry["rkey"].as_str().unwrap(),
    };
    let run = || -> Result<Value, SealError> {
        let record = record_from_json(&entry["record"]).expect("atproto JSON");
        let opened = open_record(&record, &place, keys)?;
        let mut blobs = serde_json::Map::new();
        for b in &opened.blobs {
            let cid = b.cid.to_string();
            let stored = entry["blobOverride"]
                .get(&cid)
                .or_else(|| corpus["blobs"].get(&cid))
                .and_then(Value::as_str)
                .unwrap_or_else(|| panic!("no blob {cid} in the corpus"));
            blobs.insert(cid, hex(&open_blob(&unhex(stored), b)?).into());
        }
        Ok(json!({
            "name": name,
            "field": opened.field,
            "content": ipld_to_json(&opened.content).unwrap(),
            "blobs": blobs,
        }))
    };
    run().unwrap_or_else(|e| json!({"name": name, "error": kind(&e)}))
}

fn key_records(set: &KeySet) -> Vec<Value> {
    let wraps = set
        .wraps
        .iter()
        .map(|w| ipld_to_json(&w.to_ipld()).unwrap());
    wraps
        .chain(set.changes.iter().map(|c| c.value.clone()))
        .collect()
}

fn parse_key_records(records: &[Value]) -> KeySet {
    let mut set = KeySet::default();
    for r in records {
        match r["$type"].as_str() {
            Some("chat.gel.assistant.keyWrap") => set
                .wraps
                .push(KeyWrap::from_ipld(&record_from_json(r).unwrap()).unwrap()),
            Some("chat.gel.assistant.membership") => set
                .changes
                .push(SignedChange::from_value(r.clone()).unwrap()),
            other => panic!("a key record of type {other:?}"),
        }
    }
    set
}

/// Builds the Rust corpus: records sealed with `ring`'s chat keys.
struct Sealer<'a> {
    ring: &'a mut Keyring,
    repo: &'a mut KeySet,
    rng: &'a mut HashRng,
    blobs: serde_json::Map<String, Value>,
    records: Vec<Value>,
}

impl Sealer<'_> {
    fn blob(&mut self, plaintext: &[u8], mime: &str) -> (BlobSeal, Value) {
        let sealed = seal_blob(plaintext, self.rng).unwrap();
        self.blobs
            .insert(sealed.seal.cid.to_string(), hex(&sealed.bytes).into());
        let reference = json!({
            "$type": "blob",
            "ref": {"$link": sealed.seal.cid.to_string()},
            "mimeType": mime,
            "size": plaintext.len(),
        });
        (sealed.seal, reference)
    }

    #[allow(clippy::too_many_arguments)]
    fn seal(
        &mut self,
        name: &str,
        chat: &str,
        collection: &str,
        rkey: &str,
        record: Value,
        content: Value,
        blobs: &[(BlobSeal, Vec<u8>)],
        padding: Padding,
    ) {
        let (key, wrap) = self.ring.chat_key_for_seal(chat, self.rng).unwrap();
        self.repo.wraps.extend(wrap);
        let place = Place {
            did: DID,
            collection,
            rkey,
        };
        let seals: Vec<BlobSeal> = blobs.iter().map(|(s, _)| s.clone()).collect();
        let sealed = seal_record(
            &record_from_json(&record).unwrap(),
            &place,
            &record_from_json(&content).unwrap(),
            &seals,
            &key,
            &SealOptions { padding },
            self.rng,
        )
        .unwrap();
        let sealed = ipld_to_json(&sealed).unwrap();
        prepare_record(&gelstore_types::lexicons(), collection, rkey, &sealed)
            .unwrap_or_else(|e| panic!("{name}: our own record does not validate: {e}"));
        let field = if record.get("authenticator").is_some() {
            "authenticator"
        } else if collection == MESSAGE {
            "content"
        } else {
            "sealed"
        };
        let blob_plain: serde_json::Map<String, Value> = blobs
            .iter()
            .map(|(s, p)| (s.cid.to_string(), hex(p).into()))
            .collect();
        self.records.push(json!({
            "name": name,
            "collection": collection,
            "rkey": rkey,
            "record": sealed,
            "expect": {"field": field, "content": content, "blobs": blob_plain},
        }));
    }

    /// A user message holding every part type of `plainContent`, three
    /// blobs (a file, an image, a tool's output of two chunks).
    fn message_with_every_part(&mut self, name: &str, chat: &str, rkey: &str) {
        let file = format!("file in {rkey}\n").into_bytes();
        let image = vec![0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
        let output: Vec<u8> = (0..70_000u32).map(|i| (i % 253) as u8).collect();
        let (s1, r1) = self.blob(&file, "text/plain");
        let (s2, r2) = self.blob(&image, "image/png");
        let (s3, r3) = self.blob(&output, "application/json");
        let content = json!({"parts": [
            {"$type": "chat.gel.assistant.defs#textPart", "text": "Read this — ünïcödé ✓", "providerData": "{\"sig\":\"rust\"}"},
            {"$type": "chat.gel.assistant.defs#filePart", "file": r1, "name": "notes.txt",
             "extracted": {"text": "notes", "truncated": false, "extractor": "rust/1"}},
            {"$type": "chat.gel.assistant.defs#imagePart", "image": r2, "alt": "a header", "width": 8, "height": 1},
            {"$type": "chat.gel.assistant.defs#reasoningPart", "text": "thinking", "providerData": "{}"},
            {"$type": "chat.gel.assistant.defs#sourcePart", "url": "https://example.com/a", "title": "A"},
            {"$type": "chat.gel.assistant.defs#toolCallPart", "callId": "call-1", "name": "mcp_files_read",
             "arguments": "{\"path\":\"/tmp/a\"}", "approval": "pending", "pendingId": "p-1", "label": "Read /tmp/a"},
            {"$type": "chat.gel.assistant.defs#toolResultPart", "callId": "call-1", "output": "ok", "isError": false,
             "outcome": "succeeded", "elapsedMs": 40, "outputBlob": r3},
            {"$type": "chat.gel.assistant.defs#toolApprovalPart", "callId": "call-1", "pendingId": "p-1",
             "decision": "denied", "reason": "not now"},
        ]});
        let record = json!({"$type": MESSAGE, "chat": format!("at://{DID}/{CHAT}/{chat}"),
            "role": "user", "status": "complete", "createdAt": "2026-01-01T00:00:01.000Z"});
        self.seal(
            name,
            chat,
            MESSAGE,
            rkey,
            record,
            content,
            &[(s1, file), (s2, image), (s3, output)],
            Padding::Padme,
        );
    }

    fn chat_record(&mut self, chat: &str) {
        let record = json!({"$type": CHAT, "createdAt": "2026-01-01T00:00:00.000Z",
            "model": {"provider": "example", "id": "m-1"}});
        let content =
            json!({"title": format!("Chat {chat}"), "systemPrompt": "Answer in one line."});
        self.seal(
            &format!("chat {chat}"),
            chat,
            CHAT,
            chat,
            record,
            content,
            &[],
            Padding::Padme,
        );
    }

    fn pending_reply(&mut self, chat: &str, parent: &str) {
        let record = json!({"$type": MESSAGE, "chat": format!("at://{DID}/{CHAT}/{chat}"),
            "role": "assistant", "status": "pending", "parent": parent,
            "createdAt": "2026-01-01T00:00:02.000Z", "authenticator": {}});
        self.seal(
            &format!("pending reply {parent}.r0"),
            chat,
            MESSAGE,
            &format!("{parent}.r0"),
            record,
            json!({}),
            &[],
            Padding::Padme,
        );
    }

    fn failed_reply(&mut self, chat: &str, parent: &str) {
        let record = json!({"$type": MESSAGE, "chat": format!("at://{DID}/{CHAT}/{chat}"),
            "role": "assistant", "status": "error", "parent": parent,
            "model": {"provider": "example", "id": "m-1"}, "usage": {"inputTokens": 10, "outputTokens": 2},
            "createdAt": "2026-01-01T00:00:03.000Z"});
        let content = json!({"parts": [{"$type": "chat.gel.assistant.defs#textPart", "text": "partial"}],
            "error": {"code": "ProviderError", "message": "cut short"}});
        self.seal(
            &format!("failed reply {parent}.r1, unpadded"),
            chat,
            MESSAGE,
            &format!("{parent}.r1"),
            record,
            content,
            &[],
            Padding::None,
        );
    }
}

/// Tampered copies of the corpus's records, each with the category it
/// must fail with (here and in TS alike).
fn tampered(corpus: &Value) -> Vec<(Value, &'static str)> {
    let records = corpus["records"].as_array().unwrap();
    let find = |prefix: &str| {
        records
            .iter()
            .find(|r| r["name"].as_str().unwrap().starts_with(prefix))
            .unwrap()
            .clone()
    };
    let msg = find("message with every part, epoch 1");
    let other = find("message with every part, epoch 0");
    let pending = find("pending reply");
    let edit = |base: &Value, name: &str, f: &dyn Fn(&mut Value)| {
        let mut e = base.clone();
        e.as_object_mut().unwrap().remove("expect");
        e["name"] = name.into();
        f(&mut e);
        e
    };
    let flip = |v: &mut Value| {
        let b64 = v["$bytes"].as_str().unwrap().to_string();
        let mut bytes = data_b64(&b64);
        bytes[10] ^= 0x80;
        v["$bytes"] = enc_b64(&bytes).into();
    };
    let blob_cids: Vec<String> = msg["expect"]["blobs"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let file_blob = msg["record"]["content"]["blobs"][0]["ref"]["$link"]
        .as_str()
        .unwrap()
        .to_string();
    let other_file_blob = other["record"]["content"]["blobs"][0]["ref"]["$link"]
        .as_str()
        .unwrap()
        .to_string();
    let big_blob = msg["record"]["content"]["blobs"][2]["ref"]["$link"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(blob_cids.len(), 3);
    let stored = |cid: &str| corpus["blobs"][cid].as_str().unwrap().to_string();
    vec![
        (
            edit(&msg, "flipped ciphertext byte", &|e| {
                flip(&mut e["record"]["content"]["ciphertext"])
            }),
            "AuthenticationFailed",
        ),
        (
            edit(&msg, "changed clear field", &|e| {
                e["record"]["status"] = "error".into()
            }),
            "AuthenticationFailed",
        ),
        (
            edit(&msg, "wrong keyId", &|e| {
                e["record"]["content"]["keyId"] = "chat:3lnotakey0002:1:00000000000000ff".into()
            }),
            "UnknownKey",
        ),
        (
            edit(&msg, "moved record", &|e| {
                e["rkey"] = "3lmovedhere22".into()
            }),
            "AuthenticationFailed",
        ),
        (
            edit(&msg, "unsupported alg", &|e| {
                e["record"]["content"]["alg"] = "aes-256-gcm-v9".into()
            }),
            "UnsupportedAlg",
        ),
        (
            edit(&msg, "short nonce", &|e| {
                e["record"]["content"]["nonce"] = json!({"$bytes": enc_b64(&[0u8; 12])})
            }),
            "MalformedNonce",
        ),
        (
            edit(&pending, "authenticator passed off as content", &|e| {
                let r = e["record"].as_object_mut().unwrap();
                let a = r.remove("authenticator").unwrap();
                r.insert("content".into(), a);
            }),
            "AuthenticationFailed",
        ),
        (
            edit(&pending, "both content and authenticator", &|e| {
                e["record"]["content"] = e["record"]["authenticator"].clone()
            }),
            "Malformed",
        ),
        (
            edit(&msg, "swapped blob", &|e| {
                e["blobOverride"] = json!({ file_blob.clone(): stored(&other_file_blob) })
            }),
            "BlobCidMismatch",
        ),
        (
            edit(&msg, "cut blob", &|e| {
                let cut = &stored(&big_blob)[..2 * 65_552]; // one chunk of two, as hex
                e["blobOverride"] = json!({ big_blob.clone(): cut })
            }),
            "BlobSizeMismatch",
        ),
    ]
}

fn data_b64(s: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(s)
        .unwrap()
}

fn enc_b64(b: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD_NO_PAD.encode(b)
}

/// The records TS opened, compared with what we sealed: every plaintext.
fn assert_opened(expected: &[Value], opened: &[Value]) {
    assert_eq!(expected.len(), opened.len());
    for (want, got) in expected.iter().zip(opened) {
        let name = want["name"].as_str().unwrap();
        assert_eq!(got["name"], want["name"]);
        assert!(got.get("error").is_none(), "{name}: did not open: {got}");
        assert_eq!(got["field"], want["expect"]["field"], "{name}");
        assert_eq!(got["content"], want["expect"]["content"], "{name}");
        assert_eq!(got["blobs"], want["expect"]["blobs"], "{name}");
    }
}

#[test]
fn typescript_package_tests_pass_and_reproduce_the_golden_vectors() {
    let dir = ensure_built();
    let output = Command::new("node")
        .args(["--test", "dist/test/"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "node --test in web/seal failed:\n{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("# fail 0"), "{stdout}");
    assert!(!stdout.contains("# pass 0"), "{stdout}");
}

#[test]
fn rust_and_typescript_open_what_the_other_seals_and_refuse_the_same_tampering() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut rng = HashRng::new("web-seal-interop");

    // 1. The TS side starts pairing as a new device; its code comes here as text.
    interop("new-device", dir);
    let dev = read_json(dir, "ts-device.json");
    let t_code: PairingCode = dev["code"].as_str().unwrap().parse().unwrap();
    let t_key =
        DeviceKey::from_secret_bytes(unhex(dev["secret"].as_str().unwrap()).try_into().unwrap());
    assert_eq!(t_key.public_key(), t_code.public_key);
    // Its device record: the same signing key we derive, with a proof the code confirms.
    let record = &dev["record"];
    prepare_record(
        &gelstore_types::lexicons(),
        "chat.gel.assistant.device",
        T,
        record,
    )
    .expect("the TS device record validates");
    let t_signing = record["signingKey"].as_str().unwrap().to_string();
    assert_eq!(t_signing, t_key.signing_key().public_key().to_did_key());
    assert_eq!(
        data_b64(record["signingKeyProof"]["$bytes"].as_str().unwrap()),
        t_code.signing_key_proof(&t_signing)
    );

    // 2. A founds the account, B and the TS device pair through A.
    let a_key = DeviceKey::generate(&mut rng);
    let a_code = pair_request(&a_key, &mut rng).code().clone();
    let (mut a, mut repo) = Keyring::create(DID, A, a_key, &a_code, &mut rng).unwrap();
    let b_key = DeviceKey::generate(&mut rng);
    let b_request = pair_request(&b_key, &mut rng);
    let b_signing = Some(b_key.signing_key().public_key().to_did_key());
    repo.extend(a.approve(b_request.code(), B, b_signing, &mut rng).unwrap());
    repo.extend(a.approve(&t_code, T, Some(t_signing), &mut rng).unwrap());
    // B as it stands before its removal: it will sign changes from there.
    let (b_stale, _) = Keyring::join(DID, B, b_key, &b_request, &repo).unwrap();

    // 3. Records sealed in epoch 0, then B removed (epoch 1), then more.
    let mut sealer = Sealer {
        ring: &mut a,
        repo: &mut repo,
        rng: &mut rng,
        blobs: serde_json::Map::new(),
        records: Vec::new(),
    };
    sealer.chat_record(CHAT1);
    sealer.message_with_every_part("message with every part, epoch 0", CHAT1, "3lmsgepoch0m1");
    sealer.pending_reply(CHAT1, "3lmsgepoch0m1");
    let removal = sealer.ring.remove_device(B, sealer.rng).unwrap();
    sealer.repo.extend(removal);
    assert_eq!(sealer.ring.account_epoch(), 1);
    sealer.message_with_every_part("message with every part, epoch 1", CHAT1, "3lmsgepoch1m1");
    sealer.failed_reply(CHAT1, "3lmsgepoch1m1");
    sealer.chat_record(CHAT2);
    sealer.pending_reply(CHAT2, "3lmsgchat2m01");
    let settings =
        json!({"$type": SETTINGS, "updatedAt": "2026-01-01T00:00:04.000Z", "effort": "high"});
    sealer.seal(
        "settings",
        "self",
        SETTINGS,
        "self",
        settings,
        json!({"systemPrompt": "Be kind."}),
        &[],
        Padding::Padme,
    );
    let records = std::mem::take(&mut sealer.records);
    let blobs = std::mem::take(&mut sealer.blobs);

    // What the TS device must end up holding: what Rust, joining as it, holds.
    let t_request = PairingRequest::from_code(t_code.clone());
    let t_again =
        DeviceKey::from_secret_bytes(unhex(dev["secret"].as_str().unwrap()).try_into().unwrap());
    let (t_ring, report) = Keyring::join(DID, T, t_again, &t_request, &repo).unwrap();
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    let chat_keys: Vec<String> = t_ring.chat_key_ids().into_iter().collect();
    assert_eq!(
        chat_keys.len(),
        4,
        "two keys of chat 1, one of chat 2, one of the settings"
    );

    let mut corpus = json!({
        "did": DID,
        "keyRecords": key_records(&repo),
        "blobs": blobs,
        "records": records,
        "tampered": [],
        "tamperedWraps": [],
    });
    let mut tampered_records = Vec::new();
    for (entry, expected) in tampered(&corpus) {
        let got = open_entry(&corpus, &entry, &t_ring);
        assert_eq!(
            got["error"], expected,
            "{}: Rust gives {got}",
            entry["name"]
        );
        let mut entry = entry;
        entry["expectError"] = expected.into();
        tampered_records.push(entry);
    }
    corpus["tampered"] = tampered_records.into();
    // A chat-key wrap for a key no one else holds, one ciphertext byte flipped.
    let (_, lost) = a
        .clone()
        .chat_key_for_seal("3lchatlost001", &mut rng)
        .unwrap();
    let mut lost = lost.unwrap();
    lost.ciphertext[5] ^= 0x01;
    let rejected = t_ring.clone().absorb(&KeySet {
        wraps: vec![lost.clone()],
        changes: vec![],
    });
    assert_eq!(rejected.rejected.len(), 1);
    assert_eq!(kind(&rejected.rejected[0].1), "AuthenticationFailed");
    corpus["tamperedWraps"] = json!([{"name": "chat-key wrap, flipped byte",
        "record": ipld_to_json(&lost.to_ipld()).unwrap(), "expectError": "AuthenticationFailed"}]);
    std::fs::write(dir.join("rust-corpus.json"), corpus.to_string()).unwrap();

    // 4. TS joins with the key records and opens everything.
    interop("open", dir);
    let opened = read_json(dir, "ts-opened.json");
    let ring = &opened["keyring"];
    assert_eq!(ring["chatKeys"], json!(chat_keys), "{ring}");
    let accounts: Vec<&str> = t_ring.account_keys().map(|k| k.key_id()).collect();
    assert_eq!(ring["accountKeys"], json!(accounts));
    let heads: Vec<String> = t_ring.heads().iter().map(|c| c.to_string()).collect();
    assert_eq!(ring["heads"], json!(heads));
    assert_eq!(ring["epoch"], 1);
    assert_eq!(ring["roster"], json!([A, T]));
    assert_eq!(ring["report"]["rejected"], json!([]), "{ring}");
    assert_eq!(ring["report"]["refusedChanges"], json!([]), "{ring}");
    assert_opened(
        corpus["records"].as_array().unwrap(),
        opened["opened"].as_array().unwrap(),
    );
    for (want, got) in corpus["tampered"]
        .as_array()
        .unwrap()
        .iter()
        .zip(opened["tampered"].as_array().unwrap())
    {
        assert_eq!(
            got["error"], want["expectError"],
            "{}: TS gives {got}",
            want["name"]
        );
    }
    assert_eq!(
        opened["tamperedWraps"],
        json!([{"name": "chat-key wrap, flipped byte", "rejected": ["AuthenticationFailed"], "chatKeys": 0}])
    );

    // 5. TS seals a corpus of its own; we take in its new chat-key wraps and open it.
    interop("seal", dir);
    let ts = read_json(dir, "ts-corpus.json");
    let ts_keys = parse_key_records(ts["keyRecords"].as_array().unwrap());
    for w in ts["keyRecords"].as_array().unwrap() {
        prepare_record(
            &gelstore_types::lexicons(),
            "chat.gel.assistant.keyWrap",
            "3lwraptsaaaa2",
            w,
        )
        .expect("a TS key wrap validates");
    }
    // Only the new chat gets a new key: chat 1 and the settings reuse ours of epoch 1.
    assert_eq!(ts_keys.wraps.len(), 1);
    let report = a.absorb(&ts_keys);
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    assert_eq!(report.chat_keys, 1);
    let ts_records = ts["records"].as_array().unwrap();
    assert_eq!(ts_records.len(), 9);
    for r in ts_records {
        let name = r["name"].as_str().unwrap();
        prepare_record(
            &gelstore_types::lexicons(),
            r["collection"].as_str().unwrap(),
            r["rkey"].as_str().unwrap(),
            &r["record"],
        )
        .unwrap_or_else(|e| panic!("{name}: a TS record does not validate: {e}"));
        let got = open_entry(&ts, r, &a);
        assert!(
            got.get("error").is_none(),
            "{name}: Rust cannot open it: {got}"
        );
        assert_eq!(got["field"], r["expect"]["field"], "{name}");
        assert_eq!(got["content"], r["expect"]["content"], "{name}");
        assert_eq!(got["blobs"], r["expect"]["blobs"], "{name}");
    }
    // The record of chat 1 that TS sealed opens with our epoch-1 key.
    let chat1 = ts_records.iter().find(|r| r["rkey"] == CHAT1).unwrap();
    let epoch1_key = a.chat_key_for_seal(CHAT1, &mut rng).unwrap().0;
    assert_eq!(chat1["record"]["sealed"]["keyId"], epoch1_key.key_id());
    let names: Vec<&str> = ts["tampered"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    let expected: BTreeMap<String, &str> = tampered(&corpus)
        .into_iter()
        .map(|(e, k)| (e["name"].as_str().unwrap().to_owned(), k))
        .collect();
    assert_eq!(names.len(), expected.len());
    for t in ts["tampered"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        let got = open_entry(&ts, t, &a);
        assert_eq!(got["error"], t["expectError"], "{name}: Rust gives {got}");
        assert_eq!(
            t["expectError"], expected[name],
            "{name}: TS and the Rust table differ"
        );
    }
    let wrap =
        KeyWrap::from_ipld(&record_from_json(&ts["tamperedWraps"][0]["record"]).unwrap()).unwrap();
    let report = a.clone().absorb(&KeySet {
        wraps: vec![wrap],
        changes: vec![],
    });
    assert_eq!(report.rejected.len(), 1, "{:?}", report.rejected);
    assert_eq!(
        kind(&report.rejected[0].1),
        ts["tamperedWraps"][0]["expectError"]
    );

    // 6. The membership log under attack: both sides rebuild the TS device's
    // keyring from the same records and must reach the same verdict.
    let rotation = repo
        .changes
        .iter()
        .find(|c| c.change.epoch == 1)
        .unwrap()
        .clone();
    let without = |cid| KeySet {
        wraps: repo.wraps.clone(),
        changes: repo
            .changes
            .iter()
            .filter(|c| c.cid != cid)
            .cloned()
            .collect(),
    };
    let with = |extra: KeySet| {
        let mut set = repo.clone();
        set.extend(extra);
        set
    };
    let x_key = DeviceKey::from_secret_bytes([0x58; 32]);
    let x_code = pair_request(&x_key, &mut rng).code().clone();
    let x_signing = Some(x_key.signing_key().public_key().to_did_key());
    let mut edited = rotation.value.clone();
    edited["createdAt"] = "2030-01-01T00:00:00.000Z".into();
    let mut edited_set = without(rotation.cid);
    edited_set
        .changes
        .push(SignedChange::from_value(edited).unwrap());
    let heads: Vec<String> = t_ring.heads().iter().map(|c| c.to_string()).collect();
    let cases: Vec<(&str, KeySet, bool)> = vec![
        ("as stored", repo.clone(), false),
        (
            "a removed device removes another, from before its removal",
            with(b_stale.clone().remove_device(T, &mut rng).unwrap()),
            false,
        ),
        (
            "a removed device admits a device, from before its removal",
            with(
                b_stale
                    .clone()
                    .approve(&x_code, "3lxxxxxxxxxx2", x_signing, &mut rng)
                    .unwrap(),
            ),
            false,
        ),
        ("the rotation's record edited", edited_set, false),
        (
            "the rotation deleted after this device verified it",
            without(rotation.cid),
            true,
        ),
    ];
    let mut case_files = Vec::new();
    let mut verdicts = Vec::new();
    for (name, set, pinned) in &cases {
        let device = DeviceKey::from_secret_bytes(
            unhex(dev["secret"].as_str().unwrap()).try_into().unwrap(),
        );
        let result = if *pinned {
            Keyring::rejoin(
                DID,
                T,
                device,
                &t_request,
                t_ring.admitted_with(),
                &t_ring.heads(),
                set,
            )
        } else {
            Keyring::join(DID, T, device, &t_request, set)
        };
        let mut case = json!({"name": name, "did": DID, "keyRecords": key_records(set)});
        if *pinned {
            case["pin"] = t_ring.admitted_with().into();
            case["knownHeads"] = json!(heads);
        }
        case_files.push(case);
        verdicts.push(match result {
            Ok((ring, report)) => {
                let (kind_name, epoch, roster) = match ring.log().standing() {
                    Standing::Settled { epoch, roster, .. } => ("settled", *epoch, roster),
                    Standing::Forked { epoch, kept, .. } => ("forked", *epoch, kept),
                };
                json!({
                    "name": name,
                    "accountKeys": ring.account_keys().map(|k| k.key_id()).collect::<Vec<_>>(),
                    "chatKeys": ring.chat_key_ids(),
                    "heads": ring.heads().iter().map(|c| c.to_string()).collect::<Vec<_>>(),
                    "standing": {"kind": kind_name, "epoch": epoch, "roster": roster.keys().collect::<Vec<_>>()},
                    "rejected": report.rejected.iter().map(|(_, e)| kind(e)).collect::<Vec<_>>(),
                    "refused": report.refused_changes.len(),
                })
            }
            Err(e) => json!({"name": name, "error": kind(&e)}),
        });
    }
    // What each case is meant to show, so a verdict that changes on both sides still fails here.
    assert_eq!(verdicts[0]["standing"]["roster"], json!([A, T]));
    assert_eq!(verdicts[1]["standing"]["epoch"], 1, "{}", verdicts[1]);
    assert_eq!(
        verdicts[1]["standing"]["roster"],
        json!([A, T]),
        "{}",
        verdicts[1]
    );
    assert_eq!(
        verdicts[2]["standing"]["roster"],
        json!([A, T]),
        "{}",
        verdicts[2]
    );
    assert_eq!(verdicts[3]["standing"]["epoch"], 0, "{}", verdicts[3]);
    assert_eq!(verdicts[3]["refused"], 1, "{}", verdicts[3]);
    assert_eq!(verdicts[4]["error"], "MembershipLog", "{}", verdicts[4]);
    std::fs::write(
        dir.join("keyring-cases.json"),
        Value::from(case_files).to_string(),
    )
    .unwrap();
    interop("keyrings", dir);
    let ts_verdicts = read_json(dir, "ts-keyrings.json");
    assert_eq!(ts_verdicts.as_array().unwrap().len(), verdicts.len());
    for (want, got) in verdicts.iter().zip(ts_verdicts.as_array().unwrap()) {
        assert_eq!(got, want, "{}: TS and Rust disagree", want["name"]);
    }
}
