//! Helpers shared by the integration tests: reading the CC0 interop
//! fixtures in `fixtures/interop/`, a deterministic PRNG, random repo paths
//! and records, and building a signed repository in memory.

use std::collections::BTreeMap;
use std::path::PathBuf;

use gelstore::crypto::SigningKey;
use gelstore::model::{Cid, cid_for_cbor, record_to_dag_cbor};
use gelstore::repo::blocks::{BlockSink, MemoryBlocks};
use gelstore::repo::commit::UnsignedCommit;
use gelstore::repo::mst::Mst;
use gelstore::repo::tid::Tid;
use serde_json::{Value, json};
/// The path of a file under `fixtures/interop/`.
pub fn interop_path(rel: &str) -> PathBuf {
    [env!("CARGO_MANIFEST_DIR"), "fixtures/interop", rel]
        .iter()
        .collect()
}

/// The cases of an interop JSON fixture file (a top-level array).
pub fn interop_cases(rel: &str) -> Vec<Value> {
    let path = interop_path(rel);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    match serde_json::from_str(&text) {
        Ok(Value::Array(cases)) => cases,
        other => panic!("{}: expected a JSON array, got {other:?}", path.display()),
    }
}

/// A string field every case of a fixture has.
pub fn str_field<'a>(case: &'a Value, key: &str) -> &'a str {
    case.get(key)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no string {key:?} in {case}"))
}

/// SplitMix64: tiny, deterministic, good enough for test data.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// A valid repo path: a real-looking NSID and a record key, either a
    /// TID-shaped one or random record-key characters.
    pub fn path(&mut self) -> String {
        const COLLECTIONS: [&str; 5] = [
            "chat.gel.assistant.message",
            "chat.gel.assistant.chat",
            "app.bsky.feed.post",
            "app.bsky.feed.like",
            "com.example.record",
        ];
        const TID_CHARS: &[u8] = b"234567abcdefghijklmnopqrstuvwxyz";
        const RKEY_CHARS: &[u8] =
            b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:~";
        let collection = *self.pick(&COLLECTIONS);
        let rkey: String = if self.chance(60) {
            let first = b"234567abcdefghij"[self.below(16)] as char;
            std::iter::once(first)
                .chain((0..12).map(|_| TID_CHARS[self.below(32)] as char))
                .collect()
        } else {
            loop {
                let len = 1 + self.below(24);
                let s: String = (0..len)
                    .map(|_| RKEY_CHARS[self.below(RKEY_CHARS.len())] as char)
                    .collect();
                if s != "." && s != ".." {
                    break s;
                }
            }
        };
        format!("{collection}/{rkey}")
    }

    /// A small record in atproto JSON, with a string, an integer, and
    /// sometimes bytes, a link and nesting.
    pub fn record(&mut self, collection: &str) -> Value {
        let mut rec = json!({
            "$type": collection,
            "text": format!("text {} é ✓", self.next() % 100_000),
            "n": (self.next() % 2_000_000) as i64 - 1_000_000,
            "createdAt": "2025-01-02T03:04:05.678Z",
        });
        if self.chance(30) {
            rec["blob"] = json!({"$bytes": "aGVsbG8gd29ybGQ"});
        }
        if self.chance(30) {
            let target = cid_for_cbor(&[0x18, (self.next() % 200) as u8 + 24]);
            rec["ref"] = json!({"$link": target.to_string()});
        }
        if self.chance(30) {
            rec["nested"] = json!({"list": [1, "two", {"three": true}], "null": null});
        }
        rec
    }
}

/// A signed repository in memory.
pub struct BuiltRepo {
    /// Every block: MST nodes, records, the commit.
    pub blocks: MemoryBlocks,
    pub commit_cid: Cid,
    pub data: Cid,
    /// Key → record CID.
    pub records: BTreeMap<String, Cid>,
}

/// Builds and signs the repository holding `records` (key → atproto JSON).
pub fn build_repo(
    key: &SigningKey,
    did: &str,
    rev: Tid,
    records: &BTreeMap<String, Value>,
) -> BuiltRepo {
    let mut blocks = MemoryBlocks::new();
    let mut cids = BTreeMap::new();
    for (path, record) in records {
        let bytes = record_to_dag_cbor(record).unwrap();
        let cid = cid_for_cbor(&bytes);
        blocks.insert(cid, bytes);
        cids.insert(path.clone(), cid);
    }
    let mst = Mst::from_entries(MemoryBlocks::new(), cids.iter().map(|(k, v)| (k, *v))).unwrap();
    let data = mst.write_new_blocks(&mut blocks).unwrap();
    let commit = UnsignedCommit::new(did, data, rev, None).unwrap().sign(key);
    let commit_cid = commit.cid();
    blocks.put(commit_cid, commit.to_cbor()).unwrap();
    BuiltRepo {
        blocks,
        commit_cid,
        data,
        records: cids,
    }
}

/// `n` random records (distinct keys).
pub fn random_records(rng: &mut Rng, n: usize) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    while out.len() < n {
        let path = rng.path();
        let collection = path.split('/').next().unwrap().to_owned();
        out.insert(path, rng.record(&collection));
    }
    out
}

/// The header and the body of an event-stream frame (two DAG-CBOR items
/// back to back): the first decode stops where the header ends.
pub fn split_frame(frame: &[u8]) -> (gelstore::model::Ipld, gelstore::model::Ipld) {
    use gelstore::model::{DataModelError, decode_dag_cbor};
    let at = match decode_dag_cbor(frame) {
        Err(DataModelError::TrailingBytes { offset, .. }) => offset,
        other => panic!("a frame is two items: {other:?}"),
    };
    (
        decode_dag_cbor(&frame[..at]).unwrap(),
        decode_dag_cbor(&frame[at..]).unwrap(),
    )
}

/// Every file under `dir`, at any depth (for "no plaintext on disk" scans).
pub fn files_under(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}
