"""What the server's documents become in Python: plain objects with the API's field names
and the whole document in ``.raw`` (v1 documents grow; a field this client does not know
yet is still there)."""
from __future__ import annotations

import base64
import datetime as _dt
from typing import Any, Dict, Iterator, List, Optional

__all__ = [
    "CellError",
    "Execution",
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
    "PtyOutput",
    "parse_time",
]


def _text(doc: Dict[str, Any], name: str) -> str:
    """The ``name`` / ``name_b64`` pair as text (bytes that are not UTF-8 replaced)."""
    v = doc.get(name)
    if isinstance(v, str):
        return v
    b = doc.get(name + "_b64")
    if isinstance(b, str):
        return base64.b64decode(b).decode("utf-8", "replace")
    return ""


def _bytes(doc: Dict[str, Any], name: str) -> bytes:
    """The ``name`` / ``name_b64`` pair as the exact bytes."""
    b = doc.get(name + "_b64")
    if isinstance(b, str):
        return base64.b64decode(b)
    v = doc.get(name)
    if isinstance(v, str):
        return v.encode("utf-8")
    return b""


def _int(doc: Dict[str, Any], name: str, default: int = 0) -> int:
    v = doc.get(name)
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def _opt_str(doc: Dict[str, Any], name: str) -> Optional[str]:
    v = doc.get(name)
    return v if isinstance(v, str) else None


def parse_time(value: Optional[str]) -> Optional[_dt.datetime]:
    """An RFC 3339 UTC time of the API (``2026-11-29T21:47:46Z``) as an aware datetime."""
    if not value:
        return None
    try:
        return _dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.timezone.utc)
    except ValueError:
        return None


class _Record:
    raw: Dict[str, Any]

    def __repr__(self) -> str:
        fields = ", ".join("%s=%r" % (k, getattr(self, k)) for k in self._repr_fields())
        return "%s(%s)" % (type(self).__name__, fields)

    def _repr_fields(self) -> List[str]:
        return []

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.raw.get(key, default)


class CellError(_Record):
    """The exception a cell raised: ``name`` (``ZeroDivisionError``), ``value``, ``traceback``."""

    def __init__(self, doc: Dict[str, Any]) -> None:
        self.raw = doc
        self.name: str = _opt_str(doc, "ename") or ""
        self.value: str = _opt_str(doc, "evalue") or ""
        tb = doc.get("traceback")
        if isinstance(tb, list):
            tb = "\n".join(str(x) for x in tb)
        self.traceback: str = tb if isinstance(tb, str) else ""

    def _repr_fields(self) -> List[str]:
        return ["name", "value"]

    def __str__(self) -> str:
        return "%s: %s" % (self.name, self.value)


class Execution(_Record):
    """The result of a cell (``nsbox exec --json``).

    ``status`` is ``ok``, ``error`` (then ``error`` is a :class:`CellError`), ``timeout``,
    ``interrupted`` or ``killed`` (``reason``: oom, crash, seccomp, restart, protocol);
    ``results`` is the text of the last expression (or of ``output``), ``None`` when
    there was none; ``stdout``/``stderr`` the first ``output_limit`` bytes as text, the
    whole kept in ``stdout_file_path``/``stderr_file_path`` (under /mnt/files) when cut.
    """

    def __init__(self, doc: Dict[str, Any]) -> None:
        doc = {k: v for k, v in doc.items() if k != "type"}
        self.raw = doc
        self.cell: Optional[int] = doc.get("cell") if isinstance(doc.get("cell"), int) else None
        self.status: str = _opt_str(doc, "status") or "ok"
        self.reason: Optional[str] = _opt_str(doc, "reason")
        self.message: Optional[str] = _opt_str(doc, "message")
        results = doc.get("results")
        self.results: Optional[str] = results if isinstance(results, str) else (None if results is None else str(results))
        err = doc.get("error")
        self.error: Optional[CellError] = CellError(err) if isinstance(err, dict) else None
        display = doc.get("display")
        self.display: List[Dict[str, Any]] = list(display) if isinstance(display, list) else []
        self.execution_count: Optional[int] = doc.get("execution_count") if isinstance(doc.get("execution_count"), int) else None
        self.duration_ms: int = _int(doc, "duration_ms")
        self.state_lost: bool = bool(doc.get("state_lost", False))
        self.stdout: str = _text(doc, "stdout")
        self.stderr: str = _text(doc, "stderr")
        self.stdout_bytes: int = _int(doc, "stdout_bytes")
        self.stderr_bytes: int = _int(doc, "stderr_bytes")
        self.stdout_lines: int = _int(doc, "stdout_lines")
        self.stderr_lines: int = _int(doc, "stderr_lines")
        self.stdout_truncated: bool = bool(doc.get("stdout_truncated", False))
        self.stderr_truncated: bool = bool(doc.get("stderr_truncated", False))
        self.results_file_path: Optional[str] = _opt_str(doc, "results_file_path")
        self.stdout_file_path: Optional[str] = _opt_str(doc, "stdout_file_path")
        self.stderr_file_path: Optional[str] = _opt_str(doc, "stderr_file_path")

    @property
    def text(self) -> Optional[str]:
        """The result's text (E2B's ``execution.text``)."""
        return self.results

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def _repr_fields(self) -> List[str]:
        return ["cell", "status", "results", "error", "state_lost"]


class CommandResult(_Record):
    """The result of a command (``nsbox sh --json``): ``exit_code`` and the output as
    bytes (the first MiB of each stream; the whole in ``stdout_file_path`` when cut).

    ``status`` is ``ok``; ``error`` (``reason`` exit, not_found 127, not_executable 126);
    ``timeout`` (deadline, 124); ``killed`` (oom, seccomp, signal: then ``signal``).
    """

    def __init__(self, doc: Dict[str, Any]) -> None:
        doc = {k: v for k, v in doc.items() if k != "type"}
        self.raw = doc
        self.status: str = _opt_str(doc, "status") or "ok"
        self.reason: Optional[str] = _opt_str(doc, "reason")
        self.message: Optional[str] = _opt_str(doc, "message")
        code = doc.get("exit_code")
        self.exit_code: int = code if isinstance(code, int) and not isinstance(code, bool) else -1
        sig = doc.get("signal")
        self.signal: Optional[Any] = sig
        self.duration_ms: int = _int(doc, "duration_ms")
        self.stdout: bytes = _bytes(doc, "stdout")
        self.stderr: bytes = _bytes(doc, "stderr")
        self.stdout_bytes: int = _int(doc, "stdout_bytes", len(self.stdout))
        self.stderr_bytes: int = _int(doc, "stderr_bytes", len(self.stderr))
        self.stdout_lines: int = _int(doc, "stdout_lines")
        self.stderr_lines: int = _int(doc, "stderr_lines")
        self.stdout_truncated: bool = bool(doc.get("stdout_truncated", False))
        self.stderr_truncated: bool = bool(doc.get("stderr_truncated", False))
        self.stdout_file_path: Optional[str] = _opt_str(doc, "stdout_file_path")
        self.stderr_file_path: Optional[str] = _opt_str(doc, "stderr_file_path")

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.exit_code == 0

    @property
    def timed_out(self) -> bool:
        return self.status == "timeout"

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")

    def _repr_fields(self) -> List[str]:
        return ["exit_code", "status", "stdout", "stderr"]


class UploadRecord(_Record):
    """What an upload made: ``sandbox_mount_prefix`` (``/mnt/files``),
    ``mount_relative_path`` (``data/sales.csv``), ``size``, ``sha256`` (the hosted
    API's fields); ``path`` is the file's path inside the sandbox."""

    def __init__(self, doc: Dict[str, Any]) -> None:
        self.raw = doc
        self.sandbox_mount_prefix: str = _opt_str(doc, "sandbox_mount_prefix") or "/mnt/files"
        self.mount_relative_path: str = _opt_str(doc, "mount_relative_path") or ""
        self.size: int = _int(doc, "size")
        self.sha256: str = _opt_str(doc, "sha256") or ""
        self.path: str = _opt_str(doc, "path") or (self.sandbox_mount_prefix.rstrip("/") + "/" + self.mount_relative_path)

    def _repr_fields(self) -> List[str]:
        return ["path", "size", "sha256"]


class FileEntry(_Record):
    """One entry of a ``/mnt/files`` listing; ``path`` is its path in the sandbox."""

    def __init__(self, doc: Dict[str, Any], directory: str) -> None:
        self.raw = doc
        self.name: str = _text(doc, "name")
        self.name_bytes: bytes = _bytes(doc, "name")
        self.type: str = _opt_str(doc, "type") or "other"
        self.size: int = _int(doc, "size")
        self.allocated_bytes: int = _int(doc, "allocated_bytes")
        self.mtime: int = _int(doc, "mtime")
        self.path: str = directory.rstrip("/") + "/" + self.name

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"

    def _repr_fields(self) -> List[str]:
        return ["name", "type", "size"]


class FilePage(_Record):
    """A page of a ``/mnt/files`` listing: iterate it for its entries; ``next_cursor``
    continues (``None`` on the last page)."""

    def __init__(self, doc: Dict[str, Any], directory: str) -> None:
        self.raw = doc
        self.path: str = _opt_str(doc, "path") or directory
        entries = doc.get("entries")
        self.entries: List[FileEntry] = [FileEntry(e, self.path) for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
        self.next_cursor: Optional[str] = _opt_str(doc, "next_cursor")

    def __iter__(self) -> Iterator[FileEntry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def _repr_fields(self) -> List[str]:
        return ["path", "entries", "next_cursor"]


def _mode(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value, 8)
        except ValueError:
            return 0
    return 0


class FsEntry(_Record):
    """One entry of an ``fs`` listing, as seen inside the sandbox: ``mode`` (an int,
    ``0o644``), ``owner``/``group`` (``user``, or ``nobody``), ``target`` of a symlink."""

    def __init__(self, doc: Dict[str, Any], directory: str) -> None:
        self.raw = doc
        self.name: str = _text(doc, "name")
        self.type: str = _opt_str(doc, "type") or "other"
        self.size: int = _int(doc, "size")
        self.mode: int = _mode(doc.get("mode"))
        self.owner: Optional[str] = _opt_str(doc, "owner")
        self.group: Optional[str] = _opt_str(doc, "group")
        self.mtime: int = _int(doc, "mtime")
        self.target: Optional[str] = _opt_str(doc, "target")
        self.path: str = ("" if directory == "/" else directory.rstrip("/")) + "/" + self.name

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"

    def _repr_fields(self) -> List[str]:
        return ["name", "type", "size", "mode"]


class FsPage(_Record):
    """A page of an ``fs`` listing (iterable; ``next_cursor`` continues)."""

    def __init__(self, doc: Dict[str, Any], directory: str) -> None:
        self.raw = doc
        self.path: str = _opt_str(doc, "path") or directory
        entries = doc.get("entries")
        self.entries: List[FsEntry] = [FsEntry(e, self.path) for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
        self.next_cursor: Optional[str] = _opt_str(doc, "next_cursor")

    def __iter__(self) -> Iterator[FsEntry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def _repr_fields(self) -> List[str]:
        return ["path", "entries", "next_cursor"]


class FsStat(_Record):
    """What ``fs.stat`` says of a path (not following a last symlink)."""

    def __init__(self, doc: Dict[str, Any]) -> None:
        self.raw = doc
        self.path: str = _opt_str(doc, "path") or ""
        self.type: str = _opt_str(doc, "type") or "other"
        self.size: int = _int(doc, "size")
        self.mode: int = _mode(doc.get("mode"))
        self.mtime: int = _int(doc, "mtime")

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"

    @property
    def is_file(self) -> bool:
        return self.type == "file"

    def _repr_fields(self) -> List[str]:
        return ["path", "type", "size", "mode"]


class FsWrite(_Record):
    """What ``fs.write`` made: ``path`` (absolute in the sandbox), ``size``, ``sha256``
    (the client's own when the server does not send it)."""

    def __init__(self, doc: Dict[str, Any], sha256: Optional[str] = None) -> None:
        self.raw = doc
        self.path: str = _opt_str(doc, "path") or ""
        self.size: int = _int(doc, "size")
        self.sha256: Optional[str] = _opt_str(doc, "sha256") or sha256

    def _repr_fields(self) -> List[str]:
        return ["path", "size", "sha256"]


class SandboxInfo(_Record):
    """A sandbox as ``nsbox inspect --json`` describes it."""

    def __init__(self, doc: Dict[str, Any]) -> None:
        self.raw = doc
        self.id: str = _opt_str(doc, "id") or ""
        self.name: str = _opt_str(doc, "name") or ""
        self.size: str = _opt_str(doc, "size") or ""
        net = doc.get("net")
        # "none", "host", or "allow" with its list (docs/network.md).
        self.net: str = "allow" if isinstance(net, dict) else (net if isinstance(net, str) else "")
        allow = net.get("allow") if isinstance(net, dict) else None
        self.allowlist: List[str] = [str(x) for x in allow] if isinstance(allow, list) else []
        private = net.get("allow_private") if isinstance(net, dict) else None
        self.allow_private: List[str] = [str(x) for x in private] if isinstance(private, list) else []
        denials = doc.get("net_denials")
        self.net_denials: List[Dict[str, Any]] = [d for d in denials if isinstance(d, dict)] if isinstance(denials, list) else []
        self.status: str = _opt_str(doc, "status") or ""
        self.created_at: str = _opt_str(doc, "created_at") or ""
        env_names = doc.get("env_names")
        self.env_names: List[str] = [str(x) for x in env_names] if isinstance(env_names, list) else []
        self.volume: str = _opt_str(doc, "volume") or ""
        limits = doc.get("limits")
        self.limits: Dict[str, Any] = dict(limits) if isinstance(limits, dict) else {}
        mounts = doc.get("mounts")
        self.mounts: List[Any] = list(mounts) if isinstance(mounts, list) else []
        self.memory_usage_bytes: Optional[int] = doc.get("memory_usage_bytes") if isinstance(doc.get("memory_usage_bytes"), int) else None
        self.warning: Optional[str] = _opt_str(doc, "warning")

    @property
    def running(self) -> bool:
        return self.status == "running"

    def _repr_fields(self) -> List[str]:
        return ["id", "name", "size", "status"]


class SnapshotInfo(_Record):
    """A snapshot of a sandbox's workspace (``nsbox snapshot ls --json``): its id, name, the
    sandbox it was taken of, what it holds, its fingerprint and a secret-free ``spec``."""

    def __init__(self, doc: Dict[str, Any]) -> None:
        self.raw = doc
        self.id: str = _opt_str(doc, "id") or ""
        self.name: str = _opt_str(doc, "name") or ""
        self.sandbox: str = _opt_str(doc, "sandbox") or ""
        self.created_at: str = _opt_str(doc, "created_at") or ""
        self.include_files: bool = doc.get("include_files") is True
        self.members: int = _int(doc, "members")
        self.bytes: int = _int(doc, "bytes")
        self.fingerprint: str = _opt_str(doc, "fingerprint") or ""
        left_out = doc.get("left_out")
        self.left_out: List[str] = [str(x) for x in left_out] if isinstance(left_out, list) else []
        spec = doc.get("spec")
        self.spec: Dict[str, Any] = dict(spec) if isinstance(spec, dict) else {}

    def _repr_fields(self) -> List[str]:
        return ["id", "name", "sandbox", "members"]


class PtyOutput(_Record):
    """What a PTY session printed since the last answer: ``data`` (bytes), ``output``
    (text; bytes that are not UTF-8 replaced), ``exit_code`` (None while it runs),
    ``dropped`` (bytes lost to the 1 MiB bound on unread output)."""

    def __init__(self, doc: Dict[str, Any]) -> None:
        self.raw = doc
        self.session_id: int = _int(doc, "session_id")
        self.data: bytes = _bytes(doc, "output")
        self.output: str = self.data.decode("utf-8", "replace")
        code = doc.get("exit_code")
        self.exit_code: Optional[int] = code if isinstance(code, int) and not isinstance(code, bool) else None
        self.dropped: int = _int(doc, "dropped")

    @property
    def running(self) -> bool:
        return self.exit_code is None

    def _repr_fields(self) -> List[str]:
        return ["session_id", "exit_code", "output"]


class SessionInfo(_Record):
    """A Composio-shaped session: ``session_id``, ``user_id``, whether its sandbox is
    enabled, its size, and ``sandbox_id`` once the sandbox was made."""

    def __init__(self, doc: Dict[str, Any]) -> None:
        self.raw = doc
        self.session_id: str = _opt_str(doc, "session_id") or ""
        self.user_id: str = _opt_str(doc, "user_id") or ""
        sandbox = doc.get("sandbox") if isinstance(doc.get("sandbox"), dict) else doc.get("workbench")
        sandbox = sandbox if isinstance(sandbox, dict) else {}
        self.sandbox_enabled: bool = bool(sandbox.get("enable", True))
        self.sandbox_size: str = _opt_str(sandbox, "sandbox_size") or "standard"
        # docs/api.md puts sandbox_id inside "sandbox"; accept it at the top level too.
        self.sandbox_id: Optional[str] = _opt_str(sandbox, "sandbox_id") or _opt_str(doc, "sandbox_id")
        self.created_at: Optional[str] = _opt_str(doc, "created_at")

    def _repr_fields(self) -> List[str]:
        return ["session_id", "user_id", "sandbox_enabled", "sandbox_size", "sandbox_id"]
