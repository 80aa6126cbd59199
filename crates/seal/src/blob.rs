//! Sealed blobs: the STREAM construction of age, with a random key per blob.
//!
//! ```text
//! key      = 32 random bytes per blob (kept inside the record's sealed frame)
//! stream   = u64be(len(plaintext)) ‖ plaintext ‖ 0x00 × p      (T bytes, T ≥ 8)
//! chunks   = the stream cut into 64 KiB pieces; the last may be shorter, never empty
//! nonce_i  = u88be(i) ‖ flag       (12 bytes; flag 0x01 on the last chunk, else 0x00)
//! blob     = ChaCha20-Poly1305(key, nonce_0, chunk_0, "") ‖ … ‖ (… nonce_last …)
//! size     = T + 16 × number of chunks
//! CID      = CIDv1(raw, sha2-256(blob))  — what the record lists and the AAD binds
//! ```
//!
//! **Padding** hides the exact size as a record's frame does: with
//! [`Padding::Padme`] (the default) `T = padme(max(8 + len, 256))`, so a
//! blob's stored size gives only about log log of its length; with
//! [`Padding::None`] `T = 8 + len`. The length sits at the start of the
//! first chunk, so a reader knows where the plaintext ends while it still
//! holds one chunk at a time; every padding byte must be zero.
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
use super::envelope::SEALED_BLOB_MIME;
use super::envelope::TAG_LEN;
use super::error::{Result, SealError};
use super::frame::{MIN_PADDED_FRAME, Padding, padme};
use super::keys::BlobKey;
use gelstore_model::{Cid, cid_for_blob, cid_for_blob_digest};

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
            mime_type: SEALED_BLOB_MIME.to_string(),
        }
    }
}

/// A freshly sealed blob: the bytes to upload and what the record keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedBlob {
    /// The encrypted bytes, to store or upload as the blob.
    pub bytes: Vec<u8>,
    /// CID, size and key.
    pub seal: BlobSeal,
}

/// Bytes of the length header at the start of the stream.
pub const LEN_HEADER: u64 = 8;

/// Length `T` of the stream (header, plaintext, padding) for a plaintext of
/// `len` bytes.
pub fn stream_len(len: u64, padding: Padding) -> u64 {
    let framed = LEN_HEADER + len;
    match padding {
        Padding::None => framed,
        Padding::Padme => padme(framed.max(MIN_PADDED_FRAME as u64)),
    }
}

/// Size of the sealed form of a plaintext of `len` bytes.
pub fn sealed_len(len: u64, padding: Padding) -> u64 {
    let t = stream_len(len, padding);
    t + t.div_ceil(CHUNK_SIZE as u64) * TAG_LEN as u64
}

/// The stream length `T` a sealed blob of `size` bytes holds, if `size` is
/// one a stream can have (each chunk at least its tag and one byte).
fn stream_len_of(size: u64) -> Option<u64> {
    let chunks = size.div_ceil(SEALED_CHUNK_SIZE as u64);
    let t = size.checked_sub(chunks * TAG_LEN as u64)?;
    (t > (chunks.saturating_sub(1)) * CHUNK_SIZE as u64).then_some(t)
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

/// Seals `plaintext` under a fresh random key from `rng`, Padmé-padded.
pub fn seal_blob(plaintext: &[u8], rng: &mut impl CryptoRng) -> Result<SealedBlob> {
    seal_blob_with(plaintext, BlobKey::generate(rng), Padding::Padme)
}

/// Seals `plaintext` under `key`, Padmé-padded (tests and golden vectors;
/// use [`seal_blob`] otherwise: a key must never seal two blobs).
pub fn seal_blob_with_key(plaintext: &[u8], key: BlobKey) -> Result<SealedBlob> {
    seal_blob_with(plaintext, key, Padding::Padme)
}

/// Seals `plaintext` under `key` with `padding` (see [`seal_blob_with_key`]).
pub fn seal_blob_with(plaintext: &[u8], key: BlobKey, padding: Padding) -> Result<SealedBlob> {
    let len = plaintext.len() as u64;
    if len > MAX_BLOB_PLAINTEXT {
        return Err(SealError::Oversize {
            what: "blob",
            size: len,
            max: MAX_BLOB_PLAINTEXT,
            hint: "",
        });
    }
    let aead = cipher(&key);
    let total = stream_len(len, padding) as usize;
    let header = len.to_be_bytes();
    // Stream bytes `from..from + out.len()` into `out`, which is zeroed: the
    // header, the plaintext, and padding left as it is.
    let fill = |from: usize, out: &mut [u8]| {
        let to = from + out.len();
        let h = header.len();
        if from < h {
            let n = h.min(to) - from;
            out[..n].copy_from_slice(&header[from..from + n]);
        }
        let (lo, hi) = (from.max(h), to.min(h + plaintext.len()));
        if lo < hi {
            out[lo - from..hi - from].copy_from_slice(&plaintext[lo - h..hi - h]);
        }
    };
    let size = usize::try_from(sealed_len(len, padding)).map_err(|_| SealError::Oversize {
        what: "blob",
        size: len,
        max: MAX_BLOB_PLAINTEXT,
        hint: "",
    })?;
    let mut bytes = vec![0u8; size];
    let count = total.div_ceil(CHUNK_SIZE);
    let handoff = Handoff::new(count);
    let digest = std::thread::scope(|scope| {
        let mut hash = CiphertextHash::new(scope, &handoff);
        // Sealed chunks are the stream's 64 KiB pieces, each with its tag.
        for (i, sealed) in bytes.chunks_mut(SEALED_CHUNK_SIZE).enumerate() {
            let (body, tag_out) = sealed.split_at_mut(sealed.len() - TAG_LEN);
            fill(i * CHUNK_SIZE, body);
            let tag = aead
                .encrypt_inout_detached(&chunk_nonce(i as u64, i + 1 == count), b"", body.into())
                .map_err(|_| SealError::Oversize {
                    what: "blob chunk",
                    size: body.len() as u64,
                    max: CHUNK_SIZE as u64,
                    hint: "",
                })?;
            tag_out.copy_from_slice(&tag);
            hash.update(sealed);
        }
        Ok(hash.finish())
    })?;
    Ok(SealedBlob {
        seal: BlobSeal {
            cid: cid_for_blob_digest(&digest),
            size: bytes.len() as u64,
            key,
        },
        bytes,
    })
}

/// Blobs of at least this many chunks are hashed on a second thread while
/// they are sealed or opened: the CID's hash of every ciphertext byte nearly
/// doubled a 1 MB blob's time next to the raw cipher (`cargo bench --bench
/// seal`). Smaller blobs stay on one thread: starting a thread costs about
/// as much as hashing a 64 KiB chunk (hashing beside the opening of a 64 KB
/// blob took it from 1.7× to 2.1× the raw cipher).
const HASH_ASIDE_CHUNKS: usize = 4;

/// The SHA-256 of a ciphertext fed chunk by chunk as it is sealed: inline
/// for a small blob, on a thread of `scope` for a large one.
enum CiphertextHash<'scope, 'h, 'b> {
    Inline(Sha256),
    Aside {
        chunks: Release<'h, 'b>,
        next: usize,
        hasher: std::thread::ScopedJoinHandle<'scope, Option<Sha256>>,
    },
}

impl<'scope, 'h: 'scope, 'b: 'h> CiphertextHash<'scope, 'h, 'b> {
    fn new<'env>(
        scope: &'scope std::thread::Scope<'scope, 'env>,
        handoff: &'h Handoff<'b>,
    ) -> Self {
        if handoff.slots.len() < HASH_ASIDE_CHUNKS {
            return CiphertextHash::Inline(Sha256::new());
        }
        let hasher = scope.spawn(move || {
            let mut hash = Sha256::new();
            for slot in &handoff.slots {
                hash.update(handoff.wait(slot)?);
            }
            Some(hash)
        });
        CiphertextHash::Aside {
            chunks: Release(handoff),
            next: 0,
            hasher,
        }
    }

    fn update(&mut self, chunk: &'b [u8]) {
        match self {
            CiphertextHash::Inline(hash) => hash.update(chunk),
            CiphertextHash::Aside { chunks, next, .. } => {
                chunks.0.publish(*next, chunk);
                *next += 1;
            }
        }
    }

    /// The digest, once every chunk has been fed.
    fn finish(self) -> [u8; 32] {
        let hash = match self {
            CiphertextHash::Inline(hash) => hash,
            // Every slot is filled, so the release only matters if one was
            // missed: the hasher then stops instead of waiting forever.
            CiphertextHash::Aside { hasher, chunks, .. } => {
                drop(chunks);
                join(hasher).expect("every chunk was handed over before finish")
            }
        };
        hash.finalize().into()
    }
}

/// Lets the hasher go when the sealing side is dropped, so a seal that
/// stops early (an error, a panic) does not leave it waiting for chunks
/// that will never come (the scope would wait for it forever).
struct Release<'h, 'b>(&'h Handoff<'b>);

impl Drop for Release<'_, '_> {
    fn drop(&mut self) {
        self.0.abandon();
    }
}

/// Sealed chunks handed from the sealing thread to the hashing one, in
/// order. The hasher polls instead of sleeping: it hashes faster than the
/// cipher seals, so it would sleep and be woken once per chunk, and in the
/// bench those wake-ups cost more than the hashing they hid (a channel
/// here made a 1 MB seal 1.4–1.7× the raw cipher).
struct Handoff<'a> {
    slots: Vec<std::sync::OnceLock<&'a [u8]>>,
    abandoned: std::sync::atomic::AtomicBool,
}

impl<'a> Handoff<'a> {
    fn new(chunks: usize) -> Self {
        Handoff {
            slots: (0..chunks).map(|_| std::sync::OnceLock::new()).collect(),
            abandoned: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn publish(&self, index: usize, chunk: &'a [u8]) {
        // Each index is published once, in order, by the one sealing thread.
        let _ = self.slots[index].set(chunk);
    }

    fn abandon(&self) {
        self.abandoned
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// The chunk in `slot` once it is published; `None` if the seal
    /// stopped first. Spins briefly, then yields the core between looks, so
    /// a sealer that was preempted gets it back. The hasher keeps its core
    /// busy for the whole seal: at most a 50 MB blob, tens of milliseconds.
    fn wait(&self, slot: &std::sync::OnceLock<&'a [u8]>) -> Option<&'a [u8]> {
        let mut spins = 0u32;
        loop {
            if let Some(chunk) = slot.get() {
                return Some(chunk);
            }
            if self.abandoned.load(std::sync::atomic::Ordering::Acquire) {
                return None;
            }
            if spins < 1 << 14 {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// The value of a scoped thread, its panic passed on.
fn join<T>(handle: std::thread::ScopedJoinHandle<'_, T>) -> T {
    handle
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
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
    // The CID is checked before any plaintext is trusted, so a wrong blob
    // is named as one whatever its chunks hold. A large blob is hashed on a
    // second thread while its chunks are opened; its plaintext is dropped
    // if the CID is not the one expected.
    let open = || {
        let mut out = Vec::with_capacity(bytes.len());
        match BlobReader::checked(bytes, seal).read_to_end(&mut out) {
            Ok(_) => Ok(out),
            Err(e) => {
                out.clear();
                Err(into_seal_error(e))
            }
        }
    };
    let mismatch = |actual: Cid| SealError::BlobCidMismatch {
        expected: seal.cid.to_string(),
        actual: actual.to_string(),
    };
    if bytes.len() < HASH_ASIDE_CHUNKS * SEALED_CHUNK_SIZE {
        let actual = cid_for_blob(bytes);
        if actual != seal.cid {
            return Err(mismatch(actual));
        }
        return open();
    }
    let (actual, opened) = std::thread::scope(|scope| {
        let hashing = scope.spawn(|| cid_for_blob(bytes));
        let opened = open();
        (join(hashing), opened)
    });
    if actual != seal.cid {
        return Err(mismatch(actual));
    }
    opened
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
    /// The hash of the bytes read, checked against `expected_cid` at the
    /// end; `None` when the caller has checked the CID.
    hasher: Option<Sha256>,
    read: u64,
    counter: u64,
    lookahead: Option<u8>,
    chunk: Vec<u8>,
    /// The plaintext of the current chunk is `chunk[pos..end]` (the header
    /// and padding are never released).
    pos: usize,
    end: usize,
    /// Stream bytes (header, plaintext, padding) before the current chunk.
    offset: u64,
    /// The plaintext length, from the header in the first chunk.
    content_len: Option<u64>,
    done: bool,
    failed: Option<SealError>,
}

impl<R: Read> BlobReader<R> {
    /// A reader of the blob `seal` describes.
    pub fn new(inner: R, seal: &BlobSeal) -> BlobReader<R> {
        BlobReader {
            hasher: Some(Sha256::new()),
            ..BlobReader::checked(inner, seal)
        }
    }

    /// A reader of bytes whose CID the caller has checked (or checks before
    /// it uses the plaintext): sizes and chunks are checked, the CID is not.
    fn checked(inner: R, seal: &BlobSeal) -> BlobReader<R> {
        BlobReader {
            inner,
            aead: cipher(&seal.key),
            expected_cid: seal.cid,
            expected_size: seal.size,
            hasher: None,
            read: 0,
            counter: 0,
            lookahead: None,
            chunk: Vec::with_capacity(SEALED_CHUNK_SIZE),
            pos: 0,
            end: 0,
            offset: 0,
            content_len: None,
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
        // Read straight into the chunk, then cut it to what came. It is
        // sized for what the record says is left, and a byte more to notice
        // an overlong blob: a small blob is not given a whole chunk.
        let mut len = self.chunk.len();
        let rest =
            usize::try_from(self.expected_size.saturating_sub(self.read)).unwrap_or(usize::MAX);
        self.chunk
            .resize(SEALED_CHUNK_SIZE.min(rest.saturating_add(1)).max(len), 0);
        while len < SEALED_CHUNK_SIZE {
            if len == self.chunk.len() {
                self.chunk.resize(SEALED_CHUNK_SIZE, 0);
            }
            match self.inner.read(&mut self.chunk[len..]) {
                Ok(0) => {
                    self.chunk.truncate(len);
                    return Ok(true);
                }
                Ok(n) => len += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.chunk.truncate(len);
                    return Err(e);
                }
            }
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
        if let Some(hasher) = &mut self.hasher {
            hasher.update(&self.chunk);
        }
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
        if let Err(e) = self.place_plaintext() {
            self.chunk.clear();
            return Err(e);
        }
        self.counter += 1;
        if at_end {
            if self
                .content_len
                .is_none_or(|n| self.offset < LEN_HEADER + n)
            {
                self.chunk.clear();
                return Err(SealError::invalid_plaintext(
                    "the blob ends before the length its header gives",
                ));
            }
            self.done = true;
            if self.read != self.expected_size {
                self.chunk.clear();
                return Err(SealError::BlobSizeMismatch {
                    expected: self.expected_size,
                    actual: self.read,
                });
            }
            let actual = self
                .hasher
                .take()
                .map(|hasher| cid_for_blob_digest(&hasher.finalize().into()));
            if let Some(actual) = actual.filter(|cid| *cid != self.expected_cid) {
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

impl<R> BlobReader<R> {
    /// After a chunk verified: reads the length header (first chunk), checks
    /// this chunk's padding is zero, and sets `pos..end` to its plaintext.
    fn place_plaintext(&mut self) -> std::result::Result<(), SealError> {
        if self.chunk.is_empty() {
            return Err(SealError::invalid_plaintext(
                "an empty chunk (a stream holds at least its 8-byte length)",
            ));
        }
        let start = self.offset;
        let len = self.chunk.len() as u64;
        self.offset += len;
        let n = match self.content_len {
            Some(n) => n,
            None => {
                let Some(head) = self.chunk.first_chunk::<8>() else {
                    return Err(SealError::invalid_plaintext(
                        "the first chunk is shorter than the 8-byte length",
                    ));
                };
                let n = u64::from_be_bytes(*head);
                let holds = stream_len_of(self.expected_size).unwrap_or(0);
                if n > holds.saturating_sub(LEN_HEADER) {
                    // Known from the first chunk: nothing is released.
                    return Err(SealError::Truncated {
                        what: "blob",
                        detail: format!(
                            "its length header says {n} bytes; it holds at most {}",
                            holds.saturating_sub(LEN_HEADER)
                        ),
                    });
                }
                self.content_len = Some(n);
                n
            }
        };
        let body_end = LEN_HEADER + n;
        let lo = start.max(LEN_HEADER).min(start + len);
        let hi = (start + len).min(body_end).max(lo);
        let pad_from = (hi - start) as usize;
        if self.chunk[pad_from..].iter().any(|b| *b != 0) {
            return Err(SealError::invalid_plaintext(
                "blob padding bytes are not all zero",
            ));
        }
        self.pos = (lo - start) as usize;
        self.end = pad_from;
        Ok(())
    }
}

impl<R: Read> Read for BlobReader<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if let Some(e) = &self.failed {
            return Err(io_err(e.clone()));
        }
        while self.pos == self.end {
            if self.done {
                return Ok(0);
            }
            if let Err(e) = self.next_chunk() {
                self.chunk.clear();
                self.pos = 0;
                self.end = 0;
                self.failed = Some(e.clone());
                return Err(io_err(e));
            }
        }
        let n = out.len().min(self.end - self.pos);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Seals `stream` (header, plaintext, padding as given) chunk by chunk,
    /// as a writer that holds the key could: the checks after the tags.
    fn raw(stream: &[u8], key: &BlobKey) -> (Vec<u8>, BlobSeal) {
        let aead = cipher(key);
        let chunks: Vec<&[u8]> = stream.chunks(CHUNK_SIZE).collect();
        let mut out = Vec::new();
        for (i, c) in chunks.iter().enumerate() {
            let mut buf = c.to_vec();
            aead.encrypt_in_place(&chunk_nonce(i as u64, i + 1 == chunks.len()), b"", &mut buf)
                .unwrap();
            out.extend_from_slice(&buf);
        }
        let seal = BlobSeal {
            cid: cid_for_blob(&out),
            size: out.len() as u64,
            key: key.clone(),
        };
        (out, seal)
    }

    #[test]
    fn a_blob_hashed_on_a_second_thread_has_the_cid_of_its_bytes() {
        let key = BlobKey::from_bytes([7; 32]);
        let plaintext: Vec<u8> = (0..HASH_ASIDE_CHUNKS * CHUNK_SIZE + 12_345)
            .map(|i| (i * 31 % 251) as u8)
            .collect();
        let sealed = seal_blob_with(&plaintext, key.clone(), Padding::None).unwrap();
        let stream = [&(plaintext.len() as u64).to_be_bytes()[..], &plaintext].concat();
        let (bytes, seal) = raw(&stream, &key);
        assert!(bytes.len() > HASH_ASIDE_CHUNKS * SEALED_CHUNK_SIZE);
        assert_eq!(sealed.bytes, bytes);
        assert_eq!(sealed.seal, seal);
        assert_eq!(open_blob(&sealed.bytes, &sealed.seal).unwrap(), plaintext);
    }

    #[test]
    fn a_seal_that_stops_early_lets_the_hasher_go() {
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let chunk = vec![1u8; SEALED_CHUNK_SIZE];
            let handoff = Handoff::new(HASH_ASIDE_CHUNKS + 1);
            std::thread::scope(|scope| {
                let mut hash = CiphertextHash::new(scope, &handoff);
                assert!(matches!(hash, CiphertextHash::Aside { .. }));
                hash.update(&chunk);
                // The seal fails here: the rest of the chunks never come.
                drop(hash);
            });
            done.send(()).unwrap();
        });
        // The scope ends only once the hasher has returned.
        finished
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the hasher still waits for chunks after the seal stopped");
    }

    #[test]
    fn the_length_header_and_padding_are_checked() {
        let key = BlobKey::from_bytes([5; 32]);
        let good = [&3u64.to_be_bytes()[..], b"abc", &[0; 5]].concat();
        let (bytes, seal) = raw(&good, &key);
        assert_eq!(open_blob(&bytes, &seal).unwrap(), b"abc");

        let mut nonzero = good.clone();
        nonzero[12] = 1;
        let (bytes, seal) = raw(&nonzero, &key);
        assert!(matches!(
            open_blob(&bytes, &seal),
            Err(SealError::InvalidPlaintext { .. })
        ));

        let long = [&99u64.to_be_bytes()[..], b"abc"].concat();
        let (bytes, seal) = raw(&long, &key);
        assert!(matches!(
            open_blob(&bytes, &seal),
            Err(SealError::Truncated { .. })
        ));

        // No chunk at all is a cut stream; a first chunk too short for the
        // header is a bad one.
        let (bytes, seal) = raw(b"", &key);
        assert!(matches!(
            open_blob(&bytes, &seal),
            Err(SealError::Truncated { .. })
        ));
        let (bytes, seal) = raw(b"\0\0\0", &key);
        let r = open_blob(&bytes, &seal);
        assert!(
            matches!(r, Err(SealError::InvalidPlaintext { .. })),
            "{r:?}"
        );
    }

    #[test]
    fn padding_spans_chunks_and_is_never_released() {
        let key = BlobKey::from_bytes([6; 32]);
        // Plaintext ending inside chunk 0, padding filling chunk 1.
        let stream = [
            &10u64.to_be_bytes()[..],
            &[7; 10],
            &vec![0; CHUNK_SIZE + 40],
        ]
        .concat();
        let (bytes, seal) = raw(&stream, &key);
        assert_eq!(open_blob(&bytes, &seal).unwrap(), vec![7; 10]);
        let mut bad = stream.clone();
        *bad.last_mut().unwrap() = 9;
        let (bytes, seal) = raw(&bad, &key);
        assert!(matches!(
            open_blob(&bytes, &seal),
            Err(SealError::InvalidPlaintext { .. })
        ));
    }
}
