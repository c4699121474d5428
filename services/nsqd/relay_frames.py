"""The frames nsqd and its connection workers exchange over the socket between them (without I/O).

A worker holds the clients' sockets; nsqd holds everything else (workers.py). Each frame is a header, the
payload's length (4 bytes, big-endian), its kind (1 byte) and the connection it is about (4 bytes), then the
payload. Connection 0 is the worker itself.
"""

from __future__ import annotations

import struct

HEADER = struct.Struct(">IBI")
HEADER_SIZE = HEADER.size

# worker → nsqd
OPENED = 1  # a client connected; payload: its address (``host:port``, or the unix socket's path)
RECEIVED = 2  # bytes the client sent
CLOSED = 3  # the connection is gone
DRAINED = 4  # what was sent before the matching ASK_DRAINED is written, or nearly (the buffer is below its low mark)
READY = 5  # (connection 0) the worker accepts clients
TLS_STARTED = 6  # the handshake asked by START_TLS ended; payload: the session (``tls_session``), empty if it failed

# nsqd → worker
SEND = 11  # bytes to write to the client
CLOSE = 12  # close once what was sent is written
ABORT = 13  # close now
PAUSE_READING = 14
RESUME_READING = 15
START_TLS = 16  # hand-shake TLS once what was sent before is written; payload: the timeout in ms (4 bytes)
STOP_ACCEPTING = 17  # (connection 0) nsqd stops: accept no more clients
ASK_DRAINED = 18  # answer DRAINED once what was sent so far is written
CONSUMED = 19  # how many of the client's bytes nsqd has taken in so far (8 bytes); the worker reads ahead of it only
#                so far (``INPUT_WINDOW``)

_TIMEOUT = struct.Struct(">I")
_COUNT = struct.Struct(">Q")

# what a worker reads of a client beyond what nsqd took in; nsqd says what it took in every ``CONSUMED_EVERY`` bytes
INPUT_WINDOW = 256 * 1024
CONSUMED_EVERY = 64 * 1024


def frame(kind: int, connection: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(len(payload), kind, connection) + payload


def count_payload(count: int) -> bytes:
    return _COUNT.pack(count)


def read_count(payload: bytes) -> int:
    return int(_COUNT.unpack(payload)[0])


def timeout_payload(seconds: float) -> bytes:
    return _TIMEOUT.pack(max(0, int(seconds * 1000)))


def read_timeout(payload: bytes) -> float:
    return int(_TIMEOUT.unpack(payload)[0]) / 1000


class FrameError(Exception):
    """The bytes are not frames: the peer is not a worker of this nsqd, or a bug."""


class FrameReader:
    """Splits the bytes received into frames: ``feed`` returns the ``(kind, connection, payload)`` of every frame
    now complete, and keeps the rest for the next call."""

    def __init__(self, max_payload: int = 1 << 30) -> None:
        self._pending = b""
        self._max_payload = max_payload

    def feed(self, data: bytes) -> list[tuple[int, int, bytes]]:
        buffer = self._pending + data if self._pending else data
        frames: list[tuple[int, int, bytes]] = []
        end = len(buffer)
        position = 0
        unpack = HEADER.unpack_from
        while end - position >= HEADER_SIZE:
            length, kind, connection = unpack(buffer, position)
            if length > self._max_payload:
                raise FrameError(f"frame of {length} bytes")
            start = position + HEADER_SIZE
            if end - start < length:
                break
            position = start + length
            frames.append((kind, connection, buffer[start:position]))
        self._pending = buffer[position:] if position < end else b""
        return frames
