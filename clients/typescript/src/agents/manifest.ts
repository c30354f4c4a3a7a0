/**
 * The SDK's manifest as nsbox serve takes it: the entries the server makes before
 * `create` returns (docs/semantics.md, "Manifests"), under the manifest's own root. The
 * root is the sandbox's workspace root as written (the server's `workspace_root`:
 * /workspace, the SDK's default, is a directory of the sandbox's home shown there), so
 * the model is told paths that exist and no command text is rewritten. A root the server
 * cannot take (/tmp, /etc...) is refused by it, naming the rule.
 */
import {
  Manifest,
  Permissions,
  SandboxUnsupportedFeatureError,
  isMount,
  type Entry,
} from "@openai/agents-core/sandbox";
import { normalizePosixPath } from "@openai/agents-core/sandbox/internal";

import { isLocalSource, type LocalSources } from "./local-sources.js";
import { isNsboxMount } from "./mounts.js";

/**
 * What nsbox serve does not do yet, as the error the SDK's own clients raise for a
 * feature their backend lacks: the capability, and where the server's side of it is
 * planned (issue 34, section 3).
 */
export function missingCapability(what: string, feature: string, details: Record<string, unknown> = {}): SandboxUnsupportedFeatureError {
  return new SandboxUnsupportedFeatureError(
    `NsboxSandboxClient: ${what}. nsbox serve does not have this yet (nsbox issue 34, section 3).`,
    { provider: "nsbox", feature, ...details });
}

/** An entry of the server's manifest (`file`, `dir`). */
export type ServerEntry = Record<string, unknown> & { type: string };

/**
 * Refuses what this client cannot give nsbox serve, before anything is made: users and
 * groups (one sandbox user), host path grants, and entries other than `file`, `dir`, the
 * host sources this client reads (local-sources.ts) and the bucket mounts it maps
 * (mounts.ts).
 */
export function assertManifestSupported(manifest: Manifest): void {
  if (manifest.users.length || manifest.groups.length) {
    throw missingCapability("manifest users and groups need more than one user in a sandbox; nsbox runs everything as its one user",
      "manifest.users", { users: manifest.users.map((u) => u.name) });
  }
  const hostGrant = manifest.extraPathGrants.find((g) => g.hostPath !== undefined);
  if (hostGrant) {
    throw missingCapability(`extraPathGrants hostPath (${hostGrant.path}) would expose a host directory inside the sandbox`,
      "manifest.extraPathGrants.hostPath", { path: hostGrant.path });
  }
  for (const [path, entry] of Object.entries(manifest.entries)) assertEntrySupported(path, entry);
}

function assertEntrySupported(path: string, entry: Entry): void {
  if (entry.group !== undefined) {
    throw missingCapability(`the group of manifest entry ${path} needs sandbox groups`, "manifest.entry.group", { path });
  }
  if (entry.type === "dir") {
    for (const [name, child] of Object.entries(entry.children ?? {})) assertEntrySupported(`${path}/${name}`, child);
    return;
  }
  if (entry.type === "file" || isLocalSource(entry) || isNsboxMount(entry)) return;
  throw missingCapability(`manifest entry ${path} of type ${entry.type} is not mapped to an nsbox mount yet ` +
    "(s3_mount, r2_mount, gcs_mount and azure_blob_mount are)", `manifest.entry.${entry.type}`, { path, type: entry.type });
}

/**
 * The create document's `manifest`: its root and entries, each host source replaced by
 * what `sources` read of it. Mounts are the document's `mounts` (mounts.ts).
 */
export function serverManifest(manifest: Manifest, sources?: LocalSources): { version: 1; root: string; entries: Record<string, ServerEntry> } {
  assertManifestSupported(manifest);
  return { version: 1, root: normalizePosixPath(manifest.root), entries: serverEntries(manifest.entries, "", sources) };
}

function serverEntries(entries: Record<string, Entry>, prefix: string, sources: LocalSources | undefined): Record<string, ServerEntry> {
  const out: Record<string, ServerEntry> = {};
  for (const [name, entry] of Object.entries(entries)) {
    if (!isMount(entry)) out[name] = serverEntry(entry, prefix ? `${prefix}/${name}` : name, sources);
  }
  return out;
}

function serverEntry(entry: Entry, logicalPath: string, sources: LocalSources | undefined): ServerEntry {
  let out: ServerEntry = { type: entry.type };
  if (isLocalSource(entry)) {
    const read = sources?.entries.get(logicalPath);
    if (read === undefined) throw new TypeError(`manifest entry ${logicalPath} (${entry.type}) was not read: give serverManifest its LocalSources`);
    out = { ...read };
  }
  if (entry.description !== undefined) out["description"] = entry.description;
  if (entry.ephemeral !== undefined) out["ephemeral"] = entry.ephemeral;
  // The server takes the mode bits alone; the SDK's Permissions may carry the file type.
  if (entry.permissions !== undefined) out["permissions"] = new Permissions(entry.permissions).toMode() & 0o7777;
  if (entry.type === "file") {
    if (typeof entry.content === "string") out["content"] = entry.content;
    else out["content_b64"] = Buffer.from(entry.content.buffer, entry.content.byteOffset, entry.content.byteLength).toString("base64");
  } else if (entry.type === "dir") {
    out["children"] = serverEntries(entry.children ?? {}, logicalPath, sources);
  }
  return out;
}
