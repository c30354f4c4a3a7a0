// The OpenAI Agents SDK (the unmodified @openai/agents from npm) drives a real `nsbox serve`
// through `nsbox/agents`: its Runner runs a SandboxAgent whose model is the SDK's own
// ScriptedModel (no network), and the tools it calls (exec_command, write_stdin,
// apply_patch) reach the sandbox. Tracing goes to a local processor, which is how the
// test sees the SDK's sandbox.* spans; nothing is exported.
import assert from "node:assert/strict";
import crypto from "node:crypto";
import net from "node:net";
import { test } from "node:test";

import { Runner, applyDiff, setTraceProcessors } from "@openai/agents";
import { Manifest, SandboxAgent, file, filesystem, shell } from "@openai/agents/sandbox";
import { ScriptedModel, assistantMessage, functionCall, modelResponder } from "@openai/agents/testing";

import * as nsbox from "nsbox";
import { NsboxSandboxClient } from "nsbox/agents";
import { bounded, describeOnNsboxServe, toolOutput } from "./support/sdk.mjs";


const spans = [];
setTraceProcessors([{
  async onTraceStart() {},
  async onTraceEnd() {},
  async onSpanStart() {},
  async onSpanEnd(span) {
    spans.push(span.spanData);
  },
  async shutdown() {},
  async forceFlush() {},
}]);

function applyPatch(callId, operation) {
  return { type: "apply_patch_call", callId, status: "completed", operation };
}

// A WebSocket echo server of one text frame per connection (RFC 6455, the few bytes it
// needs): Python's standard library has none, and the SDK's tests want one behind a port.
const WS_ECHO = `import base64, hashlib, socket, sys, threading
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
def serve(c):
    head = b""
    while b"\\r\\n\\r\\n" not in head:
        head += c.recv(4096)
    key = [l.split(b":", 1)[1].strip() for l in head.split(b"\\r\\n") if l.lower().startswith(b"sec-websocket-key:")][0]
    accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
    c.sendall(b"HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\nSec-WebSocket-Accept: " + accept + b"\\r\\n\\r\\n")
    frame = c.recv(4096)
    n, mask = frame[1] & 0x7F, frame[2:6]
    text = bytes(b ^ mask[i % 4] for i, b in enumerate(frame[6:6 + n]))
    c.sendall(bytes([0x81, len(text)]) + text)
    c.close()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(8)
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
`;

// One text message through a WebSocket at host:port (a client of the same few bytes:
// Node 20 has no WebSocket client); its echo.
function websocketEcho(host, port, text) {
  return new Promise((resolve, reject) => {
    const key = crypto.randomBytes(16).toString("base64");
    const socket = net.connect(port, host);
    let got = Buffer.alloc(0);
    let upgraded = false;
    socket.setTimeout(10_000, () => socket.destroy(new Error("no WebSocket answer in 10 s")));
    socket.on("error", reject);
    socket.on("close", () => reject(new Error(`closed before the echo: ${got.toString()}`)));
    socket.on("connect", () => socket.write(`GET / HTTP/1.1\r\nHost: ${host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
      `Sec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\n\r\n`));
    socket.on("data", (chunk) => {
      got = Buffer.concat([got, chunk]);
      if (!upgraded) {
        const end = got.indexOf("\r\n\r\n");
        if (end < 0) return;
        const head = got.subarray(0, end).toString();
        const accept = crypto.createHash("sha1").update(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest("base64");
        if (!head.startsWith("HTTP/1.1 101") || !head.includes(accept)) return reject(new Error(`not upgraded: ${head}`));
        upgraded = true;
        got = got.subarray(end + 4);
        const payload = Buffer.from(text);
        const mask = crypto.randomBytes(4);
        socket.write(Buffer.concat([Buffer.from([0x81, 0x80 | payload.length]), mask, payload.map((b, i) => b ^ mask[i % 4])]));
      }
      if (got.length >= 2 && got.length >= 2 + (got[1] & 0x7f)) {
        resolve(got.subarray(2, 2 + (got[1] & 0x7f)).toString());
        socket.destroy();
      }
    });
  });
}

// What `attempt` resolves to once it does (a server inside takes a moment to listen):
// tried for up to 20 s.
async function eventually(attempt) {
  const until = Date.now() + 20_000;
  for (;;) {
    try {
      return await attempt();
    } catch (e) {
      if (Date.now() > until) throw e;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

let server;
let client; // the package's Client, to look at the server from outside the SDK
let sdkClient;

describeOnNsboxServe("the OpenAI Agents SDK on nsbox serve", (started) => ({ server, client, sdkClient } = started), () => {

  test("a SandboxAgent runs commands, a tty command continued by write_stdin, and apply_patch in an nsbox sandbox", bounded, async () => {
    const manifest = new Manifest({ entries: { "notes/hello.txt": file({ content: "hi from the manifest\n" }) } });
    const session = await sdkClient.create({ manifest });
    try {
      // The SDK's default root, /workspace, is the sandbox's workspace root as written.
      assert.equal(session.state.manifest.root, "/workspace");
      const createDiff = "+step one\n+step two\n";
      const updateDiff = "@@\n step one\n-step two\n+step 2\n";
      const model = new ScriptedModel([
        [functionCall("exec_command", { cmd: "pwd; cat notes/hello.txt; echo to-stderr >&2; id -u; exit 3" }, { callId: "c1" })],
        [functionCall("exec_command", { cmd: "printf 'name? '; read n; echo hello-$n", tty: true, yield_time_ms: 1500 }, { callId: "c2" })],
        modelResponder((call) => {
          const id = /Process running with session ID (\d+)/.exec(toolOutput(call, "c2"))?.[1];
          assert.ok(id, `the tty command is not left running: ${toolOutput(call, "c2")}`);
          return [functionCall("write_stdin", { session_id: Number(id), chars: "nsbox\n", yield_time_ms: 3000 }, { callId: "c3" })];
        }),
        [applyPatch("c4", { type: "create_file", path: "notes/plan.md", diff: createDiff })],
        [applyPatch("c5", { type: "update_file", path: "/workspace/notes/plan.md", diff: updateDiff })],
        [applyPatch("c6", { type: "delete_file", path: "notes/hello.txt" })],
        [functionCall("exec_command", { cmd: "ls; cat plan.md", workdir: "notes", login: false }, { callId: "c7" })],
        [assistantMessage("done")],
      ]);
      const agent = new SandboxAgent({ name: "nsbox-worker", model, instructions: "Work in the sandbox.", capabilities: [shell(), filesystem()] });
      const result = await new Runner().run(agent, "Do the work.", { sandbox: { session } });
      assert.equal(result.finalOutput, "done");
      assert.equal(model.remainingSteps, 0);

      const c1 = toolOutput(model.calls[1], "c1");
      assert.match(c1, /Process exited with code 3/);
      assert.match(c1, /\/workspace\nhi from the manifest\n/);
      assert.match(c1, /to-stderr/);
      assert.doesNotMatch(c1, /^0$/m, "the agent's commands do not run as root");

      const c3 = toolOutput(model.calls[3], "c3");
      assert.match(c3, /hello-nsbox/);
      assert.match(c3, /Process exited with code 0/);

      for (const [n, id] of [[4, "c4"], [5, "c5"], [6, "c6"]]) {
        const out = model.calls[n].request.input.find((i) => i.callId === id && i.type === "apply_patch_call_output");
        assert.equal(out?.status, "completed", `${id}: ${JSON.stringify(out)}`);
      }
      const c7 = toolOutput(model.calls[7], "c7");
      assert.match(c7, /Output:\nplan\.md\nstep one\nstep 2/);
      assert.doesNotMatch(c7, /hello\.txt/);

      // Read back through the session, as the host sees the workspace.
      // The bytes are the SDK's own applyDiff's (as on its other backends).
      assert.equal(Buffer.from(await session.readFile({ path: "notes/plan.md" })).toString(),
        applyDiff(applyDiff("", createDiff, "create"), updateDiff));
      assert.equal(await session.pathExists("notes/hello.txt"), false);
      assert.equal(await session.directoryExists("notes"), true);
      assert.deepEqual((await session.listDir({ path: "notes" })).map((e) => [e.name, e.type]), [["plan.md", "file"]]);

      const kinds = new Set(spans.map((s) => s.name ?? s.type));
      for (const name of ["sandbox.exec", "sandbox.write_stdin"]) assert.ok(kinds.has(name), `no ${name} span: ${[...kinds].join(" ")}`);
    } finally {
      await session.delete();
    }
  });

  test("a session the Runner creates from the client is removed when the run ends", bounded, async () => {
    const model = new ScriptedModel([
      [functionCall("exec_command", { cmd: "echo made-by-the-runner > mark.txt && cat mark.txt" }, { callId: "c1" })],
      [assistantMessage("ok")],
    ]);
    const agent = new SandboxAgent({ name: "owner", model, capabilities: [shell()] });
    const result = await new Runner().run(agent, "go", { sandbox: { client: sdkClient } });
    assert.equal(result.finalOutput, "ok");
    assert.match(toolOutput(model.calls[1], "c1"), /made-by-the-runner/);
    assert.deepEqual(await nsbox.Sandbox.list({ client }), []);
  });

  test("a state serialized, then resumed by a new client, reattaches the live sandbox; it names no credential", bounded, async () => {
    const session = await sdkClient.create({ manifest: new Manifest({ entries: { "a.txt": file({ content: "kept\n" }) } }) });
    try {
      const record = JSON.parse(JSON.stringify(await sdkClient.serializeSessionState(session.state)));
      const text = JSON.stringify(record);
      assert.ok(!text.includes(server.token), "the token is in the serialized state");
      assert.ok(!text.includes("token"), `a token field is in the serialized state: ${text}`);
      assert.deepEqual(Object.keys(record).sort(), ["manifest", "sandboxId", "server"]);
      assert.equal(record.server, `unix:${server.socket}`);

      const other = new NsboxSandboxClient({ socket: server.socket, token: server.token, env: {} });
      try {
        const resumed = await other.resume(await other.deserializeSessionState(record));
        assert.equal(resumed.state.sandboxId, session.state.sandboxId);
        assert.equal(await resumed.running(), true);
        assert.match(await resumed.execCommand({ cmd: "cat a.txt" }), /kept/);
      } finally {
        other.close();
      }
      const elsewhere = new NsboxSandboxClient({ url: server.url, token: server.token, env: {} });
      try {
        await assert.rejects(elsewhere.resume(await elsewhere.deserializeSessionState(record)), /names the server unix:/);
      } finally {
        elsewhere.close();
      }
    } finally {
      await session.delete();
    }
  });

  test("an exposed port answers a plain HTTP client on the host, and a WebSocket echo, without the token", bounded, async () => {
    const session = await sdkClient.create({
      manifest: new Manifest({ entries: { "site/page.txt": file({ content: "from inside\n" }), "ws.py": file({ content: WS_ECHO }) } }),
    });
    try {
      await session.execCommand({ cmd: "python3 -m http.server 8000 --bind 127.0.0.1 --directory site", tty: true, yieldTimeMs: 200 });
      await session.execCommand({ cmd: "python3 ws.py 8001", tty: true, yieldTimeMs: 200 });
      const http = await session.resolveExposedPort(8000);
      assert.equal(http.host, "127.0.0.1");
      assert.equal(http.tls, false);
      assert.deepEqual(await session.resolveExposedPort(8000), http, "asked again: the same forward");
      const page = await eventually(async () => (await fetch(`http://${http.host}:${http.port}/page.txt`)).text());
      assert.equal(page, "from inside\n");

      const ws = await session.resolveExposedPort(8001);
      assert.equal(await eventually(() => websocketEcho(ws.host, ws.port, "hello over ws")), "hello over ws");
      assert.deepEqual(Object.keys(session.state.exposedPorts ?? {}).sort(), ["8000", "8001"]);
    } finally {
      await session.delete();
    }
  });

  test("a command that outlives its yield_time_ms goes on as a process, continued by write_stdin, tty or not", bounded, async () => {
    const session = await sdkClient.create();
    try {
      const first = await session.execCommand({ cmd: "echo first; read answer; echo got-$answer; sleep 1; echo last", yieldTimeMs: 500 });
      assert.match(first, /first/);
      const id = Number(/Process running with session ID (\d+)/.exec(first)?.[1]);
      assert.ok(id > 0, first);
      const rest = await session.writeStdin({ sessionId: id, chars: "42\n", yieldTimeMs: 10_000 });
      assert.match(rest, /got-42\s+last/);
      assert.match(rest, /Process exited with code 0/);
      assert.doesNotMatch(rest, /first/, "output already given is not given again");
      // Ended and read: the process is gone from the sandbox's table, its id unknown.
      assert.deepEqual((await client.json("GET", `/v1/sandboxes/${session.state.sandboxId}/processes`)).processes, []);
      assert.match(await session.writeStdin({ sessionId: id, chars: "" }), /session not found/);
      // Another that is still running when the session stops is killed.
      const long = await session.execCommand({ cmd: "sleep 60", yieldTimeMs: 200 });
      assert.match(long, /Process running with session ID/);
      await session.stop();
      assert.deepEqual((await client.json("GET", `/v1/sandboxes/${session.state.sandboxId}/processes`)).processes, []);
    } finally {
      await session.delete();
    }
  });

  test("what nsbox serve cannot do yet fails naming the capability and issue 34", bounded, async () => {
    // A root the server cannot make a workspace of is its refusal, naming the rule.
    await assert.rejects(sdkClient.create({ manifest: new Manifest({ root: "/srv/app" }) }),
      /workspace root "\/srv\/app" is in \/srv, which belongs to the sandbox's system/);
    await assert.rejects(sdkClient.create({ manifest: new Manifest({ entries: { d: { type: "box_mount", path: "/shared" } } }) }),
      /box_mount.*issue 34/s);
    assert.deepEqual(await nsbox.Sandbox.list({ client }), [], "a refused manifest made a sandbox");
    const session = await sdkClient.create();
    try {
      // An account the sandbox was not made with is the server's NotFound, naming it.
      await assert.rejects(session.execCommand({ cmd: "id", runAs: "alice" }), (e) => e instanceof nsbox.NotFound && /alice/.test(e.message));
      // A tty command is the way to keep one running: it is continued, then interrupted.
      const started = await session.execCommand({ cmd: "sleep 30; echo never", tty: true, yieldTimeMs: 300 });
      const id = Number(/session ID (\d+)/.exec(started)?.[1]);
      assert.ok(id > 0, started);
      const stopped = await session.writeStdin({ sessionId: id, chars: "\u0003", yieldTimeMs: 3000 });
      assert.match(stopped, /Process exited with code/);
      assert.doesNotMatch(stopped, /never/);
    } finally {
      await session.delete();
    }
  });
});
