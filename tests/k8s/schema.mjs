// Strict schema validation of one Kubernetes object, offline.
//
// kubernetes-models ships each kind's OpenAPI schema compiled by ajv into a validate
// function (the JSON schema itself is not in the package). Kubernetes' schemas do not say
// additionalProperties: false, so those functions accept a misspelled field (`replicass`)
// as an unknown extra: `kubectl apply` would drop it silently, or refuse it under
// server-side field validation. To reject it here, the object is validated through
// proxies that record which properties the validator reads. A compiled validator reads
// every property its schema declares (`data.replicas === undefined` is itself a read) and
// no other, except where the schema is a map (labels, resources.limits), where it lists
// the keys and reads them all. So, object by object:
//   - keys listed by the validator: a map; every key is its own to check;
//   - nothing read at all: a free-form object (x-kubernetes-preserve-unknown-fields), or
//     one under a field already reported; accepted;
//   - otherwise a key the validator never read is not in the schema: rejected.

const thirdParty = { "keda.sh": "@kubernetes-models/keda" };

// The model class for apiVersion and kind, or null when no package has a schema for it.
export function modelFor(require, apiVersion, kind) {
  if (typeof apiVersion !== "string" || !/^([a-z0-9.-]+\/)?v[0-9]+[a-z0-9]*$/.test(apiVersion)) return null;
  if (typeof kind !== "string" || !/^[A-Z][A-Za-z0-9]*$/.test(kind)) return null;
  const group = apiVersion.includes("/") ? apiVersion.slice(0, apiVersion.indexOf("/")) : "";
  const pkg = thirdParty[group] ?? "kubernetes-models";
  let module;
  try {
    module = require(`${pkg}/${apiVersion}/${kind}`);
  } catch {
    return null;
  }
  const Model = module[kind];
  return Model && Model.apiVersion === apiVersion && Model.kind === kind ? Model : null;
}

function child(path, key) {
  return /^[A-Za-z_$][A-Za-z0-9_$-]*$/.test(key) ? (path ? `${path}.${key}` : key) : `${path}[${JSON.stringify(key)}]`;
}

// A copy of `value` whose objects are proxies recording the validator's reads into
// `objects` ({path, keys, read, listed} each).
function instrument(value, path, objects) {
  if (Array.isArray(value)) return value.map((v, i) => instrument(v, `${path}[${i}]`, objects));
  if (value === null || typeof value !== "object") return value;
  const seen = { path, keys: Object.keys(value), read: new Set(), listed: false };
  objects.push(seen);
  const target = {};
  for (const key of seen.keys) target[key] = instrument(value[key], child(path, key), objects);
  const note = (key) => typeof key === "string" && seen.read.add(key);
  return new Proxy(target, {
    get: (t, key, receiver) => (note(key), Reflect.get(t, key, receiver)),
    has: (t, key) => (note(key), Reflect.has(t, key)),
    getOwnPropertyDescriptor: (t, key) => (note(key), Reflect.getOwnPropertyDescriptor(t, key)),
    ownKeys: (t) => ((seen.listed = true), Reflect.ownKeys(t)),
  });
}

function ajvPath(instancePath) {
  return instancePath
    .split("/")
    .slice(1)
    .map((p) => p.replace(/~1/g, "/").replace(/~0/g, "~"))
    .reduce((path, p) => (/^[0-9]+$/.test(p) ? `${path}[${p}]` : child(path, p)), "");
}

// The problems of one object, each a sentence naming the field; empty when it is valid.
export function strictErrors(require, object) {
  if (object === null || typeof object !== "object" || Array.isArray(object)) return ["not a mapping"];
  const { apiVersion, kind } = object;
  const Model = modelFor(require, apiVersion, kind);
  if (!Model) return [`no schema for apiVersion ${JSON.stringify(apiVersion)} kind ${JSON.stringify(kind)}`];
  const objects = [];
  const tracked = instrument(object, "", objects);
  const problems = [];
  try {
    Model.prototype.validate.call(tracked);
  } catch (e) {
    if (!Array.isArray(e.errors)) throw e;
    for (const err of e.errors) {
      const at = ajvPath(err.instancePath) || "(the object)";
      const detail = err.params?.allowedValues ? ` (${err.params.allowedValues.join(", ")})` : "";
      problems.push(`${at}: ${err.message}${detail}`);
    }
  }
  for (const o of objects) {
    if (o.listed || o.read.size === 0) continue;
    for (const key of o.keys)
      if (!o.read.has(key)) problems.push(`${child(o.path, key)}: no such field in the ${apiVersion} ${kind} schema`);
  }
  return problems;
}
