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
 * Refuses what this client cannot give nsbox serve, before anything is made: host path
 * grants, an entry's `group`, and entries other than `file`, `dir`, the host sources this
 * client reads (local-sources.ts) and the bucket mounts it maps (mounts.ts). Users and
 * groups go to the server (`serverManifest`), which checks their names.
 */
export function assertManifestSupported(manifest: Manifest): void {
  const hostGrant = manifest.extraPathGrants.find((g) => g.hostPath !== undefined);
  if (hostGrant) {
    throw missingCapability(`extraPathGrants hostPath (${hostGrant.path}) would expose a host directory inside the sandbox`,
      "manifest.extraPathGrants.hostPath", { path: hostGrant.path });
  }
  for (const [path, entry] of Object.entries(manifest.entries)) assertEntrySupported(path, entry);
}

function assertEntrySupported(path: string, entry: Entry): void {
  if (entry.group !== undefined) {
    // The server makes every manifest entry as `user` and has no chown or chgrp; an entry
    // made by materializeEntry / applyManifest with runAs is owned by that account.
    throw new SandboxUnsupportedFeatureError(`NsboxSandboxClient: manifest entry ${path} names the group ` +
      `${entry.group.name}, and nsbox serve cannot give a file or directory a group or an owner: it makes manifest ` +
      "entries as the sandbox's user. Leave `group` out; to have the entry owned by one of the manifest's users, make it " +
      "after create with materializeEntry({path, entry, runAs}) (or applyManifest(manifest, runAs)).",
    { provider: "nsbox", feature: "manifest.entry.group", path, group: entry.group.name });
  }
  if (entry.type === "dir") {
    for (const [name, child] of Object.entries(entry.children ?? {})) assertEntrySupported(`${path}/${name}`, child);
    return;
  }
  if (entry.type === "file" || isLocalSource(entry) || isNsboxMount(entry)) return;
  throw missingCapability(`manifest entry ${path} of type ${entry.type} is not mapped to an nsbox mount yet ` +
    "(s3_mount, r2_mount, gcs_mount and azure_blob_mount are)", `manifest.entry.${entry.type}`, { path, type: entry.type });
}

/** The create document's `manifest`. */
export interface ServerManifest {
  version: 1;
  root: string;
  entries: Record<string, ServerEntry>;
  users?: string[];
  groups?: { name: string; users: string[] }[];
}

/**
 * The create document's `manifest`: its root and entries, each host source replaced by
 * what `sources` read of it, and its users and groups by name (the server gives each
 * account its ids). Mounts are the document's `mounts` (mounts.ts).
 */
export function serverManifest(manifest: Manifest, sources?: LocalSources): ServerManifest {
  assertManifestSupported(manifest);
  const out: ServerManifest = { version: 1, root: normalizePosixPath(manifest.root), entries: serverEntries(manifest.entries, "", sources) };
  // `user` is the sandbox's own account, there already: the SDK adds it as any other
  // when an agent's runAs names it (manifestWithRunAsUser).
  const users = manifest.users.map((u) => u.name).filter((name) => name !== DEFAULT_USER);
  if (users.length) out.users = users;
  if (manifest.groups.length) out.groups = manifest.groups.map((g) => ({ name: g.name, users: (g.users ?? []).map((u) => u.name) }));
  return out;
}

/** The account of a sandbox that names none. */
export const DEFAULT_USER = "user";

/**
 * Refuses a manifest that would add accounts to a running sandbox (`applyManifest`):
 * nsbox serve makes a sandbox's users and groups when it creates it. Users and groups the
 * session's manifest has already, with no new members, are no change.
 */
export function assertNoNewAccounts(current: Manifest, delta: Manifest): void {
  const known = new Set([DEFAULT_USER, ...accountNames(current)]);
  const newUsers = [...new Set(accountNames(delta))].filter((name) => !known.has(name));
  const currentGroups = new Map(current.groups.map((g) => [g.name, new Set((g.users ?? []).map((u) => u.name))]));
  const newGroups = delta.groups.filter((g) => {
    const members = currentGroups.get(g.name);
    return members === undefined || (g.users ?? []).some((u) => !members.has(u.name));
  }).map((g) => g.name);
  if (!newUsers.length && !newGroups.length) return;
  const what = [newUsers.length ? `the users ${newUsers.join(", ")}` : "", newGroups.length ? `the groups ${newGroups.join(", ")}` : ""]
    .filter(Boolean).join(" and ");
  throw new SandboxUnsupportedFeatureError(`NsboxSandboxClient: applyManifest cannot add ${what} to a running nsbox ` +
    "sandbox: nsbox serve makes a sandbox's accounts when it creates it. Put them in the manifest the session is created " +
    "with (the agent's defaultManifest, its runAs, or client.create's manifest).",
  { provider: "nsbox", feature: "applyManifest.users", users: newUsers, groups: newGroups });
}

function accountNames(manifest: Manifest): string[] {
  return [...manifest.users.map((u) => u.name), ...manifest.groups.flatMap((g) => (g.users ?? []).map((u) => u.name))];
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
