//! CAR v1: writer → reader round trips, each malformed input → its named
//! error, and random/mutated input never panics.

use std::collections::BTreeMap;
use std::io::{self, Read};

use gelstore::model::{Cid, DataModelError, Ipld, cid_for_blob, cid_for_cbor, encode_dag_cbor};
use gelstore::repo::car::{Car, CarError, CarLimits, CarReader, CarWriter};

// ---------------------------------------------------------------- helpers

fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}

fn header_bytes(value: &Ipld) -> Vec<u8> {
    let h = encode_dag_cbor(value).unwrap();
    [varint(h.len() as u64), h].concat()
}

fn header(roots: &[Cid]) -> Vec<u8> {
    header_bytes(&Ipld::Map(BTreeMap::from([
        (
            "roots".to_owned(),
            Ipld::List(roots.iter().copied().map(Ipld::Link).collect()),
        ),
        ("version".to_owned(), Ipld::Integer(1)),
    ])))
}

/// A section from raw CID bytes and block bytes.
fn section(cid: &[u8], block: &[u8]) -> Vec<u8> {
    [
        varint((cid.len() + block.len()) as u64),
        cid.to_vec(),
        block.to_vec(),
    ]
    .concat()
}

fn cbor_block(n: u64) -> (Cid, Vec<u8>) {
    let bytes = encode_dag_cbor(&Ipld::Map(BTreeMap::from([(
        "n".to_owned(),
        Ipld::Integer(n.into()),
    )])))
    .unwrap();
    (cid_for_cbor(&bytes), bytes)
}

fn sample_blocks() -> Vec<(Cid, Vec<u8>)> {
    let mut blocks: Vec<_> = (0..5).map(cbor_block).collect();
    blocks.push((cid_for_blob(b"raw blob bytes"), b"raw blob bytes".to_vec()));
    blocks.push((cid_for_blob(b""), Vec::new()));
    blocks
}

fn write(roots: &[Cid], blocks: &[(Cid, Vec<u8>)]) -> Vec<u8> {
    let mut w = CarWriter::new(Vec::new(), roots).unwrap();
    for (cid, data) in blocks {
        w.write_block(cid, data).unwrap();
    }
    let n = w.bytes_written();
    let out = w.finish().unwrap();
    assert_eq!(n, out.len() as u64);
    out
}

fn slice_err(bytes: &[u8]) -> CarError {
    match Car::from_slice(bytes) {
        Ok(car) => panic!("accepted {bytes:02x?}: {car:?}"),
        Err(e) => e,
    }
}

fn stream_err(bytes: &[u8]) -> CarError {
    match Car::from_reader(OneByte(bytes), CarLimits::default()) {
        Ok(car) => panic!("accepted {bytes:02x?}: {car:?}"),
        Err(e) => e,
    }
}

/// A reader that hands out one byte per call, to exercise short reads.
struct OneByte<'a>(&'a [u8]);

impl Read for OneByte<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match (self.0.split_first(), buf.first_mut()) {
            (Some((b, rest)), Some(slot)) => {
                *slot = *b;
                self.0 = rest;
                Ok(1)
            }
            _ => Ok(0),
        }
    }
}

/// Deterministic xorshift64* PRNG.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

// ------------------------------------------------------------ round trips

#[test]
fn round_trip_slice_and_stream() {
    let blocks = sample_blocks();
    let roots = [blocks[0].0];
    let bytes = write(&roots, &blocks);
    let expected: BTreeMap<Cid, Vec<u8>> = blocks.iter().cloned().collect();

    let car = Car::from_slice(&bytes).unwrap();
    assert_eq!(car.roots, roots);
    assert_eq!(car.blocks, expected);
    assert_eq!(car.get(&blocks[5].0), Some(&b"raw blob bytes"[..]));

    let car2 = Car::from_reader(OneByte(&bytes), CarLimits::default()).unwrap();
    assert_eq!(car2, car);

    // The streaming reader yields sections in file order.
    let mut reader = CarReader::new(&bytes[..]).unwrap();
    assert_eq!(reader.roots(), roots);
    let read: Vec<_> = reader.by_ref().map(Result::unwrap).collect();
    assert_eq!(read, blocks);
    assert_eq!(reader.offset(), bytes.len() as u64);
    assert!(reader.next().is_none());

    // Car::to_vec writes blocks in CID order; reading gives the same Car.
    assert_eq!(Car::from_slice(&car.to_vec().unwrap()).unwrap(), car);
}

#[test]
fn accepts_any_order_duplicates_extra_blocks_and_no_roots() {
    let mut blocks = sample_blocks();
    blocks.reverse();
    blocks.push(blocks[0].clone());
    blocks.insert(2, blocks[3].clone());
    // A root that is not in the file, and blocks no root reaches.
    let roots = [cbor_block(99).0, blocks[1].0];
    let car = Car::from_slice(&write(&roots, &blocks)).unwrap();
    assert_eq!(car.roots, roots);
    assert_eq!(car.blocks.len(), sample_blocks().len());

    let empty = Car::from_slice(&write(&[], &[])).unwrap();
    assert!(empty.roots.is_empty() && empty.blocks.is_empty());
}

#[test]
fn header_matches_the_reference_encoding() {
    // {"roots": [root], "version": 1}: "roots" sorts before "version".
    let root = cbor_block(0).0;
    let bytes = write(&[root], &[]);
    assert_eq!(bytes, header(&[root]));
    assert_eq!(&bytes[1..8], &[0xa2, 0x65, b'r', b'o', b'o', b't', b's']);
    assert_eq!(&bytes[bytes.len() - 9..], b"\x67version\x01");
}

#[test]
fn extra_header_keys_are_ignored() {
    let (cid, data) = cbor_block(1);
    let h = header_bytes(&Ipld::Map(BTreeMap::from([
        ("roots".to_owned(), Ipld::List(vec![Ipld::Link(cid)])),
        ("version".to_owned(), Ipld::Integer(1)),
        ("x".to_owned(), Ipld::Null),
    ])));
    let car = Car::from_slice(&[h, section(&cid.to_bytes(), &data)].concat()).unwrap();
    assert_eq!(car.roots, [cid]);
}

#[test]
fn writer_refuses_cids_it_cannot_write() {
    let bad = Cid::new_v1(0x70, cid_for_cbor(b"x").hash().to_owned());
    assert!(matches!(
        CarWriter::new(Vec::new(), &[bad]),
        Err(CarError::Unwritable { .. })
    ));
    let mut w = CarWriter::new(Vec::new(), &[]).unwrap();
    assert!(matches!(
        w.write_block(&bad, b"x"),
        Err(CarError::Unwritable { .. })
    ));
}

// --------------------------------------------------------- named errors

#[test]
fn truncated_input() {
    assert!(matches!(
        slice_err(&[]),
        CarError::Truncated {
            offset: 0,
            what: "header length"
        }
    ));
    let bytes = write(&[cbor_block(0).0], &sample_blocks());
    let header_len = header(&[cbor_block(0).0]).len();
    // Inside the header.
    for end in 1..header_len {
        for e in [slice_err(&bytes[..end]), stream_err(&bytes[..end])] {
            assert!(
                matches!(e, CarError::Truncated { what: "header", .. }),
                "{end}: {e}"
            );
        }
    }
    // Inside a section: Truncated from a stream, SectionPastEnd from a slice.
    // Ending exactly on a section boundary is a valid, shorter CAR.
    let mut boundaries = vec![header_len];
    for (cid, data) in sample_blocks() {
        let last = *boundaries.last().unwrap();
        boundaries.push(last + section(&cid.to_bytes(), &data).len());
    }
    for end in header_len..bytes.len() {
        let prefix = &bytes[..end];
        if boundaries.contains(&end) {
            Car::from_slice(prefix).unwrap();
            continue;
        }
        assert!(
            matches!(stream_err(prefix), CarError::Truncated { .. }),
            "{end}: {}",
            stream_err(prefix)
        );
        assert!(
            matches!(slice_err(prefix), CarError::SectionPastEnd { .. }),
            "{end}: {}",
            slice_err(prefix)
        );
    }
}

#[test]
fn bad_varints() {
    // Ten continuation bytes: longer than 9.
    assert!(matches!(
        slice_err(&[0xff; 10]),
        CarError::BadVarint {
            offset: 0,
            reason: "longer than 9 bytes"
        }
    ));
    // Non-minimal: 0x81 0x00 is 1 written in two bytes.
    assert!(matches!(
        slice_err(&[0x81, 0x00]),
        CarError::BadVarint {
            offset: 0,
            reason: "not minimally encoded"
        }
    ));
    // A huge but well-formed header length.
    let mut huge = vec![0xff; 8];
    huge.push(0x7f);
    assert!(matches!(slice_err(&huge), CarError::HeaderTooLarge { .. }));
    // The same in a section length, after a valid header.
    let h = header(&[]);
    let e = slice_err(&[h.clone(), vec![0xff; 12]].concat());
    assert!(
        matches!(e, CarError::BadVarint { offset, .. } if offset == h.len() as u64),
        "{e}"
    );
    let e = stream_err(&[h.clone(), huge.clone()].concat());
    assert!(matches!(e, CarError::BlockTooLarge { .. }), "{e}");
    let e = slice_err(&[h, huge].concat());
    assert!(matches!(e, CarError::SectionPastEnd { .. }), "{e}");
}

#[test]
fn header_not_dag_cbor() {
    for body in [
        &[][..],
        &[0xff],
        // {"b": 1, "a": 2}: keys out of order.
        &[0xa2, 0x61, b'b', 0x01, 0x61, b'a', 0x02],
        // A float.
        &[0xfb, 0, 0, 0, 0, 0, 0, 0, 0],
        // Two items.
        &[0xa0, 0xa0],
    ] {
        let bytes = [varint(body.len() as u64), body.to_vec()].concat();
        assert!(
            matches!(slice_err(&bytes), CarError::HeaderNotDagCbor(_)),
            "{body:02x?}: {}",
            slice_err(&bytes)
        );
    }
    // A root CID that is not in the atproto set (dag-pb).
    let mut h = header(&[cbor_block(0).0]);
    let at = h.windows(3).position(|w| w == [0x00, 0x01, 0x71]).unwrap();
    h[at + 2] = 0x70;
    assert!(matches!(
        slice_err(&h),
        CarError::HeaderNotDagCbor(DataModelError::DisallowedCid { .. })
    ));
}

#[test]
fn header_wrong_shape_or_version() {
    let map = |entries: Vec<(&str, Ipld)>| {
        Ipld::Map(
            entries
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
        )
    };
    let roots = || Ipld::List(vec![]);
    for (value, reason) in [
        (Ipld::List(vec![]), "header is not a map"),
        (map(vec![("roots", roots())]), "no version"),
        (map(vec![("version", Ipld::Integer(1))]), "no roots"),
        (
            map(vec![
                ("roots", roots()),
                ("version", Ipld::String("1".into())),
            ]),
            "version is not an integer",
        ),
        (
            map(vec![("roots", Ipld::Null), ("version", Ipld::Integer(1))]),
            "roots is not a list",
        ),
        (
            map(vec![
                ("roots", Ipld::List(vec![Ipld::String("bafy".into())])),
                ("version", Ipld::Integer(1)),
            ]),
            "a root is not a CID link",
        ),
    ] {
        let e = slice_err(&header_bytes(&value));
        assert!(
            matches!(e, CarError::HeaderShape { reason: r } if r == reason),
            "{value:?}: {e}"
        );
    }
    for version in [0, 2, -1] {
        let e = slice_err(&header_bytes(&map(vec![
            ("roots", roots()),
            ("version", Ipld::Integer(version)),
        ])));
        assert!(
            matches!(e, CarError::UnsupportedVersion { version: v } if v == version),
            "{e}"
        );
    }
    // A CARv2 pragma: {"version": 2} alone.
    let e = slice_err(&header_bytes(&map(vec![("version", Ipld::Integer(2))])));
    assert!(matches!(e, CarError::UnsupportedVersion { version: 2 }));
}

#[test]
fn bad_sections() {
    let h = header(&[]);
    let (cid, data) = cbor_block(7);
    let cid_bytes = cid.to_bytes();
    let err = |sec: Vec<u8>| slice_err(&[h.clone(), sec].concat());
    let cid_at = h.len() as u64 + 1;

    assert!(matches!(
        err(vec![0x00]),
        CarError::EmptySection { offset } if offset == h.len() as u64
    ));

    // Hash mismatch: one bit of the block changed.
    let mut tampered = data.clone();
    tampered[3] ^= 1;
    let e = err(section(&cid_bytes, &tampered));
    assert!(
        matches!(&e, CarError::HashMismatch { cid: c, .. } if **c == cid),
        "{e}"
    );
    // And one bit of the digest changed.
    let mut cid_flip = cid_bytes.clone();
    *cid_flip.last_mut().unwrap() ^= 1;
    assert!(matches!(
        err(section(&cid_flip, &data)),
        CarError::HashMismatch { .. }
    ));

    // Bad CIDs.
    let with = |i: usize, b: u8| {
        let mut c = cid_bytes.clone();
        c[i] = b;
        c
    };
    for (cid, reason) in [
        (with(0, 0x00), "CID version is not 1"),
        (with(0, 0x02), "CID version is not 1"),
        (
            [&[0x12, 0x20], &cid_bytes[4..]].concat(),
            "CIDv0 is not supported (CIDv1 only)",
        ),
        (with(3, 0x14), "sha2-256 digest is not 32 bytes"),
        (with(3, 0x41), "multihash digest longer than 64 bytes"),
        (
            cid_bytes[..20].to_vec(),
            "section ends inside the multihash digest",
        ),
        (vec![0x01, 0x71, 0x12], "ends inside a varint"),
        (vec![0x01, 0xf1, 0x80, 0x00], "varint not minimally encoded"),
    ] {
        let block: &[u8] = if cid.len() < 36 { &[] } else { &data };
        let e = err(section(&cid, block));
        assert!(
            matches!(e, CarError::BadCid { offset, reason: r } if r == reason && offset == cid_at),
            "{cid:02x?}: {e}"
        );
    }

    // Unsupported codec (dag-pb) and hash (sha2-512, 0x13, and blake3, 0x1e).
    assert!(matches!(
        err(section(&with(1, 0x70), &data)),
        CarError::UnsupportedCodec { codec: 0x70, .. }
    ));
    let e = err(section(&with(2, 0x13), &data));
    assert!(
        matches!(e, CarError::UnsupportedHash { code: 0x13, .. }),
        "{e}"
    );
    let e = err(section(&with(2, 0x1e), &data));
    assert!(
        matches!(e, CarError::UnsupportedHash { code: 0x1e, .. }),
        "{e}"
    );
}

#[test]
fn size_limits() {
    let blocks = sample_blocks();
    let bytes = write(&[], &blocks);
    let limits = |header, block, total| CarLimits {
        max_header_size: header,
        max_block_size: block,
        max_total_size: total,
    };

    // Total: refused up front for a slice, on the way for a stream.
    let small = limits(1024, 1024, bytes.len() as u64 - 1);
    assert!(matches!(
        Car::from_slice_with_limits(&bytes, small),
        Err(CarError::TooLarge { .. })
    ));
    assert!(matches!(
        Car::from_reader(&bytes[..], small),
        Err(CarError::TooLarge { .. })
    ));
    let exact = limits(1024, 1024, bytes.len() as u64);
    Car::from_reader(&bytes[..], exact).unwrap();
    Car::from_slice_with_limits(&bytes, exact).unwrap();

    // Block: "raw blob bytes" is 14 bytes, the largest sample block.
    let largest = blocks.iter().map(|(_, d)| d.len()).max().unwrap();
    let e = Car::from_slice_with_limits(&bytes, limits(1024, largest - 1, 1 << 20)).unwrap_err();
    assert!(matches!(e, CarError::BlockTooLarge { .. }), "{e}");
    Car::from_slice_with_limits(&bytes, limits(1024, largest, 1 << 20)).unwrap();

    // A declared section far beyond the block limit is refused before any read.
    let h = header(&[]);
    let e = Car::from_reader(
        &[h.clone(), varint(1 << 40)].concat()[..],
        CarLimits::default(),
    )
    .unwrap_err();
    assert!(
        matches!(e, CarError::BlockTooLarge { size, .. } if size == 1 << 40),
        "{e}"
    );

    // Header.
    let e = Car::from_slice_with_limits(&h, limits(h.len() - 2, 1024, 1024)).unwrap_err();
    assert!(matches!(e, CarError::HeaderTooLarge { .. }), "{e}");
}

#[test]
fn io_errors_propagate() {
    struct Failing(usize);
    impl Read for Failing {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0 == 0 {
                return Err(io::Error::other("disk on fire"));
            }
            self.0 -= 1;
            buf[0] = 0x01;
            Ok(1)
        }
    }
    assert!(matches!(CarReader::new(Failing(0)), Err(CarError::Io(_))));
    assert!(matches!(CarReader::new(Failing(1)), Err(CarError::Io(_))));
}

// ------------------------------------------------------------ robustness

#[test]
fn random_and_mutated_inputs_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let valid = write(&[cbor_block(0).0], &sample_blocks());
    let mut outcomes = BTreeMap::<String, usize>::new();
    for i in 0..10_000 {
        let input: Vec<u8> = match i % 3 {
            // Pure noise.
            0 => (0..rng.below(200)).map(|_| rng.next() as u8).collect(),
            // A valid CAR with a few random bytes changed.
            1 => {
                let mut v = valid.clone();
                for _ in 0..1 + rng.below(4) {
                    let at = rng.below(v.len());
                    v[at] = rng.next() as u8;
                }
                v
            }
            // A valid header, then noise.
            _ => {
                let mut v = header(&[]);
                v.extend((0..rng.below(120)).map(|_| rng.next() as u8));
                v
            }
        };
        let slice = Car::from_slice(&input);
        let stream = Car::from_reader(OneByte(&input), CarLimits::default());
        // Both entry points agree on success, and on the blocks read.
        assert_eq!(slice.is_ok(), stream.is_ok(), "{input:02x?}");
        if let (Ok(a), Ok(b)) = (&slice, &stream) {
            assert_eq!(a, b);
        }
        let key = match slice {
            Ok(_) => "ok".to_owned(),
            Err(e) => format!("{e:?}")
                .split([' ', '(', '{'])
                .next()
                .unwrap()
                .to_owned(),
        };
        *outcomes.entry(key).or_default() += 1;
    }
    eprintln!("outcomes: {outcomes:?}");
    // The mutations reach deep into the format, not just the first byte.
    for name in ["HashMismatch", "HeaderNotDagCbor", "BadCid", "ok"] {
        assert!(
            outcomes.contains_key(name),
            "{name} never hit: {outcomes:?}"
        );
    }
}
