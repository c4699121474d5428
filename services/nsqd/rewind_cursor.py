"""A rewind under way: what a channel still has to put back from its topic's retention files (retention_log.py),
read from them as the channel's consumers have room, never copied into the channel's queue first.

A rewind (rewind.py) starts one at the first file holding a message published since its moment, and it stops where
the log ended when the rewind was asked. The channel takes from it only once its own queue is empty
(``Channel._refill``), so what is put back comes behind what the channel had queued. Left out as it is read: what was
published before its moment (or is past the retention time by now), and every ID that was pending in the channel or
its topic when the rewind was asked (``skip``): two copies of one ID would break the in-flight and deferred indexes.

Its position is kept in nsqd.dat (``RewindPosition``), so a restart goes on from where it was last saved; what was
read since then comes again unless it is still pending (delivery is at least once).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Awaitable

from .retention_log import LogEnd

if TYPE_CHECKING:
    from .channel import Channel
    from .message import QueuedMessage
    from .retention import RetainedTopic

log = logging.getLogger("nsqd")


@dataclass(frozen=True)
class RewindPosition:
    """Where a rewind is: what nsqd.dat keeps of it."""

    since_ns: int  # what was published earlier is left out
    end_number: int  # the log's end when the rewind was asked: the last file, and its size then
    end_size: int
    number: int  # the next record: its file, and where in it
    offset: int
    remaining: int  # how many it expects to put back still: part of the channel's depth

    def document(self) -> list[int]:
        return [self.since_ns, self.end_number, self.end_size, self.number, self.offset, self.remaining]

    @classmethod
    def from_document(cls, values: list[int]) -> RewindPosition:
        since_ns, end_number, end_size, number, offset, remaining = (int(value) for value in values)
        return cls(since_ns, end_number, end_size, number, offset, remaining)


class RewindCursor:
    def __init__(self, retained: RetainedTopic, position: RewindPosition, skip: set[bytes],
                 limit: int | None = None) -> None:
        self.retained = retained
        self.position = position
        self.skip = skip
        self._limit = limit  # an ephemeral channel's: at most this many more

    @property
    def remaining(self) -> int:
        return self.position.remaining

    @property
    def done(self) -> bool:
        return self.position.number > self.position.end_number or self._limit == 0

    def take(self, max_count: int) -> list[tuple[QueuedMessage, int]]:
        """The next messages to put back (up to ``max_count``, each with its due time, 0 for none), from the next
        file that has any; nothing once done."""
        position, retained = self.position, self.retained
        end = LogEnd(position.end_number, position.end_size)
        since_ns = max(position.since_ns, retained.oldest_kept_ns(time.time_ns()))
        skip = self.skip
        taken: list[tuple[QueuedMessage, int]] = []
        number, offset = position.number, position.offset
        while not taken and number <= end.number:
            batch, number, offset = retained.log.read_at(number, offset, end, max_count)
            for timestamp, due_ns, msg_id, body in batch:
                if timestamp < since_ns or msg_id in skip:
                    continue
                taken.append(((msg_id, body, timestamp, 0), due_ns))
        if self._limit is not None:
            taken = taken[:self._limit]
            self._limit -= len(taken)
        self.position = replace(position, number=number, offset=offset,
                                remaining=0 if number > end.number else max(0, position.remaining - len(taken)))
        return taken

    def merged(self, earlier: RewindCursor | None) -> RewindCursor:
        """This rewind, asked while ``earlier`` was still under way: one cursor from the earlier of their positions and
        moments to this one's end, so that neither leaves anything out (what both cover comes once; what this one's
        scan found pending is skipped)."""
        if earlier is None or earlier.done or earlier.retained is not self.retained:
            return self
        mine, theirs = self.position, earlier.position
        start = min((mine.number, mine.offset), (theirs.number, theirs.offset))
        position = replace(mine, since_ns=min(mine.since_ns, theirs.since_ns), number=start[0], offset=start[1],
                           remaining=max(mine.remaining, theirs.remaining))
        limit = None if self._limit is None or earlier._limit is None else max(self._limit, earlier._limit)
        return RewindCursor(self.retained, position, self.skip, limit)


def put_back(channel: Channel, cursor: RewindCursor, count: int) -> RewindCursor | None:
    """Up to ``count`` messages ``cursor`` reads, into ``channel``'s queue (its delivery hands them out), or deferred
    until due; the channel's recorder is told, and not waited for. The cursor, or None once it is done."""
    taken = cursor.take(count)
    now, now_ns, name = time.monotonic(), time.time_ns(), f"{channel.topic_name}/{channel.name}"
    for entry, due_ns in taken:
        if due_ns > now_ns:  # a deferred publish whose time has not come
            channel.put_deferred(entry, (due_ns - now_ns) / 1e9, now)
            _settle(channel.recorder.added([entry], (due_ns - now_ns) // 1_000_000), name)
    if entries := [entry for entry, due_ns in taken if due_ns <= now_ns]:
        channel.message_count += len(entries)
        channel.queue.put(entries)
        _settle(channel.recorder.added(entries, 0), name)
    return None if cursor.done else cursor


def _settle(wait: Awaitable[None] | None, name: str) -> None:
    """A recorder's wait for messages put back (replication's copies): not awaited, its failure logged."""
    if wait is None:
        return
    future = asyncio.ensure_future(wait)

    def done(finished: asyncio.Future[None]) -> None:
        if not finished.cancelled() and finished.exception() is not None:
            log.warning("rewinding %s: messages put back without all their copies - %s", name, finished.exception())

    future.add_done_callback(done)
