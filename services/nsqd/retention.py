"""Retention: a topic keeps what it published for a while, so that a channel can be sent it again (rewind.py).

``--retention-time`` (0: off, NSQ's behaviour) and ``--retention-bytes`` (0: no size cap) apply to every topic
without settings of its own (``/topic/retention``, kept in nsqd.dat); ephemeral topics never retain. A topic that
retains records through its ``RetainedTopic``, a recorder (recorder.py) storage hands it beside any other: each
publish is appended to the topic's retention log (retention_log.py) before it is acknowledged, with one write per
publish (a PUB, an MPUB), so ``kill -9`` loses nothing acknowledged from it. A topic that does not retain has no
recorder of retention at all, and no files: turning retention off removes them.

Retention never fails a publish: a write the disk refuses, a queue's or the retention's own, removes the oldest
retained files of any topic (``reclaim``) and is tried again; once none is left a publish goes on without being
retained, counted in ``/stats`` (``retention_refused_count``), or is refused by its queue as without retention.

``run`` expires files once a second: whole files, once their newest message is past the retention time, and the
oldest while a topic retains more than its bytes; a rewind filters by the time exactly, so a message past it is
never put back while its file waits. Files roll at a tenth of the byte limit (at most ``--max-bytes-per-file``) and
once their first message is older than a tenth of the retention time, so that a quiet topic's messages go too.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import logging
import time
from collections.abc import MutableSet
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from nsqclient.protocol.names import is_ephemeral
from shared.flags import format_duration

from .recorder import NULL_CHANNEL, NULL_TOPIC, ChannelRecorder, TopicRecorder
from .retention_log import RetentionLog, remove_files, topics_with_files

if TYPE_CHECKING:
    from pathlib import Path

    from .message import QueuedMessage
    from .options import Options

log = logging.getLogger("nsqd")

EXPIRY_INTERVAL = 1.0
# the smallest file a byte limit rolls at: many tiny files would cost more than they bound
MIN_SEGMENT_BYTES = 4096


@dataclass(frozen=True)
class RetentionSettings:
    """A topic's own settings; None: the flags'."""

    time: float | None = None  # seconds; 0: off
    bytes: int | None = None  # 0: no cap


DEFAULT = RetentionSettings()


def segment_sizes(time_ns: int, max_bytes: int, max_bytes_per_file: int) -> tuple[int, int]:
    """When a retention file rolls: at a tenth of the byte limit (at most ``max_bytes_per_file``), and once its first
    message is older than a tenth of the retention time."""
    segment_bytes = max(MIN_SEGMENT_BYTES, min(max_bytes // 10, max_bytes_per_file)) if max_bytes \
        else max_bytes_per_file
    return segment_bytes, time_ns // 10


class RetainedTopic:
    """The recorder of a topic that retains: appends every publish to its log."""

    def __init__(self, log_: RetentionLog, retention: Retention) -> None:
        self.log = log_
        self._retention = retention
        self.refused_count = 0  # messages published but not retained: the disk had no room
        self.kept = (0, 0)  # how long (nanoseconds) and how much (bytes; 0: no cap) it keeps
        self._segment_bytes = 0
        self._roll_after_ns = 0

    def configure(self, seconds: float, max_bytes: int, max_bytes_per_file: int) -> None:
        self.kept = (round(seconds * 1e9), max_bytes)
        self._segment_bytes, self._roll_after_ns = segment_sizes(self.kept[0], max_bytes, max_bytes_per_file)

    def published(self, held: bool, defer_ms: int, entries: list[QueuedMessage]) -> None:
        self._append(entries, entries[0][2] + defer_ms * 1_000_000 if defer_ms else 0)

    def take_history(self, batch: list[tuple[QueuedMessage, int]]) -> None:
        """Messages another nsqd retained, each with its due time (taken over with that nsqd's queues)."""
        for due_ns, group in itertools.groupby(batch, key=lambda item: item[1]):
            self._append([entry for entry, _ in group], due_ns)

    def _append(self, entries: list[QueuedMessage], due_ns: int) -> None:
        while True:
            try:
                self.log.append(entries, due_ns, self._segment_bytes, self._roll_after_ns)
                return None
            except OSError as error:
                if error.errno in (errno.ENOSPC, errno.EDQUOT) and self._retention.reclaim(1):
                    continue  # the oldest retained goes first: a publish always wins
                self.refused_count += len(entries)
                log.error("RETENTION(%s): %d messages not retained - %s", self.log.name, len(entries), error)
                return None

    def expire(self, now_ns: int) -> None:
        self.log.expire(self.oldest_kept_ns(now_ns), self.kept[1])

    def oldest_kept_ns(self, now_ns: int) -> int:
        """The timestamp from which messages are still within the retention time."""
        return now_ns - self.kept[0]

    def distributed(self) -> None:
        pass

    def dropped(self, ids: list[bytes]) -> None:
        pass  # dropped from the queue, not from history

    def emptied(self) -> None:
        pass

    def deleted(self) -> None:
        self._retention.forget(self.log.name)

    def channel(self, name: str) -> ChannelRecorder:
        return NULL_CHANNEL


class Retention:
    """The retention of one nsqd's topics: a ``Recording`` (recorder.py) storage asks for each topic's recorder."""

    def __init__(self, data_path: Path | None, opts: Options) -> None:
        self._data_path = data_path
        self._opts = opts
        self.own: dict[str, RetentionSettings] = {}
        self.topics: dict[str, RetainedTopic] = {}
        self._files_left: MutableSet[str] | None = None  # topics with files on disk no log has opened (listed once)

    def kept(self, name: str) -> tuple[int, int] | None:
        """How long (nanoseconds) and how much (bytes) the topic retains; None: nothing."""
        retained = self.topics.get(name)
        return None if retained is None else retained.kept

    def settings(self, name: str) -> tuple[float, int]:
        """The topic's retention time (seconds; 0: off) and bytes (0: no cap), its own or the flags'."""
        own, opts = self.own.get(name, DEFAULT), self._opts
        return (opts.retention_time if own.time is None else own.time,
                opts.retention_bytes if own.bytes is None else own.bytes)

    def topic(self, name: str) -> TopicRecorder:
        seconds, max_bytes = self.settings(name)
        if self._data_path is None or is_ephemeral(name) or not seconds:
            self.forget(name)
            return NULL_TOPIC
        retained = self.topics.get(name)
        if retained is None:
            self._left_on_disk().discard(name)  # its log has them now
            retained = self.topics[name] = RetainedTopic(
                RetentionLog(name, self._data_path, self._opts.max_msg_size), self)
        retained.configure(seconds, max_bytes, self._opts.max_bytes_per_file)
        retained.expire(time.time_ns())
        return retained

    def set(self, name: str, settings: RetentionSettings) -> None:
        """The topic's own settings (storage hands it a new recorder next)."""
        if settings == DEFAULT:
            self.own.pop(name, None)
        else:
            self.own[name] = settings

    def reclaim(self, wanted: int) -> bool:
        """The disk is full: removes the oldest retained files, of whichever topics, until ``wanted`` bytes are
        freed or none is left; whether any was."""
        freed = 0
        while freed < wanted:
            dated = [(oldest, retained) for retained in self.topics.values()
                     if (oldest := retained.log.oldest_file_ns) is not None]
            if not dated:
                break
            _, oldest_topic = min(dated, key=lambda pair: pair[0])
            freed += oldest_topic.log.drop_oldest()
            log.warning("RETENTION(%s): the disk is full, its oldest retained file removed", oldest_topic.log.name)
        return freed > 0

    def forget(self, name: str) -> None:
        """The topic no longer retains (turned off, or deleted): its files go."""
        retained = self.topics.pop(name, None)
        if retained is not None:
            retained.log.delete()
        elif self._data_path is not None and name in self._left_on_disk():
            remove_files(self._data_path, name)
            self._left_on_disk().discard(name)

    def _left_on_disk(self) -> MutableSet[str]:
        """The topics whose retention files an earlier process left, read from the data path once: a topic made
        while its retention is off must not find old history there later."""
        if self._files_left is None:
            self._files_left = topics_with_files(self._data_path) if self._data_path is not None else set()
        return self._files_left

    def forget_settings(self, name: str) -> None:
        """The topic is deleted: a topic of that name made later starts from the flags' settings."""
        self.own.pop(name, None)
        self.forget(name)

    def stats(self, name: str) -> dict[str, Any]:
        """The topic's fields in /stats: only for a topic that retains."""
        retained = self.topics.get(name)
        if retained is None:
            return {}
        seconds, max_bytes = self.settings(name)
        retained.expire(time.time_ns())
        return {"retention_time": format_duration(seconds), "retention_bytes": max_bytes,
                "retained_count": retained.log.count, "retained_bytes": retained.log.size,
                "retained_oldest_timestamp": retained.log.oldest_ns,
                "retention_refused_count": retained.refused_count}

    async def run(self) -> None:
        """Expires what is past its time or bytes, and syncs what was appended, once every ``EXPIRY_INTERVAL``."""
        while True:
            await asyncio.sleep(EXPIRY_INTERVAL)
            now_ns = time.time_ns()
            for retained in list(self.topics.values()):
                retained.expire(now_ns)
            jobs = [retained.log.sync_job() for retained in self.topics.values() if retained.log.unsynced]
            if jobs:
                try:
                    await asyncio.to_thread(_run_all, jobs)
                except OSError as error:
                    log.error("RETENTION: failed to sync - %s", error)

    def close(self) -> None:
        """At exit: what was appended synced, every file closed."""
        for retained in self.topics.values():
            retained.log.sync_job()()
            retained.log.close()


def _run_all(jobs: list[Callable[[], None]]) -> None:
    for job in jobs:
        job()
