//! Sealing cost: record seal/open and blob seal/open at 1 KB, 64 KB and 1 MB,
//! each next to raw XChaCha20-Poly1305 on the same bytes in the same run (the
//! ratio is the overhead of DAG-CBOR, the frame, the AAD, HKDF and the
//! structural checks); and the cost of one HPKE key wrap and unwrap.
//!
//! Run: `cargo bench --bench seal` (release profile). One line per
//! measurement, with the time over raw in µs; then the goal of issue #18
//! (seal and open at 64 KB and 1 MB within 1.25× raw, under 10 µs over raw
//! at 1 KB) checked on the run's own figures.
//!
//! Figures of past runs: `benches/RESULTS.md#seal`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use chacha20poly1305::aead::{AeadInOut, KeyInit};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use gelstore::model::{Ipld, record_from_json};
use gelstore::seal::wrap::{Psk, Recipient, open_wrap, seal_wrap};
use gelstore::seal::{
    ChatKey, DeviceKey, Padding, Place, SealOptions, open_blob, open_record, os_rng, seal_blob,
    seal_record,
};
use serde_json::json;

const MIN_TIME: Duration = Duration::from_millis(1500);

/// Runs `f` repeatedly for at least MIN_TIME; returns seconds per call.
fn measure(mut f: impl FnMut()) -> f64 {
    f();
    let mut n = 0u64;
    let start = Instant::now();
    while start.elapsed() < MIN_TIME {
        f();
        n += 1;
    }
    start.elapsed().as_secs_f64() / n as f64
}

fn line(what: &str, size: usize, secs: f64, raw: f64) {
    println!(
        "{what:<28} {:>8} B  {:>10.1} µs  {:>8.1} MB/s  {:>5.2}× raw XChaCha20-Poly1305  ({:+.1} µs)",
        size,
        secs * 1e6,
        size as f64 / secs / 1e6,
        secs / raw,
        (secs - raw) * 1e6
    );
}

/// One record size's seal and open, with raw XChaCha20-Poly1305's times.
struct RecordRun {
    size: usize,
    seal: f64,
    raw_seal: f64,
    open: f64,
    raw_open: f64,
}

/// The goal of issue #18, checked on this run's figures.
fn goal(runs: &[RecordRun]) {
    println!(
        "goal (issue #18): seal and open at 64 KB and 1 MB within 1.25× raw; 1 KB overhead under 10 µs:"
    );
    for run in runs {
        let (seal, open) = (run.seal / run.raw_seal, run.open / run.raw_open);
        if run.size < 10_000 {
            let (seal_us, open_us) = (
                (run.seal - run.raw_seal) * 1e6,
                (run.open - run.raw_open) * 1e6,
            );
            let met = seal_us < 10.0 && open_us < 10.0;
            println!(
                "  {:>8} B  seal {seal_us:+.1} µs, open {open_us:+.1} µs over raw  {}",
                run.size,
                if met { "met" } else { "NOT met" }
            );
        } else {
            let met = seal <= 1.25 && open <= 1.25;
            println!(
                "  {:>8} B  seal {seal:.2}×, open {open:.2}× raw  {}",
                run.size,
                if met { "met" } else { "NOT met" }
            );
        }
    }
}

fn main() {
    let mut rng = os_rng();
    let did = "did:plc:ewvi7nxzyoun6zhxrhs64oiz";
    let place = Place {
        did,
        collection: "chat.gel.assistant.message",
        rkey: "3lbqzdw5pzk22",
    };
    let record = record_from_json(&json!({
        "$type": "chat.gel.assistant.message",
        "chat": format!("at://{did}/chat.gel.assistant.chat/3lbqzdq7qzk22"),
        "role": "assistant", "status": "complete", "createdAt": "2025-11-29T19:41:00.000Z"
    }))
    .unwrap();
    let key = ChatKey::generate("chat:3lbqzdq7qzk22:0:00112233aabbccdd", &mut rng);
    let raw = XChaCha20Poly1305::new(&[7u8; 32].into());
    let nonce = XNonce::from([9u8; 24]);

    println!("record seal/open (padding none), next to raw XChaCha20-Poly1305 of the same text:");
    // The largest record content that fits the 1,000,000-byte ciphertext limit.
    let mut runs = Vec::new();
    for size in [1_000usize, 64_000, 999_000] {
        let content = record_from_json(&json!({
            "parts": [{"$type": "chat.gel.assistant.defs#textPart", "text": "x".repeat(size)}]
        }))
        .unwrap();
        let text = vec![b'x'; size];
        let raw_seal = measure(|| {
            let mut buf = text.clone();
            raw.encrypt_in_place(&nonce, b"aad", &mut buf).unwrap();
            black_box(buf);
        });
        let mut sealed_text = text.clone();
        raw.encrypt_in_place(&nonce, b"aad", &mut sealed_text)
            .unwrap();
        let raw_open = measure(|| {
            let mut buf = sealed_text.clone();
            raw.decrypt_in_place(&nonce, b"aad", &mut buf).unwrap();
            black_box(buf);
        });
        let options = SealOptions {
            padding: Padding::None,
        };
        let seal = measure(|| {
            black_box(
                seal_record(&record, &place, &content, &[], &key, &options, &mut rng).unwrap(),
            );
        });
        let sealed: Ipld =
            seal_record(&record, &place, &content, &[], &key, &options, &mut rng).unwrap();
        let open = measure(|| {
            black_box(open_record(&sealed, &place, &key).unwrap());
        });
        line("  seal_record", size, seal, raw_seal);
        line("  open_record", size, open, raw_open);
        runs.push(RecordRun {
            size,
            seal,
            raw_seal,
            open,
            raw_open,
        });
    }
    goal(&runs);

    println!(
        "blob seal/open (STREAM, 64 KiB chunks), next to raw XChaCha20-Poly1305 in one piece:"
    );
    for size in [1_000usize, 64_000, 1_000_000] {
        let data = vec![0x5au8; size];
        let raw_seal = measure(|| {
            let mut buf = data.clone();
            raw.encrypt_in_place(&nonce, b"", &mut buf).unwrap();
            black_box(buf);
        });
        let mut sealed_data = data.clone();
        raw.encrypt_in_place(&nonce, b"", &mut sealed_data).unwrap();
        let raw_open = measure(|| {
            let mut buf = sealed_data.clone();
            raw.decrypt_in_place(&nonce, b"", &mut buf).unwrap();
            black_box(buf);
        });
        let seal = measure(|| {
            black_box(seal_blob(&data, &mut rng).unwrap());
        });
        let blob = seal_blob(&data, &mut rng).unwrap();
        let open = measure(|| {
            black_box(open_blob(&blob.bytes, &blob.seal).unwrap());
        });
        line("  seal_blob", size, seal, raw_seal);
        line("  open_blob (CID check too)", size, open, raw_open);
    }

    println!("key wraps (HPKE PSK mode, X25519 + HKDF-SHA256 + ChaCha20-Poly1305, 32-byte key):");
    let secret = [0x11u8; 32];
    let device = DeviceKey::from_secret_bytes(secret);
    let account = [3u8; 32];
    let psk = Psk::account(&account, "account:0:0011223344556677");
    let recipient = Recipient::Device {
        device: "3lbbbbbbbbbb2".into(),
    };
    let public = device.public_key();
    let wrap_time = measure(|| {
        black_box(
            seal_wrap(
                did,
                "account:1:0011223344556677",
                1,
                recipient.clone(),
                &public,
                &psk,
                &[1u8; 32],
                "2025-11-29T19:41:00.000Z".into(),
                None,
                &mut rng,
            )
            .unwrap(),
        );
    });
    let wrap = seal_wrap(
        did,
        "account:1:0011223344556677",
        1,
        recipient.clone(),
        &public,
        &psk,
        &[1u8; 32],
        "2025-11-29T19:41:00.000Z".into(),
        None,
        &mut rng,
    )
    .unwrap();
    let unwrap_time = measure(|| {
        black_box(open_wrap(did, &wrap, &secret, &psk, None).unwrap());
    });
    println!(
        "  wrap                         {:>10.1} µs",
        wrap_time * 1e6
    );
    println!(
        "  unwrap                       {:>10.1} µs",
        unwrap_time * 1e6
    );
}
