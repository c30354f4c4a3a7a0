"""nsbox.agents against the OpenAI Agents SDK's contract (reference §4, items 1-6, 8-11, 13-16,
18 and 21, as they apply to nsbox: the manifest's root is the sandbox's workspace root,
/home/user when it names none; mounts are served from the host; snapshots are workspace
archives). test_agents_workspace.py has the /workspace root and the archives in detail."""
from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
import time
import urllib.request
import zipfile
from typing import Any

import pytest

import nsbox
from conftest import S3rver, Server, arun
from nsbox import agents
from nsbox.agents import Dir, File, Manifest, NsboxSandboxClient


# -- 1: fresh workspace; delete removes it; another root is refused ----------------------

def test_1_default_create_gives_a_fresh_private_workspace_that_delete_removes(sdk: NsboxSandboxClient,
                                                                               server: Server) -> None:
    async def scenario() -> None:
        a = await sdk.create()
        b = await sdk.create()
        try:
            async with a, b:
                assert await a.running() and await b.running()
                home = await a.exec("ls -A /home/user")
                assert home.ok()
                await a.write("secret.txt", io.BytesIO(b"only a"))
                assert (await a.read("secret.txt")).read() == b"only a"
                with pytest.raises(agents.WorkspaceReadNotFoundError):
                    await b.read("secret.txt")
                assert a.sandbox.id != b.sandbox.id
        finally:
            await sdk.delete(a)
            await sdk.delete(b)
        assert not await a.running()
        with pytest.raises(agents.ExecTransportError):
            await a.exec("true")

    arun(scenario())
    assert server.sandboxes() == []


def test_1_a_root_is_used_as_written_and_one_the_server_cannot_take_is_refused_before_anything(
        sdk: NsboxSandboxClient, server: Server) -> None:
    async def scenario() -> None:
        # /home/user itself, spelt either way, and the SDK's /workspace are roots as written.
        for root, cwd in (("/home/user/", b"/home/user\n"), ("/workspace/", b"/workspace\n")):
            session = await sdk.create(manifest=Manifest(root=root, entries={"a.txt": File(content=b"x")}))
            try:
                assert (await session.exec("pwd; cat a.txt")).stdout == cwd + b"x"
                assert session.sandbox.info().raw["workspace_root"] == cwd.decode().strip()
            finally:
                await sdk.delete(session)
        # A relative root is refused here; one in the sandbox's own trees by the server
        # (422, its words kept), both before anything is made.
        with pytest.raises(agents.ConfigurationError) as e:
            await sdk.create(manifest=Manifest(root="workspace"))
        assert "absolute path" in str(e.value)
        with pytest.raises(agents.SandboxConfigError) as e2:
            await sdk.create(manifest=Manifest(root="/etc/app", entries={"a.txt": File(content=b"x")}))
        assert "belongs to the sandbox's system" in str(e2.value) and isinstance(e2.value.__cause__, nsbox.InvalidArgument)

    arun(scenario())
    assert server.sandboxes() == []


# -- 2: file / dir / nested children materialise with content and modes ------------------

def test_2_manifest_entries_materialise_with_content_and_modes(sdk: NsboxSandboxClient) -> None:
    manifest = Manifest(entries={
        "notes/todo.md": File(content=b"# todo\n"),
        "bin/run.sh": File(content="#!/bin/sh\necho ran\n"),
        "private.key": File(content=b"k", permissions=0o600),
        "perm.txt": File(content=b"p", permissions=agents.Permissions(owner=6, group=4, other=4)),
        "blob.bin": File(content=b"\x00\xff\xfe"),
        "data": Dir(children={"raw": Dir(children={"a.csv": File(content=b"1,2\n")}), "empty": Dir()},
                    group="user"),
        "locked": Dir(permissions="0700"),
    })

    async def scenario() -> None:
        session = await sdk.create(manifest=manifest)
        try:
            async with session:
                r = await session.exec("stat -c '%n %a %U:%G' notes/todo.md bin/run.sh private.key perm.txt "
                                       "data data/raw data/raw/a.csv data/empty locked notes")
                lines = r.stdout.decode().splitlines()
                assert lines == ["notes/todo.md 755 user:user", "bin/run.sh 755 user:user",
                                 "private.key 600 user:user", "perm.txt 644 user:user", "data 755 user:user",
                                 "data/raw 755 user:user", "data/raw/a.csv 755 user:user", "data/empty 755 user:user",
                                 "locked 700 user:user", "notes 755 user:user"], r
                assert (await session.read("notes/todo.md")).read() == b"# todo\n"
                assert (await session.read("/home/user/data/raw/a.csv")).read() == b"1,2\n"
                assert (await session.read("blob.bin")).read() == b"\x00\xff\xfe"
                assert (await session.exec("./bin/run.sh")).stdout == b"ran\n"
        finally:
            await sdk.delete(session)

    arun(scenario())


def test_2_a_group_other_than_user_is_refused(sdk: NsboxSandboxClient, server: Server) -> None:
    with pytest.raises(agents.ConfigurationError):
        arun(sdk.create(manifest=Manifest(entries={"a": File(content=b"x", group="wheel")})))
    assert server.sandboxes() == []


# -- 3: bad manifest keys fail before any side effect ------------------------------------

@pytest.mark.parametrize("entries,reason", [
    ({"/etc/x": File(content=b"x")}, "absolute"),
    ({"../x": File(content=b"x")}, "escape_root"),
    ({"a/../../x": File(content=b"x")}, "escape_root"),
    ({"C:\\x": File(content=b"x")}, "absolute"),
    ({"c:/x": File(content=b"x")}, "absolute"),
    ({"d": Dir(children={"/abs": File(content=b"x")})}, "absolute"),
    ({"d": Dir(children={"e": Dir(children={"../../../x": File(content=b"x")})})}, "escape_root"),
])
def test_3_absolute_or_escaping_manifest_keys_fail_before_any_side_effect(sdk: NsboxSandboxClient, server: Server,
                                                                          entries: Any, reason: str) -> None:
    ok = {"fine.txt": File(content=b"fine")}
    with pytest.raises(agents.InvalidManifestPathError) as e:
        arun(sdk.create(manifest=Manifest(entries={**ok, **entries})))
    assert e.value.context["reason"] == reason
    assert ("must be relative" if reason == "absolute" else "must not escape root") in str(e.value)
    assert server.sandboxes() == []


def test_3_the_server_refuses_escaping_keys_too(server: Server) -> None:
    c = server.client()
    try:
        for entries in ({"../x": {"type": "file", "content": "x"}},
                        {"d": {"type": "dir", "children": {"/x": {"type": "file"}}}}):
            with pytest.raises(nsbox.InvalidArgument):
                c.json("POST", "/v1/sandboxes", json_body={"manifest": {"entries": entries}})
        assert server.sandboxes() == []
    finally:
        c.close()


# -- 4: local sources: confined to the working directory or a grant, no symlink ------------

def _tree(base: str) -> None:
    os.makedirs(os.path.join(base, "src", "sub"))
    with open(os.path.join(base, "src", "a.txt"), "w") as f:
        f.write("alpha\n")
    with open(os.path.join(base, "src", "sub", "b.sh"), "w") as f:
        f.write("#!/bin/sh\necho b\n")
    os.chmod(os.path.join(base, "src", "sub", "b.sh"), 0o700)
    with open(os.path.join(base, "one.txt"), "w") as f:
        f.write("one\n")


def test_4_local_file_and_local_dir_copy_from_the_working_directory(sdk: NsboxSandboxClient, tmp_path: Any,
                                                                    monkeypatch: Any) -> None:
    _tree(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    manifest = Manifest(entries={"data": agents.LocalDir(src="src"), "copy.txt": agents.LocalFile(src="one.txt"),
                                 "nested": Dir(children={"again": agents.LocalDir(src=str(tmp_path / "src" / "sub"))})})

    async def scenario() -> None:
        session = await sdk.create(manifest=manifest)
        try:
            r = await session.exec("stat -c '%n %a %U' data/a.txt data/sub/b.sh copy.txt nested/again/b.sh && "
                                   "cat data/a.txt copy.txt && data/sub/b.sh")
            assert r.stdout.decode().splitlines() == ["data/a.txt 644 user", "data/sub/b.sh 700 user", "copy.txt 755 user",
                                                      "nested/again/b.sh 700 user", "alpha", "one", "b"], r
        finally:
            await sdk.delete(session)

    arun(scenario())


@pytest.mark.parametrize("case", ["outside", "dotdot", "symlink_in_path", "symlink_inside", "fifo_inside"])
def test_4_local_sources_outside_the_base_or_with_a_symlink_fail_before_anything(sdk: NsboxSandboxClient, server: Server,
                                                                                tmp_path: Any, monkeypatch: Any,
                                                                                case: str) -> None:
    base = tmp_path / "base"
    base.mkdir()
    _tree(str(base))
    outside = tmp_path / "outside.txt"
    outside.write_text("secret\n")
    os.symlink(str(base / "src"), str(base / "linked"))
    (base / "withlink").mkdir()
    os.symlink("/etc/passwd", str(base / "withlink" / "passwd"))
    (base / "withfifo").mkdir()
    os.mkfifo(str(base / "withfifo" / "pipe"))
    monkeypatch.chdir(base)
    entry, error, reason = {
        "outside": (agents.LocalFile(src=str(outside)), agents.LocalFileReadError, "outside_base_dir"),
        "dotdot": (agents.LocalFile(src="../outside.txt"), agents.LocalFileReadError, "path_escape"),
        "symlink_in_path": (agents.LocalFile(src="linked/a.txt"), agents.LocalFileReadError, "symlink_not_supported"),
        "symlink_inside": (agents.LocalDir(src="withlink"), agents.LocalDirReadError, "symlink_not_supported"),
        "fifo_inside": (agents.LocalDir(src="withfifo"), agents.LocalDirReadError, "special_file"),
    }[case]
    with pytest.raises(error) as e:
        arun(sdk.create(manifest=Manifest(entries={"fine.txt": File(content=b"x"), "x": entry})))
    assert e.value.context["reason"] == reason
    assert "secret" not in str(e.value)
    assert server.sandboxes() == []


def test_4_a_grant_lets_a_local_source_come_from_outside(sdk: NsboxSandboxClient, tmp_path: Any, monkeypatch: Any) -> None:
    (tmp_path / "base").mkdir()
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "cfg.toml").write_text("k = 1\n")
    monkeypatch.chdir(tmp_path / "base")
    manifest = Manifest(entries={"cfg.toml": agents.LocalFile(src=str(shared / "cfg.toml"))},
                        extra_path_grants=[agents.SandboxPathGrant(path=str(shared), read_only=True)])

    async def scenario() -> None:
        session = await sdk.create(manifest=manifest)
        try:
            assert (await session.read("cfg.toml")).read() == b"k = 1\n"
        finally:
            await sdk.delete(session)

    arun(scenario())


def test_4_the_server_refuses_host_sources_from_a_request(server: Server) -> None:
    c = server.client()
    try:
        for entry in ({"type": "local_dir", "src": "/etc"}, {"type": "git_repo", "repo": "/srv/repo.git"}):
            with pytest.raises(nsbox.PermissionDenied):
                c.json("POST", "/v1/sandboxes", json_body={"manifest": {"entries": {"x": entry}}})
        with pytest.raises(nsbox.PermissionDenied):
            c.json("POST", "/v1/sandboxes", json_body={"local_sources": {"base": "/"}})
        assert server.sandboxes() == []
    finally:
        c.close()


# -- 5: git_repo: cloned on the caller's side, sha refs detached, bad subpath first ----------

def _git(*args: str, cwd: str) -> str:
    return subprocess.run(["git", "-c", "user.email=t@nsbox", "-c", "user.name=t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True, timeout=60).stdout.strip()


def _bare_repo(tmp: Any) -> str:
    work = str(tmp / "work")
    os.makedirs(os.path.join(work, "pkg"))
    _git("init", "-q", "-b", "main", cwd=work)
    with open(os.path.join(work, "pkg", "m.py"), "w") as f:
        f.write("print('m')\n")
    _git("add", ".", cwd=work)
    _git("commit", "-q", "-m", "one", cwd=work)
    first = _git("rev-parse", "HEAD", cwd=work)
    with open(os.path.join(work, "later.txt"), "w") as f:
        f.write("later\n")
    _git("add", ".", cwd=work)
    _git("commit", "-q", "-m", "two", cwd=work)
    _git("clone", "-q", "--bare", work, str(tmp / "repo.git"), cwd=str(tmp))
    return first


def test_5_git_repo_at_a_branch_and_at_a_detached_commit(sdk: NsboxSandboxClient, tmp_path: Any, monkeypatch: Any) -> None:
    first = _bare_repo(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = set(os.listdir(tempfile.gettempdir()))
    manifest = Manifest(entries={"code": agents.GitRepo(repo="./repo.git", ref="main"),
                                 "old": agents.GitRepo(repo="./repo.git", ref=first[:12], subpath="pkg")})

    async def scenario() -> None:
        session = await sdk.create(manifest=manifest)
        try:
            r = await session.exec("find code old | sort")
            assert r.stdout.decode().split() == ["code", "code/later.txt", "code/pkg", "code/pkg/m.py", "old", "old/m.py"]
        finally:
            await sdk.delete(session)

    arun(scenario())
    assert not [n for n in set(os.listdir(tempfile.gettempdir())) - before if n.startswith("nsbox-git-")]  # clone removed


def test_5_git_repo_errors_are_typed_and_come_before_anything(sdk: NsboxSandboxClient, server: Server, tmp_path: Any,
                                                              monkeypatch: Any) -> None:
    _bare_repo(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = set(os.listdir(tempfile.gettempdir()))
    with pytest.raises(agents.GitSubpathError):
        arun(sdk.create(manifest=Manifest(entries={"c": agents.GitRepo(repo="./repo.git", subpath="nope")})))
    with pytest.raises(agents.GitCloneError) as e:
        arun(sdk.create(manifest=Manifest(entries={"c": agents.GitRepo(repo="./repo.git", ref="no-such-branch")})))
    assert "git clone failed for" in str(e.value)
    monkeypatch.setattr(shutil, "which", lambda *a, **k: None)
    with pytest.raises(agents.GitMissingInImageError):
        arun(sdk.create(manifest=Manifest(entries={"c": agents.GitRepo(repo="./repo.git")})))
    assert server.sandboxes() == []
    assert not [n for n in set(os.listdir(tempfile.gettempdir())) - before if n.startswith("nsbox-git-")]


# -- 6: file calls refuse ../ and symlink escapes ----------------------------------------

def test_6_file_calls_refuse_dotdot_and_symlink_escapes(sdk: NsboxSandboxClient) -> None:
    async def scenario() -> None:
        session = await sdk.create()
        try:
            async with session:
                assert (await session.exec("ln -s /etc outside && ln -s /etc/hostname leaf && mkdir -p in/d && "
                                           "echo inner > in/d/f && ln -s in/d inner_link")).ok()
                calls = [
                    lambda p: session.read(p),
                    lambda p: session.write(p, io.BytesIO(b"x")),
                    lambda p: session.ls(p),
                    lambda p: session.mkdir(p),
                    lambda p: session.rm(p),
                ]
                for path in ("../x", "a/../../x", "/etc/passwd", "/home/user/../root"):
                    for call in calls:
                        with pytest.raises(agents.InvalidManifestPathError):
                            await call(path)
                for path in ("outside/passwd", "outside/newfile", "outside", "leaf"):
                    with pytest.raises(agents.InvalidManifestPathError) as e:
                        await session.read(path) if path != "outside" else await session.ls(path)
                    assert "must not escape root" in str(e.value)
                with pytest.raises(agents.InvalidManifestPathError, match="must not escape root"):
                    await session.write("outside/owned", b"x")
                with pytest.raises(agents.InvalidManifestPathError, match="must not escape root"):
                    await session.mkdir("outside/newdir")
                with pytest.raises(agents.InvalidManifestPathError, match="must not escape root"):
                    await session.write("leaf", b"x")
                assert (await session.exec("test ! -e /etc/owned && test ! -e /etc/newdir")).ok()
                # A symlink that stays inside the root works, as in the SDK.
                assert (await session.read("inner_link/f")).read() == b"inner\n"
                assert [e.path for e in await session.ls("inner_link")] == ["/home/user/in/d/f"]
                # Removing a symlink removes the link, not what it points at.
                await session.rm("outside")
                assert (await session.exec("test ! -L outside && test -d /etc")).ok()
                # Lexical .. that stays inside is fine.
                await session.write("in/../top.txt", b"t")
                assert (await session.read("top.txt")).read() == b"t"
        finally:
            await sdk.delete(session)

    arun(scenario())


# -- 8: write makes parents; missing reads; rm of missing paths --------------------------

def test_8_write_makes_parents_and_missing_paths_behave_as_in_the_sdk(sdk: NsboxSandboxClient) -> None:
    async def scenario() -> None:
        session = await sdk.create()
        try:
            async with session:
                await session.write("deep/er/file.txt", io.BytesIO(b"deep"))
                assert (await session.read("deep/er/file.txt")).read() == b"deep"
                owner = await session.exec("stat -c %U deep deep/er deep/er/file.txt")
                assert owner.stdout == b"user\nuser\nuser\n"
                with pytest.raises(agents.WorkspaceReadNotFoundError) as e:
                    await session.read("nope.txt")
                assert str(e.value) == "file not found: nope.txt"
                await session.rm("nope", recursive=True)  # no-op
                with pytest.raises(agents.ExecNonZeroError):
                    await session.rm("nope")
                await session.mkdir("m/n", parents=True)
                await session.mkdir("m/n", parents=True)  # exists: fine with parents
                with pytest.raises(agents.ExecNonZeroError):
                    await session.mkdir("m/n")
                with pytest.raises(agents.ExecNonZeroError):
                    await session.mkdir("x/y/z")  # no parents
                entries = {e.path: e for e in await session.ls(".")}
                assert entries["/home/user/deep"].is_dir() and entries["/home/user/m"].kind == agents.EntryKind.DIRECTORY
                # (owner and group: docs/api.md lists them in fs:ls; this server leaves them out)
                await session.rm("deep", recursive=True)
                assert "/home/user/deep" not in [e.path for e in await session.ls("/home/user")]
        finally:
            await sdk.delete(session)

    arun(scenario())


# -- 9: cwd and HOME are the root; the manifest's environment reaches commands -----------

def test_9_exec_runs_in_the_root_with_the_manifest_environment(sdk: NsboxSandboxClient) -> None:
    async def scenario() -> None:
        session = await sdk.create(manifest=Manifest(environment={"MODE": "test",
                                                                  "ENTRY": agents.EnvEntry("v", description="d")}))
        try:
            async with session:
                assert (await session.exec("pwd")).stdout == b"/home/user\n"
                assert (await session.exec("echo", "$HOME", shell=True)).stdout == b"$HOME\n"  # quoted
                assert (await session.exec("echo $HOME $MODE $ENTRY")).stdout == b"/home/user test v\n"
                assert (await session.exec("printenv", "MODE", shell=False)).stdout == b"test\n"
                assert (await session.exec("echo", "a b", "c")).stdout == b"a b c\n"
                assert (await session.exec("pwd", shell=False)).stdout == b"/home/user\n"
                assert (await session.exec("echo hi", shell=["bash", "-c"])).stdout == b"hi\n"
                with pytest.raises(agents.ConfigurationError):
                    await session.exec("id", user="root")
                assert (await session.exec("id -un", user="user")).stdout == b"user\n"
        finally:
            await sdk.delete(session)

    arun(scenario())


def test_9_lazy_kernel_sessions_run_commands_without_a_kernel(sdk: NsboxSandboxClient) -> None:
    """options lazy_kernel: the SDK's commands work and no Python kernel runs until a cell;
    the option survives the session state's round trip."""
    async def scenario() -> None:
        options = agents.NsboxSandboxClientOptions(lazy_kernel=True)
        session = await sdk.create(options=options)
        try:
            async with session:
                assert (await session.exec("echo $((6 * 7))")).stdout == b"42\n"
                info = session.sandbox.info().raw
                assert info["lazy_kernel"] is True and info["kernel_state"] == "stopped", info
                assert session.sandbox.run_code("6 * 7").results == "42"  # a cell starts it
                assert session.sandbox.info().raw["kernel_state"] == "idle"
            back = sdk.deserialize_session_state(json.loads(json.dumps(sdk.serialize_session_state(session.state))))
            assert back.options.lazy_kernel is True
        finally:
            await sdk.delete(session)

    arun(scenario())


# -- 10: timeouts raise and leave nothing; non-zero exits are results -------------------

def test_10_exec_timeout_raises_and_leaves_no_process(sdk: NsboxSandboxClient) -> None:
    async def scenario() -> None:
        session = await sdk.create()
        try:
            async with session:
                begun = time.monotonic()
                with pytest.raises(agents.ExecTimeoutError) as e:
                    await session.exec("sleep 60 & sleep 60; echo never", timeout=1)
                # Killed at its deadline, not after the sleeps (60 s).
                assert time.monotonic() - begun < 45
                assert str(e.value) == "command timed out" and e.value.timeout_s == 1
                left = await session.exec("pgrep -x sleep", shell=True)
                assert left.exit_code == 1, left
                r = await session.exec("echo out; echo err >&2; exit 7")
                assert (r.exit_code, r.stdout, r.stderr, r.ok()) == (7, b"out\n", b"err\n", False)
                assert (await session.exec("true")).ok()
        finally:
            await sdk.delete(session)

    arun(scenario())


# -- 13: snapshots: stop persists, resume restores into a new sandbox ---------------------

def test_13_stop_persists_a_local_snapshot_and_resume_restores_it_after_the_sandbox_is_gone(sdk: NsboxSandboxClient,
                                                                                            tmp_path: Any) -> None:
    async def scenario() -> None:
        noop = await sdk.create()
        try:
            await noop.stop()  # the default spec persists nothing
            assert noop.state.snapshot == {"type": "noop"}
            with pytest.raises(agents.SnapshotNotRestorableError):
                await noop.hydrate_workspace()
        finally:
            await sdk.delete(noop)

        base = tmp_path / "snapshots"
        manifest = Manifest(root="/workspace", environment={"MODE": "mode-value-7q"})
        session = await sdk.create(snapshot=agents.LocalSnapshotSpec(base_path=base), manifest=manifest)
        gone_id = session.sandbox.id
        archive = base / (session.state.session_id + ".tar")
        try:
            await session.exec("mkdir -p notes && echo kept > notes/a.md && ln -s notes/a.md latest")
            await session.stop()
            assert session.state.snapshot == {"type": "local", "id": session.state.session_id, "base_path": str(base)}
            assert stat.S_IMODE(os.stat(archive).st_mode) == 0o600 and stat.S_IMODE(os.stat(base).st_mode) == 0o700
            with tarfile.open(archive) as t:
                assert sorted(t.getnames()) == ["latest", "notes", "notes/a.md"]
                assert t.getmember("latest").issym() and t.getmember("latest").linkname == "notes/a.md"
            # A second stop replaces it: one archive per session.
            await session.exec("echo newer > notes/b.md")
            await session.stop()
            assert os.listdir(base) == [archive.name]
            # hydrate_workspace() puts back what the last persist saw, and only that.
            await session.exec("rm -rf notes latest && echo extra > extra.txt")
            await session.hydrate_workspace()
            assert (await session.exec("cat latest notes/b.md; ls")).stdout == b"kept\nnewer\nlatest\nnotes\n"
            state = json.loads(json.dumps(sdk.serialize_session_state(session.state)))
        finally:
            await sdk.delete(session)
        # Its sandbox is gone: resume makes a new one from the archive the state names, its
        # env values from the trusted manifest (the state holds none).
        assert "mode-value-7q" not in json.dumps(state)
        resumed = await sdk.resume(sdk.deserialize_session_state(state), manifest=manifest)
        try:
            assert resumed.sandbox.id != gone_id
            assert (await resumed.exec("pwd; cat latest notes/b.md; echo $MODE")).stdout == \
                b"/workspace\nkept\nnewer\nmode-value-7q\n"
        finally:
            await sdk.delete(resumed)
        # Without its archive the state cannot be resumed, and nothing is made.
        os.unlink(archive)
        with pytest.raises(agents.WorkspaceStartError) as e:
            await sdk.resume(sdk.deserialize_session_state(state))
        assert isinstance(e.value.cause, agents.SnapshotNotRestorableError)

    arun(scenario())


# -- 18: serialized state holds no secret; resume reattaches -----------------------------

SECRET = "sEcReT-KeY-" + str(int(time.time()))
TOKEN_LIKE = "env-token-value-7f3a"


def test_18_state_has_no_secret_and_resume_reattaches_with_its_mounts(server: Server, s3rver: S3rver) -> None:
    sdk = NsboxSandboxClient(socket=server.socket, token=server.token)
    mount = agents.S3Mount("agents", access_key_id="S3RVER", secret_access_key=SECRET, endpoint_url=s3rver.endpoint,
                           region="us-east-1", read_only=False, mount_path="/data")
    manifest = Manifest(entries={"bucket": mount, "hello.txt": File(content=b"hi")},
                        environment={"API_TOKEN": TOKEN_LIKE})
    manifest = manifest.with_in_container_mount_credential_exposure_acknowledged("bucket")

    async def scenario() -> None:
        session = await sdk.create(manifest=manifest)
        try:
            async with session:
                assert (await session.exec("echo stored > /data/note.txt && cat /data/note.txt")).stdout == b"stored\n"
                # The credentials never entered the sandbox.
                leaked = await session.exec("grep -rsl -- '%s' /proc/*/environ /home/user /tmp; env" % SECRET)
                assert SECRET.encode() not in leaked.stdout
                assert (await session.exec("echo $API_TOKEN")).stdout == TOKEN_LIKE.encode() + b"\n"
            payload = sdk.serialize_session_state(session.state)
            text = json.dumps(payload)
            for forbidden in (SECRET, TOKEN_LIKE, server.token or "x" * 99, "host_path", "acknowledg"):
                assert forbidden not in text, forbidden
            assert payload["sandbox_id"] == session.sandbox.id

            # A new client, as after a restart of the agent's process.
            other = NsboxSandboxClient(url=server.url, token=server.token)
            state = other.deserialize_session_state(json.loads(text))
            trusted = Manifest(entries={"bucket": agents.S3Mount("agents", endpoint_url=s3rver.endpoint,
                                                                 region="us-east-1", read_only=False,
                                                                 mount_path="/data"),
                                        "hello.txt": File(content=b"hi")})
            resumed = await other.resume(state, manifest=trusted)
            async with resumed:
                assert resumed.sandbox.id == session.sandbox.id
                assert (await resumed.exec("cat /data/note.txt hello.txt")).stdout == b"stored\nhi"
            # Another topology fails before anything is touched.
            moved = Manifest(entries={"bucket": agents.S3Mount("agents", endpoint_url=s3rver.endpoint,
                                                               region="us-east-1", read_only=True,
                                                               mount_path="/data")})
            with pytest.raises(agents.MountConfigError):
                await other.resume(state, manifest=moved)
        finally:
            await sdk.delete(session)
        with pytest.raises(agents.WorkspaceStartError):
            await sdk.resume(state)

    arun(scenario())
    assert SECRET not in server.log()
    inspect_docs = json.dumps(server.sandboxes())
    assert SECRET not in inspect_docs


def test_14_15_16_snapshots_leave_mounts_and_ephemeral_entries_out_and_resume_makes_them_again(server: Server,
                                                                                              s3rver: S3rver,
                                                                                              tmp_path: Any) -> None:
    """Reference §4 item 14 (the archive holds neither mount, by entry path or mount_path,
    nor an ephemeral entry), 15 (a resume after the sandbox is gone makes the mounts and
    the ephemeral entries again), 16 (read-only by default and enforced; a failing mount
    says so without its secret)."""
    sdk = NsboxSandboxClient(socket=server.socket, token=server.token)

    def bucket(**kw: Any) -> Any:
        return agents.S3Mount("agents", access_key_id="S3RVER", secret_access_key=SECRET, endpoint_url=s3rver.endpoint,
                              region="us-east-1", **kw)

    manifest = Manifest(root="/workspace",
                        # ro's mount_path is a top-level name: the server's workspace replace does
                        # not keep a mount nested in a directory yet (it moves it aside and fails).
                        entries={"rw": bucket(read_only=False), "ro": bucket(mount_path="ro-data"),
                                 "kept.txt": File(content=b"kept"), "scratch.txt": File(content=b"s", ephemeral=True),
                                 "cache": Dir(ephemeral=True, children={"c.bin": File(content=b"c")})})

    async def scenario() -> None:
        session = await sdk.create(manifest=manifest, snapshot=agents.LocalSnapshotSpec(base_path=tmp_path))
        try:
            assert (await session.exec("echo in-bucket > rw/b.txt && cat /workspace/rw/b.txt")).stdout == b"in-bucket\n"
            denied = await session.exec("echo x > ro-data/nope.txt")
            assert denied.exit_code != 0 and b"Read-only file system" in denied.stderr, denied
            await session.stop()
            archive = tmp_path / (session.state.session_id + ".tar")
            with tarfile.open(archive) as t:
                names = t.getnames()
            assert "kept.txt" in names, names
            for left_out in ("rw", "ro", "ro-data", "scratch.txt", "cache", "cache/c.bin"):
                assert left_out not in names, (left_out, names)
            assert SECRET.encode() not in archive.read_bytes()
            state = json.loads(json.dumps(sdk.serialize_session_state(session.state)))
        finally:
            await sdk.delete(session)
        resumed = await sdk.resume(sdk.deserialize_session_state(state), manifest=manifest)
        try:
            assert resumed.sandbox.id != session.sandbox.id
            r = await resumed.exec("cat kept.txt scratch.txt cache/c.bin rw/b.txt ro-data/b.txt && echo ok")
            assert r.stdout == b"keptscin-bucket\nin-bucket\nok\n", r
            # The ephemeral entries made again are still left out of the next archive.
            await resumed.stop()
            with tarfile.open(archive) as t:
                assert not {"scratch.txt", "cache", "rw"} & set(t.getnames()), t.getnames()
        finally:
            await sdk.delete(resumed)
        # A mount that cannot be made says which, and never its secret.
        with pytest.raises(agents.SandboxError) as e:
            await sdk.create(manifest=Manifest(entries={"m": agents.S3Mount("no-such-bucket", access_key_id="S3RVER",
                                                                             secret_access_key=SECRET,
                                                                             endpoint_url=s3rver.endpoint,
                                                                             region="us-east-1")}))
        assert "no-such-bucket" in str(e.value) and SECRET not in str(e.value) and SECRET not in repr(e.value.context)

    arun(scenario())
    assert SECRET not in server.log()


def _tar(members: Any) -> bytes:
    """A tar of (TarInfo, data) pairs, as nsbox would never write it."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as t:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            t.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def _member(name: str, data: Any = b"x", kind: Any = None, target: str = "") -> Any:
    info = tarfile.TarInfo(name)
    if kind is not None:
        info.type = kind
        info.linkname = target
        data = None
    return info, data


def test_21_extract_refuses_traversal_absolute_links_out_hardlinks_and_limits(sdk: NsboxSandboxClient) -> None:
    """Reference §4 item 21, through the session's extract (tar and zip)."""
    good = _tar([_member("pkg/a.txt", b"alpha"), _member("pkg/link", kind=tarfile.SYMTYPE, target="a.txt")])
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("z/one.txt", "one")
    crafted = {
        "traversal": _tar([_member("ok.txt"), _member("../evil.txt")]),
        "absolute": _tar([_member("/etc/evil.txt")]),
        "symlink_out": _tar([_member("out", kind=tarfile.SYMTYPE, target="../../etc")]),
        "hardlink": _tar([_member("a"), _member("b", kind=tarfile.LNKTYPE, target="a")]),
        "device": _tar([(lambda i: (setattr(i, "type", tarfile.CHRTYPE), (i, None))[1])(tarfile.TarInfo("null"))]),
    }

    async def scenario() -> None:
        session = await sdk.create()
        try:
            await session.extract("unpacked", io.BytesIO(good))
            assert (await session.exec("cat unpacked/pkg/a.txt unpacked/pkg/link && stat -c %U unpacked/pkg/a.txt")).stdout \
                == b"alphaalphauser\n"
            await session.extract("z", zipped.getvalue(), compression_scheme="zip")
            assert (await session.read("z/z/one.txt")).read() == b"one"
            for case, archive in crafted.items():
                with pytest.raises(agents.WorkspaceArchiveWriteError) as e:
                    await session.extract("bad-" + case, archive)
                assert "refused" in e.value.context["message"], (case, e.value.context)
                listing = await session.exec("ls -A bad-%s 2>/dev/null; ls /etc/evil.txt 2>/dev/null; true" % case)
                assert listing.stdout == b"", (case, listing)  # nothing written
            many = _tar([_member("m%d" % i) for i in range(11)])
            with pytest.raises(agents.WorkspaceArchiveWriteError) as e:
                await session.extract("many", many, archive_limits={"max_members": 10})
            assert "more than 10 members" in e.value.context["message"]
            with pytest.raises(agents.WorkspaceArchiveWriteError) as e:
                await session.extract("big", _tar([_member("b", b"123456")]), archive_limits={"max_bytes": 5})
            assert "more than 5 bytes" in e.value.context["message"]
            # Never over an existing file.
            with pytest.raises(agents.WorkspaceArchiveWriteError):
                await session.extract("unpacked", _tar([_member("pkg/a.txt", b"changed")]))
            assert (await session.read("unpacked/pkg/a.txt")).read() == b"alpha"
            with pytest.raises(agents.InvalidManifestPathError):
                await session.extract("../outside", good)
        finally:
            await sdk.delete(session)

    arun(scenario())


def test_18_state_round_trips_without_a_server() -> None:
    manifest = Manifest(entries={"m": agents.S3Mount("b", access_key_id="AKIA-X", secret_access_key="shh"),
                                 "d": Dir(children={"f": File(content=b"c", permissions=0o640)})},
                        environment={"K": "v-secret"},
                        extra_path_grants=[agents.SandboxPathGrant("/tmp/shared", read_only=True)])
    state = agents.NsboxSandboxSessionState(sandbox_id="sbx-abc", manifest=manifest,
                                            options=agents.NsboxSandboxClientOptions(size="large", env={"E": "x-secret"}))
    client = NsboxSandboxClient(url="http://127.0.0.1:9", token="tok-secret")
    payload = client.serialize_session_state(state)
    text = json.dumps(payload)
    for forbidden in ("AKIA-X", "shh", "v-secret", "x-secret", "tok-secret"):
        assert forbidden not in text
    back = client.deserialize_session_state(json.loads(text))
    assert back.sandbox_id == "sbx-abc" and back.session_id == state.session_id
    assert back.options.size == "large"
    assert back.manifest.mount_topology() == manifest.mount_topology()
    assert back.manifest.extra_path_grants[0].read_only is True
    with pytest.raises(agents.ConfigurationError):
        client.deserialize_session_state({"type": "docker", "sandbox_id": "x"})


def test_an_exposed_port_is_a_loopback_forward_a_plain_client_opens(sdk: NsboxSandboxClient) -> None:
    """resolve_exposed_port: the server's forward of the sandbox's port, answered by a
    plain HTTP client on this machine with no token; the same again; kept in the state."""
    async def scenario() -> None:
        session = await sdk.create()
        try:
            await session.exec("mkdir -p site && echo from-inside > site/page.txt")
            await session.pty_exec_start("python3", "-m", "http.server", "8000", "--bind", "127.0.0.1",
                                         "--directory", "site", tty=False, yield_time_s=0.25)
            endpoint = await session.resolve_exposed_port(8000)
            assert endpoint.host == "127.0.0.1" and endpoint.tls is False and endpoint.port > 0
            assert await session.resolve_exposed_port(8000) == endpoint
            assert session.state.exposed_ports == (8000,)

            def fetch() -> bytes:  # no proxy: the forward is on this machine's loopback
                opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
                with opener.open(endpoint.url_for() + "/page.txt", timeout=5) as r:
                    return r.read()
            body = b""
            for _ in range(100):  # the server inside takes a moment to listen: bounded
                try:
                    body = await asyncio.to_thread(fetch)
                    break
                except OSError:
                    await asyncio.sleep(0.1)
            assert body == b"from-inside\n"
            with pytest.raises(agents.SandboxConfigError):
                await session.resolve_exposed_port(0)
        finally:
            await sdk.delete(session)

    arun(scenario())


def test_pty_sessions_through_the_sdk_shape(sdk: NsboxSandboxClient) -> None:
    """Reference §4 item 11: an echo round trip then exit 0, unknown ids, Ctrl-C reaching
    a `sleep 30` whose parent ignores SIGINT, stdin refused without tty, stop kills all."""
    async def scenario() -> None:
        session = await sdk.create()
        try:
            assert session.supports_pty() is True
            started = await session.pty_exec_start("bash", "--norc", "--noprofile", yield_time_s=0.5)
            sid = started.process_id
            assert sid is not None and started.exit_code is None
            echoed = await session.pty_write_stdin(session_id=sid, chars="echo round-$((20+1))\n", yield_time_s=1)
            assert b"round-21" in echoed.output
            ignoring = ("python3 -c \"import signal, subprocess; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                        "subprocess.run(['sleep', '30'], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)); "
                        "print('parent ' + 'survived')\"\n")
            await session.pty_write_stdin(session_id=sid, chars=ignoring, yield_time_s=0.5)
            interrupted = await session.pty_write_stdin(session_id=sid, chars="\u0003", yield_time_s=2)
            assert b"parent survived" in interrupted.output  # sleep died of SIGINT well before 30 s
            ended = await session.pty_write_stdin(session_id=sid, chars="exit 0\n", yield_time_s=2)
            assert ended.exit_code == 0 and ended.process_id is None
            with pytest.raises(agents.PtySessionNotFoundError):
                await session.pty_write_stdin(session_id=sid, chars="x")
            with pytest.raises(agents.PtySessionNotFoundError):
                await session.pty_write_stdin(session_id=999, chars="")

            quick = await session.pty_exec_start("echo", "done", tty=False, yield_time_s=2)
            assert quick.exit_code == 0 and b"done" in quick.output
            quiet = await session.pty_exec_start("sleep", "30", tty=False, yield_time_s=0.25)
            with pytest.raises(agents.SandboxConfigError):
                await session.pty_write_stdin(session_id=quiet.process_id, chars="x")
            await session.pty_exec_start("sleep", "300", yield_time_s=0.25)
            assert (await session.exec("pgrep -c -x sleep")).stdout == b"2\n"
            await session.stop()  # every PTY process ends
            # SIGKILL is sent at once; the processes are gone once the sandbox's init reaped
            # them, a moment later (seen late under ASan): bounded.
            left = b""
            for _ in range(100):
                left = (await session.exec("pgrep -c -x sleep || true")).stdout
                if left == b"0\n":
                    break
                await asyncio.sleep(0.1)
            assert left == b"0\n"
        finally:
            await sdk.delete(session)

    arun(scenario())