/**
 * Port forwards (docs/semantics.md, "Ports"): a sandbox's 127.0.0.1:PORT reached at a
 * loopback port of the server's machine, with no token.
 *
 * ```ts
 * await sbx.processes ... // a server listening on 8000 inside
 * const forward = await sbx.ports.expose(8000);
 * await fetch(`http://${forward.host}:${forward.host_port}/`);
 * ```
 */
import type { Client } from "./connection.js";
import type { components } from "./generated/openapi.js";

/** `port` inside the sandbox, reached at `host`:`host_port`. */
export type PortForward = components["schemas"]["PortForward"];

/** `sandbox.ports`: expose, list, close. */
export class Ports {
  private readonly base: string;

  constructor(private readonly client: Client, base: string) {
    this.base = `${base}/ports`;
  }

  /**
   * The forward of `port` (made now, or the one already there). `host`: a loopback
   * address of the server's machine (default 127.0.0.1); `hostPort` 0 (the default): a
   * free one.
   */
  expose(port: number, options: { host?: string; hostPort?: number } = {}): Promise<PortForward> {
    const json: components["schemas"]["OpenPort"] = { port };
    if (options.host !== undefined) json.host = options.host;
    if (options.hostPort) json.host_port = options.hostPort;
    return this.client.json<PortForward>("POST", this.base, { json });
  }

  async list(): Promise<PortForward[]> {
    return (await this.client.json<components["schemas"]["PortList"]>("GET", this.base)).ports;
  }

  /** Stops forwarding `port` ({@link NotFound} when it is not); connections made go on. */
  async close(port: number): Promise<void> {
    await this.client.json("DELETE", `${this.base}/${port}`);
  }
}
