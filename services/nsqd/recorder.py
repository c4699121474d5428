"""The seam between the queues and whatever records what happens to them.

A topic and each of its channels are handed a recorder by storage (``Storage.topic_recorder``,
``Storage.channel_recorder``) and tell it every change a record of the queue needs: a publish, a backlog handed to
the channels, finishes, requeues, dead letters parked and replayed, emptied, deleted. They never ask what kind it
is. Replication is one kind (its records go to the mirrors); a queue nothing records (an ephemeral one, or any in
an nsqd that records nothing) has the null recorder, whose methods do nothing and whose publish has nothing to wait
for. Several on one queue (replication, and a topic's retention of what it published) are one ``Recorders``: each is
told everything, and a publish waits for all of them.

A queue is named by its topic and channel; a channel's dead letters are the channel's (``parked``, ``replayed``,
``dead_letters_*``), never a name of their own. How a recorder names them elsewhere (the replication link, files)
is its own business.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import NamedTuple, Protocol

from .message import QueuedMessage


class ChannelRecorder(Protocol):
    def added(self, entries: list[QueuedMessage], defer_ms: int) -> Awaitable[None] | None:
        """Messages nsqd put into the channel itself (taken over from a lost nsqd, put back from history); what
        their acknowledgement waits for, if anything."""

    def finished(self, ids: list[bytes]) -> None:
        """Done with: finished, or dropped (past the TTL, sampled out, the oldest a full queue dropped)."""

    def requeued(self, entry: QueuedMessage, due_ns: int) -> None:
        """Given back (REQ, a timeout): its attempts so far, and when it is due (nanoseconds since the epoch; 0: at
        once)."""

    def parked(self, entries: list[QueuedMessage]) -> None:
        """Moved from the channel to its dead letters."""

    def replayed(self, entries: list[QueuedMessage]) -> None:
        """Moved from the dead letters back to the channel, attempts reset."""

    def dead_letters_added(self, entries: list[QueuedMessage]) -> Awaitable[None] | None:
        """Dead letters nsqd put there itself (taken over from a lost nsqd)."""

    def dead_letters_dropped(self, ids: list[bytes]) -> None:
        """The oldest dead letters a full queue dropped."""

    def dead_letters_emptied(self) -> None: ...

    def emptied(self) -> None:
        """Every queued, in-flight and deferred message dropped (its dead letters stay)."""

    def deleted(self) -> None:
        """The channel is gone, dead letters and all."""


class TopicRecorder(Protocol):
    def published(self, held: bool, defer_ms: int, entries: list[QueuedMessage]) -> Awaitable[None] | None:
        """Messages the topic took: held by it (no channel yet, paused, not started) or handed to every channel it
        has; what the acknowledgement waits for, if anything (done, or a ``TopicError``)."""

    def distributed(self) -> None:
        """What the topic held was handed to every channel it has."""

    def dropped(self, ids: list[bytes]) -> None:
        """The oldest the topic held, dropped by its full queue."""

    def emptied(self) -> None:
        """What the topic held was dropped (its channels keep theirs)."""

    def deleted(self) -> None:
        """The topic is gone, channels and all."""

    def channel(self, name: str) -> ChannelRecorder:
        """The recorder of the topic's channel ``name`` (a channel that is not ephemeral)."""


class Recording(Protocol):
    """A kind of record kept of this nsqd's queues: the recorder of each topic that is not ephemeral."""

    def topic(self, name: str) -> TopicRecorder: ...


class Outstanding(NamedTuple):
    """What a queue has outstanding, as a record of it is started afresh: ``queued`` (held, queued or in flight) and
    ``dead_letters`` are jobs that read the disk queues on any thread; ``delayed`` is each deferred message with its
    delay in milliseconds."""

    queued: Callable[[], list[QueuedMessage]]
    delayed: list[tuple[QueuedMessage, int]]
    dead_letters: Callable[[], list[QueuedMessage]]


class NullChannelRecorder:
    """What a queue nothing records is handed: every method does nothing."""

    def added(self, entries: list[QueuedMessage], defer_ms: int) -> None:
        return None

    def finished(self, ids: list[bytes]) -> None:
        pass

    def requeued(self, entry: QueuedMessage, due_ns: int) -> None:
        pass

    def parked(self, entries: list[QueuedMessage]) -> None:
        pass

    def replayed(self, entries: list[QueuedMessage]) -> None:
        pass

    def dead_letters_added(self, entries: list[QueuedMessage]) -> None:
        return None

    def dead_letters_dropped(self, ids: list[bytes]) -> None:
        pass

    def dead_letters_emptied(self) -> None:
        pass

    def emptied(self) -> None:
        pass

    def deleted(self) -> None:
        pass


class NullTopicRecorder:
    def published(self, held: bool, defer_ms: int, entries: list[QueuedMessage]) -> None:
        return None

    def distributed(self) -> None:
        pass

    def dropped(self, ids: list[bytes]) -> None:
        pass

    def emptied(self) -> None:
        pass

    def deleted(self) -> None:
        pass

    def channel(self, name: str) -> ChannelRecorder:
        return NULL_CHANNEL


NULL_CHANNEL: ChannelRecorder = NullChannelRecorder()
NULL_TOPIC: TopicRecorder = NullTopicRecorder()


class ChannelRecorders:
    """Several recorders of one channel, told everything in turn."""

    def __init__(self, recorders: list[ChannelRecorder]) -> None:
        self._recorders = recorders

    def added(self, entries: list[QueuedMessage], defer_ms: int) -> Awaitable[None] | None:
        return _all([recorder.added(entries, defer_ms) for recorder in self._recorders])

    def finished(self, ids: list[bytes]) -> None:
        for recorder in self._recorders:
            recorder.finished(ids)

    def requeued(self, entry: QueuedMessage, due_ns: int) -> None:
        for recorder in self._recorders:
            recorder.requeued(entry, due_ns)

    def parked(self, entries: list[QueuedMessage]) -> None:
        for recorder in self._recorders:
            recorder.parked(entries)

    def replayed(self, entries: list[QueuedMessage]) -> None:
        for recorder in self._recorders:
            recorder.replayed(entries)

    def dead_letters_added(self, entries: list[QueuedMessage]) -> Awaitable[None] | None:
        return _all([recorder.dead_letters_added(entries) for recorder in self._recorders])

    def dead_letters_dropped(self, ids: list[bytes]) -> None:
        for recorder in self._recorders:
            recorder.dead_letters_dropped(ids)

    def dead_letters_emptied(self) -> None:
        for recorder in self._recorders:
            recorder.dead_letters_emptied()

    def emptied(self) -> None:
        for recorder in self._recorders:
            recorder.emptied()

    def deleted(self) -> None:
        for recorder in self._recorders:
            recorder.deleted()


class TopicRecorders:
    """Several recorders of one topic, told everything in turn; a publish waits for every one."""

    def __init__(self, recorders: list[TopicRecorder]) -> None:
        self._recorders = recorders

    def published(self, held: bool, defer_ms: int, entries: list[QueuedMessage]) -> Awaitable[None] | None:
        return _all([recorder.published(held, defer_ms, entries) for recorder in self._recorders])

    def distributed(self) -> None:
        for recorder in self._recorders:
            recorder.distributed()

    def dropped(self, ids: list[bytes]) -> None:
        for recorder in self._recorders:
            recorder.dropped(ids)

    def emptied(self) -> None:
        for recorder in self._recorders:
            recorder.emptied()

    def deleted(self) -> None:
        for recorder in self._recorders:
            recorder.deleted()

    def channel(self, name: str) -> ChannelRecorder:
        return ChannelRecorders([recorder.channel(name) for recorder in self._recorders])


def topic_recorder(recordings: list[Recording], name: str) -> TopicRecorder:
    """The recorder of topic ``name`` from each of ``recordings``, as one (a recording that does not record the
    topic answers the null recorder, left out)."""
    recorders = [recorder for recording in recordings if (recorder := recording.topic(name)) is not NULL_TOPIC]
    if not recorders:
        return NULL_TOPIC
    return recorders[0] if len(recorders) == 1 else TopicRecorders(recorders)


def _all(waits: list[Awaitable[None] | None]) -> Awaitable[None] | None:
    """Done once every one of ``waits`` is (None: nothing to wait for); the first failure fails it."""
    pending = [wait for wait in waits if wait is not None]
    if not pending:
        return None
    if len(pending) == 1:
        return pending[0]

    async def every() -> None:
        await asyncio.gather(*pending)

    return every()
