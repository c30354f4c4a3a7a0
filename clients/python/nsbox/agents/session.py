"""The SDK's sandbox session on an nsbox sandbox: life cycle, exec, file calls with its path rules."""
from __future__ import annotations

import asyncio
import io
import os
import posixpath
import stat as _stat
import tempfile
from pathlib import PurePosixPath
from typing import Any, BinaryIO, Callable, List, Mapping, Optional, Union

from ..errors import AlreadyExists, NotFound, NsboxError, PermissionDenied
from ..sandbox import Sandbox
from .entries import SandboxPathGrant
from .errors import (
    ExecNonZeroError,
    ExecTimeoutError,
    ExecTransportError,
    InvalidManifestPathError,
    PtySessionNotFoundError,
    SandboxConfigError,
    WorkspaceArchiveReadError,
    WorkspaceArchiveWriteError,
    WorkspaceIOError,
    WorkspaceReadNotFoundError,
    WorkspaceStartError,
)
from .manifest import _DRIVE
from .snapshots import persist, persists, restore
from .state import NsboxSandboxSessionState
from .types import _SANDBOX_USER, EntryKind, ExecResult, ExposedPortEndpoint, FileEntry, Permissions, PtyExecUpdate, _run


# --------------------------------------------------------------------------------------
# The session.


def _as_bytes(data: Any) -> bytes:
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if isinstance(data, str):
        return data.encode("utf-8")
    if hasattr(data, "read"):
        chunks = []
        while True:
            block = data.read(1 << 20)
            if not block:
                break
            chunks.append(block.encode("utf-8") if isinstance(block, str) else bytes(block))
        return b"".join(chunks)
    raise TypeError("write takes a binary stream, bytes or str, not %s" % type(data).__name__)


def _kind(t: str) -> EntryKind:
    return {"dir": EntryKind.DIRECTORY, "file": EntryKind.FILE, "symlink": EntryKind.SYMLINK}.get(t, EntryKind.OTHER)


def _lexical(path: PurePosixPath) -> PurePosixPath:
    """``..`` and ``.`` taken out lexically (``/a/../..`` is ``/``)."""
    parts: List[str] = []
    for part in path.parts[1:]:
        if part == "..":
            if parts:
                parts.pop()
        elif part not in (".", ""):
            parts.append(part)
    return PurePosixPath("/", *parts)


def _within(path: PurePosixPath, root: PurePosixPath) -> bool:
    return path == root or root in path.parents


class NsboxSandboxSession:
    """A sandbox seen through the SDK's session interface. ``async with session:`` starts
    it and closes it (``stop`` then ``shutdown``); the sandbox itself goes with
    ``client.delete(session)``."""

    def __init__(self, sandbox: Sandbox, state: NsboxSandboxSessionState, *,
                 server_features: Callable[[], Mapping[str, Any]], dependencies: Any = None) -> None:
        self._server_features = server_features  # the client's GET /v1/info, cached there
        self._dependencies = dependencies  # the client's: where a remote snapshot spec's client is
        self.sandbox = sandbox
        self.state = state
        self._started = False
        self._shut_down = False
        self._deleted = False
        self._aclose_lock: Optional[asyncio.Lock] = None
        self._no_stdin: set = set()  # PTY sessions started without tty

    # -- life cycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Checks that the sandbox runs (it was made, with its manifest, at create)."""
        try:
            info = await _run(self.sandbox.info)
        except NsboxError as e:
            raise WorkspaceStartError(message="sandbox %s cannot be started: %s" % (self.sandbox.id, e),
                                      context={"sandbox_id": self.sandbox.id}, cause=e) from e
        if info.status != "running":
            raise WorkspaceStartError(message="sandbox %s is %s" % (self.sandbox.id, info.status),
                                      context={"sandbox_id": self.sandbox.id})
        self._started = True
        self._shut_down = False
        self.state.workspace_root_ready = True

    @property
    def _root(self) -> PurePosixPath:
        """The workspace root: the manifest's, which is the sandbox's ``workspace_root``."""
        return self.state.manifest.root_path

    async def stop(self) -> None:
        """Ends every PTY process, then persists the workspace through the session's
        snapshot spec (snapshots.py; nothing with the default, noop). The sandbox runs on."""
        await self.pty_terminate_all()
        if persists(self.state.snapshot) and not self._deleted:
            await persist(self.state.snapshot, self._save_archive, self._dependencies)

    async def _save_archive(self, dest: Any) -> None:
        try:
            await _run(self.sandbox.save_workspace_archive, dest, overwrite=True)
        except NsboxError as e:
            raise WorkspaceArchiveReadError(path=self._root, context={"code": e.code, "message": e.message},
                                            cause=e) from e

    async def persist_workspace(self) -> BinaryIO:
        """The workspace root as one tar archive (``GET .../workspace.tar``), a binary
        stream at its start (a temporary file: close it): members relative to the root,
        links kept as links (one pointing out of the root left out), bucket mounts and the
        manifest's ephemeral entries left out by the server."""
        archive = tempfile.TemporaryFile()
        try:
            await self._save_archive(archive)
            archive.seek(0)
        except BaseException:
            archive.close()
            raise
        return archive  # type: ignore[return-value]

    async def hydrate_workspace(self, data: Any = None) -> None:
        """Replaces the workspace root with a tar archive (``PUT .../workspace.tar``): a
        binary stream (what :meth:`persist_workspace` gave), bytes or a ``pathlib.Path``;
        without one, the session's snapshot (its spec's last persist). Every member is
        checked first: an absolute name, ``..``, a link pointing out, a hard link or a
        device refuses the whole archive (WorkspaceArchiveWriteError) and nothing changes.
        Files the archive does not hold are gone after, the manifest's ephemeral entries
        too; bucket mounts stay; processes and the kernel go on."""
        if isinstance(data, str):
            raise SandboxConfigError("hydrate_workspace takes the archive (a binary stream, bytes or a pathlib.Path), "
                                     "not a str: server snapshot ids are no longer hydrated", op="hydrate_workspace")
        archive = await restore(self.state.snapshot, self._dependencies) if data is None else data
        if isinstance(archive, os.PathLike):
            archive = os.fspath(archive)
        try:
            await _run(self.sandbox.replace_workspace, archive)
        except NsboxError as e:
            raise WorkspaceArchiveWriteError(path=self._root, context={"code": e.code, "message": e.message},
                                             cause=e) from e
        finally:
            if data is None and hasattr(archive, "close"):
                archive.close()

    async def shutdown(self) -> None:
        """Ends this session's use of the sandbox; the sandbox keeps running for
        ``resume`` until ``client.delete(session)``."""
        await self.pty_terminate_all()
        self._shut_down = True

    async def aclose(self) -> None:
        if self._aclose_lock is None:
            self._aclose_lock = asyncio.Lock()
        async with self._aclose_lock:
            try:
                await self.stop()
            finally:
                await self.shutdown()

    async def __aenter__(self) -> "NsboxSandboxSession":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def running(self) -> bool:
        """Whether the sandbox runs (and this session was not shut down)."""
        if self._shut_down or self._deleted:
            return False
        try:
            info = await _run(self.sandbox.info)
        except NsboxError:
            return False
        return bool(info.status == "running")

    def supports_pty(self) -> bool:
        """The server's ``features.pty`` (GET /v1/info)."""
        return bool(self._server_features().get("pty", False))

    # The SDK's window: 250 ms to 30 s.
    @staticmethod
    def _window_ms(yield_time_s: Optional[float], default_s: float) -> int:
        s = default_s if yield_time_s is None else float(yield_time_s)
        return int(min(max(s, 0.25), 30.0) * 1000)

    def _update(self, out: Any) -> PtyExecUpdate:
        return PtyExecUpdate(process_id=None if out.exit_code is not None else out.session_id,
                             output=out.data, exit_code=out.exit_code)

    async def pty_exec_start(self, *command: Any, tty: bool = True, shell: Union[bool, List[str]] = True,
                             yield_time_s: Optional[float] = None, max_output_tokens: Optional[int] = None,
                             **kwargs: Any) -> PtyExecUpdate:
        """Starts the command on a terminal of the sandbox (nsbox pty), and returns what it
        printed within the window (10 s by default, 250 ms to 30 s; sooner if it exits).
        While it runs, ``process_id`` is the session to write to. Without ``tty`` its
        stdin is closed to writes (``pty_write_stdin`` may only poll)."""
        if not self.supports_pty():
            raise NotImplementedError("PTY execution is not supported by this sandbox session")
        words = [str(c) for c in command]
        if not words:
            raise SandboxConfigError("pty_exec_start needs a command", op="exec")
        line: Union[str, List[str]] = " ".join(words) if shell is True else (list(shell) + words if shell else words)
        sid = await _run(self.sandbox.pty_start, line)
        if not tty:
            self._no_stdin.add(sid)
        out = await _run(self.sandbox.pty_read, sid, yield_ms=self._window_ms(yield_time_s, 10.0))
        return self._update(out)

    async def pty_write_stdin(self, *, session_id: int, chars: str, yield_time_s: Optional[float] = None,
                              **kwargs: Any) -> PtyExecUpdate:
        """Types ``chars`` ("\\u0003" is Ctrl-C) and returns what followed within the window
        (250 ms by default; an empty poll waits at least 5 s)."""
        default_s = 0.25 if chars else 5.0
        try:
            if chars and session_id in self._no_stdin:
                raise SandboxConfigError("stdin is not available for this process", op="exec")
            if chars:
                out = await _run(self.sandbox.pty_write, session_id, chars, yield_ms=self._window_ms(yield_time_s, default_s))
            else:
                out = await _run(self.sandbox.pty_read, session_id, yield_ms=self._window_ms(yield_time_s, default_s))
        except NotFound as e:
            raise PtySessionNotFoundError(session_id=session_id, cause=e) from e
        if out.exit_code is not None:
            self._no_stdin.discard(session_id)
        return self._update(out)

    async def resolve_exposed_port(self, port: int) -> ExposedPortEndpoint:
        """The server's loopback forward of the sandbox's ``port`` (made at the first call,
        the same after; asked of the server each time: a restarted sandbox has new ones),
        recorded in the state's ``exposed_ports``."""
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            raise SandboxConfigError("a port to expose is from 1 to 65535, not %r" % (port,))
        forward = await _run(self.sandbox.ports.expose, port)
        if port not in self.state.exposed_ports:
            self.state.exposed_ports = self.state.exposed_ports + (port,)
        return ExposedPortEndpoint(host=forward.host, port=forward.host_port, tls=False)

    async def pty_terminate_all(self) -> None:
        """Kills every PTY process of the sandbox."""
        self._no_stdin.clear()
        if self._deleted or not self.supports_pty():
            return None
        try:
            await _run(self.sandbox.pty_kill)
        except NsboxError:
            pass  # a sandbox that is gone or stopped has no PTY left
        return None

    def describe(self) -> str:
        return self.state.manifest.describe()

    # -- exec ----------------------------------------------------------------------------

    @staticmethod
    def _check_user(user: Any) -> None:
        name = getattr(user, "name", user)
        if name not in (None, _SANDBOX_USER):
            raise SandboxConfigError("nsbox runs everything as the sandbox's one user, `user`, not %r" % name,
                                     op="exec")

    async def exec(self, *command: Any, timeout: Optional[float] = None, shell: Union[bool, List[str]] = True,
                   user: Any = None) -> ExecResult:
        """Runs a command in the sandbox: its cwd is the workspace root (the manifest's
        ``root``), ``HOME`` is /home/user whatever the root. ``shell=True``
        runs ``sh -c`` on the arguments joined with shell quoting; a list is a shell
        prefix; ``False`` runs the arguments as they are. A non-zero exit is a result;
        ``timeout`` (seconds; the server's 180 s when None) raises ExecTimeoutError, the
        command's process group killed."""
        self._check_user(user)
        argv = [str(c) for c in command]
        if not argv:
            raise SandboxConfigError("exec needs a command", op="exec")
        if shell:
            import shlex

            joined = argv[0] if len(argv) == 1 else shlex.join(argv)
            argv = (list(shell) if isinstance(shell, list) else ["sh", "-c"]) + [joined]
        deadline = None if timeout is None else max(float(timeout), 0.001)
        try:
            result = await _run(self.sandbox.commands.run, argv, deadline, stream=True)
        except NsboxError as e:
            raise ExecTransportError(command=argv, context={"code": e.code, "status": e.status},
                                     cause=e, message="exec failed: %s" % e) from e
        if result.status == "timeout":
            raise ExecTimeoutError(command=argv, timeout_s=timeout,
                                   context={"stdout": result.stdout_text, "stderr": result.stderr_text})
        code = result.exit_code
        if code < 0:
            sig = result.signal
            code = 128 + sig if isinstance(sig, int) else 1
        return ExecResult(stdout=result.stdout, stderr=result.stderr, exit_code=code)

    # -- files ---------------------------------------------------------------------------

    def normalize_path(self, path: Any, *, for_write: bool = False) -> PurePosixPath:
        """The SDK's path rule: relative → under the root; absolute → allowed under the
        root or an extra path grant; ``..`` taken out lexically, then the result must stay
        inside ("must not escape root")."""
        text = str(path)
        if not text:
            raise InvalidManifestPathError(rel=text, reason="escape_root")
        if "\\" in text or _DRIVE.match(text):
            raise InvalidManifestPathError(rel=text, reason="absolute")
        given = PurePosixPath(text)
        full = _lexical(given if given.is_absolute() else self._root / given)
        if _within(full, self._root):
            return full
        best: Optional[SandboxPathGrant] = None
        for grant in self.state.manifest.extra_path_grants:
            gp = _lexical(PurePosixPath(grant.path))
            if _within(full, gp) and (best is None or len(gp.parts) > len(PurePosixPath(best.path).parts)):
                best = grant
        if best is not None:
            if for_write and best.read_only:
                raise WorkspaceArchiveWriteError(path=full, context={"reason": "read_only_extra_path_grant",
                                                                     "grant_path": best.path})
            return full
        raise InvalidManifestPathError(rel=text, reason="absolute" if given.is_absolute() else "escape_root")

    def _allowed(self, path: PurePosixPath) -> bool:
        if _within(path, self._root):
            return True
        return any(_within(path, _lexical(PurePosixPath(g.path))) for g in self.state.manifest.extra_path_grants)

    async def _realpath(self, path: PurePosixPath, *, leaf: bool) -> Optional[PurePosixPath]:
        """Where a path leads inside the sandbox, symlinks followed (its last component
        too when ``leaf``); None when that cannot be said."""
        target = str(path) if leaf else str(path.parent)
        try:
            r = await _run(self.sandbox.commands.run, ["realpath", "-m", "--", target], 30)
        except NsboxError:
            return None
        if r.exit_code != 0:
            return None
        resolved = PurePosixPath(r.stdout.decode("utf-8", "surrogateescape").strip())
        if not resolved.is_absolute():
            return None
        return resolved if leaf else resolved / path.name

    async def _through_symlinks(self, original: Any, path: PurePosixPath, *, leaf: bool,
                                error: NsboxError) -> PurePosixPath:
        """After a 403 (the server follows no symlink): the path the symlinks lead to, if
        it stays inside the root (or a grant); "must not escape root" if it leaves."""
        resolved = await self._realpath(path, leaf=leaf)
        if resolved is None or resolved == path:
            raise error
        if not self._allowed(resolved):
            raise InvalidManifestPathError(rel=original, reason="escape_root", context={"resolved_path": str(resolved)},
                                           cause=error)
        return resolved

    async def _fs(self, original: Any, path: PurePosixPath, call: Any, *, leaf: bool) -> Any:
        try:
            return await _run(call, str(path))
        except PermissionDenied as e:
            resolved = await self._through_symlinks(original, path, leaf=leaf, error=e)
            return await _run(call, str(resolved))

    async def read(self, path: Any, *, user: Any = None) -> io.BytesIO:
        """A file's bytes as a binary stream (WorkspaceReadNotFoundError when missing)."""
        self._check_user(user)
        p = self.normalize_path(path)
        try:
            data = await self._fs(path, p, self.sandbox.fs.read, leaf=True)
        except NotFound as e:
            raise WorkspaceReadNotFoundError(path=path, cause=e) from e
        except (InvalidManifestPathError, WorkspaceIOError):
            raise
        except NsboxError as e:
            raise WorkspaceArchiveReadError(path=path, context={"code": e.code, "message": e.message}, cause=e) from e
        return io.BytesIO(data)

    async def write(self, path: Any, data: Any, *, user: Any = None) -> None:
        """Writes a whole file (parents made), atomically, owned by the sandbox user."""
        self._check_user(user)
        p = self.normalize_path(path, for_write=True)
        payload = _as_bytes(data)

        def put(target: str) -> Any:
            return self.sandbox.fs.write(target, payload)

        try:
            # The server replaces a symlink it is asked to write (it never writes through
            # one); the SDK writes through it, when it stays inside the root.
            target = p
            try:
                if (await _run(self.sandbox.fs.stat, str(p))).type == "symlink":
                    target = await self._through_symlinks(path, p, leaf=True, error=PermissionDenied(
                        "%s is a symlink that cannot be resolved" % p))
            except (NotFound, PermissionDenied):
                pass  # new, or under a symlinked directory: the write sorts it out
            await self._fs(path, target, put, leaf=True)
        except (InvalidManifestPathError, WorkspaceIOError):
            raise
        except NsboxError as e:
            raise WorkspaceArchiveWriteError(path=path, context={"code": e.code, "message": e.message}, cause=e) from e

    async def ls(self, path: Any = ".", *, user: Any = None) -> List[FileEntry]:
        self._check_user(user)
        p = self.normalize_path(path)

        def listing(target: str) -> List[FileEntry]:
            out = []
            for e in self.sandbox.fs.iter(target):
                mode = e.mode | (_stat.S_IFDIR if e.type == "dir" else 0)
                out.append(FileEntry(path=posixpath.join(target, e.name), permissions=Permissions.from_mode(mode),
                                     owner=e.owner or "", group=e.group or "", size=e.size, kind=_kind(e.type)))
            return out

        try:
            return await self._fs(path, p, listing, leaf=True)  # type: ignore[no-any-return]
        except (InvalidManifestPathError, WorkspaceIOError):
            raise
        except NsboxError as e:
            raise ExecNonZeroError(ExecResult(stdout=b"", stderr=("ls: %s: %s" % (p, e.message)).encode(), exit_code=2),
                                   command=("ls", "-la", "--", str(p)), cause=e) from e

    async def mkdir(self, path: Any, *, parents: bool = False, user: Any = None) -> None:
        self._check_user(user)
        p = self.normalize_path(path, for_write=True)

        def make(target: str) -> Any:
            return self.sandbox.fs.mkdir(target, parents=parents)

        cmd = ["mkdir"] + (["-p"] if parents else []) + [str(p)]
        try:
            await self._fs(path, p, make, leaf=False)
        except (InvalidManifestPathError, WorkspaceIOError):
            raise
        except AlreadyExists as e:
            raise ExecNonZeroError(ExecResult(stdout=b"", stderr=("mkdir: cannot create directory '%s': File exists" % p).encode(),
                                              exit_code=1), command=cmd, cause=e) from e
        except NsboxError as e:
            raise ExecNonZeroError(ExecResult(stdout=b"", stderr=("mkdir: %s: %s" % (p, e.message)).encode(), exit_code=1),
                                   command=cmd, cause=e) from e

    async def rm(self, path: Any, *, recursive: bool = False, user: Any = None) -> None:
        """Removes a file or directory (a tree with ``recursive``, where a missing path is
        no error); a symlink itself, never its target."""
        self._check_user(user)
        p = self.normalize_path(path, for_write=True)
        if p == self._root:
            raise InvalidManifestPathError(rel=path, reason="escape_root")

        def remove(target: str) -> Any:
            return self.sandbox.fs.rm(target, recursive=recursive)

        cmd = ["rm"] + (["-rf"] if recursive else []) + ["--", str(p)]
        try:
            await self._fs(path, p, remove, leaf=False)
        except (InvalidManifestPathError, WorkspaceIOError):
            raise
        except NotFound as e:
            if recursive:
                return
            raise ExecNonZeroError(ExecResult(stdout=b"", stderr=("rm: cannot remove '%s': No such file or directory" % p).encode(),
                                              exit_code=1), command=cmd, cause=e) from e
        except NsboxError as e:
            raise ExecNonZeroError(ExecResult(stdout=b"", stderr=("rm: %s: %s" % (p, e.message)).encode(), exit_code=1),
                                   command=cmd, cause=e) from e

    async def extract(self, path: Any, data: Any, *, compression_scheme: str = "tar", archive_limits: Any = None,
                      user: Any = None) -> None:
        """Unpacks a tar or zip archive into the directory ``path`` (made if missing), as
        the sandbox user. The whole archive is checked first: an absolute member, ``..``,
        a symlink pointing out, a hard link, a device or FIFO, a duplicate, or more members
        or bytes than ``archive_limits`` (``max_members``/``max_bytes``; an object or a
        dict) refuses it with nothing written (WorkspaceArchiveWriteError); no existing
        file is overwritten."""
        self._check_user(user)
        if compression_scheme not in ("tar", "zip"):
            raise SandboxConfigError("compression_scheme is tar or zip, not %r" % (compression_scheme,), op="extract")
        p = self.normalize_path(path, for_write=True)
        payload = _as_bytes(data)

        def limit(name: str) -> Any:
            if archive_limits is None:
                return None
            if isinstance(archive_limits, Mapping):
                return archive_limits.get(name)
            return getattr(archive_limits, name, None)

        def unpack(target: str) -> Any:
            return self.sandbox.fs.extract(target, payload, format=compression_scheme,
                                           max_members=limit("max_members"), max_bytes=limit("max_bytes"))

        try:
            await self._fs(path, p, unpack, leaf=False)
        except (InvalidManifestPathError, WorkspaceIOError):
            raise
        except NsboxError as e:
            raise WorkspaceArchiveWriteError(path=p, context={"code": e.code, "message": e.message}, cause=e) from e

    def __repr__(self) -> str:
        return "NsboxSandboxSession(sandbox_id=%r)" % (self.sandbox.id,)
