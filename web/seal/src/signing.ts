// Membership signing keys: each device's P-256 key, derived from its X25519
// secret (one secret file), published as a did:key; ECDSA over SHA-256,
// compact r ‖ s with low S, as atproto signs.

import { p256 } from "@noble/curves/nist.js";
import { secp256k1 } from "@noble/curves/secp256k1.js";
import { hkdf } from "@noble/hashes/hkdf.js";
import { hmac } from "@noble/hashes/hmac.js";
import { sha256 } from "@noble/hashes/sha2.js";
import { base58btc } from "multiformats/bases/base58";
import { concat, utf8 } from "./bytes.js";

/** HKDF salt of the signing key. */
export const SIGNING_KEY_LABEL = "gelstore/device-signing-key/v1";
const P256_PREFIX = Uint8Array.of(0x80, 0x24); // multicodec p256-pub, varint
const K256_PREFIX = Uint8Array.of(0xe7, 0x01); // multicodec secp256k1-pub, varint

/**
 * The device's P-256 signing scalar: HKDF-SHA256(salt = label, IKM = the
 * X25519 secret, info = one counter byte), the first output that is a valid
 * scalar (zero or ≥ n has a chance of about 2^-32 per try).
 */
export function deviceSigningKey(x25519Secret: Uint8Array): Uint8Array {
  for (let counter = 0; counter < 256; counter++) {
    const seed = hkdf(sha256, x25519Secret, utf8(SIGNING_KEY_LABEL), Uint8Array.of(counter), 32);
    if (p256.utils.isValidSecretKey(seed)) return seed;
  }
  throw new Error("256 HKDF outputs were all invalid P-256 scalars");
}

/** The did:key of a P-256 signing scalar (compressed point). */
export function signingDidKey(signingKey: Uint8Array): string {
  return `did:key:${base58btc.encode(concat(P256_PREFIX, p256.getPublicKey(signingKey, true)))}`;
}

/** Signs SHA-256(message): 64 bytes r ‖ s, low S, deterministic (RFC 6979). */
export function sign(signingKey: Uint8Array, message: Uint8Array): Uint8Array {
  return p256.sign(message, signingKey, { prehash: true, lowS: true });
}

/** Verifies a compact low-S signature by the did:key `didKey` (P-256 or secp256k1, the curves atproto allows). */
export function verify(didKey: string, message: Uint8Array, sig: Uint8Array): boolean {
  if (!didKey.startsWith("did:key:z") || sig.length !== 64) return false;
  let raw: Uint8Array;
  try {
    raw = base58btc.decode(didKey.slice("did:key:".length));
  } catch {
    return false;
  }
  const prefix = raw.subarray(0, 2);
  const curve = prefix[0] === P256_PREFIX[0] && prefix[1] === P256_PREFIX[1] ? p256 : prefix[0] === K256_PREFIX[0] && prefix[1] === K256_PREFIX[1] ? secp256k1 : undefined;
  if (!curve) return false;
  try {
    return curve.verify(sig, message, raw.subarray(2), { prehash: true, lowS: true, format: "compact" });
  } catch {
    return false;
  }
}

/**
 * The proof a new device publishes beside its signing key: HMAC-SHA256 of
 * the did:key under SHA-256(label ‖ 0 ‖ device public key ‖ pairing secret),
 * which only the device and whoever reads its pairing code can make.
 */
export function signingKeyProof(pairingSecret: Uint8Array, devicePublic: Uint8Array, didKey: string): Uint8Array {
  const key = sha256(concat(utf8("gelstore/signing-key-proof/v1\0"), devicePublic, pairingSecret));
  return hmac(sha256, key, utf8(didKey));
}
