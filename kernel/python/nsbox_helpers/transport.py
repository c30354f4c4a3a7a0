"""How nsbox_helpers reaches the tool bridge: in the kernel, its control channel
(installed by nsbox_kernel); in any other process, the bridge's socket at
/run/nsbox/bridge.sock, one connection per process shared by its threads.

Frames as on every nsbox socket (frames.py):
  -> {"call": N, "helper": "run_tool", "args": {...}}
  <- {"call": N, "result": ..., "error": null | "..."}

A call past a tool call's limits (docs/tools.md, "Limits") is answered here, before it is
sent, with the words the supervisor would use: the supervisor refuses it too, but a frame
past the shape limits is dropped there as malformed, with no answer to wait for."""
import json
import os
import threading

from . import frames

SOCKET_PATH = "/run/nsbox/bridge.sock"
# runtime/protocol/tool_call.h (kMaxCallBytes) and frame.h (kUntrustedJson).
MAX_CALL_BYTES = 4 << 20
MAX_CALL_DEPTH = 64
MAX_CALL_VALUES = 1 << 16
# The largest envelope around the arguments: the kernel's {"op", "name", "args", "call"}
# adds 1 level, and 5 values as the supervisor counts them (1 + each member).
_ENVELOPE_VALUES = 5

_installed = None  # the kernel's: a callable(helper, args) -> reply dict


def install(call):
    global _installed
    _installed = call


def past_limits(helper, args):
    """The error for a call past a tool call's limits, or None. Counts as the supervisor
    does (runtime/protocol/frame.cc, measure_json): a value for the document, and for
    each container its members, or 1 if it has none; and stops as soon as a limit is
    passed, so a cyclic or huge structure costs little."""
    values, stack = _ENVELOPE_VALUES, [(args, 2)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            members = value.values()
        elif isinstance(value, (list, tuple)):
            members = value
        else:
            continue
        if depth > MAX_CALL_DEPTH:
            return f"{helper}: the call nests deeper than {MAX_CALL_DEPTH} levels (a tool call's limit)"
        values += max(len(members), 1)
        if values > MAX_CALL_VALUES:
            return f"{helper}: the call holds more than {MAX_CALL_VALUES} values (a tool call's limit)"
        stack.extend((member, depth + 1) for member in members)
    size = len(json.dumps({"call": 1 << 53, "helper": helper, "args": args}, ensure_ascii=False,
                          default=repr).encode("utf-8", "surrogateescape"))
    if size > MAX_CALL_BYTES:
        return f"{helper}: the call is {size / (1 << 20):.1f} MiB, more than the 4 MiB a tool call may send"
    return None


def call(helper, args):
    """The bridge's reply ({"result", "error"}) to one call; never raises."""
    try:
        refused = past_limits(helper, args)
    except (TypeError, ValueError) as e:  # what json cannot encode at all (a cycle)
        refused = f"{helper}: the call cannot be sent as JSON ({e})"
    if refused:
        return {"result": None, "error": refused}
    if _installed is not None:
        return _installed(helper, args)
    try:
        return _SocketConnection.get().call(helper, args)
    except OSError as e:
        return {"result": None, "error": f"{helper}: the tool bridge is not reachable ({SOCKET_PATH}: "
                                         f"{e.strerror or e}); a one-shot `nsbox run` sandbox has none"}


class _SocketConnection:
    _lock = threading.Lock()
    _current = None  # (pid, connection): a child after fork makes its own

    @classmethod
    def get(cls):
        with cls._lock:
            if cls._current is None or cls._current[0] != os.getpid() or cls._current[1]._closed:
                cls._current = (os.getpid(), cls())
            return cls._current[1]

    def __init__(self):
        import socket  # not in the kernel, which has its channel
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.connect(SOCKET_PATH)
        self._send_lock = threading.Lock()
        self._calls_lock = threading.Lock()
        self._calls = {}
        self._next = 1
        self._closed = False
        threading.Thread(target=self._read_loop, name="nsbox-bridge", daemon=True).start()

    def call(self, helper, args):
        event = threading.Event()
        with self._calls_lock:
            if self._closed:
                raise OSError("the connection to the tool bridge closed")
            call_id = self._next
            self._next += 1
            self._calls[call_id] = [event, None]
        frame = frames.encode({"call": call_id, "helper": helper, "args": args})
        with self._send_lock:
            self._sock.sendall(frame)
        event.wait()
        with self._calls_lock:
            return self._calls.pop(call_id)[1]

    def _read_loop(self):
        reason = "the tool bridge closed the connection"
        try:
            while True:
                reply = frames.read(self._sock.recv)
                if reply is None:
                    break
                with self._calls_lock:
                    waiting = self._calls.get(reply.get("call"))
                    if waiting:
                        waiting[1] = reply
                        waiting[0].set()
                    elif reply.get("call") == 0 and reply.get("error"):
                        reason = reply["error"]  # refused as a whole (too many connections)
        except (OSError, ValueError) as e:
            reason = f"the connection to the tool bridge broke: {e}"
        with self._calls_lock:
            self._closed = True
            for waiting in self._calls.values():
                waiting[1] = {"result": None, "error": reason}
                waiting[0].set()
