"""The output files of ``nsq_to_file``: a ``FileLogger`` appends each message of one topic, body and newline, to
the topic's current file, and finishes the message only once its line is on disk.

As NSQ's ``apps/nsq_to_file/file_logger.go``:

- a file's name comes from ``--filename-format``: ``<TOPIC>``, ``<HOST>`` and ``<PID>`` are replaced once,
  ``<DATETIME>`` (``--datetime-format`` of the local time) for each file, ``<REV>`` by ``-000000``,
  ``-000001``... up to the first name that is free; ``.gz`` is appended with ``--gzip``;
- a new file is started when the formatted datetime changes, after ``--rotate-interval``, or once the file holds
  more than ``--rotate-size`` bytes of lines (counted before compression);
- a closed file moves from ``--work-dir`` to ``--output-dir`` by link + unlink, never over an existing file: a
  taken name gets the next free ``<REV>``;
- with ``--gzip`` every sync ends a gzip member, so a file is a series of complete members and whatever was
  finished can be read back, even from a file a killed process left open.

The invariant that makes the archive at-least-once: a message is FIN'd only after its line was written and
fsync'd. Lines wait in memory with their messages until a sync writes them, fsyncs on the logger's own thread
and then finishes them. Every file operation runs on that one thread in the order asked, so a file is never
synced and closed at once; an asyncio lock keeps the event loop's view (which file is open, its size) in step
across those awaits.

Naming and rotation are pure functions of their inputs, time included (``now``: seconds since the epoch).
"""

from __future__ import annotations

import asyncio
import errno
import gzip
import itertools
import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from nsqclient import Message
from shared.flags import format_duration

log = logging.getLogger("nsq_to_file")

REV_REQUIRED = "missing <REV> in --filename-format when gzip, rotation, or work dir enabled"

_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
# the directives NSQ's strftime knows (a copy of jehiah/go-strftime), each as Go's time.Format renders it
_DIRECTIVES: dict[str, Callable[[datetime], str]] = {
    "B": lambda t: _MONTHS[t.month - 1],
    "b": lambda t: _MONTHS[t.month - 1][:3],
    "m": lambda t: f"{t.month:02d}",
    "A": lambda t: _WEEKDAYS[t.weekday()],
    "a": lambda t: _WEEKDAYS[t.weekday()][:3],
    "d": lambda t: f"{t.day:02d}",
    "H": lambda t: f"{t.hour:02d}",
    "I": lambda t: f"{t.hour % 12 or 12:02d}",
    "M": lambda t: f"{t.minute:02d}",
    "S": lambda t: f"{t.second:02d}",
    "Y": lambda t: f"{t.year:04d}",
    "y": lambda t: f"{t.year % 100:02d}",
    "p": lambda t: "PM" if t.hour >= 12 else "AM",
    "Z": lambda t: t.tzname() or "",
    "z": lambda t: t.strftime("%z"),
    "%": lambda t: "%",
}
_DIRECTIVE = re.compile(r"%(.)", re.DOTALL)

T = TypeVar("T")


# -- naming (pure) ---------------------------------------------------------------------------------------------

def strftime(format: str, moment: datetime) -> str:
    """NSQ's strftime: the directives above are replaced, any other ``%x`` is kept as it is."""
    def replace(match: re.Match[str]) -> str:
        render = _DIRECTIVES.get(match.group(1))
        return render(moment) if render is not None else match.group(0)

    return _DIRECTIVE.sub(replace, format)


def local_time(now: float) -> datetime:
    return datetime.fromtimestamp(now).astimezone()


def host_identifier(identifier: str, hostname: str) -> str:
    """``--host-identifier`` with ``<SHORT_HOST>`` and ``<HOSTNAME>`` replaced; the short hostname when empty."""
    short = hostname.split(".")[0]
    if not identifier:
        return short
    return identifier.replace("<SHORT_HOST>", short).replace("<HOSTNAME>", hostname)


def rev_required(gzip: bool, rotate_size: int, rotate_interval: float, work_dir: str, output_dir: str) -> bool:
    """Whether names need ``<REV>``: only then can a second file of the same datetime get a name of its own."""
    return gzip or rotate_size > 0 or rotate_interval > 0 or work_dir != output_dir


def filename_format(format: str, topic: str, host: str, pid: int, gzip: bool, with_rev: bool) -> str:
    """One topic's file names, all but ``<DATETIME>`` and ``<REV>`` filled in (NSQ's ``computeFilenameFormat``).
    Raises ValueError when ``<REV>`` is required and missing."""
    if with_rev and "<REV>" not in format:
        raise ValueError(REV_REQUIRED)
    if not with_rev:
        format = format.replace("<REV>", "")
    format = format.replace("<TOPIC>", topic).replace("<HOST>", host).replace("<PID>", str(pid))
    return format + ".gz" if gzip and not format.endswith(".gz") else format


def with_datetime(format: str, datetime_format: str, now: float) -> str:
    return format.replace("<DATETIME>", strftime(datetime_format, local_time(now)))


def with_rev(name: str, rev: int) -> str:
    return name.replace("<REV>", f"-{rev:06d}")


def join(directory: str, name: str) -> str:
    """Go's ``path.Join``: a name starting with a slash stays under ``directory``."""
    return os.path.normpath(os.path.join(directory, name.lstrip("/")))


# -- rotation (pure) -------------------------------------------------------------------------------------------

@dataclass
class FileState:
    """The file being written as the event loop sees it; kept after the file is closed, for the next ``<REV>``."""

    name: str  # the name with <DATETIME> in and <REV> not
    rev: int
    opened_at: float
    size: int  # when opened, plus every line given since (uncompressed)


def rotation_reason(current: FileState | None, name: str, now: float, rotate_interval: float,
                    rotate_size: int) -> str | None:
    """Why a line written at ``now`` (whose file would be called ``name``) needs a new file; None when it does not.
    ``current`` is None when no file is open."""
    if current is None:
        return "no file open"
    if name != current.name:
        return f"new filename {name}, rotating..."
    if rotate_interval > 0 and now - current.opened_at > rotate_interval:
        return f"{format_duration(now - current.opened_at)} since last open, rotating..."
    if rotate_size > 0 and current.size > rotate_size:
        return f"currently {current.size} bytes (> {rotate_size}), rotating..."
    return None


def first_rev(previous: FileState | None, name: str) -> int:
    """The ``<REV>`` to try first for a new file: the next one when the name stays, 0 for a new name."""
    return previous.rev + 1 if previous is not None and previous.name == name else 0


# -- files (their methods run on the logger's thread) ----------------------------------------------------------

@dataclass(frozen=True)
class Placement:
    """Where and how files are written."""

    work_dir: str
    output_dir: str
    exclusive: bool  # a new file each time (gzip, rotation by interval); otherwise an existing one is appended to
    rotate_size: int
    gzip_level: int | None  # None: no compression


class OutputFile:
    """An open output file."""

    def __init__(self, placement: Placement, name: str, rev: int, fd: int, size: int, prefix: str) -> None:
        self.placement, self.name, self.rev, self.size = placement, name, rev, size
        self.path = join(placement.work_dir, with_rev(name, rev))
        self._fd = fd
        self._prefix = prefix

    @classmethod
    def open(cls, placement: Placement, name: str, first: int, prefix: str) -> OutputFile:
        """Opens ``name`` with the first ``<REV>`` from ``first`` on that is free (NSQ's ``updateFile``)."""
        _make_parent(join(placement.work_dir, name))
        flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if placement.exclusive else os.O_APPEND)
        for rev in _revisions(name, first):
            path = join(placement.work_dir, with_rev(name, rev))
            if placement.work_dir != placement.output_dir and _taken_in_output(placement, name, rev, prefix):
                continue
            try:
                fd = os.open(path, flags, 0o666)
            except FileExistsError:
                log.warning("%s working file already exists: %s", prefix, path)
                continue
            size = os.fstat(fd).st_size
            if placement.rotate_size > 0 and size > placement.rotate_size:
                log.info("%s %s currently %d bytes (> %d), rotating...", prefix, path, size, placement.rotate_size)
                os.close(fd)
                continue
            log.info("%s opening %s", prefix, path)
            return cls(placement, name, rev, fd, size, prefix)
        raise FileExistsError(errno.EEXIST, "no free name", join(placement.work_dir, name))

    def write(self, data: bytes) -> None:
        """Appends ``data`` (as one more gzip member when compressing) and fsyncs."""
        if self.placement.gzip_level is not None:
            data = gzip.compress(data, self.placement.gzip_level, mtime=0)
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        os.fsync(self._fd)

    def close(self, data: bytes) -> str:
        """Writes and fsyncs the last ``data``, closes, moves the file to the output directory; its final path."""
        try:
            if data:
                self.write(data)
            os.fsync(self._fd)
        finally:
            os.close(self._fd)
        if self.placement.work_dir == self.placement.output_dir:
            return self.path
        return self._move()

    def _move(self) -> str:
        destination = join(self.placement.output_dir, with_rev(self.name, self.rev))
        log.info("%s moving finished file %s to %s", self._prefix, self.path, destination)
        for rev in _revisions(self.name, self.rev):
            candidate = join(self.placement.output_dir, with_rev(self.name, rev))
            try:
                _exclusive_rename(self.path, candidate)
            except FileExistsError:
                log.warning("%s destination file already exists: %s", self._prefix, candidate)
                continue
            if candidate != destination:
                log.info("%s renamed finished file %s to %s to avoid overwrite", self._prefix, self.path, candidate)
            return candidate
        raise FileExistsError(errno.EEXIST, "no free name", destination)


def _revisions(name: str, first: int) -> Iterator[int]:
    """The ``<REV>`` values to try; a name without ``<REV>`` has only the one."""
    return itertools.count(first) if "<REV>" in name else iter([first])


def _taken_in_output(placement: Placement, name: str, rev: int, prefix: str) -> bool:
    """Whether the output directory has the name already (checked up front, so moves rarely need a new name)."""
    path = join(placement.output_dir, with_rev(name, rev))
    _make_parent(path)
    if os.path.lexists(path):
        log.warning("%s output file already exists: %s", prefix, path)
        return True
    return False


def _make_parent(path: str) -> None:
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, 0o770, exist_ok=True)


def _exclusive_rename(source: str, destination: str) -> None:
    """A rename that fails with FileExistsError instead of replacing ``destination``."""
    os.link(source, destination)
    os.unlink(source)


# -- the logger (event loop side) ------------------------------------------------------------------------------

@dataclass(frozen=True)
class LoggerSettings:
    filename_format: str  # as ``filename_format`` returns it
    datetime_format: str
    rotate_interval: float
    rotate_size: int
    skip_empty_files: bool
    placement: Placement


class ArchiveError(Exception):
    """A file operation failed: nothing more can be archived (NSQ exits with status 1)."""


class FileLogger:
    """One topic's files. ``write`` takes a message (the consumer's handler has disabled its automatic response);
    ``sync`` finishes every message written so far, after the disk has its line. ``clock`` gives ``now``."""

    def __init__(self, prefix: str, settings: LoggerSettings, clock: Callable[[], float] = time.time) -> None:
        self._prefix = prefix  # "[topic/channel]", in front of every log line
        self._settings = settings
        self._clock = clock
        self._lock = asyncio.Lock()
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="nsq_to_file")
        self._file: OutputFile | None = None
        self._state: FileState | None = None
        self._lines: list[bytes] = []
        self._pending: list[Message] = []
        self._broken: ArchiveError | None = None
        self._name_second = -1  # <DATETIME> has no unit below the second: one name per second is enough
        self._name = ""

    @property
    def pending(self) -> int:
        """Messages written, not yet synced (and so not yet finished)."""
        return len(self._pending)

    async def write(self, message: Message) -> None:
        """Appends the message's line; it is finished by a later sync (or by the rotation that closes its file)."""
        async with self._lock:
            self._check()
            now = self._clock()
            name = self._name_at(now)
            reason = rotation_reason(self._open_state(), name, now, self._settings.rotate_interval,
                                     self._settings.rotate_size)
            if reason is not None:
                await self._rotate(name, now, reason)
            assert self._state is not None
            line = message.body + b"\n"
            self._lines.append(line)
            self._pending.append(message)
            self._state.size += len(line)

    async def sync(self) -> None:
        """Writes and fsyncs the lines given so far, then finishes their messages."""
        async with self._lock:
            self._check()
            await self._sync()

    async def tick(self) -> None:
        """NSQ's sync ticker: a new file if one is due (only closing the old one with ``--skip-empty-files``, so
        no empty file is started), then a sync."""
        async with self._lock:
            self._check()
            now = self._clock()
            name = self._name_at(now)
            reason = rotation_reason(self._open_state(), name, now, self._settings.rotate_interval,
                                     self._settings.rotate_size)
            if reason is not None and self._settings.skip_empty_files:
                await self._close()
            elif reason is not None:
                await self._rotate(name, now, reason)
            await self._sync()

    async def close(self) -> None:
        """Syncs, finishes and closes the current file (moving it to the output directory); the next ``write``
        opens a new one."""
        async with self._lock:
            self._check()
            await self._close()

    def shutdown(self) -> None:
        """Lets the file thread end once its work is done."""
        self._thread.shutdown(wait=False)

    # -- under the lock ----------------------------------------------------------------------------------------

    async def _sync(self) -> None:
        if not self._pending:
            return
        assert self._file is not None
        data, messages = self._take()
        log.info("%s syncing %d records to disk", self._prefix, len(messages))
        await self._run(self._file.write, data, what="failed syncing messages")
        for message in messages:
            message.finish()

    async def _rotate(self, name: str, now: float, reason: str) -> None:
        if self._file is not None:
            log.info("%s %s", self._prefix, reason)
        await self._close()
        rev = first_rev(self._state, name)
        output = await self._run(OutputFile.open, self._settings.placement, name, rev, self._prefix,
                                 what="unable to open file")
        self._file = output
        self._state = FileState(name, output.rev, now, output.size)

    async def _close(self) -> None:
        output, self._file = self._file, None
        if output is None:
            return
        data, messages = self._take()
        await self._run(output.close, data, what="failed to close output file")
        for message in messages:
            message.finish()

    def _take(self) -> tuple[bytes, list[Message]]:
        data, messages = b"".join(self._lines), self._pending
        self._lines, self._pending = [], []
        return data, messages

    async def _run(self, function: Callable[..., T], *args: object, what: str) -> T:
        """``function(*args)`` on the file thread; an OSError breaks the logger for good."""
        try:
            return await asyncio.get_running_loop().run_in_executor(self._thread, function, *args)
        except OSError as error:
            self._broken = ArchiveError(f"{self._prefix} {what}: {error}")
            raise self._broken from error

    def _check(self) -> None:
        if self._broken is not None:
            raise self._broken

    def _open_state(self) -> FileState | None:
        return self._state if self._file is not None else None

    def _name_at(self, now: float) -> str:
        second = int(now)
        if second != self._name_second:
            self._name_second = second
            self._name = with_datetime(self._settings.filename_format, self._settings.datetime_format, now)
        return self._name
