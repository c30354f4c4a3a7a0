// bench/agents: the OpenAI Agents SDK's sandbox backends on this machine, in one run
// (issue 34's benchmark; docs/performance.md, "The Agents SDK"):
//
//   nsbox         NsboxSandboxClient against a real `nsbox serve` (its own state root)
//   unix-local    the SDK's UnixLocalSandboxClient: no isolation (commands run as this user)
//   docker        the SDK's DockerSandboxClient, when `docker info` answers (on Debian 12:
//                 podman-docker and an image, see --docker-image); else skipped, saying why
//
// Two figures each, medians, the backends interleaved run by run:
//   1. create -> first result: client.create() (the SDK's default manifest with one file)
//      until the first execCommand's answer ("cat" of that file) has come back;
//   2. per tool call: one tool call of the SDK's Runner (a ScriptedModel that calls
//      exec_command `true` K times, then answers), the run's time divided by K, minus
//      nothing: what an agent's turn costs on top of the model. Also the bare
//      execCommand (no Runner) for the backend's own part.
// Targets: nsbox's create -> first result <= 1/10 of docker's; per tool call <= 1.5x
// unix-local's (which isolates nothing).
//
// Usage: bench/agents [--runs N] [--calls K] [--docker-image IMAGE] [--json FILE]
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { spawnSync } from "node:child_process";
import { performance } from "node:perf_hooks";

import { Runner, setTracingDisabled } from "@openai/agents";
import { Manifest, SandboxAgent, file, shell } from "@openai/agents/sandbox";
import { DockerSandboxClient, UnixLocalSandboxClient } from "@openai/agents/sandbox/local";
import { ScriptedModel, assistantMessage, functionCall } from "@openai/agents/testing";

import { NsboxSandboxClient } from "nsbox/agents";
import { Server, binary } from "../test/support/server.mjs";

setTracingDisabled(true);

function option(name, fallback) {
  const at = process.argv.indexOf(`--${name}`);
  return at > 0 && process.argv[at + 1] !== undefined ? process.argv[at + 1] : fallback;
}
const RUNS = Number(option("runs", "10"));
const CALLS = Number(option("calls", "20"));
const DOCKER_IMAGE = option("docker-image", "nsbox-bench-debian:12");
const JSON_OUT = option("json", "");

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const round = (x) => Math.round(x * 100) / 100;

function manifest() {
  return new Manifest({ entries: { "data/hello.txt": file({ content: "hello\n" }) } });
}

async function createToFirstResult(client) {
  const start = performance.now();
  const session = await client.create({ manifest: manifest() });
  const out = await session.execCommand({ cmd: "cat data/hello.txt", yieldTimeMs: 10_000 });
  const ms = performance.now() - start;
  if (!out.includes("hello")) throw new Error(`the first result is not the file's: ${out}`);
  return { ms, session };
}

async function perCall(session) {
  // The backend's own part: execCommand, no Runner.
  const bare = [];
  for (let i = 0; i < CALLS; i++) {
    const t = performance.now();
    await session.execCommand({ cmd: "true", yieldTimeMs: 10_000 });
    bare.push(performance.now() - t);
  }
  // Through the Runner: K tool calls and an answer.
  const steps = [];
  for (let i = 0; i < CALLS; i++) steps.push([functionCall("exec_command", { cmd: "true" }, { callId: `c${i}` })]);
  steps.push([assistantMessage("done")]);
  const model = new ScriptedModel(steps);
  const agent = new SandboxAgent({ name: "bench", model, instructions: "Run the commands.", capabilities: [shell()] });
  const t = performance.now();
  const result = await new Runner().run(agent, "Go.", { sandbox: { session }, maxTurns: CALLS + 5 });
  const runner = (performance.now() - t) / CALLS;
  if (result.finalOutput !== "done") throw new Error(`the run did not finish: ${result.finalOutput}`);
  return { bare: median(bare), runner };
}

// The SDK runs `docker` from PATH. Where no Docker daemon answers and podman is there,
// podman goes first on PATH as `docker` (a directory of ours, removed at the end).
function dockerWhyNot(scratch) {
  let info = spawnSync("docker", ["info"], { encoding: "utf8", timeout: 30_000 });
  if ((info.error || info.status !== 0) && !spawnSync("podman", ["--version"]).error) {
    const shim = path.join(scratch, "bin");
    fs.mkdirSync(shim);
    fs.symlinkSync(spawnSync("sh", ["-c", "command -v podman"], { encoding: "utf8" }).stdout.trim(), path.join(shim, "docker"));
    process.env.PATH = `${shim}:${process.env.PATH}`;
    // runc, not crun (crun refuses hybrid cgroup hosts), and limits within this process's
    // own (podman's defaults are above what a limited root may set).
    const conf = path.join(scratch, "containers.conf");
    fs.writeFileSync(conf, '[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n' +
      (spawnSync("runc", ["--version"]).error ? "" : '[engine]\nruntime = "runc"\n'));
    process.env.CONTAINERS_CONF = conf;
    info = spawnSync("docker", ["info"], { encoding: "utf8", timeout: 30_000 });
  }
  if (info.error) return `no docker command (${info.error.code}); bench/agents-docker-image installs podman and makes the image`;
  if (info.status !== 0) return `docker info failed: ${(info.stderr || info.stdout).trim().split("\n").pop()}`;
  const image = spawnSync("docker", ["image", "inspect", DOCKER_IMAGE], { encoding: "utf8", timeout: 30_000 });
  if (image.status !== 0) return `no image ${DOCKER_IMAGE}: bench/agents-docker-image makes it offline`;
  return "";
}

async function main() {
  if (!binary.bin) throw new Error(binary.why);
  const server = new Server();
  await server.start();
  const workspaces = fs.mkdtempSync(path.join(os.tmpdir(), "nsbox-bench-agents-"));
  const backends = [
    { name: "nsbox", client: new NsboxSandboxClient({ socket: server.socket, token: server.token, env: {} }) },
    { name: "unix-local", client: new UnixLocalSandboxClient({ workspaceBaseDir: workspaces }) },
  ];
  const dockerSkipped = dockerWhyNot(workspaces);
  if (!dockerSkipped) backends.push({ name: "docker", client: new DockerSandboxClient({ image: DOCKER_IMAGE, workspaceBaseDir: workspaces }) });
  const results = {};
  try {
    for (const b of backends) results[b.name] = { create_ms: [], call_ms: [], runner_call_ms: [] };
    for (let run = 0; run < RUNS; run++) {
      for (const b of backends) {
        const { ms, session } = await createToFirstResult(b.client);
        results[b.name].create_ms.push(ms);
        if (run < 3) {  // the per-call figures from the first runs (each is CALLS calls)
          const calls = await perCall(session);
          results[b.name].call_ms.push(calls.bare);
          results[b.name].runner_call_ms.push(calls.runner);
        }
        await session.delete();
      }
    }
  } finally {
    for (const b of backends) b.client.close?.();
    await server.destroy();
    fs.rmSync(workspaces, { recursive: true, force: true });
  }
  const summary = {};
  for (const [name, r] of Object.entries(results)) {
    summary[name] = { create_to_first_result_ms: round(median(r.create_ms)), exec_call_ms: round(median(r.call_ms)),
      runner_tool_call_ms: round(median(r.runner_call_ms)) };
  }
  const n = summary.nsbox, u = summary["unix-local"], d = summary.docker;
  const ratios = {
    runner_tool_call_vs_unix_local: round(n.runner_tool_call_ms / u.runner_tool_call_ms),
    exec_call_vs_unix_local: round(n.exec_call_ms / u.exec_call_ms),
    create_vs_unix_local: round(n.create_to_first_result_ms / u.create_to_first_result_ms),
  };
  if (d) ratios.create_vs_docker = round(n.create_to_first_result_ms / d.create_to_first_result_ms);
  console.log(`bench/agents: ${RUNS} creates, ${CALLS} calls x 3 per backend, medians (ms)`);
  console.log("backend      create->first result   execCommand   Runner tool call");
  for (const [name, s] of Object.entries(summary)) {
    console.log(`${name.padEnd(12)} ${String(s.create_to_first_result_ms).padStart(20)} ${String(s.exec_call_ms).padStart(13)} ${String(s.runner_tool_call_ms).padStart(18)}`);
  }
  console.log(`per tool call, nsbox / unix-local: ${ratios.runner_tool_call_vs_unix_local}x through the Runner (target <= 1.5), ` +
    `${ratios.exec_call_vs_unix_local}x bare`);
  if (d) console.log(`create -> first result, nsbox / docker: ${ratios.create_vs_docker} (target <= 0.1)`);
  else console.log(`docker: skipped: ${dockerSkipped}`);
  if (JSON_OUT) fs.writeFileSync(JSON_OUT, JSON.stringify({ runs: RUNS, calls: CALLS, summary, ratios, docker_skipped: dockerSkipped || null }, null, 2));
}

await main();
