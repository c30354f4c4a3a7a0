"""How nsbox_helpers reaches the tool bridge: in the kernel, its control channel
(installed by nsbox_kernel); in any other process, the bridge's socket at
/run/nsbox/bridge.sock, one connection per process shared by its threads.

Frames as on every nsbox socket (frames.py):
  -> {"call": N, "helper": "run_tool", "args": {...}}
  <- {"call": N, "result": ..., "error": null | "..."}"""
import os
import threading

from . import frames

SOCKET_PATH = "/run/nsbox/bridge.sock"

_installed = None  # the kernel's: a callable(helper, args) -> reply dict


def install(call):
    global _installed
    _installed = call


def call(helper, args):
    """The bridge's reply ({"result", "error"}) to one call; never raises."""
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
