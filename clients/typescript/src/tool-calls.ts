/**
 * Serving a sandbox's tool calls from this process: the tool bridge's callback backend
 * (`tools: {backend: "callback"}`), so that a framework answers `run_composio_tool` and
 * the other helpers from its own code, with its own credentials (docs/tools.md).
 *
 * ```ts
 * const sbx = await Sandbox.create({ tools: { backend: "callback" } });
 * const server = await sbx.onToolCall((helper, args) => ({ echo: args }));
 * await sbx.runCode('run_composio_tool("ANY", {"x": 1})');   // -> ({'echo': {...}}, None)
 * await server.stop();
 * ```
 */
import type { Client, OpenResponse } from "./connection.js";
import { NsboxError, ProtocolError, errorFromDocument } from "./errors.js";
import { LineSplitter, parseEventLine } from "./ndjson.js";
import { segment } from "./connection.js";

/** Answers one call: `helper` (`run_tool`, `invoke_llm`, `web_search`, `proxy_execute`) and its `args`. */
export type ToolHandler = (helper: string, args: Record<string, unknown>) => unknown;

export interface ToolCallOptions {
  /** How many calls are answered at once (default 16); more wait their turn. */
  concurrency?: number;
}

/**
 * Receives the sandbox's tool calls on `GET .../events` and posts each answer to
 * `.../tool_calls/{call_id}`. The handler's value (JSON) is the call's result; a thrown
 * error becomes the call's error (`Name: message`). `stop()` ends it; `error` says why it
 * ended on its own, and `done` settles when it has.
 */
export class ToolCallServer {
  /** Why the stream ended without `stop()` (undefined while it runs or after `stop()`). */
  error: unknown;
  /** Settles when the stream has ended (never rejects). */
  readonly done: Promise<void>;
  private answer: OpenResponse | undefined;
  private stopped = false;
  private active = 0;
  private readonly waiting: Array<() => void> = [];
  private readonly inFlight = new Set<Promise<void>>();
  private readonly concurrency: number;

  private constructor(private readonly client: Client, private readonly base: string,
    private readonly handler: ToolHandler, options: ToolCallOptions, subscribed: (error?: unknown) => void) {
    this.concurrency = Math.max(1, options.concurrency ?? 16);
    this.done = this.serve(subscribed);
  }

  /** Starts serving; resolves once the sandbox sends its calls here (they go nowhere before). */
  static start(client: Client, base: string, handler: ToolHandler, options: ToolCallOptions = {}): Promise<ToolCallServer> {
    return new Promise((resolve, reject) => {
      const server: ToolCallServer = new ToolCallServer(client, base, handler, options, (error) => {
        if (error === undefined) resolve(server);
        else reject(error);
      });
    });
  }

  /** Stops receiving calls; resolves when the calls being answered have been. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.answer?.abandon();
    await this.done;
    while (this.inFlight.size) await Promise.all(this.inFlight);
  }

  private async serve(subscribed: (error?: unknown) => void): Promise<void> {
    let isSubscribed = false;
    try {
      this.answer = await this.client.open("GET", `${this.base}/events`, { headers: { Accept: "application/x-ndjson" } });
      if (this.stopped) {
        this.answer.abandon();
        return;
      }
      this.answer.setIdleTimeout(this.client.streamIdleTimeoutMs);
      const lines = new LineSplitter(this.client.maxResponseBytes);
      for await (const chunk of this.answer.body) {
        for (const line of lines.push(chunk as Buffer)) {
          const event = parseEventLine(line);
          if (event === undefined) continue;
          if (event["type"] === "subscribed" && !isSubscribed) {
            isSubscribed = true;
            subscribed();
          } else if (event["type"] === "tool_call") {
            this.schedule(event);
          } else if (event["type"] === "error") {
            throw errorFromDocument(event["error"], 200);
          }
        }
      }
      if (!this.stopped) throw new ProtocolError("the tool-call stream ended");
    } catch (e) {
      if (!this.stopped) this.error = e;
    } finally {
      if (!isSubscribed) subscribed(this.error ?? new ProtocolError("the tool-call stream ended before it was subscribed"));
    }
  }

  private schedule(event: Record<string, unknown>): void {
    const job = (async () => {
      if (this.active >= this.concurrency) await new Promise<void>((go) => this.waiting.push(go));
      this.active++;
      try {
        await this.reply(event);
      } finally {
        this.active--;
        this.waiting.shift()?.();
      }
    })();
    this.inFlight.add(job);
    void job.finally(() => this.inFlight.delete(job));
  }

  private async reply(event: Record<string, unknown>): Promise<void> {
    const callId = String(event["call_id"] ?? "");
    const args = event["args"] !== null && typeof event["args"] === "object" && !Array.isArray(event["args"])
      ? (event["args"] as Record<string, unknown>) : {};
    let result: unknown = null;
    let error: string | null = null;
    try {
      result = (await this.handler(String(event["helper"] ?? ""), args)) ?? null;
    } catch (e) {
      error = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
    }
    try {
      await this.client.json("POST", `${this.base}/tool_calls/${segment(callId)}`, { json: { result, error } });
    } catch (e) {
      // An nsbox error here is a call answered too late (timed out, or abandoned at the
      // cell's deadline): the sandbox has moved on. Anything else is kept for the owner.
      if (!(e instanceof NsboxError)) this.error ??= e;
    }
  }
}
