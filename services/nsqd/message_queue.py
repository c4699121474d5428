"""The messages a topic or a channel holds: queued ones, and deferred ones (``deferred``, a ``DeferredStore``).

A queue is one of two kinds, chosen once where it is opened (storage.py); the topic and the channel never ask
which they have:

- ``MemoryFirstQueue``, NSQ's: messages a consumer can take at once (``take_now``) are handed over without being
  queued; the rest wait in memory up to ``--mem-queue-size``, then in the backend (the name's disk queue, or
  nothing for an ephemeral name, which drops and counts what memory cannot hold).
- ``DiskThroughQueue``, a channel's at ``--mem-queue-size=0``: every message is written to its disk queue before a
  consumer gets it, and its copy there is kept until it is finished (``release``); a message put back (requeued,
  timed out, due) is written again before the copy it was read from is released, and a deferred one is released
  once its deferred file holds it. A crash then loses nothing in flight, requeued or deferred. Its memory only
  holds what was read from disk and not handed out yet.

``depth`` (``len``) counts memory and backend. ``peek_job`` shows the messages in the order they would be handed
out (memory, then the backend) without taking any: nothing it reads is counted, moved or released.

Messages are either new (``accept``, ``defer_published``: a publish, not acknowledged yet) or accepted earlier (``put``,
``defer``). A write the disk refuses is reported to nsqd's health: a new message is then refused (OSError, none of
them kept: the publish fails), one accepted earlier stays in memory (nothing accepted is dropped). A write that
succeeds reports health restored. A write the queue's cap (``--max-bytes-per-queue``) refuses raises ``QueueFull``
the same way, but leaves health alone: a full queue is the policy at work, not a fault.
"""

from __future__ import annotations

import logging
from collections import deque
from itertools import islice
from typing import Callable, ClassVar

from .backend import Backend
from .deferred_store import DeferredStore
from .health import Health
from .message import ID, BODY, QueuedMessage, decode, encode, message_id
from .queue_cap import QueueFull
from .segment_files import MIN_RECORD

log = logging.getLogger("nsqd")

# hands messages to the consumers with room, in order; how many they took
TakeNow = Callable[[list[QueuedMessage]], int]


def nobody_takes(entries: list[QueuedMessage]) -> int:
    """``take_now`` for a queue without consumers (a topic's)."""
    return 0


class MessageQueue:
    # whether the backend keeps what it hands out until it is released
    keeps_until_finished: ClassVar[bool] = False

    def __init__(self, backend: Backend, memory_size: int, deferred: DeferredStore, health: Health,
                 forget: Callable[[Backend], None]) -> None:
        self.name = backend.name
        self.memory: deque[QueuedMessage] = deque()
        self.deferred = deferred
        self._backend = backend
        self._memory_size = memory_size
        self._health = health
        self._forget = forget  # tells the storage the backend's files are gone

    def __len__(self) -> int:
        return len(self.memory) + self._backend.depth

    @property
    def backend_depth(self) -> int:
        return self._backend.depth

    @property
    def dropped_count(self) -> int:
        return self._backend.dropped_count

    def report_drops(self, dropped: Callable[[list[bytes]], None]) -> None:
        """``dropped`` is told the IDs of the messages a cap with drop-oldest drops."""
        self._backend.on_drop = lambda payloads: dropped([message_id(payload) for payload in payloads])

    @property
    def room(self) -> int:
        """How many more messages memory holds."""
        return max(0, self._memory_size - len(self.memory))

    # -- messages in -----------------------------------------------------------------------------------------

    def accept(self, entries: list[QueuedMessage], take_now: TakeNow = nobody_takes) -> int:
        """New messages: what ``take_now`` does not take is queued, or OSError (QueueFull) is raised and none of
        that is queued. How many it queued."""
        return self._put(entries, take_now, refuse=True)

    def put(self, entries: list[QueuedMessage], take_now: TakeNow = nobody_takes) -> int:
        """Messages accepted earlier: what ``take_now`` does not take is queued, in memory if the disk refuses. How
        many it queued."""
        return self._put(entries, take_now, refuse=False)

    def _put(self, entries: list[QueuedMessage], take_now: TakeNow, refuse: bool) -> int:
        raise NotImplementedError

    def _write(self, entries: list[QueuedMessage], refuse: bool) -> bool:
        """Writes ``entries`` to the backend; whether it took them (if not, raised with ``refuse``)."""
        try:
            self._backend.put([encode(entry) for entry in entries])
        except (OSError, QueueFull) as error:
            self._refused(error)
            if refuse:
                raise
            return False
        if self._health.error is not None:
            self._health.write_succeeded()
        return True

    def check_room(self, entries: list[QueuedMessage]) -> None:
        """Raises QueueFull if the cap would refuse what of ``entries`` memory cannot hold."""
        spill = len(entries) - self.room
        if spill > 0:
            self._backend.check_room(sum(4 + MIN_RECORD + len(entry[BODY]) for entry in entries[-spill:]))

    def put_records(self, records: list[bytes]) -> None:
        """Messages accepted earlier, as another queue's disk wrote them (size prefix included), written as they
        are; if the disk refuses, they stay in memory, decoded."""
        try:
            self._backend.put_records(records)
        except (OSError, QueueFull) as error:
            self._refused(error)
            self.memory.extend(decode(record, 4) for record in records)
            return
        if self._health.error is not None:
            self._health.write_succeeded()

    def defer(self, entry: QueuedMessage, when: float) -> None:
        """A message accepted earlier, deferred: ``when`` is a channel's due time, a topic's delay (deferred_store)."""
        self.deferred.add(entry, when)

    def defer_published(self, entry: QueuedMessage, when: float) -> None:
        """A publish not acknowledged yet, deferred as ``defer`` defers; OSError if the disk refuses it."""
        self.deferred.add_new(entry, when)

    def release(self, msg_id: bytes) -> None:
        """The message is finished (or safe elsewhere): its disk copy need not survive a crash any more."""

    def _refused(self, error: OSError | QueueFull) -> None:
        """A disk's refusal makes nsqd unhealthy; the cap's is its policy, not a fault."""
        if isinstance(error, OSError):
            self._health.write_failed(f"failed to write messages to {self.name}", error)

    # -- messages out ----------------------------------------------------------------------------------------

    def fill_memory(self, max_count: int) -> bool:
        """Moves up to ``max_count`` messages from the backend to memory; False if there were none."""
        if not self._backend.depth:
            return False
        try:
            payloads = self._backend.read(max_count)
        except OSError as error:
            log.error("failed to read messages from %s - %s", self.name, error)
            return False
        self.memory.extend(decode(payload) for payload in payloads)
        return bool(payloads)

    def take_memory(self) -> list[QueuedMessage]:
        entries = list(self.memory)
        self.memory.clear()
        return entries

    def read_records(self, max_count: int) -> list[bytes]:
        """Up to ``max_count`` of the backend's messages as records (size prefix included), to move as they are."""
        return self._backend.read(max_count, framed=True)

    def peek_job(self, max_count: int) -> Callable[[], list[QueuedMessage]]:
        """Up to ``max_count`` messages in the order they would be handed out, none taken: memory's are copied now,
        the backend's are read when the job runs, which may be on another thread."""
        memory = list(islice(self.memory, max_count))
        backend_job = self._backend.peek_job(max_count - len(memory)) if len(memory) < max_count else list

        def run() -> list[QueuedMessage]:
            return memory + [decode(payload) for payload in backend_job()]

        return run

    # -- the whole queue -------------------------------------------------------------------------------------

    def empty(self) -> None:
        """Drops every queued and deferred message."""
        self.memory.clear()
        self._backend.empty()
        self.deferred.clear()

    def delete(self) -> None:
        """Drops every message and removes the backend's files."""
        self.empty()
        self._backend.delete()
        self._forget(self._backend)

    def flush_to_disk(self, entries: list[QueuedMessage]) -> None:
        """At exit: memory then ``entries`` go to the backend, the deferred messages to their file; then it closes.
        Messages the disk refuses now are lost, and logged."""
        entries = self.take_memory() + entries
        try:
            self._backend.put([encode(entry) for entry in entries], capped=False)  # accepted: the cap is for news
            self.deferred.save()
            self._backend.release_all()  # all safe in their new copies
        except OSError as error:
            log.error("failed to flush the messages of %s to disk - %s", self.name, error)
        try:
            self._backend.close()
        except OSError as error:  # its files are closed all the same; a restart trusts them over the metadata
            log.error("failed to sync %s - %s", self.name, error)


class MemoryFirstQueue(MessageQueue):
    """Consumers with room first, then memory, then the backend."""

    def _put(self, entries: list[QueuedMessage], take_now: TakeNow, refuse: bool) -> int:
        taken = take_now(entries)
        if taken:
            entries = entries[taken:]
        room = self._memory_size - len(self.memory)
        if room >= len(entries):
            self.memory.extend(entries)
            return len(entries)
        room = max(0, room)
        if not self._write(entries[room:] if room else entries, refuse):
            self.memory.extend(entries)  # the disk refused them: kept all the same, in order
        elif room:
            self.memory.extend(entries[:room])
        return len(entries)


class DiskThroughQueue(MessageQueue):
    """Every message through the disk queue, held there until it is finished (the backend holds what it reads)."""

    keeps_until_finished: ClassVar[bool] = True

    def _put(self, entries: list[QueuedMessage], take_now: TakeNow, refuse: bool) -> int:
        # take_now is not asked: consumers get every message from the disk (Channel._drain), none directly
        if not self._write(entries, refuse):
            self.memory.extend(entries)  # the disk refused them: kept all the same
            return len(entries)
        release = self._backend.release
        for entry in entries:  # written again: the copies read before need not be kept
            release(entry[ID])
        return len(entries)

    def defer(self, entry: QueuedMessage, when: float) -> None:
        if self.deferred.add(entry, when):
            self._backend.release(entry[ID])  # a requeued message: safe in its deferred copy

    def release(self, msg_id: bytes) -> None:
        self._backend.release(msg_id)
