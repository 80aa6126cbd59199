// Loads the golden vectors of fixtures/seal/ (from dist/test/, four levels up is the repository).

import { readFileSync } from "node:fs";

export const FIXTURES = new URL("../../../../fixtures/seal/", import.meta.url);

/** A vector file as parsed JSON. */
export function vector(name: string): Record<string, any> {
  return JSON.parse(readFileSync(new URL(name, FIXTURES), "utf8"));
}

/** A Random that hands out exactly `bytes`, then fails (so drawing more than expected shows). */
export function fixedRandom(...chunks: Uint8Array[]): (n: number) => Uint8Array {
  const all = chunks.flatMap((c) => [...c]);
  return (n) => {
    if (all.length < n) throw new Error("fixedRandom ran out of bytes");
    return Uint8Array.from(all.splice(0, n));
  };
}
