/**
 * nsbox: local sandboxes for agent-written code, from TypeScript and JavaScript.
 *
 * The client of `nsbox serve` (docs/api.md), Node's standard library only, the twin of
 * the Python client (clients/python):
 *
 * - {@link Sandbox}: create, connect, list; `runCode` (a stateful Python kernel, its
 *   output streamed to callbacks), `commands.run` (bash), `files` (the persistent
 *   /mnt/files), `fs` (any path of the sandbox's view), terminals, snapshots, tool
 *   calls, `setTtl`, `resize`, `stop`/`start`, `remove`.
 * - {@link Session}: Composio's shape, a session whose sandbox is made on first use.
 * - {@link Client}: the connection (options, or NSBOX_URL / NSBOX_TOKEN / NSBOX_SOCKET).
 *
 * Errors are `NsboxError` subclasses by the API's code. The API's documents are typed
 * from api/openapi.yaml (`components`, `paths`, `operations` are the generated types).
 */
export {
  Client,
  OpenResponse,
  Response,
  DEFAULT_MAX_RESPONSE_BYTES,
  DEFAULT_STREAM_IDLE_TIMEOUT_MS,
  DEFAULT_TIMEOUT_MS,
  defaultSocketPath,
  segment,
  target,
  tokenFileForSocket,
  type Body,
  type ConnectionOptions,
  type EventsOptions,
  type Query,
  type QueryValue,
  type RequestOptions,
  type StreamEvent,
} from "./connection.js";
export * from "./errors.js";
export { Files, Fs, RemoteFile, FILES_ROOT, WORKSPACE_ROOT, type PageOptions, type RunAsOption } from "./files.js";
export * from "./models.js";
export { LineSplitter, parseEventLine } from "./ndjson.js";
export {
  Commands,
  type DisplayCallback,
  type ProgressCallback,
  type RunCodeOptions,
  type RunCommandOptions,
  type TextCallback,
} from "./run.js";
export { Ports, type PortForward } from "./ports.js";
export { Processes, type ProcessOutput, type ProcessStatus, type StartProcess } from "./processes.js";
export { Sandbox, Session, makeClient, type ClientOptions, type CreateSession } from "./sandbox.js";
export { ToolCallServer, type ToolCallOptions, type ToolHandler } from "./tool-calls.js";
export type { components, operations, paths } from "./generated/openapi.js";
export { VERSION } from "./version.js";
