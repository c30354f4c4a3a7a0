/**
 * The SDK's workspace archives and snapshot specs on nsbox serve's workspace archives
 * (`GET`/`PUT /v1/sandboxes/{id}/workspace.tar`, docs/api.md "Workspace archives").
 *
 * The bytes are a tar (pax) of the workspace root, members relative to it, packed on the
 * server's host without following a link; bucket mounts and the manifest's `ephemeral`
 * entries are left out by the server, as the SDK's own clients leave out
 * `manifest.ephemeralPersistencePaths()`. (The SDK's Unix-local client persists a JSON
 * document of base64 files instead; a state names its backend, so the two never meet.)
 *
 * Snapshot specs, persisted when the session state is serialized (as the SDK's Unix-local
 * and Docker clients do):
 *
 * - `{type: "local", baseDir?}`: `<baseDir>/<id>.tar` on the client's machine (default
 *   baseDir: the SDK's, `$OPENAI_AGENTS_SANDBOX_SNAPSHOT_DIR`, else
 *   `$XDG_STATE_HOME/openai-agents-js/sandbox-snapshots`), mode 0600, written whole or
 *   not at all; a newer snapshot of the session removes the older file;
 * - `{type: "remote", store}`: the archive's bytes through `store.save`, read back with
 *   `store.load`; the store itself is never serialized (the client's configured spec
 *   gives it back on deserialize, as the SDK does);
 * - `noop`: nothing.
 */
import { randomUUID } from "node:crypto";
import { constants } from "node:fs";
import { mkdir, open, readFile, unlink } from "node:fs/promises";
import { homedir, tmpdir } from "node:os";
import * as path from "node:path";

import {
  Manifest,
  SandboxArchiveError,
  SandboxConfigurationError,
  SandboxSnapshotNotRestorableError,
  SandboxUnsupportedFeatureError,
  isMount,
  resolveSandboxArchiveLimits,
  type Entry,
  type RemoteSnapshotSpec,
  type SandboxArchiveLimits,
  type Snapshot,
  type SnapshotSpec,
} from "@openai/agents-core/sandbox";

import type { Sandbox } from "../sandbox.js";
import type { LocalSourceOptions } from "./local-sources.js";
import { writeManifestEntries } from "./materialize.js";

/** A snapshot's id is one path segment of the snapshot directory, never `.` or `..`. */
const SNAPSHOT_ID = /^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$/;

export interface LocalSnapshotSpec extends SnapshotSpec {
  type: "local";
  baseDir?: string;
}

function isRemoteSpec(spec: SnapshotSpec | null | undefined): spec is RemoteSnapshotSpec {
  const store = (spec as { store?: { save?: unknown; load?: unknown } } | null | undefined)?.store;
  return spec?.type === "remote" && typeof store?.save === "function" && typeof store?.load === "function";
}

/**
 * The spec a session keeps, or null for none: `noop`, `local` and `remote` (with its
 * store) are served; any other type is refused, naming it.
 */
export function acceptSnapshotSpec(spec: SnapshotSpec | null | undefined): SnapshotSpec | null {
  if (spec === undefined || spec === null || spec.type === "noop") return spec ?? null;
  if (spec.type === "local") {
    const baseDir = (spec as LocalSnapshotSpec).baseDir;
    if (baseDir !== undefined && (typeof baseDir !== "string" || !path.isAbsolute(baseDir))) {
      throw new SandboxConfigurationError(`NsboxSandboxClient: a local snapshot spec's baseDir is an absolute path, not ${JSON.stringify(baseDir)}`,
        { provider: "nsbox", baseDir });
    }
    return spec;
  }
  if (isRemoteSpec(spec)) return spec;
  if (spec.type === "remote") {
    throw new SandboxConfigurationError("NsboxSandboxClient: a remote snapshot spec needs its store (save and load)", { provider: "nsbox" });
  }
  throw new SandboxUnsupportedFeatureError(`NsboxSandboxClient: snapshot spec ${JSON.stringify(spec.type)} is not one nsbox ` +
    "persists (noop, local and remote are)", { provider: "nsbox", feature: "snapshot", type: spec.type });
}

/** A spec as the serialized state keeps it: a remote one without its store. */
export function serializeSnapshotSpec(spec: SnapshotSpec): Record<string, unknown> {
  if (isRemoteSpec(spec)) {
    return { type: "remote", ...(typeof spec.id === "string" ? { id: spec.id } : {}), ...(spec.metadata ? { metadata: structuredClone(spec.metadata) } : {}) };
  }
  return structuredClone({ ...spec });
}

/** A serialized spec given back its live parts: a remote one takes the configured spec's store. */
export function rehydrateSnapshotSpec(serialized: unknown, configured: SnapshotSpec | undefined): SnapshotSpec | null {
  if (serialized === null || typeof serialized !== "object" || Array.isArray(serialized)) return null;
  const record = serialized as Record<string, unknown>;
  if (record["type"] !== "remote") return acceptSnapshotSpec(record as SnapshotSpec);
  if (!isRemoteSpec(configured)) return null;
  const id = typeof record["id"] === "string" ? record["id"] : configured.id;
  const metadata = record["metadata"] !== null && typeof record["metadata"] === "object" ? record["metadata"] as Record<string, unknown> : configured.metadata;
  return { type: "remote", store: configured.store, ...(id ? { id } : {}), ...(metadata ? { metadata } : {}) } as RemoteSnapshotSpec;
}

/** A serialized state's snapshot record, checked: `{id, type: "local" | "remote"}`. */
export function readSnapshot(value: unknown): Snapshot | null {
  if (value === null || value === undefined) return null;
  const record = value as Record<string, unknown>;
  const id = record["id"];
  // A local one's id names its file; a remote one's is the store's own key.
  if (typeof value !== "object" || typeof id !== "string" || !id ||
    (record["type"] === "local" ? !SNAPSHOT_ID.test(id) : record["type"] !== "remote")) {
    throw new SandboxConfigurationError(`NsboxSandboxClient: not a snapshot of nsbox's: ${JSON.stringify(value)}`, { provider: "nsbox" });
  }
  return { ...record } as Snapshot;
}

/** The SDK's default directory of local snapshots (its localSnapshotPaths, on Linux). */
export function defaultSnapshotDir(env: NodeJS.ProcessEnv = process.env): string {
  const configured = env["OPENAI_AGENTS_SANDBOX_SNAPSHOT_DIR"]?.trim();
  if (configured) return configured;
  const stateHome = env["XDG_STATE_HOME"]?.trim();
  const home = homedir();
  const base = stateHome && path.isAbsolute(stateHome) ? stateHome : home ? path.join(home, ".local", "state") : tmpdir();
  return path.join(base, "openai-agents-js", "sandbox-snapshots");
}

function localArchivePath(spec: SnapshotSpec | null, id: string): string {
  const dir = spec?.type === "local" ? (spec as LocalSnapshotSpec).baseDir ?? defaultSnapshotDir() : defaultSnapshotDir();
  return path.join(dir, `${id}.tar`);
}

/**
 * Persists the sandbox's workspace through `spec` (local or remote); the new snapshot,
 * or null with none (noop). `previous`, a snapshot this one replaces, is removed.
 */
export async function persistSnapshot(sandbox: Sandbox, spec: SnapshotSpec | null, previous: Snapshot | null | undefined): Promise<Snapshot | null> {
  if (spec === null || spec.type === "noop") return null;
  let snapshot: Snapshot;
  if (isRemoteSpec(spec)) {
    const data = await sandbox.workspaceArchiveBytes();
    const saved = await spec.store.save({ ...(spec.id ? { id: spec.id } : {}), data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
      ...(spec.metadata ? { metadata: spec.metadata } : {}) });
    snapshot = { id: saved.id, type: "remote", ...(saved.metadata ? { metadata: saved.metadata } : {}) };
  } else {
    const id = randomUUID();
    const file = localArchivePath(spec, id);
    await mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
    await sandbox.saveWorkspaceArchive(file);
    snapshot = { id, type: "local", path: file };
  }
  if (previous && previous.id !== snapshot.id) await removeSnapshot(previous, spec);
  return snapshot;
}

async function removeSnapshot(snapshot: Snapshot, spec: SnapshotSpec): Promise<void> {
  if (snapshot.type === "remote" && isRemoteSpec(spec)) {
    await spec.store.delete?.({ id: snapshot.id }).catch(() => undefined);
  } else if (snapshot.type === "local" && SNAPSHOT_ID.test(snapshot.id)) {
    await unlink(localArchivePath(spec, snapshot.id)).catch(() => undefined);
  }
}

/**
 * The archive of a snapshot: a local one's file (its path, read only from the spec's
 * directory under the snapshot's own id, never a path the state names) or a remote one's
 * bytes. SandboxSnapshotNotRestorableError when it is not there.
 */
export async function loadSnapshot(snapshot: Snapshot, spec: SnapshotSpec | null): Promise<string | Uint8Array> {
  const missing = (why: string) => new SandboxSnapshotNotRestorableError(`NsboxSandboxClient: snapshot ${snapshot.id} cannot be restored: ${why}`,
    { provider: "nsbox", snapshotId: snapshot.id, type: snapshot.type });
  if (snapshot.type === "remote") {
    if (!isRemoteSpec(spec)) throw missing("no remote snapshot store is configured (give the client's options.snapshot)");
    if (spec.store.exists && !(await spec.store.exists({ id: snapshot.id }))) throw missing("the store does not have it");
    return (await spec.store.load({ id: snapshot.id })).data;
  }
  const file = localArchivePath(spec, snapshot.id);
  const handle = await open(file, constants.O_RDONLY | constants.O_NOFOLLOW).catch((e: NodeJS.ErrnoException) => {
    throw missing(`${file}: ${e.code ?? e.message}`);
  });
  try {
    if (!(await handle.stat()).isFile()) throw missing(`${file} is not a regular file`);
  } finally {
    await handle.close();
  }
  return file;
}

/**
 * The SDK's archive limits (`maxInputBytes`, `maxMembers`, `maxExtractedBytes`; none
 * when null), checked on an archive before it is sent: the server checks its own (100,000
 * members, 4 GiB) and every member's safety whatever these say.
 */
export async function checkArchiveLimits(archive: string | Uint8Array, limits: SandboxArchiveLimits | null | undefined): Promise<void> {
  const resolved = resolveSandboxArchiveLimits(limits);
  if (resolved === null) return;
  const data = typeof archive === "string" ? await readFile(archive) : archive;
  const over = (what: string, limit: number, actual: number) =>
    new SandboxArchiveError(`Workspace archive ${what} exceeds limit.`, { reason: `archive ${what} exceeds limit`, limit, actual });
  if (resolved.maxInputBytes !== null && data.byteLength > resolved.maxInputBytes) {
    throw over("input size", resolved.maxInputBytes, data.byteLength);
  }
  const totals = tarTotals(data);
  if (resolved.maxMembers !== null && totals.members > resolved.maxMembers) throw over("member count", resolved.maxMembers, totals.members);
  if (resolved.maxExtractedBytes !== null && totals.bytes > resolved.maxExtractedBytes) {
    throw over("extracted size", resolved.maxExtractedBytes, totals.bytes);
  }
}

// Links, devices, directories and FIFOs carry no data blocks whatever their size field
// says; every other type (an unknown one is a regular file, as POSIX reads it) does.
const NO_DATA = new Set(["1", "2", "3", "4", "5", "6"]);

/**
 * Members and bytes of file contents of a tar archive, read from its headers only (ustar
 * and pax sizes, GNU long names, base-256 sizes). Counting is all it does: the server
 * checks the members themselves.
 */
export function tarTotals(data: Uint8Array): { members: number; bytes: number } {
  const bad = (why: string) => new SandboxArchiveError(`Workspace archive is not a tar archive: ${why}.`, { reason: "not a tar archive" });
  let offset = 0;
  let members = 0;
  let bytes = 0;
  let paxSize: number | undefined;
  for (;;) {
    if (offset + 512 > data.byteLength) throw bad(`it ends at byte ${data.byteLength}, inside a header`);
    const header = data.subarray(offset, offset + 512);
    if (header.every((b) => b === 0)) return { members, bytes };
    const type = String.fromCharCode(header[156] ?? 0);
    let size = headerNumber(header.subarray(124, 136));
    if (size === undefined) throw bad(`the header at byte ${offset} has no size`);
    offset += 512;
    if (type === "x") {
      paxSize = paxRecordSize(data.subarray(offset, offset + size));
    } else if (type !== "g" && type !== "L" && type !== "K") {
      if (paxSize !== undefined) size = paxSize;
      paxSize = undefined;
      members += 1;
      if (!NO_DATA.has(type)) bytes += size;
    }
    if (!NO_DATA.has(type)) offset += Math.ceil(size / 512) * 512;
  }
}

/** A header's octal number, or base-256 when its first byte's high bit is set. */
function headerNumber(field: Uint8Array): number | undefined {
  if ((field[0] ?? 0) & 0x80) {
    let n = (field[0] ?? 0) & 0x7f;
    for (const b of field.subarray(1)) n = n * 256 + b;
    return Number.isSafeInteger(n) ? n : undefined;
  }
  const text = Buffer.from(field).toString("latin1").replace(/[\0 ]+$/, "").trim();
  return /^[0-7]+$/.test(text) ? parseInt(text, 8) : text === "" ? 0 : undefined;
}

function paxRecordSize(records: Uint8Array): number | undefined {
  const found = /(?:^|\n)\d+ size=(\d+)\n/.exec(Buffer.from(records).toString("latin1"));
  return found ? Number(found[1]) : undefined;
}

/**
 * What a sandbox recreated from a snapshot is made with before the archive goes in: the
 * manifest's mounts and its ephemeral entries (the archive holds everything else), so the
 * server serves the mounts and knows which paths it leaves out of the next archive.
 */
export function restoringManifest(manifest: Manifest): Manifest {
  const entries: Record<string, Entry> = {};
  const taken: string[] = [];
  for (const { logicalPath, entry } of manifest.iterEntries()) {
    if (!isMount(entry) && !entry.ephemeral) continue;
    if (taken.some((p) => logicalPath.startsWith(`${p}/`))) continue; // inside one taken whole
    entries[logicalPath] = entry;
    taken.push(logicalPath);
  }
  return new Manifest({ root: manifest.root, entries, environment: manifest.environment,
    extraPathGrants: manifest.extraPathGrants, remoteMountCommandAllowlist: manifest.remoteMountCommandAllowlist });
}

/**
 * Makes the manifest's ephemeral entries again in a sandbox whose workspace an archive
 * replaced (the replace leaves out what the archive does not hold, ephemeral entries
 * too): their files and directories through the fs routes, host sources read again.
 */
export async function remakeEphemeralEntries(sandbox: Sandbox, manifest: Manifest, options?: LocalSourceOptions): Promise<void> {
  const ephemeral: Record<string, Entry> = {};
  for (const [logicalPath, entry] of Object.entries(restoringManifest(manifest).entries)) {
    if (!isMount(entry)) ephemeral[logicalPath] = entry;
  }
  if (!Object.keys(ephemeral).length) return;
  await writeManifestEntries(sandbox, new Manifest({ root: manifest.root, entries: ephemeral, extraPathGrants: manifest.extraPathGrants }), options);
}
