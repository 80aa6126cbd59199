//! Session tokens over real HTTP: a refresh token is single use (rotated by
//! `refreshSession`, the old one honoured only for a grace period) and
//! `deleteSession` ends a session. The same scenario runs against the
//! reference PDS and `gelstore serve`, so the answers (statuses, error
//! names) are the reference's. Then `gelstore serve` only: the grace
//! period set to 0 (`GELSTORE_REFRESH_GRACE_SECS`), revocations and live
//! sessions kept across a restart, a new password ending every session,
//! a bad grace setting refused at start, and `gelstore sync` through two
//! refreshes in one run with no grace (it must use the rotated token).

use crate::support::peer;
use crate::support::proxy;
use crate::support::serve;

use base64::Engine as _;
use serde_json::{Value, json};

use peer::{Peer, ok, on_both_peers};
use proxy::Proxy;
use serve::{Response, Serve, http};

/// `host:port` of a service URL.
fn addr(service: &str) -> String {
    service
        .trim_start_matches("http://")
        .replace("localhost", "127.0.0.1")
}

fn login(service: &str, identifier: &str, password: &str) -> Value {
    let r = http(
        &addr(service),
        "POST",
        "/xrpc/com.atproto.server.createSession",
        &[("content-type", "application/json")],
        json!({"identifier": identifier, "password": password})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(r.status, 200, "createSession: {}", r.text());
    r.json()
}

/// The refresh token of a session answer.
fn refresh_token_of(session: &Value) -> String {
    session["refreshJwt"].as_str().unwrap().to_owned()
}

/// A POST with `token` as the bearer and no body.
fn post(service: &str, nsid: &str, token: &str) -> Response {
    http(
        &addr(service),
        "POST",
        &format!("/xrpc/{nsid}"),
        &[("authorization", &format!("Bearer {token}"))],
        b"",
    )
}

fn refresh(service: &str, token: &str) -> Response {
    post(service, "com.atproto.server.refreshSession", token)
}

fn delete_session(service: &str, token: &str) -> Response {
    post(service, "com.atproto.server.deleteSession", token)
}

fn get_session(service: &str, access: &str) -> Response {
    http(
        &addr(service),
        "GET",
        "/xrpc/com.atproto.server.getSession",
        &[("authorization", &format!("Bearer {access}"))],
        b"",
    )
}

/// The `refreshJwt` of a 200 answer.
fn refresh_jwt(r: &Response) -> String {
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["refreshJwt"]
        .as_str()
        .expect("refreshJwt")
        .to_owned()
}

/// A JWT's `jti` claim.
fn jti(jwt: &str) -> String {
    let payload = jwt.split('.').nth(1).expect("a JWT");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .expect("base64url");
    let claims: Value = serde_json::from_slice(&bytes).expect("JSON claims");
    claims["jti"].as_str().expect("jti").to_owned()
}

on_both_peers!(a_refresh_token_is_rotated_once_and_delete_session_ends_it);

fn a_refresh_token_is_rotated_once_and_delete_session_ends_it(peer: Peer) {
    let s = &peer.service;
    let session = login(s, &peer.handle, &peer.password);
    let r0 = session["refreshJwt"].as_str().unwrap().to_owned();

    // Rotation: a new refresh token with a new id.
    let first = refresh(s, &r0);
    let r1 = refresh_jwt(&first);
    assert_ne!(jti(&r1), jti(&r0));
    assert_eq!(
        get_session(s, first.json()["accessJwt"].as_str().unwrap()).status,
        200
    );
    // Within the grace period the old token answers again, with the same
    // successor id (a client that lost the first answer can retry).
    let retried = refresh_jwt(&refresh(s, &r0));
    assert_eq!(jti(&retried), jti(&r1));
    // The successor rotates in turn.
    let r2 = refresh_jwt(&refresh(s, &r1));
    assert_ne!(jti(&r2), jti(&r1));

    // deleteSession takes only a refresh token…
    let access = session["accessJwt"].as_str().unwrap();
    delete_session(s, access).expect_error(400, "InvalidToken");
    let none = http(
        &addr(s),
        "POST",
        "/xrpc/com.atproto.server.deleteSession",
        &[],
        b"",
    );
    assert_eq!(none.status, 401, "{}", none.text());
    // …ends the session: that refresh token is refused by name…
    let deleted = delete_session(s, &r2);
    assert_eq!(deleted.status, 200, "{}", deleted.text());
    let refused = refresh(s, &r2);
    refused.expect_error(400, "ExpiredToken");
    assert!(
        refused.json()["message"]
            .as_str()
            .unwrap()
            .contains("revoked")
    );
    // …and again is no error.
    assert_eq!(delete_session(s, &r2).status, 200);
    // Other sessions live on.
    let other = login(s, &peer.handle, &peer.password);
    refresh_jwt(&refresh(s, other["refreshJwt"].as_str().unwrap()));
    // A forged refresh token is InvalidToken, not ExpiredToken.
    let forged = serve::forged_jwt(&r1);
    refresh(s, &forged).expect_error(400, "InvalidToken");
}

#[test]
fn with_no_grace_a_used_refresh_token_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let serve = Serve::start_with(
        &data,
        "127.0.0.1:0",
        &[],
        &[("GELSTORE_REFRESH_GRACE_SECS", "0")],
        serve::PASSWORD,
    );
    let s = &serve.service;
    let r0 = refresh_token_of(&login(s, &serve.handle, &serve.password));
    let r1 = refresh_jwt(&refresh(s, &r0));
    let replay = refresh(s, &r0);
    replay.expect_error(400, "ExpiredToken");
    assert_eq!(replay.json()["message"], "Token has been revoked");
    refresh_jwt(&refresh(s, &r1));
    refresh(s, &r1).expect_error(400, "ExpiredToken");
}

#[test]
fn revocations_survive_a_restart_and_a_new_password_ends_every_session() {
    let serve = Serve::start();
    let s = serve.service.clone();
    let listen = serve.addr();
    let data = serve.data.clone();
    let revoked = login(&s, &serve.handle, &serve.password)["refreshJwt"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(delete_session(&s, &revoked).status, 200);
    let live = login(&s, &serve.handle, &serve.password)["refreshJwt"]
        .as_str()
        .unwrap()
        .to_owned();
    let rotated = refresh_jwt(&refresh(&s, &live));
    let dir = serve.stop();

    // The live set is a private file holding ids, never whole tokens.
    let file = data.join("sessions.json");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains(&jti(&rotated)) && !text.contains(&jti(&revoked)));
    assert!(!text.contains(&rotated), "a whole token is stored");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    // Same password: the revoked token stays refused, the rotated one and
    // the old one within its grace still work.
    let serve = Serve::start_at(&data, &listen, &[]);
    refresh(&s, &revoked).expect_error(400, "ExpiredToken");
    let again = refresh_jwt(&refresh(&s, &live));
    assert_eq!(jti(&again), jti(&rotated));
    let latest = refresh_jwt(&refresh(&s, &rotated));
    drop(serve);

    // A new password: every session ends (the token key changed) and no
    // id is kept.
    let serve = Serve::start_with(&data, &listen, &[], &[], "a new password");
    refresh(&s, &latest).expect_error(400, "InvalidToken");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(!text.contains(&jti(&latest)), "{text}");
    let fresh = login(&s, &serve.handle, "a new password");
    refresh_jwt(&refresh(&s, fresh["refreshJwt"].as_str().unwrap()));
    drop(serve);
    drop(dir);
}

#[test]
fn a_bad_grace_setting_stops_the_start_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    for bad in ["soon", "7201", "-1"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_gelstore"))
            .arg("--data")
            .arg(dir.path().join("data"))
            .args(["serve", "--listen", "127.0.0.1:0", "--password", "pw"])
            .env("GELSTORE_REFRESH_GRACE_SECS", bad)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad}: {stderr}");
        assert!(out.stdout.is_empty(), "{bad}: a ready line was printed");
        assert!(
            stderr.contains("GELSTORE_REFRESH_GRACE_SECS"),
            "{bad}: {stderr}"
        );
    }
}

#[test]
fn gelstore_sync_refreshes_twice_in_one_run_with_the_rotated_token() {
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::start_with(
        &dir.path().join("server"),
        "127.0.0.1:0",
        &[],
        &[("GELSTORE_REFRESH_GRACE_SECS", "0")],
        serve::PASSWORD,
    );
    let proxy = Proxy::start(&serve.service);
    let d = dir.path().join("device");
    ok(&d, &["device", "init"]);
    let chat = ok(&d, &["chat", "new", "--title", "rotation"]);
    ok(
        &d,
        &["chat", "send", "--chat", chat.lines().next().unwrap(), "hi"],
    );
    // Two calls refused as expired: two refreshes, the second with the
    // refresh token the first returned (the first is dead at once).
    proxy.expire_next("com.atproto.repo.applyWrites");
    proxy.expire_next_with("com.atproto.sync.getRepo", 401);
    let options = gelstore::sync::SyncOptions {
        service: proxy.url.clone(),
        identifier: serve.handle.clone(),
        password: serve.password.clone(),
        plc: "http://127.0.0.1:9".into(),
    };
    let report = gelstore::sync::sync(&d, &options).unwrap();
    assert_eq!(proxy.expired("com.atproto.repo.applyWrites"), 1);
    assert_eq!(proxy.expired("com.atproto.sync.getRepo"), 1);
    assert_eq!(proxy.seen("com.atproto.server.refreshSession"), 2);
    assert!(report.pull.data_matches, "{report:?}");
}

/// Password guessing is limited with the reference PDS's figures: after 30
/// failed attempts in 5 minutes from one client, its attempts are refused,
/// the right password too, with `RateLimitExceeded` (429) — while
/// successful logins (a frequent `gelstore sync`) never count. Without
/// `--public-url` a client cannot pick another address by header.
#[test]
fn thirty_wrong_passwords_lock_the_client_out_for_a_while() {
    let serve = Serve::start();
    let attempt = |password: &str| {
        http(
            &addr(&serve.service),
            "POST",
            "/xrpc/com.atproto.server.createSession",
            &[("content-type", "application/json")],
            json!({"identifier": serve.handle, "password": password})
                .to_string()
                .as_bytes(),
        )
    };
    // Two at a time (the server hashes two at once): 31 good logins, then
    // 30 failures.
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                for _ in 0..16 {
                    login(&serve.service, &serve.handle, &serve.password);
                }
            });
        }
    });
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                for _ in 0..15 {
                    attempt("wrong").expect_error(401, "AuthenticationRequired");
                }
            });
        }
    });
    let locked = attempt("wrong");
    locked.expect_error(429, "RateLimitExceeded");
    assert!(locked.text().contains("try again in"), "{}", locked.text());
    attempt(&serve.password).expect_error(429, "RateLimitExceeded");
    let spoofed = http(
        &addr(&serve.service),
        "POST",
        "/xrpc/com.atproto.server.createSession",
        &[
            ("content-type", "application/json"),
            ("x-forwarded-for", "203.0.113.9"),
        ],
        json!({"identifier": serve.handle, "password": serve.password})
            .to_string()
            .as_bytes(),
    );
    spoofed.expect_error(429, "RateLimitExceeded");
    // Everything else keeps working, sessions made before included.
    let r = http(
        &addr(&serve.service),
        "GET",
        "/xrpc/com.atproto.server.describeServer",
        &[],
        b"",
    );
    assert_eq!(r.status, 200);
}

/// After `deleteSession`, a predecessor of the deleted token still in its
/// grace period cannot bring the session back by refreshing into it (the
/// reference PDS lets it; a logout here ends the session).
#[test]
fn a_logout_is_not_undone_by_the_previous_refresh_token() {
    let serve = Serve::start();
    let s = &serve.service;
    let r0 = refresh_token_of(&login(s, &serve.handle, &serve.password));
    let r1 = refresh_jwt(&refresh(s, &r0));
    assert_eq!(delete_session(s, &r1).status, 200);
    refresh(s, &r0).expect_error(400, "ExpiredToken");
    refresh(s, &r1).expect_error(400, "ExpiredToken");
}
