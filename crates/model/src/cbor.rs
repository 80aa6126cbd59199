//! Data model ([`Ipld`]) ⇄ canonical DAG-CBOR bytes.

use ipld_core::ipld::Ipld;

use super::MAX_CBOR_SIZE;
use super::error::{DataModelError, Result};
use super::scan;
use super::validate::check_data_model;

/// Encodes a data model value as canonical DAG-CBOR: map keys sorted by length
/// then bytewise, shortest integer and length forms, CIDs as tag 42.
///
/// The value is checked first ([`check_data_model`](super::check_data_model)),
/// and the output must not exceed [`MAX_CBOR_SIZE`], so every block this
/// writes is one [`decode_dag_cbor`] accepts.
pub fn encode_dag_cbor(value: &Ipld) -> Result<Vec<u8>> {
    check_data_model(value)?;
    let bytes = serde_ipld_dagcbor::to_vec(value)
        .map_err(|e| DataModelError::Codec(format!("encoding failed: {e}")))?;
    if bytes.len() > MAX_CBOR_SIZE {
        return Err(DataModelError::TooLarge {
            size: bytes.len(),
            max: MAX_CBOR_SIZE,
        });
    }
    Ok(bytes)
}

/// Decodes untrusted DAG-CBOR bytes into a data model value.
///
/// Accepts only one canonical DAG-CBOR item that is valid atproto data model,
/// at most [`MAX_CBOR_SIZE`] bytes long and nested at most
/// [`MAX_DEPTH`](super::MAX_DEPTH) deep. Never panics; time is linear in the
/// input size.
///
/// Steps: size check; one non-recursive pass that checks the encoding is
/// strict DAG-CBOR, naming the first problem found (see [`DataModelError`]),
/// and builds the value as it goes; then the data model rules. Strict
/// DAG-CBOR (shortest heads, definite lengths, sorted unique keys, canonical
/// CIDs, no floats) has one encoding per value, so the checks made while
/// reading stand for re-encoding the value and comparing: the value is the
/// one [`encode_dag_cbor`] turns back into `bytes`.
pub fn decode_dag_cbor(bytes: &[u8]) -> Result<Ipld> {
    if bytes.len() > MAX_CBOR_SIZE {
        return Err(DataModelError::TooLarge {
            size: bytes.len(),
            max: MAX_CBOR_SIZE,
        });
    }
    let value = scan::decode(bytes)?;
    check_data_model(&value)?;
    Ok(value)
}

/// Checks untrusted bytes as a record block: the same verdict and error as
/// [`decode_dag_cbor`] followed by [`check_record`](super::check_record),
/// but for a record that plainly passes (a map, no reserved `$link` or
/// `$bytes` key, every `$type` a non-empty string other than `blob`) in one
/// pass over the bytes that builds nothing. Anything else takes the full
/// path, which names the problem.
pub fn check_record_cbor(bytes: &[u8]) -> Result<()> {
    let is_map = bytes.first().is_some_and(|b| b >> 5 == scan::MAJOR_MAP);
    if is_map && bytes.len() <= MAX_CBOR_SIZE {
        let mut plain = PlainRecord::default();
        if scan::walk(bytes, &mut plain).is_ok() && !plain.closer_look {
            return Ok(());
        }
    }
    let value = decode_dag_cbor(bytes)?;
    super::check_record(&value)
}

/// Watches a scan for what only the data model rules on a built value
/// decide: the map keys they look at.
#[derive(Default)]
struct PlainRecord {
    closer_look: bool,
    /// The item after a `$type` key comes next.
    type_next: bool,
}

impl<'a> scan::Visit<'a> for PlainRecord {
    fn scalar(&mut self, scalar: scan::Scalar<'a>) {
        if std::mem::take(&mut self.type_next)
            && !matches!(scalar, scan::Scalar::Text(t) if !t.is_empty() && t != "blob")
        {
            self.closer_look = true;
        }
    }

    fn open(&mut self, _: bool, _: u64) {
        if std::mem::take(&mut self.type_next) {
            self.closer_look = true;
        }
    }

    fn key(&mut self, key: &'a str) {
        match key {
            "$link" | "$bytes" => self.closer_look = true,
            "$type" => self.type_next = true,
            _ => {}
        }
    }

    fn close(&mut self) {}
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::MAX_DEPTH;
    use crate::cid::cid_for_cbor;

    fn decode_err(bytes: &[u8]) -> DataModelError {
        match decode_dag_cbor(bytes) {
            Ok(v) => panic!("{bytes:02x?} decoded to {v:?}"),
            Err(e) => e,
        }
    }

    /// The CBOR bytes of a valid link: tag 42, bytes(37) = 0x00 ++ CID.
    fn link_bytes() -> Vec<u8> {
        let cid = cid_for_cbor(b"x").to_bytes();
        let mut out = vec![0xd8, 0x2a, 0x58, 37, 0x00];
        out.extend_from_slice(&cid);
        out
    }

    #[test]
    fn record_check_agrees_with_decode_then_check() {
        let full = |b: &[u8]| decode_dag_cbor(b).and_then(|v| crate::check_record(&v));
        // Encoded without the data model check, so invalid values encode.
        let raw = |v: &Ipld| serde_ipld_dagcbor::to_vec(v).unwrap();
        let s = |t: &str| Ipld::String(t.to_owned());
        let map = |pairs: Vec<(&str, Ipld)>| {
            Ipld::Map(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
        };
        let raw_cid = ::cid::Cid::new_v1(crate::cid::RAW_CODEC, *cid_for_cbor(b"x").hash());
        let blob = |size: i128| {
            map(vec![
                ("$type", s("blob")),
                ("ref", Ipld::Link(raw_cid)),
                ("mimeType", s("image/png")),
                ("size", Ipld::Integer(size)),
            ])
        };
        let plain = raw(&map(vec![("$type", s("x.y.z")), ("text", s("hi"))]));
        let mut deep = Ipld::Null;
        for _ in 0..=MAX_DEPTH {
            deep = map(vec![("a", deep)]);
        }
        let cases: Vec<Vec<u8>> = vec![
            plain.clone(),
            plain[..plain.len() - 1].to_vec(),
            raw(&map(vec![("$type", s(""))])),
            raw(&map(vec![("$type", Ipld::Integer(1))])),
            raw(&map(vec![("$type", Ipld::List(vec![]))])),
            raw(&map(vec![("$type", map(vec![]))])),
            raw(&map(vec![("a", map(vec![("$link", s("x"))]))])),
            raw(&map(vec![("$bytes", s("x"))])),
            raw(&map(vec![("img", blob(3))])),
            raw(&map(vec![("img", blob(0))])),
            raw(&blob(3)),
            raw(&map(vec![("f", Ipld::Float(1.5))])),
            raw(&map(vec![("l", Ipld::Link(cid_for_cbor(b"x")))])),
            raw(&Ipld::List(vec![])),
            raw(&Ipld::Integer(3)),
            link_bytes(),
            raw(&deep),
            vec![0xa1],
            vec![0xa0, 0x00],
            Vec::new(),
        ];
        for bytes in cases {
            assert_eq!(
                format!("{:?}", check_record_cbor(&bytes)),
                format!("{:?}", full(&bytes)),
                "{bytes:02x?}"
            );
        }
        assert!(check_record_cbor(&plain).is_ok());
    }

    #[test]
    fn round_trips_values() {
        let value = Ipld::Map(BTreeMap::from([
            ("a".to_owned(), Ipld::Integer(-1)),
            ("bb".to_owned(), Ipld::Link(cid_for_cbor(b"x"))),
            (
                "c".to_owned(),
                Ipld::List(vec![Ipld::Bytes(vec![1, 2]), Ipld::Null]),
            ),
            ("$type".to_owned(), Ipld::String("x.y.z".to_owned())),
        ]));
        let bytes = encode_dag_cbor(&value).unwrap();
        assert_eq!(decode_dag_cbor(&bytes).unwrap(), value);
        // Length-first key order: a, c, bb, $type.
        assert_eq!(&bytes[..4], &[0xa4, 0x61, b'a', 0x20]);
    }

    /// The decoder as it was before the one-pass decode: scan, decode with
    /// `serde_ipld_dagcbor`, encode again and compare.
    fn decode_by_re_encoding(bytes: &[u8]) -> Result<Ipld> {
        if bytes.len() > MAX_CBOR_SIZE {
            return Err(DataModelError::TooLarge {
                size: bytes.len(),
                max: MAX_CBOR_SIZE,
            });
        }
        crate::scan::scan(bytes)?;
        let value: Ipld = serde_ipld_dagcbor::from_slice(bytes)
            .map_err(|e| DataModelError::Codec(format!("decoding failed: {e}")))?;
        if encode_dag_cbor(&value)? != bytes {
            return Err(DataModelError::NotCanonical);
        }
        Ok(value)
    }

    #[test]
    fn decodes_as_re_encoding_and_comparing_did() {
        let blob = Ipld::Map(BTreeMap::from([
            ("$type".to_owned(), Ipld::String("blob".to_owned())),
            ("ref".to_owned(), Ipld::Link(crate::cid_for_blob(b"b"))),
            ("mimeType".to_owned(), Ipld::String("a/b".to_owned())),
            ("size".to_owned(), Ipld::Integer(300)),
        ]));
        let value = Ipld::Map(BTreeMap::from([
            ("a".to_owned(), Ipld::Integer(-1)),
            ("n".to_owned(), Ipld::Integer(i64::MIN.into())),
            ("bb".to_owned(), Ipld::Link(cid_for_cbor(b"x"))),
            (
                "c".to_owned(),
                Ipld::List(vec![
                    Ipld::Bytes(vec![1, 2]),
                    Ipld::Null,
                    Ipld::Bool(true),
                    Ipld::Bool(false),
                    Ipld::Integer(65_536),
                ]),
            ),
            ("blob".to_owned(), blob),
            ("text".to_owned(), Ipld::String("é ✓ 𝄞 ".repeat(5))),
            ("$type".to_owned(), Ipld::String("x.y.z".to_owned())),
            ("e".to_owned(), Ipld::Map(BTreeMap::new())),
        ]));
        let block = encode_dag_cbor(&value).unwrap();
        assert_eq!(decode_dag_cbor(&block).unwrap(), value);
        let mut inputs = vec![block.clone(), link_bytes()];
        // Every prefix, and every byte changed to a few others.
        for end in 0..block.len() {
            inputs.push(block[..end].to_vec());
        }
        for i in 0..block.len() {
            for byte in [
                0x00, 0x01, 0x17, 0x18, 0x20, 0x40, 0x60, 0x80, 0xa0, 0xd8, 0xf6, 0xff,
            ] {
                let mut changed = block.clone();
                changed[i] = byte;
                inputs.push(changed);
                let mut changed = block.clone();
                changed[i] ^= 1;
                inputs.push(changed);
            }
        }
        for input in inputs {
            assert_eq!(
                decode_dag_cbor(&input),
                decode_by_re_encoding(&input),
                "{input:02x?}"
            );
        }
    }

    #[test]
    fn encoder_rejects_floats() {
        assert!(matches!(
            encode_dag_cbor(&Ipld::Float(0.5)),
            Err(DataModelError::Float { .. })
        ));
    }

    #[test]
    fn rejects_floats() {
        // f64 1.5, f32 1.5, f16 1.0
        for bytes in [
            &[0xfb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0][..],
            &[0xfa, 0x3f, 0xc0, 0, 0],
            &[0xf9, 0x3c, 0x00],
            &[0x81, 0xfb, 0, 0, 0, 0, 0, 0, 0, 0],
        ] {
            assert!(
                matches!(decode_err(bytes), DataModelError::Float { .. }),
                "{bytes:02x?}"
            );
        }
    }

    #[test]
    fn rejects_non_canonical_key_order() {
        // {"b": 1, "a": 2}
        assert_eq!(
            decode_err(&[0xa2, 0x61, b'b', 0x01, 0x61, b'a', 0x02]),
            DataModelError::MapKeyOrder { offset: 4 }
        );
        // {"aa": 1, "b": 2}: bytewise order but not length-first.
        assert_eq!(
            decode_err(&[0xa2, 0x62, b'a', b'a', 0x01, 0x61, b'b', 0x02]),
            DataModelError::MapKeyOrder { offset: 5 }
        );
    }

    #[test]
    fn rejects_duplicate_keys() {
        assert_eq!(
            decode_err(&[0xa2, 0x61, b'a', 0x01, 0x61, b'a', 0x02]),
            DataModelError::DuplicateMapKey { offset: 4 }
        );
    }

    #[test]
    fn rejects_non_string_keys() {
        assert_eq!(
            decode_err(&[0xa1, 0x01, 0x02]),
            DataModelError::NonStringMapKey { offset: 1 }
        );
        assert_eq!(
            decode_err(&[0xa1, 0x41, b'a', 0x02]),
            DataModelError::NonStringMapKey { offset: 1 }
        );
    }

    #[test]
    fn rejects_non_minimal_encodings() {
        for (bytes, what) in [
            (&[0x18, 0x17][..], "integer"),
            (&[0x19, 0x00, 0xff], "integer"),
            (&[0x1a, 0x00, 0x00, 0xff, 0xff], "integer"),
            (&[0x1b, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff], "integer"),
            (&[0x38, 0x00], "integer"),
            (&[0x78, 0x01, b'a'], "length"),
            (&[0x98, 0x00], "length"),
            (&[0xb8, 0x00], "length"),
            (&[0x59, 0x00, 0x01, 0x00], "length"),
        ] {
            assert_eq!(
                decode_err(bytes),
                DataModelError::NonMinimalEncoding { offset: 0, what },
                "{bytes:02x?}"
            );
        }
        // Tag 42 written with a 2-byte argument.
        let mut bytes = vec![0xd9, 0x00, 0x2a];
        bytes.extend_from_slice(&link_bytes()[2..]);
        assert_eq!(
            decode_err(&bytes),
            DataModelError::NonMinimalEncoding {
                offset: 0,
                what: "tag"
            }
        );
    }

    #[test]
    fn rejects_indefinite_lengths() {
        for bytes in [
            &[0x9f, 0xff][..],
            &[0xbf, 0xff],
            &[0x5f, 0x41, 0x00, 0xff],
            &[0x7f, 0x61, b'a', 0xff],
        ] {
            assert_eq!(
                decode_err(bytes),
                DataModelError::IndefiniteLength { offset: 0 },
                "{bytes:02x?}"
            );
        }
    }

    #[test]
    fn rejects_trailing_bytes() {
        assert_eq!(
            decode_err(&[0x01, 0x02]),
            DataModelError::TrailingBytes {
                offset: 1,
                count: 1
            }
        );
        assert_eq!(
            decode_err(&[0xa0, 0xa0, 0xa0]),
            DataModelError::TrailingBytes {
                offset: 1,
                count: 2
            }
        );
    }

    #[test]
    fn rejects_other_tags() {
        // Tag 0 (date string), tag 2 (bignum), tag 41 with a valid CID body.
        assert_eq!(
            decode_err(&[0xc0, 0x60]),
            DataModelError::UnsupportedTag { tag: 0, offset: 0 }
        );
        assert_eq!(
            decode_err(&[0xc2, 0x41, 0x01]),
            DataModelError::UnsupportedTag { tag: 2, offset: 0 }
        );
        let mut bytes = link_bytes();
        bytes[1] = 41;
        assert_eq!(
            decode_err(&bytes),
            DataModelError::UnsupportedTag { tag: 41, offset: 0 }
        );
    }

    #[test]
    fn accepts_a_valid_link() {
        let value = decode_dag_cbor(&link_bytes()).unwrap();
        assert_eq!(value, Ipld::Link(cid_for_cbor(b"x")));
    }

    #[test]
    fn rejects_bad_cid_links() {
        let good = link_bytes();
        // No 0x00 multibase prefix.
        let mut no_prefix = vec![0xd8, 0x2a, 0x58, 36];
        no_prefix.extend_from_slice(&good[5..]);
        // Digest cut short (length adjusted so the CBOR itself is fine).
        let mut short = good[..good.len() - 1].to_vec();
        short[3] = 36;
        // An extra byte after the CID.
        let mut long = good.clone();
        long[3] = 38;
        long.push(0);
        // Garbage CID version.
        let mut garbage = good.clone();
        garbage[5] = 0x07;
        // Tag 42 around a text string.
        let text = [0xd8, 0x2a, 0x61, b'a'];
        // Only the prefix.
        let empty = [0xd8, 0x2a, 0x41, 0x00];
        for bytes in [&no_prefix[..], &short, &long, &garbage, &text, &empty] {
            assert!(
                matches!(decode_err(bytes), DataModelError::InvalidCid { .. }),
                "{bytes:02x?}: {}",
                decode_err(bytes)
            );
        }
        // A well-formed CIDv1 with the dag-pb codec is not blessed.
        let mut dag_pb = good;
        dag_pb[6] = 0x70;
        assert!(matches!(
            decode_err(&dag_pb),
            DataModelError::DisallowedCid { .. }
        ));
    }

    #[test]
    fn rejects_deep_nesting_without_crashing() {
        // 100k nested arrays, and 100k nested single-entry maps.
        let mut arrays = vec![0x81; 100_000];
        arrays.push(0x80);
        assert_eq!(
            decode_err(&arrays),
            DataModelError::TooDeep { max: MAX_DEPTH }
        );
        let mut maps = Vec::new();
        for _ in 0..100_000 {
            maps.extend_from_slice(&[0xa1, 0x61, b'a']);
        }
        maps.push(0xa0);
        assert_eq!(
            decode_err(&maps),
            DataModelError::TooDeep { max: MAX_DEPTH }
        );
        // Links do not count as depth; MAX_DEPTH lists around a link are fine.
        let mut ok = vec![0x81; MAX_DEPTH];
        ok.extend_from_slice(&link_bytes());
        decode_dag_cbor(&ok).unwrap();
        // One level more is too deep, even when the innermost list is empty.
        let too_deep = vec![0x81; MAX_DEPTH]
            .into_iter()
            .chain([0x80])
            .collect::<Vec<_>>();
        assert_eq!(
            decode_err(&too_deep),
            DataModelError::TooDeep { max: MAX_DEPTH }
        );
    }

    #[test]
    fn rejects_truncated_input() {
        let cases: [&[u8]; 9] = [
            &[],
            &[0x18],
            &[0x1b, 0xff],
            &[0x62, b'a'],
            &[0x42, 0x00],
            &[0x82, 0x01],
            &[0xa1, 0x61, b'a'],
            &[0xd8, 0x2a],
            // A huge declared array must not allocate anything.
            &[0x9b, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        ];
        for bytes in cases {
            assert!(
                matches!(decode_err(bytes), DataModelError::Truncated { .. }),
                "{bytes:02x?}: {}",
                decode_err(bytes)
            );
        }
        // Every strict prefix of a valid block is rejected as truncated.
        let mut block = vec![0xa2, 0x61, b'a', 0x82, 0x19, 0x01, 0x00, 0x63];
        block.extend_from_slice(b"xyz");
        block.extend_from_slice(&[0x61, b'l']);
        block.extend_from_slice(&link_bytes());
        decode_dag_cbor(&block).unwrap();
        for end in 0..block.len() {
            assert!(
                matches!(decode_err(&block[..end]), DataModelError::Truncated { .. }),
                "prefix of {end} bytes: {}",
                decode_err(&block[..end])
            );
        }
    }

    #[test]
    fn rejects_integers_outside_i64() {
        // 2^63 and -2^63 - 1.
        assert!(matches!(
            decode_err(&[0x1b, 0x80, 0, 0, 0, 0, 0, 0, 0]),
            DataModelError::IntegerOutOfRange { .. }
        ));
        assert!(matches!(
            decode_err(&[0x3b, 0x80, 0, 0, 0, 0, 0, 0, 0]),
            DataModelError::IntegerOutOfRange { .. }
        ));
        assert_eq!(
            decode_dag_cbor(&[0x3b, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]).unwrap(),
            Ipld::Integer(i64::MIN.into())
        );
    }

    #[test]
    fn rejects_simple_values_and_malformed_heads() {
        for byte in [0xf7, 0xe0, 0xf3, 0xf8] {
            assert_eq!(
                decode_err(&[byte, 0x20]),
                DataModelError::UnsupportedSimpleValue { byte, offset: 0 }
            );
        }
        for byte in [0x1c, 0x1f, 0x3f, 0xdf, 0xff, 0xfc] {
            assert_eq!(
                decode_err(&[byte]),
                DataModelError::MalformedHead { byte, offset: 0 }
            );
        }
    }

    #[test]
    fn rejects_invalid_utf8() {
        assert_eq!(
            decode_err(&[0x62, 0xc3, 0x28]),
            DataModelError::InvalidUtf8 { offset: 0 }
        );
        assert_eq!(
            decode_err(&[0xa1, 0x61, 0xff, 0x01]),
            DataModelError::InvalidUtf8 { offset: 1 }
        );
    }

    #[test]
    fn rejects_data_model_violations() {
        // {"$type": ""}
        assert!(matches!(
            decode_err(&[0xa1, 0x65, b'$', b't', b'y', b'p', b'e', 0x60]),
            DataModelError::InvalidType { .. }
        ));
        // {"$link": "x"}
        assert!(matches!(
            decode_err(&[0xa1, 0x65, b'$', b'l', b'i', b'n', b'k', 0x61, b'x']),
            DataModelError::ReservedKey { .. }
        ));
    }

    #[test]
    fn rejects_oversized_input() {
        let big = vec![0u8; MAX_CBOR_SIZE + 1];
        assert_eq!(
            decode_err(&big),
            DataModelError::TooLarge {
                size: MAX_CBOR_SIZE + 1,
                max: MAX_CBOR_SIZE
            }
        );
        let too_big = Ipld::Bytes(vec![0; MAX_CBOR_SIZE]);
        assert!(matches!(
            encode_dag_cbor(&too_big),
            Err(DataModelError::TooLarge { .. })
        ));
    }
}
