// The new device's side of pairing: its X25519 key, the pairing code it
// shows (public key and a 10-byte one-time secret), its `device` record
// with the signing key and the proof made with that secret.

import { base32 } from "multiformats/bases/base32";
import { sha256 } from "@noble/hashes/sha2.js";
import { concat, equalBytes, osRandom, type Random } from "./bytes.js";
import { SealError } from "./errors.js";
import { KEY_LEN } from "./frame.js";
import type { DataMap } from "./model.js";
import { deviceSigningKey, signingDidKey, signingKeyProof } from "./signing.js";
import { x25519Public } from "./wrap.js";

/** Bytes of secret in a pairing code. */
export const PAIRING_SECRET_LEN = 10;
/** Prefix of a pairing code's text form. */
export const PAIRING_CODE_PREFIX = "gp1";
/** `$type` (and collection) of device records. */
export const DEVICE_TYPE = "chat.gel.assistant.device";

/** What a new device shows so an admitted device can approve it. */
export interface PairingCode {
  publicKey: Uint8Array;
  secret: Uint8Array;
}

function checksum(code: PairingCode): Uint8Array {
  return sha256(concat(code.publicKey, code.secret)).subarray(0, 2);
}

/**
 * `gp1-` then base32 (RFC 4648, lower case, no padding) of
 * `public key ‖ secret ‖ SHA-256(public key ‖ secret)[0..2]`, in groups of four.
 */
export function formatPairingCode(code: PairingCode): string {
  const text = base32.baseEncode(concat(code.publicKey, code.secret, checksum(code)));
  return [PAIRING_CODE_PREFIX, ...(text.match(/.{1,4}/g) ?? [])].join("-");
}

/** Parses a pairing code, ignoring case, spaces and dashes. */
export function parsePairingCode(text: string): PairingCode {
  const bad = (reason: string) => new SealError("InvalidPairingCode", `invalid pairing code: ${reason}`);
  const cleaned = text.replace(/[\s-]/g, "").toLowerCase();
  if (!cleaned.startsWith(PAIRING_CODE_PREFIX)) throw bad("it does not start with gp1-");
  let raw: Uint8Array;
  try {
    raw = base32.baseDecode(cleaned.slice(PAIRING_CODE_PREFIX.length));
  } catch {
    throw bad("it is not base32 (letters a-z and digits 2-7)");
  }
  if (raw.length !== KEY_LEN + PAIRING_SECRET_LEN + 2) throw bad("it has the wrong length; was a character lost?");
  const code = { publicKey: raw.slice(0, KEY_LEN), secret: raw.slice(KEY_LEN, KEY_LEN + PAIRING_SECRET_LEN) };
  if (!equalBytes(checksum(code), raw.subarray(KEY_LEN + PAIRING_SECRET_LEN))) throw bad("the checksum does not match; check for a typo");
  return code;
}

/** A new device: its X25519 secret (keep it private) and what it publishes. */
export interface NewDevice {
  /** The X25519 secret; never leaves the device. */
  secret: Uint8Array;
  publicKey: Uint8Array;
  /** The pairing code (keep it: its secret re-opens the pairing wrap at every rebuild). */
  code: PairingCode;
  /** The membership signing key's did:key. */
  signingKey: string;
}

/** Starts pairing on a new device: a device key (given or fresh) and a fresh pairing secret. */
export function pairRequest(options: { deviceSecret?: Uint8Array; random?: Random } = {}): NewDevice {
  const random = options.random ?? osRandom;
  const secret = options.deviceSecret ?? random(KEY_LEN);
  const publicKey = x25519Public(secret);
  const code = { publicKey, secret: random(PAIRING_SECRET_LEN) };
  return { secret, publicKey, code, signingKey: signingDidKey(deviceSigningKey(secret)) };
}

/** The `chat.gel.assistant.device` record the new device writes (its rkey is its device id). */
export function deviceRecord(device: NewDevice, createdAt: string, name?: string): DataMap {
  const out: DataMap = {
    $type: DEVICE_TYPE,
    publicKey: device.publicKey,
    signingKey: device.signingKey,
    signingKeyProof: signingKeyProof(device.code.secret, device.publicKey, device.signingKey),
    createdAt,
  };
  if (name !== undefined) out.name = name;
  return out;
}
