// The npm packages the manifest tests use, installed in tests/peers by scripts/install-deps
// (pinned by its package-lock.json): kubernetes-models and @kubernetes-models/keda (the
// Kubernetes 1.33 and KEDA 2.10 schemas, compiled to validators) and yaml. They are loaded
// from there, not from a node_modules beside this file, so a missing install fails here
// with what to run instead of as an import error.
import { createRequire } from "node:module";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const peersDir = join(dirname(fileURLToPath(import.meta.url)), "..", "peers");

export function loadDeps() {
  const require = createRequire(join(peersDir, "package.json"));
  const missing = [];
  for (const name of ["yaml", "kubernetes-models", "@kubernetes-models/keda"]) {
    try {
      require.resolve(name);
    } catch {
      missing.push(name);
    }
  }
  if (missing.length > 0) {
    const modules = join(peersDir, "node_modules");
    const state = existsSync(modules) ? `${modules} lacks` : `${modules} does not exist; it should hold`;
    throw new Error(`${state} ${missing.join(", ")}: run scripts/install-deps`);
  }
  return { require, yaml: require("yaml") };
}
