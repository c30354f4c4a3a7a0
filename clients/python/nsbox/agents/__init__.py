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

- the workspace root is ``/home/user`` (the sandbox's home); any other ``root`` is refused;
- ``file`` and ``dir`` entries are materialised by the server when the sandbox is created;
  mounts (S3, R2, GCS, Azure Blob) are served from the host, so credentials never enter the
  sandbox: the SDK's credential-exposure acknowledgements are accepted and ignored;
- ``shutdown()`` leaves the sandbox running (``resume(state)`` reattaches to it);
  ``client.delete(session)`` removes it;
- one user (``user``), no PTY yet (``supports_pty()`` asks the server), no snapshots yet.
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
                     LocalFileReadError)
from .manifest import Manifest
from .mounts import AzureBlobMount, GCSMount, R2Mount, S3Mount
from .session import NsboxSandboxSession
from .snapshots import NoopSnapshotSpec, NsboxSnapshotSpec
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
    "NsboxSnapshotSpec",
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
