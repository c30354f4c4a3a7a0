"""Clients that ask for downloads and never read them (issue 33, finding 2): 260 of them,
each opening a download link of a sandbox of shard b through shard a, once held every
worker of shard a in the relay, so that /livez, /readyz and every request were refused
(a kubelet restarts such a pod). A sandbox's links now have a budget of their own
(docs/api.md, "Limits"): the rest of the server is served meanwhile, including another
sandbox's links, and the slots come back when the clients go.

Two shards and s3rver (tests/cluster/cluster.py). No assertion is about speed: each
request has a generous bound (SERVED_WITHIN_S) that only a refusal or a hang exceeds."""
from __future__ import annotations

import json
import os
import resource
import socket
from typing import Any, Dict, List

from cluster import Cluster, http_call, nsbox, wait_until

SILENT_READERS = 260
SERVED_WITHIN_S = 15
LINK_BUDGET_PER_SANDBOX = 16  # docs/api.md, "Limits"
# Larger than what the kernel's buffers and the relay's backlog hold between the owner
# and a client that reads nothing, so that a relay waits for that client.
FILE_BYTES = 16 << 20


def raise_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        assert hard == resource.RLIM_INFINITY or hard >= needed, "RLIMIT_NOFILE's hard limit %d < %d" % (hard, needed)
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def signed_link(cluster: Cluster, sandbox: Any, path: str) -> str:
    status, _, body = http_call(cluster.url("b"), "POST", "/v1/sandboxes/%s/files:sign?path=%s" % (sandbox.id, path),
                                token=cluster.token, body=b"{}", headers={"Content-Type": "application/json"})
    assert status == 200, body
    return str(json.loads(body)["download_path"])


def silent_readers(url: str, link: str, count: int) -> List[socket.socket]:
    """``count`` connections with a small receive buffer, each asking for ``link`` and
    never reading."""
    host, port = url[len("http://"):].rsplit(":", 1)
    opened: List[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket()
            opened.append(s)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.settimeout(10)
            s.connect((host, int(port)))
            s.sendall(b"GET " + link.encode() + b" HTTP/1.1\r\nHost: nsbox\r\n\r\n")
    except BaseException:
        for s in opened:
            s.close()
        raise
    return opened


def status_line(s: socket.socket) -> bytes:
    """The first line of what the server sent, peeked (nothing is read: the window stays
    closed); b"" while nothing came."""
    s.setblocking(False)
    try:
        return s.recv(64, socket.MSG_PEEK).split(b"\r\n")[0]
    except BlockingIOError:
        return b""
    finally:
        s.setblocking(True)


def test_downloads_nobody_reads_cost_their_sandboxs_link_budget_not_the_shard(make_cluster: Any) -> None:
    """260 clients open a link of a sandbox of shard b through shard a and never read. Until
    they go, shard a answers /livez, /readyz, a token's requests (a relayed one too) and
    another sandbox's link in full; at most the per-sandbox budget of them are being
    answered, the others were refused at once (503, Retry-After); once they close, the
    link opens again."""
    raise_fd_limit(SILENT_READERS + 256)
    cluster = make_cluster(shards=("a", "b"))
    client = cluster.client("b")
    victim = nsbox.Sandbox.create(client=client)
    other = nsbox.Sandbox.create(client=client)
    cluster.track(victim.id)
    cluster.track(other.id)
    try:
        victim.files.upload(os.urandom(FILE_BYTES), "big.bin")
        small = os.urandom(1 << 20)
        other.files.upload(small, "small.bin")
        link = signed_link(cluster, victim, "big.bin")
        other_link = signed_link(cluster, other, "small.bin")
        a = cluster.url("a")

        readers = silent_readers(a, link, SILENT_READERS)
        try:
            # Every one was answered or refused (a head came), none read a byte of it.
            wait_until(lambda: all(status_line(s) for s in readers), 60, "a status line on every silent reader")
            for path, token in (("/livez", None), ("/readyz", None), ("/v1/info", cluster.token),
                                ("/v1/sandboxes/" + victim.id, cluster.token)):
                status, _, body = http_call(a, "GET", path, token=token, timeout=SERVED_WITHIN_S)
                assert status == 200, (path, status, body[:300])
            status, _, got = http_call(a, "GET", other_link, timeout=SERVED_WITHIN_S)
            assert status == 200 and got == small, (status, got[:300])

            lines: Dict[bytes, int] = {}
            for s in readers:
                line = status_line(s)
                lines[line] = lines.get(line, 0) + 1
            print("what the silent readers were sent:", lines)
            served = lines.get(b"HTTP/1.1 200 OK", 0)
            refused = lines.get(b"HTTP/1.1 503 Service Unavailable", 0)
            assert 0 < served <= LINK_BUDGET_PER_SANDBOX and served + refused == SILENT_READERS, lines
        finally:
            for s in readers:
                s.close()

        def opens() -> bool:
            status, _, got = http_call(a, "GET", link, timeout=120)
            return status == 200 and len(got) == FILE_BYTES

        # The relays notice their clients left; their slots come back.
        wait_until(opens, 120, "the link to open again once the silent readers closed")
    finally:
        victim.remove()
        other.remove()
