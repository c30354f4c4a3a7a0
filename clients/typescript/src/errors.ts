/**
 * Errors of the nsbox client: one class per stable error code of the HTTP API.
 *
 * Every answer that is not a success carries `{"error": {"code", "message", "hint"}}`
 * (docs/api.md, "Errors"; api/http_errors.cc has the one table of statuses), and the
 * client throws the class registered for `code`; an unknown code throws `NsboxError`
 * itself, so a newer server never breaks an older client. Code switches on the class
 * (`instanceof`) or on `.code`, never on `.message`. The classes and codes are those of
 * the Python client (clients/python/nsbox/errors.py).
 */

export interface NsboxErrorOptions {
  code?: string;
  hint?: string;
  status?: number;
  body?: unknown;
  cause?: unknown;
}

/**
 * Any failure reported by the nsbox server or met on the way to it. `code` is the API's
 * stable code, `status` the HTTP status (undefined when the failure happened before an
 * answer: no server, no answer in time), `hint` the fix when there is an obvious one
 * (Node prints it with the error, as an own property).
 */
export class NsboxError extends Error {
  static readonly code: string = "error";
  static readonly defaultStatus: number | undefined = undefined;

  readonly code: string;
  readonly hint: string | undefined;
  readonly status: number | undefined;
  /** The error document as the server sent it (`moved`'s `snapshot` is in it). */
  readonly body: unknown;

  constructor(message: string, options: NsboxErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    const own = new.target as typeof NsboxError;
    this.name = own.name;
    this.code = options.code ?? own.code;
    this.hint = options.hint;
    // `status: undefined` given on purpose: a failure met before any answer.
    this.status = "status" in options ? options.status : own.defaultStatus;
    this.body = options.body;
  }
}

/** 400: the request was not understood (bad JSON, unknown field, wrong type). */
export class MalformedRequest extends NsboxError {
  static override readonly code: string = "malformed_request";
  static override readonly defaultStatus: number | undefined = 400;
}

/** 400: a sandbox call on a session created with its sandbox disabled. */
export class SandboxDisabled extends NsboxError {
  static override readonly code: string = "sandbox_disabled";
  static override readonly defaultStatus: number | undefined = 400;
}

/** 401: the bearer token is missing or wrong. */
export class Unauthorized extends NsboxError {
  static override readonly code: string = "unauthorized";
  static override readonly defaultStatus: number | undefined = 401;
}

/**
 * 403: a path through a symlink or another mount, a write the sandbox user could not
 * make, or a download link that expired or was altered.
 */
export class PermissionDenied extends NsboxError {
  static override readonly code: string = "permission_denied";
  static override readonly defaultStatus: number | undefined = 403;
}

/** 404: no such sandbox, session, file or endpoint. */
export class NotFound extends NsboxError {
  static override readonly code: string = "not_found";
  static override readonly defaultStatus: number | undefined = 404;
}

/** 409: a taken name, a directory where a file goes, an existing directory. */
export class AlreadyExists extends NsboxError {
  static override readonly code: string = "already_exists";
  static override readonly defaultStatus: number | undefined = 409;
}

/** 409: the sandbox is being removed or has too many requests at once. */
export class Busy extends NsboxError {
  static override readonly code: string = "busy";
  static override readonly defaultStatus: number | undefined = 409;
}

/** 409: the sandbox is stopped or its supervisor is gone. */
export class SandboxDead extends NsboxError {
  static override readonly code: string = "sandbox_dead";
  static override readonly defaultStatus: number | undefined = 409;
}

/**
 * 413 (431 for headers): a body, upload, volume, cell or resize over its limit; also an
 * answer larger than this client's own bound (`maxResponseBytes`, no status then).
 */
export class LimitExceeded extends NsboxError {
  static override readonly code: string = "limit_exceeded";
  static override readonly defaultStatus: number | undefined = 413;
}

/** The Python client's name for {@link LimitExceeded}. */
export const QuotaExceeded = LimitExceeded;
export type QuotaExceeded = LimitExceeded;

/** 422: a value out of range (unknown size, bad path, bad name, bad mount). */
export class InvalidArgument extends NsboxError {
  static override readonly code: string = "invalid_argument";
  static override readonly defaultStatus: number | undefined = 422;
}

/** 501: the host lacks something, or the endpoint comes in a later version. */
export class Unsupported extends NsboxError {
  static override readonly code: string = "unsupported";
  static override readonly defaultStatus: number | undefined = 501;
}

/** 500: a system call failed on the host (the message names it and its path). */
export class HostError extends NsboxError {
  static override readonly code: string = "system";
  static override readonly defaultStatus: number | undefined = 500;
}

/** 500: a bug in nsbox. */
export class InternalError extends NsboxError {
  static override readonly code: string = "internal";
  static override readonly defaultStatus: number | undefined = 500;
}

/** 502: a supervisor (or the server) sent something malformed. */
export class ProtocolError extends NsboxError {
  static override readonly code: string = "protocol";
  static override readonly defaultStatus: number | undefined = 502;
}

/** 502: an object store refused or failed a bucket mount's check. */
export class RemoteError extends NsboxError {
  static override readonly code: string = "remote";
  static override readonly defaultStatus: number | undefined = 502;
}

/** 503: the server is stopping or has too many connections. */
export class Unavailable extends NsboxError {
  static override readonly code: string = "unavailable";
  static override readonly defaultStatus: number | undefined = 503;
}

function snapshotOf(body: unknown): string | undefined {
  const value = body !== null && typeof body === "object" ? (body as Record<string, unknown>)["snapshot"] : undefined;
  return typeof value === "string" ? value : undefined;
}

/**
 * 503 from a sharded server: the sandbox's own server (its shard) does not answer.
 * `snapshot` is its last snapshot's id when the store has one: restore it elsewhere with
 * `Sandbox.create({from_snapshot})`.
 */
export class OwnerUnavailable extends Unavailable {
  static override readonly code: string = "owner_unavailable";

  get snapshot(): string | undefined {
    return snapshotOf(this.body);
  }
}

/**
 * 410: the sandbox's server was drained and the sandbox moved to the snapshot
 * `snapshot`; `Sandbox.create({from_snapshot})` on any server restores it (with a new id).
 */
export class Moved extends NsboxError {
  static override readonly code: string = "moved";
  static override readonly defaultStatus: number | undefined = 410;

  get snapshot(): string | undefined {
    return snapshotOf(this.body);
  }
}

/** No server answers at the configured socket or URL (refused, missing, reset). */
export class ServerUnreachable extends Unavailable {
  static override readonly defaultStatus: number | undefined = undefined;
}

/** 504, or no answer from the server within the client's own bound. */
export class Timeout extends NsboxError {
  static override readonly code: string = "timeout";
  static override readonly defaultStatus: number | undefined = 504;
}

/** The server's sha-256 of an upload differs from the bytes the client sent. */
export class IntegrityError extends NsboxError {
  static override readonly code: string = "integrity";
}

/**
 * Whether a NotFound is about the account a call's `runAs` named (not one of the
 * sandbox's users) rather than a path: the server answers both with `not_found`, and
 * names the account in its message (`no user "NAME" in this sandbox (it has ...)`).
 */
export function isUnknownAccount(e: unknown, runAs: string | undefined): boolean {
  return e instanceof NotFound && runAs !== undefined && e.message.includes(`user ${JSON.stringify(runAs)}`);
}

type ErrorClass = typeof NsboxError;

// The API's codes (components.schemas.ErrorCode of api/openapi.yaml; a unit test checks
// that every one of them has its class here).
const CLASSES: readonly ErrorClass[] = [
  MalformedRequest, SandboxDisabled, Unauthorized, PermissionDenied, NotFound, AlreadyExists, Busy,
  SandboxDead, LimitExceeded, InvalidArgument, Unsupported, HostError, InternalError, ProtocolError,
  RemoteError, Unavailable, OwnerUnavailable, Moved, Timeout,
];
const BY_CODE = new Map<string, ErrorClass>(CLASSES.map((c) => [c.code, c]));

/** The error class for an API error code (NsboxError for codes this client does not know yet). */
export function errorClass(code: string): ErrorClass {
  return BY_CODE.get(code) ?? NsboxError;
}

/** The error for an `{"code", "message", "hint"}` object (an error event's or an error answer's `error`). */
export function errorFromDocument(document: unknown, status?: number): NsboxError {
  if (document === null || typeof document !== "object" || Array.isArray(document)) {
    return new ProtocolError(`the server sent an error that is not an object: ${JSON.stringify(document)}`, { status });
  }
  const doc = document as Record<string, unknown>;
  const code = typeof doc["code"] === "string" ? doc["code"] : "error";
  const message = typeof doc["message"] === "string" && doc["message"]
    ? doc["message"] : `the server answered ${status} with code ${code}`;
  const hint = typeof doc["hint"] === "string" ? doc["hint"] : undefined;
  const Class = errorClass(code);
  return new Class(message, { code, hint, status, body: doc });
}

/** The error for an HTTP error answer: its JSON error document when it has one. */
export function errorFromResponse(status: number, body: Uint8Array): NsboxError {
  const text = Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString("utf8");
  let document: unknown;
  try {
    document = JSON.parse(text);
  } catch {
    document = undefined;
  }
  if (document !== null && typeof document === "object" && !Array.isArray(document)) {
    const inner = (document as Record<string, unknown>)["error"];
    if (inner !== null && typeof inner === "object" && !Array.isArray(inner)) {
      return errorFromDocument(inner, status);
    }
  }
  const Class = CLASSES.find((c) => c.defaultStatus === status) ?? ProtocolError;
  const excerpt = text.slice(0, 200).trim();
  return new Class(`HTTP ${status} from the server without an error document${excerpt ? ": " + excerpt : ""}`, { status });
}
