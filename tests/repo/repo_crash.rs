//! Durability under `kill -9`: a child process writes to a store and prints
//! an acknowledgement after each commit returns; the test kills it with
//! SIGKILL at random moments, reopens the store, checks every invariant
//! (`Repository::check`: signature, MST, all blocks present, no garbage,
//! reference counts), and checks that every acknowledged commit is there.
//!
//! Two children: this test binary itself, re-run as a writer loop through
//! the library (many commits per process, so kills land mid-write), and the
//! `gelstore repo apply` binary (one commit per process, so kills also land
//! while the engine opens and recovers). Each runs on every store engine
//! (`GELSTORE_STORE_ENGINE` chooses the child's new store).
//!
//! The writes of commit `n` are a function of `n`, so the expected contents
//! after commits `1..=c` are known exactly; `c` is read back from a counter
//! record that every commit updates.

#![cfg(unix)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use gelstore::repo::repository::{RepoError, Repository, Write};
use gelstore::store::{ENGINE_ENV, EngineKind};
use serde_json::{Value, json};

const COLL: &str = "com.example.crash";
const CHILD_ENV: &str = "GELSTORE_CRASH_WRITER_DIR";

/// The writes of commit `n` (n >= 1).
fn writes_for(n: u64) -> Vec<Write> {
    let mut w = vec![Write::create(COLL, format!("r{n:06}"), record(n, 0))];
    if n > 1 {
        w.push(Write::update(COLL, "counter", counter(n)));
    } else {
        w.push(Write::create(COLL, "counter", counter(n)));
    }
    if n.is_multiple_of(3) {
        w.push(Write::update(
            COLL,
            format!("r{:06}", n - 1),
            record(n - 1, 1),
        ));
    }
    if n.is_multiple_of(5) && n > 10 {
        w.push(Write::delete(COLL, format!("r{:06}", n - 10)));
    }
    w
}

fn record(i: u64, version: u64) -> Value {
    // Sizes vary so that commits write different amounts.
    let pad = "x".repeat(((i * 7919) % 1500) as usize);
    json!({"$type": COLL, "n": i, "v": version, "pad": pad})
}

fn counter(n: u64) -> Value {
    json!({"$type": COLL, "n": n})
}

/// What the repository holds after commits `1..=c`.
fn expected(c: u64) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    if c == 0 {
        return out;
    }
    out.push(("counter".to_owned(), counter(c)));
    for i in 1..=c {
        let deleted = i.is_multiple_of(5) && i + 10 <= c && i + 10 > 10;
        if deleted {
            continue;
        }
        let updated = (i + 1).is_multiple_of(3) && i < c;
        out.push((format!("r{i:06}"), record(i, u64::from(updated))));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The number of commits the store holds (0 before the first), after a
/// full check.
fn verify_store(data: &Path, engine: EngineKind) -> u64 {
    let repo = match Repository::open(data) {
        Ok(repo) => repo,
        // Killed before the first commit of `init` landed.
        Err(RepoError::NotInitialized { .. }) => return 0,
        Err(e) => panic!("the {engine} store does not open after a kill: {e}"),
    };
    assert_eq!(repo.engine().name(), engine.name());
    let report = repo
        .check()
        .unwrap_or_else(|e| panic!("store check after a kill: {e}"));
    assert!(report.signature_checked);
    let c = match repo.get(COLL, "counter").unwrap() {
        Some(entry) => entry.value["n"].as_u64().unwrap(),
        None => 0,
    };
    let mut actual = Vec::new();
    for item in repo.list(Some(COLL)).unwrap() {
        let (key, _) = item.unwrap();
        let rkey = key.split_once('/').unwrap().1.to_owned();
        let value = repo.get(COLL, &rkey).unwrap().unwrap().value;
        actual.push((rkey, value));
    }
    let want = expected(c);
    assert_eq!(actual.len(), want.len(), "record count after {c} commits");
    assert!(actual == want, "contents after {c} commits differ");
    check_events(&repo, c);
    c
}

/// The event log holds exactly one `#commit` per stored commit (the first
/// commit's and one per apply), and the last few verify as a chain ending
/// at the head: an event exists iff its commit does.
fn check_events(repo: &Repository, c: u64) {
    use gelstore::crypto::PublicKey;
    use gelstore::repo::events::{Frame, decode_frame, verify_commit};
    assert_eq!(
        repo.last_event_seq().unwrap(),
        Some(c + 1),
        "events after {c} commits"
    );
    let key = PublicKey::from_did_key(repo.did()).unwrap();
    let (mut data, mut last) = (None, None);
    for event in repo.events_since(Some(c.saturating_sub(3))).unwrap() {
        let event = event.unwrap();
        let Frame::Commit(commit) = decode_frame(&event.frame).unwrap() else {
            panic!("event {} is not a #commit", event.seq);
        };
        // The chain starts at the first event read.
        if last.is_none() {
            data = commit.prev_data;
        }
        let verified = verify_commit(&commit, data, &key)
            .unwrap_or_else(|e| panic!("event {} after a kill: {e}", event.seq));
        data = Some(verified.data);
        last = Some(verified.commit);
    }
    assert_eq!(last, Some(repo.head().commit), "the last event is the head");
}

/// The writer loop of the child process: commit after commit, each
/// acknowledged on stdout once `apply` returned.
fn writer_loop(data: &Path) -> ! {
    use std::io::Write as _;
    let mut repo = Repository::init(data).expect("init");
    let mut n = match repo.get(COLL, "counter").unwrap() {
        Some(entry) => entry.value["n"].as_u64().unwrap(),
        None => 0,
    };
    let stdout = std::io::stdout();
    loop {
        n += 1;
        repo.apply(&writes_for(n)).expect("apply");
        let mut out = stdout.lock();
        writeln!(out, "ack {n}").unwrap();
        out.flush().unwrap();
    }
}

/// Not a test on its own: the body of the child process, which only runs
/// when the parent test sets the environment variable.
#[test]
fn crash_writer_child() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        writer_loop(Path::new(&dir));
    }
}

/// A small deterministic generator (xorshift), seeded from the clock; the
/// seed is printed so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let seed = std::env::var("GELSTORE_CRASH_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
                    | 1
            });
        eprintln!("crash test seed: GELSTORE_CRASH_SEED={seed}");
        Rng(seed)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn sigkill(child: &mut Child) {
    // Child::kill sends SIGKILL on Unix.
    let _ = child.kill();
    let _ = child.wait();
}

/// Reads "ack N" lines of a child's stdout on a thread.
fn acks(child: &mut Child) -> mpsc::Receiver<u64> {
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // The test harness may print `test … ` on the same line first.
            let ack = line.rfind("ack ").map(|at| &line[at + 4..]);
            if let Some(n) = ack.and_then(|n| n.trim().parse().ok())
                && tx.send(n).is_err()
            {
                break;
            }
        }
    });
    rx
}

#[test]
fn acknowledged_commits_survive_sigkill_of_a_writer_loop_redb() {
    writer_loop_survives_sigkill(EngineKind::Redb);
}

#[test]
fn acknowledged_commits_survive_sigkill_of_a_writer_loop_sled() {
    writer_loop_survives_sigkill(EngineKind::Sled);
}

/// `crash_writer_child`'s name as the test binary knows it (its module path
/// below the crate root), for `--exact`.
fn child_test_name() -> String {
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    if module.is_empty() {
        "crash_writer_child".into()
    } else {
        format!("{module}::crash_writer_child")
    }
}

fn writer_loop_survives_sigkill(engine: EngineKind) {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    const KILLS: usize = 30;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut rng = Rng::new();
    let mut acked = 0u64;
    let mut total_acks = 0u64;
    let started = Instant::now();
    for round in 0..KILLS {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                &child_test_name(),
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &data)
            .env(ENGINE_ENV, engine.name())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let rx = acks(&mut child);
        let mut child_stderr = child.stderr.take().unwrap();
        let stderr_reader = thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut child_stderr, &mut text);
            text
        });
        // Let it write for a while (startup included), then kill it.
        let delay = Duration::from_millis(20 + rng.below(400));
        let deadline = Instant::now() + delay;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match rx.recv_timeout(left) {
                Ok(n) => {
                    assert_eq!(n, acked + 1, "round {round}: acks are consecutive");
                    acked = n;
                    total_acks += 1;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => break,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let _ = child.wait();
                    let text = stderr_reader.join().unwrap_or_default();
                    panic!("round {round}: the writer died by itself: {text}")
                }
            }
        }
        sigkill(&mut child);
        // Acks printed just before the kill.
        while let Ok(n) = rx.recv_timeout(Duration::from_millis(200)) {
            assert_eq!(n, acked + 1);
            acked = n;
            total_acks += 1;
        }
        let held = verify_store(&data, engine);
        assert!(
            held == acked || held == acked + 1,
            "round {round}: {acked} commits acknowledged, the store holds {held}"
        );
        // A commit that landed without its ack printed counts from now on.
        acked = held;
    }
    eprintln!(
        "{engine}: {KILLS} kills, {total_acks} acknowledged commits, {acked} in the store, {:?}",
        started.elapsed()
    );
    assert!(
        total_acks >= KILLS as u64,
        "the writer made too little progress"
    );
}

#[test]
fn acknowledged_commits_survive_sigkill_of_gelstore_repo_apply_redb() {
    repo_apply_survives_sigkill(EngineKind::Redb);
}

#[test]
fn acknowledged_commits_survive_sigkill_of_gelstore_repo_apply_sled() {
    repo_apply_survives_sigkill(EngineKind::Sled);
}

fn repo_apply_survives_sigkill(engine: EngineKind) {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    const KILLS: usize = 30;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let bin = env!("CARGO_BIN_EXE_gelstore");
    let init = Command::new(bin)
        .args(["--data", data.to_str().unwrap(), "repo", "init"])
        .args(["--engine", engine.name()])
        .output()
        .unwrap();
    assert!(init.status.success());
    let mut rng = Rng::new();
    let mut held = 0u64;
    let mut kills = 0;
    let mut completed = 0;
    // Time a normal run first, to aim the kills inside one.
    let mut typical = Duration::from_millis(50);
    while kills < KILLS {
        let n = held + 1;
        let stdin: String = writes_for(n)
            .iter()
            .map(|w| format!("{}\n", write_line(w)))
            .collect();
        let mut child = Command::new(bin)
            .args([
                "--data",
                data.to_str().unwrap(),
                "repo",
                "apply",
                "--format",
                "json",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        {
            use std::io::Write as _;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(stdin.as_bytes())
                .unwrap();
        }
        let kill = completed >= 3 && rng.below(4) != 0;
        let started = Instant::now();
        let acked = if kill {
            let delay = rng.below(typical.as_micros() as u64 * 3 / 2 + 1);
            thread::sleep(Duration::from_micros(delay));
            sigkill(&mut child);
            kills += 1;
            let mut out = String::new();
            use std::io::Read as _;
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut out)
                .unwrap();
            !out.trim().is_empty()
        } else {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "an apply that was not killed failed");
            typical = (typical + started.elapsed()) / 2;
            completed += 1;
            true
        };
        let now = verify_store(&data, engine);
        if acked {
            assert_eq!(
                now, n,
                "commit {n} was acknowledged but is not in the store"
            );
        } else {
            assert!(
                now == n || now == held,
                "the store holds {now} commits, expected {held} or {n}"
            );
        }
        held = now;
    }
    eprintln!(
        "{engine}: {kills} kills of `repo apply`, {held} commits in the store, typical run {typical:?}"
    );
}

fn write_line(w: &Write) -> Value {
    match w {
        Write::Create {
            collection,
            rkey,
            value,
        } => json!({"action": "create", "collection": collection, "rkey": rkey, "value": value}),
        Write::Update {
            collection,
            rkey,
            value,
            ..
        } => json!({"action": "update", "collection": collection, "rkey": rkey, "value": value}),
        Write::Delete {
            collection, rkey, ..
        } => json!({"action": "delete", "collection": collection, "rkey": rkey}),
    }
}
