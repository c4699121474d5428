"""The replication link between an origin nsqd and one of its mirrors, without I/O: frames and their records.

The origin connects, sends ``MAGIC`` and a ``Hello`` (who it is, under which epoch, and the number of the next
record it sends), then records in order, each numbered one more than the last. The mirror applies them in that
order and answers ``Ack(sequence)``: every record up to that number is applied. Acks are cumulative, so an origin
waits for one number per mirror, not one answer per record. A mirror that will not take the origin (an older epoch
than one it has seen) answers ``Refuse`` and closes.

Frame: size (4 bytes, big-endian, what follows), type (1 byte), body. Names are ASCII and at most 64 bytes (NSQ's
rule), each with a 1-byte length. A publish's messages are their 16-byte IDs one after another, their bodies' sizes
(4 bytes each), then each message's timestamp (8 bytes, nanoseconds), attempts (2 bytes) and body: a mirror keeps
a batch's IDs, and checks that the messages add up, without taking each message apart. They stay in that form
(``Messages``) on both sides: the origin encodes them once for every mirror, and a mirror holds them so, decoding
them only to read them. A publish of a topic that retains what it published carries the topic's retention
(``retain``: its time in nanoseconds and its bytes), so that its mirrors retain it too; ``history`` marks messages
to retain only (a lost nsqd's history taken over), in no queue.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Union

from ..message import BODY, ID, QueuedMessage

MAGIC = b"  R3"
MAX_FRAME = 64 * 1024 * 1024

_HEADER = struct.Struct(">IB")
_SEQUENCE = struct.Struct(">Q")
_MESSAGE = struct.Struct(">qH")  # after the IDs and sizes: a message's timestamp and attempts, then its body
_COUNT = struct.Struct(">I")
_DEFER = struct.Struct(">I")


class WireError(Exception):
    """Bytes that are not a frame of this protocol."""


@dataclass(frozen=True)
class Hello:
    origin: str
    epoch: int
    sequence: int  # of the first record that follows


# The records every message makes (a publish, its acknowledgements, finishes) have an __init__ of their own, which
# is compiled: dataclass's generated one is not, and costs ten times as much (a frozen one more still).

@dataclass(init=False)
class Ack:
    sequence: int

    def __init__(self, sequence: int) -> None:
        self.sequence = sequence


@dataclass(frozen=True)
class Refuse:
    reason: str


class Messages:
    """``count`` messages, encoded as the link carries them (``QueuedMessage`` tuples when read)."""

    def __init__(self, data: bytes, count: int, ids: bytes | None = None) -> None:
        self.data = data
        self.count = count
        self._ids = ids

    @staticmethod
    def of(messages: list[QueuedMessage]) -> Messages:
        ids = b"".join([message[ID] for message in messages])
        out = bytearray(ids)
        out += struct.pack(_sizes(len(messages)), *[len(message[BODY]) for message in messages])
        pack = _MESSAGE.pack
        for _, body, timestamp, attempts in messages:
            out += pack(timestamp, attempts)
            out += body
        return Messages(bytes(out), len(messages), ids)

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[QueuedMessage]:
        data, count, unpack, header = self.data, self.count, _MESSAGE.unpack_from, _MESSAGE.size
        at = 20 * count
        for index, size in enumerate(struct.unpack_from(_sizes(count), data, 16 * count)):
            timestamp, attempts = unpack(data, at)
            at += header + size
            yield data[16 * index:16 * index + 16], data[at - size:at], timestamp, attempts

    def ids(self) -> bytes:
        """Their IDs, one after another."""
        if self._ids is None:
            self._ids = self.data[:16 * self.count]
        return self._ids

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Messages) and (self.count, self.data) == (other.count, other.data)

    def __repr__(self) -> str:
        return f"Messages({list(self)!r})"


def _sizes(count: int) -> str:
    """The layout of ``count`` bodies' sizes (struct's module functions keep it compiled)."""
    return f">{count}I"


def _check_messages(data: bytes, count: int) -> None:
    """Whether ``data`` is exactly ``count`` messages."""
    fixed = (16 + 4 + _MESSAGE.size) * count
    if fixed > len(data):
        raise WireError("frame ends inside a field")
    end = fixed + sum(struct.unpack_from(_sizes(count), data, 16 * count))
    if end > len(data):
        raise WireError("frame ends inside a field")
    if end < len(data):
        raise WireError(f"{len(data) - end} bytes left over in a frame")


@dataclass(init=False)
class Publish:
    """Messages published to ``topic``, in ``channels`` (none: held by the topic), deferred ``defer_ms``."""

    sequence: int
    topic: str
    channels: tuple[str, ...]
    defer_ms: int
    messages: Messages
    retain: tuple[int, int] | None  # the topic retains them: (time in nanoseconds, bytes; 0: no cap)
    history: bool  # to retain only: in no queue

    def __init__(self, sequence: int, topic: str, channels: tuple[str, ...], defer_ms: int, messages: Messages,
                 retain: tuple[int, int] | None = None, history: bool = False) -> None:
        self.sequence = sequence
        self.topic = topic
        self.channels = channels
        self.defer_ms = defer_ms
        self.messages = messages
        self.retain = retain
        self.history = history


@dataclass(frozen=True)
class Distribute:
    """The topic handed what it held to ``channels``."""

    sequence: int
    topic: str
    channels: tuple[str, ...]


@dataclass(init=False)
class Finish:
    """``channel`` is done with these messages: finished, or dropped (TTL, a full queue's oldest); ``TOPIC_QUEUE``:
    the topic dropped them from what it holds."""

    sequence: int
    topic: str
    channel: str
    ids: tuple[bytes, ...]

    def __init__(self, sequence: int, topic: str, channel: str, ids: tuple[bytes, ...]) -> None:
        self.sequence = sequence
        self.topic = topic
        self.channel = channel
        self.ids = ids


@dataclass(frozen=True)
class Requeue:
    """``channel`` has a message again (REQ): its attempts so far, and when it is due (nanoseconds since the epoch;
    0: at once)."""

    sequence: int
    topic: str
    channel: str
    id: bytes
    attempts: int
    due: int


@dataclass(frozen=True)
class DropChannel:
    """The channel was emptied or deleted."""

    sequence: int
    topic: str
    channel: str


@dataclass(frozen=True)
class DropTopic:
    """``held_only``: the topic's own queue was emptied; else the topic was deleted, channels and all."""

    sequence: int
    topic: str
    held_only: bool


@dataclass(frozen=True)
class Snapshot:
    """Part of what the origin had outstanding when its record ``sequence`` was the newest: sent to a mirror that
    lacks records (new, or restarted empty) in place of them. The first part of a snapshot replaces whatever the
    mirror held of the origin."""

    sequence: int
    part: Publish


@dataclass(frozen=True)
class SnapshotEnd:
    """The snapshot is whole: the mirror holds everything up to record ``sequence``."""

    sequence: int


Record = Union[Publish, Distribute, Finish, Requeue, DropChannel, DropTopic]
Frame = Union[Hello, Ack, Refuse, Record, Snapshot, SnapshotEnd]

_HELLO, _ACK, _REFUSE, _PUBLISH, _DISTRIBUTE, _FINISH, _DROP_CHANNEL, _DROP_TOPIC, _SNAPSHOT, _SNAPSHOT_END, \
    _REQUEUE = range(1, 12)
_REQUEUED = struct.Struct(">16sHq")
_RETAIN = struct.Struct(">qq")
_RETAINED, _HISTORY = 1, 2  # a publish's flags

# where a channel's dead letters are, as the link names them: a name no channel can have
DEAD_LETTERS = ":dead"
# a Finish's channel for the messages the topic itself holds (dropped by its cap)
TOPIC_QUEUE = ""


def dead_letters_of(channel: str) -> str:
    return channel + DEAD_LETTERS


# -- encoding -------------------------------------------------------------------------------------------------

def _frame(kind: int, body: bytes) -> bytes:
    return _HEADER.pack(len(body) + 1, kind) + body


def _name(name: str) -> bytes:
    raw = name.encode("ascii")
    return bytes((len(raw),)) + raw


def _names(names: tuple[str, ...]) -> bytes:
    return bytes((len(names),)) + b"".join(map(_name, names))


def encode(frame: Frame) -> bytes:
    if isinstance(frame, Snapshot):
        # a publish's body, numbered as of the snapshot
        return _frame(_SNAPSHOT, encode(replace(frame.part, sequence=frame.sequence))[_HEADER.size:])
    if isinstance(frame, SnapshotEnd):
        return _frame(_SNAPSHOT_END, _SEQUENCE.pack(frame.sequence))
    if isinstance(frame, Publish):
        out = bytearray(_HEADER.size)
        out += _SEQUENCE.pack(frame.sequence) + _name(frame.topic) + _names(frame.channels)
        out += _DEFER.pack(frame.defer_ms)
        if frame.retain is None:
            out.append(_HISTORY if frame.history else 0)
        else:
            out.append(_RETAINED | (_HISTORY if frame.history else 0))
            out += _RETAIN.pack(*frame.retain)
        out += _COUNT.pack(frame.messages.count)
        out += frame.messages.data
        _HEADER.pack_into(out, 0, len(out) - 4, _PUBLISH)
        return bytes(out)
    if isinstance(frame, Finish):
        return _frame(_FINISH, _SEQUENCE.pack(frame.sequence) + _name(frame.topic) + _name(frame.channel)
                      + _COUNT.pack(len(frame.ids)) + b"".join(frame.ids))
    if isinstance(frame, Ack):
        return _frame(_ACK, _SEQUENCE.pack(frame.sequence))
    if isinstance(frame, Requeue):
        return _frame(_REQUEUE, _SEQUENCE.pack(frame.sequence) + _name(frame.topic) + _name(frame.channel)
                      + _REQUEUED.pack(frame.id, frame.attempts, frame.due))
    if isinstance(frame, Distribute):
        return _frame(_DISTRIBUTE, _SEQUENCE.pack(frame.sequence) + _name(frame.topic) + _names(frame.channels))
    if isinstance(frame, DropChannel):
        return _frame(_DROP_CHANNEL, _SEQUENCE.pack(frame.sequence) + _name(frame.topic) + _name(frame.channel))
    if isinstance(frame, DropTopic):
        return _frame(_DROP_TOPIC, _SEQUENCE.pack(frame.sequence) + _name(frame.topic)
                      + bytes((frame.held_only,)))
    if isinstance(frame, Hello):
        return _frame(_HELLO, json.dumps({"origin": frame.origin, "epoch": frame.epoch,
                                          "sequence": frame.sequence}).encode())
    if isinstance(frame, Refuse):
        return _frame(_REFUSE, frame.reason.encode())
    raise TypeError(f"not a frame: {frame!r}")


# -- decoding -------------------------------------------------------------------------------------------------

class _Reader:
    """A frame's body: ``data[at:end]``."""

    def __init__(self, data: bytes, at: int, end: int) -> None:
        self.data = data
        self.at = at
        self.end = end

    def take(self, count: int) -> bytes:
        if self.at + count > self.end:
            raise WireError("frame ends inside a field")
        chunk = self.data[self.at:self.at + count]
        self.at += count
        return chunk

    def rest(self) -> bytes:
        return self.take(self.end - self.at)

    def unpack(self, layout: struct.Struct) -> tuple[int, ...]:
        return layout.unpack(self.take(layout.size))

    def name(self) -> str:
        try:
            return self.take(self.take(1)[0]).decode("ascii")
        except UnicodeDecodeError:
            raise WireError("a name that is not ASCII") from None

    def names(self) -> tuple[str, ...]:
        return tuple(self.name() for _ in range(self.take(1)[0]))

    def done(self) -> None:
        if self.at != self.end:
            raise WireError(f"{self.end - self.at} bytes left over in a frame")


def _decode(kind: int, data: bytes, at: int, end: int) -> Frame:
    """The frame of type ``kind`` whose body is ``data[at:end]``."""
    reader = _Reader(data, at, end)
    frame: Frame
    if kind == _SNAPSHOT:
        part = _decode(_PUBLISH, data, at, end)
        assert isinstance(part, Publish)
        return Snapshot(part.sequence, part)
    if kind == _SNAPSHOT_END:
        frame = SnapshotEnd(reader.unpack(_SEQUENCE)[0])
        reader.done()
        return frame
    if kind == _PUBLISH:
        (sequence,) = reader.unpack(_SEQUENCE)
        topic, channels = reader.name(), reader.names()
        (defer_ms,) = reader.unpack(_DEFER)
        flags = reader.take(1)[0]
        retain = _pair(reader.unpack(_RETAIN)) if flags & _RETAINED else None
        (count,) = reader.unpack(_COUNT)
        messages = reader.rest()
        _check_messages(messages, count)
        frame = Publish(sequence, topic, channels, defer_ms, Messages(messages, count), retain,
                        bool(flags & _HISTORY))
    elif kind == _FINISH:
        (sequence,) = reader.unpack(_SEQUENCE)
        topic, channel = reader.name(), reader.name()
        ids = reader.take(16 * reader.unpack(_COUNT)[0])
        frame = Finish(sequence, topic, channel, tuple([ids[at:at + 16] for at in range(0, len(ids), 16)]))
    elif kind == _ACK:
        frame = Ack(reader.unpack(_SEQUENCE)[0])
    elif kind == _REQUEUE:
        (sequence,) = reader.unpack(_SEQUENCE)
        topic, channel = reader.name(), reader.name()
        msg_id, attempts, due = _REQUEUED.unpack(reader.take(_REQUEUED.size))
        frame = Requeue(sequence, topic, channel, msg_id, attempts, due)
    elif kind == _DISTRIBUTE:
        frame = Distribute(reader.unpack(_SEQUENCE)[0], reader.name(), reader.names())
    elif kind == _DROP_CHANNEL:
        frame = DropChannel(reader.unpack(_SEQUENCE)[0], reader.name(), reader.name())
    elif kind == _DROP_TOPIC:
        frame = DropTopic(reader.unpack(_SEQUENCE)[0], reader.name(), bool(reader.take(1)[0]))
    elif kind == _HELLO:
        try:
            hello = json.loads(reader.rest())
            return Hello(str(hello["origin"]), int(hello["epoch"]), int(hello["sequence"]))
        except (ValueError, KeyError, TypeError):
            raise WireError("a HELLO that is not {origin, epoch, sequence}") from None
    elif kind == _REFUSE:
        return Refuse(reader.rest().decode("utf-8", "replace"))
    else:
        raise WireError(f"unknown frame type {kind}")
    reader.done()
    return frame


def _pair(values: tuple[int, ...]) -> tuple[int, int]:
    return values[0], values[1]


class FrameReader:
    """Bytes in, frames out: ``feed`` what arrived, get every frame it completes."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buffer = bytearray()
        self._max_frame = max_frame

    def feed(self, data: bytes) -> list[Frame]:
        buffer = self._buffer
        if buffer:
            buffer += data
            if len(buffer) < _HEADER.size or len(buffer) < 4 + self._size(buffer, 0):
                return []  # the first frame is not whole yet: nothing copied meanwhile
            data = bytes(buffer)
            buffer.clear()
        frames = []
        start, size_of_data = 0, len(data)
        while size_of_data - start >= _HEADER.size:
            end = start + 4 + self._size(data, start)
            kind = data[start + 4]
            if end > size_of_data:
                break
            frames.append(_decode(kind, data, start + _HEADER.size, end))
            start = end
        if start < size_of_data:
            buffer += data[start:] if start else data
        return frames

    def _size(self, data: bytes | bytearray, start: int) -> int:
        size: int = _HEADER.unpack_from(data, start)[0]
        if not 1 <= size <= self._max_frame:
            raise WireError(f"frame of {size} bytes")
        return size
