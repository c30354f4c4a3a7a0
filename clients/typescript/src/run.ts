/** Cells and commands: one document, or a stream of NDJSON events to callbacks. */
import type { Client, StreamEvent } from "./connection.js";
import { ProtocolError } from "./errors.js";
import { CommandResult, Execution, type DisplayItem } from "./models.js";

export type TextCallback = (text: string) => unknown;
export type ProgressCallback = (step: string, metric: string | null) => unknown;
export type DisplayCallback = (item: DisplayItem) => unknown;

/** Options of `runCode`: the server's fields in its spelling, the client's own in camelCase. */
export interface RunCodeOptions {
  /** The cell's deadline in seconds (the server's default 180 s). */
  timeout_s?: number;
  /** Bytes per stream kept inline in the result (the server's default 64 KiB). */
  output_limit?: number;
  /** Output text as it is printed. */
  onStdout?: TextCallback;
  onStderr?: TextCallback;
  /** Each `set_progress(step, metric)` of the cell. */
  onProgress?: ProgressCallback;
  /** Each figure the cell shows. */
  onDisplay?: DisplayCallback;
  /** Stream the answer (default: when a callback is given). */
  stream?: boolean;
  /** Bound of the wait for the answer to begin (default: the deadline plus 60 s). */
  requestTimeoutMs?: number;
  signal?: AbortSignal;
}

export interface RunCommandOptions {
  /** The deadline in seconds (the server's default 180 s): then its process group is killed. */
  timeout_s?: number;
  env?: Record<string, string>;
  /** Absolute in the sandbox (default /home/user). */
  cwd?: string;
  /** Written to its standard input (else it reads /dev/null). */
  stdin?: string | Uint8Array;
  /** Runs as this account of the sandbox's (its `users`; default `user`); an unknown one is NotFound. */
  runAs?: string;
  onStdout?: TextCallback;
  onStderr?: TextCallback;
  stream?: boolean;
  requestTimeoutMs?: number;
  signal?: AbortSignal;
}

// The server's own default deadline of cells and commands.
const DEFAULT_RUN_TIMEOUT_S = 180;
// How long past a deadline an answer may take (the watchdog interrupts, then restarts the
// kernel; the answer follows).
const RUN_GRACE_S = 60;

const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

/** `name` when the bytes are UTF-8 text, else `name_b64`. */
function bytesField(body: Record<string, unknown>, name: string, value: string | Uint8Array): void {
  if (typeof value === "string") {
    body[name] = value;
    return;
  }
  try {
    body[name] = strictUtf8.decode(value);
  } catch {
    body[`${name}_b64`] = Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString("base64");
  }
}

function eventText(event: StreamEvent): string {
  if (typeof event["text"] === "string") return event["text"];
  const b64 = event["text_b64"];
  return typeof b64 === "string" ? Buffer.from(b64, "base64").toString("utf8") : "";
}

function runWaitMs(timeoutS: number | undefined, requestTimeoutMs: number | undefined): number {
  if (requestTimeoutMs !== undefined) return requestTimeoutMs;
  return ((timeoutS ?? DEFAULT_RUN_TIMEOUT_S) + RUN_GRACE_S) * 1000;
}

type Handlers = Partial<Record<string, (event: StreamEvent) => unknown>>;

/** Cells and commands of one sandbox (or one session's sandbox), at `base`. */
export class Runner {
  constructor(private readonly client: Client, private readonly base: string) {}

  async runCode(code: string | Uint8Array, options: RunCodeOptions = {}): Promise<Execution> {
    const body: Record<string, unknown> = {};
    bytesField(body, "code", code);
    if (options.timeout_s !== undefined) body["timeout_s"] = options.timeout_s;
    if (options.output_limit !== undefined) body["output_limit"] = options.output_limit;
    const handlers: Handlers = {};
    const { onStdout, onStderr, onProgress, onDisplay } = options;
    if (onStdout) handlers["stdout"] = (e) => onStdout(eventText(e));
    if (onStderr) handlers["stderr"] = (e) => onStderr(eventText(e));
    if (onProgress) {
      handlers["progress"] = (e) => onProgress(String(e["step"] ?? ""), typeof e["metric"] === "string" ? e["metric"] : null);
    }
    if (onDisplay) {
      handlers["display"] = (e) => (e["item"] !== null && typeof e["item"] === "object" ? onDisplay(e["item"] as DisplayItem) : undefined);
    }
    // A client that leaves the stream leaves the cell running (its state is kept).
    return this.post("cells", body, runWaitMs(options.timeout_s, options.requestTimeoutMs), options, handlers,
      (doc) => new Execution(doc));
  }

  async runCommand(cmd: string | readonly string[], options: RunCommandOptions = {}): Promise<CommandResult> {
    const body: Record<string, unknown> = {};
    if (typeof cmd === "string") {
      body["command"] = cmd;
    } else {
      if (cmd.length === 0) throw new TypeError("an empty argv");
      body["argv"] = cmd.map(String);
    }
    if (options.timeout_s !== undefined) body["timeout_s"] = options.timeout_s;
    if (options.env !== undefined) body["env"] = Object.fromEntries(Object.entries(options.env).map(([k, v]) => [k, String(v)]));
    if (options.cwd !== undefined) body["cwd"] = options.cwd;
    if (options.stdin !== undefined) bytesField(body, "stdin", options.stdin);
    if (options.runAs !== undefined) body["run_as"] = options.runAs;
    const handlers: Handlers = {};
    const { onStdout, onStderr } = options;
    if (onStdout) handlers["stdout"] = (e) => onStdout(eventText(e));
    if (onStderr) handlers["stderr"] = (e) => onStderr(eventText(e));
    // A client that leaves the stream has the server kill the command.
    return this.post("commands", body, runWaitMs(options.timeout_s, options.requestTimeoutMs), options, handlers,
      (doc) => new CommandResult(doc));
  }

  /**
   * POSTs to `base/what` (cells, commands): the result document, or (with `stream`, by
   * default when there are handlers) the NDJSON events, each to `handlers[type]`, until
   * the result. A handler that throws leaves the stream (the connection is dropped).
   */
  private async post<T>(what: string, body: Record<string, unknown>, waitMs: number,
    options: { stream?: boolean; signal?: AbortSignal }, handlers: Handlers,
    result: (doc: Record<string, unknown>) => T): Promise<T> {
    const path = `${this.base}/${what}`;
    const stream = options.stream ?? Object.keys(handlers).length > 0;
    if (!stream) {
      return result(await this.client.json<Record<string, unknown>>("POST", path,
        { json: body, timeoutMs: waitMs, signal: options.signal }));
    }
    for await (const event of this.client.events(path, body, { firstTimeoutMs: waitMs, signal: options.signal })) {
      const kind = event.type;
      if (kind === "result") return result(event);
      const handler = typeof kind === "string" ? handlers[kind] : undefined;
      if (handler) await handler(event);
    }
    throw new ProtocolError(`the ${what.slice(0, -1)}'s stream ended without a result`);
  }
}

/** `sbx.commands.run(...)`: the agent's bash tool. */
export class Commands {
  constructor(private readonly runner: Runner) {}

  /**
   * Runs a command in the sandbox and returns its result (a non-zero exit or a deadline
   * is a result, not an error). A string runs `/bin/bash -c cmd`; an array runs that
   * program (found on PATH) with those arguments. `onStdout`/`onStderr` receive the
   * output as text while it runs (the result keeps the exact bytes).
   */
  run(cmd: string | readonly string[], options: RunCommandOptions = {}): Promise<CommandResult> {
    return this.runner.runCommand(cmd, options);
  }
}
