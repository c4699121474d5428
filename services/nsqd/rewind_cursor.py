"""A rewind under way: what a channel still has to put back from its topic's retention files (retention_log.py),
read from them as the channel's consumers have room, never copied into the channel's queue first.

A rewind (rewind.py) starts one at the mark before its moment in the first file holding a message published since
then, and it stops where the log ended when the rewind was asked. The channel takes from it only once its own queue
is empty (``Channel._refill``), so what is put back comes behind what the channel had queued, and behind what is
published meanwhile. Left out as it is read: what was published before its moment (or is past the retention time by
now), and every ID that was pending in the channel or its topic when the rewind was asked (``skip``): two copies of
one ID would break the in-flight and deferred indexes.

Its position is kept in nsqd.dat (``RewindPosition``), so a restart goes on from where it was last saved; what was
read since then comes again unless it is still pending (delivery is at least once).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Awaitable, Callable

from .retention_log import HEADER, ID_END, LogEnd

if TYPE_CHECKING:
    from .channel import Channel
    from .message import QueuedMessage
    from .retention import RetainedTopic

log = logging.getLogger("nsqd")

# records read from a file at once: a consumer's room may ask for a few at a time
READ_AHEAD = 1024


@dataclass(frozen=True)
class RewindPosition:
    """Where a rewind is: what nsqd.dat keeps of it."""

    since_ns: int  # what was published earlier is left out
    end_number: int  # the log's end when the rewind was asked: the last file, and its size then
    end_size: int
    number: int  # the next record: its file, and where in it
    offset: int
    remaining: int  # how many it expects to put back still: part of the channel's depth
    # when the rewind was asked: what was published later is left out, even where a file number came round again
    # (every file expired) or a power cut took back the end of a file
    until_ns: int

    def document(self) -> list[int]:
        return [self.since_ns, self.end_number, self.end_size, self.number, self.offset, self.remaining,
                self.until_ns]

    @classmethod
    def from_document(cls, values: list[int]) -> RewindPosition:
        since_ns, end_number, end_size, number, offset, remaining, until_ns = (int(value) for value in values)
        return cls(since_ns, end_number, end_size, number, offset, remaining, until_ns)


class Rewinding:
    """What a channel still puts back from its topic's history: nothing (``NO_REWIND``, every channel's while no
    rewind is under way), or what a ``RewindCursor`` reads; the channel never asks which."""

    def __init__(self) -> None:
        self.remaining = 0  # how many it expects to put back still: part of the channel's depth
        self.ended: Callable[[], None] = _nothing  # told once it is done or dropped (nsqd.dat then forgets it)

    @property
    def done(self) -> bool:
        return True

    @property
    def position(self) -> RewindPosition | None:
        """What nsqd.dat keeps of it; None: nothing."""
        return None

    def put_back(self, channel: Channel, count: int) -> Rewinding:
        """Up to ``count`` messages into ``channel``'s queue; what the channel has next (``NO_REWIND`` once done)."""
        return self


class RewindCursor(Rewinding):
    def __init__(self, retained: RetainedTopic, position: RewindPosition, skip: set[bytes],
                 limit: int | None = None) -> None:
        super().__init__()
        self.retained = retained
        self.skip = skip
        self.since_ns = position.since_ns
        self.end = LogEnd(position.end_number, position.end_size)
        self.number = position.number
        self.offset = position.offset
        self.remaining = position.remaining
        self.until_ns = position.until_ns
        self._limit = limit  # an ephemeral channel's: at most this many more
        self._ahead: list[bytes] = []  # records read from the position on (without their sizes); _at: the next
        self._at = 0

    @property
    def position(self) -> RewindPosition:
        return RewindPosition(self.since_ns, self.end.number, self.end.size, self.number, self.offset, self.remaining,
                              self.until_ns)

    @property
    def done(self) -> bool:
        return self.number > self.end.number or self._limit == 0

    def take(self, max_count: int) -> tuple[list[QueuedMessage], list[tuple[QueuedMessage, int]]]:
        """The next messages to put back, up to ``max_count``: those to queue, and the deferred publishes whose time
        has not come, with their due times; nothing once done. Files are read ``READ_AHEAD`` records at a time,
        however few a consumer's room asks for; the position moves record by record."""
        now_ns, end = time.time_ns(), self.end
        since_ns = max(self.since_ns, self.retained.oldest_kept_ns(now_ns))
        skip, unpack, ahead, until_ns = self.skip, HEADER.unpack_from, self._ahead, self.until_ns
        queued: list[QueuedMessage] = []
        deferred: list[tuple[QueuedMessage, int]] = []
        number, offset, at = self.number, self.offset, self._at
        while len(queued) + len(deferred) < max_count and number <= end.number:
            if at == len(ahead):  # (a file read to its end: read_at goes on with the next)
                ahead, read_from, after = self.retained.log.read_at(number, offset, end, READ_AHEAD)
                number, offset, at = read_from, offset if read_from == number else 0, 0
                if not ahead:
                    number, offset = read_from, after  # past the end: done
                    continue
            payload = ahead[at]
            at += 1
            offset += 4 + len(payload)
            timestamp, due_ns = unpack(payload)
            msg_id = payload[HEADER.size:ID_END]
            if timestamp < since_ns or timestamp > until_ns or (skip and msg_id in skip):
                continue
            if due_ns > now_ns:
                deferred.append(((msg_id, payload[ID_END:], timestamp, 0), due_ns))
            else:
                queued.append((msg_id, payload[ID_END:], timestamp, 0))
        if at == len(ahead) and number == end.number and offset >= end.size:
            number, offset = end.number + 1, 0  # all read: done now, not at the next take
        self._ahead, self._at, self.number, self.offset = ahead, at, number, offset
        if self._limit is not None:
            queued = queued[:self._limit]
            deferred = deferred[:self._limit - len(queued)]
            self._limit -= len(queued) + len(deferred)
        self.remaining = 0 if number > end.number else max(0, self.remaining - len(queued) - len(deferred))
        return queued, deferred

    def merged(self, earlier: Rewinding) -> RewindCursor:
        """This rewind, asked while ``earlier`` was still under way: one cursor from the earlier of their positions and
        moments to this one's end, so that neither leaves anything out; what this one's scan found pending is skipped.
        Where this one starts before where the earlier one was, messages between the two that only the earlier one
        asked for, and had put back already, come again (at least once)."""
        if earlier.done or not isinstance(earlier, RewindCursor) or earlier.retained is not self.retained:
            return self
        number, offset = min((self.number, self.offset), (earlier.number, earlier.offset))
        position = RewindPosition(min(self.since_ns, earlier.since_ns), self.end.number, self.end.size, number,
                                  offset, max(self.remaining, earlier.remaining), self.until_ns)
        limit = None if self._limit is None or earlier._limit is None else max(self._limit, earlier._limit)
        merged = RewindCursor(self.retained, position, self.skip, limit)
        merged.ended = self.ended
        return merged


    def put_back(self, channel: Channel, count: int) -> Rewinding:
        """Up to ``count`` messages read, into ``channel``'s queue (its delivery hands them out), or deferred until
        due; the channel's recorder is told, and not waited for."""
        try:
            queued, deferred = self.take(count)
        except OSError as error:  # a file that cannot be read: the rewind ends there, the publish in hand goes on
            log.error("rewinding %s/%s: failed to read the retention files - %s", channel.topic_name, channel.name,
                      error)
            self.ended()
            return NO_REWIND
        if deferred:
            now, now_ns = time.monotonic(), time.time_ns()
            for entry, due_ns in deferred:
                delay_ns = max(0, due_ns - now_ns)
                channel.put_deferred(entry, delay_ns / 1e9, now)
                _settle(channel.recorder.added([entry], delay_ns // 1_000_000), channel)
        if queued:
            channel.message_count += len(queued)
            channel.queue.put(queued)
            _settle(channel.recorder.added(queued, 0), channel)
        if not self.done:
            return self
        self.ended()
        return NO_REWIND


def _nothing() -> None:
    pass


NO_REWIND = Rewinding()


def _settle(wait: Awaitable[None] | None, channel: Channel) -> None:
    """A recorder's wait for messages put back (replication's copies): not awaited, its failure logged."""
    if wait is None:
        return
    future = asyncio.ensure_future(wait)

    def done(finished: asyncio.Future[None]) -> None:
        if not finished.cancelled() and finished.exception() is not None:
            log.warning("rewinding %s/%s: messages put back without all their copies - %s", channel.topic_name,
                        channel.name, finished.exception())

    future.add_done_callback(done)
