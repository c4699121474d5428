"""A disk queue's segment files, ``<name>.diskqueue.NNNNNN.dat``: records ``[int32 size][payload]``, read in order
and written whole or not at all. ``SegmentFiles`` knows them by number: the oldest still on disk, the ones done,
the ones found bad.
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

log = logging.getLogger("nsqd")

SIZE = struct.Struct(">i")
# a message on disk is at least its header: timestamp, attempts, ID
MIN_RECORD = 26
# how much a read takes from a file at once: a few hundred messages of a typical size
_READ_CHUNK = 256 * 1024


class SegmentFiles:
    def __init__(self, name: str, data_path: Path, first: int) -> None:
        self._name = name
        self._data_path = data_path
        self.first = first  # the oldest file still on disk

    def path(self, number: int) -> Path:
        return self._data_path / f"{self._name}.diskqueue.{number:06d}.dat"

    def take_done(self, keep_from: int) -> list[Path]:
        """The files before ``keep_from``, to delete: from now on not counted as on disk."""
        done = [self.path(number) for number in range(self.first, keep_from)]
        self.first = max(self.first, keep_from)
        return done

    def delete_all(self, last: int) -> None:
        """Deletes every file up to ``last``; the next one is the first from now on."""
        delete(self.take_done(last + 1))

    def bytes_between(self, first: int, start: int, last: int, end: int) -> int:
        """The bytes of the records from ``start`` in file ``first`` to ``end`` in file ``last``."""
        total = end - start
        for number in range(first, last):
            try:
                total += self.path(number).stat().st_size
            except FileNotFoundError:
                pass
        return max(0, total)

    def set_aside(self, number: int, position: int) -> None:
        """A file that cannot be read on from ``position``: renamed ``.bad`` (or found gone), and logged."""
        path = self.path(number)
        if path.exists():
            log.error("DISKQUEUE(%s): corrupt or truncated data in %s at %d, renaming it %s.bad and going on with "
                      "the next file", self._name, path.name, position, path.name)
            os.replace(path, path.with_name(path.name + ".bad"))
        else:  # deleted once done, before the metadata was written again (a full disk)
            log.warning("DISKQUEUE(%s): %s is gone; going on with the next file", self._name, path.name)


def delete(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


class SegmentReader:
    """Sequential records from one file."""

    def __init__(self, path: Path, position: int) -> None:
        self._file = open(path, "rb", buffering=0)  # read with pread, a chunk at a time
        self.position = position
        self._size = os.fstat(self._file.fileno()).st_size

    def take(self, count: int, max_record: int, end: int | None, skip: int = 4) -> list[bytes]:
        """Up to ``count`` records from the current position, read a chunk at a time, each without its first
        ``skip`` bytes (4: the payload alone; 0: the whole record); stops before a record that is invalid or not
        whole by the limit (``end``, else the file's size), which the next call then finds first (and returns
        nothing)."""
        limit = end if end is not None else self._size
        if end is None and self.position + 4 > limit:
            self._size = limit = os.fstat(self._file.fileno()).st_size
        payloads: list[bytes] = []
        unpack, fd = SIZE.unpack_from, self._file.fileno()
        while len(payloads) < count and self.position + 4 <= limit:
            chunk = os.pread(fd, min(limit - self.position, _READ_CHUNK), self.position)
            offset = 0
            while len(payloads) < count and offset + 4 <= len(chunk):
                (size,) = unpack(chunk, offset)
                if not MIN_RECORD <= size <= max_record:
                    break
                if offset + 4 + size > len(chunk):
                    if offset == 0 and self.position + 4 + size <= limit:  # one record larger than a chunk
                        chunk = os.pread(fd, 4 + size, self.position)
                        if len(chunk) == 4 + size:
                            payloads.append(chunk[skip:])
                            offset = 4 + size
                    break
                payloads.append(chunk[offset + skip:offset + 4 + size])
                offset += 4 + size
            if offset == 0:
                break  # an invalid or incomplete record
            self.position += offset
        return payloads

    def at_end(self) -> bool:
        self._size = os.fstat(self._file.fileno()).st_size
        return self.position >= self._size

    def close(self) -> None:
        self._file.close()


# parts at least this large on average are written as they are (writev) rather than joined first: a large body is
# then copied once, by the kernel, not also into a joined buffer
WRITEV_MIN_AVERAGE = 16384
WRITEV_MAX_PARTS = 1024  # IOV_MAX on Linux


def write_parts(fd: int, parts: list[bytes], total: int, start: int) -> None:
    """``write_whole`` of the parts in order (``total`` bytes, as the caller counted them), joined or not."""
    if len(parts) == 1 or len(parts) > WRITEV_MAX_PARTS or total < WRITEV_MIN_AVERAGE * len(parts):
        write_whole(fd, parts[0] if len(parts) == 1 else b"".join(parts), start)
        return
    try:
        written = os.writev(fd, parts)
        if written < total:  # a short write (rare): the rest joined
            rest = b"".join(parts)[written:]
            while rest:
                rest = rest[os.write(fd, rest):]
    except OSError:
        os.ftruncate(fd, start)
        os.lseek(fd, start, os.SEEK_SET)
        raise


def write_whole(fd: int, data: bytes, start: int) -> None:
    """Writes all of ``data`` at ``start``, the descriptor's position, or raises OSError having cut the file back
    to ``start``: no torn record left behind, and the next write goes where this one started (not after a hole)."""
    try:
        written = os.write(fd, data)
        while written < len(data):  # (a short write: the rest, not a copy of all of it each time)
            written += os.write(fd, data[written:])
    except OSError:
        os.ftruncate(fd, start)
        os.lseek(fd, start, os.SEEK_SET)
        raise


def read_span(paths: list[Path], start: int, end: int, max_count: int, max_record: int) -> list[bytes]:
    """Up to ``max_count`` payloads from the files ``paths`` in order: the first from ``start``, the last up to
    ``end``, with readers of its own. A file that is gone (deleted meanwhile: read to its end, found bad, emptied) is
    skipped, and a record that cannot be read ends its file, as a queue's read would."""
    payloads: list[bytes] = []
    for index, path in enumerate(paths):
        if len(payloads) >= max_count:
            break
        try:
            reader = SegmentReader(path, start if index == 0 else 0)
        except FileNotFoundError:
            continue
        last = index == len(paths) - 1
        try:
            while len(payloads) < max_count and (taken := reader.take(
                    max_count - len(payloads), max_record, end if last else None)):
                payloads += taken
        finally:
            reader.close()
    return payloads


def whole_records(path: Path, start: int, end: int, max_record: int) -> tuple[int, int]:
    """Where the whole, valid records from ``start`` end (before ``end``), and how many there are."""
    reader = SegmentReader(path, start)
    records = 0
    try:
        while taken := reader.take(4096, max_record, end, skip=0):
            records += len(taken)
        return reader.position, records
    finally:
        reader.close()


def recover_tail(name: str, path: Path, recorded_end: int, max_record: int) -> tuple[int, int]:
    """Where queue ``name``'s write file ``path`` ends and how many records lie past ``recorded_end`` (written after the last
    sync): a record cut short at the end (the process killed in the middle of it) is cut off the file."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return recorded_end, 0
    if size <= recorded_end:
        return recorded_end, 0
    end, recovered = whole_records(path, recorded_end, size, max_record)
    if end < size:
        log.warning("DISKQUEUE(%s): cutting %d bytes of a torn record off %s", name, size - end, path.name)
        os.truncate(path, end)
    if recovered:
        log.info("DISKQUEUE(%s): recovered %d messages written after the last sync", name, recovered)
    return end, recovered
