//! Records the repository benches write: sealed chat messages like the
//! project's fixtures, from a seeded xorshift (no RNG crate, the same bytes
//! every run). Included with `#[path]` by `repo/main.rs`, `events.rs` and `store_engines.rs`.

use base64::Engine as _;
use serde_json::{Value, json};

/// The next value of the xorshift64 state `rng`.
pub fn next(rng: &mut u64) -> u64 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    *rng
}

/// A sealed `chat.gel.assistant.message` (user or assistant by `i`'s
/// parity) with random ciphertext of 300–900 bytes.
pub fn message(i: usize, rng: &mut u64) -> Value {
    let len = 300 + (next(rng) % 600) as usize;
    let ciphertext: Vec<u8> = (0..len).map(|_| next(rng) as u8).collect();
    let nonce: Vec<u8> = (0..24).map(|_| next(rng) as u8).collect();
    let b64 = base64::engine::general_purpose::STANDARD;
    json!({
        "$type": "chat.gel.assistant.message",
        "chat": "at://did:plc:ewvi7nxzyoun6zhxrhs64oiz/chat.gel.assistant.chat/3lbqzcx2ss222",
        "role": if i.is_multiple_of(2) { "user" } else { "assistant" },
        "status": "complete",
        "content": {
            "alg": "xchacha20poly1305-hkdf-sha256-v1",
            "keyId": "ck-3lbqzcx2ss222-0",
            "nonce": {"$bytes": b64.encode(&nonce)},
            "ciphertext": {"$bytes": b64.encode(&ciphertext)},
        },
        "createdAt": "2025-11-29T19:41:07.250Z",
    })
}
