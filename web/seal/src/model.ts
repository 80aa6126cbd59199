// The atproto data model as this package holds it: plain objects, arrays,
// strings, integers, booleans, null, `Uint8Array` for bytes and
// `multiformats` `CID`s for links. Converts atproto JSON (`$bytes`,
// `$link`) both ways and encodes canonical DAG-CBOR.

import * as dagCbor from "@ipld/dag-cbor";
import { CID } from "multiformats/cid";
import { base64 } from "multiformats/bases/base64";
import * as Digest from "multiformats/hashes/digest";
import { sha256 } from "@noble/hashes/sha2.js";
import { equalBytes } from "./bytes.js";
import { malformed } from "./errors.js";

export { CID };

/** A value of the atproto data model. */
export type Value = null | boolean | number | string | Uint8Array | CID | Value[] | { [key: string]: Value };

/** A data-model map. */
export type DataMap = { [key: string]: Value };

/** Multicodec of raw bytes (blobs). */
export const RAW_CODEC = 0x55;
/** Multicodec of DAG-CBOR (records). */
export const DAG_CBOR_CODEC = 0x71;
/** Multihash code of SHA-256. */
export const SHA2_256 = 0x12;

/** Whether `v` is a data-model map (not bytes, a link, an array or null). */
export function isMap(v: unknown): v is DataMap {
  return typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof Uint8Array) && CID.asCID(v) === null;
}

/** atproto JSON → data model: `{"$bytes"}` to bytes, `{"$link"}` to a CID. */
export function fromJson(json: unknown): Value {
  if (json === null || typeof json === "boolean" || typeof json === "string") return json;
  if (typeof json === "number") {
    if (!Number.isSafeInteger(json)) throw malformed("record", "a number that is not a safe integer");
    return json;
  }
  if (Array.isArray(json)) return json.map(fromJson);
  if (typeof json === "object") {
    const obj = json as Record<string, unknown>;
    const keys = Object.keys(obj);
    if (keys.length === 1 && keys[0] === "$bytes" && typeof obj.$bytes === "string") {
      return decodeBase64(obj.$bytes.replace(/=+$/, ""));
    }
    if (keys.length === 1 && keys[0] === "$link" && typeof obj.$link === "string") {
      return CID.parse(obj.$link);
    }
    const out: DataMap = {};
    for (const k of keys) out[k] = fromJson(obj[k]);
    return out;
  }
  throw malformed("record", `a ${typeof json} is not in the data model`);
}

const BASE64 = /^[A-Za-z0-9+/]*$/;
const BASE64_DIGITS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// Unpadded standard base64, refused as multiformats' decoder refuses it
// (a stray character, a dangling digit, unused bits that are not zero),
// decoded by the platform's atob: multiformats' decoder is about ten times
// slower, and every ciphertext of a thread passes through here.
function decodeBase64(s: string): Uint8Array {
  const rest = s.length % 4;
  const last = rest === 0 ? 0 : BASE64_DIGITS.indexOf(s[s.length - 1]!);
  if (!BASE64.test(s) || rest === 1 || (rest === 2 && (last & 0x0f) !== 0) || (rest === 3 && (last & 0x03) !== 0)) {
    throw malformed("record", "a $bytes value that is not unpadded standard base64");
  }
  const binary = atob(s);
  const out = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
  return out;
}

/** Data model → atproto JSON. */
export function toJson(v: Value): unknown {
  if (v instanceof Uint8Array) return { $bytes: base64.baseEncode(v) };
  const cid = CID.asCID(v);
  if (cid) return { $link: cid.toString() };
  if (Array.isArray(v)) return v.map(toJson);
  if (isMap(v)) {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) out[k] = toJson(x);
    return out;
  }
  return v;
}

/** Canonical DAG-CBOR of `v` (map keys by length, then bytewise). */
export function encodeCbor(v: Value): Uint8Array {
  return dagCbor.encode(v);
}

/**
 * Decodes DAG-CBOR and refuses any encoding that is not the canonical one
 * (the Rust reader is strict, so both must refuse the same bytes).
 */
export function decodeCbor(bytes: Uint8Array): Value {
  let value: Value;
  try {
    value = dagCbor.decode(bytes) as Value;
  } catch (e) {
    throw new Error(`not DAG-CBOR: ${(e as Error).message}`);
  }
  if (!equalBytes(dagCbor.encode(value), bytes)) throw new Error("not canonical DAG-CBOR");
  return value;
}

/** CIDv1 (raw, sha2-256) of blob bytes. */
export function cidForBlob(bytes: Uint8Array): CID {
  return CID.createV1(RAW_CODEC, Digest.create(SHA2_256, sha256(bytes)));
}

/** CIDv1 (dag-cbor, sha2-256) of a record. */
export function cidForRecord(v: Value): CID {
  return CID.createV1(DAG_CBOR_CODEC, Digest.create(SHA2_256, sha256(encodeCbor(v))));
}

/** Whether `cid` is a CIDv1 with a 32-byte SHA-256 digest and codec `codec`. */
export function isBlessedCid(cid: CID, codec: number): boolean {
  return cid.version === 1 && cid.code === codec && cid.multihash.code === SHA2_256 && cid.multihash.size === 32;
}
