// s3rver (tests/peers, a real S3 server on loopback) for the tests of bucket mounts: on a
// port of its own (port 0) with its own data directory and one bucket made at its start,
// as clients/python/tests/conftest.py runs it; stopped by pid. Node 20's OpenSSL 3 needs
// --openssl-legacy-provider for it. It knows one key id (S3RVER) and checks no signature.
import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

import { quietEnvironment } from "./server.mjs";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");
const S3RVER = path.join(repoRoot, "tests", "peers", "node_modules", "s3rver", "bin", "s3rver.js");
const OBJECT_SUFFIX = "._S3rver_object";

export const S3RVER_KEY_ID = "S3RVER";

export class S3rver {
  /** Starts it with `bucket` made; waits for it to listen (60 s at most). */
  async start(bucket) {
    if (!fs.existsSync(S3RVER)) throw new Error(`s3rver is not installed (${S3RVER}): scripts/install-deps installs it`);
    this.bucket = bucket;
    this.dir = fs.mkdtempSync("/tmp/nsbox-test-s3rver-");
    fs.mkdirSync(path.join(this.dir, "data"));
    this.output = "";
    this.proc = spawn(process.execPath, [S3RVER, "-d", path.join(this.dir, "data"), "-a", "127.0.0.1", "-p", "0",
      "--configure-bucket", bucket], { stdio: ["ignore", "pipe", "pipe"], env: quietEnvironment({ NODE_OPTIONS: "--openssl-legacy-provider" }) });
    const proc = this.proc;
    this.port = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`s3rver did not listen in 60 s:\n${this.output}`)), 60_000);
      const read = (chunk) => {
        this.output = (this.output + chunk.toString()).slice(-8000);
        const port = /S3rver listening on 127\.0\.0\.1:(\d+)/.exec(this.output)?.[1];
        if (port) {
          clearTimeout(timer);
          resolve(Number(port));
        }
      };
      proc.stdout.on("data", read);
      proc.stderr.on("data", read);
      proc.on("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`s3rver exited (${code}) before it listened:\n${this.output}`));
      });
    });
    this.endpoint = `http://127.0.0.1:${this.port}`;
  }

  /** The keys of the bucket's objects under `prefix` (sorted), read from s3rver's own store. */
  keys(prefix = "") {
    const top = path.join(this.dir, "data", this.bucket);
    const found = [];
    const walk = (dir) => {
      for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
        const p = path.join(dir, e.name);
        if (e.isDirectory()) walk(p);
        else if (e.name.endsWith(OBJECT_SUFFIX)) found.push(path.relative(top, p).slice(0, -OBJECT_SUFFIX.length));
      }
    };
    if (fs.existsSync(top)) walk(top);
    return found.filter((k) => k.startsWith(prefix)).sort();
  }

  /** The bytes of the object `key`. */
  object(key) {
    return fs.readFileSync(path.join(this.dir, "data", this.bucket, key + OBJECT_SUFFIX));
  }

  async stop() {
    const proc = this.proc;
    if (proc && proc.exitCode === null && proc.signalCode === null) {
      const exited = new Promise((resolve) => proc.once("exit", resolve));
      process.kill(proc.pid, "SIGTERM");
      const timer = setTimeout(() => process.kill(proc.pid, "SIGKILL"), 15_000);
      await exited;
      clearTimeout(timer);
    }
    if (this.dir) fs.rmSync(this.dir, { recursive: true, force: true });
  }
}
