"""What a mirror holds of one origin: every message the origin still has outstanding, per channel (or held by its
topic while it has no channel), built by applying the origin's records in order. Without I/O.

It follows what the origin says, never what it would infer: a publish names the channels that took it, and a
topic handing its backlog to channels says which. A message is outstanding in a channel until the origin says
that channel is done with it (FIN, or dropped); one message's body is held once, whatever the number of channels.
A finish for a message the mirror never had (published before the mirror joined) changes nothing. On adoption,
``outstanding()`` is what a survivor puts into its own topics and channels.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from ..message import ID, TIMESTAMP, QueuedMessage
from .wire import Distribute, DropChannel, DropTopic, Finish, Publish, Record, Snapshot, SnapshotEnd


class OutOfOrder(Exception):
    """A record that is not the one after the last applied: the link lost or reordered something."""


HELD = ""  # where ``MirroredTopic.due`` names the topic's own queue (no channel has an empty name)


@dataclass
class MirroredTopic:
    held: dict[bytes, QueuedMessage] = field(default_factory=dict)
    channels: dict[str, dict[bytes, QueuedMessage]] = field(default_factory=dict)
    # (channel, or HELD; id): when a deferred message is due, nanoseconds since the epoch; most have no entry
    due: dict[tuple[str, bytes], int] = field(default_factory=dict)


class MirrorStore:
    def __init__(self, origin: str, epoch: int, applied: int = 0) -> None:
        self.origin = origin
        self.epoch = epoch
        self.applied = applied  # the sequence of the last record applied
        self.topics: dict[str, MirroredTopic] = {}
        self.fenced = False  # the origin is gone from the cluster: none of its records are taken any more
        self.complete = applied == 0  # holds everything of the epoch (a store started later waits for a snapshot)
        self._snapshot_at = -1  # the sequence of the snapshot being received

    def apply(self, record: Record) -> None:
        if self.fenced:
            raise OutOfOrder(f"{self.origin} (epoch {self.epoch}) is gone from the cluster: its records are refused")
        if record.sequence != self.applied + 1:
            raise OutOfOrder(f"record {record.sequence} after {self.applied}")
        if isinstance(record, Publish):
            self._publish(record)
        elif isinstance(record, Finish):
            topic = self.topics.get(record.topic, _NO_TOPIC)
            messages = topic.channels.get(record.channel)
            if messages:
                for msg_id in record.ids:
                    messages.pop(msg_id, None)
                if topic.due:
                    for msg_id in record.ids:
                        topic.due.pop((record.channel, msg_id), None)
        elif isinstance(record, Distribute):
            topic = self._topic(record.topic)
            for name in record.channels:
                topic.channels.setdefault(name, {}).update(topic.held)
            if topic.due:
                for (place, msg_id), due in list(topic.due.items()):
                    if place == HELD:
                        del topic.due[(place, msg_id)]
                        topic.due.update(((name, msg_id), due) for name in record.channels)
            topic.held = {}
        elif isinstance(record, DropChannel):
            topic = self.topics.get(record.topic, _NO_TOPIC)
            topic.channels.pop(record.channel, None)
            _forget_due(topic, record.channel)
        elif isinstance(record, DropTopic):
            if record.held_only:
                topic = self.topics.get(record.topic, _NO_TOPIC)
                topic.held.clear()
                _forget_due(topic, HELD)
            else:
                self.topics.pop(record.topic, None)
        self.applied = record.sequence

    def take_snapshot(self, frame: Snapshot | SnapshotEnd) -> None:
        """A part of the origin's snapshot (the first replaces what was held), or its end: then this store holds
        everything up to the snapshot's record and takes the records that follow."""
        if self.fenced:
            raise OutOfOrder(f"{self.origin} (epoch {self.epoch}) is gone from the cluster: its records are refused")
        if frame.sequence != self._snapshot_at:
            self.topics.clear()
            self._snapshot_at = frame.sequence
        if isinstance(frame, Snapshot):
            self._publish(frame.part)
            return
        self.applied = frame.sequence
        self.complete = True
        self._snapshot_at = -1

    @property
    def receiving_snapshot(self) -> bool:
        """A snapshot has begun and not ended: nothing is acknowledged meanwhile."""
        return self._snapshot_at >= 0

    def _topic(self, name: str) -> MirroredTopic:
        topic = self.topics.get(name)
        if topic is None:
            topic = self.topics[name] = MirroredTopic()
        return topic

    def _publish(self, record: Publish) -> None:
        topic = self._topic(record.topic)
        messages = record.messages
        places = record.channels or (HELD,)
        for place in places:
            target = topic.channels.setdefault(place, {}) if place else topic.held
            target.update([(message[ID], message) for message in messages])
        if record.defer_ms:
            delay = record.defer_ms * 1_000_000
            topic.due.update(((place, message[ID]), message[TIMESTAMP] + delay)
                             for place in places for message in messages)

    def outstanding(self) -> Iterator[tuple[str, str | None, QueuedMessage, int]]:
        """(topic, channel or None for the topic's own queue, message, when it is due: nanoseconds since the epoch,
        0 at once) for every message still outstanding."""
        for topic_name, topic in self.topics.items():
            due = topic.due
            for message in topic.held.values():
                yield topic_name, None, message, due.get((HELD, message[ID]), 0) if due else 0
            for channel_name, messages in topic.channels.items():
                for message in messages.values():
                    yield topic_name, channel_name, message, due.get((channel_name, message[ID]), 0) if due else 0

    @property
    def depth(self) -> int:
        """Outstanding messages, counted once per channel (and once held), as nsqd's depths count them."""
        return sum(len(topic.held) + sum(map(len, topic.channels.values())) for topic in self.topics.values())


def _forget_due(topic: MirroredTopic, place: str) -> None:
    if topic.due:
        for key in [key for key in topic.due if key[0] == place]:
            del topic.due[key]


_NO_TOPIC = MirroredTopic()
