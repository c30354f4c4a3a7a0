// Reading manifests: every *.yaml under a directory, each file's documents as kubectl
// would read them.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";

export function yamlFiles(dir) {
  const out = [];
  for (const name of readdirSync(dir).sort()) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out.push(...yamlFiles(path));
    else if (/\.ya?ml$/.test(name)) out.push(path);
  }
  return out;
}

// YAML 1.1, as Kubernetes' parser reads it (`0400` is octal, `yes` is true); a key given
// twice is an error, as it is for kubectl. A document that is only comments is skipped.
export function parseManifests(yaml, text, file) {
  const docs = [];
  const errors = [];
  yaml.parseAllDocuments(text, { version: "1.1", uniqueKeys: true }).forEach((doc, i) => {
    for (const e of doc.errors) errors.push(`${file}: document ${i + 1}: ${e.message.split("\n")[0]}`);
    if (doc.errors.length > 0 || doc.contents === null) return;
    docs.push({ file, index: i + 1, object: doc.toJS() });
  });
  return { docs, errors };
}

// Every manifest of a tree: {docs: [{file, index, object}], errors: [string]}, with file
// names relative to `base` for messages.
export function loadTree(yaml, dir, base) {
  const all = { docs: [], errors: [] };
  for (const path of yamlFiles(dir)) {
    const { docs, errors } = parseManifests(yaml, readFileSync(path, "utf8"), relative(base, path));
    all.docs.push(...docs);
    all.errors.push(...errors);
  }
  return all;
}

export function describe(doc) {
  const o = doc.object ?? {};
  return `${doc.file} document ${doc.index} (${o.kind ?? "no kind"} ${o.metadata?.name ?? "unnamed"})`;
}
