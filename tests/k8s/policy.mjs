// The deployment's rules (docs/scale-out.md), checked on the manifests of deploy/k8s. Each
// rule returns its violations as sentences; none means it holds.
import { basename } from "node:path";
import { shellWords } from "./shell_words.mjs";

// The flags of `nsbox serve` that the manifests may use: the sharded server's command line
// as docs/scale-out.md gives it. A flag outside this list is drift between the manifests,
// the docs and the server.
export const serveValueFlags = [
  "--root",
  "--listen",
  "--shard",
  "--peers",
  "--token-file",
  "--peer-token-file",
  "--snapshot-store",
  "--capacity",
  "--warm",
  "--drain-grace",
];
export const serveSwitches = ["--allow-remote"];
// Every flag but the drain's grace, which has a default the manifests may keep.
export const requiredServeFlags = [...serveValueFlags.filter((f) => f !== "--drain-grace"), ...serveSwitches];
const defaultDrainGraceS = 900;
// What the drain needs after its grace at least: snapshots of what still runs, uploaded.
const snapshotMarginS = 60;
const tierOfFile = { "statefulset.yaml": "A", "statefulset-hardened.yaml": "B" };

// What nsbox adds to the runtime's default seccomp profile to make sandboxes unprivileged:
// namespaces (clone3, unshare, setns) and the mounts of their root (tier_b_userns.py runs
// nsbox under the shipped profile, and proves it fails under the default).
export const nsboxSeccompNeeds = [
  "clone3",
  "mount",
  "mount_setattr",
  "move_mount",
  "open_tree",
  "pivot_root",
  "sethostname",
  "setns",
  "umount2",
  "unshare",
];
// Calls the runtime's default profile refuses and nsbox does not need: a profile for tier B
// must keep refusing them (a sample of the kernel's riskiest interfaces, not the list).
export const seccompStillRefused = [
  "add_key",
  "bpf",
  "finit_module",
  "init_module",
  "io_uring_setup",
  "kexec_load",
  "keyctl",
  "open_by_handle_at",
  "perf_event_open",
  "reboot",
  "request_key",
  "swapon",
  "syslog",
  "userfaultfd",
];
const seccompActions = [
  "SCMP_ACT_ALLOW",
  "SCMP_ACT_ERRNO",
  "SCMP_ACT_KILL",
  "SCMP_ACT_KILL_PROCESS",
  "SCMP_ACT_KILL_THREAD",
];
const seccompOps = [
  "SCMP_CMP_NE",
  "SCMP_CMP_LT",
  "SCMP_CMP_LE",
  "SCMP_CMP_EQ",
  "SCMP_CMP_GE",
  "SCMP_CMP_GT",
  "SCMP_CMP_MASKED_EQ",
];

const selects = (selector, labels) =>
  !!selector && Object.keys(selector).length > 0 && Object.entries(selector).every(([k, v]) => labels?.[k] === v);

function matchesLabelSelector(ls, labels) {
  if (!ls) return false;
  const exprs = ls.matchExpressions ?? [];
  if (Object.keys(ls.matchLabels ?? {}).length === 0 && exprs.length === 0) return false;
  if (!Object.entries(ls.matchLabels ?? {}).every(([k, v]) => labels?.[k] === v)) return false;
  return exprs.every((e) => {
    const has = labels && Object.hasOwn(labels, e.key);
    if (e.operator === "In") return has && e.values.includes(labels[e.key]);
    if (e.operator === "NotIn") return !has || !e.values.includes(labels[e.key]);
    if (e.operator === "Exists") return has;
    if (e.operator === "DoesNotExist") return !has;
    return false;
  });
}

// The arguments after `nsbox serve` in a container, from its command and args directly or
// from an `sh -c` script; null when it runs no nsbox serve.
export function serveInvocation(container) {
  const argv = [...(container.command ?? []), ...(container.args ?? [])];
  let words = argv;
  let script = null;
  if (/(^|\/)(sh|bash|dash)$/.test(argv[0] ?? "") && argv[1] === "-c") {
    script = argv[2] ?? "";
    words = shellWords(script);
  }
  const at = words.findIndex((w, i) => /(^|\/)nsbox$/.test(w) && words[i + 1] === "serve");
  if (at < 0) return null;
  const rest = words.slice(at + 2);
  const stop = rest.indexOf(";");
  return { args: stop < 0 ? rest : rest.slice(0, stop), script };
}

// {flags: Map flag -> value (true for a switch), problems: [sentence]}.
export function parseServeFlags(args) {
  const flags = new Map();
  const problems = [];
  for (let i = 0; i < args.length; i++) {
    let flag = args[i];
    let value;
    if (!flag.startsWith("--")) {
      problems.push(`nsbox serve: '${flag}' is not a flag`);
      continue;
    }
    if (flag.includes("=")) [flag, value] = [flag.slice(0, flag.indexOf("=")), flag.slice(flag.indexOf("=") + 1)];
    if (serveSwitches.includes(flag)) value = true;
    else if (!serveValueFlags.includes(flag)) {
      problems.push(
        `nsbox serve ${flag}: not one of the serve flags the deployment documents (${[...serveValueFlags, ...serveSwitches].join(" ")})`,
      );
      continue;
    } else if (value === undefined) {
      value = args[i + 1];
      if (value === undefined || value.startsWith("--")) {
        problems.push(`nsbox serve ${flag}: no value`);
        continue;
      }
      i++;
    }
    if (flags.has(flag)) problems.push(`nsbox serve ${flag}: given twice`);
    flags.set(flag, value);
  }
  return { flags, problems };
}

// What the rules look at, worked out once from the documents.
export function deployment(docs) {
  const of = (kind) => docs.filter((d) => d.object?.kind === kind);
  const workloads = of("StatefulSet").map((d) => {
    const sts = d.object;
    const pod = sts.spec?.template?.spec ?? {};
    const labels = sts.spec?.template?.metadata?.labels ?? {};
    const containers = pod.containers ?? [];
    const servers = containers.map((c) => ({ container: c, serve: serveInvocation(c) })).filter((s) => s.serve);
    return { doc: d, sts, pod, labels, containers, servers, tier: tierOfFile[basename(d.file)] };
  });
  // Seccomp profiles (deploy/k8s/seccomp/*.json), as validate.mjs reads them: {file, seccompText}.
  const profiles = docs.filter((d) => d.seccompText !== undefined);
  return { docs, of, workloads, profiles };
}

function where(w) {
  return `${w.doc.file} (StatefulSet ${w.sts.metadata?.name})`;
}

function portOf(container, port) {
  return (container.ports ?? []).find((p) => p.containerPort === port || (typeof port === "string" && p.name === port));
}

function listenPort(server) {
  const listen = parseServeFlags(server.serve.args).flags.get("--listen");
  const m = typeof listen === "string" ? /:([0-9]+)$/.exec(listen) : null;
  return m ? Number(m[1]) : null;
}

const rules = [];
const rule = (name, check) => rules.push({ name, check });

rule("one StatefulSet per tier file, each running nsbox serve", (d) => {
  const out = [];
  const tiers = d.workloads.map((w) => w.tier);
  for (const w of d.workloads) {
    if (!w.tier) out.push(`${where(w)}: not a tier's file (${Object.keys(tierOfFile).join(", ")})`);
    if (w.servers.length !== 1) out.push(`${where(w)}: ${w.servers.length} containers run nsbox serve, not one`);
  }
  for (const t of ["A", "B"])
    if (tiers.filter((x) => x === t).length !== 1)
      out.push(`tier ${t}: ${tiers.filter((x) => x === t).length} StatefulSets, not one`);
  return out;
});

rule("one pod per node: a required podAntiAffinity on kubernetes.io/hostname", (d) =>
  d.workloads.flatMap((w) => {
    const terms = w.pod.affinity?.podAntiAffinity?.requiredDuringSchedulingIgnoredDuringExecution ?? [];
    const ok = terms.some(
      (t) => t.topologyKey === "kubernetes.io/hostname" && matchesLabelSelector(t.labelSelector, w.labels),
    );
    return ok ? [] : [`${where(w)}: no required podAntiAffinity term on kubernetes.io/hostname selecting its own pods`];
  }),
);

rule("no hostPath volume anywhere", (d) => {
  const out = [];
  const walk = (v, path, doc) => {
    if (Array.isArray(v)) v.forEach((x, i) => walk(x, `${path}[${i}]`, doc));
    else if (v && typeof v === "object")
      for (const [k, x] of Object.entries(v)) {
        if (k === "hostPath") out.push(`${doc.file} document ${doc.index}: hostPath at ${path}.${k}`);
        walk(x, `${path}.${k}`, doc);
      }
  };
  for (const doc of d.docs) walk(doc.object, doc.object?.kind ?? "", doc);
  return out;
});

rule("no service-account token in the pods", (d) =>
  d.workloads.flatMap((w) => {
    const out = [];
    if (w.pod.automountServiceAccountToken !== false)
      out.push(`${where(w)}: automountServiceAccountToken is not false`);
    const name = w.pod.serviceAccountName;
    if (name) {
      const sa = d.of("ServiceAccount").find((s) => s.object.metadata?.name === name);
      if (!sa) out.push(`${where(w)}: its ServiceAccount ${name} is not in the manifests`);
      else if (sa.object.automountServiceAccountToken !== false)
        out.push(`ServiceAccount ${name}: automountServiceAccountToken is not false`);
    }
    return out;
  }),
);

rule("a PodDisruptionBudget (maxUnavailable 1) selects the StatefulSet's pods", (d) =>
  d.workloads.flatMap((w) => {
    const pdbs = d.of("PodDisruptionBudget").filter((p) => matchesLabelSelector(p.object.spec?.selector, w.labels));
    if (pdbs.length !== 1) return [`${where(w)}: ${pdbs.length} PodDisruptionBudgets select its pods, not one`];
    const spec = pdbs[0].object.spec;
    return spec.maxUnavailable === 1 && spec.minAvailable === undefined
      ? []
      : [`PodDisruptionBudget ${pdbs[0].object.metadata?.name}: maxUnavailable is not 1 (or minAvailable is set)`];
  }),
);

rule("probes: readiness on GET /readyz and liveness on GET /livez, at the port nsbox listens on", (d) =>
  d.workloads.flatMap((w) =>
    w.servers.flatMap(({ container: c, serve }) => {
      const out = [];
      const port = listenPort({ serve });
      const check = (probeName, path, required) => {
        const probe = c[probeName];
        if (!probe) return required ? out.push(`${where(w)} container ${c.name}: no ${probeName}`) : undefined;
        const get = probe.httpGet;
        if (!get || get.path !== path)
          return out.push(`${where(w)} container ${c.name}: ${probeName} is not GET ${path}`);
        const declared = portOf(c, get.port);
        if (!declared)
          out.push(
            `${where(w)} container ${c.name}: ${probeName}'s port ${get.port} is not a port the container declares`,
          );
        else if (declared.containerPort !== port)
          out.push(
            `${where(w)} container ${c.name}: ${probeName}'s port ${declared.containerPort} is not the --listen port ${port}`,
          );
        if ((get.httpHeaders ?? []).length > 0)
          out.push(`${where(w)} container ${c.name}: ${probeName} sends headers; ${path} needs none`);
      };
      check("readinessProbe", "/readyz", true);
      check("livenessProbe", "/livez", true);
      check("startupProbe", "/livez", false);
      return out;
    }),
  ),
);

// The command word after `nsbox` at words[i] and its global flags (`--root DIR`, `--json`).
function nsboxCommand(words, i) {
  let j = i + 1;
  while (words[j] === "--json" || words[j] === "--root") j += words[j] === "--root" ? 2 : 1;
  return words[j];
}

rule("preStop runs nsbox drain on the server's state root", (d) =>
  d.workloads.flatMap((w) =>
    w.servers.flatMap(({ container: c, serve }) => {
      const command = c.lifecycle?.preStop?.exec?.command ?? [];
      const root = parseServeFlags(serve.args).flags.get("--root");
      const words =
        /(^|\/)(sh|bash)$/.test(command[0] ?? "") && command[1] === "-c" ? shellWords(command[2] ?? "") : command;
      const at = words.findIndex((x, i) => /(^|\/)nsbox$/.test(x) && nsboxCommand(words, i) === "drain");
      if (at < 0) return [`${where(w)} container ${c.name}: preStop does not run nsbox drain`];
      // --root before `drain` (the global flag) or after it.
      const drainRoot = words[words.indexOf("--root", at) + 1];
      return drainRoot === root
        ? []
        : [`${where(w)} container ${c.name}: preStop's nsbox drain --root is ${drainRoot}, the server's is ${root}`];
    }),
  ),
);

function targetsApi(w, svc) {
  const server = w.servers[0];
  if (!server) return false;
  const port = listenPort(server);
  return (svc.spec?.ports ?? []).some((p) => {
    const declared = portOf(server.container, p.targetPort ?? p.port);
    return declared && declared.containerPort === port;
  });
}

rule("the peers' Service: headless, publishing not-ready pods, the StatefulSet's serviceName", (d) =>
  d.workloads.flatMap((w) => {
    const name = w.sts.spec?.serviceName;
    const svc = d.of("Service").find((s) => s.object.metadata?.name === name)?.object;
    if (!svc) return [`${where(w)}: its serviceName ${name} is not a Service of the manifests`];
    const out = [];
    if (svc.spec?.clusterIP !== "None") out.push(`Service ${name}: clusterIP is not None`);
    if (svc.spec?.publishNotReadyAddresses !== true) out.push(`Service ${name}: publishNotReadyAddresses is not true`);
    if (!selects(svc.spec?.selector, w.labels))
      out.push(`Service ${name}: its selector does not select the StatefulSet's pods`);
    if (!targetsApi(w, svc)) out.push(`Service ${name}: no port targets the API port`);
    return out;
  }),
);

rule("the clients' Service: ClusterIP, selecting the same pods, on the API port", (d) =>
  d.workloads.flatMap((w) => {
    const clients = d
      .of("Service")
      .filter((s) => s.object.spec?.clusterIP !== "None" && selects(s.object.spec?.selector, w.labels));
    if (clients.length !== 1) return [`${where(w)}: ${clients.length} ClusterIP Services select its pods, not one`];
    const svc = clients[0].object;
    const out = [];
    if ((svc.spec.type ?? "ClusterIP") !== "ClusterIP")
      out.push(`Service ${svc.metadata?.name}: type ${svc.spec.type}, not ClusterIP`);
    if (svc.spec.publishNotReadyAddresses)
      out.push(`Service ${svc.metadata?.name}: publishes not-ready pods; clients must reach ready ones only`);
    if (!targetsApi(w, svc)) out.push(`Service ${svc.metadata?.name}: no port targets the API port`);
    return out;
  }),
);

rule(`terminationGracePeriodSeconds exceeds the drain grace by ${snapshotMarginS} s at least`, (d) =>
  d.workloads.flatMap((w) =>
    w.servers.flatMap(({ serve }) => {
      const given = parseServeFlags(serve.args).flags.get("--drain-grace");
      const grace = given === undefined ? defaultDrainGraceS : Number(given);
      const period = w.pod.terminationGracePeriodSeconds;
      if (!Number.isFinite(grace)) return [`${where(w)}: --drain-grace ${given} is not a number of seconds`];
      return typeof period === "number" && period >= grace + snapshotMarginS
        ? []
        : [
            `${where(w)}: terminationGracePeriodSeconds ${period} is not above the drain grace (${grace} s) plus ${snapshotMarginS} s for the snapshots`,
          ];
    }),
  ),
);

rule("the cluster autoscaler may not evict the pods", (d) =>
  d.workloads.flatMap((w) =>
    w.sts.spec?.template?.metadata?.annotations?.["cluster-autoscaler.kubernetes.io/safe-to-evict"] === "false"
      ? []
      : [`${where(w)}: the pod template lacks cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`],
  ),
);

rule("state on a local volume claim at --root, freed when scaled away", (d) =>
  d.workloads.flatMap((w) => {
    const out = [];
    const retention = w.sts.spec?.persistentVolumeClaimRetentionPolicy;
    if (retention?.whenScaled !== "Delete" || !retention?.whenDeleted)
      out.push(`${where(w)}: persistentVolumeClaimRetentionPolicy does not say whenScaled: Delete and a whenDeleted`);
    const root = w.servers[0] && parseServeFlags(w.servers[0].serve.args).flags.get("--root");
    if (root !== "/var/lib/nsbox") out.push(`${where(w)}: --root is ${root}, not /var/lib/nsbox`);
    const mount = (w.servers[0]?.container.volumeMounts ?? []).find((m) => m.mountPath === root);
    const claim = (w.sts.spec?.volumeClaimTemplates ?? []).find((t) => t.metadata?.name === mount?.name);
    if (!claim) return [...out, `${where(w)}: --root ${root} is not a volumeClaimTemplate's mount`];
    const sc = d.of("StorageClass").find((s) => s.object.metadata?.name === claim.spec?.storageClassName)?.object;
    if (!sc) out.push(`${where(w)}: the claim's StorageClass ${claim.spec?.storageClassName} is not in the manifests`);
    else if (sc.volumeBindingMode !== "WaitForFirstConsumer")
      out.push(
        `StorageClass ${sc.metadata?.name}: volumeBindingMode is not WaitForFirstConsumer (a local volume must bind where the pod lands)`,
      );
    return out;
  }),
);

function isPrivileged(w) {
  const all = [...(w.pod.containers ?? []), ...(w.pod.initContainers ?? []), ...(w.pod.ephemeralContainers ?? [])];
  return all.filter((c) => c.securityContext?.privileged === true).map((c) => c.name);
}

rule("no host namespaces; tier A privileged, tier B user-namespaced and not privileged", (d) =>
  d.workloads.flatMap((w) => {
    const out = [];
    for (const f of ["hostNetwork", "hostPID", "hostIPC"]) if (w.pod[f]) out.push(`${where(w)}: ${f} is set`);
    const privileged = isPrivileged(w);
    if (w.tier === "A" && privileged.length !== w.containers.length)
      out.push(`${where(w)}: tier A's containers are privileged: true`);
    if (w.tier !== "B") return out;
    if (w.pod.hostUsers !== false) out.push(`${where(w)}: tier B without hostUsers: false`);
    if (privileged.length > 0) out.push(`${where(w)}: tier B has privileged containers (${privileged.join(", ")})`);
    if (!w.pod.runtimeClassName) out.push(`${where(w)}: tier B without a runtimeClassName`);
    else if (!d.of("RuntimeClass").some((r) => r.object.metadata?.name === w.pod.runtimeClassName))
      out.push(`${where(w)}: its RuntimeClass ${w.pod.runtimeClassName} is not in the manifests`);
    return out;
  }),
);

// A container's setting, or the pod's where the container does not set it.
const effective = (w, c, key) => c.securityContext?.[key] ?? w.pod.securityContext?.[key];

rule("tier B runs nsbox rootless: a non-root user, no capability, no privilege escalation, an unmasked /proc", (d) =>
  d.workloads
    .filter((w) => w.tier === "B")
    .flatMap((w) => {
      const out = [];
      const psc = w.pod.securityContext ?? {};
      if (!Number.isInteger(psc.fsGroup))
        out.push(`${where(w)}: tier B without fsGroup: its user cannot write the local volume`);
      if (psc.fsGroupChangePolicy !== "OnRootMismatch")
        out.push(
          `${where(w)}: fsGroupChangePolicy is not OnRootMismatch: kubelet would change every sandbox file's group and mode at each start`,
        );
      for (const c of w.containers) {
        const sc = c.securityContext ?? {};
        const at = `${where(w)} container ${c.name}`;
        if (effective(w, c, "runAsNonRoot") !== true) out.push(`${at}: runAsNonRoot is not true`);
        for (const key of ["runAsUser", "runAsGroup"]) {
          const id = effective(w, c, key);
          if (!Number.isInteger(id) || id <= 0) out.push(`${at}: ${key} ${id} is not a non-root id`);
        }
        if (sc.allowPrivilegeEscalation !== false) out.push(`${at}: allowPrivilegeEscalation is not false`);
        if (!(sc.capabilities?.drop ?? []).includes("ALL")) out.push(`${at}: capabilities do not drop ALL`);
        const added = sc.capabilities?.add ?? [];
        if (added.length > 0) out.push(`${at}: adds capabilities (${added.join(", ")}); rootless nsbox needs none`);
        if (sc.procMount !== "Unmasked") out.push(`${at}: procMount is not Unmasked`);
        if (!Object.keys(c.resources?.limits ?? {}).some((k) => k.includes("/") && k.includes("fuse")))
          out.push(`${at}: no FUSE device resource in its limits`);
      }
      return out;
    }),
);

rule("tier B's seccomp: a Localhost profile of deploy/k8s/seccomp; its AppArmor: not the runtime's default", (d) =>
  d.workloads
    .filter((w) => w.tier === "B")
    .flatMap((w) =>
      w.containers.flatMap((c) => {
        const out = [];
        const at = `${where(w)} container ${c.name}`;
        const seccomp = effective(w, c, "seccompProfile");
        if (seccomp?.type !== "Localhost")
          out.push(`${at}: seccomp is not a Localhost profile (RuntimeDefault refuses unshare, mount and clone3)`);
        else if (!d.profiles.some((p) => p.file.endsWith(`/seccomp/${seccomp.localhostProfile}`)))
          out.push(`${at}: seccomp profile ${seccomp.localhostProfile} is not in deploy/k8s/seccomp`);
        const apparmor = effective(w, c, "appArmorProfile");
        if (!["Unconfined", "Localhost"].includes(apparmor?.type))
          out.push(
            `${at}: AppArmor is ${apparmor?.type ?? "unset"}: the runtime's default denies mount (Unconfined or Localhost)`,
          );
        return out;
      }),
    ),
);

// Problems of one seccomp profile, as containerd reads a Localhost profile: the OCI
// runtime spec's LinuxSeccomp, where an unknown field is silently ignored (so refused here).
function seccompProfileProblems(p) {
  let o;
  try {
    o = JSON.parse(p.seccompText);
  } catch (e) {
    return [`${p.file}: is not JSON: ${e.message}`];
  }
  const out = [];
  const unknown = (object, known, at) => {
    for (const k of Object.keys(object ?? {}))
      if (!known.includes(k)) out.push(`${p.file}: ${at}: unknown field "${k}"`);
  };
  unknown(o, ["defaultAction", "defaultErrnoRet", "architectures", "flags", "syscalls"], "the profile");
  if (!["SCMP_ACT_ERRNO", "SCMP_ACT_KILL_PROCESS", "SCMP_ACT_KILL"].includes(o.defaultAction))
    out.push(`${p.file}: defaultAction ${o.defaultAction} does not refuse what the profile does not list`);
  for (const arch of ["SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"])
    if (!(o.architectures ?? []).includes(arch)) out.push(`${p.file}: architectures lack ${arch}`);
  const allowed = new Set();
  const allowedIf = new Set();
  for (const [i, r] of (Array.isArray(o.syscalls) ? o.syscalls : []).entries()) {
    const at = `syscalls[${i}]`;
    unknown(r, ["names", "action", "errnoRet", "args"], at);
    if (!Array.isArray(r.names) || r.names.length === 0 || !r.names.every((n) => /^[a-z0-9_]+$/.test(n)))
      out.push(`${p.file}: ${at}: names is not a list of syscall names`);
    if (!seccompActions.includes(r.action))
      out.push(`${p.file}: ${at}: action ${r.action} is not one of ${seccompActions.join(", ")}`);
    for (const [j, a] of (r.args ?? []).entries()) {
      unknown(a, ["index", "value", "valueTwo", "op"], `${at}.args[${j}]`);
      if (!Number.isInteger(a.index) || a.index < 0 || a.index > 5)
        out.push(`${p.file}: ${at}.args[${j}]: index ${a.index}`);
      if (!Number.isInteger(a.value) || a.value < 0) out.push(`${p.file}: ${at}.args[${j}]: value ${a.value}`);
      if (!seccompOps.includes(a.op)) out.push(`${p.file}: ${at}.args[${j}]: op ${a.op}`);
    }
    if (r.action === "SCMP_ACT_ALLOW")
      for (const n of r.names ?? []) ((r.args ?? []).length === 0 ? allowed : allowedIf).add(n);
  }
  if (!Array.isArray(o.syscalls) || o.syscalls.length === 0) out.push(`${p.file}: no syscalls list`);
  for (const n of nsboxSeccompNeeds) if (!allowed.has(n)) out.push(`${p.file}: does not allow ${n}, which nsbox needs`);
  for (const n of seccompStillRefused)
    if (allowed.has(n) || allowedIf.has(n)) out.push(`${p.file}: allows ${n}, which the runtime's default refuses`);
  return out;
}

rule("the seccomp profiles: OCI JSON, refusing by default, allowing what nsbox needs and no more", (d) =>
  d.profiles.length === 0 ? ["no seccomp profile in deploy/k8s/seccomp"] : d.profiles.flatMap(seccompProfileProblems),
);

function secretFileProblems(w, container, path, flag) {
  const mount = (container.volumeMounts ?? []).find((m) => path.startsWith(m.mountPath.replace(/\/$/, "") + "/"));
  if (!mount) return [`${where(w)}: ${flag} ${path} is on no volume mount`];
  const volume = (w.pod.volumes ?? []).find((v) => v.name === mount.name);
  if (!volume?.secret) return [`${where(w)}: ${flag} ${path} is not on a Secret volume`];
  const rest = path.slice(mount.mountPath.replace(/\/$/, "").length + 1);
  const items = volume.secret.items;
  const item = items ? items.find((i) => i.path === rest) : { key: rest };
  if (!item) return [`${where(w)}: ${flag} ${path}: Secret ${volume.secret.secretName} has no item at ${rest}`];
  const mode = item.mode ?? volume.secret.defaultMode ?? 0o644;
  const out = [];
  // A Secret's files are group-readable under fsGroup whatever the mode: then nsbox must
  // read a private copy (tokenFileProblems), and this file is only its source.
  if ((mode & 0o077) !== 0 && w.pod.securityContext?.fsGroup === undefined)
    out.push(`${where(w)}: ${flag} ${path} has mode 0${mode.toString(8)}: nsbox refuses a token file others can read`);
  if (mount.readOnly !== true) out.push(`${where(w)}: the mount of ${flag} ${path} is not readOnly`);
  return out;
}

// A token file: on a Secret volume, or a private copy the script makes of one (`umask 077`
// first, then `cp [-f] SOURCE PATH`) on a memory-backed emptyDir.
function tokenFileProblems(w, container, path, flag, script) {
  const mount = (container.volumeMounts ?? []).find((m) => path.startsWith(m.mountPath.replace(/\/$/, "") + "/"));
  const volume = mount && (w.pod.volumes ?? []).find((v) => v.name === mount.name);
  if (!volume?.emptyDir) {
    const out = secretFileProblems(w, container, path, flag);
    if (w.pod.securityContext?.fsGroup !== undefined && volume?.secret)
      out.push(
        `${where(w)}: ${flag} ${path}: fsGroup makes this Secret's file group-readable, which nsbox refuses; copy it`,
      );
    return out;
  }
  const words = script === null ? [] : shellWords(script);
  let at = -1;
  let source;
  words.forEach((x, i) => {
    if (x !== "cp" || at >= 0) return;
    const end = words.indexOf(";", i);
    const operands = words.slice(i + 1, end < 0 ? undefined : end).filter((y) => !y.startsWith("-"));
    if (operands.length === 2 && operands[1] === path) [at, source] = [i, operands[0]];
  });
  if (at < 0)
    return [`${where(w)}: ${flag} ${path} is on emptyDir ${volume.name}, and the script copies no Secret's file there`];
  const out = secretFileProblems(w, container, source, `${flag}'s source`);
  if (volume.emptyDir.medium !== "Memory")
    out.push(`${where(w)}: ${flag} ${path}: the copy is on disk (emptyDir ${volume.name} without medium: Memory)`);
  const umask = words.slice(0, at).lastIndexOf("umask");
  if (umask < 0 || !["077", "0077"].includes(words[umask + 1]))
    out.push(
      `${where(w)}: ${flag} ${path}: the script copies it without umask 077 first, so others could read the copy`,
    );
  return out;
}

rule("the serve command: the documented flags only, and each consistent with the pod", (d) =>
  d.workloads.flatMap((w) =>
    w.servers.flatMap(({ container: c, serve }) => {
      const at = `${where(w)} container ${c.name}`;
      const { flags, problems } = parseServeFlags(serve.args);
      const out = problems.map((p) => `${at}: ${p}`);
      for (const f of requiredServeFlags) if (!flags.has(f)) out.push(`${at}: nsbox serve lacks ${f}`);
      const env = new Map((c.env ?? []).map((e) => [e.name, e]));
      const fromPodName = (name) =>
        name === "HOSTNAME" || env.get(name)?.valueFrom?.fieldRef?.fieldPath === "metadata.name";
      const shard = flags.get("--shard");
      const m = typeof shard === "string" ? /^\$\{([A-Za-z_][A-Za-z0-9_]*)##\*-\}$/.exec(shard) : null;
      if (shard !== undefined && !(m && fromPodName(m[1])))
        out.push(
          `${at}: --shard ${shard} is not the pod's ordinal (\${POD_NAME##*-} with POD_NAME from metadata.name)`,
        );
      const peers = flags.get("--peers");
      const host = `${w.sts.metadata?.name}-{shard}.${w.sts.spec?.serviceName}.`;
      const port = listenPort({ serve });
      if (
        peers !== undefined &&
        !(typeof peers === "string" && peers.startsWith(`http://${host}`) && peers.endsWith(`:${port}`))
      )
        out.push(`${at}: --peers ${peers} is not http://${host}...:${port}`);
      if (!portOf(c, port)) out.push(`${at}: the --listen port ${port} is not a port the container declares`);
      for (const f of ["--token-file", "--peer-token-file"])
        if (typeof flags.get(f) === "string") out.push(...tokenFileProblems(w, c, flags.get(f), f, serve.script));
      for (const [, name] of (serve.script ?? "").matchAll(/\$\{?([A-Za-z_][A-Za-z0-9_]*)/g))
        if (name !== "HOSTNAME" && !env.has(name))
          out.push(`${at}: the script reads $${name}, which the container's env does not define`);
      return out;
    }),
  ),
);

rule("the NetworkPolicy: ingress on the API port only, no metadata address, DNS allowed", (d) =>
  d.workloads.flatMap((w) => {
    const policies = d.of("NetworkPolicy").filter((p) => matchesLabelSelector(p.object.spec?.podSelector, w.labels));
    if (policies.length === 0) return [`${where(w)}: no NetworkPolicy selects its pods`];
    const port = w.servers[0] && listenPort(w.servers[0]);
    const out = [];
    for (const { object: p } of policies) {
      const name = `NetworkPolicy ${p.metadata?.name}`;
      const types = p.spec?.policyTypes ?? [];
      if (!types.includes("Ingress") || !types.includes("Egress"))
        out.push(`${name}: policyTypes is not both Ingress and Egress`);
      for (const [i, r] of (p.spec?.ingress ?? []).entries()) {
        const ports = r.ports ?? [];
        if (ports.length === 0 || ports.some((x) => x.port !== port && x.port !== "api"))
          out.push(`${name}: ingress rule ${i} is not on the API port ${port} only`);
      }
      const egress = p.spec?.egress ?? [];
      for (const [i, r] of egress.entries()) {
        if ((r.to ?? []).length === 0) out.push(`${name}: egress rule ${i} allows every destination`);
        for (const t of r.to ?? [])
          if (
            t.ipBlock &&
            cidrHas(t.ipBlock.cidr, "169.254.169.254") &&
            !(t.ipBlock.except ?? []).some((e) => cidrHas(e, "169.254.169.254"))
          )
            out.push(`${name}: egress rule ${i} reaches the metadata address 169.254.169.254`);
      }
      if (!egress.some((r) => (r.ports ?? []).some((x) => x.port === 53)))
        out.push(`${name}: no egress rule for DNS (port 53)`);
    }
    return out;
  }),
);

function cidrHas(cidr, address) {
  const m = /^([0-9.]+)\/([0-9]+)$/.exec(cidr ?? "");
  if (!m) return false;
  const n = (a) => a.split(".").reduce((x, o) => x * 256 + Number(o), 0);
  const bits = Number(m[2]);
  const size = 2 ** (32 - bits);
  return Math.floor(n(m[1]) / size) === Math.floor(n(address) / size);
}

rule("the KEDA example scales the StatefulSet on nsbox_warm_ready, slowly down", (d) => {
  const scaled = d.of("ScaledObject");
  if (scaled.length === 0) return ["no KEDA ScaledObject"];
  const names = new Set(d.workloads.map((w) => w.sts.metadata?.name));
  return scaled.flatMap(({ object: s }) => {
    const name = `ScaledObject ${s.metadata?.name}`;
    const out = [];
    const ref = s.spec?.scaleTargetRef ?? {};
    if (ref.kind !== "StatefulSet" || !names.has(ref.name))
      out.push(`${name}: scaleTargetRef is not the nsbox StatefulSet`);
    if (
      !(s.spec?.triggers ?? []).some(
        (t) => t.type === "prometheus" && /\bnsbox_warm_ready\b/.test(t.metadata?.query ?? ""),
      )
    )
      out.push(`${name}: no prometheus trigger on nsbox_warm_ready`);
    const down = s.spec?.advanced?.horizontalPodAutoscalerConfig?.behavior?.scaleDown?.stabilizationWindowSeconds;
    if (!(down >= 600)) out.push(`${name}: scaleDown stabilizationWindowSeconds ${down} is under 600`);
    return out;
  });
});

rule("docs/scale-out.md gives every serve flag the manifests use", (d) => {
  if (d.docText === undefined) return ["docs/scale-out.md was not given (--doc)"];
  const used = new Set(
    d.workloads.flatMap((w) => w.servers.flatMap(({ serve }) => [...parseServeFlags(serve.args).flags.keys()])),
  );
  return [...used]
    .filter((f) => !new RegExp(`(^|[^-\\w])${f}(?![-\\w])`).test(d.docText))
    .map((f) => `docs/scale-out.md does not mention ${f}`);
});

export const policyRules = rules;

export function checkPolicy(docs, docText) {
  const d = { ...deployment(docs), docText };
  return rules.map((r) => ({ name: r.name, problems: r.check(d) }));
}
