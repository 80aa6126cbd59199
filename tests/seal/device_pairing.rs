//! Two devices, two data folders: `gelstore device …` driven through the
//! real binary, chats sealed and opened through the library on the same
//! on-disk stores. Records reach the second device the way they do until
//! sync exists: the first store's CAR export and `device join --from`.
//!
//! - B pairs through A and opens what A sealed; its copy is read-only.
//! - A device record planted without pairing (or approved with a code whose
//!   secret is not the device's) opens nothing.
//! - After A removes B, what A seals is unreadable to B.
//! - Plaintext and secrets never reach the repository: the CAR export and
//!   the raw store files are scanned for markers and key bytes.
//! - Bad codes, files and states are named errors with exit 1 or 2.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use base64::Engine as _;
use gelstore::device::{Device, DeviceError, SealedAction, SealedWrite};
use gelstore::lexicon::chat::gel::assistant::chat::{Chat, SealedFields};
use gelstore::lexicon::chat::gel::assistant::defs::{
    PlainContent, PlainContentPartsItem, TextPart,
};
use gelstore::lexicon::chat::gel::assistant::message::{Message, MessageRole, MessageStatus};
use gelstore::lexicon_runtime::{AtUri, Datetime};
use gelstore::repo::repository::{Repository, Write};
use gelstore::seal::{DeviceKey, PairingCode, SealError, os_rng, pair_request};
use serde_json::{Value, json};

const CHAT: &str = "chat.gel.assistant.chat";
const MESSAGE: &str = "chat.gel.assistant.message";

fn gelstore(data: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gelstore"))
        .arg("--data")
        .arg(data)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run gelstore")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[track_caller]
fn ok(o: &Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    text(&o.stdout).trim().to_string()
}

/// Exit code `code`; returns stderr.
#[track_caller]
fn fails(o: &Output, code: i32) -> String {
    assert_eq!(
        o.status.code(),
        Some(code),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    text(&o.stderr)
}

#[track_caller]
fn json_out(o: &Output) -> Value {
    serde_json::from_str(&ok(o)).expect("JSON output")
}

struct Dirs {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

impl Dirs {
    fn new() -> Dirs {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        Dirs { _tmp: tmp, root }
    }

    fn dir(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// Exports `data`'s repository with the CLI, as a user moves it today.
    fn export(&self, data: &Path, name: &str) -> PathBuf {
        let car = self.dir(name);
        ok(&gelstore(
            data,
            &["repo", "export", "--out", car.to_str().unwrap()],
        ));
        car
    }
}

fn now() -> Datetime {
    Datetime::new("2026-01-02T03:04:05.000Z").unwrap()
}

/// A chat with its title and system prompt sealed, built through the
/// generated types.
fn chat(rkey: &str, title: &str, prompt: &str) -> SealedWrite {
    let record = Chat {
        sealed: None,
        model: None,
        tools: Some(vec!["search".into()]),
        effort: None,
        created_at: now(),
        extra: Default::default(),
    };
    let fields = SealedFields {
        title: Some(title.into()),
        system_prompt: Some(prompt.into()),
        extra: Default::default(),
    };
    SealedWrite::new(rkey, rkey, &record, &fields, SealedAction::Create).unwrap()
}

/// A user message with its text sealed, built through the generated types.
fn message(did: &str, chat: &str, rkey: &str, words: &str) -> SealedWrite {
    let record = Message {
        chat: AtUri::new(format!("at://{did}/{CHAT}/{chat}")).unwrap(),
        role: MessageRole::User,
        status: MessageStatus::Complete,
        parent: None,
        request: None,
        model: None,
        usage: None,
        stop_reason: None,
        content: None,
        authenticator: None,
        created_at: now(),
        extra: Default::default(),
    };
    let content = PlainContent {
        error: None,
        parts: vec![PlainContentPartsItem::TextPart(TextPart {
            provider_data: None,
            text: words.into(),
            extra: Default::default(),
        })],
        extra: Default::default(),
    };
    SealedWrite::new(rkey, chat, &record, &content, SealedAction::Create).unwrap()
}

fn message_text(device: &Device, rkey: &str) -> Result<String, DeviceError> {
    let content = device.open_sealed_json(MESSAGE, rkey)?;
    Ok(content["parts"][0]["text"].as_str().unwrap().to_string())
}

fn is_unknown_key(r: Result<impl std::fmt::Debug, DeviceError>) -> bool {
    matches!(r, Err(DeviceError::Seal(SealError::UnknownKey { .. })))
}

/// Sets up A (first device) and seals one chat with one message on it.
fn device_a(dirs: &Dirs) -> (PathBuf, String, String) {
    let a = dirs.dir("a");
    let id = ok(&gelstore(&a, &["device", "init", "--name", "Laptop"]));
    let mut dev = Device::open(&a).unwrap();
    let did = dev.repo().did().to_string();
    dev.apply_sealed(
        &[
            chat("3lchataaaaaa2", "Trip to Lisbon", "You are a travel agent."),
            message(&did, "3lchataaaaaa2", "3lmsgaaaaaaa2", "Which museums?"),
        ],
        &mut os_rng(),
    )
    .unwrap();
    (a, id, did)
}

#[test]
fn a_paired_device_reads_what_the_other_sealed_and_not_after_removal() {
    let dirs = Dirs::new();
    let (a, id_a, did) = device_a(&dirs);
    // `init` is idempotent.
    assert_eq!(ok(&gelstore(&a, &["device", "init"])), id_a);

    // B shows a code (the same one until it is paired).
    let b = dirs.dir("b");
    let code = ok(&gelstore(&b, &["device", "pair"]));
    assert!(code.starts_with("gp1-"), "{code}");
    assert_eq!(ok(&gelstore(&b, &["device", "pair"])), code);
    // Not paired yet: B opens nothing, and says why.
    let err = fails(&gelstore(&b, &["device", "ls"]), 1);
    assert!(err.contains("not paired yet"), "{err}");
    assert!(!err.contains(&code), "the secret is never echoed: {err}");

    // A approves the code; B takes the records in.
    let approved = json_out(&gelstore(
        &a,
        &["device", "approve", &code, "--format", "json"],
    ));
    let id_b = approved["device"].as_str().unwrap().to_string();
    assert_eq!(approved["recordCreated"], true);
    assert_eq!(approved["epoch"], 0);
    let car = dirs.export(&a, "a1.car");
    let joined = json_out(&gelstore(
        &b,
        &[
            "device",
            "join",
            "--from",
            car.to_str().unwrap(),
            "--format",
            "json",
        ],
    ));
    assert_eq!(joined["device"], id_b.as_str());
    assert_eq!(joined["did"], did.as_str());
    assert_eq!(joined["newlyPaired"], true);
    assert_eq!(joined["epoch"], 0);
    let err = fails(&gelstore(&b, &["device", "pair"]), 1);
    assert!(err.contains("already paired"), "{err}");

    // B (a fresh process: the keyring is re-derived from the records) opens
    // A's chat and message.
    {
        let dev_b = Device::open(&b).unwrap();
        assert_eq!(dev_b.id(), id_b);
        assert!(!dev_b.repo().is_writable());
        let fields = dev_b.open_sealed_json(CHAT, "3lchataaaaaa2").unwrap();
        assert_eq!(fields["title"], "Trip to Lisbon");
        assert_eq!(fields["systemPrompt"], "You are a travel agent.");
        assert_eq!(
            message_text(&dev_b, "3lmsgaaaaaaa2").unwrap(),
            "Which museums?"
        );
    }
    // A read-only copy refuses writes with a named error.
    let mut dev_b = Device::open(&b).unwrap();
    let did_b = dev_b.repo().did().to_string();
    let err = dev_b
        .apply_sealed(
            &[message(&did_b, "3lchataaaaaa2", "3lmsgccccccc2", "from B")],
            &mut os_rng(),
        )
        .unwrap_err();
    assert!(matches!(err, DeviceError::ReadOnlyCopy { .. }), "{err}");
    drop(dev_b);
    let err = fails(&gelstore(&b, &["device", "remove", &id_a]), 1);
    assert!(err.contains("read-only copy"), "{err}");

    let ls = json_out(&gelstore(&a, &["device", "ls", "--format", "json"]));
    assert_eq!(ls["epoch"], 0);
    let statuses: Vec<(String, String, bool)> = ls["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["id"].as_str().unwrap().to_string(),
                d["status"].as_str().unwrap().to_string(),
                d["this"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        statuses,
        [
            (id_a.clone(), "admitted".to_string(), true),
            (id_b.clone(), "admitted".to_string(), false)
        ]
    );

    // A removes B: a new epoch.
    assert_eq!(ok(&gelstore(&a, &["device", "remove", &id_b])), "epoch 1");
    let err = fails(&gelstore(&a, &["device", "remove", &id_b]), 1);
    assert!(err.contains("not admitted"), "{err}");
    // What A seals from now on (after a restart: a fresh open) uses epoch-1
    // keys, in the old chat and in a new one.
    {
        let mut dev_a = Device::open(&a).unwrap();
        assert_eq!(dev_a.keyring().account_epoch(), 1);
        dev_a
            .apply_sealed(
                &[
                    message(&did, "3lchataaaaaa2", "3lmsgbbbbbbb2", "After removal"),
                    chat("3lchatbbbbbb2", "Secret plans", "Be brief."),
                ],
                &mut os_rng(),
            )
            .unwrap();
    }
    let dev_a = Device::open(&a).unwrap();
    assert_eq!(
        message_text(&dev_a, "3lmsgbbbbbbb2").unwrap(),
        "After removal"
    );
    assert_eq!(
        message_text(&dev_a, "3lmsgaaaaaaa2").unwrap(),
        "Which museums?"
    );
    drop(dev_a);

    // B refreshes its copy: it sees the new records, opens the old ones,
    // and not one sealed after its removal.
    let car = dirs.export(&a, "a2.car");
    let joined = json_out(&gelstore(
        &b,
        &[
            "device",
            "join",
            "--from",
            car.to_str().unwrap(),
            "--format",
            "json",
        ],
    ));
    assert_eq!(joined["newlyPaired"], false);
    assert_eq!(joined["refresh"], "replaced");
    assert_eq!(joined["epoch"], 0);
    assert_eq!(joined["newestEpoch"], 1);
    let dev_b = Device::open(&b).unwrap();
    assert!(dev_b.is_behind());
    assert!(
        dev_b
            .repo()
            .get(MESSAGE, "3lmsgbbbbbbb2")
            .unwrap()
            .is_some()
    );
    assert_eq!(
        message_text(&dev_b, "3lmsgaaaaaaa2").unwrap(),
        "Which museums?"
    );
    assert!(is_unknown_key(message_text(&dev_b, "3lmsgbbbbbbb2")));
    assert!(is_unknown_key(dev_b.open_sealed(CHAT, "3lchatbbbbbb2")));
    drop(dev_b);
    // An older export does not roll the copy back.
    let old = dirs.dir("a1.car");
    let err = fails(
        &gelstore(&b, &["device", "join", "--from", old.to_str().unwrap()]),
        1,
    );
    assert!(err.contains("older than the copy"), "{err}");

    let ls = json_out(&gelstore(&a, &["device", "ls", "--format", "json"]));
    assert_eq!(ls["epoch"], 1);
    assert_eq!(ls["devices"][1]["id"], id_b.as_str());
    assert_eq!(ls["devices"][1]["status"], "removed");
    let human = ok(&gelstore(&b, &["device", "ls"]));
    assert!(human.contains("this device was removed"), "{human}");
}

#[test]
fn a_device_record_planted_without_pairing_opens_nothing() {
    let dirs = Dirs::new();
    let (a, _id_a, did) = device_a(&dirs);

    // C shows a code; nobody approves it, but a device record with C's
    // public key appears in the repository (as a PDS could plant one).
    let c = dirs.dir("c");
    let code: PairingCode = ok(&gelstore(&c, &["device", "pair"])).parse().unwrap();
    {
        let mut repo = Repository::open(&a).unwrap();
        let b64 = base64::engine::general_purpose::STANDARD_NO_PAD.encode(code.public_key);
        repo.apply(&[Write::create(
            "chat.gel.assistant.device",
            "3lplan7edaaa2",
            json!({
                "$type": "chat.gel.assistant.device",
                "publicKey": {"$bytes": b64},
                "createdAt": "2026-01-02T03:04:05.000Z",
            }),
        )])
        .unwrap();
    }
    let car = dirs.export(&a, "planted.car");
    let err = fails(
        &gelstore(&c, &["device", "join", "--from", car.to_str().unwrap()]),
        1,
    );
    assert!(err.contains("not approved"), "{err}");
    assert!(matches!(
        Device::open(&c),
        Err(DeviceError::NotPaired { .. })
    ));
    // A lists it, and does not count it as admitted.
    let ls = json_out(&gelstore(&a, &["device", "ls", "--format", "json"]));
    let planted = ls["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == "3lplan7edaaa2")
        .unwrap()
        .clone();
    assert_eq!(planted["status"], "not-admitted");

    // Someone approves C's public key with a code they made up (not the
    // secret C showed): C refuses the account key it carries.
    let c_key = DeviceKey::load(&c.join("device.key")).unwrap();
    let forged = pair_request(&c_key, &mut os_rng());
    ok(&gelstore(
        &a,
        &["device", "approve", &forged.code().to_string()],
    ));
    let car = dirs.export(&a, "forged.car");
    let err = fails(
        &gelstore(&c, &["device", "join", "--from", car.to_str().unwrap()]),
        1,
    );
    assert!(err.contains("authentication failed"), "{err}");
    assert!(matches!(
        Device::open(&c),
        Err(DeviceError::NotPaired { .. })
    ));
    // C's copy holds the sealed chat, and nothing of C's opens it: C has no
    // keyring at all, and a keyring built from C's key with its real
    // pairing request finds no wrap it can open.
    let copy = Repository::open(&c).unwrap();
    assert!(copy.get(CHAT, "3lchataaaaaa2").unwrap().is_some());
    let keys = gelstore::device::records::KeyRecords::read(&copy)
        .unwrap()
        .keys;
    let real = gelstore::seal::PairingRequest::from_code(code);
    assert!(gelstore::seal::Keyring::join(&did, "3lplan7edaaa2", c_key, &real, &keys).is_err());
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

#[test]
fn plaintext_and_secrets_never_reach_the_repository() {
    let dirs = Dirs::new();
    let a = dirs.dir("a");
    ok(&gelstore(&a, &["device", "init"]));
    let markers = [
        "PLAINTEXT-MARKER-title-5e1f",
        "PLAINTEXT-MARKER-prompt-0c9a",
        "PLAINTEXT-MARKER-message-77d2",
        "PLAINTEXT-MARKER-edited-b3e8",
        "PLAINTEXT-MARKER-second-chat-41aa",
    ];
    let car = {
        let mut dev = Device::open(&a).unwrap();
        let did = dev.repo().did().to_string();
        let mut rng = os_rng();
        dev.apply_sealed(
            &[
                chat("3lchataaaaaa2", markers[0], markers[1]),
                message(&did, "3lchataaaaaa2", "3lmsgaaaaaaa2", markers[2]),
                chat("3lchatbbbbbb2", markers[4], markers[4]),
            ],
            &mut rng,
        )
        .unwrap();
        // An edit is sealed again (fresh nonce), and replaces the record.
        let edit = message(&did, "3lchataaaaaa2", "3lmsgaaaaaaa2", markers[3])
            .with_action(SealedAction::Update { swap: None });
        dev.apply_sealed(&[edit], &mut rng).unwrap();
        assert_eq!(message_text(&dev, "3lmsgaaaaaaa2").unwrap(), markers[3]);
        let (car, _) = dev.repo().export(Vec::new(), None).unwrap();
        car
    };
    assert!(car.len() > 1000);

    // The device secret, as its key file holds it.
    let key_file = fs::read_to_string(a.join("device.key")).unwrap();
    let secret = base64::engine::general_purpose::STANDARD
        .decode(key_file.lines().nth(1).unwrap())
        .unwrap();
    assert_eq!(secret.len(), 32);
    // The pairing secret, from the code in the state file (public key 32 ‖
    // secret 10 ‖ checksum 2, base32).
    let state: Value =
        serde_json::from_str(&fs::read_to_string(a.join("device.json")).unwrap()).unwrap();
    let code = state["pairingCode"].as_str().unwrap();
    let raw = data_encoding::BASE32_NOPAD
        .decode(code[4..].replace('-', "").to_uppercase().as_bytes())
        .unwrap();
    let pairing_secret = &raw[32..42];

    let mut store_files = Vec::new();
    files_under(&a.join("store"), &mut store_files);
    let store: Vec<(PathBuf, Vec<u8>)> = store_files
        .into_iter()
        .map(|p| {
            let bytes = fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect();
    assert!(store.iter().map(|(_, b)| b.len()).sum::<usize>() > car.len());
    for marker in markers {
        assert!(!contains(&car, marker.as_bytes()), "{marker} in the CAR");
        // Case or encoding tricks aside, not even a part of it.
        assert!(
            !contains(&car, b"PLAINTEXT-MARKER"),
            "marker prefix in the CAR"
        );
        for (path, bytes) in &store {
            assert!(
                !contains(bytes, marker.as_bytes()),
                "{marker} in {}",
                path.display()
            );
        }
    }
    for (what, bytes) in [
        ("device secret", &secret[..]),
        ("pairing secret", pairing_secret),
    ] {
        assert!(!contains(&car, bytes), "the {what} is in the CAR");
        for (path, data) in &store {
            assert!(
                !contains(data, bytes),
                "the {what} is in {}",
                path.display()
            );
        }
    }
    // The records are there, sealed, and the scans can see them: the CAR
    // and the store files hold the chat's clear fields and the envelopes.
    for clear in [&b"search"[..], b"xchacha20poly1305-hkdf-sha256-v1"] {
        assert!(contains(&car, clear));
        assert!(store.iter().any(|(_, data)| contains(data, clear)));
    }
}

#[test]
fn bad_codes_files_and_states_are_named_errors() {
    let dirs = Dirs::new();
    let empty = dirs.dir("empty");
    let err = fails(&gelstore(&empty, &["device", "ls"]), 1);
    assert!(err.contains("no device in"), "{err}");
    let err = fails(&gelstore(&empty, &["device", "approve", "gp1-aaaa"]), 1);
    assert!(err.contains("invalid pairing code"), "{err}");

    let (a, id_a, _) = device_a(&dirs);
    for bad in ["hello", "gp1-aaaa-bbbb", ""] {
        let err = fails(&gelstore(&a, &["device", "approve", bad]), 1);
        assert!(err.contains("invalid pairing code"), "{bad:?}: {err}");
    }
    // A code with one character changed fails its checksum.
    let b = dirs.dir("b");
    let code = ok(&gelstore(&b, &["device", "pair"]));
    let mut typo: Vec<char> = code.chars().collect();
    let i = typo.len() - 6;
    typo[i] = if typo[i] == 'a' { 'b' } else { 'a' };
    let typo: String = typo.into_iter().collect();
    let err = fails(&gelstore(&a, &["device", "approve", &typo]), 1);
    assert!(err.contains("invalid pairing code"), "{err}");
    // A's own code.
    let own = serde_json::from_str::<Value>(&fs::read_to_string(a.join("device.json")).unwrap())
        .unwrap()["pairingCode"]
        .as_str()
        .unwrap()
        .to_string();
    let err = fails(&gelstore(&a, &["device", "approve", &own]), 1);
    assert!(err.contains("own pairing code"), "{err}");

    let err = fails(&gelstore(&a, &["device", "remove", &id_a]), 1);
    assert!(err.contains("cannot remove itself"), "{err}");
    let err = fails(&gelstore(&a, &["device", "remove", "3lnobodyaaaa2"]), 1);
    assert!(err.contains("not admitted"), "{err}");
    let err = fails(&gelstore(&a, &["device", "pair"]), 1);
    assert!(err.contains("already paired"), "{err}");
    let err = fails(
        &gelstore(&a, &["device", "join", "--from", "/nonexistent.car"]),
        2,
    );
    assert!(err.contains("/nonexistent.car"), "{err}");

    // B: a missing, a garbage and a foreign CAR.
    let garbage = dirs.dir("garbage.car");
    fs::write(&garbage, b"not a car at all").unwrap();
    let err = fails(
        &gelstore(&b, &["device", "join", "--from", garbage.to_str().unwrap()]),
        1,
    );
    assert!(err.contains("does not verify"), "{err}");
    // The store A holds is the authority: it is never replaced by a CAR.
    let car = dirs.export(&a, "a.car");
    let err = fails(
        &gelstore(&a, &["device", "join", "--from", car.to_str().unwrap()]),
        1,
    );
    assert!(err.contains("signs the repository"), "{err}");
    // A copy of A's repository taken in without pairing refuses `init`: it
    // cannot write, and the account has its devices.
    let d = dirs.dir("d");
    ok(&gelstore(&d, &["repo", "import", car.to_str().unwrap()]));
    let err = fails(&gelstore(&d, &["device", "init"]), 1);
    assert!(err.contains("read-only copy"), "{err}");
    // On a paired device `init` only says which device it is.
    ok(&gelstore(&a, &["device", "approve", &code]));
    let car = dirs.export(&a, "a2.car");
    let id_b = ok(&gelstore(
        &b,
        &["device", "join", "--from", car.to_str().unwrap()],
    ));
    assert_eq!(ok(&gelstore(&b, &["device", "init"])), id_b);
    // A CAR of another account does not replace the copy.
    let other = dirs.dir("other");
    ok(&gelstore(&other, &["device", "init"]));
    let other_car = dirs.export(&other, "other.car");
    let err = fails(
        &gelstore(
            &b,
            &["device", "join", "--from", other_car.to_str().unwrap()],
        ),
        1,
    );
    assert!(err.contains("does not verify"), "{err}");

    // A state file others can read, or one that is damaged.
    let state = b.join("device.json");
    let saved = fs::read(&state).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&state, fs::Permissions::from_mode(0o644)).unwrap();
        let err = fails(&gelstore(&b, &["device", "ls"]), 2);
        assert!(err.contains("chmod 600"), "{err}");
        fs::set_permissions(&state, fs::Permissions::from_mode(0o600)).unwrap();
    }
    fs::write(&state, b"{\"version\": 1, \"pairingCode\": \"gp1-zzzz\"}").unwrap();
    let err = fails(&gelstore(&b, &["device", "ls"]), 2);
    assert!(err.contains("device state file"), "{err}");
    fs::write(&state, b"\xff\xfe not json").unwrap();
    let err = fails(&gelstore(&b, &["device", "ls"]), 2);
    assert!(err.contains("device state file"), "{err}");
    fs::write(&state, &saved).unwrap();
    ok(&gelstore(&b, &["device", "ls"]));
    // A damaged device key file.
    fs::write(b.join("device.key"), b"garbage").unwrap();
    let err = fails(&gelstore(&b, &["device", "ls"]), 2);
    assert!(err.contains("device.key"), "{err}");
}
