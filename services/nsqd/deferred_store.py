"""The deferred messages of one topic or channel: the one place they are kept, in memory and in their file.

A channel's wait for their due time (a DPUB's delay, or a REQ's); a topic's are DPUBs waiting for a channel, each
with its delay, which starts once it reaches one. Both kinds are held by their deadline (``DeferredMessage``): a
channel's is a ``time.monotonic()`` value, a topic's the delay itself, and ``Timing`` turns it into what the file
keeps (a due time in unix ns, a delay in ms) and back.

Where the file is kept up to date is chosen once, where the queue is opened:
- at exit only (``journaled=False``, NSQ's default memory queue): ``save`` writes the whole file, and the next start
  takes it back; a crash loses what was deferred, as NSQ loses its memory.
- as messages are deferred (``journaled``, at ``--mem-queue-size=0``): each is appended with one write before it
  is taken, so a crash loses none (and may deliver one twice). Once the file holds mostly messages that are gone,
  it is replaced by the ones still deferred; not while the disk refuses writes, as the messages queued again may
  be in memory alone.
A store without a file (ephemeral names, or no data path) keeps its messages in memory alone.
"""

from __future__ import annotations

import time
from typing import Callable, Protocol

from .deadline_queue import DeadlineQueue
from .deferred_file import DeferredFile
from .health import Health
from .message import DeferredMessage, QueuedMessage, decode, encode


class Timing(Protocol):
    def to_file(self, deadline: float) -> int: ...

    def from_file(self, value: int) -> float: ...

    def delay_ms(self, deadline: float) -> int: ...


class DueTimes:
    """A channel's: deadlines are ``time.monotonic()`` values, the file keeps due times in unix ns."""

    @staticmethod
    def to_file(deadline: float) -> int:
        return time.time_ns() + int((deadline - time.monotonic()) * 1e9)

    @staticmethod
    def from_file(value: int) -> float:
        return time.monotonic() + max(0, value - time.time_ns()) / 1e9

    @staticmethod
    def delay_ms(deadline: float) -> int:
        return max(0, round((deadline - time.monotonic()) * 1000))


class Delays:
    """A topic's: a deadline is the delay in seconds, the file keeps it in ms."""

    @staticmethod
    def to_file(deadline: float) -> int:
        return round(deadline * 1000)

    @staticmethod
    def from_file(value: int) -> float:
        return value / 1000

    @staticmethod
    def delay_ms(deadline: float) -> int:
        return round(deadline * 1000)


class DeferredStore:
    def __init__(self, file: DeferredFile | None, journaled: bool, timing: Timing, health: Health) -> None:
        self._file = file
        self._journaled = journaled and file is not None
        self._timing = timing
        self._health = health
        self._messages: DeadlineQueue[DeferredMessage] = DeadlineQueue()
        for value, payload in file.take(keep=self._journaled) if file is not None else []:
            self._messages.push(DeferredMessage(decode(payload), timing.from_file(value)))

    def __len__(self) -> int:
        return len(self._messages)

    def add(self, entry: QueuedMessage, deadline: float) -> bool:
        """Keeps ``entry`` until ``deadline``; whether it is safe on disk now. If the disk refuses it, it is kept in
        memory alone (nsqd reports the refusal)."""
        try:
            self.add_new(entry, deadline)
        except OSError:
            self._messages.push(DeferredMessage(entry, deadline))
            return False
        return self._journaled

    def add_new(self, entry: QueuedMessage, deadline: float) -> None:
        """``add`` for a message not acknowledged yet: if the disk refuses it, OSError is raised and it is not
        kept."""
        if self._journaled:
            assert self._file is not None
            try:
                self._file.append([(self._timing.to_file(deadline), encode(entry))])
            except OSError as error:
                self._health.write_failed(f"failed to write messages to {self._file.name}", error)
                raise
            if self._health.error is not None:
                self._health.write_succeeded()
        self._messages.push(DeferredMessage(entry, deadline))

    def pop_due(self, now: float, put: Callable[[QueuedMessage, float], None]) -> bool:
        """Each message due by ``now`` goes to ``put(entry, deadline)``, earliest first; then the file no longer
        needs to keep them. Whether there were any."""
        due = self._messages.pop_expired(now)
        for message in due:
            put(message.entry, message.deadline)
        if due and self._journaled:
            self._compact()
        return bool(due)

    def pop_all(self, put: Callable[[QueuedMessage, float], None]) -> bool:
        """Every message goes to ``put`` (a topic's, with its delay, to the channels that now exist)."""
        return self.pop_due(float("inf"), put)

    def delayed(self) -> list[tuple[QueuedMessage, int]]:
        """Every message kept, with the milliseconds until it is due (for a copy elsewhere)."""
        delay_ms = self._timing.delay_ms
        return [(message.entry, delay_ms(message.deadline)) for message in self._messages.values()]

    def _compact(self) -> None:
        assert self._file is not None
        records, still_deferred = self._file.records, len(self._messages)
        if records <= 2 * still_deferred + 1000 and (still_deferred or not records):
            return
        if self._health.error is not None:
            return
        try:
            self._file.save(self._records())
        except OSError as error:  # the file keeps more than it must: duplicates after a crash, never a loss
            self._health.write_failed(f"failed to write messages to {self._file.name}", error)

    def _records(self) -> list[tuple[int, bytes]]:
        to_file = self._timing.to_file
        return [(to_file(message.deadline), encode(message.entry)) for message in self._messages.values()]

    def clear(self) -> None:
        self._messages.clear()
        if self._file is not None:
            self._file.delete()

    def save(self) -> None:
        """At exit: the file keeps every message still deferred, with its time; memory lets go of them. OSError
        if the disk refuses."""
        records = self._records()
        self._messages.clear()
        if self._file is not None:
            self._file.save(records)
