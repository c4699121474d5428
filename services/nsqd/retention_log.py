"""What one topic published, kept on disk for a while so that a channel can be sent it again (retention.py).

Files, in ``--data-path``, beside the topic's disk queue::

    <topic>.retention.000001.dat    records [int32 size][int64 timestamp][int64 due][16-byte ID][body], appended
                                    as publishes are acknowledged, in publish order

``due`` is when a deferred publish (DPUB) is due (nanoseconds since the epoch), 0 for any other. A segment file is
closed for writing (rolled) once it holds ``segment_bytes``, or once its first message is older than ``roll_after``,
so that a quiet topic's old messages go too; whole files are removed once their newest message is past the retention
time, and the oldest while the files together hold more than the byte limit. Nothing here decides what a rewind
puts back: ``read_at`` reads what is there from a position (rewind_cursor.py filters it), ``counter`` counts what
was published since a moment, and ``read_since`` reads all of it (a lost nsqd's history taken over).

Each file's count and the timestamps of its first and last message are known from reading it at start-up (a torn
record at the end, from a process killed while writing it, is cut off first).
"""

from __future__ import annotations

import logging
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from .message import QueuedMessage
from .segment_files import SIZE, SegmentReader, write_whole

log = logging.getLogger("nsqd")

HEADER = struct.Struct(">qq")
ID_END = HEADER.size + 16
# a retained message on disk: its size prefix, timestamp, due time and ID, then the body
RECORD_OVERHEAD = SIZE.size + ID_END
_READ_BATCH = 4096
MARK_EVERY = 4096
_SIZE_AND_TIMESTAMP = struct.Struct(">iq")
_PREFIX = struct.Struct(">iqq")  # a record's size and HEADER
_COUNT_CHUNK = 1 << 20
# a retained message as read: (timestamp, due, ID, body)
Record = tuple[int, int, bytes, bytes]


@dataclass
class Segment:
    number: int
    size: int = 0
    count: int = 0
    first_ns: int = 0  # the timestamp of its oldest message (0: none yet)
    last_ns: int = 0  # of its newest
    # (ordinal, offset, timestamp) of a message every MARK_EVERY or so, and whether no timestamp ever went back: in
    # such a file a moment is found by reading at most MARK_EVERY messages (plus a publish's)
    marks: list[tuple[int, int, int]] = field(default_factory=list)
    ordered: bool = True

    def note(self, offset: int, timestamp: int) -> None:
        """A message (or a publish's first) is about to be the file's next, at ``offset``."""
        if self.count and timestamp < self.last_ns:
            self.ordered = False
        if not self.marks or self.count - self.marks[-1][0] >= MARK_EVERY:
            self.marks.append((self.count, offset, timestamp))

    def before(self, since_ns: int) -> tuple[int, int]:
        """The ordinal and offset from which to read for the messages published since ``since_ns``: in an ordered
        file the last mark before it, else the start."""
        marks, low, high = self.marks, 0, len(self.marks)
        if not self.ordered:
            return 0, 0
        while low < high:  # the first mark at or after since_ns
            middle = (low + high) // 2
            if marks[middle][2] < since_ns:
                low = middle + 1
            else:
                high = middle
        return (marks[low - 1][0], marks[low - 1][1]) if low else (0, 0)


@dataclass(frozen=True)
class LogEnd:
    """Where the log ended at a moment: what a rewind then reads up to."""

    number: int
    size: int


class RetentionLog:
    def __init__(self, name: str, data_path: Path, max_msg_size: int) -> None:
        self.name = name
        self._data_path = data_path
        self._max_record = max_msg_size + ID_END
        self._segments = [self._recovered(number) for number in _numbers(data_path, name)]
        # numbers never come round again while the process runs: a rewind's position names a file by its number
        self._last_number = self._segments[-1].number if self._segments else 0
        self._fd: int | None = None
        # write files rolled since the last sync job, by number: open until synced (or their file removed, which frees
        # its space only once no descriptor is open on it)
        self._rolled: dict[int, int] = {}
        self.unsynced = False

    # -- state -----------------------------------------------------------------------------------------------

    @property
    def count(self) -> int:
        return sum(segment.count for segment in self._segments)

    @property
    def size(self) -> int:
        return sum(segment.size for segment in self._segments)

    @property
    def oldest_ns(self) -> int:
        """The timestamp of the oldest message retained; 0: none."""
        return next((segment.first_ns for segment in self._segments if segment.count), 0)

    def path(self, number: int) -> Path:
        return self._data_path / f"{self.name}.retention.{number:06d}.dat"

    def _recovered(self, number: int) -> Segment:
        """A file as found at start-up: counted, and a torn record at its end cut off."""
        path = self.path(number)
        segment = Segment(number)
        reader = SegmentReader(path, 0)
        try:
            while payloads := reader.take(_READ_BATCH, self._max_record, None):
                for payload in payloads:
                    timestamp = HEADER.unpack_from(payload)[0]
                    segment.note(segment.size, timestamp)
                    segment.first_ns = min(segment.first_ns, timestamp) if segment.count else timestamp
                    segment.last_ns = max(segment.last_ns, timestamp)
                    segment.count += 1
                    segment.size += SIZE.size + len(payload)
        finally:
            reader.close()
        if path.stat().st_size > segment.size:
            log.warning("RETENTION(%s): cutting a torn record off %s", self.name, path.name)
            os.truncate(path, segment.size)
        return segment

    # -- writing ---------------------------------------------------------------------------------------------

    def append(self, entries: list[QueuedMessage], due_ns: int, segment_bytes: int, roll_after_ns: int) -> None:
        """Appends ``entries`` with one write, or raises OSError having written none of them."""
        data, oldest, newest = _encoded(entries, due_ns)
        segment = self._write_segment(entries[0][2], segment_bytes, roll_after_ns)
        fd = self._fd
        if fd is None:
            fd = self._fd = os.open(self.path(segment.number), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        write_whole(fd, data, segment.size)
        segment.note(segment.size, oldest)
        if oldest != newest:  # history taken over: not in publish order
            segment.ordered = False
        # history taken over from another nsqd comes after newer messages: the oldest and newest, not the first and last
        segment.first_ns = min(segment.first_ns, oldest) if segment.count else oldest
        segment.last_ns = max(segment.last_ns, newest)
        segment.size += len(data)
        segment.count += len(entries)
        self.unsynced = True

    def _write_segment(self, now_ns: int, segment_bytes: int, roll_after_ns: int) -> Segment:
        """The segment to append to: the last, unless it is full or old enough to roll."""
        if self._segments:
            last = self._segments[-1]
            if not last.count or (last.size < segment_bytes and now_ns - last.first_ns < roll_after_ns):
                return last
        if self._fd is not None and self._segments:  # synced, then closed, by the next sync job
            self._rolled[self._segments[-1].number] = self._fd
            self._fd = None
        self._last_number += 1
        segment = Segment(self._last_number)
        self._segments.append(segment)
        return segment

    def sync_job(self) -> Callable[[], None]:
        """Makes what was appended durable against a power cut, as a job for another thread: the files rolled since
        the last sync, and the write file (on a descriptor of its own: the log may roll meanwhile)."""
        self.unsynced = False
        fds, self._rolled = list(self._rolled.values()), {}
        if self._fd is not None:
            fds.append(os.dup(self._fd))

        def sync() -> None:
            for fd in fds:
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

        return sync

    # -- removing --------------------------------------------------------------------------------------------

    def expire(self, older_than_ns: int, max_bytes: int) -> int:
        """Removes the files whose newest message is older than ``older_than_ns`` (0: none by age), then the oldest
        while the files hold more than ``max_bytes`` (0: no limit); how many messages went."""
        removed = 0
        while self._segments:
            oldest = self._segments[0]
            too_old = oldest.count and oldest.last_ns < older_than_ns
            if not (too_old or (max_bytes and self.size > max_bytes and len(self._segments) > 1)):
                break
            removed += self._remove_oldest()
        return removed

    @property
    def oldest_file_ns(self) -> int | None:
        """When the oldest file's first message was published; None: no file holds any."""
        return self._segments[0].first_ns if self._segments and self._segments[0].size else None

    def drop_oldest(self) -> int:
        """Removes the oldest file (a full disk wants room): the bytes it held (0: there was none)."""
        if self.oldest_file_ns is None:
            return 0
        size = self._segments[0].size
        self._remove_oldest()
        return size

    def _remove_oldest(self) -> int:
        segment = self._segments.pop(0)
        if (rolled := self._rolled.pop(segment.number, None)) is not None:
            os.close(rolled)
        if not self._segments:
            self._close_write_file()
        self.path(segment.number).unlink(missing_ok=True)
        return segment.count

    def delete(self) -> None:
        """Removes every file, each closed first."""
        while self._segments:
            self._remove_oldest()

    def close(self) -> None:
        """Every file closed (``sync_job`` first, for what was appended to be durable)."""
        for fd in self._rolled.values():
            os.close(fd)
        self._rolled = {}
        self._close_write_file()

    def _close_write_file(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # -- reading ---------------------------------------------------------------------------------------------

    def end(self) -> LogEnd:
        last = self._segments[-1] if self._segments else Segment(0)
        return LogEnd(last.number, last.size)

    def start_of(self, since_ns: int, end: LogEnd) -> tuple[int, int] | None:
        """Where to read from, up to ``end``, for the messages published at or after ``since_ns`` (a file and an
        offset); None: there are none."""
        for segment in self._segments:
            if segment.number > end.number:
                break
            if segment.count and segment.last_ns >= since_ns:
                return segment.number, segment.before(since_ns)[1]
        return None

    def counter(self, since_ns: int, end: LogEnd) -> Callable[[], int]:
        """How many messages up to ``end`` were published at or after ``since_ns``, as a job for another thread: the
        files wholly that recent are counted now, the one or two that straddle ``since_ns`` are read by the job (from
        the mark before it, in a file written in publish order)."""
        whole, straddling = 0, list[tuple[Path, int, int, int, int, bool]]()
        for segment in self._segments:
            if segment.number > end.number or not segment.count or segment.last_ns < since_ns:
                continue
            if segment.first_ns >= since_ns:
                whole += segment.count
            else:
                ordinal, offset = segment.before(since_ns)
                straddling.append((self.path(segment.number), end.size if segment.number == end.number
                                   else segment.size, segment.count, ordinal, offset, segment.ordered))

        def count() -> int:
            return whole + sum(_count_since(path, limit, count, ordinal, offset, ordered, since_ns)
                               for path, limit, count, ordinal, offset, ordered in straddling)

        return count

    def read_at(self, number: int, offset: int, end: LogEnd, max_count: int) -> tuple[list[bytes], int, int]:
        """Up to ``max_count`` records from file ``number`` at ``offset``, none beyond ``end``, each without its size
        (``HEADER``, the ID, the body), and the position after them: the next file's start once a file is read to
        its end (past ``end``: nothing is left). A file gone (expired) is skipped; so is the rest of one that holds
        an invalid record."""
        for segment in self._segments:
            if segment.number < number:
                continue
            if segment.number > end.number:
                break
            start = offset if segment.number == number else 0
            limit = end.size if segment.number == end.number else segment.size
            payloads, after = _payloads_at(self.path(segment.number), start, limit, self._max_record, max_count)
            if payloads:
                return payloads, segment.number, after
        return [], end.number + 1, 0

    def read_since(self, since_ns: int, end: LogEnd) -> Iterator[list[tuple[QueuedMessage, int]]]:
        """Batches of the messages published at or after ``since_ns`` (each with its due time), oldest first, up to
        ``end``; a job for another thread. Files with nothing that recent are skipped unread; a file removed
        meanwhile (expired) is skipped."""
        for segment in list(self._segments):
            if segment.number > end.number or segment.last_ns < since_ns:
                continue
            limit = end.size if segment.number == end.number else segment.size
            for batch in _records(self.path(segment.number), 0, limit, self._max_record):
                kept = [((msg_id, body, timestamp, 0), due) for timestamp, due, msg_id, body in batch
                        if timestamp >= since_ns]
                if kept:
                    yield kept


def _encoded(entries: list[QueuedMessage], due_ns: int) -> tuple[bytes, int, int]:
    """The records of ``entries``, and their oldest and newest timestamps. A publish's messages share their
    timestamp, and an MPUB's often their size: a record's size and header are packed once for a run of equals."""
    if len(entries) == 1:
        msg_id, body, timestamp, _ = entries[0]
        return _PREFIX.pack(ID_END + len(body), timestamp, due_ns) + msg_id + body, timestamp, timestamp
    parts: list[bytes] = []
    append = parts.append
    oldest = newest = header_for = entries[0][2]
    header, prefix, size_for = HEADER.pack(header_for, due_ns), b"", -1
    for entry in entries:
        timestamp, body = entry[2], entry[1]
        if timestamp != header_for:
            header, header_for, size_for = HEADER.pack(timestamp, due_ns), timestamp, -1
            oldest, newest = min(oldest, timestamp), max(newest, timestamp)
        if len(body) != size_for:
            size_for = len(body)
            prefix = SIZE.pack(ID_END + size_for) + header
        append(prefix)
        append(entry[0])
        append(body)
    return b"".join(parts), oldest, newest


def _records(path: Path, start: int, end: int, max_record: int) -> Iterator[list[Record]]:
    """The file's records from ``start`` to ``end`` in batches."""
    try:
        reader = SegmentReader(path, start)
    except FileNotFoundError:
        return
    try:
        while payloads := reader.take(_READ_BATCH, max_record, end):
            yield _decoded(payloads)
    finally:
        reader.close()


def _payloads_at(path: Path, start: int, end: int, max_record: int, count: int) -> tuple[list[bytes], int]:
    """Up to ``count`` of the file's records from ``start`` to ``end``, each without its size, and the position
    after them."""
    try:
        reader = SegmentReader(path, start)
    except FileNotFoundError:
        return [], start
    try:
        return reader.take(count, max_record, end), reader.position
    finally:
        reader.close()


def _count_since(path: Path, limit: int, count: int, ordinal: int, offset: int, ordered: bool, since_ns: int) -> int:
    """How many of a file's ``count`` messages, up to ``limit``, were published at or after ``since_ns``, read from
    message ``ordinal`` at ``offset``: in an ordered file, all from the first that recent on; else each one is
    looked at."""
    if ordered:
        before = next((index for index, timestamp in enumerate(_timestamps(path, offset, limit))
                       if timestamp >= since_ns), count - ordinal)
        return count - ordinal - before
    return sum(1 for timestamp in _timestamps(path, 0, limit) if timestamp >= since_ns)


def _timestamps(path: Path, start: int, limit: int) -> Iterator[int]:
    """The timestamps of a file's records from ``start`` to ``limit``: each record's size and timestamp alone are
    read, a chunk at a time (the rest of a record is skipped, not read)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    position, unpack = start, _SIZE_AND_TIMESTAMP.unpack_from
    try:
        while position + _SIZE_AND_TIMESTAMP.size <= limit:
            chunk = os.pread(fd, min(limit - position, _COUNT_CHUNK), position)
            if len(chunk) < _SIZE_AND_TIMESTAMP.size:
                return  # the file is shorter than it was said to be
            offset = 0
            while offset + _SIZE_AND_TIMESTAMP.size <= len(chunk):
                size, timestamp = unpack(chunk, offset)
                if size < ID_END:
                    return  # not a record (a torn one is cut off at start-up)
                yield timestamp
                offset += SIZE.size + size
            position += offset  # past the chunk when a record straddles its end: the next one starts there
    finally:
        os.close(fd)


def _decoded(payloads: list[bytes]) -> list[Record]:
    unpack = HEADER.unpack_from
    return [(*unpack(payload), payload[HEADER.size:ID_END], payload[ID_END:]) for payload in payloads]


def _numbers(data_path: Path, name: str) -> list[int]:
    """The numbers of the topic's retention files on disk, in order."""
    pattern = re.compile(re.escape(name) + r"\.retention\.(\d{6})\.dat")
    try:
        names = os.listdir(data_path)
    except FileNotFoundError:
        return []
    return sorted(int(match.group(1)) for entry in names if (match := pattern.fullmatch(entry)))


_ANY_FILE = re.compile(r"(?P<name>.+)\.retention\.\d{6}\.dat")


def topics_with_files(data_path: Path) -> set[str]:
    """The topics with retention files in ``data_path``."""
    try:
        names = os.listdir(data_path)
    except FileNotFoundError:
        return set()
    return {match["name"] for entry in names if (match := _ANY_FILE.fullmatch(entry))}


def remove_files(data_path: Path, name: str) -> None:
    """Removes a topic's retention files (its retention is off)."""
    for number in _numbers(data_path, name):
        (data_path / f"{name}.retention.{number:06d}.dat").unlink(missing_ok=True)
