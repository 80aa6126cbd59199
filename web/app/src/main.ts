// The chat page: sign in, pair this browser as a device, read and write
// sealed chats, stream replies, answer approvals. Everything is opened and
// sealed here; the server only stores and relays ciphertext (and, with
// --assistant, streams the replies it generates to this account's token).
// An account may also live on another PDS the server names (`--web-pds`):
// the page then reads and writes there with the standard repo methods, and
// a reply appears once a device running the assistant has synced.
// The DOM is built with textContent only: nothing from a record or the
// server is ever parsed as HTML.

import {
  CID, Keyring, KEY_WRAP_TYPE, MEMBERSHIP_TYPE, SealError, formatPairingCode, deviceRecord, fromJson, keyWrapValue, openRecord, pairRequest,
  parseKeySet, sealRecord, toJson, type DataMap,
} from "@gelstore/seal";
import * as db from "./db.js";
import { Client, SessionEnded, Unreachable, XrpcError, createSession, serviceUrl, type Session } from "./xrpc.js";
import { nextTid } from "./tid.js";
import { CHAT, MESSAGE, branch, buildThread, openMessage, pendingCalls, readMessage, type Msg, type Thread } from "./thread.js";
import { subscribeReply, type ReplyEvent } from "./stream.js";
import { OutputProblem, SHOWN_CHARS, blobCid, sealFor, wholeOutput } from "./output.js";

const DEVICE = "chat.gel.assistant.device";
const TEXT_PART = "chat.gel.assistant.defs#textPart";
const APPROVAL_PART = "chat.gel.assistant.defs#toolApprovalPart";
/** How often a thread on another PDS is read again while a reply is pending there. */
const POLL_MS = 3000;

type Child = Node | string | null | undefined | false;
function h(tag: string, attrs: Record<string, string | boolean | ((e: Event) => void)> = {}, ...children: Child[]): HTMLElement {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (typeof v === "function") el.addEventListener(k, v);
    else if (v === true) el.setAttribute(k, "");
    else if (v !== false) el.setAttribute(k, v);
  }
  for (const c of children) if (c) el.append(c);
  return el;
}
const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;

const app = {
  client: undefined as Client | undefined,
  keyring: undefined as Keyring | undefined,
  device: undefined as db.Device | undefined,
  chat: undefined as string | undefined,
  thread: undefined as Thread | undefined,
  chosen: new Map<string, number>(),
  live: undefined as Live | undefined,
  pairTimer: undefined as number | undefined,
  /** Whole tool outputs opened in this chat, by blob CID (kept across re-renders). */
  outputs: new Map<string, { text: string; url: string }>(),
  /** Counts thread loads: a slow one stops when a newer one starts. */
  loads: 0,
  /** While the rest of a thread is being opened: how many of the newest steps are shown. */
  tail: undefined as number | undefined,
  /** On another PDS: the next read of a thread whose reply is pending. */
  pollTimer: undefined as number | undefined,
};

// ---- messages to the user -------------------------------------------------

function notice(text: string, kind: "info" | "error" = "info"): void {
  const n = $("notice");
  n.textContent = text;
  n.dataset.kind = kind;
  n.hidden = text === "";
}

/** Words for an error a person can act on. */
function explain(e: unknown): string {
  if (e instanceof SessionEnded) return "Your session has ended. Sign in again; what you typed is kept.";
  if (e instanceof Unreachable) return `The server is not answering (${e.message}). Check that it is running, then try again.`;
  if (e instanceof XrpcError) return `The server refused: ${e.error}${e.message ? ` (${e.message})` : ""}.`;
  if (e instanceof SealError) return `Could not open or seal: ${e.message}.`;
  return `Something went wrong: ${(e as Error).message ?? String(e)}`;
}

/** Runs an action; a session that ended asks for a new sign-in without leaving the page. */
async function guarded(f: () => Promise<void>): Promise<void> {
  try {
    await f();
  } catch (e) {
    if (e instanceof SessionEnded) {
      showSignIn("Your session has ended. Sign in again; what you typed is kept.");
      return;
    }
    notice(explain(e), "error");
  }
}

function show(view: "signin" | "pair" | "chats"): void {
  for (const v of ["signin", "pair", "chats"]) $(v).hidden = v !== view;
}

// ---- sign in ----------------------------------------------------------------

function showSignIn(message = ""): void {
  // The chats view stays in the DOM (hidden), so a draft survives a new sign-in.
  show("signin");
  $("signin-error").textContent = message;
  $("signout").hidden = true;
  // After a reload the form is new: the session that ended still names the account and its server.
  const handle = $<HTMLInputElement>("handle");
  if (handle.value === "" && app.client) handle.value = app.client.session.handle;
  if (app.client) $<HTMLSelectElement>("service").value = app.client.service;
  (handle.value === "" ? handle : $<HTMLInputElement>("password")).focus();
}

async function onSignIn(ev: Event): Promise<void> {
  ev.preventDefault();
  const handle = $<HTMLInputElement>("handle").value.trim();
  const password = $<HTMLInputElement>("password").value;
  const service = $<HTMLSelectElement>("service").value;
  const error = $("signin-error");
  error.textContent = "";
  const button = $<HTMLButtonElement>("signin-submit");
  button.disabled = true;
  try {
    const session = await createSession(service, handle, password);
    $<HTMLInputElement>("password").value = "";
    await startSession(session);
  } catch (e) {
    if (e instanceof XrpcError && e.error === "AuthenticationRequired") error.textContent = "Wrong handle or password. Check both and try again.";
    else if (e instanceof XrpcError && e.error === "RateLimitExceeded") error.textContent = "Too many failed attempts. Wait a few minutes, then try again.";
    else error.textContent = explain(e);
  } finally {
    button.disabled = false;
  }
}

async function startSession(session: Session): Promise<void> {
  await db.put("session", session);
  const sameAccount = app.client?.session.did === session.did && app.client?.service === (session.service ?? "");
  app.client = new Client(session, (s) => db.put("session", s).then(() => undefined));
  $("who").textContent = session.service ? `@${session.handle} on ${session.service}` : `@${session.handle}`;
  $("signout").hidden = false;
  if (sameAccount && app.keyring) {
    // Signed in again after the session ended: back where the user was.
    show("chats");
    notice("Signed in again.");
    return;
  }
  notice("");
  await openDevice();
}

async function signOut(): Promise<void> {
  const c = app.client;
  app.client = undefined;
  app.keyring = undefined;
  stopLive();
  forgetOutputs();
  await db.del("session");
  if (c) await fetch(`${c.service}/xrpc/com.atproto.server.deleteSession`, { method: "POST", headers: { authorization: `Bearer ${c.session.refreshJwt}` } }).catch(() => undefined);
  $("chat-list").replaceChildren();
  $("messages").replaceChildren();
  showSignIn();
}

// ---- pairing ------------------------------------------------------------------

async function openDevice(): Promise<void> {
  const c = app.client!;
  const did = c.session.did;
  app.device = await db.loadDevice(did);
  if (app.device?.pin) {
    if (await tryJoin()) return;
  }
  show("pair");
  renderPairing();
}

function renderPairing(): void {
  const box = $("pair-body");
  const d = app.device;
  if (!d) {
    box.replaceChildren(
      h("p", {}, "This browser is not a device of the account yet, so it cannot open your chats. Pairing makes it one: it shows a code, you approve the code on a device that is already paired, and this page then receives the keys."),
      h("button", { type: "button", id: "pair-start", click: () => guarded(startPairing) }, "Pair this browser"),
    );
    return;
  }
  const code = formatPairingCode(d.code);
  const service = serviceUrl(app.client!.session.service);
  const acct = `--pds ${service} --identifier ${app.client!.session.handle}`;
  box.replaceChildren(
    h("p", {}, "On a device that is already paired, run:"),
    h("pre", { id: "pair-commands", tabindex: "0" }, `gelstore sync ${acct}\ngelstore device approve ${code}\ngelstore sync ${acct}`),
    h("p", {}, "The pairing code of this browser:"),
    h("p", { id: "pair-code", class: "code", tabindex: "0" }, code),
    h("p", {}, "Copy the code from this screen: its secret part is never sent to the server, which is why only a device you hold can approve it. This page looks for the approval every few seconds."),
    h("button", { type: "button", id: "pair-check", click: () => guarded(async () => void (await tryJoin(true))) }, "Check now"),
    h("p", { id: "pair-status", role: "status" }, "Waiting for the approval…"),
  );
  clearInterval(app.pairTimer);
  app.pairTimer = window.setInterval(() => void guarded(async () => void (await tryJoin())), 3000);
}

async function startPairing(): Promise<void> {
  const c = app.client!;
  const request = pairRequest();
  const device: db.Device = { deviceId: nextTid(), secret: request.secret, code: request.code };
  // Kept before it is published, so a reload shows the same code.
  await db.saveDevice(c.session.did, device);
  app.device = device;
  await publishDevice();
  renderPairing();
}

async function publishDevice(): Promise<void> {
  const c = app.client!;
  const d = app.device!;
  // The public key and signing key follow from the secret; the proof needs the code's secret.
  const full = deviceRecord({ ...pairRequest({ deviceSecret: d.secret }), code: d.code }, new Date().toISOString(), browserName());
  try {
    await c.procedure("com.atproto.repo.createRecord", { repo: c.session.did, collection: DEVICE, rkey: d.deviceId, record: toJson(full) });
  } catch (e) {
    // Already published (a reload during pairing): nothing to do.
    if (!(e instanceof XrpcError && e.error === "InvalidSwap")) throw e;
  }
}

function browserName(): string {
  const ua = navigator.userAgent;
  const name = /Firefox\//.test(ua) ? "Firefox" : /Edg\//.test(ua) ? "Edge" : /Chrome\//.test(ua) ? "Chromium" : /Safari\//.test(ua) ? "Safari" : "browser";
  return `${name} (web)`;
}

/** Rebuilds the keyring from the account's key records; true once joined. */
async function tryJoin(manual = false): Promise<boolean> {
  const c = app.client;
  const d = app.device;
  if (!c || !d) return false;
  const did = c.session.did;
  const records = [...(await c.listAll(KEY_WRAP_TYPE)), ...(await c.listAll(MEMBERSHIP_TYPE))];
  const { keys } = parseKeySet(records.map((r) => fromJson(r.value)));
  try {
    const { keyring } = await Keyring.join(did, { deviceId: d.deviceId, secret: d.secret, code: d.code }, keys, {
      pin: d.pin,
      knownHeads: (d.heads ?? []).map((x) => CID.parse(x)),
    });
    app.keyring = keyring;
  } catch (e) {
    if (e instanceof SealError && e.kind === "NotRecipient" && !d.pin) {
      const status = document.getElementById("pair-status");
      if (status) status.textContent = manual ? "Not approved yet. Approve the code on the other device and sync it, then check again." : "Waiting for the approval…";
      return false;
    }
    clearInterval(app.pairTimer);
    show("pair");
    $("pair-body").replaceChildren(h("p", { class: "error", role: "alert" }, `This browser cannot rebuild its keys: ${explain(e)}`));
    return false;
  }
  clearInterval(app.pairTimer);
  const heads = app.keyring.heads().map(String);
  d.pin = app.keyring.admittedWith;
  d.heads = heads;
  await db.markJoined(did, d.pin, heads);
  show("chats");
  await loadChats();
  return true;
}

// ---- chats --------------------------------------------------------------------

interface ChatEntry {
  key: string;
  title: string;
  unopened?: string;
}

async function loadChats(): Promise<void> {
  const c = app.client!;
  const did = c.session.did;
  const records = await c.listAll(CHAT);
  const chats: ChatEntry[] = records.map((r) => {
    const key = r.uri.split("/").pop() ?? "";
    try {
      const opened = openRecord(fromJson(r.value), { did, collection: CHAT, rkey: key }, app.keyring!);
      const title = typeof opened.content.title === "string" && opened.content.title !== "" ? opened.content.title : "Untitled chat";
      return { key, title };
    } catch (e) {
      return { key, title: "A chat that does not open", unopened: e instanceof SealError ? e.kind : String(e) };
    }
  });
  chats.sort((a, b) => (a.key < b.key ? 1 : -1));
  const list = $("chat-list");
  list.replaceChildren(
    ...chats.map((chat) =>
      h(
        "li",
        {},
        h(
          "button",
          { type: "button", class: `chat-link${chat.key === app.chat ? " current" : ""}`, "data-chat": chat.key, "aria-current": chat.key === app.chat ? "true" : "false", click: () => guarded(() => openChat(chat.key)) },
          chat.title,
          chat.unopened ? h("span", { class: "muted" }, ` (${chat.unopened})`) : null,
        ),
      ),
    ),
  );
  if (chats.length === 0) list.replaceChildren(h("li", { class: "muted" }, "No chats yet."));
}

async function newChat(): Promise<void> {
  const c = app.client!;
  const did = c.session.did;
  const title = $<HTMLInputElement>("new-title").value.trim();
  const key = nextTid();
  const { key: chatKey, wrap } = await app.keyring!.chatKeyForSeal(key);
  const record = { $type: CHAT, createdAt: new Date().toISOString() };
  const sealed = sealRecord(record, { did, collection: CHAT, rkey: key }, title ? { title } : {}, [], chatKey);
  const writes = [create(CHAT, key, sealed)];
  if (wrap) writes.unshift(create(KEY_WRAP_TYPE, nextTid(), keyWrapValue(wrap)));
  await c.procedure("com.atproto.repo.applyWrites", { repo: did, writes });
  $<HTMLInputElement>("new-title").value = "";
  await loadChats();
  await openChat(key);
}

function create(collection: string, rkey: string, value: DataMap): unknown {
  return { $type: "com.atproto.repo.applyWrites#create", collection, rkey, value: toJson(value) };
}

async function openChat(key: string): Promise<void> {
  if (app.chat !== key) {
    stopLive();
    app.chosen.clear();
    forgetOutputs();
  }
  app.chat = key;
  for (const b of document.querySelectorAll<HTMLElement>(".chat-link")) {
    b.classList.toggle("current", b.dataset.chat === key);
    b.setAttribute("aria-current", b.dataset.chat === key ? "true" : "false");
  }
  await loadThread(true);
  $("composer").hidden = false;
}

async function refreshKeys(): Promise<void> {
  const c = app.client!;
  const records = [...(await c.listAll(KEY_WRAP_TYPE)), ...(await c.listAll(MEMBERSHIP_TYPE))];
  await app.keyring!.absorb(parseKeySet(records.map((r) => fromJson(r.value))).keys);
}

/** Steps of the branch opened and painted before the rest of a thread. */
const FIRST_STEPS = 20;
/** Records opened between two yields to the browser. */
const OPEN_SLICE = 100;

async function loadThread(toNewest = false): Promise<void> {
  const c = app.client!;
  const did = c.session.did;
  const chat = app.chat!;
  const t0 = performance.now();
  performance.mark("gel:thread-start");
  // Other devices may have made chat keys since: take their wraps first.
  await refreshKeys();
  performance.mark("gel:thread-keys");
  const { chatRecord, items } = await fetchThread(c, chat);
  let title = "Untitled chat";
  try {
    const opened = openRecord(fromJson(chatRecord.value), { did, collection: CHAT, rkey: chat }, app.keyring!);
    if (typeof opened.content.title === "string" && opened.content.title) title = opened.content.title;
  } catch (e) {
    title = `A chat that does not open (${e instanceof SealError ? e.kind : String(e)})`;
  }
  $("thread-title").textContent = title;
  performance.mark("gel:thread-fetched");
  // The tree and the branch need only clear fields: open the newest steps
  // of the branch and paint them first, then the rest, a slice at a time,
  // so a long thread shows its end at once and the page stays responsive.
  const load = ++app.loads;
  const keys = app.keyring!;
  const thread = buildThread(items.map(readMessage));
  const steps = branch(thread, app.chosen);
  let openMs = 0;
  const open = (ms: Msg[]) => {
    const o0 = performance.now();
    for (const m of ms) openMessage(did, m, keys);
    openMs += performance.now() - o0;
  };
  open(steps.slice(-FIRST_STEPS).flatMap((s) => (s.chosen ? [s.user, s.chosen] : [s.user])));
  app.thread = thread;
  app.tail = steps.length > FIRST_STEPS ? FIRST_STEPS : undefined;
  renderThread();
  if (toNewest) $("messages").lastElementChild?.scrollIntoView({ block: "end" });
  afterPaint(() => performance.measure("gel:newest-painted", { start: t0, end: performance.now(), detail: { records: items.length } }));
  // A reply still pending at the end of the branch may be running: follow
  // it (this server streams it), or read the thread again (another PDS,
  // where it appears once a device running the assistant has synced).
  const last = steps[steps.length - 1]?.chosen;
  clearTimeout(app.pollTimer);
  if (last && last.status === "pending" && !last.unopened) {
    if (!c.here) app.pollTimer = window.setTimeout(() => void (app.chat === chat && guarded(loadThread)), POLL_MS);
    else if (app.live?.reply !== last.key) follow(last.key);
  }
  const rest = [...thread.byKey.values()].filter((m) => m.record !== undefined).reverse();
  for (let i = 0; i < rest.length; i += OPEN_SLICE) {
    await new Promise((r) => setTimeout(r, 0));
    // Another load (a send, another chat) took over: its thread is the one shown.
    if (app.loads !== load) return;
    open(rest.slice(i, i + OPEN_SLICE));
  }
  performance.measure("gel:open-records", { start: t0, end: t0 + openMs, detail: { records: items.length } });
  if (app.tail !== undefined) {
    app.tail = undefined;
    const anchor = $("messages").querySelector<HTMLElement>(":scope > [data-key]");
    const before = anchor?.getBoundingClientRect().top ?? 0;
    renderThread();
    // What was on screen stays where it was when the earlier messages appear above it.
    const now = anchor && document.querySelector(`#messages > [data-key="${CSS.escape(anchor.dataset.key ?? "")}"]`);
    if (now) window.scrollBy(0, now.getBoundingClientRect().top - before);
  }
  performance.measure("gel:all-opened", { start: t0, end: performance.now(), detail: { records: items.length } });
}

type Item = { uri: string; cid: string; value: unknown; state?: string };

/** A chat's record and its messages: from `getThread` here, or with the standard repo methods on another PDS. */
async function fetchThread(c: Client, chat: string): Promise<{ chatRecord: { value: unknown }; items: Item[] }> {
  if (!c.here) {
    const did = c.session.did;
    const chatRecord = (await c.query("com.atproto.repo.getRecord", { repo: did, collection: CHAT, rkey: chat })) as { value: unknown };
    const uri = `at://${did}/${CHAT}/${chat}`;
    const items = (await c.listAll(MESSAGE)).filter((r) => (r.value as { chat?: unknown } | null)?.chat === uri);
    return { chatRecord, items };
  }
  const items: Item[] = [];
  let chatRecord: { value: unknown } | undefined;
  let cursor: string | undefined;
  for (;;) {
    const page = (await c.query("chat.gel.assistant.getThread", { chat, cursor, limit: 500 })) as { chat: { value: unknown }; messages: Item[]; cursor?: string };
    chatRecord = page.chat;
    items.push(...page.messages);
    if (!page.cursor || page.messages.length === 0) break;
    cursor = page.cursor;
  }
  return { chatRecord: chatRecord!, items };
}

// Runs `f` once the browser has painted what is in the DOM now (for the
// benchmark's marks; nothing waits on it, as a hidden tab never paints).
function afterPaint(f: () => void): void {
  requestAnimationFrame(() => setTimeout(f, 0));
}

function renderThread(): void {
  const t = app.thread;
  const list = $("messages");
  if (!t) return list.replaceChildren();
  const all = branch(t, app.chosen);
  const steps = app.tail === undefined ? all : all.slice(-app.tail);
  const out: HTMLElement[] = [];
  if (steps.length < all.length) {
    out.push(h("li", { class: "muted opening", role: "status" }, `Opening ${all.length - steps.length} earlier exchanges…`));
  }
  for (const [i, s] of steps.entries()) {
    out.push(renderMessage(s.user));
    if (s.chosen) {
      const isLast = i === steps.length - 1;
      out.push(renderReply(s.user, s.replies, s.chosen, isLast));
    }
  }
  if (out.length === 0) out.push(h("li", { class: "muted" }, "No messages yet. Write the first one below."));
  list.replaceChildren(...out);
}

function renderMessage(m: Msg): HTMLElement {
  return h("li", { class: `msg ${m.role === "user" ? "user" : "assistant"}`, "data-key": m.key }, h("div", { class: "who" }, m.role === "user" ? "You" : "Assistant"), renderBody(m));
}

function renderBody(m: Msg): HTMLElement {
  // Shown before its turn in the background opening (another attempt picked).
  if (m.record !== undefined && app.client && app.keyring) openMessage(app.client.session.did, m, app.keyring);
  if (m.unopened) {
    return h(
      "div",
      { class: "unopened", role: "note" },
      h("strong", {}, "This message does not open. "),
      `It may have been changed on the server, or sealed with a key this browser does not hold (${m.unopened.message}).`,
    );
  }
  const parts = ((m.content?.parts ?? []) as Record<string, unknown>[]).map((p) => renderPart(p, m));
  const error = m.content?.error as { code?: string; message?: string } | undefined;
  if (error) parts.push(h("p", { class: "error" }, `The reply ended with an error: ${error.code ?? ""}${error.message ? ` — ${error.message}` : ""}`));
  if (m.status === "pending") {
    const elsewhere = app.client && !app.client.here;
    parts.push(
      h("p", { class: "muted pending-note" }, elsewhere ? "Waiting for the assistant: a device that runs it writes the reply and syncs it to your PDS. This page looks for it every few seconds." : "Waiting for the assistant…"),
    );
  }
  if (m.status === "interrupted") parts.push(h("p", { class: "muted" }, "This reply was cut short."));
  return h("div", { class: "body" }, ...parts);
}

function renderPart(p: Record<string, unknown>, m: Msg): HTMLElement {
  const text = (v: unknown) => (typeof v === "string" ? v : "");
  switch (p.$type) {
    case TEXT_PART:
      return h("p", { class: "text" }, text(p.text));
    case "chat.gel.assistant.defs#reasoningPart":
      return h("details", {}, h("summary", {}, "Reasoning"), h("p", { class: "text" }, text(p.text)));
    case "chat.gel.assistant.defs#toolCallPart":
      return h(
        "div",
        { class: "tool" },
        h("div", {}, "Tool call ", h("code", {}, text(p.name)), p.approval ? ` (${text(p.approval)})` : ""),
        h("pre", {}, prettyJson(text(p.arguments))),
      );
    case "chat.gel.assistant.defs#toolResultPart": {
      const head = h("div", {}, `Result${p.outcome ? ` (${text(p.outcome)})` : ""}${p.isError ? ", an error" : ""}`);
      if (p.outputBlob === undefined) return h("div", { class: "tool" }, head, h("pre", {}, text(p.output)));
      return h("div", { class: "tool" }, head, renderWholeOutput(p, m));
    }
    case "chat.gel.assistant.defs#toolApprovalPart":
      return h("p", { class: "muted" }, `${p.decision === "approved" ? "Allowed" : "Denied"} call ${text(p.callId)}${p.reason ? `: ${text(p.reason)}` : ""}`);
    case "chat.gel.assistant.defs#sourcePart":
      return h("p", {}, "Source: ", h("a", { href: text(p.url), rel: "noopener noreferrer nofollow", target: "_blank" }, text(p.title) || text(p.url)));
    case "chat.gel.assistant.defs#filePart":
    case "chat.gel.assistant.defs#imagePart":
      return h("p", { class: "muted" }, `An attachment${p.name ? ` (${text(p.name)})` : ""}: opening attachments is not built into this page yet; use gelstore chat output.`);
    default:
      return h("p", { class: "muted" }, `A part this page does not show (${text(p.$type)}).`);
  }
}

// A result whose whole output is a sealed blob: the start the part keeps,
// and a control that fetches, checks and opens the blob here.
function renderWholeOutput(p: Record<string, unknown>, m: Msg): HTMLElement {
  const cid = blobCid(p.outputBlob)?.toString() ?? "";
  const box = h("div", { class: "whole", "data-cid": cid });
  const opened = app.outputs.get(cid);
  if (opened) {
    box.append(...wholeOutputView(opened, p));
    return box;
  }
  const status = h("p", { class: "muted output-status", role: "status" });
  const button = h("button", { type: "button", class: "show-output" }, "Show the whole output") as HTMLButtonElement;
  button.addEventListener("click", () => {
    button.disabled = true;
    status.className = "muted output-status";
    status.textContent = "Fetching and opening the whole output…";
    void (async () => {
      try {
        const seal = sealFor(p.outputBlob, m.blobs ?? []);
        const text = await wholeOutput(app.client!.service, app.client!.session.did, seal);
        const type = p.outputFormat === "json" ? "application/json" : "text/plain;charset=utf-8";
        const entry = { text, url: URL.createObjectURL(new Blob([text], { type })) };
        app.outputs.set(cid, entry);
        box.replaceChildren(...wholeOutputView(entry, p));
        box.querySelector<HTMLElement>("pre")?.focus();
      } catch (e) {
        button.disabled = false;
        status.className = "error output-problem";
        status.setAttribute("role", "alert");
        status.textContent = e instanceof OutputProblem ? e.message : explain(e);
      }
    })();
  });
  const start = typeof p.output === "string" ? p.output : "";
  box.append(h("pre", { class: "output-start", tabindex: "0" }, start), h("div", { class: "row" }, button), status);
  return box;
}

function wholeOutputView(opened: { text: string; url: string }, p: Record<string, unknown>): HTMLElement[] {
  const bytes = new TextEncoder().encode(opened.text).length;
  // A page holding megabytes of text in one element stops scrolling smoothly:
  // show the start, and the whole of it is one download away.
  const cut = opened.text.length > SHOWN_CHARS;
  const name = `${typeof p.callId === "string" ? p.callId.replace(/[^A-Za-z0-9_-]/g, "_") : "tool"}-output.${p.outputFormat === "json" ? "json" : "txt"}`;
  return [
    h("pre", { class: "whole-output", tabindex: "0" }, cut ? opened.text.slice(0, SHOWN_CHARS) : opened.text),
    h(
      "p",
      { class: "muted" },
      cut ? `The first ${SHOWN_CHARS.toLocaleString("en")} characters of ${opened.text.length.toLocaleString("en")} are shown. ` : `The whole output (${bytes.toLocaleString("en")} bytes), opened in this browser. `,
      h("a", { href: opened.url, download: name, class: "download-output" }, `Download it (${bytes.toLocaleString("en")} bytes)`),
    ),
  ];
}

function forgetOutputs(): void {
  for (const o of app.outputs.values()) URL.revokeObjectURL(o.url);
  app.outputs.clear();
}

function prettyJson(s: string): string {
  try {
    return JSON.stringify(JSON.parse(s), null, 2);
  } catch {
    return s;
  }
}

function renderReply(user: Msg, replies: Msg[], chosen: Msg, isLast: boolean): HTMLElement {
  const index = replies.indexOf(chosen);
  const switchTo = (i: number) => {
    const r = replies[i];
    if (!r) return;
    app.chosen.set(user.key, r.reply!.attempt);
    renderThread();
    document.querySelector<HTMLElement>(`[data-key="${CSS.escape(r.key)}"] .attempts button`)?.focus();
  };
  const nav = h(
    "div",
    { class: "attempts", role: "group", "aria-label": "Reply attempts" },
    h("button", { type: "button", "aria-label": "Previous attempt", disabled: index <= 0, click: () => switchTo(index - 1) }, "‹"),
    h("span", { class: "attempt-label" }, `Attempt ${index + 1} of ${replies.length}`),
    h("button", { type: "button", "aria-label": "Next attempt", disabled: index >= replies.length - 1, click: () => switchTo(index + 1) }, "›"),
    h("button", { type: "button", class: "regenerate", click: () => guarded(() => regenerate(user, replies)) }, "Regenerate"),
  );
  const live = app.live?.reply === chosen.key ? app.live : undefined;
  const body = live ? live.element() : renderBody(chosen);
  const item = h("li", { class: "msg assistant", "data-key": chosen.key }, h("div", { class: "who" }, "Assistant"), nav, body);
  const answered = (app.thread?.children.get(chosen.key) ?? []).length > 0;
  const newest = index === replies.length - 1;
  if (!live && chosen.status === "waiting" && newest && !answered && isLast) item.append(renderApproval(chosen));
  return item;
}

// ---- writing --------------------------------------------------------------------

function pendingReply(chatUri: string): DataMap {
  return { $type: MESSAGE, chat: chatUri, role: "assistant", status: "pending", createdAt: new Date().toISOString(), authenticator: {} };
}

async function send(ev: Event): Promise<void> {
  ev.preventDefault();
  const draft = $<HTMLTextAreaElement>("draft");
  const text = draft.value;
  if (text.trim() === "" || !app.chat) return;
  const ask = $<HTMLInputElement>("ask").checked;
  const chat = app.chat;
  const steps = app.thread ? branch(app.thread, app.chosen) : [];
  // A message continues from a reply: the last one shown (a message sent
  // without asking has none, so the next continues from the one before).
  const parent = [...steps].reverse().find((s) => s.chosen)?.chosen?.key;
  const button = $<HTMLButtonElement>("send");
  button.disabled = true;
  try {
    await writeUser(chat, [{ $type: TEXT_PART, text }], parent, ask);
  } finally {
    button.disabled = false;
  }
  // Only once it is stored: a refused write keeps the draft.
  draft.value = "";
  notice("");
  await loadThread();
}

/**
 * Seals and writes a user message of `parts` continuing from `parent`, and
 * with `ask` its pending reply `KEY.r0` in the same commit. Returns its key.
 */
async function writeUser(chat: string, parts: DataMap[], parent: string | undefined, ask: boolean): Promise<string> {
  const c = app.client!;
  const did = c.session.did;
  const chatUri = `at://${did}/${CHAT}/${chat}`;
  const key = nextTid();
  const record: DataMap = { $type: MESSAGE, chat: chatUri, role: "user", status: "complete", createdAt: new Date().toISOString(), request: {} };
  if (parent) record.parent = parent;
  const { key: chatKey, wrap } = await app.keyring!.chatKeyForSeal(chat);
  const writes = [create(MESSAGE, key, sealRecord(record, { did, collection: MESSAGE, rkey: key }, { parts }, [], chatKey))];
  if (wrap) writes.unshift(create(KEY_WRAP_TYPE, nextTid(), keyWrapValue(wrap)));
  const reply = `${key}.r0`;
  if (ask) writes.push(create(MESSAGE, reply, sealRecord(pendingReply(chatUri), { did, collection: MESSAGE, rkey: reply }, {}, [], chatKey)));
  await c.procedure("com.atproto.repo.applyWrites", { repo: did, writes });
  return key;
}

async function regenerate(user: Msg, replies: Msg[]): Promise<void> {
  const c = app.client!;
  const did = c.session.did;
  const chat = app.chat!;
  const next = Math.max(-1, ...replies.map((r) => r.reply!.attempt)) + 1;
  const key = `${user.key}.r${next}`;
  const { key: chatKey, wrap } = await app.keyring!.chatKeyForSeal(chat);
  const writes = [create(MESSAGE, key, sealRecord(pendingReply(`at://${did}/${CHAT}/${chat}`), { did, collection: MESSAGE, rkey: key }, {}, [], chatKey))];
  if (wrap) writes.unshift(create(KEY_WRAP_TYPE, nextTid(), keyWrapValue(wrap)));
  await c.procedure("com.atproto.repo.applyWrites", { repo: did, writes });
  app.chosen.set(user.key, next);
  await loadThread();
}

function renderApproval(reply: Msg): HTMLElement {
  const calls = pendingCalls(reply);
  const decisions = new Map<string, "approved" | "denied">();
  const form = h("form", { class: "approval", "aria-label": "Tool approval" });
  form.append(h("p", {}, "The assistant waits for your decision on each call:"));
  for (const call of calls) {
    const name = `decide-${call.callId}`;
    const radio = (value: "approved" | "denied", label: string) =>
      h("label", {}, h("input", { type: "radio", name, value, "data-call": call.callId, change: () => decisions.set(call.callId, value) }), ` ${label}`);
    form.append(
      h(
        "fieldset",
        { class: "call" },
        h("legend", {}, "Call ", h("code", {}, call.name)),
        h("pre", { class: "args" }, prettyJson(call.arguments)),
        radio("approved", "Allow"),
        radio("denied", "Deny"),
      ),
    );
  }
  const status = h("p", { class: "muted", role: "status" });
  form.append(h("button", { type: "submit", class: "answer" }, "Send answer"), status);
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    void guarded(async () => {
      const missing = calls.filter((c) => !decisions.has(c.callId));
      if (missing.length > 0) {
        status.textContent = `Choose Allow or Deny for ${missing.map((c) => c.name).join(", ")}.`;
        return;
      }
      const parts = calls.map((c) => ({ callId: c.callId, ...(c.pendingId ? { pendingId: c.pendingId } : {}), decision: decisions.get(c.callId)! }));
      if (!app.client!.here) {
        // Another PDS has no answerApproval: the page writes the answer (a
        // sealed user message of toolApprovalParts) and its pending reply,
        // as the server's assistant would.
        await writeUser(app.chat!, parts.map((p) => ({ $type: APPROVAL_PART, ...p })), reply.key, true);
        await loadThread();
        return;
      }
      const answer = (await app.client!.procedure("chat.gel.assistant.answerApproval", { reply: reply.key, decisions: parts })) as { reply: string };
      await loadThread();
      if (app.live?.reply !== answer.reply) follow(answer.reply);
    });
  });
  return form;
}

// ---- streaming ------------------------------------------------------------------

/** A reply being streamed: the text per messageId (deltas, then the final text), calls and results. */
class Live {
  texts = new Map<string, string>();
  calls = new Map<string, { tool: string; args: string; result?: string; outcome?: string }>();
  seq = 0;
  status = "Streaming…";
  problem = "";
  error = "";
  tries = 0;
  close: (() => void) | undefined;
  private el: HTMLElement | undefined;
  constructor(readonly reply: string) {}

  apply(e: ReplyEvent): void {
    const seq = Number(e.body.seq ?? 0);
    // A replay from the record after a restart starts again at 1: start over.
    if (seq <= this.seq) {
      this.texts.clear();
      this.calls.clear();
    }
    this.seq = seq;
    const b = e.body;
    const id = String(b.messageId ?? "");
    switch (e.t) {
      case "#textDelta":
        this.texts.set(id, (this.texts.get(id) ?? "") + String(b.text ?? ""));
        break;
      case "#message":
        this.texts.set(id, String(b.text ?? ""));
        break;
      case "#toolCall":
        this.calls.set(String(b.callId), { tool: String(b.tool ?? ""), args: typeof b.argsJson === "string" ? b.argsJson : JSON.stringify(b.args ?? {}, null, 2) });
        break;
      case "#toolResult": {
        const call = this.calls.get(String(b.callId)) ?? { tool: String(b.tool ?? ""), args: "" };
        call.outcome = String(b.outcome ?? "");
        call.result = typeof b.bodyJson === "string" ? b.bodyJson : b.body !== undefined ? JSON.stringify(b.body) : "";
        this.calls.set(String(b.callId), call);
        break;
      }
      case "#error":
        this.error = `The assistant reported an error: ${String(b.code ?? "")}${b.message ? ` — ${String(b.message)}` : ""}`;
        break;
      case "#confirmRequired":
        this.status = "Waiting for your approval…";
        break;
      case "#done":
        this.status = "Done.";
        break;
    }
  }

  element(): HTMLElement {
    const el = h("div", { class: "body live", "aria-live": "polite", "aria-busy": "true" });
    for (const t of this.texts.values()) el.append(h("p", { class: "text" }, t));
    for (const c of this.calls.values()) {
      el.append(h("div", { class: "tool" }, h("div", {}, "Tool call ", h("code", {}, c.tool)), h("pre", {}, prettyJson(c.args)), c.result !== undefined ? h("pre", {}, `${c.outcome}: ${c.result}`) : null));
    }
    if (this.error) el.append(h("p", { class: "error" }, this.error));
    el.append(h("p", { class: "muted stream-status" }, this.status));
    if (this.problem) {
      el.append(h("p", { class: "error stream-problem", role: "alert" }, this.problem), h("button", { type: "button", class: "resume", click: () => resume(this) }, "Resume"));
    }
    this.el = el;
    return el;
  }

  redraw(): void {
    if (this.el?.isConnected) this.el.replaceWith(this.element());
  }
}

function stopLive(): void {
  clearTimeout(app.pollTimer);
  app.live?.close?.();
  app.live = undefined;
}

function follow(reply: string): void {
  stopLive();
  const live = new Live(reply);
  app.live = live;
  renderThread();
  void connect(live);
}

function resume(live: Live): void {
  live.tries = 0;
  live.problem = "";
  live.redraw();
  void connect(live);
}

async function connect(live: Live): Promise<void> {
  if (app.live !== live) return;
  let token: string;
  try {
    token = await app.client!.freshAccessToken();
  } catch (e) {
    if (e instanceof SessionEnded) return showSignIn("Your session has ended. Sign in again; what you typed is kept.");
    return lost(live, "The server went away: it does not answer.");
  }
  live.close = subscribeReply(live.reply, live.seq, token, {
    event(e) {
      if (app.live !== live) return;
      live.tries = 0;
      live.problem = "";
      live.apply(e);
      live.redraw();
    },
    failed(error, message) {
      if (app.live !== live) return;
      // A server that stops says so first; reconnecting tells whether it comes back.
      if (error === "ServerShuttingDown") {
        live.status = "The server is stopping…";
        live.redraw();
        return;
      }
      const words: Record<string, string> = {
        ReplyTampered: "This reply was not written by a device of the account (it does not open), so no assistant will run it.",
        ReplyNotFound: "The server has no such reply.",
        FutureCursor: "The server no longer has this part of the stream.",
      };
      live.problem = words[error] ?? `The stream ended with an error: ${error}${message ? ` (${message})` : ""}`;
      live.status = "";
      live.redraw();
    },
    closed(clean) {
      if (app.live !== live) return;
      if (clean) {
        // The record now holds the whole reply: show it instead of the deltas.
        app.live = undefined;
        void guarded(loadThread);
        return;
      }
      if (live.problem) return;
      void retry(live);
    },
  });
}

async function retry(live: Live): Promise<void> {
  live.tries++;
  if (live.tries > 4) {
    const why = await probe();
    return lost(live, why);
  }
  live.status = `The connection to the server was lost mid-reply; reconnecting (try ${live.tries} of 4)…`;
  live.redraw();
  await new Promise((r) => setTimeout(r, 250 * 2 ** live.tries));
  void connect(live);
}

function lost(live: Live, why: string): void {
  live.status = "";
  live.problem = `${why} The reply stopped streaming; what arrived is shown above. Press Resume once the server is back: it continues from seq ${live.seq}.`;
  live.redraw();
}

/** Why a websocket failed, which a browser does not tell: ask the same URL over plain HTTP. */
async function probe(): Promise<string> {
  try {
    const r = await fetch("/xrpc/chat.gel.assistant.subscribeReply?reply=probe.r0", { headers: { authorization: `Bearer ${app.client!.session.accessJwt}` } });
    const j = (await r.json().catch(() => ({}))) as { error?: string };
    if (j.error === "MethodNotImplemented") return "This server runs no assistant (start it with --assistant), so it cannot stream replies.";
    if (j.error === "ExpiredToken" || j.error === "InvalidToken") return "The session was refused.";
    return "The server answers again, but the stream did not resume.";
  } catch {
    return "The server went away: it does not answer.";
  }
}

// ---- start ----------------------------------------------------------------------

/** The PDSes this server lets the page sign in at (`--web-pds`): a choice in the sign-in form. */
async function loadServers(): Promise<void> {
  let servers: string[] = [];
  try {
    const r = await fetch("/config.json");
    const j = (await r.json()) as { servers?: unknown };
    if (Array.isArray(j.servers)) servers = j.servers.filter((s): s is string => typeof s === "string");
  } catch {
    // An older server without the file: only this server.
  }
  const select = $<HTMLSelectElement>("service");
  select.replaceChildren(h("option", { value: "" }, `This server (${location.origin})`), ...servers.map((s) => h("option", { value: s }, s)));
  $("service-field").hidden = servers.length === 0;
}

async function main(): Promise<void> {
  $("signin-form").addEventListener("submit", (e) => void onSignIn(e));
  $("signout").addEventListener("click", () => void signOut());
  $("composer").addEventListener("submit", (e) => void guarded(() => send(e)));
  $("new-chat").addEventListener("submit", (e) => {
    e.preventDefault();
    void guarded(newChat);
  });
  $("draft").addEventListener("keydown", (e) => {
    // Ctrl/Cmd+Enter sends, as in most chat apps; Enter alone is a new line.
    const k = e as KeyboardEvent;
    if (k.key === "Enter" && (k.ctrlKey || k.metaKey)) $<HTMLFormElement>("composer").requestSubmit();
  });
  await loadServers();
  const session = await db.get<Session>("session");
  if (!session) return showSignIn();
  await guarded(() => startSession(session));
}

void main();
