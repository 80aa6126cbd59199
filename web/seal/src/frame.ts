// The plaintext a record seal encrypts:
//   u32be(len C) ‖ C ‖ blob key 1 ‖ … ‖ blob key n ‖ 0x00 × p
// The blob keys ride inside the ciphertext; the envelope's blob count says
// how many there are, so the frame needs no other length.

import { concat, u32be } from "./bytes.js";
import { invalidPlaintext } from "./errors.js";
import { paddedLen, type Padding } from "./padme.js";

/** Length of every blob key. */
export const KEY_LEN = 32;

/** Length of a frame before padding. */
export function unpaddedLen(contentLen: number, blobs: number): number {
  return 4 + contentLen + blobs * KEY_LEN;
}

/** Builds the frame; the caller has checked that the unpadded frame fits `max`. */
export function encodeFrame(content: Uint8Array, blobKeys: readonly Uint8Array[], padding: Padding, max: number): Uint8Array {
  const len = unpaddedLen(content.length, blobKeys.length);
  const out = new Uint8Array(paddedLen(len, padding, max)); // zero-filled: the padding
  out.set(concat(u32be(content.length), content, ...blobKeys));
  return out;
}

/** Splits a frame into its content and `blobs` blob keys; every padding byte must be zero. */
export function decodeFrame(frame: Uint8Array, blobs: number): { content: Uint8Array; blobKeys: Uint8Array[] } {
  if (frame.length < 4) throw invalidPlaintext(`frame of ${frame.length} bytes is shorter than its 4-byte length`);
  const clen = new DataView(frame.buffer, frame.byteOffset, 4).getUint32(0, false);
  const rest = frame.subarray(4);
  const needed = clen + blobs * KEY_LEN;
  if (needed > rest.length) {
    throw invalidPlaintext(`frame says ${clen} content bytes and has ${blobs} blob keys, which does not fit in ${rest.length} bytes`);
  }
  if (rest.subarray(needed).some((b) => b !== 0)) throw invalidPlaintext("padding bytes are not all zero");
  const blobKeys: Uint8Array[] = [];
  for (let i = 0; i < blobs; i++) blobKeys.push(rest.slice(clen + i * KEY_LEN, clen + (i + 1) * KEY_LEN));
  return { content: rest.subarray(0, clen), blobKeys };
}
