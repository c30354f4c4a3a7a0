"""Frames as on every nsbox socket (runtime/protocol/frame.h): a 4-byte big-endian length,
then that many bytes of UTF-8 JSON, one message. The kernel's channel to its supervisor
(nsbox_kernel/channel.py) and the tool bridge's socket (transport.py) both carry them.

Only json is imported: the kernel imports this on the way to a sandbox's first result."""
import json

HEADER_SIZE = 4
# kMaxClientFrame (runtime/protocol/frame.h): the most the supervisor reads in one frame
# from a client, from the kernel and from the tool bridge, so what it sends on here (a
# client's cell, the bridge's answer) was read under it. A longer length is no frame
# nsbox sends, and the stream cannot be resynchronised after it.
MAX_FRAME = 16 << 20


def encode(message):
    """One frame holding message. What JSON cannot hold goes as its repr(); a str
    with surrogate escapes (os.fsdecode of bytes that are not UTF-8) goes as those bytes."""
    data = json.dumps(message, ensure_ascii=False, default=repr).encode("utf-8", "surrogateescape")
    return len(data).to_bytes(HEADER_SIZE, "big") + data


def body_length(header):
    """The length a frame's header gives; ValueError over MAX_FRAME, before anyone
    reads or buffers the body."""
    length = int.from_bytes(header, "big")
    if length > MAX_FRAME:
        raise ValueError(f"a frame of {length} bytes, over the limit of {MAX_FRAME}")
    return length


def read(recv):
    """The next message from recv(max_bytes) calls (a blocking socket's recv), or None
    at EOF before a whole frame. ValueError for an oversized length (the body is not
    read) or a body that is not JSON. At most 1 MiB is asked of one recv."""
    header = _read_exact(recv, HEADER_SIZE)
    if header is None:
        return None
    body = _read_exact(recv, body_length(header))
    if body is None:
        return None
    return json.loads(body)


def _read_exact(recv, n):
    chunks = []
    while n:
        chunk = recv(min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


class FrameBuffer:
    """Bytes read from a stream in pieces of any size, and the whole frames among them:
    for a reader that decides itself when and how much to read."""

    __slots__ = ("_data",)

    def __init__(self):
        self._data = bytearray()

    def add(self, data):
        self._data += data

    def missing(self):
        """Bytes still to come of the frame at the head (0 if its length is not in yet)."""
        if len(self._data) < HEADER_SIZE:
            return 0
        return HEADER_SIZE + int.from_bytes(self._data[:HEADER_SIZE], "big") - len(self._data)

    def messages(self):
        """Yields the message of each whole frame, in order, taking it out of the buffer.
        At a frame no nsbox peer sends (an oversized length, a body that is not JSON),
        raises ValueError after the frames before it."""
        data, at = self._data, 0
        try:
            while len(data) - at >= HEADER_SIZE:
                length = body_length(data[at:at + HEADER_SIZE])
                if len(data) - at - HEADER_SIZE < length:
                    break
                message = json.loads(bytes(data[at + HEADER_SIZE:at + HEADER_SIZE + length]))
                at += HEADER_SIZE + length
                yield message
        finally:
            del data[:at]
