// chat.gel.assistant.subscribeReply from the browser: a websocket whose
// binary frames are two DAG-CBOR values, a header {op, t} and a body. A
// browser cannot set an Authorization header on a websocket, so the access
// token travels as a second subprotocol `bearer.<token>` next to
// `chat.gel.assistant.subscribeReply`, which the server answers with.
// The cursor (the last seq seen) resumes a stream after a dropped
// connection; the server replays what came after it.

import { decodeFirst } from "cborg";
import { decodeOptions } from "@ipld/dag-cbor";

export const SUBPROTOCOL = "chat.gel.assistant.subscribeReply";

export type ReplyEvent = { t: string; body: Record<string, unknown> };

export interface StreamHandlers {
  event(e: ReplyEvent): void;
  /** An error frame (`ReplyNotFound`, `FutureCursor`, `ReplyTampered`, `ServerShuttingDown`, …); the socket closes next. */
  failed(error: string, message: string): void;
  /** The socket closed; `clean` if the run ended (done or confirmRequired). */
  closed(clean: boolean): void;
}

/** Decodes one frame: header and body. */
export function decodeFrame(bytes: Uint8Array): { header: Record<string, unknown>; body: Record<string, unknown> } {
  const [header, rest] = decodeFirst(bytes, decodeOptions) as [Record<string, unknown>, Uint8Array];
  const [body, tail] = decodeFirst(rest, decodeOptions) as [Record<string, unknown>, Uint8Array];
  if (tail.length !== 0) throw new Error("a frame with bytes after its body");
  return { header, body };
}

/** Opens one subscription; returns a function that closes it. */
export function subscribeReply(reply: string, cursor: number, token: string, h: StreamHandlers): () => void {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const url = `${scheme}//${location.host}/xrpc/chat.gel.assistant.subscribeReply?reply=${encodeURIComponent(reply)}${cursor > 0 ? `&cursor=${cursor}` : ""}`;
  const socket = new WebSocket(url, [SUBPROTOCOL, `bearer.${token}`]);
  socket.binaryType = "arraybuffer";
  let ended = false;
  socket.onmessage = (m) => {
    if (!(m.data instanceof ArrayBuffer)) return;
    let frame;
    try {
      frame = decodeFrame(new Uint8Array(m.data));
    } catch (e) {
      h.failed("BadFrame", `the server sent a frame that does not decode: ${(e as Error).message}`);
      ended = true;
      socket.close();
      return;
    }
    if (frame.header.op === -1) {
      // Not a clean end: the caller decides whether to reconnect.
      h.failed(String(frame.body.error ?? "Error"), String(frame.body.message ?? ""));
      return;
    }
    const t = String(frame.header.t ?? "");
    if (t === "#done" || t === "#confirmRequired") ended = true;
    h.event({ t, body: frame.body });
  };
  socket.onclose = () => h.closed(ended);
  return () => {
    ended = true;
    socket.close();
  };
}
