/**
 * Processes that outlive a request (docs/semantics.md, "Processes"): started in a
 * sandbox, named by their pid there, read from byte offsets while they run and after.
 *
 * ```ts
 * const pid = await sbx.processes.start("python3 -m http.server 8000");
 * const out = await sbx.processes.read(pid, { waitMs: 2000 });   // what came within 2 s
 * await sbx.processes.kill(pid);
 * ```
 */
import { LineSplitter, parseEventLine } from "./ndjson.js";
import { errorFromDocument } from "./errors.js";
import type { Client } from "./connection.js";
import type { components } from "./generated/openapi.js";
import type { Env } from "./models.js";

export type ProcessStatus = components["schemas"]["ProcessStatus"];

/** What one read gave, and where to go on from. */
export interface ProcessOutput {
  stdout: Buffer;
  stderr: Buffer;
  /** Bytes before the offsets asked for that are kept nowhere any more. */
  skipped: number;
  /** The offsets to read on from. */
  offset: number;
  stderrOffset: number;
  /** "running" or "exited", and the exit code once it exited (128+N for signal N). */
  status: "running" | "exited";
  exitCode: number | null;
}

export interface StartProcess {
  env?: Env;
  /** Absolute (default /home/user). */
  cwd?: string;
  /** On a terminal of the sandbox: one output stream, input as typed. */
  tty?: boolean;
  cols?: number;
  rows?: number;
  /** Runs as this account of the sandbox's (its `users`; default `user`); an unknown one is NotFound. */
  runAs?: string;
}

/** `sandbox.processes`: start, list, read, write, signal, kill. */
export class Processes {
  private readonly base: string;

  constructor(private readonly client: Client, base: string) {
    this.base = `${base}/processes`;
  }

  /** Starts `command` (a bash line, or an argv); its pid in the sandbox, once it runs. */
  async start(command: string | readonly string[], options: StartProcess = {}): Promise<number> {
    const json: components["schemas"]["StartProcess"] =
      typeof command === "string" ? { command } : { argv: [...command] };
    if (options.env !== undefined) json.env = options.env;
    if (options.cwd !== undefined) json.cwd = options.cwd;
    if (options.runAs !== undefined) json.run_as = options.runAs;
    if (options.tty) Object.assign(json, { tty: true, cols: options.cols ?? 80, rows: options.rows ?? 24 });
    return (await this.client.json<components["schemas"]["ProcessStarted"]>("POST", this.base, { json })).pid;
  }

  async list(): Promise<ProcessStatus[]> {
    return (await this.client.json<{ processes: ProcessStatus[] }>("GET", this.base)).processes;
  }

  /**
   * Its output from the offsets: at once with `waitMs` 0 (the default); else what comes
   * within `waitMs`, sooner once it ended.
   */
  async read(pid: number, options: { offset?: number; stderrOffset?: number; waitMs?: number } = {}): Promise<ProcessOutput> {
    const out: ProcessOutput = {
      stdout: Buffer.alloc(0), stderr: Buffer.alloc(0), skipped: 0,
      offset: options.offset ?? 0, stderrOffset: options.stderrOffset ?? 0, status: "running", exitCode: null,
    };
    const waitMs = Math.max(0, options.waitMs ?? 0);
    // The server waits in whole seconds; the client gives up at the window's end (the
    // server sees it leave), keeping what came, whose offsets it counted.
    const deadline = waitMs > 0 ? AbortSignal.timeout(waitMs) : undefined;
    const query = {
      offset: String(out.offset), stderr_offset: String(out.stderrOffset),
      follow: waitMs > 0 ? "true" : "false", timeout_s: String(Math.max(1, Math.ceil(waitMs / 1000))),
    };
    let answer;
    try {
      answer = await this.client.open("GET", `${this.base}/${pid}/output`, { query, headers: { Accept: "application/x-ndjson" }, signal: deadline });
    } catch (e) {
      if (deadline?.aborted) return out;
      throw e;
    }
    const lines = new LineSplitter(this.client.maxResponseBytes);
    const take = (line: Uint8Array): boolean => {  // true at the end event
      const event = parseEventLine(line);
      if (event === undefined || event["type"] === "heartbeat") return false;
      if (event["type"] === "error") throw errorFromDocument(event["error"], 200);
      if (event["type"] === "stdout" || event["type"] === "stderr") {
        const bytes = typeof event["text_b64"] === "string"
          ? Buffer.from(event["text_b64"], "base64") : Buffer.from(String(event["text"] ?? ""), "utf8");
        out.skipped += Number(event["skipped"] ?? 0);
        if (event["type"] === "stdout") {
          out.stdout = Buffer.concat([out.stdout, bytes]);
          out.offset = Number(event["offset"]) + bytes.length;
        } else {
          out.stderr = Buffer.concat([out.stderr, bytes]);
          out.stderrOffset = Number(event["offset"]) + bytes.length;
        }
        return false;
      }
      if (event["type"] === "end") {
        out.status = event["status"] === "exited" ? "exited" : "running";
        out.exitCode = typeof event["exit_code"] === "number" ? event["exit_code"] : null;
        out.offset = Number(event["offset"] ?? out.offset);
        out.stderrOffset = Number(event["stderr_offset"] ?? out.stderrOffset);
        return true;
      }
      return false;
    };
    try {
      for await (const chunk of answer.body) {
        for (const line of lines.push(chunk as Buffer)) if (take(line)) return out;
      }
      take(lines.rest());
    } catch (e) {
      if (!deadline?.aborted) throw e;
    } finally {
      answer.abandon();
    }
    return out;
  }

  /** Input to its stdin (a tty: as typed); `eof` closes its stdin. */
  async write(pid: number, data: string | Uint8Array, options: { eof?: boolean } = {}): Promise<void> {
    const json: Record<string, unknown> = typeof data === "string" ? { data } : { data_b64: Buffer.from(data).toString("base64") };
    if (options.eof) json["eof"] = true;
    await this.client.json("POST", `${this.base}/${pid}/input`, { json });
  }

  /** A signal to its process group ("TERM", "INT", a number...). */
  async signal(pid: number, signal: string | number = "TERM"): Promise<void> {
    await this.client.json("POST", `${this.base}/${pid}/signal`, { json: { signal } });
  }

  /** Kills its process group if it runs (SIGKILL) and forgets it. */
  async kill(pid: number): Promise<void> {
    await this.client.json("DELETE", `${this.base}/${pid}`);
  }
}
