/**
 * The SDK's bucket mount entries as nsbox serve's bucket mounts (docs/semantics.md,
 * "Bucket mounts"): `s3_mount`, `r2_mount`, `gcs_mount` and `azure_blob_mount` become the
 * create document's `mounts`, as the Python client maps them.
 *
 * nsbox serves every mount from the host: a FUSE server outside the sandbox, which no
 * process inside can see. So the SDK's strategies only choose that server: nsbox's
 * built-in one, unless the strategy asks for rclone (an rclone pattern, or Docker's rclone
 * volume driver) or names one of nsbox's (`{type: "builtin" | "rclone" | "s3fs"}`); the
 * SDK's in-container helpers never run, and their pattern options do not apply.
 *
 * Credentials go in each mount's `credentials` in the create request, and nowhere else:
 * the session keeps its manifest without them (`withoutMountCredentials`), and the server
 * never stores, logs or echoes them. Mounts are never in a snapshot (the server leaves
 * their paths out).
 */
import {
  SandboxMountConfigError,
  cloneManifest,
  type Entry,
  type Manifest,
  type MountStrategy,
  type TypedMount,
} from "@openai/agents-core/sandbox";
import { configuredMountCredentialFields } from "@openai/agents-core/sandbox/internal";

import type { MountRequest } from "../models.js";

/** The SDK's mount types nsbox serves. */
export const NSBOX_MOUNT_TYPES: ReadonlySet<string> = new Set(["s3_mount", "r2_mount", "gcs_mount", "azure_blob_mount"]);

type NsboxMount = Extract<TypedMount, { type: "s3_mount" | "r2_mount" | "gcs_mount" | "azure_blob_mount" }>;

export function isNsboxMount(entry: Entry): entry is NsboxMount {
  return NSBOX_MOUNT_TYPES.has(entry.type);
}

/**
 * The create document's `mounts` for the manifest's mount entries (parents first), each
 * at its mount path (the entry's path under the root, or its `mountPath`), with its
 * credentials. A field nsbox cannot serve is refused before anything is made.
 */
export function mountRequests(manifest: Manifest): MountRequest[] {
  return manifest.mountTargetsForMaterialization()
    .filter(({ entry }) => isNsboxMount(entry))
    .map(({ logicalPath, mountPath, entry }) => {
      const { fields, credentials } = bucketOf(entry as NsboxMount, logicalPath);
      const request: MountRequest = {
        ...defined(fields),
        mount_path: mountPath,
        read_only: entry.readOnly !== false,
        strategy: strategyOf(entry.mountStrategy),
      };
      const given = defined(credentials);
      if (Object.keys(given).length) request.credentials = given;
      return request;
    });
}

/** The manifest with every mount's credentials removed (itself when it has none): what the session keeps. */
export function withoutMountCredentials(manifest: Manifest): Manifest {
  if (!manifest.mountTargets().some(({ entry }) => configuredMountCredentialFields(entry).length)) return manifest;
  const copy = cloneManifest(manifest);
  for (const { entry } of copy.mountTargets()) {
    for (const field of configuredMountCredentialFields(entry)) deleteField(entry, field);
  }
  return copy;
}

function bucketOf(entry: NsboxMount, path: string): { fields: Record<string, unknown>; credentials: Record<string, unknown> } {
  switch (entry.type) {
    case "s3_mount":
      return {
        fields: { type: "s3", bucket: entry.bucket, prefix: entry.prefix, region: entry.region, endpoint_url: entry.endpointUrl },
        credentials: { access_key_id: entry.accessKeyId, secret_access_key: entry.secretAccessKey, session_token: entry.sessionToken },
      };
    case "gcs_mount":
      refuse(entry, path, ["serviceAccountCredentials", "serviceAccountFile", "accessToken"],
        "nsbox mounts GCS through its S3-compatible XML API with HMAC keys: give accessId and secretAccessKey");
      return {
        fields: { type: "gcs", bucket: entry.bucket, prefix: entry.prefix, region: entry.region, endpoint_url: entry.endpointUrl },
        credentials: { access_key_id: entry.accessId, secret_access_key: entry.secretAccessKey },
      };
    case "r2_mount":
      refuse(entry, path, ["customDomain"], "nsbox reaches R2 at its account endpoint: give accountId");
      return {
        fields: { type: "r2", bucket: entry.bucket, account: entry.accountId, prefix: entry.prefix },
        credentials: { access_key_id: entry.accessKeyId, secret_access_key: entry.secretAccessKey },
      };
    case "azure_blob_mount":
      refuse(entry, path, ["identityClientId"], "nsbox signs Azure requests with an account key: give accountKey");
      return {
        fields: {
          type: "azure_blob", account: entry.account ?? entry.accountName, container: entry.container, prefix: entry.prefix,
          endpoint_url: entry.endpointUrl ?? entry.endpoint,
        },
        credentials: { account_key: entry.accountKey },
      };
  }
}

function refuse(entry: NsboxMount, path: string, fields: string[], instead: string): void {
  const given = fields.filter((f) => (entry as Record<string, unknown>)[f] !== undefined);
  if (given.length) {
    throw new SandboxMountConfigError(`NsboxSandboxClient: ${entry.type} ${path}: ${given.join(", ")} cannot be served ` +
      `by nsbox (${instead})`, { provider: "nsbox", path, type: entry.type, fields: given });
  }
}

const NSBOX_STRATEGIES = ["builtin", "rclone", "s3fs"] as const;

/** The nsbox server of a mount (see the module's comment). */
export function strategyOf(strategy: MountStrategy | undefined): MountRequest["strategy"] {
  if (strategy === undefined) return "builtin";
  const named = NSBOX_STRATEGIES.find((s) => s === strategy.type);
  if (named) return named;
  const pattern = (strategy as { pattern?: { type?: unknown } }).pattern;
  if (pattern?.type === "rclone") return "rclone";
  if (strategy.type === "docker_volume" && (strategy as { driver?: unknown }).driver === "rclone") return "rclone";
  return "builtin";
}

function defined(fields: Record<string, unknown>): Record<string, string> {
  return Object.fromEntries(Object.entries(fields).filter(([, v]) => typeof v === "string" && v !== "")) as Record<string, string>;
}

// Fields are the SDK's dotted paths (`mountStrategy.pattern.configFilePath`).
function deleteField(record: object, field: string): void {
  const parts = field.split(".");
  let at: unknown = record;
  for (const part of parts.slice(0, -1)) {
    if (typeof at !== "object" || at === null) return;
    at = (at as Record<string, unknown>)[part];
  }
  if (typeof at === "object" && at !== null) delete (at as Record<string, unknown>)[parts[parts.length - 1]!];
}
