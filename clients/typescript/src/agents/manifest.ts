/**
 * The SDK's manifest as nsbox serve takes it: the workspace root, and the entries the
 * server makes before `create` returns (docs/semantics.md, "Manifests").
 *
 * The root: nsbox's workspace is /home/user and the server cannot put it elsewhere yet
 * (issue 34, section 3, "The workspace root"). The SDK's default root, /workspace, is
 * mapped to /home/user (as the SDK's Runloop client maps it to its home): the session's
 * manifest then says /home/user, so the model is told the path that exists and no command
 * text is rewritten. A root under /home/user is kept as given (its entries are made under
 * it). Any other root is refused, naming the missing capability.
 */
import {
  Manifest,
  Permissions,
  SandboxConfigurationError,
  SandboxUnsupportedFeatureError,
  cloneManifest,
  type Entry,
} from "@openai/agents-core/sandbox";
import { normalizePosixPath, relativePosixPathWithinRoot } from "@openai/agents-core/sandbox/internal";

export const NSBOX_WORKSPACE_ROOT = "/home/user";
export const SDK_DEFAULT_ROOT = "/workspace";

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

/** The manifest with its root where nsbox has it (see the module's comment). */
export function manifestForNsbox(manifest: Manifest): Manifest {
  const root = normalizePosixPath(manifest.root);
  if (root === SDK_DEFAULT_ROOT) return cloneManifest({ ...manifestInit(manifest), root: NSBOX_WORKSPACE_ROOT });
  if (relativePosixPathWithinRoot(NSBOX_WORKSPACE_ROOT, root) === null) {
    throw new SandboxConfigurationError(
      `NsboxSandboxClient: manifest.root ${JSON.stringify(manifest.root)} is not available: nsbox's workspace is ` +
      `${NSBOX_WORKSPACE_ROOT} (the SDK's default ${SDK_DEFAULT_ROOT} is mapped to it; a directory under it works too). ` +
      "A configurable workspace root is planned (nsbox issue 34, section 3, create option workspace_root).",
      { provider: "nsbox", feature: "manifest.root", root: manifest.root });
  }
  return manifest;
}

function manifestInit(manifest: Manifest) {
  return {
    version: manifest.version,
    root: manifest.root,
    entries: manifest.entries,
    environment: manifest.environment,
    users: manifest.users,
    groups: manifest.groups,
    extraPathGrants: manifest.extraPathGrants,
    remoteMountCommandAllowlist: manifest.remoteMountCommandAllowlist,
  };
}

/** The server's manifest entry (`file`, `dir`); what it cannot make is refused by name. */
type ServerEntry = Record<string, unknown> & { type: string };

/**
 * Refuses what this client cannot give nsbox serve, before anything is made: users and
 * groups (one sandbox user), host path grants, and entry types other than `file`/`dir`.
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
  if (entry.type === "file") return;
  if (entry.type === "dir") {
    for (const [name, child] of Object.entries(entry.children ?? {})) assertEntrySupported(`${path}/${name}`, child);
    return;
  }
  if (entry.type === "local_file" || entry.type === "local_dir" || entry.type === "git_repo") {
    throw missingCapability(`manifest entry ${path} of type ${entry.type} is not sent by this version of the client ` +
      "(the server refuses host paths over HTTP: the client must read them and send their files)",
      `manifest.entry.${entry.type}`, { path, type: entry.type });
  }
  throw missingCapability(`manifest entry ${path} of type ${entry.type}: mounts are not served to the SDK's client yet`,
    `manifest.entry.${entry.type}`, { path, type: entry.type });
}

/** The create document's `manifest`: the entries, keyed under /home/user. */
export function serverManifest(manifest: Manifest): { version: 1; root: string; entries: Record<string, ServerEntry> } {
  assertManifestSupported(manifest);
  const under = relativePosixPathWithinRoot(NSBOX_WORKSPACE_ROOT, normalizePosixPath(manifest.root)) ?? "";
  const entries: Record<string, ServerEntry> = {};
  for (const [path, entry] of Object.entries(manifest.entries)) {
    entries[under ? `${under}/${path}` : path] = serverEntry(entry);
  }
  return { version: 1, root: NSBOX_WORKSPACE_ROOT, entries };
}

function serverEntry(entry: Entry): ServerEntry {
  const out: ServerEntry = { type: entry.type };
  if (entry.description !== undefined) out["description"] = entry.description;
  if (entry.ephemeral !== undefined) out["ephemeral"] = entry.ephemeral;
  // The server takes the mode bits alone; the SDK's Permissions may carry the file type.
  if (entry.permissions !== undefined) out["permissions"] = new Permissions(entry.permissions).toMode() & 0o7777;
  if (entry.type === "file") {
    if (typeof entry.content === "string") out["content"] = entry.content;
    else out["content_b64"] = Buffer.from(entry.content.buffer, entry.content.byteOffset, entry.content.byteLength).toString("base64");
  } else if (entry.type === "dir") {
    out["children"] = Object.fromEntries(Object.entries(entry.children ?? {}).map(([name, child]) => [name, serverEntry(child)]));
  }
  return out;
}
