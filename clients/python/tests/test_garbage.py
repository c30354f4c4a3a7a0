"""The server survives garbage: 1,000 random and mutated raw HTTP requests, over TCP and
the unix socket, each whole one answered, then a normal request still works and no
sandbox was harmed."""
from __future__ import annotations

import collections
import os
import random
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Counter, List, Optional

import nsbox
from conftest import Server

REQUESTS = 1000
SEED = int(os.environ.get("NSBOX_GARBAGE_SEED", "20261129"))
# Methods a mutation may put in place of another: none that changes state, since a
# request with the real token may survive its mutation (GET /v1/sandboxes turned into a
# DELETE of the victim would be the test's doing, not the server's).
METHODS = [b"GET", b"HEAD", b"OPTIONS", b"CONNECT", b"TRACE", b"BREW", b"", b"get", b"G\x00T", b"GET GET"]


def _request(method: bytes, target: bytes, headers: List[bytes], body: bytes = b"", version: bytes = b"HTTP/1.1") -> bytes:
    head = method + b" " + target + b" " + version + b"\r\nHost: nsbox\r\n" + b"".join(h + b"\r\n" for h in headers)
    if body and not any(h.lower().startswith(b"content-length") or h.lower().startswith(b"transfer-encoding")
                        for h in headers):
        head += b"Content-Length: " + str(len(body)).encode() + b"\r\n"
    return head + b"\r\n" + body


def _templates(victim: str, token: str) -> List[Callable[[random.Random], bytes]]:
    good = b"Authorization: Bearer " + token.encode()
    bad = b"Authorization: Bearer " + b"0" * 43
    v = victim.encode()
    jtype = b"Content-Type: application/json"

    def chunked(rng: random.Random) -> bytes:
        # Chunk sizes that lie, are not hex, or never end.
        body = rng.choice([b"5\r\nhello\r\n0\r\n\r\n", b"zz\r\nxx\r\n", b"ffffffffffffffffff\r\nx", b"3\r\nab",
                           b"-1\r\n\r\n", b"5;ext=1\r\nhello\r\n0\r\nTrailer: x\r\n\r\n"])
        return _request(b"PUT", b"/v1/sandboxes/" + v + b"/files?path=garbage/c" + str(rng.randrange(99)).encode(),
                        [good, b"Transfer-Encoding: chunked"], body)

    return [  # the chunked one last (its bodies may never end: see ANSWERED)
        lambda rng: _request(b"GET", b"/v1/sandboxes", [good]),
        lambda rng: _request(b"GET", b"/v1/sandboxes/" + v, [good]),
        lambda rng: _request(b"POST", b"/v1/sandboxes/sbx-nonexist0/cells", [good, jtype], b'{"code": "1+1"}'),
        lambda rng: _request(b"POST", b"/v1/sandboxes", [bad, jtype], b'{"size": "standard", "name": "garbage"}'),
        lambda rng: _request(b"PUT", b"/v1/sandboxes/" + v + b"/files?path=garbage/g" + str(rng.randrange(99)).encode(),
                             [good], os.urandom(rng.randrange(0, 3000))),
        lambda rng: _request(b"GET", b"/v1/sandboxes/" + v + b"/files?path=kept.txt", [good]),
        lambda rng: _request(b"GET", b"/v1/sandboxes/" + v + b"/files:ls?path=&limit=5", [good]),
        lambda rng: _request(b"GET", b"/v1/sandboxes/" + v + b"/fs:ls?path=%2Fhome%2Fuser", [good]),
        lambda rng: _request(b"POST", b"/v1/sessions", [bad, jtype], b'{"user_id": "g", "sandbox": {"enable": true}}'),
        lambda rng: _request(b"POST", b"/v1/sandboxes/sbx-nonexist1/commands", [good, jtype],
                             b'{"argv": ["true"], "timeout_s": 5}', ),
        lambda rng: _request(b"DELETE", b"/v1/sandboxes/sbx-nonexist2", [good]),
        lambda rng: _request(b"PATCH", b"/v1/sandboxes/" + v, [bad, jtype], b'{"size": "large"}'),
        lambda rng: _request(b"POST", b"/v1/sandboxes/" + v + b"/files:sign?path=kept.txt", [good, jtype],
                             b'{"expires_in_s": 60}'),
        lambda rng: _request(b"GET", b"/v1/sandboxes/" + v + b"/files?path=kept.txt&expires=1&signature=AAAA", []),
        lambda rng: _request(b"POST", b"/v1/sandboxes/sbx-nonexist3/cells", [good, jtype, b"Accept: application/x-ndjson"],
                             b'{"code": "print(1)"}'),
        chunked,
    ]


# The mutations after which the request is whole, its framing included (a head that ends,
# a body as long as it says), whatever its template: a server must answer each with a
# status, an error or not. 3: a header block over 16 KiB; 6: a line that is not HTTP;
# 12: conflicting framing headers. And those of a template with a whole body (all but
# the chunked one, whose chunk sizes lie): 7 (a thousand headers), 8 (another method or
# version), 10 (the request, then more), 13 (as it is). The others (bytes flipped or cut,
# junk, a Content-Length that lies, noise, a body of another length) may leave the server
# waiting for the rest until the client leaves, with nothing to answer.
ANSWERED = {3, 6, 12}
ANSWERED_WHOLE_BODY = {7, 8, 10, 13}


def _mutate(data: bytes, rng: random.Random) -> bytes:
    return _mutate_kind(data, rng)[0]


def _mutate_kind(data: bytes, rng: random.Random) -> "tuple[bytes, int]":
    """The mutated request, and which mutation it was (see ANSWERED)."""
    kind = rng.randrange(14)
    return _mutation(data, rng, kind), kind


def _mutation(data: bytes, rng: random.Random, kind: int) -> bytes:
    b = bytearray(data)
    if kind == 0 and b:  # flip bytes
        for _ in range(rng.randint(1, 6)):
            b[rng.randrange(len(b))] = rng.randrange(256)
    elif kind == 1 and b:  # cut short
        del b[rng.randrange(len(b)):]
    elif kind == 2:  # insert junk
        at = rng.randrange(len(b) + 1)
        b[at:at] = os.urandom(rng.randint(1, 40))
    elif kind == 3:  # a header block over 16 KiB
        at = data.find(b"\r\n") + 2
        b[at:at] = b"X-Big: " + b"a" * rng.randint(16 * 1024, 40 * 1024) + b"\r\n"
    elif kind == 4:  # a Content-Length that lies (more than sent)
        at = data.find(b"\r\n") + 2
        b[at:at] = b"Content-Length: " + str(rng.choice([10 ** 6, 2 ** 63, -5, 99999999999999999999])).encode() + b"\r\n"
    elif kind == 5:  # pure noise
        return os.urandom(rng.randint(0, 2000))
    elif kind == 6:  # a printable line that is not HTTP
        return bytes(rng.randrange(32, 127) for _ in range(rng.randint(1, 300))) + b"\r\n\r\n"
    elif kind == 7:  # a thousand headers
        at = data.find(b"\r\n") + 2
        b[at:at] = b"".join(b"X-H%d: v\r\n" % i for i in range(1000))
    elif kind == 8:  # another method or version
        sp = data.find(b" ")
        b[:sp] = rng.choice(METHODS)
        if rng.random() < 0.5:
            line_end = b.find(b"\r\n")
            b[line_end - 8:line_end] = rng.choice([b"HTTP/1.0", b"HTTP/2.0", b"HTTP/9.9", b"http/1.1", b"HTTP/1.1 x"])
    elif kind == 9:  # NUL and control bytes in the target
        sp = data.find(b" ") + 1
        b[sp + 1:sp + 1] = rng.choice([b"\x00", b"%00", b"\r", b"\n", b"../../", b"%2e%2e/", b"//", b"?path=..%2F.."])
    elif kind == 10:  # pipelined: the request, then a mutated copy
        return data + _mutate(data, rng)
    elif kind == 11:  # a body that is not the JSON it claims
        end = data.find(b"\r\n\r\n")
        return data[:end + 4] + rng.choice([b"{", b"[]", b"null", b'{"code": 5}', b'{"code_b64": "***"}',
                                            b'{"timeout_s": -1, "code": "1"}', b'"\xff\xfe"', b"{}" * 1000])
    elif kind == 12:  # duplicated and conflicting framing headers
        at = data.find(b"\r\n") + 2
        b[at:at] = b"Content-Length: 3\r\nContent-Length: 7\r\nTransfer-Encoding: chunked\r\n"
    # kind 13: the request as it is
    return bytes(b)


def _send(server: Server, payload: bytes, use_unix: bool, answer_within_s: float) -> Optional[int]:
    """Sends the bytes, waits for an answer (``answer_within_s``: a whole request waits
    long, so that a slow host or sanitizer build is not taken for a server that does not
    answer), then closes the write side (the server takes that as the client leaving) and
    reads until EOF (5 s at most); returns the first status seen, None when the server
    answered nothing."""
    if use_unix:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        addr: object = server.socket
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        addr = ("127.0.0.1", int((server.url or "").rsplit(":", 1)[1]))
    s.settimeout(5)
    got = b""
    try:
        s.connect(addr)  # type: ignore[arg-type]
        try:
            s.sendall(payload)
        except OSError:
            pass  # the server may close first (a header block too big): its answer is still there
        s.settimeout(answer_within_s)
        try:
            got = s.recv(65536)
        except socket.timeout:
            pass
        s.settimeout(5)
        try:
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        while len(got) < 65536:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    except (socket.timeout, OSError):
        pass
    finally:
        s.close()
    # An HTTP/1.0 request is answered in HTTP/1.0.
    if got[:9] in (b"HTTP/1.1 ", b"HTTP/1.0 ") and got[9:12].isdigit():
        return int(got[9:12])
    return None


def test_a_thousand_garbage_requests_harm_nothing(server: Server, sock_client: nsbox.Client) -> None:
    rng = random.Random(SEED)
    with nsbox.Sandbox.create(name="victim", client=sock_client) as victim:
        victim.run_code("x = 5")
        victim.files.upload(b"precious", "kept.txt")
        templates = _templates(victim.id, server.token or "")
        chunked = len(templates) - 1
        payloads = []
        for _ in range(REQUESTS):
            which = rng.randrange(len(templates))
            data, kind = _mutate_kind(templates[which](rng), rng)
            whole = kind in ANSWERED or (kind in ANSWERED_WHOLE_BODY and which != chunked)
            payloads.append((data, rng.random() < 0.25, whole, kind))
        statuses: Counter[Optional[int]] = collections.Counter()
        unanswered: List[str] = []  # whole requests that got no status
        lock = threading.Lock()

        def one(item: tuple) -> None:  # type: ignore[type-arg]
            status = _send(server, item[0], item[1], 30 if item[2] else 0.5)
            with lock:
                statuses[status] += 1
                if status is None and item[2]:
                    unanswered.append("mutation %d over %s: %r" % (item[3], "unix" if item[1] else "tcp", item[0][:120]))

        with ThreadPoolExecutor(max_workers=12) as pool:
            list(pool.map(one, payloads, timeout=900))

        assert server.alive(), server.log()
        assert sum(1 for p in payloads if p[2]) > REQUESTS // 4  # whole requests, as the seed draws them
        assert unanswered == [], "%d whole requests got no answer; e.g. %s" % (len(unanswered), unanswered[:3])
        assert statuses[400] > 0 and statuses[401] > 0, statuses  # the requests reached the parser
        assert statuses[500] == 0, (statuses, server.log())
        # A normal request still works, on both listeners.
        for transport in ("socket", "tcp"):
            c = server.client(transport)
            try:
                assert [s.id for s in nsbox.Sandbox.list(client=c)] == [victim.id]
                assert c.json("GET", "/livez") == {"live": True}
            finally:
                c.close()
        # No sandbox harmed.
        assert victim.info().status == "running"
        assert victim.run_code("x").results == "5"
        assert victim.files.download("kept.txt").buffer() == b"precious"
        print("garbage statuses (seed %d): %s" % (SEED, dict(statuses)))
