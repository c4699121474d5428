"""The pipeline's DataFrame transforms on a real local Spark session, from static frames."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from services.pipeline.message_rows import SCHEMA
from services.pipeline.transforms import event_counts, for_archive
from tests.spark import spark  # noqa: F401  (the fixture)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def frame(spark: SparkSession, rows: list[tuple[str, bytes, datetime]]) -> DataFrame:
    return spark.createDataFrame([(id_, body, ts, 1, "127.0.0.1:4150", "events") for id_, body, ts in rows],
                                 SCHEMA)


def at(hour: int, minute: int, second: int = 0) -> datetime:
    return datetime(2026, 11, 23, hour, minute, second, tzinfo=timezone.utc)


def test_archive_drops_redelivered_ids_and_adds_partition_columns(spark: SparkSession) -> None:
    messages = frame(spark, [("0a", b"first", at(9, 59)), ("0b", b"second", at(10, 1)),
                             ("0a", b"first", at(9, 59, 30))])  # "0a" delivered again
    rows = sorted(for_archive(messages, "10 minutes").collect(), key=lambda row: row.message_id)
    assert [(row.message_id, row.date, row.hour) for row in rows] == [("0a", "2026-11-23", 9),
                                                                       ("0b", "2026-11-23", 10)]


def test_event_counts_per_type_and_window(spark: SparkSession) -> None:
    events = [json.dumps({"type": kind}).encode() for kind in ("click", "click", "view")] + [b"not json"]
    messages = frame(spark, [(f"{index:02x}", body, at(10, index)) for index, body in enumerate(events)])
    counts = [json.loads(row.body) for row in event_counts(messages, "2 minutes", "1 minute").collect()]
    assert sorted(counts, key=lambda c: (c["window_start"], str(c.get("type")))) == [
        {"window_start": "2026-11-23T10:00:00Z", "window_end": "2026-11-23T10:02:00Z", "type": "click", "count": 2},
        {"window_start": "2026-11-23T10:02:00Z", "window_end": "2026-11-23T10:04:00Z", "count": 1},
        {"window_start": "2026-11-23T10:02:00Z", "window_end": "2026-11-23T10:04:00Z", "type": "view", "count": 1}]
