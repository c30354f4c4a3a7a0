"""The connection to `nsbox serve`: HTTP/1.1 over a unix socket or TCP, standard library only.

Where the server is and which token to send (first that applies):

- arguments: ``url`` (``http://HOST:PORT``, or ``unix:/path/api.sock``) or ``socket``;
  ``token`` or ``token_file``;
- the environment: ``NSBOX_URL`` or ``NSBOX_SOCKET``; ``NSBOX_TOKEN`` or ``NSBOX_TOKEN_FILE``;
- the defaults of ``nsbox serve``: the socket ``<run>/api.sock`` and the token file
  ``<data>/api/token`` of the state root (``NSBOX_ROOT``, else ``/run/nsbox`` and
  ``/var/lib/nsbox`` as root, ``$XDG_RUNTIME_DIR/nsbox`` and ``$XDG_DATA_HOME/nsbox``
  otherwise). A socket ``<root>/run/api.sock`` given without a token finds its token in
  ``<root>/data/api/token``, next to it.

One :class:`Client` may be shared by many threads: each thread keeps its own keep-alive
connection. Every wait is bounded: connecting and each read by ``timeout``; a streamed
answer by ``stream_idle_timeout`` between two lines (the server sends a heartbeat line
after 15 s of silence).
"""
from __future__ import annotations

import http.client
import io
import json
import os
import re
import socket as _socket
import threading
import time
import urllib.parse
from typing import Any, BinaryIO, Dict, Generator, Iterator, Mapping, Optional, Tuple, Union

from .errors import (
    NsboxError,
    ProtocolError,
    ServerUnreachable,
    Timeout,
    error_from_document,
    error_from_response,
)

__all__ = ["Client", "Response", "default_socket_path", "token_file_for_socket"]

Body = Union[None, bytes, BinaryIO]

# A keep-alive connection idle for longer may have been closed by the server (60 s).
_IDLE_REUSE_S = 50.0
# Heartbeats come after 15 s of silence; three missed ones mean the server is gone.
DEFAULT_STREAM_IDLE_TIMEOUT_S = 45.0
DEFAULT_TIMEOUT_S = 60.0
_BLOCK = 1 << 16


class _OneWriteConnection(http.client.HTTPConnection):
    """http.client sends a request's headers and its body in two writes; a body of up to
    _BLOCK bytes goes here in the same write as the headers, so that the server wakes
    once per request and not once for the headers and again for the body (0.3 ms a cell
    on a 2-core VM, measured: docs/performance.md, "Warm starts")."""

    _held: Optional[bytes] = None

    def endheaders(self, message_body: Any = None, *, encode_chunked: bool = False) -> None:
        if isinstance(message_body, (bytes, bytearray)) and not encode_chunked and len(message_body) <= _BLOCK:
            self._held = bytes(message_body)
            message_body = None
        try:
            super().endheaders(message_body, encode_chunked=encode_chunked)
        finally:
            self._held = None  # never carried into another request

    def send(self, data: Any) -> None:
        held, self._held = self._held, None
        if held is not None:  # the headers' write: the body joins it
            data = bytes(data) + held
        super().send(data)


class _UnixHTTPConnection(_OneWriteConnection):
    """http.client over AF_UNIX: the host name is only what goes in the Host header."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout, blocksize=_BLOCK)
        self.unix_path = path

    def connect(self) -> None:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.unix_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


_MAX_HEAD = 1 << 16  # an answer's status line and headers


class _Answer:
    """An answer read whole by _send_whole: the client's own reading of HTTP/1.1, for the
    requests whose answer is one document. http.client parses headers with the email
    package, which was most of this client's own time per cell (docs/performance.md,
    "Warm starts"); what streams or downloads in pieces still goes through it."""

    __slots__ = ("status", "headers", "data", "will_close", "_sock", "_where", "_buf", "_answered")

    def __init__(self, sock: _socket.socket, where: str) -> None:
        self._sock = sock
        self._where = where  # the server's address, for what an error says
        self._buf = bytearray()
        self._answered = False  # a byte of the answer came: the request is never sent again
        self.headers: Dict[str, str] = {}
        self.will_close = False

    def _more(self) -> bool:
        try:
            chunk = self._sock.recv(_BLOCK)
        except (ConnectionResetError, BrokenPipeError) as e:
            if self._answered:  # not a connection closed while idle: the server had it
                raise ServerUnreachable("the answer from nsbox at %s was cut: %s" % (self._where, e)) from e
            raise
        self._answered = self._answered or bool(chunk)
        self._buf += chunk
        return bool(chunk)

    def _cut(self) -> ServerUnreachable:
        return ServerUnreachable("the answer from nsbox at %s was cut short: the connection closed in it" % self._where)

    def _bad(self, what: str) -> ProtocolError:
        return ProtocolError("nsbox at %s answered with %s" % (self._where, what))

    def _take(self, n: int) -> bytes:
        while len(self._buf) < n:
            if not self._more():
                raise self._cut()
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def _line(self) -> bytes:
        while True:
            end = self._buf.find(b"\r\n")
            if end >= 0:
                return self._take(end + 2)[:-2]
            if len(self._buf) > _MAX_HEAD:
                raise self._bad("a line longer than 64 KiB")
            if not self._more():
                raise self._cut()

    def read(self, method: str) -> "_Answer":
        while True:
            end = self._buf.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(self._buf) > _MAX_HEAD:
                raise self._bad("more than 64 KiB of headers")
            if not self._more():
                if not self._buf:  # as http.client says it: the caller may send again
                    raise http.client.RemoteDisconnected("the server closed the connection without an answer")
                raise self._cut()
        lines = self._take(end + 4)[:-4].decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if version not in ("HTTP/1.1", "HTTP/1.0") or not code.isdigit() or int(code) < 200:
            raise self._bad("a status line it never sends: %r" % lines[0][:80])
        self.status = int(code)
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise self._bad("a header line it never sends: %r" % line[:80])
            self.headers[name.strip().lower()] = value.strip()
        connection = self.headers.get("connection", "").lower()
        self.will_close = connection == "close" or (version == "HTTP/1.0" and connection != "keep-alive")
        if method == "HEAD" or self.status in (204, 304):
            self.data = b""
        elif "chunked" in self.headers.get("transfer-encoding", "").lower():
            self.data = self._chunked()
        elif "content-length" in self.headers:
            try:
                length = int(self.headers["content-length"])
            except ValueError:
                raise self._bad("a Content-Length that is not a number")
            self.data = self._take(length)
        else:  # the body ends with the connection
            while self._more():
                pass
            self.data, self.will_close = bytes(self._buf), True
            self._buf.clear()
        if self._buf:  # nothing follows an answer: a connection out of step is dropped
            self.will_close = True
        return self

    def _chunked(self) -> bytes:
        body = bytearray()
        while True:
            size_line = self._line().split(b";", 1)[0].strip()
            try:
                size = int(size_line, 16)
            except ValueError:
                raise self._bad("a chunk size that is not a number")
            if size == 0:
                while self._line():  # trailers, up to the empty line
                    pass
                return bytes(body)
            body += self._take(size)
            if self._take(2) != b"\r\n":
                raise self._bad("a chunk that does not end where its size says")


_LEGAL_HEADER_NAME = re.compile(r"[^:\s][^:\r\n]*")
_ILLEGAL_IN_TARGET = re.compile(r"[\x00-\x20\x7f]")


def _request_head(method: str, target: str, host: str, headers: Mapping[str, str], body: Optional[bytes]) -> bytes:
    """The request line and headers as http.client would send them, checked as it checks
    them (an ASCII target without control characters or spaces, no line breaks in a
    header); Host, Accept-Encoding and Content-Length only where the caller gave none."""
    if not target.isascii() or _ILLEGAL_IN_TARGET.search(target):
        raise http.client.InvalidURL("the request target %r has a control character, a space or a non-ASCII character" % target)
    given = {name.lower() for name in headers}
    lines = ["%s %s HTTP/1.1" % (method, target)]
    if "host" not in given:
        lines.append("Host: " + host)
    if "accept-encoding" not in given:
        lines.append("Accept-Encoding: identity")
    for name, value in headers.items():
        if not _LEGAL_HEADER_NAME.fullmatch(name) or "\0" in name or any(c in "\r\n\0" for c in value):
            raise ValueError("invalid header %r: a line break, a NUL, a colon or a space where it cannot be" % name)
        lines.append("%s: %s" % (name, value))
    if body is not None and "content-length" not in given:
        lines.append("Content-Length: %d" % len(body))
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _state_dirs() -> Tuple[str, str]:
    """(run dir, data dir) of the state root nsbox uses by default for this user."""
    root = os.environ.get("NSBOX_ROOT")
    if root:
        return os.path.join(root, "run"), os.path.join(root, "data")
    if os.geteuid() == 0:
        return "/run/nsbox", "/var/lib/nsbox"
    xdg_run = os.environ.get("XDG_RUNTIME_DIR")
    run = os.path.join(xdg_run, "nsbox") if xdg_run else "/tmp/nsbox-%d" % os.geteuid()
    xdg_data = os.environ.get("XDG_DATA_HOME")
    if xdg_data:
        data = os.path.join(xdg_data, "nsbox")
    else:
        data = os.path.join(os.path.expanduser("~"), ".local", "share", "nsbox")
    return run, data


def default_socket_path() -> str:
    """The socket ``nsbox serve`` listens on when given neither --socket nor --listen."""
    return os.path.join(_state_dirs()[0], "api.sock")


def token_file_for_socket(socket_path: Optional[str]) -> str:
    """The token file of the state root a socket belongs to.

    ``<root>/run/api.sock`` → ``<root>/data/api/token``; the default socket of root or of
    a rootless user → that user's default token file; any other socket → the default
    token file of this user's state root.
    """
    run, data = _state_dirs()
    if socket_path:
        parent = os.path.dirname(os.path.abspath(socket_path))
        if os.path.abspath(parent) == os.path.abspath(run):
            return os.path.join(data, "api", "token")
        if parent == "/run/nsbox":
            return "/var/lib/nsbox/api/token"
        if os.path.basename(parent) == "run":
            return os.path.join(os.path.dirname(parent), "data", "api", "token")
    return os.path.join(data, "api", "token")


def _read_token(path: str) -> str:
    with open(path, "r", encoding="utf-8") as f:
        line = f.readline().strip()
    if not line:
        raise NsboxError("the token file %s is empty" % path, code="unauthorized",
                         hint="it is written by `nsbox serve` on its first start")
    return line


class Response:
    """A finished answer: status, headers (lower-case names) and the whole body."""

    __slots__ = ("status", "headers", "data")

    def __init__(self, status: int, headers: Dict[str, str], data: bytes) -> None:
        self.status = status
        self.headers = headers
        self.data = data

    def json(self) -> Any:
        try:
            return json.loads(self.data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ProtocolError("the server's answer is not JSON: %s" % e, status=self.status)


class _Conn:
    __slots__ = ("http", "last_used", "uses")

    def __init__(self, conn: http.client.HTTPConnection) -> None:
        self.http = conn
        self.last_used = time.monotonic()
        self.uses = 0


class Client:
    """A connection to one `nsbox serve`; thread-safe (one keep-alive connection per
    thread).

    >>> c = Client()                                   # NSBOX_URL / NSBOX_SOCKET or the default socket
    >>> c = Client(url="http://127.0.0.1:8080", token="...")
    >>> c = Client(socket="/tmp/x/run/api.sock")       # token from /tmp/x/data/api/token
    """

    def __init__(
        self,
        url: Optional[str] = None,
        token: Optional[str] = None,
        *,
        socket: Optional[str] = None,
        token_file: Optional[str] = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        stream_idle_timeout: float = DEFAULT_STREAM_IDLE_TIMEOUT_S,
    ) -> None:
        if url is not None and socket is not None:
            raise ValueError("give url or socket, not both")
        if url is None and socket is None:
            url = os.environ.get("NSBOX_URL") or None
            if url is None:
                socket = os.environ.get("NSBOX_SOCKET") or None
        if url is not None and url.startswith("unix:"):
            # unix:/path, unix:///path, unix://localhost/path
            parsed = urllib.parse.urlsplit(url)
            socket = urllib.parse.unquote(parsed.path)
            url = None
        self.socket_path: Optional[str] = None
        self.url: Optional[str] = None
        self._host = "localhost"
        self._port = 0
        self._host_header = "localhost"
        if url is not None:
            parsed = urllib.parse.urlsplit(url)
            if parsed.scheme != "http" or not parsed.hostname:
                raise ValueError("nsbox URLs are http://HOST:PORT (or unix:/path/to/api.sock), not %r" % url)
            if parsed.path not in ("", "/"):
                raise ValueError("an nsbox URL has no path: %r" % url)
            self._host = parsed.hostname
            self._port = parsed.port or 80
            host = "[%s]" % self._host if ":" in self._host else self._host
            self.url = "http://%s:%d" % (host, self._port)
            self._host_header = host if self._port == 80 else "%s:%d" % (host, self._port)
        else:
            self.socket_path = socket or default_socket_path()

        if token is None:
            token = os.environ.get("NSBOX_TOKEN") or None
        if token is None:
            path = token_file or os.environ.get("NSBOX_TOKEN_FILE") or token_file_for_socket(self.socket_path)
            self.token_file: Optional[str] = path
            try:
                token = _read_token(path)
            except FileNotFoundError:
                if token_file is not None or os.environ.get("NSBOX_TOKEN_FILE"):
                    raise NsboxError("no token file at %s" % path, code="unauthorized",
                                     hint="`nsbox serve` prints its token_file when ready")
                token = None  # the server will answer 401 with what to do
            except PermissionError:
                raise NsboxError("the token file %s is not readable by this user" % path, code="unauthorized",
                                 hint="run as the user that runs `nsbox serve`, or pass token=")
        else:
            self.token_file = None
        self._token = token
        self.timeout = timeout
        self.stream_idle_timeout = stream_idle_timeout
        self._local = threading.local()

    # -- where ---------------------------------------------------------------------------

    @property
    def where(self) -> str:
        """The server's address as a person would write it."""
        return self.url if self.url is not None else "unix:" + str(self.socket_path)

    def __repr__(self) -> str:
        return "nsbox.Client(%s)" % self.where

    # -- connections ---------------------------------------------------------------------

    def _new_connection(self, timeout: float) -> http.client.HTTPConnection:
        if self.socket_path is not None:
            return _UnixHTTPConnection(self.socket_path, timeout)
        return _OneWriteConnection(self._host, self._port, timeout=timeout, blocksize=_BLOCK)

    def _take_connection(self, timeout: float) -> _Conn:
        """This thread's idle connection (or a new one); the caller owns it until it gives
        it back with _give_back."""
        conn: Optional[_Conn] = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None and time.monotonic() - conn.last_used > _IDLE_REUSE_S:
            conn.http.close()
            conn = None
        if conn is None:
            conn = _Conn(self._new_connection(timeout))
        conn.http.timeout = timeout
        if conn.http.sock is not None:
            conn.http.sock.settimeout(timeout)
        return conn

    def _give_back(self, conn: _Conn) -> None:
        conn.last_used = time.monotonic()
        conn.uses += 1
        old: Optional[_Conn] = getattr(self._local, "conn", None)
        if old is not None:
            old.http.close()
        self._local.conn = conn

    def close(self) -> None:
        """Closes this thread's idle connection (others close when their threads end)."""
        conn: Optional[_Conn] = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- requests ------------------------------------------------------------------------

    def _headers(self, extra: Optional[Mapping[str, str]]) -> Dict[str, str]:
        h = {"User-Agent": "nsbox-python/0.1"}
        if self._token is not None:
            h["Authorization"] = "Bearer " + self._token
        if extra:
            h.update(extra)
        return h

    @staticmethod
    def target(path: str, query: Optional[Mapping[str, Any]] = None) -> str:
        """``path?query`` with the query percent-encoded; None values left out, booleans
        as true/false."""
        if not query:
            return path
        items = []
        for k, v in query.items():
            if v is None:
                continue
            if isinstance(v, bool):
                v = "true" if v else "false"
            items.append((k, str(v)))
        if not items:
            return path
        return path + "?" + urllib.parse.urlencode(items, quote_via=urllib.parse.quote)

    def _send(
        self,
        method: str,
        target: str,
        body: Body,
        headers: Dict[str, str],
        timeout: float,
    ) -> Tuple[_Conn, http.client.HTTPResponse]:
        """Sends one request through http.client and reads the status line and headers."""
        def exchange(conn: _Conn) -> http.client.HTTPResponse:
            conn.http.request(method, target, body=body, headers=headers)
            return conn.http.getresponse()
        return self._exchange(exchange, body, timeout)

    def _send_whole(self, method: str, target: str, body: Optional[bytes], headers: Dict[str, str],
                    timeout: float) -> Tuple[_Conn, _Answer]:
        """Sends one request in one write and reads its whole answer (see _Answer)."""
        head = _request_head(method, target, self._host_header, headers, body)

        def exchange(conn: _Conn) -> _Answer:
            if conn.http.sock is None:
                conn.http.connect()
            sock = conn.http.sock
            if body is not None and len(head) + len(body) <= _BLOCK:
                sock.sendall(head + body)
            else:
                sock.sendall(head)
                if body:
                    sock.sendall(body)
            return _Answer(sock, self.where).read(method)
        return self._exchange(exchange, body, timeout)

    def _exchange(self, exchange: Any, body: Body, timeout: float) -> Tuple[_Conn, Any]:
        """exchange(conn) on this thread's connection, its failures said as nsbox errors. A
        connection this thread used before, that the server closed while idle, is replaced
        once."""
        start_pos: Optional[int] = None
        if body is not None and not isinstance(body, (bytes, bytearray, memoryview)):
            try:
                start_pos = body.tell()
            except (AttributeError, OSError, ValueError):
                start_pos = None
        for attempt in (0, 1):
            conn = self._take_connection(timeout)
            reused = conn.uses > 0
            try:
                return conn, exchange(conn)
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                conn.http.close()
                replayable = body is None or isinstance(body, (bytes, bytearray, memoryview)) or start_pos is not None
                if attempt == 0 and reused and replayable:
                    if start_pos is not None:
                        body.seek(start_pos)  # type: ignore[union-attr]
                    continue
                raise ServerUnreachable("the connection to nsbox at %s was closed: %s" % (self.where, e)) from e
            except _socket.timeout as e:
                conn.http.close()
                raise Timeout("no answer from nsbox at %s within %.0f s" % (self.where, timeout)) from e
            except (FileNotFoundError, ConnectionRefusedError) as e:
                conn.http.close()
                raise ServerUnreachable(
                    "no nsbox server at %s (%s)" % (self.where, e.strerror or e),
                    hint="start one with `nsbox serve`, or set NSBOX_URL / NSBOX_SOCKET",
                ) from e
            except OSError as e:
                conn.http.close()
                raise ServerUnreachable("cannot reach nsbox at %s: %s" % (self.where, e)) from e
            except BaseException:
                conn.http.close()
                raise
        raise AssertionError("unreachable")

    def _prepare(self, method: str, path: str, query: Optional[Mapping[str, Any]], json_body: Any, body: Body,
                 headers: Optional[Mapping[str, str]]) -> Tuple[str, Body, Dict[str, str]]:
        """(target, body, headers): the token added, a JSON body encoded (or an empty one
        for a body-less POST, PUT or PATCH) and the query in the target."""
        h = self._headers(headers)
        if json_body is not None:
            body = json.dumps(json_body, ensure_ascii=False).encode("utf-8")
            h["Content-Type"] = "application/json"
        elif body is None and method in ("POST", "PUT", "PATCH"):
            body = b""
        return self.target(path, query), body, h

    def _send_prepared(self, method: str, path: str, query: Optional[Mapping[str, Any]], json_body: Any, body: Body,
                       headers: Optional[Mapping[str, str]], timeout: float) -> Tuple["_Conn", http.client.HTTPResponse]:
        target, body, h = self._prepare(method, path, query, json_body, body, headers)
        return self._send(method, target, body, h, timeout)

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, Any]] = None,
        json_body: Any = None,
        body: Body = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> Response:
        """One request, its whole answer read; an error answer raises its exception."""
        t = self.timeout if timeout is None else timeout
        target, body, h = self._prepare(method, path, query, json_body, body, headers)
        if body is None or isinstance(body, (bytes, bytearray, memoryview)):
            conn, answer = self._send_whole(method, target, None if body is None else bytes(body), h, t)
            status, hdrs, data, will_close = answer.status, answer.headers, answer.data, answer.will_close
        else:  # a file's body: http.client sends it block by block
            conn, response = self._send(method, target, body, h, t)
            try:
                data = response.read()
            except _socket.timeout as e:
                conn.http.close()
                raise Timeout("nsbox at %s stopped answering (no byte for %.0f s)" % (self.where, t)) from e
            except (OSError, http.client.HTTPException) as e:
                conn.http.close()
                raise ServerUnreachable("the answer from nsbox at %s was cut: %s" % (self.where, e)) from e
            status, hdrs, will_close = response.status, {k.lower(): v for k, v in response.getheaders()}, response.will_close
        if will_close:
            conn.http.close()
        else:
            self._give_back(conn)
        if status >= 400:
            raise error_from_response(status, data)
        return Response(status, hdrs, data)

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        """A request whose answer is a JSON document."""
        return self.request(method, path, **kwargs).json()

    def open(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, Any]] = None,
        json_body: Any = None,
        body: Body = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> "OpenResponse":
        """A request whose answer is read by the caller (downloads, streams): the answer
        must be closed (it is a context manager)."""
        t = self.timeout if timeout is None else timeout
        conn, response = self._send_prepared(method, path, query, json_body, body, headers, t)
        if response.status >= 400:
            try:
                data = response.read()
            except (OSError, http.client.HTTPException):
                data = b""
            conn.http.close()
            raise error_from_response(response.status, data)
        return OpenResponse(self, conn, response, t)

    def events(
        self,
        path: str,
        json_body: Any,
        *,
        idle_timeout: Optional[float] = None,
        first_timeout: Optional[float] = None,
    ) -> Generator[Dict[str, Any], None, None]:
        """POSTs a request with ``Accept: application/x-ndjson`` and yields its events as
        they come. Each read waits at most ``idle_timeout`` (the server sends a heartbeat
        after 15 s of silence). Stopping early closes the connection (for a command, that
        kills it; a cell runs on)."""
        idle = self.stream_idle_timeout if idle_timeout is None else idle_timeout
        # The status line may wait for the work to start (a cell queued behind others):
        # that first wait has its own bound; then each line comes within `idle`.
        first = idle if first_timeout is None else max(first_timeout, idle)
        answer = self.open("POST", path, json_body=json_body, headers={"Accept": "application/x-ndjson"}, timeout=first)
        answer.set_timeout(idle)
        finished = False
        try:
            ctype = answer.headers.get("content-type", "")
            if "application/x-ndjson" not in ctype:
                # A server that answers with one document: treat it as the result.
                doc = json.loads(answer.read().decode("utf-8"))
                doc = dict(doc)
                doc.setdefault("type", "result")
                finished = True
                yield doc
                return
            while True:
                event = next_event(answer)
                if event is None:
                    raise ProtocolError("the stream from nsbox at %s ended without a result" % self.where)
                kind = event.get("type")
                if kind == "heartbeat":
                    continue
                if kind == "error":
                    finished = True
                    answer.finish()
                    raise error_from_document(event.get("error"), 200)
                if kind == "result":
                    finished = True
                    answer.finish()
                    yield event
                    return
                yield event
        finally:
            if not finished:
                answer.abandon()
            answer.close()


def next_event(answer: "OpenResponse") -> Optional[Dict[str, Any]]:
    """The next event of an NDJSON answer (blank lines skipped); None at its end."""
    while True:
        line = answer.readline()
        if not line:
            return None
        line = line.strip()
        if not line:
            continue
        try:
            event = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ProtocolError("a stream line from nsbox is not JSON: %s" % e)
        if not isinstance(event, dict):
            raise ProtocolError("a stream line from nsbox is not an object")
        return event


class OpenResponse:
    """An answer being read: ``read``, ``readline``, iteration over blocks; ``close`` (or
    leaving the ``with``) gives the connection back when the whole body was read, else
    closes it."""

    def __init__(self, client: Client, conn: _Conn, response: http.client.HTTPResponse, timeout: float) -> None:
        self._client = client
        self._conn: Optional[_Conn] = conn
        self.response = response
        self.status = response.status
        self.headers = {k.lower(): v for k, v in response.getheaders()}
        self._timeout = timeout

    def set_timeout(self, timeout: float) -> None:
        """The bound of each later read."""
        self._timeout = timeout
        if self._conn is not None and self._conn.http.sock is not None:
            self._conn.http.sock.settimeout(timeout)

    @property
    def length(self) -> Optional[int]:
        v = self.headers.get("content-length")
        return int(v) if v and v.isdigit() else None

    def _guard(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except _socket.timeout as e:
            self.abandon()
            raise Timeout("nsbox at %s sent nothing for %.0f s" % (self._client.where, self._timeout)) from e
        except (OSError, http.client.HTTPException) as e:
            self.abandon()
            raise ServerUnreachable("the answer from nsbox at %s was cut: %s" % (self._client.where, e)) from e

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            return self._guard(self.response.read)  # type: ignore[no-any-return]
        return self._guard(self.response.read, n)  # type: ignore[no-any-return]

    def readline(self) -> bytes:
        return self._guard(self.response.readline)  # type: ignore[no-any-return]

    def iter_blocks(self, size: int = _BLOCK) -> Iterator[bytes]:
        while True:
            block = self.read(size)
            if not block:
                return
            yield block

    def finish(self) -> None:
        """Reads what is left of the body (nothing, normally) so the connection can be
        used again."""
        try:
            while self.response.read(_BLOCK):
                pass
        except (OSError, http.client.HTTPException):
            self.abandon()

    def abandon(self) -> None:
        """Gives up the answer: the connection is closed, not reused."""
        if self._conn is not None:
            self._conn.http.close()
            self._conn = None

    def close(self) -> None:
        if self._conn is None:
            return
        conn, self._conn = self._conn, None
        if self.response.isclosed() and not self.response.will_close:
            self._client._give_back(conn)
        else:
            conn.http.close()

    def __enter__(self) -> "OpenResponse":
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc and exc[0] is not None:
            self.abandon()
        self.close()


def buffered_body(data: Union[bytes, bytearray, memoryview, str, BinaryIO, io.IOBase]) -> Body:
    """A request body from bytes, text (UTF-8) or a binary file object."""
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if hasattr(data, "read"):
        return data  # type: ignore[return-value]
    raise TypeError("a body is bytes, str or a binary file object, not %s" % type(data).__name__)
