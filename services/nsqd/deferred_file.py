"""The file of a topic's or channel's deferred messages, beyond NSQ: ``<name>.diskqueue.deferred.dat`` in the data
path, beside the name's disk queue.

Records::

    [int64 when][int32 size][payload]       payload as the disk queue's; ``when`` as its owner keeps it
                                            (a channel: the due time, unix ns; a topic: the delay, ms)

The file is replaced whole (``save``, atomically) or appended to (``append``, one write per call, so a put that got
an answer is in the operating system's hands). A damaged end (a size out of bounds, a record cut short) is cut off
at the next ``take``: what is before it is read, what is after it is lost and logged.
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

from . import atomic_file
from .segment_files import write_whole

log = logging.getLogger("nsqd")

_HEADER = struct.Struct(">qi")

# a deferred message: (when, payload)
DeferredRecord = tuple[int, bytes]


class DeferredFile:
    def __init__(self, name: str, path: Path, min_record: int, max_record: int) -> None:
        self.name = name
        self.path = path
        self._min_record = min_record
        self._max_record = max_record
        self._fd: int | None = None
        self.records = 0  # in the file

    def save(self, messages: list[DeferredRecord]) -> None:
        """Makes ``messages`` the whole file (no file when there are none)."""
        self.close()
        if not messages:
            self.path.unlink(missing_ok=True)
        else:
            atomic_file.replace(self.path, _records(messages))
        self.records = len(messages)

    def append(self, messages: list[DeferredRecord]) -> None:
        """Adds ``messages`` with one write, or raises OSError having added none."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        write_whole(self._fd, _records(messages), os.lseek(self._fd, 0, os.SEEK_END))
        self.records += len(messages)

    def take(self, keep: bool) -> list[DeferredRecord]:
        """The messages the file holds: the file is removed (they are the caller's now), or with ``keep`` kept for
        appending (a damaged end cut off)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        messages: list[DeferredRecord] = []
        offset = 0
        while offset + _HEADER.size <= len(data):
            when, size = _HEADER.unpack_from(data, offset)
            offset += _HEADER.size
            if not self._min_record <= size <= self._max_record or offset + size > len(data):
                log.error("DISKQUEUE(%s): %s is damaged after %d messages; the rest of it is lost", self.name,
                          self.path.name, len(messages))
                break
            messages.append((when, data[offset:offset + size]))
            offset += size
        if not keep:
            self.path.unlink()
        elif offset < len(data):
            self.save(messages)
        self.records = len(messages) if keep else 0
        return messages

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
        self.records = 0


def _records(messages: list[DeferredRecord]) -> bytes:
    return b"".join(_HEADER.pack(when, len(payload)) + payload for when, payload in messages)
