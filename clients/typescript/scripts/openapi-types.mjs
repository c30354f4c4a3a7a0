#!/usr/bin/env node
// src/generated/openapi.ts from the server's contract, api/openapi.yaml, by openapi-typescript.
//
//   node scripts/openapi-types.mjs write            (npm run generate)
//   node scripts/openapi-types.mjs check [--against FILE]
//
// `check` generates into a temporary file and compares it with the committed one (or
// FILE); it exits 1 and names the first line that differs when they do. The options are
// here once, for both: `--empty-objects-unknown` types an open object ({type: object}
// without properties, e.g. `tools`) as Record<string, unknown> rather than one that takes
// nothing; `--default-non-nullable false` leaves a field with a default optional in a
// request (`timeout_s`, `read_only`), as the server takes it.
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const pkg = path.resolve(here, "..");
const spec = path.resolve(pkg, "..", "..", "api", "openapi.yaml");
const committed = path.join(pkg, "src", "generated", "openapi.ts");
const cli = path.join(pkg, "node_modules", "openapi-typescript", "bin", "cli.js");
const options = ["--empty-objects-unknown", "--default-non-nullable", "false"];

function generate(out) {
  execFileSync(process.execPath, [cli, spec, "--output", out, ...options], { stdio: ["ignore", "ignore", "inherit"] });
}

const [mode, flag, against] = process.argv.slice(2);
if (mode === "write") {
  generate(committed);
  console.log(`wrote ${path.relative(process.cwd(), committed)} from ${path.relative(process.cwd(), spec)}`);
} else if (mode === "check") {
  const existing = flag === "--against" && against ? against : committed;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "nsbox-openapi-"));
  try {
    const fresh = path.join(dir, "openapi.ts");
    generate(fresh);
    const want = fs.readFileSync(fresh, "utf8").split("\n");
    const have = fs.existsSync(existing) ? fs.readFileSync(existing, "utf8").split("\n") : [];
    const at = want.findIndex((line, i) => have[i] !== line);
    if (at >= 0 || have.length !== want.length) {
      const line = at >= 0 ? at : Math.min(want.length, have.length);
      console.error(`${existing} is stale: it differs from api/openapi.yaml's types at line ${line + 1}`);
      console.error(`  committed: ${JSON.stringify(have[line] ?? "<end of file>")}`);
      console.error(`  generated: ${JSON.stringify(want[line] ?? "<end of file>")}`);
      console.error("run `npm run generate` in clients/typescript and commit the result");
      process.exitCode = 1;  // not process.exit(): the temporary directory goes first (finally)
    } else {
      console.log(`${path.relative(process.cwd(), existing)} is up to date with api/openapi.yaml`);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
} else {
  console.error("usage: openapi-types.mjs write | check [--against FILE]");
  process.exit(2);
}
