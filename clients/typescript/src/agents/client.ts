/**
 * `NsboxSandboxClient`: the OpenAI Agents SDK's sandbox client for nsbox serve (backend id
 * `nsbox`). It connects as the package's `Client` does (options, else NSBOX_URL /
 * NSBOX_TOKEN, else NSBOX_SOCKET and its token file) and makes one nsbox sandbox per SDK
 * session.
 *
 * The serialized session state names the sandbox (`sandboxId`) and the server (`server`:
 * its URL or `unix:` socket path) beside the SDK's own manifest record, and, with a local
 * or remote snapshot spec, the spec and the snapshot the workspace was persisted to; no
 * token, no token file, no signed link. Resuming reattaches the live sandbox through this
 * client's own connection, or makes a new one from the snapshot when it is gone, and
 * refuses a state that names another server (its token must not be sent to a server an
 * untrusted state chose).
 */
import {
  Manifest,
  SandboxConfigurationError,
  SandboxSnapshotPersistError,
  normalizeSandboxClientCreateArgs,
  type SandboxClient,
  type SandboxClientCreateArgs,
  type SandboxClientOptions,
  type SandboxClientResumeOptions,
  type Snapshot,
  type SnapshotSpec,
} from "@openai/agents-core/sandbox";
import { deserializeManifest, readString, serializeManifestRecord } from "@openai/agents-core/sandbox/internal";

import { Client, type ConnectionOptions } from "../connection.js";
import { NotFound, NsboxError } from "../errors.js";
import type { CreateSandbox } from "../models.js";
import { Sandbox } from "../sandbox.js";
import { LocalSources } from "./local-sources.js";
import { assertManifestSupported, serverManifest } from "./manifest.js";
import { mountRequests, withoutMountCredentials } from "./mounts.js";
import { NsboxSandboxSession, type NsboxSandboxSessionState, type NsboxSessionSettings } from "./session.js";
import {
  acceptSnapshotSpec,
  loadSnapshot,
  persistSnapshot,
  readSnapshot,
  rehydrateSnapshotSpec,
  remakeEphemeralEntries,
  restoringManifest,
  serializeSnapshotSpec,
} from "./workspace-archives.js";

/** What `create` passes to nsbox serve besides the manifest (docs/api.md, "Sandboxes"). */
export type NsboxSandboxSpec = Omit<CreateSandbox, "manifest" | "env">;

export interface NsboxSandboxClientOptions extends SandboxClientOptions, NsboxSessionSettings {
  /** The sandbox's spec: `size`, `net`, `ttl_s`, `name`, `from_snapshot`, `home_size`... */
  sandbox?: NsboxSandboxSpec;
  /**
   * The sessions' snapshot spec when `create` is given none: `{type: "local", baseDir?}`
   * or `{type: "remote", store}` (persisted when the state is serialized), or `noop`. A
   * serialized remote spec is resumed with this one's store.
   */
  snapshot?: SnapshotSpec;
}

export interface NsboxSandboxClientConnection extends ConnectionOptions {
  /** A client of the package to use (its connection); not closed by `close()`. */
  client?: Client;
}

export class NsboxSandboxClient implements SandboxClient<NsboxSandboxClientOptions, NsboxSandboxSessionState> {
  readonly backendId = "nsbox";
  private readonly connection: Client;
  private readonly ownsConnection: boolean;
  private readonly defaults: NsboxSandboxClientOptions;

  /**
   * Connects as the package's `Client` does: `url` or `socket`, `token` or `tokenFile`,
   * else the environment (NSBOX_URL / NSBOX_TOKEN, NSBOX_SOCKET and its token file), or
   * uses `client`. `defaults` are the options of every `create` (the run's own win).
   */
  constructor(options: NsboxSandboxClientConnection & { defaults?: NsboxSandboxClientOptions } = {}) {
    const { client, defaults, ...connection } = options;
    if (client !== undefined && Object.values(connection).some((v) => v !== undefined)) {
      throw new TypeError("give client or the connection options, not both");
    }
    this.connection = client ?? new Client(connection);
    this.ownsConnection = client === undefined;
    this.defaults = defaults ?? {};
  }

  /** The server this client talks to, as the session state names it. */
  get server(): string {
    return this.connection.where;
  }

  async create(args?: SandboxClientCreateArgs<NsboxSandboxClientOptions> | Manifest,
    manifestOptions?: NsboxSandboxClientOptions): Promise<NsboxSandboxSession> {
    const createArgs = normalizeSandboxClientCreateArgs(args, manifestOptions);
    const options = { ...this.defaults, ...createArgs.options };
    const snapshotSpec = acceptSnapshotSpec(createArgs.snapshot ?? options.snapshot);
    const manifest = createArgs.manifest;
    // Everything is checked, and the host sources read, before anything is made.
    assertManifestSupported(manifest);
    const mounts = mountRequests(manifest);
    const sources = await LocalSources.read(manifest, options.localSources);
    try {
      const body: CreateSandbox = { ...options.sandbox, manifest: serverManifest(manifest, sources) as CreateSandbox["manifest"] };
      if (mounts.length) body.mounts = [...(options.sandbox?.mounts ?? []), ...mounts];
      const environment = await manifest.resolveEnvironment();
      if (Object.keys(environment).length) body.env = environment;
      const sandbox = await Sandbox.create(body, { client: this.connection });
      await sources.writeInto(sandbox).catch(async (e: unknown) => {
        await sandbox.remove().catch(() => undefined); // a create that failed leaves nothing
        throw e;
      });
      const session = new NsboxSandboxSession(sandbox, {
        manifest: withoutMountCredentials(manifest), // they went to the server; the session never needs them again
        environment,
        sandboxId: sandbox.id,
        server: this.server,
        workspaceReady: true,
        snapshotSpec,
      }, settingsOf(options));
      session.setArchiveLimits(createArgs.archiveLimits);
      return session;
    } finally {
      await sources.close();
    }
  }

  /**
   * Reattaches the live sandbox the state names, as it is. One that is gone is made again
   * from the state's snapshot (a new sandbox: the manifest's mounts and ephemeral entries,
   * then the snapshot's archive as its workspace); without a snapshot, `NotFound`.
   */
  async resume(state: NsboxSandboxSessionState,
    options: SandboxClientResumeOptions<NsboxSandboxClientOptions> = {}): Promise<NsboxSandboxSession> {
    this.assertSameServer(state);
    const clientOptions = { ...this.defaults, ...options.clientOptions };
    let sandbox: Sandbox;
    try {
      sandbox = await Sandbox.connect(state.sandboxId, { client: this.connection });
    } catch (e) {
      if (!(e instanceof NotFound) || !state.snapshot) throw e;
      return this.recreate(state, clientOptions, options);
    }
    const session = new NsboxSandboxSession(sandbox, state, settingsOf(clientOptions));
    session.setArchiveLimits(options.archiveLimits);
    return session;
  }

  /** A new sandbox for a state whose sandbox is gone, its workspace the state's snapshot. */
  private async recreate(state: NsboxSandboxSessionState, clientOptions: NsboxSandboxClientOptions,
    options: SandboxClientResumeOptions<NsboxSandboxClientOptions>): Promise<NsboxSandboxSession> {
    const spec = state.snapshotSpec ?? null;
    const archive = await loadSnapshot(state.snapshot as Snapshot, spec);
    const session = await this.create({ manifest: restoringManifest(state.manifest), options: clientOptions,
      archiveLimits: options.archiveLimits });
    try {
      await session.replaceWorkspace(archive, options.archiveLimits);
      await remakeEphemeralEntries(session.sandbox, state.manifest, clientOptions.localSources);
    } catch (e) {
      await session.delete().catch(() => undefined); // a resume that failed leaves nothing
      throw e;
    }
    Object.assign(session.state, { manifest: state.manifest, snapshot: state.snapshot, snapshotSpec: spec,
      snapshotFingerprint: state.snapshotFingerprint, snapshotFingerprintVersion: state.snapshotFingerprintVersion });
    return session;
  }

  /** Removes the sandbox the state names (gone already is no error). */
  async delete(state: NsboxSandboxSessionState): Promise<void> {
    this.assertSameServer(state);
    await this.connection.json("DELETE", `/v1/sandboxes/${encodeURIComponent(state.sandboxId)}`).catch((e: unknown) => {
      if (!(e instanceof NotFound)) throw e;
    });
  }

  /**
   * `{manifest, sandboxId, server}`; with a snapshot spec (local or remote) the workspace
   * is persisted through it first, and `snapshotSpec` and `snapshot` are kept too. A
   * sandbox already gone keeps the state's last snapshot.
   */
  async serializeSessionState(state: NsboxSandboxSessionState): Promise<Record<string, unknown>> {
    const record: Record<string, unknown> = {
      manifest: serializeManifestRecord(state.manifest),
      sandboxId: state.sandboxId,
      server: state.server,
    };
    const spec = state.snapshotSpec ?? null;
    if (spec === null || spec.type === "noop") return record;
    this.assertSameServer(state);
    state.snapshot = await this.persist(state, spec);
    return { ...record, snapshotSpec: serializeSnapshotSpec(spec), snapshot: state.snapshot };
  }

  private async persist(state: NsboxSandboxSessionState, spec: SnapshotSpec): Promise<Snapshot | null> {
    let sandbox: Sandbox;
    try {
      sandbox = await Sandbox.connect(state.sandboxId, { client: this.connection });
    } catch (e) {
      if (e instanceof NotFound) return state.snapshot ?? null;
      throw e;
    }
    try {
      return await persistSnapshot(sandbox, spec, state.snapshot);
    } catch (e) {
      if (!(e instanceof NsboxError)) throw e;
      throw Object.assign(new SandboxSnapshotPersistError(`NsboxSandboxClient: the workspace of ${state.sandboxId} was not persisted: ${e.message}`,
        { provider: "nsbox", sandboxId: state.sandboxId, code: e.code }), { cause: e });
    }
  }

  async deserializeSessionState(record: Record<string, unknown>): Promise<NsboxSandboxSessionState> {
    const sandboxId = readString(record, "sandboxId");
    const server = readString(record, "server");
    if (!/^sbx-[A-Za-z0-9_-]+$/.test(sandboxId)) {
      throw new SandboxConfigurationError(`NsboxSandboxClient: not a sandbox id: ${JSON.stringify(sandboxId)}`, { provider: "nsbox" });
    }
    return {
      manifest: deserializeManifest(record["manifest"] as Record<string, unknown> | undefined),
      sandboxId,
      server,
      workspaceReady: true,
      snapshotSpec: rehydrateSnapshotSpec(record["snapshotSpec"], this.defaults.snapshot),
      snapshot: readSnapshot(record["snapshot"]),
    };
  }

  /** Closes this client's connections (not a client given to it). */
  close(): void {
    if (this.ownsConnection) this.connection.close();
  }

  private assertSameServer(state: NsboxSandboxSessionState): void {
    if (state.server !== this.server) {
      throw new SandboxConfigurationError(
        `NsboxSandboxClient: the session state names the server ${state.server}, and this client connects to ` +
        `${this.server}: make the client for that server (its url or socket, and its token)`,
        { provider: "nsbox", stateServer: state.server, clientServer: this.server });
    }
  }
}

function settingsOf(options: NsboxSandboxClientOptions): NsboxSessionSettings {
  const settings: NsboxSessionSettings = {};
  if (options.commandDeadlineS !== undefined) settings.commandDeadlineS = options.commandDeadlineS;
  if (options.defaultShell !== undefined) settings.defaultShell = options.defaultShell;
  if (options.localSources !== undefined) settings.localSources = options.localSources;
  return settings;
}
