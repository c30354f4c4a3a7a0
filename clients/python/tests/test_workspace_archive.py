"""The workspace root as one tar archive (docs/api.md, "Workspace archives"): a sandbox's
``workspace_archive``, ``save_workspace_archive`` and ``replace_workspace`` against the
real server of conftest.py, and an archive cut short by a stand-in server on a unix
socket, which must fail and never be taken for a whole one."""
from __future__ import annotations

import asyncio
import io
import os
import socket
import tarfile
import tempfile
import threading
from typing import Dict, Iterator, List

import pytest

import nsbox
from nsbox.aio import AsyncSandbox


def _tar(members: List[tarfile.TarInfo], contents: Dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as t:
        for m in members:
            data = contents.get(m.name)
            if data is not None:
                m.size = len(data)
            t.addfile(m, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def _file(name: str, mode: int = 0o644) -> tarfile.TarInfo:
    m = tarfile.TarInfo(name)
    m.mode = mode
    return m


def _link(name: str, target: str) -> tarfile.TarInfo:
    m = tarfile.TarInfo(name)
    m.type = tarfile.SYMTYPE
    m.linkname = target
    return m


def _members(archive: bytes) -> Dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as t:
        return {m.name.rstrip("/"): m for m in t.getmembers()}


def _sh(sbx: nsbox.Sandbox, command: str) -> str:
    r = sbx.commands.run(command, timeout=60)
    assert r.exit_code == 0, (command, r.stdout, r.stderr)
    return r.stdout.decode()


@pytest.fixture()
def two(sock_client: nsbox.Client) -> Iterator[List[nsbox.Sandbox]]:
    made: List[nsbox.Sandbox] = []
    try:
        for _ in range(2):
            made.append(nsbox.Sandbox.create(lazy_kernel=True, client=sock_client))
        yield made
    finally:
        for sbx in made:
            try:
                sbx.remove()
            except nsbox.NotFound:
                pass


def test_an_archive_round_trips_files_modes_and_a_symlink_kept_as_a_link(two: List[nsbox.Sandbox]) -> None:
    source, target = two
    _sh(source, "mkdir -p data private && printf 'q\\n3\\n' > data/sales.csv && printf '#!/bin/sh\\necho ran\\n' > run.sh"
                " && chmod 0755 run.sh && printf s > private/key && chmod 0600 private/key && chmod 0700 private"
                " && ln -s data/sales.csv latest")
    archive = source.workspace_archive()
    members = _members(archive)
    assert {"data", "data/sales.csv", "run.sh", "private", "private/key", "latest"} <= set(members), sorted(members)
    assert members["latest"].issym() and members["latest"].linkname == "data/sales.csv"
    assert members["run.sh"].mode & 0o777 == 0o755
    assert members["private/key"].mode & 0o777 == 0o600
    assert members["private"].isdir() and members["private"].mode & 0o777 == 0o700

    # Saved to a file object and to a path: the same members as the bytes.
    buf = io.BytesIO()
    assert source.save_workspace_archive(buf) == len(buf.getvalue()) > 0
    assert set(_members(buf.getvalue())) == set(members)
    with tempfile.TemporaryDirectory(prefix="nsbox-test-archive-") as d:
        path = os.path.join(d, "ws.tar")
        n = source.save_workspace_archive(path)
        assert os.path.getsize(path) == n and os.stat(path).st_mode & 0o777 == 0o600
        assert set(_members(open(path, "rb").read())) == set(members)
        with pytest.raises(FileExistsError):
            source.save_workspace_archive(path)
        assert os.listdir(d) == ["ws.tar"], "a refused save leaves no partial file"

        done = target.replace_workspace(path)
    assert done["path"] == "/home/user" and done["members"] >= 6, done
    assert _sh(target, "readlink latest; cat latest; ./run.sh; stat -c '%a %n' run.sh private private/key") == \
        "data/sales.csv\nq\n3\nran\n755 run.sh\n700 private\n600 private/key\n"


def test_a_stopped_sandbox_is_exported_and_refuses_a_replace(sandbox: nsbox.Sandbox) -> None:
    sandbox.fs.write("notes/kept.md", "# kept\n")
    sandbox.stop()
    members = _members(sandbox.workspace_archive())
    assert "notes/kept.md" in members
    with pytest.raises(nsbox.SandboxDead):
        sandbox.replace_workspace(_tar([_file("x.txt")], {"x.txt": b"x"}))


@pytest.mark.parametrize("members,contents,named", [
    ([_file("ok.txt"), _file("../x")], {"ok.txt": b"ok", "../x": b"out"}, "../x"),
    ([_file("ok.txt"), _link("passwd", "/etc/passwd")], {"ok.txt": b"ok"}, "passwd"),
    ([_file("ok.txt"), _link("up", "../../etc")], {"ok.txt": b"ok"}, "up"),
])
def test_an_archive_climbing_or_linking_out_is_refused_and_changes_nothing(
        sandbox: nsbox.Sandbox, members: List[tarfile.TarInfo], contents: Dict[str, bytes], named: str) -> None:
    sandbox.fs.write("before.txt", "before\n")
    with pytest.raises(nsbox.InvalidArgument) as refused:
        sandbox.replace_workspace(_tar(members, contents))
    assert refused.value.status == 422 and "'%s'" % named in refused.value.message, refused.value.message
    assert sandbox.fs.read_text("before.txt") == "before\n"
    assert not sandbox.fs.exists("ok.txt"), "a refused archive wrote a member"
    assert not sandbox.fs.exists("/home/x")


def test_replace_removes_what_the_archive_does_not_hold_from_bytes_a_path_or_a_stream(sandbox: nsbox.Sandbox) -> None:
    _sh(sandbox, "mkdir -p old/deep && echo a > a.txt && echo b > old/deep/b.txt")
    first = _tar([_file("c.txt")], {"c.txt": b"c\n"})
    assert sandbox.replace_workspace(first) == {"path": "/home/user", "members": 1, "bytes": 2}
    assert _sh(sandbox, "find . -mindepth 1 -not -name '.*' -not -path './.*' | sort") == "./c.txt\n"

    # A file object without a known length goes chunked; it is read to its end.
    class Unsized(io.RawIOBase):
        def __init__(self, data: bytes) -> None:
            self._inner = io.BytesIO(data)

        def readable(self) -> bool:
            return True

        def readinto(self, b: "bytearray") -> int:  # type: ignore[override]
            chunk = self._inner.read(min(len(b), 4096))
            b[:len(chunk)] = chunk
            return len(chunk)

    big = os.urandom(300_000)
    second = _tar([_file("d/blob.bin", 0o640)], {"d/blob.bin": big})
    assert sandbox.replace_workspace(io.BufferedReader(Unsized(second)))["members"] >= 1
    assert not sandbox.fs.exists("c.txt")
    assert sandbox.fs.read("d/blob.bin") == big
    assert sandbox.fs.stat("d/blob.bin").mode & 0o777 == 0o640


def test_a_workspace_root_archive_holds_the_workspaces_files_and_not_the_homes(sock_client: nsbox.Client) -> None:
    with nsbox.Sandbox.create(workspace_root="/workspace", lazy_kernel=True, client=sock_client) as sbx:
        _sh(sbx, "echo w > /workspace/w.txt && echo secret > /home/user/.netrc && mkdir -p /home/user/elsewhere"
                 " && echo e > /home/user/elsewhere/e.txt && pip --version > /dev/null")
        names = set(_members(sbx.workspace_archive()))
        assert names == {"w.txt"}, sorted(names)
        done = sbx.replace_workspace(_tar([_file("new.txt")], {"new.txt": b"n"}))
        assert done["path"] == "/workspace"
        assert _sh(sbx, "ls -A /workspace; cat /home/user/.netrc /home/user/elsewhere/e.txt") == "new.txt\nsecret\ne\n"


def test_the_async_twins_export_and_replace(sock_client: nsbox.Client) -> None:
    async def go() -> None:
        async with AsyncSandbox.create(lazy_kernel=True, client=sock_client) as sbx:
            await sbx.replace_workspace(_tar([_file("from-async.txt")], {"from-async.txt": b"a"}))
            assert "from-async.txt" in _members(await sbx.workspace_archive())
            out = io.BytesIO()
            assert await sbx.save_workspace_archive(out) == len(out.getvalue())
    asyncio.run(asyncio.wait_for(go(), 180))


# -- an archive cut short --------------------------------------------------------------

class CuttingServer:
    """A unix socket whose other end answers every request with the head of a chunked
    tar answer and one 512-byte chunk, then closes: no last chunk."""

    def __init__(self) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="nsbox-test-cut-", dir="/tmp")
        self.path = os.path.join(self.dir.name, "api.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(4)
        self.listener.settimeout(30)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                peer, _ = self.listener.accept()
            except OSError:
                return
            with peer:
                peer.settimeout(30)
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = peer.recv(4096)
                    if not chunk:
                        break
                    head += chunk
                peer.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-tar\r\nTransfer-Encoding: chunked\r\n\r\n"
                             b"200\r\n" + b"\0" * 512 + b"\r\n")

    def close(self) -> None:
        self.listener.close()
        self.thread.join(30)
        self.dir.cleanup()


@pytest.fixture()
def cut() -> Iterator[nsbox.Sandbox]:
    server = CuttingServer()
    client = nsbox.Client(socket=server.path, token="t0ken", timeout=10)
    try:
        yield nsbox.Sandbox({"id": "sbx-cut"}, client)
    finally:
        client.close()
        server.close()


def test_an_archive_cut_short_raises_and_leaves_no_file(cut: nsbox.Sandbox, tmp_path: "os.PathLike[str]") -> None:
    with pytest.raises(nsbox.ServerUnreachable):
        cut.workspace_archive()
    with pytest.raises(nsbox.ServerUnreachable):
        cut.save_workspace_archive(io.BytesIO())
    dest = os.path.join(os.fspath(tmp_path), "ws.tar")
    with pytest.raises(nsbox.ServerUnreachable):
        cut.save_workspace_archive(dest)
    assert os.listdir(os.fspath(tmp_path)) == [], "a cut archive left a file"
