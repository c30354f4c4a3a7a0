"""Snapshot specs of the SDK's shape, kept as nsbox's workspace archives (``GET``/``PUT
/v1/sandboxes/{id}/workspace.tar``, docs/api.md "Workspace archives"): ``stop()`` persists
the workspace root as one tar (members relative to the root, links kept as links, bucket
mounts and ephemeral entries left out by the server), and ``resume(state)`` of a sandbox
that is gone puts it into a new one.

- :class:`LocalSnapshotSpec` ``(base_path)``: ``<base_path>/<id>.tar`` on this machine;
- :class:`RemoteSnapshotSpec` ``(client_dependency_key)``: the tar through the object
  bound to that key in the client's ``dependencies``;
- :class:`NoopSnapshotSpec`, or none: nothing.

The snapshot's ``id`` is the session's, so each persist replaces the last. A state's
``snapshot`` document names the spec (``{"type", "id", "base_path" | "client_dependency_key"}``);
one of ``{"type": "nsbox", "id": "snp-..."}`` (a server snapshot, what nsbox.agents made
before) is still restored by ``resume`` (client.py).
"""
from __future__ import annotations

import errno
import inspect
import os
import re
import stat
import tempfile
from typing import Any, Awaitable, Callable, Dict, Mapping, Optional, Union

from .errors import (SandboxConfigError, SnapshotError, SnapshotNotRestorableError, SnapshotPersistError,
                     SnapshotRestoreError)
from .types import _run

# A local snapshot's id names its file: one path segment, never `.` or `..`.
_SNAPSHOT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")


class NoopSnapshotSpec:
    """Nothing is persisted (the SDK's default for a direct ``client.create()``)."""

    type = "noop"


class LocalSnapshotSpec:
    """The workspace archive as ``<base_path>/<id>.tar`` on this machine (the SDK's
    LocalSnapshotSpec): mode 0600, a directory made for it 0700, written whole or not at
    all (beside it, then renamed in). A relative ``base_path`` is taken from the working
    directory at ``create``."""

    type = "local"

    def __init__(self, base_path: Union[str, "os.PathLike[str]"]) -> None:
        self.base_path = base_path


class RemoteSnapshotSpec:
    """The workspace archive through the object bound to ``client_dependency_key`` in the
    client's ``dependencies`` (the SDK's RemoteSnapshotSpec): ``upload(id, stream)``,
    ``download(id)`` (a binary stream or bytes), ``exists(id)`` and, optionally,
    ``delete(id)``; each plain or async."""

    type = "remote"

    def __init__(self, client_dependency_key: str) -> None:
        self.client_dependency_key = client_dependency_key


class NsboxSnapshotSpec:
    """Server snapshots: refused by ``create`` since nsbox.agents persists workspace
    archives (give :class:`LocalSnapshotSpec` or :class:`RemoteSnapshotSpec`); kept so that
    code naming it fails with that message rather than an ImportError."""

    type = "nsbox"

    def __init__(self, include_files: bool = False) -> None:
        self.include_files = include_files


def _field(spec: Any, name: str) -> Any:
    return spec.get(name) if isinstance(spec, Mapping) else getattr(spec, name, None)


def snapshot_state(spec: Any, session_id: str) -> Dict[str, Any]:
    """The state's ``snapshot`` document for a spec given to ``create`` (this module's, the
    SDK's, or their dict form); the snapshot's id is the spec's own, else the session's."""
    kind = None if spec is None else _field(spec, "type")
    if kind in (None, "noop"):
        return {"type": "noop"}
    snapshot_id = str(_field(spec, "id") or session_id)
    if kind == "local":
        base = _field(spec, "base_path")
        if not base:
            raise SandboxConfigError("a local snapshot spec needs its base_path")
        doc = {"type": "local", "id": snapshot_id, "base_path": os.path.abspath(os.fspath(base))}
        if _local_path(doc) is None:
            raise SandboxConfigError("a local snapshot's id is one path segment of letters, digits, - and _, not %r"
                                     % snapshot_id)
        return doc
    if kind == "remote":
        key = _field(spec, "client_dependency_key")
        if not isinstance(key, str) or not key:
            raise SandboxConfigError("a remote snapshot spec needs its client_dependency_key")
        return {"type": "remote", "id": snapshot_id, "client_dependency_key": key}
    if kind == "nsbox":
        raise SandboxConfigError("NsboxSnapshotSpec (server snapshots) is no longer how nsbox.agents persists a "
                                 "workspace: give LocalSnapshotSpec(base_path) or RemoteSnapshotSpec(client_dependency_key), "
                                 "which keep its workspace archive (docs/agents-sdk.md, Python)")
    raise SandboxConfigError("snapshot spec %r is not one nsbox persists (noop, local and remote are)" % (kind,))


def persists(doc: Mapping[str, Any]) -> bool:
    return doc.get("type") in ("local", "remote")


def server_snapshot(doc: Mapping[str, Any]) -> Optional[str]:
    """The server snapshot a state from before workspace archives names, if any."""
    if doc.get("type") == "nsbox" and isinstance(doc.get("id"), str) and doc["id"]:
        return str(doc["id"])
    return None


def _local_path(doc: Mapping[str, Any]) -> Optional[str]:
    """``<base_path>/<id>.tar``; None when the document's id or base_path is not one this
    module writes (a state is read back: its id never climbs out of its directory)."""
    snapshot_id, base = doc.get("id"), doc.get("base_path")
    if not isinstance(snapshot_id, str) or not _SNAPSHOT_ID.match(snapshot_id):
        return None
    if not isinstance(base, str) or not base.startswith("/"):
        return None
    return os.path.join(base, snapshot_id + ".tar")


async def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """A remote client's method, plain (in a worker thread) or async."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args)
    result = await _run(fn, *args)
    return await result if inspect.isawaitable(result) else result


async def remote_client(dependencies: Any, key: str) -> Any:
    """The object bound to ``key``: ``dependencies`` is a mapping, or the SDK's Dependencies."""
    require = getattr(dependencies, "require", None)
    if callable(require):
        return await require(key, consumer="RemoteSnapshot")
    if isinstance(dependencies, Mapping) and dependencies.get(key) is not None:
        return dependencies[key]
    raise SandboxConfigError("no remote snapshot client is bound to %r: NsboxSandboxClient(dependencies={%r: client})"
                             % (key, key))


async def persist(doc: Mapping[str, Any], save: Callable[[Any], Awaitable[Any]], dependencies: Any) -> None:
    """Persists the workspace through the state's spec; ``save(dest)`` streams the archive
    into a local path or a binary file."""
    snapshot_id = str(doc.get("id"))
    if doc.get("type") == "local":
        path = _local_path(doc)
        if path is None:
            raise SnapshotPersistError(snapshot_id=snapshot_id, path=doc.get("base_path"),
                                       context={"reason": "not a local snapshot of nsbox.agents'"})
        try:
            await _run(os.makedirs, os.path.dirname(path), 0o700, True)
            await save(path)
        except OSError as e:
            raise SnapshotPersistError(snapshot_id=snapshot_id, path=path, cause=e) from e
        return
    key = str(doc.get("client_dependency_key"))
    client = await remote_client(dependencies, key)
    with tempfile.TemporaryFile() as archive:
        await save(archive)
        archive.seek(0)
        try:
            await _call(client.upload, snapshot_id, archive)
        except Exception as e:
            raise SnapshotPersistError(snapshot_id=snapshot_id, path="<remote:%s>" % key, cause=e) from e


async def restore(doc: Mapping[str, Any], dependencies: Any) -> Any:
    """The archive of the state's snapshot, for ``replace_workspace``: a local one's file,
    open (read only as ``<base_path>/<id>.tar``, without following a link; the caller
    closes it), or what a remote client's ``download`` gave. SnapshotNotRestorableError
    when it is not there."""
    snapshot_id = str(doc.get("id") or "")
    kind = doc.get("type")
    if kind == "local":
        path = _local_path(doc)
        if path is None:
            raise SnapshotNotRestorableError(snapshot_id=snapshot_id, path=doc.get("base_path"),
                                             context={"reason": "not a local snapshot of nsbox.agents'"})
        try:
            # O_NONBLOCK: a FIFO put there is refused below, not waited on.
            fd = await _run(os.open, path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                raise SnapshotNotRestorableError(snapshot_id=snapshot_id, path=path,
                                                 context={"reason": e.strerror}) from e
            raise SnapshotRestoreError(snapshot_id=snapshot_id, path=path, cause=e) from e
        archive = os.fdopen(fd, "rb")
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            archive.close()
            raise SnapshotNotRestorableError(snapshot_id=snapshot_id, path=path, context={"reason": "not a regular file"})
        return archive
    if kind == "remote":
        key = str(doc.get("client_dependency_key"))
        client = await remote_client(dependencies, key)
        where = "<remote:%s>" % key
        try:
            exists = getattr(client, "exists", None)
            if exists is not None and not await _call(exists, snapshot_id):
                raise SnapshotNotRestorableError(snapshot_id=snapshot_id, path=where, context={"reason": "not in the store"})
            return await _call(client.download, snapshot_id)
        except SnapshotError:
            raise
        except Exception as e:
            raise SnapshotRestoreError(snapshot_id=snapshot_id, path=where, cause=e) from e
    if kind == "nsbox":
        raise SnapshotNotRestorableError(snapshot_id=snapshot_id, path="<nsbox server>",
                                         context={"reason": "a server snapshot: resume() of a gone sandbox restores it"})
    raise SnapshotNotRestorableError(snapshot_id=snapshot_id, path="<noop>")
