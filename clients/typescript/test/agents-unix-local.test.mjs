// The same scripted SandboxAgent on nsbox and on the SDK's own Unix-local client (which
// runs commands as this user on this host): the agent's work gives the same tool outputs
// (modulo the workspace's path and the SDK's per-call ids and timings), and the isolation
// checks that Unix-local fails pass on nsbox: a file of the host, a server on the host's
// loopback and a process of the host are out of the agent's reach.
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as http from "node:http";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";

import { Runner, setTracingDisabled } from "@openai/agents";
import { Manifest, SandboxAgent, file, filesystem, shell } from "@openai/agents/sandbox";
import { UnixLocalSandboxClient } from "@openai/agents/sandbox/local";
import { ScriptedModel, assistantMessage, functionCall } from "@openai/agents/testing";

import { bounded, describeOnNsboxServe, toolOutput } from "./support/sdk.mjs";

setTracingDisabled(true);

// The work: the same on both, its outputs compared.
const WORK = [
  "pwd",
  "cat notes/hello.txt; printf '%s' made > out.txt; ls; wc -c out.txt",
  "python3 -c 'print(sum(range(10)))'; echo to-stderr >&2; exit 3",
];

// What the SDK's answer says, without what differs by call (its chunk id, its wall time)
// and with the workspace's path as ROOT.
function normalized(text, root) {
  return text.split("\n").filter((l) => !/^(Chunk ID|Wall time|Original token count):/.test(l)).join("\n").replaceAll(root, "ROOT");
}

async function runScenario(session, checks) {
  const calls = [...WORK, ...checks].map((cmd, i) => [functionCall("exec_command", { cmd }, { callId: `c${i}` })]);
  const model = new ScriptedModel([...calls, [assistantMessage("done")]]);
  const agent = new SandboxAgent({ name: "same-work", model, instructions: "Do the work.", capabilities: [shell(), filesystem()] });
  const result = await new Runner().run(agent, "Go.", { sandbox: { session }, maxTurns: calls.length + 5 });
  assert.equal(result.finalOutput, "done");
  return calls.map((_, i) => toolOutput(model.calls[i + 1], `c${i}`));
}

let server;
let client; // the package's Client, to look at the server from outside the SDK
let sdkClient;

describeOnNsboxServe("the same agent on nsbox and on the SDK's Unix-local client", (started) => ({ server, client, sdkClient } = started), () => {

  test("the same work gives the same outputs, and the host's file, loopback and processes are out of reach on nsbox only", bounded, async () => {
    const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "nsbox-test-unix-local-"));
    const secret = path.join(scratch, "host-secret.txt");
    fs.writeFileSync(secret, "host-only\n");
    const hostServer = http.createServer((req, res) => res.end("host-loopback\n"));
    await new Promise((resolve) => hostServer.listen(0, "127.0.0.1", resolve));
    const port = hostServer.address().port;
    // Each prints one word: what it reached, or that it could not.
    const checks = [
      `cat ${secret} 2>/dev/null || echo no-host-file`,
      `python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:${port}/", timeout=3).read().decode().strip())' 2>/dev/null || echo no-host-loopback`,
      `kill -0 ${process.pid} 2>/dev/null && echo host-process-visible || echo no-host-process`,
    ];
    const manifest = () => new Manifest({ entries: { "notes/hello.txt": file({ content: "hello from the manifest\n" }) } });
    const unixLocal = new UnixLocalSandboxClient({ workspaceBaseDir: scratch });
    const local = await unixLocal.create({ manifest: manifest() });
    const ours = await sdkClient.create({ manifest: manifest() });
    try {
      const onLocal = await runScenario(local, checks);
      const onNsbox = await runScenario(ours, checks);
      const localRoot = onLocal[0].match(/Output:\n(.*)/)?.[1];
      assert.ok(localRoot, onLocal[0]);
      for (let i = 0; i < WORK.length; i++) {
        assert.equal(normalized(onNsbox[i], "/workspace"), normalized(onLocal[i], localRoot), `the outputs of "${WORK[i]}" differ`);
      }
      const last = (out) => out.trim().split("\n").pop();
      const [file_, loopback, proc] = onLocal.slice(WORK.length).map(last);
      // Unix-local isolates nothing: the agent reaches all three.
      assert.deepEqual([file_, loopback, proc], ["host-only", "host-loopback", "host-process-visible"]);
      assert.deepEqual(onNsbox.slice(WORK.length).map(last), ["no-host-file", "no-host-loopback", "no-host-process"]);
    } finally {
      await local.delete?.();
      await ours.delete();
      hostServer.close();
      fs.rmSync(scratch, { recursive: true, force: true });
    }
  });
});
