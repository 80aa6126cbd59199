//! Sealed blobs: the STREAM construction of age, with a random key per blob.
//!
//! ```text
//! key      = 32 random bytes per blob (kept inside the record's sealed frame)
//! chunks   = the plaintext cut into 64 KiB pieces; the last may be shorter,
//!            and is empty only when the whole blob is empty
//! nonce_i  = u88be(i) ‖ flag       (12 bytes; flag 0x01 on the last chunk, else 0x00)
//! blob     = ChaCha20-Poly1305(key, nonce_0, chunk_0, "") ‖ … ‖ (… nonce_last …)
//! size     = len(plaintext) + 16 × number of chunks
//! CID      = CIDv1(raw, sha2-256(blob))  — what the record lists and the AAD binds
//! ```
//!
//! Readers verify each chunk's tag before they release its plaintext, and a
//! stream that ends without a chunk flagged last is [`SealError::Truncated`].
//! Reordering, dropping or appending chunks fails authentication.

use std::io::{self, Read};

use chacha20poly1305::aead::{AeadInOut, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Nonce};
use rand_core::CryptoRng;
use sha2::{Digest, Sha256};

use super::aad::BlobBinding;
use super::envelope::TAG_LEN;
use super::error::{Result, SealError};
use super::keys::BlobKey;
use crate::model::{Cid, cid_for_blob};

/// Plaintext bytes per chunk.
pub const CHUNK_SIZE: usize = 64 * 1024;
/// Ciphertext bytes per full chunk.
pub const SEALED_CHUNK_SIZE: usize = CHUNK_SIZE + TAG_LEN;
/// The largest plaintext a sealed blob may hold (the largest `maxSize` of a
/// blob in the lexicons).
pub const MAX_BLOB_PLAINTEXT: u64 = 50_000_000;

/// A sealed blob as the record knows it: CID and size of the stored
/// (encrypted) bytes, and the key that opens them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobSeal {
    /// CID of the encrypted bytes.
    pub cid: Cid,
    /// Size of the encrypted bytes.
    pub size: u64,
    /// The blob's key.
    pub key: BlobKey,
}

impl BlobSeal {
    /// The CID and size, as the envelope lists them.
    pub fn binding(&self) -> BlobBinding {
        BlobBinding {
            cid: self.cid,
            size: self.size,
        }
    }
}

/// A freshly sealed blob: the bytes to upload and what the record keeps.
#[derive(Debug, Clone)]
pub struct SealedBlob {
    /// The encrypted bytes, to store or upload as the blob.
    pub bytes: Vec<u8>,
    /// CID, size and key.
    pub seal: BlobSeal,
}

/// Size of the sealed form of a plaintext of `len` bytes.
pub fn sealed_len(len: u64) -> u64 {
    let chunks = len.div_ceil(CHUNK_SIZE as u64).max(1);
    len + chunks * TAG_LEN as u64
}

fn chunk_nonce(counter: u64, last: bool) -> Nonce {
    let mut nonce = [0u8; 12];
    nonce[3..11].copy_from_slice(&counter.to_be_bytes());
    nonce[11] = u8::from(last);
    Nonce::from(nonce)
}

fn cipher(key: &BlobKey) -> ChaCha20Poly1305 {
    ChaCha20Poly1305::new(&(*key.bytes()).into())
}

/// Seals `plaintext` under a fresh random key from `rng`.
pub fn seal_blob(plaintext: &[u8], rng: &mut impl CryptoRng) -> Result<SealedBlob> {
    seal_blob_with_key(plaintext, BlobKey::generate(rng))
}

/// Seals `plaintext` under `key` (tests and golden vectors; use
/// [`seal_blob`] otherwise: a key must never seal two blobs).
pub fn seal_blob_with_key(plaintext: &[u8], key: BlobKey) -> Result<SealedBlob> {
    if plaintext.len() as u64 > MAX_BLOB_PLAINTEXT {
        return Err(SealError::Oversize {
            what: "blob",
            size: plaintext.len() as u64,
            max: MAX_BLOB_PLAINTEXT,
            hint: "",
        });
    }
    let aead = cipher(&key);
    let size = sealed_len(plaintext.len() as u64);
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    let chunks: Vec<&[u8]> = if plaintext.is_empty() {
        vec![&[][..]]
    } else {
        plaintext.chunks(CHUNK_SIZE).collect()
    };
    let count = chunks.len();
    for (i, chunk) in chunks.into_iter().enumerate() {
        let start = bytes.len();
        bytes.extend_from_slice(chunk);
        let tag = aead
            .encrypt_inout_detached(
                &chunk_nonce(i as u64, i + 1 == count),
                b"",
                (&mut bytes[start..]).into(),
            )
            .map_err(|_| SealError::Oversize {
                what: "blob chunk",
                size: chunk.len() as u64,
                max: CHUNK_SIZE as u64,
                hint: "",
            })?;
        bytes.extend_from_slice(&tag);
    }
    let cid = cid_for_blob(&bytes);
    Ok(SealedBlob {
        seal: BlobSeal {
            cid,
            size: bytes.len() as u64,
            key,
        },
        bytes,
    })
}

/// Decrypts one sealed chunk in place (`buf` = ciphertext ‖ tag), leaving
/// the plaintext in `buf` only if the tag verifies.
fn open_chunk(aead: &ChaCha20Poly1305, counter: u64, last: bool, buf: &mut Vec<u8>) -> Result<()> {
    let nonce = chunk_nonce(counter, last);
    match aead.decrypt_in_place(&nonce, b"", buf) {
        Ok(()) => Ok(()),
        Err(_) => {
            if last && buf.len() == SEALED_CHUNK_SIZE {
                // A full chunk at the end that only verifies as a middle chunk:
                // the stream was cut after it.
                let mut probe = buf.clone();
                if aead
                    .decrypt_in_place(&chunk_nonce(counter, false), b"", &mut probe)
                    .is_ok()
                {
                    buf.clear();
                    return Err(SealError::Truncated {
                        what: "blob",
                        detail: format!(
                            "the stream ends after chunk {counter}, which is not the last"
                        ),
                    });
                }
            }
            buf.clear();
            Err(SealError::AuthenticationFailed {
                what: "a blob chunk",
            })
        }
    }
}

/// Opens a whole sealed blob held in memory. Checks size and CID against
/// `seal` first, then decrypts every chunk; returns the plaintext only if
/// all of it verifies.
pub fn open_blob(bytes: &[u8], seal: &BlobSeal) -> Result<Vec<u8>> {
    if bytes.len() as u64 != seal.size {
        return Err(SealError::BlobSizeMismatch {
            expected: seal.size,
            actual: bytes.len() as u64,
        });
    }
    let actual = cid_for_blob(bytes);
    if actual != seal.cid {
        return Err(SealError::BlobCidMismatch {
            expected: seal.cid.to_string(),
            actual: actual.to_string(),
        });
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut reader = BlobReader::new(bytes, seal);
    match reader.read_to_end(&mut out) {
        Ok(_) => Ok(out),
        Err(e) => {
            out.clear();
            Err(into_seal_error(e))
        }
    }
}

/// Turns an error from [`BlobReader`] back into the [`SealError`] it carries.
pub fn into_seal_error(e: io::Error) -> SealError {
    if e.get_ref().is_some_and(|inner| inner.is::<SealError>()) {
        if let Ok(inner) = e
            .into_inner()
            .expect("checked above")
            .downcast::<SealError>()
        {
            return *inner;
        }
        unreachable!("checked the type above");
    }
    SealError::Truncated {
        what: "blob",
        detail: format!("read error: {e}"),
    }
}

fn io_err(e: SealError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// Streams the plaintext of a sealed blob out of a reader, one verified
/// chunk at a time.
///
/// A chunk's plaintext is released only after its tag verifies. Errors are
/// `io::Error`s of kind `InvalidData` wrapping a [`SealError`]
/// ([`into_seal_error`] gets it back): authentication failure, truncation
/// (no final chunk), more or fewer bytes than the record says, or a CID
/// mismatch found when the stream ends.
pub struct BlobReader<R> {
    inner: R,
    aead: ChaCha20Poly1305,
    expected_cid: Cid,
    expected_size: u64,
    hasher: Sha256,
    read: u64,
    counter: u64,
    lookahead: Option<u8>,
    chunk: Vec<u8>,
    pos: usize,
    done: bool,
    failed: Option<SealError>,
}

impl<R: Read> BlobReader<R> {
    /// A reader of the blob `seal` describes.
    pub fn new(inner: R, seal: &BlobSeal) -> BlobReader<R> {
        BlobReader {
            inner,
            aead: cipher(&seal.key),
            expected_cid: seal.cid,
            expected_size: seal.size,
            hasher: Sha256::new(),
            read: 0,
            counter: 0,
            lookahead: None,
            chunk: Vec::with_capacity(SEALED_CHUNK_SIZE),
            pos: 0,
            done: false,
            failed: None,
        }
    }

    /// Reads up to a full sealed chunk into `self.chunk`; returns whether the
    /// input ended right after it.
    fn fill(&mut self) -> io::Result<bool> {
        self.chunk.clear();
        if let Some(b) = self.lookahead.take() {
            self.chunk.push(b);
        }
        let mut buf = [0u8; 8192];
        while self.chunk.len() < SEALED_CHUNK_SIZE {
            let want = (SEALED_CHUNK_SIZE - self.chunk.len()).min(buf.len());
            let n = match self.inner.read(&mut buf[..want]) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if n == 0 {
                return Ok(true);
            }
            self.chunk.extend_from_slice(&buf[..n]);
        }
        let mut one = [0u8; 1];
        loop {
            match self.inner.read(&mut one) {
                Ok(0) => return Ok(true),
                Ok(_) => {
                    self.lookahead = Some(one[0]);
                    return Ok(false);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    fn next_chunk(&mut self) -> std::result::Result<(), SealError> {
        let at_end = self.fill().map_err(|e| SealError::Truncated {
            what: "blob",
            detail: format!("read error: {e}"),
        })?;
        // `chunk` holds the previous look-ahead byte, `lookahead` the next one.
        self.read += self.chunk.len() as u64;
        let seen = self.read + u64::from(self.lookahead.is_some());
        if seen > self.expected_size {
            return Err(SealError::BlobSizeMismatch {
                expected: self.expected_size,
                actual: seen,
            });
        }
        self.hasher.update(&self.chunk);
        if self.chunk.len() < TAG_LEN {
            return Err(SealError::Truncated {
                what: "blob",
                detail: if self.chunk.is_empty() {
                    format!("the stream ends before chunk {}", self.counter)
                } else {
                    format!("chunk {} is shorter than its tag", self.counter)
                },
            });
        }
        open_chunk(&self.aead, self.counter, at_end, &mut self.chunk)?;
        if at_end && self.chunk.is_empty() && self.counter > 0 {
            self.chunk.clear();
            return Err(SealError::invalid_plaintext(
                "empty last chunk after other chunks",
            ));
        }
        self.counter += 1;
        self.pos = 0;
        if at_end {
            self.done = true;
            if self.read != self.expected_size {
                self.chunk.clear();
                return Err(SealError::BlobSizeMismatch {
                    expected: self.expected_size,
                    actual: self.read,
                });
            }
            let digest = std::mem::take(&mut self.hasher).finalize();
            let actual = Cid::new_v1(
                crate::model::RAW_CODEC,
                ::cid::multihash::Multihash::wrap(crate::model::SHA2_256, &digest)
                    .expect("a 32-byte digest fits"),
            );
            if actual != self.expected_cid {
                self.chunk.clear();
                return Err(SealError::BlobCidMismatch {
                    expected: self.expected_cid.to_string(),
                    actual: actual.to_string(),
                });
            }
        }
        Ok(())
    }
}

impl<R: Read> Read for BlobReader<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if let Some(e) = &self.failed {
            return Err(io_err(e.clone()));
        }
        while self.pos == self.chunk.len() {
            if self.done {
                return Ok(0);
            }
            if let Err(e) = self.next_chunk() {
                self.chunk.clear();
                self.pos = 0;
                self.failed = Some(e.clone());
                return Err(io_err(e));
            }
        }
        let n = out.len().min(self.chunk.len() - self.pos);
        out[..n].copy_from_slice(&self.chunk[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

impl<R> std::fmt::Debug for BlobReader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobReader")
            .field("expected_cid", &self.expected_cid)
            .field("expected_size", &self.expected_size)
            .field("counter", &self.counter)
            .finish_non_exhaustive()
    }
}
