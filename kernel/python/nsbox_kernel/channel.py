"""The kernel's side of the control socket: frames (4-byte big-endian length + JSON),
sent from any thread, read by one thread at a time.

Between cells the main thread reads the socket itself: a cell or a claim's configure
wakes the thread that runs it, with no second thread in between (on a VM whose idle
CPUs halt, that hop and the cold thread it woke were a millisecond of a cell's latency:
docs/performance.md, "Warm starts"). While a helper call waits for its reply and the
main thread is running a cell, a reader thread reads for it; it is started at the first
call, so a kernel that never calls a helper never has it. Whoever reads routes what it
reads: replies to the calls waiting for them, everything else to the main thread.

Plain os.read/os.write on the inherited fd: the kernel's start-up is on the path to a
sandbox's first result, and every import counts. Frames are made and cut by
nsbox_helpers.frames, as on the tool bridge's socket."""
import collections
import os
import threading

from nsbox_helpers import frames

_READ_SIZE = 1 << 16
_GONE = {"error": "the sandbox's supervisor is gone"}


class Channel:
    def __init__(self, fd):
        self._fd = fd
        self._send_lock = threading.Lock()
        self._state = threading.Condition()  # guards everything below
        self._frames = frames.FrameBuffer()  # read, not yet a whole frame
        self._closed = False  # EOF, or a frame no supervisor sends
        self._calls = {}  # call id -> its reply (None until it comes)
        self._next_call = 1
        self._requests = collections.deque()  # what the main thread acts on
        self._reader = None  # the thread that reads for calls during a cell
        self._reading_thread = None  # the one thread in os.read, if any
        self._pid = os.getpid()

    def send(self, message):
        frame = frames.encode(message)
        with self._send_lock:
            view = memoryview(frame)
            while view:
                view = view[os.write(self._fd, view):]

    def call(self, op, **fields):
        """Sends a request to the supervisor and waits for its answer. Thread-safe. Not
        from a forked child (the socket is its parent's: a reader there would take the
        parent's frames), nor from the thread that is reading (a signal handler or a
        finalizer run while the main thread waits for its next cell: nobody else may
        read then)."""
        if os.getpid() != self._pid:
            return {"result": None, "error": "helpers are not available in a process the cell forked: call them from the kernel's process"}
        call_id = None
        try:
            with self._state:
                if self._reading_thread == threading.get_ident():
                    return {"result": None, "error": "helpers cannot be called from a signal handler or a finalizer that runs between cells"}
                call_id = self._next_call
                self._next_call += 1
                self._calls[call_id] = None
                if self._reader is None:
                    self._reader = threading.Thread(target=self._read_for_calls, name="nsbox-channel", daemon=True)
                    self._reader.start()
            self.send(dict(fields, op=op, call=call_id))
            with self._state:
                self._state.notify_all()  # the reader has a call to read for
                while self._calls[call_id] is None and not self._closed:
                    self._state.wait()
                return self._calls[call_id] or _GONE
        finally:
            if call_id is not None:
                with self._state:
                    self._calls.pop(call_id, None)  # also when an interrupt ends the wait

    def next_request(self):
        """The next message for the main thread; None once the supervisor is gone."""
        with self._state:
            while True:
                if self._requests:
                    return self._requests.popleft()
                if self._closed:
                    return None
                if self._reading_thread is not None:
                    self._state.wait()  # the reader thread hands over what it reads
                else:
                    self._read_locked()

    def _read_for_calls(self):
        with self._state:
            while not self._closed:
                if self._reading_thread is not None or not any(reply is None for reply in self._calls.values()):
                    self._state.wait()
                else:
                    self._read_locked()

    def _read_locked(self):
        """One read, as the only reader, then routes every whole frame it completed.
        Called holding self._state, which is released during the read."""
        self._reading_thread = threading.get_ident()
        self._state.release()
        data = None  # stays None when a signal's handler raises out of the read
        try:
            data = os.read(self._fd, max(_READ_SIZE, min(self._frames.missing(), 1 << 20)))
        except OSError:
            data = b""
        finally:
            self._state.acquire()
            self._reading_thread = None
            if data:
                self._frames.add(data)
                self._route_frames()
            elif data is not None:
                self._closed = True  # EOF, or the socket broke
            self._state.notify_all()

    def _route_frames(self):
        try:
            for message in self._frames.messages():
                if not isinstance(message, dict):
                    continue
                call_id = message.get("call")
                if message.get("event") == "reply" and call_id is not None:
                    if call_id in self._calls:
                        self._calls[call_id] = message
                    continue
                self._requests.append(message)
        except ValueError:
            self._closed = True  # a frame no supervisor sends: stop listening
