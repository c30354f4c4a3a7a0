/**
 * The connection to `nsbox serve`: HTTP/1.1 over a unix socket or TCP, with Node's own
 * `http` module (Node's `fetch` cannot reach a unix socket).
 *
 * Where the server is and which token to send (first that applies), as the Python client
 * decides it (clients/python/nsbox/_http.py):
 *
 * - options: `url` (`http://HOST:PORT`, or `unix:/path/api.sock`) or `socket`; `token`
 *   or `tokenFile`;
 * - the environment: `NSBOX_URL` or `NSBOX_SOCKET`; `NSBOX_TOKEN` or `NSBOX_TOKEN_FILE`;
 * - the defaults of `nsbox serve`: the socket `<run>/api.sock` and the token file
 *   `<data>/api/token` of the state root (`NSBOX_ROOT`, else `/run/nsbox` and
 *   `/var/lib/nsbox` as root, `$XDG_RUNTIME_DIR/nsbox` and `$XDG_DATA_HOME/nsbox`
 *   otherwise). A socket `<root>/run/api.sock` given without a token finds its token in
 *   `<root>/data/api/token`, next to it.
 *
 * Every wait is bounded: connecting and each read by `timeoutMs`; a streamed answer by
 * `streamIdleTimeoutMs` between two lines (the server sends a heartbeat line after 15 s
 * of silence). Every body read into memory, and every line of a stream, is bounded by
 * `maxResponseBytes`.
 */
import * as fs from "node:fs";
import * as http from "node:http";
import * as os from "node:os";
import * as path from "node:path";
import { Readable } from "node:stream";

import {
  LimitExceeded,
  NsboxError,
  ProtocolError,
  ServerUnreachable,
  Timeout,
  Unauthorized,
  errorFromDocument,
  errorFromResponse,
} from "./errors.js";
import { LineSplitter, parseEventLine } from "./ndjson.js";
import { VERSION } from "./version.js";

export const DEFAULT_TIMEOUT_MS = 60_000;
// Heartbeats come after 15 s of silence; three missed ones mean the server is gone.
export const DEFAULT_STREAM_IDLE_TIMEOUT_MS = 45_000;
export const DEFAULT_MAX_RESPONSE_BYTES = 256 * 1024 * 1024;
// The server closes a keep-alive connection idle for 60 s: one idle for longer than this
// is dropped by the client first.
const IDLE_SOCKET_MS = 50_000;

/** Where the server is, and the client's own bounds. */
export interface ConnectionOptions {
  /** `http://HOST:PORT`, or `unix:/path/to/api.sock`. */
  url?: string;
  /** The server's unix socket. */
  socket?: string;
  /** The bearer token (else `tokenFile`, `NSBOX_TOKEN`, `NSBOX_TOKEN_FILE`, the state root's). */
  token?: string;
  tokenFile?: string;
  /** Bound of connecting and of each read (default 60 s). */
  timeoutMs?: number;
  /** Bound of the wait between two lines of a stream (default 45 s). */
  streamIdleTimeoutMs?: number;
  /** Bound of a body read into memory and of one line of a stream (default 256 MiB). */
  maxResponseBytes?: number;
  /** The environment to read NSBOX_* from (default `process.env`). */
  env?: NodeJS.ProcessEnv;
}

export type QueryValue = string | number | boolean | null | undefined;
export type Query = Record<string, QueryValue>;
export type Body = Buffer | Uint8Array | string | Readable;

export interface RequestOptions {
  query?: Query;
  /** A JSON body (sent with `Content-Type: application/json`). */
  json?: unknown;
  /** Raw bytes, text (UTF-8), or a stream (sent block by block). */
  body?: Body;
  headers?: Record<string, string>;
  timeoutMs?: number;
  signal?: AbortSignal;
  /** Bound of the answer's body (default: the client's `maxResponseBytes`). */
  maxBytes?: number;
}

export interface EventsOptions {
  /** The bound of each wait between two lines (default: the client's `streamIdleTimeoutMs`). */
  idleTimeoutMs?: number;
  /** The bound of the wait for the answer to begin (a cell queued behind others). */
  firstTimeoutMs?: number;
  signal?: AbortSignal;
  method?: "GET" | "POST";
}

/** One event of a stream: `{type, ...}` (docs/api.md, "Streaming"). */
export type StreamEvent = Record<string, unknown> & { type?: unknown };

function stateDirs(env: NodeJS.ProcessEnv): [run: string, data: string] {
  const root = env["NSBOX_ROOT"];
  if (root) return [path.join(root, "run"), path.join(root, "data")];
  const uid = typeof process.geteuid === "function" ? process.geteuid() : -1;
  if (uid === 0) return ["/run/nsbox", "/var/lib/nsbox"];
  const xdgRun = env["XDG_RUNTIME_DIR"];
  const run = xdgRun ? path.join(xdgRun, "nsbox") : `/tmp/nsbox-${uid}`;
  const xdgData = env["XDG_DATA_HOME"];
  const data = xdgData ? path.join(xdgData, "nsbox") : path.join(os.homedir(), ".local", "share", "nsbox");
  return [run, data];
}

/** The socket `nsbox serve` listens on when given neither --socket nor --listen. */
export function defaultSocketPath(env: NodeJS.ProcessEnv = process.env): string {
  return path.join(stateDirs(env)[0], "api.sock");
}

/**
 * The token file of the state root a socket belongs to: `<root>/run/api.sock` →
 * `<root>/data/api/token`; the default socket of root or of a rootless user → that
 * user's default token file; any other socket → the default token file of this user's
 * state root.
 */
export function tokenFileForSocket(socketPath: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  const [run, data] = stateDirs(env);
  if (socketPath) {
    const parent = path.dirname(path.resolve(socketPath));
    if (parent === path.resolve(run)) return path.join(data, "api", "token");
    if (parent === "/run/nsbox") return "/var/lib/nsbox/api/token";
    if (path.basename(parent) === "run") return path.join(path.dirname(parent), "data", "api", "token");
  }
  return path.join(data, "api", "token");
}

function readToken(file: string): string {
  const line = fs.readFileSync(file, "utf8").split("\n", 1)[0]!.trim();
  if (!line) {
    throw new Unauthorized(`the token file ${file} is empty`, {
      hint: "it is written by `nsbox serve` on its first start", status: undefined,
    });
  }
  return line;
}

/** `path?query`, the query percent-encoded; null and undefined left out, booleans as true/false. */
export function target(pathPart: string, query?: Query): string {
  if (!query) return pathPart;
  const items: string[] = [];
  for (const [k, v] of Object.entries(query)) {
    if (v === undefined || v === null) continue;
    items.push(`${encodeURIComponent(k)}=${encodeURIComponent(typeof v === "boolean" ? (v ? "true" : "false") : String(v))}`);
  }
  return items.length ? `${pathPart}?${items.join("&")}` : pathPart;
}

/** A path segment (an id, a name, a tool) as it goes in a request's path. */
export function segment(value: string | number): string {
  return encodeURIComponent(String(value));
}

/** A finished answer: status, headers (lower-case names) and the whole body. */
export class Response {
  constructor(readonly status: number, readonly headers: http.IncomingHttpHeaders, readonly data: Buffer) {}

  json<T = unknown>(): T {
    try {
      return JSON.parse(this.data.toString("utf8")) as T;
    } catch (e) {
      throw new ProtocolError(`the server's answer is not JSON: ${(e as Error).message}`, { status: this.status });
    }
  }
}

/** An answer whose body the caller reads (downloads, streams). */
export class OpenResponse {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;

  constructor(private readonly client: Client, readonly body: http.IncomingMessage) {
    this.status = body.statusCode ?? 0;
    this.headers = body.headers;
  }

  /** The announced length, when there is one. */
  get length(): number | undefined {
    const v = this.headers["content-length"];
    return v && /^\d+$/.test(v) ? Number(v) : undefined;
  }

  /** Each later wait for a byte is bounded by `ms`. */
  setIdleTimeout(ms: number): void {
    this.body.setTimeout(ms, () => {
      this.body.destroy(new Timeout(`nsbox at ${this.client.where} sent nothing for ${ms / 1000} s`));
    });
  }

  /** The whole body, at most `maxBytes` of it. */
  read(maxBytes: number = this.client.maxResponseBytes): Promise<Buffer> {
    return readBody(this.body, maxBytes, this.client.where);
  }

  /** Gives up the answer: its connection is closed, never reused. */
  abandon(): void {
    this.body.destroy();
  }
}

/** A failure while an answer was read, said as an nsbox error (an abort stays an abort). */
function cutError(where: string, err: unknown): unknown {
  if (err instanceof NsboxError) return err;
  if (err instanceof Error && err.name === "AbortError") return err;
  const why = err instanceof Error ? err.message : String(err);
  return new ServerUnreachable(`the answer from nsbox at ${where} was cut: ${why}`, { cause: err });
}

function readBody(res: http.IncomingMessage, maxBytes: number, where: string): Promise<Buffer> {
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let n = 0;
    res.on("data", (chunk: Buffer) => {
      n += chunk.length;
      if (n > maxBytes) {
        res.destroy(new LimitExceeded(`nsbox at ${where} answered with more than ${maxBytes} bytes (maxResponseBytes)`,
          { status: undefined }));
        return;
      }
      chunks.push(chunk);
    });
    res.on("end", () => resolve(Buffer.concat(chunks, n)));
    res.on("error", (e) => reject(cutError(where, e)));
    res.on("close", () => {
      if (!res.complete) reject(new ServerUnreachable(`the answer from nsbox at ${where} was cut short`));
    });
  });
}

function isStream(body: unknown): body is Readable {
  return body instanceof Readable;
}

/**
 * A connection to one `nsbox serve`. One client serves any number of requests at once
 * (a pool of keep-alive connections); idle connections do not keep the process alive.
 *
 * ```ts
 * new Client()                                        // NSBOX_URL / NSBOX_SOCKET or the default socket
 * new Client({ url: "http://127.0.0.1:8080", token })
 * new Client({ socket: "/tmp/x/run/api.sock" })       // token from /tmp/x/data/api/token
 * ```
 */
export class Client {
  readonly url: string | undefined;
  readonly socketPath: string | undefined;
  readonly tokenFile: string | undefined;
  readonly timeoutMs: number;
  readonly streamIdleTimeoutMs: number;
  readonly maxResponseBytes: number;
  private readonly token: string | undefined;
  private readonly host: string = "localhost";
  private readonly port: number = 0;
  private readonly agent: http.Agent;

  constructor(options: ConnectionOptions = {}) {
    const env = options.env ?? process.env;
    let url = options.url;
    let socket = options.socket;
    if (url !== undefined && socket !== undefined) throw new TypeError("give url or socket, not both");
    if (url === undefined && socket === undefined) {
      url = env["NSBOX_URL"] || undefined;
      if (url === undefined) socket = env["NSBOX_SOCKET"] || undefined;
    }
    if (url !== undefined && url.startsWith("unix:")) {
      // unix:/path, unix:///path, unix://localhost/path
      socket = decodeURIComponent(url.slice("unix:".length).replace(/^\/\/[^/]*/, ""));
      url = undefined;
    }
    if (url !== undefined) {
      let parsed: URL;
      try {
        parsed = new URL(url);
      } catch {
        throw new TypeError(`nsbox URLs are http://HOST:PORT (or unix:/path/to/api.sock), not ${JSON.stringify(url)}`);
      }
      if (parsed.protocol !== "http:" || !parsed.hostname) {
        throw new TypeError(`nsbox URLs are http://HOST:PORT (or unix:/path/to/api.sock), not ${JSON.stringify(url)}`);
      }
      if (parsed.pathname !== "/" || parsed.search || parsed.hash) {
        throw new TypeError(`an nsbox URL has no path: ${JSON.stringify(url)}`);
      }
      this.host = parsed.hostname.replace(/^\[(.*)\]$/, "$1");
      this.port = parsed.port ? Number(parsed.port) : 80;
      this.url = `http://${parsed.hostname}:${this.port}`;
    } else {
      this.socketPath = socket || defaultSocketPath(env);
    }

    let token = options.token ?? (env["NSBOX_TOKEN"] || undefined);
    if (token === undefined) {
      const given = options.tokenFile ?? (env["NSBOX_TOKEN_FILE"] || undefined);
      const file = given ?? tokenFileForSocket(this.socketPath, env);
      this.tokenFile = file;
      try {
        token = readToken(file);
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        if (code === "ENOENT") {
          if (given !== undefined) {
            throw new Unauthorized(`no token file at ${file}`, {
              hint: "`nsbox serve` prints its token_file when ready", status: undefined,
            });
          }
          // No token: the server answers 401 with what to do.
        } else if (code === "EACCES" || code === "EPERM") {
          throw new Unauthorized(`the token file ${file} is not readable by this user`, {
            hint: "run as the user that runs `nsbox serve`, or pass token", status: undefined,
          });
        } else {
          throw e;
        }
      }
    }
    this.token = token;
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.streamIdleTimeoutMs = options.streamIdleTimeoutMs ?? DEFAULT_STREAM_IDLE_TIMEOUT_MS;
    this.maxResponseBytes = options.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
    this.agent = new http.Agent({ keepAlive: true, timeout: IDLE_SOCKET_MS });
  }

  /** The server's address as a person would write it. */
  get where(): string {
    return this.url ?? `unix:${this.socketPath}`;
  }

  /** Whether a token is sent. */
  get hasToken(): boolean {
    return this.token !== undefined;
  }

  /** Closes the idle connections (a later request opens a new one). */
  close(): void {
    for (const sockets of Object.values(this.agent.freeSockets)) {
      for (const s of sockets ?? []) s.destroy();
    }
  }

  /** One request, its whole answer read; an error answer throws its error. */
  async request(method: string, pathPart: string, options: RequestOptions = {}): Promise<Response> {
    const res = await this.send(method, pathPart, options);
    const timeoutMs = options.timeoutMs ?? this.timeoutMs;
    res.setTimeout(timeoutMs, () => {
      res.destroy(new Timeout(`nsbox at ${this.where} stopped answering (no byte for ${timeoutMs / 1000} s)`));
    });
    const status = res.statusCode ?? 0;
    if (status >= 400) {
      const data = await readBody(res, 1 << 20, this.where).catch(() => Buffer.alloc(0));
      throw errorFromResponse(status, data);
    }
    try {
      const data = await readBody(res, options.maxBytes ?? this.maxResponseBytes, this.where);
      return new Response(status, res.headers, data);
    } catch (e) {
      throw options.signal?.aborted ? options.signal.reason ?? e : e;
    }
  }

  /** A request whose answer is a JSON document. */
  async json<T = unknown>(method: string, pathPart: string, options: RequestOptions = {}): Promise<T> {
    return (await this.request(method, pathPart, options)).json<T>();
  }

  /**
   * A request whose body the caller reads (downloads, streams); an error answer throws.
   * Read the body to its end or `abandon()` it.
   */
  async open(method: string, pathPart: string, options: RequestOptions = {}): Promise<OpenResponse> {
    const res = await this.send(method, pathPart, options);
    const status = res.statusCode ?? 0;
    if (status >= 400) {
      const data = await readBody(res, 1 << 20, this.where).catch(() => Buffer.alloc(0));
      throw errorFromResponse(status, data);
    }
    return new OpenResponse(this, res);
  }

  /**
   * Sends a request with `Accept: application/x-ndjson` and yields its events as they
   * come, up to and including the `result`. Heartbeats are skipped; an `error` event
   * throws its error. Leaving early (a `break`, a throw) closes the connection: for a
   * command that kills it, a cell runs on.
   */
  async *events(pathPart: string, json: unknown, options: EventsOptions = {}): AsyncGenerator<StreamEvent, void, undefined> {
    const idle = options.idleTimeoutMs ?? this.streamIdleTimeoutMs;
    // The answer may wait for the work to start (a cell queued behind others): that first
    // wait has its own bound; then each line comes within `idle`.
    const first = Math.max(options.firstTimeoutMs ?? idle, idle);
    const method = options.method ?? "POST";
    const answer = await this.open(method, pathPart, {
      json: method === "POST" ? json : undefined,
      headers: { Accept: "application/x-ndjson" },
      timeoutMs: first,
      signal: options.signal,
    });
    answer.setIdleTimeout(idle);
    let finished = false;
    try {
      if (!String(answer.headers["content-type"] ?? "").includes("application/x-ndjson")) {
        // A server that answers with one document: it is the result.
        const doc = new Response(answer.status, answer.headers, await answer.read()).json<Record<string, unknown>>();
        finished = true;
        yield { type: "result", ...doc };
        return;
      }
      const lines = new LineSplitter(this.maxResponseBytes);
      let result: StreamEvent | undefined;
      for await (const chunk of answer.body) {
        for (const line of lines.push(chunk as Buffer)) {
          if (result !== undefined) continue; // nothing follows a result but the body's end
          const event = parseEventLine(line);
          if (event === undefined || event["type"] === "heartbeat") continue;
          if (event["type"] === "error") {
            finished = true;
            throw errorFromDocument(event["error"], 200);
          }
          if (event["type"] === "result") {
            // Read on to the body's end (it follows at once) so the connection is reused.
            result = event;
            continue;
          }
          yield event;
        }
      }
      if (result === undefined) {
        const rest = parseEventLine(lines.rest());
        if (rest === undefined || rest["type"] !== "result") {
          throw new ProtocolError(`the stream from nsbox at ${this.where} ended without a result`);
        }
        result = rest;
      }
      finished = true;
      yield result;
    } catch (e) {
      // An abort after the answer began shows as a cut connection: say it as the abort.
      throw options.signal?.aborted ? options.signal.reason ?? e : cutError(this.where, e);
    } finally {
      if (!finished) answer.abandon();
    }
  }

  private headers(extra: Record<string, string> | undefined): Record<string, string> {
    const h: Record<string, string> = { "User-Agent": `nsbox-typescript/${VERSION}` };
    if (this.token !== undefined) h["Authorization"] = `Bearer ${this.token}`;
    return { ...h, ...extra };
  }

  /** Sends one request and waits for its status line; failures said as nsbox errors. */
  private async send(method: string, pathPart: string, options: RequestOptions): Promise<http.IncomingMessage> {
    const headers = this.headers(options.headers);
    let body: Buffer | Readable | undefined;
    if (options.json !== undefined) {
      body = Buffer.from(JSON.stringify(options.json), "utf8");
      headers["Content-Type"] = "application/json";
    } else if (typeof options.body === "string") {
      body = Buffer.from(options.body, "utf8");
    } else if (options.body instanceof Uint8Array) {
      body = Buffer.from(options.body.buffer, options.body.byteOffset, options.body.byteLength);
    } else if (isStream(options.body)) {
      body = options.body;
    } else if (method === "POST" || method === "PUT" || method === "PATCH") {
      body = Buffer.alloc(0);
    }
    if (Buffer.isBuffer(body) && !Object.keys(headers).some((k) => k.toLowerCase() === "content-length")) {
      headers["Content-Length"] = String(body.length);
    }
    const requestTarget = target(pathPart, options.query);
    const timeoutMs = options.timeoutMs ?? this.timeoutMs;
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.attempt(method, requestTarget, body, headers, timeoutMs, options.signal);
      } catch (e) {
        // A kept-alive connection the server closed while it was idle fails at once:
        // the request is sent again once, on a new connection, if its body can be.
        const reused = (e as { reusedSocket?: boolean }).reusedSocket === true;
        const code = (e as NodeJS.ErrnoException).code;
        if (attempt === 0 && reused && !isStream(body) && (code === "ECONNRESET" || code === "EPIPE")) continue;
        throw this.translate(e, timeoutMs);
      }
    }
  }

  private attempt(method: string, requestTarget: string, body: Buffer | Readable | undefined,
    headers: Record<string, string>, timeoutMs: number, signal: AbortSignal | undefined): Promise<http.IncomingMessage> {
    return new Promise((resolve, reject) => {
      const endpoint = this.socketPath !== undefined ? { socketPath: this.socketPath } : { host: this.host, port: this.port };
      const req = http.request({ ...endpoint, method, path: requestTarget, headers, agent: this.agent, signal });
      req.setTimeout(timeoutMs, () => {
        req.destroy(new Timeout(`no answer from nsbox at ${this.where} within ${timeoutMs / 1000} s`));
      });
      req.on("response", resolve);
      req.on("error", (e) => {
        Object.defineProperty(e, "reusedSocket", { value: req.reusedSocket, configurable: true });
        reject(e);
      });
      if (isStream(body)) {
        body.on("error", (e) => req.destroy(e));
        body.pipe(req);
      } else {
        req.end(body);
      }
    });
  }

  private translate(e: unknown, timeoutMs: number): unknown {
    if (e instanceof NsboxError) return e;
    if (e instanceof Error && e.name === "AbortError") return e;
    const err = e as NodeJS.ErrnoException;
    switch (err.code) {
      case "ENOENT":
      case "ECONNREFUSED":
        return new ServerUnreachable(`no nsbox server at ${this.where} (${err.code})`, {
          hint: "start one with `nsbox serve`, or set NSBOX_URL / NSBOX_SOCKET", cause: e,
        });
      case "ECONNRESET":
      case "EPIPE":
        return new ServerUnreachable(`the connection to nsbox at ${this.where} was closed: ${err.message}`, { cause: e });
      case "ETIMEDOUT":
        return new Timeout(`no answer from nsbox at ${this.where} within ${timeoutMs / 1000} s`, { cause: e });
      default:
        return new ServerUnreachable(`cannot reach nsbox at ${this.where}: ${err.message}`, { cause: e });
    }
  }
}
