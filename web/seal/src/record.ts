// Sealing and opening a record's sealed field:
//   recordKey = HKDF-SHA256(salt "", chat key, lp(label) ‖ lp(alg) ‖ lp(keyId))
//   ciphertext = XChaCha20-Poly1305(recordKey, 24 random bytes, frame, AAD)
// Opening checks structure first, then the key, then the tag, then the frame.

import { xchacha20poly1305 } from "@noble/ciphers/chacha.js";
import { hkdf } from "@noble/hashes/hkdf.js";
import { sha256 } from "@noble/hashes/sha2.js";
import { AUTHENTICATOR_FIELD, clearFieldsHash, recordAad, sealedField, sealedFields, type AadContext, type BlobBinding, type Place } from "./aad.js";
import { concat, field, osRandom, type Random } from "./bytes.js";
import { MAX_BLOBS, MAX_CIPHERTEXT, NONCE_LEN, SEALED_BLOB_MIME, SEAL_ALG_V1, TAG_LEN, checkAlg, envelopeType, envelopeValue, parseEnvelope, type Envelope } from "./envelope.js";
import { SealError, invalidPlaintext, malformed } from "./errors.js";
import { decodeFrame, encodeFrame, unpaddedLen } from "./frame.js";
import type { BlobSeal, ChatKey, KeyLookup } from "./keys.js";
import { decodeCbor, encodeCbor, isMap, type DataMap, type Value } from "./model.js";
import type { Padding } from "./padme.js";

/** HKDF info label of the record key. */
export const RECORD_KEY_LABEL = "gelstore/seal/record-key/v1";
/** The largest frame whose ciphertext fits the lexicon limit. */
export const MAX_FRAME = MAX_CIPHERTEXT - TAG_LEN;

/** The record key derived from a chat key. */
export function recordKey(chatSecret: Uint8Array, alg: string, keyId: string): Uint8Array {
  return hkdf(sha256, chatSecret, undefined, concat(field(RECORD_KEY_LABEL), field(alg), field(keyId)), 32);
}

// Derived keys by chat secret, then alg and keyId: one HKDF per chat key
// instead of one per record (a thread of a thousand records spent more
// time here than in the AEAD). Keyed weakly, so a dropped keyring takes
// its derived keys with it.
const derived = new WeakMap<Uint8Array, Map<string, Uint8Array>>();

function cachedRecordKey(key: ChatKey, alg: string): Uint8Array {
  let byName = derived.get(key.secret);
  if (!byName) derived.set(key.secret, (byName = new Map()));
  const name = `${alg}\n${key.keyId}`;
  let k = byName.get(name);
  if (!k) byName.set(name, (k = recordKey(key.secret, alg, key.keyId)));
  return k;
}

/** What opening gives back. */
export interface Opened {
  /** The field that opened (`content`, `authenticator` or `sealed`). */
  field: string;
  /** The sealed content (the empty map for an authenticator). */
  content: DataMap;
  /** Each blob of the envelope with its key, in order. */
  blobs: BlobSeal[];
}

/** Options of a seal. */
export interface SealOptions {
  /** Padding of the frame (default `padme`; an authenticator is never padded). */
  padding?: Padding;
  /** Where the nonce comes from (default: the platform's CSPRNG). */
  random?: Random;
}

function recordParts(record: Value): { map: DataMap; recordType: string } {
  if (!isMap(record)) throw malformed("record", "not a map");
  const t = record.$type;
  if (t === undefined) throw malformed("record", "no $type");
  if (typeof t !== "string" || t === "") throw malformed("record", "$type is not a string");
  return { map: record, recordType: t };
}

// Two sealed fields at once is malformed: which one counts would be the PDS's choice.
function presentFields(map: DataMap, recordType: string): string[] {
  const present = sealedFields(recordType).filter((f) => f in map);
  if (present.length > 1) throw malformed("record", `both ${JSON.stringify(present[0])} and ${JSON.stringify(present[1])}: a message has one`);
  return present;
}

/**
 * Seals `content` into `record`'s sealed field and returns the record with
 * the envelope in place. A message carrying an `authenticator` placeholder
 * has that sealed instead (content must then be `{}`, with no blobs).
 */
export function sealRecord(record: Value, place: Place, content: Value, blobs: readonly BlobSeal[], key: ChatKey, options: SealOptions = {}): DataMap {
  const { map, recordType } = recordParts(record);
  const main = sealedField(recordType);
  if (!main) throw new SealError("NotSealable", `records of type ${JSON.stringify(recordType)} have no sealed field`);
  const present = presentFields(map, recordType);
  const fieldName = present.length === 1 && present[0] === AUTHENTICATOR_FIELD ? AUTHENTICATOR_FIELD : main;
  if (!isMap(content)) throw invalidPlaintext("the sealed content must be a map");
  if (fieldName === AUTHENTICATOR_FIELD && (Object.keys(content).length > 0 || blobs.length > 0)) {
    throw invalidPlaintext("an authenticator seals the empty map and no blobs");
  }
  if (blobs.length > MAX_BLOBS) throw new SealError("Oversize", `blob list of ${blobs.length} entries is over the limit of ${MAX_BLOBS}`);
  const contentBytes = encodeCbor(content);
  const unpadded = unpaddedLen(contentBytes.length, blobs.length);
  if (unpadded > MAX_FRAME) {
    throw new SealError("Oversize", `sealed ciphertext of ${unpadded + TAG_LEN} bytes is over the limit of ${MAX_CIPHERTEXT} bytes; store large content as a sealed blob`);
  }
  const ctx: AadContext = { place, recordType, field: fieldName, clearHash: clearFieldsHash(map, fieldName) };
  const bindings: BlobBinding[] = blobs.map((b) => ({ cid: b.cid, size: b.size, mimeType: SEALED_BLOB_MIME }));
  // An authenticator's plaintext is always the same: padding would hide nothing.
  const padding = fieldName === AUTHENTICATOR_FIELD ? "none" : (options.padding ?? "padme");
  const frame = encodeFrame(contentBytes, blobs.map((b) => b.key), padding, MAX_FRAME);
  const nonce = (options.random ?? osRandom)(NONCE_LEN);
  // gelstore writes no envelope `$type` (the field's lexicon type says it).
  const aad = recordAad(SEAL_ALG_V1, key.keyId, nonce, "", ctx, bindings);
  const ciphertext = xchacha20poly1305(cachedRecordKey(key, SEAL_ALG_V1), nonce, aad).encrypt(frame);
  const envelope: Envelope = { alg: SEAL_ALG_V1, keyId: key.keyId, nonce, ciphertext, blobs: bindings, typed: false };
  return { ...map, [fieldName]: envelopeValue(envelope) };
}

/** Opens `record`'s sealed field with a key from `keys`. Nothing of the plaintext is returned on any failure. */
export function openRecord(record: Value, place: Place, keys: KeyLookup): Opened {
  const { map, recordType } = recordParts(record);
  const main = sealedField(recordType);
  if (!main) throw new SealError("NotSealable", `records of type ${JSON.stringify(recordType)} have no sealed field`);
  const present = presentFields(map, recordType);
  if (present.length !== 1) throw malformed("record", `no sealed field ${JSON.stringify(main)}`);
  const fieldName = present[0]!;
  const env = parseEnvelope(map[fieldName]);
  if (fieldName === AUTHENTICATOR_FIELD && env.blobs.length > 0) throw malformed("record", "an authenticator lists no blobs");
  const key = keys.chatKey(env.keyId);
  if (!key || key.keyId !== env.keyId) {
    throw new SealError("UnknownKey", `unknown key ${JSON.stringify(env.keyId)}: this keyring holds no key with that keyId`);
  }
  checkAlg(env.alg);
  const ctx: AadContext = { place, recordType, field: fieldName, clearHash: clearFieldsHash(map, fieldName) };
  const aad = recordAad(env.alg, env.keyId, env.nonce, envelopeType(env), ctx, env.blobs);
  let frame: Uint8Array;
  try {
    frame = xchacha20poly1305(cachedRecordKey(key, env.alg), env.nonce, aad).decrypt(env.ciphertext);
  } catch {
    throw new SealError("AuthenticationFailed", "authentication failed: the sealed record does not verify under this key and context");
  }
  const { content: contentBytes, blobKeys } = decodeFrame(frame, env.blobs.length);
  let content: Value;
  try {
    content = decodeCbor(contentBytes);
  } catch (e) {
    throw invalidPlaintext(`content is not DAG-CBOR: ${(e as Error).message}`);
  }
  if (!isMap(content)) throw invalidPlaintext("the sealed content is not a map");
  if (fieldName === AUTHENTICATOR_FIELD && Object.keys(content).length > 0) {
    throw invalidPlaintext("an authenticator holds something other than the empty map");
  }
  const blobs = env.blobs.map((b, i) => ({ cid: b.cid, size: b.size, key: blobKeys[i]! }));
  return { field: fieldName, content, blobs };
}
