// Key wraps (`chat.gel.assistant.keyWrap`): one 32-byte secret sealed with
// HPKE (RFC 9180) mode_psk, DHKEM(X25519, HKDF-SHA256) / HKDF-SHA256 /
// ChaCha20-Poly1305, single shot. The PSK (a pairing secret or an account
// key) is what a PDS lacks, so it cannot plant a wrap a device accepts.

import { Chacha20Poly1305 } from "@hpke/chacha20poly1305";
import { CipherSuite, HkdfSha256 } from "@hpke/core";
import { DhkemX25519HkdfSha256 } from "@hpke/dhkem-x25519";
import { hkdf } from "@noble/hashes/hkdf.js";
import { sha256 } from "@noble/hashes/sha2.js";
import { x25519 } from "@noble/curves/ed25519.js";
import { concat, field, osRandom, u64be, utf8, type Random } from "./bytes.js";
import { SealError, invalidPlaintext, malformed } from "./errors.js";
import { KEY_LEN } from "./frame.js";
import { isMap, type CID, type DataMap, type Value } from "./model.js";

/** The wrap scheme of version 1. */
export const WRAP_ALG_V1 = "hpke-x25519-hkdf-sha256-chacha20poly1305-v1";
/** `$type` (and collection) of key wrap records. */
export const KEY_WRAP_TYPE = "chat.gel.assistant.keyWrap";
export const ACCOUNT_PSK_LABEL = "gelstore/wrap/account-psk/v1";
export const PAIRING_PSK_LABEL = "gelstore/wrap/pairing-psk/v1";
export const PAIRING_PSK_ID = "gelstore/wrap/pairing/v1";
export const WRAP_INFO_LABEL = "gelstore/wrap/v1";
export const WRAP_AAD_LABEL = "gelstore/wrap/aad/v1";
const ENC_LEN = 32;
const WRAPPED_LEN = KEY_LEN + 16;

/** Whom a wrap is for: a device (by its record key) or one epoch of the account key. */
export type Recipient = { kind: "device"; device: string } | { kind: "account"; keyId: string; epoch: number };

/** A `chat.gel.assistant.keyWrap` record. */
export interface KeyWrap {
  keyId: string;
  epoch: number;
  alg: string;
  recipient: Recipient;
  /** HPKE encapsulated key (32 bytes). */
  enc: Uint8Array;
  /** The wrapped secret and its tag (48 bytes). */
  ciphertext: Uint8Array;
  createdAt: string;
}

/** An HPKE PSK and its id. */
export interface Psk {
  key: Uint8Array;
  id: Uint8Array;
}

/** The PSK that proves possession of account key `keyId` (its 32 secret bytes). */
export function accountPsk(secret: Uint8Array, keyId: string): Psk {
  return { key: hkdf(sha256, secret, undefined, utf8(ACCOUNT_PSK_LABEL), 32), id: utf8(`gelstore/wrap/account/${keyId}`) };
}

/** The PSK of a pairing, from the code's secret and the new device's public key. */
export function pairingPsk(secret: Uint8Array, devicePublic: Uint8Array): Psk {
  return { key: hkdf(sha256, secret, devicePublic, utf8(PAIRING_PSK_LABEL), 32), id: utf8(PAIRING_PSK_ID) };
}

/** The HPKE aad: `createdAt`, and for a pairing wrap the CID of the change that admits the device. */
export function wrapAad(createdAt: string, change?: CID): Uint8Array {
  return concat(field(WRAP_AAD_LABEL), field(createdAt), field(change ? change.bytes : new Uint8Array()));
}

/** The HPKE info of a wrap. */
export function wrapInfo(did: string, alg: string, keyId: string, epoch: number, recipient: Recipient): Uint8Array {
  const to =
    recipient.kind === "device"
      ? concat(field("device"), field(recipient.device))
      : concat(field("account"), field(recipient.keyId), u64be(recipient.epoch));
  return concat(field(WRAP_INFO_LABEL), field(alg), field(did), field(keyId), u64be(epoch), to);
}

const suite = new CipherSuite({ kem: new DhkemX25519HkdfSha256(), kdf: new HkdfSha256(), aead: new Chacha20Poly1305() });

/** The X25519 public key of a secret (clamped as X25519 does). */
export function x25519Public(secret: Uint8Array): Uint8Array {
  return x25519.getPublicKey(secret);
}

/**
 * RFC 9180 DeriveKeyPair for DHKEM(X25519, HKDF-SHA256), with the secret
 * returned clamped as the Rust `derive_x25519_keypair` returns it (the key
 * wrap vector derives its account key so, and its PSK hashes those bytes).
 * Keys made at random are used as drawn, unclamped, on both sides.
 */
export async function deriveX25519KeyPair(ikm: Uint8Array): Promise<{ secret: Uint8Array; publicKey: Uint8Array }> {
  const pair = await suite.kem.deriveKeyPair(ikm);
  const secret = new Uint8Array(await suite.kem.serializePrivateKey(pair.privateKey));
  // RFC 7748 clamping; X25519 applies it anyway, so the key pair is the same.
  secret[0]! &= 248;
  secret[31]! &= 127;
  secret[31]! |= 64;
  return { secret, publicKey: new Uint8Array(await suite.kem.serializePublicKey(pair.publicKey)) };
}

/** What a wrap seals. */
export interface WrapInput {
  did: string;
  keyId: string;
  epoch: number;
  recipient: Recipient;
  recipientPublic: Uint8Array;
  psk: Psk;
  secret: Uint8Array;
  createdAt: string;
  /** The membership change a pairing wrap admits the device by. */
  change?: CID;
  /** The ephemeral key's IKM (32 bytes; default random): tests replay vectors with it. */
  ikmE?: Uint8Array;
  random?: Random;
}

/** Wraps `secret` to `recipientPublic`. */
export async function sealWrap(input: WrapInput): Promise<KeyWrap> {
  const info = wrapInfo(input.did, WRAP_ALG_V1, input.keyId, input.epoch, input.recipient);
  let recipientPublicKey: CryptoKey;
  try {
    recipientPublicKey = await suite.kem.deserializePublicKey(input.recipientPublic);
  } catch {
    throw new SealError("Keyring", "recipient public key is not a valid X25519 key");
  }
  const ekm = input.ikmE ?? (input.random ?? osRandom)(32);
  const { ct, enc } = await suite.seal(
    { recipientPublicKey, info, psk: { key: input.psk.key, id: input.psk.id }, ekm },
    input.secret,
    wrapAad(input.createdAt, input.change),
  );
  return {
    keyId: input.keyId,
    epoch: input.epoch,
    alg: WRAP_ALG_V1,
    recipient: input.recipient,
    enc: new Uint8Array(enc),
    ciphertext: new Uint8Array(ct),
    createdAt: input.createdAt,
  };
}

/** Structural checks: alg, sizes of `enc` and `ciphertext`, keyId length. */
export function checkWrap(w: KeyWrap): void {
  if (w.alg !== WRAP_ALG_V1) throw new SealError("UnsupportedAlg", `unsupported alg ${JSON.stringify(w.alg.slice(0, 128))}: this reader only accepts ${WRAP_ALG_V1}`);
  if (w.enc.length !== ENC_LEN) throw malformed("keyWrap", `enc of ${w.enc.length} bytes, expected ${ENC_LEN}`);
  if (w.ciphertext.length < WRAPPED_LEN) throw new SealError("Truncated", `truncated keyWrap ciphertext: ${w.ciphertext.length} bytes, expected ${WRAPPED_LEN}`);
  if (w.ciphertext.length > WRAPPED_LEN) throw new SealError("Oversize", `keyWrap ciphertext of ${w.ciphertext.length} bytes is over the limit of ${WRAPPED_LEN} bytes`);
  const n = utf8(w.keyId).length;
  if (n === 0 || n > 128) throw malformed("keyWrap", "keyId must be 1..=128 bytes");
}

/** Opens a wrap with the recipient's secret and the PSK (and a pairing wrap's change). */
export async function openWrap(did: string, w: KeyWrap, recipientSecret: Uint8Array, psk: Psk, change?: CID): Promise<Uint8Array> {
  checkWrap(w);
  const info = wrapInfo(did, w.alg, w.keyId, w.epoch, w.recipient);
  let recipientKey: CryptoKey;
  try {
    recipientKey = await suite.kem.deserializePrivateKey(recipientSecret);
  } catch {
    throw new SealError("Keyring", "invalid X25519 secret");
  }
  let plain: Uint8Array;
  try {
    plain = new Uint8Array(await suite.open({ recipientKey, enc: w.enc, info, psk: { key: psk.key, id: psk.id } }, w.ciphertext, wrapAad(w.createdAt, change)));
  } catch {
    throw new SealError("AuthenticationFailed", "authentication failed: the key wrap does not verify under this key and context");
  }
  if (plain.length !== KEY_LEN) throw invalidPlaintext(`a wrapped key of ${plain.length} bytes`);
  return plain;
}

/** The record of a wrap (with `$type`). */
export function keyWrapValue(w: KeyWrap): DataMap {
  const recipient: DataMap =
    w.recipient.kind === "device"
      ? { $type: `${KEY_WRAP_TYPE}#deviceRecipient`, device: w.recipient.device }
      : { $type: `${KEY_WRAP_TYPE}#accountRecipient`, keyId: w.recipient.keyId, epoch: w.recipient.epoch };
  return { $type: KEY_WRAP_TYPE, keyId: w.keyId, epoch: w.epoch, alg: w.alg, recipient, enc: w.enc, ciphertext: w.ciphertext, createdAt: w.createdAt };
}

/** Parses a key wrap record (structure only; see {@link checkWrap}). */
export function parseKeyWrap(value: Value): KeyWrap {
  const bad = (reason: string) => malformed("keyWrap", reason);
  if (!isMap(value)) throw bad("not a map");
  const str = (m: DataMap, name: string, label = name): string => {
    const v = m[name];
    if (typeof v !== "string") throw bad(`${label} is not a string`);
    return v;
  };
  const bytes = (name: string): Uint8Array => {
    const v = value[name];
    if (!(v instanceof Uint8Array)) throw bad(`${name} is not bytes`);
    return v;
  };
  const epochOf = (v: Value | undefined, name: string): number => {
    if (typeof v !== "number" || !Number.isSafeInteger(v)) throw bad(`${name} is not an integer`);
    if (v < 0) throw bad(`${name} < 0`);
    return v;
  };
  if (value.$type !== KEY_WRAP_TYPE) throw bad(`$type is not ${JSON.stringify(KEY_WRAP_TYPE)}`);
  const r = value.recipient;
  if (!isMap(r)) throw bad("recipient is not a map");
  let recipient: Recipient;
  if (r.$type === `${KEY_WRAP_TYPE}#deviceRecipient`) {
    recipient = { kind: "device", device: str(r, "device", "recipient.device") };
  } else if (r.$type === `${KEY_WRAP_TYPE}#accountRecipient`) {
    recipient = { kind: "account", keyId: str(r, "keyId", "recipient.keyId"), epoch: epochOf(r.epoch, "recipient.epoch") };
  } else {
    throw bad("recipient has an unknown $type");
  }
  return {
    keyId: str(value, "keyId"),
    epoch: epochOf(value.epoch, "epoch"),
    alg: str(value, "alg"),
    recipient,
    enc: bytes("enc"),
    ciphertext: bytes("ciphertext"),
    createdAt: str(value, "createdAt"),
  };
}
