"""The asyncio twin of :mod:`nsbox`: the same names, awaitable.

>>> async with AsyncSandbox.create() as sbx:
...     ex = await sbx.run_code("1 + 1")
...     r = await sbx.commands.run("echo hi", on_stdout=print)

Each call runs the synchronous client in a worker thread (``asyncio.to_thread``): the
standard library has no asynchronous HTTP client. Callbacks may be plain functions (called
in the worker thread, in order, before the call returns) or coroutine functions (run on
the event loop; the stream waits for each). Cancelling a task stops waiting for its
answer; the request itself finishes in its thread (a cell goes on in the sandbox anyway,
as when any client goes away).
"""
from __future__ import annotations

import asyncio
import functools
from typing import (
    Any,
    Awaitable,
    Callable,
    Dict,
    Generator,
    Generic,
    List,
    Mapping,
    Optional,
    Sequence,
    TypeVar,
    Union,
)

from ._http import Client
from .errors import NotFound
from .models import (
    CommandResult,
    Execution,
    FileEntry,
    FilePage,
    FsEntry,
    FsPage,
    FsStat,
    FsWrite,
    SandboxInfo,
    SnapshotInfo,
    SessionInfo,
    UploadRecord,
)
from .sandbox import Commands, Files, Fs, RemoteFile, Sandbox, Session, _Workbench

__all__ = ["AsyncSandbox", "AsyncSession", "AsyncCommands", "AsyncFiles", "AsyncFs", "AsyncRemoteFile"]

R = TypeVar("R")
W = TypeVar("W", bound="_AsyncWorkbench")


async def _thread(fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
    return await asyncio.to_thread(fn, *args, **kwargs)


def _bridge(callback: Optional[Callable[..., Any]], loop: asyncio.AbstractEventLoop) -> Optional[Callable[..., Any]]:
    """A callback the worker thread can call: a coroutine function runs on the loop (and
    the worker waits for it), a plain function runs in the worker."""
    if callback is None:
        return None
    if asyncio.iscoroutinefunction(callback) or asyncio.iscoroutinefunction(getattr(callback, "__call__", None)):
        coroutine_function = callback

        def run_on_loop(*args: Any) -> Any:
            return asyncio.run_coroutine_threadsafe(coroutine_function(*args), loop).result()

        return run_on_loop
    return callback


class _Creating(Generic[W]):
    """What ``AsyncSandbox.create(...)`` returns: await it for the sandbox, or use it in
    ``async with`` to remove the sandbox at the end."""

    def __init__(self, make: Callable[[], Awaitable[W]]) -> None:
        self._make = make
        self._made: Optional[W] = None

    def __await__(self) -> Generator[Any, None, W]:
        return self._make().__await__()

    async def __aenter__(self) -> W:
        self._made = await self._make()
        return self._made

    async def __aexit__(self, *exc: Any) -> None:
        if self._made is not None:
            await self._made.__aexit__(*exc)


class AsyncCommands:
    def __init__(self, sync: Commands) -> None:
        self._sync = sync

    async def run(
        self,
        cmd: Union[str, Sequence[str]],
        timeout: Optional[float] = None,
        *,
        on_stdout: Optional[Callable[[str], Any]] = None,
        on_stderr: Optional[Callable[[str], Any]] = None,
        stdin: Union[None, str, bytes] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        run_as: Optional[str] = None,
        stream: Optional[bool] = None,
        request_timeout: Optional[float] = None,
    ) -> CommandResult:
        """See :meth:`nsbox.Commands.run`."""
        loop = asyncio.get_running_loop()
        return await _thread(self._sync.run, cmd, timeout, on_stdout=_bridge(on_stdout, loop),
                             on_stderr=_bridge(on_stderr, loop), stdin=stdin, env=env, cwd=cwd, run_as=run_as,
                             stream=stream, request_timeout=request_timeout)


class AsyncRemoteFile:
    """See :class:`nsbox.RemoteFile`; ``buffer``, ``text`` and ``save`` are awaitable."""

    def __init__(self, sync: RemoteFile) -> None:
        self.sync = sync
        self.path = sync.path
        self.name = sync.name
        self.download_url = sync.download_url
        self.url_path = sync.url_path
        self.expires_at = sync.expires_at

    @property
    def expires(self) -> Any:
        return self.sync.expires

    async def buffer(self) -> bytes:
        return await _thread(self.sync.buffer)

    async def text(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return await _thread(self.sync.text, encoding, errors)

    async def save(self, path: Any = None, *, overwrite: bool = False) -> str:
        return await _thread(self.sync.save, path, overwrite=overwrite)

    def __repr__(self) -> str:
        return "Async" + repr(self.sync)


class AsyncFiles:
    """See :class:`nsbox.Files`."""

    def __init__(self, sync: Files) -> None:
        self._sync = sync

    async def upload(self, source: Any, path: Optional[str] = None, *, executable: bool = False,
                     timeout: Optional[float] = None) -> UploadRecord:
        return await _thread(self._sync.upload, source, path, executable=executable, timeout=timeout)

    async def list(self, path: str = "/mnt/files", *, cursor: Optional[str] = None,
                   limit: Optional[int] = None) -> FilePage:
        return await _thread(self._sync.list, path, cursor=cursor, limit=limit)

    async def list_all(self, path: str = "/mnt/files") -> List[FileEntry]:
        return await _thread(lambda: list(self._sync.iter(path)))

    async def download(self, path: str, *, expires_in: Optional[int] = None) -> AsyncRemoteFile:
        return AsyncRemoteFile(await _thread(self._sync.download, path, expires_in=expires_in))

    async def sign(self, path: str, *, expires_in: Optional[int] = None) -> Dict[str, Any]:
        return await _thread(self._sync.sign, path, expires_in=expires_in)

    async def read_bytes(self, path: str) -> bytes:
        return await _thread(self._sync.read_bytes, path)

    async def delete(self, path: str, *, recursive: bool = False) -> List[str]:
        return await _thread(self._sync.delete, path, recursive=recursive)


class AsyncFs:
    """See :class:`nsbox.Fs`."""

    def __init__(self, sync: Fs) -> None:
        self._sync = sync

    async def read(self, path: str, *, run_as: Optional[str] = None) -> bytes:
        return await _thread(self._sync.read, path, run_as=run_as)

    async def read_text(self, path: str, encoding: str = "utf-8", *, run_as: Optional[str] = None) -> str:
        return await _thread(self._sync.read_text, path, encoding, run_as=run_as)

    async def write(self, path: str, data: Any, *, mode: Optional[int] = None, run_as: Optional[str] = None) -> FsWrite:
        return await _thread(self._sync.write, path, data, mode=mode, run_as=run_as)

    async def extract(self, path: str, archive: Any, *, format: str = "tar", max_members: Optional[int] = None,
                      max_bytes: Optional[int] = None, run_as: Optional[str] = None) -> Dict[str, Any]:
        return await _thread(self._sync.extract, path, archive, format=format, max_members=max_members,
                             max_bytes=max_bytes, run_as=run_as)

    async def ls(self, path: str = "/home/user", *, cursor: Optional[str] = None,
                 limit: Optional[int] = None, run_as: Optional[str] = None) -> FsPage:
        return await _thread(self._sync.ls, path, cursor=cursor, limit=limit, run_as=run_as)

    async def ls_all(self, path: str = "/home/user", *, run_as: Optional[str] = None) -> List[FsEntry]:
        return await _thread(lambda: list(self._sync.iter(path, run_as=run_as)))

    async def mkdir(self, path: str, *, parents: bool = False, run_as: Optional[str] = None) -> str:
        return await _thread(self._sync.mkdir, path, parents=parents, run_as=run_as)

    async def rm(self, path: str, *, recursive: bool = False, run_as: Optional[str] = None) -> List[str]:
        return await _thread(self._sync.rm, path, recursive=recursive, run_as=run_as)

    async def stat(self, path: str, *, run_as: Optional[str] = None) -> FsStat:
        return await _thread(self._sync.stat, path, run_as=run_as)

    async def exists(self, path: str, *, run_as: Optional[str] = None) -> bool:
        return await _thread(self._sync.exists, path, run_as=run_as)


class _AsyncWorkbench:
    def __init__(self, sync: _Workbench) -> None:
        self._sync_wb = sync
        self.commands = AsyncCommands(sync.commands)
        self.files = AsyncFiles(sync.files)
        self.fs = AsyncFs(sync.fs)

    @property
    def client(self) -> Client:
        return self._sync_wb.client

    async def run_code(
        self,
        code: Union[str, bytes],
        timeout: Optional[float] = None,
        *,
        on_stdout: Optional[Callable[[str], Any]] = None,
        on_stderr: Optional[Callable[[str], Any]] = None,
        on_progress: Optional[Callable[[str, Optional[str]], Any]] = None,
        on_display: Optional[Callable[[Dict[str, Any]], Any]] = None,
        output_limit: Optional[int] = None,
        stream: Optional[bool] = None,
        request_timeout: Optional[float] = None,
    ) -> Execution:
        """See :meth:`nsbox.Sandbox.run_code`."""
        loop = asyncio.get_running_loop()
        return await _thread(
            self._sync_wb.run_code, code, timeout, on_stdout=_bridge(on_stdout, loop),
            on_stderr=_bridge(on_stderr, loop), on_progress=_bridge(on_progress, loop),
            on_display=_bridge(on_display, loop), output_limit=output_limit, stream=stream,
            request_timeout=request_timeout)

    async def on_tool_call(self, handler: Callable[[str, Dict[str, Any]], Any], *, workers: int = 16) -> Any:
        """As :meth:`nsbox.Sandbox.on_tool_call`: the handler runs on worker threads."""
        return await _thread(self._sync_wb.on_tool_call, handler, workers=workers)

    async def workbench_tool(self, tool: str, arguments: Any) -> Dict[str, Any]:
        return await _thread(self._sync_wb.workbench_tool, tool, arguments)

    async def workspace_archive(self, *, timeout: Optional[float] = None) -> bytes:
        """See :meth:`nsbox.Sandbox.workspace_archive`."""
        return await _thread(self._sync_wb.workspace_archive, timeout=timeout)

    async def save_workspace_archive(self, dest: Any, *, overwrite: bool = False, timeout: Optional[float] = None) -> int:
        """See :meth:`nsbox.Sandbox.save_workspace_archive` (a file object is written from a worker thread)."""
        return await _thread(self._sync_wb.save_workspace_archive, dest, overwrite=overwrite, timeout=timeout)

    async def replace_workspace(self, archive: Any, *, timeout: Optional[float] = None) -> Dict[str, Any]:
        """See :meth:`nsbox.Sandbox.replace_workspace` (a file object is read from a worker thread)."""
        return await _thread(self._sync_wb.replace_workspace, archive, timeout=timeout)

    async def interrupt(self) -> None:
        await _thread(self._sync_wb.interrupt)

    async def restart(self) -> None:
        await _thread(self._sync_wb.restart)

    async def close(self) -> None:
        self._sync_wb.close()

    async def __aexit__(self, *exc: Any) -> None:  # overridden
        raise NotImplementedError


class AsyncSandbox(_AsyncWorkbench):
    """See :class:`nsbox.Sandbox`. ``async with AsyncSandbox.create() as sbx:`` removes
    the sandbox at the end; ``sbx = await AsyncSandbox.create()`` does not."""

    def __init__(self, sync: Sandbox) -> None:
        super().__init__(sync)
        self.sync = sync

    @property
    def id(self) -> str:
        return self.sync.id

    @property
    def sandbox_id(self) -> str:
        return self.sync.id

    @property
    def name(self) -> str:
        return self.sync.name

    @classmethod
    def create(cls, *args: Any, **kwargs: Any) -> "_Creating[AsyncSandbox]":
        """See :meth:`nsbox.Sandbox.create` (same arguments)."""
        async def make() -> "AsyncSandbox":
            return cls(await _thread(functools.partial(Sandbox.create, *args, **kwargs)))

        return _Creating(make)

    @classmethod
    async def connect(cls, id_or_name: str, **kwargs: Any) -> "AsyncSandbox":
        return cls(await _thread(functools.partial(Sandbox.connect, id_or_name, **kwargs)))

    @classmethod
    async def list(cls, **kwargs: Any) -> List[SandboxInfo]:
        return await _thread(functools.partial(Sandbox.list, **kwargs))

    async def info(self) -> SandboxInfo:
        return await _thread(self.sync.info)

    async def is_running(self) -> bool:
        return await _thread(self.sync.is_running)

    async def resize(self, size: str) -> SandboxInfo:
        return await _thread(self.sync.resize, size)

    async def set_allowlist(self, allow: Sequence[str], allow_private: Sequence[str] = ()) -> SandboxInfo:
        return await _thread(self.sync.set_allowlist, allow, allow_private)

    async def set_ttl(self, ttl_s: int) -> SandboxInfo:
        return await _thread(self.sync.set_ttl, ttl_s)

    async def stop(self) -> SandboxInfo:
        return await _thread(self.sync.stop)

    async def start(self, env: Optional[Mapping[str, str]] = None, from_snapshot: Optional[str] = None) -> SandboxInfo:
        return await _thread(self.sync.start, env, from_snapshot)

    async def snapshot(self, name: Optional[str] = None, *, include_files: bool = False) -> SnapshotInfo:
        return await _thread(self.sync.snapshot, name, include_files=include_files)

    async def remove(self, *, keep_files: bool = False) -> List[str]:
        return await _thread(self.sync.remove, keep_files=keep_files)

    async def kill(self) -> List[str]:
        return await _thread(self.sync.kill)

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self.remove()
        except NotFound:
            pass
        finally:
            self.sync.close()

    def __repr__(self) -> str:
        return "AsyncSandbox(id=%r, name=%r)" % (self.id, self.name)


class AsyncSession(_AsyncWorkbench):
    """See :class:`nsbox.Session`."""

    def __init__(self, sync: Session) -> None:
        super().__init__(sync)
        self.sync = sync

    @property
    def session_id(self) -> str:
        return self.sync.session_id

    @property
    def id(self) -> str:
        return self.sync.session_id

    @property
    def user_id(self) -> str:
        return self.sync.user_id

    @property
    def sandbox_id(self) -> Optional[str]:
        return self.sync.sandbox_id

    @classmethod
    def create(cls, *args: Any, **kwargs: Any) -> "_Creating[AsyncSession]":
        async def make() -> "AsyncSession":
            return cls(await _thread(functools.partial(Session.create, *args, **kwargs)))

        return _Creating(make)

    @classmethod
    async def connect(cls, session_id: str, **kwargs: Any) -> "AsyncSession":
        return cls(await _thread(functools.partial(Session.connect, session_id, **kwargs)))

    @classmethod
    async def list(cls, user_id: Optional[str] = None, **kwargs: Any) -> List[SessionInfo]:
        return await _thread(functools.partial(Session.list, user_id, **kwargs))

    async def info(self) -> SessionInfo:
        return await _thread(self.sync.info)

    async def resize(self, size: str) -> SessionInfo:
        return await _thread(self.sync.resize, size)

    async def delete(self) -> List[str]:
        return await _thread(self.sync.delete)

    async def kill(self) -> List[str]:
        return await self.delete()

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self.delete()
        except NotFound:
            pass
        finally:
            self.sync.close()

    def __repr__(self) -> str:
        return "AsyncSession(session_id=%r)" % (self.session_id,)
