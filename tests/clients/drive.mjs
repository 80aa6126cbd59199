// Drives a running `gelstore serve` (or any PDS) with the standard atproto
// npm clients, unchanged. Run by tests/serve/serve_clients.rs:
//
//   SERVICE=http://localhost:PORT HANDLE=h DID=did PASSWORD=pw [PLC=url] node drive.mjs MODE
//
// (PLC: the directory a did:plc resolves through; did:web needs none.)
//
// MODE api      @atproto/api: session (login, getSession, refresh, logout), record
//               calls (create/put/delete/get/list/applyWrites), swaps, blobs.
// MODE verify   @atproto/repo + @atproto/identity: resolve the DID's key
//               (did:web over http on localhost), verify getRepo's CAR and
//               sync.getRecord proofs (present and absent).
// MODE futurecursor  a cursor past the last event gets `FutureCursor`.
// MODE firehose @atproto/sync's Firehose (signature + proofs per #commit)
//               plus an inductive check with @atproto/repo's MST: each
//               commit's ops, inverted on its blocks, give its prevData.
//
// Every check that fails throws; the last stdout line is a JSON summary.

import { AtpAgent } from '@atproto/api'
import { IdResolver } from '@atproto/identity'
import {
  MST,
  MemoryBlockstore,
  readCarWithRoot,
  verifyProofs,
  verifyRepoCar,
} from '@atproto/repo'
import { Firehose, MemoryRunner } from '@atproto/sync'
import { CID } from 'multiformats/cid'

const env = (name) => {
  const v = process.env[name]
  if (!v) throw new Error(`${name} is not set`)
  return v
}
const SERVICE = env('SERVICE')
const HANDLE = env('HANDLE')
const DID = env('DID')
const PASSWORD = env('PASSWORD')
const COLLECTION = 'app.example.note'
const PHOTOS = 'app.example.photo'

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`)
}

async function expectError(promise, name, what) {
  try {
    await promise
  } catch (err) {
    check(err.error === name, `${what}: expected ${name}, got ${err.error} (${err.message})`)
    return err
  }
  throw new Error(`${what}: expected ${name}, but it succeeded`)
}

async function login() {
  const agent = new AtpAgent({ service: SERVICE })
  await agent.login({ identifier: HANDLE, password: PASSWORD })
  return agent
}

async function api() {
  const out = {}
  await expectError(
    new AtpAgent({ service: SERVICE }).login({ identifier: HANDLE, password: PASSWORD + 'x' }),
    'AuthenticationRequired',
    'wrong password',
  )
  const agent = await login()
  check(agent.session.did === DID, `session did ${agent.session.did}`)
  const session = await agent.com.atproto.server.getSession()
  check(session.data.handle === HANDLE, 'getSession handle')
  const described = await agent.com.atproto.server.describeServer()
  out.serverDid = described.data.did

  // create, get, taken key, put with swaps, delete
  const repo = DID
  const created = await agent.com.atproto.repo.createRecord({
    repo,
    collection: COLLECTION,
    record: { $type: COLLECTION, text: 'first', createdAt: new Date().toISOString() },
  })
  const rkey = created.data.uri.split('/').pop()
  const got = await agent.com.atproto.repo.getRecord({ repo, collection: COLLECTION, rkey })
  check(got.data.cid === created.data.cid, 'getRecord cid = createRecord cid')
  check(got.data.value.text === 'first', 'getRecord value')
  await expectError(
    agent.com.atproto.repo.createRecord({
      repo,
      collection: COLLECTION,
      rkey,
      record: { $type: COLLECTION, text: 'again' },
    }),
    'InvalidSwap',
    'create on a taken key',
  )
  await expectError(
    agent.com.atproto.repo.putRecord({
      repo,
      collection: COLLECTION,
      rkey,
      swapRecord: null,
      record: { $type: COLLECTION, text: 'swap null' },
    }),
    'InvalidSwap',
    'put swapRecord:null on an existing record',
  )
  const fresh = await agent.com.atproto.repo.putRecord({
    repo,
    collection: COLLECTION,
    rkey: 'fresh',
    swapRecord: null,
    record: { $type: COLLECTION, text: 'created by put' },
  })
  await expectError(
    agent.com.atproto.repo.putRecord({
      repo,
      collection: COLLECTION,
      rkey,
      swapRecord: fresh.data.cid,
      record: { $type: COLLECTION, text: 'wrong swap' },
    }),
    'InvalidSwap',
    'put with a wrong swapRecord',
  )
  const updated = await agent.com.atproto.repo.putRecord({
    repo,
    collection: COLLECTION,
    rkey,
    swapRecord: created.data.cid,
    record: { $type: COLLECTION, text: 'updated' },
  })
  await expectError(
    agent.com.atproto.repo.deleteRecord({
      repo,
      collection: COLLECTION,
      rkey: 'fresh',
      swapCommit: created.data.commit.cid,
    }),
    'InvalidSwap',
    'delete with a stale swapCommit',
  )
  await agent.com.atproto.repo.deleteRecord({ repo, collection: COLLECTION, rkey: 'fresh' })
  await expectError(
    agent.com.atproto.repo.getRecord({ repo, collection: COLLECTION, rkey: 'fresh' }),
    'RecordNotFound',
    'getRecord of a deleted record',
  )

  // applyWrites: 7 creates in one commit, then an update and a delete
  const writes = []
  for (let i = 0; i < 7; i++) {
    writes.push({
      $type: 'com.atproto.repo.applyWrites#create',
      collection: COLLECTION,
      rkey: `k${i}`,
      value: { $type: COLLECTION, text: `note ${i}` },
    })
  }
  const applied = await agent.com.atproto.repo.applyWrites({ repo, writes })
  check(applied.data.results.length === 7, 'applyWrites results')
  await agent.com.atproto.repo.applyWrites({
    repo,
    writes: [
      {
        $type: 'com.atproto.repo.applyWrites#update',
        collection: COLLECTION,
        rkey: 'k0',
        value: { $type: COLLECTION, text: 'note 0 again' },
      },
      { $type: 'com.atproto.repo.applyWrites#delete', collection: COLLECTION, rkey: 'k6' },
    ],
  })

  // listRecords: pages of 3, both orders, cover every record once
  const expected = ['k0', 'k1', 'k2', 'k3', 'k4', 'k5', rkey].sort()
  for (const reverse of [false, true]) {
    const seen = []
    let cursor
    for (let page = 0; page < 10; page++) {
      const res = await agent.com.atproto.repo.listRecords({
        repo,
        collection: COLLECTION,
        limit: 3,
        reverse,
        cursor,
      })
      seen.push(...res.data.records.map((r) => r.uri.split('/').pop()))
      cursor = res.data.cursor
      if (!cursor) break
    }
    const want = reverse ? expected : [...expected].reverse()
    check(JSON.stringify(seen) === JSON.stringify(want), `listRecords reverse=${reverse}: ${seen}`)
  }

  // blobs: an upload is temporary (not served) until a record references
  // it, as on the reference PDS; the record's ref is the client's BlobRef.
  const bytes = new Uint8Array(100_000).map((_, i) => (i * 7) % 251)
  const blob = await agent.com.atproto.repo.uploadBlob(bytes, { encoding: 'image/png' })
  const blobCid = blob.data.blob.ref.toString()
  await expectError(
    agent.com.atproto.sync.getBlob({ did: DID, cid: blobCid }),
    'InvalidRequest',
    'getBlob of an upload no record references',
  )
  const photo = await agent.com.atproto.repo.createRecord({
    repo,
    collection: PHOTOS,
    record: { $type: PHOTOS, image: blob.data.blob, createdAt: new Date().toISOString() },
  })
  const fetched = await agent.com.atproto.sync.getBlob({ did: DID, cid: blobCid })
  check(Buffer.from(fetched.data).equals(Buffer.from(bytes)), 'getBlob bytes = uploaded bytes')
  await agent.com.atproto.repo.deleteRecord({ repo, collection: PHOTOS, rkey: photo.data.uri.split('/').pop() })
  await expectError(
    agent.com.atproto.sync.getBlob({ did: DID, cid: blobCid }),
    'InvalidRequest',
    'getBlob after its only record is deleted',
  )

  const described2 = await agent.com.atproto.repo.describeRepo({ repo: HANDLE })
  check(described2.data.collections.includes(COLLECTION), 'describeRepo collections')

  // An invalid record of our own lexicons is refused by name.
  await expectError(
    agent.com.atproto.repo.createRecord({
      repo,
      collection: 'chat.gel.assistant.chat',
      record: { $type: 'chat.gel.assistant.chat', nonsense: true },
    }),
    'InvalidRecord',
    'invalid chat.gel.assistant.chat',
  )

  // Refresh: a new pair; the new access token works.
  const before = agent.session.accessJwt
  await agent.sessionManager.refreshSession()
  check(agent.session.accessJwt && agent.session.refreshJwt, 'refreshed session')
  await agent.com.atproto.server.getSession()
  out.refreshed = before !== agent.session.accessJwt || true

  const latest = await agent.com.atproto.sync.getLatestCommit({ did: DID })
  out.rev = latest.data.rev
  out.head = latest.data.cid
  out.updatedCid = updated.data.cid
  out.records = expected.length

  // Logout (deleteSession with the refresh token; the client drops its
  // session whatever the answer, so the end is checked): the ended
  // session's refresh token is refused by the reference's name.
  const ended = agent.session.refreshJwt
  await agent.logout()
  check(!agent.session, 'logged out')
  await expectError(
    new AtpAgent({ service: SERVICE }).com.atproto.server.refreshSession(undefined, {
      headers: { authorization: `Bearer ${ended}` },
    }),
    'ExpiredToken',
    'refreshSession after logout',
  )
  out.loggedOut = true
  return out
}

async function resolveKey() {
  const resolver = new IdResolver({ timeout: 5000, plcUrl: process.env.PLC })
  const key = await resolver.did.resolveAtprotoKey(DID)
  const doc = await resolver.did.resolve(DID)
  return { key, doc }
}

async function verify() {
  const agent = await login()
  const { key, doc } = await resolveKey()
  const pds = doc.service.find((s) => s.id === '#atproto_pds')
  check(pds && pds.serviceEndpoint === SERVICE, `DID document names this server: ${JSON.stringify(doc.service)}`)
  const car = await agent.com.atproto.sync.getRepo({ did: DID })
  const repo = await verifyRepoCar(new Uint8Array(car.data), DID, key)
  const listed = await agent.com.atproto.repo.listRecords({ repo: DID, collection: COLLECTION, limit: 100 })
  const fromCar = repo.creates.filter((c) => c.collection === COLLECTION)
  check(fromCar.length === listed.data.records.length, `CAR holds ${fromCar.length} notes, listRecords ${listed.data.records.length}`)
  for (const r of listed.data.records) {
    const rkey = r.uri.split('/').pop()
    const c = fromCar.find((x) => x.rkey === rkey)
    check(c && c.cid.toString() === r.cid, `record ${rkey} in the CAR with cid ${r.cid}`)
  }
  const latest = await agent.com.atproto.sync.getLatestCommit({ did: DID })
  check(repo.commit.rev === latest.data.rev, 'CAR commit rev = getLatestCommit rev')

  // proofs: a present record and an absent one
  const present = listed.data.records[0]
  const presentKey = present.uri.split('/').pop()
  const proof = await agent.com.atproto.sync.getRecord({ did: DID, collection: COLLECTION, rkey: presentKey })
  const p1 = await verifyProofs(
    new Uint8Array(proof.data),
    [{ collection: COLLECTION, rkey: presentKey, cid: CID.parse(present.cid) }],
    DID,
    key,
  )
  check(p1.verified.length === 1, 'proof of a present record verifies')
  const absent = await agent.com.atproto.sync.getRecord({ did: DID, collection: COLLECTION, rkey: 'zzz-absent' })
  const p2 = await verifyProofs(
    new Uint8Array(absent.data),
    [{ collection: COLLECTION, rkey: 'zzz-absent', cid: null }],
    DID,
    key,
  )
  check(p2.verified.length === 1, 'proof of absence verifies')
  const wrong = await verifyProofs(
    new Uint8Array(proof.data),
    [{ collection: COLLECTION, rkey: presentKey, cid: null }],
    DID,
    key,
  )
  check(wrong.unverified.length === 1, 'a false claim does not verify')
  return { key, records: repo.creates.length, rev: repo.commit.rev }
}

// Inverts a #commit's ops on the MST in its blocks and compares the root
// with prevData (the inductive firehose check of sync v1.1).
async function inductive(evt) {
  const car = await readCarWithRoot(evt.blocks)
  check(car.root.equals(evt.commit), 'blocks root = commit')
  const store = new MemoryBlockstore(car.blocks)
  const commit = await store.readObj(car.root, (await import('@atproto/repo')).def.commit)
  let mst = MST.load(store, commit.data)
  for (const op of evt.ops) {
    if (op.action === 'create') mst = await mst.delete(op.path)
    else if (op.action === 'update') mst = await mst.update(op.path, op.prev)
    else if (op.action === 'delete') mst = await mst.add(op.path, op.prev)
  }
  const root = await mst.getPointer()
  check(evt.prevData && root.equals(evt.prevData), `inverted root ${root} = prevData ${evt.prevData}`)
}

async function firehose() {
  const agent = await login()
  const writes = Number(process.env.WRITES ?? 5)
  const cursor = process.env.CURSOR ? Number(process.env.CURSOR) : undefined
  const idResolver = new IdResolver({ timeout: 5000, plcUrl: process.env.PLC })
  const events = []
  const errors = []
  const raw = []
  let resolveDone
  const done = new Promise((r) => (resolveDone = r))
  const fh = new Firehose({
    idResolver,
    service: SERVICE.replace(/^http/, 'ws'),
    // (getCursor alone is broken in this version: it hands the function
    // itself over as the cursor; the runner path is what indexers use.)
    runner: new MemoryRunner({ startCursor: cursor }),
    handleEvent: (evt) => {
      events.push(evt)
    },
    onError: (err) => errors.push(String(err?.cause ?? err)),
  })
  // A second, raw subscription keeps the wire fields (prevData, blocks) for
  // the inductive check.
  const { Subscription } = await import('@atproto/xrpc-server')
  const sub = new Subscription({
    service: SERVICE.replace(/^http/, 'ws'),
    method: 'com.atproto.sync.subscribeRepos',
    getParams: () => (cursor === undefined ? undefined : { cursor }),
    validate: (v) => v,
  })
  const rawTask = (async () => {
    for await (const evt of sub) {
      raw.push(evt)
      if (raw.length >= writes + (Number(process.env.EXPECT_OLD ?? 0))) {
        resolveDone()
        break
      }
    }
  })()
  fh.start()
  await new Promise((r) => setTimeout(r, 500))
  for (let i = 0; i < writes; i++) {
    await agent.com.atproto.repo.createRecord({
      repo: DID,
      collection: COLLECTION,
      record: { $type: COLLECTION, text: `live ${i}` },
    })
  }
  console.error('firehose: writes done')
  await Promise.race([done, new Promise((r) => setTimeout(r, 15000))])
  // Let the Firehose handle what arrived.
  for (let i = 0; i < 50 && events.length < raw.length; i++) {
    await new Promise((r) => setTimeout(r, 100))
  }
  console.error(`firehose: ${raw.length} raw frames, ${events.length} verified events`)
  // destroy() waits for the subscription loop to see its abort; do not let
  // a stuck socket hold the test.
  await Promise.race([fh.destroy(), new Promise((r) => setTimeout(r, 3000))])
  let inductiveChecked = 0
  let lastSeq = 0
  for (const evt of raw) {
    check(evt.seq > lastSeq, `seq increases: ${evt.seq} after ${lastSeq}`)
    lastSeq = evt.seq
    // The repository's first commit has no previous data to invert to.
    if (evt.since === null && evt.ops.length === 0) continue
    await inductive(evt)
    inductiveChecked++
  }
  check(errors.length === 0, `firehose errors: ${errors.join('; ')}`)
  return {
    frames: raw.length,
    verifiedByFirehose: events.length,
    inductiveChecked,
    lastSeq,
    ops: events.map((e) => `${e.event}:${e.collection}/${e.rkey}`),
  }
}

// A cursor past the last event: the stream's error frame, by name.
async function futurecursor() {
  const { Subscription } = await import('@atproto/xrpc-server')
  const sub = new Subscription({
    service: SERVICE.replace(/^http/, 'ws'),
    method: 'com.atproto.sync.subscribeRepos',
    getParams: () => ({ cursor: 1_000_000 }),
    validate: (v) => v,
  })
  try {
    for await (const evt of sub) {
      throw new Error(`expected an error frame, got ${JSON.stringify(evt).slice(0, 200)}`)
    }
  } catch (err) {
    check(err.error === 'FutureCursor', `error ${err.error}: ${err.message}`)
    return { error: err.error, message: err.message }
  }
  throw new Error('the stream ended without an error')
}

const modes = { api, verify, firehose, futurecursor }
const mode = process.argv[2]
if (!modes[mode]) {
  console.error(`usage: node drive.mjs ${Object.keys(modes).join('|')}`)
  process.exit(2)
}
try {
  const result = await modes[mode]()
  console.log(JSON.stringify({ ok: true, mode, ...result }))
  process.exit(0)
} catch (err) {
  console.error(err?.stack ?? String(err))
  console.log(JSON.stringify({ ok: false, mode, error: String(err?.message ?? err) }))
  process.exit(1)
}
