// The interop corpus both sides exchange (tests/seal/web_seal_interop.rs): key
// records, sealed records with the plaintext each must open to, blobs, and
// tampered inputs with the error category each must fail with. All JSON:
// records as atproto JSON, bytes as lowercase hex.

import { SealError, fromHex, fromJson, keyList, openBlob, openRecord, toHex, toJson, type KeyLookup, type DataMap } from "../src/index.js";

/** A sealed record and what it opens to. */
export interface CorpusRecord {
  name: string;
  collection: string;
  rkey: string;
  record: unknown;
  /** Absent on a tampered entry. */
  expect?: { field: string; content: unknown; blobs: Record<string, string> };
  /** On a tampered entry: the category it must fail with. */
  expectError?: string;
  /** Blob bytes to use instead of the corpus's, by CID (a swapped or cut blob). */
  blobOverride?: Record<string, string>;
}

/** A tampered key wrap and the category absorbing it must report. */
export interface CorpusWrap {
  name: string;
  record: unknown;
  expectError: string;
}

export interface Corpus {
  did: string;
  /** keyWrap and membership records (atproto JSON). */
  keyRecords: unknown[];
  /** Stored (encrypted) blobs by CID, hex. */
  blobs: Record<string, string>;
  records: CorpusRecord[];
  tampered: CorpusRecord[];
  tamperedWraps: CorpusWrap[];
}

/** What opening one entry gave: its field, content and blob plaintexts, or the error's category. */
export type Outcome = { name: string; field: string; content: unknown; blobs: Record<string, string> } | { name: string; error: string };

/** Opens one entry: the record, then each of its blobs. */
export function openEntry(corpus: Corpus, entry: CorpusRecord, keys: KeyLookup): Outcome {
  try {
    const place = { did: corpus.did, collection: entry.collection, rkey: entry.rkey };
    const opened = openRecord(fromJson(entry.record), place, keys);
    const blobs: Record<string, string> = {};
    for (const b of opened.blobs) {
      const cid = b.cid.toString();
      const stored = entry.blobOverride?.[cid] ?? corpus.blobs[cid];
      if (stored === undefined) throw new Error(`no blob ${cid} in the corpus`);
      blobs[cid] = toHex(openBlob(fromHex(stored), b));
    }
    return { name: entry.name, field: opened.field, content: toJson(opened.content as DataMap), blobs };
  } catch (e) {
    if (e instanceof SealError) return { name: entry.name, error: e.kind };
    throw e;
  }
}

export { keyList };
