//! A single-pass, non-recursive check that bytes are strict DAG-CBOR.
//!
//! It runs before the bytes are handed to the (recursive) `serde_ipld_dagcbor`
//! decoder, so that decoder only ever sees input that is well-formed, nested
//! at most [`MAX_DEPTH`] deep, and whose declared lengths fit in the input
//! (which bounds every allocation the decoder makes by the input size).
//!
//! Checked here, each with its own [`DataModelError`] variant: truncation,
//! trailing bytes, reserved head bytes, indefinite lengths, non-minimal
//! integers/lengths/tags, integers outside `i64`, floats, simple values other
//! than false/true/null, tags other than 42, malformed or non-blessed CIDs,
//! invalid UTF-8, non-string map keys, unsorted or duplicate map keys, and
//! nesting depth. Time is linear in the input; memory is `O(MAX_DEPTH)`.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use ::cid::Cid;
use ipld_core::ipld::Ipld;

use super::MAX_DEPTH;
use super::cid::cid_from_bytes;
use super::error::{DataModelError, Result};

// CBOR major types (the top three bits of an item's first byte); the
// writer (`write.rs`) uses the same names.
pub(super) const MAJOR_UNSIGNED: u8 = 0;
pub(super) const MAJOR_NEGATIVE: u8 = 1;
pub(super) const MAJOR_BYTES: u8 = 2;
pub(super) const MAJOR_TEXT: u8 = 3;
pub(super) const MAJOR_ARRAY: u8 = 4;
pub(super) const MAJOR_MAP: u8 = 5;
const MAJOR_TAG: u8 = 6;
const MAJOR_SIMPLE: u8 = 7;

const FALSE: u8 = 0xf4;
const TRUE: u8 = 0xf5;
const NULL: u8 = 0xf6;

/// CBOR tag of a CID link.
const TAG_CID: u64 = 42;

/// Checks that `input` is exactly one strict DAG-CBOR item.
#[cfg(test)]
pub(crate) fn scan(input: &[u8]) -> Result<()> {
    walk(input, &mut ())
}

/// Checks that `input` is exactly one strict DAG-CBOR item, as [`scan`]
/// does (the same errors), and builds its value in the same pass. Strict
/// DAG-CBOR has one encoding per value, so a value that passes is the one
/// whose encoding is `input`: nothing needs encoding again to compare.
pub(crate) fn decode(input: &[u8]) -> Result<Ipld> {
    let mut build = Build::default();
    walk(input, &mut build)?;
    // `walk` succeeded: exactly one item, every container closed.
    build.done.ok_or(DataModelError::Truncated {
        offset: input.len(),
        detail: "CBOR head",
    })
}

/// A scalar item as read by [`walk`].
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar<'a> {
    Null,
    Bool(bool),
    Integer(i128),
    Bytes(&'a [u8]),
    Text(&'a str),
    Link(Cid),
}

/// What [`walk`] reports, in input order.
pub trait Visit<'a> {
    /// A scalar: a list element, a map value, or the whole input.
    fn scalar(&mut self, scalar: Scalar<'a>);
    /// A list (`map` false) or map of `len` items starts.
    fn open(&mut self, map: bool, len: u64);
    /// The next map key.
    fn key(&mut self, key: &'a str);
    /// The innermost open list or map is complete.
    fn close(&mut self);
}

/// Checking only.
impl<'a> Visit<'a> for () {
    fn scalar(&mut self, _: Scalar<'a>) {}
    fn open(&mut self, _: bool, _: u64) {}
    fn key(&mut self, _: &'a str) {}
    fn close(&mut self) {}
}

/// Builds the value.
#[derive(Default)]
struct Build {
    /// The open lists and maps (a map with the key its next value goes to).
    stack: Vec<Open>,
    done: Option<Ipld>,
}

enum Open {
    List(Vec<Ipld>),
    Map(BTreeMap<String, Ipld>, Option<String>),
}

/// Most list elements reserved up front (the declared count is bounded by
/// the input, but an element in memory is larger than its one byte).
const MAX_RESERVE: u64 = 4096;

impl Build {
    fn put(&mut self, value: Ipld) {
        match self.stack.last_mut() {
            None => self.done = Some(value),
            Some(Open::List(items)) => items.push(value),
            Some(Open::Map(map, key)) => {
                if let Some(key) = key.take() {
                    map.insert(key, value);
                }
            }
        }
    }
}

impl<'a> Visit<'a> for Build {
    fn scalar(&mut self, scalar: Scalar<'a>) {
        self.put(match scalar {
            Scalar::Null => Ipld::Null,
            Scalar::Bool(b) => Ipld::Bool(b),
            Scalar::Integer(i) => Ipld::Integer(i),
            Scalar::Bytes(b) => Ipld::Bytes(b.to_vec()),
            Scalar::Text(s) => Ipld::String(s.to_owned()),
            Scalar::Link(cid) => Ipld::Link(cid),
        });
    }

    fn open(&mut self, map: bool, len: u64) {
        self.stack.push(if map {
            Open::Map(BTreeMap::new(), None)
        } else {
            // Bounded by MAX_RESERVE, so the cast cannot truncate.
            Open::List(Vec::with_capacity(len.min(MAX_RESERVE) as usize))
        });
    }

    fn key(&mut self, key: &'a str) {
        if let Some(Open::Map(_, next)) = self.stack.last_mut() {
            *next = Some(key.to_owned());
        }
    }

    fn close(&mut self) {
        match self.stack.pop() {
            Some(Open::List(items)) => self.put(Ipld::List(items)),
            Some(Open::Map(map, _)) => self.put(Ipld::Map(map)),
            None => {}
        }
    }
}

/// Checks that `input` is exactly one strict DAG-CBOR item, telling `visit`
/// each item as it is read: for a reader of one known shape (an MST node,
/// say) that wants the checks of [`decode_dag_cbor`](crate::decode_dag_cbor)
/// without building an [`Ipld`] tree. The errors are the same; `visit` is
/// told items only up to the first one.
pub fn walk<'a>(input: &'a [u8], visit: &mut impl Visit<'a>) -> Result<()> {
    let mut reader = Reader { input, pos: 0 };
    // One frame per open list/map; never longer than MAX_DEPTH.
    let mut stack: Vec<Frame> = Vec::new();
    loop {
        let is_key = matches!(
            stack.last(),
            Some(Frame::Map {
                value_next: false,
                ..
            })
        );
        if is_key {
            visit.key(reader.map_key(&mut stack)?);
            continue;
        }
        match reader.item()? {
            Item::Scalar(scalar) => visit.scalar(scalar),
            Item::Container(frame) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(DataModelError::TooDeep { max: MAX_DEPTH });
                }
                let (map, len) = match frame {
                    Frame::Array { remaining } => (false, remaining),
                    Frame::Map { remaining, .. } => (true, remaining),
                };
                visit.open(map, len);
                if !frame.is_empty() {
                    stack.push(frame);
                    continue;
                }
                visit.close();
            }
        }
        // An item is complete: close every container it completes.
        loop {
            match stack.last_mut() {
                None => {
                    let rest = input.len() - reader.pos;
                    return if rest == 0 {
                        Ok(())
                    } else {
                        Err(DataModelError::TrailingBytes {
                            offset: reader.pos,
                            count: rest,
                        })
                    };
                }
                Some(frame) => {
                    frame.item_done();
                    if frame.is_empty() {
                        stack.pop();
                        visit.close();
                    } else {
                        break;
                    }
                }
            }
        }
    }
}

/// An open list or map, with what is left to read in it.
#[derive(Debug)]
enum Frame {
    Array {
        remaining: u64,
    },
    Map {
        remaining: u64,
        /// True after a key was read, until its value is complete.
        value_next: bool,
        /// Byte range of the previous key's text, for the order check.
        last_key: Option<(usize, usize)>,
    },
}

impl Frame {
    fn is_empty(&self) -> bool {
        match self {
            Frame::Array { remaining } | Frame::Map { remaining, .. } => *remaining == 0,
        }
    }

    /// Records that one element (list) or one value (map) is complete.
    fn item_done(&mut self) {
        match self {
            Frame::Array { remaining } => *remaining = remaining.saturating_sub(1),
            Frame::Map {
                remaining,
                value_next,
                ..
            } => {
                *remaining = remaining.saturating_sub(1);
                *value_next = false;
            }
        }
    }
}

enum Item<'a> {
    Scalar(Scalar<'a>),
    Container(Frame),
}

/// A decoded CBOR head: major type and argument.
struct Head {
    major: u8,
    arg: u64,
    offset: usize,
}

struct Reader<'a> {
    input: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.input.len() - self.pos
    }

    fn take(&mut self, n: usize, detail: &'static str) -> Result<&'a [u8]> {
        // Built only on failure: this runs for every item decoded.
        let truncated = || DataModelError::Truncated {
            offset: self.pos,
            detail,
        };
        let end = self.pos.checked_add(n).ok_or_else(truncated)?;
        let bytes = self.input.get(self.pos..end).ok_or_else(truncated)?;
        self.pos = end;
        Ok(bytes)
    }

    fn take_array<const N: usize>(&mut self, detail: &'static str) -> Result<&'a [u8; N]> {
        let bytes = self.take(N, detail)?;
        bytes.try_into().map_err(|_| DataModelError::Truncated {
            offset: self.pos,
            detail,
        })
    }

    /// Reads a head of major type 0-6 with a definite, minimal argument.
    /// Major type 7 is handled here too, by rejecting everything but
    /// false/true/null (`arg` is then the head byte).
    fn head(&mut self) -> Result<Head> {
        let offset = self.pos;
        let [byte] = *self.take_array::<1>("CBOR head")?;
        let major = byte >> 5;
        let info = byte & 0x1f;
        if major == MAJOR_SIMPLE {
            return match byte {
                FALSE | TRUE | NULL => Ok(Head {
                    major,
                    arg: u64::from(byte),
                    offset,
                }),
                0xf9..=0xfb => Err(DataModelError::Float {
                    detail: format!("CBOR float head 0x{byte:02x} at offset {offset}"),
                }),
                0xfc..=0xff => Err(DataModelError::MalformedHead { byte, offset }),
                _ => Err(DataModelError::UnsupportedSimpleValue { byte, offset }),
            };
        }
        let (len, min) = match info {
            0..=23 => {
                return Ok(Head {
                    major,
                    arg: u64::from(info),
                    offset,
                });
            }
            24 => (1, 24),
            25 => (2, 1 << 8),
            26 => (4, 1 << 16),
            27 => (8, 1 << 32),
            31 if (MAJOR_BYTES..=MAJOR_MAP).contains(&major) => {
                return Err(DataModelError::IndefiniteLength { offset });
            }
            _ => return Err(DataModelError::MalformedHead { byte, offset }),
        };
        let arg = self
            .take(len, "CBOR head argument")?
            .iter()
            .fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
        if arg < min {
            let what = match major {
                MAJOR_UNSIGNED | MAJOR_NEGATIVE => "integer",
                MAJOR_TAG => "tag",
                _ => "length",
            };
            return Err(DataModelError::NonMinimalEncoding { offset, what });
        }
        Ok(Head { major, arg, offset })
    }

    /// Reads one item; containers are returned open, to be filled by the caller.
    fn item(&mut self) -> Result<Item<'a>> {
        let head = self.head()?;
        match head.major {
            MAJOR_UNSIGNED | MAJOR_NEGATIVE => {
                // Unsigned: value = arg. Negative: value = -1 - arg. Both fit
                // in i64 exactly when arg <= i64::MAX.
                if head.arg > i64::MAX as u64 {
                    let value = if head.major == MAJOR_NEGATIVE {
                        -1 - i128::from(head.arg)
                    } else {
                        i128::from(head.arg)
                    };
                    return Err(DataModelError::IntegerOutOfRange {
                        detail: format!(
                            "{value} at offset {} does not fit in a signed 64-bit integer",
                            head.offset
                        ),
                    });
                }
                let arg = i128::from(head.arg);
                Ok(Item::Scalar(Scalar::Integer(
                    if head.major == MAJOR_NEGATIVE {
                        -1 - arg
                    } else {
                        arg
                    },
                )))
            }
            MAJOR_BYTES => Ok(Item::Scalar(Scalar::Bytes(
                self.payload(&head, "byte string")?,
            ))),
            MAJOR_TEXT => Ok(Item::Scalar(Scalar::Text(self.text(&head)?.0))),
            MAJOR_ARRAY => {
                // Every element takes at least one byte.
                self.check_count(&head, 1)?;
                Ok(Item::Container(Frame::Array {
                    remaining: head.arg,
                }))
            }
            MAJOR_MAP => {
                // Every entry takes at least two bytes.
                self.check_count(&head, 2)?;
                Ok(Item::Container(Frame::Map {
                    remaining: head.arg,
                    value_next: false,
                    last_key: None,
                }))
            }
            MAJOR_TAG => {
                if head.arg != TAG_CID {
                    return Err(DataModelError::UnsupportedTag {
                        tag: head.arg,
                        offset: head.offset,
                    });
                }
                Ok(Item::Scalar(Scalar::Link(self.cid()?)))
            }
            // MAJOR_SIMPLE: head() only lets false/true/null through.
            _ => Ok(Item::Scalar(match head.arg as u8 {
                FALSE => Scalar::Bool(false),
                TRUE => Scalar::Bool(true),
                _ => Scalar::Null,
            })),
        }
    }

    /// The body of tag 42: a byte string holding 0x00 and a blessed binary CID.
    fn cid(&mut self) -> Result<Cid> {
        let offset = self.pos;
        let head = self.head()?;
        if head.major != MAJOR_BYTES {
            return Err(DataModelError::InvalidCid {
                reason: format!("tag 42 at offset {offset} must wrap a byte string"),
            });
        }
        let bytes = self.payload(&head, "CID bytes")?;
        match bytes.split_first() {
            Some((0, cid)) => cid_from_bytes(cid),
            _ => Err(DataModelError::InvalidCid {
                reason: format!(
                    "CID bytes at offset {offset} must start with the 0x00 multibase prefix"
                ),
            }),
        }
    }

    /// The payload of a byte or text string whose head was just read.
    fn payload(&mut self, head: &Head, detail: &'static str) -> Result<&'a [u8]> {
        let len = usize::try_from(head.arg).map_err(|_| DataModelError::Truncated {
            offset: self.pos,
            detail,
        })?;
        self.take(len, detail)
    }

    /// The payload of a text string, checked to be UTF-8, with its byte
    /// range in the input.
    fn text(&mut self, head: &Head) -> Result<(&'a str, (usize, usize))> {
        let start = self.pos;
        let bytes = self.payload(head, "text string")?;
        let text = std::str::from_utf8(bytes).map_err(|_| DataModelError::InvalidUtf8 {
            offset: head.offset,
        })?;
        Ok((text, (start, self.pos)))
    }

    /// Fails if `count` items of at least `min_size` bytes cannot fit in the rest of the input.
    fn check_count(&self, head: &Head, min_size: u64) -> Result<()> {
        let needed = u128::from(head.arg) * u128::from(min_size);
        if needed > self.remaining() as u128 {
            return Err(DataModelError::Truncated {
                offset: self.pos,
                detail: if head.major == MAJOR_MAP {
                    "map entries"
                } else {
                    "array elements"
                },
            });
        }
        Ok(())
    }

    /// Reads the next key of the map on top of `stack` and checks its order.
    fn map_key(&mut self, stack: &mut [Frame]) -> Result<&'a str> {
        let offset = self.pos;
        let head = self.head()?;
        if head.major != MAJOR_TEXT {
            return Err(DataModelError::NonStringMapKey { offset });
        }
        let (text, key) = self.text(&head)?;
        if let Some(Frame::Map {
            value_next,
            last_key,
            ..
        }) = stack.last_mut()
        {
            if let Some(prev) = *last_key {
                match compare_keys(self.slice(prev), self.slice(key)) {
                    Ordering::Less => {}
                    Ordering::Equal => return Err(DataModelError::DuplicateMapKey { offset }),
                    Ordering::Greater => return Err(DataModelError::MapKeyOrder { offset }),
                }
            }
            *last_key = Some(key);
            *value_next = true;
        }
        Ok(text)
    }

    fn slice(&self, (start, end): (usize, usize)) -> &'a [u8] {
        self.input.get(start..end).unwrap_or_default()
    }
}

/// DAG-CBOR key order: shorter keys first, then bytewise.
fn compare_keys(a: &[u8], b: &[u8]) -> Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_simple_items() {
        for bytes in [
            &[0x00][..],
            &[0x17],
            &[0x18, 0x18],
            &[0x20],
            &[0x3b, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            &[0x1b, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            &[0x80],
            &[0xa0],
            &[0xf4],
            &[0xf5],
            &[0xf6],
            &[0x60],
            &[0x40],
            &[0x82, 0x01, 0x82, 0x02, 0x03],
            &[0xa2, 0x61, 0x62, 0x01, 0x62, 0x61, 0x61, 0x02],
        ] {
            scan(bytes).unwrap_or_else(|e| panic!("{bytes:02x?}: {e}"));
        }
    }

    #[test]
    fn completes_nested_containers() {
        // {"a": [[], {}], "b": 1}
        let bytes = [0xa2, 0x61, 0x61, 0x82, 0x80, 0xa0, 0x61, 0x62, 0x01];
        scan(&bytes).unwrap();
        // Missing the last value.
        assert!(matches!(
            scan(&bytes[..8]),
            Err(DataModelError::Truncated { .. })
        ));
    }
}
