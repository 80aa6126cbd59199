//! Property tests of the MST with a small deterministic PRNG (no extra
//! dependencies): canonical shape under any insertion/deletion order, diff
//! against set differences, proofs, and commit inversion from proofs alone.

use std::collections::{BTreeMap, BTreeSet};

use gelstore::model::{Cid, cid_for_cbor};
use gelstore::repo::blocks::{BlockSource, MemoryBlocks, StoreError};
use gelstore::repo::mst::{Mst, RecordOp, verify_proof};

/// SplitMix64: tiny, deterministic, good enough to shuffle test data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }

    fn key(&mut self) -> String {
        const COLLECTIONS: [&str; 4] = [
            "app.bsky.feed.post",
            "app.bsky.feed.like",
            "com.example.record",
            "a",
        ];
        const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz234567-_:.~ABC";
        let collection = COLLECTIONS[self.below(COLLECTIONS.len())];
        let len = 1 + self.below(13);
        let rkey: String = (0..len)
            .map(|_| CHARS[self.below(CHARS.len())] as char)
            .collect();
        format!("{collection}/{rkey}")
    }

    fn value(&mut self) -> Cid {
        cid_for_cbor(&[0x18, self.below(8) as u8])
    }

    fn map(&mut self, max: usize) -> BTreeMap<String, Cid> {
        let n = self.below(max + 1);
        (0..n).map(|_| (self.key(), self.value())).collect()
    }
}

fn built(map: &BTreeMap<String, Cid>) -> Mst<MemoryBlocks> {
    Mst::from_entries(MemoryBlocks::new(), map.iter().map(|(k, v)| (k, *v))).unwrap()
}

fn listing<S: gelstore::repo::blocks::BlockSource>(tree: &Mst<S>) -> BTreeMap<String, Cid> {
    tree.entries().map(|e| e.unwrap()).collect()
}

/// All node blocks of a tree, written to a fresh store.
fn all_nodes(tree: &Mst<MemoryBlocks>) -> MemoryBlocks {
    let copy = built(&listing(tree));
    let mut out = MemoryBlocks::new();
    copy.write_new_blocks(&mut out).unwrap();
    out
}

#[test]
fn same_keys_same_root_in_any_order() {
    let mut rng = Rng(1);
    for round in 0..60 {
        let target = rng.map(400);
        let expected = built(&target);
        // Extra keys that are inserted and later deleted again.
        let extra: BTreeMap<String, Cid> = rng
            .map(100)
            .into_iter()
            .filter(|(k, _)| !target.contains_key(k))
            .collect();
        let mut steps: Vec<(String, Cid, bool)> = target
            .iter()
            .map(|(k, v)| (k.clone(), *v, false))
            .chain(extra.iter().map(|(k, v)| (k.clone(), *v, true)))
            .collect();
        rng.shuffle(&mut steps);
        let mut tree = Mst::new(MemoryBlocks::new());
        let mut pending_deletes = Vec::new();
        for (key, value, is_extra) in steps {
            // Sometimes insert a different value first, then the final one.
            if rng.chance(10) {
                tree.insert(&key, cid_for_cbor(b"\x19\x01\x00")).unwrap();
            }
            tree.insert(&key, value).unwrap();
            if is_extra {
                pending_deletes.push(key);
            }
            if !pending_deletes.is_empty() && rng.chance(30) {
                let i = rng.below(pending_deletes.len());
                let key = pending_deletes.swap_remove(i);
                assert!(tree.delete(&key).unwrap().is_some());
            }
        }
        rng.shuffle(&mut pending_deletes);
        for key in pending_deletes {
            assert!(tree.delete(&key).unwrap().is_some());
        }
        assert_eq!(tree.root(), expected.root(), "round {round}");
        assert_eq!(tree.layer(), expected.layer(), "round {round}");
        assert_eq!(listing(&tree), target, "round {round}");

        // Stored and reloaded, the tree lists and prefix-lists the same.
        let mut store = MemoryBlocks::new();
        let root = tree.write_new_blocks(&mut store).unwrap();
        let loaded = Mst::load(&store, root).unwrap();
        assert_eq!(listing(&loaded), target);
        for prefix in ["a/", "app.bsky.feed.", "com.example.record/b", "zzz"] {
            let got: Vec<_> = loaded
                .entries_with_prefix(prefix)
                .map(|e| e.unwrap())
                .collect();
            let want: Vec<_> = target
                .iter()
                .filter(|(k, _)| k.starts_with(prefix))
                .map(|(k, v)| (k.clone(), *v))
                .collect();
            assert_eq!(got, want, "prefix {prefix}");
        }
        if let Some(start) = target.keys().nth(target.len() / 2) {
            let got: Vec<_> = loaded.entries_from(start).map(|e| e.unwrap().0).collect();
            let want: Vec<_> = target
                .range(start.clone()..)
                .map(|(k, _)| k.clone())
                .collect();
            assert_eq!(got, want);
        }
        let start = rng.key();
        let got: Vec<_> = loaded.entries_from(&start).map(|e| e.unwrap().0).collect();
        let want: Vec<_> = target
            .range(start.clone()..)
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(got, want, "from {start}");
    }
}

#[test]
fn diff_equals_set_difference() {
    let mut rng = Rng(2);
    for round in 0..60 {
        let old_map = rng.map(300);
        let mut new_map = old_map.clone();
        // Change a random fraction of the keys, or everything.
        let churn = [1, 5, 30, 100][rng.below(4)];
        for key in old_map.keys() {
            if rng.chance(churn) {
                if rng.chance(50) {
                    new_map.remove(key);
                } else {
                    new_map.insert(key.clone(), rng.value());
                }
            }
        }
        for _ in 0..rng.below(churn + 1) {
            new_map.insert(rng.key(), rng.value());
        }

        let mut expected = Vec::new();
        let keys: BTreeSet<&String> = old_map.keys().chain(new_map.keys()).collect();
        for key in keys {
            match (old_map.get(key), new_map.get(key)) {
                (Some(a), Some(b)) if a != b => expected.push(RecordOp::update(key, *a, *b)),
                (Some(a), None) => expected.push(RecordOp::delete(key, *a)),
                (None, Some(b)) => expected.push(RecordOp::create(key, *b)),
                _ => {}
            }
        }

        // Old tree from storage (loaded lazily), new tree from changes to it.
        let mut store = MemoryBlocks::new();
        let old_root = built(&old_map).write_new_blocks(&mut store).unwrap();
        let old = Mst::load(&store, old_root).unwrap();
        let mut new = Mst::load(&store, old_root).unwrap();
        for op in &expected {
            new.apply(op).unwrap();
        }
        assert_eq!(new.root(), built(&new_map).root(), "round {round}");

        let diff = old.diff(&new).unwrap();
        assert_eq!(diff.ops, expected, "round {round}");

        let old_nodes: BTreeSet<Cid> = all_nodes(&built(&old_map)).cids().copied().collect();
        let new_nodes: BTreeSet<Cid> = all_nodes(&built(&new_map)).cids().copied().collect();
        let created: BTreeSet<Cid> = new_nodes.difference(&old_nodes).copied().collect();
        let removed: BTreeSet<Cid> = old_nodes.difference(&new_nodes).copied().collect();
        assert_eq!(diff.new_nodes, created, "round {round}: new nodes");
        assert_eq!(diff.removed_nodes, removed, "round {round}: removed nodes");

        // The reverse diff is the inverse.
        let back = new.diff(&old).unwrap();
        let inverted: Vec<RecordOp> = expected
            .iter()
            .map(|op| RecordOp {
                key: op.key.clone(),
                prev: op.cid,
                cid: op.prev,
            })
            .collect();
        assert_eq!(back.ops, inverted);
        assert_eq!(back.new_nodes, removed);
    }
}

#[test]
fn proofs_verify_presence_and_absence() {
    let mut rng = Rng(3);
    for _ in 0..30 {
        let map = rng.map(500);
        let tree = built(&map);
        let root = tree.root();
        let mut probes: Vec<String> = map.keys().take(20).cloned().collect();
        probes.extend((0..20).map(|_| rng.key()));
        for key in probes {
            let mut proof = MemoryBlocks::new();
            tree.covering_proof(&key, &mut proof).unwrap();
            assert_eq!(
                verify_proof(root, &key, &proof).unwrap(),
                map.get(&key).copied(),
                "{key}"
            );
            // The proof is enough to change the key; the result matches the
            // full tree's.
            let mut full = tree.clone();
            let mut partial = Mst::load(&proof, root).unwrap();
            if map.contains_key(&key) {
                full.delete(&key).unwrap();
                partial.delete(&key).unwrap();
            } else {
                let v = rng.value();
                full.insert(&key, v).unwrap();
                partial.insert(&key, v).unwrap();
            }
            assert_eq!(partial.root(), full.root(), "{key}");
        }
    }
}

#[test]
fn commits_invert_from_proof_blocks_alone() {
    let mut rng = Rng(4);
    for round in 0..80 {
        let before_map = rng.map(300);
        let before = built(&before_map);
        let mut tree = before.clone();
        let mut ops = Vec::new();
        let mut touched = BTreeSet::new();
        let existing: Vec<&String> = before_map.keys().collect();
        for _ in 0..1 + rng.below(6) {
            let kind = rng.below(3);
            let op = if kind == 0 || existing.is_empty() {
                RecordOp::create(rng.key(), rng.value())
            } else {
                let key = existing[rng.below(existing.len())];
                let prev = before_map[key];
                if kind == 1 {
                    let mut cid = rng.value();
                    while cid == prev {
                        cid = rng.value();
                    }
                    RecordOp::update(key, prev, cid)
                } else {
                    RecordOp::delete(key, prev)
                }
            };
            if before_map.contains_key(&op.key) == op.prev.is_some()
                && touched.insert(op.key.clone())
            {
                tree.apply(&op).unwrap();
                ops.push(op);
            }
        }
        let after = tree.root();
        let mut proof = MemoryBlocks::new();
        for op in &ops {
            tree.covering_proof(&op.key, &mut proof).unwrap();
        }
        for _ in 0..4 {
            rng.shuffle(&mut ops);
            let mut partial = Mst::load(&proof, after).unwrap();
            for op in &ops {
                partial
                    .invert(op)
                    .unwrap_or_else(|e| panic!("round {round}: {op:?}: {e}"));
            }
            assert_eq!(partial.root(), before.root(), "round {round}");
        }
    }
}

/// A block source that records which blocks are read.
struct Recording<'a> {
    inner: &'a MemoryBlocks,
    reads: std::cell::RefCell<Vec<Cid>>,
}

impl BlockSource for Recording<'_> {
    fn get(&self, cid: &Cid) -> Result<Option<Vec<u8>>, StoreError> {
        self.reads.borrow_mut().push(*cid);
        self.inner.get(cid)
    }
}

#[test]
fn reverse_walk_is_the_forward_listing_reversed() {
    let mut rng = Rng(5);
    for round in 0..60 {
        // Round 0 is the empty tree.
        let target = if round == 0 {
            BTreeMap::new()
        } else {
            rng.map(400)
        };
        let tree = built(&target);
        let mut store = MemoryBlocks::new();
        let root = tree.write_new_blocks(&mut store).unwrap();

        let forward: Vec<(String, Cid)> = listing(&tree).into_iter().collect();
        let backward: Vec<(String, Cid)> = tree.entries_rev().map(|e| e.unwrap()).collect();
        assert!(backward.iter().eq(forward.iter().rev()), "round {round}");

        // Bounds: before the first key, after the last, on keys, between
        // keys, and at the edges of every collection.
        let mut bounds: Vec<String> = vec![String::new(), "\u{7f}".into(), "~".into()];
        if let (Some(first), Some(last)) = (target.keys().next(), target.keys().last()) {
            bounds.push(first.clone());
            bounds.push(format!("{first}\0"));
            bounds.push(last.clone());
            bounds.push(format!("{last}~"));
        }
        bounds.extend(target.keys().step_by(7).cloned());
        bounds.extend((0..10).map(|_| rng.key()));
        for c in ["app.bsky.feed.post", "app.bsky.feed.like", "a", "b"] {
            bounds.extend([c.to_owned(), format!("{c}/"), format!("{c}0")]);
        }
        for end in &bounds {
            let want: Vec<(String, Cid)> = target
                .range(..end.clone())
                .rev()
                .map(|(k, v)| (k.clone(), *v))
                .collect();
            let got: Vec<(String, Cid)> = tree.entries_before(end).map(|e| e.unwrap()).collect();
            assert_eq!(got, want, "round {round}: before {end:?}");

            // From storage, a page of `take` keys reads only nodes on the
            // search paths of the bound and of the keys it listed.
            let take = 1 + rng.below(12);
            let recording = Recording {
                inner: &store,
                reads: Default::default(),
            };
            let loaded = Mst::load(&recording, root).unwrap();
            let page: Vec<String> = loaded
                .entries_before(end)
                .take(take)
                .map(|e| e.unwrap().0)
                .collect();
            let page_want: Vec<&String> = want.iter().take(take).map(|(k, _)| k).collect();
            assert!(
                page.iter().eq(page_want),
                "round {round}: page before {end:?}"
            );
            let mut allowed = MemoryBlocks::new();
            tree.search_path_proof(end, &mut allowed).unwrap();
            for key in &page {
                tree.search_path_proof(key, &mut allowed).unwrap();
            }
            let reads = recording.reads.borrow();
            let off_path = reads.iter().filter(|c| !allowed.contains(c)).count();
            assert_eq!(
                off_path,
                0,
                "round {round}: before {end:?}: {off_path} of {} reads off the paths",
                reads.len()
            );
        }
    }
}
