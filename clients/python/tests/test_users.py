"""Accounts of a sandbox (``users``, ``groups``) and ``run_as`` on commands, processes,
PTY sessions and fs calls, against a real `nsbox serve` of this module's own.

One sandbox with alice (uid picked by the server), bob (uid 1500) and a group "team"
holding alice serves the module; each test uses file names of its own in it. The
module's server is checked to hold no sandbox at its end.
"""
from __future__ import annotations

import asyncio
import os
import time
from typing import Iterator

import pytest

import nsbox
from nsbox.aio import AsyncCommands, AsyncFs

from conftest import Server, doctor_says_ok, started_server

ROOTLESS = os.geteuid() != 0
# Rootless, accounts need subordinate ids and newuidmap (doctor's `accounts` line).
NO_ACCOUNTS = ROOTLESS and not doctor_says_ok("accounts")
USERS = ["alice", {"name": "bob", "uid": 1500}]
GROUPS = [{"name": "team", "users": ["alice"]}]


@pytest.fixture(scope="module")
def accounts_server() -> Iterator[Server]:
    with started_server() as s:
        yield s


@pytest.fixture(scope="module")
def accounts(accounts_server: Server) -> Iterator[nsbox.Sandbox]:
    if NO_ACCOUNTS:
        pytest.skip("a rootless server without subordinate ids makes no accounts "
                    "(test_a_server_without_subordinate_ids_refuses_accounts checks it says so) [doctor: accounts]")
    c = accounts_server.client()
    try:
        with nsbox.Sandbox.create(users=USERS, groups=GROUPS, workspace_root="/workspace", lazy_kernel=True, client=c) as sbx:
            yield sbx
        assert accounts_server.sandboxes() == []
    finally:
        c.close()


def owner(sbx: nsbox.Sandbox, path: str) -> str:
    r = sbx.commands.run(["stat", "-c", "%U", path])
    assert r.exit_code == 0, r.stderr
    return r.stdout.decode().strip()


def test_the_sandbox_describes_its_accounts_with_the_ids_handed_out(accounts: nsbox.Sandbox) -> None:
    # alice and the group get the lowest free ids from 1001; bob keeps the one he asked for.
    assert accounts.last_info.raw["users"] == [{"name": "alice", "uid": 1001}, {"name": "bob", "uid": 1500}]
    assert accounts.last_info.raw["groups"] == [{"name": "team", "gid": 1002, "users": ["alice"]}]
    assert accounts.info().raw["users"] == accounts.last_info.raw["users"]


def test_each_account_runs_commands_as_itself(accounts: nsbox.Sandbox) -> None:
    seen = {who: accounts.commands.run("id -un; id -u", run_as=who).stdout.decode().split()
            for who in ("alice", "bob", None)}
    assert seen["alice"] == ["alice", "1001"]
    assert seen["bob"] == ["bob", "1500"]
    assert seen[None] == ["user", "1000"]
    groups = accounts.commands.run("id -Gn", run_as="alice").stdout.decode().split()
    assert "team" in groups
    assert "team" not in accounts.commands.run("id -Gn", run_as="bob").stdout.decode().split()


def test_the_workspace_root_is_sticky_and_world_writable(accounts: nsbox.Sandbox) -> None:
    r = accounts.commands.run("stat -c %a .")
    assert r.stdout.decode().strip() == "1777"


def test_a_file_alice_writes_by_command_is_hers_and_bob_can_neither_overwrite_nor_delete_it(
        accounts: nsbox.Sandbox) -> None:
    r = accounts.commands.run("echo from alice > by-command.txt", run_as="alice")
    assert r.exit_code == 0, r.stderr
    assert owner(accounts, "by-command.txt") == "alice"

    r = accounts.commands.run("echo from bob > by-command.txt", run_as="bob")
    assert r.exit_code != 0
    assert b"Permission denied" in r.stderr
    r = accounts.commands.run("rm -f by-command.txt", run_as="bob")
    assert r.exit_code != 0
    assert b"Operation not permitted" in r.stderr  # the sticky bit: not bob's file, not bob's directory
    assert accounts.fs.read("by-command.txt") == b"from alice\n"


def test_a_file_alice_writes_through_fs_is_hers_and_bob_gets_permission_denied(accounts: nsbox.Sandbox) -> None:
    written = accounts.fs.write("by-fs.txt", "alice's words", run_as="alice")
    assert written.path.endswith("/by-fs.txt")
    assert owner(accounts, "by-fs.txt") == "alice"
    assert accounts.fs.read_text("by-fs.txt", run_as="bob") == "alice's words"  # 0644: others may read

    with pytest.raises(nsbox.PermissionDenied) as overwrite:
        accounts.fs.write("by-fs.txt", "bob's words", run_as="bob")
    assert overwrite.value.status == 403
    assert "/workspace/by-fs.txt" in str(overwrite.value)
    assert "not permitted to bob" in str(overwrite.value)
    with pytest.raises(nsbox.PermissionDenied) as remove:
        accounts.fs.rm("by-fs.txt", run_as="bob")
    assert remove.value.status == 403
    assert accounts.fs.read_text("by-fs.txt") == "alice's words"
    assert accounts.fs.rm("by-fs.txt", run_as="alice") == [written.path]


def test_fs_mkdir_ls_and_stat_act_as_the_account(accounts: nsbox.Sandbox) -> None:
    made = accounts.fs.mkdir("bobs-dir", run_as="bob")
    assert owner(accounts, made) == "bob"
    accounts.fs.write("bobs-dir/note", "x", mode=0o600, run_as="bob")
    assert [e.name for e in accounts.fs.ls("bobs-dir", run_as="bob").entries] == ["note"]
    assert accounts.fs.stat("bobs-dir/note", run_as="alice").size == 1  # stat needs no read right
    with pytest.raises(nsbox.PermissionDenied, match="not permitted to alice"):
        accounts.fs.read("bobs-dir/note", run_as="alice")  # 0600, bob's
    assert accounts.fs.read("bobs-dir/note", run_as="bob") == b"x"


def test_an_unknown_account_is_not_found_naming_the_accounts_there(accounts: nsbox.Sandbox) -> None:
    calls = {
        "command": lambda: accounts.commands.run("true", run_as="carol"),
        "process": lambda: accounts.processes.start("true", run_as="carol"),
        "pty": lambda: accounts.pty_start("true", run_as="carol"),
        "fs": lambda: accounts.fs.stat(".", run_as="carol"),
    }
    for what, call in calls.items():
        with pytest.raises(nsbox.NotFound) as e:
            call()
        assert e.value.status == 404, what
        assert 'no user "carol"' in str(e.value), what
        assert "alice" in str(e.value) and "bob" in str(e.value), (what, str(e.value))


def test_a_process_started_as_bob_runs_as_bob_and_says_so(accounts: nsbox.Sandbox) -> None:
    pid = accounts.processes.start(["sleep", "60"], run_as="bob")
    try:
        listed = {p.pid: p for p in accounts.processes.list()}
        assert listed[pid].run_as == "bob"
        assert listed[pid].raw["run_as"] == "bob"
        assert owner(accounts, "/proc/%d" % pid) == "bob"
        plain = accounts.processes.start(["true"])
        assert accounts.processes.wait(plain, timeout_s=30).run_as is None  # the default is left out
        accounts.processes.kill(plain)
    finally:
        accounts.processes.kill(pid)


def test_a_pty_session_started_as_alice_is_alice(accounts: nsbox.Sandbox) -> None:
    sid = accounts.pty_start(["bash", "-c", "id -un; sleep 30"], run_as="alice")
    try:
        printed = ""
        deadline = time.monotonic() + 30
        while "alice" not in printed and time.monotonic() < deadline:
            printed += accounts.pty_read(sid, yield_ms=500).output or ""
        assert "alice" in printed
    finally:
        accounts.pty_kill(sid)


def test_the_async_twins_pass_run_as(accounts: nsbox.Sandbox) -> None:
    async def both() -> tuple:
        r = await AsyncCommands(accounts.commands).run("id -un", run_as="bob")
        await AsyncFs(accounts.fs).write("async-bob.txt", "b", run_as="bob")
        return r.stdout, await AsyncFs(accounts.fs).exists("async-bob.txt", run_as="alice")

    stdout, exists = asyncio.run(both())
    assert stdout == b"bob\n" and exists
    assert owner(accounts, "async-bob.txt") == "bob"


@pytest.mark.parametrize("users, message", [
    (["root"], 'user "root" is one of the sandbox\'s own accounts'),
    ([{"name": "carol", "uid": 1500}, {"name": "dave", "uid": 1500}], "user dave's id 1500 is another account's"),
    (["carol", "carol"], 'user "carol" is declared twice'),
])
def test_a_bad_declaration_is_refused_at_create_and_leaves_nothing(accounts_server: Server, users: list,
                                                                   message: str) -> None:
    if NO_ACCOUNTS:
        pytest.skip("a rootless server without subordinate ids refuses every declaration alike [doctor: accounts]")
    before = {s["id"] for s in accounts_server.sandboxes()}
    c = accounts_server.client()
    try:
        with pytest.raises(nsbox.InvalidArgument) as e:
            nsbox.Sandbox.create(users=users, lazy_kernel=True, client=c)
    finally:
        c.close()
    assert e.value.status == 422
    assert message in str(e.value)
    assert {s["id"] for s in accounts_server.sandboxes()} == before


@pytest.mark.skipif(not NO_ACCOUNTS, reason="this server makes accounts (as root, or with subordinate ids) [doctor: none]")
def test_a_server_without_subordinate_ids_refuses_accounts(accounts_server: Server) -> None:
    c = accounts_server.client()
    try:
        with pytest.raises(nsbox.Unsupported) as e:
            nsbox.Sandbox.create(users=["alice"], lazy_kernel=True, client=c)
    finally:
        c.close()
    assert e.value.status == 501
    assert "newuidmap" in str(e.value) or "subordinate ids" in str(e.value)
    assert accounts_server.sandboxes() == []


def test_an_archive_extracted_as_an_account_is_its_own_and_goes_only_where_it_may_write(accounts: nsbox.Sandbox) -> None:
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        member = tarfile.TarInfo("unpacked.txt")
        member.size = 3
        t.addfile(member, io.BytesIO(b"abc"))
    assert accounts.commands.run("mkdir -p alices-dir", run_as="alice").exit_code == 0
    accounts.fs.extract("alices-dir", buf.getvalue(), run_as="alice")
    owner = accounts.commands.run("stat -c %U alices-dir/unpacked.txt; cat alices-dir/unpacked.txt").stdout.decode()
    assert owner == "alice\nabc"
    with pytest.raises(nsbox.NsboxError):
        accounts.fs.extract("alices-dir/nested", buf.getvalue(), run_as="bob")  # alice's directory: bob may not write
    assert accounts.commands.run("ls alices-dir").stdout.decode().split() == ["unpacked.txt"]
