// One real `nsbox serve` for a test file, on a state root of its own, as the Python
// suite's conftest starts it (clients/python/tests/conftest.py): a unix socket and a
// loopback port at once; found from its ready line ({"url", "socket", "token_file"}).
// It is stopped with SIGTERM (by pid), then every sandbox and named volume left on its
// state root is removed with the CLI, and the root (/tmp/nsbox-test-*) is deleted.
//
// The nsbox binary: NSBOX_BIN (CTest sets it), else build*/bin/nsbox of this checkout.
// Without one, run by hand, the server tests print "SKIP: ..." and are skipped; under
// CTest (NSBOX_BIN set) a missing binary fails.
import { spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");

function findBinary() {
  const given = process.env["NSBOX_BIN"];
  if (given) return { bin: isExecutable(given) ? given : undefined, why: `NSBOX_BIN=${given} is not an executable`, required: true };
  const builds = fs.readdirSync(repo).filter((d) => d === "build" || d.startsWith("build-")).sort();
  for (const d of builds) {
    const candidate = path.join(repo, d, "bin", "nsbox");
    if (isExecutable(candidate)) return { bin: candidate };
  }
  return { bin: undefined, why: "no nsbox binary (build it, or set NSBOX_BIN)", required: false };
}

function isExecutable(p) {
  try {
    fs.accessSync(p, fs.constants.X_OK);
    return fs.statSync(p).isFile();
  } catch {
    return false;
  }
}

export const binary = findBinary();

// The runner's proxies and NSBOX_* would reach the server or the client; the tests stay
// on their own server.
const DROPPED = ["http_proxy", "https_proxy", "all_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
  "NO_PROXY", "NODE_OPTIONS", "NSBOX_ROOT", "NSBOX_URL", "NSBOX_SOCKET", "NSBOX_TOKEN", "NSBOX_TOKEN_FILE"];

export function quietEnvironment(extra = {}) {
  const env = { ...process.env };
  for (const k of DROPPED) delete env[k];
  return { ...env, ...extra };
}

function cli(root, ...args) {
  return spawnSync(binary.bin, ["--root", root, ...args], { env: quietEnvironment(), encoding: "utf8", timeout: 120_000 });
}

export class Server {
  constructor() {
    this.root = fs.mkdtempSync("/tmp/nsbox-test-");
    this.socket = path.join(this.root, "run", "api.sock");
    this.logPath = path.join(this.root, "serve.log");
    this.proc = undefined;
  }

  /** Starts it and waits for its ready line (60 s at most). */
  async start() {
    fs.mkdirSync(path.dirname(this.socket), { recursive: true });
    const log = fs.openSync(this.logPath, "a");
    try {
      this.proc = spawn(binary.bin, ["--root", this.root, "serve", "--socket", this.socket, "--listen", "127.0.0.1:0"],
        { stdio: ["ignore", "pipe", log], env: quietEnvironment() });
    } finally {
      fs.closeSync(log);
    }
    const proc = this.proc;
    const line = await new Promise((resolve, reject) => {
      let text = "";
      const timer = setTimeout(() => reject(new Error(`nsbox serve printed no ready line in 60 s; log:\n${this.log()}`)), 60_000);
      proc.stdout.on("data", (chunk) => {
        text += chunk.toString("utf8");
        const end = text.indexOf("\n");
        if (end >= 0) {
          clearTimeout(timer);
          resolve(text.slice(0, end));
        }
      });
      proc.on("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`nsbox serve exited (${code}) before its ready line; log:\n${this.log()}`));
      });
    });
    const ready = JSON.parse(line);
    if (ready.socket !== this.socket) throw new Error(`the ready line names another socket: ${line}`);
    this.url = ready.url;
    this.tokenFile = ready.token_file;
    this.token = fs.readFileSync(this.tokenFile, "utf8").split("\n", 1)[0].trim();
  }

  /** SIGTERM by pid, a bounded wait, SIGKILL if it does not go. */
  async stop() {
    const proc = this.proc;
    this.proc = undefined;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise((resolve) => proc.once("exit", resolve));
    proc.kill("SIGTERM");
    const timer = setTimeout(() => proc.kill("SIGKILL"), 30_000);
    await exited;
    clearTimeout(timer);
  }

  /** Stops the server and removes everything it made, whatever state it is in. */
  async destroy() {
    try {
      await this.stop();
    } finally {
      const ls = cli(this.root, "ls", "--all", "--json");
      if (ls.status === 0) for (const s of JSON.parse(ls.stdout || "{}").sandboxes ?? []) cli(this.root, "rm", s.id);
      const vols = cli(this.root, "volume", "ls", "--json");
      if (vols.status === 0) for (const v of JSON.parse(vols.stdout || "{}").volumes ?? []) cli(this.root, "volume", "rm", v.name);
      const left = fs.readFileSync("/proc/self/mountinfo", "utf8").split("\n")
        .map((l) => (l.split(" ")[4] ?? "").replace(/\\040/g, " "))
        .filter((p) => p === this.root || p.startsWith(this.root + "/"));
      if (left.length) throw new Error(`mounts left under ${this.root}, not removing it: ${left.join(" ")}`);
      fs.rmSync(this.root, { recursive: true, force: true });
    }
  }

  log() {
    try {
      return fs.readFileSync(this.logPath, "utf8").slice(-8000);
    } catch {
      return "";
    }
  }
}

/** Polls `predicate` until it holds or `timeoutMs` passes; whether it held. */
export async function waitUntil(predicate, timeoutMs, intervalMs = 100) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await predicate()) return true;
    if (Date.now() >= deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/**
 * What each test of a real server ends with: a sandbox the test left is removed, and the
 * test fails naming it. `client`: the package's Client of that server.
 */
export async function failIfSandboxesLeft(client) {
  const { sandboxes = [] } = await client.json("GET", "/v1/sandboxes");
  if (!sandboxes.length) return;
  for (const s of sandboxes) await client.json("DELETE", `/v1/sandboxes/${s.id}`).catch(() => undefined);
  throw new Error(`the test left sandboxes behind: ${sandboxes.map((s) => s.id).join(" ")}`);
}
