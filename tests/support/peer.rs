//! The server `gelstore sync` talks to in a test: either the reference PDS
//! ([`super::pds`]: a did:plc account on a fresh PDS + PLC) or `gelstore
//! serve` ([`super::serve`]: its one did:web account on a fresh data
//! folder). A suite written against [`Peer`] runs against both; the
//! [`on_both_peers!`] macro makes one test function per (scenario, peer).

use std::path::Path;

use gelstore::repo::repository::{Repository, Write};
use gelstore::repo::tid::Tid;
use gelstore::sync::SyncState;

use crate::support::pds::Pds;
use crate::support::serve::Serve;

/// Which server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The reference PDS (`@atproto/pds`), did:plc through its PLC.
    Pds,
    /// `gelstore serve`, did:web on its own host.
    Serve,
}

enum Process {
    Pds(Pds),
    Serve(Serve),
}

/// A started peer with its account; the process stops on drop.
pub struct Peer {
    /// Which server this is.
    pub kind: Kind,
    /// The service URL sync logs into.
    pub service: String,
    /// The account's DID.
    pub did: String,
    /// Its handle.
    pub handle: String,
    /// Its password.
    pub password: String,
    /// The PLC directory holding the account's DID document (the reference
    /// PDS's did:plc); `None` for `gelstore serve`'s did:web.
    pub plc: Option<String>,
    process: Process,
}

impl Peer {
    /// Starts a fresh peer of `kind` with a fresh account.
    pub fn start(kind: Kind) -> Peer {
        match kind {
            Kind::Pds => {
                let pds = Pds::start();
                Peer {
                    kind,
                    service: pds.service.clone(),
                    did: pds.did.clone(),
                    handle: pds.handle.clone(),
                    password: pds.password.clone(),
                    plc: Some(pds.plc.clone()),
                    process: Process::Pds(pds),
                }
            }
            Kind::Serve => {
                let serve = Serve::start();
                Peer {
                    kind,
                    service: serve.service.clone(),
                    did: serve.did.clone(),
                    handle: serve.handle.clone(),
                    password: serve.password.clone(),
                    plc: None,
                    process: Process::Serve(serve),
                }
            }
        }
    }

    /// What `gelstore sync --plc` is given: the PLC URL, or for a did:web
    /// account a URL that must never be asked (nothing listens on port 9),
    /// so a sync that wrongly went to a PLC would fail.
    pub fn plc_arg(&self) -> &str {
        self.plc.as_deref().unwrap_or("http://127.0.0.1:9")
    }

    /// The DID as a URL query value (a did:web carries `%3A`).
    pub fn did_param(&self) -> String {
        self.did.replace('%', "%25")
    }

    /// `sync::SyncOptions` for this account through `service` (the peer's
    /// own URL or a proxy in front of it).
    pub fn options_via(&self, service: &str) -> gelstore::sync::SyncOptions {
        gelstore::sync::SyncOptions {
            service: service.to_owned(),
            identifier: self.handle.clone(),
            password: self.password.clone(),
            plc: self.plc_arg().to_owned(),
        }
    }

    /// `sync::SyncOptions` for this account.
    pub fn options(&self) -> gelstore::sync::SyncOptions {
        self.options_via(&self.service)
    }

    /// A second account a store linked to this one must refuse: another
    /// account on the same reference PDS (createAccount), or, since `gelstore
    /// serve` serves one account per data folder, a second server.
    pub fn another_account(&self) -> Account {
        match &self.process {
            Process::Pds(pds) => {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                let (status, bob) = rt.block_on(async {
                    let resp = reqwest::Client::new()
                        .post(format!(
                            "{}/xrpc/com.atproto.server.createAccount",
                            pds.service
                        ))
                        .json(&serde_json::json!({
                            "handle": "bob.test",
                            "email": "bob@example.com",
                            "password": "bob-pass",
                        }))
                        .send()
                        .await
                        .unwrap();
                    let status = resp.status().as_u16();
                    (
                        status,
                        resp.json::<serde_json::Value>().await.unwrap_or_default(),
                    )
                });
                assert_eq!(status, 200, "{bob}");
                Account {
                    service: pds.service.clone(),
                    did: bob["did"].as_str().unwrap().to_owned(),
                    handle: "bob.test".into(),
                    password: "bob-pass".into(),
                    _peer: None,
                }
            }
            Process::Serve(_) => {
                let other = Peer::start(Kind::Serve);
                Account {
                    service: other.service.clone(),
                    did: other.did.clone(),
                    handle: other.handle.clone(),
                    password: other.password.clone(),
                    _peer: Some(Box::new(other)),
                }
            }
        }
    }
}

/// Another account (see [`Peer::another_account`]).
pub struct Account {
    /// Where it lives.
    pub service: String,
    /// Its DID.
    pub did: String,
    /// Its handle.
    pub handle: String,
    /// Its password.
    pub password: String,
    _peer: Option<Box<Peer>>,
}

impl Account {
    /// The DID as a URL query value.
    pub fn did_param(&self) -> String {
        self.did.replace('%', "%25")
    }
}

/// `on_both_peers!(scenario_a, scenario_b);` for `fn scenario_a(peer:
/// Peer)`: a module `scenario_a` with the tests `pds` and `serve`, each
/// running the same body against a freshly started peer of that kind.
macro_rules! on_both_peers {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            #[test]
            fn pds() {
                super::$scenario(crate::support::peer::Peer::start(
                    crate::support::peer::Kind::Pds,
                ));
            }
            #[test]
            fn serve() {
                super::$scenario(crate::support::peer::Peer::start(
                    crate::support::peer::Kind::Serve,
                ));
            }
        }
    )*};
}
pub(crate) use on_both_peers;

/// `gelstore --data DATA ARGS…` (the password only from the arguments).
pub fn gel_command(data: &std::path::Path, args: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_gelstore"));
    cmd.arg("--data")
        .arg(data)
        .args(args)
        .env_remove("GELSTORE_PASSWORD");
    cmd
}

/// Runs [`gel_command`] to the end.
pub fn gel(data: &std::path::Path, args: &[&str]) -> std::process::Output {
    gel_command(data, args).output().unwrap()
}

/// Runs [`gel_command`], which must succeed; its stdout.
pub fn ok(data: &std::path::Path, args: &[&str]) -> String {
    let out = gel(data, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The sync mirror of the store in `data`, as the store holds it (the
/// store is opened and closed again).
pub fn mirror(data: &Path) -> SyncState {
    let repo = Repository::open(data).unwrap();
    SyncState::load(data, &repo).unwrap()
}

/// Writes `n` chat records straight into the store of `data`, in one
/// commit: TID keys from `first` (microseconds) on, each padded with `pad`
/// bytes (0: none).
pub fn add_chat_records(data: &Path, first: u64, n: u64, pad: usize) {
    let mut repo = Repository::open(data).unwrap();
    let writes: Vec<Write> = (0..n)
        .map(|i| {
            let mut value = serde_json::json!({
                "$type": "chat.gel.assistant.chat",
                "createdAt": "2026-01-01T00:00:00.000Z",
            });
            if pad > 0 {
                value["pad"] = "x".repeat(pad).into();
            }
            let rkey = Tid::from_u64((first + i) << 10).to_string();
            Write::create("chat.gel.assistant.chat", rkey, value)
        })
        .collect();
    repo.apply(&writes).unwrap();
}

/// `gelstore sync` arguments for `peer`'s account through `service` (the
/// peer's own URL, or a proxy in front of it), JSON report.
pub fn sync_args<'a>(peer: &'a Peer, service: &'a str, password: &'a str) -> Vec<&'a str> {
    vec![
        "sync",
        "--pds",
        service,
        "--identifier",
        &peer.handle,
        "--password",
        password,
        "--plc",
        peer.plc_arg(),
        "--format",
        "json",
    ]
}

/// `chat show --format json` of `chat` in the store of `data`.
pub fn show(data: &Path, chat: &str) -> serde_json::Value {
    let out = ok(data, &["chat", "show", "--chat", chat, "--format", "json"]);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// The message `key` of a `chat show` thread.
pub fn message<'a>(thread: &'a serde_json::Value, key: &str) -> &'a serde_json::Value {
    thread["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["key"] == key)
        .unwrap_or_else(|| panic!("no message {key} in {thread}"))
}
