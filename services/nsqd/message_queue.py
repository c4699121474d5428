"""The messages a topic or a channel holds: in memory up to ``--mem-queue-size``, then in its backend.

The backend is the name's disk queue, or ``NullBackend`` for an ephemeral name, which keeps nothing: what memory
cannot hold is dropped and counted, as NSQ's ephemeral topics and channels do. ``depth`` counts both parts.

At ``--mem-queue-size=0`` a channel's queue keeps every message on disk until it is finished: its disk queue holds
what it hands out (see disk_queue.py) until ``release``, and a message put back (requeued, timed out, due) is
written again before the copy it was read from is released.

A write the disk refuses is reported to nsqd's health and leaves the choice to the caller: the messages either
stay in memory (a channel: nothing accepted is dropped) or are refused as a whole, nothing of them queued (a
topic: the publish fails). A write that succeeds reports health restored.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING, Callable, Protocol

from shared.names import is_ephemeral

from .disk_queue import DiskQueue
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

    @property
    def holds(self) -> bool:
        """Whether it keeps what it hands out until released."""

    @property
    def depth(self) -> int: ...

    def put(self, payloads: list[bytes]) -> None: ...

    def put_records(self, records: list[bytes]) -> None: ...

    def read(self, max_count: int, framed: bool = False) -> list[bytes]: ...

    def release(self, key: bytes) -> None: ...

    def release_all(self) -> None: ...

    def save_deferred(self, messages: list[tuple[int, bytes]]) -> None: ...

    def take_deferred(self) -> list[tuple[int, bytes]]: ...

    def empty(self) -> None: ...

    def close(self) -> None: ...

    def delete(self) -> None: ...


class NullBackend:
    """An ephemeral name's backend: holds nothing, counts what it was given as dropped."""

    depth = 0
    holds = False

    def __init__(self, name: str) -> None:
        self.name = name
        self.dropped_count = 0

    def put(self, payloads: list[bytes]) -> None:
        self.dropped_count += len(payloads)

    def put_records(self, records: list[bytes]) -> None:
        self.dropped_count += len(records)

    def read(self, max_count: int, framed: bool = False) -> list[bytes]:
        return []

    def release(self, key: bytes) -> None:
        pass

    def release_all(self) -> None:
        pass

    def save_deferred(self, messages: list[tuple[int, bytes]]) -> None:
        pass

    def take_deferred(self) -> list[tuple[int, bytes]]:
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
        except OSError as error:
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

    def put_records(self, records: list[bytes]) -> None:
        """Disk records as another queue's disk wrote them (size prefix included), written as they are; if the
        disk refuses, they stay in memory, decoded."""
        try:
            self.backend.put_records(records)
        except OSError as error:
            self._refused(error)
            self.memory.extend(decode(record, 4) for record in records)
            return
        self._written()

    def _refused(self, error: OSError) -> None:
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
            self.backend.put([encode(entry) for entry in entries])
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
        queue = DiskQueue(name, self.data_path, self._opts.max_bytes_per_file, self._opts.max_msg_size,
                          self._opts.sync_every, hold_key=message_id if hold else None)
        self.queues[name] = queue
        return queue

    def _forget(self, backend: Backend) -> None:
        self.queues.pop(backend.name, None)
