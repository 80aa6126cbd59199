// The Node half of tests/seal/web_seal_interop.rs:
//   node dist/tools/interop.js new-device DIR   a new device: DIR/ts-device.json
//   node dist/tools/interop.js open DIR         join with DIR/rust-corpus.json, open all of it: DIR/ts-opened.json
//   node dist/tools/interop.js seal DIR         seal a corpus of its own: DIR/ts-corpus.json
//   node dist/tools/interop.js keyrings DIR     rebuild the keyring of each case of DIR/keyring-cases.json: DIR/ts-keyrings.json
// Randomness is SHA-256(label ‖ u64be(i)) blocks, as the Rust tests' HashRng, so runs repeat.

import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { sha256 } from "@noble/hashes/sha2.js";
import {
  CID, Keyring, SealError, concat, standingRoster, deviceRecord, formatPairingCode, fromHex, fromJson, keyWrapValue, pairRequest, parseKeySet,
  parsePairingCode, sealBlob, sealRecord, toHex, toJson, u64be, utf8, type KeyWrap, type DataMap, type Random, type Value,
} from "../src/index.js";
import { openEntry, type Corpus, type CorpusRecord, type Outcome } from "./corpus.js";

const TS_DEVICE = "3ltttttttttt2";
const CREATED = "2026-01-02T03:04:05.000Z";

function hashRandom(label: string): Random {
  let counter = 0;
  let block = new Uint8Array();
  return (n) => {
    const out = new Uint8Array(n);
    for (let i = 0; i < n; i++) {
      if (block.length === 0) block = sha256(concat(utf8(label), u64be(counter++)));
      out[i] = block[0]!;
      block = block.subarray(1);
    }
    return out;
  };
}

const readJson = (dir: string, name: string) => JSON.parse(readFileSync(join(dir, name), "utf8"));
const writeJson = (dir: string, name: string, value: unknown) => writeFileSync(join(dir, name), JSON.stringify(value, null, 1));

interface DeviceFile {
  deviceId: string;
  secret: string;
  code: string;
  record: unknown;
}

function newDevice(dir: string): void {
  const device = pairRequest({ random: hashRandom("ts-device") });
  const file: DeviceFile = { deviceId: TS_DEVICE, secret: toHex(device.secret), code: formatPairingCode(device.code), record: toJson(deviceRecord(device, CREATED, "web")) };
  writeJson(dir, "ts-device.json", file);
}

async function joined(dir: string, corpus: Corpus): Promise<{ keyring: Keyring; report: unknown }> {
  const d = readJson(dir, "ts-device.json") as DeviceFile;
  const { keys, skipped } = parseKeySet(corpus.keyRecords.map(fromJson));
  if (skipped.length > 0) throw new Error(`key records skipped: ${skipped.join("; ")}`);
  const { keyring, report } = await Keyring.join(corpus.did, { deviceId: d.deviceId, secret: fromHex(d.secret), code: parsePairingCode(d.code) }, keys);
  return { keyring, report: { ...report, rejected: report.rejected.map(([k, e]) => [k, e.kind]) } };
}

async function open(dir: string): Promise<void> {
  const corpus = readJson(dir, "rust-corpus.json") as Corpus;
  const { keyring, report } = await joined(dir, corpus);
  const opened: Outcome[] = corpus.records.map((r) => openEntry(corpus, r, keyring));
  const tampered: Outcome[] = corpus.tampered.map((r) => openEntry(corpus, r, keyring));
  const tamperedWraps = [];
  for (const w of corpus.tamperedWraps) {
    const { keys } = parseKeySet([fromJson(w.record)]);
    const r = await keyring.absorb(keys);
    tamperedWraps.push({ name: w.name, rejected: r.rejected.map(([, e]) => e.kind), chatKeys: r.chatKeys });
  }
  const s = keyring.log.standing();
  writeJson(dir, "ts-opened.json", {
    keyring: {
      accountKeys: keyring.accountKeys().map((a) => a.keyId),
      chatKeys: keyring.chatKeyIds(),
      heads: keyring.heads().map(String),
      epoch: s.epoch,
      roster: s.kind === "settled" ? [...s.roster.keys()] : [],
      report,
    },
    opened,
    tampered,
    tamperedWraps,
  });
}

// Every part type of chat.gel.assistant.defs#plainContent, blobs in files, images and tool output.
function parts(blobRefs: Value[]): Value[] {
  return [
    { $type: "chat.gel.assistant.defs#textPart", text: "Sealed in TypeScript — ünïcödé ✓", providerData: '{"sig":"ts"}' },
    { $type: "chat.gel.assistant.defs#filePart", file: blobRefs[0]!, name: "notes.txt", extracted: { text: "notes", truncated: false, extractor: "ts/1" } },
    { $type: "chat.gel.assistant.defs#imagePart", image: blobRefs[1]!, alt: "a dot", width: 1, height: 1 },
    { $type: "chat.gel.assistant.defs#reasoningPart", text: "thinking in TS", providerData: "{}" },
    { $type: "chat.gel.assistant.defs#sourcePart", url: "https://example.com/ts", title: "Example" },
    { $type: "chat.gel.assistant.defs#toolCallPart", callId: "call-ts-1", name: "mcp_files_read", arguments: '{"path":"/tmp/x"}', approval: "pending", pendingId: "p-ts-1" },
    { $type: "chat.gel.assistant.defs#toolResultPart", callId: "call-ts-1", output: "done", isError: false, outcome: "succeeded", elapsedMs: 12, outputBlob: blobRefs[2]! },
    { $type: "chat.gel.assistant.defs#toolApprovalPart", callId: "call-ts-1", pendingId: "p-ts-1", decision: "approved", reason: "fine" },
  ];
}

async function seal(dir: string): Promise<void> {
  const rust = readJson(dir, "rust-corpus.json") as Corpus;
  const { keyring } = await joined(dir, rust);
  const random = hashRandom("ts-corpus");
  const did = rust.did;
  const newWraps: KeyWrap[] = [];
  const keyFor = async (chat: string) => {
    const { key, wrap } = await keyring.chatKeyForSeal(chat, { random, createdAt: CREATED });
    if (wrap) newWraps.push(wrap);
    return key;
  };
  const corpus: Corpus = { did, keyRecords: [], blobs: {}, records: [], tampered: [], tamperedWraps: [] };
  const expectOf = (r: Omit<CorpusRecord, "record">, rec: DataMap): CorpusRecord => {
    const out = openEntry(corpus, { ...r, record: toJson(rec) }, keyring);
    if ("error" in out) throw new Error(`${r.name} does not open in TS: ${out.error}`);
    return { ...r, record: toJson(rec), expect: { field: out.field, content: out.content, blobs: out.blobs } };
  };
  const chatUri = (rkey: string) => `at://${did}/chat.gel.assistant.chat/${rkey}`;

  // A chat of Rust's (its key of the epoch in force) and a new chat (a new chat key, wrapped here).
  for (const chat of ["3lchatrustaa2", "3lchattsaaaa2"]) {
    const key = await keyFor(chat);
    const place = (collection: string, rkey: string) => ({ did, collection, rkey });
    const chatRecord = sealRecord({ $type: "chat.gel.assistant.chat", createdAt: CREATED, model: { provider: "example", id: "m-1" } }, place("chat.gel.assistant.chat", chat), { title: `TS chat ${chat}`, systemPrompt: "Be brief." }, [], key, { random });
    corpus.records.push(expectOf({ name: `ts chat ${chat}`, collection: "chat.gel.assistant.chat", rkey: chat }, chatRecord));

    const plain = [utf8(`file of ${chat}\n`), Uint8Array.of(0x89, 0x50, 0x4e, 0x47), Uint8Array.from({ length: 70_000 }, (_, i) => (i * 7) % 256)];
    const sealed = plain.map((p) => sealBlob(p, { random }));
    for (const s of sealed) corpus.blobs[s.seal.cid.toString()] = toHex(s.bytes);
    const mimes = ["text/plain", "image/png", "application/octet-stream"];
    const refs = sealed.map((s, i) => ({ $type: "blob", ref: s.seal.cid, mimeType: mimes[i]!, size: plain[i]!.length }) as Value);
    const rkey = `${chat}m1`;
    const msg = { $type: "chat.gel.assistant.message", chat: chatUri(chat), role: "user", status: "complete", createdAt: CREATED };
    const message = sealRecord(msg, place("chat.gel.assistant.message", rkey), { parts: parts(refs) }, sealed.map((s) => s.seal), key, { random });
    corpus.records.push(expectOf({ name: `ts message with every part ${chat}`, collection: "chat.gel.assistant.message", rkey }, message));

    const pending = sealRecord({ $type: "chat.gel.assistant.message", chat: chatUri(chat), role: "assistant", status: "pending", parent: rkey, createdAt: CREATED, authenticator: {} }, place("chat.gel.assistant.message", `${rkey}.r0`), {}, [], key, { random });
    corpus.records.push(expectOf({ name: `ts pending reply ${chat}`, collection: "chat.gel.assistant.message", rkey: `${rkey}.r0` }, pending));

    const failed = sealRecord({ $type: "chat.gel.assistant.message", chat: chatUri(chat), role: "assistant", status: "error", createdAt: CREATED }, place("chat.gel.assistant.message", `${rkey}.r1`), { parts: [{ $type: "chat.gel.assistant.defs#textPart", text: "partial" }], error: { code: "ProviderError", message: "cut" } }, [], key, { random, padding: "none" });
    corpus.records.push(expectOf({ name: `ts failed reply, unpadded ${chat}`, collection: "chat.gel.assistant.message", rkey: `${rkey}.r1` }, failed));
  }
  const settingsKey = await keyFor("self");
  const settings = sealRecord({ $type: "chat.gel.assistant.settings", updatedAt: CREATED, effort: "low" }, { did, collection: "chat.gel.assistant.settings", rkey: "self" }, { systemPrompt: "Answer in TS." }, [], settingsKey, { random });
  corpus.records.push(expectOf({ name: "ts settings", collection: "chat.gel.assistant.settings", rkey: "self" }, settings));

  corpus.tampered = tamper(corpus);
  for (const t of corpus.tampered) {
    const out = openEntry(corpus, t, keyring);
    t.expectError = "error" in out ? out.error : "opened";
  }
  // A chat-key wrap with one ciphertext byte flipped, for a key no one else holds.
  const other = (await joined(dir, rust)).keyring;
  const { wrap } = await other.chatKeyForSeal("3lchatlost002", { random, createdAt: CREATED });
  const bad = keyWrapValue(wrap!);
  (bad.ciphertext as Uint8Array)[5]! ^= 0x01;
  corpus.tamperedWraps.push({ name: "ts chat-key wrap, flipped byte", record: toJson(bad), expectError: "AuthenticationFailed" });

  corpus.keyRecords = newWraps.map((w) => toJson(keyWrapValue(w)));
  writeJson(dir, "ts-corpus.json", corpus);
}

/** A keyring rebuilt from one case's records, as both sides report it (or the error's category). */
async function keyrings(dir: string): Promise<void> {
  const d = readJson(dir, "ts-device.json") as DeviceFile;
  const cases = readJson(dir, "keyring-cases.json") as { name: string; did: string; keyRecords: unknown[]; pin?: string; knownHeads?: string[] }[];
  const out = [];
  for (const c of cases) {
    const { keys } = parseKeySet(c.keyRecords.map(fromJson));
    const device = { deviceId: d.deviceId, secret: fromHex(d.secret), code: parsePairingCode(d.code) };
    try {
      const options = { ...(c.pin !== undefined && { pin: c.pin }), knownHeads: (c.knownHeads ?? []).map((h) => CID.parse(h)) };
      const { keyring, report } = await Keyring.join(c.did, device, keys, options);
      const s = keyring.log.standing();
      out.push({
        name: c.name,
        accountKeys: keyring.accountKeys().map((a) => a.keyId),
        chatKeys: keyring.chatKeyIds(),
        heads: keyring.heads().map(String),
        standing: { kind: s.kind, epoch: s.epoch, roster: [...standingRoster(s).keys()].sort() },
        rejected: report.rejected.map(([, e]) => e.kind),
        refused: report.refusedChanges.length,
      });
    } catch (e) {
      if (!(e instanceof SealError)) throw e;
      out.push({ name: c.name, error: e.kind });
    }
  }
  writeJson(dir, "ts-keyrings.json", out);
}

/** Tampered copies of the corpus's records: one per kind of attack both sides must refuse alike. */
export function tamper(corpus: Corpus): CorpusRecord[] {
  const msg = corpus.records.find((r) => r.name.startsWith("ts message with every part"))!;
  const pending = corpus.records.find((r) => r.name.startsWith("ts pending reply"))!;
  const edit = (r: CorpusRecord, name: string, f: (rec: DataMap) => void, place: Partial<CorpusRecord> = {}): CorpusRecord => {
    const rec = fromJson(r.record) as DataMap;
    f(rec);
    return { name, collection: r.collection, rkey: r.rkey, ...place, record: toJson(rec) };
  };
  const env = (rec: DataMap, field = "content") => rec[field] as DataMap;
  const blobCids = Object.keys(msg.expect!.blobs);
  const other = corpus.records.find((r) => r !== msg && r.name.startsWith("ts message with every part"))!;
  const swapped = Object.keys(other.expect!.blobs)[0]!;
  return [
    edit(msg, "flipped ciphertext byte", (r) => void ((env(r).ciphertext as Uint8Array)[10]! ^= 0x80)),
    edit(msg, "changed clear field", (r) => void (r.status = "error")),
    edit(msg, "wrong keyId", (r) => void (env(r).keyId = "chat:3lnotakey0002:1:00000000000000ff")),
    edit(msg, "moved record", () => {}, { rkey: "3lmovedhere22" }),
    edit(msg, "unsupported alg", (r) => void (env(r).alg = "aes-256-gcm-v9")),
    edit(msg, "short nonce", (r) => void (env(r).nonce = new Uint8Array(12))),
    edit(pending, "authenticator passed off as content", (r) => {
      r.content = r.authenticator!;
      delete r.authenticator;
    }),
    edit(pending, "both content and authenticator", (r) => void (r.content = r.authenticator!)),
    { ...edit(msg, "swapped blob", () => {}), blobOverride: { [blobCids[0]!]: corpus.blobs[swapped]! } },
    { ...edit(msg, "cut blob", () => {}), blobOverride: { [blobCids[2]!]: corpus.blobs[blobCids[2]!]!.slice(0, 2 * 65552) } },
  ];
}

const [command, dir] = process.argv.slice(2);
if (!dir) throw new Error("usage: interop.js new-device|open|seal DIR");
if (command === "new-device") newDevice(dir);
else if (command === "open") await open(dir);
else if (command === "seal") await seal(dir);
else if (command === "keyrings") await keyrings(dir);
else throw new Error(`unknown command ${command}`);
