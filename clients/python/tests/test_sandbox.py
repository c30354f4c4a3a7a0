"""The client's main path against a real server: create, cells with state, commands, the
files volume round trip, signed links, fs, resize, interrupt, restart, remove."""
from __future__ import annotations

import hashlib
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

import nsbox
from conftest import Server, doctor_says_ok, wait_until

QUOTAS = doctor_says_ok("files quotas")


def test_create_keeps_state_between_cells_and_removes_on_exit(client: nsbox.Client, server: Server) -> None:
    with nsbox.Sandbox.create(name="state-" + ("s" if client.socket_path else "t"), env={"GREETING": "hello"},
                              client=client) as sbx:
        assert sbx.id.startswith("sbx-")
        info = sbx.info()
        assert info.status == "running" and info.size == "standard"
        assert info.env_names == ["GREETING"]
        assert "hello" not in repr(info.raw)  # env values are never echoed

        first = sbx.run_code("import os\nx = 6 * 7\ngreeting = os.environ['GREETING']")
        assert first.status == "ok" and first.error is None, first.raw
        second = sbx.run_code("f'{greeting} {x}'")
        assert second.results == "'hello 42'"
        assert second.execution_count is not None and second.execution_count > (first.execution_count or 0)

        failed = sbx.run_code("1 / 0")
        assert failed.status == "error"
        assert failed.error is not None and failed.error.name == "ZeroDivisionError"
        assert sbx.run_code("x").results == "42"  # an error loses nothing

        printed = sbx.run_code("print('out'); import sys; print('err', file=sys.stderr); output = 5")
        assert printed.stdout == "out\n" and printed.stderr == "err\n" and printed.results == "5"

        found = nsbox.Sandbox.connect(sbx.name, client=client)
        assert found.id == sbx.id
        assert sbx.id in [s.id for s in nsbox.Sandbox.list(client=client)]
    assert sbx.id not in [s["id"] for s in server.sandboxes()]
    with pytest.raises(nsbox.NotFound):
        nsbox.Sandbox.connect(sbx.id, client=client)


def test_a_cell_past_its_deadline_is_interrupted_and_keeps_its_globals(sandbox: nsbox.Sandbox) -> None:
    sandbox.run_code("kept = 'yes'")
    ex = sandbox.run_code("while True: pass", timeout=1)
    assert ex.status == "timeout", ex.raw
    assert not ex.state_lost
    assert sandbox.run_code("kept").results == "'yes'"


def test_interrupt_stops_the_running_cell_and_restart_clears_globals(sandbox: nsbox.Sandbox) -> None:
    sandbox.run_code("a = 1")
    result = {}

    def run() -> None:
        result["ex"] = sandbox.run_code("import time\nwhile True: time.sleep(0.05)", timeout=120)

    t = threading.Thread(target=run)
    t.start()
    # The interrupt only lands once the cell runs: ask until it has ended.
    deadline = time.monotonic() + 60
    while t.is_alive() and time.monotonic() < deadline:
        sandbox.interrupt()
        t.join(0.5)
    assert not t.is_alive()
    assert result["ex"].status == "interrupted", result["ex"].raw
    assert sandbox.run_code("a").results == "1"
    sandbox.restart()
    after = sandbox.run_code("a")
    assert after.status == "error" and after.error is not None and after.error.name == "NameError"


def test_commands_return_bytes_exit_codes_and_take_argv_stdin_env_cwd(sandbox: nsbox.Sandbox) -> None:
    r = sandbox.commands.run("echo hi; echo oops >&2; exit 3")
    assert (r.exit_code, r.stdout, r.stderr, r.status) == (3, b"hi\n", b"oops\n", "error")
    assert r.stdout_lines == 1 and r.stderr_lines == 1
    assert sandbox.commands.run(["printf", "%s|", "a b", "c"]).stdout == b"a b|c|"
    assert sandbox.commands.run("cat", stdin=b"\x00\xffbinary").stdout == b"\x00\xffbinary"
    assert sandbox.commands.run("printf '\\377\\000'").stdout == b"\xff\x00"
    assert sandbox.commands.run("echo $A-$HOME", env={"A": "x"}).stdout == b"x-/home/user\n"
    assert sandbox.commands.run("pwd", cwd="/tmp").stdout == b"/tmp\n"
    assert sandbox.commands.run("pwd").stdout == b"/home/user\n"
    assert sandbox.commands.run(["no-such-program"]).exit_code == 127
    t = sandbox.commands.run("sleep 30", timeout=1)
    assert t.status == "timeout" and t.timed_out


def test_files_round_trip_with_sha256_in_both_path_forms(sandbox: nsbox.Sandbox, tmp_path: "os.PathLike[str]") -> None:
    payload = os.urandom(300_000) + b"end"
    local = os.path.join(str(tmp_path), "blob.bin")
    with open(local, "wb") as f:
        f.write(payload)
    up = sandbox.files.upload(local, "data/")
    assert up.sandbox_mount_prefix == "/mnt/files"
    assert up.mount_relative_path == "data/blob.bin"
    assert up.size == len(payload)
    assert up.sha256 == hashlib.sha256(payload).hexdigest()

    # The sandbox sees it where the record says.
    seen = sandbox.commands.run(["sha256sum", "/mnt/files/data/blob.bin"]).stdout.split()[0].decode()
    assert seen == up.sha256

    for form in ("data/blob.bin", "/mnt/files/data/blob.bin"):
        remote = sandbox.files.download(form)
        assert remote.path == "/mnt/files/data/blob.bin"
        assert hashlib.sha256(remote.buffer()).hexdigest() == up.sha256

    small = sandbox.files.upload(b"a,b\n1,2\n", "/mnt/files/data/t.csv")
    assert small.mount_relative_path == "data/t.csv"
    assert sandbox.files.download("data/t.csv").text() == "a,b\n1,2\n"
    with open(local, "rb") as f:
        assert sandbox.files.upload(f, "data/from-file-object").sha256 == up.sha256

    names = [e.name for e in sandbox.files.list("data")]
    assert names == sorted(["blob.bin", "t.csv", "from-file-object"])
    page = sandbox.files.list("/mnt/files/data", limit=2)
    assert len(page) == 2 and page.next_cursor
    rest = sandbox.files.list("data", cursor=page.next_cursor)
    assert [e.name for e in page] + [e.name for e in rest] == names
    assert [e.path for e in sandbox.files.iter("data", page_size=1)] == ["/mnt/files/data/" + n for n in names]

    assert sandbox.files.delete("data/t.csv") == ["/mnt/files/data/t.csv"]
    with pytest.raises(nsbox.NotFound):
        sandbox.files.download("data/t.csv")
    with pytest.raises(nsbox.InvalidArgument):
        sandbox.files.delete("data")  # not empty
    sandbox.files.delete("/mnt/files/data", recursive=True)
    assert [e.name for e in sandbox.files.list() if not e.name.startswith(".")] == []
    with pytest.raises(nsbox.InvalidArgument):
        sandbox.files.upload(b"x", "../escape")
    with pytest.raises(nsbox.InvalidArgument):
        sandbox.files.upload(b"x", "/etc/passwd")


def test_remote_file_save_never_overwrites_without_being_asked(sandbox: nsbox.Sandbox, tmp_path: "os.PathLike[str]") -> None:
    sandbox.files.upload(b"new contents", "report.txt")
    remote = sandbox.files.download("report.txt")
    target = os.path.join(str(tmp_path), "report.txt")
    with open(target, "wb") as f:
        f.write(b"mine")
    with pytest.raises(FileExistsError):
        remote.save(target)
    with open(target, "rb") as f:
        assert f.read() == b"mine"
    assert remote.save(target, overwrite=True) == target
    with open(target, "rb") as f:
        assert f.read() == b"new contents"
    copy = remote.save(os.path.join(str(tmp_path), "copy.txt"))
    with open(copy, "rb") as f:
        assert f.read() == b"new contents"
    os.mkdir(os.path.join(str(tmp_path), "d"))
    assert remote.save(os.path.join(str(tmp_path), "d")) == os.path.join(str(tmp_path), "d", "report.txt")
    assert sorted(os.listdir(str(tmp_path))) == ["copy.txt", "d", "report.txt"]  # no temporary file left


def _get(url: str, timeout: float = 30):  # type: ignore[no-untyped-def]
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_signed_links_need_no_token_and_refuse_expired_or_altered_links(sandbox: nsbox.Sandbox) -> None:
    sandbox.files.upload(b"report body", "out/report.csv")
    remote = sandbox.files.download("/mnt/files/out/report.csv")
    assert remote.download_url and remote.download_url.startswith("http://127.0.0.1:")
    assert remote.expires is not None
    status, body = _get(remote.download_url)  # urllib sends no token
    assert (status, body) == (200, b"report body")

    parts = urllib.parse.urlsplit(remote.download_url)
    query = dict(urllib.parse.parse_qsl(parts.query))

    def with_query(**changes: str) -> str:
        q = dict(query, **changes)
        return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(q)))

    sig = query["signature"]
    altered_sig = ("A" if sig[0] != "A" else "B") + sig[1:]
    for altered in (with_query(signature=altered_sig), with_query(expires=str(int(query["expires"]) + 3600)),
                    with_query(path="/mnt/files/out/other.csv")):
        status, body = _get(altered)
        assert status == 403, (altered, body)
        assert b"permission_denied" in body
    sandbox.files.upload(b"other", "out/other.csv")
    assert _get(with_query(path="out/other.csv"))[0] == 403

    short = sandbox.files.download("out/report.csv", expires_in=1)
    assert wait_until(lambda: time.time() > int(dict(urllib.parse.parse_qsl(
        urllib.parse.urlsplit(short.download_url).query))["expires"]) + 1, 10)
    status, body = _get(short.download_url)
    assert status == 403 and b"permission_denied" in body

    with pytest.raises(nsbox.NotFound):
        sandbox.files.download("out/missing.csv")


def test_fs_reaches_the_whole_view_with_the_users_rights(sandbox: nsbox.Sandbox) -> None:
    w = sandbox.fs.write("src/app.py", "print('hi')\n")
    assert w.path == "/home/user/src/app.py" and w.size == 12
    assert sandbox.fs.read("/home/user/src/app.py") == b"print('hi')\n"
    assert sandbox.commands.run(["python3", "src/app.py"]).stdout == b"hi\n"
    sandbox.fs.write("/tmp/x/run.sh", b"#!/bin/sh\necho ran\n", mode=0o755)
    assert sandbox.commands.run("/tmp/x/run.sh").stdout == b"ran\n"

    entries = {e.name: e for e in sandbox.fs.ls("src")}
    assert entries["app.py"].type == "file" and entries["app.py"].size == 12
    st = sandbox.fs.stat("/tmp/x/run.sh")
    assert st.is_file and st.mode & 0o777 == 0o755
    assert sandbox.commands.run("stat -c %U:%a /tmp/x/run.sh /home/user/src").stdout == b"user:755\nuser:755\n"

    assert sandbox.fs.mkdir("a/b/c", parents=True) == "/home/user/a/b/c"
    with pytest.raises(nsbox.AlreadyExists):
        sandbox.fs.mkdir("a/b/c")
    sandbox.fs.mkdir("a/b/c", parents=True)
    assert sandbox.fs.exists("a/b/c") and not sandbox.fs.exists("a/nope")

    assert b"user:x:1000" in sandbox.fs.read("/etc/passwd")  # the sandbox's own, read-only view
    with pytest.raises(nsbox.PermissionDenied):
        sandbox.fs.write("/etc/evil", b"x")
    with pytest.raises(nsbox.PermissionDenied):
        sandbox.fs.write("/usr/bin/evil", b"x")
    with pytest.raises(nsbox.InvalidArgument):
        sandbox.fs.read("a/../../../etc/passwd")
    # /proc, /sys and /dev are no files of the sandbox: 403 (docs/api.md).
    with pytest.raises(nsbox.PermissionDenied):
        sandbox.fs.read("/proc/self/environ")
    with pytest.raises(nsbox.NotFound):
        sandbox.fs.read("missing.txt")

    assert sandbox.fs.rm("a", recursive=True) == ["/home/user/a"]
    sandbox.fs.rm("a", recursive=True)  # missing: no error (docs/api.md: removed [], the server echoes the path)
    with pytest.raises(nsbox.NotFound):
        sandbox.fs.rm("a")


def test_fs_and_files_refuse_a_symlink_made_inside_pointing_at_etc(sandbox: nsbox.Sandbox) -> None:
    made = sandbox.commands.run("ln -s /etc /home/user/etc_link && ln -s /etc /mnt/files/x && ln -s /etc/passwd leaf")
    assert made.exit_code == 0, made.stderr
    calls = {
        "fs read through a dir link": lambda: sandbox.fs.read("etc_link/passwd"),
        "fs read, absolute": lambda: sandbox.fs.read("/home/user/etc_link/hostname"),
        "fs ls of a dir link": lambda: sandbox.fs.ls("etc_link"),
        "fs write through a dir link": lambda: sandbox.fs.write("etc_link/owned", b"x"),
        "fs mkdir through a dir link": lambda: sandbox.fs.mkdir("etc_link/d"),
        "fs read of a file link": lambda: sandbox.fs.read("leaf"),
        "files download": lambda: sandbox.files.download("x/passwd"),
        "files read": lambda: sandbox.files.read_bytes("/mnt/files/x/passwd"),
        "files upload": lambda: sandbox.files.upload(b"x", "x/owned"),
        "files list": lambda: sandbox.files.list("x"),
    }
    not_refused = []
    for label, call in calls.items():
        try:
            call()
            not_refused.append(label)
        except nsbox.PermissionDenied:
            pass
    assert not_refused == []
    # A write to a symlink replaces the link (atomically, by rename): it never writes
    # through it.
    sandbox.fs.write("leaf", b"replaced")
    assert sandbox.commands.run("test ! -L leaf && cat leaf && grep -c root: /etc/passwd").stdout == b"replaced1\n"
    # Nothing was written through the links, and the links themselves are still there.
    assert sandbox.commands.run("test ! -e /etc/owned && test -L etc_link && test -L /mnt/files/x").exit_code == 0


def test_resize_is_live(sandbox: nsbox.Sandbox) -> None:
    sandbox.run_code("big = list(range(1000))")
    info = sandbox.resize("medium")
    assert info.size == "medium" and info.limits.get("vcpus") == 2
    assert sandbox.run_code("len(big)").results == "1000"
    with pytest.raises(nsbox.InvalidArgument):
        sandbox.resize("gigantic")
    assert sandbox.info().size == "medium"


def test_a_time_to_live_removes_the_sandbox_and_can_be_extended(sock_client: nsbox.Client) -> None:
    sbx = nsbox.Sandbox.create(ttl_s=600, client=sock_client)
    try:
        first = sbx.info().raw
        assert first["ttl_s"] == 600 and first["expires_at"].endswith("Z")
        with pytest.raises(nsbox.InvalidArgument):
            sbx.set_ttl(0)
        with pytest.raises(nsbox.MalformedRequest):
            sbx.set_ttl("soon")  # type: ignore[arg-type]
        shortened = sbx.set_ttl(1).raw
        assert shortened["expires_at"] < first["expires_at"]
        # Removed by its own supervisor: the server only finds it gone.
        assert wait_until(lambda: not sbx.is_running(), timeout=60)
        with pytest.raises(nsbox.NotFound):
            nsbox.Sandbox.connect(sbx.id, client=sock_client)
    finally:
        try:
            sbx.remove()
        except nsbox.NotFound:
            pass


def test_errors_are_exceptions_by_code(sock_client: nsbox.Client, sandbox: nsbox.Sandbox) -> None:
    with pytest.raises(nsbox.NotFound) as nf:
        nsbox.Sandbox.connect("no-such-sandbox", client=sock_client)
    assert nf.value.code == "not_found" and nf.value.status == 404 and nf.value.message
    with pytest.raises(nsbox.InvalidArgument) as bad:
        nsbox.Sandbox.create(size="enormous", client=sock_client)
    assert bad.value.status == 422
    with nsbox.Sandbox.create(name="twice", client=sock_client):
        with pytest.raises(nsbox.AlreadyExists) as dup:
            nsbox.Sandbox.create(name="twice", client=sock_client)
        assert dup.value.status == 409
    with pytest.raises(nsbox.MalformedRequest) as mal:
        sock_client.json("POST", "/v1/sandboxes", json_body={"sizee": "standard"})
    assert mal.value.status == 400 and "sizee" in mal.value.message
    with pytest.raises(nsbox.MalformedRequest):
        sock_client.request("POST", "/v1/sandboxes", body=b"{not json", headers={"Content-Type": "application/json"})
    with pytest.raises(nsbox.InvalidArgument):
        sandbox.run_code("1", timeout=0)
    with pytest.raises(nsbox.NotFound):
        sock_client.json("GET", "/v1/nothing-here")
    with pytest.raises(nsbox.NotFound):  # snapshots are made at POST /v1/snapshots
        sock_client.json("POST", "/v1/sandboxes/%s/snapshots" % sandbox.id)
    with pytest.raises(nsbox.InvalidArgument) as not_callback:  # its tools are not a client's to serve
        sock_client.json("GET", "/v1/sandboxes/%s/events" % sandbox.id)
    assert "callback" in not_callback.value.message
    assert all(issubclass(c, nsbox.NsboxError) for c in (nsbox.NotFound, nsbox.Timeout, nsbox.SandboxDisabled,
                                                          nsbox.QuotaExceeded, nsbox.Unauthorized))


def test_info_endpoint_reports_features(sock_client: nsbox.Client) -> None:
    info = sock_client.json("GET", "/v1/info")
    assert info["api_version"] == 1
    features = info["features"]
    assert features["cells"] is True and features["pty"] is True
    assert features["snapshots"] is True and features["stop_start"] is True


def test_stop_and_start_keep_home_and_files_and_lose_the_kernel(sock_client: nsbox.Client) -> None:
    with nsbox.Sandbox.create(env={"GREETING": "hi"}, home_size="64M", client=sock_client) as sbx:
        sbx.run_code("x = 1")
        sbx.commands.run("echo home > ~/notes.txt")
        sbx.files.upload(b"kept", "kept.txt")
        # An ext4 image of 64 MiB where doctor says files quotas are enforced (root with loop
        # devices), a directory (0) only where it says they are not (rootless).
        assert sbx.info().raw["home"]["quota_bytes"] == (64 << 20 if QUOTAS else 0)
        stopped = sbx.stop()
        assert stopped.status == "stopped" and not stopped.running
        assert stopped.raw["kernel_state_lost"] is True
        with pytest.raises(nsbox.SandboxDead) as dead:
            sbx.run_code("1")
        assert "is stopped" in dead.value.message
        assert sbx.files.download("kept.txt").buffer() == b"kept"  # the files API still serves
        with pytest.raises(nsbox.InvalidArgument) as missing:
            sbx.start()
        assert "GREETING" in missing.value.message
        started = sbx.start(env={"GREETING": "again"})
        assert started.running and started.id == sbx.id
        out = sbx.commands.run("cat ~/notes.txt /mnt/files/kept.txt; echo $GREETING").stdout
        assert out == b"home\nkeptagain\n"
        assert sbx.run_code("x").error is not None  # a fresh kernel


def test_snapshots_through_the_api(sock_client: nsbox.Client) -> None:
    with nsbox.Sandbox.create(client=sock_client) as sbx:
        sbx.commands.run("mkdir -p ~/proj && echo v1 > ~/proj/state && mkfifo ~/pipe")
        sbx.files.upload(b"kept", "kept.txt")
        snap = sbx.snapshot("py-snap", include_files=True)
        assert snap.id.startswith("snp-") and snap.name == "py-snap" and snap.sandbox == sbx.id
        assert snap.include_files and snap.members >= 3 and snap.left_out == ["home/pipe"]
        assert snap.fingerprint and "env_names" in snap.spec
        assert [s.id for s in nsbox.Sandbox.snapshots(client=sock_client)] == [snap.id]
        with pytest.raises(nsbox.AlreadyExists):
            sbx.snapshot("py-snap")
        with nsbox.Sandbox.create(from_snapshot="py-snap", client=sock_client) as copy:
            assert copy.commands.run("cat ~/proj/state /mnt/files/kept.txt").stdout == b"v1\nkept"
        sbx.commands.run("echo v2 > ~/proj/state")
        sbx.stop()
        sbx.start(from_snapshot=snap.id)
        assert sbx.commands.run("cat ~/proj/state").stdout == b"v1\n"
        nsbox.Sandbox.remove_snapshot("py-snap", client=sock_client)
        assert nsbox.Sandbox.snapshots(client=sock_client) == []
        with pytest.raises(nsbox.NotFound):
            nsbox.Sandbox.remove_snapshot("py-snap", client=sock_client)


def test_a_workspace_root_is_where_cells_commands_and_relative_paths_start(sock_client: nsbox.Client) -> None:
    """A kernel from the server's zygote (where the host has one) starts in the workspace
    root as one exec'd by init does."""
    with pytest.raises(nsbox.InvalidArgument, match="which belongs to the sandbox's system"):
        nsbox.Sandbox.create(workspace_root="/etc/app", client=sock_client)
    sbx = nsbox.Sandbox.create(workspace_root="/workspace", client=sock_client)
    try:
        assert sbx.info().raw["workspace_root"] == "/workspace"
        sbx.fs.write("notes/a.txt", b"relative\n")
        assert sbx.commands.run("pwd; cat notes/a.txt").stdout == b"/workspace\nrelative\n"
        assert sbx.run_code("import os; print(os.getcwd())").stdout == "/workspace\n"
        if doctor_says_ok("kernel zygote"):  # else init exec'd it, as the CLI's tests cover
            assert sbx.info().raw["kernel_origin"] == "zygote"
        assert sbx.fs.read("/home/user/workspace/notes/a.txt") == b"relative\n"
    finally:
        sbx.kill()
