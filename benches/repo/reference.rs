//! The repository side by side with the reference: the same records written,
//! exported, verified, imported and opened by whole `gelstore` processes (as
//! a user runs them) and by `@atproto/repo` in one Node process, in memory
//! (`tests/reference/repo-ref.mjs bench`; its start-up and the loading of
//! its inputs are not counted). Both sides run in the same bench run. A
//! single create is also timed where a running server takes it: a
//! `createRecord` to `gelstore serve` on the same store.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::COLL;
use crate::http::Conn;
use crate::launch;
use crate::measure::{du, du_apparent, median, ms_since};
use crate::records::message;
use crate::reference_harness::repo_ref;

/// 100 commits of 200 creates (the workload).
const COMMITS: usize = 100;
const PER_COMMIT: usize = 200;
/// Single creates timed on the large repository (the median is printed).
const CREATES: usize = 9;
/// `repo info` runs timed for the open time (the median is printed).
const OPENS: usize = 9;
/// Runs of export, verify and import on each side (the median is printed):
/// one run of each moves by a third between runs on a shared machine.
const REPEATS: usize = 3;

/// One row: what was done, gelstore's time and the reference's (ms).
struct Row {
    work: String,
    gelstore: f64,
    reference: f64,
}

/// Runs both sides. `big` is a repository of `big_records` records that
/// this run built (its store folder and its exported CAR); its store gets
/// the single creates.
pub fn side_by_side(work: &Path, big_store: &Path, big_car: &Path, big_records: usize) {
    let gelstore = Path::new(env!("CARGO_BIN_EXE_gelstore"));
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    let rkey = |i: usize| format!("{}.r0", tid(i));

    // The writes, once: gelstore's JSON lines and the reference's batches.
    let mut gel_batches = Vec::with_capacity(COMMITS);
    let mut ref_batches = String::new();
    for c in 0..COMMITS {
        let mut lines = String::new();
        let mut batch = Vec::with_capacity(PER_COMMIT);
        for i in c * PER_COMMIT..(c + 1) * PER_COMMIT {
            let record = message(i, &mut rng);
            let key = rkey(i);
            lines.push_str(&gel_write(&key, &record));
            lines.push('\n');
            batch.push(
                json!({"action": "create", "collection": COLL, "rkey": key, "record": record}),
            );
        }
        gel_batches.push(lines);
        ref_batches.push_str(&Value::Array(batch).to_string());
        ref_batches.push('\n');
    }
    let creates: Vec<(String, Value)> = (0..CREATES * 2 + 1)
        .map(|k| {
            (
                format!("{}.r0", tid(big_records + 1 + k)),
                message(k, &mut rng),
            )
        })
        .collect();

    // gelstore.
    let store = work.join("gel");
    run(gelstore, &store, &["repo", "init"], None);
    let started = Instant::now();
    for lines in &gel_batches {
        run(gelstore, &store, &["repo", "apply"], Some(lines.as_bytes()));
    }
    let gel_commits = ms_since(started);
    let info: Value = serde_json::from_slice(&run(
        gelstore,
        &store,
        &["repo", "info", "--format", "json"],
        None,
    ))
    .expect("repo info JSON");
    assert_eq!(info["records"], COMMITS * PER_COMMIT, "every write landed");
    let event_bytes = info["events"]["bytes"]
        .as_u64()
        .expect("info's event window");
    let gel_car = work.join("gel.car");
    let car_arg = gel_car.to_str().expect("UTF-8 temp path");
    let gel_export = median((0..REPEATS).map(|_| {
        let started = Instant::now();
        run(
            gelstore,
            &store,
            &["repo", "export", "--out", car_arg],
            None,
        );
        ms_since(started)
    }));
    let gel_verify = median((0..REPEATS).map(|_| {
        let started = Instant::now();
        let verified = run(
            gelstore,
            &store,
            &["repo", "verify", car_arg, "--format", "json"],
            None,
        );
        let took = ms_since(started);
        let verified: Value = serde_json::from_slice(&verified).expect("verify JSON");
        assert_eq!(verified["records"], COMMITS * PER_COMMIT, "{verified}");
        took
    }));
    let import_dir = |n: usize| work.join(format!("gel-import-{n}"));
    let gel_import = median((0..REPEATS).map(|n| {
        let started = Instant::now();
        run(gelstore, &import_dir(n), &["repo", "import", car_arg], None);
        ms_since(started)
    }));
    let imported = import_dir(0);
    let gel_open = median((0..OPENS).map(|_| {
        let started = Instant::now();
        run(gelstore, &store, &["repo", "info"], None);
        ms_since(started)
    }));
    let (cli_creates, served_creates) = creates.split_at(CREATES);
    let gel_create = median(cli_creates.iter().map(|(key, record)| {
        let line = gel_write(key, record);
        let started = Instant::now();
        run(
            gelstore,
            big_store,
            &["repo", "apply"],
            Some(line.as_bytes()),
        );
        ms_since(started)
    }));
    let gel_served_create = served_create(gelstore, big_store, served_creates);
    // The floor under every whole-process figure: starting the binary.
    let gel_start = median((0..OPENS).map(|_| {
        let started = Instant::now();
        run(gelstore, &store, &["--version"], None);
        ms_since(started)
    }));
    let durable_write = durable_write_ms(work);
    let signature = commit_signature_us();
    let store_bytes = du(&store);
    let store_length = du_apparent(&store);
    let import_bytes = du(&imported);
    let car_bytes = std::fs::metadata(&gel_car).expect("CAR").len();

    // The reference, on the same records.
    let batches_file = work.join("ref-batches.jsonl");
    std::fs::write(&batches_file, ref_batches).expect("write batches");
    let ref_car = work.join("ref.car");
    let input = json!({
        "batches": batches_file,
        "car": ref_car,
        "big": big_car,
        "repeats": REPEATS,
        "creates": cli_creates
            .iter()
            .map(|(key, record)| json!({"action": "create", "collection": COLL, "rkey": key, "record": record}))
            .collect::<Vec<_>>(),
    });
    let out = repo_ref(&["bench"], Some(&input));
    let field = |name: &str| {
        out[name]
            .as_f64()
            .unwrap_or_else(|| panic!("reference bench lacks {name}: {out}"))
    };
    let ref_creates: Vec<f64> = out["creates"]
        .as_array()
        .expect("creates")
        .iter()
        .map(|v| v.as_f64().expect("ms"))
        .collect();
    let ref_car_bytes = std::fs::metadata(&ref_car).expect("reference CAR").len();

    let rows = [
        Row {
            work: format!("{COMMITS} commits of {PER_COMMIT} creates"),
            gelstore: gel_commits,
            reference: field("commits"),
        },
        Row {
            work: format!("1 create at {big_records} records (median of {CREATES})"),
            gelstore: gel_create,
            reference: median(ref_creates.iter().copied()),
        },
        Row {
            work: format!(
                "1 create at {big_records} records through `gelstore serve` (createRecord, median of {CREATES})"
            ),
            gelstore: gel_served_create,
            reference: median(ref_creates.iter().copied()),
        },
        Row {
            work: format!(
                "export the {:.1} MB CAR (median of {REPEATS})",
                car_bytes as f64 / 1e6
            ),
            gelstore: gel_export,
            reference: field("export"),
        },
        Row {
            work: format!("verify that CAR fully (median of {REPEATS})"),
            gelstore: gel_verify,
            reference: field("verify"),
        },
        Row {
            work: format!("import it (verify + store, median of {REPEATS})"),
            gelstore: gel_import,
            reference: field("import"),
        },
        Row {
            work: format!(
                "open the {}-record store (median of {OPENS})",
                COMMITS * PER_COMMIT
            ),
            gelstore: gel_open,
            reference: field("open"),
        },
    ];
    println!();
    println!(
        "side by side, {} sealed messages: gelstore as whole processes, @atproto/repo in memory in one process",
        COMMITS * PER_COMMIT
    );
    println!("| work | gelstore | @atproto/repo | ratio | goal 10× |");
    println!("|---|---|---|---|---|");
    for row in &rows {
        let ratio = row.reference / row.gelstore;
        println!(
            "| {} | {:.1} ms | {:.1} ms | {ratio:.1}× | {} |",
            row.work,
            row.gelstore,
            row.reference,
            if ratio >= 10.0 { "met" } else { "not met" }
        );
    }
    let ratio = |bytes: u64| bytes as f64 / car_bytes as f64;
    // The goal counts the store without its event window (bounded on its
    // own: `repo info` reports it).
    let repository_bytes = store_bytes.saturating_sub(event_bytes);
    println!(
        "| size on disk | {:.1} MB = {:.2}× the CAR (file lengths {:.1} MB: redb's file ends sparse), of which the event window {:.1} MB: {:.2}× without it (imported, no events: {:.1} MB = {:.2}×) | blocks in memory: the CAR, {:.1} MB | | goal ≤ 1.5×: {} |",
        store_bytes as f64 / 1e6,
        ratio(store_bytes),
        store_length as f64 / 1e6,
        event_bytes as f64 / 1e6,
        ratio(repository_bytes),
        import_bytes as f64 / 1e6,
        ratio(import_bytes),
        ref_car_bytes as f64 / 1e6,
        if ratio(repository_bytes) <= 1.5 && ratio(import_bytes) <= 1.5 {
            "met"
        } else {
            "not met"
        }
    );
    println!(
        "(a gelstore process that does nothing, `gelstore --version`: {gel_start:.1} ms, median of {OPENS}; one 4 KiB write made durable with `fdatasync` in the same folder: {durable_write:.2} ms, median of {OPENS}; one secp256k1 signature of a commit-sized message: {signature:.1} µs, mean of {SIGNATURES})"
    );
}

/// The median time to write 4 KiB to a file in `dir` and `fdatasync` it:
/// what any commit that is durable before it returns pays at least once.
fn durable_write_ms(dir: &Path) -> f64 {
    let path = dir.join("durable-write-probe");
    let mut file = std::fs::File::create(&path).expect("probe file");
    let page = [7u8; 4096];
    let took = median((0..OPENS).map(|_| {
        let started = Instant::now();
        file.write_all(&page).expect("write the probe");
        file.sync_data().expect("fdatasync the probe");
        ms_since(started)
    }));
    drop(file);
    let _ = std::fs::remove_file(&path);
    took
}

/// Signatures timed together for [`commit_signature_us`] (one alone is
/// below the clock's useful resolution).
const SIGNATURES: u32 = 1000;

/// The mean time of one signature with a secp256k1 key (the default for
/// new repositories) over 200 bytes, about an unsigned commit's size: what
/// every commit pays once.
fn commit_signature_us() -> f64 {
    use gelstore::crypto::{KeyAlgorithm, SigningKey};
    let key = SigningKey::generate(KeyAlgorithm::K256).expect("a signing key");
    let commit = [7u8; 200];
    key.sign(&commit); // the first builds the curve's tables
    let started = Instant::now();
    for _ in 0..SIGNATURES {
        std::hint::black_box(key.sign(std::hint::black_box(&commit)));
    }
    started.elapsed().as_secs_f64() * 1e6 / f64::from(SIGNATURES)
}

/// The median time of one `createRecord` of `creates` (after the first,
/// untimed) to a `gelstore serve` on `data`, over one keep-alive
/// connection: a single write where a running server takes it, without a
/// process start.
fn served_create(gelstore: &Path, data: &Path, creates: &[(String, Value)]) -> f64 {
    let mut child = Command::new(gelstore)
        .arg("--data")
        .arg(data)
        .args(["serve", "--listen", "127.0.0.1:0", "--password", "bench"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start gelstore serve");
    let info = launch::ready_json(&mut child, "gelstore serve", Duration::from_secs(90));
    let addr = launch::field(&info, "service")
        .trim_start_matches("http://")
        .replace("localhost", "127.0.0.1");
    let did = launch::field(&info, "did");
    let mut conn = Conn::new(&addr);
    let (status, session) = conn.request(
        "POST",
        "/xrpc/com.atproto.server.createSession",
        None,
        Some(&json!({"identifier": launch::field(&info, "handle"), "password": "bench"})),
    );
    assert_eq!(status, 200, "createSession: {session}");
    let token = session["accessJwt"].as_str().expect("accessJwt").to_owned();
    let mut times = Vec::with_capacity(creates.len());
    for (i, (rkey, record)) in creates.iter().enumerate() {
        let body = json!({"repo": did, "collection": COLL, "rkey": rkey, "record": record});
        let started = Instant::now();
        let (status, answer) = conn.request(
            "POST",
            "/xrpc/com.atproto.repo.createRecord",
            Some(&token),
            Some(&body),
        );
        let took = ms_since(started);
        assert_eq!(status, 200, "createRecord: {answer}");
        if i > 0 {
            times.push(took);
        }
    }
    launch::terminate(&mut child);
    median(times)
}

/// A TID-like record key for record `i` (microseconds a millisecond apart).
fn tid(i: usize) -> String {
    let base = gelstore::repo::tid::Tid::parse("3lbqzdw5pzk22")
        .unwrap()
        .as_u64();
    gelstore::repo::tid::Tid::from_u64(base + (i as u64) * 1024).to_string()
}

/// One `repo apply` line.
fn gel_write(rkey: &str, record: &Value) -> String {
    json!({"action": "create", "collection": COLL, "rkey": rkey, "value": record}).to_string()
}

/// Runs `gelstore --data DATA ARGS` with `stdin`; panics unless it succeeds.
/// Returns its stdout.
fn run(gelstore: &Path, data: &Path, args: &[&str], stdin: Option<&[u8]>) -> Vec<u8> {
    let mut child = Command::new(gelstore)
        .arg("--data")
        .arg(data)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run gelstore");
    if let Some(bytes) = stdin {
        let mut pipe = child.stdin.take().expect("stdin");
        pipe.write_all(bytes).expect("write stdin");
    }
    let output = child.wait_with_output().expect("wait for gelstore");
    assert!(
        output.status.success(),
        "gelstore {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}
