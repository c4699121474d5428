"""The pipeline's DataFrame transforms on a real local Spark session, from static frames, and the archive's
deduplication as a streaming query on a checkpoint it wrote before its key changed."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa  # type: ignore[import-untyped]  # no stubs or py.typed
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
from pyspark.sql import functions as F

from nsqspark.message_rows import ARROW_SCHEMA, SCHEMA
from services.pipeline.transforms import event_counts, for_archive
from tests.functional.spark import spark  # noqa: F401  (the fixture)

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


def test_archive_tells_equal_ids_apart_by_nsqd_and_topic(spark: SparkSession) -> None:
    """Two nsqd at one node ID hand out equal IDs, and so do two topics of one nsqd: each is its own message. The
    same nsqd delivering an ID of a topic again is a redelivery."""
    rows = [("0a", b"first", "127.0.0.1:4150", "events"), ("0a", b"other nsqd", "127.0.0.1:4250", "events"),
            ("0a", b"other topic", "127.0.0.1:4150", "clicks"), ("0a", b"first", "127.0.0.1:4150", "events")]
    messages = spark.createDataFrame([(id_, body, at(10, 0), 1, address, topic) for id_, body, address, topic in rows],
                                     SCHEMA)
    archived = for_archive(messages, "10 minutes").collect()
    assert sorted(row.body for row in archived) == [b"first", b"other nsqd", b"other topic"]
    assert archived[0].asDict().keys() == {*SCHEMA.fieldNames(), "date", "hour"}


@pytest.mark.timeout(180)
def test_the_archive_goes_on_from_a_checkpoint_keyed_by_message_id_alone(spark: SparkSession, tmp_path: Path) -> None:
    """An archive query whose deduplication state was keyed by the message ID alone (as it was before IDs were
    told apart by nsqd and topic) goes on from its checkpoint with ``for_archive``: the state's key is one string
    either way, which Spark accepts; three key columns it would refuse (STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE)."""
    source, output, checkpoint = tmp_path / "source", tmp_path / "archive", tmp_path / "checkpoint"
    source.mkdir()

    def arrive(name: str, rows: list[tuple[str, bytes, str]]) -> None:
        columns = list(zip(*[(id_, body, 0, 1, address, "events") for id_, body, address in rows]))
        pq.write_table(pa.Table.from_arrays([pa.array(column) for column in columns], schema=ARROW_SCHEMA),
                       source / f"{name}.parquet")

    def archive(by_id_alone: bool) -> None:
        messages = spark.readStream.schema(SCHEMA).parquet(str(source))
        if by_id_alone:
            archived = (messages.withColumn("_read_at", F.current_timestamp()).withWatermark("_read_at", "10 minutes")
                        .dropDuplicatesWithinWatermark(["message_id"]).drop("_read_at")
                        .withColumn("date", F.lit("1970-01-01")).withColumn("hour", F.lit(0)))
        else:
            archived = for_archive(messages, "10 minutes")
        query = (archived.writeStream.format("parquet").option("path", str(output))
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        try:
            assert query.awaitTermination(60), "the query did not end"
        finally:
            query.stop()
        assert query.exception() is None

    arrive("1", [("0a", b"before", "127.0.0.1:4150")])
    archive(by_id_alone=True)
    arrive("2", [("0b", b"after", "127.0.0.1:4150"), ("0b", b"after, other nsqd", "127.0.0.1:4250"),
                 ("0b", b"after", "127.0.0.1:4150")])  # delivered again by the same nsqd
    archive(by_id_alone=False)
    bodies = sorted(row.body for row in spark.read.parquet(str(output)).collect())
    assert bodies == [b"after", b"after, other nsqd", b"before"]


def test_event_counts_per_type_and_window(spark: SparkSession) -> None:
    events = [json.dumps({"type": kind}).encode() for kind in ("click", "click", "view")] + [b"not json"]
    messages = frame(spark, [(f"{index:02x}", body, at(10, index)) for index, body in enumerate(events)])
    counts = [json.loads(row.body) for row in event_counts(messages, "2 minutes", "1 minute").collect()]
    assert sorted(counts, key=lambda c: (c["window_start"], str(c.get("type")))) == [
        {"window_start": "2026-11-23T10:00:00Z", "window_end": "2026-11-23T10:02:00Z", "type": "click", "count": 2},
        {"window_start": "2026-11-23T10:02:00Z", "window_end": "2026-11-23T10:04:00Z", "count": 1},
        {"window_start": "2026-11-23T10:02:00Z", "window_end": "2026-11-23T10:04:00Z", "type": "view", "count": 1}]
