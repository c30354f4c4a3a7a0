// What the tests of nsbox/agents under the real Agents SDK share: one real nsbox serve per
// describe, and the text a scripted model was given for a tool call.
import assert from "node:assert/strict";
import { after, afterEach, before, describe, test } from "node:test";

import * as nsbox from "nsbox";
import { NsboxSandboxClient } from "nsbox/agents";
import { Server, binary, failIfSandboxesLeft } from "./server.mjs";

/**
 * Registers, in the calling describe, a real `nsbox serve` started before its tests and
 * destroyed after them; `started({server, client, sdkClient})` receives it (`client` the
 * package's Client, to look at the server from outside the SDK). A test that leaves a
 * sandbox behind fails, and the sandbox goes.
 */
export function useNsboxServe(started) {
  let fixture;
  before(async () => {
    const server = new Server();
    fixture = { server };
    await server.start();
    fixture.client = new nsbox.Client({ socket: server.socket, token: server.token, env: {} });
    fixture.sdkClient = new NsboxSandboxClient({ socket: server.socket, token: server.token, env: {} });
    started(fixture);
  });
  after(async () => {
    fixture?.sdkClient?.close();
    fixture?.client?.close();
    await fixture?.server?.destroy();
  });
  afterEach(() => failIfSandboxesLeft(fixture.client));
}

/** The text the model was given for the tool call `callId` in `call`'s input. */
export function toolOutput(call, callId) {
  const item = call.request.input.find((i) => i.callId === callId && /_output$|_result$/.test(i.type));
  assert.ok(item, `no output for ${callId} in the model's input`);
  const out = item.output;
  if (typeof out === "string") return out;
  if (out?.type === "text") return out.text;
  return JSON.stringify(out);
}

/** Each SDK scenario's bound: a real Runner against a real server. */
export const bounded = { timeout: 300_000 };

/**
 * A describe of tests against one real nsbox serve (useNsboxServe; `started` receives it).
 * Without the nsbox binary: a failing test when NSBOX_BIN named one, else the describe is
 * skipped, saying why.
 */
export function describeOnNsboxServe(title, started, body) {
  if (!binary.bin && binary.required) {
    test("the nsbox binary named by NSBOX_BIN is there", () => assert.fail(binary.why));
    return;
  }
  const skip = binary.bin ? false : `SKIP: ${binary.why}`;
  if (skip) console.log(skip);
  describe(title, { skip }, () => {
    useNsboxServe(started);
    body();
  });
}
