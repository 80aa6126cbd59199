#!/usr/bin/env node
// A reference check of our `subscribeRepos` `#commit` frames with the
// reference TypeScript packages (@atproto/lex-cbor, @atproto/repo, pinned
// in package.json), for tests/repo/repo_events_reference.rs. It does what a
// sync v1.1 firehose consumer does with each event:
//
//   1. decode the binary message as two DAG-CBOR items (header, body)
//      with @atproto/lex-cbor's decodeAll; header {op: 1, t: "#commit"};
//   2. read `blocks` as a CAR whose root is `commit` (readCarWithRoot);
//   3. check the commit's signature (verifyCommitSig) against DIDKEY;
//   4. check every op against the new tree with verifyProofs (the check
//      @atproto/sync's firehose runs on each commit);
//   5. load the MST at the commit's `data` from `blocks` alone, undo every
//      op (create -> delete, update -> back to prev, delete -> re-add prev)
//      and compare the root with `prevData`.
//
// Usage: firehose-ref.mjs DID DIDKEY; stdin: {"frames": [base64, ...]}.
// Out: one JSON line {"results": [{"ok": true, "seq"} | {"ok": false, "error"}]}.

import { readFileSync } from 'node:fs'
import * as repo from '@atproto/repo'
import { decodeAll } from '@atproto/lex-cbor'

const { MST, MemoryBlockstore } = repo

function splitKey(key) {
  const slash = key.indexOf('/')
  return { collection: key.slice(0, slash), rkey: key.slice(slash + 1) }
}

async function check(frame, did, didKey) {
  const items = [...decodeAll(frame)]
  if (items.length !== 2) throw new Error(`frame has ${items.length} items`)
  const [header, body] = items
  if (header.op !== 1 || header.t !== '#commit') throw new Error('not a #commit header')
  if (body.repo !== did) throw new Error(`repo is ${body.repo}`)
  const car = await repo.readCarWithRoot(body.blocks)
  if (car.root.toString() !== body.commit.toString()) throw new Error('CAR root is not the commit')
  const commitBytes = car.blocks.get(body.commit)
  if (!commitBytes) throw new Error('no commit block')
  const commit = repo.cborToLex(commitBytes)
  if (commit.rev !== body.rev) throw new Error('rev mismatch')
  if (!(await repo.verifyCommitSig(commit, didKey))) throw new Error('bad signature')
  const claims = body.ops.map((op) => ({ ...splitKey(op.path), cid: op.cid ?? null }))
  if (claims.length > 0) {
    const { verified, unverified } = await repo.verifyProofs(body.blocks, claims, did, didKey)
    if (unverified.length > 0 || verified.length !== claims.length) {
      throw new Error(`verifyProofs: ${unverified.length} unverified claims`)
    }
  }
  if (body.prevData === undefined) {
    if (body.ops.length > 0) throw new Error('ops without prevData')
    return
  }
  let mst = MST.load(new MemoryBlockstore(car.blocks), commit.data)
  for (const op of body.ops) {
    if (op.action === 'create') mst = await mst.delete(op.path)
    else if (op.action === 'update') mst = await mst.update(op.path, op.prev)
    else if (op.action === 'delete') mst = await mst.add(op.path, op.prev)
    else throw new Error(`unknown action ${op.action}`)
  }
  const root = (await mst.getPointer()).toString()
  if (root !== body.prevData.toString()) {
    throw new Error(`inverted root ${root} is not prevData ${body.prevData}`)
  }
}

const [did, didKey] = process.argv.slice(2)
if (!did || !didKey) {
  process.stderr.write('usage: firehose-ref.mjs DID DIDKEY < {"frames": [base64...]}\n')
  process.exit(2)
}
const { frames } = JSON.parse(readFileSync(0, 'utf8'))
const results = []
for (const b64 of frames) {
  try {
    await check(new Uint8Array(Buffer.from(b64, 'base64')), did, didKey)
    results.push({ ok: true })
  } catch (err) {
    results.push({ ok: false, error: String(err?.message ?? err) })
  }
}
process.stdout.write(JSON.stringify({ results }) + '\n')
