from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import aiosqlite
import pytest

from services.admin.history import History, Sample, keep_last_per_bucket, rates, samples_from_stats
from services.admin.store import SCHEMA_VERSION, StoreError, open_store

REFERENCE = Path(__file__).parent.parent / "reference"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[aiosqlite.Connection]:
    connection = await open_store(str(tmp_path / "admin.db"))
    yield connection
    await connection.close()


def test_samples_from_the_reference_topic() -> None:
    topic = json.loads((REFERENCE / "nsqadmin_api_topic.json").read_text())
    assert samples_from_stats([topic]) == [("sample_topic", "", 0, 14, 0),
                                           ("sample_topic", "sample_channel", 0, 14, 0)]


def test_topic_in_flight_is_the_sum_of_its_channels() -> None:
    topic = {"topic_name": "t", "depth": 7, "message_count": 100, "channels": [
        {"channel_name": "a", "depth": 3, "message_count": 90, "in_flight_count": 2},
        {"channel_name": "b", "depth": 4, "message_count": 80, "in_flight_count": 5}]}
    bare = {"topic_name": "u", "depth": 1, "message_count": 1, "channels": []}
    assert samples_from_stats([topic, bare]) == [("t", "", 7, 100, 7), ("t", "a", 3, 90, 2), ("t", "b", 4, 80, 5),
                                                 ("u", "", 1, 1, 0)]


def test_rates_skip_a_counter_reset() -> None:
    samples = [Sample(0.0, 0, 100, 0), Sample(10.0, 0, 150, 0), Sample(20.0, 0, 30, 0), Sample(30.0, 0, 50, 0),
               Sample(30.0, 0, 60, 0), Sample(35.0, 0, 60, 0)]
    assert rates(samples) == [(10.0, 5.0), (30.0, 2.0), (35.0, 0.0)]
    assert rates([]) == [] and rates(samples[:1]) == []


async def test_record_series_prune(store: aiosqlite.Connection) -> None:
    history = History(store)
    await history.record(10.0, [("t", "", 5, 100, 1), ("t", "c", 2, 90, 1)])
    await history.record(20.0, [("t", "", 6, 120, 0), ("t", "c", 3, 95, 0), ("u", "", 0, 1, 0)])
    assert await history.series("t", "", 0.0) == [Sample(10.0, 5, 100, 1), Sample(20.0, 6, 120, 0)]
    assert await history.series("t", "c", 15.0) == [Sample(20.0, 3, 95, 0)]
    assert await history.series("missing", "", 0.0) == []
    assert await history.prune(20.0) == 2
    assert await history.series("t", "", 0.0) == [Sample(20.0, 6, 120, 0)]
    assert await history.prune(20.0) == 0


async def test_a_days_series_is_downsampled_keeping_the_newest(store: aiosqlite.Connection) -> None:
    history = History(store)
    await store.executemany("INSERT INTO samples VALUES (?, 't', '', 0, ?, 0)", [(i * 10.0, i) for i in range(8640)])
    await store.commit()
    series = await history.series("t", "", 0.0, max_points=360)
    assert 300 < len(series) <= 360
    assert series[-1] == Sample(86390.0, 0, 8639, 0)
    assert [s.ts for s in series] == sorted(s.ts for s in series)
    # each bucket keeps its last sample, so the rate through the buckets is still 0.1 message/s
    assert {round(rate, 9) for _, rate in rates(series)} == {0.1}
    assert len(await history.series("t", "", 86000.0, max_points=360)) == 40
    assert await history.series("t", "", 0.0, max_points=1) == [Sample(86390.0, 0, 8639, 0)]
    with pytest.raises(ValueError):
        await history.series("t", "", 0.0, max_points=0)


async def test_deepest_channel_is_the_slowest_channels_backlog_at_each_sample(store: aiosqlite.Connection) -> None:
    history = History(store)
    await history.record(10.0, [("t", "", 0, 5, 0), ("t", "fast", 1, 5, 0), ("t", "slow", 4, 5, 0),
                                ("other", "deep", 99, 9, 0)])
    await history.record(20.0, [("t", "", 7, 9, 0), ("t", "fast", 12, 9, 0), ("t", "slow", 8, 9, 0)])
    await history.record(30.0, [("t", "", 0, 9, 0)])  # no channels then: no point
    assert await history.deepest_channel("t", 0.0) == [(10.0, 4.0), (20.0, 12.0)]  # not the topic's own depth
    assert await history.deepest_channel("t", 15.0) == [(20.0, 12.0)]
    assert await history.deepest_channel("none", 0.0) == []


def test_thinning_keeps_each_buckets_last_point() -> None:
    points = [(float(ts), float(ts % 7)) for ts in range(100)]
    thinned = keep_last_per_bucket(points, 10)
    assert len(thinned) == 10 and thinned[-1] == points[-1]
    assert [ts for ts, _ in thinned] == [9.0, 19.0, 29.0, 39.0, 49.0, 59.0, 69.0, 79.0, 89.0, 99.0]
    assert keep_last_per_bucket(points[:5], 10) == points[:5]


async def test_samples_at_one_instant_downsample_to_one(store: aiosqlite.Connection) -> None:
    history = History(store)
    await history.record(5.0, [("t", "", i, i, 0) for i in range(5)])
    assert len(await history.series("t", "", 0.0, max_points=2)) == 1


async def test_reopening_keeps_the_data(tmp_path: Path) -> None:
    path = str(tmp_path / "admin.db")
    connection = await open_store(path)
    await History(connection).record(1.0, [("t", "", 1, 2, 3)])
    await connection.close()
    connection = await open_store(path)
    try:
        assert await History(connection).series("t", "", 0.0) == [Sample(1.0, 1, 2, 3)]
        async with connection.execute("PRAGMA user_version") as cursor:
            assert await cursor.fetchone() == (SCHEMA_VERSION,)
        async with connection.execute("PRAGMA journal_mode") as cursor:
            assert await cursor.fetchone() == ("wal",)
    finally:
        await connection.close()


async def test_a_garbage_file_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "admin.db"
    path.write_bytes(b"this is not an sqlite database\n" * 200)
    with pytest.raises(StoreError, match=f"cannot open {path}: file is not a database"):
        await open_store(str(path))


async def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "admin.db"
    with sqlite3.connect(path) as connection:
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    connection.close()
    with pytest.raises(StoreError, match="newer"):
        await open_store(str(path))


async def test_a_missing_data_path_is_created(tmp_path: Path) -> None:
    path = tmp_path / "not" / "yet" / "nsqadmin.db"
    connection = await open_store(str(path))
    await connection.close()
    assert path.is_file()


async def test_a_data_path_that_cannot_be_created_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("in the way")
    with pytest.raises(StoreError, match=r"cannot open .*a-file/nsqadmin.db: .*a-file is not a directory"):
        await open_store(str(tmp_path / "a-file" / "nsqadmin.db"))
    (tmp_path / "locked").mkdir(mode=0o500)
    if os.geteuid() != 0:  # root creates directories anywhere
        with pytest.raises(StoreError, match=r"cannot create .*locked/sub for .*: Permission denied"):
            await open_store(str(tmp_path / "locked" / "sub" / "nsqadmin.db"))


async def test_a_first_version_file_gains_the_audit_logs_identity(tmp_path: Path) -> None:
    from services.admin.audit import AuditEntry, AuditLog

    path = tmp_path / "admin.db"
    with sqlite3.connect(path) as connection:  # the audit table as the first schema made it, with an entry
        connection.execute("CREATE TABLE audit (id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, "
                           "user TEXT NOT NULL, remote_ip TEXT NOT NULL, user_agent TEXT NOT NULL, "
                           "action TEXT NOT NULL, topic TEXT NOT NULL, channel TEXT NOT NULL, node TEXT NOT NULL, result TEXT NOT NULL)")
        connection.execute("INSERT INTO audit VALUES (NULL, 1.0, 'ops', 'ip', 'ua', 'pause_topic', 't', '', '', 'ok')")
        connection.execute("PRAGMA user_version = 1")
    connection.close()
    store = await open_store(str(path))
    try:
        audit = AuditLog(store)
        await audit.record(AuditEntry(2.0, "ops", "ip", "ua", "empty_topic", "t", identity="admin-service"))
        assert [(entry.action, entry.identity) for entry in await audit.recent()] == [
            ("empty_topic", "admin-service"), ("pause_topic", "")]
    finally:
        await store.close()
