/**
 * `NsboxSandboxSession`: one nsbox sandbox as the SDK's `SandboxSession`.
 *
 * SDK call → nsbox serve route (docs/agents-sdk.md has the whole table):
 *
 * - `execCommand` (tty or not) → `POST /v1/sandboxes/{id}/processes` (`argv` [shell, -l,
 *   -c, cmd], `cwd`, `tty`), then `GET .../processes/{pid}/output`; a command still
 *   running is answered with its pid as the SDK's session id, and `writeStdin` →
 *   `POST .../processes/{pid}/input`;
 * - files → the `fs` routes (`GET`/`PUT .../fs`, `fs:ls`, `fs:stat`, `DELETE .../fs`),
 *   which never follow a symlink and act as the sandbox's user;
 * - `runAs` → the server's `run_as` (in the body of `POST .../processes` and of the
 *   `chmod` a directory entry may need, in the query of the `fs` routes): one of the
 *   manifest's `users`, which the sandbox was created with; `writeStdin` continues the
 *   process, hence its account;
 * - `persistWorkspace` / `hydrateWorkspace` → `GET` / `PUT .../workspace.tar`, the
 *   workspace root as one tar archive;
 * - `materializeEntry` / `applyManifest` → the `fs` routes again (materialize.ts): entries
 *   added to the running sandbox, relative to the manifest's root, and to the session's
 *   manifest; mounts are made at create only.
 *
 * Tool outputs are made by the SDK's own `formatExecResponse` and `truncateOutput`, so
 * that they read as every other backend's.
 */
import {
  Manifest,
  SandboxLifecycleError,
  SandboxUnsupportedFeatureError,
  SandboxWorkspaceArchiveReadError,
  SandboxWorkspaceArchiveWriteError,
  SandboxWorkspaceReadNotFoundError,
  WorkspacePathPolicy,
  cloneManifest,
  recordExposedPortEndpoint,
  type ExecCommandArgs,
  type ExposedPortEndpoint,
  type ListDirectoryArgs,
  type MaterializeEntryArgs,
  type ReadFileArgs,
  type SandboxArchiveLimits,
  type SandboxDirectoryEntry,
  type SandboxExecResult,
  type SandboxSession,
  type SandboxSessionState,
  type SnapshotSpec,
  type ViewImageArgs,
  type WorkspaceArchiveData,
  type WorkspaceArchiveOptions,
  type WriteStdinArgs,
} from "@openai/agents-core/sandbox";
import {
  MAX_VIEW_IMAGE_BYTES,
  assertExistingMountTopologyPreserved,
  elapsedSeconds,
  formatExecResponse,
  imageOutputFromBytes,
  mergeManifestDelta,
  normalizePosixPath,
  recordLiveMountCredentialAuthority,
  truncateOutput,
  withExclusiveSandboxManifestMutation,
} from "@openai/agents-core/sandbox/internal";
import { UserError, applyDiff, type Editor } from "@openai/agents-core";

import { NotFound, NsboxError, isUnknownAccount } from "../errors.js";
import type { Sandbox } from "../sandbox.js";
import type { LocalSourceOptions } from "./local-sources.js";
import { assertManifestSupported, assertNoNewAccounts } from "./manifest.js";
import { entriesToMake, writeManifestEntries } from "./materialize.js";
import { withoutMountCredentials } from "./mounts.js";
import { checkArchiveLimits } from "./workspace-archives.js";

/** The state the SDK keeps and serializes (through the client) for an nsbox session. */
export interface NsboxSandboxSessionState extends SandboxSessionState {
  /** The sandbox's id (`sbx-...`). */
  sandboxId: string;
  /** The server, as the client reached it: `http://HOST:PORT`, or `unix:/path/api.sock`. */
  server: string;
  /** How the workspace is persisted when the state is serialized (workspace-archives.ts); none when null. */
  snapshotSpec?: SnapshotSpec | null;
}

export interface NsboxSessionSettings {
  /**
   * Non-tty commands: wait for each to its end, up to this many seconds, whatever
   * `yieldTimeMs` says, and kill it past them (exit code 124). Unset (the default), a
   * command still running after `yieldTimeMs` goes on as a process that `writeStdin`
   * continues.
   */
  commandDeadlineS?: number;
  /** The shell of commands that name none (default /bin/bash). */
  defaultShell?: string;
  /**
   * Where the manifest's `local_file`, `local_dir` and `git_repo` sources are read, and
   * their bounds: at create, and for `materializeEntry` / `applyManifest` after it.
   */
  localSources?: LocalSourceOptions;
}

// The SDK's defaults (its shell capability and Unix-local client).
const DEFAULT_EXEC_YIELD_TIME_MS = 10_000;
const DEFAULT_WRITE_STDIN_YIELD_TIME_MS = 250;
// One read of a process's output waits at most this long; longer windows are several reads.
const MAX_READ_WINDOW_MS = 30_000;

export class NsboxSandboxSession implements SandboxSession<NsboxSandboxSessionState> {
  readonly state: NsboxSandboxSessionState;
  // Processes started here and not yet seen to end: each one's offsets read so far.
  private readonly running_ = new Map<number, { offset: number; stderrOffset: number }>();
  private closed = false;
  private archiveLimits: SandboxArchiveLimits | null = null;

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

  /** Ends the processes this session started and left running (the sandbox goes on). */
  async stop(): Promise<void> {
    for (const pid of [...this.running_.keys()]) await this.forget(pid);
  }

  /** Stops the sandbox: every process ends; /home/user stays and `start()` brings it back. */
  async shutdown(): Promise<void> {
    await this.stop();
    await this.sandbox.stop().catch(ignoreNotFound);
  }

  /** Removes the sandbox and its files. */
  async delete(): Promise<void> {
    this.running_.clear();
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

  /**
   * A command as a process of the sandbox (`POST .../processes`): what it printed within
   * `yieldTimeMs`; still running then, it goes on, and its pid is the session id that
   * `writeStdin` continues (tty or not).
   */
  async exec(args: ExecCommandArgs): Promise<SandboxExecResult> {
    this.assertOpen();
    const start = Date.now();
    const cwd = this.resolvePath(args.workdir);
    const shell = args.shell ?? this.settings.defaultShell ?? "/bin/bash";
    const argv = [shell, ...(args.login ?? true ? ["-l"] : []), "-c", args.cmd];
    const deadlineS = args.tty ? undefined : this.settings.commandDeadlineS;
    const windowMs = deadlineS !== undefined ? deadlineS * 1000 : args.yieldTimeMs ?? DEFAULT_EXEC_YIELD_TIME_MS;
    let pid: number;
    try {
      pid = await this.sandbox.processes.start(argv, { cwd, tty: args.tty ?? false, runAs: args.runAs });
    } catch (e) {
      if (e instanceof NsboxError && e.status === 400) throw new UserError(`nsbox: the command could not be started: ${e.message}`);
      throw e;
    }
    this.running_.set(pid, { offset: 0, stderrOffset: 0 });
    const read = await this.readProcess(pid, windowMs);
    if (deadlineS !== undefined && read.exitCode === null) read.exitCode = 124;  // killed at its deadline, as timeout(1) says
    if (read.exitCode !== null) await this.forget(pid);  // its status was read: the slot goes back
    return this.result(pid, read, start, args.maxOutputTokens);
  }

  async writeStdin(args: WriteStdinArgs): Promise<string> {
    this.assertOpen();
    const start = Date.now();
    const yieldTimeMs = args.yieldTimeMs ?? DEFAULT_WRITE_STDIN_YIELD_TIME_MS;
    const notFound = () =>
      formatExecResponse({ output: `write_stdin failed: session not found: ${args.sessionId}`, wallTimeSeconds: 0, exitCode: 1 });
    if (!this.running_.has(args.sessionId)) return notFound();
    try {
      if (args.chars) await this.sandbox.processes.write(args.sessionId, args.chars);
    } catch (e) {
      if (!(e instanceof NotFound)) throw e;
      this.running_.delete(args.sessionId);
      return notFound();
    }
    const read = await this.readProcess(args.sessionId, yieldTimeMs);
    if (read.exitCode !== null) await this.forget(args.sessionId);
    const result = this.result(args.sessionId, read, start, args.maxOutputTokens);
    return formatExecResponse({
      output: result.output,
      wallTimeSeconds: result.wallTimeSeconds,
      sessionId: result.sessionId,
      exitCode: result.exitCode,
      originalTokenCount: result.originalTokenCount,
    });
  }

  /** What the process printed within `windowMs` (several reads past 30 s), sooner if it ends. */
  private async readProcess(pid: number, windowMs: number): Promise<ProcessRead> {
    const at = this.running_.get(pid) ?? { offset: 0, stderrOffset: 0 };
    const deadline = Date.now() + windowMs;
    const read: ProcessRead = { text: "", skipped: 0, exitCode: null };
    for (;;) {
      const waitMs = Math.max(0, Math.min(MAX_READ_WINDOW_MS, deadline - Date.now()));
      const out = await this.sandbox.processes.read(pid, { offset: at.offset, stderrOffset: at.stderrOffset, waitMs });
      read.text += out.stdout.toString("utf8") + out.stderr.toString("utf8");
      read.skipped += out.skipped;
      at.offset = out.offset;
      at.stderrOffset = out.stderrOffset;
      if (out.status === "exited") {
        read.exitCode = out.exitCode ?? 1;
        break;
      }
      if (Date.now() >= deadline) break;
    }
    return read;
  }

  private result(pid: number, read: ProcessRead, start: number, maxOutputTokens?: number): SandboxExecResult {
    const text = read.skipped ? `[...${read.skipped} bytes truncated from process output...]\n${read.text}` : read.text;
    const truncated = truncateOutput(text, maxOutputTokens);
    const ended = read.exitCode !== null;
    return {
      output: truncated.text,
      stdout: text,
      stderr: "",
      wallTimeSeconds: elapsedSeconds(start),
      ...(ended ? { exitCode: read.exitCode } : { sessionId: pid }),
      originalTokenCount: truncated.originalTokenCount,
    };
  }

  /** Kills the process if it runs and removes it (a sandbox keeps at most 64). */
  private async forget(pid: number): Promise<void> {
    this.running_.delete(pid);
    await this.sandbox.processes.kill(pid).catch(() => undefined);
  }

  // -- files --------------------------------------------------------------------------------

  /** The `apply_patch` editor; with `runAs`, every file it reads, writes or removes is as that account. */
  createEditor(runAs?: string): Editor {
    this.assertOpen();
    return new NsboxEditor(this, runAs);
  }

  async readFile(args: ReadFileArgs): Promise<Uint8Array> {
    this.assertOpen();
    const path = this.resolvePath(args.path);
    let bytes: Buffer;
    try {
      bytes = await this.sandbox.fs.read(path, { runAs: args.runAs });
    } catch (e) {
      if (isMissing(e, args.runAs)) throw new SandboxWorkspaceReadNotFoundError(`File not found: ${args.path}`, { path: args.path });
      throw e;
    }
    const view = new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    return args.maxBytes !== undefined && view.byteLength > args.maxBytes ? view.subarray(0, args.maxBytes) : view;
  }

  /** Writes a whole file (parents made), as `runAs` if given; the editor's and the tests' way in. */
  async writeFile(path: string, data: string | Uint8Array, runAs?: string): Promise<void> {
    this.assertOpen();
    await this.sandbox.fs.write(this.resolvePath(path, true), data, { runAs });
  }

  async deleteFile(path: string, runAs?: string): Promise<void> {
    this.assertOpen();
    await this.sandbox.fs.rm(this.resolvePath(path, true), { runAs });
  }

  async listDir(args: ListDirectoryArgs): Promise<SandboxDirectoryEntry[]> {
    this.assertOpen();
    const resolved = this.policy().resolve(args.path);
    const logical = resolved.workspaceRelativePath ?? resolved.path;
    const entries: SandboxDirectoryEntry[] = [];
    for await (const e of this.sandbox.fs.iter(resolved.path, { runAs: args.runAs })) {
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
    return this.sandbox.fs.exists(this.resolvePath(path), { runAs });
  }

  async directoryExists(path: string, runAs?: string): Promise<boolean> {
    this.assertOpen();
    try {
      return (await this.sandbox.fs.stat(this.resolvePath(path), { runAs })).type === "dir";
    } catch (e) {
      if (isMissing(e, runAs)) return false;
      throw e;
    }
  }

  async viewImage(args: ViewImageArgs) {
    this.assertOpen();
    const path = this.resolvePath(args.path);
    let bytes: Buffer;
    try {
      bytes = await this.sandbox.fs.read(path, { maxBytes: MAX_VIEW_IMAGE_BYTES, runAs: args.runAs });
    } catch (e) {
      if (isMissing(e, args.runAs)) throw new UserError(`Image file not found: ${args.path}`);
      throw e;
    }
    return imageOutputFromBytes(args.path, new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength));
  }

  // -- manifest entries after create ---------------------------------------------------------

  /**
   * Makes one manifest entry in the running sandbox (`file`, `dir`, `local_file`,
   * `local_dir`, `git_repo`) at `path`, relative to the manifest's root (or absolute under
   * it), and adds it to the session's manifest: what the SDK's skills (`load_skill`) and
   * memory capabilities call. What is at the path already is merged into as the SDK's own
   * clients do: a directory keeps what it holds, a file is replaced. With `runAs`, it is
   * made as that account (one of the manifest's users), whose files and directories it
   * makes are its own. A mount entry is refused (SandboxUnsupportedFeatureError naming its
   * type and path): nsbox makes mounts at create only.
   */
  async materializeEntry(args: MaterializeEntryArgs): Promise<void> {
    this.assertOpen();
    const entry = structuredClone(args.entry);
    await withExclusiveSandboxManifestMutation(this.state, async () => {
      const root = this.state.manifest.root;
      await this.addEntries(new Manifest({ root, entries: { [this.logicalPath(args.path)]: entry } }), args.runAs);
    });
  }

  /**
   * Makes a manifest's entries in the running sandbox, as `materializeEntry` makes each,
   * (as `runAs` if given), and merges the manifest into the session's (its path grants
   * too). Refused before anything is made: users and groups the sandbox was not created
   * with, `hostPath` grants, mounts the sandbox was not created with (one it serves,
   * unchanged, is left as it is), and environment variables other than the sandbox's (set
   * when it is made).
   */
  async applyManifest(manifest: Manifest, runAs?: string): Promise<void> {
    this.assertOpen();
    const delta = cloneManifest(manifest);
    await withExclusiveSandboxManifestMutation(this.state, async () => {
      assertManifestSupported(delta);
      assertNoNewAccounts(this.state.manifest, delta);
      const environment = await delta.resolveEnvironment();
      const changed = Object.keys(environment).filter((k) => this.state.environment?.[k] !== environment[k]).sort();
      if (changed.length) {
        throw new SandboxUnsupportedFeatureError(`NsboxSandboxClient: the environment of a running nsbox sandbox is set ` +
          `when it is made; applyManifest cannot set ${changed.join(", ")}. Create the session with them.`,
        { provider: "nsbox", feature: "applyManifest.environment", variables: changed });
      }
      await this.addEntries(delta, runAs);
    });
  }

  /** The entries of `delta` made in the sandbox (as `runAs`), then `delta` merged into the session's manifest. */
  private async addEntries(delta: Manifest, runAs: string | undefined): Promise<void> {
    const current = this.state.manifest;
    const next = mergeManifestDelta(current, withoutMountCredentials(delta));
    assertExistingMountTopologyPreserved(current, next); // the SDK's SandboxMountError, naming the path
    // Sources are confined to the base directory and the path grants, the delta's included.
    await writeManifestEntries(this.sandbox, entriesToMake(current, delta, next.extraPathGrants), this.settings.localSources, runAs);
    recordLiveMountCredentialAuthority(next, current); // the mounts are the ones the sandbox was made with
    this.state.manifest = next;
  }

  /** A manifest path relative to the root: relative as given, or absolute under the root. */
  private logicalPath(path: string): string {
    const root = normalizePosixPath(this.state.manifest.root);
    const given = path.trim();
    if (!given.startsWith("/")) return given;
    const absolute = normalizePosixPath(given);
    if (absolute === root) return "";
    if (absolute.startsWith(root === "/" ? "/" : `${root}/`)) return absolute.slice(root === "/" ? 1 : root.length + 1);
    throw new UserError(`Sandbox path "${path}" must stay within ${root}.`);
  }

  // -- the workspace as one tar archive ----------------------------------------------------

  /**
   * The workspace root as a tar (pax) archive, members relative to the root (`GET
   * .../workspace.tar`): links kept as links, bucket mounts and the manifest's ephemeral
   * entries left out by the server. Of a running or stopped sandbox; at most the
   * connection's `maxResponseBytes`.
   */
  async persistWorkspace(): Promise<Uint8Array> {
    this.assertOpen();
    try {
      const data = await this.sandbox.workspaceArchiveBytes();
      return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    } catch (e) {
      throw archiveFailure(SandboxWorkspaceArchiveReadError, "read", this.state.manifest.root, e);
    }
  }

  /**
   * Replaces the workspace root with a tar archive (`PUT .../workspace.tar`): what the
   * archive does not hold is gone after (the manifest's ephemeral entries too), bucket
   * mounts stay. The archive limits (`options`, else the session's) are checked first;
   * the server checks every member (no absolute name, `..`, link pointing out, device)
   * and a refused archive changes nothing (SandboxWorkspaceArchiveWriteError).
   */
  async hydrateWorkspace(data: WorkspaceArchiveData, options: WorkspaceArchiveOptions = {}): Promise<void> {
    this.assertOpen();
    const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : data instanceof Uint8Array ? data : new Uint8Array(data);
    await this.replaceWorkspace(bytes, options.archiveLimits === undefined ? this.archiveLimits : options.archiveLimits);
  }

  setArchiveLimits(limits?: SandboxArchiveLimits | null): void {
    this.archiveLimits = limits ?? null;
  }

  /** @internal hydrateWorkspace's work, and a local snapshot's file streamed in (its path). */
  async replaceWorkspace(archive: string | Uint8Array, limits: SandboxArchiveLimits | null | undefined): Promise<void> {
    await checkArchiveLimits(archive, limits);
    try {
      await this.sandbox.replaceWorkspace(archive);
    } catch (e) {
      throw archiveFailure(SandboxWorkspaceArchiveWriteError, "write", this.state.manifest.root, e);
    }
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

  private assertOpen(): void {
    if (this.closed) throw new SandboxLifecycleError(`the nsbox session of ${this.state.sandboxId} is closed`, { sandboxId: this.state.sandboxId });
  }
}

/**
 * The SDK's `apply_patch` over the fs routes: V4A diffs applied by the SDK's `applyDiff`,
 * every file read, written and removed as `runAs` when given.
 */
class NsboxEditor implements Editor {
  constructor(private readonly session: NsboxSandboxSession, private readonly runAs?: string) {}

  async createFile(operation: { path: string; diff: string }) {
    if (await this.session.pathExists(operation.path, this.runAs)) {
      throw new UserError(`Cannot create file because it already exists: ${operation.path}`);
    }
    await this.session.writeFile(operation.path, applyDiff("", operation.diff, "create"), this.runAs);
    return {};
  }

  async updateFile(operation: { path: string; diff: string; moveTo?: string }) {
    const current = Buffer.from(await this.session.readFile({ path: operation.path, runAs: this.runAs })).toString("utf8");
    const next = applyDiff(current, operation.diff);
    const destination = operation.moveTo ?? operation.path;
    await this.session.writeFile(destination, next, this.runAs);
    if (this.session.resolvePath(destination) !== this.session.resolvePath(operation.path)) {
      await this.session.deleteFile(operation.path, this.runAs);
    }
    return {};
  }

  async deleteFile(operation: { path: string }) {
    try {
      await this.session.deleteFile(operation.path, this.runAs);
    } catch (e) {
      if (isMissing(e, this.runAs)) throw new UserError(`Cannot delete file because it does not exist: ${operation.path}`);
      throw e;
    }
    return {};
  }
}

interface ProcessRead {
  text: string;
  skipped: number;
  exitCode: number | null;
}

/** The SDK's error for a workspace archive the server refused or could not give; others as they are. */
function archiveFailure(kind: typeof SandboxWorkspaceArchiveReadError, verb: "read" | "write", root: string, e: unknown): unknown {
  if (!(e instanceof NsboxError)) return e;
  return Object.assign(new kind(`failed to ${verb} archive for path: ${root}: ${e.message}`, { path: root, code: e.code, status: e.status }),
    { cause: e });
}

/** A path that is not there; not an account the sandbox lacks (which is the server's NotFound as it is). */
function isMissing(e: unknown, runAs: string | undefined): boolean {
  return e instanceof NotFound && !isUnknownAccount(e, runAs);
}

function ignoreNotFound(e: unknown): void {
  if (!(e instanceof NotFound)) throw e;
}
