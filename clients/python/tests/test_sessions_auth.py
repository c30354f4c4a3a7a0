"""Authentication, Composio-shaped sessions, and where the client finds the server."""
from __future__ import annotations

import http.client
import json
import os
import socket

import pytest

import nsbox
from conftest import Server


def _raw(server: Server, method: str, path: str, headers: dict) -> tuple:  # type: ignore[type-arg]
    conn = http.client.HTTPConnection("127.0.0.1", int(server.url.rsplit(":", 1)[1]), timeout=30)  # type: ignore[union-attr]
    try:
        conn.request(method, path, headers=headers)
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def test_a_request_without_the_token_gets_401(server: Server) -> None:
    status, headers, body = _raw(server, "GET", "/v1/sandboxes", {})
    assert status == 401
    assert headers.get("WWW-Authenticate", "").startswith("Bearer")
    assert json.loads(body)["error"]["code"] == "unauthorized"
    status, _, _ = _raw(server, "GET", "/v1/sandboxes", {"Authorization": "Bearer " + "x" * 43})
    assert status == 401
    status, _, _ = _raw(server, "GET", "/v1/sandboxes", {"Authorization": "Basic " + (server.token or "")})
    assert status == 401
    assert _raw(server, "GET", "/livez", {})[0] == 200
    assert _raw(server, "GET", "/readyz", {})[0] == 200
    assert _raw(server, "GET", "/v1/sandboxes", {"Authorization": "Bearer " + (server.token or "")})[0] == 200


@pytest.mark.parametrize("transport", ["socket", "tcp"])
def test_the_client_raises_unauthorized_without_a_good_token(server: Server, transport: str) -> None:
    kwargs = {"socket": server.socket} if transport == "socket" else {"url": server.url}
    bad = nsbox.Client(token="wrong-token-wrong-token", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(nsbox.Unauthorized) as e:
        nsbox.Sandbox.list(client=bad)
    assert e.value.status == 401 and e.value.hint
    with pytest.raises(nsbox.NsboxError):
        nsbox.Client(token_file=server.root + "/no-token-here", **kwargs)  # type: ignore[arg-type]


def test_the_token_is_found_next_to_the_socket_and_in_the_environment(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NSBOX_URL", "NSBOX_TOKEN", "NSBOX_SOCKET", "NSBOX_TOKEN_FILE", "NSBOX_ROOT"):
        monkeypatch.delenv(name, raising=False)
    # <root>/run/api.sock -> <root>/data/api/token, with no token given.
    assert nsbox.token_file_for_socket(server.socket) == server.token_file
    assert nsbox.Sandbox.list(socket=server.socket) == []

    monkeypatch.setenv("NSBOX_SOCKET", server.socket)
    assert nsbox.Client().socket_path == server.socket
    assert nsbox.Sandbox.list() == []

    monkeypatch.delenv("NSBOX_SOCKET")
    monkeypatch.setenv("NSBOX_URL", server.url or "")
    monkeypatch.setenv("NSBOX_TOKEN", server.token or "")
    c = nsbox.Client()
    assert c.url == server.url and c.socket_path is None
    assert nsbox.Sandbox.list() == []

    monkeypatch.setenv("NSBOX_URL", "unix:" + server.socket)
    monkeypatch.delenv("NSBOX_TOKEN")
    monkeypatch.setenv("NSBOX_TOKEN_FILE", server.token_file or "")
    assert nsbox.Client().socket_path == server.socket
    assert nsbox.Sandbox.list() == []

    monkeypatch.setenv("NSBOX_ROOT", server.root)
    monkeypatch.delenv("NSBOX_URL")
    monkeypatch.delenv("NSBOX_TOKEN_FILE")
    assert nsbox.default_socket_path() == server.socket
    assert nsbox.Sandbox.list() == []  # the default socket and token of NSBOX_ROOT


def test_no_server_is_a_clear_error(tmp_path: "os.PathLike[str]") -> None:
    with pytest.raises(nsbox.ServerUnreachable) as e:
        nsbox.Sandbox.list(socket=os.path.join(str(tmp_path), "none.sock"), token="t")
    assert "nsbox serve" in (e.value.hint or "")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(nsbox.ServerUnreachable):
        nsbox.Sandbox.list(url="http://127.0.0.1:%d" % port, token="t")
    with pytest.raises(ValueError):
        nsbox.Client(url="https://example.com", token="t")


def test_a_session_makes_its_sandbox_on_first_use_and_deletes_it(client: nsbox.Client, server: Server) -> None:
    with nsbox.Session.create(user_id="u-42", sandbox_size="standard", client=client) as s:
        assert s.session_id.startswith("ses-")
        info = s.info()
        assert info.user_id == "u-42" and info.sandbox_enabled and info.sandbox_id is None
        assert server.sandboxes() == []
        s.run_code("v = 'kept'")
        sandbox_id = s.info().sandbox_id
        assert sandbox_id and [x["id"] for x in server.sandboxes()] == [sandbox_id]
        assert s.commands.run("echo $HOME").stdout == b"/home/user\n"
        s.files.upload(b"data", "in/x.txt")
        assert s.files.download("/mnt/files/in/x.txt").buffer() == b"data"
        assert s.fs.read("/mnt/files/in/x.txt") == b"data"
        resized = s.resize("medium")
        assert resized.sandbox_size == "medium"
        assert s.run_code("v").results == "'kept'"  # resized live, state kept
        assert nsbox.Sandbox.connect(sandbox_id, client=client).info().size == "medium"
        assert s.session_id in [x.session_id for x in nsbox.Session.list("u-42", client=client)]
        assert s.session_id not in [x.session_id for x in nsbox.Session.list("someone-else", client=client)]
    assert server.sandboxes() == []
    with pytest.raises(nsbox.NotFound):
        nsbox.Session.connect(s.session_id, client=client)


def test_a_disabled_session_answers_sandbox_calls_with_400(client: nsbox.Client, server: Server) -> None:
    with nsbox.Session.create(user_id="u-off", sandbox_enable=False, client=client) as s:
        assert s.info().sandbox_enabled is False
        calls = [lambda: s.run_code("1"), lambda: s.commands.run("true"), lambda: s.files.upload(b"x", "x"),
                 lambda: s.files.list(), lambda: s.fs.read("/etc/passwd"), lambda: s.interrupt(),
                 lambda: s.restart(), lambda: s.resize("large")]
        for call in calls:
            with pytest.raises(nsbox.SandboxDisabled) as e:
                call()
            assert e.value.status == 400 and e.value.code == "sandbox_disabled"
            assert s.session_id in e.value.message
        assert server.sandboxes() == []
    with pytest.raises(nsbox.NotFound):
        s.info()


def test_sessions_accept_the_workbench_alias(sock_client: nsbox.Client) -> None:
    doc = sock_client.json("POST", "/v1/sessions", json_body={"user_id": "w", "workbench": {"enable": False}})
    try:
        assert nsbox.SessionInfo(doc).sandbox_enabled is False
        with pytest.raises(nsbox.MalformedRequest):
            sock_client.json("POST", "/v1/sessions", json_body={"sandbox": {}, "workbench": {}})
    finally:
        sock_client.json("DELETE", "/v1/sessions/" + doc["session_id"])
