//! Unit tests of the tree operations: known root CIDs from the reference
//! implementations' test suites, structure edge cases, lazy loading.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::blocks::{MemoryBlocks, StoreError};
use gelstore_model::parse_cid;

const VALUE: &str = "bafyreie5cvv4h45feadgeuwhbcutmh6t2ceseocckahdoe6uat64zmz454";

fn value() -> Cid {
    parse_cid(VALUE).unwrap()
}

fn rec(suffix: &str) -> String {
    format!("com.example.record/{suffix}")
}

fn tree_of(keys: &[&str]) -> Mst<MemoryBlocks> {
    let mut tree = Mst::new(MemoryBlocks::new());
    for key in keys {
        tree.insert(&rec(key), value()).unwrap();
    }
    tree
}

fn assert_root(tree: &Mst<impl BlockSource>, expected: &str) {
    assert_eq!(tree.root().to_string(), expected);
}

#[test]
fn known_maps() {
    assert_root(
        &tree_of(&[]),
        "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm",
    );
    assert_root(
        &tree_of(&["3jqfcqzm3fo2j"]),
        "bafyreibj4lsc3aqnrvphp5xmrnfoorvru4wynt6lwidqbm2623a6tatzdu",
    );
    assert_root(
        &tree_of(&["3jqfcqzm3fx2j"]),
        "bafyreih7wfei65pxzhauoibu3ls7jgmkju4bspy4t2ha2qdjnzqvoy33ai",
    );
    let simple = [
        "3jqfcqzm3fp2j",
        "3jqfcqzm3fr2j",
        "3jqfcqzm3fs2j",
        "3jqfcqzm3ft2j",
        "3jqfcqzm4fc2j",
    ];
    assert_root(
        &tree_of(&simple),
        "bafyreicmahysq4n6wfuxo522m6dpiy7z7qzym3dzs756t5n7nfdgccwq7m",
    );
    let mut reversed = simple;
    reversed.reverse();
    assert_root(
        &tree_of(&reversed),
        "bafyreicmahysq4n6wfuxo522m6dpiy7z7qzym3dzs756t5n7nfdgccwq7m",
    );
}

#[test]
fn trims_top_on_delete() {
    let mut tree = tree_of(&[
        "3jqfcqzm3fn2j",
        "3jqfcqzm3fo2j",
        "3jqfcqzm3fp2j",
        "3jqfcqzm3fs2j", // layer 1
        "3jqfcqzm3ft2j",
        "3jqfcqzm3fu2j",
    ]);
    assert_eq!(tree.layer(), 1);
    assert_root(
        &tree,
        "bafyreifnqrwbk6ffmyaz5qtujqrzf5qmxf7cbxvgzktl4e3gabuxbtatv4",
    );
    assert_eq!(tree.delete(&rec("3jqfcqzm3fs2j")).unwrap(), Some(value()));
    assert_eq!(tree.layer(), 0);
    assert_root(
        &tree,
        "bafyreie4kjuxbwkhzg2i5dljaswcroeih4dgiqq6pazcmunwt2byd725vi",
    );
}

#[test]
fn insertion_that_splits_two_layers_down() {
    let mut tree = tree_of(&[
        "3jqfcqzm3fo2j",
        "3jqfcqzm3fp2j",
        "3jqfcqzm3fr2j",
        "3jqfcqzm3fs2j", // layer 1
        "3jqfcqzm3ft2j",
        "3jqfcqzm3fz2j",
        "3jqfcqzm4fc2j",
        "3jqfcqzm4fd2j", // layer 1
        "3jqfcqzm4ff2j",
        "3jqfcqzm4fg2j",
        "3jqfcqzm4fh2j",
    ]);
    let l1 = "bafyreiettyludka6fpgp33stwxfuwhkzlur6chs4d2v4nkmq2j3ogpdjem";
    assert_eq!(tree.layer(), 1);
    assert_root(&tree, l1);
    tree.insert(&rec("3jqfcqzm3fx2j"), value()).unwrap(); // layer 2
    assert_eq!(tree.layer(), 2);
    assert_root(
        &tree,
        "bafyreid2x5eqs4w4qxvc5jiwda4cien3gw2q6cshofxwnvv7iucrmfohpm",
    );
    tree.delete(&rec("3jqfcqzm3fx2j")).unwrap();
    assert_eq!(tree.layer(), 1);
    assert_root(&tree, l1);
}

#[test]
fn new_layers_two_higher() {
    let l0 = "bafyreidfcktqnfmykz2ps3dbul35pepleq7kvv526g47xahuz3rqtptmky";
    let l2 = "bafyreiavxaxdz7o7rbvr3zg2liox2yww46t7g6hkehx4i4h3lwudly7dhy";
    let mut tree = tree_of(&["3jqfcqzm3ft2j", "3jqfcqzm3fz2j"]);
    assert_eq!(tree.layer(), 0);
    assert_root(&tree, l0);
    tree.insert(&rec("3jqfcqzm3fx2j"), value()).unwrap();
    assert_root(&tree, l2);
    tree.delete(&rec("3jqfcqzm3fx2j")).unwrap();
    assert_eq!(tree.layer(), 0);
    assert_root(&tree, l0);
    tree.insert(&rec("3jqfcqzm3fx2j"), value()).unwrap();
    tree.insert(&rec("3jqfcqzm4fd2j"), value()).unwrap(); // layer 1
    assert_eq!(tree.layer(), 2);
    assert_root(
        &tree,
        "bafyreig4jv3vuajbsybhyvb7gggvpwh2zszwfyttjrj6qwvcsp24h6popu",
    );
    tree.delete(&rec("3jqfcqzm4fd2j")).unwrap();
    assert_eq!(tree.layer(), 2);
    assert_root(&tree, l2);
}

#[test]
fn bulk_build_matches_inserts() {
    let keys: Vec<String> = (0..300).map(|i| format!("coll/{i:05}")).collect();
    let inserted = {
        let mut t = Mst::new(MemoryBlocks::new());
        for k in keys.iter().rev() {
            t.insert(k, value()).unwrap();
        }
        t
    };
    let built = Mst::from_entries(MemoryBlocks::new(), keys.iter().map(|k| (k, value()))).unwrap();
    assert_eq!(built.root(), inserted.root());
    assert_eq!(built.layer(), inserted.layer());
}

#[test]
fn get_update_delete() {
    let other = gelstore_model::cid_for_cbor(b"\x01");
    let mut tree = tree_of(&["a", "b", "c"]);
    assert_eq!(tree.get(&rec("b")).unwrap(), Some(value()));
    assert_eq!(tree.get(&rec("zz")).unwrap(), None);
    assert_eq!(tree.get("not a key").unwrap(), None);
    let before = tree.root();
    assert_eq!(tree.insert(&rec("b"), value()).unwrap(), Some(value()));
    assert_eq!(tree.root(), before);
    assert_eq!(tree.insert(&rec("b"), other).unwrap(), Some(value()));
    assert_eq!(tree.get(&rec("b")).unwrap(), Some(other));
    assert_ne!(tree.root(), before);
    assert_eq!(tree.delete(&rec("zz")).unwrap(), None);
    for k in ["a", "b", "c"] {
        assert!(tree.delete(&rec(k)).unwrap().is_some());
    }
    assert!(tree.is_empty());
    assert_root(
        &tree,
        "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm",
    );
}

#[test]
fn rejects_bad_keys_and_values() {
    let mut tree = Mst::new(MemoryBlocks::new());
    assert!(matches!(
        tree.insert("nope", value()),
        Err(MstError::InvalidKey { .. })
    ));
    let v0 = Cid::new_v0(value().hash().to_owned()).unwrap();
    assert!(matches!(
        tree.insert("a/b", v0),
        Err(MstError::DisallowedCid { .. })
    ));
    assert!(tree.is_empty());
}

#[test]
fn listing_and_prefixes() {
    let mut tree = Mst::new(MemoryBlocks::new());
    let mut all = Vec::new();
    for coll in ["app.a", "app.b", "app.c"] {
        for i in 0..40 {
            let key = format!("{coll}/{i:03}");
            tree.insert(&key, value()).unwrap();
            all.push(key);
        }
    }
    all.sort();
    let listed: Vec<String> = tree.entries().map(|e| e.unwrap().0).collect();
    assert_eq!(listed, all);
    let b: Vec<String> = tree
        .entries_with_prefix("app.b/")
        .map(|e| e.unwrap().0)
        .collect();
    assert_eq!(b, all[40..80].to_vec());
    let from: Vec<String> = tree
        .entries_from("app.b/0205")
        .map(|e| e.unwrap().0)
        .collect();
    assert_eq!(from, all[61..].to_vec());
    assert_eq!(tree.entries_with_prefix("app.bb/").count(), 0);
    assert_eq!(tree.entries_from("zzz").count(), 0);
    assert_eq!(tree.entries_from("").count(), 120);
}

/// A block source that counts reads.
struct Counting<'a> {
    inner: &'a MemoryBlocks,
    reads: Cell<usize>,
}

impl BlockSource for Counting<'_> {
    fn get(&self, cid: &Cid) -> Result<Option<Vec<u8>>, StoreError> {
        self.reads.set(self.reads.get() + 1);
        self.inner.get(cid)
    }
}

#[test]
fn changes_load_and_write_only_their_path() {
    let n = 100_000;
    let keys: Vec<String> = (0..n)
        .map(|i| format!("app.x/{:08}", i * 7919 % 1_000_003))
        .collect();
    let built = Mst::from_entries(MemoryBlocks::new(), keys.iter().map(|k| (k, value()))).unwrap();
    let mut store = MemoryBlocks::new();
    let root = built.write_new_blocks(&mut store).unwrap();
    let node_count = store.len();
    assert!(node_count > n / 8, "{node_count} nodes");
    // Nothing new to write a second time.
    let mut again = Vec::new();
    built.write_new_blocks(&mut again).unwrap();
    assert!(again.is_empty());

    let counting = Counting {
        inner: &store,
        reads: Cell::new(0),
    };
    let mut tree = Mst::load(&counting, root).unwrap();
    let depth = usize::from(tree.layer()) + 1;
    let other = gelstore_model::cid_for_cbor(b"\x02");
    tree.insert(&keys[1234], other).unwrap();
    assert!(
        counting.reads.get() <= depth,
        "{} reads",
        counting.reads.get()
    );
    let mut written = Vec::new();
    tree.write_new_blocks(&mut written).unwrap();
    assert!(
        !written.is_empty() && written.len() <= depth,
        "{} written",
        written.len()
    );
    let mut store2 = store.clone();
    store2.extend(written.drain(..).collect());
    // A delete also touches the neighbours' edges, still O(depth).
    let reads = counting.reads.get();
    tree.delete(&keys[4321]).unwrap();
    assert!(counting.reads.get() - reads <= 3 * depth);
    tree.write_new_blocks(&mut written).unwrap();
    assert!(written.len() <= 2 * depth, "{} written", written.len());
    // The written blocks complete the store for the new root.
    store2.extend(written.into_iter().collect());
    let reloaded = Mst::load(&store2, tree.root()).unwrap();
    assert_eq!(reloaded.get(&keys[1234]).unwrap(), Some(other));
    assert_eq!(reloaded.get(&keys[4321]).unwrap(), None);
    assert_eq!(reloaded.entries().count(), n - 1);
}

#[test]
fn reverse_listing_and_bounds() {
    let mut all = Vec::new();
    for coll in ["app.a", "app.b", "app.c"] {
        for i in 0..40 {
            all.push(format!("{coll}/{i:03}"));
        }
    }
    let tree = Mst::from_entries(MemoryBlocks::new(), all.iter().map(|k| (k, value()))).unwrap();
    all.sort();
    let keys = |it: EntriesRev<'_>| -> Vec<String> { it.map(|e| e.unwrap().0).collect() };
    let below = |end: &str| -> Vec<String> {
        all.iter()
            .rev()
            .filter(|k| k.as_str() < end)
            .cloned()
            .collect()
    };
    assert_eq!(keys(tree.entries_rev()), below("~"));
    for end in [
        "",          // before everything
        "app.a/000", // the first key
        "app.b/",    // a collection's start
        "app.b/020", // a key
        "app.b/0205",
        "app.b0", // just past a collection
        "app.c/039",
        "zzz", // after everything
    ] {
        assert_eq!(keys(tree.entries_before(end)), below(end), "before {end}");
    }
    // The newest page of one collection, as listRecords takes it.
    let page: Vec<String> = tree
        .entries_before("app.b0")
        .map(|e| e.unwrap().0)
        .take_while(|k| k.starts_with("app.b/"))
        .take(5)
        .collect();
    assert_eq!(
        page,
        [
            "app.b/039",
            "app.b/038",
            "app.b/037",
            "app.b/036",
            "app.b/035"
        ]
    );
    let empty = Mst::new(MemoryBlocks::new());
    assert_eq!(empty.entries_rev().count(), 0);
    assert_eq!(empty.entries_before("app.a0").count(), 0);
}

/// A block source that records which blocks are read.
struct Recording<'a> {
    inner: &'a MemoryBlocks,
    reads: RefCell<Vec<Cid>>,
}

impl BlockSource for Recording<'_> {
    fn get(&self, cid: &Cid) -> Result<Option<Vec<u8>>, StoreError> {
        self.reads.borrow_mut().push(*cid);
        self.inner.get(cid)
    }
}

/// The nodes on the search paths of `keys` in `tree` (read from a full
/// copy, so the recorded reads are not disturbed).
fn search_paths(tree: &Mst<&MemoryBlocks>, keys: &[&str]) -> BTreeSet<Cid> {
    let mut out = MemoryBlocks::new();
    for key in keys {
        tree.search_path_proof(key, &mut out).unwrap();
    }
    out.cids().copied().collect()
}

#[test]
fn reverse_pages_load_only_their_paths() {
    let n = 30_000;
    let keys: Vec<String> = (0..n)
        .map(|i| format!("app.x/{:08}", i * 7919 % 1_000_003))
        .chain((0..500).map(|i| format!("app.w/{i:05}")))
        .collect();
    let built = Mst::from_entries(MemoryBlocks::new(), keys.iter().map(|k| (k, value()))).unwrap();
    let mut store = MemoryBlocks::new();
    let root = built.write_new_blocks(&mut store).unwrap();
    let full = Mst::load(&store, root).unwrap();
    let mut sorted = keys.clone();
    sorted.sort();
    let x_keys = &sorted[500..];

    // The newest page, a page after a cursor in the middle, one at the
    // collection's start, one with a bound that is no key.
    for (end, take) in [
        ("app.x0".to_owned(), 50),
        (x_keys[n / 2].clone(), 50),
        (x_keys[30].clone(), 50),
        ("app.x/00500000~".to_owned(), 20),
    ] {
        let recording = Recording {
            inner: &store,
            reads: RefCell::new(Vec::new()),
        };
        let tree = Mst::load(&recording, root).unwrap();
        let lazy = tree.entries_before(&end);
        assert_eq!(
            recording.reads.borrow().len(),
            1,
            "only the root before next()"
        );
        let page: Vec<String> = lazy
            .map(|e| e.unwrap().0)
            .take_while(|k| k.starts_with("app.x/"))
            .take(take)
            .collect();
        let want: Vec<String> = x_keys
            .iter()
            .rev()
            .filter(|k| **k < end)
            .take(take)
            .cloned()
            .collect();
        assert_eq!(page, want, "before {end}");
        // Every node read is on the bound's search path or on the path to a
        // key listed (plus, at a collection's start, the one key looked at
        // and refused).
        let mut paths: Vec<&str> = page.iter().map(String::as_str).collect();
        paths.push(&end);
        let stop = sorted.iter().rev().find(|k| **k < *page.last().unwrap());
        if page.len() < take
            && let Some(stop) = stop
        {
            paths.push(stop);
        }
        let allowed = search_paths(&full, &paths);
        let reads = recording.reads.borrow();
        let outside = reads.iter().filter(|c| !allowed.contains(c)).count();
        assert_eq!(
            outside,
            0,
            "before {end}: {outside} of {} reads off the paths",
            reads.len()
        );
        // Each node is read once, and far fewer than the tree holds.
        let distinct: BTreeSet<&Cid> = reads.iter().collect();
        assert_eq!(distinct.len(), reads.len());
        assert!(
            reads.len() <= allowed.len() && reads.len() < 60,
            "{} reads",
            reads.len()
        );
        assert!(store.len() > 2_000, "{} nodes", store.len());
    }
}

#[test]
fn missing_blocks_are_reported_and_leave_the_tree_unchanged() {
    let keys: Vec<String> = (0..200).map(|i| format!("coll/{i:04}")).collect();
    let built = Mst::from_entries(MemoryBlocks::new(), keys.iter().map(|k| (k, value()))).unwrap();
    let mut only_root = MemoryBlocks::new();
    let root = built.write_new_blocks(&mut only_root).unwrap();
    let root_bytes = only_root.block(&root).unwrap().to_vec();
    let mut store = MemoryBlocks::new();
    store.insert(root, root_bytes);
    let mut tree = Mst::load(&store, root).unwrap();
    assert!(tree.layer() > 0);
    let missing = keys
        .iter()
        .find(|k| matches!(tree.get(k), Err(MstError::MissingBlock { .. })))
        .expect("some key below the root");
    assert!(matches!(
        tree.delete(missing),
        Err(MstError::MissingBlock { .. })
    ));
    assert!(matches!(
        tree.insert(missing, gelstore_model::cid_for_cbor(b"\x03")),
        Err(MstError::MissingBlock { .. })
    ));
    assert_eq!(tree.root(), root);
    let listed: Vec<_> = tree.entries().collect();
    assert!(matches!(
        listed.last(),
        Some(Err(MstError::MissingBlock { .. }))
    ));
}

#[test]
fn diff_reports_ops_and_nodes() {
    let other = gelstore_model::cid_for_cbor(b"\x04");
    let old = tree_of(&["a", "b", "c", "d", "e", "f", "g"]);
    let mut new = old.clone();
    new.delete(&rec("b")).unwrap();
    new.insert(&rec("d"), other).unwrap();
    new.insert(&rec("h"), value()).unwrap();
    let diff = old.diff(&new).unwrap();
    assert_eq!(
        diff.ops,
        vec![
            RecordOp::delete(rec("b"), value()),
            RecordOp::update(rec("d"), value(), other),
            RecordOp::create(rec("h"), value()),
        ]
    );
    assert!(diff.new_nodes.contains(&new.root()));
    assert!(diff.removed_nodes.contains(&old.root()));
    assert_eq!(old.diff(&old).unwrap(), MstDiff::default());
}

#[test]
fn apply_and_invert_check_values() {
    let other = gelstore_model::cid_for_cbor(b"\x05");
    let mut tree = tree_of(&["a", "b"]);
    let before = tree.root();
    assert!(matches!(
        tree.apply(&RecordOp::create(rec("a"), other)),
        Err(MstError::OpMismatch { .. })
    ));
    let ops = [
        RecordOp::create(rec("c"), other),
        RecordOp::update(rec("a"), value(), other),
        RecordOp::delete(rec("b"), value()),
    ];
    for op in &ops {
        tree.apply(op).unwrap();
    }
    assert!(matches!(
        tree.invert(&RecordOp::delete(rec("c"), other)),
        Err(MstError::OpMismatch { .. })
    ));
    for op in ops.iter().rev() {
        tree.invert(op).unwrap();
    }
    assert_eq!(tree.root(), before);
}

#[test]
fn proofs_cover_present_and_absent_keys() {
    let keys: Vec<String> = (0..500).map(|i| format!("coll/{i:04}")).collect();
    let tree = Mst::from_entries(MemoryBlocks::new(), keys.iter().map(|k| (k, value()))).unwrap();
    let root = tree.root();
    for key in [
        keys[0].as_str(),
        &keys[250],
        &keys[499],
        "coll/0250x",
        "a/a",
        "zz/z",
    ] {
        let mut proof = MemoryBlocks::new();
        tree.covering_proof(key, &mut proof).unwrap();
        assert!(proof.len() <= 4 * (usize::from(tree.layer()) + 1));
        let expected = tree.get(key).unwrap();
        assert_eq!(verify_proof(root, key, &proof).unwrap(), expected, "{key}");
        // The proof is enough to delete or insert the key.
        let mut partial = Mst::load(&proof, root).unwrap();
        match expected {
            Some(_) => {
                partial.delete(key).unwrap();
            }
            None => {
                partial.insert(key, value()).unwrap();
            }
        }
    }
    // Proof blocks are checked: a tampered block is refused.
    let mut proof = MemoryBlocks::new();
    tree.covering_proof(&keys[3], &mut proof).unwrap();
    let bytes = proof.remove(&root).unwrap();
    let mut tampered = bytes.clone();
    let last = tampered.len() - 1;
    tampered[last] ^= 1;
    proof.insert(root, tampered);
    assert!(matches!(
        verify_proof(root, &keys[3], &proof),
        Err(MstError::CidMismatch { .. })
    ));
}

/// A hand-made node block: `(key, subtree)` entries without prefix
/// compression's help, and an optional left link.
fn raw_node(left: Option<Cid>, entries: &[(&str, Option<Cid>)]) -> Vec<u8> {
    use ipld_core::ipld::Ipld;
    let link = |c: Option<Cid>| c.map_or(Ipld::Null, Ipld::Link);
    let mut previous = "";
    let mut list = Vec::new();
    for (key, right) in entries {
        let p = common_prefix_len(previous.as_bytes(), key.as_bytes());
        let mut e = BTreeMap::new();
        e.insert("k".to_owned(), Ipld::Bytes(key.as_bytes()[p..].to_vec()));
        e.insert("p".to_owned(), Ipld::Integer(p as i128));
        e.insert("t".to_owned(), link(*right));
        e.insert("v".to_owned(), Ipld::Link(value()));
        list.push(Ipld::Map(e));
        previous = key;
    }
    let mut map = BTreeMap::new();
    map.insert("e".to_owned(), Ipld::List(list));
    map.insert("l".to_owned(), link(left));
    serde_ipld_dagcbor::to_vec(&Ipld::Map(map)).unwrap()
}

/// A store holding a root `[B1/986427]` whose left subtree is `child`.
fn tree_with_child(child: Vec<u8>) -> (MemoryBlocks, Cid) {
    let mut store = MemoryBlocks::new();
    let child_cid = gelstore_model::cid_for_cbor(&child);
    store.insert(child_cid, child);
    let root = raw_node(Some(child_cid), &[("B1/986427", None)]);
    let root_cid = gelstore_model::cid_for_cbor(&root);
    store.insert(root_cid, root);
    (store, root_cid)
}

#[test]
fn bad_nodes_below_the_root_are_found_when_reached() {
    // A well-formed child loads fine.
    let (store, root) = tree_with_child(raw_node(None, &[("A0/374913", None)]));
    let tree = Mst::load(&store, root).unwrap();
    assert_eq!(tree.entries().count(), 2);

    // A height-1 key one layer down.
    let (store, root) = tree_with_child(raw_node(None, &[("A1/076595", None)]));
    let tree = Mst::load(&store, root).unwrap();
    assert!(matches!(
        tree.get("A1/076595"),
        Err(MstError::WrongLayer { .. })
    ));
    assert!(matches!(
        tree.entries().next(),
        Some(Err(MstError::WrongLayer { .. }))
    ));

    // A key on the wrong side of its parent's key.
    let (store, root) = tree_with_child(raw_node(None, &[("C0/451630", None)]));
    let tree = Mst::load(&store, root).unwrap();
    assert!(matches!(tree.get("A0/1"), Err(MstError::KeyOrder { .. })));
    let mut other = Mst::new(MemoryBlocks::new());
    other.insert("A0/1", value()).unwrap();
    assert!(matches!(tree.diff(&other), Err(MstError::KeyOrder { .. })));

    // An empty node as a subtree.
    let (store, root) = tree_with_child(raw_node(None, &[]));
    let mut tree = Mst::load(&store, root).unwrap();
    assert!(matches!(
        tree.insert("A0/374913", value()),
        Err(MstError::EmptyNode { .. })
    ));
    assert_eq!(tree.root(), root);
}

/// `walk_once` meets what `walk` meets, in the same order, but keeps no node
/// it read: a second walk reads them all again, where after `walk` none.
#[test]
fn a_walk_once_keeps_nothing_behind_it() {
    let keys: Vec<String> = (0..2_000).map(|i| format!("app.x/{i:06}")).collect();
    let built = Mst::from_entries(MemoryBlocks::new(), keys.iter().map(|k| (k, value()))).unwrap();
    let mut store = MemoryBlocks::new();
    let root = built.write_new_blocks(&mut store).unwrap();
    let counting = Counting {
        inner: &store,
        reads: Cell::new(0),
    };
    let seen = |walk: Walk<'_>| -> Vec<String> {
        walk.map(|visit| match visit.unwrap() {
            Visit::Node { cid, .. } => cid.to_string(),
            Visit::Leaf { key, value } => format!("{key} {value}"),
        })
        .collect()
    };
    let tree = Mst::load(&counting, root).unwrap();
    // Reads of one walk (the root was read by `load`).
    let reads_of = |walk: &dyn Fn() -> Vec<String>| {
        let before = counting.reads.get();
        (walk(), counting.reads.get() - before)
    };
    let (once, below_root) = reads_of(&|| seen(tree.walk_once()));
    assert!(below_root > 10, "{below_root} node reads");
    assert_eq!(
        reads_of(&|| seen(tree.walk_once())),
        (once.clone(), below_root),
        "walk_once kept a node"
    );
    assert_eq!(reads_of(&|| seen(tree.walk())), (once.clone(), below_root));
    assert_eq!(
        reads_of(&|| seen(tree.walk())),
        (once, 0),
        "walk keeps its nodes"
    );
}
