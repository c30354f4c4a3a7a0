"""Sandboxes and sessions over the HTTP API (docs/api.md), synchronous.

>>> with Sandbox.create(size="medium") as sbx:
...     sbx.run_code("x = 6 * 7")
...     print(sbx.run_code("x").results)          # 42: the kernel keeps its globals
...     print(sbx.commands.run("echo hi").stdout)  # b'hi\\n'
...     sbx.files.upload(b"a,b\\n1,2\\n", "data/t.csv")
"""
from __future__ import annotations

import base64
import urllib.parse
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Dict, List, Mapping, Optional, Sequence, Union

from ._http import Client, DEFAULT_TIMEOUT_S
from .errors import NotFound, ProtocolError
from .models import Execution, PtyOutput, SandboxInfo, SessionInfo, SnapshotInfo
from .files import Files, Fs, PathLike, RemoteFile, WorkspaceArchive
from .ports import Ports
from .processes import Processes, command_body
from .run import Commands, DisplayCallback, ProgressCallback, TextCallback, _Runner

if TYPE_CHECKING:
    from .tool_calls import ToolCallServer

__all__ = ["Sandbox", "Session", "Commands", "Files", "Fs", "RemoteFile", "make_client"]


def _quote(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


def make_client(
    client: Optional[Client] = None,
    *,
    url: Optional[str] = None,
    token: Optional[str] = None,
    socket: Optional[str] = None,
    token_file: Optional[str] = None,
    timeout: Optional[float] = None,
) -> Client:
    """The given client, or a new one from these arguments and the environment."""
    if client is not None:
        if any(x is not None for x in (url, token, socket, token_file)):
            raise ValueError("give client= or the connection arguments, not both")
        return client
    return Client(url, token, socket=socket, token_file=token_file,
                  timeout=DEFAULT_TIMEOUT_S if timeout is None else timeout)


def _list_of(doc: Any, key: str) -> List[Dict[str, Any]]:
    """The objects of ``doc[key]`` (a list answer: {"sandboxes": [...]})."""
    items = doc.get(key) if isinstance(doc, dict) else None
    return [x for x in items if isinstance(x, dict)] if isinstance(items, list) else []


def _request_once(client: Optional[Client], method: str, path: str, *, query: Optional[Mapping[str, Any]] = None,
                  **connection: Any) -> Any:
    """One request through ``client``, or through a client made from ``connection`` for it
    alone and closed after it (the class-level calls: list, snapshots, ...)."""
    c = make_client(client, **connection)
    try:
        return c.json(method, path, query=query)
    finally:
        if client is None:
            c.close()


class _Workbench:
    """What a sandbox and a session's sandbox share: cells, commands, files, fs,
    interrupt, restart."""

    _base: str

    def __init__(self, client: Client, base: str, owns_client: bool) -> None:
        self._client = client
        self._owns_client = owns_client
        self._set_base(base)

    def _set_base(self, base: str) -> None:
        self._base = base
        self._runner = _Runner(self._client, base)
        self.commands = Commands(self._runner)
        self.files = Files(self._client, base)
        self.fs = Fs(self._client, base)
        self.processes = Processes(self._client, base)
        self.ports = Ports(self._client, base)
        self._workspace = WorkspaceArchive(self._client, base)

    @property
    def client(self) -> Client:
        return self._client

    def run_code(
        self,
        code: Union[str, bytes],
        timeout: Optional[float] = None,
        *,
        on_stdout: Optional[TextCallback] = None,
        on_stderr: Optional[TextCallback] = None,
        on_progress: Optional[ProgressCallback] = None,
        on_display: Optional[DisplayCallback] = None,
        output_limit: Optional[int] = None,
        stream: Optional[bool] = None,
        request_timeout: Optional[float] = None,
    ) -> Execution:
        """Runs a cell in the sandbox's Python kernel, whose globals survive between
        cells; returns its :class:`Execution` whatever its status (an exception in the
        cell is ``execution.error``, a deadline ``status == "timeout"`` with the state
        kept, or ``state_lost`` when the kernel had to be restarted).

        ``timeout`` is the cell's deadline (the server's default 180 s when None).
        ``on_stdout``/``on_stderr`` receive output text as it is printed,
        ``on_progress(step, metric)`` each ``set_progress`` call, ``on_display(item)``
        each figure; with any of them (or ``stream=True``) the answer is streamed.
        ``request_timeout`` bounds the wait for a non-streamed answer (default: the
        deadline plus 60 s). A client that goes away does not stop the cell.
        """
        return self._runner.run_code(code, timeout, on_stdout=on_stdout, on_stderr=on_stderr,
                                     on_progress=on_progress, on_display=on_display, output_limit=output_limit,
                                     stream=stream, request_timeout=request_timeout)

    def on_tool_call(self, handler: Callable[[str, Dict[str, Any]], Any], *, workers: int = 16) -> "ToolCallServer":
        """Answers this sandbox's tool calls from this process (a sandbox created with
        ``tools={"backend": "callback"}``): ``handler(helper, args)`` gets each call of
        ``run_composio_tool`` (helper ``"run_tool"``, args ``{"tool", "arguments"}``),
        ``invoke_llm``, ``web_search``, ``proxy_execute``, and returns the result; an
        exception becomes the call's error. Returns the :class:`ToolCallServer`; call its
        ``stop()`` when done."""
        from .tool_calls import ToolCallServer
        server = ToolCallServer(self._client, self._base, handler, workers=workers)
        server.wait_subscribed()
        return server

    def workbench_tool(self, tool: str, arguments: Mapping[str, Any]) -> Dict[str, Any]:
        """One call of a hosted workbench tool, answered by this sandbox:
        ``COMPOSIO_REMOTE_WORKBENCH`` ({"code_to_execute": ...}) or
        ``COMPOSIO_REMOTE_BASH_TOOL`` ({"command": ...}). Returns the hosted answer,
        ``{"data": {...}, "error": ..., "successful": ...}`` (docs/tools.md), so an agent
        loop written for the hosted workbench can hand its tool calls here unchanged."""
        return self._client.json("POST", self._base + "/tools/" + _quote(tool), json_body=dict(arguments),
                                 timeout=max(self._client.timeout, 240.0))

    # -- the workspace root as one tar archive (docs/api.md, "Workspace archives") ------

    def workspace_archive(self, *, timeout: Optional[float] = None) -> bytes:
        """The workspace root (``workspace_root``: /home/user unless the sandbox was made
        with another) as one tar archive, members relative to it, of a running, stopped or
        dead sandbox: links kept as links (one pointing out of the root left out), bucket
        mounts and the manifest's ephemeral entries left out. An archive cut short raises
        ServerUnreachable: it is never returned short. Held in memory: for a large one,
        :meth:`save_workspace_archive`."""
        return self._workspace.read(timeout=timeout)

    def save_workspace_archive(self, dest: Union[PathLike, BinaryIO], *, overwrite: bool = False,
                               timeout: Optional[float] = None) -> int:
        """Streams :meth:`workspace_archive` into ``dest``, a binary file object or a local
        path, and returns its size in bytes. A path gets the whole archive or nothing (mode
        0600; an existing file is replaced only with ``overwrite=True``, else
        FileExistsError). ``timeout`` bounds each read."""
        return self._workspace.save(dest, overwrite=overwrite, timeout=timeout)

    def replace_workspace(self, archive: Union[PathLike, bytes, bytearray, memoryview, BinaryIO], *,
                          timeout: Optional[float] = None) -> Dict[str, Any]:
        """Replaces the running sandbox's workspace root with a tar archive: bytes, a local
        path or a binary file object, streamed. Every member is checked first; an absolute
        name, ``..``, a link pointing out, a hard link, a device or FIFO, a duplicate
        refuses the whole archive with InvalidArgument (422) and nothing changes. Files
        not in the archive are gone after; bucket mounts stay. The body is bounded as an
        upload's (the server's ``--max-upload``, 100 MiB by default: QuotaExceeded).
        ``{"path", "members", "bytes"}``. ``timeout`` bounds the wait for the answer
        (default 10 min)."""
        return self._workspace.replace(archive, timeout=timeout)

    def interrupt(self) -> None:
        """Interrupts the running cell (it ends ``interrupted``, its state kept)."""
        self._client.json("POST", self._base + "/interrupt")

    def restart(self) -> None:
        """A fresh interpreter (the globals are gone; files stay)."""
        self._client.json("POST", self._base + "/restart")

    def close(self) -> None:
        """Closes the connection this object made (the sandbox stays)."""
        if self._owns_client:
            self._client.close()


class Sandbox(_Workbench):
    """A sandbox: made with :meth:`create`, found with :meth:`connect`, listed with
    :meth:`list`. ``with Sandbox.create() as sbx:`` removes it at the end."""

    def __init__(self, info: Dict[str, Any], client: Client, *, owns_client: bool = False) -> None:
        self._info = SandboxInfo(info)
        if not self._info.id:
            raise ProtocolError("the server described a sandbox without an id")
        super().__init__(client, "/v1/sandboxes/" + _quote(self._info.id), owns_client)

    @property
    def id(self) -> str:
        return self._info.id

    @property
    def sandbox_id(self) -> str:
        return self._info.id

    @property
    def name(self) -> str:
        return self._info.name

    @property
    def last_info(self) -> SandboxInfo:
        """The last description fetched (create, connect, info, resize): no request."""
        return self._info

    @classmethod
    def create(
        cls,
        size: Optional[str] = None,
        name: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        net: Union[None, str, Mapping[str, Any]] = None,
        mounts: Optional[Sequence[Union[str, Mapping[str, Any]]]] = None,
        files_quota: Union[None, int, str] = None,
        volume: Optional[str] = None,
        manifest: Optional[Mapping[str, Any]] = None,
        tools: Optional[Mapping[str, Any]] = None,
        packages: Optional[Mapping[str, Any]] = None,
        home_size: Union[None, int, str] = None,
        from_snapshot: Optional[str] = None,
        *,
        lazy_kernel: bool = False,
        ttl_s: Optional[int] = None,
        workspace_root: Optional[str] = None,
        image: Optional[str] = None,
        users: Optional[Sequence[Union[str, Mapping[str, Any]]]] = None,
        groups: Optional[Sequence[Mapping[str, Any]]] = None,
        client: Optional[Client] = None,
        url: Optional[str] = None,
        token: Optional[str] = None,
        socket: Optional[str] = None,
        token_file: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> "Sandbox":
        """Creates a sandbox and returns once it is up (``nsbox create``).

        ``size`` standard|medium|large|xlarge; ``env`` its environment (never echoed);
        ``net`` "none", "host", "internet", "allow=pypi.org,*.github.com" or {"allow": [...],
        "allow_private": [...]} (docs/network.md); ``mounts`` bucket mounts (``"s3://b/p:/data:rw"`` strings or
        objects with ``credentials``); ``files_quota`` bytes or ``"10G"``; ``volume`` a
        named files volume; ``manifest`` files to make in /home/user first; ``tools``
        the tool bridge ({"backend": "composio" | "dir" | "replay", "tools_dir", ...};
        its keys come from the server's environment, never from here: docs/tools.md);
        ``packages`` pip's sources and auto-install ({"pip_index": URL, "wheelhouse":
        DIR, "allow": [...], "auto_install": True}: docs/network.md); ``home_size`` the
        volume of /home/user, kept across :meth:`stop` and :meth:`start` (bytes or "2G");
        ``from_snapshot`` a snapshot's id or name restored before the first command;
        ``lazy_kernel`` no Python kernel until the first cell (commands-only use: a faster
        create and no idle interpreter; never from a warm pool); ``ttl_s`` its time to live:
        removed that many seconds after it starts, by its own supervisor (see :meth:`set_ttl`);
        ``workspace_root`` where commands, cells and the manifest start (default /home/user;
        ``"/workspace"`` is a directory of the home volume shown there: docs/semantics.md);
        ``image`` an image of the server's store (``nsbox image pull``; a name, an id or a
        digest) whose tree is the root, under a writable layer of the sandbox's own
        (docs/images.md: commands run there; cells are refused for now);
        ``users`` accounts besides the sandbox user (``"alice"`` or ``{"name": "bob", "uid":
        1500}``; uids 1001 and up) that commands, processes, PTY sessions and fs calls name
        by ``run_as``, and ``groups`` theirs (``{"name": "team", "users": ["alice"]}``):
        the workspace root is then sticky and world-writable, as /tmp; only a server
        running as root makes them (Unsupported otherwise).
        The connection comes from ``client`` or the other arguments (see :class:`Client`).
        """
        c = make_client(client, url=url, token=token, socket=socket, token_file=token_file, timeout=timeout)
        body: Dict[str, Any] = {}
        for key, value in (("size", size), ("name", name), ("net", net), ("volume", volume), ("files_quota", files_quota),
                           ("home_size", home_size), ("from_snapshot", from_snapshot), ("ttl_s", ttl_s),
                           ("workspace_root", workspace_root), ("image", image)):
            if value is not None:
                body[key] = dict(value) if isinstance(value, Mapping) else value
        if env is not None:
            body["env"] = {str(k): str(v) for k, v in env.items()}
        if mounts is not None:
            body["mounts"] = [m if isinstance(m, str) else dict(m) for m in mounts]
        if manifest is not None:
            body["manifest"] = dict(manifest)
        if tools is not None:
            body["tools"] = dict(tools)
        if packages is not None:
            body["packages"] = dict(packages)
        if users is not None:
            body["users"] = [u if isinstance(u, str) else dict(u) for u in users]
        if groups is not None:
            body["groups"] = [dict(g) for g in groups]
        if lazy_kernel:
            body["lazy_kernel"] = True
        # Creating waits for the sandbox (30 s, plus 60 s per bucket mount at most).
        wait = max(c.timeout, 60.0 + 60.0 * len(mounts or ()))
        doc = c.json("POST", "/v1/sandboxes", json_body=body, timeout=wait)
        return cls(doc, c, owns_client=client is None)

    @classmethod
    def connect(
        cls,
        id_or_name: str,
        *,
        client: Optional[Client] = None,
        url: Optional[str] = None,
        token: Optional[str] = None,
        socket: Optional[str] = None,
        token_file: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> "Sandbox":
        """An existing sandbox by id or name (NotFound when there is none)."""
        c = make_client(client, url=url, token=token, socket=socket, token_file=token_file, timeout=timeout)
        doc = c.json("GET", "/v1/sandboxes/" + _quote(id_or_name))
        return cls(doc, c, owns_client=client is None)

    @classmethod
    def list(
        cls,
        *,
        client: Optional[Client] = None,
        url: Optional[str] = None,
        token: Optional[str] = None,
        socket: Optional[str] = None,
        token_file: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> List[SandboxInfo]:
        """Every sandbox of the server's state root (``nsbox ls``)."""
        doc = _request_once(client, "GET", "/v1/sandboxes", url=url, token=token, socket=socket, token_file=token_file,
                            timeout=timeout)
        return [SandboxInfo(x) for x in _list_of(doc, "sandboxes")]

    def info(self) -> SandboxInfo:
        """The sandbox as it is now (``nsbox inspect``); ``status`` says running, stopped or dead."""
        self._info = SandboxInfo(self._client.json("GET", self._base))
        return self._info

    def is_running(self) -> bool:
        try:
            return self.info().running
        except NotFound:
            return False

    def resize(self, size: str) -> SandboxInfo:
        """Changes the size live: processes, files and the kernel's state stay."""
        self._info = SandboxInfo(self._client.json("PATCH", self._base, json_body={"size": size}))
        return self._info

    def set_allowlist(self, allow: Sequence[str], allow_private: Sequence[str] = ()) -> SandboxInfo:
        """Replaces the allowlist of a sandbox made with ``net={"allow": [...]}``, live
        (``nsbox net ID --allow``): hosts, ``*.domain`` or ``host:port``."""
        body = {"net": {"allow": list(allow), "allow_private": list(allow_private)}}
        self._info = SandboxInfo(self._client.json("PATCH", self._base, json_body=body))
        return self._info

    def set_ttl(self, ttl_s: int) -> SandboxInfo:
        """The running sandbox is removed ``ttl_s`` seconds from now (``nsbox ttl``): its time
        to live extended, or a first one. ``info().raw["expires_at"]`` says when."""
        self._info = SandboxInfo(self._client.json("POST", self._base + "/ttl", json_body={"ttl_s": ttl_s}))
        return self._info

    def stop(self) -> SandboxInfo:
        """Ends every process of the sandbox (the kernel's state is lost); /home/user,
        /mnt/files and the mounts' definitions stay, and :meth:`start` brings it back."""
        self._info = SandboxInfo(self._client.json("POST", self._base + "/stop"))
        return self._info

    def start(self, env: Optional[Mapping[str, str]] = None, from_snapshot: Optional[str] = None) -> SandboxInfo:
        """Starts a stopped (or dead) sandbox again with a fresh kernel. Env values are
        never stored: give every variable it was created with again; mount credentials
        come from the server's environment, as at create. ``from_snapshot`` replaces
        /home/user (and /mnt/files if the snapshot holds them) first."""
        body: Dict[str, Any] = {"env": {str(k): str(v) for k, v in (env or {}).items()}}
        if from_snapshot is not None:
            body["from_snapshot"] = from_snapshot
        wait = max(self._client.timeout, 60.0 + 60.0 * len(self.info().mounts))
        self._info = SandboxInfo(self._client.json("POST", self._base + "/start", json_body=body, timeout=wait))
        return self._info

    # -- PTY sessions (docs/semantics.md, "PTY sessions") ------------------------------

    def pty_start(self, command: Union[str, Sequence[str]], *, cols: int = 80, rows: int = 24,
                  env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
                  run_as: Optional[str] = None) -> int:
        """Starts ``command`` (a bash line, or an argv list) on a terminal in the sandbox;
        its session id. No deadline: it runs until it exits or is killed. ``run_as`` one of
        the sandbox's ``users`` (default: the sandbox user)."""
        body = command_body(command, env, cwd, run_as)
        body.update({"cols": cols, "rows": rows})
        doc = self._client.json("POST", self._base + "/pty", json_body=body)
        return int(doc["session_id"])

    def pty_write(self, session_id: int, chars: Union[str, bytes], *, yield_ms: int = 250) -> PtyOutput:
        """Types ``chars`` ("\\x03" is Ctrl-C), then returns what the session printed within
        ``yield_ms`` (sooner if it exits)."""
        body: Dict[str, Any] = {"yield_ms": int(yield_ms)}
        if isinstance(chars, bytes):
            body["chars_b64"] = base64.b64encode(chars).decode("ascii")
        else:
            body["chars"] = chars
        wait = max(self._client.timeout, yield_ms / 1000.0 + 30.0)
        return PtyOutput(self._client.json("POST", "%s/pty/%d/input" % (self._base, session_id), json_body=body, timeout=wait))

    def pty_read(self, session_id: int, *, yield_ms: int = 250) -> PtyOutput:
        """What the session printed within ``yield_ms``, without typing anything."""
        wait = max(self._client.timeout, yield_ms / 1000.0 + 30.0)
        return PtyOutput(self._client.json("GET", "%s/pty/%d/output" % (self._base, session_id),
                                           query={"yield_ms": int(yield_ms)}, timeout=wait))

    def pty_resize(self, session_id: int, cols: int, rows: int) -> None:
        self._client.json("POST", "%s/pty/%d/resize" % (self._base, session_id), json_body={"cols": cols, "rows": rows})

    def pty_kill(self, session_id: Optional[int] = None) -> List[int]:
        """Kills one session, or every session of the sandbox; the ids killed."""
        path = self._base + "/pty" + ("" if session_id is None else "/%d" % session_id)
        doc = self._client.json("DELETE", path)
        killed = doc.get("killed") if isinstance(doc, dict) else None
        return [int(k) for k in killed] if isinstance(killed, list) else []

    def snapshot(self, name: Optional[str] = None, *, include_files: bool = False) -> SnapshotInfo:
        """A snapshot of /home/user (and /mnt/files with ``include_files``): never a bucket
        mount, never a secret. Restore with ``Sandbox.create(from_snapshot=...)`` or
        :meth:`start`."""
        body: Dict[str, Any] = {"sandbox": self.id, "include_files": include_files}
        if name is not None:
            body["name"] = name
        return SnapshotInfo(self._client.json("POST", "/v1/snapshots", json_body=body, timeout=max(self._client.timeout, 600.0)))

    @classmethod
    def snapshots(cls, *, client: Optional[Client] = None, url: Optional[str] = None, token: Optional[str] = None,
                  socket: Optional[str] = None, token_file: Optional[str] = None) -> List[SnapshotInfo]:
        """Every snapshot of the server (``nsbox snapshot ls``)."""
        doc = _request_once(client, "GET", "/v1/snapshots", url=url, token=token, socket=socket, token_file=token_file)
        return [SnapshotInfo(x) for x in _list_of(doc, "snapshots")]

    @classmethod
    def remove_snapshot(cls, id_or_name: str, *, client: Optional[Client] = None, url: Optional[str] = None,
                        token: Optional[str] = None, socket: Optional[str] = None, token_file: Optional[str] = None) -> None:
        """Deletes a snapshot by id or name (``nsbox snapshot rm``)."""
        _request_once(client, "DELETE", "/v1/snapshots/" + _quote(id_or_name), url=url, token=token, socket=socket,
                      token_file=token_file)

    def remove(self, *, keep_files: bool = False) -> List[str]:
        """Removes the sandbox (and its files volume unless ``keep_files``)."""
        doc = self._client.json("DELETE", self._base, query={"keep_files": keep_files or None})
        removed = doc.get("removed") if isinstance(doc, dict) else None
        return [str(x) for x in removed] if isinstance(removed, list) else []

    def kill(self) -> List[str]:
        """E2B's name for :meth:`remove`."""
        return self.remove()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.remove()
        except NotFound:
            pass
        finally:
            self.close()

    def __repr__(self) -> str:
        return "Sandbox(id=%r, name=%r)" % (self.id, self.name)


class Session(_Workbench):
    """A Composio-shaped session: at most one sandbox, made on the first sandbox call
    (``run_code``, ``commands``, ``files``, ``fs``...). A session created with
    ``sandbox_enable=False`` answers every sandbox call with :class:`SandboxDisabled`.
    ``with Session.create() as s:`` deletes the session and its sandbox at the end."""

    def __init__(self, doc: Dict[str, Any], client: Client, *, owns_client: bool = False) -> None:
        self._info = SessionInfo(doc)
        if not self._info.session_id:
            raise ProtocolError("the server described a session without an id")
        super().__init__(client, "/v1/sessions/" + _quote(self._info.session_id), owns_client)

    @property
    def session_id(self) -> str:
        return self._info.session_id

    @property
    def id(self) -> str:
        return self._info.session_id

    @property
    def user_id(self) -> str:
        return self._info.user_id

    @property
    def last_info(self) -> SessionInfo:
        return self._info

    @classmethod
    def create(
        cls,
        user_id: Optional[str] = None,
        sandbox_enable: bool = True,
        sandbox_size: Optional[str] = None,
        *,
        client: Optional[Client] = None,
        url: Optional[str] = None,
        token: Optional[str] = None,
        socket: Optional[str] = None,
        token_file: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> "Session":
        c = make_client(client, url=url, token=token, socket=socket, token_file=token_file, timeout=timeout)
        sandbox: Dict[str, Any] = {"enable": bool(sandbox_enable)}
        if sandbox_size is not None:
            sandbox["sandbox_size"] = sandbox_size
        body: Dict[str, Any] = {"sandbox": sandbox}
        if user_id is not None:
            body["user_id"] = user_id
        doc = c.json("POST", "/v1/sessions", json_body=body)
        return cls(doc, c, owns_client=client is None)

    @classmethod
    def connect(
        cls,
        session_id: str,
        *,
        client: Optional[Client] = None,
        url: Optional[str] = None,
        token: Optional[str] = None,
        socket: Optional[str] = None,
        token_file: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> "Session":
        c = make_client(client, url=url, token=token, socket=socket, token_file=token_file, timeout=timeout)
        return cls(c.json("GET", "/v1/sessions/" + _quote(session_id)), c, owns_client=client is None)

    @classmethod
    def list(
        cls,
        user_id: Optional[str] = None,
        *,
        client: Optional[Client] = None,
        url: Optional[str] = None,
        token: Optional[str] = None,
        socket: Optional[str] = None,
        token_file: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> List[SessionInfo]:
        doc = _request_once(client, "GET", "/v1/sessions", query={"user_id": user_id}, url=url, token=token, socket=socket,
                            token_file=token_file, timeout=timeout)
        sessions = [SessionInfo(x) for x in _list_of(doc, "sessions")]
        return [s for s in sessions if user_id is None or s.user_id == user_id]

    def info(self) -> SessionInfo:
        self._info = SessionInfo(self._client.json("GET", self._base))
        return self._info

    @property
    def sandbox_id(self) -> Optional[str]:
        """The session's sandbox once made (as last fetched; :meth:`info` refreshes)."""
        return self._info.sandbox_id

    def resize(self, size: str) -> SessionInfo:
        """Resizes the session's sandbox live (or sets the size it will be made with)."""
        self._info = SessionInfo(self._client.json("PATCH", self._base, json_body={"sandbox": {"sandbox_size": size}}))
        return self._info

    def delete(self) -> List[str]:
        """Deletes the session and its sandbox."""
        doc = self._client.json("DELETE", self._base)
        removed = doc.get("removed") if isinstance(doc, dict) else None
        return [str(x) for x in removed] if isinstance(removed, list) else []

    def kill(self) -> List[str]:
        return self.delete()

    remove = delete

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.delete()
        except NotFound:
            pass
        finally:
            self.close()

    def __repr__(self) -> str:
        return "Session(session_id=%r, user_id=%r)" % (self.session_id, self.user_id)
