"""The kernel's side of the control socket: frames (4-byte big-endian length + JSON),
sent from any thread, received by one reader thread that routes replies to the helper
calls waiting for them and hands everything else to the main thread.

Plain os.read/os.write on the inherited fd, and a deque instead of queue.Queue: the
kernel's start-up is on the path to a sandbox's first result, and every import counts."""
import collections
import json
import os
import threading

from nsbox_helpers.transport import read_exact

MAX_FRAME = 16 << 20


class Channel:
    def __init__(self, fd):
        self._fd = fd
        self._send_lock = threading.Lock()
        self._calls_lock = threading.Lock()
        self._calls = {}  # call id -> [threading.Event, reply]
        self._next_call = 1
        self._requests = collections.deque()  # what the main thread acts on; None at EOF
        self._ready = threading.Condition()
        threading.Thread(target=self._read_loop, name="nsbox-channel", daemon=True).start()

    def send(self, message):
        data = json.dumps(message, ensure_ascii=False, default=repr).encode("utf-8", "surrogateescape")
        frame = len(data).to_bytes(4, "big") + data
        with self._send_lock:
            view = memoryview(frame)
            while view:
                view = view[os.write(self._fd, view):]

    def call(self, op, **fields):
        """Sends a request to the supervisor and waits for its answer. Thread-safe."""
        event = threading.Event()
        with self._calls_lock:
            call_id = self._next_call
            self._next_call += 1
            self._calls[call_id] = [event, None]
        self.send(dict(fields, op=op, call=call_id))
        event.wait()
        with self._calls_lock:
            return self._calls.pop(call_id)[1]

    def next_request(self):
        """The next message for the main thread; None once the supervisor is gone."""
        with self._ready:
            while not self._requests:
                self._ready.wait()
            return self._requests.popleft()

    def _deliver(self, message):
        with self._ready:
            self._requests.append(message)
            self._ready.notify()

    def _read_exact(self, n):
        return read_exact(lambda k: os.read(self._fd, k), n)

    def _read_loop(self):
        try:
            while True:
                header = self._read_exact(4)
                if header is None:
                    break
                length = int.from_bytes(header, "big")
                if length > MAX_FRAME:
                    break
                body = self._read_exact(length)
                if body is None:
                    break
                message = json.loads(body)
                call_id = message.get("call")
                if message.get("event") == "reply" and call_id is not None:
                    with self._calls_lock:
                        waiting = self._calls.get(call_id)
                        if waiting:
                            waiting[1] = message
                            waiting[0].set()
                    continue
                self._deliver(message)
        except (OSError, ValueError):
            pass
        # The supervisor is gone: wake every waiting call, and the main thread.
        with self._calls_lock:
            for waiting in self._calls.values():
                waiting[1] = {"error": "the sandbox's supervisor is gone"}
                waiting[0].set()
        self._deliver(None)
