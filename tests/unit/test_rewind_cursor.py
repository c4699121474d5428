"""A rewind's cursor over a topic's retention files (rewind_cursor.py) and what the log answers it
(retention_log.py's ``counter``, ``first_from`` and ``read_at``)."""

from __future__ import annotations

import time
from pathlib import Path

from services.nsqd.options import Options
from services.nsqd.retention import RetainedTopic, Retention
from services.nsqd.rewind_cursor import RewindCursor, RewindPosition


def entries(first: int, count: int, timestamp: int) -> list[tuple[bytes, bytes, int, int]]:
    return [(b"%016d" % number, b"body %d" % number, timestamp + number, 0) for number in range(first, first + count)]


def retained_topic(tmp_path: Path, now: int, files: int = 3, per_file: int = 10) -> RetainedTopic:
    """``files`` files of ``per_file`` messages each, numbered from 0, published a nanosecond apart from ``now``."""
    retention = Retention(tmp_path, Options(retention_time=3600, max_bytes_per_file=100))
    retention.topic("t")
    retained = retention.topics["t"]
    for file in range(files):
        retained.published(False, 0, entries(file * per_file, per_file, now))
    return retained


def cursor_from(retained: RetainedTopic, since_ns: int, skip: set[bytes] | None = None,
                limit: int | None = None) -> RewindCursor:
    end = retained.log.end()
    first = retained.log.first_from(since_ns, end)
    assert first is not None
    return RewindCursor(retained, RewindPosition(since_ns, end.number, end.size, first, 0, 30), skip or set(), limit)


def take_all(cursor: RewindCursor, batch: int = 4) -> list[bytes]:
    taken: list[bytes] = []
    while not cursor.done:
        taken += [entry[0] for entry, _ in cursor.take(batch)]
    return taken


def ids(numbers: range | list[int]) -> list[bytes]:
    return [b"%016d" % number for number in numbers]


def test_the_count_since_a_moment_reads_only_the_file_that_straddles_it(tmp_path: Path) -> None:
    now = time.time_ns()
    retained = retained_topic(tmp_path, now)
    log, end = retained.log, retained.log.end()
    assert [log.counter(now + since, end)() for since in (0, 10, 15, 29, 30)] == [30, 20, 15, 1, 0]
    assert (log.first_from(now, end), log.first_from(now + 15, end), log.first_from(now + 30, end)) == (1, 2, None)
    retained.published(False, 0, entries(30, 5, now))
    assert log.counter(now, end)() == 30  # up to the end asked, not what came since
    log.close()


def test_a_cursor_reads_in_order_from_its_moment_to_its_end_leaving_out_what_is_pending(tmp_path: Path) -> None:
    now = time.time_ns()
    retained = retained_topic(tmp_path, now)
    cursor = cursor_from(retained, now + 5, skip=set(ids([7, 21])))
    retained.published(False, 0, entries(30, 5, now))  # after the rewind was asked: not put back
    assert take_all(cursor) == ids([n for n in range(5, 30) if n not in (7, 21)])
    assert cursor.remaining == 0
    assert cursor.take(4) == []
    retained.log.close()


def test_what_expired_under_a_cursor_is_skipped_and_a_deferred_publish_keeps_its_due_time(tmp_path: Path) -> None:
    now = time.time_ns()
    retained = retained_topic(tmp_path, now)
    retained.published(False, 5_000, entries(30, 1, now))  # a DPUB, due 5 s after it was published
    cursor = cursor_from(retained, now)
    first = cursor.take(4)
    assert [entry[0] for entry, _ in first] == ids(range(4))
    assert retained.log.expire(now + 20, 0) == 20  # the first two files go while the cursor is in the first
    rest = []
    while not cursor.done:
        rest += cursor.take(4)
    assert [entry[0] for entry, _ in rest] == ids(range(20, 31))
    assert rest[-1][1] == now + 30 + 5_000_000_000 and {due for _, due in rest[:-1]} == {0}
    retained.log.close()


def test_an_ephemeral_channels_cursor_stops_at_its_limit(tmp_path: Path) -> None:
    now = time.time_ns()
    retained = retained_topic(tmp_path, now)
    cursor = cursor_from(retained, now, limit=6)
    assert take_all(cursor, batch=4) == ids(range(6))
    retained.log.close()


def test_a_rewind_asked_while_another_is_under_way_goes_on_from_the_earlier_of_the_two(tmp_path: Path) -> None:
    now = time.time_ns()
    retained = retained_topic(tmp_path, now)
    earlier = cursor_from(retained, now)
    assert [entry[0] for entry, _ in earlier.take(12)] == ids(range(10))  # one file at a time
    later = cursor_from(retained, now + 25, skip=set(ids([26])))
    merged = later.merged(earlier)
    assert take_all(merged) == ids([n for n in range(10, 30) if n != 26])
    assert later.merged(None) is later
    retained.log.close()


def test_a_position_is_kept_as_a_list_of_numbers() -> None:
    position = RewindPosition(1_796_112_000_000_000_000, 3, 4096, 2, 128, 500)
    assert RewindPosition.from_document(position.document()) == position
