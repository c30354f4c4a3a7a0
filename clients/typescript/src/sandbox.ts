/**
 * Sandboxes and sessions over the HTTP API (docs/api.md).
 *
 * ```ts
 * const sbx = await Sandbox.create({ size: "medium" });
 * try {
 *   await sbx.runCode("x = 6 * 7");
 *   console.log((await sbx.runCode("x")).results);               // "42": the kernel keeps its globals
 *   console.log((await sbx.commands.run("echo hi")).stdoutText);  // "hi\n"
 *   await sbx.files.upload(Buffer.from("a,b\n1,2\n"), "data/t.csv");
 * } finally {
 *   await sbx.remove();
 * }
 * ```
 */
import type { Readable } from "node:stream";

import { Client, segment, type ConnectionOptions } from "./connection.js";
import { NotFound, ProtocolError } from "./errors.js";
import { Files, Fs, WorkspaceArchive, type WorkspaceArchiveOptions } from "./files.js";
import {
  PtyOutput,
  type CreateSandbox,
  type Env,
  type Extracted,
  type SandboxInfo,
  type SessionInfo,
  type SizeTier,
  type SnapshotInfo,
  type WorkbenchAnswer,
} from "./models.js";
import type { components } from "./generated/openapi.js";
import { Ports } from "./ports.js";
import { Processes } from "./processes.js";
import { Commands, Runner, type RunCodeOptions } from "./run.js";
import { ToolCallServer, type ToolCallOptions, type ToolHandler } from "./tool-calls.js";
import type { Execution } from "./models.js";

/** A client to use, or where to connect (see {@link Client}). */
export interface ClientOptions extends ConnectionOptions {
  client?: Client;
}

/** The given client, or a new one from these options and the environment. */
export function makeClient(options: ClientOptions = {}): Client {
  const { client, ...connection } = options;
  if (client !== undefined) {
    const given = (["url", "socket", "token", "tokenFile"] as const).filter((k) => connection[k] !== undefined);
    if (given.length) throw new TypeError(`give client or the connection options (${given.join(", ")}), not both`);
    return client;
  }
  return new Client(connection);
}

/**
 * One request through `options.client`, or through a client made for it alone and closed
 * after it (the class-level calls: list, snapshots, ...).
 */
async function requestOnce<T>(options: ClientOptions, method: string, path: string, query?: Record<string, string | undefined>): Promise<T> {
  const client = makeClient(options);
  try {
    return await client.json<T>(method, path, { query });
  } finally {
    if (options.client === undefined) client.close();
  }
}

function removedList(doc: unknown): string[] {
  const removed = doc !== null && typeof doc === "object" ? (doc as Record<string, unknown>)["removed"] : undefined;
  return Array.isArray(removed) ? removed.map(String) : [];
}

function stringEnv(env: Record<string, unknown> | undefined): Env | undefined {
  return env === undefined ? undefined : Object.fromEntries(Object.entries(env).map(([k, v]) => [k, String(v)]));
}

/**
 * What a sandbox and a session's sandbox share: cells, commands, files, fs, terminals,
 * tool calls, interrupt, restart.
 */
abstract class Workbench {
  readonly commands: Commands;
  readonly files: Files;
  readonly fs: Fs;
  readonly ports: Ports;
  readonly processes: Processes;
  protected readonly base: string;
  private readonly runner: Runner;
  private readonly workspace: WorkspaceArchive;

  protected constructor(readonly client: Client, base: string, private readonly ownsClient: boolean) {
    this.base = base;
    this.runner = new Runner(client, base);
    this.commands = new Commands(this.runner);
    this.files = new Files(client, base);
    this.fs = new Fs(client, base);
    this.ports = new Ports(client, base);
    this.processes = new Processes(client, base);
    this.workspace = new WorkspaceArchive(client, base);
  }

  /**
   * Runs a cell in the sandbox's Python kernel, whose globals survive between cells;
   * resolves to its {@link Execution} whatever its status (an exception in the cell is
   * `execution.error`, a deadline `status === "timeout"` with the state kept, or
   * `state_lost` when the kernel had to be restarted). With `onStdout`, `onStderr`,
   * `onProgress` or `onDisplay` (or `stream: true`) the answer is streamed. A client that
   * goes away does not stop the cell.
   */
  runCode(code: string | Uint8Array, options: RunCodeOptions = {}): Promise<Execution> {
    return this.runner.runCode(code, options);
  }

  /**
   * Answers this sandbox's tool calls from this process (a sandbox created with
   * `tools: {backend: "callback"}`): `handler(helper, args)` gets each call of
   * `run_composio_tool` (helper `run_tool`, args `{tool, arguments}`), `invoke_llm`,
   * `web_search`, `proxy_execute`, and returns the result (or a promise of it); a thrown
   * error becomes the call's error. Resolves once subscribed; `stop()` it when done.
   */
  onToolCall(handler: ToolHandler, options: ToolCallOptions = {}): Promise<ToolCallServer> {
    return ToolCallServer.start(this.client, this.base, handler, options);
  }

  /**
   * One call of a hosted workbench tool, answered by this sandbox:
   * `COMPOSIO_REMOTE_WORKBENCH` ({code_to_execute}) or `COMPOSIO_REMOTE_BASH_TOOL`
   * ({command}); the hosted answer `{data, error, successful}` (docs/tools.md).
   */
  workbenchTool(tool: string, args: Record<string, unknown>): Promise<WorkbenchAnswer> {
    return this.client.json<WorkbenchAnswer>("POST", `${this.base}/tools/${segment(tool)}`,
      { json: args, timeoutMs: Math.max(this.client.timeoutMs, 240_000) });
  }

  // -- the workspace root as one tar archive (docs/api.md, "Workspace archives") --------

  /**
   * The workspace root (the sandbox's `workspace_root`: /home/user unless it was made with
   * another) as one tar archive, members relative to it, of a running, stopped or dead
   * sandbox, streamed: links kept as links (one pointing out of the root left out), bucket
   * mounts and the manifest's ephemeral entries left out. An archive cut short fails the
   * stream (ServerUnreachable): read to its end, it is whole.
   */
  workspaceArchive(options: WorkspaceArchiveOptions = {}): Promise<Readable> {
    return this.workspace.stream(options);
  }

  /** {@link workspaceArchive} in memory, at most `maxBytes` (default: the client's `maxResponseBytes`). */
  workspaceArchiveBytes(options: WorkspaceArchiveOptions & { maxBytes?: number } = {}): Promise<Buffer> {
    return this.workspace.bytes(options);
  }

  /**
   * Streams {@link workspaceArchive} into the local file `dest` (mode 0600), whole or not
   * at all; resolves to its size. An existing file is replaced only with `overwrite`
   * (else EEXIST).
   */
  saveWorkspaceArchive(dest: string, options: WorkspaceArchiveOptions & { overwrite?: boolean } = {}): Promise<number> {
    return this.workspace.save(dest, options);
  }

  /**
   * Replaces the running sandbox's workspace root with a tar archive: bytes, a local file
   * (its path as a string) or a readable stream, streamed. Every member is checked first:
   * an absolute name, `..`, a link pointing out, a hard link, a device or FIFO, a duplicate
   * refuses the whole archive (InvalidArgument, 422) and nothing changes. Files not in the
   * archive are gone after; bucket mounts stay. The body is bounded as an upload's (the
   * server's `--max-upload`, 100 MiB by default: LimitExceeded). Resolves to `{path,
   * members, bytes}`.
   */
  replaceWorkspace(archive: string | Uint8Array | Readable, options: { timeoutMs?: number } = {}): Promise<Extracted> {
    return this.workspace.replace(archive, options);
  }

  /** Interrupts the running cell (it ends `interrupted`, its state kept). */
  async interrupt(): Promise<void> {
    await this.client.json("POST", `${this.base}/interrupt`);
  }

  /** A fresh interpreter (the globals are gone; files stay). */
  async restart(): Promise<void> {
    await this.client.json("POST", `${this.base}/restart`);
  }

  // -- PTY sessions (docs/semantics.md, "PTY sessions") --------------------------------

  /**
   * Starts `command` (a bash line, or an argv array) on a terminal in the sandbox;
   * resolves to its session id. No deadline: it runs until it exits or is killed. With
   * `runAs`, as that account of the sandbox's (its `users`; default `user`).
   */
  async ptyStart(command: string | readonly string[],
    options: { cols?: number; rows?: number; env?: Record<string, string>; runAs?: string } = {}): Promise<number> {
    const body: Record<string, unknown> = { cols: options.cols ?? 80, rows: options.rows ?? 24 };
    if (typeof command === "string") body["command"] = command;
    else body["argv"] = command.map(String);
    if (options.env && Object.keys(options.env).length) body["env"] = stringEnv(options.env);
    if (options.runAs !== undefined) body["run_as"] = options.runAs;
    const doc = await this.client.json<components["schemas"]["PtyStarted"]>("POST", `${this.base}/pty`, { json: body });
    return Number(doc.session_id);
  }

  /**
   * Types `chars` ("\x03" is Ctrl-C), then resolves to what the session printed within
   * `yield_ms` (sooner if it exits).
   */
  async ptyWrite(sessionId: number, chars: string | Uint8Array, options: { yield_ms?: number } = {}): Promise<PtyOutput> {
    const yieldMs = options.yield_ms ?? 250;
    const body: Record<string, unknown> = { yield_ms: yieldMs };
    if (typeof chars === "string") body["chars"] = chars;
    else body["chars_b64"] = Buffer.from(chars.buffer, chars.byteOffset, chars.byteLength).toString("base64");
    const doc = await this.client.json<Record<string, unknown>>("POST", `${this.base}/pty/${segment(sessionId)}/input`,
      { json: body, timeoutMs: Math.max(this.client.timeoutMs, yieldMs + 30_000) });
    return new PtyOutput(doc);
  }

  /** What the session printed within `yield_ms`, without typing anything. */
  async ptyRead(sessionId: number, options: { yield_ms?: number } = {}): Promise<PtyOutput> {
    const yieldMs = options.yield_ms ?? 250;
    const doc = await this.client.json<Record<string, unknown>>("GET", `${this.base}/pty/${segment(sessionId)}/output`,
      { query: { yield_ms: yieldMs }, timeoutMs: Math.max(this.client.timeoutMs, yieldMs + 30_000) });
    return new PtyOutput(doc);
  }

  async ptyResize(sessionId: number, cols: number, rows: number): Promise<void> {
    await this.client.json("POST", `${this.base}/pty/${segment(sessionId)}/resize`, { json: { cols, rows } });
  }

  /** Kills one session, or every session of the sandbox; the ids killed. */
  async ptyKill(sessionId?: number): Promise<number[]> {
    const path = `${this.base}/pty${sessionId === undefined ? "" : `/${segment(sessionId)}`}`;
    const doc = await this.client.json<{ killed?: unknown }>("DELETE", path);
    return Array.isArray(doc?.killed) ? doc.killed.map(Number) : [];
  }

  /** Closes the connections this object made (the sandbox stays). */
  close(): void {
    if (this.ownsClient) this.client.close();
  }
}

/**
 * A sandbox: made with {@link Sandbox.create}, found with {@link Sandbox.connect}, listed
 * with {@link Sandbox.list}. `remove()` it when done (or give it a `ttl_s`).
 */
export class Sandbox extends Workbench {
  private info_: SandboxInfo;

  constructor(info: SandboxInfo, client: Client, options: { ownsClient?: boolean } = {}) {
    if (!info?.id) throw new ProtocolError("the server described a sandbox without an id");
    super(client, `/v1/sandboxes/${segment(info.id)}`, options.ownsClient ?? false);
    this.info_ = info;
  }

  get id(): string {
    return this.info_.id;
  }

  get sandboxId(): string {
    return this.info_.id;
  }

  get name(): string {
    return this.info_.name;
  }

  /** The last description fetched (create, connect, info, resize...): no request. */
  get lastInfo(): SandboxInfo {
    return this.info_;
  }

  /**
   * Creates a sandbox and resolves once it is up (`nsbox create`). `spec` is the API's
   * create document (docs/api.md, "Sandboxes"): `size` standard|medium|large|xlarge;
   * `env` (never echoed); `net` "none", "host", "internet", "allow=pypi.org,*.github.com"
   * or `{allow, allow_private}`; `mounts` bucket mounts; `files_quota` / `home_size` bytes
   * or "10G"; `volume` a named files volume; `manifest` files made in /home/user first;
   * `tools` the tool bridge; `packages` pip's sources; `from_snapshot` a snapshot's id or
   * name; `lazy_kernel`; `ttl_s` its time to live; `image` an image of the server's store
   * whose tree is the root (docs/images.md). The connection comes from `options`.
   */
  static async create(spec: CreateSandbox = {}, options: ClientOptions = {}): Promise<Sandbox> {
    const client = makeClient(options);
    const body: Record<string, unknown> = { ...spec };
    for (const key of Object.keys(body)) if (body[key] === undefined) delete body[key];
    if (spec.env !== undefined) body["env"] = stringEnv(spec.env);
    // Creating waits for the sandbox (30 s, plus 60 s per bucket mount at most).
    const waitMs = Math.max(client.timeoutMs, 60_000 + 60_000 * (spec.mounts?.length ?? 0));
    const doc = await client.json<SandboxInfo>("POST", "/v1/sandboxes", { json: body, timeoutMs: waitMs });
    return new Sandbox(doc, client, { ownsClient: options.client === undefined });
  }

  /** An existing sandbox by id or name (NotFound when there is none). */
  static async connect(idOrName: string, options: ClientOptions = {}): Promise<Sandbox> {
    const client = makeClient(options);
    const doc = await client.json<SandboxInfo>("GET", `/v1/sandboxes/${segment(idOrName)}`);
    return new Sandbox(doc, client, { ownsClient: options.client === undefined });
  }

  /** Every sandbox of the server's state root (`nsbox ls`). */
  static async list(options: ClientOptions = {}): Promise<SandboxInfo[]> {
    const doc = await requestOnce<{ sandboxes?: SandboxInfo[] }>(options, "GET", "/v1/sandboxes");
    return Array.isArray(doc?.sandboxes) ? doc.sandboxes : [];
  }

  /** Every snapshot of the server (`nsbox snapshot ls`). */
  static async snapshots(options: ClientOptions = {}): Promise<SnapshotInfo[]> {
    const doc = await requestOnce<{ snapshots?: SnapshotInfo[] }>(options, "GET", "/v1/snapshots");
    return Array.isArray(doc?.snapshots) ? doc.snapshots : [];
  }

  /** Deletes a snapshot by id or name (`nsbox snapshot rm`). */
  static async removeSnapshot(idOrName: string, options: ClientOptions = {}): Promise<void> {
    await requestOnce(options, "DELETE", `/v1/snapshots/${segment(idOrName)}`);
  }

  /** The sandbox as it is now (`nsbox inspect`); `status` says running, stopped or dead. */
  async info(): Promise<SandboxInfo> {
    return this.keep(await this.client.json<SandboxInfo>("GET", this.base));
  }

  async isRunning(): Promise<boolean> {
    try {
      return (await this.info()).status === "running";
    } catch (e) {
      if (e instanceof NotFound) return false;
      throw e;
    }
  }

  /** Changes the size live: processes, files and the kernel's state stay. */
  async resize(size: SizeTier): Promise<SandboxInfo> {
    return this.keep(await this.client.json<SandboxInfo>("PATCH", this.base, { json: { size } }));
  }

  /**
   * Replaces the allowlist of a sandbox made with `net: {allow: [...]}`, live (`nsbox net
   * ID --allow`): hosts, `*.domain` or `host:port`.
   */
  async setAllowlist(allow: readonly string[], allowPrivate: readonly string[] = []): Promise<SandboxInfo> {
    const json = { net: { allow: [...allow], allow_private: [...allowPrivate] } };
    return this.keep(await this.client.json<SandboxInfo>("PATCH", this.base, { json }));
  }

  /**
   * The running sandbox is removed `ttl_s` seconds from now (`nsbox ttl`): its time to
   * live extended, or a first one. The answer's `expires_at` says when.
   */
  async setTtl(ttl_s: number): Promise<SandboxInfo> {
    return this.keep(await this.client.json<SandboxInfo>("POST", `${this.base}/ttl`, { json: { ttl_s } }));
  }

  /**
   * Ends every process of the sandbox (the kernel's state is lost); /home/user,
   * /mnt/files and the mounts' definitions stay, and `start()` brings it back.
   */
  async stop(): Promise<SandboxInfo> {
    return this.keep(await this.client.json<SandboxInfo>("POST", `${this.base}/stop`));
  }

  /**
   * Starts a stopped (or dead) sandbox again with a fresh kernel. Env values are never
   * stored: give every variable it was created with again. `from_snapshot` replaces
   * /home/user (and /mnt/files if the snapshot holds them) first.
   */
  async start(options: { env?: Record<string, string>; from_snapshot?: string } = {}): Promise<SandboxInfo> {
    const body: Record<string, unknown> = { env: stringEnv(options.env ?? {}) };
    if (options.from_snapshot !== undefined) body["from_snapshot"] = options.from_snapshot;
    const mounts = (await this.info()).mounts.length;
    const timeoutMs = Math.max(this.client.timeoutMs, 60_000 + 60_000 * mounts);
    return this.keep(await this.client.json<SandboxInfo>("POST", `${this.base}/start`, { json: body, timeoutMs }));
  }

  /**
   * A snapshot of /home/user (and /mnt/files with `include_files`): never a bucket
   * mount, never a secret. Restore with `Sandbox.create({from_snapshot})` or `start()`.
   */
  snapshot(name?: string, options: { include_files?: boolean } = {}): Promise<SnapshotInfo> {
    const body: Record<string, unknown> = { sandbox: this.id, include_files: options.include_files ?? false };
    if (name !== undefined) body["name"] = name;
    return this.client.json<SnapshotInfo>("POST", "/v1/snapshots", { json: body, timeoutMs: Math.max(this.client.timeoutMs, 600_000) });
  }

  /** Removes the sandbox (and its files volume unless `keep_files`); what was removed. */
  async remove(options: { keep_files?: boolean } = {}): Promise<string[]> {
    return removedList(await this.client.json("DELETE", this.base, { query: { keep_files: options.keep_files || undefined } }));
  }

  /** E2B's name for {@link remove}. */
  kill(): Promise<string[]> {
    return this.remove();
  }

  private keep(info: SandboxInfo): SandboxInfo {
    this.info_ = info;
    return info;
  }
}

export type CreateSession = components["schemas"]["CreateSession"];

/**
 * A Composio-shaped session: at most one sandbox, made on the first sandbox call
 * (`runCode`, `commands`, `files`, `fs`...). A session created with its sandbox disabled
 * answers every sandbox call with SandboxDisabled.
 */
export class Session extends Workbench {
  private info_: SessionInfo;

  constructor(info: SessionInfo, client: Client, options: { ownsClient?: boolean } = {}) {
    if (!info?.session_id) throw new ProtocolError("the server described a session without an id");
    super(client, `/v1/sessions/${segment(info.session_id)}`, options.ownsClient ?? false);
    this.info_ = info;
  }

  get id(): string {
    return this.info_.session_id;
  }

  get sessionId(): string {
    return this.info_.session_id;
  }

  get userId(): string {
    return this.info_.user_id;
  }

  get lastInfo(): SessionInfo {
    return this.info_;
  }

  /** The session's sandbox once made (as last fetched; `info()` refreshes). */
  get sandboxId(): string | null {
    return this.info_.sandbox_id;
  }

  /** Creates a session (`{user_id, sandbox: {enable, sandbox_size}}`). */
  static async create(spec: CreateSession = {}, options: ClientOptions = {}): Promise<Session> {
    const client = makeClient(options);
    const doc = await client.json<SessionInfo>("POST", "/v1/sessions", { json: spec });
    return new Session(doc, client, { ownsClient: options.client === undefined });
  }

  static async connect(sessionId: string, options: ClientOptions = {}): Promise<Session> {
    const client = makeClient(options);
    const doc = await client.json<SessionInfo>("GET", `/v1/sessions/${segment(sessionId)}`);
    return new Session(doc, client, { ownsClient: options.client === undefined });
  }

  /** The server's sessions, or one user's. */
  static async list(options: ClientOptions & { user_id?: string } = {}): Promise<SessionInfo[]> {
    const { user_id, ...connection } = options;
    const doc = await requestOnce<{ sessions?: SessionInfo[] }>(connection, "GET", "/v1/sessions", { user_id });
    const sessions = Array.isArray(doc?.sessions) ? doc.sessions : [];
    return sessions.filter((s) => user_id === undefined || s.user_id === user_id);
  }

  async info(): Promise<SessionInfo> {
    this.info_ = await this.client.json<SessionInfo>("GET", this.base);
    return this.info_;
  }

  /** Resizes the session's sandbox live (or sets the size it will be made with). */
  async resize(size: SizeTier): Promise<SessionInfo> {
    this.info_ = await this.client.json<SessionInfo>("PATCH", this.base, { json: { sandbox: { sandbox_size: size } } });
    return this.info_;
  }

  /** Deletes the session and its sandbox. */
  async delete(): Promise<string[]> {
    return removedList(await this.client.json("DELETE", this.base));
  }

  remove(): Promise<string[]> {
    return this.delete();
  }

  kill(): Promise<string[]> {
    return this.delete();
  }
}
