// The OpenAI Agents SDK's host sources and bucket mounts on a real `nsbox serve`, through
// nsbox/agents: the SDK's Runner runs a SandboxAgent with its ScriptedModel (no network,
// tracing off) whose manifest has a local_dir and a git_repo (a repository made here with
// `git init`), read on this side and sent as files; and the SDK's mount smoke test, an
// s3_mount on s3rver (tests/peers, a real S3 server on loopback) written and read by the
// agent, read back by the host, with its credentials nowhere inside the sandbox: served by
// nsbox's built-in server (the SDK's local_bind strategy) and by rclone (the SDK's
// in-container rclone pattern, acknowledged as the SDK asks; nsbox runs it on the host).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";

import { Runner, setTracingDisabled } from "@openai/agents";
import {
  Manifest,
  SandboxAgent,
  gitRepo,
  inContainerMountStrategy,
  localBindMountStrategy,
  localDir,
  s3Mount,
  shell,
} from "@openai/agents/sandbox";
import { ScriptedModel, assistantMessage, functionCall } from "@openai/agents/testing";

import * as nsbox from "nsbox";
import { NsboxSandboxClient } from "nsbox/agents";
import { bounded, describeOnNsboxServe, toolOutput } from "./support/sdk.mjs";
import { S3RVER_KEY_ID, S3rver } from "./support/s3rver.mjs";
import { waitUntil } from "./support/server.mjs";

setTracingDisabled(true);

const BUCKET = "agents";
// s3rver knows one key id and checks no signature, so any secret goes; both are looked for inside.
const KEY_ID = S3RVER_KEY_ID;
const SECRET = `sEcReT-ts-${Date.now()}`;

function git(cwd, ...args) {
  return execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@example.com", ...args], { cwd, encoding: "utf8" });
}

let server;
let client; // the package's Client, to look at the server from outside the SDK
let sdkClient;

describeOnNsboxServe("the SDK's host sources and bucket mounts on nsbox serve", (started) => ({ server, client, sdkClient } = started), () => {

  test("a SandboxAgent cats files of a local_dir and of a git_repo (a local repository) that the client read and sent", bounded, async () => {
    const base = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "nsbox-test-sources-")));
    try {
      fs.mkdirSync(path.join(base, "project", "src"), { recursive: true });
      fs.writeFileSync(path.join(base, "project", "README.md"), "project readme\n");
      fs.writeFileSync(path.join(base, "project", "src", "app.py"), "print('app')\n", { mode: 0o755 });
      fs.chmodSync(path.join(base, "project", "src", "app.py"), 0o755);
      const repo = path.join(base, "repo");
      fs.mkdirSync(path.join(repo, "lib"), { recursive: true });
      fs.writeFileSync(path.join(repo, "hello.txt"), "from the repo, first\n");
      fs.writeFileSync(path.join(repo, "lib", "util.txt"), "util\n");
      git(repo, "init", "-q", "-b", "main");
      git(repo, "add", ".");
      git(repo, "commit", "-qm", "first");
      fs.writeFileSync(path.join(repo, "hello.txt"), "from the repo, second\n");
      git(repo, "commit", "-qam", "second");

      const model = new ScriptedModel([
        [functionCall("exec_command", {
          cmd: "cat project/README.md project/src/app.py code/hello.txt code/lib/util.txt; stat -c '%a %n' project/src/app.py; ls -A code",
        }, { callId: "c1" })],
        [assistantMessage("read")],
      ]);
      const agent = new SandboxAgent({
        name: "reader", model, instructions: "Read the sources.", capabilities: [shell()],
        defaultManifest: new Manifest({ entries: { project: localDir({ src: "project" }), code: gitRepo({ repo: "./repo", ref: "main" }) } }),
      });
      const result = await new Runner().run(agent, "Read the sources.", {
        sandbox: { client: sdkClient, options: { localSources: { baseDir: base } } },
      });
      assert.equal(result.finalOutput, "read");
      const out = toolOutput(model.calls[1], "c1");
      assert.match(out, /Process exited with code 0/);
      assert.match(out, /project readme\nprint\('app'\)\nfrom the repo, second\nutil\n755 project\/src\/app\.py\nhello\.txt\nlib\n/);
      assert.doesNotMatch(out, /\.git/, "the repository's .git is not sent");
      assert.deepEqual(await nsbox.Sandbox.list({ client }), [], "the run's sandbox is removed after it");
    } finally {
      fs.rmSync(base, { recursive: true, force: true });
    }
  });

  test("the mount smoke test: s3_mounts on s3rver written with printf and read with cat by the agent, read back by the host; " +
    "their credentials are nowhere inside", bounded, async () => {
    const s3 = new S3rver();
    let session;
    let snapshot;
    try {
      await s3.start(BUCKET);
      const bucket = (prefix, mountStrategy) => s3Mount({
        bucket: BUCKET, prefix, endpointUrl: s3.endpoint, region: "us-east-1", readOnly: false,
        accessKeyId: KEY_ID, secretAccessKey: SECRET, mountStrategy,
      });
      const manifest = new Manifest({
        entries: {
          data: bucket("builtin/", localBindMountStrategy()),
          rclone: bucket("rclone/", inContainerMountStrategy({ pattern: { type: "rclone" } })),
        },
        environment: { MARKER: "visible-to-commands" },
      }).withInContainerMountCredentialExposureAcknowledged("rclone");
      session = await sdkClient.create({ manifest });
      const payload = `bytes through the mount ${process.pid}`;
      // Every process's environment inside, counted, then the mount table.
      const lookInside = "all=$(cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'); " +
        "echo marker=$(printf '%s\\n' \"$all\" | grep -c MARKER=visible-to-commands); " +
        `echo key=$(printf '%s\\n' "$all" | grep -c -F '${KEY_ID}'); ` +
        `echo secret=$(printf '%s\\n' "$all" | grep -c -F '${SECRET}'); cat /proc/self/mountinfo`;
      const model = new ScriptedModel([
        [functionCall("exec_command", {
          cmd: `for m in data rclone; do printf %s '${payload}' > $m/note.txt && cat $m/note.txt && echo " <- $m"; done`,
        }, { callId: "c1" })],
        [functionCall("exec_command", { cmd: lookInside }, { callId: "c2" })],
        [assistantMessage("stored")],
      ]);
      const agent = new SandboxAgent({ name: "writer", model, instructions: "Store the note.", capabilities: [shell()] });
      const result = await new Runner().run(agent, "Store the note.", { sandbox: { session } });
      assert.equal(result.finalOutput, "stored");

      const wrote = toolOutput(model.calls[1], "c1");
      assert.match(wrote, /Process exited with code 0/);
      assert.ok(wrote.includes(`Output:\n${payload} <- data\n${payload} <- rclone\n`), wrote);
      for (const m of ["data", "rclone"]) {
        assert.equal(Buffer.from(await session.readFile({ path: `${m}/note.txt` })).toString(), payload, m);
      }
      // And in the bucket, as s3rver stores it (rclone uploads just after the close).
      const stored = (prefix) => path.join(s3.dir, "data", BUCKET, prefix, "note.txt._S3rver_object");
      assert.equal(fs.readFileSync(stored("builtin"), "utf8"), payload);
      assert.ok(await waitUntil(() => fs.existsSync(stored("rclone")), 20_000), "rclone did not upload the note in 20 s");
      assert.equal(fs.readFileSync(stored("rclone"), "utf8"), payload);

      const inside = toolOutput(model.calls[2], "c2");
      assert.match(inside, /marker=[1-9]/, `the environment of the sandbox's processes was not read: ${inside}`);
      assert.match(inside, /key=0\n/);
      assert.match(inside, /secret=0\n/);
      assert.match(inside, / \/workspace\/data .* - fuse nsbox-bucket:/, `the built-in mount is not in the mount table: ${inside}`);
      assert.match(inside, / \/workspace\/rclone .* - fuse\.rclone /, `the rclone mount is not in the mount table: ${inside}`);
      // A snapshot leaves the mounts out (they are ephemeral), and holds no credential.
      snapshot = await session.sandbox.snapshot();
      const home = fs.readFileSync(path.join(server.root, "data", "snapshots", snapshot.id, "home.tar"));
      const members = execFileSync("tar", ["-tf", "-"], { input: home, encoding: "utf8" }).split("\n");
      assert.deepEqual(members.filter((m) => /^(\.\/)?workspace\/(data|rclone)(\/|$)/.test(m)), [], members.join(" "));
      for (const secret of [KEY_ID, SECRET]) {
        assert.ok(!home.includes(secret) && !JSON.stringify(snapshot).includes(secret), `${secret} is in the snapshot`);
        assert.ok(!inside.includes(secret), `${secret} is in the sandbox's mount table`);
        const state = JSON.stringify(await sdkClient.serializeSessionState(session.state));
        assert.ok(!state.includes(secret), `${secret} is in the serialized state: ${state}`);
        const info = JSON.stringify(await client.json("GET", `/v1/sandboxes/${session.state.sandboxId}`));
        assert.ok(!info.includes(secret), `${secret} is in the sandbox's document`);
        assert.ok(!server.log().includes(secret), `${secret} is in the server's log`);
      }
    } finally {
      if (snapshot) await nsbox.Sandbox.removeSnapshot(snapshot.id, { client });
      await session?.delete();
      await s3.stop();
    }
  });
});
