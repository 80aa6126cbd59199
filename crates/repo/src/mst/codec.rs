//! Node blocks: encoding a node as DAG-CBOR, and loading a node from a
//! block source with every check the spec asks for on untrusted input.
//!
//! The wire form (keys in DAG-CBOR canonical order):
//!
//! ```text
//! { "e": [ { "k": bytes, "p": uint, "t": link|null, "v": link }, ... ],
//!   "l": link|null }
//! ```
//!
//! `p` is the number of bytes the key shares with the previous key of the
//! node (0 for the first entry) and `k` is the rest of the key.

use std::collections::BTreeMap;
use std::sync::Arc;

use cid::Cid;
use ipld_core::ipld::Ipld;

use super::error::MstError;
use super::key::{check_key, common_prefix_len, key_height, shorten};
use super::node::{Bounds, Leaf, Link, Node};
use crate::blocks::BlockSource;
use gelstore_model::{
    DAG_CBOR_CODEC, SHA2_256, Scalar, Visit, cid_for_cbor, decode_dag_cbor, walk_dag_cbor,
};

/// The CID of a node block (CIDv1, dag-cbor, sha2-256).
pub(crate) fn cid_for_node(bytes: &[u8]) -> Cid {
    cid_for_cbor(bytes)
}

/// Encodes a node as canonical DAG-CBOR. Written by hand because the shape
/// is fixed and small; a unit test checks it against the generic encoder.
pub(crate) fn encode_node(node: &Node) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + node.leaves.len() * 120);
    head(&mut out, MAJOR_MAP, 2);
    text(&mut out, "e");
    head(&mut out, MAJOR_ARRAY, node.leaves.len() as u64);
    let mut previous: &[u8] = b"";
    for (leaf, right) in node.leaves.iter().zip(&node.subtrees[1..]) {
        let key = leaf.key.as_bytes();
        let prefix = common_prefix_len(previous, key);
        head(&mut out, MAJOR_MAP, 4);
        text(&mut out, "k");
        head(&mut out, MAJOR_BYTES, (key.len() - prefix) as u64);
        out.extend_from_slice(&key[prefix..]);
        text(&mut out, "p");
        head(&mut out, MAJOR_UINT, prefix as u64);
        text(&mut out, "t");
        optional_link(&mut out, right.as_ref().map(Link::cid));
        text(&mut out, "v");
        link(&mut out, &leaf.value);
        previous = key;
    }
    text(&mut out, "l");
    optional_link(&mut out, node.subtrees[0].as_ref().map(Link::cid));
    out
}

const MAJOR_UINT: u8 = 0;
const MAJOR_BYTES: u8 = 2;
const MAJOR_TEXT: u8 = 3;
const MAJOR_ARRAY: u8 = 4;
const MAJOR_MAP: u8 = 5;
const CBOR_NULL: u8 = 0xf6;
/// Tag 42 (a CID link), as a one-byte-argument head.
const TAG_CID: [u8; 2] = [0xd8, 42];

/// A CBOR head with the shortest argument encoding.
fn head(out: &mut Vec<u8>, major: u8, n: u64) {
    let major = major << 5;
    if n < 24 {
        out.push(major | n as u8);
    } else if n <= u64::from(u8::MAX) {
        out.extend_from_slice(&[major | 24, n as u8]);
    } else if n <= u64::from(u16::MAX) {
        out.push(major | 25);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else if n <= u64::from(u32::MAX) {
        out.push(major | 26);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        out.push(major | 27);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn text(out: &mut Vec<u8>, s: &str) {
    head(out, MAJOR_TEXT, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// A DAG-CBOR link: tag 42 over the CID bytes with a leading 0x00.
fn link(out: &mut Vec<u8>, cid: &Cid) {
    let bytes = cid.to_bytes();
    out.extend_from_slice(&TAG_CID);
    head(out, MAJOR_BYTES, bytes.len() as u64 + 1);
    out.push(0);
    out.extend_from_slice(&bytes);
}

fn optional_link(out: &mut Vec<u8>, cid: Option<Cid>) {
    match cid {
        Some(cid) => link(out, &cid),
        None => out.push(CBOR_NULL),
    }
}

/// Checks that `cid` may link to an MST node: CIDv1, dag-cbor, sha2-256.
pub(crate) fn check_node_link(cid: &Cid) -> Result<(), MstError> {
    let reason = if cid.version() != cid::Version::V1 {
        "links to MST nodes must be CIDv1"
    } else if cid.codec() != DAG_CBOR_CODEC {
        "links to MST nodes must use the dag-cbor codec"
    } else if cid.hash().code() != SHA2_256 || cid.hash().size() != 32 {
        "links to MST nodes must use a 32-byte sha2-256 hash"
    } else {
        return Ok(());
    };
    Err(MstError::DisallowedCid {
        cid: Box::new(*cid),
        reason: reason.to_owned(),
    })
}

/// Loads the root node of a tree.
pub(crate) fn load_root(src: &dyn BlockSource, cid: &Cid) -> Result<Node, MstError> {
    load_node(src, cid, None, &Bounds::default())
}

/// Fetches, checks and decodes one node. `height` is the layer the parent
/// expects (`None` for the root); `bounds` the key range it expects.
pub(crate) fn load_node(
    src: &dyn BlockSource,
    cid: &Cid,
    height: Option<u8>,
    bounds: &Bounds,
) -> Result<Node, MstError> {
    check_node_link(cid)?;
    let bytes = src.get(cid)?.ok_or(MstError::MissingBlock {
        cid: Box::new(*cid),
    })?;
    if cid_for_node(&bytes) != *cid {
        return Err(MstError::CidMismatch {
            cid: Box::new(*cid),
        });
    }
    decode_node(cid, bytes, height, bounds)
}

/// Decodes and checks a node block whose bytes are known to hash to `cid`.
pub(crate) fn decode_node(
    cid: &Cid,
    bytes: Vec<u8>,
    height: Option<u8>,
    bounds: &Bounds,
) -> Result<Node, MstError> {
    let cid = *cid;
    // A well-formed node is read straight off the bytes; anything else
    // goes the long way, which names what is wrong with it.
    let raw = match NodeReader::read(&bytes) {
        Some(raw) => raw,
        None => parse_node(&cid, &bytes)?,
    };
    let (height, leaves, subtrees) = check_node(&cid, raw, height, bounds)?;
    Ok(Node::loaded(height, leaves, subtrees, cid, bytes))
}

/// A node's fields as encoded: its left subtree and its entries.
struct RawNode<'a> {
    left: Option<Cid>,
    entries: Vec<RawEntry<'a>>,
    /// The shape error of the entry after `entries`, if one is not an
    /// entry: reported after the checks of the entries before it, as a
    /// reader going entry by entry would.
    bad_entry: Option<MstError>,
}

/// An entry's fields as encoded: key suffix `k`, prefix length `p`, value
/// `v` and right subtree `t`.
struct RawEntry<'a> {
    suffix: std::borrow::Cow<'a, [u8]>,
    prefix_len: u64,
    value: Cid,
    right: Option<Cid>,
}

/// A node's fields through the generic decoder, with a named error for
/// every shape that is not a node's.
fn parse_node<'a>(cid: &Cid, bytes: &[u8]) -> Result<RawNode<'a>, MstError> {
    let value = decode_dag_cbor(bytes).map_err(|e| MstError::BadCbor {
        cid: Box::new(*cid),
        source: Box::new(e),
    })?;
    let shape = |reason: &str| MstError::BadShape {
        cid: Box::new(*cid),
        reason: reason.to_owned(),
    };
    let mut map = into_map(value, &["e", "l"]).map_err(|r| shape(&format!("node {r}")))?;
    let left = optional_link_field(map.remove("l")).map_err(|r| shape(&format!("\"l\" {r}")))?;
    let Some(Ipld::List(raw_entries)) = map.remove("e") else {
        return Err(shape("\"e\" must be an array"));
    };
    let mut entries = Vec::with_capacity(raw_entries.len());
    for (index, raw) in raw_entries.into_iter().enumerate() {
        match parse_entry(raw) {
            Ok(entry) => entries.push(entry),
            Err(reason) => {
                let bad = shape(&format!("entry {index}: {reason}"));
                return Ok(RawNode {
                    left,
                    entries,
                    bad_entry: Some(bad),
                });
            }
        }
    }
    Ok(RawNode {
        left,
        entries,
        bad_entry: None,
    })
}

/// One entry's fields, or what is wrong with their shape.
fn parse_entry<'a>(raw: Ipld) -> Result<RawEntry<'a>, String> {
    let mut entry = into_map(raw, &["k", "p", "t", "v"]).map_err(|r| format!("entry {r}"))?;
    let Some(Ipld::Bytes(suffix)) = entry.remove("k") else {
        return Err("\"k\" must be a byte string".into());
    };
    let prefix_len = match entry.remove("p") {
        Some(Ipld::Integer(p)) if p >= 0 => u64::try_from(p).unwrap_or(u64::MAX),
        _ => return Err("\"p\" must be a non-negative integer".into()),
    };
    let Some(Ipld::Link(value)) = entry.remove("v") else {
        return Err("\"v\" must be a link".into());
    };
    let right = optional_link_field(entry.remove("t")).map_err(|r| format!("\"t\" {r}"))?;
    Ok(RawEntry {
        suffix: suffix.into(),
        prefix_len,
        value,
        right,
    })
}

/// The checks of a node's fields (keys, their order and layer, the
/// subtree links): its height, leaves and subtrees.
#[allow(clippy::type_complexity)]
fn check_node(
    cid: &Cid,
    raw: RawNode<'_>,
    height: Option<u8>,
    bounds: &Bounds,
) -> Result<(u8, Vec<Leaf>, Vec<Option<Link>>), MstError> {
    let cid = *cid;
    let mut leaves = Vec::with_capacity(raw.entries.len());
    let mut subtrees = Vec::with_capacity(raw.entries.len() + 1);
    subtrees.push(raw.left.map(Link::stored));
    let mut previous: Vec<u8> = Vec::new();
    for (index, entry) in raw.entries.into_iter().enumerate() {
        let RawEntry {
            suffix,
            prefix_len,
            value,
            right,
        } = entry;
        let right = right.map(Link::stored);
        let bad_prefix = |reason| MstError::BadPrefixLength {
            cid: Box::new(cid),
            index,
            prefix_len,
            reason,
        };
        if index == 0 && prefix_len != 0 {
            return Err(bad_prefix("the first entry must have prefix length 0"));
        }
        let prefix = usize::try_from(prefix_len)
            .ok()
            .filter(|p| *p <= previous.len())
            .ok_or_else(|| bad_prefix("longer than the previous key"))?;
        let mut key = previous[..prefix].to_vec();
        key.extend_from_slice(&suffix);
        if common_prefix_len(&previous, &key) != prefix && index > 0 {
            // Either the keys are equal/out of order, or `p` is not the
            // whole shared prefix (which would make the encoding ambiguous).
            if key.as_slice() <= previous.as_slice() {
                return Err(MstError::KeyOrder {
                    cid: Box::new(cid),
                    key: shorten(&String::from_utf8_lossy(&key)),
                });
            }
            return Err(bad_prefix(
                "not the whole prefix shared with the previous key",
            ));
        }
        let key = String::from_utf8(key).map_err(|_| MstError::InvalidKey {
            key: shorten(&String::from_utf8_lossy(&suffix)),
            reason: "not UTF-8",
        })?;
        check_key(&key)?;
        if index > 0 && key.as_bytes() <= previous.as_slice() {
            return Err(MstError::KeyOrder {
                cid: Box::new(cid),
                key: shorten(&key),
            });
        }
        if !bounds.contains(&key) {
            return Err(MstError::KeyOrder {
                cid: Box::new(cid),
                key: shorten(&key),
            });
        }
        previous = key.clone().into_bytes();
        leaves.push(Leaf {
            key: Arc::from(key),
            value,
        });
        subtrees.push(right);
    }
    if let Some(bad) = raw.bad_entry {
        return Err(bad);
    }

    if leaves.is_empty() {
        match (height, &subtrees[0]) {
            (None, Some(_)) => return Err(MstError::UntrimmedRoot { cid: Box::new(cid) }),
            (Some(_), None) => return Err(MstError::EmptyNode { cid: Box::new(cid) }),
            _ => {}
        }
    }
    // Layers: every key at the node's layer, no subtrees under layer 0.
    let node_height = match (height, leaves.first()) {
        (Some(h), _) => h,
        (None, Some(first)) => key_height(first.key.as_bytes()),
        (None, None) => 0,
    };
    for leaf in &leaves {
        let h = key_height(leaf.key.as_bytes());
        if h != node_height {
            return Err(MstError::WrongLayer {
                cid: Box::new(cid),
                reason: format!(
                    "key {:?} has height {h} but the node is at layer {node_height}",
                    shorten(&leaf.key)
                ),
            });
        }
    }
    for sub in subtrees.iter().flatten() {
        if node_height == 0 {
            return Err(MstError::WrongLayer {
                cid: Box::new(cid),
                reason: "a node at layer 0 has a subtree".to_owned(),
            });
        }
        check_node_link(&sub.cid())?;
    }
    Ok((node_height, leaves, subtrees))
}

/// Reads a well-formed node straight off its strict DAG-CBOR, or says it
/// cannot (then [`parse_node`] says why). The encoding's map keys come
/// sorted and unique, so a node is `{"e": [...], "l": …}` and each entry
/// `{"k", "p", "t", "v"}`, in that order.
#[derive(Default)]
struct NodeReader<'a> {
    /// Open lists and maps: 1 in the node, 2 in `e`, 3 in an entry.
    depth: usize,
    key: &'a str,
    left: Option<Option<Cid>>,
    entries: Option<Vec<RawEntry<'a>>>,
    entry: PartialEntry<'a>,
    failed: bool,
}

#[derive(Default)]
struct PartialEntry<'a> {
    suffix: Option<&'a [u8]>,
    prefix_len: Option<u64>,
    value: Option<Cid>,
    right: Option<Option<Cid>>,
}

impl<'a> NodeReader<'a> {
    fn read(bytes: &'a [u8]) -> Option<RawNode<'a>> {
        let mut reader = NodeReader::default();
        walk_dag_cbor(bytes, &mut reader).ok()?;
        match reader {
            NodeReader {
                failed: false,
                left: Some(left),
                entries: Some(entries),
                ..
            } => Some(RawNode {
                left,
                entries,
                bad_entry: None,
            }),
            _ => None,
        }
    }
}

impl<'a> Visit<'a> for NodeReader<'a> {
    fn scalar(&mut self, scalar: Scalar<'a>) {
        let entry = &mut self.entry;
        match (self.depth, self.key, scalar) {
            (1, "l", Scalar::Null) => self.left = Some(None),
            (1, "l", Scalar::Link(cid)) => self.left = Some(Some(cid)),
            (3, "k", Scalar::Bytes(b)) => entry.suffix = Some(b),
            (3, "p", Scalar::Integer(p)) if p >= 0 => {
                entry.prefix_len = Some(u64::try_from(p).unwrap_or(u64::MAX));
            }
            (3, "t", Scalar::Null) => entry.right = Some(None),
            (3, "t", Scalar::Link(cid)) => entry.right = Some(Some(cid)),
            (3, "v", Scalar::Link(cid)) => entry.value = Some(cid),
            _ => self.failed = true,
        }
    }

    fn open(&mut self, map: bool, _: u64) {
        match (self.depth, map, self.key) {
            (0, true, _) => {}
            (1, false, "e") => self.entries = Some(Vec::new()),
            (2, true, _) => self.entry = PartialEntry::default(),
            _ => self.failed = true,
        }
        self.depth += 1;
    }

    fn key(&mut self, key: &'a str) {
        let known = match self.depth {
            1 => matches!(key, "e" | "l"),
            3 => matches!(key, "k" | "p" | "t" | "v"),
            _ => false,
        };
        self.failed |= !known;
        self.key = key;
    }

    fn close(&mut self) {
        self.depth = self.depth.saturating_sub(1);
        if self.depth != 2 || self.failed {
            return;
        }
        let entry = std::mem::take(&mut self.entry);
        match (entry, self.entries.as_mut()) {
            (
                PartialEntry {
                    suffix: Some(suffix),
                    prefix_len: Some(prefix_len),
                    value: Some(value),
                    right: Some(right),
                },
                Some(entries),
            ) => entries.push(RawEntry {
                suffix: suffix.into(),
                prefix_len,
                value,
                right,
            }),
            _ => self.failed = true,
        }
    }
}

/// A map with exactly the field names `fields`.
fn into_map(value: Ipld, fields: &[&str]) -> Result<BTreeMap<String, Ipld>, String> {
    let Ipld::Map(map) = value else {
        return Err("must be a map".to_owned());
    };
    if let Some(extra) = map.keys().find(|k| !fields.contains(&k.as_str())) {
        return Err(format!("has an unexpected field {:?}", shorten(extra)));
    }
    if let Some(missing) = fields.iter().find(|f| !map.contains_key(**f)) {
        return Err(format!("lacks the field {missing:?}"));
    }
    Ok(map)
}

/// A field that must be a link or null.
fn optional_link_field(value: Option<Ipld>) -> Result<Option<Cid>, &'static str> {
    match value {
        Some(Ipld::Null) => Ok(None),
        Some(Ipld::Link(cid)) => Ok(Some(cid)),
        _ => Err("must be a link or null"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::MemoryBlocks;
    use gelstore_model::parse_cid;

    const VALUE: &str = "bafyreie5cvv4h45feadgeuwhbcutmh6t2ceseocckahdoe6uat64zmz454";

    fn value() -> Cid {
        parse_cid(VALUE).unwrap()
    }

    fn leaf(key: &str) -> Leaf {
        Leaf {
            key: Arc::from(key),
            value: value(),
        }
    }

    /// The generic encoder's output for the same node.
    fn generic(node: &Node) -> Vec<u8> {
        let mut entries = Vec::new();
        let mut previous = "";
        for (leaf, right) in node.leaves.iter().zip(&node.subtrees[1..]) {
            let p = common_prefix_len(previous.as_bytes(), leaf.key.as_bytes());
            let mut e = BTreeMap::new();
            e.insert("p".to_owned(), Ipld::Integer(p as i128));
            e.insert(
                "k".to_owned(),
                Ipld::Bytes(leaf.key.as_bytes()[p..].to_vec()),
            );
            e.insert("v".to_owned(), Ipld::Link(leaf.value));
            e.insert(
                "t".to_owned(),
                right.as_ref().map_or(Ipld::Null, |l| Ipld::Link(l.cid())),
            );
            entries.push(Ipld::Map(e));
            previous = &leaf.key;
        }
        let mut map = BTreeMap::new();
        map.insert(
            "l".to_owned(),
            node.subtrees[0]
                .as_ref()
                .map_or(Ipld::Null, |l| Ipld::Link(l.cid())),
        );
        map.insert("e".to_owned(), Ipld::List(entries));
        serde_ipld_dagcbor::to_vec(&Ipld::Map(map)).unwrap()
    }

    #[test]
    fn hand_encoder_matches_generic_encoder() {
        let empty = Node::empty();
        assert_eq!(encode_node(&empty), generic(&empty));
        let long = format!("coll/{}", "x".repeat(300));
        let child = Link::stored(value());
        let node = Node::new(
            1,
            vec![
                leaf("com.example.record/3jqfcqzm3fo2j"),
                leaf("com.example.record/3jqfcqzm3fp2j"),
                leaf(&long),
            ],
            vec![Some(child.clone()), None, Some(child), None],
        );
        assert_eq!(encode_node(&node), generic(&node));
    }

    #[test]
    fn known_node_cids() {
        assert_eq!(
            Node::empty().cid().to_string(),
            "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm"
        );
        let node = Node::new(
            0,
            vec![leaf("com.example.record/3jqfcqzm3fo2j")],
            vec![None, None],
        );
        assert_eq!(
            node.cid().to_string(),
            "bafyreibj4lsc3aqnrvphp5xmrnfoorvru4wynt6lwidqbm2623a6tatzdu"
        );
    }

    // --- malformed node bytes -------------------------------------------

    /// Decodes `bytes` as the root (or as a child at `height`).
    fn decode(bytes: Vec<u8>, height: Option<u8>) -> Result<Node, MstError> {
        let cid = cid_for_node(&bytes);
        let mut blocks = MemoryBlocks::new();
        blocks.insert(cid, bytes);
        load_node(&blocks, &cid, height, &Bounds::default())
    }

    fn encode(value: Ipld) -> Vec<u8> {
        serde_ipld_dagcbor::to_vec(&value).unwrap()
    }

    fn map(fields: Vec<(&str, Ipld)>) -> Ipld {
        Ipld::Map(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
    }

    fn entry(p: i128, k: &[u8], t: Ipld) -> Ipld {
        map(vec![
            ("p", Ipld::Integer(p)),
            ("k", Ipld::Bytes(k.to_vec())),
            ("v", Ipld::Link(value())),
            ("t", t),
        ])
    }

    fn node(l: Ipld, entries: Vec<Ipld>) -> Vec<u8> {
        encode(map(vec![("l", l), ("e", Ipld::List(entries))]))
    }

    /// Two keys of height 0 in order, and one of height 1.
    const K0A: &str = "com.example.record/3jqfcqzm3fo2j";
    const K0B: &str = "com.example.record/3jqfcqzm3fp2j";
    const K1: &str = "com.example.record/3jqfcqzm3fs2j";

    #[test]
    fn accepts_a_good_node() {
        let bytes = node(
            Ipld::Null,
            vec![
                entry(0, K0A.as_bytes(), Ipld::Null),
                entry(29, b"p2j", Ipld::Null),
            ],
        );
        let n = decode(bytes, None).unwrap();
        assert_eq!(n.leaves.len(), 2);
        assert_eq!(&*n.leaves[1].key, K0B);
        assert_eq!(key_height(K1.as_bytes()), 1);
    }

    #[test]
    fn bad_cbor() {
        for bytes in [
            vec![],
            vec![0xff],
            vec![0xa1],
            b"\xa2\x61l\xf6\x61e\x80".to_vec(),
        ] {
            // The last one is a valid node with its map keys in the wrong order.
            assert!(
                matches!(decode(bytes.clone(), None), Err(MstError::BadCbor { .. })),
                "{bytes:02x?}"
            );
        }
    }

    #[test]
    fn wrong_shape() {
        let cases = vec![
            encode(Ipld::List(vec![])),
            encode(map(vec![("e", Ipld::List(vec![]))])),
            encode(map(vec![("l", Ipld::Null)])),
            encode(map(vec![
                ("l", Ipld::Null),
                ("e", Ipld::List(vec![])),
                ("x", Ipld::Null),
            ])),
            node(Ipld::Integer(1), vec![]),
            encode(map(vec![("l", Ipld::Null), ("e", Ipld::Null)])),
            node(Ipld::Null, vec![Ipld::Null]),
            node(Ipld::Null, vec![map(vec![("p", Ipld::Integer(0))])]),
            node(
                Ipld::Null,
                vec![map(vec![
                    ("p", Ipld::Integer(0)),
                    ("k", Ipld::String(K0A.to_owned())),
                    ("v", Ipld::Link(value())),
                    ("t", Ipld::Null),
                ])],
            ),
            node(
                Ipld::Null,
                vec![map(vec![
                    ("p", Ipld::Integer(-1)),
                    ("k", Ipld::Bytes(K0A.as_bytes().to_vec())),
                    ("v", Ipld::Link(value())),
                    ("t", Ipld::Null),
                ])],
            ),
            node(
                Ipld::Null,
                vec![map(vec![
                    ("p", Ipld::Integer(0)),
                    ("k", Ipld::Bytes(K0A.as_bytes().to_vec())),
                    ("v", Ipld::Null),
                    ("t", Ipld::Null),
                ])],
            ),
            node(
                Ipld::Null,
                vec![entry(0, K0A.as_bytes(), Ipld::Bytes(vec![1]))],
            ),
        ];
        for bytes in cases {
            let result = decode(bytes.clone(), None);
            assert!(
                matches!(result, Err(MstError::BadShape { .. })),
                "{bytes:02x?}: {result:?}"
            );
        }
    }

    #[test]
    fn keys_out_of_order() {
        let swapped = node(
            Ipld::Null,
            vec![
                entry(0, K0B.as_bytes(), Ipld::Null),
                entry(29, b"o2j", Ipld::Null),
            ],
        );
        assert!(matches!(
            decode(swapped, None),
            Err(MstError::KeyOrder { .. })
        ));
        let duplicate = node(
            Ipld::Null,
            vec![
                entry(0, K0A.as_bytes(), Ipld::Null),
                entry(31, b"", Ipld::Null),
            ],
        );
        assert!(matches!(
            decode(duplicate, None),
            Err(MstError::KeyOrder { .. })
        ));
        // In order inside the node, but outside the range the parent gives.
        let bytes = node(Ipld::Null, vec![entry(0, K0B.as_bytes(), Ipld::Null)]);
        let cid = cid_for_node(&bytes);
        let bounds = Bounds {
            lo: None,
            hi: Some(Arc::from(K0A)),
        };
        assert!(matches!(
            decode_node(&cid, bytes, Some(0), &bounds),
            Err(MstError::KeyOrder { .. })
        ));
    }

    #[test]
    fn bad_prefix_length() {
        let first_nonzero = node(Ipld::Null, vec![entry(1, K0A.as_bytes(), Ipld::Null)]);
        let too_long = node(
            Ipld::Null,
            vec![
                entry(0, K0A.as_bytes(), Ipld::Null),
                entry(40, b"x", Ipld::Null),
            ],
        );
        let not_maximal = node(
            Ipld::Null,
            vec![
                entry(0, K0A.as_bytes(), Ipld::Null),
                entry(0, K0B.as_bytes(), Ipld::Null),
            ],
        );
        for bytes in [first_nonzero, too_long, not_maximal] {
            let result = decode(bytes, None);
            assert!(
                matches!(result, Err(MstError::BadPrefixLength { .. })),
                "{result:?}"
            );
        }
    }

    #[test]
    fn invalid_keys_in_nodes() {
        for key in [&b"no-slash"[..], b"coll/\xff", b"coll/a b", b""] {
            let result = decode(node(Ipld::Null, vec![entry(0, key, Ipld::Null)]), None);
            assert!(
                matches!(result, Err(MstError::InvalidKey { .. })),
                "{result:?}"
            );
        }
    }

    #[test]
    fn wrong_layer() {
        // Keys of different heights in one node.
        let mixed = node(
            Ipld::Null,
            vec![
                entry(0, K0A.as_bytes(), Ipld::Null),
                entry(29, b"s2j", Ipld::Null),
            ],
        );
        assert!(matches!(
            decode(mixed, None),
            Err(MstError::WrongLayer { .. })
        ));
        // A height-0 key where the parent expects layer 1.
        let low = node(Ipld::Null, vec![entry(0, K0A.as_bytes(), Ipld::Null)]);
        assert!(matches!(
            decode(low, Some(1)),
            Err(MstError::WrongLayer { .. })
        ));
        // A subtree under a layer-0 node.
        let child = cid_for_node(b"\xa0");
        let deep = node(
            Ipld::Null,
            vec![entry(0, K0A.as_bytes(), Ipld::Link(child))],
        );
        assert!(matches!(
            decode(deep, None),
            Err(MstError::WrongLayer { .. })
        ));
        let deep_left = node(
            Ipld::Link(child),
            vec![entry(0, K0A.as_bytes(), Ipld::Null)],
        );
        assert!(matches!(
            decode(deep_left, None),
            Err(MstError::WrongLayer { .. })
        ));
    }

    #[test]
    fn empty_nodes() {
        // The empty root is fine; an empty non-root node is not.
        assert!(decode(node(Ipld::Null, vec![]), None).unwrap().is_empty());
        assert!(matches!(
            decode(node(Ipld::Null, vec![]), Some(0)),
            Err(MstError::EmptyNode { .. })
        ));
        // An empty node pointing to a subtree: fine in the middle, not on top.
        let child = cid_for_node(b"\xa0");
        assert!(decode(node(Ipld::Link(child), vec![]), Some(2)).is_ok());
        assert!(matches!(
            decode(node(Ipld::Link(child), vec![]), None),
            Err(MstError::UntrimmedRoot { .. })
        ));
    }

    #[test]
    fn bad_links_and_blocks() {
        let empty = node(Ipld::Null, vec![]);
        let good = cid_for_node(&empty);
        // Missing block.
        let blocks = MemoryBlocks::new();
        assert!(matches!(
            load_node(&blocks, &good, None, &Bounds::default()),
            Err(MstError::MissingBlock { .. })
        ));
        // Bytes that do not hash to the CID.
        let mut blocks = MemoryBlocks::new();
        blocks.insert(
            good,
            node(Ipld::Null, vec![entry(0, K0A.as_bytes(), Ipld::Null)]),
        );
        assert!(matches!(
            load_node(&blocks, &good, None, &Bounds::default()),
            Err(MstError::CidMismatch { .. })
        ));
        // A raw-codec CID cannot point to a node.
        let raw = gelstore_model::cid_for_blob(&empty);
        let mut blocks = MemoryBlocks::new();
        blocks.insert(raw, empty.clone());
        assert!(matches!(
            load_node(&blocks, &raw, None, &Bounds::default()),
            Err(MstError::DisallowedCid { .. })
        ));
        let bad_sub = node(Ipld::Null, vec![entry(0, K1.as_bytes(), Ipld::Link(raw))]);
        let result = decode(bad_sub, None);
        assert!(
            matches!(result, Err(MstError::DisallowedCid { .. })),
            "{result:?}"
        );
    }

    /// An entry's suffix, prefix length, value and right subtree.
    type EntryFields = (Vec<u8>, u64, Cid, Option<Cid>);

    /// The fields the fast reader takes, to compare with the long way's.
    fn fields(raw: &RawNode<'_>) -> (Option<Cid>, Vec<EntryFields>) {
        let entries = raw
            .entries
            .iter()
            .map(|e| (e.suffix.to_vec(), e.prefix_len, e.value, e.right))
            .collect();
        (raw.left, entries)
    }

    #[test]
    fn the_fast_reader_takes_only_what_the_long_way_takes_and_reads_it_alike() {
        // Real nodes of a tree of a few hundred keys.
        let keys: Vec<String> = (0..400)
            .map(|i| format!("com.example.record/3jqfcqzm{i:05}"))
            .collect();
        let tree =
            crate::mst::Mst::from_entries(MemoryBlocks::new(), keys.iter().map(|k| (k, value())))
                .unwrap();
        let mut nodes: Vec<(Cid, Vec<u8>)> = Vec::new();
        tree.write_new_blocks(&mut nodes).unwrap();
        assert!(nodes.len() > 20);
        let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let cid = value();
        let (mut taken, mut refused) = (0, 0);
        for (_, bytes) in &nodes {
            let fast = NodeReader::read(bytes).expect("a real node is read fast");
            let slow = parse_node(&cid, bytes).unwrap();
            assert!(slow.bad_entry.is_none());
            assert_eq!(fields(&fast), fields(&slow));
            // Every one-byte change: the fast reader takes a changed node
            // only if the long way takes it, and reads the same fields.
            for _ in 0..200 {
                let mut changed = bytes.clone();
                let at = (next() as usize) % changed.len();
                changed[at] = next() as u8;
                match NodeReader::read(&changed) {
                    Some(fast) => {
                        taken += 1;
                        let slow = parse_node(&cid, &changed).expect("the long way takes it too");
                        assert!(slow.bad_entry.is_none(), "{changed:02x?}");
                        assert_eq!(fields(&fast), fields(&slow), "{changed:02x?}");
                    }
                    None => refused += 1,
                }
            }
        }
        assert!(taken > 0 && refused > 0, "{taken} taken, {refused} refused");
    }
}
