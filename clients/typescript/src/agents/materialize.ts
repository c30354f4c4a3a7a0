/**
 * Manifest entries made in a running sandbox: the SDK's `materializeEntry` and
 * `applyManifest` (NsboxSandboxSession), and the ephemeral entries a sandbox recreated
 * from a snapshot gets again (workspace-archives.ts). Everything goes through the
 * sandbox's `fs` routes, as its user (or the account `runAs` names: what is made is that
 * account's), never through a host path:
 *
 * - `file` → `PUT .../fs` (a whole file, replaced atomically if it exists; parents made
 *   0755), mode the entry's permissions, else 0755 (the SDK's default);
 * - `dir` → `POST .../fs:mkdir?parents=true` (an existing directory is kept with what it
 *   holds: the children are added to it), then its children; a `permissions` other than
 *   the directory's mode is set with `chmod` run in the sandbox (the fs routes have no
 *   chmod);
 * - `local_file`, `local_dir`, `git_repo` → read (cloned) on the client's machine as at
 *   create (local-sources.ts, the same confinement and bounds), then written as files and
 *   directories: merged into what is there, files replaced.
 *
 * A directory where a file goes, or a file where a directory goes, is the server's
 * refusal; a path through a symlink is too (the fs routes never follow one).
 */
import * as path from "node:path";

import { Manifest, SandboxUnsupportedFeatureError, type Entry } from "@openai/agents-core/sandbox";
import { UserError } from "@openai/agents-core";

import type { Sandbox } from "../sandbox.js";
import { LocalSources, type LocalSourceOptions } from "./local-sources.js";
import { assertManifestSupported, serverManifest, type ServerEntry } from "./manifest.js";

/** The SDK's default mode of a manifest entry (rwxr-xr-x), the server's too. */
const DEFAULT_MODE = 0o755;
const CHMOD_TIMEOUT_S = 30;

/** Writes the manifest's entries other than mounts under its root, in a running sandbox. */
export async function writeManifestEntries(sandbox: Pick<Sandbox, "fs" | "commands">, manifest: Manifest,
  options?: LocalSourceOptions, runAs?: string): Promise<void> {
  assertManifestSupported(manifest); // before a source is read or a repository cloned
  const sources = await LocalSources.read(manifest, options);
  try {
    const { root, entries } = serverManifest(manifest, sources);
    // Files past the create request's inline bytes are streamed by writeInto alone.
    const streamed = new Set(sources.deferred.map(({ dest }) => dest));
    await writeEntries(sandbox, root, entries, streamed, runAs);
    await sources.writeInto(sandbox, runAs);
  } finally {
    await sources.close();
  }
}

async function writeEntries(sandbox: Pick<Sandbox, "fs" | "commands">, dir: string, entries: Record<string, ServerEntry>,
  streamed: ReadonlySet<string>, runAs: string | undefined): Promise<void> {
  for (const [name, entry] of Object.entries(entries)) {
    const target = path.posix.join(dir, name);
    const mode = typeof entry["permissions"] === "number" ? entry["permissions"] : undefined;
    if (entry.type === "dir") {
      await sandbox.fs.mkdir(target, { parents: true, runAs });
      if (mode !== undefined) await setDirectoryMode(sandbox, target, mode, runAs);
      await writeEntries(sandbox, target, (entry["children"] ?? {}) as Record<string, ServerEntry>, streamed, runAs);
    } else if (entry.type === "file" && !streamed.has(target)) {
      const content = typeof entry["content_b64"] === "string" ? Buffer.from(entry["content_b64"], "base64") : String(entry["content"] ?? "");
      await sandbox.fs.write(target, content, { mode: mode ?? DEFAULT_MODE, runAs });
    }
  }
}

async function setDirectoryMode(sandbox: Pick<Sandbox, "fs" | "commands">, dir: string, mode: number,
  runAs: string | undefined): Promise<void> {
  if (((await sandbox.fs.stat(dir, { runAs })).mode & 0o7777) === mode) return;
  const octal = mode.toString(8).padStart(4, "0");
  const result = await sandbox.commands.run(["chmod", octal, "--", dir], { timeout_s: CHMOD_TIMEOUT_S, runAs });
  if (!result.ok) {
    throw new UserError(`NsboxSandboxClient: chmod ${octal} ${dir} failed in the sandbox (exit ${result.exit_code}): ` +
      result.stderr.toString("utf8").trim());
  }
}

/**
 * What of `delta` is to be made in a running sandbox whose manifest is `current`: its
 * entries other than mounts, under `current`'s root (the delta's own root is not used, as
 * the SDK's clients do not use it). A mount `current` already has at the same path is
 * served already (the caller checks it is unchanged); any other mount is refused before
 * anything is made, and so is an `ephemeral` entry outside the paths the server was told
 * at create to leave out of workspace archives (its ephemeral entries and mounts).
 */
export function entriesToMake(current: Manifest, delta: Manifest,
  extraPathGrants: Manifest["extraPathGrants"] = current.extraPathGrants): Manifest {
  const served = new Set(current.mountTargets().map(({ logicalPath }) => logicalPath));
  for (const { logicalPath, entry } of delta.mountTargets()) {
    if (!served.has(logicalPath)) throw mountAfterCreate(logicalPath, entry);
  }
  const leftOut = [...served];
  for (const { logicalPath, entry } of current.iterEntries()) if (entry.ephemeral) leftOut.push(logicalPath);
  const isLeftOut = (p: string) => leftOut.some((out) => out === "" || p === out || p.startsWith(`${out}/`));
  for (const { logicalPath, entry } of delta.iterEntries()) {
    if (entry.ephemeral && !isLeftOut(logicalPath)) throw ephemeralAfterCreate(logicalPath, entry);
  }
  return new Manifest({ root: current.root, entries: delta.entries, extraPathGrants });
}

function mountAfterCreate(logicalPath: string, entry: Entry): SandboxUnsupportedFeatureError {
  return new SandboxUnsupportedFeatureError(`NsboxSandboxClient: manifest entry ${logicalPath || "."} of type ${entry.type} cannot be ` +
    "added to a running nsbox sandbox: nsbox serve makes a sandbox's bucket mounts when it creates the sandbox. Put the " +
    "mount in the manifest the session is created with (the agent's defaultManifest, or client.create's manifest).",
  { provider: "nsbox", feature: "materializeEntry.mount", path: logicalPath, type: entry.type });
}

function ephemeralAfterCreate(logicalPath: string, entry: Entry): SandboxUnsupportedFeatureError {
  return new SandboxUnsupportedFeatureError(`NsboxSandboxClient: the ephemeral manifest entry ${logicalPath || "."} (${entry.type}) ` +
    "cannot be added to a running nsbox sandbox: nsbox serve leaves ephemeral entries out of workspace archives by the " +
    "list it takes when it creates the sandbox, so this one would be persisted. Put it in the manifest the session is created with.",
  { provider: "nsbox", feature: "materializeEntry.ephemeral", path: logicalPath, type: entry.type });
}
