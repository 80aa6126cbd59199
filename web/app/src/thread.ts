// A chat's messages as a tree, and the branch the page shows: each user
// message with the reply attempt chosen for it (the newest unless the user
// switched), then the newest user message continuing from that reply.
// Replies are ordered by attempt number, never by key ('.r10' sorts
// before '.r2').

import { fromJson, openRecord, SealError, type BlobSeal, type KeyLookup, type DataMap } from "@gelstore/seal";

export const MESSAGE = "chat.gel.assistant.message";
export const CHAT = "chat.gel.assistant.chat";

/** One message record, opened as far as this browser can. */
export interface Msg {
  key: string;
  cid: string;
  role: string;
  status: string;
  parent?: string;
  /** Set on a reply: the user message it answers and its attempt. */
  reply?: { of: string; attempt: number };
  /** The opened content; `{}` for a pending reply's authenticator. */
  content?: DataMap;
  /** The blobs the envelope lists, with their keys (from the opened frame). */
  blobs?: BlobSeal[];
  /** Why it did not open (kind and message), if it did not. */
  unopened?: { kind: string; message: string };
  /** What the server said of it (`state` of getThread), if anything. */
  serverState?: string;
  /** The record as stored, until it is opened. */
  record?: unknown;
}

const REPLY_KEY = /^(.+)\.r(0|[1-9][0-9]*)$/;

/** A message record's clear fields (all the tree needs); `openMessage` opens it. */
export function readMessage(item: { uri: string; cid: string; value: unknown; state?: string }): Msg {
  const key = item.uri.split("/").pop() ?? "";
  const v = (item.value ?? {}) as Record<string, unknown>;
  const m: Msg = { key, cid: item.cid, role: String(v.role ?? ""), status: String(v.status ?? ""), serverState: item.state, record: item.value };
  if (typeof v.parent === "string") m.parent = v.parent;
  const r = REPLY_KEY.exec(key);
  if (r) m.reply = { of: r[1]!, attempt: Number(r[2]) };
  return m;
}

/** Opens `m` (once) with `keys`: its content and blobs, or why it does not open. */
export function openMessage(did: string, m: Msg, keys: KeyLookup): Msg {
  if (m.record === undefined) return m;
  try {
    const opened = openRecord(fromJson(m.record), { did, collection: MESSAGE, rkey: m.key }, keys);
    m.content = opened.content;
    m.blobs = opened.blobs;
  } catch (e) {
    m.unopened = e instanceof SealError ? { kind: e.kind, message: e.message } : { kind: "Error", message: String(e) };
  }
  m.record = undefined;
  return m;
}

export interface Thread {
  byKey: Map<string, Msg>;
  /** A user message's replies, by attempt number. */
  attempts: Map<string, Msg[]>;
  /** The user messages continuing from a reply, by key. */
  children: Map<string, Msg[]>;
  roots: Msg[];
}

export function buildThread(messages: Msg[]): Thread {
  const byKey = new Map(messages.map((m) => [m.key, m]));
  const attempts = new Map<string, Msg[]>();
  const children = new Map<string, Msg[]>();
  const roots: Msg[] = [];
  for (const m of messages) {
    if (m.reply && m.role !== "user") {
      const list = attempts.get(m.reply.of) ?? [];
      list.push(m);
      attempts.set(m.reply.of, list);
    } else if (m.parent && byKey.has(m.parent)) {
      const list = children.get(m.parent) ?? [];
      list.push(m);
      children.set(m.parent, list);
    } else {
      roots.push(m);
    }
  }
  for (const list of attempts.values()) list.sort((a, b) => a.reply!.attempt - b.reply!.attempt);
  const byTid = (a: Msg, b: Msg) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0);
  for (const list of children.values()) list.sort(byTid);
  roots.sort(byTid);
  return { byKey, attempts, children, roots };
}

/** One step of the shown branch: a user message and its chosen reply. */
export interface Step {
  user: Msg;
  replies: Msg[];
  chosen?: Msg;
}

/**
 * The branch shown, given the attempt chosen per user message (default: see
 * `defaultAttempt`). At each point it goes on with the newest user message;
 * older ones there that never got a reply (sent without asking, one after
 * another) are shown before it, as they were written in sequence.
 */
export function branch(t: Thread, chosen: Map<string, number>): Step[] {
  const steps: Step[] = [];
  let here = t.roots;
  let user = here[here.length - 1];
  const seen = new Set<string>();
  while (user && !seen.has(user.key)) {
    seen.add(user.key);
    for (const m of here) {
      if (m !== user && !seen.has(m.key) && (t.attempts.get(m.key) ?? []).length === 0) {
        seen.add(m.key);
        steps.push({ user: m, replies: [] });
      }
    }
    const replies = t.attempts.get(user.key) ?? [];
    const want = chosen.get(user.key);
    const reply = replies.find((r) => r.reply!.attempt === want) ?? defaultAttempt(t, replies);
    steps.push({ user, replies, chosen: reply });
    if (!reply) break;
    here = t.children.get(reply.key) ?? [];
    user = here[here.length - 1];
  }
  return steps;
}

// Unless the user chose: the attempt the conversation went on from most
// recently (the newest user message continuing from it), else the newest.
function defaultAttempt(t: Thread, replies: Msg[]): Msg | undefined {
  let best: Msg | undefined;
  let bestChild = "";
  for (const r of replies) {
    const kids = t.children.get(r.key) ?? [];
    const newest = kids[kids.length - 1]?.key ?? "";
    if (newest > bestChild) {
      best = r;
      bestChild = newest;
    }
  }
  return best ?? replies[replies.length - 1];
}

/** The waiting calls of a reply (toolCallParts with approval 'pending'). */
export function pendingCalls(m: Msg): { callId: string; pendingId?: string; name: string; arguments: string }[] {
  const parts = (m.content?.parts ?? []) as Record<string, unknown>[];
  return parts
    .filter((p) => p.$type === "chat.gel.assistant.defs#toolCallPart" && p.approval === "pending")
    .map((p) => ({
      callId: String(p.callId),
      pendingId: typeof p.pendingId === "string" ? p.pendingId : undefined,
      name: String(p.name),
      arguments: typeof p.arguments === "string" ? p.arguments : "",
    }));
}
