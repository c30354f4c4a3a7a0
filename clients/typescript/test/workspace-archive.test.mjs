// The workspace root as one tar archive through the package: `workspaceArchive()` (a
// stream), `workspaceArchiveBytes()`, `saveWorkspaceArchive(path)` and
// `replaceWorkspace(bytes | path | stream)`. First against a stand-in server on a unix
// socket (an archive cut after its first bytes, what a replace sends), then against a
// real `nsbox serve` (test/support/server.mjs). Archives are made and read by GNU tar, a
// tar of its own.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as http from "node:http";
import * as os from "node:os";
import * as path from "node:path";
import { Readable } from "node:stream";
import { after, afterEach, before, describe, test } from "node:test";

import * as nsbox from "nsbox";
import { Sandbox } from "nsbox";
import { Server, binary, failIfSandboxesLeft } from "./support/server.mjs";

const skip = binary.bin ? false : `SKIP: ${binary.why}`;
const bounded = { timeout: 300_000 };
if (skip) console.log(skip);

/** A pax archive of `names` under `dir`, by GNU tar (`args` before the names). */
function tarOf(dir, names, args = []) {
  return execFileSync("tar", ["--format=pax", "-cf", "-", "-C", dir, ...args, ...names], { maxBuffer: 64 << 20 });
}

/** `tar -tv` of an archive: "mode name[ -> target]" per member, as GNU tar reads it. */
function listing(archive) {
  return execFileSync("tar", ["-tvPf", "-"], { input: archive, encoding: "utf8" }).trim().split("\n")
    .map((line) => {
      const words = line.split(/\s+/);
      return `${words[0]} ${words.slice(5).join(" ")}`;
    });
}

function tempDir(t) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "nsbox-ts-archive-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

async function drain(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return Buffer.concat(chunks);
}

describe("workspace archives against a stand-in server", () => {
  let dir;
  let socket;
  let server;
  const seen = [];
  const whole = Buffer.concat([Buffer.alloc(512, 1), Buffer.alloc(700, 2), Buffer.alloc(1024, 0)]);

  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "nsbox-ts-archive-http-"));
    socket = path.join(dir, "api.sock");
    server = http.createServer((req, res) => {
      const chunks = [];
      req.on("data", (c) => chunks.push(c));
      req.on("end", () => {
        const body = Buffer.concat(chunks);
        seen.push({ method: req.method, url: req.url, headers: req.headers, body });
        if (req.url === "/v1/sandboxes/sbx-cut/workspace.tar") {
          // The head and the first bytes, then the connection ends without the last chunk.
          res.writeHead(200, { "Content-Type": "application/x-tar" });
          res.write(Buffer.alloc(512, 7), () => res.socket.destroy());
        } else if (req.method === "GET") {
          res.writeHead(200, { "Content-Type": "application/x-tar" }); // chunked: no length
          (async () => {
            for (let i = 0; i < whole.length; i += 400) await new Promise((r) => res.write(whole.subarray(i, i + 400), r));
            res.end();
          })();
        } else if (req.url === "/v1/sandboxes/sbx-bad/workspace.tar") {
          const doc = Buffer.from(JSON.stringify({ error: { code: "invalid_argument",
            message: "extract into /home/user: archive member '../x' refused: '..' in the path" } }));
          res.writeHead(422, { "Content-Type": "application/json", "Content-Length": doc.length }).end(doc);
        } else {
          const doc = Buffer.from(JSON.stringify({ path: "/home/user", members: 1, bytes: body.length }));
          res.writeHead(200, { "Content-Type": "application/json", "Content-Length": doc.length }).end(doc);
        }
      });
    });
    await new Promise((resolve) => server.listen(socket, resolve));
  });

  after(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const sandbox = (id) => new Sandbox({ id }, new nsbox.Client({ socket, token: "tok", env: {}, timeoutMs: 10_000 }));

  test("an archive cut after its first bytes fails the stream, the bytes and the save, and leaves no file", async (t) => {
    const sbx = sandbox("sbx-cut");
    await assert.rejects(drain(await sbx.workspaceArchive()), (e) => e instanceof nsbox.ServerUnreachable && /cut short/.test(e.message));
    await assert.rejects(sbx.workspaceArchiveBytes(), nsbox.ServerUnreachable);
    const out = tempDir(t);
    await assert.rejects(sbx.saveWorkspaceArchive(path.join(out, "ws.tar")), nsbox.ServerUnreachable);
    assert.deepEqual(fs.readdirSync(out), [], "a cut archive left a file");
  });

  test("a whole archive streams and saves as sent; a replace sends bytes and a file with their length, a stream chunked", async (t) => {
    const sbx = sandbox("sbx-whole");
    assert.deepEqual(await drain(await sbx.workspaceArchive()), whole);
    assert.deepEqual(await sbx.workspaceArchiveBytes(), whole);
    const out = tempDir(t);
    const file = path.join(out, "ws.tar");
    assert.equal(await sbx.saveWorkspaceArchive(file), whole.length);
    assert.deepEqual(fs.readFileSync(file), whole);
    assert.equal(fs.statSync(file).mode & 0o777, 0o600);
    fs.writeFileSync(file, "older");
    await assert.rejects(sbx.saveWorkspaceArchive(file), (e) => e.code === "EEXIST");
    assert.equal(fs.readFileSync(file, "utf8"), "older", "a refused save changed the file");
    assert.equal(await sbx.saveWorkspaceArchive(file, { overwrite: true }), whole.length);
    assert.deepEqual(fs.readdirSync(out), ["ws.tar"]);

    assert.equal((await sbx.replaceWorkspace(whole)).bytes, whole.length);
    let put = seen.at(-1);
    assert.equal(put.method, "PUT");
    assert.equal(put.headers["content-length"], String(whole.length));
    assert.equal(put.headers["content-type"], "application/x-tar");
    assert.deepEqual(put.body, whole);

    assert.equal((await sbx.replaceWorkspace(file)).bytes, whole.length);
    put = seen.at(-1);
    assert.equal(put.headers["content-length"], String(whole.length));
    assert.deepEqual(put.body, whole);

    assert.equal((await sbx.replaceWorkspace(Readable.from([whole.subarray(0, 100), whole.subarray(100)]))).bytes, whole.length);
    put = seen.at(-1);
    assert.equal(put.headers["transfer-encoding"], "chunked");
    assert.equal(put.headers["content-length"], undefined);
    assert.deepEqual(put.body, whole);
  });

  test("a refused replace is InvalidArgument naming the member", async () => {
    await assert.rejects(sandbox("sbx-bad").replaceWorkspace(Buffer.alloc(1024)),
      (e) => e instanceof nsbox.InvalidArgument && e.status === 422 && /'\.\.\/x' refused/.test(e.message));
  });
});

if (!binary.bin && binary.required) {
  test("the nsbox binary named by NSBOX_BIN is there", () => assert.fail(binary.why));
} else {
  describe("workspace archives on nsbox serve", { skip }, () => {
    let server;
    let client;

    before(async () => {
      server = new Server();
      await server.start();
      client = new nsbox.Client({ socket: server.socket, token: server.token, env: {} });
    });

    after(async () => {
      client?.close();
      await server?.destroy();
    });

    afterEach(() => failIfSandboxesLeft(client));

    /** Sandboxes for the test's body, removed after it whatever happens. */
    async function withSandboxes(specs, body) {
      const made = [];
      try {
        for (const spec of specs) made.push(await Sandbox.create({ lazy_kernel: true, ...spec }, { client }));
        return await body(...made);
      } finally {
        for (const sbx of made) {
          await sbx.remove().catch((e) => {
            if (!(e instanceof nsbox.NotFound)) throw e;
          });
        }
      }
    }

    async function sh(sbx, command) {
      const r = await sbx.commands.run(command, { timeout_s: 60 });
      assert.equal(r.exit_code, 0, `${command}: ${r.stdoutText} ${r.stderrText}`);
      return r.stdoutText;
    }

    test("an archive round-trips files, their modes and a symlink kept as a link, by a file and by a stream", bounded, async (t) => {
      await withSandboxes([{}, {}, {}], async (source, byFile, byStream) => {
        await sh(source, "mkdir -p data private && printf 'q\\n3\\n' > data/sales.csv && printf '#!/bin/sh\\necho ran\\n' > run.sh" +
          " && chmod 0755 run.sh && printf s > private/key && chmod 0600 private/key && chmod 0700 private && ln -s data/sales.csv latest");
        const file = path.join(tempDir(t), "ws.tar");
        const size = await source.saveWorkspaceArchive(file);
        assert.equal(fs.statSync(file).size, size);
        const members = listing(fs.readFileSync(file));
        for (const want of ["lrwxrwxrwx latest -> data/sales.csv", "-rwxr-xr-x run.sh", "drwx------ private/", "-rw------- private/key",
          "-rw-r--r-- data/sales.csv"]) {
          assert.ok(members.includes(want), `${want} is not in ${members.join(", ")}`);
        }
        assert.deepEqual(listing(await source.workspaceArchiveBytes()), members);

        const done = await byFile.replaceWorkspace(file);
        assert.equal(done.path, "/home/user");
        assert.ok(done.members >= 6, JSON.stringify(done));
        await byStream.replaceWorkspace(await source.workspaceArchive());
        for (const sbx of [byFile, byStream]) {
          assert.equal(await sh(sbx, "readlink latest; cat latest; ./run.sh; stat -c '%a %n' run.sh private private/key"),
            "data/sales.csv\nq\n3\nran\n755 run.sh\n700 private\n600 private/key\n");
        }
      });
    });

    test("a stopped sandbox's workspace is exported; a replace needs it running", bounded, async () => {
      await withSandboxes([{}], async (sbx) => {
        await sbx.fs.write("notes/kept.md", "# kept\n");
        await sbx.stop();
        assert.ok(listing(await sbx.workspaceArchiveBytes()).some((m) => m.endsWith(" notes/kept.md")));
        await assert.rejects(sbx.replaceWorkspace(Buffer.alloc(1024)), nsbox.SandboxDead);
      });
    });

    test("an archive climbing out or linking out is refused, naming the member, and changes nothing", bounded, async (t) => {
      const dir = tempDir(t);
      fs.writeFileSync(path.join(dir, "ok.txt"), "ok");
      fs.writeFileSync(path.join(dir, "x"), "out");
      fs.symlinkSync("/etc/passwd", path.join(dir, "passwd"));
      const archives = {
        "../x": tarOf(dir, ["ok.txt", "x"], ["-P", "--transform=s,^x$,../x,"]),
        passwd: tarOf(dir, ["ok.txt", "passwd"]),
      };
      assert.ok(listing(archives["../x"]).some((m) => m.endsWith(" ../x")), "GNU tar did not make the member ../x");
      await withSandboxes([{}], async (sbx) => {
        await sbx.fs.write("before.txt", "before\n");
        for (const [member, archive] of Object.entries(archives)) {
          await assert.rejects(sbx.replaceWorkspace(archive),
            (e) => e instanceof nsbox.InvalidArgument && e.message.includes(`'${member}'`), member);
          assert.equal(await sbx.fs.readText("before.txt"), "before\n");
          assert.equal(await sbx.fs.exists("ok.txt"), false, `the archive with ${member} wrote a member`);
        }
      });
    });

    test("a replace removes what the archive does not hold", bounded, async (t) => {
      const dir = tempDir(t);
      fs.mkdirSync(path.join(dir, "d"));
      fs.writeFileSync(path.join(dir, "d", "c.txt"), "c\n", { mode: 0o640 });
      await withSandboxes([{}], async (sbx) => {
        await sh(sbx, "mkdir -p old/deep && echo a > a.txt && echo b > old/deep/b.txt");
        await sbx.replaceWorkspace(tarOf(dir, ["d"]));
        assert.equal(await sh(sbx, "find . -mindepth 1 -not -path './.*' | sort; stat -c %a d/c.txt"), "./d\n./d/c.txt\n640\n");
      });
    });

    test("a workspace root's archive holds the workspace's files, not the home's", bounded, async (t) => {
      const dir = tempDir(t);
      fs.writeFileSync(path.join(dir, "new.txt"), "n");
      await withSandboxes([{ workspace_root: "/workspace" }], async (sbx) => {
        await sh(sbx, "echo w > /workspace/w.txt && echo secret > /home/user/.netrc && mkdir -p /home/user/elsewhere" +
          " && echo e > /home/user/elsewhere/e.txt");
        assert.deepEqual(listing(await sbx.workspaceArchiveBytes()).map((m) => m.split(" ")[1]), ["w.txt"]);
        assert.equal((await sbx.replaceWorkspace(tarOf(dir, ["new.txt"]))).path, "/workspace");
        assert.equal(await sh(sbx, "ls -A /workspace; cat /home/user/.netrc /home/user/elsewhere/e.txt"), "new.txt\nsecret\ne\n");
      });
    });
  });
}
