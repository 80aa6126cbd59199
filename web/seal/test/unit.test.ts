// The pieces on their own: Padmé, the frame, pairing codes, and the named
// errors of records and blobs (the same categories as the Rust SealError).

import assert from "node:assert/strict";
import { test } from "node:test";
import {
  SealError, cidForBlob, decodeFrame, fromJson, toJson, encodeFrame, formatPairingCode, keyList, openBlob, openRecord, padme, paddedLen,
  pairRequest, parsePairingCode, sealBlob, sealRecord, SEALED_CHUNK_SIZE, sealedLen, type DataMap,
} from "../src/index.js";
import { fixedRandom } from "./fixtures.js";

const kindOf = (kind: string) => (e: unknown) => e instanceof SealError && e.kind === kind;

test("padme matches the values worked by hand in crates/seal/src/frame.rs", () => {
  const cases: [number, number][] = [[0, 0], [1, 1], [2, 2], [9, 10], [256, 256], [257, 272], [1000, 1024], [1025, 1088], [1_000_000, 1_015_808]];
  for (const [len, want] of cases) assert.equal(padme(len), want, `padme(${len})`);
  for (let len = 1; len < 5000; len++) {
    const p = padme(len);
    assert.ok(p >= len && (p - len) * 100 <= len * 12 + 100, `${len} -> ${p}`);
  }
  assert.equal(paddedLen(999_000, "padme", 999_984), 999_424);
  assert.equal(paddedLen(999_500, "padme", 999_984), 999_984);
  assert.equal(paddedLen(10, "padme", 100), 100);
  assert.equal(paddedLen(10, "none", 100), 10);
  assert.equal(sealedLen(0, "padme"), 272);
  assert.equal(sealedLen(70_000, "padme"), 71_712);
});

test("frames: round trip, nonzero padding and lengths that do not fit are InvalidPlaintext", () => {
  const key = new Uint8Array(32).fill(7);
  const frame = encodeFrame(Uint8Array.of(0xa0), [key], "padme", 10_000);
  assert.equal(frame.length, 256);
  assert.deepEqual(decodeFrame(frame, 1).blobKeys, [key]);
  const bad = frame.slice();
  bad[255] = 1;
  assert.throws(() => decodeFrame(bad, 1), kindOf("InvalidPlaintext"));
  assert.throws(() => decodeFrame(frame.subarray(0, 3), 0), kindOf("InvalidPlaintext"));
  assert.throws(() => decodeFrame(frame.subarray(0, 36), 2), kindOf("InvalidPlaintext"));
  assert.deepEqual(encodeFrame(Uint8Array.of(0xa0), [], "none", 10_000), Uint8Array.of(0, 0, 0, 1, 0xa0));
});

test("pairing codes: round trip, any case, spaces and dashes; typos are InvalidPairingCode", () => {
  const device = pairRequest({ random: fixedRandom(new Uint8Array(32).fill(3), new Uint8Array(10).fill(9)) });
  const text = formatPairingCode(device.code);
  assert.match(text, /^gp1(-[a-z2-7]{1,4}){18}$/);
  const back = parsePairingCode(` ${text.toUpperCase().replaceAll("-", " ")} `);
  assert.deepEqual(back, device.code);
  const typo = text.slice(0, -1) + (text.endsWith("a") ? "b" : "a");
  assert.throws(() => parsePairingCode(typo), kindOf("InvalidPairingCode"));
  assert.throws(() => parsePairingCode(text.slice(4)), kindOf("InvalidPairingCode"));
  assert.throws(() => parsePairingCode(text.slice(0, -4)), kindOf("InvalidPairingCode"));
  assert.throws(() => parsePairingCode(text + "1"), kindOf("InvalidPairingCode"));
});

const DID = "did:plc:ewvi7nxzyoun6zhxrhs64oiz";
const place = { did: DID, collection: "chat.gel.assistant.message", rkey: "3lbqzdw5pzk22" };
const key = { keyId: "chat:3lbqzdq7qzk22:0:00112233aabbccdd", secret: new Uint8Array(32).fill(0x42) };
const record: DataMap = { $type: "chat.gel.assistant.message", chat: `at://${DID}/chat.gel.assistant.chat/3lbqzdq7qzk22`, role: "user", status: "complete", createdAt: "2025-11-29T19:41:00.000Z" };
const content: DataMap = { parts: [{ $type: "chat.gel.assistant.defs#textPart", text: "Hello, sealed world" }] };

test("records: each edit fails with its Rust category", () => {
  const sealed = sealRecord(record, place, content, [], key);
  assert.deepEqual(openRecord(sealed, place, keyList([key])).content, content);
  const env = sealed.content as DataMap;
  const cases: [string, DataMap, string, typeof place?][] = [
    ["a flipped ciphertext byte", { ...sealed, content: { ...env, ciphertext: flip(env.ciphertext as Uint8Array) } }, "AuthenticationFailed"],
    ["an edited clear field", { ...sealed, role: "assistant" }, "AuthenticationFailed"],
    ["an added clear field", { ...sealed, model: { provider: "x", id: "y" } }, "AuthenticationFailed"],
    ["an envelope $type added", { ...sealed, content: { ...env, $type: "chat.gel.assistant.defs#encryptedContent" } }, "AuthenticationFailed"],
    ["another keyId", { ...sealed, content: { ...env, keyId: "chat:x:0:ff" } }, "UnknownKey"],
    ["an unknown alg", { ...sealed, content: { ...env, alg: "rot13" } }, "UnsupportedAlg"],
    ["a 12-byte nonce", { ...sealed, content: { ...env, nonce: new Uint8Array(12) } }, "MalformedNonce"],
    ["a ciphertext shorter than its tag", { ...sealed, content: { ...env, ciphertext: new Uint8Array(15) } }, "Truncated"],
    ["an unknown envelope field", { ...sealed, content: { ...env, extra: 1 } }, "Malformed"],
    ["no sealed field", { ...record }, "Malformed"],
    ["a type with no sealed field", { ...sealed, $type: "chat.gel.assistant.device" }, "NotSealable"],
    ["another place", sealed, "AuthenticationFailed", { ...place, rkey: "3lbqzdw5pzk23" }],
  ];
  for (const [what, tampered, kind, at] of cases) assert.throws(() => openRecord(tampered, at ?? place, keyList([key])), kindOf(kind), what);
});

test("a pending reply: the authenticator opens as the empty map, and never as content", () => {
  const sealed = sealRecord({ ...record, status: "pending", role: "assistant", authenticator: {} }, place, {}, [], key);
  assert.deepEqual(openRecord(sealed, place, keyList([key])), { field: "authenticator", content: {}, blobs: [] });
  const { authenticator, ...rest } = sealed;
  assert.throws(() => openRecord({ ...rest, content: authenticator! }, place, keyList([key])), kindOf("AuthenticationFailed"));
  assert.throws(() => openRecord({ ...sealed, content: authenticator! }, place, keyList([key])), kindOf("Malformed"));
  assert.throws(() => sealRecord({ ...record, authenticator: {} }, place, content, [], key), kindOf("InvalidPlaintext"));
});

test("blobs: swapped, cut, reordered and truncated streams fail with their Rust categories", () => {
  const plain = Uint8Array.from({ length: 140_000 }, (_, i) => i % 256);
  const a = sealBlob(plain);
  const b = sealBlob(plain);
  assert.deepEqual(openBlob(a.bytes, a.seal), plain);
  assert.equal(a.bytes.length, sealedLen(plain.length, "padme"));
  assert.throws(() => openBlob(b.bytes, a.seal), kindOf("BlobCidMismatch"));
  assert.throws(() => openBlob(a.bytes.subarray(1), a.seal), kindOf("BlobSizeMismatch"));
  // Past the CID check (a record naming the changed bytes), the stream itself refuses.
  const reseal = (bytes: Uint8Array) => openBlob(bytes, { cid: cidForBlob(bytes), size: bytes.length, key: a.seal.key });
  const twoChunks = a.bytes.subarray(0, 2 * SEALED_CHUNK_SIZE);
  assert.throws(() => reseal(twoChunks), kindOf("Truncated"));
  const swapped = new Uint8Array(a.bytes);
  swapped.set(a.bytes.subarray(SEALED_CHUNK_SIZE, 2 * SEALED_CHUNK_SIZE), 0);
  swapped.set(a.bytes.subarray(0, SEALED_CHUNK_SIZE), SEALED_CHUNK_SIZE);
  assert.throws(() => reseal(swapped), kindOf("AuthenticationFailed"));
  assert.throws(() => reseal(flip(a.bytes)), kindOf("AuthenticationFailed"));
});

function flip(bytes: Uint8Array): Uint8Array {
  const out = new Uint8Array(bytes);
  out[10]! ^= 0x80;
  return out;
}

test("$bytes: the same base64 is read as before, and the same is refused (stray characters, a dangling digit, unused bits set)", () => {
  for (let n = 0; n < 70; n++) {
    const bytes = Uint8Array.from({ length: n }, (_, i) => (i * 97 + n) & 0xff);
    const json = toJson(bytes) as { $bytes: string };
    assert.deepEqual(fromJson(json), bytes);
    assert.deepEqual(fromJson({ $bytes: `${json.$bytes}==` }), bytes, "trailing padding is dropped");
  }
  for (const bad of ["AB C", "A", "AAAAA", "AB", "AAB", "AA-_", "AA\n"]) {
    assert.throws(() => fromJson({ $bytes: bad }), kindOf("Malformed"), JSON.stringify(bad));
  }
});

test("records: a chat key's derived record key is reused, and a second chat key gets its own", () => {
  const did = "did:plc:abc";
  const one = { keyId: "chat:3k:1:aa", secret: new Uint8Array(32).fill(1) };
  const two = { keyId: "chat:3k:1:aa", secret: new Uint8Array(32).fill(2) };
  const record = { $type: "chat.gel.assistant.chat", createdAt: "2025-01-01T00:00:00.000Z" };
  const place = { did, collection: "chat.gel.assistant.chat", rkey: "3k" };
  for (let i = 0; i < 3; i++) {
    const sealed = sealRecord(record, place, { title: `t${i}` }, [], one);
    assert.deepEqual(openRecord(sealed, place, keyList([one])).content, { title: `t${i}` });
    assert.throws(() => openRecord(sealed, place, keyList([two])), kindOf("AuthenticationFailed"));
  }
});
