"""Port forwards (docs/semantics.md, "Ports") through a real `nsbox serve`: an HTTP
server inside a sandbox without a network answers a plain HTTP client on the host, with
no token; the forward is listed, in the sandbox's document, and closed."""
from __future__ import annotations

import http.client
import socket

import pytest

import nsbox
from conftest import wait_until


def get(forward: nsbox.ports.PortForward, path: str) -> bytes:
    conn = http.client.HTTPConnection(forward.host, forward.host_port, timeout=10)
    try:
        conn.request("GET", path)
        answer = conn.getresponse()
        assert answer.status == 200, answer.status
        return answer.read()
    finally:
        conn.close()


def answers(forward: nsbox.ports.PortForward) -> bool:
    try:
        return get(forward, "/page.txt") == b"from inside\n"
    except (OSError, http.client.HTTPException, AssertionError):
        return False


def test_an_http_server_inside_answers_a_plain_client_on_the_host(sandbox: nsbox.Sandbox) -> None:
    sandbox.commands.run("mkdir -p /home/user/site && echo 'from inside' > /home/user/site/page.txt")
    sandbox.processes.start("python3 -m http.server 8000 --bind 127.0.0.1 --directory /home/user/site")
    forward = sandbox.ports.expose(8000)
    assert forward.port == 8000 and forward.host == "127.0.0.1" and forward.host_port > 0
    assert forward.url == "http://127.0.0.1:%d" % forward.host_port
    assert wait_until(lambda: answers(forward), 30), "the server inside never answered through the forward"

    assert sandbox.ports.expose(8000).host_port == forward.host_port  # the same forward again
    assert [(p.port, p.host_port) for p in sandbox.ports.list()] == [(8000, forward.host_port)]
    assert sandbox.info().raw["ports"] == [forward.raw]

    sandbox.ports.close(8000)
    assert sandbox.ports.list() == []
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((forward.host, forward.host_port), timeout=5)
    with pytest.raises(nsbox.errors.NotFound):
        sandbox.ports.close(8000)


def test_a_forward_listens_on_a_loopback_address_only(sandbox: nsbox.Sandbox) -> None:
    with pytest.raises(nsbox.errors.InvalidArgument) as refused:
        sandbox.ports.expose(8000, host="0.0.0.0")
    assert "loopback address" in str(refused.value)
    with pytest.raises(nsbox.errors.NsboxError):
        sandbox.ports.expose(0)
