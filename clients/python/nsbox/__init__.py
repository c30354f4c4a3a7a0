"""nsbox: local sandboxes for agent-written code, from Python.

The client of ``nsbox serve`` (docs/api.md), standard library only:

- :class:`Sandbox` — create, connect, list; ``run_code`` (a stateful Python kernel),
  ``commands.run`` (bash), ``files`` (the persistent /mnt/files), ``fs`` (any path of the
  sandbox's view), ``resize``, ``interrupt``, ``restart``, ``kill``.
- :class:`Session` — Composio's shape: a session whose sandbox is made on first use.
- :mod:`nsbox.aio` — the same with ``async``/``await``.
- :mod:`nsbox.agents` — the OpenAI Agents SDK's sandbox client and session shape.

Errors are exceptions by the API's code, all :class:`NsboxError`.
"""
from ._http import Client, default_socket_path, token_file_for_socket
from .errors import (
    AlreadyExists,
    Busy,
    HostError,
    IntegrityError,
    InternalError,
    InvalidArgument,
    LimitExceeded,
    MalformedRequest,
    Moved,
    NotFound,
    NsboxError,
    OwnerUnavailable,
    PermissionDenied,
    ProtocolError,
    QuotaExceeded,
    RemoteError,
    SandboxDead,
    SandboxDisabled,
    ServerUnreachable,
    Timeout,
    Unauthorized,
    Unavailable,
    Unsupported,
)
from .models import (
    CellError,
    CommandResult,
    Execution,
    FileEntry,
    FilePage,
    FsEntry,
    FsPage,
    FsStat,
    FsWrite,
    SandboxInfo,
    SessionInfo,
    SnapshotInfo,
    UploadRecord,
)
from .sandbox import Commands, Files, Fs, RemoteFile, Sandbox, Session

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Sandbox",
    "Session",
    "Commands",
    "Files",
    "Fs",
    "RemoteFile",
    "Execution",
    "CellError",
    "CommandResult",
    "UploadRecord",
    "FileEntry",
    "FilePage",
    "FsEntry",
    "FsPage",
    "FsStat",
    "FsWrite",
    "SandboxInfo",
    "SessionInfo",
    "SnapshotInfo",
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
    "OwnerUnavailable",
    "Moved",
    "ServerUnreachable",
    "Timeout",
    "IntegrityError",
    "default_socket_path",
    "token_file_for_socket",
]
