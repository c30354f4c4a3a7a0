"""Serving a sandbox's tool calls from this process: the tool bridge's callback backend
(``tools={"backend": "callback"}``), so that a framework answers ``run_composio_tool`` and
the other helpers from its own code, with its own credentials (docs/tools.md).

    sbx = Sandbox.create(tools={"backend": "callback"})
    server = sbx.on_tool_call(lambda helper, args: {"echo": args})
    sbx.run_code('run_composio_tool("ANY", {"x": 1})')   # -> ({'echo': {...}}, None)
    server.stop()
"""
from __future__ import annotations

import json
import socket as _socket
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Optional

from ._http import Client, OpenResponse
from .errors import NsboxError, ProtocolError

ToolHandler = Callable[[str, Dict[str, Any]], Any]


class ToolCallServer:
    """Receives the sandbox's tool calls on ``GET .../events`` and posts each answer to
    ``.../tool_calls/{call_id}``. ``handler(helper, args)`` returns the result (JSON);
    an exception becomes the call's error (its message). Calls run on ``workers``
    threads at once. :meth:`stop` ends it; ``error`` says why it ended on its own."""

    def __init__(self, client: Client, base: str, handler: ToolHandler, *, workers: int = 16) -> None:
        self._client = client
        self._base = base
        self._handler = handler
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nsbox-tool-call")
        self._response: Optional[OpenResponse] = None
        self._lock = threading.Lock()
        self._stopped = False
        self._subscribed = threading.Event()
        self.error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._serve, name="nsbox-tool-calls", daemon=True)
        self._thread.start()

    def wait_subscribed(self, timeout: float = 30.0) -> bool:
        """Whether the sandbox sends its calls here yet (they go nowhere before)."""
        return self._subscribed.wait(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        with self._lock:
            self._stopped = True
            response = self._response
        if response is not None and response._conn is not None and response._conn.http.sock is not None:
            try:
                response._conn.http.sock.shutdown(_socket.SHUT_RDWR)  # wakes the reading thread
            except OSError:
                pass
        self._thread.join(timeout)
        self._pool.shutdown(wait=True)

    def _serve(self) -> None:
        try:
            response = self._client.open("GET", self._base + "/events", headers={"Accept": "application/x-ndjson"})
            with self._lock:
                self._response = response
                stopped = self._stopped
            if stopped:
                response.abandon()
                return
            response.set_timeout(self._client.stream_idle_timeout)
            with response:
                while True:
                    line = response.readline()
                    if not line:
                        return
                    line = line.strip()
                    if not line:
                        continue
                    event = json.loads(line.decode("utf-8"))
                    kind = event.get("type") if isinstance(event, dict) else None
                    if kind == "subscribed":
                        self._subscribed.set()
                    elif kind == "tool_call":
                        self._pool.submit(self._answer, event)
                    elif kind == "error":
                        raise NsboxError(str(event.get("error")))
        except BaseException as e:  # noqa: BLE001 - kept for the owner, the thread ends
            with self._lock:
                if not self._stopped:
                    self.error = e if not isinstance(e, ValueError) else ProtocolError("a tool call event is not JSON")

    def _answer(self, event: Dict[str, Any]) -> None:
        call_id = str(event.get("call_id", ""))
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        try:
            result, error = self._handler(str(event.get("helper", "")), args), None
        except Exception as e:  # noqa: BLE001 - the handler's failure is the call's error
            result, error = None, "%s: %s" % (type(e).__name__, e)
        try:
            self._client.json("POST", self._base + "/tool_calls/" + call_id,
                              json_body={"result": result, "error": error})
        except NsboxError:
            pass  # answered too late (timed out, or abandoned at the cell's deadline)
