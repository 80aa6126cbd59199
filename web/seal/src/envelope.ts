// `chat.gel.assistant.defs#encryptedContent`, parsed with every structural
// check before any cryptography, in the order the Rust reader checks, so a
// malformed envelope fails with the same category on both sides.

import type { BlobBinding } from "./aad.js";
import { SealError, malformed } from "./errors.js";
import { CID, RAW_CODEC, isBlessedCid, isMap, type DataMap, type Value } from "./model.js";

/** The record-seal scheme of version 1. */
export const SEAL_ALG_V1 = "xchacha20poly1305-hkdf-sha256-v1";
/** XChaCha20-Poly1305 nonce length. */
export const NONCE_LEN = 24;
/** Poly1305 tag length. */
export const TAG_LEN = 16;
/** `encryptedContent.ciphertext` maxLength. */
export const MAX_CIPHERTEXT = 1_000_000;
/** `encryptedContent.keyId` maxLength. */
export const MAX_KEY_ID = 128;
/** `encryptedContent.blobs` maxLength. */
export const MAX_BLOBS = 100;
/** The `$type` an envelope may carry (gelstore writes none). */
export const ENCRYPTED_CONTENT_TYPE = "chat.gel.assistant.defs#encryptedContent";
/** MIME type of the encrypted blobs the envelope lists. */
export const SEALED_BLOB_MIME = "application/octet-stream";

/** A parsed envelope. */
export interface Envelope {
  alg: string;
  keyId: string;
  nonce: Uint8Array;
  /** Ciphertext with its 16-byte tag at the end. */
  ciphertext: Uint8Array;
  blobs: BlobBinding[];
  /** Whether it carries `$type` (bound into the AAD). */
  typed: boolean;
}

/** Refuses an alg not on the allow-list. */
export function checkAlg(alg: string): void {
  if (alg !== SEAL_ALG_V1) {
    throw new SealError("UnsupportedAlg", `unsupported alg ${JSON.stringify(alg.slice(0, 128))}: this reader only accepts ${SEAL_ALG_V1}`);
  }
}

const bad = (reason: string) => malformed("encryptedContent", reason);

/** Parses and checks an `encryptedContent` value. */
export function parseEnvelope(value: Value | undefined): Envelope {
  if (!isMap(value)) throw bad("not a map");
  const unknown = Object.keys(value).find((k) => !["alg", "keyId", "nonce", "ciphertext", "blobs", "$type"].includes(k));
  if (unknown !== undefined) throw bad(`unknown field ${JSON.stringify(unknown)}`);
  const alg = need(value, "alg");
  if (typeof alg !== "string") throw bad("alg is not a string");
  checkAlg(alg);
  if ("$type" in value && value.$type !== ENCRYPTED_CONTENT_TYPE) throw bad(`$type is not ${JSON.stringify(ENCRYPTED_CONTENT_TYPE)}`);
  const keyId = need(value, "keyId");
  if (typeof keyId !== "string") throw bad("keyId is not a string");
  const keyIdLen = new TextEncoder().encode(keyId).length;
  if (keyIdLen === 0 || keyIdLen > MAX_KEY_ID) throw bad(`keyId of ${keyIdLen} bytes (must be 1..=${MAX_KEY_ID})`);
  const nonce = need(value, "nonce");
  if (!(nonce instanceof Uint8Array)) throw bad("nonce is not bytes");
  if (nonce.length !== NONCE_LEN) throw new SealError("MalformedNonce", `malformed nonce: ${nonce.length} bytes, expected ${NONCE_LEN}`);
  const ciphertext = need(value, "ciphertext");
  if (!(ciphertext instanceof Uint8Array)) throw bad("ciphertext is not bytes");
  if (ciphertext.length > MAX_CIPHERTEXT) throw new SealError("Oversize", `ciphertext of ${ciphertext.length} bytes is over the limit of ${MAX_CIPHERTEXT} bytes`);
  if (ciphertext.length < TAG_LEN) throw new SealError("Truncated", `truncated ciphertext: ${ciphertext.length} bytes, shorter than the ${TAG_LEN}-byte tag`);
  let blobs: BlobBinding[] = [];
  if ("blobs" in value) {
    const list = value.blobs;
    if (!Array.isArray(list)) throw bad("blobs is not a list");
    if (list.length > MAX_BLOBS) throw bad(`${list.length} blobs, over the limit of ${MAX_BLOBS}`);
    blobs = list.map(parseBlobRef);
  }
  return { alg, keyId, nonce, ciphertext, blobs, typed: "$type" in value };
}

function need(map: DataMap, name: string): Value {
  if (!(name in map)) throw bad(`no ${name}`);
  return map[name]!;
}

function parseBlobRef(value: Value, index: number): BlobBinding {
  const fail = (reason: string) => bad(`blobs[${index}]: ${reason}`);
  if (!isMap(value)) throw fail("not a map");
  if (value.$type !== "blob") throw fail('$type is not "blob"');
  const cid = CID.asCID(value.ref);
  if (!cid) throw fail("ref is not a link");
  if (!isBlessedCid(cid, RAW_CODEC)) throw fail("ref is not a raw sha2-256 CIDv1");
  const mimeType = value.mimeType;
  if (typeof mimeType !== "string" || mimeType === "") throw fail("mimeType is not a non-empty string");
  const size = value.size;
  if (typeof size !== "number" || !Number.isSafeInteger(size) || size < 1) throw fail("size is not an integer ≥ 1");
  if (Object.keys(value).length !== 4) throw fail("unexpected fields in the blob ref");
  return { cid, size, mimeType };
}

/** The envelope's `$type` as the AAD binds it. */
export function envelopeType(env: Envelope): string {
  return env.typed ? ENCRYPTED_CONTENT_TYPE : "";
}

/** The atproto blob ref of an encrypted blob. */
export function blobRef(b: BlobBinding): DataMap {
  return { $type: "blob", ref: b.cid, mimeType: b.mimeType, size: b.size };
}

/** The `encryptedContent` value (`blobs` only when there are some). */
export function envelopeValue(env: Envelope): DataMap {
  const out: DataMap = {};
  if (env.typed) out.$type = ENCRYPTED_CONTENT_TYPE;
  out.alg = env.alg;
  out.keyId = env.keyId;
  out.nonce = env.nonce;
  out.ciphertext = env.ciphertext;
  if (env.blobs.length > 0) out.blobs = env.blobs.map(blobRef);
  return out;
}
