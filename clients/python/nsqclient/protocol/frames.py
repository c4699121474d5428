"""Frames nsqd sends and the commands clients send, as bytes.

Server to client, big-endian::

    [int32 size][int32 frame type][data]         size = 4 + len(data)

    frame type 0 = response, 1 = error, 2 = message, whose data is
    [int64 timestamp ns][uint16 attempts][16 bytes ID, ASCII hex][body]

Client to server: a command line ending in ``\\n``; IDENTIFY, AUTH, PUB and DPUB follow it with
``[int32 size][data]``; MPUB with ``[int32 body size][int32 count]([int32 size][message])*``.
"""

from __future__ import annotations

import struct
from typing import Iterable, NamedTuple

MAGIC_V2 = b"  V2"

FRAME_TYPE_RESPONSE = 0
FRAME_TYPE_ERROR = 1
FRAME_TYPE_MESSAGE = 2

OK = b"OK"
CLOSE_WAIT = b"CLOSE_WAIT"
HEARTBEAT = b"_heartbeat_"

MSG_ID_LENGTH = 16
MESSAGE_HEADER_LENGTH = 8 + 2 + MSG_ID_LENGTH

_FRAME_HEADER = struct.Struct(">ii")
# a message frame up to its ID: size, frame type, timestamp, attempts
MESSAGE_FRAME_HEADER = struct.Struct(">iiqH")
_MESSAGE_HEADER = struct.Struct(">qH")
_SIZE = struct.Struct(">i")


def encode_frame(frame_type: int, data: bytes) -> bytes:
    return _FRAME_HEADER.pack(len(data) + 4, frame_type) + data


def encode_message_frame(msg_id: bytes, body: bytes, timestamp: int, attempts: int) -> bytes:
    header = MESSAGE_FRAME_HEADER.pack(4 + MESSAGE_HEADER_LENGTH + len(body), FRAME_TYPE_MESSAGE,
                                       timestamp, attempts)
    return header + msg_id + body


class Message(NamedTuple):
    """A message as a client receives it."""

    id: bytes
    body: bytes
    timestamp: int
    attempts: int


def decode_message(data: bytes | bytearray) -> Message:
    if len(data) < MESSAGE_HEADER_LENGTH:
        raise ValueError(f"message too short: {len(data)} < {MESSAGE_HEADER_LENGTH}")
    timestamp, attempts = _MESSAGE_HEADER.unpack_from(data)
    return Message(bytes(data[10:26]), bytes(data[26:]), timestamp, attempts)


class Frame(NamedTuple):
    frame_type: int
    data: bytes


class FrameDecoder:
    """Splits the server's byte stream into frames (the client side of the protocol)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes | bytearray, limit: int = -1) -> list[Frame]:
        """The complete frames buffered so far (at most ``limit`` of them, when not negative); ValueError for a
        size no frame can have."""
        self._buffer += data
        frames: list[Frame] = []
        buf, pos, end = self._buffer, 0, len(self._buffer)
        while end - pos >= 8 and len(frames) != limit:
            size, frame_type = _FRAME_HEADER.unpack_from(buf, pos)
            if size < 4:  # a frame holds at least its type; the stream cannot be read past this
                raise ValueError(f"invalid frame size {size}")
            if end - pos - 4 < size:
                break
            frames.append(Frame(frame_type, bytes(buf[pos + 8:pos + 4 + size])))
            pos += 4 + size
        del buf[:pos]
        return frames

    def take_buffer(self) -> bytes:
        """The bytes after the last complete frame, removed: they follow a switch to compression."""
        rest = bytes(self._buffer)
        self._buffer.clear()
        return rest


def encode_command(name: bytes, *params: bytes, body: bytes | None = None) -> bytes:
    line = b" ".join((name, *params)) + b"\n"
    if body is None:
        return line
    return line + _SIZE.pack(len(body)) + body


def encode_mpub(topic: bytes, bodies: Iterable[bytes]) -> bytes:
    parts = [_SIZE.pack(len(body)) + body for body in bodies]
    payload = _SIZE.pack(len(parts)) + b"".join(parts)
    return b"MPUB " + topic + b"\n" + _SIZE.pack(len(payload)) + payload
