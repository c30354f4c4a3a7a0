"""A sandbox's port through `nsbox serve` itself (docs/api.md, "Ports"): a request to
/v1/sandboxes/{id}/ports/{P}/PATH with the token reaches the sandbox's 127.0.0.1:P as PATH,
and, on a server given --public-url with a name, a request whose Host is {P}-{id}.{domain}
reaches it as it is. Plain requests, bodies, a streamed answer and a WebSocket upgrade
pass; the server's token never reaches the sandbox. The app is a small raw-socket server
(stdlib only) that answers what it was asked, streams, and echoes one WebSocket frame."""
from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import socket
from typing import Dict, Iterator, Optional, Tuple

import pytest

import nsbox
from conftest import Server, started_server, wait_until

DOMAIN = "sbx.localhost"

APP = r'''
import base64, hashlib, json, os, socketserver, time

class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        method, target, _ = self.rfile.readline().decode().split(" ", 2)
        headers = {}
        while True:
            line = self.rfile.readline().decode()
            if line in ("\r\n", "\n", ""):
                break
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
        if headers.get("upgrade", "").lower() == "websocket":
            key = headers["sec-websocket-key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
            accept = base64.b64encode(hashlib.sha1(key.encode()).digest()).decode()
            self.wfile.write(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                              "Sec-WebSocket-Accept: %s\r\n\r\n" % accept).encode())
            self.wfile.flush()
            _, size = self.rfile.read(2)
            mask = self.rfile.read(4)
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(size & 127)))
            self.wfile.write(bytes([0x81, len(data)]) + data)
            return
        body = self.rfile.read(int(headers.get("content-length", "0")))
        if target.startswith("/stream"):
            self.wfile.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for i in range(3):
                if i == 2:  # the last line only once the test has read the first ones
                    while not os.path.exists("/tmp/go-on"):
                        time.sleep(0.05)
                chunk = ("line %d\n" % i).encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            return
        out = json.dumps({"method": method, "target": target, "headers": headers, "body": body.decode()}).encode()
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(out), out))

socketserver.ThreadingTCPServer.allow_reuse_address = True
socketserver.ThreadingTCPServer(("127.0.0.1", 8000), Handler).serve_forever()
'''


@pytest.fixture(scope="module")
def port_server() -> Iterator[Server]:
    """Its own server, with a domain for ports (module-wide: the app sandbox outlives each test)."""
    with started_server(["--public-url", "http://%s:1" % DOMAIN]) as s:
        yield s


@pytest.fixture(scope="module")
def app(port_server: Server) -> Iterator[nsbox.Sandbox]:
    """A sandbox without a network, its app listening on its own 127.0.0.1:8000."""
    sbx = nsbox.Sandbox.create(lazy_kernel=True, url=port_server.url, token=port_server.token)
    try:
        sbx.fs.write("/home/user/app.py", APP.encode())
        sbx.processes.start("python3 /home/user/app.py")
        assert wait_until(lambda: sbx.commands.run("python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8000))'")
                          .exit_code == 0, 30), "the app never listened"
        yield sbx
    finally:
        try:
            sbx.kill()
        except nsbox.errors.NotFound:
            pass


def address(server: Server) -> Tuple[str, int]:
    assert server.url is not None
    host, port = server.url.rsplit("//", 1)[1].rsplit(":", 1)
    return host, int(port)


def request(server: Server, method: str, target: str, headers: Dict[str, str], body: Optional[bytes] = None) -> Tuple[int, bytes]:
    conn = http.client.HTTPConnection(*address(server), timeout=30)
    try:
        conn.request(method, target, body=body, headers=headers)
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def test_a_request_by_path_reaches_the_app_as_its_own_path_without_the_token(port_server: Server, app: nsbox.Sandbox) -> None:
    server = port_server
    auth = {"Authorization": "Bearer " + server.token, "Cookie": "server=secret"}
    status, body = request(server, "POST", "/v1/sandboxes/%s/ports/8000/echo?q=1" % app.id, auth, b"payload")
    assert status == 200, body
    seen = json.loads(body)
    assert (seen["method"], seen["target"], seen["body"]) == ("POST", "/echo?q=1", "payload")
    assert "authorization" not in seen["headers"] and "cookie" not in seen["headers"]
    assert server.token not in body.decode()
    assert seen["headers"]["x-forwarded-prefix"] == "/v1/sandboxes/%s/ports/8000" % app.id
    assert seen["headers"]["connection"] == "close"
    # Without the token: 401, and nothing reaches the sandbox.
    status, _ = request(server, "GET", "/v1/sandboxes/%s/ports/8000/echo" % app.id, {})
    assert status == 401
    # A port nothing listens on: the forward's refusal, as an answer.
    status, body = request(server, "GET", "/v1/sandboxes/%s/ports/8001/" % app.id, {"Authorization": "Bearer " + server.token})
    assert status == 502 and b"port 8001 of the sandbox closed the connection without answering" in body, body
    # /ports/{P} without a slash is still the forward's own route.
    status, _ = request(server, "DELETE", "/v1/sandboxes/%s/ports/8000" % app.id, {"Authorization": "Bearer " + server.token})
    assert status == 200


def test_a_streamed_answer_comes_as_the_app_sends_it(port_server: Server, app: nsbox.Sandbox) -> None:
    server = port_server
    app.commands.run("rm -f /tmp/go-on")
    conn = http.client.HTTPConnection(*address(server), timeout=30)
    try:
        conn.request("GET", "/v1/sandboxes/%s/ports/8000/stream" % app.id, headers={"Authorization": "Bearer " + server.token})
        answer = conn.getresponse()
        assert answer.status == 200
        # The first two lines arrive while the app still waits to send the third.
        assert answer.readline() == b"line 0\n" and answer.readline() == b"line 1\n"
        app.commands.run("touch /tmp/go-on")
        assert answer.read() == b"line 2\n"
    finally:
        conn.close()


def websocket_echo(server: Server, target: str, headers: Dict[str, str], message: bytes) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    head = "GET %s HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: %s\r\n" % (target, key)
    head += "".join("%s: %s\r\n" % kv for kv in headers.items()) + "\r\n"
    with socket.create_connection(address(server), timeout=30) as s:
        s.sendall(head.encode())
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = s.recv(4096)
            assert chunk, "closed before the upgrade's answer: %r" % got
            got += chunk
        answer, rest = got.split(b"\r\n\r\n", 1)
        assert answer.startswith(b"HTTP/1.1 101"), answer
        accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
        assert b"Sec-WebSocket-Accept: " + accept in answer
        mask = os.urandom(4)
        s.sendall(bytes([0x81, 0x80 | len(message)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(message)))
        while len(rest) < 2 + len(message):
            chunk = s.recv(4096)
            assert chunk, "closed before the echo"
            rest += chunk
        assert rest[0] == 0x81 and rest[1] == len(message)
        return rest[2:2 + len(message)]


def test_a_websocket_upgrade_passes_by_path_and_by_host(port_server: Server, app: nsbox.Sandbox) -> None:
    server = port_server
    auth = {"Authorization": "Bearer " + server.token}
    assert websocket_echo(server, "/v1/sandboxes/%s/ports/8000/ws" % app.id, auth, b"by path") == b"by path"
    host = {"Host": "8000-%s.%s:1" % (app.id, DOMAIN), **auth}
    assert websocket_echo(server, "/ws", host, b"by host") == b"by host"


def test_a_request_by_host_reaches_the_app_as_it_is(port_server: Server, app: nsbox.Sandbox) -> None:
    server = port_server
    headers = {"Host": "8000-%s.%s" % (app.id, DOMAIN), "Authorization": "Bearer " + server.token, "Cookie": "app=mine"}
    status, body = request(server, "GET", "/v1/anything?x=2", headers)
    assert status == 200, body
    seen = json.loads(body)
    assert seen["target"] == "/v1/anything?x=2"  # not the API's: the whole path is the app's
    assert seen["headers"]["host"] == headers["Host"] and seen["headers"]["cookie"] == "app=mine"
    assert "authorization" not in seen["headers"]
    # Another domain is the API's own, and a sandbox that is not there is a 404.
    status, _ = request(server, "GET", "/v1/info", {"Host": "8000-%s.other.example" % app.id, "Authorization": "Bearer " + server.token})
    assert status == 200
    status, body = request(server, "GET", "/", {"Host": "8000-sbx-nothere.%s" % DOMAIN, "Authorization": "Bearer " + server.token})
    assert status == 404, body
