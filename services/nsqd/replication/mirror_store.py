"""What a mirror holds of one origin: every message the origin still has outstanding, per channel (or held by its
topic while it has no channel), built by applying the origin's records in order. Without I/O.

It follows what the origin says, never what it would infer: a publish names the channels that took it, and a
topic handing its backlog to channels says which. A message is outstanding in a channel until the origin says
that channel is done with it (FIN, or dropped); one message's body is held once, whatever the number of channels.
A finish for a message the mirror never had changes nothing. A message given back (REQ) keeps its attempts and
when it is due again; a channel's dead letters are a channel of their own on the link (``dead_letters_of``). On
adoption, ``outstanding()`` is what a survivor puts into its own topics and channels.

Mirroring costs next to nothing per message, since a backlog a mirror holds can be millions deep: a publish's
messages are written as their record encodes them to the origin's files (``MirrorFiles``), once, whatever the number
of channels that took them; memory keeps the batch's place there and its IDs. A channel holds its batches in order
and the IDs finished since. Consumers mostly finish the oldest first, so every ``COMPACT_AT`` finished IDs the
batches at the front that are all finished go (and a segment with the last batch in it), their IDs forgotten;
once the finished IDs are at least half of what the channel holds (the front waits for a message still out), the
whole channel is compacted: every batch all finished goes, the others keep the IDs still outstanding. A publish
costs the mirror one write and one step per batch, a finish one set insertion, and compaction a constant per
message over time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from ..message import BODY, ID, TIMESTAMP, QueuedMessage
from .mirror_files import MirrorFiles, Segment
from .mirrored_history import MirroredHistory
from .wire import (TOPIC_QUEUE, Distribute, DropChannel, DropTopic, Finish, Messages, Publish, Record, Requeue,
                   Snapshot, SnapshotEnd)

COMPACT_AT = 4096
HISTORY_DIRECTORY = "retained"  # in the copy's directory: what the origin's topics retain (mirrored_history.py)


class OutOfOrder(Exception):
    """A record that is not the one after the last applied: the link lost or reordered something."""


class Batch:
    """Messages published together, where the origin's files hold them."""

    def __init__(self, segment: Segment, offset: int, size: int, count: int, ids: bytes, delay: int) -> None:
        self.segment = segment
        self.offset = offset
        self.size = size
        self.count = count  # messages written, outstanding or not
        self.ids = ids  # of those still outstanding in the queue that holds this batch, 16 bytes each
        self.delay = delay  # nanoseconds after its timestamp that each message is due (a deferred publish); 0: at once

    @property
    def outstanding(self) -> int:
        return len(self.ids) // 16

    def messages(self) -> Iterator[QueuedMessage]:
        """Those still outstanding, read back."""
        messages = Messages(self.segment.read(self.offset, self.size), self.count)
        if self.outstanding == self.count:
            yield from messages
            return
        kept = set(_split(self.ids))
        for message in messages:
            if message[ID] in kept:
                yield message

    def without(self, finished: set[bytes]) -> Batch | None:
        """This batch less ``finished``: itself if none of them are in it, None if all of its messages are."""
        kept = [msg_id for msg_id in _split(self.ids) if msg_id not in finished]
        if len(kept) * 16 == len(self.ids):
            return self
        if not kept:
            return None
        return Batch(self.segment, self.offset, self.size, self.count, b"".join(kept), self.delay)


def _split(ids: bytes) -> list[bytes]:
    return [ids[at:at + 16] for at in range(0, len(ids), 16)]


class MirroredQueue:
    """A channel's copy, or its topic's own queue."""

    def __init__(self) -> None:
        self.batches: list[Batch] = []
        self.count = 0  # messages in the batches, finished or not
        self.finished: set[bytes] = set()
        self.requeued: dict[bytes, tuple[int, int]] = {}  # id: (attempts, due) of a message given back
        self._front_at = COMPACT_AT  # finished IDs at which the front is looked at next

    @property
    def depth(self) -> int:
        """Outstanding messages (fewer if it was told of finishes of messages it never had, until compacted)."""
        return self.count - len(self.finished)

    def add(self, batches: list[Batch]) -> None:
        for batch in batches:
            batch.segment.hold()
            self.count += batch.outstanding
        self.batches += batches

    def drop(self) -> None:
        """Gone, with what it held."""
        for batch in self.batches:
            batch.segment.release()
        self.batches, self.count, self.finished, self.requeued = [], 0, set(), {}
        self._front_at = COMPACT_AT

    def finish(self, ids: tuple[bytes, ...]) -> None:
        finished = self.finished
        finished.update(ids)
        if self.requeued:
            for msg_id in ids:
                self.requeued.pop(msg_id, None)
        if len(finished) >= self._front_at:
            self._drop_finished_front()
            self._front_at = len(finished) + COMPACT_AT
        if len(finished) >= COMPACT_AT and 2 * len(finished) >= self.count:
            self.compact()

    def _drop_finished_front(self) -> None:
        """The batches at the front that are all finished go, and their IDs from ``finished``."""
        batches, finished, done = self.batches, self.finished, 0
        for batch in batches:
            ids = _split(batch.ids)
            if not finished.issuperset(ids):
                break
            finished.difference_update(ids)
            batch.segment.release()
            self.count -= len(ids)
            done += 1
        del batches[:done]

    def compact(self) -> None:
        finished, kept, count = self.finished, [], 0
        for batch in self.batches:
            left = batch.without(finished)
            if left is None:
                batch.segment.release()
            else:
                kept.append(left)  # in the same segment: it stays held
                count += left.outstanding
        self.batches, self.count, self.finished = kept, count, set()
        self._front_at = COMPACT_AT

    def outstanding(self) -> Iterator[tuple[QueuedMessage, int]]:
        """(message, when it is due: nanoseconds since the epoch, 0 at once) for each outstanding message."""
        finished, requeued = self.finished, self.requeued
        for batch in self.batches:
            for message in batch.messages():
                msg_id = message[ID]
                if msg_id in finished:
                    continue
                if msg_id in requeued:
                    attempts, due = requeued[msg_id]
                    yield (msg_id, message[BODY], message[TIMESTAMP], attempts), due
                else:
                    yield message, message[TIMESTAMP] + batch.delay if batch.delay else 0


@dataclass
class MirroredTopic:
    held: MirroredQueue = field(default_factory=MirroredQueue)
    channels: dict[str, MirroredQueue] = field(default_factory=dict)

    def drop(self) -> None:
        self.held.drop()
        for queue in self.channels.values():
            queue.drop()

    def channel(self, name: str) -> MirroredQueue:
        queue = self.channels.get(name)
        if queue is None:
            queue = self.channels[name] = MirroredQueue()
        return queue


class MirrorStore:
    def __init__(self, origin: str, epoch: int, files: MirrorFiles, applied: int = 0) -> None:
        self.origin = origin
        self.epoch = epoch
        self.files = files
        self.applied = applied  # the sequence of the last record applied
        self.topics: dict[str, MirroredTopic] = {}
        self.fenced = False  # the origin is gone from the cluster: none of its records are taken any more
        self.complete = applied == 0  # holds everything of the epoch (a store started later waits for a snapshot)
        self._snapshot_at = -1  # the sequence of the snapshot being received
        self.history = MirroredHistory(files.directory / HISTORY_DIRECTORY)

    def apply(self, record: Record) -> None:
        if self.fenced:
            raise OutOfOrder(f"{self.origin} (epoch {self.epoch}) is gone from the cluster: its records are refused")
        if record.sequence != self.applied + 1:
            raise OutOfOrder(f"record {record.sequence} after {self.applied}")
        if isinstance(record, Publish):
            if record.retain is not None:
                self.history.add(record)
            if not record.history:
                self._publish(record)
        elif isinstance(record, Finish):
            topic = self.topics.get(record.topic)
            if topic is not None:
                queue = topic.held if record.channel == TOPIC_QUEUE else topic.channels.get(record.channel)
                if queue is not None:
                    queue.finish(record.ids)
        elif isinstance(record, Requeue):
            queue = self.topics.get(record.topic, _NO_TOPIC).channels.get(record.channel)
            if queue is not None:
                queue.requeued[record.id] = (record.attempts, record.due)
        elif isinstance(record, Distribute):
            topic = self._topic(record.topic)
            held = topic.held
            if held.finished:
                held.compact()
            for name in record.channels:
                topic.channel(name).add(held.batches)
            held.drop()
        elif isinstance(record, DropChannel):
            self.topics.get(record.topic, _NO_TOPIC).channels.pop(record.channel, _NO_QUEUE).drop()
        elif isinstance(record, DropTopic):
            if record.held_only:
                self.topics.get(record.topic, _NO_TOPIC).held.drop()
            else:
                self.topics.pop(record.topic, _NO_TOPIC).drop()
                self.history.drop(record.topic)
        self.applied = record.sequence

    def take_snapshot(self, frame: Snapshot | SnapshotEnd) -> None:
        """A part of the origin's snapshot (the first replaces what was held), or its end: then this store holds
        everything up to the snapshot's record and takes the records that follow."""
        if self.fenced:
            raise OutOfOrder(f"{self.origin} (epoch {self.epoch}) is gone from the cluster: its records are refused")
        if frame.sequence != self._snapshot_at:
            self.topics.clear()
            self.files.clear()
            self._snapshot_at = frame.sequence
            self.complete = False
        if isinstance(frame, Snapshot):
            self._publish(frame.part)
            return
        self.applied = frame.sequence
        self.complete = True
        self._snapshot_at = -1

    def new_link(self) -> None:
        """The origin linked again: a snapshot it had begun starts over (it is sent whole again)."""
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

    def close(self) -> None:
        """No longer needed: its files deleted."""
        self.topics.clear()
        self.history.close()
        self.files.close()

    def _publish(self, record: Publish) -> None:
        messages = record.messages
        segment, offset = self.files.write(messages.data)  # first: a failed write changes nothing
        topic = self._topic(record.topic)
        batch = [Batch(segment, offset, len(messages.data), messages.count, messages.ids(),
                       record.defer_ms * 1_000_000)]
        if not record.channels:
            topic.held.add(batch)
        for name in record.channels:
            topic.channel(name).add(batch)

    def outstanding(self) -> Iterator[tuple[str, str | None, QueuedMessage, int]]:
        """(topic, channel or None for the topic's own queue, message, when it is due: nanoseconds since the epoch,
        0 at once) for every message still outstanding."""
        for topic_name, topic in self.topics.items():
            for message, due in topic.held.outstanding():
                yield topic_name, None, message, due
            for channel_name, queue in topic.channels.items():
                for message, due in queue.outstanding():
                    yield topic_name, channel_name, message, due

    @property
    def depth(self) -> int:
        """Outstanding messages, counted once per channel (and once held), as nsqd's depths count them."""
        return sum(self.topic_depths().values())

    def topic_depths(self) -> dict[str, int]:
        """Each topic's outstanding messages, counted as ``depth`` counts them."""
        return {name: topic.held.depth + sum(queue.depth for queue in topic.channels.values())
                for name, topic in self.topics.items()}


_NO_TOPIC = MirroredTopic()  # stands for a topic or channel the store does not have: dropping it changes nothing
_NO_QUEUE = MirroredQueue()
