// Record keys for what the page writes: TIDs (53 bits of microseconds since
// the Unix epoch, then a 10-bit clock id, in base32-sortable), increasing
// within this page even if the clock does not move.

const ALPHABET = "234567abcdefghijklmnopqrstuvwxyz";
let last = 0n;
const clockId = BigInt(crypto.getRandomValues(new Uint16Array(1))[0]! & 0x3ff);

export function nextTid(): string {
  let micros = BigInt(Date.now()) * 1000n;
  if (micros <= last) micros = last + 1n;
  last = micros;
  let n = (micros << 10n) | clockId;
  let out = "";
  for (let i = 0; i < 13; i++) {
    out = ALPHABET[Number(n & 31n)] + out;
    n >>= 5n;
  }
  return out;
}
