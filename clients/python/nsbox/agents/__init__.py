"""nsbox as a sandbox backend in the shape of the OpenAI Agents SDK (``agents.sandbox``).

The SDK itself is not imported: this module mirrors the method names and result shapes of
its ``BaseSandboxClient`` and ``BaseSandboxSession`` so that code written against them (or
a thin adapter registering :class:`NsboxSandboxClient` with the SDK) runs on nsbox.

>>> client = NsboxSandboxClient()
>>> manifest = Manifest(entries={"notes/todo.md": File(content=b"# todo\\n")},
...                     environment={"MODE": "test"})
>>> session = await client.create(manifest=manifest)
>>> async with session:
...     r = await session.exec("cat notes/todo.md; echo $MODE")
...     await session.write("out/report.txt", io.BytesIO(b"done"))
>>> await client.delete(session)

What differs from the SDK's own backends (docs/embedding.md has the whole mapping):

- the manifest's ``root`` is the sandbox's workspace root as written (``/workspace``, the
  SDK's default, works; a Manifest that names none has ``/home/user``, the sandbox's home);
- ``file`` and ``dir`` entries are materialised by the server when the sandbox is created;
  mounts (S3, R2, GCS, Azure Blob) are served from the host, so credentials never enter the
  sandbox: the SDK's credential-exposure acknowledgements are accepted and ignored;
- ``shutdown()`` leaves the sandbox running (``resume(state)`` reattaches to it);
  ``client.delete(session)`` removes it;
- snapshots are workspace archives (snapshots.py): ``LocalSnapshotSpec`` and
  ``RemoteSnapshotSpec`` persist the root's tar at ``stop()``, and ``resume`` of a gone
  sandbox puts it into a new one;
- one user (``user``); PTYs as the server has them (``supports_pty()`` asks it).
"""
from .client import NsboxSandboxClient
from .entries import Dir, EnvEntry, File, SandboxPathGrant
from .errors import (
    ConfigurationError,
    ErrorCode,
    ExecFailureError,
    ExecNonZeroError,
    ExecTimeoutError,
    ExecTransportError,
    InvalidManifestPathError,
    MountConfigError,
    PtySessionNotFoundError,
    SandboxConfigError,
    SandboxError,
    SandboxRuntimeError,
    WorkspaceArchiveReadError,
    WorkspaceArchiveWriteError,
    WorkspaceIOError,
    WorkspaceReadNotFoundError,
    WorkspaceStartError,
)
from .entries import GitRepo, LocalDir, LocalFile
from .errors import (ArtifactError, GitCloneError, GitMissingInImageError, GitSubpathError, LocalDirReadError,
                     LocalFileReadError, SnapshotError, SnapshotNotRestorableError, SnapshotPersistError,
                     SnapshotRestoreError)
from .manifest import Manifest
from .mounts import AzureBlobMount, GCSMount, R2Mount, S3Mount
from .session import NsboxSandboxSession
from .snapshots import LocalSnapshotSpec, NoopSnapshotSpec, NsboxSnapshotSpec, RemoteSnapshotSpec
from .state import NsboxSandboxClientOptions, NsboxSandboxSessionState
from .types import WORKSPACE_ROOT, EntryKind, ExecResult, ExposedPortEndpoint, FileEntry, Permissions, PtyExecUpdate

__all__ = [
    "WORKSPACE_ROOT",
    "ExposedPortEndpoint",
    "NsboxSandboxClient",
    "NsboxSandboxClientOptions",
    "NsboxSandboxSession",
    "NsboxSandboxSessionState",
    "Manifest",
    "File",
    "Dir",
    "LocalFile",
    "LocalDir",
    "GitRepo",
    "ArtifactError",
    "LocalFileReadError",
    "LocalDirReadError",
    "GitMissingInImageError",
    "GitCloneError",
    "GitSubpathError",
    "SandboxPathGrant",
    "S3Mount",
    "GCSMount",
    "R2Mount",
    "AzureBlobMount",
    "EnvEntry",
    "ExecResult",
    "PtyExecUpdate",
    "NoopSnapshotSpec",
    "LocalSnapshotSpec",
    "RemoteSnapshotSpec",
    "NsboxSnapshotSpec",
    "SnapshotError",
    "SnapshotPersistError",
    "SnapshotRestoreError",
    "SnapshotNotRestorableError",
    "PtySessionNotFoundError",
    "FileEntry",
    "EntryKind",
    "Permissions",
    "ErrorCode",
    "SandboxError",
    "ConfigurationError",
    "SandboxRuntimeError",
    "InvalidManifestPathError",
    "MountConfigError",
    "SandboxConfigError",
    "ExecFailureError",
    "ExecNonZeroError",
    "ExecTimeoutError",
    "ExecTransportError",
    "WorkspaceIOError",
    "WorkspaceReadNotFoundError",
    "WorkspaceArchiveReadError",
    "WorkspaceArchiveWriteError",
    "WorkspaceStartError",
]

# Names the SDK's users reach for.
SandboxSessionState = NsboxSandboxSessionState
ExecTimeout = ExecTimeoutError
