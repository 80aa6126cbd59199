//! The account file of `gelstore serve`: a password hash of the first
//! version (PBKDF2-HMAC-SHA256) still logs in and is replaced with an
//! Argon2id one at that login, sessions kept; an `account.json` other users
//! may read stops the start, as the key files do.

use crate::support::serve;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};
use serve::{PASSWORD, Serve, http};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD_NO_PAD;

/// `account.json` as the first version wrote it: a PBKDF2 hash
/// (210 000 rounds, as it used).
fn write_old_account(data: &Path, password: &str) -> Value {
    use std::os::unix::fs::OpenOptionsExt;
    let salt = [0x5au8; 16];
    let rounds = 210_000;
    let mut hash = [0u8; 32];
    pbkdf2::pbkdf2::<hmac::Hmac<sha2::Sha256>>(password.as_bytes(), &salt, rounds, &mut hash)
        .unwrap();
    let account = json!({
        "handle": "old.test",
        "passwordHash": format!("pbkdf2-sha256${rounds}${}${}", B64.encode(salt), B64.encode(hash)),
        "tokenSecret": B64.encode([0x42u8; 32]),
    });
    std::fs::create_dir_all(data).unwrap();
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(data.join("account.json"))
        .unwrap();
    std::io::Write::write_all(&mut file, account.to_string().as_bytes()).unwrap();
    account
}

fn read_account(data: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(data.join("account.json")).unwrap()).unwrap()
}

fn login(addr: &str, handle: &str, password: &str) -> serve::Response {
    http(
        addr,
        "POST",
        "/xrpc/com.atproto.server.createSession",
        &[("content-type", "application/json")],
        json!({"identifier": handle, "password": password})
            .to_string()
            .as_bytes(),
    )
}

fn get_session(addr: &str, access: &str) -> u16 {
    let bearer = format!("Bearer {access}");
    http(
        addr,
        "GET",
        "/xrpc/com.atproto.server.getSession",
        &[("authorization", &bearer)],
        b"",
    )
    .status
}

/// Started without `--password`: the stored hash is what logs in.
fn start_without_password(data: &Path, listen: &str) -> Serve {
    Serve::spawn(data, &["--listen", listen], &[], PASSWORD, None)
}

#[test]
fn an_old_pbkdf2_account_logs_in_and_is_rehashed_with_argon2id() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let old = write_old_account(&data, PASSWORD);
    let serve = start_without_password(&data, "127.0.0.1:0");
    assert_eq!(serve.handle, "old.test");
    let addr = serve.addr();
    // Starting did not touch the hash: no password was given.
    assert_eq!(read_account(&data), old);

    assert_eq!(login(&addr, "old.test", "wrong").status, 401);
    assert_eq!(
        read_account(&data),
        old,
        "a wrong password changed the hash"
    );
    let r = login(&addr, "old.test", PASSWORD);
    assert_eq!(r.status, 200, "{}", r.text());
    let access = r.json()["accessJwt"].as_str().unwrap().to_owned();
    let now = read_account(&data);
    let hash = now["passwordHash"].as_str().unwrap();
    assert!(
        hash.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"),
        "not rehashed with Argon2id: {hash}"
    );
    assert!(!hash.contains(PASSWORD));
    assert_eq!(now["handle"], old["handle"]);
    assert_eq!(now["tokenSecret"], old["tokenSecret"], "the sessions ended");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(data.join("account.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    // The new hash logs in, the old password only.
    assert_eq!(login(&addr, "old.test", "wrong").status, 401);
    assert_eq!(login(&addr, "old.test", PASSWORD).status, 200);
    assert_eq!(read_account(&data)["passwordHash"], now["passwordHash"]);
    assert_eq!(get_session(&addr, &access), 200);

    // After a restart too; the session made before the rehash holds.
    let listen = addr.clone();
    drop(serve.stop());
    let serve = start_without_password(&data, &listen);
    assert_eq!(get_session(&serve.addr(), &access), 200);
    assert_eq!(login(&serve.addr(), "old.test", PASSWORD).status, 200);
    assert_eq!(login(&serve.addr(), "old.test", "wrong").status, 401);
    assert_eq!(read_account(&data)["passwordHash"], now["passwordHash"]);
}

/// `account.json` holds the password hash and the key that signs session
/// tokens: like the signing key and the device files, one that group or
/// others may read stops the start, naming the fix.
#[test]
fn a_world_readable_account_file_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let serve = Serve::start_in(&data, &[]);
    drop(serve.stop());
    let path = data.join("account.json");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();

    let mut child = Command::new(env!("CARGO_BIN_EXE_gelstore"))
        .arg("--data")
        .arg(&data)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the server started on a world-readable account.json");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!status.success());
    assert!(out.stdout.is_empty(), "a ready line: {:?}", out.stdout);
    assert!(
        stderr.contains("account.json") && stderr.contains("644") && stderr.contains("chmod 600"),
        "{stderr}"
    );
    // Fixed, it starts again.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let serve = Serve::start_in(&data, &[]);
    assert_eq!(login(&serve.addr(), &serve.handle, PASSWORD).status, 200);
}
