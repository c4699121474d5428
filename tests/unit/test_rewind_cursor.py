"""A rewind's cursor over a topic's retention files (rewind_cursor.py) and what the log answers it
(retention_log.py's ``counter``, ``first_from`` and ``read_at``)."""

from __future__ import annotations

import time
from pathlib import Path

from services.nsqd.options import Options
from services.nsqd.retention import RetainedTopic, Retention
from services.nsqd.retention_log import RetentionLog
from services.nsqd.rewind_cursor import NO_REWIND, RewindCursor, RewindPosition


def entries(first: int, count: int, timestamp: int) -> list[tuple[bytes, bytes, int, int]]:
    return [(b"%016d" % number, b"body %d" % number, timestamp + number, 0) for number in range(first, first + count)]


def empty_retained_topic(tmp_path: Path, max_bytes_per_file: int = 100 << 20) -> RetainedTopic:
    retention = Retention(tmp_path, Options(retention_time=3600, max_bytes_per_file=max_bytes_per_file))
    retention.topic("t")
    return retention.topics["t"]


def retained_topic(tmp_path: Path, now: int, files: int = 3, per_file: int = 10) -> RetainedTopic:
    """``files`` files of ``per_file`` messages each, numbered from 0, published a nanosecond apart from ``now``."""
    retained = empty_retained_topic(tmp_path, max_bytes_per_file=100)
    for file in range(files):
        retained.published(False, 0, entries(file * per_file, per_file, now))
    return retained


def cursor_from(retained: RetainedTopic, since_ns: int, skip: set[bytes] | None = None,
                limit: int | None = None) -> RewindCursor:
    end = retained.log.end()
    start = retained.log.start_of(since_ns, end)
    assert start is not None
    return RewindCursor(retained, RewindPosition(since_ns, end.number, end.size, *start, 30, 1 << 62), skip or set(), limit)


def take_all(cursor: RewindCursor, batch: int = 4) -> list[bytes]:
    taken: list[bytes] = []
    while not cursor.done:
        queued, deferred = cursor.take(batch)
        assert not deferred
        taken += [entry[0] for entry in queued]
    return taken


def ids(numbers: range | list[int]) -> list[bytes]:
    return [b"%016d" % number for number in numbers]


def test_the_count_since_a_moment_reads_only_the_file_that_straddles_it(tmp_path: Path) -> None:
    now = time.time_ns()
    retained = retained_topic(tmp_path, now)
    log, end = retained.log, retained.log.end()
    assert [log.counter(now + since, end)() for since in (0, 10, 15, 29, 30)] == [30, 20, 15, 1, 0]
    assert (log.start_of(now, end), log.start_of(now + 15, end), log.start_of(now + 30, end)) == ((1, 0), (2, 0), None)
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
    assert cursor.take(4) == ([], [])
    retained.log.close()


def test_what_expired_under_a_cursor_is_skipped_and_a_deferred_publish_keeps_its_due_time(tmp_path: Path) -> None:
    now = time.time_ns()
    retained = retained_topic(tmp_path, now)
    retained.published(False, 5_000, entries(30, 1, now))  # a DPUB, due 5 s after it was published
    cursor = cursor_from(retained, now)
    queued, _ = cursor.take(4)
    assert [entry[0] for entry in queued] == ids(range(4))
    # the first two files go while the cursor is in the first: what it read ahead of that one still comes
    assert retained.log.expire(now + 20, 0) == 20
    rest: list[bytes] = []
    deferred: list[tuple[tuple[bytes, bytes, int, int], int]] = []
    while not cursor.done:
        more, later = cursor.take(4)
        rest += [entry[0] for entry in more]
        deferred += later
    assert rest == ids(list(range(4, 10)) + list(range(20, 30)))
    assert [(entry[0], due) for entry, due in deferred] == [(ids([30])[0], now + 30 + 5_000_000_000)]
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
    assert [entry[0] for entry in earlier.take(12)[0]] == ids(range(12))  # into the second file
    later = cursor_from(retained, now + 25, skip=set(ids([26])))
    merged = later.merged(earlier)
    assert take_all(merged) == ids([n for n in range(12, 30) if n != 26])
    assert later.merged(NO_REWIND) is later
    retained.log.close()


def test_a_position_is_kept_as_a_list_of_numbers() -> None:
    position = RewindPosition(1_796_112_000_000_000_000, 3, 4096, 2, 128, 500, 1_796_112_001_000_000_000)
    assert RewindPosition.from_document(position.document()) == position


def test_the_count_of_a_file_larger_than_its_read_chunk_skips_bodies_across_chunks(tmp_path: Path) -> None:
    retained = empty_retained_topic(tmp_path)
    now = time.time_ns()
    for number in range(40):  # 100 KB bodies: a 4 MB file, records straddling its 1 MB read chunks
        retained.published(False, 0, [(b"%016d" % number, b"x" * (100_000 + number), now + number, 0)])
    end = retained.log.end()
    assert [retained.log.counter(now + since, end)() for since in (0, 1, 17, 39, 40)] == [40, 39, 23, 1, 0]
    retained.log.close()


def test_a_cursor_that_took_its_last_message_is_done_at_once(tmp_path: Path) -> None:
    """Not at the next take: a rewind asked after it must not merge with it."""
    now = time.time_ns()
    retained = retained_topic(tmp_path, now)
    cursor = cursor_from(retained, now)
    assert len(cursor.take(30)[0]) == 30
    assert cursor.done and cursor.remaining == 0
    later = cursor_from(retained, now + 25)
    assert later.merged(cursor) is later
    retained.log.close()


def test_a_moment_in_a_file_written_in_order_is_found_from_its_marks(tmp_path: Path) -> None:
    retained = empty_retained_topic(tmp_path)
    now = time.time_ns()
    for publish in range(100):  # 100 MPUBs of 100, each its own timestamp
        retained.published(False, 0, [(b"%016d" % (publish * 100 + n), b"body", now + publish, 0) for n in range(100)])
    log, end = retained.log, retained.log.end()
    assert [log.counter(now + since, end)() for since in (0, 1, 41, 99, 100)] == [10_000, 9_900, 5_900, 100, 0]
    start = log.start_of(now + 81, end)
    assert start is not None and start[1] > 0  # from the mark before message 8,100, not the file's start
    cursor = RewindCursor(retained, RewindPosition(now + 81, end.number, end.size, *start, 1900, 1 << 62), set())
    assert take_all(cursor, batch=500) == ids(range(8100, 10_000))
    # a file with history taken over from another nsqd is not in order: it is read whole
    retained.take_history([((b"%016d" % 10_000, b"old", now - 5, 0), 0)])
    end = log.end()
    assert log.counter(now + 41, end)() == 5_900 and log.start_of(now + 41, end) == (1, 0)
    log.close()
    reopened = RetentionLog("t", tmp_path, 1024)  # marks and order found again at start-up
    assert reopened.counter(now + 41, reopened.end())() == 5_900 and reopened.start_of(now + 41, end) == (1, 0)
    reopened.close()


def test_what_was_published_after_the_rewind_was_asked_is_left_out(tmp_path: Path) -> None:
    """Even where a file's number came round again or a power cut took back a file's end: the moment decides."""
    now = time.time_ns()
    retained = retained_topic(tmp_path, now)
    end = retained.log.end()
    cursor = RewindCursor(retained, RewindPosition(now, end.number, end.size, 1, 0, 15, now + 14), set())
    assert take_all(cursor) == ids(range(15))
    retained.log.close()


def test_history_in_no_order_written_to_an_empty_file_is_counted_exactly(tmp_path: Path) -> None:
    retained = empty_retained_topic(tmp_path)
    now = time.time_ns()
    retained.take_history([((b"%016d" % n, b"old", now + stamp, 0), 0) for n, stamp in enumerate((5, 1, 3))])
    assert retained.log.counter(now + 2, retained.log.end())() == 2
    retained.log.close()


def test_file_numbers_never_come_round_again_while_nsqd_runs(tmp_path: Path) -> None:
    now = time.time_ns()
    retained = retained_topic(tmp_path, now)
    assert retained.log.expire(now + 1_000, 0) == 30  # every file gone
    retained.published(False, 0, entries(30, 1, now + 2_000))
    assert retained.log.end().number == 4
    retained.log.close()
