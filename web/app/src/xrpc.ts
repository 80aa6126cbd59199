// The XRPC calls the page makes, with plain fetch: against the server that
// serves the page (same origin), or the PDS the account lives on when the
// server allows it (`gelstore serve --web-pds URL`, which adds that origin to
// the page's connect-src; CSP refuses every other). The session is refreshed
// once when the access token is refused; if the refresh is refused too the
// caller is told to ask the user to sign in again (nothing the user typed is
// touched here).

export interface Session {
  /** The origin of the server the account signed in at; "" for the server of this page. */
  service?: string;
  did: string;
  handle: string;
  accessJwt: string;
  refreshJwt: string;
}

/** An XRPC error answer: its name, message and HTTP status. */
export class XrpcError extends Error {
  constructor(
    readonly error: string,
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}

/** The server could not be reached at all (stopped, network down). */
export class Unreachable extends Error {}

/** The session ended: the refresh was refused too. */
export class SessionEnded extends Error {}

const TOKEN_ERRORS = new Set(["ExpiredToken", "InvalidToken", "AuthenticationRequired"]);

/** Where a session's calls go: `service`, or this page's own server. */
export function serviceUrl(service: string | undefined): string {
  return service || location.origin;
}

async function call(service: string | undefined, method: "GET" | "POST", nsid: string, params: Record<string, string | number | undefined>, body: unknown, token?: string): Promise<unknown> {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined) query.set(k, String(v));
  const qs = query.toString();
  const headers: Record<string, string> = {};
  if (token) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  let response: Response;
  try {
    response = await fetch(`${service ?? ""}/xrpc/${nsid}${qs ? `?${qs}` : ""}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    throw new Unreachable(`${serviceUrl(service)} did not answer (${(e as Error).message})`);
  }
  const text = await response.text();
  let json: unknown = undefined;
  try {
    json = text ? JSON.parse(text) : {};
  } catch {
    json = undefined;
  }
  if (!response.ok) {
    const j = (json ?? {}) as { error?: string; message?: string };
    throw new XrpcError(j.error ?? `HTTP${response.status}`, j.message ?? text.slice(0, 200), response.status);
  }
  return json;
}

/** Signs in at `service` ("" for this page's server). */
export async function createSession(service: string, identifier: string, password: string): Promise<Session> {
  const s = (await call(service, "POST", "com.atproto.server.createSession", {}, { identifier, password })) as Session;
  return { service, did: s.did, handle: s.handle, accessJwt: s.accessJwt, refreshJwt: s.refreshJwt };
}

/** Calls on behalf of a session; `onSession` keeps a refreshed one. */
export class Client {
  constructor(
    public session: Session,
    private readonly onSession: (s: Session) => void | Promise<void>,
  ) {}

  private refreshing: Promise<void> | undefined;

  /** Refreshes the session once (concurrent callers share the one refresh). */
  async refresh(): Promise<void> {
    this.refreshing ??= (async () => {
      try {
        const service = this.session.service;
        const s = (await call(service, "POST", "com.atproto.server.refreshSession", {}, undefined, this.session.refreshJwt)) as Session;
        this.session = { service, did: s.did, handle: s.handle, accessJwt: s.accessJwt, refreshJwt: s.refreshJwt };
        await this.onSession(this.session);
      } catch (e) {
        if (e instanceof XrpcError) throw new SessionEnded(`your session has ended (${e.error}): sign in again`);
        throw e;
      } finally {
        this.refreshing = undefined;
      }
    })();
    return this.refreshing;
  }

  private async authed(method: "GET" | "POST", nsid: string, params: Record<string, string | number | undefined>, body?: unknown): Promise<unknown> {
    const token = this.session.accessJwt;
    try {
      return await call(this.session.service, method, nsid, params, body, token);
    } catch (e) {
      if (!(e instanceof XrpcError) || !TOKEN_ERRORS.has(e.error)) throw e;
    }
    // Refused token: refresh once (unless another call already did) and repeat.
    if (this.session.accessJwt === token) await this.refresh();
    try {
      return await call(this.session.service, method, nsid, params, body, this.session.accessJwt);
    } catch (e) {
      if (e instanceof XrpcError && TOKEN_ERRORS.has(e.error)) throw new SessionEnded(`your session has ended (${e.error}): sign in again`);
      throw e;
    }
  }

  /** True when the account signed in at the server of this page (which has gelstore's own methods). */
  get here(): boolean {
    return !this.session.service;
  }

  /** The base URL of the account's server, for a URL the page builds itself. */
  get service(): string {
    return this.session.service ?? "";
  }

  /** An access token that is not about to expire (for a websocket, which cannot be retried by status). */
  async freshAccessToken(): Promise<string> {
    const exp = jwtExpiry(this.session.accessJwt);
    if (exp !== undefined && exp * 1000 - Date.now() < 30_000) await this.refresh();
    return this.session.accessJwt;
  }

  query(nsid: string, params: Record<string, string | number | undefined> = {}): Promise<unknown> {
    return this.authed("GET", nsid, params);
  }

  procedure(nsid: string, body: unknown): Promise<unknown> {
    return this.authed("POST", nsid, {}, body);
  }

  /** Every record of `collection` (all pages). */
  async listAll(collection: string): Promise<{ uri: string; cid: string; value: unknown }[]> {
    const out: { uri: string; cid: string; value: unknown }[] = [];
    let cursor: string | undefined;
    for (;;) {
      const page = (await this.query("com.atproto.repo.listRecords", { repo: this.session.did, collection, limit: 100, cursor })) as {
        records: { uri: string; cid: string; value: unknown }[];
        cursor?: string;
      };
      out.push(...page.records);
      if (!page.cursor || page.records.length === 0) return out;
      cursor = page.cursor;
    }
  }
}

// The `exp` claim of a JWT (its payload is base64url JSON; the signature is the server's to check).
function jwtExpiry(jwt: string): number | undefined {
  try {
    const payload = jwt.split(".")[1] ?? "";
    const json = JSON.parse(atob(payload.replace(/-/g, "+").replace(/_/g, "/"))) as { exp?: number };
    return typeof json.exp === "number" ? json.exp : undefined;
  } catch {
    return undefined;
  }
}
