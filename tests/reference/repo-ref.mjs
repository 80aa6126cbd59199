#!/usr/bin/env node
// The reference TypeScript repository implementation (@atproto/repo, pinned
// in package.json) behind a small CLI, for the differential test
// tests/repo/reference_repo.rs. Every command prints one JSON object on stdout.
// A verification that rejects its input still exits 0 with {"ok": false};
// a non-zero exit means the command itself was misused or crashed.
//
//   mst-root                          stdin: {"ops": [["put", key, cid] | ["del", key] | ["root"], ...]}
//                                     out:   {"roots": [cid after each "root" op]}
//   make-car OUT.car                  stdin: {"alg": "k256"|"p256", "privkey": hex|null,
//                                             "batches": [[write, ...], ...]}
//                                     write: {"action": "create"|"update"|"delete",
//                                             "collection", "rkey", "record"? (atproto JSON)}
//                                     The first batch creates the repo (creates only),
//                                     each later one is a commit. The DID is the key's did:key.
//                                     out: {"did", "commit", "data", "rev", "records": [[key, cid], ...]}
//   verify-car FILE [DID [DIDKEY]]    verifyRepoCar; out: {"ok", "commit", "rev", "records"} | {"ok": false, "error"}
//   prove IN.car OUT.car KEY...       getRecords (the getRecord proof) from a full-repo CAR
//                                     out: {"ok": true} | {"ok": false, "error"}
//   verify-proof FILE DID DIDKEY      stdin: {"claims": [[key, cid|null], ...]}
//                                     verifyProofs; out: {"ok", "verified": [bool per claim]} | {"ok": false, "error"}
//   bench                             stdin: {"batches": FILE (JSON lines, one batch of writes each),
//                                             "car": OUT.car, "big": IN.car, "creates": [write, ...],
//                                             "repeats": N}
//                                     The reference side of benches/repo/, in memory, each step
//                                     timed with performance.now() (export, verify and import N
//                                     times, their median); out: milliseconds per step.

import { readFileSync, writeFileSync } from 'node:fs'
import * as repo from '@atproto/repo'
import * as crypto from '@atproto/crypto'
import { parseCid } from '@atproto/lex-data'
import { jsonToLex } from '@atproto/lex-json'

const { MST, MemoryBlockstore, Repo, WriteOpAction } = repo

function readStdin() {
  return JSON.parse(readFileSync(0, 'utf8'))
}

function out(value) {
  process.stdout.write(JSON.stringify(value) + '\n')
}

function splitKey(key) {
  const slash = key.indexOf('/')
  return { collection: key.slice(0, slash), rkey: key.slice(slash + 1) }
}

async function concat(stream) {
  const chunks = []
  for await (const chunk of stream) chunks.push(chunk)
  return Buffer.concat(chunks)
}

async function mstRoot() {
  const { ops } = readStdin()
  let mst = await MST.create(new MemoryBlockstore())
  const roots = []
  for (const [op, key, cid] of ops) {
    if (op === 'put') {
      const value = parseCid(cid)
      mst = (await mst.get(key)) === null ? await mst.add(key, value) : await mst.update(key, value)
    } else if (op === 'del') {
      mst = await mst.delete(key)
    } else if (op === 'root') {
      roots.push((await mst.getPointer()).toString())
    } else {
      throw new Error(`unknown op ${op}`)
    }
  }
  out({ roots })
}

function toWrite(w) {
  const action = {
    create: WriteOpAction.Create,
    update: WriteOpAction.Update,
    delete: WriteOpAction.Delete,
  }[w.action]
  if (!action) throw new Error(`unknown action ${w.action}`)
  const op = { action, collection: w.collection, rkey: w.rkey }
  if (action !== WriteOpAction.Delete) op.record = jsonToLex(w.record, { strict: true })
  return op
}

async function keypairFor(alg, privkey) {
  const Kind = alg === 'p256' ? crypto.P256Keypair : crypto.Secp256k1Keypair
  return privkey ? Kind.import(privkey) : Kind.create()
}

async function makeCar(outPath) {
  const { alg, privkey, batches } = readStdin()
  const keypair = await keypairFor(alg, privkey)
  const did = keypair.did()
  const storage = new MemoryBlockstore()
  let r = await Repo.create(storage, did, keypair, (batches[0] ?? []).map(toWrite))
  for (const batch of batches.slice(1)) {
    r = await r.applyWrites(batch.map(toWrite), keypair)
  }
  const car = await concat(repo.getFullRepo(storage, r.cid))
  writeFileSync(outPath, car)
  const leaves = await r.data.list()
  out({
    did,
    commit: r.cid.toString(),
    data: (await r.data.getPointer()).toString(),
    rev: r.commit.rev,
    records: leaves.map((l) => [l.key, l.value.toString()]),
  })
}

async function verifyCar(file, did, didKey) {
  const bytes = readFileSync(file)
  try {
    const verified = await repo.verifyRepoCar(bytes, did, didKey)
    const records = verified.creates
      .map((c) => [`${c.collection}/${c.rkey}`, c.cid.toString()])
      .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
    out({
      ok: true,
      commit: verified.commit.cid.toString(),
      rev: verified.commit.rev,
      records,
    })
  } catch (err) {
    out({ ok: false, error: String(err?.message ?? err) })
  }
}

async function prove(inPath, outPath, keys) {
  try {
    const { root, blocks } = await repo.readCarWithRoot(readFileSync(inPath))
    const storage = new MemoryBlockstore(blocks)
    const proof = await concat(repo.getRecords(storage, root, keys.map(splitKey)))
    writeFileSync(outPath, proof)
    out({ ok: true })
  } catch (err) {
    out({ ok: false, error: String(err?.message ?? err) })
  }
}

async function verifyProof(file, did, didKey) {
  const claims = readStdin().claims.map(([key, cid]) => ({
    ...splitKey(key),
    cid: cid === null ? null : parseCid(cid),
  }))
  try {
    const { verified } = await repo.verifyProofs(readFileSync(file), claims, did, didKey)
    out({ ok: true, verified: claims.map((c) => verified.includes(c)) })
  } catch (err) {
    out({ ok: false, error: String(err?.message ?? err) })
  }
}

// The workloads of benches/repo.rs, as an application built on @atproto/repo
// would run them: the blocks in memory, the CAR read from and written to disk.
async function bench() {
  const input = readStdin()
  const batches = readFileSync(input.batches, 'utf8')
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => JSON.parse(line).map(toWrite))
  const keypair = await crypto.Secp256k1Keypair.create()
  const did = keypair.did()
  const time = async (work) => {
    const started = performance.now()
    const result = await work()
    return [performance.now() - started, result]
  }

  const storage = new MemoryBlockstore()
  let r = await Repo.create(storage, did, keypair, [])
  const [commits] = await time(async () => {
    for (const batch of batches) r = await r.applyWrites(batch, keypair)
  })
  // The median of `repeats` runs (later runs meet a warmer JIT).
  const median = async (work) => {
    const runs = []
    for (let i = 0; i < (input.repeats ?? 1); i++) runs.push((await time(work))[0])
    runs.sort((a, b) => a - b)
    return runs[Math.floor(runs.length / 2)]
  }
  const exportMs = await median(async () => {
    writeFileSync(input.car, await concat(repo.getFullRepo(storage, r.cid)))
  })
  const verify = await median(async () => {
    await repo.verifyRepoCar(readFileSync(input.car), did, did)
  })
  const importMs = await median(async () => {
    const bytes = readFileSync(input.car)
    const { root, blocks } = await repo.readCarWithRoot(bytes)
    await repo.verifyRepo(blocks, root, did, did)
    await Repo.load(new MemoryBlockstore(blocks), root)
  })
  const [open] = await time(async () => {
    const { root, blocks } = await repo.readCarWithRoot(readFileSync(input.car))
    await Repo.load(new MemoryBlockstore(blocks), root)
  })

  // One create at a time on the large repository (loaded untimed).
  const { root, blocks } = await repo.readCarWithRoot(readFileSync(input.big))
  let big = await Repo.load(new MemoryBlockstore(blocks), root)
  const creates = []
  for (const write of input.creates) {
    const [ms, next] = await time(() => big.applyWrites([toWrite(write)], keypair))
    big = next
    creates.push(ms)
  }
  out({ commits, export: exportMs, verify, import: importMs, open, creates })
}

const [command, ...args] = process.argv.slice(2)
const commands = {
  'mst-root': () => mstRoot(),
  'make-car': () => makeCar(args[0]),
  'verify-car': () => verifyCar(args[0], args[1], args[2]),
  prove: () => prove(args[0], args[1], args.slice(2)),
  'verify-proof': () => verifyProof(args[0], args[1], args[2]),
  bench: () => bench(),
}
if (!commands[command]) {
  process.stderr.write(`usage: repo-ref.mjs ${Object.keys(commands).join('|')} ...\n`)
  process.exit(2)
}
await commands[command]()
