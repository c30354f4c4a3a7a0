/**
 * `NsboxSandboxSession`: one nsbox sandbox as the SDK's `SandboxSession`.
 *
 * SDK call → nsbox serve route (docs/agents-sdk.md has the whole table):
 *
 * - `execCommand` (no tty) → `POST /v1/sandboxes/{id}/commands` (`argv` [shell, -l, -c,
 *   cmd], `cwd`), its stdout and stderr streamed so that `output` keeps their order;
 * - `execCommand` (tty) → `POST .../pty` then `GET .../pty/{n}/output?yield_ms=`; a command
 *   still running is answered with its PTY number as the SDK's session id, and
 *   `writeStdin` → `POST .../pty/{n}/input`;
 * - files → the `fs` routes (`GET`/`PUT .../fs`, `fs:ls`, `fs:stat`, `DELETE .../fs`),
 *   which never follow a symlink and act as the sandbox's user.
 *
 * Tool outputs are made by the SDK's own `formatExecResponse` and `truncateOutput`, so
 * that they read as every other backend's.
 */
import {
  SandboxLifecycleError,
  SandboxWorkspaceReadNotFoundError,
  WorkspacePathPolicy,
  recordExposedPortEndpoint,
  type ExecCommandArgs,
  type ExposedPortEndpoint,
  type ListDirectoryArgs,
  type ReadFileArgs,
  type SandboxDirectoryEntry,
  type SandboxExecResult,
  type SandboxSession,
  type SandboxSessionState,
  type ViewImageArgs,
  type WriteStdinArgs,
} from "@openai/agents-core/sandbox";
import {
  MAX_VIEW_IMAGE_BYTES,
  elapsedSeconds,
  formatExecResponse,
  imageOutputFromBytes,
  shellQuote,
  truncateOutput,
} from "@openai/agents-core/sandbox/internal";
import { UserError, applyDiff, type Editor } from "@openai/agents-core";

import { NotFound } from "../errors.js";
import type { PtyOutput } from "../models.js";
import type { Sandbox } from "../sandbox.js";
import { missingCapability } from "./manifest.js";

/** The state the SDK keeps and serializes (through the client) for an nsbox session. */
export interface NsboxSandboxSessionState extends SandboxSessionState {
  /** The sandbox's id (`sbx-...`). */
  sandboxId: string;
  /** The server, as the client reached it: `http://HOST:PORT`, or `unix:/path/api.sock`. */
  server: string;
}

export interface NsboxSessionSettings {
  /**
   * Non-tty commands: run each to its end, up to this many seconds, whatever
   * `yieldTimeMs` says (the answer then comes when the command ends). Unset, a non-tty
   * command that outlives its `yieldTimeMs` is killed and reported as an error: nsbox
   * serve cannot yet keep it running past the request.
   */
  commandDeadlineS?: number;
  /** The shell of commands that name none (default /bin/bash). */
  defaultShell?: string;
}

// The SDK's defaults (its shell capability and Unix-local client).
const DEFAULT_EXEC_YIELD_TIME_MS = 10_000;
const DEFAULT_WRITE_STDIN_YIELD_TIME_MS = 250;
// nsbox serve answers a PTY read within at most 30 s; longer waits are several reads.
const MAX_PTY_WINDOW_MS = 30_000;

export class NsboxSandboxSession implements SandboxSession<NsboxSandboxSessionState> {
  readonly state: NsboxSandboxSessionState;
  private readonly ptySessions = new Set<number>();
  private closed = false;

  constructor(
    readonly sandbox: Sandbox,
    state: NsboxSandboxSessionState,
    private readonly settings: NsboxSessionSettings = {},
  ) {
    this.state = state;
  }

  supportsPty(): boolean {
    return true;
  }

  // -- lifecycle --------------------------------------------------------------------------

  /** Starts the sandbox again if it was stopped; a running one is left as it is. */
  async start(): Promise<void> {
    this.assertOpen();
    const info = await this.sandbox.info();
    if (info.status !== "running") await this.sandbox.start({ env: this.state.environment ?? {} });
    this.state.workspaceReady = true;
  }

  async running(): Promise<boolean> {
    if (this.closed) return false;
    return this.sandbox.isRunning();
  }

  /** Ends the terminal sessions this session started (the sandbox goes on). */
  async stop(): Promise<void> {
    const ids = [...this.ptySessions];
    this.ptySessions.clear();
    for (const id of ids) await this.sandbox.ptyKill(id).catch(ignoreNotFound);
  }

  /** Stops the sandbox: every process ends; /home/user stays and `start()` brings it back. */
  async shutdown(): Promise<void> {
    await this.stop();
    await this.sandbox.stop().catch(ignoreNotFound);
  }

  /** Removes the sandbox and its files. */
  async delete(): Promise<void> {
    this.ptySessions.clear();
    await this.sandbox.remove().catch(ignoreNotFound);
    await this.close();
  }

  /** Releases this process's connections; the sandbox is left as it is. */
  async close(): Promise<void> {
    this.closed = true;
    this.sandbox.close();
  }

  // -- commands -----------------------------------------------------------------------------

  async execCommand(args: ExecCommandArgs): Promise<string> {
    return formatExecResponse(await this.exec(args));
  }

  async exec(args: ExecCommandArgs): Promise<SandboxExecResult> {
    this.assertOpen();
    if (args.runAs !== undefined) {
      throw missingCapability(`runAs (${args.runAs}) needs more than one user in a sandbox`, "exec.runAs", { runAs: args.runAs });
    }
    const workdir = this.resolvePath(args.workdir);
    const shell = args.shell ?? this.settings.defaultShell ?? "/bin/bash";
    const argv = [shell, ...(args.login ?? true ? ["-l"] : []), "-c", args.cmd];
    const yieldTimeMs = args.yieldTimeMs ?? DEFAULT_EXEC_YIELD_TIME_MS;
    return args.tty
      ? this.execTty(argv, workdir, yieldTimeMs, args.maxOutputTokens)
      : this.execPiped(argv, workdir, yieldTimeMs, args.maxOutputTokens);
  }

  private async execPiped(argv: string[], cwd: string, yieldTimeMs: number, maxOutputTokens?: number): Promise<SandboxExecResult> {
    const start = Date.now();
    const deadlineS = this.settings.commandDeadlineS ?? Math.max(1, Math.ceil(yieldTimeMs / 1000));
    let output = "";
    const result = await this.sandbox.commands.run(argv, {
      cwd,
      timeout_s: deadlineS,
      onStdout: (text) => void (output += text),
      onStderr: (text) => void (output += text),
    });
    const truncated = truncateOutput(output, maxOutputTokens);
    if (result.status === "timeout" && this.settings.commandDeadlineS === undefined) {
      throw missingCapability(
        `the command did not end within yield_time_ms (${yieldTimeMs} ms) and was killed: a non-tty command cannot ` +
        "outlive its request (processes that outlive a request). Run it with tty=true to continue it with write_stdin, " +
        `or give a longer yield_time_ms. Its output until then:\n${truncated.text}`,
        "exec.yieldTimeMs", { yieldTimeMs });
    }
    if (result.status === "error" && result.reason !== "exit") {
      // not_found / not_executable: the shell itself could not be started.
      throw new UserError(`nsbox: the command could not be started (${result.reason}): ${result.message ?? argv[0]}`);
    }
    return {
      output: truncated.text,
      stdout: result.stdout.toString("utf8"),
      stderr: result.stderr.toString("utf8"),
      wallTimeSeconds: elapsedSeconds(start),
      exitCode: result.exit_code >= 0 ? result.exit_code : result.signal !== null ? 128 + result.signal : 1,
      originalTokenCount: truncated.originalTokenCount,
    };
  }

  private async execTty(argv: string[], cwd: string, yieldTimeMs: number, maxOutputTokens?: number): Promise<SandboxExecResult> {
    const start = Date.now();
    // The PTY route takes no working directory (issue 34, section 3): the line cds first.
    const line = `cd ${shellQuote(cwd)} && exec ${argv.map(shellQuote).join(" ")}`;
    const id = await this.sandbox.ptyStart(line);
    this.ptySessions.add(id);
    const read = await this.readPty(id, yieldTimeMs);
    return this.ptyResult(id, read, start, maxOutputTokens);
  }

  async writeStdin(args: WriteStdinArgs): Promise<string> {
    this.assertOpen();
    const start = Date.now();
    const yieldTimeMs = args.yieldTimeMs ?? DEFAULT_WRITE_STDIN_YIELD_TIME_MS;
    let first: PtyOutput;
    try {
      first = await this.sandbox.ptyWrite(args.sessionId, args.chars ?? "", { yield_ms: Math.min(yieldTimeMs, MAX_PTY_WINDOW_MS) });
    } catch (e) {
      if (!(e instanceof NotFound)) throw e;
      this.ptySessions.delete(args.sessionId);
      return formatExecResponse({ output: `write_stdin failed: session not found: ${args.sessionId}`, wallTimeSeconds: 0, exitCode: 1 });
    }
    const rest = first.running && yieldTimeMs > MAX_PTY_WINDOW_MS
      ? await this.readPty(args.sessionId, yieldTimeMs - MAX_PTY_WINDOW_MS)
      : undefined;
    const read = rest
      ? { text: first.output + rest.text, dropped: first.dropped + rest.dropped, exitCode: rest.exitCode }
      : summarize(first);
    const result = this.ptyResult(args.sessionId, read, start, args.maxOutputTokens);
    return formatExecResponse({
      output: result.output,
      wallTimeSeconds: result.wallTimeSeconds,
      sessionId: result.sessionId,
      exitCode: result.exitCode,
      originalTokenCount: result.originalTokenCount,
    });
  }

  /** What the session printed within `windowMs` (several reads past 30 s), sooner if it ends. */
  private async readPty(id: number, windowMs: number): Promise<PtyRead> {
    const deadline = Date.now() + windowMs;
    let read: PtyRead = { text: "", dropped: 0, exitCode: null };
    do {
      const left = Math.max(0, Math.min(MAX_PTY_WINDOW_MS, deadline - Date.now()));
      read = join(read, await this.sandbox.ptyRead(id, { yield_ms: left }));
    } while (read.exitCode === null && Date.now() < deadline);
    return read;
  }

  private ptyResult(id: number, read: PtyRead, start: number, maxOutputTokens?: number): SandboxExecResult {
    const text = read.dropped ? `[...${read.dropped} bytes truncated from process output...]\n${read.text}` : read.text;
    const truncated = truncateOutput(text, maxOutputTokens);
    const ended = read.exitCode !== null;
    if (ended) this.ptySessions.delete(id);
    return {
      output: truncated.text,
      stdout: text,
      stderr: "",
      wallTimeSeconds: elapsedSeconds(start),
      ...(ended ? { exitCode: read.exitCode } : { sessionId: id }),
      originalTokenCount: truncated.originalTokenCount,
    };
  }

  // -- files --------------------------------------------------------------------------------

  createEditor(runAs?: string): Editor {
    this.assertOpen();
    if (runAs !== undefined) {
      throw missingCapability(`runAs (${runAs}) needs more than one user in a sandbox`, "editor.runAs", { runAs });
    }
    return new NsboxEditor(this);
  }

  async readFile(args: ReadFileArgs): Promise<Uint8Array> {
    this.assertOpen();
    this.assertNoRunAs(args.runAs, "readFile");
    const path = this.resolvePath(args.path);
    let bytes: Buffer;
    try {
      bytes = await this.sandbox.fs.read(path);
    } catch (e) {
      if (e instanceof NotFound) throw new SandboxWorkspaceReadNotFoundError(`File not found: ${args.path}`, { path: args.path });
      throw e;
    }
    const view = new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    return args.maxBytes !== undefined && view.byteLength > args.maxBytes ? view.subarray(0, args.maxBytes) : view;
  }

  /** Writes a whole file (parents made); the editor's and the tests' way in. */
  async writeFile(path: string, data: string | Uint8Array): Promise<void> {
    this.assertOpen();
    await this.sandbox.fs.write(this.resolvePath(path, true), data);
  }

  async deleteFile(path: string): Promise<void> {
    this.assertOpen();
    await this.sandbox.fs.rm(this.resolvePath(path, true));
  }

  async listDir(args: ListDirectoryArgs): Promise<SandboxDirectoryEntry[]> {
    this.assertOpen();
    this.assertNoRunAs(args.runAs, "listDir");
    const resolved = this.policy().resolve(args.path);
    const logical = resolved.workspaceRelativePath ?? resolved.path;
    const entries: SandboxDirectoryEntry[] = [];
    for await (const e of this.sandbox.fs.iter(resolved.path)) {
      entries.push({
        name: e.name,
        path: logical ? `${logical}/${e.name}` : e.name,
        type: e.type === "file" ? "file" : e.type === "dir" ? "dir" : "other",
      });
    }
    return entries;
  }

  async pathExists(path: string, runAs?: string): Promise<boolean> {
    this.assertOpen();
    this.assertNoRunAs(runAs, "pathExists");
    return this.sandbox.fs.exists(this.resolvePath(path));
  }

  async directoryExists(path: string, runAs?: string): Promise<boolean> {
    this.assertOpen();
    this.assertNoRunAs(runAs, "directoryExists");
    try {
      return (await this.sandbox.fs.stat(this.resolvePath(path))).type === "dir";
    } catch (e) {
      if (e instanceof NotFound) return false;
      throw e;
    }
  }

  async viewImage(args: ViewImageArgs) {
    this.assertOpen();
    this.assertNoRunAs(args.runAs, "viewImage");
    const path = this.resolvePath(args.path);
    let bytes: Buffer;
    try {
      bytes = await this.sandbox.fs.read(path, { maxBytes: MAX_VIEW_IMAGE_BYTES });
    } catch (e) {
      if (e instanceof NotFound) throw new UserError(`Image file not found: ${args.path}`);
      throw e;
    }
    return imageOutputFromBytes(args.path, new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength));
  }

  /**
   * The loopback forward the server keeps for `port` (made at the first call, the same
   * after): `{host: "127.0.0.1", port, tls: false}`, opened by a plain client on the
   * server's machine without the API token. Asked of the server each time: a forward
   * ends with its sandbox, and one started again has another.
   */
  async resolveExposedPort(port: number): Promise<ExposedPortEndpoint> {
    if (!Number.isInteger(port) || port < 1 || port > 65535)
      throw new UserError(`a port to expose is from 1 to 65535, not ${port}`);
    const forward = await this.sandbox.ports.expose(port);
    return recordExposedPortEndpoint(this.state, { host: forward.host, port: forward.host_port, tls: false }, port);
  }

  /**
   * A path in the sandbox, absolute: relative ones are under the manifest's root; one
   * outside the root is refused unless the manifest grants it (the SDK's rule, checked by
   * its own `WorkspacePathPolicy`; the server then refuses symlinks on the way).
   */
  resolvePath(path?: string, forWrite = false): string {
    return this.policy().resolve(path, { forWrite }).path;
  }

  private policy(): WorkspacePathPolicy {
    return new WorkspacePathPolicy({ root: this.state.manifest.root, extraPathGrants: this.state.manifest.extraPathGrants });
  }

  private assertNoRunAs(runAs: string | undefined, call: string): void {
    if (runAs !== undefined) throw missingCapability(`${call} as ${runAs} needs more than one user in a sandbox`, `${call}.runAs`, { runAs });
  }

  private assertOpen(): void {
    if (this.closed) throw new SandboxLifecycleError(`the nsbox session of ${this.state.sandboxId} is closed`, { sandboxId: this.state.sandboxId });
  }
}

/** The SDK's `apply_patch` over the fs routes: V4A diffs applied by the SDK's `applyDiff`. */
class NsboxEditor implements Editor {
  constructor(private readonly session: NsboxSandboxSession) {}

  async createFile(operation: { path: string; diff: string }) {
    if (await this.session.pathExists(operation.path)) {
      throw new UserError(`Cannot create file because it already exists: ${operation.path}`);
    }
    await this.session.writeFile(operation.path, applyDiff("", operation.diff, "create"));
    return {};
  }

  async updateFile(operation: { path: string; diff: string; moveTo?: string }) {
    const current = Buffer.from(await this.session.readFile({ path: operation.path })).toString("utf8");
    const next = applyDiff(current, operation.diff);
    const destination = operation.moveTo ?? operation.path;
    await this.session.writeFile(destination, next);
    if (this.session.resolvePath(destination) !== this.session.resolvePath(operation.path)) await this.session.deleteFile(operation.path);
    return {};
  }

  async deleteFile(operation: { path: string }) {
    try {
      await this.session.deleteFile(operation.path);
    } catch (e) {
      if (e instanceof NotFound) throw new UserError(`Cannot delete file because it does not exist: ${operation.path}`);
      throw e;
    }
    return {};
  }
}

interface PtyRead {
  text: string;
  dropped: number;
  exitCode: number | null;
}

function summarize(out: PtyOutput): PtyRead {
  return { text: out.output, dropped: out.dropped, exitCode: out.exit_code };
}

function join(a: PtyRead, b: PtyOutput): PtyRead {
  return { text: a.text + b.output, dropped: a.dropped + b.dropped, exitCode: b.exit_code };
}

function ignoreNotFound(e: unknown): void {
  if (!(e instanceof NotFound)) throw e;
}
