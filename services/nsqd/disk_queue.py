"""A FIFO of messages on disk, in NSQ's format: one behind every non-ephemeral topic and channel.

Files, in ``--data-path``::

    <name>.diskqueue.000001.dat     records [int32 size][payload], appended; a new file once --max-bytes-per-file
                                    would be passed; a file is deleted once read to its end
    <name>.diskqueue.meta.dat       "depth\\nreadFile,readPos\\nwriteFile,writePos\\n", replaced atomically

``put`` writes its records with one ``write`` (a message that got OK survives the process being killed), ``read``
returns what is there; ``sync_job()`` (the fsync and the metadata write, run off the event loop) makes them durable
against a power cut. A restart trusts the files over the metadata: records past the recorded write position are
recovered, a torn record at the end is cut off, and a record that cannot be read makes its file ``.bad``.

A full disk: a put is all or nothing (``_take_back``); files done are deleted even with no room for the metadata that
should stop naming them first (a restart goes on past a named file that is gone). A write file read to its end and
finished leaves its space behind (NSQ keeps writing to it): a refused put goes on in a new file (``_fresh_file_for``,
after ``reclaim``), as does a sync once the disk refused room or the file passed ``ROLL_DRAINED_AT``.

A queue that holds what it hands out until it is finished (``hold_key``, a channel's at ``--mem-queue-size=0``)
keeps every record it read until ``release(key)``, and starts a restart from the oldest still held
(held_records.py). A cap (``--max-bytes-per-queue``, queue_cap.py) bounds the bytes waiting to be read.
Segment files are read and written by segment_files.py; deferred messages have deferred_file.py.
"""

from __future__ import annotations

import errno
import logging
import os
from contextlib import suppress
from dataclasses import replace
from itertools import chain
from pathlib import Path
from typing import Callable

from . import disk_queue_meta
from .held_records import NOT_HELD, HeldRecords
from .queue_cap import QueueCap
from .disk_queue_meta import Positions
from .segment_files import (MIN_RECORD, SIZE, SegmentFiles, SegmentReader, delete, read_span, recover_tail,
                            write_parts)

log = logging.getLogger("nsqd")

# a write file read to its end and finished is left for a new one at a sync once past this size (far below NSQ's
# 100 MB --max-bytes-per-file), so that its space comes back, though never a file per message
ROLL_DRAINED_AT = 1 << 20


class DiskQueue:
    def __init__(self, name: str, data_path: Path, max_bytes_per_file: int, max_msg_size: int,
                 sync_every: int, hold_key: Callable[[bytes], bytes] | None = None, max_bytes: int = 0,
                 drop_oldest: bool = False) -> None:
        self.name = name
        self._data_path = data_path
        self._max_bytes_per_file = max_bytes_per_file
        self._max_record = max_msg_size + MIN_RECORD
        self._sync_every = sync_every
        self._unsynced = 0
        self._positions = disk_queue_meta.load(name, data_path)
        self._files = SegmentFiles(name, data_path, self._positions.read_file)
        # the write file the metadata on disk names: records go only to a file it names (a restart looks there)
        self._meta_write_file = self._positions.write_file
        # what was read and is not finished yet
        self._held = HeldRecords(hold_key) if hold_key is not None else NOT_HELD
        self._write_fd: int | None = None
        self._reader: SegmentReader | None = None
        self._room_refused = False  # the disk refused a write since the write file was started
        self._deleted = False
        self._recover_tail()
        self._cap = QueueCap(name, max_bytes, drop_oldest)
        self._capped = max_bytes > 0
        self.dropped_count = 0
        self.on_drop: Callable[[list[bytes]], None] | None = None
        self.reclaim: Callable[[int], bool] | None = None  # frees bytes elsewhere on a full disk (storage.py)
        self._bytes = self._unread_bytes()  # of the records waiting to be read

    # -- state -------------------------------------------------------------------------------------------

    @property
    def depth(self) -> int:
        return self._positions.depth

    def file_path(self, number: int) -> Path:
        return self._files.path(number)

    @property
    def meta_path(self) -> Path:
        return disk_queue_meta.meta_path(self.name, self._data_path)

    @property
    def sync_due(self) -> bool:
        """--sync-every operations (reads and writes) happened since the last sync."""
        return self._unsynced >= self._sync_every

    @property
    def dirty(self) -> bool:
        return self._unsynced > 0

    # -- writing -----------------------------------------------------------------------------------------

    def put(self, payloads: list[bytes], capped: bool = True) -> None:
        """Appends every payload, or raises OSError (QueueFull too if ``capped``) having appended none."""
        try:
            self._put(payloads, capped)
        except OSError as error:
            if not self._fresh_file_for(error, sum(map(len, payloads)) + 4 * len(payloads)):
                raise
            self._put(payloads, capped)

    def _put(self, payloads: list[bytes], capped: bool) -> None:
        if not payloads:
            return
        if len(payloads) == 1 and MIN_RECORD <= len(payloads[0]) <= self._max_record:
            size = 4 + len(payloads[0])
            if self._positions.write_pos + size <= self._max_bytes_per_file:
                if capped and self._capped:
                    self._make_room(size)
                self._write([SIZE.pack(len(payloads[0])), payloads[0]], 1, size)  # one message per request
                return
        sizes = list(map(len, payloads))
        if min(sizes) < MIN_RECORD or max(sizes) > self._max_record:
            raise ValueError(f"invalid message size {min(sizes)}..{max(sizes)}")
        total = sum(sizes) + 4 * len(sizes)
        if capped and self._capped:
            self._make_room(total)
        if self._positions.write_pos + total <= self._max_bytes_per_file:
            # the common case, all in the current file: headers and payloads joined in one pass
            self._write(list(chain.from_iterable(zip(map(SIZE.pack, sizes), payloads))), len(payloads), total)
            return
        self._put_records([SIZE.pack(len(payload)) + payload for payload in payloads])

    def put_records(self, records: list[bytes]) -> None:
        """``put`` for records as ``read(framed=True)`` returns them, size prefix included (another queue's, moved
        as they are)."""
        try:
            self._put_framed(records)
        except OSError as error:
            if not self._fresh_file_for(error, sum(map(len, records))):
                raise
            self._put_framed(records)

    def _put_framed(self, records: list[bytes]) -> None:
        total = sum(map(len, records))
        if self._capped:
            self._make_room(total)
        if self._positions.write_pos + total <= self._max_bytes_per_file:
            self._write(records, len(records), total)
        else:
            self._put_records(records)

    def _put_records(self, records: list[bytes]) -> None:
        """One record at a time, rolling to the next file where the current one would pass its size. All or
        nothing: if the disk refuses one, the ones before it are taken back."""
        before, unsynced = replace(self._positions), self._unsynced
        try:
            for record in records:
                if self._positions.write_pos > 0 and \
                        self._positions.write_pos + len(record) > self._max_bytes_per_file:
                    self._roll()
                self._write([record], 1, len(record))
        except OSError:
            self._take_back(before, unsynced)
            raise

    def _take_back(self, before: Positions, unsynced: int) -> None:
        """Back to the positions ``before`` a put the disk refused part of: the files it started are deleted, the
        one it started in is cut back. Metadata a roll wrote meanwhile names a write file that is gone: the next
        sync replaces it, and a restart before that reads the file cut back to its end all the same."""
        self._close_write_file()
        for number in range(before.write_file + 1, self._positions.write_file + 1):
            self.file_path(number).unlink(missing_ok=True)
        with suppress(FileNotFoundError):  # refused before it was made
            os.truncate(self.file_path(before.write_file), before.write_pos)
        self._positions = before
        self._unsynced = unsynced + 1

    def _fresh_file_for(self, error: OSError, size: int) -> bool:
        """After the disk ran out of room: ``reclaim`` frees ``size`` bytes (retained messages go first), or if the
        write file is read to its end, writing goes on in a new file (the one read goes at a sync once nothing in it
        is unfinished). Whether either did: then the put is worth trying once more."""
        if error.errno not in (errno.ENOSPC, errno.EDQUOT):
            return False
        if self.reclaim is not None and self.reclaim(size):
            return True
        self._room_refused = True
        if not self._read_to_end():
            return False
        if self._write_fd is not None:
            try:
                os.fsync(self._write_fd)  # what it holds in flight stays as durable as it was to be
            except OSError:
                return False
        self._start_fresh_file()
        try:
            self.sync_job()()
        except OSError:
            # the new file is written to once the metadata names it (_open_write_file), never before
            return False
        return True

    def _read_to_end(self) -> bool:
        positions = self._positions
        return positions.read_file == positions.write_file and 0 < positions.write_pos <= positions.read_pos

    def _start_fresh_file(self) -> None:
        """Writing goes on in a new file, read from its start; the one read goes at a sync, once all finished."""
        if self._room_refused:
            log.info("DISKQUEUE(%s): the disk is full and %s is read: going on in a new file", self.name,
                     self.file_path(self._positions.write_file).name)
        self._close_write_file()
        self._close_reader()
        positions = self._positions
        positions.read_file = positions.write_file = positions.write_file + 1
        positions.write_pos = positions.read_pos = 0
        self._room_refused = False

    def _roll_drained(self) -> None:
        """At a sync: a write file read to its end, with nothing in it unfinished, is left for a new one once the
        disk refused room or it passed ``ROLL_DRAINED_AT``, so that this sync gives its space back."""
        if self._read_to_end() and not self._held and (self._room_refused
                                                       or self._positions.write_pos >= ROLL_DRAINED_AT):
            self._start_fresh_file()

    def _write(self, parts: list[bytes], count: int, size: int) -> None:  # parts: records or their pieces, size bytes
        if not parts:
            return
        write_parts(self._open_write_file(), parts, size, self._positions.write_pos)
        self._positions.write_pos += size
        self._positions.depth += count
        self._unsynced += count
        self._bytes += size

    # -- the cap -----------------------------------------------------------------------------------------

    def check_room(self, size: int) -> None:
        """Raises QueueFull if the cap refuses records of ``size`` bytes (in all)."""
        self._cap.check(self._bytes, size)

    def _make_room(self, size: int) -> None:
        """Drops the oldest records if the cap needs room for ``size`` bytes more (QueueFull if it refuses)."""
        target = self._bytes - self._cap.to_free(self._bytes, size)
        while self._bytes > target:
            average = max(4 + MIN_RECORD, self._bytes // max(1, self._positions.depth))
            dropped = self.read((self._bytes - target) // average + 1)
            if not dropped:
                break
            self._unsynced += self._held.release_payloads(dropped)
            self.dropped_count += len(dropped)
            if self.on_drop is not None:
                self.on_drop(dropped)

    def _unread_bytes(self) -> int:
        """The bytes of the records from the read position to the write position, from the files' sizes."""
        positions = self._positions
        return self._files.bytes_between(positions.read_file, positions.read_pos, positions.write_file,
                                         positions.write_pos)

    def _open_write_file(self) -> int:
        if self._write_fd is None:
            if self._positions.write_file != self._meta_write_file:
                self.sync_job()()  # raises OSError when it cannot: then nothing is written either
            path = self.file_path(self._positions.write_file)
            self._write_fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            os.lseek(self._write_fd, self._positions.write_pos, os.SEEK_SET)
        return self._write_fd

    def _roll(self) -> None:
        """Closes the full write file and starts the next; synced here, so a restart never has to look for
        records beyond the file the metadata names."""
        if self._write_fd is not None:
            os.fsync(self._write_fd)
        self._close_write_file()
        self._positions.write_file += 1
        self._positions.write_pos = 0
        self.sync_job()()

    # -- reading -----------------------------------------------------------------------------------------

    def read(self, max_count: int, framed: bool = False) -> list[bytes]:
        """Up to ``max_count`` payloads, oldest first; fewer (or none) when no more have been written. ``framed``
        returns whole records instead, each with its 4-byte size first."""
        payloads: list[bytes] = []
        positions = self._positions
        while len(payloads) < max_count:
            if positions.read_file == positions.write_file and positions.read_pos >= positions.write_pos:
                if positions.depth != 0:
                    log.error("DISKQUEUE(%s): read to the end with depth %d recorded; resetting it to 0", self.name,
                              positions.depth)
                    positions.depth = 0
                break
            reader = self._open_reader()
            if reader is None:
                self._bad_read_file()  # the file the metadata names is gone
                continue
            end = positions.write_pos if positions.read_file == positions.write_file else None
            taken = reader.take(max_count - len(payloads), self._max_record, end, 0 if framed else 4)
            if not taken:
                if end is None and reader.at_end():
                    self._finish_read_file()
                    continue
                self._bad_read_file()
                continue
            assert not (framed and self._held.holds), "held records are read as payloads"
            self._held.hold(taken, positions.read_file, positions.read_pos)
            self._bytes -= reader.position - positions.read_pos
            positions.read_pos = reader.position
            positions.depth -= len(taken)
            self._unsynced += len(taken)
            payloads += taken
        return payloads

    def peek_job(self, max_count: int) -> Callable[[], list[bytes]]:
        """What ``read(max_count)`` would return now (held records not among them), as a job that moves nothing
        and may run on another thread while the queue goes on (``segment_files.read_span``)."""
        if not self._positions.depth:
            return list  # nothing to read: no file opened for it (a snapshot asks every queue)
        positions, max_record = replace(self._positions), self._max_record
        paths = [self.file_path(number) for number in range(positions.read_file, positions.write_file + 1)]
        return lambda: read_span(paths, positions.read_pos, positions.write_pos, max_count, max_record)

    def release(self, key: bytes) -> None:
        """The message read under ``key`` is finished (or safe elsewhere): a restart need not read it again."""
        if self._held.release(key):
            self._unsynced += 1

    def release_all(self) -> None:
        self._held.clear()

    def _start_of_held(self) -> tuple[int, int, int]:
        """Where a restart must start reading: (file, position, records from there already read)."""
        return self._held.restart_point(self._positions.read_file, self._positions.read_pos)

    def _read_files_done(self) -> list[Path]:
        """The files read to their end that hold nothing unfinished, to delete."""
        return self._files.take_done(self._start_of_held()[0])

    def _open_reader(self) -> SegmentReader | None:
        if self._reader is None:
            try:
                self._reader = SegmentReader(self.file_path(self._positions.read_file), self._positions.read_pos)
            except FileNotFoundError:
                return None
        return self._reader

    def _close_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def _finish_read_file(self) -> None:
        """The read file is read to its end: go on with the next, deleting it unless it holds something
        unfinished."""
        self._close_reader()
        self._positions.read_file += 1
        self._positions.read_pos = 0
        delete(self._read_files_done())

    def _bad_read_file(self) -> None:
        self._close_reader()
        self._files.set_aside(self._positions.read_file, self._positions.read_pos)
        if self._positions.read_file == self._positions.write_file:
            self.release_files()
            self._positions.write_file += 1
            self._positions.write_pos = 0
        self._positions.read_file += 1
        self._positions.read_pos = 0
        self._bytes = self._unread_bytes()

    # -- durability --------------------------------------------------------------------------------------

    def sync_job(self) -> Callable[[], None]:
        """What a sync must do, as of now: fsync the write file, then replace the metadata. Safe to run on
        another thread while the queue goes on; the queue counts the operations as synced already."""
        self._roll_drained()
        self._unsynced = 0
        # its own descriptor: the queue may close or roll its file while the job runs
        fd = os.dup(self._write_fd) if self._write_fd is not None else None
        snapshot = replace(self._positions)
        if self._held:
            snapshot.read_file, snapshot.read_pos, read_again = self._start_of_held()
            snapshot.depth += read_again
        done_files = self._read_files_done()

        def run() -> None:
            try:
                if fd is not None:
                    os.fsync(fd)
            finally:
                if fd is not None:
                    os.close(fd)
            if not self._deleted:
                try:
                    disk_queue_meta.write(self.meta_path, snapshot)
                except OSError:
                    if not done_files:
                        raise
                    # no room for the metadata, maybe: the files done go first to make some (kept until then, they
                    # would fill a full disk for good). A restart before the metadata is written finds them gone
                    # and goes on with the next file.
                    delete(done_files)
                    disk_queue_meta.write(self.meta_path, snapshot)
                self._meta_write_file = snapshot.write_file
            delete(done_files)  # once the metadata no longer names them

        return run

    def close(self) -> None:
        """Syncs and closes the files (closed even if the sync fails); the queue keeps its messages for the next
        start."""
        try:
            self.sync_job()()
        finally:
            self.release_files()

    def release_files(self) -> None:
        """Closes the open files without syncing (what a killed process leaves behind)."""
        self._close_reader()
        self._close_write_file()

    def _close_write_file(self) -> None:
        if self._write_fd is not None:
            os.close(self._write_fd)
            self._write_fd = None

    def empty(self) -> None:
        """Drops every message: deletes every file of the queue (from the oldest one kept), as NSQ's does."""
        self.release_files()
        self._files.delete_all(self._positions.write_file)
        next_file = self._positions.write_file + 1
        self._positions = Positions(0, next_file, 0, next_file, 0)
        self._bytes = 0
        self.release_all()
        self.sync_job()()

    def delete(self) -> None:
        """Drops every message and every file, metadata included."""
        self.empty()
        self._deleted = True
        self.meta_path.unlink(missing_ok=True)

    # -- start-up ----------------------------------------------------------------------------------------

    def _recover_tail(self) -> None:
        """Records written after the last sync are in the write file past the recorded position: counted in (a
        record cut short by a kill is cut off)."""
        end, recovered = recover_tail(self.name, self.file_path(self._positions.write_file),
                                      self._positions.write_pos, self._max_record)
        self._positions.write_pos = end
        self._positions.depth += recovered
