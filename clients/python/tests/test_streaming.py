"""Streamed answers (NDJSON): events arrive while the cell runs, in order, and end with the
result; a client that goes away mid-cell leaves the cell running to its end."""
from __future__ import annotations

import http.client
import json
import socket
from typing import Any, List, Tuple

import pytest

import nsbox
from conftest import Server, wait_until

# Each step waits for the test to acknowledge the event before it: the order the test
# sees is then the order things happened, whatever the timing.
HANDSHAKE_CELL = r'''
import os, time
def wait(p):
    t = time.time()
    while not os.path.exists(p):
        if time.time() - t > 60:
            raise TimeoutError(p)
        time.sleep(0.02)
print("step-1", flush=True)
wait("/mnt/files/ack-1")
set_progress("LOADING", "1/2")
wait("/mnt/files/ack-2")
print("step-2", flush=True)
wait("/mnt/files/ack-3")
set_progress("SAVING")
output = "done"
'''


def test_cell_events_arrive_live_and_in_order(sandbox: nsbox.Sandbox, server: Server) -> None:
    events: List[Tuple[Any, ...]] = []
    helper = server.client("tcp")
    acked: List[str] = []

    def ack(name: str) -> None:
        if name not in acked:
            acked.append(name)
            helper.json("PUT", "/v1/sandboxes/%s/files" % sandbox.id, query={"path": name}, body=b"")

    def on_stdout(text: str) -> None:
        # Output may come in pieces ("step-1", "\n"): pieces in a row are one entry.
        if events and events[-1][0] == "stdout":
            events[-1] = ("stdout", events[-1][1] + text)
        else:
            events.append(("stdout", text))
        printed = "".join(e[1] for e in events if e[0] == "stdout")
        if "step-1\n" in printed:
            ack("ack-1")
        if "step-2\n" in printed:
            ack("ack-3")

    def on_progress(step: str, metric: Any) -> None:
        events.append(("progress", step, metric))
        if step == "LOADING":
            ack("ack-2")

    try:
        ex = sandbox.run_code(HANDSHAKE_CELL, timeout=120, on_stdout=on_stdout, on_progress=on_progress)
    finally:
        helper.close()
    assert ex.status == "ok", ex.raw
    assert ex.results == "done"  # `output` is shown with str(), an expression with repr()
    assert events == [("stdout", "step-1\n"), ("progress", "LOADING", "1/2"), ("stdout", "step-2\n"),
                      ("progress", "SAVING", None)]
    assert ex.stdout == "step-1\nstep-2\n"


def test_the_raw_stream_is_ndjson_from_started_to_result(server: Server, sandbox: nsbox.Sandbox) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", int((server.url or "").rsplit(":", 1)[1]), timeout=60)
    try:
        body = json.dumps({"code": "print('x')\nimport sys; print('e', file=sys.stderr)\n41 + 1"})
        conn.request("POST", "/v1/sandboxes/%s/cells" % sandbox.id, body=body,
                     headers={"Authorization": "Bearer " + (server.token or ""), "Accept": "application/x-ndjson",
                              "Content-Type": "application/json"})
        r = conn.getresponse()
        assert r.status == 200
        assert r.getheader("Content-Type", "").startswith("application/x-ndjson")
        lines = [json.loads(line) for line in r.read().splitlines() if line.strip()]
    finally:
        conn.close()
    kinds = [e["type"] for e in lines if e["type"] != "heartbeat"]
    assert kinds[0] == "started" and kinds[-1] == "result"
    assert set(kinds[1:-1]) == {"stderr", "stdout"}  # output may come in several pieces
    assert "".join(e["text"] for e in lines if e["type"] == "stdout") == "x\n"
    assert "".join(e["text"] for e in lines if e["type"] == "stderr") == "e\n"
    assert lines[-1]["results"] == "42" and lines[-1]["cell"] == lines[0]["cell"]


def test_command_output_streams_in_order_and_the_result_keeps_the_bytes(sandbox: nsbox.Sandbox) -> None:
    out: List[str] = []
    err: List[str] = []
    r = sandbox.commands.run("for i in 1 2 3; do echo line-$i; echo err-$i >&2; done; printf '\\377'",
                             on_stdout=out.append, on_stderr=err.append)
    assert r.exit_code == 0
    assert "".join(out) == "line-1\nline-2\nline-3\n\ufffd"
    assert "".join(err) == "err-1\nerr-2\nerr-3\n"
    assert r.stdout == b"line-1\nline-2\nline-3\n\xff"


class GoAway(Exception):
    pass


def test_a_client_that_disconnects_mid_cell_leaves_it_finishing(sandbox: nsbox.Sandbox, server: Server) -> None:
    cell = ("import time\nprint('begun', flush=True)\ntime.sleep(2)\nfinished = 'yes'\n"
            "open('/mnt/files/finished', 'w').write('yes')")

    def leave(_text: str) -> None:
        raise GoAway()

    with pytest.raises(GoAway):
        sandbox.run_code(cell, timeout=60, on_stdout=leave)
    # The next cell queues behind the first, which ran to its end.
    after = sandbox.run_code("finished", timeout=60)
    assert after.status == "ok", after.raw
    assert after.results == "'yes'"
    assert sandbox.files.read_bytes("finished") == b"yes"
    assert sandbox.info().status == "running"


def test_a_client_that_disconnects_while_waiting_for_the_document_leaves_the_cell(server: Server,
                                                                                   sandbox: nsbox.Sandbox) -> None:
    body = json.dumps({"code": "import time\ntime.sleep(1.5)\nopen('/mnt/files/doc-done', 'w').write('1')\nz = 7"})
    s = socket.create_connection(("127.0.0.1", int((server.url or "").rsplit(":", 1)[1])), timeout=30)
    try:
        s.sendall(("POST /v1/sandboxes/%s/cells HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                   "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                   % (sandbox.id, server.token, len(body), body)).encode())
    finally:
        s.close()  # gone before any answer
    assert wait_until(lambda: sandbox.files.list().entries and
                      "doc-done" in [e.name for e in sandbox.files.list()], 60)
    assert sandbox.run_code("z").results == "7"


def test_a_client_that_disconnects_mid_command_has_it_killed(sandbox: nsbox.Sandbox) -> None:
    def leave(_text: str) -> None:
        raise GoAway()

    with pytest.raises(GoAway):
        sandbox.commands.run("echo begun; sleep 4; touch /tmp/after", timeout=60, on_stdout=leave)

    def no_sleep_left() -> bool:
        return sandbox.commands.run("pgrep -x sleep", timeout=30).exit_code == 1

    assert wait_until(no_sleep_left, 15)
    assert sandbox.commands.run("test -e /tmp/after").exit_code == 1  # it never got there
