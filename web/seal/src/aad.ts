// The associated data of a sealed record: binds the seal to its place,
// its clear fields and its blobs, so moving or editing any of them fails
// authentication. Layout: fixtures/seal/README.md, "Sealing a record".

import { sha256 } from "@noble/hashes/sha2.js";
import { concat, field, u32be, u64be } from "./bytes.js";
import type { CID, DataMap } from "./model.js";
import { encodeCbor } from "./model.js";

/** Domain label that starts every AAD. */
export const AAD_LABEL = "gelstore/seal/aad/v2";

/** The field a message without content (a pending reply) is sealed in. */
export const AUTHENTICATOR_FIELD = "authenticator";

/** Where a record lives: the account's repo DID (never a device's), collection, rkey. */
export interface Place {
  did: string;
  collection: string;
  rkey: string;
}

/** A blob as the AAD binds it: CID and size of the stored (encrypted) bytes, and the ref's MIME type. */
export interface BlobBinding {
  cid: CID;
  size: number;
  mimeType: string;
}

/** The inputs of the AAD other than the envelope's own fields. */
export interface AadContext {
  place: Place;
  recordType: string;
  /** The name of the field the envelope sits in. */
  field: string;
  /** SHA-256 of the DAG-CBOR of the record without that field. */
  clearHash: Uint8Array;
}

/** The AAD; `envelopeType` is the envelope's own `$type`, `""` when it has none. */
export function recordAad(
  alg: string,
  keyId: string,
  nonce: Uint8Array,
  envelopeType: string,
  ctx: AadContext,
  blobs: readonly BlobBinding[],
): Uint8Array {
  const parts = [
    field(AAD_LABEL),
    field(alg),
    field(keyId),
    field(nonce),
    field(envelopeType),
    field(ctx.place.did),
    field(ctx.place.collection),
    field(ctx.place.rkey),
    field(ctx.recordType),
    field(ctx.field),
    field(ctx.clearHash),
    u32be(blobs.length),
  ];
  for (const b of blobs) parts.push(field(b.cid.bytes), u64be(b.size), field(b.mimeType));
  return concat(...parts);
}

/** SHA-256 of the canonical DAG-CBOR of `record` without `sealedField` (`$type` included). */
export function clearFieldsHash(record: DataMap, sealedField: string): Uint8Array {
  const clear: DataMap = {};
  for (const [k, v] of Object.entries(record)) if (k !== sealedField) clear[k] = v;
  return sha256(encodeCbor(clear));
}

/** The main sealed field of a record type, if it has one. */
export function sealedField(recordType: string): string | undefined {
  switch (recordType) {
    case "chat.gel.assistant.message":
      return "content";
    case "chat.gel.assistant.chat":
    case "chat.gel.assistant.settings":
      return "sealed";
    default:
      return undefined;
  }
}

/** Every field a record of the type may hold its envelope in, the main one first. */
export function sealedFields(recordType: string): readonly string[] {
  const main = sealedField(recordType);
  if (main === "content") return ["content", AUTHENTICATOR_FIELD];
  return main ? [main] : [];
}
