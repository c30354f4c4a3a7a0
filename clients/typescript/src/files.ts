/** The files volume (/mnt/files: Files, RemoteFile) and the sandbox's whole view (Fs). */
import { createHash, type Hash } from "node:crypto";
import * as fs from "node:fs";
import * as fsp from "node:fs/promises";
import * as path from "node:path";
import { once } from "node:events";
import { PassThrough, Readable, Transform, type Writable } from "node:stream";

import type { Client } from "./connection.js";
import { IntegrityError, NotFound, NsboxError, ProtocolError, ServerUnreachable, isUnknownAccount } from "./errors.js";
import {
  listingPage,
  type DownloadLink,
  type Extracted,
  type FsStat,
  type FsWrite,
  type ListingEntry,
  type ListingPage,
  type UploadRecord,
} from "./models.js";

export const FILES_ROOT = "/mnt/files";
export const WORKSPACE_ROOT = "/home/user";

/** `data/x` and `/mnt/files/data/x` both as `/mnt/files/data/x`. */
function insideFiles(p: string): string {
  if (p === FILES_ROOT || p.startsWith(FILES_ROOT + "/")) return p;
  return p === "" || p === "." ? FILES_ROOT : `${FILES_ROOT}/${p.replace(/^\/+/, "")}`;
}

/** A stream passed through, its sha-256 and size kept on the way. */
function hashing(source: Readable): { stream: Readable; hash: Hash } {
  const hash = createHash("sha256");
  const through = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      hash.update(chunk);
      done(null, chunk);
    },
  });
  source.on("error", (e) => through.destroy(e));
  return { stream: source.pipe(through), hash };
}

function sha256(data: Uint8Array): string {
  return createHash("sha256").update(data).digest("hex");
}

function removedList(doc: unknown): string[] {
  const removed = doc !== null && typeof doc === "object" ? (doc as Record<string, unknown>)["removed"] : undefined;
  return Array.isArray(removed) ? removed.map(String) : [];
}

export interface PageOptions {
  cursor?: string;
  limit?: number;
}


/**
 * Writes a file at `target` whole or not at all: `fill` writes a temporary file beside
 * it, synced, then linked into place (never over an existing file unless `overwrite`:
 * then EEXIST, and the check cannot race the write) or renamed over it.
 */
async function saveWhole(target: string, mode: number, overwrite: boolean, fill: (out: fsp.FileHandle) => Promise<void>): Promise<void> {
  const exists = () => Object.assign(new Error(`${target} exists; pass overwrite: true to replace it`), { code: "EEXIST" });
  if (!overwrite && (await fsp.lstat(target).catch(() => undefined))) throw exists();
  const temp = path.join(path.dirname(path.resolve(target)), `.${path.basename(target)}.${process.pid}.${Date.now().toString(36)}.part`);
  const out = await fsp.open(temp, "wx", mode);
  try {
    try {
      await fill(out);
      await out.sync();
    } finally {
      await out.close();
    }
    if (overwrite) {
      await fsp.rename(temp, target);
    } else {
      try {
        await fsp.link(temp, target);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === "EEXIST") throw exists();
        await fsp.copyFile(temp, target, fs.constants.COPYFILE_EXCL);
      }
      await fsp.unlink(temp);
    }
  } catch (e) {
    await fsp.unlink(temp).catch(() => undefined);
    throw e;
  }
}

/**
 * A file of /mnt/files (Composio's RemoteFile): its bytes (fetched on first use), and a
 * signed link to it that needs no token until `expires_at`. `download_url` is undefined
 * for a server that serves a unix socket only and has no `--public-url`; `url_path` (the
 * link's path and query) then still works over the socket.
 */
export class RemoteFile {
  readonly path: string;
  readonly name: string;
  readonly url_path: string | undefined;
  readonly download_url: string | undefined;
  readonly expires_at: string | undefined;
  private data: Buffer | undefined;

  constructor(private readonly files: Files, filePath: string, link: Partial<DownloadLink> | undefined) {
    this.path = insideFiles(filePath);
    this.name = path.posix.basename(this.path.replace(/\/+$/, ""));
    this.url_path = typeof link?.download_path === "string" ? link.download_path : undefined;
    // A server without a TCP URL may give the path alone where the URL goes.
    this.download_url = typeof link?.download_url === "string" && link.download_url.startsWith("http") ? link.download_url : undefined;
    this.expires_at = typeof link?.expires_at === "string" ? link.expires_at : undefined;
  }

  /** `expires_at` as a Date (undefined when unknown). */
  get expires(): Date | undefined {
    return this.expires_at ? new Date(this.expires_at) : undefined;
  }

  /** The file's bytes (fetched once). */
  async buffer(): Promise<Buffer> {
    this.data ??= await this.files.readBytes(this.path);
    return this.data;
  }

  async text(): Promise<string> {
    return (await this.buffer()).toString("utf8");
  }

  /**
   * Writes the file to `dest` (a file name, or an existing directory to put it in;
   * default: its name in the current directory) and returns where. An existing file is
   * never replaced unless `overwrite` (then EEXIST); the file appears whole or not at all.
   */
  async save(dest?: string, options: { overwrite?: boolean } = {}): Promise<string> {
    let target = dest ?? this.name;
    if ((await fsp.stat(target).catch(() => undefined))?.isDirectory()) target = path.join(target, this.name);
    await saveWhole(target, 0o644, !!options.overwrite, async (out) => {
      if (this.data !== undefined) await out.writeFile(this.data);
      else for await (const chunk of this.files.readChunks(this.path)) await out.write(chunk);
    });
    return target;
  }
}

/**
 * `sbx.files`: the persistent /mnt/files volume (Composio's four methods). Paths are
 * relative to /mnt/files (`data/sales.csv`) or absolute under it
 * (`/mnt/files/data/sales.csv`). These work whether the sandbox runs, is busy or is dead.
 */
export class Files {
  private readonly route: string;

  constructor(private readonly client: Client, base: string) {
    this.route = `${base}/files`;
  }

  /**
   * Uploads a local file (a path given as a string), bytes, or a readable stream to
   * `dest` in /mnt/files (default: the local file's name; a path ending in `/` is a
   * directory to put it in). Atomic; parents made. The server's sha-256 is checked
   * against the bytes sent (IntegrityError).
   */
  async upload(source: string | Uint8Array | Readable, dest?: string,
    options: { executable?: boolean; timeoutMs?: number } = {}): Promise<UploadRecord> {
    let name: string | undefined;
    let length: number | undefined;
    let body: Uint8Array | Readable;
    let hash: Hash | undefined;
    let opened: Readable | undefined; // a local file this call opened, closed whatever happens
    if (typeof source === "string") {
      name = path.basename(source);
      const handle = await fsp.open(source, "r");
      try {
        length = (await handle.stat()).size;
      } catch (e) {
        await handle.close();
        throw e;
      }
      opened = handle.createReadStream();
      ({ stream: body, hash } = hashing(opened));
    } else if (source instanceof Uint8Array) {
      body = source;
      length = source.byteLength;
    } else if (source instanceof Readable) {
      const streamPath = (source as Readable & { path?: unknown }).path;
      name = typeof streamPath === "string" ? path.basename(streamPath) : undefined;
      ({ stream: body, hash } = hashing(source));
    } else {
      throw new TypeError("upload takes a local path, bytes or a readable stream");
    }
    let record: UploadRecord;
    try {
      let target = dest;
      if (target === undefined || target.endsWith("/")) {
        if (name === undefined) throw new TypeError("give the path in /mnt/files to upload bytes to");
        target = (target ?? "") + name;
      }
      const headers: Record<string, string> = { "Content-Type": "application/octet-stream" };
      if (length !== undefined) headers["Content-Length"] = String(length);
      record = await this.client.json<UploadRecord>("PUT", this.route, {
        query: { path: target, executable: options.executable || undefined },
        body, headers, timeoutMs: options.timeoutMs,
      });
    } finally {
      if (opened && !opened.closed) {
        const closed = once(opened, "close");
        opened.destroy();
        await closed;
      }
    }
    const sent = hash ? hash.digest("hex") : sha256(body as Uint8Array);
    if (record.sha256 && record.sha256 !== sent) {
      throw new IntegrityError(`the server's sha-256 of ${record.path} (${record.sha256}) is not that of the bytes sent (${sent})`);
    }
    return record;
  }

  /** One page of a directory of /mnt/files, sorted by name; `next_cursor` continues. */
  async list(dir: string = FILES_ROOT, options: PageOptions = {}): Promise<ListingPage> {
    const doc = await this.client.json<Parameters<typeof listingPage>[0]>("GET", `${this.route}:ls`,
      { query: { path: dir, cursor: options.cursor, limit: options.limit } });
    return listingPage(doc, insideFiles(dir));
  }

  /** Every entry of a directory, page after page. */
  async *iter(dir: string = FILES_ROOT, options: { pageSize?: number } = {}): AsyncGenerator<ListingEntry, void, undefined> {
    let cursor: string | undefined;
    do {
      const page = await this.list(dir, { cursor, limit: options.pageSize });
      yield* page.entries;
      cursor = page.next_cursor ?? undefined;
    } while (cursor);
  }

  /**
   * A RemoteFile for a regular file of /mnt/files, with a signed link (`expires_in_s`
   * seconds, the server's default 3600). NotFound when missing.
   */
  async download(filePath: string, options: { expires_in_s?: number } = {}): Promise<RemoteFile> {
    return new RemoteFile(this, filePath, await this.sign(filePath, options));
  }

  /** The signed link document alone (`download_url`, `download_path`, `expires_at`). */
  sign(filePath: string, options: { expires_in_s?: number } = {}): Promise<DownloadLink> {
    const body = options.expires_in_s === undefined ? {} : { expires_in_s: options.expires_in_s };
    return this.client.json<DownloadLink>("POST", `${this.route}:sign`, { query: { path: filePath }, json: body });
  }

  /** A file's bytes (no link made), at most `maxBytes` (default: the client's `maxResponseBytes`). */
  async readBytes(filePath: string, options: { maxBytes?: number } = {}): Promise<Buffer> {
    return (await this.client.request("GET", this.route, { query: { path: filePath }, maxBytes: options.maxBytes })).data;
  }

  /** A file's bytes block by block, their count checked against the announced length. */
  async *readChunks(filePath: string): AsyncGenerator<Buffer, void, undefined> {
    const answer = await this.client.open("GET", this.route, { query: { path: filePath } });
    answer.setIdleTimeout(this.client.timeoutMs);
    let n = 0;
    let whole = false;
    try {
      for await (const chunk of answer.body) {
        n += (chunk as Buffer).length;
        yield chunk as Buffer;
      }
      whole = true;
    } finally {
      if (!whole) answer.abandon();
    }
    if (answer.length !== undefined && answer.length !== n) {
      throw new ProtocolError(`${filePath}: ${answer.length} bytes announced, ${n} received`);
    }
  }

  /** Streams a file into `out` (not ended after); the byte count. */
  async readInto(filePath: string, out: Writable): Promise<number> {
    let n = 0;
    for await (const chunk of this.readChunks(filePath)) {
      n += chunk.length;
      if (!out.write(chunk)) await once(out, "drain");
    }
    return n;
  }

  /** Removes a file, an empty directory, or with `recursive` a whole tree; what was removed. */
  async delete(filePath: string, options: { recursive?: boolean } = {}): Promise<string[]> {
    return removedList(await this.client.json("DELETE", this.route,
      { query: { path: filePath, recursive: options.recursive || undefined } }));
  }
}

/**
 * Every `sbx.fs` call's `runAs`: one of the sandbox's `users` whose rights it has instead
 * of `user`'s (what that account may not read or write is PermissionDenied, what it makes
 * is its own); an unknown name is NotFound, naming the accounts there are.
 */
export interface RunAsOption {
  runAs?: string;
}

/**
 * `sbx.fs`: any path of the sandbox's own view (/home/user, /tmp, /mnt/files, read-write
 * bucket mounts; read-only places for reading), with the sandbox user's rights (another
 * account's with `runAs`), never following a symlink (PermissionDenied). Relative paths
 * are under /home/user. The sandbox must be running.
 */
export class Fs {
  private readonly route: string;

  constructor(private readonly client: Client, base: string) {
    this.route = `${base}/fs`;
  }

  async read(filePath: string, options: RunAsOption & { timeoutMs?: number; maxBytes?: number } = {}): Promise<Buffer> {
    const { runAs, ...rest } = options;
    return (await this.client.request("GET", this.route, { query: { path: filePath, run_as: runAs }, ...rest })).data;
  }

  async readText(filePath: string, options: RunAsOption = {}): Promise<string> {
    return (await this.read(filePath, options)).toString("utf8");
  }

  /** Writes a whole file atomically (parents made, 0755); `mode` default 0o644. */
  async write(filePath: string, data: string | Uint8Array | Readable,
    options: RunAsOption & { mode?: number; timeoutMs?: number } = {}): Promise<FsWrite> {
    const headers: Record<string, string> = { "Content-Type": "application/octet-stream" };
    let body: Uint8Array | Readable;
    let hash: Hash | undefined;
    if (typeof data === "string") {
      body = Buffer.from(data, "utf8");
    } else if (data instanceof Uint8Array) {
      body = data;
    } else if (data instanceof Readable) {
      ({ stream: body, hash } = hashing(data));
    } else {
      throw new TypeError("fs.write takes a string, bytes or a readable stream");
    }
    if (body instanceof Uint8Array) headers["Content-Length"] = String(body.byteLength);
    const query = { path: filePath, mode: options.mode === undefined ? undefined : options.mode.toString(8).padStart(4, "0"),
      run_as: options.runAs };
    const doc = await this.client.json<FsWrite>("PUT", this.route, { query, body, headers, timeoutMs: options.timeoutMs });
    const digest = hash ? hash.digest("hex") : sha256(body as Uint8Array);
    if (typeof doc.sha256 === "string" && doc.sha256 !== digest) {
      throw new IntegrityError(`the server's sha-256 of ${doc.path} is not that of the bytes sent`);
    }
    return { ...doc, sha256: digest };
  }

  /**
   * Unpacks a tar or zip archive into the directory `dir` (made if missing) as the
   * sandbox user. The server checks every member first and refuses the whole archive
   * for an absolute path, `..`, a link pointing out, a hard link, a device or FIFO, a
   * duplicate, or more than `max_members` / `max_bytes`; it never writes over an
   * existing file.
   */
  extract(dir: string, archive: Uint8Array | Readable,
    options: RunAsOption & { format?: "tar" | "zip"; max_members?: number; max_bytes?: number; timeoutMs?: number } = {}): Promise<Extracted> {
    const headers: Record<string, string> = { "Content-Type": "application/octet-stream" };
    if (archive instanceof Uint8Array) headers["Content-Length"] = String(archive.byteLength);
    const query = { path: dir, format: options.format ?? "tar", max_members: options.max_members, max_bytes: options.max_bytes,
      run_as: options.runAs };
    return this.client.json<Extracted>("PUT", `${this.route}:extract`, { query, body: archive, headers, timeoutMs: options.timeoutMs });
  }

  /** One page of a directory listing; `next_cursor` continues. */
  async ls(dir: string = WORKSPACE_ROOT, options: RunAsOption & PageOptions = {}): Promise<ListingPage> {
    const doc = await this.client.json<Parameters<typeof listingPage>[0]>("GET", `${this.route}:ls`,
      { query: { path: dir, cursor: options.cursor, limit: options.limit, run_as: options.runAs } });
    return listingPage(doc, dir.startsWith("/") ? dir : path.posix.join(WORKSPACE_ROOT, dir));
  }

  /** Every entry of a directory, page after page. */
  async *iter(dir: string = WORKSPACE_ROOT, options: RunAsOption & { pageSize?: number } = {}): AsyncGenerator<ListingEntry, void, undefined> {
    let cursor: string | undefined;
    do {
      const page = await this.ls(dir, { cursor, limit: options.pageSize, runAs: options.runAs });
      yield* page.entries;
      cursor = page.next_cursor ?? undefined;
    } while (cursor);
  }

  /** Makes a directory (AlreadyExists when it exists, unless `parents`); its absolute path. */
  async mkdir(dir: string, options: RunAsOption & { parents?: boolean } = {}): Promise<string> {
    const doc = await this.client.json<{ path?: string }>("POST", `${this.route}:mkdir`,
      { query: { path: dir, parents: options.parents || undefined, run_as: options.runAs } });
    return typeof doc?.path === "string" ? doc.path : dir;
  }

  /**
   * Removes a file or an empty directory (a tree with `recursive`; a missing path is then
   * no error). Returns what was removed.
   */
  async rm(target: string, options: RunAsOption & { recursive?: boolean } = {}): Promise<string[]> {
    return removedList(await this.client.json("DELETE", this.route,
      { query: { path: target, recursive: options.recursive || undefined, run_as: options.runAs } }));
  }

  /** Type, size, mode and mtime of a path (a last symlink itself, not followed). */
  stat(target: string, options: RunAsOption = {}): Promise<FsStat> {
    return this.client.json<FsStat>("GET", `${this.route}:stat`, { query: { path: target, run_as: options.runAs } });
  }

  async exists(target: string, options: RunAsOption = {}): Promise<boolean> {
    try {
      await this.stat(target, options);
      return true;
    } catch (e) {
      if (e instanceof NotFound && !isUnknownAccount(e, options.runAs)) return false;
      throw e;
    }
  }
}

export interface WorkspaceArchiveOptions {
  /** Bound of each wait for a byte of the answer (default: the client's `timeoutMs`). */
  timeoutMs?: number;
  signal?: AbortSignal;
}

/**
 * The workspace root as one tar archive (`GET`/`PUT .../workspace.tar`, docs/api.md
 * "Workspace archives"): what a sandbox's `workspaceArchive`, `workspaceArchiveBytes`,
 * `saveWorkspaceArchive` and `replaceWorkspace` do.
 */
export class WorkspaceArchive {
  private readonly route: string;

  constructor(private readonly client: Client, base: string) {
    this.route = `${base}/workspace.tar`;
  }

  /**
   * The archive as a stream. The server ends an archive that broke off after its first
   * bytes without the last chunk: the stream then fails (ServerUnreachable), and a
   * consumer that reads it to its end has had the whole archive.
   */
  async stream(options: WorkspaceArchiveOptions = {}): Promise<Readable> {
    const answer = await this.client.open("GET", this.route, options);
    answer.setIdleTimeout(options.timeoutMs ?? this.client.timeoutMs);
    const res = answer.body;
    const out = new PassThrough();
    const cut = () => new ServerUnreachable(`the workspace archive from nsbox at ${this.client.where} was cut short`);
    res.on("error", (e) => out.destroy(e instanceof NsboxError || (e as Error).name === "AbortError" ? e : cut()));
    res.on("close", () => {
      if (!res.complete) out.destroy(cut());
    });
    out.on("close", () => {
      if (!res.complete) res.destroy(); // left unread: its connection is dropped, never reused
    });
    res.pipe(out);
    return out;
  }

  /** The whole archive in memory, at most `maxBytes` (default: the client's `maxResponseBytes`). */
  async bytes(options: WorkspaceArchiveOptions & { maxBytes?: number } = {}): Promise<Buffer> {
    return (await this.client.request("GET", this.route, options)).data;
  }

  /** Streams the archive into the file `dest` (mode 0600), whole or not at all; its size. */
  async save(dest: string, options: WorkspaceArchiveOptions & { overwrite?: boolean } = {}): Promise<number> {
    let n = 0;
    await saveWhole(dest, 0o600, !!options.overwrite, async (out) => {
      for await (const chunk of await this.stream(options)) {
        n += (chunk as Buffer).length;
        await out.write(chunk as Buffer);
      }
    });
    return n;
  }

  /**
   * Replaces the running sandbox's workspace root with a tar archive: bytes, a local
   * file (its path), or a stream (sent chunked). The answer comes once the server has
   * checked every member and swapped the new content in (`timeoutMs`, default 10 min).
   */
  async replace(archive: string | Uint8Array | Readable, options: { timeoutMs?: number } = {}): Promise<Extracted> {
    const headers: Record<string, string> = { "Content-Type": "application/x-tar" };
    const timeoutMs = options.timeoutMs ?? Math.max(this.client.timeoutMs, 600_000);
    if (typeof archive === "string") {
      const handle = await fsp.open(archive, "r");
      const stream = handle.createReadStream({ autoClose: false });
      try {
        headers["Content-Length"] = String((await handle.stat()).size);
        return await this.client.json<Extracted>("PUT", this.route, { body: stream, headers, timeoutMs });
      } finally {
        stream.destroy(); // a PUT refused midway leaves it unread: it must not read a closed fd
        await handle.close();
      }
    }
    if (archive instanceof Uint8Array) headers["Content-Length"] = String(archive.byteLength);
    else if (!(archive instanceof Readable)) throw new TypeError("replaceWorkspace takes a local path, bytes or a readable stream");
    return this.client.json<Extracted>("PUT", this.route, { body: archive, headers, timeoutMs });
  }
}
