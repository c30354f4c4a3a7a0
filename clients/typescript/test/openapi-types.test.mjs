// src/generated/openapi.ts is what openapi-typescript makes of api/openapi.yaml today:
// a change to the contract without `npm run generate` fails here.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const pkg = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const check = (...args) => spawnSync(process.execPath, [path.join(pkg, "scripts", "openapi-types.mjs"), "check", ...args],
  { cwd: pkg, encoding: "utf8" });

test("the committed types are those generated from api/openapi.yaml", () => {
  const r = check();
  assert.equal(r.status, 0, `${r.stdout}${r.stderr}`);
});

test("the check fails, naming the line, on types that differ from the contract", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "nsbox-ts-stale-"));
  try {
    const stale = path.join(dir, "openapi.ts");
    const lines = fs.readFileSync(path.join(pkg, "src", "generated", "openapi.ts"), "utf8").split("\n");
    const at = lines.findIndex((l) => l.includes('"standard" | "medium" | "large" | "xlarge"'));
    assert.ok(at > 0);
    lines[at] = lines[at].replace(' | "xlarge"', "");
    fs.writeFileSync(stale, lines.join("\n"));
    const r = check("--against", stale);
    assert.equal(r.status, 1, `${r.stdout}${r.stderr}`);
    assert.match(r.stderr, new RegExp(`is stale: .* at line ${at + 1}\\b`));
    assert.match(r.stderr, /npm run generate/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
