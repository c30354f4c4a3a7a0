// The client over HTTP against a stand-in server on a unix socket (no nsbox needed):
// error answers, bounded reads, streams cut into odd pieces, a server that is not there
// or does not answer, and the results' decoding.
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as http from "node:http";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, test } from "node:test";

import * as nsbox from "nsbox";

let dir;
let socket;
let server;
const routes = new Map(); // "METHOD /path" -> (req, res, body) => void
const seen = [];

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "nsbox-ts-http-"));
  socket = path.join(dir, "api.sock");
  server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      seen.push({ method: req.method, url: req.url, headers: req.headers, body });
      const route = routes.get(`${req.method} ${req.url.split("?")[0]}`);
      if (route) route(req, res, body);
      else reply(res, 404, { error: { code: "not_found", message: "no endpoint", hint: "see docs/api.md" } });
    });
  });
  await new Promise((resolve) => server.listen(socket, resolve));
});

after(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  fs.rmSync(dir, { recursive: true, force: true });
});

function reply(res, status, doc) {
  const data = Buffer.from(JSON.stringify(doc));
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": data.length });
  res.end(data);
}

/** Writes `text` in pieces of `size` bytes, each in its own write after the last one left. */
async function dribble(res, text, size) {
  const bytes = Buffer.from(text, "utf8");
  for (let i = 0; i < bytes.length; i += size) {
    await new Promise((resolve) => res.write(bytes.subarray(i, i + size), resolve));
  }
  res.end();
}

const client = (options = {}) => new nsbox.Client({ socket, token: "tok", env: {}, ...options });

test("an error answer is thrown as its class, and the token is sent", async () => {
  await assert.rejects(client().json("GET", "/v1/sandboxes/nope"),
    (e) => e instanceof nsbox.NotFound && e.status === 404 && e.hint === "see docs/api.md");
  assert.equal(seen.at(-1).headers["authorization"], "Bearer tok");
  assert.match(seen.at(-1).headers["user-agent"], /^nsbox-typescript\//);
});

test("query values are encoded, null and undefined left out, booleans spelled true/false", async () => {
  routes.set("GET /q", (req, res) => reply(res, 200, { url: req.url }));
  const doc = await client().json("GET", "/q", { query: { path: "a b/ü&c", recursive: true, cursor: undefined, limit: null } });
  assert.equal(doc.url, "/q?path=a%20b%2F%C3%BC%26c&recursive=true");
});

test("a body larger than maxResponseBytes is refused, not read into memory", async () => {
  routes.set("GET /big", (req, res) => {
    res.writeHead(200, { "Content-Type": "application/octet-stream" });
    res.end(Buffer.alloc(64 * 1024, 1));
  });
  await assert.rejects(client({ maxResponseBytes: 1024 }).request("GET", "/big"),
    (e) => e instanceof nsbox.LimitExceeded && /more than 1024 bytes/.test(e.message) && e.status === undefined);
  const whole = await client().request("GET", "/big", { maxBytes: 64 * 1024 });
  assert.equal(whole.data.length, 64 * 1024);
});

const STREAM = [
  { type: "started", cell: 3 },
  { type: "stdout", text: "h\u00e9llo\n" },
  { type: "heartbeat" },
  { type: "stderr", text_b64: Buffer.from("warn\n").toString("base64") },
  { type: "progress", step: "LOADING", metric: "1/2" },
  { type: "display", item: { type: "image/png", path: "/mnt/files/cell-3-1.png" } },
  { type: "result", cell: 3, status: "ok", results: "42", error: null, display: [], execution_count: 3,
    duration_ms: 5, state_lost: false, abandoned_tool_calls: 0, stdout: "h\u00e9llo\n", stdout_bytes: 7,
    stdout_lines: 1, stdout_truncated: false, stderr_b64: Buffer.from("warn\n").toString("base64"),
    stderr_bytes: 5, stderr_lines: 1, stderr_truncated: false },
];

test("a cell's stream cut into 3-byte pieces reaches the callbacks in order, then the result", async () => {
  routes.set("POST /v1/sandboxes/sbx-1/cells", (req, res) => {
    assert.equal(req.headers["accept"], "application/x-ndjson");
    res.writeHead(200, { "Content-Type": "application/x-ndjson" });
    void dribble(res, STREAM.map((e) => JSON.stringify(e) + "\n").join(""), 3);
  });
  const sbx = new nsbox.Sandbox({ id: "sbx-1", name: "" }, client());
  const events = [];
  const ex = await sbx.runCode("print('héllo')", {
    timeout_s: 30,
    onStdout: (t) => events.push(["stdout", t]),
    onStderr: (t) => events.push(["stderr", t]),
    onProgress: (step, metric) => events.push(["progress", step, metric]),
    onDisplay: (item) => events.push(["display", item.type]),
  });
  assert.deepEqual(events, [["stdout", "h\u00e9llo\n"], ["stderr", "warn\n"], ["progress", "LOADING", "1/2"], ["display", "image/png"]]);
  assert.ok(ex instanceof nsbox.Execution);
  assert.equal(ex.results, "42");
  assert.equal(ex.text, "42");
  assert.equal(ex.ok, true);
  assert.equal(ex.stdout, "h\u00e9llo\n");
  assert.equal(ex.stderr, "warn\n");
  assert.equal(ex.raw.type, undefined);
  assert.deepEqual(JSON.parse(seen.at(-1).body), { code: "print('héllo')", timeout_s: 30 });
});

test("an error event ends the stream with its error", async () => {
  routes.set("POST /v1/sandboxes/sbx-2/commands", (req, res) => {
    res.writeHead(200, { "Content-Type": "application/x-ndjson" });
    res.end('{"type":"started","command":1}\n{"type":"error","error":{"code":"sandbox_dead","message":"its supervisor is gone"}}\n');
  });
  const sbx = new nsbox.Sandbox({ id: "sbx-2", name: "" }, client());
  await assert.rejects(sbx.commands.run("true", { stream: true }),
    (e) => e instanceof nsbox.SandboxDead && e.message === "its supervisor is gone");
});

test("a stream that ends without a result, or with a line past the bound, is a protocol error", async () => {
  routes.set("POST /v1/sandboxes/sbx-3/commands", (req, res) => {
    res.writeHead(200, { "Content-Type": "application/x-ndjson" });
    res.end('{"type":"started","command":1}\n{"type":"stdout","text":"x"}\n');
  });
  routes.set("POST /v1/sandboxes/sbx-4/commands", (req, res) => {
    res.writeHead(200, { "Content-Type": "application/x-ndjson" });
    res.end(`{"type":"stdout","text":"${"x".repeat(4096)}"}\n`);
  });
  await assert.rejects(new nsbox.Sandbox({ id: "sbx-3", name: "" }, client()).commands.run("x", { onStdout: () => {} }),
    (e) => e instanceof nsbox.ProtocolError && /without a result/.test(e.message));
  await assert.rejects(new nsbox.Sandbox({ id: "sbx-4", name: "" }, client({ maxResponseBytes: 1024 })).commands.run("x", { stream: true }),
    (e) => e instanceof nsbox.ProtocolError && /longer than 1024 bytes/.test(e.message));
});

test("a command's result keeps the exact bytes; text is decoded on request", async () => {
  routes.set("POST /v1/sandboxes/sbx-5/commands", (req, res) => reply(res, 200, {
    status: "error", reason: "exit", exit_code: 3, signal: null, duration_ms: 1,
    stdout_b64: Buffer.from([0xff, 0x0a]).toString("base64"), stdout_bytes: 2, stdout_lines: 1, stdout_truncated: false,
    stderr: "bad\n", stderr_bytes: 4, stderr_lines: 1, stderr_truncated: false,
  }));
  const sbx = new nsbox.Sandbox({ id: "sbx-5", name: "" }, client());
  const r = await sbx.commands.run(["prog", "arg"], { stdin: Uint8Array.of(0xfe, 0x41), env: { N: 1 }, cwd: "/tmp" });
  assert.deepEqual([...r.stdout], [0xff, 0x0a]);
  assert.equal(r.stdoutText, "\ufffd\n");
  assert.equal(r.stderrText, "bad\n");
  assert.equal(r.exit_code, 3);
  assert.equal(r.ok, false);
  assert.deepEqual(JSON.parse(seen.at(-1).body), { argv: ["prog", "arg"], env: { N: "1" }, cwd: "/tmp", stdin_b64: "/kE=" });
});

test("runAs is sent as run_as: in the body of commands, processes and PTYs, in the query of every fs route", async () => {
  const base = "/v1/sandboxes/sbx-6";
  const ok = (doc) => (req, res) => reply(res, 200, doc);
  routes.set(`POST ${base}/commands`, ok({ status: "ok", reason: "exit", exit_code: 0, stdout: "", stderr: "" }));
  routes.set(`POST ${base}/processes`, ok({ pid: 7 }));
  routes.set(`POST ${base}/pty`, ok({ session_id: 3 }));
  routes.set(`GET ${base}/fs`, (req, res) => { res.writeHead(200, { "Content-Length": 2 }); res.end("hi"); });
  routes.set(`PUT ${base}/fs`, ok({ path: "/home/user/a.txt", size: 2 }));
  routes.set(`PUT ${base}/fs:extract`, ok({ path: "/home/user/d", members: 0, bytes: 0 }));
  routes.set(`DELETE ${base}/fs`, ok({ removed: ["/home/user/a.txt"] }));
  routes.set(`GET ${base}/fs:ls`, ok({ path: "/home/user", entries: [], next_cursor: null }));
  routes.set(`GET ${base}/fs:stat`, ok({ path: "/home/user/a.txt", type: "file", mode: 420, size: 2 }));
  routes.set(`POST ${base}/fs:mkdir`, ok({ path: "/home/user/d" }));
  const sbx = new nsbox.Sandbox({ id: "sbx-6", name: "" }, client());
  const from = seen.length;
  await sbx.commands.run("id -un", { runAs: "alice" });
  await sbx.processes.start(["sleep", "1"], { runAs: "alice", tty: true });
  await sbx.ptyStart("bash", { runAs: "bob" });
  await sbx.commands.run("id -un");
  const bodies = seen.slice(from).map((r) => JSON.parse(r.body));
  assert.deepEqual(bodies.map((b) => b.run_as), ["alice", "alice", "bob", undefined]);
  assert.deepEqual(bodies[1], { argv: ["sleep", "1"], run_as: "alice", tty: true, cols: 80, rows: 24 });

  const fsFrom = seen.length;
  assert.equal((await sbx.fs.read("a.txt", { runAs: "alice" })).toString(), "hi");
  assert.equal(await sbx.fs.readText("a.txt", { runAs: "alice" }), "hi");
  await sbx.fs.write("a.txt", "hi", { runAs: "alice", mode: 0o600 });
  await sbx.fs.extract("d", Buffer.alloc(0), { runAs: "alice" });
  await sbx.fs.rm("a.txt", { runAs: "alice" });
  await sbx.fs.ls("/home/user", { runAs: "alice" });
  for await (const _ of sbx.fs.iter("/home/user", { runAs: "alice" })) assert.fail("no entries");
  await sbx.fs.stat("a.txt", { runAs: "alice" });
  assert.equal(await sbx.fs.exists("a.txt", { runAs: "alice" }), true);
  await sbx.fs.mkdir("d", { runAs: "alice", parents: true });
  await sbx.fs.stat("a.txt");
  const queries = seen.slice(fsFrom).map((r) => new URL(r.url, "http://x"));
  assert.deepEqual(queries.map((u) => `${u.pathname.slice(base.length)} ${u.searchParams.get("run_as")}`), [
    "/fs alice", "/fs alice", "/fs alice", "/fs:extract alice", "/fs alice", "/fs:ls alice", "/fs:ls alice",
    "/fs:stat alice", "/fs:stat alice", "/fs:mkdir alice", "/fs:stat null",
  ]);
  assert.equal(queries[2].searchParams.get("mode"), "0600");
});

test("no server at the socket is ServerUnreachable with what to do", async () => {
  const c = new nsbox.Client({ socket: path.join(dir, "missing.sock"), token: "t", env: {} });
  await assert.rejects(c.json("GET", "/v1/info"),
    (e) => e instanceof nsbox.ServerUnreachable && e instanceof nsbox.Unavailable && /nsbox serve/.test(e.hint));
});

test("an upload that fails closes the local file it opened", async () => {
  const file = path.join(dir, "upload-me.csv");
  fs.writeFileSync(file, "a,b\n");
  const c = new nsbox.Client({ socket: path.join(dir, "missing.sock"), token: "t", env: {} });
  await assert.rejects(new nsbox.Files(c, "/v1/sandboxes/x").upload(file, "data/"), nsbox.ServerUnreachable);
  await new Promise((resolve) => setImmediate(resolve));
  const open = fs.readdirSync("/proc/self/fd").map((fd) => {
    try {
      return fs.readlinkSync(`/proc/self/fd/${fd}`);
    } catch {
      return "";
    }
  });
  assert.deepEqual(open.filter((target) => target === file), []);
});

test("a server that does not answer in time is a Timeout", async () => {
  routes.set("GET /silent", () => {}); // never answers
  await assert.rejects(client({ timeoutMs: 300 }).json("GET", "/silent"),
    (e) => e instanceof nsbox.Timeout && e.code === "timeout");
});

test("a stream silent for longer than its idle bound is a Timeout", async () => {
  routes.set("POST /v1/sandboxes/sbx-6/cells", (req, res) => {
    res.writeHead(200, { "Content-Type": "application/x-ndjson" });
    res.write('{"type":"started","cell":1}\n'); // then nothing
  });
  const c = client({ streamIdleTimeoutMs: 300 });
  const sbx = new nsbox.Sandbox({ id: "sbx-6", name: "" }, c);
  await assert.rejects(sbx.runCode("import time; time.sleep(60)", { stream: true, requestTimeoutMs: 300 }),
    (e) => e instanceof nsbox.Timeout);
});

test("an abort signal ends a stream with an AbortError", async () => {
  routes.set("POST /v1/sandboxes/sbx-7/commands", (req, res) => {
    res.writeHead(200, { "Content-Type": "application/x-ndjson" });
    res.write('{"type":"stdout","text":"first\\n"}\n');
  });
  const sbx = new nsbox.Sandbox({ id: "sbx-7", name: "" }, client());
  const controller = new AbortController();
  await assert.rejects(sbx.commands.run("yes", { signal: controller.signal, onStdout: () => controller.abort() }),
    (e) => e.name === "AbortError");
});

test("a PTY's output decodes output_b64 and says whether it runs", () => {
  const out = new nsbox.PtyOutput({ session_id: 2, output_b64: Buffer.from([0x68, 0xff]).toString("base64"), exit_code: null });
  assert.deepEqual([...out.data], [0x68, 0xff]);
  assert.equal(out.output, "h\ufffd");
  assert.equal(out.running, true);
  assert.equal(new nsbox.PtyOutput({ session_id: 2, output: "", exit_code: 0 }).running, false);
});
