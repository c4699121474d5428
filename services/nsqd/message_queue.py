"""The messages a topic or a channel holds: in memory up to ``--mem-queue-size``, then in its backend.

The backend is the name's disk queue, or ``NullBackend`` for an ephemeral name, which keeps nothing: what memory
cannot hold is dropped and counted, as NSQ's ephemeral topics and channels do. ``depth`` counts both parts.

At ``--mem-queue-size=0`` a channel's queue keeps every message on disk until it is finished: its disk queue holds
what it hands out (see disk_queue.py) until ``release``, and a message put back (requeued, timed out, due) is
written again before the copy it was read from is released.

At ``--mem-queue-size=0`` deferred messages are kept on disk too (``keeps_deferred``): each is added to the
backend's deferred file as it is deferred (``defer``), and the file is replaced by the ones still deferred once
most of it is gone (``deferred_left``). A crash may then deliver a message twice, never lose one.

``peek_job`` shows the messages in the order they would be handed out (memory, then the backend) without taking
any: nothing it reads is counted, moved or released.

A write the disk refuses is reported to nsqd's health and leaves the choice to the caller: the messages either
stay in memory (a channel: nothing accepted is dropped) or are refused as a whole, nothing of them queued (a
topic: the publish fails). A write that succeeds reports health restored. A write the queue's cap
(``--max-bytes-per-queue``) refuses is the same, but for health: a full queue is the policy at work, not a fault.
"""

from __future__ import annotations

import logging
from collections import deque
from itertools import islice
from typing import TYPE_CHECKING, Callable, Protocol

from shared.protocol.names import is_ephemeral

from .disk_queue import MIN_RECORD, DiskQueue, QueueFull
from .health import Health
from .message import QueuedMessage, decode, encode, message_id

if TYPE_CHECKING:
    from pathlib import Path

    from .options import Options

log = logging.getLogger("nsqd")


class Backend(Protocol):
    """Where messages go once memory is full: ``DiskQueue``, or ``NullBackend``."""

    name: str
    dropped_count: int
    deferred_records: int

    @property
    def holds(self) -> bool:
        """Whether it keeps what it hands out until released."""

    @property
    def depth(self) -> int: ...

    def put(self, payloads: list[bytes], capped: bool = True) -> None: ...

    def check_room(self, size: int) -> None: ...

    def put_records(self, records: list[bytes]) -> None: ...

    def read(self, max_count: int, framed: bool = False) -> list[bytes]: ...

    def peek_job(self, max_count: int) -> Callable[[], list[bytes]]: ...

    def release(self, key: bytes) -> None: ...

    def release_all(self) -> None: ...

    def save_deferred(self, messages: list[tuple[int, bytes]]) -> None: ...

    def append_deferred(self, messages: list[tuple[int, bytes]]) -> None: ...

    def take_deferred(self, keep: bool = False) -> list[tuple[int, bytes]]: ...

    def empty(self) -> None: ...

    def close(self) -> None: ...

    def delete(self) -> None: ...


class NullBackend:
    """An ephemeral name's backend: holds nothing, counts what it was given as dropped."""

    depth = 0
    holds = False
    deferred_records = 0

    def __init__(self, name: str) -> None:
        self.name = name
        self.dropped_count = 0

    def put(self, payloads: list[bytes], capped: bool = True) -> None:
        self.dropped_count += len(payloads)

    def check_room(self, size: int) -> None:
        pass

    def put_records(self, records: list[bytes]) -> None:
        self.dropped_count += len(records)

    def read(self, max_count: int, framed: bool = False) -> list[bytes]:
        return []

    def peek_job(self, max_count: int) -> Callable[[], list[bytes]]:
        return list

    def release(self, key: bytes) -> None:
        pass

    def release_all(self) -> None:
        pass

    def save_deferred(self, messages: list[tuple[int, bytes]]) -> None:
        pass

    def append_deferred(self, messages: list[tuple[int, bytes]]) -> None:
        pass

    def take_deferred(self, keep: bool = False) -> list[tuple[int, bytes]]:
        return []

    def empty(self) -> None:
        pass

    def close(self) -> None:
        pass

    def delete(self) -> None:
        pass


class MessageQueue:
    def __init__(self, backend: Backend, memory_size: int, health: Health,
                 forget: Callable[[Backend], None]) -> None:
        self.memory: deque[QueuedMessage] = deque()
        self.backend = backend
        self.holds_until_finished = backend.holds
        # release(message ID): the message is finished, its disk copy need not survive a crash any more
        self.release = backend.release
        self.keeps_deferred = memory_size == 0
        self._memory_size = memory_size
        self._health = health
        self._forget = forget  # tells the storage the backend's files are gone

    def __len__(self) -> int:
        return len(self.memory) + self.backend.depth

    @property
    def backend_depth(self) -> int:
        return self.backend.depth

    @property
    def dropped_count(self) -> int:
        return self.backend.dropped_count

    @property
    def room(self) -> int:
        """How many more messages memory holds."""
        return max(0, self._memory_size - len(self.memory))

    def put(self, entries: list[QueuedMessage], keep_refused: bool) -> None:
        """Memory while it has room, then the backend. If the disk refuses: with ``keep_refused`` the messages
        stay in memory, else OSError is raised and none of ``entries`` is queued."""
        room = self._memory_size - len(self.memory)
        if room >= len(entries):
            self.memory.extend(entries)
            return
        room = max(0, room)
        try:
            self.backend.put([encode(entry) for entry in (entries[room:] if room else entries)])
        except (OSError, QueueFull) as error:
            self._refused(error)
            if not keep_refused:
                raise
            self.memory.extend(entries)
            return
        self._written()
        if self.holds_until_finished:
            for entry in entries:  # written again: the copies read before need not be kept
                self.backend.release(entry[0])
        if room:
            self.memory.extend(entries[:room])

    def check_room(self, entries: list[QueuedMessage]) -> None:
        """Raises QueueFull if the cap would refuse what of ``entries`` memory cannot hold."""
        spill = len(entries) - self.room
        if spill > 0:
            self.backend.check_room(sum(4 + MIN_RECORD + len(entry[1]) for entry in entries[-spill:]))

    def defer(self, entries: list[tuple[int, QueuedMessage]], keep_refused: bool) -> None:
        """With ``keeps_deferred``: ``entries`` (each with its due time, or delay) go to the deferred file. If
        the disk refuses: with ``keep_refused`` they are deferred in memory alone, else OSError is raised."""
        try:
            self.backend.append_deferred([(due, encode(entry)) for due, entry in entries])
        except OSError as error:
            self._refused(error)
            if not keep_refused:
                raise
            return
        self._written()
        if self.holds_until_finished:
            for _, entry in entries:  # a requeued message: safe in its deferred copy
                self.backend.release(entry[0])

    def deferred_left(self, still_deferred: int, listing: Callable[[], list[tuple[int, bytes]]]) -> None:
        """Deferred messages left the deferred file's keeping (due, and queued again): once it holds mostly gone
        ones, it is replaced by ``listing()``, the ``still_deferred`` ones. Not while the disk refuses writes: the
        messages queued again may be in memory alone."""
        records = self.backend.deferred_records
        if records <= 2 * still_deferred + 1000 and (still_deferred or not records):
            return
        if self._health.error is not None:
            return
        try:
            self.backend.save_deferred(listing())
        except OSError as error:
            self._refused(error)  # the file keeps more than it must: duplicates after a crash, never a loss

    def put_records(self, records: list[bytes]) -> None:
        """Disk records as another queue's disk wrote them (size prefix included), written as they are; if the
        disk refuses, they stay in memory, decoded."""
        try:
            self.backend.put_records(records)
        except (OSError, QueueFull) as error:
            self._refused(error)
            self.memory.extend(decode(record, 4) for record in records)
            return
        self._written()

    def _refused(self, error: OSError | QueueFull) -> None:
        """A disk's refusal makes nsqd unhealthy; the cap's is its policy, not a fault."""
        if isinstance(error, OSError):
            self._health.write_failed(f"failed to write messages to {self.backend.name}", error)

    def _written(self) -> None:
        if self._health.error is not None:
            self._health.write_succeeded()

    def fill_memory(self, max_count: int) -> bool:
        """Moves up to ``max_count`` messages from the backend to memory; False if there were none."""
        if not self.backend.depth:
            return False
        try:
            payloads = self.backend.read(max_count)
        except OSError as error:
            log.error("failed to read messages from %s - %s", self.backend.name, error)
            return False
        self.memory.extend(decode(payload) for payload in payloads)
        return bool(payloads)

    def peek_job(self, max_count: int) -> Callable[[], list[QueuedMessage]]:
        """Up to ``max_count`` messages in the order they would be handed out, none taken: memory's are copied now,
        the backend's are read when the job runs, which may be on another thread."""
        memory = list(islice(self.memory, max_count))
        backend_job = self.backend.peek_job(max_count - len(memory)) if len(memory) < max_count else list

        def run() -> list[QueuedMessage]:
            return memory + [decode(payload) for payload in backend_job()]

        return run

    def take_memory(self) -> list[QueuedMessage]:
        entries = list(self.memory)
        self.memory.clear()
        return entries

    def empty(self) -> None:
        self.memory.clear()
        self.backend.empty()

    def delete(self) -> None:
        """Drops every message and removes the backend's files."""
        self.empty()
        self.backend.delete()
        self._forget(self.backend)

    def flush_to_disk(self, entries: list[QueuedMessage], deferred: list[tuple[int, bytes]]) -> None:
        """At exit: memory then ``entries`` go to the backend, ``deferred`` to its deferred file; then it closes.
        Messages the disk refuses now are lost, and logged."""
        entries = self.take_memory() + entries
        try:
            self.backend.put([encode(entry) for entry in entries], capped=False)  # accepted: the cap is for news
            self.backend.save_deferred(deferred)
            self.backend.release_all()  # all safe in their new copies
        except OSError as error:
            log.error("failed to flush the messages of %s to disk - %s", self.backend.name, error)
        try:
            self.backend.close()
        except OSError as error:  # its files are closed all the same; a restart trusts them over the metadata
            log.error("failed to sync %s - %s", self.backend.name, error)


class Storage:
    """The message queues of one nsqd: their disk queues live in its data path and are kept for the sync loop.
    Ephemeral names, and every name without a data path (``None``, for tests of the in-memory logic), have a
    ``NullBackend`` instead."""

    def __init__(self, data_path: Path | None, opts: Options) -> None:
        self.data_path = data_path
        self.health = Health()
        self.queues: dict[str, DiskQueue] = {}
        self._opts = opts

    def open(self, name: str, channel: bool = False) -> MessageQueue:
        """``channel``: a channel's queue, which at ``--mem-queue-size=0`` keeps messages on disk until they are
        finished."""
        backend = self._backend(name, hold=channel and self._opts.mem_queue_size == 0)
        return MessageQueue(backend, self._opts.mem_queue_size, self.health, self._forget)

    def _backend(self, name: str, hold: bool) -> Backend:
        if self.data_path is None or is_ephemeral(name):
            return NullBackend(name)
        opts = self._opts
        queue = DiskQueue(name, self.data_path, opts.max_bytes_per_file, opts.max_msg_size, opts.sync_every,
                          hold_key=message_id if hold else None, max_bytes=opts.max_bytes_per_queue,
                          drop_oldest=opts.queue_full_policy == "drop-oldest")
        self.queues[name] = queue
        return queue

    def _forget(self, backend: Backend) -> None:
        self.queues.pop(backend.name, None)
