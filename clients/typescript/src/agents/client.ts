/**
 * `NsboxSandboxClient`: the OpenAI Agents SDK's sandbox client for nsbox serve (backend id
 * `nsbox`). It connects as the package's `Client` does (options, else NSBOX_URL /
 * NSBOX_TOKEN, else NSBOX_SOCKET and its token file) and makes one nsbox sandbox per SDK
 * session.
 *
 * The serialized session state names the sandbox (`sandboxId`) and the server (`server`:
 * its URL or `unix:` socket path) beside the SDK's own manifest record, and nothing else:
 * no token, no token file, no signed link. Resuming reattaches the live sandbox through
 * this client's own connection, and refuses a state that names another server (its token
 * must not be sent to a server an untrusted state chose).
 */
import {
  Manifest,
  SandboxConfigurationError,
  SandboxUnsupportedFeatureError,
  isNoopSnapshotSpec,
  normalizeSandboxClientCreateArgs,
  type SandboxClient,
  type SandboxClientCreateArgs,
  type SandboxClientOptions,
  type SandboxClientResumeOptions,
} from "@openai/agents-core/sandbox";
import { deserializeManifest, readString, serializeManifestRecord } from "@openai/agents-core/sandbox/internal";

import { Client, type ConnectionOptions } from "../connection.js";
import { NotFound } from "../errors.js";
import type { CreateSandbox } from "../models.js";
import { Sandbox } from "../sandbox.js";
import { LocalSources, type LocalSourceOptions } from "./local-sources.js";
import { assertManifestSupported, serverManifest } from "./manifest.js";
import { mountRequests, withoutMountCredentials } from "./mounts.js";
import { NsboxSandboxSession, type NsboxSandboxSessionState, type NsboxSessionSettings } from "./session.js";

/** What `create` passes to nsbox serve besides the manifest (docs/api.md, "Sandboxes"). */
export type NsboxSandboxSpec = Omit<CreateSandbox, "manifest" | "env">;

export interface NsboxSandboxClientOptions extends SandboxClientOptions, NsboxSessionSettings {
  /** The sandbox's spec: `size`, `net`, `ttl_s`, `name`, `from_snapshot`, `home_size`... */
  sandbox?: NsboxSandboxSpec;
  /** Where the manifest's `local_file`, `local_dir` and `git_repo` sources are read, and their bounds. */
  localSources?: LocalSourceOptions;
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
    if (createArgs.snapshot !== undefined && !isNoopSnapshotSpec(createArgs.snapshot)) {
      throw new SandboxUnsupportedFeatureError(
        `NsboxSandboxClient: snapshot spec ${JSON.stringify(createArgs.snapshot.type)} needs the workspace as a tar ` +
        "(GET/PUT /v1/sandboxes/{id}/workspace.tar, nsbox issue 34, section 3); nsbox's own snapshots are reached with " +
        "options.sandbox.from_snapshot", { provider: "nsbox", feature: "snapshot", type: createArgs.snapshot.type });
    }
    const options = { ...this.defaults, ...createArgs.options };
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
      return new NsboxSandboxSession(sandbox, {
        manifest: withoutMountCredentials(manifest), // they went to the server; the session never needs them again
        environment,
        sandboxId: sandbox.id,
        server: this.server,
        workspaceReady: true,
      }, settingsOf(options));
    } finally {
      await sources.close();
    }
  }

  /** Reattaches the live sandbox the state names (`NotFound` when it is gone). */
  async resume(state: NsboxSandboxSessionState,
    options: SandboxClientResumeOptions<NsboxSandboxClientOptions> = {}): Promise<NsboxSandboxSession> {
    this.assertSameServer(state);
    const sandbox = await Sandbox.connect(state.sandboxId, { client: this.connection });
    return new NsboxSandboxSession(sandbox, state, settingsOf({ ...this.defaults, ...options.clientOptions }));
  }

  /** Removes the sandbox the state names (gone already is no error). */
  async delete(state: NsboxSandboxSessionState): Promise<void> {
    this.assertSameServer(state);
    await this.connection.json("DELETE", `/v1/sandboxes/${encodeURIComponent(state.sandboxId)}`).catch((e: unknown) => {
      if (!(e instanceof NotFound)) throw e;
    });
  }

  async serializeSessionState(state: NsboxSandboxSessionState): Promise<Record<string, unknown>> {
    return {
      manifest: serializeManifestRecord(state.manifest),
      sandboxId: state.sandboxId,
      server: state.server,
    };
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
  return settings;
}
