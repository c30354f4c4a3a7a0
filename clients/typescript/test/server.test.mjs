// The package against a real `nsbox serve` on a state root of its own (test/support/
// server.mjs): what a user of the package sees, over the unix socket and over TCP. After
// each test no sandbox may be left; one left behind fails the test (and is removed).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { Readable } from "node:stream";
import { after, afterEach, before, describe, test } from "node:test";

import * as nsbox from "nsbox";
import { Sandbox, Session } from "nsbox";
import { Server, binary, failIfSandboxesLeft, waitUntil } from "./support/server.mjs";

const skip = binary.bin ? false : `SKIP: ${binary.why}`;
// A test that hangs fails instead of holding up the suite (a bound, not a measurement).
const bounded = { timeout: 300_000 };
if (skip) console.log(skip);

let server;
let client; // over the socket
let tcp; // over the loopback port

/** A sandbox for the test's body, removed after it whatever happens. */
async function withSandbox(spec, body, options = { client }) {
  const sbx = await Sandbox.create(spec, options);
  try {
    return await body(sbx);
  } finally {
    await sbx.remove().catch((e) => {
      if (!(e instanceof nsbox.NotFound)) throw e;
    });
  }
}

if (!binary.bin && binary.required) {
  test("the nsbox binary named by NSBOX_BIN is there", () => assert.fail(binary.why));
} else {
  describe("nsbox serve", { skip }, () => {
    before(async () => {
      server = new Server();
      await server.start();
      client = new nsbox.Client({ socket: server.socket, token: server.token, env: {} });
      tcp = new nsbox.Client({ url: server.url, token: server.token, env: {} });
    });

    after(async () => {
      client?.close();
      tcp?.close();
      await server?.destroy();
    });

    afterEach(() => failIfSandboxesLeft(client));

    test("a sandbox keeps its kernel's state between cells, over the socket and over TCP, and is gone once removed", bounded, async () => {
      for (const c of [client, tcp]) {
        const sbx = await Sandbox.create({ name: "ts-state", ttl_s: 600 }, { client: c });
        try {
          assert.match(sbx.id, /^sbx-/);
          assert.equal(sbx.name, "ts-state");
          assert.equal((await sbx.runCode("x = 6 * 7")).status, "ok");
          const ex = await sbx.runCode("x");
          assert.equal(ex.results, "42");
          assert.equal(ex.ok, true);
          assert.deepEqual((await Sandbox.list({ client: c })).map((s) => s.id), [sbx.id]);
          const again = await Sandbox.connect("ts-state", { client: c });
          assert.equal(again.id, sbx.id);
          assert.equal((await again.info()).status, "running");
          assert.equal(await again.isRunning(), true);
        } finally {
          assert.deepEqual(await sbx.remove(), [sbx.id]);
        }
        await assert.rejects(Sandbox.connect(sbx.id, { client: c }), nsbox.NotFound);
      }
    });

    test("connection options come from the environment as the Python client reads it", bounded, async () => {
      const socketOnly = { NSBOX_SOCKET: server.socket }; // the token from the state root's file, next to it
      const fromEnv = new nsbox.Client({ env: socketOnly });
      assert.equal(fromEnv.tokenFile, server.tokenFile);
      assert.equal((await fromEnv.json("GET", "/v1/info")).api_version, 1);
      const overTcp = new nsbox.Client({ env: { NSBOX_URL: server.url, NSBOX_TOKEN: server.token } });
      assert.equal((await overTcp.json("GET", "/v1/info")).api_version, 1);
      const wrong = new nsbox.Client({ env: { NSBOX_URL: server.url, NSBOX_TOKEN: "not-the-token" } });
      await assert.rejects(wrong.json("GET", "/v1/sandboxes"), (e) => e instanceof nsbox.Unauthorized && e.status === 401);
      fromEnv.close();
      overTcp.close();
      wrong.close();
    });

    test("a cell's output, progress and figures reach the callbacks while it runs, in order", bounded, async () => {
      await withSandbox({}, async (sbx) => {
        // Each step waits for the test to acknowledge the one before: the order seen is
        // the order things happened, whatever the timing.
        const cell = [
          "import os, sys, time",
          "def wait(p):",
          "    t = time.time()",
          "    while not os.path.exists(p):",
          "        if time.time() - t > 60: raise TimeoutError(p)",
          "        time.sleep(0.02)",
          "print('step-1', flush=True)",
          "wait('/mnt/files/ack-1')",
          "set_progress('LOADING', '1/2')",
          "wait('/mnt/files/ack-2')",
          "print('oops', file=sys.stderr, flush=True)",
          "wait('/mnt/files/ack-3')",
          "import matplotlib.pyplot as plt",
          "plt.plot([1, 2]); plt.show()",
          "output = 'done'",
        ].join("\n");
        const events = [];
        const acked = new Set();
        const ack = async (name) => {
          if (!acked.has(name)) {
            acked.add(name);
            await sbx.files.upload(Buffer.alloc(0), name);
          }
        };
        const ex = await sbx.runCode(cell, {
          timeout_s: 120,
          onStdout: async (t) => {
            events.push(["stdout", t]);
            if (events.filter((e) => e[0] === "stdout").map((e) => e[1]).join("").includes("step-1\n")) await ack("ack-1");
          },
          onProgress: async (step, metric) => {
            events.push(["progress", step, metric]);
            await ack("ack-2");
          },
          onStderr: async (t) => {
            events.push(["stderr", t]);
            await ack("ack-3");
          },
          onDisplay: (item) => events.push(["display", item.type]),
        });
        assert.equal(ex.status, "ok", JSON.stringify(ex.raw));
        assert.equal(ex.results, "done");
        const merged = [];
        for (const e of events) {
          const last = merged.at(-1);
          if (last && (e[0] === "stdout" || e[0] === "stderr") && last[0] === e[0]) last[1] += e[1];
          else merged.push([...e]);
        }
        assert.deepEqual(merged, [["stdout", "step-1\n"], ["progress", "LOADING", "1/2"], ["stderr", "oops\n"], ["display", "image/png"]]);
        assert.equal(ex.stdout, "step-1\n");
        assert.equal(ex.stderr, "oops\n");
        assert.deepEqual(ex.display.map((d) => d.type), ["image/png"]);
      });
    });

    test("a cell past its deadline ends as a timeout and keeps its globals; an exception is a result", bounded, async () => {
      await withSandbox({}, async (sbx) => {
        await sbx.runCode("kept = 'yes'");
        const slow = await sbx.runCode("import time\nwhile True: time.sleep(0.05)", { timeout_s: 1 });
        assert.equal(slow.status, "timeout");
        assert.equal((await sbx.runCode("kept")).results, "'yes'");
        const bad = await sbx.runCode("1 / 0");
        assert.equal(bad.status, "error");
        assert.equal(bad.error.ename, "ZeroDivisionError");
        await sbx.restart();
        assert.equal((await sbx.runCode("kept")).error.ename, "NameError");
      });
    });

    test("commands return exact bytes and exit codes, and take argv, stdin, env and cwd; their output streams", bounded, async () => {
      await withSandbox({}, async (sbx) => {
        const r = await sbx.commands.run("printf 'a\\377'; echo err >&2; exit 3");
        assert.deepEqual([...r.stdout], [0x61, 0xff]);
        assert.equal(r.stderrText, "err\n");
        assert.equal(r.exit_code, 3);
        assert.equal(r.ok, false);
        const argv = await sbx.commands.run(["sh", "-c", 'cat; echo " $GREETING $(pwd)"'],
          { stdin: "in", env: { GREETING: "hi" }, cwd: "/tmp" });
        assert.equal(argv.stdoutText, "in hi /tmp\n");
        assert.equal(argv.ok, true);
        const seen = [];
        const streamed = await sbx.commands.run("for i in 1 2 3; do echo line-$i; done", { onStdout: (t) => seen.push(t) });
        assert.equal(seen.join(""), "line-1\nline-2\nline-3\n");
        assert.equal(streamed.stdoutText, "line-1\nline-2\nline-3\n");
        const late = await sbx.commands.run("sleep 30", { timeout_s: 1 });
        assert.equal(late.status, "timeout");
        assert.equal(late.timedOut, true);
      });
    });

    test("a command whose stream is aborted is killed in the sandbox", bounded, async () => {
      await withSandbox({}, async (sbx) => {
        const controller = new AbortController();
        await assert.rejects(sbx.commands.run("echo started; exec sleep 300", {
          signal: controller.signal,
          onStdout: () => controller.abort(),
        }), (e) => e.name === "AbortError");
        const gone = await waitUntil(async () => (await sbx.commands.run("pgrep -x sleep || true")).stdoutText === "", 30_000);
        assert.ok(gone, "the aborted command's sleep still runs");
      });
    });

    test("files round-trip with their sha-256 from bytes, a local file and a stream, and list, sign and delete", bounded, async () => {
      await withSandbox({}, async (sbx) => {
        const local = fs.mkdtempSync(path.join(os.tmpdir(), "nsbox-ts-files-"));
        try {
          const bytes = Buffer.from([0, 1, 2, 255, 10]);
          const up = await sbx.files.upload(bytes, "data/raw.bin");
          assert.equal(up.path, "/mnt/files/data/raw.bin");
          assert.equal(up.size, 5);
          fs.writeFileSync(path.join(local, "sales.csv"), "a,b\n1,2\n");
          const fromPath = await sbx.files.upload(path.join(local, "sales.csv"), "/mnt/files/data/");
          assert.equal(fromPath.mount_relative_path, "data/sales.csv");
          const fromStream = await sbx.files.upload(Readable.from([Buffer.from("chunk-1,"), Buffer.from("chunk-2")]), "data/s.txt");
          assert.equal(fromStream.size, 15);
          const names = (await sbx.files.list("data")).entries.map((e) => [e.name, e.path]);
          assert.deepEqual(names, [["raw.bin", "/mnt/files/data/raw.bin"], ["s.txt", "/mnt/files/data/s.txt"],
            ["sales.csv", "/mnt/files/data/sales.csv"]]);
          const paged = [];
          for await (const e of sbx.files.iter("/mnt/files/data", { pageSize: 1 })) paged.push(e.name);
          assert.deepEqual(paged, ["raw.bin", "s.txt", "sales.csv"]);
          assert.deepEqual(await sbx.files.readBytes("data/raw.bin"), bytes);
          assert.equal((await sbx.commands.run("cat /mnt/files/data/s.txt")).stdoutText, "chunk-1,chunk-2");

          const file = await sbx.files.download("data/sales.csv");
          assert.equal(await file.text(), "a,b\n1,2\n");
          const saved = await file.save(path.join(local, "copy.csv"));
          assert.equal(fs.readFileSync(saved, "utf8"), "a,b\n1,2\n");
          await assert.rejects(file.save(saved), (e) => e.code === "EEXIST");
          const streamed = await (await sbx.files.download("data/raw.bin")).save(local);
          assert.deepEqual(fs.readFileSync(streamed), bytes);

          // A signed link opens without the token; an altered one is refused.
          const link = await sbx.files.sign("data/sales.csv", { expires_in_s: 60 });
          const open = await fetch(link.download_url);
          assert.equal(open.status, 200);
          assert.equal(await open.text(), "a,b\n1,2\n");
          const altered = await fetch(link.download_url.replace("sales.csv", "raw.bin"));
          assert.equal(altered.status, 403);

          assert.deepEqual(await sbx.files.delete("data", { recursive: true }), ["/mnt/files/data"]);
          assert.deepEqual((await sbx.files.list()).entries.filter((e) => e.name === "data"), []);
          await assert.rejects(sbx.files.download("data/sales.csv"), nsbox.NotFound);
        } finally {
          fs.rmSync(local, { recursive: true, force: true });
        }
      });
    });

    test("fs reaches the sandbox's whole view with its user's rights, and refuses what it must", bounded, async () => {
      await withSandbox({}, async (sbx) => {
        const w = await sbx.fs.write("notes/a.md", "# notes\n", { mode: 0o600 });
        assert.equal(w.path, "/home/user/notes/a.md");
        assert.equal(w.size, 8);
        assert.match(w.sha256, /^[0-9a-f]{64}$/);
        assert.equal(await sbx.fs.readText("/home/user/notes/a.md"), "# notes\n");
        const st = await sbx.fs.stat("notes/a.md");
        assert.equal(st.type, "file");
        assert.equal(st.mode & 0o777, 0o600);
        assert.equal(await sbx.fs.exists("notes/missing"), false);
        assert.equal(await sbx.fs.mkdir("/tmp/x/y", { parents: true }), "/tmp/x/y");
        await assert.rejects(sbx.fs.mkdir("/tmp/x/y"), nsbox.AlreadyExists);
        await sbx.fs.write("/tmp/x/y/big.bin", Readable.from([Buffer.alloc(70_000, 7)]));
        assert.equal((await sbx.fs.read("/tmp/x/y/big.bin")).length, 70_000);
        await assert.rejects(sbx.fs.read("/tmp/x/y/big.bin", { maxBytes: 1000 }), nsbox.LimitExceeded);
        assert.deepEqual((await sbx.fs.ls("notes")).entries.map((e) => e.path), ["/home/user/notes/a.md"]);
        await sbx.commands.run("ln -s /etc/passwd ~/notes/link");
        await assert.rejects(sbx.fs.read("notes/link"), nsbox.PermissionDenied);
        await assert.rejects(sbx.fs.write("/etc/evil", "x"), nsbox.PermissionDenied);
        await assert.rejects(sbx.fs.read("notes/../../../etc/passwd"), nsbox.InvalidArgument);
        // A tar archive unpacked inside, as the sandbox user.
        const local = fs.mkdtempSync(path.join(os.tmpdir(), "nsbox-ts-tar-"));
        try {
          fs.mkdirSync(path.join(local, "src", "pkg"), { recursive: true });
          fs.writeFileSync(path.join(local, "src", "pkg", "m.py"), "X = 1\n");
          const tar = execFileSync("tar", ["-cf", "-", "-C", path.join(local, "src"), "pkg"]);
          const got = await sbx.fs.extract("proj", tar);
          assert.equal(got.path, "/home/user/proj");
          assert.equal(await sbx.fs.readText("proj/pkg/m.py"), "X = 1\n");
        } finally {
          fs.rmSync(local, { recursive: true, force: true });
        }
        assert.ok((await sbx.fs.rm("/tmp/x", { recursive: true })).includes("/tmp/x"));
      });
    });

    test("a terminal session runs bash until it is killed, and takes bytes and resizes", bounded, async () => {
      await withSandbox({}, async (sbx) => {
        const id = await sbx.ptyStart(["bash", "--norc", "--noprofile"], { cols: 100, rows: 30 });
        assert.ok(id >= 1);
        let printed = (await sbx.ptyWrite(id, "stty size; echo round-$((20+1))\n", { yield_ms: 500 })).output;
        assert.ok(await waitUntil(async () => {
          printed += (await sbx.ptyRead(id, { yield_ms: 200 })).output;
          return printed.includes("round-21") && printed.includes("30 100");
        }, 30_000), printed);
        await sbx.ptyResize(id, 120, 40);
        const out = await sbx.ptyWrite(id, Buffer.from("stty size\n"), { yield_ms: 500 });
        let more = out.output;
        assert.ok(await waitUntil(async () => (more += (await sbx.ptyRead(id)).output).includes("40 120"), 30_000), more);
        assert.equal(out.running, true);
        assert.deepEqual(await sbx.ptyKill(id), [id]);
        await assert.rejects(sbx.ptyRead(id), nsbox.NotFound);
      });
    });

    test("snapshots are taken, listed, restored into a new sandbox and removed", bounded, async () => {
      await withSandbox({}, async (sbx) => {
        await sbx.commands.run("mkdir -p ~/proj && echo v1 > ~/proj/state");
        await sbx.files.upload(Buffer.from("kept"), "kept.txt");
        const snap = await sbx.snapshot("ts-snap", { include_files: true });
        assert.match(snap.id, /^snp-/);
        assert.equal(snap.name, "ts-snap");
        assert.equal(snap.sandbox, sbx.id);
        assert.equal(snap.include_files, true);
        assert.deepEqual((await Sandbox.snapshots({ client })).map((s) => s.id), [snap.id]);
        await assert.rejects(sbx.snapshot("ts-snap"), nsbox.AlreadyExists);
        await withSandbox({ from_snapshot: "ts-snap" }, async (copy) => {
          assert.equal((await copy.commands.run("cat ~/proj/state /mnt/files/kept.txt")).stdoutText, "v1\nkept");
        });
        await sbx.commands.run("echo v2 > ~/proj/state");
        const stopped = await sbx.stop();
        assert.equal(stopped.status, "stopped");
        await assert.rejects(sbx.runCode("1"), nsbox.SandboxDead);
        assert.equal((await sbx.start({ from_snapshot: snap.id })).status, "running");
        assert.equal((await sbx.commands.run("cat ~/proj/state")).stdoutText, "v1\n");
        await Sandbox.removeSnapshot("ts-snap", { client });
        assert.deepEqual(await Sandbox.snapshots({ client }), []);
        await assert.rejects(Sandbox.removeSnapshot("ts-snap", { client }), nsbox.NotFound);
      });
    });

    test("errors are thrown by their code", bounded, async () => {
      await assert.rejects(Sandbox.connect("no-such-sandbox", { client }),
        (e) => e instanceof nsbox.NotFound && e.code === "not_found" && e.status === 404 && e.message.length > 0);
      await assert.rejects(Sandbox.create({ size: "enormous" }, { client }),
        (e) => e instanceof nsbox.InvalidArgument && e.status === 422);
      await assert.rejects(client.json("POST", "/v1/sandboxes", { json: { sizee: "standard" } }),
        (e) => e instanceof nsbox.MalformedRequest && e.status === 400 && e.message.includes("sizee"));
      await withSandbox({ name: "twice" }, async (sbx) => {
        await assert.rejects(Sandbox.create({ name: "twice" }, { client }), (e) => e instanceof nsbox.AlreadyExists && e.status === 409);
        await assert.rejects(sbx.runCode("1", { timeout_s: 0 }), nsbox.InvalidArgument);
        await assert.rejects(client.json("GET", `/v1/sandboxes/${sbx.id}/events`),
          (e) => e instanceof nsbox.InvalidArgument && e.message.includes("callback"));
      });
      await assert.rejects(client.json("GET", "/v1/nothing-here"), nsbox.NotFound);
    });

    test("a time to live is set, extended, and removes the sandbox when it runs out", bounded, async () => {
      const sbx = await Sandbox.create({}, { client });
      try {
        assert.equal(sbx.lastInfo.expires_at, undefined);
        const set = await sbx.setTtl(3600);
        assert.match(set.expires_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
        await sbx.setTtl(1);
        assert.ok(await waitUntil(async () => !(await sbx.isRunning()), 60_000), "the sandbox outlived its time to live");
        await assert.rejects(sbx.info(), nsbox.NotFound);
      } finally {
        await sbx.remove().catch(() => undefined);
      }
    });

    test("an embedder answers the sandbox's tool calls from its own process", bounded, async () => {
      const seen = [];
      await withSandbox({ tools: { backend: "callback", call_timeout_s: 30 } }, async (sbx) => {
        const early = await sbx.runCode("run_composio_tool('X', {})");
        assert.match(early.results, /no client serves this sandbox's tool calls/);
        const served = await sbx.onToolCall(async (helper, args) => {
          seen.push([helper, args]);
          if (args.tool === "BROKEN") throw new RangeError("no such account");
          await new Promise((resolve) => setImmediate(resolve));
          return { helper, args };
        }, { concurrency: 4 });
        try {
          const got = await sbx.runCode([
            "import json",
            "from concurrent.futures import ThreadPoolExecutor",
            "with ThreadPoolExecutor(8) as pool:",
            "    many = list(pool.map(lambda i: run_composio_tool('ECHO', {'i': i}), range(20)))",
            "print(json.dumps([run_composio_tool('ECHO', {'x': 1}), invoke_llm('hi'),",
            "                  run_composio_tool('BROKEN', {}), sum(1 for r, e in many if e is None)]))",
          ].join("\n"));
          assert.equal(got.status, "ok", JSON.stringify(got.raw));
          const [echo, llm, broken, ok] = JSON.parse(got.stdout);
          assert.deepEqual(echo, [{ helper: "run_tool", args: { tool: "ECHO", arguments: { x: 1 } } }, null]);
          assert.equal(llm[0].helper, "invoke_llm");
          assert.equal(llm[0].args.query, "hi");
          assert.equal(broken[0], null);
          assert.match(broken[1], /RangeError: no such account/);
          assert.equal(ok, 20);
          assert.equal(served.error, undefined);
        } finally {
          await served.stop();
        }
        await assert.rejects(client.json("POST", `/v1/sandboxes/${sbx.id}/tool_calls/c-999999`, { json: { result: 1, error: null } }),
          nsbox.NotFound);
      });
      assert.equal(seen.length, 23);
    });

    test("a session makes its sandbox on first use and removes it with itself", bounded, async () => {
      const session = await Session.create({ user_id: "ts-user" }, { client });
      try {
        assert.match(session.id, /^ses-/);
        assert.equal(session.sandboxId, null);
        assert.equal((await session.runCode("21 * 2")).results, "42");
        const sandboxId = (await session.info()).sandbox_id;
        assert.match(sandboxId, /^sbx-/);
        assert.deepEqual((await Session.list({ client, user_id: "ts-user" })).map((s) => s.session_id), [session.id]);
      } finally {
        await session.delete();
      }
      assert.deepEqual(await Sandbox.list({ client }), []);
    });
  });
}
