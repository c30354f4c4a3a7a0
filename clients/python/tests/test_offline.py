"""What the client decides on its own: error classes by code, documents to objects, the
Agents SDK manifest to a create request, the SDK path rules, where the token file is, and
that the package installs offline into a venv."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

import nsbox
from nsbox import agents
from nsbox.errors import error_from_response

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("code,cls,status", [
    ("malformed_request", nsbox.MalformedRequest, 400), ("sandbox_disabled", nsbox.SandboxDisabled, 400),
    ("unauthorized", nsbox.Unauthorized, 401), ("permission_denied", nsbox.PermissionDenied, 403),
    ("not_found", nsbox.NotFound, 404), ("already_exists", nsbox.AlreadyExists, 409), ("busy", nsbox.Busy, 409),
    ("sandbox_dead", nsbox.SandboxDead, 409), ("limit_exceeded", nsbox.QuotaExceeded, 413),
    ("invalid_argument", nsbox.InvalidArgument, 422), ("unsupported", nsbox.Unsupported, 501),
    ("system", nsbox.HostError, 500), ("internal", nsbox.InternalError, 500), ("protocol", nsbox.ProtocolError, 502),
    ("remote", nsbox.RemoteError, 502), ("unavailable", nsbox.Unavailable, 503), ("timeout", nsbox.Timeout, 504),
])
def test_every_error_code_of_the_table_has_its_class(code: str, cls: type, status: int) -> None:
    body = ('{"error": {"code": "%s", "message": "m", "hint": "h"}}' % code).encode()
    e = error_from_response(status, body)
    assert type(e) is cls and isinstance(e, nsbox.NsboxError)
    assert (e.code, e.message, e.hint, e.status) == (code, "m", "h", status)


def test_unknown_codes_and_bodies_still_raise_nsbox_errors() -> None:
    e = error_from_response(418, b'{"error": {"code": "teapot", "message": "short and stout"}}')
    assert type(e) is nsbox.NsboxError and e.code == "teapot" and e.status == 418
    e = error_from_response(502, b"<html>bad gateway</html>")
    assert isinstance(e, nsbox.NsboxError) and "bad gateway" in e.message
    assert isinstance(nsbox.Timeout("t"), TimeoutError)


def test_documents_become_objects_with_the_raw_document_kept() -> None:
    ex = nsbox.Execution({"type": "result", "cell": 3, "status": "error", "results": None,
                          "error": {"ename": "KeyError", "evalue": "'k'", "traceback": ["a", "b"]},
                          "stdout_b64": "/w==", "stderr": "", "state_lost": False, "display": [{"type": "image/png"}],
                          "stdout_file_path": "/mnt/files/.nsbox/output/cell-3-stdout.txt", "future_field": 1})
    assert ex.cell == 3 and ex.status == "error" and ex.error is not None
    assert (ex.error.name, ex.error.value, ex.error.traceback) == ("KeyError", "'k'", "a\nb")
    assert ex.stdout == "\ufffd" and ex.display == [{"type": "image/png"}] and "type" not in ex.raw
    assert ex.stdout_file_path and ex.raw["future_field"] == 1
    cr = nsbox.CommandResult({"status": "killed", "reason": "signal", "exit_code": None, "signal": 9,
                              "stdout_b64": "AP8=", "stderr": "x"})
    assert cr.stdout == b"\x00\xff" and cr.stderr == b"x" and cr.exit_code == -1 and not cr.ok
    s = nsbox.SessionInfo({"session_id": "ses-1", "sandbox": {"enable": False, "sandbox_id": "sbx-1"}})
    assert s.sandbox_id == "sbx-1" and s.sandbox_enabled is False and s.sandbox_size == "standard"
    s2 = nsbox.SessionInfo({"session_id": "ses-1", "workbench": {"enable": True}, "sandbox_id": "sbx-2"})
    assert s2.sandbox_id == "sbx-2" and s2.sandbox_enabled


def test_the_token_file_is_next_to_the_sockets_state_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NSBOX_ROOT", raising=False)
    assert nsbox.token_file_for_socket("/tmp/r/run/api.sock") == "/tmp/r/data/api/token"
    assert nsbox.token_file_for_socket("/run/nsbox/api.sock") == "/var/lib/nsbox/api/token"
    monkeypatch.setenv("NSBOX_ROOT", "/srv/nb")
    assert nsbox.default_socket_path() == "/srv/nb/run/api.sock"
    assert nsbox.token_file_for_socket("/elsewhere/my.sock") == "/srv/nb/data/api/token"
    c = nsbox.Client(url="http://[::1]:8080", token="t")
    assert c.url == "http://[::1]:8080" and c.where == "http://[::1]:8080"
    assert nsbox.Client(url="unix:///x/y.sock", token="t").socket_path == "/x/y.sock"
    assert nsbox.Client.target("/p", {"path": "/mnt/files/a b&c", "x": None, "r": True}) == \
        "/p?path=%2Fmnt%2Ffiles%2Fa%20b%26c&r=true"


def test_the_manifest_becomes_the_create_request_with_mounts_apart() -> None:
    m = agents.Manifest(entries={
        "a.txt": agents.File(content=b"A", permissions=0o640, description="d"),
        "bin.dat": agents.File(content=b"\xff"),
        "d": agents.Dir(children={"e": agents.Dir(), "m": agents.S3Mount("bkt", prefix="p/", read_only=True,
                                                                        access_key_id="AK", secret_access_key="SK")}),
        "data": agents.R2Mount("r2b", account_id="acct", mount_path="/mnt/r2", read_only=False),
        "az": agents.AzureBlobMount("acc", "cont", account_key="KEY", mount_path="rel/az"),
        "dict": {"type": "file", "content": "from dict", "mode": "0600"},
    })
    m.validate()
    ws = m.workspace_request()
    assert ws["root"] == "/home/user"
    assert ws["entries"]["a.txt"] == {"type": "file", "content": "A", "mode": "0640", "description": "d"}
    assert ws["entries"]["bin.dat"] == {"type": "file", "content_b64": "/w=="}
    assert ws["entries"]["d"] == {"type": "dir", "children": {"e": {"type": "dir"}}}
    assert ws["entries"]["dict"] == {"type": "file", "content": "from dict", "mode": "0600"}
    assert "data" not in ws["entries"] and "az" not in ws["entries"]
    mounts = {x["mount_path"]: x for x in m.mounts_request()}
    assert mounts["/home/user/d/m"] == {"type": "s3", "bucket": "bkt", "prefix": "p/", "mount_path": "/home/user/d/m",
                                        "read_only": True, "strategy": "builtin",
                                        "credentials": {"access_key_id": "AK", "secret_access_key": "SK"}}
    assert mounts["/mnt/r2"]["type"] == "r2" and mounts["/mnt/r2"]["account"] == "acct"
    assert mounts["/mnt/r2"]["read_only"] is False and "credentials" not in mounts["/mnt/r2"]
    assert mounts["/home/user/rel/az"]["credentials"] == {"account_key": "KEY"}
    assert "SK" not in repr(m.to_dict()) and "KEY" not in repr(m.to_dict())
    with pytest.raises(agents.MountConfigError):
        agents.Manifest(entries={"x": agents.S3Mount("b", access_key_id="only-half")}).mounts_request()
    # Host sources are the client's to read (local_sources.py): kept out of the request.
    sources = agents.Manifest(entries={"g": {"type": "git_repo", "repo": "a/b"}, "l": agents.LocalDir(src="x", ephemeral=True)})
    assert isinstance(sources.entries["g"], agents.GitRepo) and sources.entries["g"].url() == "https://github.com/a/b"
    assert sources.workspace_request()["entries"] == {"l": {"type": "dir", "ephemeral": True}}
    with pytest.raises(agents.ConfigurationError):
        agents.Manifest(entries={"x": {"type": "socket", "path": "a/b"}})
    with pytest.raises(agents.ConfigurationError):
        agents.Manifest.model_validate({"entries": {}, "in_container_mount_credential_exposure_acknowledged": ["x"]})
    with pytest.raises(agents.ConfigurationError):
        agents.Manifest(users=["bob"]).validate()
    with pytest.raises(agents.ConfigurationError):
        agents.Manifest(extra_path_grants=[agents.SandboxPathGrant("/srv", host_path="/host")]).validate()
    with pytest.raises(agents.ConfigurationError):
        agents.Manifest(extra_path_grants=[agents.SandboxPathGrant("/")]).validate()


def test_the_sdk_path_rules() -> None:
    state = agents.NsboxSandboxSessionState(
        sandbox_id="sbx-x", options=agents.NsboxSandboxClientOptions(),
        manifest=agents.Manifest(extra_path_grants=[agents.SandboxPathGrant("/tmp/ro", read_only=True),
                                                    agents.SandboxPathGrant("/tmp/rw")]))
    session = agents.NsboxSandboxSession.__new__(agents.NsboxSandboxSession)
    session.state = state
    norm = session.normalize_path
    assert str(norm("a/b")) == "/home/user/a/b"
    assert str(norm("/home/user/a/../b")) == "/home/user/b"
    assert str(norm("./a/./b/..")) == "/home/user/a"
    assert str(norm(".")) == "/home/user"
    assert str(norm("/tmp/rw/x", for_write=True)) == "/tmp/rw/x"
    assert str(norm("/tmp/ro/x")) == "/tmp/ro/x"
    with pytest.raises(agents.WorkspaceArchiveWriteError) as w:
        norm("/tmp/ro/x", for_write=True)
    assert w.value.context["reason"] == "read_only_extra_path_grant"
    for bad, reason in (("../x", "escape_root"), ("a/../../x", "escape_root"), ("/etc/passwd", "absolute"),
                        ("/home/username", "absolute"), ("/tmp/rwx", "absolute"), ("C:\\x", "absolute")):
        with pytest.raises(agents.InvalidManifestPathError) as e:
            norm(bad)
        assert e.value.context["reason"] == reason, bad
    assert "must not escape root: ../x" in str(pytest.raises(agents.InvalidManifestPathError, norm, "../x").value)


def test_the_package_installs_offline_into_a_venv() -> None:
    with tempfile.TemporaryDirectory(prefix="nsbox-test-venv-", dir="/tmp") as d:
        venv = os.path.join(d, "V")
        subprocess.run(["/usr/bin/python3.11", "-m", "venv", "--system-site-packages", venv], check=True, timeout=120,
                       stdout=subprocess.DEVNULL)
        # A copy: an in-tree build would leave build/ and *.egg-info in the checkout.
        src = os.path.join(d, "src")
        subprocess.run(["cp", "-r", PACKAGE, src], check=True, timeout=60)
        for junk in ("tests", ".pytest_cache"):
            subprocess.run(["rm", "-rf", os.path.join(src, junk)], check=True, timeout=60)
        r = subprocess.run([os.path.join(venv, "bin", "pip"), "install", "--no-index", "--no-build-isolation", src],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
        assert r.returncode == 0, r.stdout.decode()
        probe = ("import nsbox, nsbox.aio, nsbox.agents, os, sys; "
                 "d = os.path.dirname(nsbox.__file__); "
                 "assert d.startswith(sys.prefix), d; "
                 "assert os.path.exists(os.path.join(d, 'py.typed')); print(nsbox.__version__)")
        out = subprocess.run([os.path.join(venv, "bin", "python"), "-c", probe], cwd=d, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, timeout=60, env={"PATH": "/usr/bin:/bin"})
        assert out.returncode == 0 and out.stdout.strip() == nsbox.__version__.encode(), out.stdout.decode()


def test_python_3_9_syntax_only() -> None:
    """No syntax newer than 3.9 (match, ``X | Y`` at runtime, parenthesised with)."""
    import ast

    for name in sorted(os.listdir(os.path.join(PACKAGE, "nsbox"))):
        if name.endswith(".py"):
            with open(os.path.join(PACKAGE, "nsbox", name)) as f:
                ast.parse(f.read(), name, feature_version=(3, 9))
    assert sys.version_info >= (3, 9)


def test_a_request_and_its_small_body_go_in_one_write() -> None:
    """The server wakes once per request: headers and a body of up to 64 KiB in one write;
    a larger body after the headers, whole. Against a real unix socket."""
    import socket
    import threading

    from nsbox import _http

    class Recording:
        def __init__(self, sock: socket.socket) -> None:
            self.sock, self.writes = sock, []

        def sendall(self, data: bytes) -> None:
            self.writes.append(bytes(data))
            self.sock.sendall(data)

        def close(self) -> None:
            self.sock.close()

    with tempfile.TemporaryDirectory(prefix="nsbox-test-http-", dir="/tmp") as d:
        path = os.path.join(d, "s.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(2)
        listener.settimeout(30)
        received = [bytearray(), bytearray()]

        def serve() -> None:
            for buffer in received:
                peer, _ = listener.accept()
                with peer:
                    peer.settimeout(30)
                    while True:
                        chunk = peer.recv(1 << 20)
                        if not chunk:
                            break
                        buffer.extend(chunk)

        server = threading.Thread(target=serve)
        server.start()
        sent = []
        for method, body in (("POST", b'{"code": "1"}'), ("PUT", b"x" * (200 << 10))):
            conn = _http._UnixHTTPConnection(path, 30)
            conn.connect()
            recording = Recording(conn.sock)
            conn.sock = recording  # type: ignore[assignment]
            conn.request(method, "/v1/x", body=body, headers={"Content-Type": "application/json"})
            conn.close()
            sent.append((body, recording.writes))
        server.join(30)
        listener.close()
        (small, small_writes), (large, large_writes) = sent
        assert len(small_writes) == 1 and small_writes[0].startswith(b"POST /v1/x ")
        assert small_writes[0].endswith(b"\r\n\r\n" + small)
        assert len(large_writes) >= 2 and large_writes[0].startswith(b"PUT /v1/x ") and large_writes[0].endswith(b"\r\n\r\n")
        assert b"".join(large_writes[1:]) == large
        assert [bytes(b) for b in received] == [b"".join(small_writes), b"".join(large_writes)]
