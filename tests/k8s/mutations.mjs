// Broken copies of the real manifests, each of which a check must refuse: they prove the
// checks can fail. `mutate` changes a deep copy of the documents in place.

const find = (docs, kind, name, file) =>
  docs.find(
    (d) => d.object.kind === kind && (!name || d.object.metadata?.name === name) && (!file || d.file.endsWith(file)),
  )?.object;
const tierA = (docs) => find(docs, "StatefulSet", "nsbox", "/statefulset.yaml");
const tierB = (docs) => find(docs, "StatefulSet", "nsbox", "/statefulset-hardened.yaml");
const podA = (docs) => tierA(docs).spec.template.spec;
const podB = (docs) => tierB(docs).spec.template.spec;
const serverA = (docs) => podA(docs).containers[0];
const serverB = (docs) => podB(docs).containers[0];
// Tier B's seccomp profile is kept as text (a broken copy may be one that is not JSON).
const profileB = (docs) => docs.find((d) => d.seccompText !== undefined && d.file.endsWith("/nsbox-rootless.json"));
const editProfile = (docs, edit) => {
  const p = profileB(docs);
  const o = JSON.parse(p.seccompText);
  edit(o);
  p.seccompText = JSON.stringify(o);
};
const rename = (object, from, to) => {
  object[to] = object[from];
  delete object[from];
};
const editScript = (container, from, to) => {
  const script = container.args[0];
  if (!script.includes(from)) throw new Error(`the serve script has no '${from}' to change`);
  container.args[0] = script.replace(from, to);
};

// Misspelled fields: the strict schema check must name each.
export const misspellings = [
  {
    what: "spec.replicas as replicass",
    mutate: (docs) => rename(tierA(docs).spec, "replicas", "replicass"),
    expect: "spec.replicass",
  },
  {
    what: "a container's image as imagee",
    mutate: (docs) => rename(serverA(docs), "image", "imagee"),
    expect: "spec.template.spec.containers[0].imagee",
  },
  {
    what: "a probe's httpGet.path as pathh",
    mutate: (docs) => rename(serverA(docs).readinessProbe.httpGet, "path", "pathh"),
    expect: "readinessProbe.httpGet.pathh",
  },
  {
    what: "tier B's hostUsers as hostUser",
    mutate: (docs) => rename(podB(docs), "hostUsers", "hostUser"),
    expect: "spec.template.spec.hostUser",
  },
  {
    what: "the Service's clusterIP as clusterIp",
    mutate: (docs) => rename(find(docs, "Service", "nsbox-peers").spec, "clusterIP", "clusterIp"),
    expect: "spec.clusterIp",
  },
  {
    what: "a NetworkPolicy except as excepts",
    mutate: (docs) => rename(find(docs, "NetworkPolicy").spec.egress[2].to[0].ipBlock, "except", "excepts"),
    expect: "spec.egress[2].to[0].ipBlock.excepts",
  },
  {
    what: "KEDA's stabilizationWindowSeconds spelt the British way",
    mutate: (docs) =>
      rename(
        find(docs, "ScaledObject").spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleDown,
        "stabilizationWindowSeconds",
        "stabilisationWindowSeconds",
      ),
    expect: "scaleDown.stabilisationWindowSeconds",
  },
  {
    what: "the PDB's maxUnavailable as maxUnavailible",
    mutate: (docs) => rename(find(docs, "PodDisruptionBudget").spec, "maxUnavailable", "maxUnavailible"),
    expect: "spec.maxUnavailible",
  },
];

// Policy breaches: the named check must report each.
export const breaches = [
  { what: "no anti-affinity", mutate: (docs) => delete podA(docs).affinity, expect: "podAntiAffinity" },
  {
    what: "anti-affinity on a zone, not a node",
    mutate: (docs) =>
      (podA(docs).affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey =
        "topology.kubernetes.io/zone"),
    expect: "podAntiAffinity",
  },
  {
    what: "a hostPath volume",
    mutate: (docs) => podB(docs).volumes.push({ name: "host", hostPath: { path: "/var/lib/nsbox" } }),
    expect: "hostPath",
  },
  {
    what: "a service-account token",
    mutate: (docs) => (podA(docs).automountServiceAccountToken = true),
    expect: "automountServiceAccountToken",
  },
  {
    what: "no PodDisruptionBudget",
    mutate: (docs) =>
      docs.splice(
        docs.findIndex((d) => d.object.kind === "PodDisruptionBudget"),
        1,
      ),
    expect: "PodDisruptionBudget",
  },
  {
    what: "a PodDisruptionBudget selecting other pods",
    mutate: (docs) => (find(docs, "PodDisruptionBudget").spec.selector.matchLabels["app.kubernetes.io/name"] = "other"),
    expect: "PodDisruptionBudget",
  },
  {
    what: "readiness on /healthz",
    mutate: (docs) => (serverA(docs).readinessProbe.httpGet.path = "/healthz"),
    expect: "/readyz",
  },
  {
    what: "liveness on an undeclared port",
    mutate: (docs) => (serverA(docs).livenessProbe.httpGet.port = 9090),
    expect: "not a port the container declares",
  },
  { what: "no preStop drain", mutate: (docs) => delete serverA(docs).lifecycle, expect: "nsbox drain" },
  {
    what: "a drain of another state root",
    mutate: (docs) => (serverA(docs).lifecycle.preStop.exec.command[3] = "/tmp"),
    expect: "nsbox drain --root",
  },
  {
    what: "tier B's drain of another state root",
    mutate: (docs) => (serverB(docs).lifecycle.preStop.exec.command[2] = "/tmp"),
    expect: "nsbox drain --root is /tmp",
  },
  {
    what: "a peers Service with a cluster IP",
    mutate: (docs) => delete find(docs, "Service", "nsbox-peers").spec.clusterIP,
    expect: "clusterIP is not None",
  },
  {
    what: "a peers Service hiding not-ready pods",
    mutate: (docs) => (find(docs, "Service", "nsbox-peers").spec.publishNotReadyAddresses = false),
    expect: "publishNotReadyAddresses",
  },
  {
    what: "a clients' Service selecting other pods",
    mutate: (docs) => (find(docs, "Service", "nsbox").spec.selector["app.kubernetes.io/component"] = "other"),
    expect: "ClusterIP Services select its pods",
  },
  {
    what: "a grace period equal to the drain grace",
    mutate: (docs) => (podA(docs).terminationGracePeriodSeconds = 900),
    expect: "terminationGracePeriodSeconds",
  },
  {
    what: "a longer --drain-grace than the grace period covers",
    mutate: (docs) => editScript(serverA(docs), '--warm "$WARM"', '--warm "$WARM" --drain-grace 1800'),
    expect: "drain grace (1800 s)",
  },
  {
    what: "no safe-to-evict annotation",
    mutate: (docs) => (tierA(docs).spec.template.metadata.annotations = {}),
    expect: "safe-to-evict",
  },
  {
    what: "claims kept when scaled in",
    mutate: (docs) => (tierA(docs).spec.persistentVolumeClaimRetentionPolicy.whenScaled = "Retain"),
    expect: "whenScaled",
  },
  {
    what: "tier B privileged",
    mutate: (docs) => (podB(docs).containers[0].securityContext.privileged = true),
    expect: "tier B has privileged containers",
  },
  { what: "tier B on the host's users", mutate: (docs) => delete podB(docs).hostUsers, expect: "hostUsers" },
  {
    what: "tier B with a masked /proc",
    mutate: (docs) => delete podB(docs).containers[0].securityContext.procMount,
    expect: "procMount",
  },
  {
    what: "tier B adding SYS_ADMIN",
    mutate: (docs) => (serverB(docs).securityContext.capabilities.add = ["SYS_ADMIN"]),
    expect: "adds capabilities (SYS_ADMIN)",
  },
  {
    what: "tier B keeping the runtime's default capabilities",
    mutate: (docs) => delete serverB(docs).securityContext.capabilities.drop,
    expect: "do not drop ALL",
  },
  { what: "tier B as root", mutate: (docs) => (podB(docs).securityContext.runAsUser = 0), expect: "runAsUser 0" },
  {
    what: "tier B without runAsNonRoot",
    mutate: (docs) => delete podB(docs).securityContext.runAsNonRoot,
    expect: "runAsNonRoot",
  },
  {
    what: "tier B's container as root over a non-root pod",
    mutate: (docs) => (serverB(docs).securityContext.runAsGroup = 0),
    expect: "runAsGroup 0",
  },
  {
    what: "tier B allowing privilege escalation",
    mutate: (docs) => (serverB(docs).securityContext.allowPrivilegeEscalation = true),
    expect: "allowPrivilegeEscalation",
  },
  {
    what: "tier B without fsGroup",
    mutate: (docs) => delete podB(docs).securityContext.fsGroup,
    expect: "without fsGroup",
  },
  {
    what: "tier B's fsGroup applied to every file at each start",
    mutate: (docs) => (podB(docs).securityContext.fsGroupChangePolicy = "Always"),
    expect: "OnRootMismatch",
  },
  {
    what: "tier B without the FUSE device",
    mutate: (docs) => delete serverB(docs).resources.limits["squat.ai/fuse"],
    expect: "FUSE",
  },
  {
    what: "tier B under the runtime's default seccomp profile",
    mutate: (docs) => (serverB(docs).securityContext.seccompProfile = { type: "RuntimeDefault" }),
    expect: "seccomp is not a Localhost profile",
  },
  {
    what: "tier B naming a seccomp profile nsbox does not ship",
    mutate: (docs) => (serverB(docs).securityContext.seccompProfile.localhostProfile = "nsbox.json"),
    expect: "nsbox.json is not in deploy/k8s/seccomp",
  },
  {
    what: "tier B under the runtime's default AppArmor profile",
    mutate: (docs) => (serverB(docs).securityContext.appArmorProfile = { type: "RuntimeDefault" }),
    expect: "AppArmor is RuntimeDefault",
  },
  {
    what: "tier B reading a Secret's group-readable token itself",
    mutate: (docs) =>
      editScript(serverB(docs), "--token-file /run/nsbox-tokens/token", "--token-file /etc/nsbox/token/token"),
    expect: "fsGroup makes this Secret's file group-readable",
  },
  {
    what: "tier B copying its tokens without umask 077",
    mutate: (docs) => editScript(serverB(docs), "umask 077\n", ""),
    expect: "without umask 077",
  },
  {
    what: "tier B copying its tokens after umask 022",
    mutate: (docs) => editScript(serverB(docs), "umask 077\n", "umask 077\numask 022\n"),
    expect: "without umask 077",
  },
  {
    what: "tier B copying its tokens to disk",
    mutate: (docs) => delete podB(docs).volumes.find((v) => v.name === "tokens").emptyDir.medium,
    expect: "medium: Memory",
  },
  {
    what: "tier B's token copied from no Secret",
    mutate: (docs) => editScript(serverB(docs), "cp -f /etc/nsbox/peer-token/token", "cp -f /tmp/peer-token"),
    expect: "/tmp/peer-token is on no volume mount",
  },
  {
    what: "a seccomp profile that is not JSON",
    mutate: (docs) => (profileB(docs).seccompText = profileB(docs).seccompText.trimEnd().slice(0, -1)),
    expect: "is not JSON",
  },
  {
    what: "a seccomp profile allowing by default",
    mutate: (docs) => editProfile(docs, (o) => (o.defaultAction = "SCMP_ACT_ALLOW")),
    expect: "defaultAction SCMP_ACT_ALLOW",
  },
  {
    what: "a seccomp profile without unshare",
    mutate: (docs) =>
      editProfile(docs, (o) => o.syscalls.forEach((r) => (r.names = r.names.filter((n) => n !== "unshare")))),
    expect: "does not allow unshare",
  },
  {
    what: "a seccomp profile allowing clone3 only with an argument",
    mutate: (docs) =>
      editProfile(docs, (o) => {
        o.syscalls.forEach((r) => (r.names = r.names.filter((n) => n !== "clone3")));
        const args = [{ index: 1, value: 88, op: "SCMP_CMP_EQ" }];
        o.syscalls.push({ names: ["clone3"], action: "SCMP_ACT_ALLOW", args });
      }),
    expect: "does not allow clone3",
  },
  {
    what: "a seccomp profile allowing keyctl",
    mutate: (docs) => editProfile(docs, (o) => o.syscalls[0].names.push("keyctl")),
    expect: "allows keyctl",
  },
  {
    what: "a seccomp profile with a field spelt the Docker way",
    mutate: (docs) => editProfile(docs, (o) => (o.syscalls[1].name = o.syscalls[1].names.pop())),
    expect: 'unknown field "name"',
  },
  {
    what: "a seccomp profile with an unknown comparison",
    mutate: (docs) => editProfile(docs, (o) => (o.syscalls[1].args[0].op = "SCMP_CMP_LESS")),
    expect: "op SCMP_CMP_LESS",
  },
  {
    what: "tier A unprivileged",
    mutate: (docs) => (serverA(docs).securityContext.privileged = false),
    expect: "tier A",
  },
  { what: "a host network", mutate: (docs) => (podB(docs).hostNetwork = true), expect: "hostNetwork" },
  {
    what: "a serve flag the docs do not list",
    mutate: (docs) => editScript(serverA(docs), "--allow-remote", "--allow-remote --max-upload 1G"),
    expect: "--max-upload",
  },
  {
    what: "a misspelt serve flag",
    mutate: (docs) => editScript(serverA(docs), "--warm ", "--warm-pool "),
    expect: "--warm-pool",
  },
  {
    what: "no --shard",
    mutate: (docs) => editScript(serverA(docs), '--shard "${POD_NAME##*-}"', ""),
    expect: "lacks --shard",
  },
  { what: "a fixed shard", mutate: (docs) => editScript(serverA(docs), '"${POD_NAME##*-}"', "0"), expect: "ordinal" },
  {
    what: "peers on another Service",
    mutate: (docs) => editScript(serverA(docs), ".nsbox-peers.", ".nsbox."),
    expect: "--peers",
  },
  {
    what: "a script variable the env lacks",
    mutate: (docs) => editScript(serverA(docs), "$SNAPSHOT_STORE", "$SNAPSHOT_STOR"),
    expect: "$SNAPSHOT_STOR,",
  },
  {
    what: "a token readable by others",
    mutate: (docs) => (podA(docs).volumes[0].secret.defaultMode = 0o644),
    expect: "mode 0644",
  },
  {
    what: "ingress on another port",
    mutate: (docs) => find(docs, "NetworkPolicy").spec.ingress[0].ports.push({ protocol: "TCP", port: 22 }),
    expect: "API port",
  },
  {
    what: "egress to the metadata address",
    mutate: (docs) => (find(docs, "NetworkPolicy").spec.egress[2].to[0].ipBlock.except = ["10.0.0.0/8"]),
    expect: "169.254.169.254",
  },
  {
    what: "a fast KEDA scale-down",
    mutate: (docs) =>
      (find(
        docs,
        "ScaledObject",
      ).spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleDown.stabilizationWindowSeconds = 60),
    expect: "stabilizationWindowSeconds",
  },
  {
    what: "KEDA on another metric",
    mutate: (docs) => (find(docs, "ScaledObject").spec.triggers[0].metadata.query = "sum(nsbox_active)"),
    expect: "nsbox_warm_ready",
  },
];
