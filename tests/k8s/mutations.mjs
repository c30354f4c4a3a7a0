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
    what: "tier B with another capability",
    mutate: (docs) => podB(docs).containers[0].securityContext.capabilities.add.push("NET_ADMIN"),
    expect: "SYS_ADMIN",
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
