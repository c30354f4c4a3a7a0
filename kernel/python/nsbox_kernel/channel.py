"""The kernel's side of the control socket: frames (4-byte big-endian length + JSON),
sent from any thread, received by one reader thread that routes replies to the helper
calls waiting for them and hands everything else to the main thread."""
import json
import queue
import socket
import struct
import threading

MAX_FRAME = 16 << 20


class Channel:
    def __init__(self, fd):
        self._sock = socket.socket(fileno=fd)
        self._send_lock = threading.Lock()
        self._calls_lock = threading.Lock()
        self._calls = {}  # call id -> [threading.Event, reply]
        self._next_call = 1
        self.requests = queue.Queue()  # what the main thread acts on; None at EOF
        threading.Thread(target=self._read_loop, name="nsbox-channel", daemon=True).start()

    def send(self, message):
        data = json.dumps(message, ensure_ascii=False, default=repr).encode("utf-8", "surrogateescape")
        with self._send_lock:
            self._sock.sendall(struct.pack(">I", len(data)) + data)

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

    def _read_exact(self, n):
        chunks = []
        while n:
            chunk = self._sock.recv(n)
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _read_loop(self):
        try:
            while True:
                header = self._read_exact(4)
                if header is None:
                    break
                (length,) = struct.unpack(">I", header)
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
                self.requests.put(message)
        except (OSError, ValueError):
            pass
        # The supervisor is gone: wake every waiting call, and the main thread.
        with self._calls_lock:
            for waiting in self._calls.values():
                waiting[1] = {"error": "the sandbox's supervisor is gone"}
                waiting[0].set()
        self.requests.put(None)
