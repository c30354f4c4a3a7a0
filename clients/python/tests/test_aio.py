"""nsbox.aio: the same client, awaitable; callbacks plain or async; many calls at once."""
from __future__ import annotations

import asyncio
import os
from typing import Any, List, Tuple

import pytest

import nsbox
from conftest import Server, arun
from nsbox.aio import AsyncSandbox, AsyncSession


def test_async_sandbox_does_what_the_sync_one_does(server: Server, tmp_path: "os.PathLike[str]") -> None:
    async def scenario() -> str:
        async with AsyncSandbox.create(name="async-one", socket=server.socket, token=server.token) as sbx:
            assert sbx.id.startswith("sbx-") and sbx.name == "async-one"
            await sbx.run_code("x = 20")
            seen: List[Tuple[str, Any]] = []

            async def on_progress(step: str, metric: Any) -> None:
                await asyncio.sleep(0)
                seen.append(("progress", step))

            out: List[str] = []
            ex = await sbx.run_code("print('a'); set_progress('S', '1/1'); x + 1", on_stdout=out.append,
                                    on_progress=on_progress)
            assert ex.results == "21" and "".join(out) == "a\n" and seen == [("progress", "S")]
            r = await sbx.commands.run(["echo", "hi"])
            assert r.stdout == b"hi\n"
            up = await sbx.files.upload(b"payload", "p.txt")
            assert up.size == 7
            remote = await sbx.files.download("/mnt/files/p.txt")
            assert await remote.text() == "payload" and remote.download_url
            saved = await remote.save(os.path.join(str(tmp_path), "p.txt"))
            with pytest.raises(FileExistsError):
                await remote.save(saved)
            assert [e.name for e in await sbx.files.list_all() if not e.name.startswith(".")] == ["p.txt"]
            await sbx.fs.write("a/b.txt", "bee")
            assert await sbx.fs.read("a/b.txt") == b"bee"
            assert (await sbx.fs.stat("a")).is_dir
            assert [e.name for e in await sbx.fs.ls_all("a")] == ["b.txt"]
            assert (await sbx.resize("medium")).size == "medium"
            assert (await sbx.info()).status == "running"
            # Several calls at once on one sandbox: commands run in parallel, cells queue.
            results = await asyncio.gather(*(sbx.commands.run("echo %d" % i) for i in range(8)),
                                           *(sbx.run_code("x + %d" % i) for i in range(4)))
            assert [r.stdout for r in results[:8]] == [b"%d\n" % i for i in range(8)]
            assert [e.results for e in results[8:]] == [str(20 + i) for i in range(4)]
            return sbx.id

    sandbox_id = arun(scenario())
    assert sandbox_id not in [s["id"] for s in server.sandboxes()]


def test_awaiting_create_returns_a_sandbox_that_stays_until_removed(server: Server) -> None:
    async def scenario() -> None:
        sbx = await AsyncSandbox.create(socket=server.socket, token=server.token)
        try:
            again = await AsyncSandbox.connect(sbx.id, socket=server.socket, token=server.token)
            assert again.id == sbx.id
            assert sbx.id in [s.id for s in await AsyncSandbox.list(socket=server.socket, token=server.token)]
        finally:
            assert await sbx.kill() == [sbx.id]
        with pytest.raises(nsbox.NotFound):
            await sbx.info()

    arun(scenario())


def test_async_sessions_and_their_errors(server: Server) -> None:
    async def scenario() -> None:
        async with AsyncSession.create(user_id="async", sandbox_enable=False, url=server.url,
                                       token=server.token) as off:
            with pytest.raises(nsbox.SandboxDisabled):
                await off.run_code("1")
        async with AsyncSession.create(user_id="async", url=server.url, token=server.token) as on:
            assert (await on.run_code("2 * 21")).results == "42"
            assert (await on.info()).sandbox_id

    arun(scenario())
    assert server.sandboxes() == []
