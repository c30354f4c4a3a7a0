"""The SDK's small types: ExecResult, FileEntry, Permissions, EntryKind; the default root."""
from __future__ import annotations

import asyncio
import enum
import stat as _stat
from typing import Any, Awaitable, Optional

# The root of a Manifest that names none: the sandbox's home, as before nsbox had workspace
# roots. Any other root (the SDK's /workspace) is the sandbox's `workspace_root` as written.
WORKSPACE_ROOT = "/home/user"
_SANDBOX_USER = "user"


def _run(fn: Any, *args: Any, **kwargs: Any) -> Awaitable[Any]:
    """The synchronous client's call, in a worker thread."""
    return asyncio.to_thread(fn, *args, **kwargs)


class ExecResult:
    """``stdout`` and ``stderr`` as bytes, ``exit_code``; ``ok()`` when it is 0."""

    def __init__(self, *, stdout: bytes, stderr: bytes, exit_code: int) -> None:
        self.stdout = stdout
        self.stderr = stderr
        self.exit_code = exit_code

    def ok(self) -> bool:
        return self.exit_code == 0

    def __repr__(self) -> str:
        return "ExecResult(exit_code=%r, stdout=%r, stderr=%r)" % (self.exit_code, self.stdout, self.stderr)


class PtyExecUpdate:
    """What a PTY process printed in a window: ``output`` (bytes), ``exit_code`` once it
    exited, and ``process_id`` (the session id to write to) while it runs."""

    def __init__(self, *, process_id: Optional[int], output: bytes, exit_code: Optional[int]) -> None:
        self.process_id = process_id
        self.output = output
        self.exit_code = exit_code

    @property
    def session_id(self) -> Optional[int]:
        return self.process_id

    def __repr__(self) -> str:
        return "PtyExecUpdate(process_id=%r, exit_code=%r, output=%r)" % (self.process_id, self.exit_code, self.output)


class ExposedPortEndpoint:
    """Where a port of the sandbox is reached from the server's machine: ``host`` and
    ``port`` of its loopback forward (docs/semantics.md, "Ports"), ``tls`` False; opened
    by a plain client, without the API token."""

    def __init__(self, *, host: str, port: int, tls: bool = False) -> None:
        self.host = host
        self.port = port
        self.tls = tls

    def url_for(self, scheme: str = "http") -> str:
        host = "[%s]" % self.host if ":" in self.host else self.host
        return "%s://%s:%d" % (scheme, host, self.port)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ExposedPortEndpoint) and (self.host, self.port, self.tls) == (other.host, other.port, other.tls)

    def __repr__(self) -> str:
        return "ExposedPortEndpoint(host=%r, port=%r, tls=%r)" % (self.host, self.port, self.tls)


class Permissions:
    """rwx bits of owner, group and other (``to_mode()``), as the SDK's Permissions."""

    def __init__(self, owner: int = 0o7, group: int = 0, other: int = 0, directory: bool = False) -> None:
        self.owner = owner
        self.group = group
        self.other = other
        self.directory = directory

    def to_mode(self) -> int:
        mode = (self.owner << 6) | (self.group << 3) | self.other
        return mode | _stat.S_IFDIR if self.directory else mode

    @classmethod
    def from_mode(cls, mode: int) -> "Permissions":
        return cls(owner=(mode >> 6) & 7, group=(mode >> 3) & 7, other=mode & 7, directory=bool(mode & _stat.S_IFDIR))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Permissions) and self.to_mode() == other.to_mode()

    def __repr__(self) -> str:
        def fmt(p: int) -> str:
            return "".join(c if p & bit else "-" for bit, c in ((4, "r"), (2, "w"), (1, "x")))

        return ("d" if self.directory else "-") + fmt(self.owner) + fmt(self.group) + fmt(self.other)


class EntryKind(str, enum.Enum):
    DIRECTORY = "directory"
    FILE = "file"
    SYMLINK = "symlink"
    OTHER = "other"


class FileEntry:
    """One entry of ``ls``: ``path`` (absolute in the sandbox), ``permissions``, ``owner``,
    ``group``, ``size``, ``kind``."""

    def __init__(self, *, path: str, permissions: Permissions, owner: str, group: str, size: int,
                 kind: EntryKind = EntryKind.FILE) -> None:
        self.path = path
        self.permissions = permissions
        self.owner = owner
        self.group = group
        self.size = size
        self.kind = kind

    def is_dir(self) -> bool:
        return self.kind == EntryKind.DIRECTORY

    def __repr__(self) -> str:
        return "FileEntry(path=%r, kind=%s, size=%d, permissions=%r)" % (self.path, self.kind.value, self.size, self.permissions)
