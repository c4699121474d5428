"""What a mirror retains of one origin's topics: the publishes the origin's topic retains (a ``Publish`` with
``retain``), kept as the origin keeps them (retention_log.py, in a directory of the origin's copy), expired by the
time and bytes each publish carries, so that the nsqd that adopts a lost origin can rewind its topics over what the
origin retained.

A copy starts empty: a mirror that starts again, or joins late, is sent a snapshot of what is outstanding, not of
what was retained, so its history of the origin begins then.
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Iterator
from pathlib import Path

from ..message import QueuedMessage
from ..retention import segment_sizes
from ..retention_log import RetentionLog
from .wire import Publish

log = logging.getLogger("nsqd")

# a mirror does not know the origin's --max-bytes-per-file: NSQ's default
MAX_SEGMENT = 100 * 1024 * 1024
# what a mirror accepts as a message's size when it reads its copy back: the link's own frame limit
MAX_MESSAGE = 64 * 1024 * 1024


class MirroredHistory:
    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self.logs: dict[str, RetentionLog] = {}
        self.retain: dict[str, tuple[int, int]] = {}  # each topic's retention, as its latest publish said

    def add(self, record: Publish) -> None:
        assert record.retain is not None
        history = self.logs.get(record.topic)
        if history is None:
            self._directory.mkdir(parents=True, exist_ok=True)
            history = self.logs[record.topic] = RetentionLog(record.topic, self._directory, MAX_MESSAGE)
        time_ns, max_bytes = self.retain[record.topic] = record.retain
        entries = list(record.messages)
        segment_bytes, roll_after_ns = segment_sizes(time_ns, max_bytes, MAX_SEGMENT)
        due_ns = entries[0][2] + record.defer_ms * 1_000_000 if record.defer_ms and entries else 0
        history.expire(time.time_ns() - time_ns, max_bytes)
        while entries:
            try:
                history.append(entries, due_ns, segment_bytes, roll_after_ns)
                return
            except OSError as error:  # history gives way: the copy of the queues is what the origin waits for
                if error.errno not in (errno.ENOSPC, errno.EDQUOT) or not history.drop_oldest():
                    log.warning("REPLICATION: %d messages of %s not retained - %s", len(entries), record.topic,
                                error)
                    return

    def read(self, topic: str) -> Iterator[list[tuple[QueuedMessage, int]]]:
        """The topic's retained messages with their due times, oldest first, in batches; a job for any thread."""
        history = self.logs[topic]
        return history.read_since(0, history.end())

    def drop(self, topic: str) -> None:
        """The topic is deleted on the origin: so is what was retained of it."""
        history = self.logs.pop(topic, None)
        self.retain.pop(topic, None)
        if history is not None:
            history.delete()

    def close(self) -> None:
        for history in self.logs.values():
            history.close()
