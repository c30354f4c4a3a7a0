/**
 * The manifest's host sources — `local_file`, `local_dir`, `git_repo` — read on the
 * client's machine and sent as the server's `file` and `dir` entries. nsbox serve refuses
 * host paths over HTTP (it would read its own host for the caller: docs/semantics.md,
 * "Manifests"); the Python client reads them on its side too.
 *
 * As the SDK's own local materializer: a `src` is resolved against the base directory
 * (the working directory, or `localSources.baseDir`) and must stay inside it or a
 * `manifest.extraPathGrants` path; symlinks are refused, below the base on the way to the
 * source and anywhere inside a directory (a link could lead out of what was named, and
 * the server's manifest has no links), and so are FIFOs, sockets and devices. A
 * `git_repo` is cloned here (`--depth 1` where the ref allows it, hooks off, no system or
 * global git configuration) into a private temporary directory, and its tree, or its
 * `subpath`, is copied without `.git`.
 *
 * Bounds, for all sources together and checked while walking, before anything is made:
 * `maxMembers` files and directories (default 100,000, the server's manifest and archive
 * limit) and `maxBytes` of file contents (default 1 GiB, the SDK's archive input limit).
 * Up to 8 MiB of contents ride in the create request itself (one request: a failure
 * leaves nothing). Past that, the request carries the tree with empty files (their modes
 * and `ephemeral` set) and the bytes follow through the fs API, one streamed file at a
 * time: the create request is at most 16 MiB of JSON (the server's `max_json_bytes`).
 */
import { execFile } from "node:child_process";
import { constants, type Stats } from "node:fs";
import { lstat, mkdtemp, open, readdir, realpath, rm, type FileHandle } from "node:fs/promises";
import * as os from "node:os";
import * as path from "node:path";

import {
  SandboxGitCloneError,
  SandboxGitCopyError,
  SandboxGitMissingInImageError,
  SandboxGitSubpathError,
  SandboxLocalDirReadError,
  SandboxLocalFileReadError,
  type Entry,
  type GitRepo,
  type LocalDir,
  type LocalFile,
  type Manifest,
} from "@openai/agents-core/sandbox";

import type { Sandbox } from "../sandbox.js";
import type { ServerEntry } from "./manifest.js";

export type LocalSource = LocalFile | LocalDir | GitRepo;

export function isLocalSource(entry: Entry): entry is LocalSource {
  return entry.type === "local_file" || entry.type === "local_dir" || entry.type === "git_repo";
}

export interface LocalSourceOptions {
  /** Where a relative `src` starts, and what every source must stay inside (default: the working directory). */
  baseDir?: string;
  /** Files and directories of all sources together (default 100,000). */
  maxMembers?: number;
  /** Bytes of file contents of all sources together (default 1 GiB). */
  maxBytes?: number;
}

export const DEFAULT_MAX_MEMBERS = 100_000;
export const DEFAULT_MAX_BYTES = 1024 ** 3;
// Base64 makes 8 MiB about 10.7 MiB: the rest of a 16 MiB create request has room.
export const INLINE_BYTES = 8 * 1024 * 1024;
const GIT_TIMEOUT_MS = 5 * 60_000; // the SDK's own clone timeout
const COMMIT = /^[0-9a-fA-F]{7,40}$/;

/** A regular file as the walk saw it; opened again only if it is still that file. */
interface SourceFile {
  host: string;
  stat: Stats;
  source: LocalSource;
}
/** A file, or a directory's members by name. */
type Tree = SourceFile | Map<string, Tree>;

export class LocalSources {
  /** The server entry standing for each source, by its path in the manifest. */
  readonly entries = new Map<string, ServerEntry>();
  /** Files whose bytes go through the fs API once the sandbox is made (at `dest`, absolute). */
  readonly deferred: { dest: string; file: SourceFile }[] = [];
  private readonly scratch: string[] = [];
  private members = 0;
  private bytes = 0;

  private constructor(private readonly base: string, private readonly grants: string[],
    private readonly maxMembers: number, private readonly maxBytes: number) {}

  /** Reads (and clones) every source of the manifest, checked and bounded; nothing is made. */
  static async read(manifest: Manifest, options: LocalSourceOptions = {}): Promise<LocalSources> {
    const sources = new LocalSources(path.resolve(options.baseDir ?? process.cwd()),
      manifest.extraPathGrants.map((g) => path.resolve(g.path)),
      options.maxMembers ?? DEFAULT_MAX_MEMBERS, options.maxBytes ?? DEFAULT_MAX_BYTES);
    try {
      const found: { logicalPath: string; dest: string; tree: Tree }[] = [];
      for (const { logicalPath, absolutePath, entry } of manifest.iterEntries()) {
        if (isLocalSource(entry)) found.push({ logicalPath, dest: absolutePath, tree: await sources.tree(entry) });
      }
      const inline = sources.bytes <= INLINE_BYTES;
      for (const { logicalPath, dest, tree } of found) sources.entries.set(logicalPath, await sources.serverEntry(tree, dest, inline));
      return sources;
    } catch (e) {
      await sources.close();
      throw e;
    }
  }

  /** Writes the deferred files' bytes into the sandbox, each streamed from its source (as `runAs`, else its user). */
  async writeInto(sandbox: Pick<Sandbox, "fs">, runAs?: string): Promise<void> {
    for (const { dest, file } of this.deferred) {
      const handle = await openSource(file);
      const stream = handle.createReadStream({ autoClose: false });
      try {
        await sandbox.fs.write(dest, stream, { mode: file.stat.mode & 0o777, runAs });
      } finally {
        stream.destroy(); // a write refused midway leaves it unread: it must not read a closed fd
        await handle.close();
      }
    }
  }

  /** Removes the clones. */
  async close(): Promise<void> {
    await Promise.all(this.scratch.splice(0).map((dir) => rm(dir, { recursive: true, force: true })));
  }

  private async tree(source: LocalSource): Promise<Tree> {
    if (source.type === "git_repo") return this.walk(await this.clone(source), source, ".git");
    const host = await this.confined(source.src, source);
    const stat = await lstat(host);
    if (source.type === "local_file" && !stat.isFile()) throw refusal(source, `${host} is not a regular file`, "not_a_file");
    if (source.type === "local_dir" && !stat.isDirectory()) throw refusal(source, `${host} is not a directory`, "not_a_directory");
    return this.walk(host, source);
  }

  /** What is at `host` (a real path), counted against the bounds; `skip` is left out of its top. */
  private async walk(host: string, source: LocalSource, skip?: string): Promise<Tree> {
    const stat = await lstat(host);
    this.count(source, host, stat.isFile() ? stat.size : 0);
    if (stat.isFile()) return { host, stat, source };
    if (stat.isSymbolicLink()) {
      throw refusal(source, `${host} is a symlink: ${source.type} copies regular files and directories only (a link could ` +
        "lead out of the source)", "symlink");
    }
    if (!stat.isDirectory()) throw refusal(source, `${host} is not a regular file or directory (a FIFO, socket or device)`, "special_file");
    const names = (await readdir(host)).sort();
    if (!sameFile(stat, await lstat(host))) throw refusal(source, `${host} changed while it was read`, "changed");
    const members = new Map<string, Tree>();
    for (const name of names) {
      if (name !== skip) members.set(name, await this.walk(path.join(host, name), source));
    }
    return members;
  }

  private count(source: LocalSource, host: string, size: number): void {
    this.members += 1;
    this.bytes += size;
    if (this.members > this.maxMembers) {
      throw refusal(source, `the manifest's local sources hold more than ${this.maxMembers} files and directories ` +
        `(localSources.maxMembers), reached at ${host}`, "too_many_members", { limit: this.maxMembers });
    }
    if (this.bytes > this.maxBytes) {
      throw refusal(source, `the manifest's local sources hold more than ${this.maxBytes} bytes (localSources.maxBytes): ` +
        `${this.bytes} with ${host}`, "too_many_bytes", { limit: this.maxBytes, bytes: this.bytes });
    }
  }

  private async serverEntry(tree: Tree, dest: string, inline: boolean): Promise<ServerEntry> {
    if (tree instanceof Map) {
      const children: Record<string, ServerEntry> = {};
      for (const [name, member] of tree) children[name] = await this.serverEntry(member, `${dest}/${name}`, inline);
      return { type: "dir", children };
    }
    const permissions = tree.stat.mode & 0o777;
    if (!inline) {
      this.deferred.push({ dest, file: tree });
      return { type: "file", content: "", permissions };
    }
    const handle = await openSource(tree);
    try {
      return { type: "file", content_b64: (await handle.readFile()).toString("base64"), permissions };
    } finally {
      await handle.close();
    }
  }

  /** `src` as a real path: inside the base or a path grant, with no symlink below it. */
  private async confined(src: string, source: LocalSource): Promise<string> {
    const wanted = path.resolve(this.base, src);
    const root = [this.base, ...this.grants].find((r) => within(r, wanted));
    if (root === undefined) {
      throw refusal(source, `${wanted} is outside the base directory ${this.base} (localSources.baseDir) and no ` +
        "manifest.extraPathGrants path covers it", "outside_base_dir");
    }
    let real: string;
    let expected: string;
    try {
      expected = path.join(await realpath(root), path.relative(root, wanted));
      real = await realpath(wanted);
    } catch (e) {
      throw refusal(source, `${wanted}: ${(e as Error).message}`, "unreadable");
    }
    if (real !== expected) throw refusal(source, `${wanted} passes through a symlink (it is ${real})`, "symlink");
    return real;
  }

  /** A clone of the repository at its ref; the real path of what to copy (its subpath). */
  private async clone(repo: GitRepo): Promise<string> {
    const url = await this.gitUrl(repo);
    const ref = repo.ref?.trim() || undefined;
    if (url.startsWith("-") || ref?.startsWith("-")) throw cloneError(repo, "a repository or ref starting with '-' is refused");
    const scratch = await realpath(await mkdtemp(path.join(os.tmpdir(), "nsbox-git-")));
    this.scratch.push(scratch);
    const tree = path.join(scratch, "tree");
    if (ref === undefined || !COMMIT.test(ref)) {
      await git(repo, ["clone", "--quiet", "--depth", "1", "--no-tags", ...(ref ? ["--branch", ref] : []), "--", url, tree]);
    } else {
      // A commit: fetched alone where the remote serves it so, else with the whole history.
      await git(repo, ["init", "--quiet", tree]);
      await git(repo, ["-C", tree, "remote", "add", "origin", url]);
      const alone = await git(repo, ["-C", tree, "fetch", "--quiet", "--depth", "1", "origin", ref]).then(() => true, () => false);
      if (!alone) await git(repo, ["-C", tree, "fetch", "--quiet", "--tags", "origin"]);
      await git(repo, ["-C", tree, "checkout", "--quiet", "--detach", alone ? "FETCH_HEAD" : `${ref}^{commit}`]);
    }
    if (!repo.subpath) return tree;
    // The SDK's manifest has made the subpath relative, without `..`.
    const wanted = path.join(tree, repo.subpath);
    const real = await realpath(wanted).catch(() => undefined);
    if (real !== wanted || repo.subpath.split("/")[0] === ".git") {
      throw new SandboxGitSubpathError(`NsboxSandboxClient: git_repo ${redact(repo.repo)}: subpath ${repo.subpath} ` +
        (real === undefined ? "is not in the repository" : "is .git, or passes through a symlink"),
      { provider: "nsbox", repo: redact(repo.repo), ref: repo.ref, subpath: repo.subpath });
    }
    return wanted;
  }

  /** The SDK's URL of the repository; a local path (or file://) is a source, confined as `src` is. */
  private async gitUrl(repo: GitRepo): Promise<string> {
    const name = repo.repo.trim();
    const local = name.startsWith("file://") ? name.slice("file://".length) : /^(\/|\.\.?(\/|$))/.test(name) ? name : undefined;
    // file://, so that --depth applies (git ignores it for a plain path).
    if (local !== undefined) return `file://${await this.confined(local, repo)}`;
    if (name.includes("://") || name.startsWith("git@")) return name;
    return `https://${repo.host ?? "github.com"}/${name}.git`;
  }
}

function within(root: string, p: string): boolean {
  const rel = path.relative(root, p);
  return rel !== ".." && !rel.startsWith(`..${path.sep}`) && !path.isAbsolute(rel);
}

function sameFile(a: Stats, b: Stats): boolean {
  return a.dev === b.dev && a.ino === b.ino && a.isDirectory() === b.isDirectory() && a.isFile() === b.isFile();
}

/** The file the walk saw, opened without following a link; refused if it is another now. */
async function openSource(file: SourceFile): Promise<FileHandle> {
  // O_NONBLOCK: a FIFO put in its place must not block the open.
  const handle = await open(file.host, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK).catch((e: Error) => {
    throw refusal(file.source, `${file.host}: ${e.message}`, "unreadable");
  });
  const now = await handle.stat();
  if (!now.isFile() || !sameFile(now, file.stat) || now.size !== file.stat.size) {
    await handle.close();
    throw refusal(file.source, `${file.host} changed while the manifest was read`, "changed");
  }
  return handle;
}

function refusal(source: LocalSource, message: string, reason: string, details: Record<string, unknown> = {}): Error {
  const where = source.type === "git_repo" ? { repo: redact(source.repo) } : { src: source.src };
  const info = { provider: "nsbox", type: source.type, reason, ...where, ...details };
  const text = `NsboxSandboxClient: ${source.type} ${Object.values(where)[0]}: ${message}`;
  if (source.type === "local_file") return new SandboxLocalFileReadError(text, info);
  if (source.type === "local_dir") return new SandboxLocalDirReadError(text, info);
  return new SandboxGitCopyError(text, info);
}

function cloneError(repo: GitRepo, why: string): Error {
  return new SandboxGitCloneError(`NsboxSandboxClient: git_repo ${redact(repo.repo)}${repo.ref ? ` at ${repo.ref}` : ""}: ${why}`,
    { provider: "nsbox", repo: redact(repo.repo), ref: repo.ref });
}

/** git with hooks off and no system or global configuration, bounded in time. */
function git(repo: GitRepo, args: string[]): Promise<void> {
  const env: NodeJS.ProcessEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("GIT_")));
  Object.assign(env, { GIT_CONFIG_NOSYSTEM: "1", GIT_CONFIG_GLOBAL: "/dev/null", GIT_TERMINAL_PROMPT: "0", LC_ALL: "C" });
  const options = ["-c", "core.hooksPath=/dev/null", "-c", "protocol.file.allow=always", "-c", "advice.detachedHead=false"];
  return new Promise((resolve, reject) => {
    execFile("git", [...options, ...args], { env, timeout: GIT_TIMEOUT_MS, killSignal: "SIGKILL", maxBuffer: 1 << 20 },
      (error, _stdout, stderr) => {
        if (!error) return resolve();
        if (error.code === "ENOENT") {
          return reject(new SandboxGitMissingInImageError("NsboxSandboxClient: git_repo entries are cloned on the client's " +
            "machine, and git is not installed here", { provider: "nsbox", repo: redact(repo.repo) }));
        }
        const command = args[0] === "-C" ? args[2] : args[0];
        const why = error.killed ? `git ${command} was killed after ${GIT_TIMEOUT_MS / 1000} s` : String(stderr).trim() || error.message;
        reject(cloneError(repo, redact(why)));
      });
  });
}

/** A URL's user and password hidden (`https://***@host/...`). */
function redact(text: string): string {
  return text.replace(/([a-z][a-z0-9+.-]*:\/\/)[^/@\s]*@/gi, "$1***@");
}
