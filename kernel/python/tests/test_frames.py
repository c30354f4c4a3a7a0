"""Tests for nsbox_helpers.frames, the frame codec, and its two users in the sandbox: the
kernel's channel and the tool bridge's socket connection."""
import glob
import os
import re
import socket
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

from nsbox_helpers import frames, transport  # noqa: E402
from nsbox_kernel.channel import Channel  # noqa: E402


class Recv:
    """A recv() that hands out given pieces (at most what is asked), and records the asks."""

    def __init__(self, *pieces):
        self.data = b"".join(pieces)
        self.asked = []

    def __call__(self, n):
        self.asked.append(n)
        chunk, self.data = self.data[:min(n, 3)], self.data[min(n, 3):]  # never more than 3 bytes
        return chunk


def header(length):
    return length.to_bytes(frames.HEADER_SIZE, "big")


def within(seconds, function, *args):
    """function(*args), which must return within seconds (a reader that waited for a
    body of MAX_FRAME would block for ever)."""
    result = []
    thread = threading.Thread(target=lambda: result.append(function(*args)), daemon=True)
    thread.start()
    thread.join(seconds)
    assert result, f"{function.__qualname__} still waits after {seconds} s"
    return result[0]


def test_a_message_comes_back_as_sent_with_non_ascii_text():
    message = {"code": "print('héllo ✓')", "n": [1, 2.5, None, True], "nested": {"k": ""}}
    frame = frames.encode(message)
    assert frame[:4] == header(len(frame) - 4)
    assert frames.read(Recv(frame)) == message


def test_a_surrogate_escaped_name_is_sent_as_its_own_bytes():
    frame = frames.encode({"path": os.fsdecode(b"caf\xe9")})
    assert frame[4:] == b'{"path": "caf\xe9"}'  # not U+FFFD, not a \\udce9 escape


def test_what_json_cannot_hold_is_sent_as_its_repr():
    assert frames.read(Recv(frames.encode({"x": b"\x00"}))) == {"x": "b'\\x00'"}


def test_a_frame_split_across_reads_is_reassembled():
    frame = frames.encode({"op": "execute", "cell": 7, "code": "x" * 100})
    recv = Recv(frame, frames.encode({"op": "configure"}))
    assert frames.read(recv) == {"op": "execute", "cell": 7, "code": "x" * 100}
    assert len(recv.asked) > 30  # it did come 3 bytes at a time
    assert frames.read(recv) == {"op": "configure"}
    assert frames.read(recv) is None  # EOF between frames


def test_eof_inside_a_frame_is_the_end():
    frame = frames.encode({"op": "execute"})
    assert frames.read(Recv(frame[:2])) is None
    assert frames.read(Recv(frame[:-1])) is None


def test_an_oversized_length_is_refused_before_the_body_is_read():
    recv = Recv(header(frames.MAX_FRAME + 1), b"{}" * 100)
    with pytest.raises(ValueError, match=f"over the limit of {frames.MAX_FRAME}"):
        frames.read(recv)
    assert recv.data == b"{}" * 100  # not a byte of the body was taken
    assert frames.body_length(header(frames.MAX_FRAME)) == frames.MAX_FRAME  # the limit itself is a frame


def test_the_limit_is_the_one_the_supervisor_reads_clients_the_kernel_and_the_bridge_with():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), *[os.pardir] * 3)
    [frame_h] = glob.glob(os.path.join(root, "runtime", "**", "frame.h"), recursive=True)
    with open(frame_h) as f:
        shift = re.search(r"kMaxClientFrame = 16u << (\d+);", f.read())
    assert shift and frames.MAX_FRAME == 16 << int(shift.group(1))


def test_a_buffer_yields_whole_frames_fed_a_byte_at_a_time_and_keeps_the_rest():
    stream = frames.encode({"event": "reply", "call": 1}) + frames.encode({"op": "execute", "cell": 2})
    buffer, got = frames.FrameBuffer(), []
    for i in range(len(stream) - 1):
        buffer.add(stream[i:i + 1])
        got += buffer.messages()
    assert got == [{"event": "reply", "call": 1}]
    assert buffer.missing() == 1
    buffer.add(stream[-1:])
    assert list(buffer.messages()) == [{"op": "execute", "cell": 2}]
    assert buffer.missing() == 0 and list(buffer.messages()) == []


def test_a_buffer_refuses_an_oversized_length_without_waiting_for_its_body_after_the_frames_before_it():
    buffer = frames.FrameBuffer()
    buffer.add(frames.encode({"op": "configure"}) + header(frames.MAX_FRAME + 1))
    got = []
    with pytest.raises(ValueError, match="over the limit"):
        for message in buffer.messages():
            got.append(message)
    assert got == [{"op": "configure"}]


def test_a_body_that_is_not_json_is_refused():
    with pytest.raises(ValueError):
        frames.read(Recv(header(3), b"{x]"))
    buffer = frames.FrameBuffer()
    buffer.add(header(2) + b"\xff\xfe")
    with pytest.raises(ValueError):
        list(buffer.messages())


# The kernel's channel: the main thread reads between cells.

@pytest.fixture
def socket_pair():
    ours, kernels = socket.socketpair()
    yield ours, kernels
    ours.close()
    kernels.close()


def test_the_kernels_channel_reassembles_a_request_split_across_writes(socket_pair):
    ours, kernels = socket_pair
    channel = Channel(kernels.fileno())
    frame = frames.encode({"op": "execute", "cell": 1, "code": "1 + 1"})
    ours.sendall(frame[:3])
    threading.Timer(0.05, ours.sendall, (frame[3:] + frames.encode({"op": "configure"}),)).start()
    assert channel.next_request() == {"op": "execute", "cell": 1, "code": "1 + 1"}
    assert channel.next_request() == {"op": "configure"}
    channel.send({"event": "result", "cell": 1})
    assert frames.read(ours.recv) == {"event": "result", "cell": 1}


def test_the_kernels_channel_stops_at_an_oversized_frame(socket_pair):
    ours, kernels = socket_pair
    channel = Channel(kernels.fileno())
    ours.sendall(frames.encode({"op": "configure"}) + header(frames.MAX_FRAME + 1) + b"{}")
    assert within(5, channel.next_request) == {"op": "configure"}
    assert within(5, channel.next_request) is None  # taken as the supervisor gone; no wait for 16 MiB


# The tool bridge's socket, as a process other than the kernel speaks it.

@pytest.fixture
def bridge(tmp_path, monkeypatch):
    path = str(tmp_path / "bridge.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen()
    monkeypatch.setattr(transport, "SOCKET_PATH", path)
    monkeypatch.setattr(transport._SocketConnection, "_current", None)
    yield listener
    listener.close()


def answer_one(listener, replies):
    """Accepts the connection, reads one call, sends what replies(call) gives piece by
    piece, and closes."""
    def serve():
        conn, _ = listener.accept()
        with conn:
            request = frames.read(conn.recv)
            for piece in replies(request):
                conn.sendall(piece)
                time.sleep(0.01)  # each piece its own read
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_the_bridge_connection_reassembles_an_answer_split_across_sends(bridge):
    def replies(request):
        frame = frames.encode({"call": request["call"], "result": {"echo": request["args"]}, "error": None})
        return [frame[:2], frame[2:9], frame[9:]]
    answer_one(bridge, replies)
    assert transport.call("run_tool", {"tool": "ECHO"}) == {"call": 1, "result": {"echo": {"tool": "ECHO"}}, "error": None}


def test_the_bridge_connection_fails_its_calls_at_an_oversized_answer(bridge):
    answer_one(bridge, lambda request: [header(frames.MAX_FRAME + 1)])
    reply = within(5, transport.call, "run_tool", {"tool": "ECHO"})
    assert reply["result"] is None
    assert f"over the limit of {frames.MAX_FRAME}" in reply["error"]
