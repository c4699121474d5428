"""Where a mirror keeps the messages it holds of one origin: segment files in a directory of the origin's own, so
that a backlog held for other nsqd costs disk, as nsqd's own backlog does, not memory. Memory keeps only where
each batch of messages is, and their IDs.

A segment is deleted once no queue holds a batch in it (``Segment.refs``); the one being written stays. Nothing is
read back after a restart (a mirror that starts again is sent a snapshot), so an earlier process's directory is
deleted when the store is made. Writes go to the page cache, as nsqd's disk queue writes do.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

SEGMENT_SIZE = 64 * 1024 * 1024


class Segment:
    def __init__(self, files: MirrorFiles, number: int, fd: int) -> None:
        self.files = files
        self.number = number
        self.fd = fd
        self.size = 0
        self.refs = 0  # batches in queues that are in this segment

    def hold(self) -> None:
        self.refs += 1

    def release(self) -> None:
        self.refs -= 1
        if self.refs == 0 and self is not self.files.current:
            self.files.delete(self)

    def read(self, offset: int, size: int) -> bytes:
        data = os.pread(self.fd, size, offset)
        if len(data) != size:
            raise OSError(f"{self.files.path(self.number)} ends at {offset + len(data)}, before {offset + size}")
        return data


class MirrorFiles:
    def __init__(self, directory: Path, segment_size: int = SEGMENT_SIZE) -> None:
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        self.directory = directory
        self._segment_size = segment_size
        self._next = 0  # numbers are never used twice, so a segment deleted early is never mistaken for a new one
        self.segments: dict[int, Segment] = {}
        self.current = self._open()

    def path(self, number: int) -> Path:
        return self.directory / f"{number:06d}.dat"

    def write(self, data: bytes) -> tuple[Segment, int]:
        """``data`` appended; where it is. Written whole or, on an error (a full disk), not at all: the next write
        goes where this one would have."""
        current = self.current
        if current.size and current.size + len(data) > self._segment_size:
            current = self._roll()
        offset, view, done = current.size, memoryview(data), 0
        while done < len(data):
            done += os.pwrite(current.fd, view[done:], offset + done)
        current.size += len(data)
        return current, offset

    @property
    def size(self) -> int:
        """Bytes on disk."""
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
        self.current = self._open()

    def close(self) -> None:
        """The store is done with: its directory deleted."""
        for segment in list(self.segments.values()):
            self.delete(segment)
        shutil.rmtree(self.directory, ignore_errors=True)

    def _open(self) -> Segment:
        number, self._next = self._next, self._next + 1
        fd = os.open(self.path(number), os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        segment = self.segments[number] = Segment(self, number, fd)
        return segment

    def _roll(self) -> Segment:
        done = self.current
        self.current = self._open()
        if done.refs == 0:
            self.delete(done)
        return self.current
