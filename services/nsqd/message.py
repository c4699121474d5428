"""How nsqd holds messages.

Queued messages are plain tuples of immutable values. The garbage collector stops tracking such tuples after
their first collection, so a backlog of millions costs it nothing; only messages in flight (bounded by the
clients' RDY counts) are objects with mutable state.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from .consumers import Consumer

# a message waiting in a topic or a channel: (id, body, timestamp ns, attempts so far), read by these positions
QueuedMessage = tuple[bytes, bytes, int, int]
ID: Final = 0
BODY: Final = 1
TIMESTAMP: Final = 2
ATTEMPTS: Final = 3


class InFlightMessage:
    """A message delivered to a client and not yet finished, requeued or timed out."""

    __slots__ = ("id", "body", "timestamp", "attempts", "client", "delivered_at", "deadline")

    def __init__(self, entry: QueuedMessage, client: Consumer, now: float, deadline: float) -> None:
        self.id, self.body, self.timestamp, attempts = entry
        self.attempts = attempts + 1
        self.client: Consumer = client
        self.delivered_at = now
        self.deadline = deadline

    def entry(self) -> QueuedMessage:
        return (self.id, self.body, self.timestamp, self.attempts)


class DeferredMessage:
    """A deferred message: in a channel until ``deadline`` (DPUB, or REQ with a delay), in a topic with its delay
    (deferred_store.py)."""

    __slots__ = ("id", "deadline", "entry")

    def __init__(self, entry: QueuedMessage, deadline: float) -> None:
        self.id = entry[ID]
        self.deadline = deadline
        self.entry = entry


_DISK_HEADER = struct.Struct(">qH")


def encode(entry: QueuedMessage) -> bytes:
    """A message as NSQ writes it to disk: [int64 timestamp][uint16 attempts][16-byte ID][body]."""
    msg_id, body, timestamp, attempts = entry
    return _DISK_HEADER.pack(timestamp, attempts) + msg_id + body


def decode(payload: bytes, offset: int = 0) -> QueuedMessage:
    """The message ``encode`` wrote, from ``offset`` (4 for a record read with its size prefix)."""
    timestamp, attempts = _DISK_HEADER.unpack_from(payload, offset)
    return (payload[offset + 10:offset + 26], payload[offset + 26:], timestamp, attempts)


def message_id(payload: bytes) -> bytes:
    """The ID of the message ``encode`` wrote."""
    return payload[10:26]
