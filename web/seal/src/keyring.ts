// A reader's keyring, rebuilt from the account's key records: it takes the
// account key from its pairing wrap (the one addressed to this device that
// opens with its pairing secret), trusts the membership change that wrap
// is bound to, verifies the log from there, then opens rotations to this
// device, older account keys chained to newer ones and chat keys wrapped to
// account keys it holds. An account key counts only if a verified change
// names its keyId and public key (crates/seal/src/keyring.rs: join, absorb).

import { equalBytes, osRandom, toHex, type Random } from "./bytes.js";
import { SealError, malformed } from "./errors.js";
import type { ChatKey, KeyLookup } from "./keys.js";
import { Log, MEMBERSHIP_TYPE, parseChange, type SignedChange } from "./membership.js";
import { isMap, type CID, type Value } from "./model.js";
import type { PairingCode } from "./pairing.js";
import { KEY_WRAP_TYPE, accountPsk, openWrap, pairingPsk, parseKeyWrap, sealWrap, x25519Public, type KeyWrap } from "./wrap.js";

/** One epoch of the account key. */
export interface AccountKey {
  keyId: string;
  epoch: number;
  secret: Uint8Array;
  publicKey: Uint8Array;
}

/** The key records a keyring is built from. */
export interface KeySet {
  wraps: KeyWrap[];
  changes: SignedChange[];
}

/** What {@link Keyring.absorb} learned and refused. */
export interface AbsorbReport {
  accounts: number;
  chatKeys: number;
  changes: number;
  /** Wraps addressed to a key held that were refused, with why (a forged or damaged wrap shows here). */
  rejected: [string, SealError][];
  refusedChanges: string[];
}

/** This device, as the keyring needs it. */
export interface DeviceIdentity {
  /** The record key of its `device` record. */
  deviceId: string;
  /** Its X25519 secret. */
  secret: Uint8Array;
  /** The pairing code it was admitted with (its secret opens the pairing wrap). */
  code: PairingCode;
}

type KeyKind = { kind: "account"; epoch: number } | { kind: "chat"; chat: string; epoch: number };

const U64 = /^\+?[0-9]+$/; // what Rust's u64::from_str takes

/** What a keyId names: `account:<epoch>:<hex>` or `chat:<chat rkey>:<epoch>:<hex>`. */
export function parseKeyId(keyId: string): KeyKind | undefined {
  if (keyId.startsWith("account:")) {
    const rest = keyId.slice("account:".length);
    const at = rest.indexOf(":");
    if (at < 0 || !U64.test(rest.slice(0, at))) return undefined;
    return { kind: "account", epoch: Number(rest.slice(0, at)) };
  }
  if (keyId.startsWith("chat:")) {
    const rest = keyId.slice("chat:".length);
    const last = rest.lastIndexOf(":");
    if (last < 0) return undefined;
    const mid = rest.lastIndexOf(":", last - 1);
    if (mid < 0) return undefined;
    const epoch = rest.slice(mid + 1, last);
    const chat = rest.slice(0, mid);
    if (!U64.test(epoch) || chat === "") return undefined;
    return { kind: "chat", chat, epoch: Number(epoch) };
  }
  return undefined;
}

/**
 * Splits key records (data model, with `$type`; use `fromJson` on atproto
 * JSON) into wraps and changes. A record that does not parse is skipped
 * and listed, never fatal, so a planted record cannot lock a device out.
 */
export function parseKeySet(records: readonly Value[]): { keys: KeySet; skipped: string[] } {
  const keys: KeySet = { wraps: [], changes: [] };
  const skipped: string[] = [];
  for (const value of records) {
    try {
      const type = isMap(value) ? value.$type : undefined;
      if (type === KEY_WRAP_TYPE) keys.wraps.push(parseKeyWrap(value));
      else if (type === MEMBERSHIP_TYPE) keys.changes.push(parseChange(value));
    } catch (e) {
      skipped.push((e as Error).message);
    }
  }
  return { keys, skipped };
}

interface ChatEntry {
  key: ChatKey;
  chat: string;
  /** The keyId of the account key it is wrapped to: a chat key is reused only under that key. */
  account: string;
}

type Step = { s: "done" } | { s: "ignored" } | { s: "later" } | { s: "rejected"; e: SealError } | { s: "retry"; e: SealError };

const asSealError = (e: unknown): SealError => (e instanceof SealError ? e : new SealError("Keyring", String(e)));

/** A device's keys (reader side, plus the chat keys it makes to seal). */
export class Keyring implements KeyLookup {
  readonly did: string;
  readonly deviceId: string;
  private readonly secret: Uint8Array;
  private readonly publicKey: Uint8Array;
  private accounts: AccountKey[] = [];
  private chats = new Map<string, ChatEntry>();
  readonly log: Log;
  /** The keyId of the account key this device was admitted with (keep it to rejoin). */
  readonly admittedWith: string;

  private constructor(did: string, device: DeviceIdentity, account: AccountKey, log: Log) {
    this.did = did;
    this.deviceId = device.deviceId;
    this.secret = device.secret;
    this.publicKey = x25519Public(device.secret);
    this.accounts = [account];
    this.admittedWith = account.keyId;
    this.log = log;
  }

  /**
   * Joins (or, with `pin` and `knownHeads`, rejoins) with the account's key
   * records: the account key only from a pairing wrap to this device that
   * opens with its pairing secret and is bound to a change admitting it,
   * which anchors the log; then everything else that follows from there.
   */
  static async join(did: string, device: DeviceIdentity, records: KeySet, options: { pin?: string; knownHeads?: CID[] } = {}): Promise<{ keyring: Keyring; report: AbsorbReport }> {
    const me = x25519Public(device.secret);
    if (!equalBytes(device.code.publicKey, me)) throw new SealError("Keyring", "keyring: the pairing request was made for another device key");
    const admissions = records.changes.filter((c) => {
      const m = c.change.roster.get(device.deviceId);
      return m !== undefined && equalBytes(m.publicKey, me);
    });
    const psk = pairingPsk(device.code.secret, device.code.publicKey);
    let lastError: SealError | undefined;
    let found: { account: AccountKey; anchor: CID } | undefined;
    wraps: for (const wrap of records.wraps) {
      const kind = parseKeyId(wrap.keyId);
      const forMe = wrap.recipient.kind === "device" && wrap.recipient.device === device.deviceId;
      if (kind?.kind !== "account" || !forMe || kind.epoch !== wrap.epoch || (options.pin !== undefined && options.pin !== wrap.keyId)) continue;
      for (const change of admissions.filter((c) => c.change.accountKeyId === wrap.keyId)) {
        try {
          const secret = await openWrap(did, wrap, device.secret, psk, change.cid);
          const publicKey = x25519Public(secret);
          if (!equalBytes(publicKey, change.change.accountPublicKey)) {
            lastError = new SealError("MembershipLog", `membership log: the pairing wrap carries another key than change ${change.cid} names`);
            continue;
          }
          found = { account: { keyId: wrap.keyId, epoch: wrap.epoch, secret, publicKey }, anchor: change.cid };
          break wraps;
        } catch (e) {
          lastError = asSealError(e);
        }
      }
      lastError ??= new SealError("MembershipLog", `membership log: the pairing wrap of ${JSON.stringify(wrap.keyId)} names no membership change that admits this device`);
    }
    if (!found) {
      throw lastError ?? new SealError("NotRecipient", `not a recipient: no account key wrap is addressed to device ${JSON.stringify(device.deviceId)}; approve its pairing code on a device that is already paired`);
    }
    const log = Log.verify(did, records.changes, found.anchor, options.knownHeads ?? []);
    const keyring = new Keyring(did, device, found.account, log);
    const report = await keyring.absorb(records);
    report.refusedChanges = [...log.refused()];
    return { keyring, report };
  }

  /** Learns what it can from `records`, in any order (see the module comment). */
  async absorb(records: KeySet): Promise<AbsorbReport> {
    const report: AbsorbReport = { accounts: 0, chatKeys: 0, changes: 0, rejected: [], refusedChanges: [] };
    let pending = records.changes.filter((c) => !this.log.get(c.cid));
    for (;;) {
      const before = pending.length;
      pending = pending.filter((c) => {
        if (c.change.prev.some((p) => !this.log.get(p))) return true; // what it follows may come later
        try {
          this.log.accept(c);
          report.changes++;
        } catch (e) {
          report.refusedChanges.push(`${c.cid}: ${(e as Error).message}`);
        }
        return false;
      });
      if (pending.length === before) break;
    }
    report.refusedChanges.push(...pending.map((c) => `${c.cid}: it follows a change that is missing or refused`));
    const wraps = records.wraps;
    const done = wraps.map(() => false);
    const retry: (SealError | undefined)[] = wraps.map(() => undefined);
    for (let progress = true; progress; ) {
      progress = false;
      for (const [i, wrap] of wraps.entries()) {
        if (done[i]) continue;
        const step = await this.tryAbsorb(wrap, report);
        if (step.s === "done") {
          done[i] = true;
          retry[i] = undefined;
          progress = true;
        } else if (step.s === "rejected") {
          done[i] = true;
          report.rejected.push([wrap.keyId, step.e]);
        } else if (step.s === "ignored") {
          done[i] = true;
        } else if (step.s === "retry") {
          retry[i] = step.e;
        }
      }
    }
    for (const [i, e] of retry.entries()) if (!done[i] && e) report.rejected.push([wraps[i]!.keyId, e]);
    return report;
  }

  // Takes account key `secret` of `wrap` if the log names its keyId with that public key.
  private takeAccount(wrap: KeyWrap, secret: Uint8Array, report: AbsorbReport): Step {
    const publicKey = x25519Public(secret);
    const named = this.log.accountPublicKey(wrap.keyId);
    if (!named) return { s: "rejected", e: new SealError("MembershipLog", `membership log: no verified membership change puts ${JSON.stringify(wrap.keyId)} in force`) };
    if (!equalBytes(named, publicKey)) return { s: "rejected", e: new SealError("MembershipLog", `membership log: a wrap of ${JSON.stringify(wrap.keyId)} carries another key than the membership log names`) };
    this.accounts.push({ keyId: wrap.keyId, epoch: wrap.epoch, secret, publicKey });
    report.accounts++;
    return { s: "done" };
  }

  private async tryAbsorb(wrap: KeyWrap, report: AbsorbReport): Promise<Step> {
    const kind = parseKeyId(wrap.keyId);
    if (!kind) return { s: "ignored" };
    const r = wrap.recipient;
    if (r.kind === "device") {
      if (kind.kind !== "account" || r.device !== this.deviceId || kind.epoch !== wrap.epoch) return { s: "ignored" };
      if (this.account(kind.epoch, wrap.keyId) || kind.epoch === 0) return { s: "ignored" }; // epoch 0 arrives by pairing only
      const prevs = this.accounts.filter((a) => a.epoch === kind.epoch - 1).sort(byKey);
      if (prevs.length === 0) return { s: "later" };
      let error: SealError | undefined;
      for (const prev of prevs) {
        try {
          const secret = await openWrap(this.did, wrap, this.secret, accountPsk(prev.secret, prev.keyId));
          return this.takeAccount(wrap, secret, report);
        } catch (e) {
          error = asSealError(e);
        }
      }
      // The key it was made with may still come (another wrap of this batch): report it only if nothing opens it.
      return { s: "retry", e: error! };
    }
    const holder = this.account(r.epoch, r.keyId);
    if (!holder) return { s: "later" };
    const consistent = kind.epoch === wrap.epoch && (kind.kind === "account" ? wrap.epoch < r.epoch : wrap.epoch === r.epoch);
    if (!consistent) return { s: "rejected", e: malformed("keyWrap", "keyId, epoch and recipient epoch do not agree") };
    if (kind.kind === "account" ? this.account(kind.epoch, wrap.keyId) : this.chats.has(wrap.keyId)) return { s: "ignored" };
    let secret: Uint8Array;
    try {
      secret = await openWrap(this.did, wrap, holder.secret, accountPsk(holder.secret, holder.keyId));
    } catch (e) {
      return { s: "rejected", e: asSealError(e) };
    }
    if (kind.kind === "account") return this.takeAccount(wrap, secret, report);
    this.chats.set(wrap.keyId, { key: { keyId: wrap.keyId, secret }, chat: kind.chat, account: r.keyId });
    report.chatKeys++;
    return { s: "done" };
  }

  private account(epoch: number, keyId: string): AccountKey | undefined {
    return this.accounts.find((a) => a.epoch === epoch && a.keyId === keyId);
  }

  private held(keyId: string): AccountKey | undefined {
    const kind = parseKeyId(keyId);
    return kind?.kind === "account" ? this.account(kind.epoch, keyId) : undefined;
  }

  /** The chat key named `keyId`, if held (opening records). */
  chatKey(keyId: string): ChatKey | undefined {
    return this.chats.get(keyId)?.key;
  }

  /** Every chat keyId held, sorted. */
  chatKeyIds(): string[] {
    return [...this.chats.keys()].sort();
  }

  /** Every account key held, oldest first. */
  accountKeys(): AccountKey[] {
    return [...this.accounts].sort(byKey);
  }

  /** The newest verified membership changes (keep them to rejoin later). */
  heads(): CID[] {
    return this.log.heads();
  }

  /** The account key new seals use: the one the log puts in force, if this device is admitted under it and holds it. */
  sealingAccount(): AccountKey {
    const s = this.log.standing();
    if (s.kind === "forked") {
      throw new SealError("MembershipFork", `two membership changes started account epoch ${s.epoch} with different devices; nothing new is sealed until a rotation to the devices every change kept`);
    }
    const m = s.roster.get(this.deviceId);
    if (!m || !equalBytes(m.publicKey, this.publicKey)) {
      throw new SealError("NotAdmitted", `this device is not admitted in account epoch ${s.epoch}${this.log.removed(this.deviceId) ? " (a change removed it)" : ""}`);
    }
    const key = this.held(s.keyId);
    if (!key) throw new SealError("AccountKeyPending", `the account key ${JSON.stringify(s.keyId)} of epoch ${s.epoch} has not reached this device yet; sync again`);
    return key;
  }

  /**
   * The chat key to seal a record of chat `chat` with: this chat's key of
   * the account key in force, made (and wrapped to that key) if there is
   * none yet. Store the returned wrap in the same commit as the records.
   */
  async chatKeyForSeal(chat: string, options: { random?: Random; createdAt?: string } = {}): Promise<{ key: ChatKey; wrap?: KeyWrap }> {
    const account = this.sealingAccount();
    for (const e of this.chats.values()) if (e.chat === chat && e.account === account.keyId) return { key: e.key };
    const random = options.random ?? osRandom;
    const keyId = `chat:${chat}:${account.epoch}:${toHex(random(8))}`;
    if (keyId.length > 128) throw new SealError("Keyring", `keyring: chat rkey ${JSON.stringify(chat)} is too long for a keyId`);
    const key = { keyId, secret: random(32) };
    const wrap = await sealWrap({
      did: this.did,
      keyId,
      epoch: account.epoch,
      recipient: { kind: "account", keyId: account.keyId, epoch: account.epoch },
      recipientPublic: account.publicKey,
      psk: accountPsk(account.secret, account.keyId),
      secret: key.secret,
      createdAt: options.createdAt ?? new Date().toISOString(),
      random,
    });
    this.chats.set(keyId, { key, chat, account: account.keyId });
    return { key, wrap };
  }
}

// (epoch, keyId) order, as the Rust keyring's BTreeMap keeps account keys.
function byKey(a: AccountKey, b: AccountKey): number {
  return a.epoch - b.epoch || (a.keyId < b.keyId ? -1 : a.keyId > b.keyId ? 1 : 0);
}
