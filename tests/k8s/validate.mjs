// The offline checks of deploy/k8s, run by CTest (tests/CMakeLists.txt):
//
//   node validate.mjs schema --manifests DIR --bad DIR
//     every manifest against its Kubernetes or KEDA schema, strictly (a field the schema
//     does not declare is an error: schema.mjs says how); then the same check must refuse
//     each file of --bad (its "# expect: TEXT" lines name what the error must say) and
//     misspelled copies of the real manifests (mutations.mjs).
//   node validate.mjs policy --manifests DIR --doc docs/scale-out.md
//     the deployment's rules (policy.mjs) on the manifests and the seccomp profiles of
//     DIR/seccomp; then each rule must refuse copies broken on purpose.
//
//   stdout: one line per check, "ok - ..." or "not ok - ..." with the reasons, then
//           "N passed, N failed"
//   exit:   0 when every check passed, 1 otherwise, 2 for bad arguments or missing packages
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { loadDeps } from "./deps.mjs";
import { describe, loadTree, parseManifests, yamlFiles } from "./manifests.mjs";
import { breaches, misspellings } from "./mutations.mjs";
import { checkPolicy } from "./policy.mjs";
import { strictErrors } from "./schema.mjs";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const results = { passed: 0, failed: 0 };

function report(name, problems) {
  if (problems.length === 0) {
    results.passed++;
    console.log(`ok - ${name}`);
  } else {
    results.failed++;
    console.log(`not ok - ${name}`);
    for (const p of problems) console.log(`    ${p}`);
  }
}

// A broken copy of `docs`, or null (reported) when the mutation finds nothing to break.
function brokenCopy(name, docs, mutate) {
  const copy = structuredClone(docs);
  try {
    mutate(copy);
  } catch (e) {
    report(name, [`could not make the copy: ${e.message}`]);
    return null;
  }
  return copy;
}

// A check that must fail: passes when some problem contains `expect`.
function reportRefusal(name, problems, expect) {
  if (problems.some((p) => p.includes(expect))) report(name, []);
  else
    report(name, [
      problems.length === 0 ? `accepted; expected an error naming "${expect}"` : `no error names "${expect}"; got:`,
      ...problems,
    ]);
}

function options(argv) {
  const [mode, ...rest] = argv;
  const o = { mode };
  for (let i = 0; i < rest.length; i += 2) {
    if (!["--manifests", "--bad", "--doc"].includes(rest[i]) || rest[i + 1] === undefined)
      throw new Error(`unknown argument or missing value: ${rest[i]}`);
    o[rest[i].slice(2)] = resolve(rest[i + 1]);
  }
  if (!["schema", "policy"].includes(mode) || !o.manifests)
    throw new Error("usage: validate.mjs schema --manifests DIR [--bad DIR] | policy --manifests DIR [--doc FILE]");
  return o;
}

function loadReal(yaml, dir) {
  const tree = loadTree(yaml, dir, repo);
  report(
    `the manifests of ${dir.replace(repo + "/", "")} parse`,
    tree.errors.length === 0 && tree.docs.length === 0 ? ["no manifests found"] : tree.errors,
  );
  return tree.docs;
}

function schemaChecks({ require, yaml }, o) {
  const docs = loadReal(yaml, o.manifests);
  for (const doc of docs) report(`${describe(doc)} is valid, strictly`, strictErrors(require, doc.object));

  for (const path of o.bad ? yamlFiles(o.bad) : []) {
    const text = readFileSync(path, "utf8");
    // The expectations, per document (split as the documents are: a line "---").
    const expected = text
      .split(/^---\s*$/m)
      .map((chunk) => [...chunk.matchAll(/^# expect: (.+)$/gm)].map((m) => m[1].trim()));
    const { docs: bad, errors } = parseManifests(yaml, text, basename(path));
    if (errors.length > 0) {
      const expect = expected.flat();
      if (expect.length === 0) report(`bad/${basename(path)}: has an "# expect:" line`, ["none found"]);
      for (const e of expect) reportRefusal(`bad/${basename(path)} is refused: ${e}`, errors, e);
      continue;
    }
    for (const doc of bad) {
      const expect = expected[doc.index - 1] ?? [];
      if (expect.length === 0)
        report(`bad/${basename(path)} document ${doc.index}: has an "# expect:" line`, ["none found"]);
      const problems = strictErrors(require, doc.object);
      for (const e of expect)
        reportRefusal(`bad/${basename(path)} document ${doc.index} is refused: ${e}`, problems, e);
    }
  }

  const allErrors = (copy) => copy.flatMap((d) => strictErrors(require, d.object));
  const baseline = new Set(allErrors(docs));
  for (const m of misspellings) {
    const name = `a copy with ${m.what} is refused, naming ${m.expect}`;
    const copy = brokenCopy(name, docs, m.mutate);
    if (copy)
      reportRefusal(
        name,
        allErrors(copy).filter((p) => !baseline.has(p)),
        m.expect,
      );
  }
}

// The seccomp profiles under DIR/seccomp, unparsed (a policy rule parses them, so that a
// broken copy can be one that is not JSON): [{file, index, object: null, seccompText}].
function loadProfiles(dir) {
  const at = join(dir, "seccomp");
  if (!existsSync(at)) return [];
  return readdirSync(at)
    .filter((name) => name.endsWith(".json"))
    .sort()
    .map((name) => ({
      file: join(at, name).replace(repo + "/", ""),
      index: 1,
      object: null,
      seccompText: readFileSync(join(at, name), "utf8"),
    }));
}

function policyChecks({ yaml }, o) {
  const docs = [...loadReal(yaml, o.manifests), ...loadProfiles(o.manifests)];
  let docText;
  try {
    docText = o.doc ? readFileSync(o.doc, "utf8") : undefined;
  } catch (e) {
    report(`${o.doc} can be read`, [e.message]);
  }
  for (const r of checkPolicy(docs, docText)) report(r.name, r.problems);

  // Only what a broken copy adds counts: a problem the real manifests have already
  // reported above must not make a breach look caught.
  const allProblems = (copy, text) => checkPolicy(copy, text).flatMap((r) => r.problems);
  const baseline = new Set(allProblems(docs, docText));
  const added = (copy, text) => allProblems(copy, text).filter((p) => !baseline.has(p));
  for (const b of breaches) {
    const name = `a copy with ${b.what} is refused`;
    const copy = brokenCopy(name, docs, b.mutate);
    if (copy) reportRefusal(name, added(copy, docText), b.expect);
  }
  if (docText !== undefined)
    reportRefusal(
      "docs that no longer give --capacity are refused",
      added(docs, docText.replaceAll("--capacity", "--cap")),
      "does not mention --capacity",
    );
}

let o;
let deps;
try {
  o = options(process.argv.slice(2));
  deps = loadDeps();
} catch (e) {
  console.error(`k8s: ${e.message}`);
  process.exit(2);
}
if (o.mode === "schema") schemaChecks(deps, o);
else policyChecks(deps, o);
console.log(`${results.passed} passed, ${results.failed} failed`);
process.exit(results.failed === 0 ? 0 : 1);
