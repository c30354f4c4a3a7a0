"""The SDK's sandbox errors, with its names, codes and messages."""
from __future__ import annotations

import enum
from typing import Any, Dict, Mapping, Optional, Sequence

from .types import ExecResult


class ErrorCode(str, enum.Enum):
    def __str__(self) -> str:
        return str(self.value)

    INVALID_MANIFEST_PATH = "invalid_manifest_path"
    EXEC_NONZERO = "exec_nonzero"
    EXEC_TIMEOUT = "exec_timeout"
    EXEC_TRANSPORT_ERROR = "exec_transport_error"
    WORKSPACE_READ_NOT_FOUND = "workspace_read_not_found"
    WORKSPACE_ARCHIVE_READ_ERROR = "workspace_archive_read_error"
    WORKSPACE_ARCHIVE_WRITE_ERROR = "workspace_archive_write_error"
    WORKSPACE_START_ERROR = "workspace_start_error"
    MOUNT_CONFIG_INVALID = "mount_config_invalid"
    SANDBOX_CONFIG_INVALID = "sandbox_config_invalid"
    PTY_SESSION_NOT_FOUND = "pty_session_not_found"
    LOCAL_FILE_READ_ERROR = "local_file_read_error"
    LOCAL_DIR_READ_ERROR = "local_dir_read_error"
    GIT_MISSING = "git_missing_in_image"
    GIT_CLONE_ERROR = "git_clone_error"
    GIT_SUBPATH_ERROR = "git_subpath_error"
    SNAPSHOT_PERSIST_ERROR = "snapshot_persist_error"
    SNAPSHOT_RESTORE_ERROR = "snapshot_restore_error"
    SNAPSHOT_NOT_RESTORABLE = "snapshot_not_restorable"


class SandboxError(Exception):
    """The SDK's structured error: ``message``, ``error_code``, ``op``, ``context``,
    ``cause``, ``retryable``."""

    def __init__(
        self,
        *,
        message: str,
        error_code: ErrorCode,
        op: str,
        context: Optional[Mapping[str, object]] = None,
        cause: Optional[BaseException] = None,
        retryable: Optional[bool] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.error_code = error_code
        self.op = op
        self.context: Dict[str, object] = dict(context or {})
        self.cause = cause
        self.retryable = retryable
        if cause is not None:
            self.__cause__ = cause

    @property
    def code(self) -> str:
        return str(self.error_code)

    def __str__(self) -> str:
        return self.message


class ConfigurationError(SandboxError):
    """User-provided configuration or input was refused (before any side effect)."""


class SandboxRuntimeError(SandboxError):
    """The sandbox or the way to it failed."""


class InvalidManifestPathError(ConfigurationError):
    """A manifest key or a file path was absolute where it may not be, or left the root."""

    def __init__(self, *, rel: Any, reason: str, context: Optional[Mapping[str, object]] = None,
                 cause: Optional[BaseException] = None) -> None:
        msg = ("manifest path must be relative: %s" % rel) if reason == "absolute" else (
            "manifest path must not escape root: %s" % rel)
        super().__init__(message=msg, error_code=ErrorCode.INVALID_MANIFEST_PATH, op="materialize",
                         context={"rel": str(rel), "reason": reason, **dict(context or {})}, cause=cause,
                         retryable=False)


class MountConfigError(ConfigurationError):
    def __init__(self, *, message: str, context: Optional[Mapping[str, object]] = None) -> None:
        super().__init__(message=message, error_code=ErrorCode.MOUNT_CONFIG_INVALID, op="start",
                         context=context, retryable=False)


class SandboxConfigError(ConfigurationError):
    def __init__(self, message: str, context: Optional[Mapping[str, object]] = None, op: str = "start") -> None:
        super().__init__(message=message, error_code=ErrorCode.SANDBOX_CONFIG_INVALID, op=op, context=context,
                         retryable=False)


class ExecFailureError(SandboxRuntimeError):
    def __init__(self, *, message: str, error_code: ErrorCode, command: Sequence[Any],
                 context: Optional[Mapping[str, object]] = None, cause: Optional[BaseException] = None,
                 retryable: Optional[bool] = None) -> None:
        cmd = tuple(str(c) for c in command)
        super().__init__(message=message, error_code=error_code, op="exec",
                         context={"command": cmd, "command_str": " ".join(cmd), **dict(context or {})},
                         cause=cause, retryable=retryable)
        self.command = cmd


class ExecNonZeroError(ExecFailureError):
    def __init__(self, exec_result: ExecResult, *, command: Sequence[Any],
                 context: Optional[Mapping[str, object]] = None, cause: Optional[BaseException] = None) -> None:
        out = exec_result.stdout.decode("utf-8", "replace")
        err = exec_result.stderr.decode("utf-8", "replace")
        if out and err:
            message = "stdout: %s\nstderr: %s" % (out, err)
        else:
            message = out or err or "command exited with code %d" % exec_result.exit_code
        super().__init__(message=message, error_code=ErrorCode.EXEC_NONZERO, command=command,
                         context={"exit_code": exec_result.exit_code, "stdout": out, "stderr": err,
                                  **dict(context or {})}, cause=cause, retryable=False)
        self.exit_code = exec_result.exit_code
        self.stdout = exec_result.stdout
        self.stderr = exec_result.stderr


class ExecTimeoutError(ExecFailureError):
    """The command ran past its timeout; its process group was killed."""

    def __init__(self, *, command: Sequence[Any], timeout_s: Optional[float],
                 context: Optional[Mapping[str, object]] = None, cause: Optional[BaseException] = None) -> None:
        super().__init__(message="command timed out", error_code=ErrorCode.EXEC_TIMEOUT, command=command,
                         context={"timeout_s": timeout_s, **dict(context or {})}, cause=cause, retryable=False)
        self.timeout_s = timeout_s


class ExecTransportError(ExecFailureError):
    def __init__(self, *, command: Sequence[Any], context: Optional[Mapping[str, object]] = None,
                 cause: Optional[BaseException] = None, message: Optional[str] = None,
                 retryable: Optional[bool] = None) -> None:
        super().__init__(message=message or "exec transport error", error_code=ErrorCode.EXEC_TRANSPORT_ERROR,
                         command=command, context=context, cause=cause, retryable=retryable)


class WorkspaceIOError(SandboxRuntimeError):
    pass


class WorkspaceReadNotFoundError(WorkspaceIOError):
    def __init__(self, *, path: Any, context: Optional[Mapping[str, object]] = None,
                 cause: Optional[BaseException] = None) -> None:
        super().__init__(message="file not found: %s" % path, error_code=ErrorCode.WORKSPACE_READ_NOT_FOUND,
                         op="read", context={"path": str(path), **dict(context or {})}, cause=cause, retryable=False)


class WorkspaceArchiveReadError(WorkspaceIOError):
    def __init__(self, *, path: Any, context: Optional[Mapping[str, object]] = None,
                 cause: Optional[BaseException] = None, retryable: Optional[bool] = None) -> None:
        super().__init__(message="failed to read archive for path: %s" % path,
                         error_code=ErrorCode.WORKSPACE_ARCHIVE_READ_ERROR, op="read",
                         context={"path": str(path), **dict(context or {})}, cause=cause, retryable=retryable)


class WorkspaceArchiveWriteError(WorkspaceIOError):
    def __init__(self, *, path: Any, context: Optional[Mapping[str, object]] = None,
                 cause: Optional[BaseException] = None, retryable: Optional[bool] = None) -> None:
        super().__init__(message="failed to write archive for path: %s" % path,
                         error_code=ErrorCode.WORKSPACE_ARCHIVE_WRITE_ERROR, op="write",
                         context={"path": str(path), **dict(context or {})}, cause=cause, retryable=retryable)


class PtySessionNotFoundError(SandboxRuntimeError):
    def __init__(self, *, session_id: Any, cause: Optional[BaseException] = None) -> None:
        super().__init__(message="PTY session not found: %s" % session_id, error_code=ErrorCode.PTY_SESSION_NOT_FOUND,
                         op="exec", context={"session_id": session_id}, cause=cause, retryable=False)


class WorkspaceStartError(SandboxRuntimeError):
    def __init__(self, *, message: str, context: Optional[Mapping[str, object]] = None,
                 cause: Optional[BaseException] = None) -> None:
        super().__init__(message=message, error_code=ErrorCode.WORKSPACE_START_ERROR, op="start",
                         context=context, cause=cause, retryable=False)


class SnapshotError(SandboxError):
    """A snapshot (snapshots.py) could not be persisted or restored."""


class SnapshotPersistError(SnapshotError):
    def __init__(self, *, snapshot_id: str, path: Any, context: Optional[Mapping[str, object]] = None,
                 cause: Optional[BaseException] = None) -> None:
        super().__init__(message="failed to persist snapshot", error_code=ErrorCode.SNAPSHOT_PERSIST_ERROR,
                         op="snapshot_persist", context={"snapshot_id": snapshot_id, "path": str(path), **dict(context or {})},
                         cause=cause)


class SnapshotRestoreError(SnapshotError):
    def __init__(self, *, snapshot_id: str, path: Any, context: Optional[Mapping[str, object]] = None,
                 cause: Optional[BaseException] = None) -> None:
        super().__init__(message="failed to restore snapshot", error_code=ErrorCode.SNAPSHOT_RESTORE_ERROR,
                         op="snapshot_restore", context={"snapshot_id": snapshot_id, "path": str(path), **dict(context or {})},
                         cause=cause)


class SnapshotNotRestorableError(SnapshotError):
    def __init__(self, *, snapshot_id: str, path: Any, context: Optional[Mapping[str, object]] = None) -> None:
        super().__init__(message="snapshot is not restorable", error_code=ErrorCode.SNAPSHOT_NOT_RESTORABLE,
                         op="snapshot_restore", context={"snapshot_id": snapshot_id, "path": str(path), **dict(context or {})},
                         retryable=False)


class ArtifactError(SandboxError):
    """A manifest's host source (local_file, local_dir, git_repo) could not be read.
    Raised before the sandbox is made."""

    def __init__(self, *, message: str, error_code: ErrorCode, context: Optional[Mapping[str, object]] = None,
                 cause: Optional[BaseException] = None) -> None:
        super().__init__(message=message, error_code=error_code, op="materialize", context=context, cause=cause,
                         retryable=False)


class LocalFileReadError(ArtifactError):
    def __init__(self, *, src: Any, reason: str, message: str, cause: Optional[BaseException] = None) -> None:
        super().__init__(message=message, error_code=ErrorCode.LOCAL_FILE_READ_ERROR,
                         context={"src": str(src), "reason": reason}, cause=cause)
        self.reason = reason


class LocalDirReadError(ArtifactError):
    def __init__(self, *, src: Any, reason: str, message: str, cause: Optional[BaseException] = None) -> None:
        super().__init__(message=message, error_code=ErrorCode.LOCAL_DIR_READ_ERROR,
                         context={"src": str(src), "reason": reason}, cause=cause)
        self.reason = reason


class GitMissingInImageError(ArtifactError):
    def __init__(self, *, cause: Optional[BaseException] = None) -> None:
        super().__init__(message="git is required for git_repo entries and was not found",
                         error_code=ErrorCode.GIT_MISSING, context={}, cause=cause)


class GitCloneError(ArtifactError):
    def __init__(self, *, url: str, ref: Optional[str], stderr: str = "") -> None:
        super().__init__(message="git clone failed for %s@%s" % (url, ref or "HEAD"), error_code=ErrorCode.GIT_CLONE_ERROR,
                         context={"url": url, "ref": ref, "stderr": stderr[-2000:]})


class GitSubpathError(ArtifactError):
    def __init__(self, *, url: str, subpath: str) -> None:
        super().__init__(message="git_repo subpath %s is not in %s" % (subpath, url), error_code=ErrorCode.GIT_SUBPATH_ERROR,
                         context={"url": url, "subpath": subpath})
