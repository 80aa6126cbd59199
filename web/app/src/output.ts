// A tool output too long for its reply: the result part keeps the start
// (`output`) and names the whole output's sealed blob (`outputBlob`). The
// blob's key is in the reply's seal, and only a blob the envelope lists
// counts: its CID and size are bound into the record's AAD, so a blob the
// envelope does not list is not this record's, whatever the part says.

import { CID, SealError, openBlob, type BlobSeal } from "@gelstore/seal";

/** Characters of a whole output put in the page; the rest is in the download. */
export const SHOWN_CHARS = 256 * 1024;

/** Why the whole output cannot be shown. */
export class OutputProblem extends Error {
  constructor(
    readonly kind: "unlisted" | "missing" | "altered" | "unreachable" | "notText",
    message: string,
  ) {
    super(message);
  }
}

/** The CID a blob ref names: typed (`ref` a link) or legacy (`cid` a string). */
export function blobCid(ref: unknown): CID | undefined {
  if (typeof ref !== "object" || ref === null) return undefined;
  const r = ref as { ref?: unknown; cid?: unknown };
  const typed = CID.asCID(r.ref);
  if (typed) return typed;
  if (typeof r.cid === "string") {
    try {
      return CID.parse(r.cid);
    } catch {
      return undefined;
    }
  }
  return undefined;
}

/** The seal's entry for the blob `ref` names. */
export function sealFor(ref: unknown, blobs: readonly BlobSeal[]): BlobSeal {
  const cid = blobCid(ref);
  const seal = cid && blobs.find((b) => b.cid.equals(cid));
  if (!seal) {
    throw new OutputProblem(
      "unlisted",
      "The whole output cannot be opened: the blob this result names is not one the reply's seal lists, so it is not this reply's. Nothing of it is shown.",
    );
  }
  return seal;
}

/** Fetches the blob from the account's server (`service`, "" for this page's) and opens it (CID, size, every chunk). */
export async function wholeOutput(service: string, did: string, seal: BlobSeal): Promise<string> {
  const url = `${service}/xrpc/com.atproto.sync.getBlob?${new URLSearchParams({ did, cid: seal.cid.toString() })}`;
  let response: Response;
  try {
    response = await fetch(url);
  } catch {
    throw new OutputProblem("unreachable", "The server is not answering, so the whole output cannot be fetched. Try again once it is back.");
  }
  if (!response.ok) {
    const j = (await response.json().catch(() => ({}))) as { error?: string; message?: string };
    if (response.status === 400 && /not found/i.test(j.message ?? "")) {
      throw new OutputProblem("missing", `The whole output is not on the server: it has no blob ${seal.cid}. Only the start above can be shown.`);
    }
    throw new OutputProblem("missing", `The server did not give the whole output: ${j.error ?? `HTTP ${response.status}`}${j.message ? ` (${j.message})` : ""}.`);
  }
  const bytes = new Uint8Array(await response.arrayBuffer());
  // Let the page paint its status before the synchronous open.
  await new Promise((r) => setTimeout(r, 0));
  let plain: Uint8Array;
  try {
    plain = openBlob(bytes, seal);
  } catch (e) {
    if (!(e instanceof SealError)) throw e;
    throw new OutputProblem(
      "altered",
      `The whole output does not open: the blob the server sent is not the one this reply sealed (changed on the server, or damaged; ${e.message}). Nothing of it is shown.`,
    );
  }
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(plain);
  } catch {
    throw new OutputProblem("notText", "The whole output opened, but it is not UTF-8 text, so it is not shown.");
  }
}
