"""The client's own reading of a whole answer (nsbox._http._Answer) and the one write of a
request (Client.request), against a real unix socket whose other end answers what each
test scripts: lengths, chunks, a close-delimited body, answers cut into single bytes, a
connection the server closed while idle, and what a server never sends."""
from __future__ import annotations

import os
import socket
import tempfile
import threading
from typing import Callable, Iterator, List

import pytest

import nsbox
from nsbox import _http

Script = Callable[[socket.socket, bytes], None]  # (peer, request bytes) -> answers it


def _read_request(peer: socket.socket) -> bytes:
    data = bytearray()
    while b"\r\n\r\n" not in data:
        chunk = peer.recv(1 << 16)
        if not chunk:
            return bytes(data)
        data += chunk
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        body += peer.recv(1 << 16)
    return head + b"\r\n\r\n" + body


class FakeServer:
    """Accepts connections and answers each request with the next script; records the
    requests as they came, and how many writes each took to arrive whole."""

    def __init__(self, scripts: List[Script]) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="nsbox-test-answer-", dir="/tmp")
        self.path = os.path.join(self.dir.name, "api.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(4)
        self.listener.settimeout(30)
        self.scripts = list(scripts)
        self.requests: List[bytes] = []
        self.connections = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while self.scripts:
            try:
                peer, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            with peer:
                peer.settimeout(30)
                while self.scripts:
                    request = _read_request(peer)
                    if not request:
                        break  # the client closed this connection: the next one comes
                    self.requests.append(request)
                    script = self.scripts.pop(0)
                    script(peer, request)
                    if getattr(script, "closes", False):
                        break

    def client(self) -> nsbox.Client:
        return nsbox.Client(socket=self.path, token="t0ken", timeout=10)

    def close(self) -> None:
        self.listener.close()
        self.thread.join(30)
        self.dir.cleanup()


@pytest.fixture
def fake() -> Iterator[Callable[[List[Script]], FakeServer]]:
    made: List[FakeServer] = []

    def make(scripts: List[Script]) -> FakeServer:
        made.append(FakeServer(scripts))
        return made[-1]
    yield make
    for server in made:
        server.close()


def answer(raw: bytes, *, closes: bool = False, bytewise: bool = False) -> Script:
    def script(peer: socket.socket, request: bytes) -> None:
        if bytewise:
            for i in range(len(raw)):
                peer.sendall(raw[i:i + 1])
        else:
            peer.sendall(raw)
        if closes:
            peer.shutdown(socket.SHUT_WR)
    script.closes = closes  # type: ignore[attr-defined]
    return script


def document(body: bytes, status: str = "200 OK", extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 " + status.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: " +
            str(len(body)).encode() + b"\r\n" + extra + b"\r\n" + body)


def test_a_request_goes_in_one_write_with_its_headers_and_the_answer_is_read_by_length(fake) -> None:
    server = fake([answer(document(b'{"a": 1}')), answer(document(b'{"b": 2}'))])
    c = server.client()
    assert c.json("POST", "/v1/sandboxes", json_body={"size": "standard"}) == {"a": 1}
    assert c.json("GET", "/v1/pool", query={"x": "a b"}) == {"b": 2}
    post, get = server.requests
    head, _, body = post.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/sandboxes HTTP/1.1"
    assert b"Host: localhost" in lines and b"Authorization: Bearer t0ken" in lines
    assert b"Content-Type: application/json" in lines and b"Content-Length: %d" % len(body) in lines
    assert body == b'{"size": "standard"}'
    assert get.startswith(b"GET /v1/pool?x=a%20b HTTP/1.1\r\n") and get.endswith(b"\r\n\r\n")
    assert b"Content-Length" not in get  # no body, none said
    assert server.connections == 1  # kept alive between the two


def test_chunked_and_byte_by_byte_answers_are_read_whole(fake) -> None:
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Thing: v\r\n\r\n"
               b"4;ext=1\r\n{\"a\"\r\n5\r\n: 12}\r\n0\r\nTrailer: t\r\n\r\n")
    server = fake([answer(chunked, bytewise=True), answer(document(b"[1, 2]"), bytewise=True)])
    c = server.client()
    r = c.request("GET", "/v1/x")
    assert (r.status, r.data, r.headers["x-thing"]) == (200, b'{"a": 12}', "v")
    assert c.json("GET", "/v1/y") == [1, 2]
    assert server.connections == 1


def test_a_body_that_ends_with_the_connection_and_connection_close_are_honoured(fake) -> None:
    server = fake([answer(b"HTTP/1.1 200 OK\r\n\r\nall of it", closes=True),
                   answer(document(b"{}", extra=b"Connection: close\r\n"), closes=True),
                   answer(document(b"{}"))])
    c = server.client()
    assert c.request("GET", "/a").data == b"all of it"
    assert c.json("GET", "/b") == {}
    assert c.json("GET", "/c") == {}
    assert server.connections == 3  # a new connection after each answer that closed


def test_a_connection_the_server_closed_while_idle_is_replaced_once_and_the_request_sent_again(fake) -> None:
    def close_without_answer(peer: socket.socket, request: bytes) -> None:
        peer.shutdown(socket.SHUT_RDWR)
    close_without_answer.closes = True  # type: ignore[attr-defined]
    server = fake([answer(document(b"1")), close_without_answer, answer(document(b"2"))])
    c = server.client()
    assert c.json("GET", "/a") == 1
    assert c.json("POST", "/b", json_body={"k": "v"}) == 2  # sent again on a new connection
    assert server.requests[1] == server.requests[2]
    # A new connection that closes at once is not replayed: the server is said gone.
    server2 = fake([close_without_answer])
    with pytest.raises(nsbox.ServerUnreachable, match="closed"):
        server2.client().json("GET", "/a")


def test_error_answers_raise_their_exception(fake) -> None:
    body = b'{"error": {"code": "not_found", "message": "no sandbox sbx-x"}}'
    server = fake([answer(document(body, "404 Not Found"))])
    with pytest.raises(nsbox.NotFound, match="no sandbox sbx-x"):
        server.client().json("GET", "/v1/sandboxes/sbx-x")


@pytest.mark.parametrize("raw, said", [
    (b"SMTP 220 hello\r\n\r\n", "status line"),
    (b"HTTP/1.1 100 Continue\r\n\r\n", "status line"),
    (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "header line"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\n", "not a number"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "chunk size"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabcd\r\n0\r\n\r\n", "does not end"),
    (b"HTTP/1.1 200 OK\r\nX: " + b"y" * (70 << 10), "64 KiB"),
])
def test_what_a_server_never_sends_is_a_protocol_error_and_the_connection_is_dropped(fake, raw: bytes, said: str) -> None:
    server = fake([answer(raw, closes=True), answer(document(b'"fine"'))])
    c = server.client()
    with pytest.raises(nsbox.ProtocolError, match=said) as refused:
        c.json("GET", "/a")
    assert "nsbox at unix:" + server.path in str(refused.value)  # says which server
    assert c.json("GET", "/b") == "fine"  # on a new connection
    assert server.connections == 2


def test_an_answer_cut_short_is_the_server_unreachable_and_the_request_is_not_sent_again(fake) -> None:
    def reset_mid_body(peer: socket.socket, request: bytes) -> None:
        peer.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhalf")
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST on close
    reset_mid_body.closes = True  # type: ignore[attr-defined]
    server = fake([answer(document(b"1")), reset_mid_body,
                   answer(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", closes=True), answer(document(b"2"))])
    c = server.client()
    assert c.json("GET", "/a") == 1
    with pytest.raises(nsbox.ServerUnreachable, match="cut"):
        c.json("POST", "/v1/sandboxes/sbx-x/cells", json_body={"code": "x += 1"})  # reused connection: not replayed
    with pytest.raises(nsbox.ServerUnreachable, match="cut short"):
        c.json("GET", "/b")
    assert c.json("GET", "/c") == 2
    assert [r.split(b" ", 2)[1] for r in server.requests] == [b"/a", b"/v1/sandboxes/sbx-x/cells", b"/b", b"/c"]


def test_headers_the_caller_gives_are_not_sent_twice(fake) -> None:
    server = fake([answer(document(b"{}"))])
    server.client().request("PUT", "/v1/x", body=b"12345", headers={"Content-Length": "5", "host": "elsewhere"})
    head = server.requests[0].partition(b"\r\n\r\n")[0].lower()
    assert head.count(b"content-length:") == 1 and head.count(b"host:") == 1 and b"host: elsewhere" in head


def test_a_silent_server_is_a_timeout_and_bad_headers_are_refused_before_sending(fake) -> None:
    def silent(peer: socket.socket, request: bytes) -> None:
        peer.recv(1)  # until the client gives up
    server = fake([silent])
    c = nsbox.Client(socket=server.path, token="t", timeout=0.5)
    with pytest.raises(nsbox.Timeout, match="no answer"):
        c.json("GET", "/a")
    with pytest.raises(ValueError, match="line break"):
        c.request("GET", "/a", headers={"X-Evil": "a\r\nInjected: 1"})
    for target in ("/a b", "/caf\u00e9"):
        with pytest.raises(Exception, match="control character"):
            c.request("GET", target)
    with pytest.raises(ValueError, match="invalid header"):
        c.request("GET", "/a", headers={" X-Lead": "v"})
    assert len(server.requests) == 1


def test_an_answer_followed_by_bytes_nobody_asked_for_drops_the_connection(fake) -> None:
    server = fake([answer(document(b"1") + b"HTTP/1.1 200 OK\r\n"), answer(document(b"2"))])
    c = server.client()
    assert c.json("GET", "/a") == 1
    assert c.json("GET", "/b") == 2
    assert server.connections == 2


def test_reader_alone_on_a_socket_pair() -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(document(b'{"x": 1}', extra=b"Server: nsbox\r\n"))
        got = _http._Answer(b, "unix:/test").read("GET")
        assert (got.status, got.data, got.headers["server"], got.will_close) == (200, b'{"x": 1}', "nsbox", False)
        a.sendall(b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n")
        got = _http._Answer(b, "unix:/test").read("DELETE")
        assert (got.status, got.data) == (204, b"")
