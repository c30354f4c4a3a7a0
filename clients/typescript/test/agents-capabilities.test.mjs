// The OpenAI Agents SDK's skills, compaction and memory capabilities on a real `nsbox
// serve`, through nsbox/agents: the unmodified SDK's Runner runs SandboxAgents whose
// models are its ScriptedModel (no network, tracing off). Skills load a lazily indexed
// skill from a local directory (`load_skill` → materializeEntry); compaction sends its
// threshold and drops what precedes a compaction item from the next turn; memory runs
// the SDK's memory-on-S3 example: two fresh sandboxes mount one s3rver bucket prefix,
// the first run's memory generation (its phase-one and phase-two agents, scripted too)
// writes the SDK's memory layout there, and the second run is given the summary and
// reads it. Credentials stay out of every sandbox.
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";

import { Runner, setTracingDisabled } from "@openai/agents";
import {
  Manifest,
  SandboxAgent,
  StaticCompactionPolicy,
  compaction,
  file,
  filesystem,
  localBindMountStrategy,
  memory,
  s3Mount,
  shell,
  skills,
} from "@openai/agents/sandbox";
import { localDirLazySkillSource } from "@openai/agents/sandbox/local";
import { ScriptedModel, assistantMessage, functionCall } from "@openai/agents/testing";

import { bounded, describeOnNsboxServe, toolOutput } from "./support/sdk.mjs";
import { S3RVER_KEY_ID, S3rver } from "./support/s3rver.mjs";

setTracingDisabled(true);

let server;
let client; // the package's Client, to look at the server from outside the SDK
let sdkClient;

/** A temporary directory of the test's, removed after it. */
function tempDir(t, prefix) {
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), prefix)));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Files under `base`: {"a/b.txt": [content, mode]}. */
function writeTree(base, tree) {
  for (const [rel, [content, mode]] of Object.entries(tree)) {
    const p = path.join(base, rel);
    fs.mkdirSync(path.dirname(p), { recursive: true });
    fs.writeFileSync(p, content);
    fs.chmodSync(p, mode);
  }
}

const SKILL_MD = `---
name: csv-report
description: Summarize a CSV file's numeric column with the bundled script.
---
# csv-report
Run scripts/summarize.sh FILE: it prints the sum of the second column.
`;

describeOnNsboxServe("the SDK's skills, compaction and memory capabilities on nsbox serve",
  (started) => ({ server, client, sdkClient } = started), () => {

  test("skills: load_skill materializes a lazily indexed local skill, once, and the agent runs its script", bounded, async (t) => {
    const base = tempDir(t, "nsbox-test-skills-");
    writeTree(base, {
      "skills/csv-report/SKILL.md": [SKILL_MD, 0o644],
      "skills/csv-report/scripts/summarize.sh": ["#!/bin/sh\nawk -F, 'NR > 1 { s += $2 } END { print \"sum=\" s }' \"$1\"\n", 0o755],
      "skills/csv-report/references/columns.md": ["q: quarter, n: amount\n", 0o644],
      "skills/unused/SKILL.md": ["---\nname: unused\ndescription: Never loaded.\n---\n", 0o644],
    });
    // A session of the test's own: the agent's defaultManifest reaches it through applyManifest.
    const session = await sdkClient.create({ manifest: new Manifest(), options: { localSources: { baseDir: base } } });
    try {
      const model = new ScriptedModel([
        [functionCall("load_skill", { skill_name: "csv-report" }, { callId: "c1" })],
        [functionCall("exec_command", {
          cmd: "head -4 .agents/csv-report/SKILL.md; .agents/csv-report/scripts/summarize.sh data/sales.csv; ls -A .agents",
        }, { callId: "c2" })],
        [functionCall("load_skill", { skill_name: "csv-report" }, { callId: "c3" })],
        [assistantMessage("summarized")],
      ]);
      const agent = new SandboxAgent({
        name: "analyst", model, instructions: "Use your skills.",
        capabilities: [shell(), skills({ lazyFrom: localDirLazySkillSource({ src: "skills", baseDir: base }) })],
        defaultManifest: new Manifest({ entries: { "data/sales.csv": file({ content: "q,n\n1,3\n2,4\n" }) } }),
      });
      const result = await new Runner().run(agent, "Summarize data/sales.csv.", { sandbox: { session } });
      assert.equal(result.finalOutput, "summarized");
      assert.equal(model.remainingSteps, 0);

      // The index the model was given, from the skills' frontmatter on this side.
      const instructions = model.calls[0].request.systemInstructions;
      assert.match(instructions, /- csv-report: Summarize a CSV file's numeric column with the bundled script\. \(file: \.agents\/csv-report\)/);
      assert.match(instructions, /- unused: Never loaded\./);
      assert.deepEqual(JSON.parse(toolOutput(model.calls[1], "c1")), { status: "loaded", skill_name: "csv-report", path: ".agents/csv-report" });
      const ran = toolOutput(model.calls[2], "c2");
      assert.match(ran, /Process exited with code 0/);
      assert.ok(ran.includes(`Output:\n${SKILL_MD.split("\n").slice(0, 4).join("\n")}\nsum=7\ncsv-report\n`), ran);
      assert.deepEqual(JSON.parse(toolOutput(model.calls[3], "c3")), { status: "already_loaded", skill_name: "csv-report", path: ".agents/csv-report" });

      // The skill's files as the sandbox has them: the bytes and modes of the host's, the other skill not loaded.
      for (const rel of ["SKILL.md", "scripts/summarize.sh", "references/columns.md"]) {
        assert.deepEqual(Buffer.from(await session.readFile({ path: `.agents/csv-report/${rel}` })),
          fs.readFileSync(path.join(base, "skills", "csv-report", rel)), rel);
      }
      const modes = await session.execCommand({ cmd: "stat -c '%a %n' .agents/csv-report/scripts/summarize.sh .agents/csv-report/SKILL.md" });
      assert.match(modes, /755 \.agents\/csv-report\/scripts\/summarize\.sh\n644 \.agents\/csv-report\/SKILL\.md/);
      assert.deepEqual((await session.listDir({ path: ".agents" })).map((e) => [e.name, e.type]), [["csv-report", "dir"]]);
      assert.equal(await session.pathExists(".agents/unused"), false);
      // Both additions are in the session's manifest, as the SDK's own clients record them.
      assert.equal(session.state.manifest.entries[".agents/csv-report"]?.type, "local_dir");
      assert.equal(session.state.manifest.entries["data/sales.csv"]?.type, "file");
    } finally {
      await session.delete();
    }
  });

  test("compaction: every request carries the threshold, and a compaction item drops the turns before it; " +
    "the sandbox's work goes on", bounded, async () => {
    const summary = { type: "compaction", encrypted_content: "opaque-summary-of-earlier-turns", id: "cmp_1" };
    const model = new ScriptedModel([
      [functionCall("exec_command", { cmd: "echo first-turn > note.txt; cat note.txt" }, { callId: "c1" })],
      // As the Responses API answers once the context passed the threshold: one item standing for all before it.
      [summary, functionCall("exec_command", { cmd: "cat note.txt; echo second-turn >> note.txt" }, { callId: "c2" })],
      [functionCall("exec_command", { cmd: "cat note.txt" }, { callId: "c3" })],
      [assistantMessage("compacted")],
    ]);
    const agent = new SandboxAgent({
      name: "long-runner", model, instructions: "Keep notes.",
      capabilities: [shell(), compaction({ policy: new StaticCompactionPolicy(5000) })],
    });
    const result = await new Runner().run(agent, "Start the notes.", { sandbox: { client: sdkClient } });
    assert.equal(result.finalOutput, "compacted");
    assert.equal(model.remainingSteps, 0);

    for (const call of model.calls) {
      assert.deepEqual(call.request.modelSettings.providerData?.context_management,
        [{ type: "compaction", compact_threshold: 5000 }], `request ${call.index}`);
    }
    const isUserMessage = (item) => item.role === "user";
    const types = (call) => call.request.input.map((item) => item.type ?? item.role);
    // Before the compaction item: the whole conversation, the user's message first.
    assert.ok(isUserMessage(model.calls[0].request.input[0]), JSON.stringify(types(model.calls[0])));
    assert.ok(isUserMessage(model.calls[1].request.input[0]), JSON.stringify(types(model.calls[1])));
    assert.match(toolOutput(model.calls[1], "c1"), /Output:\nfirst-turn\n/);
    // After it: the turns start at the compaction item; the user's message and c1 are gone.
    for (const call of model.calls.slice(2)) {
      assert.deepEqual(call.request.input[0], summary, JSON.stringify(types(call)));
      assert.ok(!call.request.input.some(isUserMessage), JSON.stringify(types(call)));
      assert.ok(!call.request.input.some((item) => item.callId === "c1"), JSON.stringify(types(call)));
    }
    assert.match(toolOutput(model.calls[2], "c2"), /Process exited with code 0\n[^]*Output:\nfirst-turn\n/);
    assert.match(toolOutput(model.calls[3], "c3"), /Output:\nfirst-turn\nsecond-turn\n/);
  });

  test("memory_s3: a first sandbox's memory generation writes the SDK's memory layout to a bucket mount; a second, " +
    "fresh sandbox on the same prefix is given the summary and reads it; no credential is inside", bounded, memoryOnS3);
});

/**
 * The SDK's memory-on-S3 example (examples/sandbox/memory_s3.py of the Python SDK) with
 * scripted models, on s3rver: a sandbox made here runs the first agent (it fixes a bug),
 * the Runner makes the second from the agent's defaultManifest. The bucket is served by
 * nsbox's built-in server (the SDK's local_bind strategy): the example's rclone pattern
 * loses writes here (docs/agents-sdk.md, "Skills, compaction and memory").
 */
async function memoryOnS3() {
  const s3 = new S3rver();
  const secret = `sEcReT-memory-${process.pid}-${Date.now()}`;
  const prefix = `sandbox-memory/${process.pid}-${Date.now()}`;
  let first;
  try {
    await s3.start("agents");
    // The example's manifest: a small buggy project, and `persistent` on the bucket, read-write.
    const manifest = new Manifest({
      entries: {
        "src/report.py": file({ content: "def total(subtotal, tax_rate):\n    return subtotal + tax_rate\n" }),
        persistent: s3Mount({
          bucket: "agents", prefix, endpointUrl: s3.endpoint, region: "us-east-1", readOnly: false,
          accessKeyId: S3RVER_KEY_ID, secretAccessKey: secret, mountStrategy: localBindMountStrategy(),
        }),
      },
      environment: { MARKER: "visible-to-commands" },
    });
    const layout = { memoriesDir: "persistent/memories", sessionsDir: "persistent/sessions" };
    const memoryAgent = (model, generate, defaultManifest) => new SandboxAgent({
      name: "memory-s3", model, instructions: "Fix bugs in the workspace; keep answers short.", defaultManifest,
      capabilities: [memory({ layout, generate }), filesystem(), shell()],
    });
    // Phase one (one rollout → its raw memory) and phase two (consolidation), as their models would answer.
    const phaseOne = (slug, rawMemory) => new ScriptedModel([[assistantMessage(JSON.stringify({
      rollout_summary: `Rollout ${slug}: ${rawMemory}`, rollout_slug: slug, raw_memory: rawMemory,
    }))]]);
    const phaseTwo = (summaryText) => new ScriptedModel([
      [functionCall("exec_command", {
        cmd: `printf '%s\\n' '${summaryText}' > persistent/memories/memory_summary.md && ` +
          `printf '# Memory\\n- ${summaryText}\\n' > persistent/memories/MEMORY.md && ls persistent/memories`,
      }, { callId: "p2" })],
      [assistantMessage("consolidated")],
    ]);
    const object = (key) => s3.object(`${prefix}/${key}`).toString("utf8");

    // The first sandbox, made here: the agent fixes the bug; the run's end generates memory into the bucket.
    first = await sdkClient.create({ manifest });
    const fixModel = new ScriptedModel([
      [functionCall("exec_command", { cmd: "sed -i 's/subtotal + tax_rate/subtotal * (1 + tax_rate)/' src/report.py && cat src/report.py" },
        { callId: "fix" })],
      [assistantMessage("fixed: total multiplies by 1 + tax_rate")],
    ]);
    const firstSummary = "invoice total bug in src/report.py: multiply subtotal by (1 + tax_rate)";
    const firstPhaseTwo = phaseTwo(firstSummary);
    const firstAgent = memoryAgent(fixModel, {
      phaseOneModel: phaseOne("invoice-total-fix", "src/report.py total() added tax_rate; fixed to subtotal * (1 + tax_rate)."),
      phaseTwoModel: firstPhaseTwo,
    });
    const firstRun = await new Runner({ groupId: "rollout-first" }).run(firstAgent, "Fix the invoice total bug.", { sandbox: { session: first } });
    assert.equal(firstRun.finalOutput, "fixed: total multiplies by 1 + tax_rate");
    assert.match(toolOutput(fixModel.calls[1], "fix"), /return subtotal \* \(1 \+ tax_rate\)/);
    assert.equal(fixModel.remainingSteps, 0);
    assert.equal(firstPhaseTwo.remainingSteps, 0, "phase two did not run");
    assert.match(toolOutput(firstPhaseTwo.calls[1], "p2"), /Process exited with code 0\n[^]*MEMORY\.md\n[^]*memory_summary\.md\n/);

    // Credentials: in no process's environment inside, nor the mount table (looked at outside the agent's run,
    // whose transcript goes to the bucket), nor the serialized state.
    const inside = await first.execCommand({
      cmd: "all=$(cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'); " +
        "echo marker=$(printf '%s\\n' \"$all\" | grep -c MARKER=visible-to-commands); " +
        `echo key=$(printf '%s\\n' "$all" | grep -c -F '${S3RVER_KEY_ID}'); echo secret=$(printf '%s\\n' "$all" | grep -c -F '${secret}'); ` +
        "cat /proc/self/mountinfo",
    });
    assert.match(inside, /marker=[1-9]/, `the environment of the sandbox's processes was not read: ${inside}`);
    assert.match(inside, /key=0\n/);
    assert.match(inside, /secret=0\n/);
    assert.match(inside, / \/workspace\/persistent .* - fuse nsbox-bucket:/, `the mount is not in the mount table: ${inside}`);
    assert.ok(!inside.split("Output:")[1].includes(secret), "the secret is in the sandbox's mount table");
    assert.ok(!JSON.stringify(await sdkClient.serializeSessionState(first.state)).includes(secret), "the secret is in the serialized state");
    await first.delete();

    // The SDK's layout, in the bucket under the prefix once the sandbox is gone (directories as `dir/` markers).
    const keys = s3.keys(`${prefix}/`).map((k) => k.slice(prefix.length + 1));
    assert.deepEqual(keys, ["memories/", "memories/MEMORY.md", "memories/memory_summary.md", "memories/phase_two_selection.json",
      "memories/raw_memories.md", "memories/raw_memories/", "memories/raw_memories/rollout-first.md", "memories/rollout_summaries/",
      "memories/rollout_summaries/rollout-first_invoice-total-fix.md", "memories/skills/", "sessions/", "sessions/rollout-first.jsonl"]);
    assert.equal(object("memories/memory_summary.md"), `${firstSummary}\n`);
    assert.match(object("memories/raw_memories/rollout-first.md"), /^rollout_id: rollout-first\n[^]*fixed to subtotal \* \(1 \+ tax_rate\)/);
    assert.deepEqual(JSON.parse(object("memories/phase_two_selection.json")).selected.map((s) => s.rollout_id), ["rollout-first"]);
    assert.match(object("sessions/rollout-first.jsonl"), /"rollout_id":"rollout-first"/);
    for (const key of keys) assert.ok(!s3.object(`${prefix}/${key}`).includes(secret), `the secret is in ${key}`);

    // The second sandbox, made by the Runner from the agent's defaultManifest and removed after the run: the
    // summary is in the agent's instructions, and the agent reads it.
    const readModel = new ScriptedModel([
      [functionCall("exec_command", {
        cmd: "cat persistent/memories/memory_summary.md; grep -c tax_rate persistent/memories/MEMORY.md; cat src/report.py",
      }, { callId: "read" })],
      [assistantMessage("remembered")],
    ]);
    const secondSummary = "two rollouts: the invoice fix, then reading memory";
    const secondPhaseTwo = phaseTwo(secondSummary);
    const secondAgent = memoryAgent(readModel, {
      phaseOneModel: phaseOne("memory-read", "The agent read the memory summary in a fresh sandbox."),
      phaseTwoModel: secondPhaseTwo,
    }, manifest);
    const secondRun = await new Runner({ groupId: "rollout-second" }).run(secondAgent, "What did you fix before?", { sandbox: { client: sdkClient } });
    assert.equal(secondRun.finalOutput, "remembered");
    assert.deepEqual(await client.json("GET", "/v1/sandboxes"), { sandboxes: [] }, "the Runner's sandbox is removed after its run");
    const given = readModel.calls[0].request.systemInstructions;
    assert.ok(given.includes(firstSummary), `the memory summary is not in the instructions:\n${given}`);
    assert.ok(given.includes("persistent/memories"), given);
    const read = toolOutput(readModel.calls[1], "read");
    assert.match(read, /Process exited with code 0/);
    // The memory is the first sandbox's; the workspace is the manifest's own (the fix is not there: a fresh sandbox).
    assert.ok(read.includes(`Output:\n${firstSummary}\n1\ndef total(subtotal, tax_rate):\n    return subtotal + tax_rate\n`), read);
    // The second run's memory joined the first's: phase two selected both rollouts and rewrote the summary.
    assert.equal(secondPhaseTwo.remainingSteps, 0, "the second run's phase two did not run");
    assert.deepEqual(JSON.parse(object("memories/phase_two_selection.json")).selected.map((s) => s.rollout_id).sort(),
      ["rollout-first", "rollout-second"]);
    assert.match(object("memories/raw_memories.md"), /^rollout_id: rollout-second\n[^]*read the memory summary[^]*\nrollout_id: rollout-first\n/);
    assert.equal(object("memories/memory_summary.md"), `${secondSummary}\n`);
    assert.ok(!server.log().includes(secret), "the secret is in the server's log");
  } finally {
    await first?.delete();
    await s3.stop();
  }
}
