// Accounts of one sandbox through nsbox/agents on a real `nsbox serve`: a manifest with
// users alice and bob, SandboxAgents whose runAs names each (the unmodified SDK's Runner,
// models scripted, tracing off). What one account writes in the shared workspace root is
// its own: the other can read it and can neither write over it nor remove it; the shell
// and apply_patch act as the agent's account; files and manifest entries made with runAs
// belong to that account.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Runner, applyDiff, setTracingDisabled } from "@openai/agents";
import { Manifest, SandboxAgent, SandboxUnsupportedFeatureError, dir, file, filesystem, shell } from "@openai/agents/sandbox";
import { ScriptedModel, assistantMessage, functionCall } from "@openai/agents/testing";

import * as nsbox from "nsbox";
import { bounded, describeOnNsboxServe, toolOutput } from "./support/sdk.mjs";

setTracingDisabled(true);

let client; // the package's Client, to look at the server from outside the SDK
let sdkClient;

function applyPatch(callId, operation) {
  return { type: "apply_patch_call", callId, status: "completed", operation };
}

function patchOutput(call, callId) {
  const out = call.request.input.find((i) => i.callId === callId && i.type === "apply_patch_call_output");
  assert.ok(out, `no output for ${callId} in the model's input`);
  return out;
}

describeOnNsboxServe("accounts of one sandbox (manifest users, runAs) on nsbox serve",
  (started) => ({ client, sdkClient } = started), () => {

  test("alice's file is hers: bob, another agent's account, can read it but neither write over it nor remove it", bounded, async () => {
    const session = await sdkClient.create({ manifest: new Manifest({ users: ["alice", "bob"], groups: [{ name: "team", users: ["alice", "bob"] }] }) });
    try {
      // The accounts the sandbox was made with, as the server records them.
      const info = await client.json("GET", `/v1/sandboxes/${session.state.sandboxId}`);
      assert.deepEqual(info.users.map((u) => u.name).sort(), ["alice", "bob"]);
      assert.deepEqual(info.groups.map((g) => [g.name, [...g.users].sort()]), [["team", ["alice", "bob"]]]);

      const aliceModel = new ScriptedModel([
        [functionCall("exec_command", { cmd: "id -un; echo from-alice > notes.txt; stat -c '%U %a' notes.txt" }, { callId: "a1" })],
        [applyPatch("a2", { type: "create_file", path: "plan.md", diff: "+alice's plan\n" })],
        [assistantMessage("alice done")],
      ]);
      const alice = new SandboxAgent({ name: "alice", model: aliceModel, instructions: "Write notes.", runAs: "alice",
        capabilities: [shell(), filesystem()] });
      const aliceRun = await new Runner().run(alice, "Write your notes.", { sandbox: { session } });
      assert.equal(aliceRun.finalOutput, "alice done");
      assert.equal(aliceModel.remainingSteps, 0);
      const a1 = toolOutput(aliceModel.calls[1], "a1");
      assert.match(a1, /Process exited with code 0/);
      assert.match(a1, /Output:\nalice\nalice 644\n/);
      assert.equal(patchOutput(aliceModel.calls[2], "a2").status, "completed");

      const bobModel = new ScriptedModel([
        [functionCall("exec_command", { cmd: "id -un; cat notes.txt; echo from-bob > notes.txt" }, { callId: "b1" })],
        [functionCall("exec_command", { cmd: "rm -f notes.txt plan.md" }, { callId: "b2" })],
        [applyPatch("b3", { type: "update_file", path: "plan.md", diff: "@@\n-alice's plan\n+bob's plan\n" })],
        [assistantMessage("bob done")],
      ]);
      const bob = new SandboxAgent({ name: "bob", model: bobModel, instructions: "Change the notes.", runAs: "bob",
        capabilities: [shell(), filesystem()] });
      const bobRun = await new Runner().run(bob, "Change alice's notes.", { sandbox: { session } });
      assert.equal(bobRun.finalOutput, "bob done");
      const b1 = toolOutput(bobModel.calls[1], "b1");
      assert.match(b1, /Process exited with code 1/);
      assert.match(b1, /Output:\nbob\nfrom-alice\n.*notes\.txt: Permission denied/s);
      const b2 = toolOutput(bobModel.calls[2], "b2");
      assert.match(b2, /Process exited with code 1/);
      assert.match(b2, /cannot remove 'notes\.txt': Operation not permitted/);
      assert.match(b2, /cannot remove 'plan\.md': Operation not permitted/);
      // The patch applies to what bob reads; the write is alice's file's refusal.
      assert.equal(applyDiff(applyDiff("", "+alice's plan\n", "create"), "@@\n-alice's plan\n+bob's plan\n"), "bob's plan");
      const b3 = patchOutput(bobModel.calls[3], "b3");
      assert.equal(b3.status, "failed", JSON.stringify(b3));
      assert.match(JSON.stringify(b3), /not permitted to bob/, JSON.stringify(b3));

      // As the sandbox's own user sees them: unchanged, and owned by alice.
      assert.equal(Buffer.from(await session.readFile({ path: "notes.txt" })).toString(), "from-alice\n");
      assert.equal(Buffer.from(await session.readFile({ path: "plan.md" })).toString(), applyDiff("", "+alice's plan\n", "create"));
      const owners = await session.execCommand({ cmd: "id -un; stat -c '%U %n' notes.txt plan.md" });
      assert.match(owners, /Output:\nuser\nalice notes\.txt\nalice plan\.md\n/);
    } finally {
      await session.delete();
    }
  });

  test("a SandboxAgent with runAs, its session made by the Runner from the client, runs as that account", bounded, async () => {
    // The SDK adds the agent's runAs to the manifest's users (manifestWithRunAsUser) at create.
    const model = new ScriptedModel([
      [functionCall("exec_command", { cmd: "id -un; id -u; touch mine.txt; stat -c %U mine.txt" }, { callId: "c1" })],
      [assistantMessage("done")],
    ]);
    const agent = new SandboxAgent({ name: "carol", model, instructions: "Work.", runAs: "carol", capabilities: [shell()] });
    const result = await new Runner().run(agent, "Who are you?", { sandbox: { client: sdkClient } });
    assert.equal(result.finalOutput, "done");
    const c1 = toolOutput(model.calls[1], "c1");
    assert.match(c1, /Process exited with code 0/);
    assert.match(c1, /Output:\ncarol\n1001\ncarol\n/);
    assert.deepEqual(await nsbox.Sandbox.list({ client }), [], "the Runner's session was not removed");
  });

  test("the session's calls with runAs: tty and not, write_stdin, files, listings, images and manifest entries as that account", bounded, async () => {
    const session = await sdkClient.create({ manifest: new Manifest({ users: ["alice", "bob"] }) });
    try {
      assert.match(await session.execCommand({ cmd: "id -un", tty: true, runAs: "bob" }), /Output:\nbob\r?\n/);
      const started = await session.execCommand({ cmd: "read line; echo got-$line-as-$(id -un)", runAs: "alice", yieldTimeMs: 500 });
      const id = Number(/session ID (\d+)/.exec(started)?.[1]);
      assert.ok(id > 0, started);
      const continued = await session.writeStdin({ sessionId: id, chars: "hi\n", yieldTimeMs: 5000 });
      assert.match(continued, /got-hi-as-alice/);
      assert.match(continued, /Process exited with code 0/);

      await session.materializeEntry({ path: "shared", entry: dir({ children: { "a.txt": file({ content: "A" }) } }), runAs: "alice" });
      await session.applyManifest(new Manifest({ entries: { "b.txt": file({ content: "B", permissions: "-rw-------" }) } }), "bob");
      const editor = session.createEditor("alice");
      await editor.createFile({ path: "shared/patched.txt", diff: "+patched\n" });
      const owners = await session.execCommand({ cmd: "stat -c '%U %a %n' shared shared/a.txt shared/patched.txt b.txt" });
      assert.match(owners, /alice 755 shared\nalice 755 shared\/a\.txt\nalice 644 shared\/patched\.txt\nbob 600 b\.txt\n/);
      assert.equal(session.state.manifest.entries["shared"]?.type, "dir");

      // bob's private file is his alone; alice's directory is hers to write in.
      assert.equal(Buffer.from(await session.readFile({ path: "b.txt", runAs: "bob" })).toString(), "B");
      await assert.rejects(session.readFile({ path: "b.txt", runAs: "alice" }), nsbox.PermissionDenied);
      await assert.rejects(session.createEditor("bob").createFile({ path: "shared/bob.txt", diff: "+no\n" }), nsbox.PermissionDenied);
      assert.equal(await session.pathExists("shared/bob.txt"), false);
      assert.deepEqual((await session.listDir({ path: "shared", runAs: "bob" })).map((e) => e.name).sort(), ["a.txt", "patched.txt"]);
      assert.equal(await session.pathExists("shared/a.txt", "bob"), true);
      assert.equal(await session.directoryExists("shared", "bob"), true);
      await session.writeFile("pixel.png", PNG_1X1, "alice");
      const image = await session.viewImage({ path: "pixel.png", runAs: "bob" });
      assert.match(JSON.stringify(image), /image\/png/);

      // Accounts are made with the sandbox; one it was not made with is refused, or unknown to the server.
      await assert.rejects(session.applyManifest(new Manifest({ users: ["dave"] })),
        (e) => e instanceof SandboxUnsupportedFeatureError && /cannot add the users dave to a running nsbox sandbox/.test(e.message));
      await assert.rejects(session.execCommand({ cmd: "id", runAs: "dave" }), (e) => e instanceof nsbox.NotFound && /dave/.test(e.message));
      await assert.rejects(session.readFile({ path: "b.txt", runAs: "dave" }), (e) => e instanceof nsbox.NotFound && /dave/.test(e.message));
      await assert.rejects(session.pathExists("b.txt", "dave"), (e) => e instanceof nsbox.NotFound && /dave/.test(e.message));
    } finally {
      await session.delete();
    }
  });

  test("an entry's group is refused at create, naming the entry, and nothing is made", bounded, async () => {
    const manifest = new Manifest({ users: ["alice"], entries: { "team.txt": file({ content: "t", group: { name: "alice" } }) } });
    await assert.rejects(sdkClient.create({ manifest }),
      (e) => e instanceof SandboxUnsupportedFeatureError && /manifest entry team\.txt names the group alice/.test(e.message));
    assert.deepEqual(await nsbox.Sandbox.list({ client }), []);
  });
});

// A 1x1 PNG (a red pixel).
const PNG_1X1 = Buffer.from("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==", "base64");
