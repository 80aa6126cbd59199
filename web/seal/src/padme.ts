// Padmé (Nikitin et al., PURBs, 2019): rounds a length up so that only
// about log log of it shows. Records and blobs are both padded with it.

/** Frames and blob streams shorter than this are padded up to it. */
export const MIN_PADDED = 256;

/** How much padding to add. */
export type Padding = "none" | "padme";

/** Padmé of `len`: only the top floor(log2 E) + 1 bits of it vary, E = floor(log2 len). */
export function padme(len: number): number {
  if (len < 2) return len;
  let e = 0;
  while (2 ** (e + 1) <= len) e++; // floor(log2 len), exact for any safe integer
  const s = 32 - Math.clz32(e); // floor(log2 e) + 1
  const step = 2 ** (e - s);
  return Math.ceil(len / step) * step;
}

/** The padded length of a frame of `len` bytes, at most `max` (and never below `len`). */
export function paddedLen(len: number, padding: Padding, max: number): number {
  if (padding === "none") return len;
  return Math.max(Math.min(padme(Math.max(len, MIN_PADDED)), max), len);
}
