// nsbox/agents' workspace archives and snapshot specs under the unmodified Agents SDK, on
// a real `nsbox serve` (test/support/sdk.mjs): persistWorkspace/hydrateWorkspace between
// two sessions; a state whose sandbox is deleted resumed from its local or remote
// snapshot into a new sandbox, directly and by the SDK's Runner; and the SDK's refusal of
// a resume whose trusted manifest changes a mount. Archives are read by GNU tar.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import crypto from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";

import { Runner, setTraceProcessors } from "@openai/agents";
import {
  InMemoryRemoteSnapshotStore,
  Manifest,
  SandboxAgent,
  SandboxArchiveError,
  SandboxMountError,
  SandboxSnapshotNotRestorableError,
  SandboxWorkspaceArchiveWriteError,
  dir,
  file,
  s3Mount,
  shell,
} from "@openai/agents/sandbox";
import { ScriptedModel, assistantMessage, functionCall } from "@openai/agents/testing";

import * as nsbox from "nsbox";
import { NsboxSandboxClient } from "nsbox/agents";
import { bounded, describeOnNsboxServe, toolOutput } from "./support/sdk.mjs";

setTraceProcessors([]); // nothing exported

/** `tar -tv` of an archive: "mode name[ -> target]" per member. */
function listing(archive) {
  return execFileSync("tar", ["-tvPf", "-"], { input: archive, encoding: "utf8" }).trim().split("\n")
    .map((line) => {
      const words = line.split(/\s+/);
      return `${words[0]} ${words.slice(5).join(" ")}`;
    });
}

const names = (archive) => listing(archive).map((m) => m.split(" ").slice(1).join(" ").replace(/\/$/, ""));

function tempDir(t) {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), "nsbox-ts-snapshots-"));
  t.after(() => fs.rmSync(d, { recursive: true, force: true }));
  return d;
}

const planned = () => new Manifest({
  entries: {
    "notes/plan.md": file({ content: "plan\n" }),
    cache: dir({ ephemeral: true, children: { "made.txt": file({ content: "made at create\n" }) } }),
  },
});

let server;
let client; // the package's Client, to look at the server from outside the SDK
let sdkClient;

describeOnNsboxServe("workspace archives and snapshots of nsbox/agents", (started) => ({ server, client, sdkClient } = started), () => {

  const other = (t, extra = {}) => {
    const c = new NsboxSandboxClient({ socket: server.socket, token: server.token, env: {}, ...extra });
    t.after(() => c.close());
    return c;
  };

  test("persistWorkspace gives the workspace as a tar that hydrateWorkspace puts into another session", bounded, async () => {
    const first = await sdkClient.create({ manifest: planned() });
    const second = await sdkClient.create({ manifest: new Manifest({ entries: { "old.txt": file({ content: "old\n" }) } }) });
    try {
      await first.execCommand({ cmd: "echo work > work.txt && chmod 0640 work.txt && ln -s notes/plan.md latest && mkdir -p bin" +
        " && printf '#!/bin/sh\\necho ran\\n' > bin/run && chmod 0755 bin/run" });
      const archive = await first.persistWorkspace();
      assert.ok(archive instanceof Uint8Array);
      const members = listing(archive);
      for (const want of ["lrwxrwxrwx latest -> notes/plan.md", "-rw-r----- work.txt", "-rwxr-xr-x bin/run", "-rwxr-xr-x notes/plan.md"]) {
        assert.ok(members.includes(want), `${want} is not in ${members.join(", ")}`);
      }
      assert.ok(!names(archive).some((n) => n === "cache" || n.startsWith("cache/")), "an ephemeral entry is in the archive");

      await second.hydrateWorkspace(archive);
      assert.equal(Buffer.from(await second.readFile({ path: "work.txt" })).toString(), "work\n");
      assert.equal(await second.pathExists("old.txt"), false, "a file the archive does not hold stayed");
      assert.match(await second.execCommand({ cmd: "readlink latest; cat latest; bin/run; stat -c %a work.txt" }),
        /notes\/plan\.md\nplan\nran\n640\n/);

      // The SDK's archive limits are checked before anything is sent; the server's refusal
      // of a member is the SDK's archive write error, and changes nothing either way.
      await assert.rejects(second.hydrateWorkspace(archive, { archiveLimits: { maxMembers: 2 } }),
        (e) => e instanceof SandboxArchiveError && e.details.limit === 2 && e.details.actual >= 6);
      second.setArchiveLimits({ maxExtractedBytes: 4 });
      await assert.rejects(second.hydrateWorkspace(archive), (e) => e instanceof SandboxArchiveError && /extracted size/.test(e.message));
      second.setArchiveLimits(null);
      // The header walk that counts members takes any bytes: an archive cut short, or noise,
      // is refused before anything is sent (or by the server), and never hangs.
      for (const cut of [0, 100, 700, 1500]) {
        await assert.rejects(second.hydrateWorkspace(archive.subarray(0, cut), { archiveLimits: { maxMembers: 1000 } }),
          (e) => e instanceof SandboxArchiveError && /not a tar archive/.test(e.message), `cut at ${cut}`);
      }
      for (let i = 0; i < 100; i++) {
        const noise = crypto.randomBytes(crypto.randomInt(2048));
        await assert.rejects(second.hydrateWorkspace(noise, { archiveLimits: { maxMembers: 1000 } }),
          (e) => e instanceof SandboxArchiveError || e instanceof SandboxWorkspaceArchiveWriteError);
      }
      const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "nsbox-ts-evil-"));
      try {
        fs.symlinkSync("/etc/passwd", path.join(scratch, "evil"));
        const evil = execFileSync("tar", ["--format=pax", "-cf", "-", "-C", scratch, "evil"]);
        await assert.rejects(second.hydrateWorkspace(evil), (e) => e instanceof SandboxWorkspaceArchiveWriteError &&
          e.details.code === "invalid_argument" && /'evil' refused/.test(e.message));
      } finally {
        fs.rmSync(scratch, { recursive: true, force: true });
      }
      assert.equal(Buffer.from(await second.readFile({ path: "work.txt" })).toString(), "work\n");
    } finally {
      await first.delete();
      await second.delete();
    }
  });

  test("a state with a local snapshot spec is resumed from its snapshot once its sandbox is deleted, directly and by the Runner", bounded, async (t) => {
    const baseDir = tempDir(t);
    const session = await sdkClient.create({ manifest: planned(), snapshot: { type: "local", baseDir } });
    let record;
    try {
      await session.execCommand({ cmd: "echo made-before > work.txt" });
      record = JSON.parse(JSON.stringify(await sdkClient.serializeSessionState(session.state)));
    } finally {
      await session.delete();
    }
    assert.deepEqual(record.snapshotSpec, { type: "local", baseDir });
    assert.equal(record.snapshot.type, "local");
    const tarFile = path.join(baseDir, `${record.snapshot.id}.tar`);
    assert.deepEqual(fs.readdirSync(baseDir), [`${record.snapshot.id}.tar`]);
    assert.equal(fs.statSync(tarFile).mode & 0o777, 0o600);
    assert.deepEqual(names(fs.readFileSync(tarFile)).sort(), ["notes", "notes/plan.md", "work.txt"]);
    assert.ok(!JSON.stringify(record).includes(server.token), "the token is in the serialized state");
    await assert.rejects(client.json("GET", `/v1/sandboxes/${record.sandboxId}`), nsbox.NotFound);

    // A new client resumes the state: a new sandbox holding the snapshot.
    const resumer = other(t);
    const resumed = await resumer.resume(await resumer.deserializeSessionState(record));
    try {
      assert.notEqual(resumed.state.sandboxId, record.sandboxId);
      assert.equal(Buffer.from(await resumed.readFile({ path: "work.txt" })).toString(), "made-before\n");
      assert.equal(Buffer.from(await resumed.readFile({ path: "notes/plan.md" })).toString(), "plan\n");
      assert.deepEqual(resumed.state.snapshot, record.snapshot);
    } finally {
      await resumed.delete();
    }

    // The SDK's Runner resumes the same state (its session, removed after the run).
    const model = new ScriptedModel([
      [functionCall("exec_command", { cmd: "cat work.txt; echo \"in $(pwd)\"" }, { callId: "c1" })],
      [assistantMessage("ok")],
    ]);
    const agent = new SandboxAgent({ name: "resumer", model, capabilities: [shell()] });
    const result = await new Runner().run(agent, "go",
      { sandbox: { client: resumer, sessionState: await resumer.deserializeSessionState(record) } });
    assert.equal(result.finalOutput, "ok");
    assert.match(toolOutput(model.calls[1], "c1"), /made-before\nin \/workspace/);
    assert.deepEqual(await nsbox.Sandbox.list({ client }), []);
    // The Runner serialized its session at the run's end: a new snapshot replaced the one
    // it resumed from.
    const left = fs.readdirSync(baseDir);
    assert.equal(left.length, 1, left.join(" "));
    assert.notEqual(left[0], path.basename(tarFile));
    assert.ok(names(fs.readFileSync(path.join(baseDir, left[0]))).includes("work.txt"));

    // The record's own snapshot gone, it cannot be resumed; nor can a state without a
    // snapshot whose sandbox is gone. Nothing is left made.
    await assert.rejects(resumer.resume(await resumer.deserializeSessionState(record)), SandboxSnapshotNotRestorableError);
    const { snapshot: _s, snapshotSpec: _p, ...bare } = record;
    await assert.rejects(resumer.resume(await resumer.deserializeSessionState(bare)), nsbox.NotFound);
    assert.deepEqual(await nsbox.Sandbox.list({ client }), []);
  });

  test("a live state resumed after its sandbox went makes the manifest's ephemeral entries again, not from the snapshot", bounded, async (t) => {
    const session = await sdkClient.create({ manifest: planned(), snapshot: { type: "local", baseDir: tempDir(t) } });
    await session.execCommand({ cmd: "echo changed > cache/made.txt && echo kept > kept.txt" });
    await sdkClient.serializeSessionState(session.state);
    await client.json("DELETE", `/v1/sandboxes/${session.state.sandboxId}`); // gone behind the session's back
    await session.close();
    const resumed = await sdkClient.resume(session.state);
    try {
      assert.notEqual(resumed.state.sandboxId, session.state.sandboxId);
      assert.match(await resumed.execCommand({ cmd: "cat kept.txt cache/made.txt" }), /kept\nmade at create\n/);
      // The server knows them as ephemeral again: not in the next archive.
      assert.deepEqual(names(await resumed.persistWorkspace()).sort(), ["kept.txt", "notes", "notes/plan.md"]);
    } finally {
      await resumed.delete();
    }
  });

  test("a remote snapshot spec persists through its store, and resumes with the client's configured store", bounded, async (t) => {
    const store = new InMemoryRemoteSnapshotStore();
    const session = await sdkClient.create({ manifest: planned(), snapshot: { type: "remote", store } });
    let record;
    try {
      await session.writeFile("report.md", "# remote\n");
      record = JSON.parse(JSON.stringify(await sdkClient.serializeSessionState(session.state)));
    } finally {
      await session.delete();
    }
    assert.deepEqual(record.snapshotSpec, { type: "remote" }, "the store is not serialized");
    assert.equal(await store.exists({ id: record.snapshot.id }), true);
    assert.ok(names((await store.load({ id: record.snapshot.id })).data).includes("report.md"));

    const without = other(t);
    await assert.rejects(without.resume(await without.deserializeSessionState(record)), SandboxSnapshotNotRestorableError);
    const withStore = other(t, { defaults: { snapshot: { type: "remote", store } } });
    const resumed = await withStore.resume(await withStore.deserializeSessionState(record));
    try {
      assert.equal(Buffer.from(await resumed.readFile({ path: "report.md" })).toString(), "# remote\n");
      // Persisted again: a new snapshot in the store, the old one removed from it.
      const again = await withStore.serializeSessionState(resumed.state);
      assert.notEqual(again.snapshot.id, record.snapshot.id);
      assert.equal(await store.exists({ id: record.snapshot.id }), false);
    } finally {
      await resumed.delete();
    }
  });

  test("the SDK refuses to resume a state whose trusted manifest changes a mount, and makes nothing", bounded, async (t) => {
    const session = await sdkClient.create({ manifest: planned(), snapshot: { type: "local", baseDir: tempDir(t) } });
    let record;
    try {
      record = JSON.parse(JSON.stringify(await sdkClient.serializeSessionState(session.state)));
    } finally {
      await session.delete();
    }
    const resumer = other(t);
    const agent = new SandboxAgent({
      name: "changed", model: new ScriptedModel([[assistantMessage("never")]]), capabilities: [shell()],
      defaultManifest: new Manifest({ entries: { data: s3Mount({ bucket: "another-bucket" }) } }),
    });
    await assert.rejects(new Runner().run(agent, "go", { sandbox: { client: resumer, sessionState: await resumer.deserializeSessionState(record) } }),
      (e) => e instanceof SandboxMountError && /mount topology does not match/.test(e.message) && /\bdata\b/.test(e.message));
    assert.deepEqual(await nsbox.Sandbox.list({ client }), []);
  });
});
