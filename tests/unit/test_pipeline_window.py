"""The nsq source's window: max_in_flight messages, fitted to max_bytes_in_flight at the messages' running mean
size, and cut into shares over connections that each stay within nsqd's default --max-rdy-count."""

from __future__ import annotations

from nsqspark.window import ASSUMED_SIZE, WindowSizer, connection_sets, shares

MiB = 1024 * 1024


def test_starts_as_if_messages_were_as_large_as_nsqd_allows() -> None:
    assert WindowSizer(100_000, 64 * MiB).window == 64 * MiB // ASSUMED_SIZE == 64
    assert WindowSizer(10, 64 * MiB).window == 10
    assert WindowSizer(100_000, 1000).window == 1  # never nothing at all


def test_small_messages_open_the_whole_window() -> None:
    sizer = WindowSizer(100_000, 64 * MiB)
    assert sizer.observe(200) == 100_000
    assert all(sizer.observe(200) is None for _ in range(1000))


def test_large_messages_keep_it_to_the_byte_budget() -> None:
    sizer = WindowSizer(100_000, 64 * MiB)
    assert sizer.observe(512 * 1024) == 128
    sizer = WindowSizer(100_000, 64 * MiB)
    sizer.observe(200)
    changes = [window for _ in range(2000) if (window := sizer.observe(256 * 1024)) is not None]
    assert changes and changes[-1] == sizer.window
    assert 256 <= sizer.window <= 290  # the running mean has nearly reached 256 KiB
    assert sizer.window * sizer.mean_size <= 64 * MiB * 1.1


def test_changes_under_a_tenth_are_not_made() -> None:
    sizer = WindowSizer(100_000, 10 * MiB)
    sizer.observe(1000)
    window = sizer.window
    assert sizer.observe(1050) is None and sizer.window == window


def test_connection_sets_and_shares() -> None:
    assert connection_sets(100_000) == 40
    assert (connection_sets(2500), connection_sets(2501), connection_sets(1)) == (1, 2, 1)
    assert connection_sets(7000, per_connection=2000) == 4
    assert shares(100_000, 40) == [2500] * 40
    assert shares(5001, 3) == [1667, 1667, 1667]
    assert shares(3, 5) == [1, 1, 1, 0, 0]
    for total in (1, 64, 2499, 99_999):
        parts = shares(total, connection_sets(100_000))
        assert sum(parts) == total and max(parts) - min(parts) <= 1
