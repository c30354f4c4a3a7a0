#!/usr/bin/env node
// npm run build: dist/esm (ES modules) and dist/cjs (CommonJS), each with its .d.ts, from
// src/ by tsc 5. Each half gets a package.json naming its module kind, so that Node and
// TypeScript read dist/esm/*.js and *.d.ts as ESM and dist/cjs/* as CommonJS whatever the
// package's own "type" is.
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

const pkg = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const tsc = path.join(pkg, "node_modules", "typescript", "bin", "tsc");
const dist = path.join(pkg, "dist");

if (!fs.existsSync(tsc)) {
  console.error(`clients/typescript: TypeScript is not installed in ${pkg}/node_modules: run \`npm ci\` there ` +
    "(scripts/install-deps does)");
  process.exit(1);
}
fs.rmSync(dist, { recursive: true, force: true });
for (const [config, dir, type] of [["tsconfig.json", "esm", "module"], ["tsconfig.cjs.json", "cjs", "commonjs"]]) {
  execFileSync(process.execPath, [tsc, "-p", path.join(pkg, config)], { stdio: "inherit", cwd: pkg });
  fs.writeFileSync(path.join(dist, dir, "package.json"), JSON.stringify({ type }) + "\n");
}
