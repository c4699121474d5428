"""Where a mirror keeps the messages it holds of one origin: segment files in a directory of the origin's own, so
that a backlog held for other nsqd costs disk, as nsqd's own backlog does, not memory. Memory keeps only where
each batch of messages is, and their IDs.

A segment is deleted once no queue holds a batch in it (``Segment.refs``); the one being written stays. Nothing is
read back after a restart (a mirror that starts again is sent a snapshot), so an earlier process's directory is
deleted when the store is made. Writes go to the page cache, as nsqd's disk queue writes do, gathered in memory
up to ``FLUSH_AT`` first: a record of one message would otherwise cost a system call of its own, and the files
only keep memory small (the copy lives as long as this process does, in memory or on disk alike).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

SEGMENT_SIZE = 64 * 1024 * 1024
FLUSH_AT = 256 * 1024


class Segment:
    def __init__(self, files: MirrorFiles, number: int, fd: int) -> None:
        self.files = files
        self.number = number
        self.fd = fd
        self.size = 0
        self.written = 0  # of ``size``, on disk; the rest is in ``files.pending`` (only the current segment has any)
        self.refs = 0  # batches in queues that are in this segment

    def hold(self) -> None:
        self.refs += 1

    def release(self) -> None:
        self.refs -= 1
        if self.refs == 0 and self is not self.files.current:
            self.files.delete(self)

    def read(self, offset: int, size: int) -> bytes:
        end = offset + size
        data = os.pread(self.fd, min(end, self.written) - offset, offset) if offset < self.written else b""
        if end > self.written:  # the rest is not written yet
            data += b"".join(self.files.pending)[max(offset - self.written, 0):end - self.written]
        if len(data) != size:
            raise OSError(f"{self.files.path(self.number)} ends at {offset + len(data)}, before {end}")
        return data


class MirrorFiles:
    def __init__(self, directory: Path, segment_size: int = SEGMENT_SIZE, flush_at: int = FLUSH_AT) -> None:
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        self.directory = directory
        self._segment_size = segment_size
        self._flush_at = flush_at
        self._next = 0  # numbers are never used twice, so a segment deleted early is never mistaken for a new one
        self.segments: dict[int, Segment] = {}
        self.pending: list[bytes] = []  # the current segment's bytes after ``written``
        self.current = self._open()

    def path(self, number: int) -> Path:
        return self.directory / f"{number:06d}.dat"

    def write(self, data: bytes) -> tuple[Segment, int]:
        """``data`` appended; where it is. Taken whole or, when what is gathered cannot be written (a full disk),
        not at all: the next write goes where this one would have."""
        current = self.current
        if current.size and current.size + len(data) > self._segment_size:
            current = self._roll()
        offset = current.size
        self.pending.append(data)
        current.size += len(data)
        if current.size - current.written >= self._flush_at:
            try:
                self._flush()
            except OSError:
                self._take_back(data)
                raise
        return current, offset

    def _flush(self) -> None:
        """What is gathered, written to the current segment; what could not be stays gathered."""
        current = self.current
        data = b"".join(self.pending)
        view, done = memoryview(data), 0
        try:
            while done < len(data):
                done += os.pwrite(current.fd, view[done:], current.written + done)
        finally:
            current.written += done
            self.pending = [data[done:]] if done < len(data) else []

    def _take_back(self, data: bytes) -> None:
        """The last write undone: its bytes dropped from what is gathered (or, written in part, from the file's
        count: the next write goes over them)."""
        current = self.current
        current.size -= len(data)
        if current.written > current.size:
            current.written = current.size
            self.pending = []
        else:
            left = b"".join(self.pending)
            self.pending = [left[:current.size - current.written]] if current.size > current.written else []

    @property
    def size(self) -> int:
        """Bytes held, on disk or about to be."""
        return sum(segment.size for segment in self.segments.values())

    def delete(self, segment: Segment) -> None:
        if self.segments.pop(segment.number, None) is segment:
            os.close(segment.fd)
            segment.fd = -1  # never a descriptor opened since for something else
            self.path(segment.number).unlink(missing_ok=True)

    def clear(self) -> None:
        """Every segment deleted, whoever holds batches in them: the store starts over."""
        for segment in list(self.segments.values()):
            self.delete(segment)
        self.pending = []
        self.current = self._open()

    def close(self) -> None:
        """The store is done with: its directory deleted."""
        for segment in list(self.segments.values()):
            self.delete(segment)
        self.pending = []
        shutil.rmtree(self.directory, ignore_errors=True)

    def _open(self) -> Segment:
        number, self._next = self._next, self._next + 1
        fd = os.open(self.path(number), os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        segment = self.segments[number] = Segment(self, number, fd)
        return segment

    def _roll(self) -> Segment:
        """A new segment, once the current one is all written (an OSError if it cannot be: nothing changes)."""
        if self.pending:
            self._flush()
        done = self.current
        self.current = self._open()
        if done.refs == 0:
            self.delete(done)
        return self.current
