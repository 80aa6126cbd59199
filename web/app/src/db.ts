// What the page keeps in this browser, in IndexedDB (origin-private):
//
// - the session tokens, so a reload stays signed in;
// - per account, this browser's device: its id, the public half of its
//   pairing code, and its two secrets (the X25519 device secret and the
//   pairing secret) encrypted with AES-GCM under a key made with
//   `extractable: false`. IndexedDB keeps that CryptoKey as an opaque
//   object: no script, this page's included, can read its bytes, so a copy
//   of the database is useless without this browser's profile.
//
// Where the platform does not allow more: @gelstore/seal does X25519, HPKE
// and the membership signing key (derived from the device secret by HKDF)
// on raw bytes, so while the page runs the device secret is decrypted into
// its memory. It never leaves the browser: it is not sent, logged or shown.

const DB = "gelstore";
const STORE = "kv";

function open(): Promise<IDBDatabase> {
  return new Promise((resolve, reject) => {
    const req = indexedDB.open(DB, 1);
    req.onupgradeneeded = () => req.result.createObjectStore(STORE);
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

async function tx<T>(mode: IDBTransactionMode, f: (s: IDBObjectStore) => IDBRequest<T>): Promise<T> {
  const db = await open();
  try {
    return await new Promise<T>((resolve, reject) => {
      const t = db.transaction(STORE, mode);
      const req = f(t.objectStore(STORE));
      t.oncomplete = () => resolve(req.result);
      t.onerror = () => reject(t.error);
      t.onabort = () => reject(t.error);
    });
  } finally {
    db.close();
  }
}

export const get = <T>(key: string): Promise<T | undefined> => tx("readonly", (s) => s.get(key) as IDBRequest<T | undefined>);
export const put = (key: string, value: unknown): Promise<IDBValidKey> => tx("readwrite", (s) => s.put(value, key));
export const del = (key: string): Promise<undefined> => tx("readwrite", (s) => s.delete(key));

/** This browser's device for one account, as stored. */
interface StoredDevice {
  deviceId: string;
  codePublic: Uint8Array;
  wrapKey: CryptoKey;
  iv: Uint8Array<ArrayBuffer>;
  sealed: ArrayBuffer;
  /** Set once joined: the account keyId it was admitted with, and the log heads it verified. */
  pin?: string;
  heads?: string[];
}

/** The device with its secrets opened (kept in memory only). */
export interface Device {
  deviceId: string;
  secret: Uint8Array;
  code: { publicKey: Uint8Array; secret: Uint8Array };
  pin?: string;
  heads?: string[];
}

const deviceKey = (did: string) => `device:${did}`;

export async function saveDevice(did: string, d: Device): Promise<void> {
  const wrapKey = await crypto.subtle.generateKey({ name: "AES-GCM", length: 256 }, false, ["encrypt", "decrypt"]);
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const plain = new Uint8Array(d.secret.length + d.code.secret.length);
  plain.set(d.secret, 0);
  plain.set(d.code.secret, d.secret.length);
  const sealed = await crypto.subtle.encrypt({ name: "AES-GCM", iv }, wrapKey, plain);
  plain.fill(0);
  const stored: StoredDevice = { deviceId: d.deviceId, codePublic: d.code.publicKey, wrapKey, iv, sealed, pin: d.pin, heads: d.heads };
  await put(deviceKey(did), stored);
}

export async function loadDevice(did: string): Promise<Device | undefined> {
  const s = await get<StoredDevice>(deviceKey(did));
  if (!s) return undefined;
  const plain = new Uint8Array(await crypto.subtle.decrypt({ name: "AES-GCM", iv: s.iv }, s.wrapKey, s.sealed));
  return { deviceId: s.deviceId, secret: plain.slice(0, 32), code: { publicKey: s.codePublic, secret: plain.slice(32) }, pin: s.pin, heads: s.heads };
}

/** Records that the device joined (what a rejoin pins), without touching its secrets. */
export async function markJoined(did: string, pin: string, heads: string[]): Promise<void> {
  const s = await get<StoredDevice>(deviceKey(did));
  if (!s) return;
  await put(deviceKey(did), { ...s, pin, heads });
}

export const forgetDevice = (did: string) => del(deviceKey(did));
