//! `device remove` and the first open after it, at 10 and 50 devices and
//! 100 and 1,000 chats (each chat with its chat key and one sealed record),
//! side by side in one run.
//!
//! 1. **Keyring** (in memory, no disk): `Keyring::remove_device` on the
//!    first device (the rotation: one signed change, a wrap of the new
//!    account key per remaining device, the old key chained to the new);
//!    then what a remaining device does with it: `absorb` of the removal's
//!    records alone (a sync that brings only them), `absorb` of every
//!    record (a sync that hands it all), and `Keyring::rejoin` from every
//!    record (a rebuild from scratch, what `Device::open` does).
//! 2. **Store** (a data folder on disk, built through `gelstore::device`:
//!    `init`, `pair` + `approve` per device, the chats sealed with
//!    `Device::apply_sealed`): `gelstore::device::remove` (it opens the
//!    device, rotates, and commits the records), then the first
//!    `Device::open` after it. Each sample starts from a fresh copy of the
//!    folder built before it.
//!
//! Each figure is the median of `GELSTORE_BENCH_SAMPLES` (5) samples. The
//! last columns are the ratios 1,000 chats / 100 chats (at 50 devices) and
//! 50 devices / 10 devices (at 1,000 chats).
//!
//! Run: `cargo bench --bench membership`.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gelstore::device::{self, Device, SealedAction, SealedWrite};
use gelstore::lexicon::chat::gel::assistant::chat::{Chat, SealedFields};
use gelstore::lexicon_runtime::Datetime;
use gelstore::model::record_from_json;
use gelstore::repo::tid::TidClock;
use gelstore::seal::{
    DeviceKey, KeySet, Keyring, PairingRequest, Place, SealOptions, os_rng, pair_request,
    seal_record,
};
use serde_json::json;

const DID: &str = "did:plc:ewvi7nxzyoun6zhxrhs64oiz";
const CHAT: &str = "chat.gel.assistant.chat";
const CREATED: &str = "2026-01-02T03:04:05.000Z";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Median of `samples` runs of `run`, each on a fresh input from `input`
/// (made outside the timing).
fn sample<I>(samples: usize, mut input: impl FnMut() -> I, mut run: impl FnMut(I)) -> Duration {
    let times = (0..samples)
        .map(|_| {
            let i = input();
            let start = Instant::now();
            run(i);
            start.elapsed()
        })
        .collect();
    median(times)
}

/// The chat rkeys: TIDs, as the lexicon wants.
fn chat_rkeys(n: usize) -> Vec<String> {
    let mut clock = TidClock::new();
    (0..n)
        .map(|_| clock.next_tid().unwrap().to_string())
        .collect()
}

/// One account in memory: the first device's keyring, a second device's
/// (synced), the second device's key and request, and every record.
struct Account {
    first: Keyring,
    second: Keyring,
    second_key: DeviceKey,
    second_request: PairingRequest,
    records: KeySet,
    /// The device the benchmark removes.
    last: String,
}

fn account(devices: usize, chats: &[String]) -> Account {
    let mut rng = os_rng();
    let key = DeviceKey::generate(&mut rng);
    let code = pair_request(&key, &mut rng).code().clone();
    let (mut first, mut records) = Keyring::create(DID, "dev0", key, &code, &mut rng).unwrap();
    let second_key = DeviceKey::generate(&mut rng);
    let second_request = pair_request(&second_key, &mut rng);
    for i in 1..devices {
        let (k, r) = if i == 1 {
            (second_key.clone(), second_request.clone())
        } else {
            let k = DeviceKey::generate(&mut rng);
            let r = pair_request(&k, &mut rng);
            (k, r)
        };
        let signing = Some(k.signing_key().public_key().to_did_key());
        records.extend(
            first
                .approve(r.code(), &format!("dev{i}"), signing, &mut rng)
                .unwrap(),
        );
    }
    let record = record_from_json(&json!({"$type": CHAT, "createdAt": CREATED})).unwrap();
    for chat in chats {
        let (ck, wrap) = first.chat_key_for_seal(chat, &mut rng).unwrap();
        records.wraps.extend(wrap);
        // The chat's sealed record (not a key record: the keyring never
        // reads it, it is here for the same work as the store's).
        let fields = record_from_json(&json!({"title": format!("chat {chat}")})).unwrap();
        let place = Place {
            did: DID,
            collection: CHAT,
            rkey: chat,
        };
        seal_record(
            &record,
            &place,
            &fields,
            &[],
            &ck,
            &SealOptions::default(),
            &mut rng,
        )
        .unwrap();
    }
    let (second, _) =
        Keyring::join(DID, "dev1", second_key.clone(), &second_request, &records).unwrap();
    assert_eq!(second.chat_key_ids().len(), chats.len());
    Account {
        first,
        second,
        second_key,
        second_request,
        records,
        last: format!("dev{}", devices - 1),
    }
}

struct KeyringFigures {
    remove: Duration,
    absorb_removal: Duration,
    absorb_all: Duration,
    rejoin: Duration,
}

fn keyring_figures(devices: usize, chats: usize, samples: usize) -> KeyringFigures {
    let rkeys = chat_rkeys(chats);
    let acc = account(devices, &rkeys);
    let mut rng = os_rng();
    let remove = sample(
        samples,
        || acc.first.clone(),
        |mut ring| {
            ring.remove_device(&acc.last, &mut rng).unwrap();
        },
    );
    let removal = acc
        .first
        .clone()
        .remove_device(&acc.last, &mut rng)
        .unwrap();
    let mut all = acc.records.clone();
    all.extend(removal.clone());
    let absorb_removal = sample(
        samples,
        || acc.second.clone(),
        |mut ring| {
            let report = ring.absorb(&removal);
            assert_eq!(report.accounts, 1);
        },
    );
    let absorb_all = sample(
        samples,
        || acc.second.clone(),
        |mut ring| {
            let report = ring.absorb(&all);
            assert_eq!(report.accounts, 1);
        },
    );
    let heads = acc.second.heads();
    let rejoin = sample(
        samples,
        || (),
        |()| {
            let (ring, _) = Keyring::rejoin(
                DID,
                "dev1",
                acc.second_key.clone(),
                &acc.second_request,
                acc.second.admitted_with(),
                &heads,
                &all,
            )
            .unwrap();
            assert_eq!(ring.account_epoch(), 1);
            assert_eq!(ring.chat_key_ids().len(), chats);
        },
    );
    KeyringFigures {
        remove,
        absorb_removal,
        absorb_all,
        rejoin,
    }
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    fs::set_permissions(to, fs::metadata(from).unwrap().permissions()).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A data folder with `devices` devices admitted (the first one's) and
/// `chats` chats, each with a sealed record. Returns it and the record key
/// of the last device admitted.
fn data_folder(root: &Path, devices: usize, chats: usize) -> (PathBuf, String) {
    let mut rng = os_rng();
    let dir = root.join(format!("d{devices}-c{chats}"));
    device::init(&dir, Some("first"), &mut rng).unwrap();
    let mut last = String::new();
    for i in 1..devices {
        // Each new device's own folder only shows its code.
        let pending = root.join(format!("pending-{devices}-{chats}-{i}"));
        let code = device::pair(&pending, &mut rng).unwrap().code;
        last = device::approve(&dir, &code, Some(&format!("device {i}")), &mut rng)
            .unwrap()
            .device;
        fs::remove_dir_all(&pending).unwrap();
    }
    let mut dev = Device::open(&dir).unwrap();
    for batch in chat_rkeys(chats).chunks(100) {
        let writes: Vec<SealedWrite> = batch
            .iter()
            .map(|rkey| {
                let record = Chat {
                    sealed: None,
                    model: None,
                    tools: None,
                    effort: None,
                    created_at: Datetime::new(CREATED).unwrap(),
                    extra: Default::default(),
                };
                let fields = SealedFields {
                    title: Some(format!("chat {rkey}")),
                    system_prompt: Some("Be brief.".into()),
                    extra: Default::default(),
                };
                SealedWrite::new(rkey, rkey, &record, &fields, SealedAction::Create).unwrap()
            })
            .collect();
        dev.apply_sealed(&writes, &mut rng).unwrap();
    }
    assert_eq!(dev.keyring().devices().len(), devices);
    assert_eq!(dev.keyring().chat_key_ids().len(), chats);
    (dir, last)
}

struct StoreFigures {
    remove: Duration,
    open: Duration,
    open_before: Duration,
}

fn store_figures(root: &Path, devices: usize, chats: usize, samples: usize) -> StoreFigures {
    let (template, last) = data_folder(root, devices, chats);
    let open_before = sample(
        samples,
        || (),
        |()| {
            Device::open(&template).unwrap();
        },
    );
    let mut n = 0;
    let mut fresh = || {
        n += 1;
        let dir = root.join(format!("sample-{devices}-{chats}-{n}"));
        copy_dir(&template, &dir);
        dir
    };
    let mut rng = os_rng();
    let mut removed = Vec::new();
    let remove = sample(samples, &mut fresh, |dir| {
        assert_eq!(device::remove(&dir, &last, &mut rng).unwrap(), 1);
        removed.push(dir);
    });
    // The first open of each folder after its removal.
    let mut removed = removed.into_iter();
    let open = sample(
        samples,
        || removed.next().unwrap(),
        |dir| {
            let dev = Device::open(&dir).unwrap();
            assert_eq!(dev.keyring().account_epoch(), 1);
            assert_eq!(dev.keyring().chat_key_ids().len(), chats);
        },
    );
    StoreFigures {
        remove,
        open,
        open_before,
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn ratio(a: Duration, b: Duration) -> String {
    format!("{:.2}×", a.as_secs_f64() / b.as_secs_f64())
}

fn main() {
    let samples = env_usize("GELSTORE_BENCH_SAMPLES", 5).max(1);
    // (devices, chats)
    let configs = [(10, 100), (10, 1000), (50, 100), (50, 1000)];
    let tmp = tempfile::tempdir().unwrap();

    let mut rows: Vec<(&str, Vec<Duration>)> = vec![
        ("keyring remove_device (rotation)", vec![]),
        ("keyring absorb: the removal only", vec![]),
        ("keyring absorb: every record", vec![]),
        ("keyring rejoin: every record", vec![]),
        ("store Device::open before", vec![]),
        ("store device::remove", vec![]),
        ("store Device::open, first after", vec![]),
    ];
    for &(devices, chats) in &configs {
        eprintln!("building {devices} devices, {chats} chats…");
        let k = keyring_figures(devices, chats, samples);
        let s = store_figures(tmp.path(), devices, chats, samples);
        for (row, d) in rows.iter_mut().zip([
            k.remove,
            k.absorb_removal,
            k.absorb_all,
            k.rejoin,
            s.open_before,
            s.remove,
            s.open,
        ]) {
            row.1.push(d);
        }
    }

    println!(
        "device removal, median of {samples} samples (rotation = one signed change, one wrap per remaining device, the old key chained)"
    );
    print!("{:<34}", "");
    for (d, c) in configs {
        print!(" {:>14}", format!("{d} dev/{c} chats"));
    }
    println!(" {:>13} {:>13}", "1000/100 ch", "50/10 dev");
    // What the command adds to the open it starts with: the rotation and
    // its commit.
    let extra: Vec<Duration> = rows[5]
        .1
        .iter()
        .zip(&rows[4].1)
        .map(|(r, o)| r.saturating_sub(*o))
        .collect();
    rows.push(("store device::remove − open before", extra));
    for (name, t) in &rows {
        print!("{name:<34}");
        for d in t {
            print!(" {:>14}", ms(*d));
        }
        // At 50 devices: 1,000 chats over 100; at 1,000 chats: 50 over 10.
        println!(" {:>13} {:>13}", ratio(t[3], t[2]), ratio(t[3], t[1]));
    }
}
