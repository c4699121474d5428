"""The message queues of one nsqd, and the one place their kind is chosen.

Every queue's disk queue lives in the data path and is kept here for the sync loop. Ephemeral names, and every
name without a data path (``None``: tests of the in-memory logic), have a ``NullBackend`` and no deferred file.

Each queue's recorder (recorder.py) is chosen here too: an ephemeral topic or channel has the null one, whatever
this nsqd records; the others one from each recording this nsqd keeps (``record_with``), or the null one.

The kind follows ``--mem-queue-size``: a topic's queue, and a channel's dead letters, are memory first; a channel's
is memory first too, or at ``--mem-queue-size=0`` disk through (every message on disk until it is finished) when it
has a disk queue: an ephemeral channel stays memory first, handing messages to its consumers and dropping what they
cannot take, as NSQ's do. At ``--mem-queue-size=0`` deferred messages are written to their file as they are
deferred, else at exit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from nsqclient.protocol.names import is_ephemeral

from .backend import Backend, NullBackend
from .deferred_file import DeferredFile
from .deferred_store import DeferredStore, Delays, DueTimes, Timing
from .disk_queue import DiskQueue
from .health import Health
from .message import message_id
from .message_queue import DiskThroughQueue, MemoryFirstQueue, MessageQueue
from .recorder import NULL_CHANNEL, NULL_TOPIC, ChannelRecorder, Recording, TopicRecorder, topic_recorder
from .segment_files import MIN_RECORD

if TYPE_CHECKING:
    from pathlib import Path

    from .options import Options


class Storage:
    def __init__(self, data_path: Path | None, opts: Options) -> None:
        self.data_path = data_path
        self.health = Health()
        self.queues: dict[str, DiskQueue] = {}
        self._opts = opts
        self._on_disk_only = opts.mem_queue_size == 0
        self._recordings: list[Recording] = []
        self._reclaim: Callable[[int], bool] | None = None

    def record_with(self, recording: Recording) -> None:
        """Queues handed their recorders from now on are recorded by ``recording`` too."""
        self._recordings.append(recording)

    def reclaim_with(self, reclaim: Callable[[int], bool]) -> None:
        """A disk queue the disk refuses a write frees room with ``reclaim`` (bytes wanted; whether it freed any)
        before refusing the write."""
        self._reclaim = reclaim

    def topic_recorder(self, name: str) -> TopicRecorder:
        return NULL_TOPIC if is_ephemeral(name) else topic_recorder(self._recordings, name)

    def channel_recorder(self, topic: TopicRecorder, name: str) -> ChannelRecorder:
        """The recorder of ``topic``'s channel ``name``."""
        return NULL_CHANNEL if is_ephemeral(name) else topic.channel(name)

    def open_topic(self, name: str) -> MessageQueue:
        """A topic's: its deferred messages wait for a channel, each with its delay."""
        return self._open(MemoryFirstQueue, name, Delays)

    def open_channel(self, name: str) -> MessageQueue:
        kind = DiskThroughQueue if self._on_disk_only and self._disk_path(name) else MemoryFirstQueue
        return self._open(kind, name, DueTimes)

    def open_dead_letters(self, name: str) -> MessageQueue:
        return self._open(MemoryFirstQueue, name, DueTimes)

    def _open(self, kind: type[MessageQueue], name: str, timing: Timing) -> MessageQueue:
        backend: Backend
        data_path = self._disk_path(name)
        if data_path is None:
            backend, deferred_file = NullBackend(name), None
        else:
            backend = self.queues[name] = self._disk_queue(data_path, name, hold=kind.keeps_until_finished)
            deferred_file = DeferredFile(name, data_path / f"{name}.diskqueue.deferred.dat", MIN_RECORD,
                                         self._opts.max_msg_size + MIN_RECORD)
        deferred = DeferredStore(deferred_file, self._on_disk_only, timing, self.health)
        return kind(backend, self._opts.mem_queue_size, deferred, self.health, self._forget)

    def _disk_path(self, name: str) -> Path | None:
        """Where the name's files go; None for a name that has none."""
        return None if is_ephemeral(name) else self.data_path

    def _disk_queue(self, data_path: Path, name: str, hold: bool) -> DiskQueue:
        opts = self._opts
        queue = DiskQueue(name, data_path, opts.max_bytes_per_file, opts.max_msg_size, opts.sync_every,
                          hold_key=message_id if hold else None, max_bytes=opts.max_bytes_per_queue,
                          drop_oldest=opts.queue_full_policy == "drop-oldest")
        queue.reclaim = self._reclaim
        return queue

    def _forget(self, backend: Backend) -> None:
        self.queues.pop(backend.name, None)
