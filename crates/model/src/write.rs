//! Canonical DAG-CBOR written straight into a sink (a buffer that is about to
//! be encrypted, a running SHA-256), without building the bytes first.
//!
//! The bytes are the ones [`encode_dag_cbor`](super::encode_dag_cbor) gives,
//! and so are the checks and the errors: a value is first checked
//! ([`Checked::new`]: the data model rules, then the size limit), which also
//! gives its encoded length, so a caller can size its buffer exactly and
//! write a length prefix before the bytes.

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;
use sha2::{Digest, Sha256};

use super::MAX_CBOR_SIZE;
use super::error::{DataModelError, Result};
use super::scan::{
    MAJOR_ARRAY, MAJOR_BYTES, MAJOR_MAP, MAJOR_NEGATIVE, MAJOR_TEXT, MAJOR_UNSIGNED,
};
use super::validate::{check_data_model, check_map_keys, check_value};

/// Where the writer puts bytes.
pub trait Sink {
    /// Appends `bytes`.
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

impl Sink for Sha256 {
    fn put(&mut self, bytes: &[u8]) {
        self.update(bytes);
    }
}

/// What a [`Checked`] writes.
#[derive(Debug, Clone, Copy)]
enum Source<'a> {
    Value(&'a Ipld),
    /// A map with one key left out.
    MapWithout(&'a BTreeMap<String, Ipld>, &'a str),
}

/// A value that passed the checks of [`encode_dag_cbor`](super::encode_dag_cbor),
/// with the length of its encoding.
#[derive(Debug, Clone, Copy)]
pub struct Checked<'a> {
    source: Source<'a>,
    len: usize,
}

impl<'a> Checked<'a> {
    /// Checks `value` as [`encode_dag_cbor`](super::encode_dag_cbor) does:
    /// the data model rules, then that its encoding is at most
    /// [`MAX_CBOR_SIZE`] bytes.
    pub fn new(value: &'a Ipld) -> Result<Checked<'a>> {
        check_data_model(value)?;
        Checked::sized(Source::Value(value), value_len(value))
    }

    /// Checks the map `map` without its key `skip` (absent or not), as
    /// [`Checked::new`] would check that smaller map, without building it.
    pub fn map_without(map: &'a BTreeMap<String, Ipld>, skip: &'a str) -> Result<Checked<'a>> {
        // The map's own rules look at `$link`, `$bytes`, `$type` and, for a
        // blob, at every key: only then can leaving a key out change them.
        let is_blob = matches!(map.get("$type"), Some(Ipld::String(t)) if t == "blob");
        if is_blob || matches!(skip, "$link" | "$bytes" | "$type") {
            let smaller: BTreeMap<String, Ipld> = map
                .iter()
                .filter(|(k, _)| k.as_str() != skip)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            check_map_keys(&smaller)?;
        } else {
            check_map_keys(map)?;
        }
        for (key, value) in map {
            if key != skip {
                check_value(value, 1)?;
            }
        }
        let count = map.len() - usize::from(map.contains_key(skip));
        let len = head_len(count as u64)
            + map
                .iter()
                .filter(|(k, _)| k.as_str() != skip)
                .map(|(k, v)| string_len(k) + value_len(v))
                .sum::<usize>();
        Checked::sized(Source::MapWithout(map, skip), len)
    }

    fn sized(source: Source<'a>, len: usize) -> Result<Checked<'a>> {
        if len > MAX_CBOR_SIZE {
            return Err(DataModelError::TooLarge {
                size: len,
                max: MAX_CBOR_SIZE,
            });
        }
        Ok(Checked { source, len })
    }

    /// The length of the encoding in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the encoding is empty (never: every value takes a byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Writes the canonical DAG-CBOR bytes into `sink`.
    pub fn write_to(&self, sink: &mut impl Sink) {
        match self.source {
            Source::Value(value) => write_value(value, sink),
            Source::MapWithout(map, skip) => {
                let count = map.len() - usize::from(map.contains_key(skip));
                write_map(count, map.iter().filter(|(k, _)| k.as_str() != skip), sink);
            }
        }
    }

    /// The canonical DAG-CBOR bytes in a new buffer of exactly their length.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len);
        self.write_to(&mut out);
        out
    }
}

/// Tag 42 (a CID link), as its two-byte head.
const TAG_CID_HEAD: [u8; 2] = [0xd8, 0x2a];

/// Length of a head whose argument is `arg` (shortest form).
fn head_len(arg: u64) -> usize {
    match arg {
        0..24 => 1,
        24..=0xff => 2,
        0x100..=0xffff => 3,
        0x1_0000..=0xffff_ffff => 5,
        _ => 9,
    }
}

/// Writes a head of major type `major` with argument `arg`, shortest form.
fn write_head(major: u8, arg: u64, sink: &mut impl Sink) {
    let top = major << 5;
    let mut head = [0u8; 9];
    let len = head_len(arg);
    head[0] = top
        | match len {
            1 => arg as u8,
            2 => 24,
            3 => 25,
            5 => 26,
            _ => 27,
        };
    let be = arg.to_be_bytes();
    head[1..len].copy_from_slice(&be[9 - len..]);
    sink.put(&head[..len]);
}

fn string_len(s: &str) -> usize {
    head_len(s.len() as u64) + s.len()
}

/// The encoded length of a checked value.
fn value_len(value: &Ipld) -> usize {
    match value {
        Ipld::Null | Ipld::Bool(_) => 1,
        Ipld::Integer(i) => head_len(integer_arg(*i).1),
        Ipld::Float(_) => 9,
        Ipld::String(s) => string_len(s),
        Ipld::Bytes(b) => head_len(b.len() as u64) + b.len(),
        Ipld::List(items) => {
            head_len(items.len() as u64) + items.iter().map(value_len).sum::<usize>()
        }
        Ipld::Map(map) => {
            head_len(map.len() as u64)
                + map
                    .iter()
                    .map(|(k, v)| string_len(k) + value_len(v))
                    .sum::<usize>()
        }
        Ipld::Link(cid) => {
            let body = 1 + cid.encoded_len();
            TAG_CID_HEAD.len() + head_len(body as u64) + body
        }
    }
}

/// Major type and argument of an integer (checked to fit in `i64`).
fn integer_arg(i: i128) -> (u8, u64) {
    if i >= 0 {
        (MAJOR_UNSIGNED, u64::try_from(i).unwrap_or(u64::MAX))
    } else {
        (MAJOR_NEGATIVE, u64::try_from(-1 - i).unwrap_or(u64::MAX))
    }
}

fn write_value(value: &Ipld, sink: &mut impl Sink) {
    match value {
        Ipld::Null => sink.put(&[0xf6]),
        Ipld::Bool(false) => sink.put(&[0xf4]),
        Ipld::Bool(true) => sink.put(&[0xf5]),
        Ipld::Integer(i) => {
            let (major, arg) = integer_arg(*i);
            write_head(major, arg, sink);
        }
        // Refused by the checks; written as CBOR's double for completeness.
        Ipld::Float(f) => {
            sink.put(&[0xfb]);
            sink.put(&f.to_be_bytes());
        }
        Ipld::String(s) => write_text(s, sink),
        Ipld::Bytes(b) => {
            write_head(MAJOR_BYTES, b.len() as u64, sink);
            sink.put(b);
        }
        Ipld::List(items) => {
            write_head(MAJOR_ARRAY, items.len() as u64, sink);
            for item in items {
                write_value(item, sink);
            }
        }
        Ipld::Map(map) => write_map(map.len(), map.iter(), sink),
        Ipld::Link(cid) => {
            let bytes = cid.to_bytes();
            sink.put(&TAG_CID_HEAD);
            write_head(MAJOR_BYTES, 1 + bytes.len() as u64, sink);
            sink.put(&[0x00]);
            sink.put(&bytes);
        }
    }
}

fn write_text(s: &str, sink: &mut impl Sink) {
    write_head(MAJOR_TEXT, s.len() as u64, sink);
    sink.put(s.as_bytes());
}

/// Writes a map of `count` entries given in bytewise key order (a
/// `BTreeMap`'s), in DAG-CBOR's order: shorter keys first, then bytewise.
fn write_map<'v>(
    count: usize,
    entries: impl Iterator<Item = (&'v String, &'v Ipld)>,
    sink: &mut impl Sink,
) {
    write_head(MAJOR_MAP, count as u64, sink);
    let mut sorted: Vec<(&String, &Ipld)> = Vec::with_capacity(count);
    sorted.extend(entries);
    // Stable: keys of one length stay in bytewise order.
    sorted.sort_by_key(|(k, _)| k.len());
    for (key, value) in sorted {
        write_text(key, sink);
        write_value(value, sink);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cid::{cid_for_blob, cid_for_cbor};
    use crate::{MAX_DEPTH, encode_dag_cbor};

    fn map(entries: &[(&str, Ipld)]) -> Ipld {
        Ipld::Map(
            entries
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
        )
    }

    fn written(value: &Ipld) -> Result<Vec<u8>> {
        let checked = Checked::new(value)?;
        let bytes = checked.to_vec();
        assert_eq!(bytes.len(), checked.len(), "{value:?}");
        Ok(bytes)
    }

    /// Integers at every boundary of the head forms, both signs.
    fn integers() -> Vec<Ipld> {
        let mut out = Vec::new();
        for edge in [
            0i128,
            23,
            24,
            255,
            256,
            65_535,
            65_536,
            0xffff_ffff,
            0x1_0000_0000,
        ] {
            for n in [edge - 1, edge, edge + 1] {
                out.push(Ipld::Integer(n));
                out.push(Ipld::Integer(-n));
            }
        }
        out.push(Ipld::Integer(i64::MAX.into()));
        out.push(Ipld::Integer(i64::MIN.into()));
        out
    }

    fn varied() -> Vec<Ipld> {
        let mut values = integers();
        let blob = map(&[
            ("$type", Ipld::String("blob".into())),
            ("ref", Ipld::Link(cid_for_blob(b"blob"))),
            ("mimeType", Ipld::String("image/png".into())),
            ("size", Ipld::Integer(12_345)),
        ]);
        values.extend([
            Ipld::Null,
            Ipld::Bool(true),
            Ipld::Bool(false),
            Ipld::String(String::new()),
            Ipld::String("é ✓ 𝄞".into()),
            Ipld::String("x".repeat(23)),
            Ipld::String("x".repeat(24)),
            Ipld::String("x".repeat(256)),
            Ipld::String("x".repeat(70_000)),
            Ipld::Bytes(vec![]),
            Ipld::Bytes(vec![0, 1, 2, 255]),
            Ipld::Bytes(vec![7; 300]),
            Ipld::Link(cid_for_cbor(b"x")),
            Ipld::List(vec![]),
            Ipld::List((0..30).map(Ipld::Integer).collect()),
            Ipld::Map(BTreeMap::new()),
            blob.clone(),
            // Bytewise order is not DAG-CBOR's: "b" < "aa" < "ab" < "$type".
            map(&[
                ("aa", Ipld::Integer(1)),
                ("b", Ipld::Integer(2)),
                ("ab", Ipld::Integer(3)),
                ("$type", Ipld::String("com.example.x".into())),
                ("", Ipld::Null),
                ("Z", Ipld::Null),
                ("a\u{e9}", Ipld::Null),
                ("zzzzzzzzzzzzzzzzzzzzzzzzzz", Ipld::Bool(true)),
            ]),
            map(&[
                (
                    "nested",
                    map(&[("list", Ipld::List(vec![blob, Ipld::Null]))]),
                ),
                ("link", Ipld::Link(cid_for_cbor(b"y"))),
                (
                    "deep",
                    Ipld::List(vec![Ipld::List(vec![map(&[("k", Ipld::Bytes(vec![1]))])])]),
                ),
            ]),
            Ipld::Map(
                (0..40)
                    .map(|i| (format!("k{i}"), Ipld::Integer(i)))
                    .collect(),
            ),
        ]);
        values
    }

    #[test]
    fn writes_the_bytes_the_encoder_writes() {
        for value in varied() {
            assert_eq!(written(&value), encode_dag_cbor(&value), "{value:?}");
        }
    }

    #[test]
    fn refuses_what_the_encoder_refuses() {
        let mut too_deep = Ipld::Null;
        for _ in 0..=MAX_DEPTH {
            too_deep = Ipld::List(vec![too_deep]);
        }
        for value in [
            Ipld::Float(0.5),
            Ipld::Float(f64::NAN),
            map(&[("a", Ipld::List(vec![Ipld::Float(1.0)]))]),
            Ipld::Integer(i128::from(i64::MAX) + 1),
            Ipld::Integer(i128::from(i64::MIN) - 1),
            Ipld::Integer(i128::MAX),
            map(&[("$type", Ipld::String(String::new()))]),
            map(&[("$link", Ipld::Null)]),
            map(&[("$type", Ipld::String("blob".into()))]),
            too_deep,
            Ipld::Bytes(vec![0; MAX_CBOR_SIZE]),
        ] {
            let expected = encode_dag_cbor(&value).unwrap_err();
            assert_eq!(written(&value).unwrap_err(), expected, "{value:?}");
        }
    }

    #[test]
    fn a_map_without_a_key_is_that_smaller_map() {
        let cases = [
            map(&[
                ("$type", Ipld::String("chat.gel.assistant.message".into())),
                ("content", Ipld::Bytes(vec![1; 100])),
                ("role", Ipld::String("user".into())),
                ("createdAt", Ipld::String("2025-11-29T19:41:00.000Z".into())),
            ]),
            map(&[("$type", Ipld::String("blob".into())), ("x", Ipld::Null)]),
            map(&[
                ("$type", Ipld::String("blob".into())),
                ("ref", Ipld::Link(cid_for_blob(b"blob"))),
                ("mimeType", Ipld::String("image/png".into())),
                ("size", Ipld::Integer(1)),
                ("x", Ipld::Null),
            ]),
            map(&[("$type", Ipld::Null), ("b", Ipld::Float(2.0))]),
            map(&[("$link", Ipld::Null), ("a", Ipld::Integer(1))]),
        ];
        for case in cases {
            let Ipld::Map(full) = &case else {
                unreachable!()
            };
            for skip in ["content", "x", "$type", "$link", "b", "absent", "ref"] {
                let smaller: BTreeMap<String, Ipld> = full
                    .iter()
                    .filter(|(k, _)| k.as_str() != skip)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let expected = encode_dag_cbor(&Ipld::Map(smaller));
                let got = Checked::map_without(full, skip).map(|c| {
                    let mut hash = Sha256::new();
                    c.write_to(&mut hash);
                    (c.to_vec(), c.len(), hash.finalize())
                });
                match (got, expected) {
                    (Ok((bytes, len, hash)), Ok(expected)) => {
                        assert_eq!(bytes, expected, "{case:?} without {skip}");
                        assert_eq!(len, expected.len());
                        assert_eq!(hash, Sha256::digest(&expected));
                    }
                    (Err(got), Err(expected)) => assert_eq!(got, expected),
                    (got, expected) => {
                        panic!("{case:?} without {skip}: {got:?} vs {expected:?}")
                    }
                }
            }
        }
    }
}
