"""A topic's retention log on disk (retention_log.py), what a rewind's ``since`` means (rewind.py), and what the
retention recorder does when the disk is full (retention.py)."""

from __future__ import annotations

import os
import resource
import signal
import time
from pathlib import Path

import pytest

from services.nsqd.options import Options
from services.nsqd.recorder import NULL_TOPIC
from services.nsqd.retention import Retention, RetentionSettings
from services.nsqd.retention_log import RECORD_OVERHEAD, RetentionLog
from services.nsqd.rewind import parse_since

BIG = 1 << 30


def entries(first: int, count: int, timestamp: int) -> list[tuple[bytes, bytes, int, int]]:
    return [(b"%016d" % number, b"body %d" % number, timestamp + number, 0) for number in range(first, first + count)]


def read_all(log: RetentionLog, since_ns: int = 0) -> list[tuple[tuple[bytes, bytes, int, int], int]]:
    return [item for batch in log.read_since(since_ns, log.end()) for item in batch]


def test_what_is_appended_is_read_back_in_order_from_a_moment_on(tmp_path: Path) -> None:
    log = RetentionLog("t", tmp_path, 1024)
    log.append(entries(0, 3, 1000), 0, BIG, BIG)
    log.append(entries(3, 2, 1000), 5000, BIG, BIG)  # a deferred publish: its due time is kept
    assert read_all(log) == [(entry, 0) for entry in entries(0, 3, 1000)] + [
        (entry, 5000) for entry in entries(3, 2, 1000)]
    assert [entry[0][1] for entry in read_all(log, 1003)] == [b"body 3", b"body 4"]
    assert (log.count, log.oldest_ns) == (5, 1000)
    assert log.size == sum(RECORD_OVERHEAD + len(b"body %d" % n) for n in range(5))
    end = log.end()
    log.append(entries(5, 1, 1000), 0, BIG, BIG)
    assert len([item for batch in log.read_since(0, end) for item in batch]) == 5  # up to the moment asked
    log.close()


def test_files_roll_by_size_and_by_age_and_expire_whole(tmp_path: Path) -> None:
    log = RetentionLog("t", tmp_path, 1024)
    log.append(entries(0, 10, 1_000), 0, 100, BIG)  # past 100 bytes: the next append starts a file
    log.append(entries(10, 10, 2_000), 0, 100, BIG)
    log.append(entries(20, 1, 2_100), 0, BIG, 50)  # the write file's first message is 100 ns older: it rolls
    assert [path.name for path in sorted(tmp_path.iterdir())] == [
        "t.retention.000001.dat", "t.retention.000002.dat", "t.retention.000003.dat"]
    assert log.expire(1_010, 0) == 10  # the first file's newest message (1,009) is older
    assert log.count == 11
    assert log.expire(0, log.size - 1) == 10  # the oldest file while more than the bytes are kept
    assert log.expire(0, 1) == 0  # the last file stays for its byte limit alone
    # a removed file, rolled and not yet synced, is closed too: its space comes back at once
    assert not [path for path in open_files() if path.startswith(str(tmp_path)) and path.endswith("(deleted)")]
    log.close()


def open_files() -> list[str]:
    """What this process's descriptors are open on."""
    paths = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            paths.append(os.readlink(f"/proc/self/fd/{fd}"))
        except FileNotFoundError:  # the listing's own
            pass
    return paths


def test_a_restart_counts_what_is_on_disk_and_cuts_a_torn_record(tmp_path: Path) -> None:
    log = RetentionLog("t", tmp_path, 1024)
    log.append(entries(0, 4, 7_000), 0, BIG, BIG)
    log.close()
    path = tmp_path / "t.retention.000001.dat"
    whole = path.stat().st_size
    with open(path, "ab") as file:
        file.write(b"\x00\x00\x00\x40partial")  # a record cut short by kill -9
    again = RetentionLog("t", tmp_path, 1024)
    assert (again.count, again.size, again.oldest_ns, path.stat().st_size) == (4, whole, 7_000, whole)
    again.append(entries(4, 1, 8_000), 0, BIG, BIG)
    assert [entry[0][1] for entry in read_all(again)] == [b"body %d" % n for n in range(5)]
    again.delete()
    assert list(tmp_path.iterdir()) == []


def test_a_write_refused_for_another_reason_than_room_is_not_retained_and_the_publish_goes_on(
        tmp_path: Path) -> None:
    """(A full disk, which removes the oldest retained files first, is tests/functional/test_full_disk.py's.)"""
    retention = Retention(tmp_path, Options(retention_time=3600))
    recorder = retention.topic("t")
    assert recorder is not NULL_TOPIC
    now = time.time_ns()
    recorder.published(False, 0, entries(0, 5, now))
    log = retention.topics["t"].log
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (log.size, limit[1]))  # a file size limit: EFBIG
    try:
        assert recorder.published(False, 0, entries(5, 1, now)) is None
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
        signal.signal(signal.SIGXFSZ, previous)
    assert (log.count, retention.topics["t"].refused_count) == (5, 1)
    assert retention.stats("t")["retention_refused_count"] == 1
    recorder.published(False, 0, entries(6, 1, now))
    assert [entry[0][0] for entry in read_all(log)][-1] == b"%016d" % 6  # nothing torn left behind
    log.close()


def test_settings_of_a_topic_its_own_or_the_flags() -> None:
    retention = Retention(None, Options(retention_time=60, retention_bytes=10))
    assert retention.settings("t") == (60, 10)
    retention.set("t", RetentionSettings(time=0))
    assert retention.settings("t") == (0, 10)
    assert retention.topic("t") is NULL_TOPIC
    assert retention.topic("e#ephemeral") is NULL_TOPIC
    retention.set("t", RetentionSettings())
    assert retention.own == {}


@pytest.mark.parametrize(("text", "expected"), [
    ("earliest", 0),
    ("2026-12-01T08:00:00Z", 1_796_112_000_000_000_000),
    ("2026-12-01t08:00:00z", 1_796_112_000_000_000_000),
    ("2026-12-01T08:00:00.123456789Z", 1_796_112_000_123_456_789),
    ("2026-12-01T10:00:00.5+02:00", 1_796_112_000_500_000_000),
    ("30m", 1_796_112_000_000_000_000 - 1_800_000_000_000),
])
def test_a_since_is_earliest_a_time_or_a_duration_before_now(text: str, expected: int) -> None:
    assert parse_since(text, 1_796_112_000_000_000_000) == expected


@pytest.mark.parametrize("text", ["", "yesterday", "-1h", "2026-12-01", "2026-12-01T08:00:00", "2026-13-01T08:00:00Z",
                                  "1e400h"])
def test_anything_else_is_not_a_since(text: str) -> None:
    with pytest.raises((ValueError, OverflowError)):
        parse_since(text, 0)


def test_a_full_disk_takes_the_oldest_retained_files_of_any_topic_first(tmp_path: Path) -> None:
    retention = Retention(tmp_path, Options(retention_time=3600, max_bytes_per_file=100))
    now = time.time_ns()
    for topic, start in (("a", now + 10), ("b", now), ("a", now + 20), ("b", now + 30)):
        retention.topic(topic).published(False, 0, entries(0, 5, start))
    assert retention.reclaim(1)  # b's first file is the oldest
    assert [retention.topics[name].log.oldest_ns for name in ("a", "b")] == [now + 10, now + 30]
    assert retention.reclaim(1 << 20)  # as much as there is
    assert not retention.reclaim(1)
    assert [retention.topics[name].log.count for name in ("a", "b")] == [0, 0]


def test_files_an_earlier_process_left_go_when_their_topic_does_not_retain(tmp_path: Path) -> None:
    log = RetentionLog("old", tmp_path, 1024)
    log.append(entries(0, 2, 5), 0, BIG, BIG)
    log.close()
    (tmp_path / "other.diskqueue.000000.dat").write_bytes(b"")
    retention = Retention(tmp_path, Options())  # retention off
    assert retention.topic("new") is NULL_TOPIC
    assert (tmp_path / "old.retention.000001.dat").exists()  # another topic's: kept
    assert retention.topic("old") is NULL_TOPIC
    assert [path.name for path in tmp_path.iterdir()] == ["other.diskqueue.000000.dat"]
