"""The recorders (recorder.py) of this nsqd as an origin: what its topics and channels tell them becomes the
origin's records for its mirrors, named as the link names queues (wire.py).

A topic's recorder knows which of its channels are recorded (those handed a recorder and not deleted since):
a publish handed to the channels names them, as a backlog handed out does.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol

from ..message import ID, QueuedMessage
from .origin import Origin
from .wire import TOPIC_QUEUE, dead_letters_of


class Retaining(Protocol):
    def kept(self, topic: str) -> tuple[int, int] | None:
        """How long (nanoseconds) and how much (bytes) the topic retains of what it publishes; None: nothing."""


class OriginRecording:
    """Every topic that is not ephemeral is recorded by ``origin``; what a topic retains (``retention``), its
    mirrors retain too."""

    def __init__(self, origin: Origin, retention: Retaining) -> None:
        self.origin = origin
        self._retention = retention

    def topic(self, name: str) -> TopicRecord:
        return TopicRecord(self.origin, name, self._retention)


class TopicRecord:
    def __init__(self, origin: Origin, name: str, retention: Retaining) -> None:
        self._origin = origin
        self.name = name
        self.channels: dict[str, None] = {}  # in the order they were made
        self._retention = retention

    def published(self, held: bool, defer_ms: int, entries: list[QueuedMessage]) -> Awaitable[None]:
        return self._origin.published(self.name, () if held else tuple(self.channels), defer_ms, entries,
                                      self._retention.kept(self.name))

    def distributed(self) -> None:
        self._origin.distributed(self.name, tuple(self.channels))

    def dropped(self, ids: list[bytes]) -> None:
        self._origin.finished(self.name, TOPIC_QUEUE, ids)

    def emptied(self) -> None:
        self._origin.topic_dropped(self.name, held_only=True)

    def deleted(self) -> None:
        self._origin.topic_dropped(self.name, held_only=False)

    def channel(self, name: str) -> ChannelRecord:
        self.channels[name] = None
        return ChannelRecord(self, name)


class ChannelRecord:
    def __init__(self, topic: TopicRecord, name: str) -> None:
        self._topic = topic
        self._origin = topic._origin
        self._topic_name = topic.name
        self.name = name
        self._dead_letters = dead_letters_of(name)

    def added(self, entries: list[QueuedMessage], defer_ms: int) -> Awaitable[None]:
        return self._origin.published(self._topic_name, (self.name,), defer_ms, entries)

    def finished(self, ids: list[bytes]) -> None:
        self._origin.finished(self._topic_name, self.name, ids)

    def requeued(self, entry: QueuedMessage, due_ns: int) -> None:
        self._origin.requeued(self._topic_name, self.name, entry, due_ns)

    def parked(self, entries: list[QueuedMessage]) -> None:
        self._origin.record_publish(self._topic_name, (self._dead_letters,), 0, entries)
        self.finished([entry[ID] for entry in entries])

    def replayed(self, entries: list[QueuedMessage]) -> None:
        self._origin.finished(self._topic_name, self._dead_letters, [entry[ID] for entry in entries])
        self._origin.record_publish(self._topic_name, (self.name,), 0, entries)

    def dead_letters_added(self, entries: list[QueuedMessage]) -> Awaitable[None]:
        return self._origin.published(self._topic_name, (self._dead_letters,), 0, entries)

    def dead_letters_dropped(self, ids: list[bytes]) -> None:
        self._origin.finished(self._topic_name, self._dead_letters, ids)

    def dead_letters_emptied(self) -> None:
        self._origin.channel_dropped(self._topic_name, self._dead_letters)

    def emptied(self) -> None:
        self._origin.channel_dropped(self._topic_name, self.name)

    def deleted(self) -> None:
        self._topic.channels.pop(self.name, None)
        self.emptied()
        self.dead_letters_emptied()
