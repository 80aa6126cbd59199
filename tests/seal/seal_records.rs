//! Sealed records and blobs: round trips, a tamper test for every input of
//! the associated data, the named errors, the STREAM reader's guarantees,
//! and the golden vectors in `fixtures/seal/`.

use crate::support::seal_rng;

use std::collections::BTreeMap;
use std::io::Read;

use gelstore::model::{Ipld, cid_for_blob, record_from_json};
use gelstore::seal::aad::{AadContext, BlobBinding, Place, clear_fields_hash, record_aad};
use gelstore::seal::blob::{
    BlobReader, BlobSeal, CHUNK_SIZE, SEALED_CHUNK_SIZE, into_seal_error, open_blob, seal_blob,
    seal_blob_with_key, sealed_len,
};
use gelstore::seal::envelope::{Envelope, SEAL_ALG_V1};
use gelstore::seal::record::{open_frame, seal_frame};
use gelstore::seal::{
    BlobKey, ChatKey, Padding, SealError, SealOptions, open_record, seal_blob_with, seal_record,
};
use seal_rng::{FixedRng, HashRng, hex};
use serde_json::json;

const DID: &str = "did:plc:ewvi7nxzyoun6zhxrhs64oiz";
const MESSAGE: &str = "chat.gel.assistant.message";
const CHAT: &str = "chat.gel.assistant.chat";

fn place() -> Place<'static> {
    Place {
        did: DID,
        collection: MESSAGE,
        rkey: "3lbqzdw5pzk22",
    }
}

fn message_record() -> Ipld {
    record_from_json(&json!({
        "$type": MESSAGE,
        "chat": format!("at://{DID}/{CHAT}/3lbqzdq7qzk22"),
        "role": "user",
        "status": "complete",
        "createdAt": "2025-11-29T19:41:00.000Z"
    }))
    .unwrap()
}

fn content(text: &str) -> Ipld {
    record_from_json(&json!({
        "parts": [{"$type": "chat.gel.assistant.defs#textPart", "text": text}]
    }))
    .unwrap()
}

fn key() -> ChatKey {
    ChatKey::new("chat:3lbqzdq7qzk22:0:00112233aabbccdd", [0x42; 32])
}

fn seal_with(record: &Ipld, blobs: &[BlobSeal], rng_label: &str) -> Ipld {
    seal_record(
        record,
        &place(),
        &content("Hello, sealed world"),
        blobs,
        &key(),
        &SealOptions::default(),
        &mut HashRng::new(rng_label),
    )
    .unwrap()
}

fn sealed_field(record: &Ipld) -> &BTreeMap<String, Ipld> {
    let Ipld::Map(m) = record else { panic!() };
    let Some(Ipld::Map(c)) = m.get("content") else {
        panic!("no content")
    };
    c
}

fn with_field(record: &Ipld, path: &[&str], value: Option<Ipld>) -> Ipld {
    fn go(v: &Ipld, path: &[&str], value: &Option<Ipld>) -> Ipld {
        let Ipld::Map(m) = v else { panic!("not a map") };
        let mut m = m.clone();
        if path.len() == 1 {
            match value {
                Some(x) => m.insert(path[0].to_string(), x.clone()),
                None => m.remove(path[0]),
            };
        } else {
            let inner = go(&m[path[0]], &path[1..], value);
            m.insert(path[0].to_string(), inner);
        }
        Ipld::Map(m)
    }
    go(record, path, &value)
}

fn open_err(record: &Ipld, place: &Place<'_>) -> SealError {
    match open_record(record, place, &key()) {
        Ok(o) => panic!("opened: {o:?}"),
        Err(e) => e,
    }
}

fn is_auth(e: &SealError) -> bool {
    matches!(e, SealError::AuthenticationFailed { .. })
}

#[test]
fn seal_then_open_round_trips_with_and_without_padding() {
    for padding in [Padding::None, Padding::Padme] {
        let record = message_record();
        let sealed = seal_record(
            &record,
            &place(),
            &content("hi"),
            &[],
            &key(),
            &SealOptions { padding },
            &mut HashRng::new("round trip"),
        )
        .unwrap();
        let env = Envelope::from_ipld(&Ipld::Map(sealed_field(&sealed).clone())).unwrap();
        assert_eq!(env.alg, SEAL_ALG_V1);
        match padding {
            // 4-byte length + CBOR of {"parts":[{"$type":…,"text":"hi"}]} + tag.
            Padding::None => assert!(env.ciphertext.len() < 100),
            Padding::Padme => assert_eq!(env.ciphertext.len(), 256 + 16),
        }
        let opened = open_record(&sealed, &place(), &key()).unwrap();
        assert_eq!(opened.content, content("hi"));
        assert!(opened.blobs.is_empty());
        // The clear fields are untouched.
        assert_eq!(with_field(&sealed, &["content"], None), record);
    }
}

#[test]
fn every_seal_draws_a_fresh_nonce() {
    let record = message_record();
    let mut rng = HashRng::new("nonces");
    let a = seal_record(
        &record,
        &place(),
        &content("x"),
        &[],
        &key(),
        &SealOptions::default(),
        &mut rng,
    )
    .unwrap();
    let b = seal_record(
        &record,
        &place(),
        &content("x"),
        &[],
        &key(),
        &SealOptions::default(),
        &mut rng,
    )
    .unwrap();
    assert_ne!(sealed_field(&a)["nonce"], sealed_field(&b)["nonce"]);
    assert_ne!(
        sealed_field(&a)["ciphertext"],
        sealed_field(&b)["ciphertext"]
    );
}

#[test]
fn chat_records_seal_their_sealed_field() {
    let record = record_from_json(&json!({
        "$type": CHAT, "createdAt": "2025-11-29T19:41:00.000Z", "tools": ["search"]
    }))
    .unwrap();
    let fields = record_from_json(&json!({"title": "Trip", "systemPrompt": "Be brief."})).unwrap();
    let place = Place {
        did: DID,
        collection: CHAT,
        rkey: "3lbqzdq7qzk22",
    };
    let sealed = seal_record(
        &record,
        &place,
        &fields,
        &[],
        &key(),
        &SealOptions::default(),
        &mut HashRng::new("chat"),
    )
    .unwrap();
    let Ipld::Map(m) = &sealed else { panic!() };
    assert!(m.contains_key("sealed") && !m.contains_key("content"));
    assert_eq!(
        open_record(&sealed, &place, &key()).unwrap().content,
        fields
    );
}

/// The tamper tests: every input of the AAD, changed alone, stops the open.
#[test]
fn tampering_with_any_aad_input_fails_authentication() {
    let blob = seal_blob(b"attachment bytes", &mut HashRng::new("blob")).unwrap();
    let record = message_record();
    let sealed = seal_with(&record, std::slice::from_ref(&blob.seal), "tamper");
    assert!(open_record(&sealed, &place(), &key()).is_ok());

    // Place: rkey, collection, DID.
    for p in [
        Place {
            rkey: "3lbqzdw5pzk23",
            ..place()
        },
        Place {
            collection: "chat.gel.assistant.other",
            ..place()
        },
        Place {
            did: "did:plc:ewvi7nxzyoun6zhxrhs64oia",
            ..place()
        },
    ] {
        assert!(is_auth(&open_err(&sealed, &p)), "{p:?}");
    }
    // A clear field edited, added or removed.
    for edited in [
        with_field(&sealed, &["status"], Some(Ipld::String("failed".into()))),
        with_field(&sealed, &["stopReason"], Some(Ipld::String("stop".into()))),
        with_field(&sealed, &["createdAt"], None),
    ] {
        assert!(is_auth(&open_err(&edited, &place())));
    }
    // $type (the chat type keeps its sealed field under `sealed`).
    let Ipld::Map(m) = &sealed else { panic!() };
    let mut as_chat = m.clone();
    let env = as_chat.remove("content").unwrap();
    as_chat.insert("sealed".into(), env);
    as_chat.insert("$type".into(), Ipld::String(CHAT.into()));
    assert!(is_auth(&open_err(&Ipld::Map(as_chat), &place())));
    // The blob list: another CID, another size, dropped.
    let other = cid_for_blob(b"something else");
    let blobs_path = ["content", "blobs"];
    let Ipld::List(list) = &sealed_field(&sealed)["blobs"] else {
        panic!()
    };
    let blob_with = |k: &str, v: Ipld| {
        let Ipld::Map(b) = &list[0] else { panic!() };
        let mut b = b.clone();
        b.insert(k.into(), v);
        Some(Ipld::List(vec![Ipld::Map(b)]))
    };
    for edited in [
        with_field(&sealed, &blobs_path, blob_with("ref", Ipld::Link(other))),
        with_field(&sealed, &blobs_path, blob_with("size", Ipld::Integer(1))),
        with_field(&sealed, &blobs_path, None),
    ] {
        assert!(is_auth(&open_err(&edited, &place())));
    }
    // The nonce (one bit).
    let Ipld::Bytes(nonce) = &sealed_field(&sealed)["nonce"] else {
        panic!()
    };
    let mut n = nonce.clone();
    n[5] ^= 0x10;
    assert!(is_auth(&open_err(
        &with_field(&sealed, &["content", "nonce"], Some(Ipld::Bytes(n))),
        &place()
    )));
    // One bit of the ciphertext, and of its tag.
    let Ipld::Bytes(ct) = &sealed_field(&sealed)["ciphertext"] else {
        panic!()
    };
    for i in [0, ct.len() / 2, ct.len() - 1] {
        let mut c = ct.clone();
        c[i] ^= 0x01;
        assert!(is_auth(&open_err(
            &with_field(&sealed, &["content", "ciphertext"], Some(Ipld::Bytes(c))),
            &place()
        )));
    }
    // The keyId, renamed to another key the reader holds.
    let renamed = with_field(
        &sealed,
        &["content", "keyId"],
        Some(Ipld::String("chat:other:0:00".into())),
    );
    let other_key = ChatKey::new("chat:other:0:00", [0x42; 32]);
    assert!(is_auth(
        &open_record(&renamed, &place(), &other_key).unwrap_err()
    ));
    // The alg: refused before any crypto.
    let alg = with_field(
        &sealed,
        &["content", "alg"],
        Some(Ipld::String("xchacha20poly1305-hkdf-sha256-v2".into())),
    );
    assert!(matches!(
        open_err(&alg, &place()),
        SealError::UnsupportedAlg { .. }
    ));
}

/// The same, one AAD input at a time at the envelope level, so each input
/// is shown to be bound on its own (not only through the clear-field hash).
#[test]
fn each_aad_input_is_bound_on_its_own() {
    let k = key();
    let ctx = AadContext {
        place: place(),
        record_type: MESSAGE,
        field: "content",
        clear_hash: [7; 32],
    };
    let blobs = vec![BlobBinding {
        cid: cid_for_blob(b"b"),
        size: 17,
        mime_type: "application/octet-stream".into(),
    }];
    let env = seal_frame(
        b"\0\0\0\x01\xa0",
        &k,
        &ctx,
        &blobs,
        &mut HashRng::new("aad"),
    )
    .unwrap();
    assert!(open_frame(&env, &k, &ctx).is_ok());

    let mut hash = ctx.clear_hash;
    hash[31] ^= 1;
    let contexts = vec![
        AadContext {
            place: Place {
                did: "did:web:example.com",
                ..place()
            },
            ..ctx.clone()
        },
        AadContext {
            place: Place {
                collection: CHAT,
                ..place()
            },
            ..ctx.clone()
        },
        AadContext {
            place: Place {
                rkey: "other",
                ..place()
            },
            ..ctx.clone()
        },
        AadContext {
            record_type: CHAT,
            ..ctx.clone()
        },
        AadContext {
            clear_hash: hash,
            ..ctx.clone()
        },
        AadContext {
            field: "authenticator",
            ..ctx.clone()
        },
    ];
    for c in &contexts {
        assert!(is_auth(&open_frame(&env, &k, c).unwrap_err()), "{c:?}");
    }
    let mut envs = Vec::new();
    let mut e = env.clone();
    e.nonce[0] ^= 0x80;
    envs.push(e);
    let mut e = env.clone();
    e.blobs[0].size = 18;
    envs.push(e);
    let mut e = env.clone();
    e.blobs[0].cid = cid_for_blob(b"c");
    envs.push(e);
    let mut e = env.clone();
    e.blobs[0].mime_type = "text/html".into();
    envs.push(e);
    let mut e = env.clone();
    e.blobs.clear();
    envs.push(e);
    let mut e = env.clone();
    e.typed = true;
    envs.push(e);
    let mut e = env.clone();
    e.ciphertext[0] ^= 1;
    envs.push(e);
    for e in &envs {
        assert!(is_auth(&open_frame(e, &k, &ctx).unwrap_err()));
    }
    let mut e = env.clone();
    e.alg = "none".into();
    assert!(matches!(
        open_frame(&e, &k, &ctx),
        Err(SealError::UnsupportedAlg { .. })
    ));
    // The AAD differs for every one of those inputs.
    let base = record_aad(SEAL_ALG_V1, k.key_id(), &env.nonce, "", &ctx, &blobs);
    for c in &contexts {
        assert_ne!(
            record_aad(SEAL_ALG_V1, k.key_id(), &env.nonce, "", c, &blobs),
            base
        );
    }
    assert_ne!(
        record_aad("other", k.key_id(), &env.nonce, "", &ctx, &blobs),
        base
    );
    assert_ne!(
        record_aad(SEAL_ALG_V1, "other", &env.nonce, "", &ctx, &blobs),
        base
    );
    assert_ne!(
        record_aad(
            SEAL_ALG_V1,
            k.key_id(),
            &env.nonce,
            "chat.gel.assistant.defs#encryptedContent",
            &ctx,
            &blobs
        ),
        base
    );
}

#[test]
fn structural_errors_come_before_crypto() {
    let sealed = seal_with(&message_record(), &[], "structure");
    let e = |path: &[&str], v: Option<Ipld>| open_err(&with_field(&sealed, path, v), &place());
    assert!(matches!(
        e(&["content", "nonce"], Some(Ipld::Bytes(vec![0; 12]))),
        SealError::MalformedNonce {
            len: 12,
            expected: 24
        }
    ));
    assert!(matches!(
        e(&["content", "ciphertext"], Some(Ipld::Bytes(vec![0; 15]))),
        SealError::Truncated { .. }
    ));
    assert!(matches!(
        e(
            &["content", "ciphertext"],
            Some(Ipld::Bytes(vec![0; 1_000_001]))
        ),
        SealError::Oversize { .. }
    ));
    assert!(matches!(
        e(&["content", "keyId"], Some(Ipld::String("nobody".into()))),
        SealError::UnknownKey { .. }
    ));
    assert!(matches!(
        e(&["content", "keyId"], Some(Ipld::String("k".repeat(129)))),
        SealError::Malformed { .. }
    ));
    assert!(matches!(
        e(&["content", "alg"], Some(Ipld::Integer(1))),
        SealError::Malformed { .. }
    ));
    assert!(matches!(
        e(&["content", "extra"], Some(Ipld::Null)),
        SealError::Malformed { .. }
    ));
    assert!(matches!(e(&["content"], None), SealError::Malformed { .. }));
    assert!(matches!(
        e(&["content", "blobs"], Some(Ipld::List(vec![Ipld::Null]))),
        SealError::Malformed { .. }
    ));
    // A bad alg wins over everything else that is wrong.
    let mut both = with_field(&sealed, &["content", "nonce"], Some(Ipld::Bytes(vec![])));
    both = with_field(
        &both,
        &["content", "alg"],
        Some(Ipld::String("rot13".into())),
    );
    assert!(matches!(
        open_err(&both, &place()),
        SealError::UnsupportedAlg { .. }
    ));
    let other_type = with_field(
        &sealed,
        &["$type"],
        Some(Ipld::String("app.bsky.feed.post".into())),
    );
    assert!(matches!(
        open_err(&other_type, &place()),
        SealError::NotSealable { .. }
    ));
    // Error messages say what happened.
    let msg = e(&["content", "keyId"], Some(Ipld::String("nobody".into()))).to_string();
    assert!(
        msg.contains("unknown key") && msg.contains("nobody"),
        "{msg}"
    );
}

#[test]
fn oversize_content_is_refused_with_a_hint_to_use_a_blob() {
    let big = content(&"a".repeat(999_990));
    let err = seal_record(
        &message_record(),
        &place(),
        &big,
        &[],
        &key(),
        &SealOptions::default(),
        &mut HashRng::new("big"),
    )
    .unwrap_err();
    assert!(matches!(err, SealError::Oversize { .. }));
    assert!(err.to_string().contains("blob"), "{err}");
    // Just under the limit seals, and padding stops at the limit.
    let fits = content(&"a".repeat(999_900));
    let sealed = seal_record(
        &message_record(),
        &place(),
        &fits,
        &[],
        &key(),
        &SealOptions::default(),
        &mut HashRng::new("fits"),
    )
    .unwrap();
    let Ipld::Bytes(ct) = &sealed_field(&sealed)["ciphertext"] else {
        panic!()
    };
    assert_eq!(ct.len(), 1_000_000);
    assert_eq!(
        open_record(&sealed, &place(), &key()).unwrap().content,
        fits
    );
}

#[test]
fn invalid_plaintext_is_named_after_the_tag_verifies() {
    let k = key();
    let record = message_record();
    let Ipld::Map(map) = &record else { panic!() };
    let ctx = AadContext {
        place: place(),
        record_type: MESSAGE,
        field: "content",
        clear_hash: clear_fields_hash(map, "content").unwrap(),
    };
    for frame in [
        &b"\0\0\0\x01\xa0\x01"[..], // non-zero padding
        &b"\0\0\0\x09\xa0"[..],     // length past the end
        &b"\0\0\0\x01\x01"[..],     // content is not a map
        &b"\0\0\0\x02\xa1\x61"[..], // content is not DAG-CBOR
        &b"\0\0"[..],               // shorter than its length
    ] {
        let env = seal_frame(frame, &k, &ctx, &[], &mut HashRng::new("frame")).unwrap();
        let sealed = with_field(&record, &["content"], Some(env.to_ipld()));
        assert!(
            matches!(
                open_record(&sealed, &place(), &k),
                Err(SealError::InvalidPlaintext { .. })
            ),
            "{frame:?}"
        );
    }
}

#[test]
fn blobs_ride_along_with_their_keys() {
    let mut rng = HashRng::new("blobs");
    let a = seal_blob(&vec![1u8; 100_000], &mut rng).unwrap();
    let b = seal_blob(b"", &mut rng).unwrap();
    let sealed = seal_record(
        &message_record(),
        &place(),
        &content("see attached"),
        &[a.seal.clone(), b.seal.clone()],
        &key(),
        &SealOptions::default(),
        &mut rng,
    )
    .unwrap();
    let opened = open_record(&sealed, &place(), &key()).unwrap();
    assert_eq!(opened.blobs, vec![a.seal.clone(), b.seal.clone()]);
    assert_eq!(
        open_blob(&a.bytes, &opened.blobs[0]).unwrap(),
        vec![1u8; 100_000]
    );
    assert_eq!(open_blob(&b.bytes, &opened.blobs[1]).unwrap(), b"");
    // The envelope lists them as opaque blobs.
    let Ipld::List(list) = &sealed_field(&sealed)["blobs"] else {
        panic!()
    };
    let Ipld::Map(first) = &list[0] else { panic!() };
    assert_eq!(
        first["mimeType"],
        Ipld::String("application/octet-stream".into())
    );
    assert_eq!(first["size"], Ipld::Integer(i128::from(a.seal.size)));
}

#[test]
fn blob_stream_round_trips_at_chunk_edges() {
    let mut rng = HashRng::new("edges");
    for len in [
        0,
        1,
        CHUNK_SIZE - 1,
        CHUNK_SIZE,
        CHUNK_SIZE + 1,
        3 * CHUNK_SIZE,
        3 * CHUNK_SIZE + 7,
    ] {
        let plain: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let sealed = seal_blob(&plain, &mut rng).unwrap();
        assert_eq!(
            sealed.bytes.len() as u64,
            sealed_len(len as u64, Padding::Padme),
            "{len}"
        );
        assert_eq!(sealed.seal.cid, cid_for_blob(&sealed.bytes));
        assert_eq!(
            open_blob(&sealed.bytes, &sealed.seal).unwrap(),
            plain,
            "{len}"
        );
        // The streaming reader, with tiny reads.
        let mut reader = BlobReader::new(&sealed.bytes[..], &sealed.seal);
        let mut out = Vec::new();
        let mut buf = [0u8; 1000];
        loop {
            let n = reader.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        assert_eq!(out, plain, "{len}");
    }
}

/// Blobs of a few chunks or more are hashed beside the cipher, on a second
/// thread: the CID is still that of the bytes, and a wrong CID is named
/// before anything a chunk says, as for a small blob.
#[test]
fn large_blobs_give_the_same_cids_and_errors() {
    let key = BlobKey::from_bytes([5; 32]);
    for len in [
        2 * CHUNK_SIZE,
        3 * CHUNK_SIZE + 1,
        4 * CHUNK_SIZE,
        16 * CHUNK_SIZE + 3,
    ] {
        let plain: Vec<u8> = (0..len).map(|i| (i % 13) as u8).collect();
        let sealed = seal_blob_with_key(&plain, key.clone()).unwrap();
        assert_eq!(sealed.seal.cid, cid_for_blob(&sealed.bytes), "{len}");
        assert_eq!(
            sealed.bytes.len() as u64,
            sealed_len(len as u64, Padding::Padme),
            "{len}"
        );
        assert_eq!(
            open_blob(&sealed.bytes, &sealed.seal).unwrap(),
            plain,
            "{len}"
        );
        let (streamed, res) = read_all(&sealed.bytes, &sealed.seal);
        assert!(res.is_ok() && streamed == plain, "{len}: {res:?}");
        let wrong_cid = BlobSeal {
            cid: cid_for_blob(b"another blob"),
            ..sealed.seal.clone()
        };
        let r = open_blob(&sealed.bytes, &wrong_cid);
        assert!(
            matches!(r, Err(SealError::BlobCidMismatch { .. })),
            "{len}: {r:?}"
        );
        // A flipped byte under the record's CID: its chunk fails too, but
        // the CID is what is named.
        for at in [10, sealed.bytes.len() - 1] {
            let mut bad = sealed.bytes.clone();
            bad[at] ^= 1;
            let r = open_blob(&bad, &sealed.seal);
            assert!(
                matches!(r, Err(SealError::BlobCidMismatch { .. })),
                "{len} at {at}: {r:?}"
            );
        }
    }
}

fn read_all(bytes: &[u8], seal: &BlobSeal) -> (Vec<u8>, Result<(), SealError>) {
    let mut reader = BlobReader::new(bytes, seal);
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => return (out, Ok(())),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) => return (out, Err(into_seal_error(e))),
        }
    }
}

/// A seal whose CID and size match `bytes` (as if the record had been
/// rewritten too), so the reader's own checks are what is tested.
fn seal_for(bytes: &[u8], key: &BlobKey) -> BlobSeal {
    BlobSeal {
        cid: cid_for_blob(bytes),
        size: bytes.len() as u64,
        key: key.clone(),
    }
}

#[test]
fn blob_stream_never_releases_unverified_or_truncated_plaintext() {
    let key = BlobKey::from_bytes([9; 32]);
    let plain: Vec<u8> = (0..3 * CHUNK_SIZE + 100).map(|i| (i % 7) as u8).collect();
    let sealed = seal_blob_with_key(&plain, key.clone()).unwrap();
    let bytes = &sealed.bytes;

    // Cut at a chunk boundary: no final chunk.
    let cut = &bytes[..2 * SEALED_CHUNK_SIZE];
    let (out, res) = read_all(cut, &seal_for(cut, &key));
    assert!(matches!(res, Err(SealError::Truncated { .. })), "{res:?}");
    // The length header in the first chunk already shows the cut, so
    // nothing comes out at all.
    assert!(out.is_empty(), "{} bytes came out", out.len());
    assert!(matches!(
        open_blob(cut, &seal_for(cut, &key)),
        Err(SealError::Truncated { .. })
    ));

    // Cut inside a chunk: the length header shows it (a cut chunk alone
    // would fail its tag).
    let cut = &bytes[..SEALED_CHUNK_SIZE + 100];
    assert!(matches!(
        open_blob(cut, &seal_for(cut, &key)),
        Err(SealError::Truncated { .. })
    ));
    let mut torn = bytes[..bytes.len() - 1].to_vec();
    torn.push(bytes[bytes.len() - 1] ^ 1);
    assert!(matches!(
        open_blob(&torn, &seal_for(&torn, &key)),
        Err(SealError::AuthenticationFailed { .. })
    ));

    // A bit flipped in the first chunk: nothing at all comes out.
    let mut bad = bytes.clone();
    bad[10] ^= 1;
    let (out, res) = read_all(&bad, &seal_for(&bad, &key));
    assert!(out.is_empty());
    assert!(matches!(res, Err(SealError::AuthenticationFailed { .. })));
    assert!(matches!(
        open_blob(&bad, &seal_for(&bad, &key)),
        Err(SealError::AuthenticationFailed { .. })
    ));

    // Chunks swapped, a chunk appended, a chunk dropped from the middle.
    let c = SEALED_CHUNK_SIZE;
    let mut swapped = bytes[c..2 * c].to_vec();
    swapped.extend_from_slice(&bytes[..c]);
    swapped.extend_from_slice(&bytes[2 * c..]);
    let mut appended = bytes.clone();
    appended.extend_from_slice(&bytes[..c]);
    let mut dropped = bytes[..c].to_vec();
    dropped.extend_from_slice(&bytes[2 * c..]);
    for b in [swapped, appended] {
        let r = open_blob(&b, &seal_for(&b, &key));
        assert!(
            matches!(r, Err(SealError::AuthenticationFailed { .. })),
            "{r:?}"
        );
    }
    // A dropped chunk leaves less than the length header says.
    let r = open_blob(&dropped, &seal_for(&dropped, &key));
    assert!(matches!(r, Err(SealError::Truncated { .. })), "{r:?}");

    // The record's CID and size are checked before any decryption.
    let other = seal_blob_with_key(b"other", key.clone()).unwrap();
    let r = open_blob(
        &other.bytes,
        &BlobSeal {
            size: other.seal.size,
            ..sealed.seal.clone()
        },
    );
    assert!(matches!(r, Err(SealError::BlobCidMismatch { .. })));
    assert!(matches!(
        open_blob(cut, &sealed.seal),
        Err(SealError::BlobSizeMismatch { .. })
    ));
    // The streaming reader checks the CID when the stream ends.
    let (_, res) = read_all(
        bytes,
        &BlobSeal {
            cid: other.seal.cid,
            ..sealed.seal.clone()
        },
    );
    assert!(matches!(res, Err(SealError::BlobCidMismatch { .. })));
    // And refuses more bytes than the record says.
    let (_, res) = read_all(
        bytes,
        &BlobSeal {
            size: 10,
            ..sealed.seal.clone()
        },
    );
    assert!(matches!(res, Err(SealError::BlobSizeMismatch { .. })));
    // The wrong key opens nothing.
    let wrong = BlobSeal {
        key: BlobKey::from_bytes([8; 32]),
        ..sealed.seal.clone()
    };
    assert!(matches!(
        open_blob(bytes, &wrong),
        Err(SealError::AuthenticationFailed { .. })
    ));
}

#[test]
fn fixed_rng_draws_exactly_one_nonce_per_seal() {
    let mut rng = FixedRng::new(&[5u8; 24]);
    seal_record(
        &message_record(),
        &place(),
        &content("x"),
        &[],
        &key(),
        &SealOptions::default(),
        &mut rng,
    )
    .unwrap();
    assert_eq!(rng.remaining(), 0);
    let _ = hex(&[]);
}

/// The seeds of the `seal_open` fuzz target (`fuzz/seeds/seal_open/`), run
/// through the target's property. Seeds named `valid-*` must open.
/// `GELSTORE_WRITE_SEAL_SEEDS=1 cargo test --test seal seal_records::fuzz_seeds`
/// rewrites them.
#[test]
fn fuzz_seeds_run_through_the_property() {
    use gelstore::model::encode_dag_cbor;
    use gelstore::seal::fuzzing::{FUZZ_KEY, FUZZ_KEY_ID, FUZZ_PLACE, seal_open_property};

    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/seal_open");
    if std::env::var_os("GELSTORE_WRITE_SEAL_SEEDS").is_some() {
        let key = ChatKey::new(FUZZ_KEY_ID, FUZZ_KEY);
        let mut rng = HashRng::new("fuzz seeds");
        let blob = seal_blob_with_key(&[7u8; 300], BlobKey::from_bytes(FUZZ_KEY)).unwrap();
        let sealed = seal_record(
            &message_record(),
            &FUZZ_PLACE,
            &content("fuzz me"),
            std::slice::from_ref(&blob.seal),
            &key,
            &SealOptions::default(),
            &mut rng,
        )
        .unwrap();
        let plain = seal_record(
            &message_record(),
            &FUZZ_PLACE,
            &content("no blobs"),
            &[],
            &key,
            &SealOptions {
                padding: Padding::None,
            },
            &mut rng,
        )
        .unwrap();
        let bad_alg = with_field(&plain, &["content", "alg"], Some(Ipld::String("v0".into())));
        let envelope = Ipld::Map(sealed_field(&sealed).clone());
        let device = gelstore::seal::DeviceKey::generate(&mut rng);
        let code = gelstore::seal::pair_request(&device, &mut rng)
            .code()
            .clone();
        let (ring, records) =
            gelstore::seal::Keyring::create(DID, "3laaaaaaaaaa2", device, &code, &mut rng).unwrap();
        drop(ring);
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, bytes: &[u8]| std::fs::write(dir.join(name), bytes).unwrap();
        write(
            "valid-message-with-blob.cbor",
            &encode_dag_cbor(&sealed).unwrap(),
        );
        write(
            "valid-message-unpadded.cbor",
            &encode_dag_cbor(&plain).unwrap(),
        );
        write("valid-blob.bin", &blob.bytes);
        write("alg-unknown.cbor", &encode_dag_cbor(&bad_alg).unwrap());
        write("envelope.cbor", &encode_dag_cbor(&envelope).unwrap());
        write(
            "keywrap.cbor",
            &encode_dag_cbor(&records.wraps[0].to_ipld()).unwrap(),
        );
        write("frame.bin", b"\0\0\0\x01\xa0\0\0\0");
    }
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    assert!(names.len() >= 7, "seeds missing in {}", dir.display());
    for path in names {
        let data = std::fs::read(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let opened = seal_open_property(&data);
        assert_eq!(opened, name.starts_with("valid-"), "{name}");
    }
}

/// The golden vectors in `fixtures/seal/` (see its README): rebuilt here
/// from their inputs with the RNG replaced by the listed bytes, and compared
/// field by field. `GELSTORE_WRITE_SEAL_FIXTURES=1` rewrites the files.
#[test]
fn golden_vectors_match_fixtures() {
    use gelstore::model::{encode_dag_cbor, ipld_to_json};
    use gelstore::seal::record::record_key;
    use gelstore::seal::wrap::{Psk, derive_x25519_keypair, open_wrap, seal_wrap, wrap_info};
    use seal_rng::unhex;
    use serde_json::Value;

    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/seal");
    let write = std::env::var_os("GELSTORE_WRITE_SEAL_FIXTURES").is_some();
    let check = |name: &str, got: Value| {
        let path = dir.join(name);
        if write {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, serde_json::to_string_pretty(&got).unwrap() + "\n").unwrap();
        }
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let want: Value = serde_json::from_str(&text).unwrap();
        let (Value::Object(w), Value::Object(g)) = (&want, &got) else {
            panic!()
        };
        for (k, v) in w {
            assert_eq!(Some(v), g.get(k), "{name}: {k}");
        }
        assert_eq!(w.len(), g.len(), "{name}: fields");
    };
    let chat_key_bytes: [u8; 32] =
        unhex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f")
            .try_into()
            .unwrap();

    // 1. A user message with one attached blob, padded.
    {
        let key = ChatKey::new("chat:3lbqzdq7qzk22:0:00112233aabbccdd", chat_key_bytes);
        let blob_key: [u8; 32] = [0xb1; 32];
        let blob_plain = b"The quick brown fox jumps over the lazy dog.\n";
        let blob = seal_blob_with_key(blob_plain, BlobKey::from_bytes(blob_key)).unwrap();
        let nonce = unhex("404142434445464748494a4b4c4d4e4f5051525354555657");
        let record = message_record();
        let body = record_from_json(&json!({"parts": [
            {"$type": "chat.gel.assistant.defs#textPart", "text": "What does this file say?"},
            {"$type": "chat.gel.assistant.defs#filePart", "name": "fox.txt", "file": {
                "$type": "blob", "ref": {"$link": blob.seal.cid.to_string()},
                "mimeType": "text/plain", "size": blob.seal.size}}
        ]}))
        .unwrap();
        let sealed = seal_record(
            &record,
            &place(),
            &body,
            std::slice::from_ref(&blob.seal),
            &key,
            &SealOptions {
                padding: Padding::Padme,
            },
            &mut FixedRng::new(&nonce),
        )
        .unwrap();
        let Ipld::Map(map) = &record else { panic!() };
        let clear_cbor = encode_dag_cbor(&record).unwrap();
        let ctx = AadContext {
            place: place(),
            record_type: MESSAGE,
            field: "content",
            clear_hash: clear_fields_hash(map, "content").unwrap(),
        };
        let bindings = vec![blob.seal.binding()];
        let aad = record_aad(SEAL_ALG_V1, key.key_id(), &nonce, "", &ctx, &bindings);
        let env = Envelope::from_ipld(&Ipld::Map(sealed_field(&sealed).clone())).unwrap();
        let frame = open_frame(&env, &key, &ctx).unwrap();
        check(
            "message-with-blob.json",
            json!({
                "description": "A chat.gel.assistant.message sealed with one blob and Padmé padding. Inputs, then every intermediate value, then the sealed record.",
                "did": DID, "collection": MESSAGE, "rkey": place().rkey,
                "keyId": key.key_id(), "chatKey": hex(&chat_key_bytes),
                "nonce": hex(&nonce), "padding": "padme",
                "record": ipld_to_json(&record).unwrap(),
                "content": ipld_to_json(&body).unwrap(),
                "blobPlaintextUtf8": std::str::from_utf8(blob_plain).unwrap(),
                "blobKey": hex(&blob_key),
                "blobSealed": hex(&blob.bytes), "blobCid": blob.seal.cid.to_string(), "blobSize": blob.seal.size,
                "clearFieldsCbor": hex(&clear_cbor), "clearHash": hex(&ctx.clear_hash),
                "recordKey": hex(record_key(&chat_key_bytes, SEAL_ALG_V1, key.key_id()).as_ref()),
                "contentCbor": hex(&encode_dag_cbor(&body).unwrap()),
                "frame": hex(&frame),
                "aad": hex(&aad),
                "ciphertext": hex(&env.ciphertext),
                "sealedRecord": ipld_to_json(&sealed).unwrap(),
            }),
        );
        assert_eq!(open_record(&sealed, &place(), &key).unwrap().content, body);
    }

    // 2. A chat record's sealed fields, unpadded, no blobs.
    {
        let key = ChatKey::new("chat:3lbqzdq7qzk22:0:00112233aabbccdd", chat_key_bytes);
        let nonce = unhex("a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7");
        let place = Place {
            did: DID,
            collection: CHAT,
            rkey: "3lbqzdq7qzk22",
        };
        let record = record_from_json(&json!({
            "$type": CHAT, "createdAt": "2025-11-29T19:40:00.000Z",
            "model": {"provider": "example", "id": "model-1"}
        }))
        .unwrap();
        let fields = record_from_json(
            &json!({"title": "Packing list", "systemPrompt": "Answer in one line."}),
        )
        .unwrap();
        let sealed = seal_record(
            &record,
            &place,
            &fields,
            &[],
            &key,
            &SealOptions {
                padding: Padding::None,
            },
            &mut FixedRng::new(&nonce),
        )
        .unwrap();
        let Ipld::Map(map) = &record else { panic!() };
        let ctx = AadContext {
            place,
            record_type: CHAT,
            field: "sealed",
            clear_hash: clear_fields_hash(map, "sealed").unwrap(),
        };
        let Ipld::Map(m) = &sealed else { panic!() };
        let env = Envelope::from_ipld(&m["sealed"]).unwrap();
        let frame = open_frame(&env, &key, &ctx).unwrap();
        check(
            "chat-unpadded.json",
            json!({
                "description": "A chat.gel.assistant.chat whose sealed fields (title, systemPrompt) are sealed without padding.",
                "did": DID, "collection": CHAT, "rkey": place.rkey,
                "keyId": key.key_id(), "chatKey": hex(&chat_key_bytes),
                "nonce": hex(&nonce), "padding": "none",
                "record": ipld_to_json(&record).unwrap(),
                "content": ipld_to_json(&fields).unwrap(),
                "clearFieldsCbor": hex(&encode_dag_cbor(&record).unwrap()), "clearHash": hex(&ctx.clear_hash),
                "recordKey": hex(record_key(&chat_key_bytes, SEAL_ALG_V1, key.key_id()).as_ref()),
                "contentCbor": hex(&encode_dag_cbor(&fields).unwrap()),
                "frame": hex(&frame),
                "aad": hex(&record_aad(SEAL_ALG_V1, key.key_id(), &nonce, "", &ctx, &[])),
                "ciphertext": hex(&env.ciphertext),
                "sealedRecord": ipld_to_json(&sealed).unwrap(),
            }),
        );
    }

    // 2b. A pending reply: no content yet, its authenticator (the empty map
    //     sealed in the `authenticator` field; never padded).
    {
        let key = ChatKey::new("chat:3lbqzdq7qzk22:0:00112233aabbccdd", chat_key_bytes);
        let nonce = unhex("c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7");
        let place = Place {
            did: DID,
            collection: MESSAGE,
            rkey: "3lbqzdq7qzk22.r0",
        };
        let record = record_from_json(&json!({
            "$type": MESSAGE,
            "chat": format!("at://{DID}/{CHAT}/3lbqzdq7qzk22"),
            "role": "assistant", "status": "pending",
            "createdAt": "2025-11-29T19:40:01.000Z",
        }))
        .unwrap();
        let with_placeholder = with_field(
            &record,
            &["authenticator"],
            Some(Ipld::Map(BTreeMap::new())),
        );
        let sealed = seal_record(
            &with_placeholder,
            &place,
            &Ipld::Map(BTreeMap::new()),
            &[],
            &key,
            &SealOptions::default(),
            &mut FixedRng::new(&nonce),
        )
        .unwrap();
        let Ipld::Map(map) = &record else { panic!() };
        let ctx = AadContext {
            place,
            record_type: MESSAGE,
            field: "authenticator",
            clear_hash: clear_fields_hash(map, "authenticator").unwrap(),
        };
        let Ipld::Map(m) = &sealed else { panic!() };
        let env = Envelope::from_ipld(&m["authenticator"]).unwrap();
        let frame = open_frame(&env, &key, &ctx).unwrap();
        let opened = open_record(&sealed, &place, &key).unwrap();
        assert_eq!(opened.field, "authenticator");
        check(
            "message-pending-authenticator.json",
            json!({
                "description": "A pending chat.gel.assistant.message reply: no content yet, its clear fields authenticated by the empty map sealed in its authenticator field (never padded: it always holds the same).",
                "did": DID, "collection": MESSAGE, "rkey": place.rkey, "field": "authenticator",
                "keyId": key.key_id(), "chatKey": hex(&chat_key_bytes),
                "nonce": hex(&nonce), "padding": "none",
                "record": ipld_to_json(&record).unwrap(),
                "content": {},
                "clearFieldsCbor": hex(&encode_dag_cbor(&record).unwrap()), "clearHash": hex(&ctx.clear_hash),
                "recordKey": hex(record_key(&chat_key_bytes, SEAL_ALG_V1, key.key_id()).as_ref()),
                "contentCbor": hex(&encode_dag_cbor(&Ipld::Map(BTreeMap::new())).unwrap()),
                "frame": hex(&frame),
                "aad": hex(&record_aad(SEAL_ALG_V1, key.key_id(), &nonce, "", &ctx, &[])),
                "ciphertext": hex(&env.ciphertext),
                "sealedRecord": ipld_to_json(&sealed).unwrap(),
            }),
        );
    }

    // 3. A two-chunk blob (the STREAM framing across a chunk edge).
    {
        let key: [u8; 32] =
            unhex("c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf")
                .try_into()
                .unwrap();
        let plain: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
        let blob = seal_blob_with_key(&plain, BlobKey::from_bytes(key)).unwrap();
        let c = SEALED_CHUNK_SIZE;
        use sha2::Digest;
        check(
            "blob-two-chunks.json",
            json!({
                "description": "A 70,000-byte blob (byte i = i mod 251) sealed as two STREAM chunks: u64be(70000), the plaintext, then zero padding up to padme(70008).",
                "blobKey": hex(&key), "plaintextLength": 70_000, "plaintextByte": "i mod 251",
                "streamLength": gelstore::seal::blob::stream_len(70_000, Padding::Padme),
                "size": blob.seal.size, "cid": blob.seal.cid.to_string(),
                "sha256": hex(&sha2::Sha256::digest(&blob.bytes)),
                "chunk0Nonce": "000000000000000000000000", "chunk0Tag": hex(&blob.bytes[c - 16..c]),
                "chunk1Nonce": "000000000000000000000101", "chunk1": hex(&blob.bytes[c..]),
            }),
        );
        assert_eq!(open_blob(&blob.bytes, &blob.seal).unwrap(), plain);
    }

    // 4. A key wrap: a chat key wrapped to account key epoch 0 (PSK from the
    //    account key), with the ephemeral key from ikmE.
    {
        let account_ikm = unhex("0101010101010101010101010101010101010101010101010101010101010101");
        let (account_sk, account_pk) = derive_x25519_keypair(&account_ikm);
        let account_id = "account:0:0011223344556677";
        let ikm_e = unhex("e0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff");
        let key_id = "chat:3lbqzdq7qzk22:0:00112233aabbccdd";
        let recipient = Recipient::Account {
            key_id: account_id.into(),
            epoch: 0,
        };
        let psk = Psk::account(&account_sk, account_id);
        let wrap = seal_wrap(
            DID,
            key_id,
            0,
            recipient.clone(),
            &account_pk,
            &psk,
            &chat_key_bytes,
            "2025-11-29T19:40:00.000Z".into(),
            None,
            &mut FixedRng::new(&ikm_e),
        )
        .unwrap();
        assert_eq!(
            *open_wrap(DID, &wrap, &account_sk, &psk, None).unwrap(),
            chat_key_bytes
        );
        check(
            "keywrap-chat-key.json",
            json!({
                "description": "A chat key wrapped with HPKE PSK mode to account key epoch 0. The account key pair is DeriveKeyPair(accountIkm); the ephemeral key is DeriveKeyPair(ikmE).",
                "did": DID, "keyId": key_id, "epoch": 0, "wrappedKey": hex(&chat_key_bytes),
                "accountIkm": hex(&account_ikm), "accountSecretClamped": hex(&account_sk), "accountPublic": hex(&account_pk),
                "accountKeyId": account_id, "ikmE": hex(&ikm_e),
                "psk": hex(psk.bytes()), "pskId": String::from_utf8(psk.id().to_vec()).unwrap(),
                "info": hex(&wrap_info(DID, WRAP_ALG, key_id, 0, &recipient)),
                "aad": hex(&gelstore::seal::wrap::wrap_aad(&wrap.created_at, None)),
                "enc": hex(&wrap.enc), "ciphertext": hex(&wrap.ciphertext),
                "record": ipld_to_json(&wrap.to_ipld()).unwrap(),
            }),
        );
    }
}

use gelstore::seal::{Recipient, WRAP_ALG_V1 as WRAP_ALG};

/// `record` edited as atproto JSON, the way a PDS (or anyone with the
/// account password) rewrites a record through `putRecord`.
fn edited(record: &Ipld, edit: impl FnOnce(&mut serde_json::Value)) -> Ipld {
    let mut v = gelstore::model::ipld_to_json(record).unwrap();
    edit(&mut v);
    record_from_json(&v).unwrap()
}

fn pending_place() -> Place<'static> {
    Place {
        rkey: "3lbqzdw5pzk22.r0",
        ..place()
    }
}

/// A pending reply as a device writes it: no content, an authenticator.
fn sealed_pending() -> Ipld {
    let record = record_from_json(&json!({
        "$type": MESSAGE,
        "chat": format!("at://{DID}/{CHAT}/3lbqzdq7qzk22"),
        "role": "assistant",
        "status": "pending",
        "createdAt": "2025-11-29T19:41:01.000Z",
        "authenticator": {},
    }))
    .unwrap();
    seal_record(
        &record,
        &pending_place(),
        &Ipld::Map(BTreeMap::new()),
        &[],
        &key(),
        &SealOptions::default(),
        &mut HashRng::new("pending"),
    )
    .unwrap()
}

#[test]
fn a_pending_reply_is_authenticated_and_every_forgery_of_one_fails() {
    let pending = sealed_pending();
    let opened = open_record(&pending, &pending_place(), &key()).unwrap();
    assert_eq!(opened.field, "authenticator");
    assert_eq!(opened.content, Ipld::Map(BTreeMap::new()));

    // A hostile PDS edits the clear fields of a real pending reply: an
    // injected model and usage, a finished status, another chat.
    for edit in [
        (|v: &mut serde_json::Value| v["model"] = json!({"provider": "evil", "id": "evil"}))
            as fn(&mut serde_json::Value),
        |v| v["usage"] = json!({"inputTokens": 1, "outputTokens": 999_999}),
        |v| v["status"] = json!("complete"),
        |v| v["chat"] = json!(format!("at://{DID}/{CHAT}/3lbqzzzzzzz22")),
        |v| v["role"] = json!("user"),
        |v| v["authenticator"]["$type"] = json!("chat.gel.assistant.defs#encryptedContent"),
    ] {
        let e = open_err(&edited(&pending, edit), &pending_place());
        assert!(is_auth(&e), "{e:?}");
    }
    // The real authenticator copied to another reply key, or the record
    // replayed at another attempt.
    let other = Place {
        rkey: "3lbqzdw5pzk22.r1",
        ..place()
    };
    assert!(is_auth(&open_err(&pending, &other)));

    // Its envelope moved into `content` (to pass as an empty message):
    // the field name is bound.
    let moved = edited(&pending, |v| {
        let a = v.as_object_mut().unwrap().remove("authenticator").unwrap();
        v["content"] = a;
    });
    assert!(is_auth(&open_err(&moved, &pending_place())));

    // A forged pending reply with no authenticator, or with both fields.
    let stripped = edited(&pending, |v| {
        v.as_object_mut().unwrap().remove("authenticator");
    });
    assert!(matches!(
        open_err(&stripped, &pending_place()),
        SealError::Malformed { .. }
    ));
    let real = seal_with(&message_record(), &[], "content");
    let both = edited(&pending, |v| {
        v["content"] = gelstore::model::ipld_to_json(&real).unwrap()["content"].clone();
    });
    let e = open_err(&both, &pending_place());
    assert!(
        matches!(&e, SealError::Malformed { reason, .. } if reason.contains("both")),
        "{e:?}"
    );

    // A real message's content envelope planted as an authenticator.
    let planted = edited(&real, |v| {
        let c = v.as_object_mut().unwrap().remove("content").unwrap();
        v["authenticator"] = c;
    });
    assert!(is_auth(&open_err(&planted, &place())));
}

#[test]
fn an_authenticator_seals_only_the_empty_map() {
    let record = edited(&message_record(), |v| {
        v["authenticator"] = json!({});
    });
    let r = seal_record(
        &record,
        &place(),
        &content("smuggled"),
        &[],
        &key(),
        &SealOptions::default(),
        &mut HashRng::new("x"),
    );
    assert!(
        matches!(r, Err(SealError::InvalidPlaintext { .. })),
        "{r:?}"
    );
    // Even a key holder's hand-made authenticator with something inside is
    // refused after the tag verifies.
    let Ipld::Map(map) = &record else { panic!() };
    let ctx = AadContext {
        place: place(),
        record_type: MESSAGE,
        field: "authenticator",
        clear_hash: clear_fields_hash(map, "authenticator").unwrap(),
    };
    let env = seal_frame(
        b"\0\0\0\x01\xa0\0",
        &key(),
        &ctx,
        &[],
        &mut HashRng::new("y"),
    )
    .unwrap();
    assert!(
        open_record(
            &with_field(&record, &["authenticator"], Some(env.to_ipld())),
            &place(),
            &key()
        )
        .is_ok()
    );
    let env = seal_frame(
        &[
            &[0, 0, 0, 9][..],
            &gelstore::model::encode_dag_cbor(&content("x")).unwrap()[..9],
        ]
        .concat(),
        &key(),
        &ctx,
        &[],
        &mut HashRng::new("z"),
    )
    .unwrap();
    let e = open_err(
        &with_field(&record, &["authenticator"], Some(env.to_ipld())),
        &place(),
    );
    assert!(matches!(e, SealError::InvalidPlaintext { .. }), "{e:?}");
}

#[test]
fn a_blob_mime_type_and_the_envelope_type_are_bound() {
    let blob = seal_blob(b"attachment bytes", &mut HashRng::new("blob")).unwrap();
    let sealed = seal_with(&message_record(), std::slice::from_ref(&blob.seal), "mime");
    assert!(open_record(&sealed, &place(), &key()).is_ok());
    // The PDS relabels the stored blob (served as HTML to whoever follows
    // the ref), or adds/drops the envelope's `$type`.
    let relabelled = edited(&sealed, |v| {
        v["content"]["blobs"][0]["mimeType"] = json!("text/html");
    });
    assert!(is_auth(&open_err(&relabelled, &place())));
    let typed = edited(&sealed, |v| {
        v["content"]["$type"] = json!("chat.gel.assistant.defs#encryptedContent");
    });
    assert!(is_auth(&open_err(&typed, &place())));
    // An envelope sealed with `$type` opens only with it.
    let Ipld::Map(map) = &message_record() else {
        panic!()
    };
    let ctx = AadContext {
        place: place(),
        record_type: MESSAGE,
        field: "content",
        clear_hash: clear_fields_hash(map, "content").unwrap(),
    };
    let mut env = seal_frame(b"\0\0\0\x01\xa0", &key(), &ctx, &[], &mut HashRng::new("t")).unwrap();
    env.typed = true;
    assert!(is_auth(&open_frame(&env, &key(), &ctx).unwrap_err()));
}

#[test]
fn sealed_blob_sizes_do_not_give_the_exact_length() {
    let mut rng = HashRng::new("sizes");
    // Lengths a few bytes apart seal to the same size; the smallest blobs
    // all look alike.
    let mut size = |n: usize| seal_blob(&vec![1u8; n], &mut rng).unwrap().seal.size;
    assert_eq!(size(0), size(200));
    assert_eq!(size(100_000), size(100_100));
    assert_ne!(size(1000), 1000 + 16);
    for n in [0usize, 1, 5000, 65_528, 65_529, 200_000] {
        let s = size(n) as f64;
        let exact = (n + 16) as f64;
        assert!(s >= exact && s <= exact * 1.13 + 300.0, "{n}: {s}");
    }
    // Unpadded, the stream still carries its length header.
    let plain = seal_blob_with(b"abc", BlobKey::from_bytes([3; 32]), Padding::None).unwrap();
    assert_eq!(plain.seal.size, 8 + 3 + 16);
    assert_eq!(open_blob(&plain.bytes, &plain.seal).unwrap(), b"abc");
}
