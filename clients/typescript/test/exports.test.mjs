// The package as an ES module user imports it, as TypeScript sees it (types resolved
// through the `exports` conditions, for import and require alike), and as `npm pack`
// ships it.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import { createRequire } from "node:module";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import * as nsbox from "nsbox";

const pkg = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const tsc = path.join(pkg, "node_modules", "typescript", "bin", "tsc");

test("import 'nsbox' gives the ES module build", async () => {
  assert.match(import.meta.resolve("nsbox"), /dist\/esm\/index\.js$/);
  assert.equal(typeof nsbox.Sandbox.create, "function");
  const meta = JSON.parse(fs.readFileSync(path.join(pkg, "package.json"), "utf8"));
  assert.equal(nsbox.VERSION, meta.version);
  // The two builds are two module instances: an error of one is not an instance of the other's class.
  const cjs = createRequire(import.meta.url)("nsbox");
  assert.notEqual(cjs.NotFound, nsbox.NotFound);
});

test("import 'nsbox/agents' resolves to the ES module build: the SDK's client, backend id nsbox", async () => {
  assert.match(import.meta.resolve("nsbox/agents"), /dist\/esm\/agents\.js$/);
  const agents = await import("nsbox/agents");
  assert.equal(typeof agents.NsboxSandboxSession, "function");
  assert.equal(new agents.NsboxSandboxClient({ socket: "/nonexistent/api.sock", token: "t", env: {} }).backendId, "nsbox");
});

test("TypeScript finds the declarations from an ES module and from a CommonJS module", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "nsbox-ts-consumer-"));
  try {
    fs.mkdirSync(path.join(dir, "node_modules"));
    fs.symlinkSync(pkg, path.join(dir, "node_modules", "nsbox"));
    fs.symlinkSync(path.join(pkg, "node_modules", "@types"), path.join(dir, "node_modules", "@types"));
    const use = `
      const sbx: Sandbox = await Sandbox.create({ size: "medium", ttl_s: 60, net: { allow: ["pypi.org"] } }, { socket: "/s" });
      const ex: Execution = await sbx.runCode("1", { timeout_s: 5, onStdout: (t: string) => void t });
      const status: "ok" | "error" | "timeout" | "interrupted" | "killed" = ex.status;
      const r = await sbx.commands.run(["ls"], { cwd: "/tmp" });
      const code: number = r.exit_code;
      const info: SandboxInfo = await sbx.info();
      const size: SizeTier = info.size;
      // @ts-expect-error: not a size the API knows
      await Sandbox.create({ size: "enormous" });
      export { status, code, size };`;
    fs.writeFileSync(path.join(dir, "esm.mts"),
      `import { Sandbox, type Execution, type SandboxInfo, type SizeTier } from "nsbox";\n${use}`);
    fs.writeFileSync(path.join(dir, "cjs.cts"),
      `import nsbox = require("nsbox");\ntype Execution = nsbox.Execution; type SandboxInfo = nsbox.SandboxInfo; type SizeTier = nsbox.SizeTier;\n` +
      `const { Sandbox } = nsbox; type Sandbox = nsbox.Sandbox;\nasync function main() {${use.replace("export { status, code, size };", "return [status, code, size];")}}\nexport = main;`);
    const run = (file, module) => execFileSync(process.execPath, [tsc, "--noEmit", "--strict", "--target", "ES2022",
      "--module", module, "--moduleResolution", module, "--types", "node", path.join(dir, file)], { cwd: dir, encoding: "utf8" });
    for (const [file, module] of [["esm.mts", "node16"], ["cjs.cts", "node16"], ["esm.mts", "nodenext"]]) {
      try {
        run(file, module);
      } catch (e) {
        assert.fail(`tsc ${file} (${module}):\n${e.stdout}${e.stderr}`);
      }
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("npm pack ships the built ES module and CommonJS outputs with their declarations, and no sources", () => {
  const out = execFileSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], { cwd: pkg, encoding: "utf8" });
  const files = JSON.parse(out)[0].files.map((f) => f.path).sort();
  for (const f of ["package.json", "README.md", "dist/esm/index.js", "dist/esm/index.d.ts", "dist/esm/package.json",
    "dist/cjs/index.js", "dist/cjs/index.d.ts", "dist/cjs/package.json", "dist/esm/agents.js", "dist/cjs/agents.d.ts"]) {
    assert.ok(files.includes(f), `${f} is not in the package: ${files.join(" ")}`);
  }
  assert.deepEqual(files.filter((f) => !f.startsWith("dist/") && !["package.json", "README.md"].includes(f)), []);
});
