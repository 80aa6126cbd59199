// Byte helpers shared by every layout: the length-prefixed fields that the
// AAD, the HKDF infos and the HPKE infos are made of.

import { concatBytes, utf8ToBytes } from "@noble/hashes/utils.js";

export { bytesToHex as toHex, hexToBytes as fromHex, concatBytes as concat } from "@noble/hashes/utils.js";

/** UTF-8 bytes of `s`. */
export const utf8 = (s: string): Uint8Array => utf8ToBytes(s);

/** `n` as a 4-byte big-endian unsigned integer. */
export function u32be(n: number): Uint8Array {
  const out = new Uint8Array(4);
  new DataView(out.buffer).setUint32(0, n >>> 0, false);
  return out;
}

/** `n` as an 8-byte big-endian unsigned integer. */
export function u64be(n: number | bigint): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, BigInt(n), false);
  return out;
}

/** `lp(x)`: the length of `x` as u32be, then `x` (strings as UTF-8). */
export function field(x: Uint8Array | string): Uint8Array {
  const bytes = typeof x === "string" ? utf8(x) : x;
  return concatBytes(u32be(bytes.length), bytes);
}

/** Whether two byte strings are equal (constant time in their length). */
export function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}

/** Bytewise order, as Rust sorts `Vec<u8>` (and CIDs by their bytes). */
export function compareBytes(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    if (a[i] !== b[i]) return a[i]! - b[i]!;
  }
  return a.length - b.length;
}

/** A source of random bytes; tests inject a fixed one to replay vectors. */
export type Random = (n: number) => Uint8Array;

/** The platform's CSPRNG (WebCrypto, in Node and in browsers). */
export const osRandom: Random = (n) => crypto.getRandomValues(new Uint8Array(n));
