// Sealed blobs: age's STREAM with ChaCha20-Poly1305 over 64 KiB chunks of
//   u64be(len) ‖ plaintext ‖ 0x00 × p        (T bytes, T = padme(max(8 + len, 256)))
// nonce_i = u88be(i) ‖ (0x01 on the last chunk, else 0x00), empty AAD.
// A chunk's plaintext counts only after its tag verifies; the header and
// the padding are never returned.

import { chacha20poly1305 } from "@noble/ciphers/chacha.js";
import { osRandom, type Random } from "./bytes.js";
import { TAG_LEN } from "./envelope.js";
import { SealError, invalidPlaintext } from "./errors.js";
import { KEY_LEN } from "./frame.js";
import type { BlobSeal } from "./keys.js";
import { cidForBlob } from "./model.js";
import { MIN_PADDED, padme, type Padding } from "./padme.js";

/** Plaintext bytes per chunk. */
export const CHUNK_SIZE = 64 * 1024;
/** Ciphertext bytes per full chunk. */
export const SEALED_CHUNK_SIZE = CHUNK_SIZE + TAG_LEN;
/** Bytes of the length header. */
export const LEN_HEADER = 8;
/** The largest plaintext a sealed blob may hold. */
export const MAX_BLOB_PLAINTEXT = 50_000_000;

/** A freshly sealed blob: the bytes to upload, and what the record keeps. */
export interface SealedBlob {
  bytes: Uint8Array;
  seal: BlobSeal;
}

/** Length `T` of the stream (header, plaintext, padding). */
export function streamLen(len: number, padding: Padding): number {
  const framed = LEN_HEADER + len;
  return padding === "none" ? framed : padme(Math.max(framed, MIN_PADDED));
}

/** Size of the sealed form of a plaintext of `len` bytes. */
export function sealedLen(len: number, padding: Padding): number {
  const t = streamLen(len, padding);
  return t + Math.ceil(t / CHUNK_SIZE) * TAG_LEN;
}

// The stream length a sealed blob of `size` bytes holds, if a stream can
// have that size (each chunk at least its tag and one byte).
function streamLenOf(size: number): number | undefined {
  const chunks = Math.ceil(size / SEALED_CHUNK_SIZE);
  const t = size - chunks * TAG_LEN;
  return t > Math.max(chunks - 1, 0) * CHUNK_SIZE ? t : undefined;
}

function chunkNonce(counter: number, last: boolean): Uint8Array {
  const nonce = new Uint8Array(12);
  new DataView(nonce.buffer).setBigUint64(3, BigInt(counter), false);
  nonce[11] = last ? 1 : 0;
  return nonce;
}

/** Options of a blob seal. */
export interface BlobSealOptions {
  /** The blob key (default: 32 fresh random bytes; a key must never seal two blobs). */
  key?: Uint8Array;
  /** Default `padme`. */
  padding?: Padding;
  random?: Random;
}

/** Seals `plaintext` under a fresh (or given) key. */
export function sealBlob(plaintext: Uint8Array, options: BlobSealOptions = {}): SealedBlob {
  if (plaintext.length > MAX_BLOB_PLAINTEXT) {
    throw new SealError("Oversize", `blob of ${plaintext.length} bytes is over the limit of ${MAX_BLOB_PLAINTEXT} bytes`);
  }
  const key = options.key ?? (options.random ?? osRandom)(KEY_LEN);
  if (key.length !== KEY_LEN) throw new SealError("Keyring", `a blob key of ${key.length} bytes`);
  const total = streamLen(plaintext.length, options.padding ?? "padme");
  const stream = new Uint8Array(total); // zero-filled: the padding
  new DataView(stream.buffer).setBigUint64(0, BigInt(plaintext.length), false);
  stream.set(plaintext, LEN_HEADER);
  const count = Math.ceil(total / CHUNK_SIZE);
  const bytes = new Uint8Array(total + count * TAG_LEN);
  for (let i = 0; i < count; i++) {
    const chunk = stream.subarray(i * CHUNK_SIZE, Math.min((i + 1) * CHUNK_SIZE, total));
    bytes.set(chacha20poly1305(key, chunkNonce(i, i + 1 === count)).encrypt(chunk), i * SEALED_CHUNK_SIZE);
  }
  return { bytes, seal: { cid: cidForBlob(bytes), size: bytes.length, key } };
}

/**
 * Opens a whole sealed blob held in memory. Size and CID are checked
 * against `seal` first; the plaintext is returned only if every chunk
 * verifies and the padding is all zero.
 */
export function openBlob(bytes: Uint8Array, seal: BlobSeal): Uint8Array {
  if (bytes.length !== seal.size) {
    throw new SealError("BlobSizeMismatch", `blob size mismatch: the record names ${seal.size} bytes, got ${bytes.length}`);
  }
  const actual = cidForBlob(bytes);
  if (!actual.equals(seal.cid)) {
    throw new SealError("BlobCidMismatch", `blob CID mismatch: the record names ${seal.cid}, the bytes hash to ${actual}`);
  }
  if (bytes.length === 0) throw new SealError("Truncated", "truncated blob: the stream ends before chunk 0");
  const count = Math.ceil(bytes.length / SEALED_CHUNK_SIZE);
  const pieces: Uint8Array[] = [];
  let contentLen: number | undefined;
  let offset = 0; // stream bytes before the current chunk
  for (let i = 0; i < count; i++) {
    const last = i + 1 === count;
    const sealed = bytes.subarray(i * SEALED_CHUNK_SIZE, Math.min((i + 1) * SEALED_CHUNK_SIZE, bytes.length));
    if (sealed.length < TAG_LEN) throw new SealError("Truncated", `truncated blob: chunk ${i} is shorter than its tag`);
    const chunk = openChunk(seal.key, i, last, sealed);
    if (chunk.length === 0) throw invalidPlaintext("an empty chunk (a stream holds at least its 8-byte length)");
    const start = offset;
    offset += chunk.length;
    if (contentLen === undefined) {
      if (chunk.length < LEN_HEADER) throw invalidPlaintext("the first chunk is shorter than the 8-byte length");
      const n = new DataView(chunk.buffer, chunk.byteOffset, 8).getBigUint64(0, false);
      const holds = Math.max((streamLenOf(seal.size) ?? 0) - LEN_HEADER, 0);
      // Known from the first chunk: nothing is released.
      if (n > BigInt(holds)) throw new SealError("Truncated", `truncated blob: its length header says ${n} bytes; it holds at most ${holds}`);
      contentLen = Number(n);
    }
    const bodyEnd = LEN_HEADER + contentLen;
    const lo = Math.min(Math.max(start, LEN_HEADER), start + chunk.length);
    const hi = Math.max(Math.min(start + chunk.length, bodyEnd), lo);
    if (chunk.subarray(hi - start).some((b) => b !== 0)) throw invalidPlaintext("blob padding bytes are not all zero");
    pieces.push(chunk.subarray(lo - start, hi - start));
  }
  if (contentLen === undefined || offset < LEN_HEADER + contentLen) {
    throw invalidPlaintext("the blob ends before the length its header gives");
  }
  const out = new Uint8Array(contentLen);
  let at = 0;
  for (const p of pieces) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

function openChunk(key: Uint8Array, counter: number, last: boolean, sealed: Uint8Array): Uint8Array {
  try {
    return chacha20poly1305(key, chunkNonce(counter, last)).decrypt(sealed);
  } catch {
    // A full chunk at the end that verifies only as a middle chunk: the stream was cut after it.
    if (last && sealed.length === SEALED_CHUNK_SIZE) {
      try {
        chacha20poly1305(key, chunkNonce(counter, false)).decrypt(sealed);
        throw new SealError("Truncated", `truncated blob: the stream ends after chunk ${counter}, which is not the last`);
      } catch (e) {
        if (e instanceof SealError) throw e;
      }
    }
    throw new SealError("AuthenticationFailed", "authentication failed: a blob chunk does not verify under this key and context");
  }
}
