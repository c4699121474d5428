"""The pipeline's DataFrame transforms, pure (DataFrame in, DataFrame out), so jobs stay thin and tests need no
cluster: deduplicating redelivered messages, partition columns for the archive, and a windowed count of events."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

# the fields the example analytics job reads from each JSON event; anything else in the event is ignored
EVENT_SCHEMA = StructType([StructField("type", StringType())])


def message_key() -> Column:
    """What tells messages apart across a cluster: ``topic/nsqd_address/message_id``. A message ID is unique only
    per topic on the nsqd that handed it out (its time, ``--node-id`` and a sequence: NSQ's rule), and every nsqd on
    one host has the same default node ID, so two nsqd publishing at once hand out equal IDs for distinct
    messages; a redelivery comes again from the nsqd that delivered it first.

    One string, not three columns: the streaming deduplication's state keeps one string key per message, as it did
    when the key was the ID alone, so a checkpoint from then goes on working (its old keys just expire)."""
    return F.concat_ws("/", "topic", "nsqd_address", "message_id")


def for_archive(messages: DataFrame, watermark: str) -> DataFrame:
    """Messages as the archive stores them: each message (by ``message_key``) once within ``watermark`` of its
    first arrival (nsqd redelivers a message whose batch was not committed), with ``date`` and ``hour`` columns to
    partition by (UTC).

    The watermark runs on the time each batch was read, not on the message's own timestamp: Spark drops rows older
    than the watermark, and a message published long ago (a backlog, a node that was away, a deferred message) must
    still be archived, not dropped and then FIN'd."""
    keyed = messages.withColumn("_key", message_key())
    if messages.isStreaming:
        unique = (keyed.withColumn("_read_at", F.current_timestamp()).withWatermark("_read_at", watermark)
                  .dropDuplicatesWithinWatermark(["_key"]).drop("_read_at", "_key"))
    else:  # Spark refuses the watermark variant on a static frame, where plain deduplication is exact
        unique = keyed.dropDuplicates(["_key"]).drop("_key")
    return (unique.withColumn("date", F.date_format(_utc(unique.timestamp), "yyyy-MM-dd"))
            .withColumn("hour", F.hour(_utc(unique.timestamp))))


def event_counts(messages: DataFrame, window: str, watermark: str) -> DataFrame:
    """Events per ``type`` per tumbling ``window`` of message time, as JSON bodies ready for the ``nsq`` sink:
    ``{"window_start", "window_end", "type", "count"}``. Bodies that are not JSON objects count as type null."""
    events = (messages.withWatermark("timestamp", watermark)
              .withColumn("event", F.from_json(F.col("body").cast("string"), EVENT_SCHEMA)))
    counts = events.groupBy(F.window("timestamp", window), F.col("event.type").alias("type")).count()
    return counts.select(F.to_json(F.struct(
        F.date_format(_utc(counts.window.start), "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_start"),
        F.date_format(_utc(counts.window.end), "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_end"),
        "type", "count")).alias("body"))


def _utc(column: Column) -> Column:
    return F.to_utc_timestamp(column, F.current_timezone())
