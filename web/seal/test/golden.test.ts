// Every golden vector of fixtures/seal/: each intermediate value rebuilt,
// the sealed bytes reproduced byte-exactly from the listed random inputs,
// and the sealed form opened back.

import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { test } from "node:test";
import { sha256 } from "@noble/hashes/sha2.js";
import {
  clearFieldsHash, recordAad, recordKey, encodeCbor, fromJson, toJson, toHex, fromHex, sealRecord, openRecord,
  keyList, sealBlob, openBlob, cidForBlob, SEAL_ALG_V1, CID, encodeFrame, MAX_FRAME, isMap,
  accountPsk, wrapInfo, wrapAad, sealWrap, openWrap, parseKeyWrap, keyWrapValue, deriveX25519KeyPair,
  type DataMap, type BlobSeal, type Padding,
} from "../src/index.js";
import { FIXTURES, fixedRandom, vector } from "./fixtures.js";

const RECORD_VECTORS = ["message-with-blob.json", "chat-unpadded.json", "message-pending-authenticator.json"];

for (const name of RECORD_VECTORS) {
  test(`record vector ${name}: every intermediate and the sealed record, byte-exact`, () => {
    const v = vector(name);
    const record = fromJson(v.record) as DataMap;
    const content = fromJson(v.content);
    const place = { did: v.did, collection: v.collection, rkey: v.rkey };
    const fieldName = v.field ?? (v.collection === "chat.gel.assistant.chat" ? "sealed" : "content");
    const clearCbor = encodeCbor(record);
    assert.equal(toHex(clearCbor), v.clearFieldsCbor);
    assert.equal(toHex(clearFieldsHash(record, fieldName)), v.clearHash);
    assert.equal(toHex(recordKey(fromHex(v.chatKey), SEAL_ALG_V1, v.keyId)), v.recordKey);
    assert.equal(toHex(encodeCbor(content)), v.contentCbor);

    const blobs: BlobSeal[] = [];
    if (v.blobKey) {
      const sealed = sealBlob(new TextEncoder().encode(v.blobPlaintextUtf8), { key: fromHex(v.blobKey) });
      assert.equal(toHex(sealed.bytes), v.blobSealed);
      assert.equal(sealed.seal.cid.toString(), v.blobCid);
      assert.equal(sealed.seal.size, v.blobSize);
      blobs.push(sealed.seal);
    }
    const padding: Padding = v.padding;
    assert.equal(toHex(encodeFrame(encodeCbor(content), blobs.map((b) => b.key), fieldName === "authenticator" ? "none" : padding, MAX_FRAME)), v.frame);
    const bindings = blobs.map((b) => ({ cid: b.cid, size: b.size, mimeType: "application/octet-stream" }));
    const aad = recordAad(SEAL_ALG_V1, v.keyId, fromHex(v.nonce), "", { place, recordType: record.$type as string, field: fieldName, clearHash: fromHex(v.clearHash) }, bindings);
    assert.equal(toHex(aad), v.aad);

    const input: DataMap = fieldName === "authenticator" ? { ...record, authenticator: {} } : record;
    const key = { keyId: v.keyId, secret: fromHex(v.chatKey) };
    const sealed = sealRecord(input, place, content, blobs, key, { padding, random: fixedRandom(fromHex(v.nonce)) });
    assert.deepEqual(toJson(sealed), v.sealedRecord);
    const env = sealed[fieldName] as DataMap;
    assert.equal(toHex(env.ciphertext as Uint8Array), v.ciphertext);

    const opened = openRecord(fromJson(v.sealedRecord), place, keyList([key]));
    assert.equal(opened.field, fieldName);
    assert.deepEqual(toJson(opened.content), v.content);
    assert.deepEqual(opened.blobs.map((b) => toHex(b.key)), v.blobKey ? [v.blobKey] : []);
    if (v.blobKey) {
      const plain = openBlob(fromHex(v.blobSealed), opened.blobs[0]!);
      assert.equal(new TextDecoder().decode(plain), v.blobPlaintextUtf8);
    }
  });
}

test("blob vector blob-two-chunks.json: length header, Padmé padding, two chunks, byte-exact", () => {
  const v = vector("blob-two-chunks.json");
  const plain = Uint8Array.from({ length: v.plaintextLength }, (_, i) => i % 251);
  const sealed = sealBlob(plain, { key: fromHex(v.blobKey) });
  assert.equal(sealed.bytes.length, v.size);
  assert.equal(toHex(sha256(sealed.bytes)), v.sha256);
  assert.equal(sealed.seal.cid.toString(), v.cid);
  assert.equal(toHex(sealed.bytes.subarray(65536, 65552)), v.chunk0Tag);
  assert.equal(toHex(sealed.bytes.subarray(65552)), v.chunk1);
  assert.equal(cidForBlob(sealed.bytes).toString(), v.cid);
  const opened = openBlob(sealed.bytes, { cid: CID.parse(v.cid), size: v.size, key: fromHex(v.blobKey) });
  assert.deepEqual(opened, plain);
});

test("key wrap vector keywrap-chat-key.json: PSK, info, aad, enc and ciphertext byte-exact; it opens", async () => {
  const v = vector("keywrap-chat-key.json");
  const account = await deriveX25519KeyPair(fromHex(v.accountIkm));
  assert.equal(toHex(account.secret), v.accountSecretClamped);
  assert.equal(toHex(account.publicKey), v.accountPublic);
  const psk = accountPsk(account.secret, v.accountKeyId);
  assert.equal(toHex(psk.key), v.psk);
  assert.equal(new TextDecoder().decode(psk.id), v.pskId);
  const recipient = { kind: "account" as const, keyId: v.accountKeyId, epoch: 0 };
  assert.equal(toHex(wrapInfo(v.did, "hpke-x25519-hkdf-sha256-chacha20poly1305-v1", v.keyId, v.epoch, recipient)), v.info);
  assert.equal(toHex(wrapAad(v.record.createdAt)), v.aad);
  const wrap = await sealWrap({
    did: v.did, keyId: v.keyId, epoch: v.epoch, recipient, recipientPublic: account.publicKey, psk,
    secret: fromHex(v.wrappedKey), createdAt: v.record.createdAt, ikmE: fromHex(v.ikmE),
  });
  assert.equal(toHex(wrap.enc), v.enc);
  assert.equal(toHex(wrap.ciphertext), v.ciphertext);
  assert.deepEqual(toJson(keyWrapValue(wrap)), v.record);
  const parsed = parseKeyWrap(fromJson(v.record));
  assert.equal(toHex(await openWrap(v.did, parsed, account.secret, psk)), v.wrappedKey);
});

test("every vector file is covered by a test here", () => {
  const covered = new Set([...RECORD_VECTORS, "blob-two-chunks.json", "keywrap-chat-key.json", "membership-genesis.json", "membership-admission.json"]);
  const files = readdirSync(FIXTURES).filter((f) => f.endsWith(".json"));
  assert.deepEqual(files.filter((f) => !covered.has(f)), []);
  assert.ok(isMap(fromJson({ a: 1 })));
});

test("membership vectors: signing key, signed message, signature, CID byte-exact; the log verifies", async () => {
  const { deviceSigningKey, signingDidKey, signingMessage, sign, verify, parseChange, Log } = await import("../src/index.js");
  const genesis = vector("membership-genesis.json");
  const admission = vector("membership-admission.json");
  const changes: import("../src/index.js").SignedChange[] = [];
  for (const v of [genesis, admission]) {
    const key = deviceSigningKey(fromHex(v.signerSecret));
    assert.equal(signingDidKey(key), v.signerSigningKey);
    const value = fromJson(v.record) as DataMap;
    const unsigned = { ...value };
    delete unsigned.sig;
    assert.equal(toHex(encodeCbor(unsigned)), v.unsignedCbor);
    const message = signingMessage(v.did, value);
    assert.equal(toHex(message), v.signingMessage);
    assert.equal(toHex(sign(key, message)), toHex(value.sig as Uint8Array));
    assert.ok(verify(v.signerSigningKey, message, value.sig as Uint8Array));
    assert.equal(toHex(encodeCbor(value)), v.signedCbor);
    const parsed = parseChange(value);
    assert.equal(parsed.cid.toString(), v.cid);
    changes.push(parsed);
  }
  const log = Log.verify(genesis.did, changes, CID.parse(admission.cid));
  assert.deepEqual(log.heads().map(String), [admission.cid]);
  const standing = log.standing();
  assert.equal(standing.kind, "settled");
  assert.deepEqual([...(standing.kind === "settled" ? standing.roster.keys() : [])], ["3laaaaaaaaaa2", "3lbbbbbbbbbb2"]);
  // The same log for another account: every signature fails.
  assert.throws(() => Log.verify("did:plc:someoneelse00000000000", changes, CID.parse(admission.cid)), { kind: "MembershipLog" });
});
