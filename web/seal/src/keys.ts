// The keys a reader handles: chat keys (record keys are derived from them)
// and blob keys (random per blob, carried inside the sealed frame).

import type { CID } from "./model.js";

/** A chat key: the 32-byte secret named by `encryptedContent.keyId`. */
export interface ChatKey {
  keyId: string;
  secret: Uint8Array;
}

/** Finds chat keys by keyId when opening records. */
export interface KeyLookup {
  chatKey(keyId: string): ChatKey | undefined;
}

/** A lookup over a fixed list of chat keys. */
export function keyList(keys: readonly ChatKey[]): KeyLookup {
  return { chatKey: (id) => keys.find((k) => k.keyId === id) };
}

/** A sealed blob as the record knows it: CID and size of the stored bytes, and its key. */
export interface BlobSeal {
  cid: CID;
  size: number;
  key: Uint8Array;
}
