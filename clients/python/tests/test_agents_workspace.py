"""nsbox.agents on the server's workspace roots and workspace archives: a manifest's root is
the sandbox's `workspace_root` as written (the SDK's /workspace), and persist_workspace,
hydrate_workspace and the snapshot specs move the root as one tar (GET/PUT
.../workspace.tar), against a real `nsbox serve` (conftest.py)."""
from __future__ import annotations

import io
import json
import os
import tarfile
from typing import Any, Dict

import pytest

import nsbox
from conftest import Server, arun
from nsbox import agents
from nsbox.agents import Dir, File, Manifest, NsboxSandboxClient


def _names(archive: bytes) -> Dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as t:
        return {m.name: m for m in t.getmembers()}


def test_a_manifest_rooted_at_workspace_runs_commands_there_and_session_files_land_there(sdk: NsboxSandboxClient) -> None:
    manifest = Manifest(root="/workspace", environment={"MODE": "ws"}, entries={
        "notes/todo.md": File(content=b"# todo\n"),
        "bin": Dir(children={"where.sh": File(content="#!/bin/sh\necho ran in $(pwd)\n")}),
    })

    async def scenario() -> None:
        session = await sdk.create(manifest=manifest)
        try:
            async with session:
                assert session.sandbox.info().raw["workspace_root"] == "/workspace"
                assert session.describe().splitlines()[0] == "/workspace"
                assert (await session.exec("pwd")).stdout == b"/workspace\n"
                assert (await session.exec("pwd", shell=False)).stdout == b"/workspace\n"
                assert (await session.exec("echo $HOME $MODE")).stdout == b"/home/user ws\n"  # HOME stays the home
                assert (await session.exec("./bin/where.sh; cat /workspace/notes/todo.md")).stdout == \
                    b"ran in /workspace\n# todo\n"
                # The session's file calls take paths as the model sees them.
                await session.write("out/report.txt", io.BytesIO(b"done"))
                assert (await session.exec("cat /workspace/out/report.txt; stat -c ' %U' /workspace/out/report.txt"
                                           )).stdout == b"done user\n"
                assert (await session.read("/workspace/out/report.txt")).read() == b"done"
                await session.write("/workspace/abs.txt", b"absolute")
                assert (await session.exec("cat abs.txt")).stdout == b"absolute"
                await session.mkdir("made/deep", parents=True)
                assert sorted(e.path for e in await session.ls(".")) == [
                    "/workspace/abs.txt", "/workspace/bin", "/workspace/made", "/workspace/notes", "/workspace/out"]
                await session.rm("out", recursive=True)
                assert (await session.exec("test ! -e /workspace/out && test -d /workspace/made/deep")).ok()
                tar = io.BytesIO()
                with tarfile.open(fileobj=tar, mode="w") as t:
                    info = tarfile.TarInfo("pkg/a.txt")
                    info.size = 5
                    t.addfile(info, io.BytesIO(b"alpha"))
                await session.extract("unpacked", tar.getvalue())
                assert (await session.exec("cat /workspace/unpacked/pkg/a.txt")).stdout == b"alpha"
                started = await session.pty_exec_start("pwd", tty=False, yield_time_s=2)
                assert b"/workspace" in started.output
                # The home is outside this root: the SDK's path rule refuses it, and the root
                # itself cannot be removed.
                for outside in ("/home/user/.profile", "../etc/passwd"):
                    with pytest.raises(agents.InvalidManifestPathError):
                        await session.read(outside)
                with pytest.raises(agents.InvalidManifestPathError):
                    await session.rm("/workspace/", recursive=True)
        finally:
            await sdk.delete(session)

    arun(scenario())


_LAYOUT = ("mkdir -p src/pkg && printf 'print(1)\\n' > src/pkg/m.py && chmod 700 src/pkg && "
           "ln -s src/pkg/m.py main.py && ln -s src srclink && ln -s /etc/passwd out && echo changed > kept.txt")


def test_persist_then_delete_then_hydrate_into_a_fresh_sandbox_restores_files_and_symlinks(sdk: NsboxSandboxClient,
                                                                                          tmp_path: Any) -> None:
    async def scenario() -> None:
        first = await sdk.create(manifest=Manifest(root="/workspace", entries={
            "kept.txt": File(content=b"kept", permissions=0o640), "scratch.txt": File(content=b"s", ephemeral=True)}))
        try:
            assert (await first.exec(_LAYOUT)).ok()
            stream = await first.persist_workspace()
            with stream:
                archive = stream.read()
        finally:
            await sdk.delete(first)
        members = _names(archive)
        # Relative to the root; links kept as links; a link out of the root and the
        # ephemeral entry left out.
        assert sorted(members) == ["kept.txt", "main.py", "src", "src/pkg", "src/pkg/m.py", "srclink"], sorted(members)
        assert members["main.py"].issym() and members["main.py"].linkname == "src/pkg/m.py"

        second = await sdk.create(manifest=Manifest(root="/workspace", entries={"old.txt": File(content=b"old")}))
        try:
            await second.hydrate_workspace(io.BytesIO(archive))
            r = await second.exec("readlink main.py srclink; cat main.py srclink/pkg/m.py kept.txt; "
                                  "stat -c '%n %a %U' kept.txt src/pkg; ls -A")
            assert r.stdout.decode().splitlines() == [
                "src/pkg/m.py", "src", "print(1)", "print(1)", "changed",
                "kept.txt 640 user", "src/pkg 700 user",
                "kept.txt", "main.py", "src", "srclink"], r  # old.txt is gone: the archive did not hold it
            # A local file given as a pathlib.Path is streamed in the same way.
            (tmp_path / "ws.tar").write_bytes(archive)
            await second.exec("rm -rf src && echo again > new.txt")
            await second.hydrate_workspace(tmp_path / "ws.tar")
            assert (await second.exec("cat main.py; ls -A")).stdout == b"print(1)\nkept.txt\nmain.py\nsrc\nsrclink\n"
            # A refused archive changes nothing.
            evil = io.BytesIO()
            with tarfile.open(fileobj=evil, mode="w") as t:
                info = tarfile.TarInfo("../evil.txt")
                info.size = 1
                t.addfile(info, io.BytesIO(b"x"))
            with pytest.raises(agents.WorkspaceArchiveWriteError) as e:
                await second.hydrate_workspace(evil.getvalue())
            assert e.value.context["code"] == "invalid_argument" and "../evil.txt" in str(e.value.context["message"])
            assert (await second.exec("ls -A; test ! -e /evil.txt")).stdout == b"kept.txt\nmain.py\nsrc\nsrclink\n"
            # A str is neither bytes nor a path here (it was a server snapshot's id).
            with pytest.raises(agents.SandboxConfigError):
                await second.hydrate_workspace("snp-0123")
        finally:
            await sdk.delete(second)

    arun(scenario())


class MemoryStore:
    """A remote snapshot client of the SDK's shape: async upload, plain download and exists."""

    def __init__(self) -> None:
        self.archives: Dict[str, bytes] = {}

    async def upload(self, snapshot_id: str, data: Any) -> None:
        self.archives[snapshot_id] = data.read()

    def download(self, snapshot_id: str) -> io.BytesIO:
        return io.BytesIO(self.archives[snapshot_id])

    def exists(self, snapshot_id: str) -> bool:
        return snapshot_id in self.archives


def test_a_remote_snapshot_goes_through_the_bound_client_and_resume_remakes_ephemeral_entries(server: Server) -> None:
    store = MemoryStore()
    sdk = NsboxSandboxClient(socket=server.socket, token=server.token, dependencies={"snapshots": store})
    manifest = Manifest(root="/workspace", entries={
        "kept.txt": File(content=b"kept"),
        "cache": Dir(ephemeral=True, permissions=0o700, children={"c.bin": File(content=b"c", permissions=0o600)}),
        "tmp": Dir(permissions=0o750, children={"scratch.txt": File(content=b"s", ephemeral=True),
                                                "stays.txt": File(content=b"t")}),
    })

    async def scenario() -> None:
        session = await sdk.create(manifest=manifest, snapshot=agents.RemoteSnapshotSpec("snapshots"))
        try:
            assert (await session.exec("echo mine > mine.txt && ln -s kept.txt link && chmod 700 tmp")).ok()
            await session.stop()
            assert session.state.snapshot == {"type": "remote", "id": session.state.session_id,
                                              "client_dependency_key": "snapshots"}
            members = _names(store.archives[session.state.session_id])
            assert sorted(members) == ["kept.txt", "link", "mine.txt", "tmp", "tmp/stays.txt"], sorted(members)
            state = json.loads(json.dumps(sdk.serialize_session_state(session.state)))
        finally:
            await sdk.delete(session)
        # A new client, as after a restart of the agent's process, with the same store.
        later = NsboxSandboxClient(url=server.url, token=server.token, dependencies={"snapshots": store})
        resumed = await later.resume(later.deserialize_session_state(state))
        try:
            assert resumed.sandbox.id != session.sandbox.id
            r = await resumed.exec("pwd; readlink link; cat link mine.txt tmp/stays.txt tmp/scratch.txt cache/c.bin; "
                                   "echo; stat -c '%n %a' cache cache/c.bin tmp/scratch.txt tmp")
            assert r.stdout.decode().splitlines() == ["/workspace", "kept.txt", "keptmine", "tsc",
                                                      "cache 700", "cache/c.bin 600", "tmp/scratch.txt 755",
                                                      "tmp 700"], r  # the archive's mode, not the manifest's
        finally:
            await later.delete(resumed)
        # A client that has no such store refuses before anything is made.
        bare = NsboxSandboxClient(socket=server.socket, token=server.token)
        with pytest.raises(agents.SandboxConfigError, match="snapshots"):
            await bare.create(manifest=manifest, snapshot=agents.RemoteSnapshotSpec("snapshots"))
        with pytest.raises(agents.SandboxConfigError, match="snapshots"):
            await bare.resume(bare.deserialize_session_state(state))

    arun(scenario())
    assert server.sandboxes() == []


def test_a_local_snapshot_is_read_back_only_as_its_own_file(sdk: NsboxSandboxClient, server: Server,
                                                            tmp_path: Any) -> None:
    """A state is read back: its id never leaves its directory, and the archive is opened
    without following a link."""
    secret = tmp_path / "secret.tar"
    secret.write_bytes(b"\0" * 1024)

    async def scenario() -> None:
        with pytest.raises(agents.SandboxConfigError):
            await sdk.create(snapshot={"type": "local", "base_path": str(tmp_path / "snaps"), "id": "../secret"})
        session = await sdk.create(snapshot=agents.LocalSnapshotSpec(base_path=tmp_path / "snaps"))
        try:
            await session.stop()
            state = json.loads(json.dumps(sdk.serialize_session_state(session.state)))
        finally:
            await sdk.delete(session)
        own = tmp_path / "snaps" / (state["snapshot"]["id"] + ".tar")
        os.unlink(own)
        os.symlink(str(secret), str(own))
        with pytest.raises(agents.WorkspaceStartError) as e:
            await sdk.resume(sdk.deserialize_session_state(state))
        assert isinstance(e.value.cause, agents.SnapshotNotRestorableError)
        state["snapshot"]["id"] = "../secret"
        with pytest.raises(agents.WorkspaceStartError) as e:
            await sdk.resume(sdk.deserialize_session_state(state))
        assert isinstance(e.value.cause, agents.SnapshotNotRestorableError)

    arun(scenario())
    assert server.sandboxes() == []


def test_server_snapshot_specs_are_refused_and_a_state_naming_one_still_resumes(sdk: NsboxSandboxClient,
                                                                               server: Server) -> None:
    """NsboxSnapshotSpec is no longer persisted; a state serialized before (its snapshot a
    server snapshot) is still made again from it when its sandbox is gone."""
    async def scenario() -> None:
        with pytest.raises(agents.SandboxConfigError, match="LocalSnapshotSpec"):
            await sdk.create(snapshot=agents.NsboxSnapshotSpec())
        assert server.sandboxes() == []
        session = await sdk.create(manifest=Manifest(entries={"a.txt": File(content=b"from before")}))
        try:
            snap = session.sandbox.snapshot()
            state = json.loads(json.dumps(sdk.serialize_session_state(session.state)))
        finally:
            await sdk.delete(session)
        state["snapshot"] = {"type": "nsbox", "include_files": False, "id": snap.id}
        resumed = await sdk.resume(sdk.deserialize_session_state(state))
        try:
            assert resumed.sandbox.id != session.sandbox.id
            assert (await resumed.exec("pwd; cat a.txt")).stdout == b"/home/user\nfrom before"
        finally:
            await sdk.delete(resumed)
            nsbox.Sandbox.remove_snapshot(snap.id, client=sdk.client)

    arun(scenario())
