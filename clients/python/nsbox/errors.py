"""Exceptions of the nsbox client: one class per stable error code of the HTTP API.

The table is docs/api.md's "Errors": every answer that is not a success carries
``{"error": {"code", "message", "hint"}}``, and the client raises the class registered for
``code`` (an unknown code raises :class:`NsboxError` itself, so a newer server never breaks
an older client). Code switches on the class or on ``.code``, never on ``.message``.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple, Type

__all__ = [
    "NsboxError",
    "MalformedRequest",
    "SandboxDisabled",
    "Unauthorized",
    "PermissionDenied",
    "NotFound",
    "AlreadyExists",
    "Busy",
    "SandboxDead",
    "QuotaExceeded",
    "LimitExceeded",
    "InvalidArgument",
    "Unsupported",
    "HostError",
    "InternalError",
    "ProtocolError",
    "RemoteError",
    "Unavailable",
    "ServerUnreachable",
    "OwnerUnavailable",
    "Moved",
    "Timeout",
    "IntegrityError",
    "error_from_response",
]


class NsboxError(Exception):
    """Any failure reported by the nsbox server or met on the way to it.

    ``code`` is the API's stable code, ``status`` the HTTP status (``None`` when the
    failure happened before an answer: no server, no answer in time), ``hint`` the fix
    when there is an obvious one.
    """

    code: str = "error"
    default_status: Optional[int] = None

    def __init__(
        self,
        message: str,
        *,
        code: Optional[str] = None,
        hint: Optional[str] = None,
        status: Optional[int] = None,
        body: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.hint = hint
        self.status = status if status is not None else self.default_status
        self.body = body

    def __str__(self) -> str:
        text = self.message
        if self.hint:
            text += " (hint: " + self.hint + ")"
        return text

    def __repr__(self) -> str:
        return "%s(code=%r, status=%r, message=%r)" % (type(self).__name__, self.code, self.status, self.message)

    def __reduce__(self) -> Any:
        # Exceptions cross process and thread pools (asyncio.to_thread, multiprocessing):
        # keep the keyword-only fields when pickled.
        return (_rebuild, (type(self), self.message, self.code, self.hint, self.status))


def _rebuild(cls: "Type[NsboxError]", message: str, code: str, hint: Optional[str], status: Optional[int]) -> "NsboxError":
    return cls(message, code=code, hint=hint, status=status)


class MalformedRequest(NsboxError):
    """400: the request was not understood (bad JSON, unknown field, wrong type)."""

    code = "malformed_request"
    default_status = 400


class SandboxDisabled(NsboxError):
    """400: a sandbox call on a session created with its sandbox disabled."""

    code = "sandbox_disabled"
    default_status = 400


class Unauthorized(NsboxError):
    """401: the bearer token is missing or wrong."""

    code = "unauthorized"
    default_status = 401


class PermissionDenied(NsboxError):
    """403: a path through a symlink or another mount, a write the sandbox user could not
    make, or a download link that expired or was altered."""

    code = "permission_denied"
    default_status = 403


class NotFound(NsboxError):
    """404: no such sandbox, session, file or endpoint."""

    code = "not_found"
    default_status = 404


class AlreadyExists(NsboxError):
    """409: a taken name, a directory where a file goes, an existing directory."""

    code = "already_exists"
    default_status = 409


class Busy(NsboxError):
    """409: the sandbox is being removed or has too many requests at once."""

    code = "busy"
    default_status = 409


class SandboxDead(NsboxError):
    """409: the sandbox's supervisor is gone; remove the sandbox."""

    code = "sandbox_dead"
    default_status = 409


class QuotaExceeded(NsboxError):
    """413 (431 for headers): a body, upload, volume, cell or resize over its limit."""

    code = "limit_exceeded"
    default_status = 413


LimitExceeded = QuotaExceeded


class InvalidArgument(NsboxError):
    """422: a value out of range (unknown size, bad path, bad name, bad mount)."""

    code = "invalid_argument"
    default_status = 422


class Unsupported(NsboxError):
    """501: the host lacks something, or the endpoint comes in a later version."""

    code = "unsupported"
    default_status = 501


class HostError(NsboxError):
    """500: a system call failed on the host (the message names it and its path)."""

    code = "system"
    default_status = 500


class InternalError(NsboxError):
    """500: a bug in nsbox."""

    code = "internal"
    default_status = 500


class ProtocolError(NsboxError):
    """502: a supervisor (or the server) sent something malformed."""

    code = "protocol"
    default_status = 502


class RemoteError(NsboxError):
    """502: an object store refused or failed a bucket mount's check."""

    code = "remote"
    default_status = 502


class Unavailable(NsboxError):
    """503: the server is stopping or has too many connections."""

    code = "unavailable"
    default_status: Optional[int] = 503


class OwnerUnavailable(Unavailable):
    """503 from a sharded server: the sandbox's own server (its shard) does not answer.
    ``snapshot`` is its last snapshot's id when the store has one: restore it elsewhere
    with ``Sandbox.create(from_snapshot=...)``."""

    code = "owner_unavailable"

    @property
    def snapshot(self) -> Optional[str]:
        value = self.body.get("snapshot") if isinstance(self.body, dict) else None
        return value if isinstance(value, str) else None


class Moved(NsboxError):
    """410: the sandbox's server was drained and the sandbox moved to a snapshot,
    ``snapshot``; ``Sandbox.create(from_snapshot=...)`` on any server restores it (with a
    new id)."""

    code = "moved"
    default_status = 410

    @property
    def snapshot(self) -> Optional[str]:
        value = self.body.get("snapshot") if isinstance(self.body, dict) else None
        return value if isinstance(value, str) else None


class ServerUnreachable(Unavailable):
    """No server answers at the configured socket or URL (refused, missing, reset)."""

    default_status = None


class Timeout(NsboxError, TimeoutError):
    """504, or no answer from the server within the client's own bound."""

    code = "timeout"
    default_status = 504

    def __init__(self, message: str, **kwargs: Any) -> None:
        NsboxError.__init__(self, message, **kwargs)

    def __str__(self) -> str:
        return NsboxError.__str__(self)


class IntegrityError(NsboxError):
    """The server's sha-256 of an upload differs from the bytes the client sent."""

    code = "integrity"


_CLASSES: Tuple[Type[NsboxError], ...] = (
        MalformedRequest,
        SandboxDisabled,
        Unauthorized,
        PermissionDenied,
        NotFound,
        AlreadyExists,
        Busy,
        SandboxDead,
        QuotaExceeded,
        InvalidArgument,
        Unsupported,
        HostError,
        InternalError,
        ProtocolError,
        RemoteError,
        Unavailable,
        OwnerUnavailable,
        Moved,
        Timeout,
)
_BY_CODE: Dict[str, Type[NsboxError]] = {cls.code: cls for cls in _CLASSES}


def error_class(code: str) -> Type[NsboxError]:
    """The exception class for an API error code (NsboxError for codes this client does
    not know yet)."""
    return _BY_CODE.get(code, NsboxError)


def error_from_document(document: Any, status: Optional[int] = None) -> NsboxError:
    """The exception for an ``{"code", "message", "hint"}`` object (an error event's or an
    error answer's ``error``)."""
    if not isinstance(document, dict):
        return ProtocolError("the server sent an error that is not an object: %r" % (document,), status=status)
    code = document.get("code")
    message = document.get("message")
    hint = document.get("hint")
    if not isinstance(code, str):
        code = "error"
    if not isinstance(message, str) or not message:
        message = "the server answered %s with code %s" % (status, code)
    return error_class(code)(message, code=code, hint=hint if isinstance(hint, str) else None, status=status, body=document)


def error_from_response(status: int, body: bytes) -> NsboxError:
    """The exception for an HTTP error answer: its JSON error document when it has one."""
    import json

    try:
        document = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        document = None
    if isinstance(document, dict) and isinstance(document.get("error"), dict):
        return error_from_document(document["error"], status)
    text = body[:200].decode("utf-8", "replace").strip()
    cls: Type[NsboxError] = ProtocolError
    for candidate in _BY_CODE.values():
        if candidate.default_status == status:
            cls = candidate
            break
    return cls("HTTP %d from the server without an error document%s" % (status, ": " + text if text else ""), status=status)
