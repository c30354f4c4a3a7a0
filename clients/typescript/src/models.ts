/**
 * What the server's documents are in TypeScript. The documents' types are those of the
 * server's contract, api/openapi.yaml, generated into ./generated/openapi.ts (`npm run
 * generate`); they keep the API's field names, in requests and answers alike. Results
 * whose output comes as text or base64 (`stdout` / `stdout_b64`) are classes that decode
 * it once; each keeps the whole document in `raw` (v1 documents grow: a field this client
 * does not know yet is still there).
 */
import type { components } from "./generated/openapi.js";

type Schemas = components["schemas"];

/** A sandbox as `nsbox inspect --json` describes it. */
export type SandboxInfo = Schemas["Sandbox"];
/** A sandbox's spec, as `nsbox create`'s flags give it; every field optional. */
export type CreateSandbox = Schemas["CreateSandbox"];
export type SizeTier = Schemas["SizeTier"];
export type AllowList = Schemas["AllowList"];
export type MountRequest = Schemas["MountRequest"];
export type Manifest = Schemas["Manifest"];
export type PackageSources = Schemas["PackageSources"];
export type Env = Schemas["Env"];
/** A snapshot of a sandbox's workspace (`nsbox snapshot ls --json`). */
export type SnapshotInfo = Schemas["Snapshot"];
/** A Composio-shaped session. */
export type SessionInfo = Schemas["Session"];
/** `GET /v1/info`: the server's version and the features it serves. */
export type ServerInfo = Schemas["Info"];
export type ErrorCode = Schemas["ErrorCode"];
/** What an upload made: `path` in the sandbox, `size`, `sha256`. */
export type UploadRecord = Schemas["Upload"];
/** A signed link to a file of /mnt/files that needs no token until `expires_at`. */
export type DownloadLink = Schemas["DownloadLink"];
export type FsStat = Schemas["FsStat"];
export type Extracted = Schemas["Extracted"];
export type DisplayItem = Schemas["DisplayItem"];
export type CellResultDocument = Schemas["CellResult"];
export type CommandResultDocument = Schemas["CommandResult"];
export type PtyOutputDocument = Schemas["PtyOutput"];
export type CellErrorDocument = NonNullable<Schemas["CellResultFields"]["error"]>;
export type ToolEvent = Schemas["ToolEvent"];
export type WorkbenchAnswer = Schemas["WorkbenchAnswer"];

/** One entry of a listing, with its path in the sandbox. */
export type ListingEntry = Schemas["Listing"]["entries"][number] & { path: string };
/** A page of a directory listing; `next_cursor` continues (null on the last page). */
export type ListingPage = Omit<Schemas["Listing"], "entries"> & { entries: ListingEntry[] };

/** What `fs.write` made: `path` (absolute in the sandbox), `size`, and the bytes' sha-256. */
export type FsWrite = Schemas["FsWritten"] & { sha256: string };

type Doc = Record<string, unknown>;

function text(doc: Doc, name: string): string {
  const v = doc[name];
  if (typeof v === "string") return v;
  const b = doc[`${name}_b64`];
  return typeof b === "string" ? Buffer.from(b, "base64").toString("utf8") : "";
}

function bytes(doc: Doc, name: string): Buffer {
  const b = doc[`${name}_b64`];
  if (typeof b === "string") return Buffer.from(b, "base64");
  const v = doc[name];
  return typeof v === "string" ? Buffer.from(v, "utf8") : Buffer.alloc(0);
}

function int(doc: Doc, name: string, fallback = 0): number {
  const v = doc[name];
  return typeof v === "number" && Number.isInteger(v) ? v : fallback;
}

function optString(doc: Doc, name: string): string | undefined {
  const v = doc[name];
  return typeof v === "string" ? v : undefined;
}

function withoutType(doc: Doc): Doc {
  const { type: _type, ...rest } = doc;
  return rest;
}

/** The output counts and the files that keep the whole of a cut stream. */
class OutputCounts {
  readonly stdout_bytes: number;
  readonly stderr_bytes: number;
  readonly stdout_lines: number;
  readonly stderr_lines: number;
  readonly stdout_truncated: boolean;
  readonly stderr_truncated: boolean;
  /** The whole stdout, under /mnt/files, when the inline text was cut. */
  readonly stdout_file_path: string | undefined;
  readonly stderr_file_path: string | undefined;

  constructor(doc: Doc, stdoutLength: number, stderrLength: number) {
    this.stdout_bytes = int(doc, "stdout_bytes", stdoutLength);
    this.stderr_bytes = int(doc, "stderr_bytes", stderrLength);
    this.stdout_lines = int(doc, "stdout_lines");
    this.stderr_lines = int(doc, "stderr_lines");
    this.stdout_truncated = doc["stdout_truncated"] === true;
    this.stderr_truncated = doc["stderr_truncated"] === true;
    this.stdout_file_path = optString(doc, "stdout_file_path");
    this.stderr_file_path = optString(doc, "stderr_file_path");
  }
}

/**
 * The result of a cell (`nsbox exec --json`). `status` is `ok`, `error` (then `error`
 * holds the exception), `timeout`, `interrupted` or `killed` (`reason`: oom, crash,
 * seccomp, restart, protocol); `results` is the text of the last expression (or of
 * `output`), null when there was none; `stdout`/`stderr` the first `output_limit` bytes
 * as text, the whole kept in `stdout_file_path`/`stderr_file_path` when cut.
 */
export class Execution extends OutputCounts {
  readonly raw: CellResultDocument;
  readonly cell: number | undefined;
  readonly status: CellResultDocument["status"];
  readonly reason: string | undefined;
  readonly message: string | undefined;
  readonly results: string | null;
  readonly error: CellErrorDocument | null;
  readonly display: DisplayItem[];
  readonly execution_count: number | null;
  readonly duration_ms: number;
  /** The kernel was restarted and its globals are gone. */
  readonly state_lost: boolean;
  readonly stdout: string;
  readonly stderr: string;
  readonly results_file_path: string | undefined;

  constructor(document: Doc) {
    const doc = withoutType(document);
    const stdout = text(doc, "stdout");
    const stderr = text(doc, "stderr");
    super(doc, Buffer.byteLength(stdout), Buffer.byteLength(stderr));
    this.raw = doc as CellResultDocument;
    this.cell = typeof doc["cell"] === "number" ? doc["cell"] : undefined;
    this.status = (optString(doc, "status") ?? "ok") as CellResultDocument["status"];
    this.reason = optString(doc, "reason");
    this.message = optString(doc, "message");
    const results = doc["results"];
    this.results = typeof results === "string" ? results : results === null || results === undefined ? null : JSON.stringify(results);
    const error = doc["error"];
    this.error = error !== null && typeof error === "object" ? (error as CellErrorDocument) : null;
    this.display = Array.isArray(doc["display"]) ? (doc["display"] as DisplayItem[]) : [];
    this.execution_count = typeof doc["execution_count"] === "number" ? doc["execution_count"] : null;
    this.duration_ms = int(doc, "duration_ms");
    this.state_lost = doc["state_lost"] === true;
    this.stdout = stdout;
    this.stderr = stderr;
    this.results_file_path = optString(doc, "results_file_path");
  }

  /** The result's text (E2B's `execution.text`). */
  get text(): string | null {
    return this.results;
  }

  get ok(): boolean {
    return this.status === "ok";
  }
}

/**
 * The result of a command (`nsbox sh --json`): `exit_code` and the output as bytes (the
 * first MiB of each stream; the whole in `stdout_file_path` when cut). `status` is `ok`;
 * `error` (`reason` exit, not_found 127, not_executable 126); `timeout` (deadline, 124);
 * `killed` (oom, seccomp, signal: then `signal`).
 */
export class CommandResult extends OutputCounts {
  readonly raw: CommandResultDocument;
  readonly status: CommandResultDocument["status"];
  readonly reason: string | undefined;
  readonly message: string | undefined;
  /** -1 when the document has none. */
  readonly exit_code: number;
  readonly signal: number | null;
  readonly duration_ms: number;
  readonly stdout: Buffer;
  readonly stderr: Buffer;

  constructor(document: Doc) {
    const doc = withoutType(document);
    const stdout = bytes(doc, "stdout");
    const stderr = bytes(doc, "stderr");
    super(doc, stdout.length, stderr.length);
    this.raw = doc as CommandResultDocument;
    this.status = (optString(doc, "status") ?? "ok") as CommandResultDocument["status"];
    this.reason = optString(doc, "reason");
    this.message = optString(doc, "message");
    this.exit_code = int(doc, "exit_code", -1);
    this.signal = typeof doc["signal"] === "number" ? doc["signal"] : null;
    this.duration_ms = int(doc, "duration_ms");
    this.stdout = stdout;
    this.stderr = stderr;
  }

  get ok(): boolean {
    return this.status === "ok" && this.exit_code === 0;
  }

  get timedOut(): boolean {
    return this.status === "timeout";
  }

  /** stdout as text (bytes that are not UTF-8 replaced). */
  get stdoutText(): string {
    return this.stdout.toString("utf8");
  }

  get stderrText(): string {
    return this.stderr.toString("utf8");
  }
}

/**
 * What a PTY session printed since the last answer: `data` (bytes), `output` (text;
 * bytes that are not UTF-8 replaced), `exit_code` (null while it runs), `dropped` (bytes
 * lost to the 1 MiB bound on unread output).
 */
export class PtyOutput {
  readonly raw: PtyOutputDocument;
  readonly session_id: number;
  readonly data: Buffer;
  readonly output: string;
  readonly exit_code: number | null;
  readonly dropped: number;

  constructor(document: Doc) {
    this.raw = document as PtyOutputDocument;
    this.session_id = int(document, "session_id");
    this.data = bytes(document, "output");
    this.output = this.data.toString("utf8");
    const code = document["exit_code"];
    this.exit_code = typeof code === "number" && Number.isInteger(code) ? code : null;
    this.dropped = int(document, "dropped");
  }

  get running(): boolean {
    return this.exit_code === null;
  }
}

/** A listing page with each entry's path in the sandbox. */
export function listingPage(document: Schemas["Listing"], directory: string): ListingPage {
  const dir = document.path || directory;
  const prefix = dir === "/" ? "" : dir.replace(/\/+$/, "");
  return {
    ...document,
    path: dir,
    entries: document.entries.map((e) => ({ ...e, path: `${prefix}/${e.name}` })),
  };
}
