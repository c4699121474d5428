"""nsq_to_file without processes: names, rotation decisions, flag checks, and the file logger on a real directory
with a clock the test moves."""

from __future__ import annotations

import gzip
import os
from datetime import datetime
from pathlib import Path

import pytest

from apps.file_logger import (
    REV_REQUIRED,
    ArchiveError,
    FileLogger,
    FileState,
    LoggerSettings,
    OutputFile,
    Placement,
    filename_format,
    first_rev,
    host_identifier,
    join,
    local_time,
    rotation_reason,
    strftime,
    with_datetime,
    with_rev,
)
from apps.nsq_to_file import Options, logger_settings, topic_allowed
from nsqclient import Message
from shared.flags import FlagError, parse_command_line

REFERENCE = Path(__file__).resolve().parent.parent / "reference"
# a local time, whatever the test machine's zone: 2026-03-04 (a Wednesday) 15:06:07
NOW = datetime(2026, 3, 4, 15, 6, 7).timestamp()


# -- names -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("format", "expected"), [
    ("%Y-%m-%d_%H", "2026-03-04_15"),
    ("%Y%m%d%H%M%S", "20260304150607"),
    ("%y %b %B %a %A", "26 Mar March Wed Wednesday"),
    ("%I%p", "03PM"),
    ("100%% %q %", "100% %q %"),  # unknown directives and a trailing % stay as they are
    ("%Y/%m/%d/", "2026/03/04/"),
])
def test_strftime_as_nsq(format: str, expected: str) -> None:
    assert strftime(format, local_time(NOW)) == expected


def test_strftime_zone_directives_follow_the_local_zone() -> None:
    moment = local_time(NOW)
    assert strftime("%Z %z", moment) == f"{moment.tzname()} {moment.strftime('%z')}"


def test_midnight_and_noon_on_a_12_hour_clock() -> None:
    assert strftime("%I%p", datetime(2026, 1, 1, 0, 30)) == "12AM"
    assert strftime("%I%p", datetime(2026, 1, 1, 12, 30)) == "12PM"


@pytest.mark.parametrize(("identifier", "expected"), [
    ("", "web1"),
    ("<SHORT_HOST>", "web1"),
    ("<HOSTNAME>", "web1.example.com"),
    ("box-<SHORT_HOST>-<HOSTNAME>", "box-web1-web1.example.com"),
    ("fixed", "fixed"),
])
def test_host_identifier(identifier: str, expected: str) -> None:
    assert host_identifier(identifier, "web1.example.com") == expected


def test_the_default_format_without_rev() -> None:
    fmt = filename_format("<TOPIC>.<HOST><REV>.<DATETIME>.log", "events", "web1", 42, gzip=False, with_rev=False)
    assert fmt == "events.web1.<DATETIME>.log"
    assert with_datetime(fmt, "%Y-%m-%d_%H", NOW) == "events.web1.2026-03-04_15.log"


def test_the_default_format_with_rev_and_gzip() -> None:
    fmt = filename_format("<TOPIC>.<HOST><REV>.<DATETIME>.log", "events", "web1", 42, gzip=True, with_rev=True)
    assert fmt == "events.web1<REV>.<DATETIME>.log.gz"
    assert with_rev(with_datetime(fmt, "%Y", NOW), 12) == "events.web1-000012.2026.log.gz"


def test_pid_token_and_no_second_gz() -> None:
    fmt = filename_format("<PID>/<TOPIC><REV>.gz", "t", "h", 42, gzip=True, with_rev=True)
    assert fmt == "42/t<REV>.gz"


def test_rev_is_required_when_names_can_repeat() -> None:
    with pytest.raises(ValueError, match="missing <REV>"):
        filename_format("<TOPIC>.<DATETIME>.log", "t", "h", 1, gzip=True, with_rev=True)


def test_join_keeps_a_leading_slash_under_the_directory() -> None:
    assert join("/out", "/a//b/../c.log") == "/out/a/c.log"


# -- rotation --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("current", "name", "now", "interval", "size", "expected"), [
    (None, "a", 0.0, 0.0, 0, "no file open"),
    (FileState("a", 0, 0.0, 0), "a", 10_000.0, 0.0, 0, None),
    (FileState("a", 0, 0.0, 0), "b", 1.0, 0.0, 0, "new filename b, rotating..."),
    (FileState("a", 0, 100.0, 0), "a", 160.0, 60.0, 0, None),  # exactly the interval: not yet
    (FileState("a", 0, 100.0, 0), "a", 160.5, 60.0, 0, "1m0.5s since last open, rotating..."),
    (FileState("a", 0, 0.0, 1000), "a", 1.0, 0.0, 1000, None),  # exactly the size: not yet
    (FileState("a", 0, 0.0, 1001), "a", 1.0, 0.0, 1000, "currently 1001 bytes (> 1000), rotating..."),
])
def test_rotation_reason(current: FileState | None, name: str, now: float, interval: float, size: int,
                         expected: str | None) -> None:
    assert rotation_reason(current, name, now, interval, size) == expected


def test_first_rev_continues_a_name_and_restarts_for_a_new_one() -> None:
    assert first_rev(None, "a") == 0
    assert first_rev(FileState("a", 3, 0.0, 0), "a") == 4
    assert first_rev(FileState("a", 3, 0.0, 0), "b") == 0


# -- flags -----------------------------------------------------------------------------------------------------

def options(*args: str) -> Options:
    opts, _ = parse_command_line(Options, list(args))
    opts.validate()
    return opts


def test_defaults_are_nsqs() -> None:
    opts = options("--topic=t", "--nsqd-tcp-address=127.0.0.1:4150")
    assert (opts.channel, opts.max_in_flight, opts.output_dir, opts.work_directory) == \
        ("nsq_to_file", 200, "/tmp", "/tmp")
    assert (opts.datetime_format, opts.filename_format) == ("%Y-%m-%d_%H", "<TOPIC>.<HOST><REV>.<DATETIME>.log")
    assert (opts.gzip, opts.gzip_level, opts.rotate_size, opts.rotate_interval) == (False, 6, 0, 0.0)
    assert (opts.sync_interval, opts.topic_refresh, opts.log_prefix) == (30.0, 60.0, "[nsq_to_file] ")
    assert (opts.http_client_connect_timeout, opts.http_client_request_timeout) == (2.0, 5.0)


@pytest.mark.parametrize(("args", "message"), [
    (("--topic=t",), "--nsqd-tcp-address or --lookupd-http-address required."),
    (("--topic=t", "--nsqd-tcp-address=a:1", "--lookupd-http-address=b:2"),
     "use --nsqd-tcp-address or --lookupd-http-address not both"),
    (("--topic=t", "--nsqd-tcp-address=a:1", "--channel="), "--channel is required"),
    (("--topic=t", "--nsqd-tcp-address=a:1", "--gzip-level=0"), "invalid --gzip-level value (0), should be 1-9"),
    (("--nsqd-tcp-address=a:1",), "--topic or --topic-pattern required"),
    (("--topic-pattern=x", "--nsqd-tcp-address=a:1"),
     "--lookupd-http-address must be specified when no --topic specified"),
    (("--topic=t", "--nsqd-tcp-address=a:1", "--http-client-connect-timeout=0"),
     "--http-client-connect-timeout should be positive"),
    (("--topic=t", "--nsqd-tcp-address=a:1", "--gzip", "--filename-format=<TOPIC>.log"), REV_REQUIRED),
    (("--topic=t", "--nsqd-tcp-address=a:1", "--rotate-size=10", "--filename-format=<TOPIC>.log"), REV_REQUIRED),
    (("--topic=t", "--nsqd-tcp-address=a:1", "--work-dir=/w", "--filename-format=<TOPIC>.log"), REV_REQUIRED),
    (("--topic=t", "--nsqd-tcp-address=a:1", "--topic-pattern=("), "--topic-pattern is invalid"),
    (("--topic=no spaces", "--nsqd-tcp-address=a:1"), "--topic is invalid"),
    (("--topic=t", "--nsqd-tcp-address=a:1", "--sync-interval=0"), "--sync-interval should be positive"),
    (("--topic=t", "--nsqd-tcp-address=a:1", "--consumer-opt=nope,1"),
     "invalid value \"nope,1\" for flag -consumer-opt: invalid option nope"),
])
def test_bad_flags(args: tuple[str, ...], message: str) -> None:
    with pytest.raises(FlagError) as error:
        options(*args)
    assert str(error.value).startswith(message)


def test_rev_stays_optional_when_names_cannot_repeat() -> None:
    opts = options("--topic=t", "--nsqd-tcp-address=a:1", "--filename-format=<TOPIC>.log", "--work-dir=/tmp")
    settings = logger_settings(opts, "t")
    assert settings.filename_format == "t.log"
    assert settings.placement == Placement("/tmp", "/tmp", False, 0, None)


def test_logger_settings_for_gzip_and_interval() -> None:
    opts = options("--topic=t", "--nsqd-tcp-address=a:1", "--gzip", "--gzip-level=9", "--rotate-interval=1h",
                   "--host-identifier=box", "--output-dir=/o", "--work-dir=/w")
    settings = logger_settings(opts, "t")
    assert settings.filename_format == "t.box<REV>.<DATETIME>.log.gz"
    assert settings.placement == Placement("/w", "/o", True, 0, 9)
    assert settings.rotate_interval == 3600.0


@pytest.mark.parametrize(("pattern", "topic", "allowed"), [
    ("", "anything", True),
    ("^match", "match-a", True),
    ("^match", "no-match", False),
    ("match", "no-match", True),  # searched anywhere, as Go's MatchString
])
def test_topic_allowed(pattern: str, topic: str, allowed: bool) -> None:
    assert topic_allowed(pattern, topic) is allowed


# -- the file logger -------------------------------------------------------------------------------------------

class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Responses:
    """The connection side of messages: records each FIN, and what the output files held at that moment."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.finished: list[bytes] = []
        self.on_disk_when_finished: list[bool] = []

    def message(self, body: bytes) -> Message:
        return Message(b"%016d" % len(self.finished), body, 0, 1, "127.0.0.1:4150", self)

    def finish(self, message: Message) -> None:
        self.finished.append(message.body)
        self.on_disk_when_finished.append(message.body + b"\n" in b"".join(read_all(self.directory)))

    def requeue(self, message: Message, delay: float | None, backoff: bool) -> None:
        raise AssertionError("nsq_to_file never requeues")

    def touch(self, message: Message) -> None:
        raise AssertionError("nsq_to_file never touches")


def read_all(directory: Path) -> list[bytes]:
    """The contents of every file under ``directory``, in name order, decompressed."""
    contents = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        data = path.read_bytes()
        contents.append(gzip.decompress(data) if data.startswith(b"\x1f\x8b") else data)
    return contents


def settings(directory: Path, work: Path | None = None, *, fmt: str = "t<REV>.<DATETIME>.log",
             datetime_format: str = "%H", rotate_interval: float = 0.0, rotate_size: int = 0,
             gzip_level: int | None = None, skip_empty_files: bool = False) -> LoggerSettings:
    work = work or directory
    exclusive = gzip_level is not None or rotate_interval > 0
    placement = Placement(str(work), str(directory), exclusive, rotate_size, gzip_level)
    return LoggerSettings(fmt, datetime_format, rotate_interval, rotate_size, skip_empty_files, placement)


def names(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


async def test_messages_are_finished_only_after_their_lines_are_synced(tmp_path: Path) -> None:
    responses = Responses(tmp_path)
    logger = FileLogger("[t/c]", settings(tmp_path), Clock())
    for n in range(3):
        await logger.write(responses.message(b"line %d" % n))
    assert (logger.pending, responses.finished) == (3, [])
    assert read_all(tmp_path) == [b""]  # opened, nothing written before the sync
    await logger.sync()
    assert responses.finished == [b"line 0", b"line 1", b"line 2"]
    assert all(responses.on_disk_when_finished)
    assert logger.pending == 0
    await logger.close()
    logger.shutdown()
    assert names(tmp_path) == ["t-000000.15.log"]


async def test_a_new_datetime_starts_a_new_file_and_finishes_the_old_ones_lines(tmp_path: Path) -> None:
    responses, clock = Responses(tmp_path), Clock()
    logger = FileLogger("[t/c]", settings(tmp_path, fmt="t.<DATETIME>.log"), clock)
    await logger.write(responses.message(b"at 15"))
    clock.now += 3600
    await logger.write(responses.message(b"at 16"))
    assert responses.finished == [b"at 15"] and all(responses.on_disk_when_finished)
    await logger.close()
    logger.shutdown()
    assert names(tmp_path) == ["t.15.log", "t.16.log"]
    assert read_all(tmp_path) == [b"at 15\n", b"at 16\n"]


async def test_rotation_by_size_leaves_each_file_at_most_one_line_over(tmp_path: Path) -> None:
    responses = Responses(tmp_path)
    logger = FileLogger("[t/c]", settings(tmp_path, rotate_size=25), Clock())
    lines = [b"message %02d" % n for n in range(10)]  # 11 bytes with the newline
    for line in lines:
        await logger.write(responses.message(line))
    await logger.close()
    logger.shutdown()
    assert names(tmp_path) == ["t-000000.15.log", "t-000001.15.log", "t-000002.15.log", "t-000003.15.log"]
    assert b"".join(read_all(tmp_path)) == b"".join(line + b"\n" for line in lines)
    assert all(len(data) <= 25 + 11 for data in read_all(tmp_path))
    assert responses.finished == lines and all(responses.on_disk_when_finished)


async def test_rotation_by_interval_with_exclusive_files(tmp_path: Path) -> None:
    responses, clock = Responses(tmp_path), Clock()
    (tmp_path / "t-000000.15.log").write_bytes(b"from before\n")  # a new file is never appended to
    logger = FileLogger("[t/c]", settings(tmp_path, rotate_interval=60.0), clock)
    await logger.write(responses.message(b"first"))
    clock.now += 61
    await logger.write(responses.message(b"second"))
    await logger.close()
    logger.shutdown()
    assert read_all(tmp_path) == [b"from before\n", b"first\n", b"second\n"]


async def test_an_existing_file_is_appended_to_unless_it_is_over_the_size(tmp_path: Path) -> None:
    (tmp_path / "t-000000.15.log").write_bytes(b"x" * 30 + b"\n")
    (tmp_path / "t-000001.15.log").write_bytes(b"old\n")
    logger = FileLogger("[t/c]", settings(tmp_path, rotate_size=25), Clock())
    await logger.write(Responses(tmp_path).message(b"new"))
    await logger.close()
    logger.shutdown()
    assert read_all(tmp_path) == [b"x" * 30 + b"\n", b"old\nnew\n"]


async def test_the_ticker_rotates_and_syncs(tmp_path: Path) -> None:
    responses, clock = Responses(tmp_path), Clock()
    logger = FileLogger("[t/c]", settings(tmp_path), clock)
    await logger.tick()  # NSQ opens a file on the first tick, even before any message
    assert names(tmp_path) == ["t-000000.15.log"]
    await logger.write(responses.message(b"one"))
    clock.now += 3600
    await logger.tick()
    assert responses.finished == [b"one"]
    assert names(tmp_path) == ["t-000000.15.log", "t-000000.16.log"]
    await logger.close()
    logger.shutdown()


async def test_skip_empty_files_only_closes_on_the_ticker(tmp_path: Path) -> None:
    responses, clock = Responses(tmp_path), Clock()
    logger = FileLogger("[t/c]", settings(tmp_path, skip_empty_files=True), clock)
    await logger.tick()
    assert names(tmp_path) == []
    await logger.write(responses.message(b"one"))
    clock.now += 3600
    await logger.tick()
    assert responses.finished == [b"one"]
    assert names(tmp_path) == ["t-000000.15.log"]  # closed; nothing opened for 16 until a message comes
    await logger.close()
    logger.shutdown()


async def test_close_then_write_takes_the_next_rev(tmp_path: Path) -> None:
    responses = Responses(tmp_path)
    logger = FileLogger("[t/c]", settings(tmp_path, gzip_level=1), Clock())
    await logger.write(responses.message(b"before"))
    await logger.close()  # as on SIGHUP
    await logger.write(responses.message(b"after"))
    await logger.close()
    logger.shutdown()
    assert names(tmp_path) == ["t-000000.15.log", "t-000001.15.log"]
    assert read_all(tmp_path) == [b"before\n", b"after\n"]


async def test_gzip_writes_a_member_per_sync(tmp_path: Path) -> None:
    responses = Responses(tmp_path)
    logger = FileLogger("[t/c]", settings(tmp_path, gzip_level=9), Clock())
    for n in range(3):
        await logger.write(responses.message(b"batch %d" % n))
        await logger.sync()
    await logger.close()
    logger.shutdown()
    data = (tmp_path / "t-000000.15.log").read_bytes()
    assert data.count(b"\x1f\x8b\x08") == 3
    assert gzip.decompress(data) == b"batch 0\nbatch 1\nbatch 2\n"
    assert all(responses.on_disk_when_finished)


async def test_work_dir_files_move_to_the_output_dir_without_overwriting(tmp_path: Path) -> None:
    work, output = tmp_path / "work", tmp_path / "out"
    output.mkdir()
    (output / "t-000000.15.log").write_bytes(b"taken before\n")
    responses = Responses(tmp_path)
    logger = FileLogger("[t/c]", settings(output, work), Clock())
    await logger.write(responses.message(b"one"))
    assert names(work) == ["t-000001.15.log"]  # the output name was checked up front
    (output / "t-000001.15.log").write_bytes(b"taken meanwhile\n")
    await logger.close()
    logger.shutdown()
    assert names(work) == []
    assert names(output) == ["t-000000.15.log", "t-000001.15.log", "t-000002.15.log"]
    assert (output / "t-000002.15.log").read_bytes() == b"one\n"


async def test_subdirectories_in_the_name_are_created(tmp_path: Path) -> None:
    logger = FileLogger("[t/c]", settings(tmp_path, fmt="<DATETIME>/t.log", datetime_format="%Y/%m"), Clock())
    await logger.write(Responses(tmp_path).message(b"one"))
    await logger.close()
    logger.shutdown()
    assert names(tmp_path) == ["2026/03/t.log"]


async def test_a_failed_file_operation_breaks_the_logger(tmp_path: Path) -> None:
    (tmp_path / "blocked").write_bytes(b"a file where a directory should be")
    responses = Responses(tmp_path)
    logger = FileLogger("[t/c]", settings(tmp_path, fmt="blocked/t.log"), Clock())
    with pytest.raises(ArchiveError, match=r"^\[t/c\] unable to open file: "):
        await logger.write(responses.message(b"one"))
    with pytest.raises(ArchiveError):
        await logger.sync()
    logger.shutdown()
    assert responses.finished == []


def test_output_file_open_skips_names_taken_in_the_output_dir(tmp_path: Path) -> None:
    work, output = tmp_path / "w", tmp_path / "o"
    output.mkdir()
    for rev in range(2):
        (output / with_rev("f<REV>", rev)).touch()
    opened = OutputFile.open(Placement(str(work), str(output), True, 0, None), "f<REV>", 0, "[t/c]")
    try:
        assert (opened.rev, opened.path) == (2, str(work / "f-000002"))
    finally:
        assert opened.close(b"") == str(output / "f-000002")
    assert not os.listdir(work)


def test_a_taken_name_without_rev_is_an_error_not_a_loop(tmp_path: Path) -> None:
    work, output = tmp_path / "w", tmp_path / "o"
    output.mkdir()
    (output / "f.log").touch()
    with pytest.raises(FileExistsError):
        OutputFile.open(Placement(str(work), str(output), False, 0, None), "f.log", 0, "[t/c]")
