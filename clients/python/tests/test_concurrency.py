"""Many clients at once: 20 threads each create a sandbox, run cells and commands, move a
file, and remove it; nothing is left and every answer was right."""
from __future__ import annotations

import hashlib
import os
import threading
from typing import Dict, List

import nsbox
from conftest import Server

CLIENTS = 20


def test_twenty_clients_create_run_and_remove_sandboxes_at_once(server: Server) -> None:
    errors: Dict[int, BaseException] = {}
    ids: List[str] = []
    lock = threading.Lock()
    start = threading.Barrier(CLIENTS, timeout=120)

    def one(i: int) -> None:
        # Half over the socket, half over TCP; each thread its own client.
        c = server.client("socket" if i % 2 else "tcp", timeout=240)
        try:
            start.wait()
            with nsbox.Sandbox.create(name="many-%02d" % i, client=c) as sbx:
                with lock:
                    ids.append(sbx.id)
                assert sbx.run_code("v = %d" % i, timeout=120).status == "ok"
                assert sbx.run_code("v * 2", timeout=120).results == str(i * 2)
                r = sbx.commands.run("echo $((%d + 1))" % i, timeout=120)
                assert r.stdout == ("%d\n" % (i + 1)).encode(), r.raw
                data = os.urandom(1000 + i)
                up = sbx.files.upload(data, "f%d.bin" % i)
                assert up.sha256 == hashlib.sha256(data).hexdigest()
                assert sbx.files.download("f%d.bin" % i).buffer() == data
        except BaseException as e:  # collected, reported below
            errors[i] = e
        finally:
            c.close()

    threads = [threading.Thread(target=one, args=(i,), name="client-%d" % i) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not any(t.is_alive() for t in threads), "clients still running after 600 s"
    assert not errors, {i: repr(e) for i, e in errors.items()}
    assert len(set(ids)) == CLIENTS
    left = server.sandboxes()
    assert left == [], [s["id"] for s in left]
    assert server.alive()
