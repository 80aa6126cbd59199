// The membership log: every change of who holds the account key, as
// signed `chat.gel.assistant.membership` records chained by CID. A device
// trusts the change its pairing wrap names (hence that change's history,
// by hashes) and every later change whose signature and rules hold. The
// rules and the fork handling follow crates/seal/src/membership.rs line by line:
// two implementations that disagreed on a fork would disagree on keys.

import { compareBytes, concat, equalBytes, toHex, utf8 } from "./bytes.js";
import { SealError } from "./errors.js";
import { CID, cidForRecord, encodeCbor, isMap, type DataMap, type Value } from "./model.js";
import { verify } from "./signing.js";

/** Collection (and `$type`) of membership change records. */
export const MEMBERSHIP_TYPE = "chat.gel.assistant.membership";
const SIGN_LABEL = "gelstore/membership/v1";

/** An admitted device as a roster names it. */
export interface Member {
  publicKey: Uint8Array;
  /** Its signing key (a did:key), if it proved one at pairing. */
  signingKey?: string;
}

/** Devices by record key. */
export type Roster = Map<string, Member>;

/** What one change says. */
export interface Change {
  epoch: number;
  accountKeyId: string;
  accountPublicKey: Uint8Array;
  prev: CID[];
  roster: Roster;
  removed: string[];
  signer: string;
  createdAt: string;
}

/** A change with its signature, its record and the record's CID. */
export interface SignedChange {
  change: Change;
  sig: Uint8Array;
  value: DataMap;
  cid: CID;
}

/** What the log says holds now. */
export type Standing =
  | { kind: "settled"; epoch: number; keyId: string; publicKey: Uint8Array; roster: Roster }
  | { kind: "forked"; epoch: number; keyIds: string[]; kept: Roster; leftOut: string[] };

const fail = (reason: string) => new SealError("MembershipLog", `membership log: ${reason}`);
const keyOf = (cid: CID): string => toHex(cid.bytes); // hex sorts as the bytes do, as Rust orders CIDs

/** The devices new seals may go to: the roster, or what a fork kept. */
export function standingRoster(s: Standing): Roster {
  return s.kind === "settled" ? s.roster : s.kept;
}

/** The message a change's signature covers: label ‖ 0 ‖ account DID ‖ 0 ‖ DAG-CBOR(record − sig). */
export function signingMessage(did: string, value: DataMap): Uint8Array {
  const unsigned: DataMap = { ...value };
  delete unsigned.sig;
  return concat(utf8(SIGN_LABEL), Uint8Array.of(0), utf8(did), Uint8Array.of(0), encodeCbor(unsigned));
}

function ascending<T>(items: T[], cmp: (a: T, b: T) => number): boolean {
  return items.every((x, i) => i === 0 || cmp(items[i - 1]!, x) < 0);
}
const cmpStr = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** Parses a stored change (structure only; {@link Log.verify} checks signatures and rules). */
export function parseChange(value: Value): SignedChange {
  if (!isMap(value)) throw fail("a change that is not a map");
  const str = (v: Value | undefined, name: string): string => {
    if (typeof v !== "string") throw fail(`${name} is not a string`);
    return v;
  };
  const bytes = (v: Value | undefined, name: string, len?: number): Uint8Array => {
    if (!(v instanceof Uint8Array)) throw fail(`${name} is not bytes`);
    if (len !== undefined && v.length !== len) throw fail(`${name} is not ${len} bytes`);
    return v;
  };
  const epoch = value.epoch;
  if (typeof epoch !== "number" || !Number.isSafeInteger(epoch)) throw fail("epoch is not an integer");
  if (epoch < 0) throw fail("a negative epoch");
  if (!Array.isArray(value.prev)) throw fail("prev is not a list");
  const prev = value.prev.map((p) => {
    const cid = CID.asCID(p);
    if (!cid) throw fail("prev holds something other than links");
    return cid;
  });
  if (!ascending(prev, (a, b) => compareBytes(a.bytes, b.bytes))) throw fail("prev is not in byte order without repeats");
  if (!Array.isArray(value.roster)) throw fail("roster is not a list");
  const roster: Roster = new Map();
  const devices: string[] = [];
  for (const m of value.roster) {
    if (!isMap(m)) throw fail("a roster entry is not a map");
    const device = str(m.device, "roster.device");
    devices.push(device);
    const member: Member = { publicKey: bytes(m.publicKey, `the public key of ${JSON.stringify(device)}`, 32) };
    if (m.signingKey !== undefined) member.signingKey = str(m.signingKey, "roster.signingKey");
    roster.set(device, member);
  }
  if (!ascending(devices, cmpStr)) throw fail("roster is not in record key order without repeats");
  if (!Array.isArray(value.removed)) throw fail("removed is not a list");
  const removed = value.removed.map((d) => str(d, "removed"));
  if (!ascending(removed, cmpStr)) throw fail("removed is not in order without repeats");
  return {
    change: {
      epoch,
      accountKeyId: str(value.accountKeyId, "accountKeyId"),
      accountPublicKey: bytes(value.accountPublicKey, "accountPublicKey", 32),
      prev,
      roster,
      removed,
      signer: str(value.signer, "signer"),
      createdAt: str(value.createdAt, "createdAt"),
    },
    sig: bytes(value.sig, "sig"),
    value,
    cid: cidForRecord(value),
  };
}

function sameMember(a: Member | undefined, b: Member | undefined): boolean {
  if (!a || !b) return a === b;
  return equalBytes(a.publicKey, b.publicKey) && a.signingKey === b.signingKey;
}

/** The union of rosters, or undefined if two name one device differently. */
function unionOf(rosters: Iterable<Roster>): Roster | undefined {
  const out: Roster = new Map();
  for (const r of rosters) {
    for (const [d, m] of r) {
      const known = out.get(d);
      if (known && !sameMember(known, m)) return undefined;
      if (!known) out.set(d, m);
    }
  }
  return out;
}

function intersectionOf(rosters: Roster[]): Roster {
  const [first, ...rest] = rosters;
  if (!first) return new Map();
  const out: Roster = new Map(first);
  for (const r of rest) for (const [d, m] of out) if (!sameMember(r.get(d), m)) out.delete(d);
  return out;
}

/** Whether every device of `inner` is in `outer` with the same keys. */
function within(inner: Roster, outer: Roster): boolean {
  return [...inner].every(([d, m]) => sameMember(outer.get(d), m));
}

const sorted = (set: Iterable<string>): string[] => [...set].sort(cmpStr);

/** The verified membership log of one account. */
export class Log {
  readonly did: string;
  private verified = new Map<string, SignedChange>();
  private headSet = new Set<string>();
  private refusedList: string[] = [];
  private standingNow: Standing = { kind: "forked", epoch: 0, keyIds: [], kept: new Map(), leftOut: [] };

  private constructor(did: string) {
    this.did = did;
  }

  /** A log that starts with `genesis`, the first device's own change. */
  static create(did: string, genesis: SignedChange): Log {
    checkGenesis(did, genesis);
    const log = new Log(did);
    log.verified.set(keyOf(genesis.cid), genesis);
    log.headSet.add(keyOf(genesis.cid));
    log.standingNow = log.standingAfter(log.headSet);
    return log;
  }

  /**
   * Verifies an account's stored changes, trusting `anchor` (the change
   * this device's pairing wrap names) and, by hashes, its history. Fails if
   * that history is incomplete or does not verify, or if a change of
   * `knownHeads` (verified before) is gone: the log went backwards.
   */
  static verify(did: string, changes: readonly SignedChange[], anchor: CID, knownHeads: readonly CID[] = []): Log {
    const parsed = new Map<string, SignedChange>();
    for (const c of changes) if (!parsed.has(keyOf(c.cid))) parsed.set(keyOf(c.cid), c);
    const history = new Set<string>();
    const stack = [keyOf(anchor)];
    const roots: string[] = [];
    while (stack.length > 0) {
      const k = stack.pop()!;
      if (history.has(k)) continue;
      history.add(k);
      const c = parsed.get(k);
      if (!c) throw fail(`change ${CID.decode(hexBytes(k))}, in the history of the change that admitted this device, is missing`);
      if (c.change.prev.length === 0) roots.push(k);
      stack.push(...c.change.prev.map(keyOf));
    }
    if (roots.length !== 1) throw fail(`the history of the change that admitted this device has ${roots.length} first changes`);
    const root = roots[0]!;
    const genesis = parsed.get(root)!;
    parsed.delete(root);
    const log = Log.create(did, genesis);
    // Kahn's order over what follows the root: a change is checked once every change it names is verified.
    const waiting = new Map<string, number>();
    const followers = new Map<string, string[]>();
    for (const k of sorted(parsed.keys())) {
      const c = parsed.get(k)!;
      if (c.change.prev.length === 0) continue; // another first change: never verified
      waiting.set(k, c.change.prev.length);
      for (const p of c.change.prev) {
        const list = followers.get(keyOf(p)) ?? [];
        list.push(k);
        followers.set(keyOf(p), list);
      }
    }
    const ready: string[] = [];
    const unlock = (k: string) => {
      for (const f of followers.get(k) ?? []) {
        const n = waiting.get(f);
        if (n === undefined) continue;
        waiting.set(f, n - 1);
        if (n - 1 === 0) ready.push(f);
      }
    };
    unlock(root);
    const refused: string[] = [];
    while (ready.length > 0) {
      const k = ready.pop()!;
      waiting.delete(k);
      const c = parsed.get(k)!;
      parsed.delete(k);
      try {
        log.accept(c);
        unlock(k);
      } catch (e) {
        refused.push((e as Error).message);
      }
    }
    for (const k of sorted(parsed.keys())) {
      const c = parsed.get(k)!;
      refused.push(`change ${c.cid}: ${c.change.prev.length === 0 ? "a second first change" : "it follows a change that is missing or refused"}`);
    }
    const bad = sorted(history).find((k) => !log.verified.has(k));
    if (bad) throw fail(`change ${CID.decode(hexBytes(bad))}, in the history of the change that admitted this device, does not verify`);
    const lost = knownHeads.find((c) => !log.verified.has(keyOf(c)));
    if (lost) throw fail(`change ${lost}, which this device verified before, is missing or no longer verifies: the log went backwards`);
    log.refusedList = refused;
    return log;
  }

  /** Adds `c` if its signature and the rules hold. */
  accept(c: SignedChange): void {
    const k = keyOf(c.cid);
    if (this.verified.has(k)) return;
    checkChange(this, c);
    for (const p of c.change.prev) this.headSet.delete(keyOf(p));
    this.headSet.add(k);
    this.verified.set(k, c);
    this.standingNow = this.standingAfter(this.headSet);
  }

  /** The standing after every verified change. */
  standing(): Standing {
    return this.standingNow;
  }

  /** The verified changes no verified change follows, in CID byte order. */
  heads(): CID[] {
    return sorted(this.headSet).map((k) => this.verified.get(k)!.cid);
  }

  /** Changes that did not verify, with why. */
  refused(): readonly string[] {
    return this.refusedList;
  }

  /** The verified change `cid`. */
  get(cid: CID): SignedChange | undefined {
    return this.verified.get(keyOf(cid));
  }

  /** Every verified change, in CID byte order. */
  changes(): SignedChange[] {
    return sorted(this.verified.keys()).map((k) => this.verified.get(k)!);
  }

  /** The public key a verified change puts in force under `keyId`, if one does. */
  accountPublicKey(keyId: string): Uint8Array | undefined {
    return this.changes().find((c) => c.change.accountKeyId === keyId)?.change.accountPublicKey;
  }

  /** Whether some verified change removed `device`. */
  removed(device: string): boolean {
    return this.changes().some((c) => c.change.removed.includes(device));
  }

  /** The standing after the verified changes `set` (keys of CIDs). */
  standingAfter(set: Set<string>): Standing {
    const changes = sorted(this.undisputed(set)).map((k) => this.verified.get(k)!.change);
    const first = changes[0];
    if (!first) return { kind: "forked", epoch: 0, keyIds: [], kept: new Map(), leftOut: [] };
    const union = unionOf(changes.map((c) => c.roster));
    if (union && changes.every((c) => c.accountKeyId === first.accountKeyId)) return settled(first, union);
    const kept = intersectionOf(changes.map((c) => c.roster));
    // The holders of a key: every device a change before (or in) `set` admitted under it.
    const history = sorted(this.historyOf(set)).flatMap((k) => this.verified.get(k) ?? []);
    const holders = (keyId: string) => unionOf(history.filter((c) => c.change.accountKeyId === keyId).map((c) => c.change.roster));
    let chosen: Change | undefined;
    for (const c of changes) {
      const h = holders(c.accountKeyId);
      if (!h || !within(h, kept)) continue;
      // Rust's max_by keeps the last of equal maxima.
      if (!chosen || c.epoch > chosen.epoch || (c.epoch === chosen.epoch && cmpStr(c.accountKeyId, chosen.accountKeyId) >= 0)) chosen = c;
    }
    if (chosen) {
      const roster = unionOf(changes.filter((o) => o.accountKeyId === chosen!.accountKeyId).map((o) => o.roster))!;
      return settled(chosen, roster);
    }
    const all = new Set(changes.flatMap((c) => [...c.roster.keys()]));
    return {
      kind: "forked",
      epoch: Math.max(...changes.map((c) => c.epoch)),
      keyIds: sorted(new Set(changes.map((c) => c.accountKeyId))),
      leftOut: sorted(all).filter((d) => !kept.has(d)),
      kept,
    };
  }

  /**
   * The changes of `set` whose side of a fork no other side disputes: a
   * side is disputed when a device that signed on it is removed on another
   * side whose own signers this side does not remove. All of `set` if none is left.
   */
  undisputed(set: Set<string>): Set<string> {
    if (set.size < 2) return set;
    const sides = sorted(set).map((h) => {
      const shared = this.historyOf(new Set([...set].filter((o) => o !== h)));
      const signers = new Set<string>();
      const removed = new Set<string>();
      for (const k of this.historyOf(new Set([h]))) {
        if (shared.has(k)) continue;
        const c = this.verified.get(k);
        if (!c) continue;
        signers.add(c.change.signer);
        for (const d of c.change.removed) removed.add(d);
      }
      return { h, signers, removed };
    });
    const disjoint = (a: Set<string>, b: Set<string>) => ![...a].some((x) => b.has(x));
    const live = new Set(
      sides
        .filter((s) => !sides.some((o) => o.h !== s.h && !disjoint(s.signers, o.removed) && disjoint(o.signers, s.removed)))
        .map((s) => s.h),
    );
    return live.size === 0 ? set : live;
  }

  /** `set` and every verified change before it. */
  historyOf(set: Set<string>): Set<string> {
    const seen = new Set<string>();
    const stack = [...set];
    while (stack.length > 0) {
      const k = stack.pop()!;
      if (seen.has(k)) continue;
      seen.add(k);
      const c = this.verified.get(k);
      if (c) stack.push(...c.change.prev.map(keyOf));
    }
    return seen;
  }

  /** Whether the verified change with key `k` exists (for the rules). */
  hasKey(k: string): boolean {
    return this.verified.has(k);
  }

  /** The verified change with key `k`. */
  byKey(k: string): SignedChange | undefined {
    return this.verified.get(k);
  }
}

function hexBytes(hex: string): Uint8Array {
  return Uint8Array.from(hex.match(/../g)!.map((b) => parseInt(b, 16)));
}

function settled(c: Change, roster: Roster): Standing {
  return { kind: "settled", epoch: c.epoch, keyId: c.accountKeyId, publicKey: c.accountPublicKey, roster };
}

function checkSignature(did: string, g: SignedChange, roster: Roster): void {
  const signer = g.change.signer;
  const key = roster.get(signer)?.signingKey;
  if (!key) throw fail(`change ${g.cid} is signed by ${JSON.stringify(signer)}, which has no signing key there`);
  if (!verify(key, signingMessage(did, g.value), g.sig)) throw fail(`change ${g.cid}: the signature does not verify`);
}

function checkKeyId(g: SignedChange): void {
  const c = g.change;
  if (!c.accountKeyId.startsWith(`account:${c.epoch}:`) || utf8(c.accountKeyId).length > 128) {
    throw fail(`change ${g.cid} puts key ${JSON.stringify(c.accountKeyId)} in force at epoch ${c.epoch}`);
  }
}

function checkGenesis(did: string, g: SignedChange): void {
  const c = g.change;
  if (c.prev.length > 0 || c.epoch !== 0 || c.removed.length > 0) {
    throw fail(`change ${g.cid} is not a first change (epoch 0, following nothing, removing no one)`);
  }
  if (c.roster.size !== 1 || !c.roster.has(c.signer)) throw fail(`first change ${g.cid} must admit exactly its signer`);
  checkKeyId(g);
  checkSignature(did, g, c.roster);
}

// The rules for a change that follows verified ones (crates/seal/src/membership.rs, check_change).
function checkChange(log: Log, g: SignedChange): void {
  const c = g.change;
  const no = (why: string) => fail(`change ${g.cid}: ${why}`);
  if (c.prev.length === 0) throw no("a second first change");
  const missing = c.prev.find((p) => !log.hasKey(keyOf(p)));
  if (missing) throw no(`it follows ${missing}, which is not verified`);
  const prev = new Set(c.prev.map(keyOf));
  // The signer answers to the sides of a fork that stand, not to one a removed device made.
  const parents = sorted(log.undisputed(prev)).map((k) => log.byKey(k)!.change);
  const me = c.roster.get(c.signer);
  if (!me) throw no(`its signer ${JSON.stringify(c.signer)} is not in its roster`);
  const standing = log.standingAfter(prev);
  if (!sameMember(standingRoster(standing).get(c.signer), me)) {
    throw no(`its signer ${JSON.stringify(c.signer)} is not admitted, with these keys, after the changes it follows (epoch ${standing.epoch})`);
  }
  checkSignature(log.did, g, c.roster);
  const union = unionOf(parents.map((p) => p.roster)) ?? new Map();
  if (standing.kind === "settled" && standing.keyId === c.accountKeyId) {
    if (c.epoch !== standing.epoch || !equalBytes(c.accountPublicKey, standing.publicKey)) throw no("an admission that changes the epoch or the key's public half");
    if (!within(standing.roster, c.roster)) throw no("an admission that drops a device (removals rotate the key)");
    if (c.removed.length > 0) throw no("an admission that lists removed devices");
    return;
  }
  const next = Math.max(0, ...parents.map((p) => p.epoch)) + 1;
  if (c.epoch !== next) throw no(`a rotation to epoch ${c.epoch} after epoch ${next - 1}`);
  checkKeyId(g);
  if (log.changes().some((o) => o.change.accountKeyId === c.accountKeyId)) throw no(`a rotation to key ${JSON.stringify(c.accountKeyId)}, which another change put in force`);
  if (!within(c.roster, standingRoster(standing))) throw no("a rotation that admits a device the changes it follows did not all keep");
  const dropped = sorted(union.keys()).filter((d) => !c.roster.has(d));
  if (dropped.length !== c.removed.length || dropped.some((d, i) => d !== c.removed[i])) throw no("its removed list is not the devices it drops");
}
