//! CAR v1 files (<https://ipld.io/specs/transport/car/carv1/>): the format of
//! repository exports and diffs.
//!
//! Layout: `varint(len) ‖ header`, then any number of sections
//! `varint(len) ‖ CID ‖ block`, where the header is the DAG-CBOR map
//! `{roots: [CID...], version: 1}` and every varint is an unsigned LEB128.
//!
//! Writing: [`CarWriter`] streams to any [`Write`]; [`Car::write_to`] writes
//! a whole in-memory CAR.
//!
//! Reading untrusted bytes never panics; every problem is a named
//! [`CarError`]. [`CarReader`] streams sections from any [`Read`] (or from a
//! slice, which also lets it report a section longer than the input);
//! [`Car::from_slice`] / [`Car::from_reader`] collect the blocks into a map.
//! Accepted: any block order, repeated blocks, blocks no root reaches, an
//! empty roots list, unknown extra header keys. Checked: the header is
//! strict DAG-CBOR of the right shape and version; varints are minimal and
//! at most 9 bytes; every CID is v1 with codec dag-cbor (0x71) or raw
//! (0x55); every block's SHA-256 matches its CID (other hash functions are
//! refused as unsupported); sizes stay within [`CarLimits`].
//!
//! A reader wraps nothing in a buffer: hand it a `BufReader` when reading
//! from a file or socket.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::sync::mpsc::sync_channel;

use cid::Cid;
use cid::multihash::Multihash;
use ipld_core::ipld::Ipld;
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::blocks::{BlockSource, StoreError};
use gelstore_model::{
    DAG_CBOR_CODEC, DataModelError, MAX_CBOR_SIZE, RAW_CODEC, SHA2_256, decode_dag_cbor,
    encode_dag_cbor,
};

/// The CAR version read and written.
pub const CAR_VERSION: i64 = 1;

/// Longest varint accepted (the multiformats limit: 9 bytes, 63 bits).
const MAX_VARINT_LEN: usize = 9;

/// Longest CID a section can start with: version, codec, hash code and
/// digest length varints, and a digest of at most 64 bytes.
const MAX_CID_LEN: usize = 4 * MAX_VARINT_LEN + 64;

/// Size limits for reading a CAR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CarLimits {
    /// Largest header, in bytes (default 64 KiB, room for ~1,500 roots).
    pub max_header_size: usize,
    /// Largest block, in bytes, not counting its CID (default 2 MiB, the
    /// data model's block limit).
    pub max_block_size: usize,
    /// Largest CAR, in bytes, header and sections included (default 1 GiB).
    pub max_total_size: u64,
}

impl Default for CarLimits {
    fn default() -> Self {
        CarLimits {
            max_header_size: 64 * 1024,
            max_block_size: MAX_CBOR_SIZE,
            max_total_size: 1 << 30,
        }
    }
}

/// Why a CAR could not be read or written. Offsets count bytes from the
/// start of the CAR.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CarError {
    /// The underlying reader or writer failed.
    #[error("CAR I/O error: {0}")]
    Io(#[from] io::Error),

    /// A varint longer than 9 bytes, or not in its shortest form.
    #[error("bad varint at offset {offset}: {reason}")]
    BadVarint {
        /// Where the varint starts.
        offset: u64,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// The input ends in the middle of something.
    #[error("CAR truncated at offset {offset}: input ended inside the {what}")]
    Truncated {
        /// Where the input ended.
        offset: u64,
        /// What was being read.
        what: &'static str,
    },

    /// The header's declared length is over [`CarLimits::max_header_size`].
    #[error("CAR header of {size} bytes is larger than the limit of {max}")]
    HeaderTooLarge {
        /// The declared length.
        size: u64,
        /// The limit.
        max: usize,
    },

    /// The header is not strict DAG-CBOR.
    #[error("CAR header is not valid DAG-CBOR: {0}")]
    HeaderNotDagCbor(DataModelError),

    /// The header is DAG-CBOR, but not a `{roots, version}` map.
    #[error("malformed CAR header: {reason}")]
    HeaderShape {
        /// What is wrong with it.
        reason: &'static str,
    },

    /// The header's `version` is not 1 (2 is the CARv2 pragma).
    #[error("unsupported CAR version {version} (only {CAR_VERSION} is supported)")]
    UnsupportedVersion {
        /// The version found.
        version: i128,
    },

    /// A section (CID + block) or a block larger than
    /// [`CarLimits::max_block_size`] allows.
    #[error("section at offset {offset}: {size} bytes is larger than the limit of {max}")]
    BlockTooLarge {
        /// Where the section starts.
        offset: u64,
        /// The declared section length, or the block length.
        size: u64,
        /// The limit that applied.
        max: u64,
    },

    /// A section whose declared length runs past the end of the input
    /// (reported when the input length is known, as with a slice).
    #[error("section at offset {offset} declares {size} bytes, only {remaining} remain")]
    SectionPastEnd {
        /// Where the section's length varint starts.
        offset: u64,
        /// The declared length.
        size: u64,
        /// The bytes left after the varint.
        remaining: u64,
    },

    /// A section of length zero (no CID).
    #[error("empty section at offset {offset}")]
    EmptySection {
        /// Where the section's length varint starts.
        offset: u64,
    },

    /// The section does not start with a well-formed CIDv1.
    #[error("bad CID at offset {offset}: {reason}")]
    BadCid {
        /// Where the CID starts.
        offset: u64,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// A CID codec other than dag-cbor (0x71) or raw (0x55).
    #[error("CID at offset {offset} has unsupported codec 0x{codec:x}")]
    UnsupportedCodec {
        /// Where the CID starts.
        offset: u64,
        /// The codec.
        codec: u64,
    },

    /// A CID hash function other than sha2-256, which this reader cannot
    /// check.
    #[error("CID at offset {offset} uses unsupported hash function 0x{code:x} (only sha2-256)")]
    UnsupportedHash {
        /// Where the CID starts.
        offset: u64,
        /// The multihash code.
        code: u64,
    },

    /// A block whose SHA-256 is not the digest in its CID.
    #[error("block at offset {offset} does not match its CID {cid}")]
    HashMismatch {
        /// Where the section starts.
        offset: u64,
        /// The CID the block claims.
        cid: Box<Cid>,
    },

    /// The CAR is larger than [`CarLimits::max_total_size`].
    #[error("CAR is larger than the limit of {max} bytes")]
    TooLarge {
        /// The limit.
        max: u64,
    },

    /// The writer was given something it cannot write (a CID outside
    /// CIDv1 dag-cbor/raw sha2-256, or a header too large to encode).
    #[error("cannot write CAR: {reason}")]
    Unwritable {
        /// What is wrong.
        reason: String,
    },
}

/// A whole CAR in memory: its roots and its distinct blocks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Car {
    /// The header's roots, in order.
    pub roots: Vec<Cid>,
    /// Every block, by CID (a repeated block is kept once).
    pub blocks: BTreeMap<Cid, Vec<u8>>,
}

impl Car {
    /// Reads a CAR from untrusted bytes with the default limits.
    pub fn from_slice(bytes: &[u8]) -> Result<Car, CarError> {
        Car::from_slice_with_limits(bytes, CarLimits::default())
    }

    /// Reads a CAR from untrusted bytes.
    pub fn from_slice_with_limits(bytes: &[u8], limits: CarLimits) -> Result<Car, CarError> {
        Car::collect(CarReader::from_slice(bytes, limits)?)
    }

    /// Reads a CAR from a stream of untrusted bytes, to its end. Blocks are
    /// hashed and filed on a second thread while the next ones are read;
    /// the error is the one a reader going block by block meets first.
    pub fn from_reader<R: Read>(reader: R, limits: CarLimits) -> Result<Car, CarError> {
        let mut reader = CarReader::with_limits(reader, limits)?;
        let (sender, receiver) = sync_channel::<Vec<Section>>(FILING_QUEUE);
        let (read, filed) = std::thread::scope(|scope| {
            let filer = scope.spawn(move || -> Result<BTreeMap<Cid, Vec<u8>>, CarError> {
                let mut blocks = BTreeMap::new();
                for run in receiver {
                    for (start, cid, data) in run {
                        check_hash(start, &cid, &data)?;
                        blocks.insert(cid, data);
                    }
                }
                Ok(blocks)
            });
            let read = (|| -> Result<(), CarError> {
                let mut run = Vec::with_capacity(FILING_RUN);
                let result = loop {
                    match reader.read_unhashed() {
                        Ok(Some(section)) => run.push(section),
                        Ok(None) => break Ok(()),
                        Err(e) => break Err(e),
                    }
                    if run.len() == FILING_RUN {
                        let full = std::mem::replace(&mut run, Vec::with_capacity(FILING_RUN));
                        if sender.send(full).is_err() {
                            // The filer stopped at a bad hash: its error comes first.
                            return Ok(());
                        }
                    }
                };
                // The blocks read before an error are checked too: a bad
                // hash among them is the earlier error. (A failed send
                // means the filer already has one.)
                let _ = sender.send(run);
                result
            })();
            drop(sender);
            let filed = filer
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (read, filed)
        });
        // Every block the filer saw came before the one the reader failed
        // at, so its error (a bad hash) is the earlier one.
        let blocks: BTreeMap<Cid, Vec<u8>> = filed?;
        read?;
        Ok(Car {
            roots: reader.roots,
            blocks,
        })
    }

    fn collect<R: Read>(mut reader: CarReader<R>) -> Result<Car, CarError> {
        let mut blocks = BTreeMap::new();
        while let Some((cid, data)) = reader.next_block()? {
            blocks.insert(cid, data);
        }
        Ok(Car {
            roots: reader.roots,
            blocks,
        })
    }

    /// A block by CID.
    pub fn get(&self, cid: &Cid) -> Option<&[u8]> {
        self.blocks.get(cid).map(Vec::as_slice)
    }

    /// Writes this CAR (blocks in CID order).
    pub fn write_to<W: Write>(&self, writer: W) -> Result<W, CarError> {
        let mut w = CarWriter::new(writer, &self.roots)?;
        for (cid, data) in &self.blocks {
            w.write_block(cid, data)?;
        }
        w.finish()
    }

    /// This CAR as bytes.
    pub fn to_vec(&self) -> Result<Vec<u8>, CarError> {
        self.write_to(Vec::new())
    }
}

/// A CAR's blocks are a block source (for loading an MST from it, for
/// example). The reader already checked every block against its CID.
impl BlockSource for Car {
    fn get(&self, cid: &Cid) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.blocks.get(cid).cloned())
    }

    /// Every block was hashed as it was read.
    fn hashes_checked(&self) -> bool {
        true
    }

    fn get_cow(&self, cid: &Cid) -> Result<Option<std::borrow::Cow<'_, [u8]>>, StoreError> {
        Ok(self
            .blocks
            .get(cid)
            .map(|b| std::borrow::Cow::Borrowed(b.as_slice())))
    }
}

/// A section as read: its start offset, its CID and its block.
type Section = (u64, Cid, Vec<u8>);

/// Sections handed to the filing thread at a time, and runs in flight.
const FILING_RUN: usize = 64;
const FILING_QUEUE: usize = 16;

/// Fails unless `block` (the section at `start`) hashes to `cid`.
fn check_hash(start: u64, cid: &Cid, block: &[u8]) -> Result<(), CarError> {
    if Sha256::digest(block).as_slice() != cid.hash().digest() {
        return Err(CarError::HashMismatch {
            offset: start,
            cid: Box::new(*cid),
        });
    }
    Ok(())
}

/// Writes a CAR v1 to any [`Write`], one block at a time.
#[derive(Debug)]
pub struct CarWriter<W: Write> {
    writer: W,
    written: u64,
}

impl<W: Write> CarWriter<W> {
    /// Starts a CAR with these roots (written as the header).
    pub fn new(mut writer: W, roots: &[Cid]) -> Result<Self, CarError> {
        for root in roots {
            check_writable(root)?;
        }
        let header = Ipld::Map(BTreeMap::from([
            (
                "roots".to_owned(),
                Ipld::List(roots.iter().copied().map(Ipld::Link).collect()),
            ),
            ("version".to_owned(), Ipld::Integer(CAR_VERSION.into())),
        ]));
        let header = encode_dag_cbor(&header).map_err(|e| CarError::Unwritable {
            reason: format!("header: {e}"),
        })?;
        let mut written = write_varint(&mut writer, header.len() as u64)?;
        writer.write_all(&header)?;
        written += header.len() as u64;
        Ok(CarWriter { writer, written })
    }

    /// Appends a block. The CID must be CIDv1, dag-cbor or raw, sha2-256,
    /// and must be the block's CID; the hash is checked in debug builds only.
    pub fn write_block(&mut self, cid: &Cid, block: &[u8]) -> Result<(), CarError> {
        check_writable(cid)?;
        debug_assert_eq!(
            Sha256::digest(block).as_slice(),
            cid.hash().digest(),
            "block does not match CID {cid}"
        );
        let cid_bytes = cid.to_bytes();
        let len = (cid_bytes.len() + block.len()) as u64;
        self.written += write_varint(&mut self.writer, len)?;
        self.writer.write_all(&cid_bytes)?;
        self.writer.write_all(block)?;
        self.written += len;
        Ok(())
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// Flushes and returns the writer.
    pub fn finish(mut self) -> Result<W, CarError> {
        self.writer.flush()?;
        Ok(self.writer)
    }
}

fn check_writable(cid: &Cid) -> Result<(), CarError> {
    let ok = cid.version() == cid::Version::V1
        && (cid.codec() == DAG_CBOR_CODEC || cid.codec() == RAW_CODEC)
        && cid.hash().code() == SHA2_256
        && cid.hash().size() == 32;
    if ok {
        Ok(())
    } else {
        Err(CarError::Unwritable {
            reason: format!("CID {cid} is not CIDv1 dag-cbor/raw sha2-256"),
        })
    }
}

fn write_varint<W: Write>(writer: &mut W, mut value: u64) -> io::Result<u64> {
    let mut buf = [0u8; 10];
    let mut n = 0;
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            buf[n] = byte;
            n += 1;
            break;
        }
        buf[n] = byte | 0x80;
        n += 1;
    }
    writer.write_all(&buf[..n])?;
    Ok(n as u64)
}

/// Reads a CAR v1 section by section from untrusted input.
///
/// The header is read by the constructor. Each call to
/// [`next_block`](Self::next_block) reads one section, checks its CID and
/// hash, and returns it; `Ok(None)` means the input ended cleanly at a
/// section boundary. It is also an [`Iterator`], which stops after the
/// first error.
#[derive(Debug)]
pub struct CarReader<R> {
    reader: R,
    offset: u64,
    /// Total input length, when known (slices).
    known_len: Option<u64>,
    limits: CarLimits,
    roots: Vec<Cid>,
    done: bool,
}

impl<'a> CarReader<&'a [u8]> {
    /// Reads from a slice; a section longer than the rest of the slice is
    /// reported as [`CarError::SectionPastEnd`].
    pub fn from_slice(bytes: &'a [u8], limits: CarLimits) -> Result<Self, CarError> {
        if bytes.len() as u64 > limits.max_total_size {
            return Err(CarError::TooLarge {
                max: limits.max_total_size,
            });
        }
        CarReader::start(bytes, Some(bytes.len() as u64), limits)
    }
}

impl<R: Read> CarReader<R> {
    /// Reads from a stream with the default limits.
    pub fn new(reader: R) -> Result<Self, CarError> {
        CarReader::with_limits(reader, CarLimits::default())
    }

    /// Reads from a stream.
    pub fn with_limits(reader: R, limits: CarLimits) -> Result<Self, CarError> {
        CarReader::start(reader, None, limits)
    }

    fn start(reader: R, known_len: Option<u64>, limits: CarLimits) -> Result<Self, CarError> {
        let mut car = CarReader {
            reader,
            offset: 0,
            known_len,
            limits,
            roots: Vec::new(),
            done: false,
        };
        car.read_header()?;
        Ok(car)
    }

    /// The header's roots.
    pub fn roots(&self) -> &[Cid] {
        &self.roots
    }

    /// Bytes consumed so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Reads the next section: `Ok(None)` at a clean end of input.
    pub fn next_block(&mut self) -> Result<Option<(Cid, Vec<u8>)>, CarError> {
        let Some((start, cid, block)) = self.read_unhashed()? else {
            return Ok(None);
        };
        if let Err(e) = check_hash(start, &cid, &block) {
            self.done = true;
            return Err(e);
        }
        Ok(Some((cid, block)))
    }

    fn read_header(&mut self) -> Result<(), CarError> {
        let len = match self.read_varint("header length")? {
            Some(len) => len,
            None => {
                return Err(CarError::Truncated {
                    offset: 0,
                    what: "header length",
                });
            }
        };
        if len > self.limits.max_header_size as u64 {
            return Err(CarError::HeaderTooLarge {
                size: len,
                max: self.limits.max_header_size,
            });
        }
        self.check_total(len)?;
        // `len` is at most max_header_size, so it fits in usize.
        let bytes = self.read_bytes(len as usize, "header")?;
        let header = decode_dag_cbor(&bytes).map_err(CarError::HeaderNotDagCbor)?;
        let Ipld::Map(map) = header else {
            return Err(CarError::HeaderShape {
                reason: "header is not a map",
            });
        };
        match map.get("version") {
            Some(Ipld::Integer(v)) if *v == i128::from(CAR_VERSION) => {}
            Some(Ipld::Integer(v)) => return Err(CarError::UnsupportedVersion { version: *v }),
            Some(_) => {
                return Err(CarError::HeaderShape {
                    reason: "version is not an integer",
                });
            }
            None => {
                return Err(CarError::HeaderShape {
                    reason: "no version",
                });
            }
        }
        let roots = match map.get("roots") {
            Some(Ipld::List(roots)) => roots,
            Some(_) => {
                return Err(CarError::HeaderShape {
                    reason: "roots is not a list",
                });
            }
            None => return Err(CarError::HeaderShape { reason: "no roots" }),
        };
        for root in roots {
            match root {
                Ipld::Link(cid) => self.roots.push(*cid),
                _ => {
                    return Err(CarError::HeaderShape {
                        reason: "a root is not a CID link",
                    });
                }
            }
        }
        Ok(())
    }

    /// The next section, checked but for its hash (see
    /// [`Car::from_reader`]); the reader ends at its end or first error.
    fn read_unhashed(&mut self) -> Result<Option<Section>, CarError> {
        if self.done {
            return Ok(None);
        }
        let result = self.read_unhashed_section();
        if !matches!(result, Ok(Some(_))) {
            self.done = true;
        }
        result
    }

    /// A section's start offset, CID and block, all checked but the hash.
    fn read_unhashed_section(&mut self) -> Result<Option<Section>, CarError> {
        let start = self.offset;
        let Some(len) = self.read_varint("section length")? else {
            return Ok(None);
        };
        if len == 0 {
            return Err(CarError::EmptySection { offset: start });
        }
        let max_section = (self.limits.max_block_size as u64).saturating_add(MAX_CID_LEN as u64);
        if let Some(total) = self.known_len {
            let remaining = total.saturating_sub(self.offset);
            if len > remaining {
                return Err(CarError::SectionPastEnd {
                    offset: start,
                    size: len,
                    remaining,
                });
            }
        }
        if len > max_section {
            return Err(CarError::BlockTooLarge {
                offset: start,
                size: len,
                max: max_section,
            });
        }
        self.check_total(len)?;
        let cid_offset = self.offset;
        // `len` is at most max_section, which came from a usize.
        let mut section = self.read_bytes(len as usize, "section")?;
        let (cid, cid_len) = parse_cid(&section, cid_offset)?;
        let block_len = section.len() - cid_len;
        if block_len > self.limits.max_block_size {
            return Err(CarError::BlockTooLarge {
                offset: start,
                size: block_len as u64,
                max: self.limits.max_block_size as u64,
            });
        }
        // Keep the block in the section's buffer (no second allocation).
        section.drain(..cid_len);
        Ok(Some((start, cid, section)))
    }

    /// Fails if `more` bytes past the current offset would exceed the limit.
    fn check_total(&self, more: u64) -> Result<(), CarError> {
        if self.offset.saturating_add(more) > self.limits.max_total_size {
            return Err(CarError::TooLarge {
                max: self.limits.max_total_size,
            });
        }
        Ok(())
    }

    /// Reads a varint; `None` if the input ends before its first byte.
    fn read_varint(&mut self, what: &'static str) -> Result<Option<u64>, CarError> {
        let start = self.offset;
        let mut value: u64 = 0;
        for i in 0..MAX_VARINT_LEN {
            let mut byte = [0u8; 1];
            let n = loop {
                match self.reader.read(&mut byte) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e.into()),
                }
            };
            if n == 0 {
                if i == 0 {
                    return Ok(None);
                }
                return Err(CarError::Truncated {
                    offset: self.offset,
                    what,
                });
            }
            self.offset += 1;
            let b = byte[0];
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                if b == 0 && i > 0 {
                    return Err(CarError::BadVarint {
                        offset: start,
                        reason: "not minimally encoded",
                    });
                }
                return Ok(Some(value));
            }
        }
        Err(CarError::BadVarint {
            offset: start,
            reason: "longer than 9 bytes",
        })
    }

    /// Reads exactly `len` bytes. The buffer starts at the size of most
    /// blocks and grows as data arrives past it (so a large declared length
    /// with little input allocates little).
    fn read_bytes(&mut self, len: usize, what: &'static str) -> Result<Vec<u8>, CarError> {
        const FIRST: usize = 64 * 1024;
        let mut buf = Vec::with_capacity(len.min(FIRST));
        let got = (&mut self.reader).take(len as u64).read_to_end(&mut buf)?;
        self.offset += got as u64;
        if got < len {
            return Err(CarError::Truncated {
                offset: self.offset,
                what,
            });
        }
        Ok(buf)
    }
}

impl<R: Read> Iterator for CarReader<R> {
    type Item = Result<(Cid, Vec<u8>), CarError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_block().transpose()
    }
}

/// Reads a varint from a slice: the value and its length.
fn slice_varint(bytes: &[u8]) -> Result<(u64, usize), &'static str> {
    let mut value: u64 = 0;
    for (i, &b) in bytes.iter().take(MAX_VARINT_LEN).enumerate() {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            if b == 0 && i > 0 {
                return Err("varint not minimally encoded");
            }
            return Ok((value, i + 1));
        }
    }
    if bytes.len() >= MAX_VARINT_LEN {
        Err("varint longer than 9 bytes")
    } else {
        Err("ends inside a varint")
    }
}

/// Parses the CID at the start of a section: the CID and its length.
fn parse_cid(section: &[u8], offset: u64) -> Result<(Cid, usize), CarError> {
    let bad = |reason| CarError::BadCid { offset, reason };
    // A CIDv0 is a bare sha2-256 multihash: 0x12 0x20 + 32 bytes.
    if section.starts_with(&[0x12, 0x20]) {
        return Err(bad("CIDv0 is not supported (CIDv1 only)"));
    }
    let mut pos = 0;
    let next = |pos: &mut usize| -> Result<u64, CarError> {
        let (v, n) = slice_varint(&section[*pos..]).map_err(bad)?;
        *pos += n;
        Ok(v)
    };
    let version = next(&mut pos)?;
    if version != 1 {
        return Err(bad("CID version is not 1"));
    }
    let codec = next(&mut pos)?;
    let code = next(&mut pos)?;
    let size = next(&mut pos)?;
    if size > 64 {
        return Err(bad("multihash digest longer than 64 bytes"));
    }
    // size <= 64, so the cast and the addition cannot overflow.
    let end = pos + size as usize;
    let Some(digest) = section.get(pos..end) else {
        return Err(bad("section ends inside the multihash digest"));
    };
    if codec != DAG_CBOR_CODEC && codec != RAW_CODEC {
        return Err(CarError::UnsupportedCodec { offset, codec });
    }
    if code != SHA2_256 {
        return Err(CarError::UnsupportedHash { offset, code });
    }
    if size != 32 {
        return Err(bad("sha2-256 digest is not 32 bytes"));
    }
    let hash = Multihash::wrap(code, digest).map_err(|_| bad("invalid multihash"))?;
    Ok((Cid::new_v1(codec, hash), end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints() {
        for v in [
            0u64,
            1,
            127,
            128,
            300,
            16_384,
            u32::MAX.into(),
            (1 << 63) - 1,
        ] {
            let mut buf = Vec::new();
            write_varint(&mut buf, v).unwrap();
            assert_eq!(slice_varint(&buf), Ok((v, buf.len())), "{v}");
        }
        assert!(slice_varint(&[0x80, 0x00]).is_err());
        assert!(slice_varint(&[0xff; 9]).is_err());
        assert!(slice_varint(&[0xff; 3]).is_err());
        assert!(slice_varint(&[]).is_err());
    }

    /// A stream reader that gives a few bytes per read, as a socket may.
    struct Trickle<'a>(&'a [u8]);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(self.0.len()).min(7);
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    /// The verdict of reading block by block on one thread.
    fn one_by_one(bytes: &[u8]) -> Result<BTreeMap<Cid, Vec<u8>>, String> {
        let mut reader = CarReader::new(Trickle(bytes)).map_err(|e| e.to_string())?;
        let mut blocks = BTreeMap::new();
        while let Some((cid, data)) = reader.next_block().map_err(|e| e.to_string())? {
            blocks.insert(cid, data);
        }
        Ok(blocks)
    }

    #[test]
    fn the_hashing_thread_gives_the_verdict_of_reading_block_by_block() {
        let blocks: Vec<(Cid, Vec<u8>)> = (0..300u32)
            .map(|i| {
                let block = gelstore_model::encode_dag_cbor(&gelstore_model::Ipld::Map(
                    [("n".to_owned(), gelstore_model::Ipld::Integer(i.into()))].into(),
                ))
                .unwrap();
                (gelstore_model::cid_for_cbor(&block), block)
            })
            .collect();
        let mut writer = CarWriter::new(Vec::new(), &[blocks[0].0]).unwrap();
        for (cid, block) in &blocks {
            writer.write_block(cid, block).unwrap();
        }
        let car = writer.finish().unwrap();
        let threaded = |bytes: &[u8]| {
            Car::from_reader(Trickle(bytes), CarLimits::default())
                .map(|c| c.blocks)
                .map_err(|e| e.to_string())
        };
        assert_eq!(threaded(&car), one_by_one(&car));
        assert_eq!(threaded(&car).unwrap().len(), 300);
        // A bad hash early and the input cut short later: the bad hash.
        let mut bad = car.clone();
        let early = car.len() / 10;
        bad[early] ^= 0x01;
        bad.truncate(car.len() - 100);
        let verdict = threaded(&bad);
        assert_eq!(verdict, one_by_one(&bad));
        // Every byte flipped in turn, and every cut: the same verdict.
        let mut rng = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..400 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let mut changed = car.clone();
            let at = (rng as usize) % changed.len();
            changed[at] ^= (rng >> 32) as u8 | 1;
            if rng.is_multiple_of(3) {
                changed.truncate(((rng >> 16) as usize) % changed.len());
            }
            assert_eq!(threaded(&changed), one_by_one(&changed), "flip at {at}");
        }
    }
}
