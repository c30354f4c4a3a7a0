/**
 * `nsbox/agents`: nsbox as a sandbox backend of the OpenAI Agents SDK for JavaScript
 * (`@openai/agents` ^0.20, a peer dependency): `NsboxSandboxClient` (backend id `nsbox`)
 * and its `NsboxSandboxSession`. docs/agents-sdk.md says what maps to what, and what
 * nsbox serve does not do yet.
 *
 * ```ts
 * import { Runner, SandboxAgent } from "@openai/agents";
 * import { NsboxSandboxClient } from "nsbox/agents";
 *
 * const result = await new Runner().run(agent, "...", { sandbox: { client: new NsboxSandboxClient() } });
 * ```
 */
export {
  NsboxSandboxClient,
  type NsboxSandboxClientConnection,
  type NsboxSandboxClientOptions,
  type NsboxSandboxSpec,
} from "./agents/client.js";
export { NsboxSandboxSession, type NsboxSandboxSessionState, type NsboxSessionSettings } from "./agents/session.js";
