"""The ``nsq`` source in a local Spark session against real nsqd and nsqlookupd processes: streaming into Parquet
exactly once when nothing fails, nothing FIN'd before its micro-batch commits, a failed batch delivered again to
the next query on the same checkpoint, an nsqd found through lookupd after the query started, and batch reads
(the peek of ``spark.read`` and the FIN-after-write of ``read_batch``/``drain``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harness.processes import NSQDProcess, finished, free_port, start_lookupd, wait_for
from tests.functional.spark import spark  # noqa: F401  (the fixture)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

TOPIC = "events"
CHANNEL = "pipeline"


def source(spark: SparkSession, **options: object) -> DataFrame:  # noqa: F811
    reader = spark.readStream.format("nsq").option("topic", TOPIC).option("channel", CHANNEL)
    return reader.options(**{key: str(value) for key, value in options.items()}).load()


def bodies(count: int, prefix: bytes = b"m") -> list[bytes]:
    return [prefix + b"%07d" % index for index in range(count)]


class Batches:
    """A foreachBatch sink that keeps (batch id, message_id, body, attempts, nsqd_address) rows, and the channel's
    counts when each non-empty batch was written."""

    def __init__(self, nsqd: NSQDProcess | None = None, fail_on: int = 0) -> None:
        self.rows: list[tuple[int, str, bytes, int, str]] = []
        self.at_write: list[tuple[int, dict[str, Any]]] = []  # (rows in the batch, channel stats)
        self.nsqd, self.fail_on = nsqd, fail_on

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        rows = frame.select("message_id", "body", "attempts", "nsqd_address").collect()
        if not rows:
            return
        self.rows += [(batch_id, row.message_id, bytes(row.body), row.attempts, row.nsqd_address) for row in rows]
        if self.nsqd is not None:
            self.at_write.append((len(rows), self.nsqd.channel_stats(TOPIC, CHANNEL)))
        if self.fail_on and len(self.at_write) == self.fail_on:
            raise RuntimeError("sink failure (expected by the test)")

    def bodies(self) -> list[bytes]:
        return [row[2] for row in self.rows]


def test_stream_into_parquet_exactly_once(spark: SparkSession, nsqd_factory: Callable[..., NSQDProcess],  # noqa: F811
                                          tmp_path: Path) -> None:
    # a msg_timeout shorter than the first micro-batch takes: the messages waiting get TOUCHed, none times out
    nsqd = nsqd_factory("--msg-timeout=4s", "--max-rdy-count=10000")
    sent = bodies(20_000)
    nsqd.multi_publish(TOPIC, sent)
    output = tmp_path / "parquet"
    query = (source(spark, nsqd_tcp_address=f"127.0.0.1:{nsqd.tcp_port}", max_in_flight=10_000)
             .writeStream.format("parquet").option("path", str(output))
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(processingTime="100 milliseconds").start())
    try:
        # the last batch is FIN'd once Spark plans the (empty) batch after it
        wait_for(lambda: finished(stats := nsqd.channel_stats(TOPIC, CHANNEL)) == len(sent)
                 and not stats["in_flight_count"], 60)
    finally:
        query.stop()
    written = spark.read.parquet(str(output)).select("message_id", "body", "attempts", "topic").collect()
    assert sorted(bytes(row.body) for row in written) == sent
    assert len({row.message_id for row in written}) == len(sent)
    assert {(row.attempts, row.topic) for row in written} == {(1, TOPIC)}
    stats = nsqd.channel_stats(TOPIC, CHANNEL)
    assert (stats["depth"], stats["in_flight_count"], stats["deferred_count"]) == (0, 0, 0)
    assert (stats["requeue_count"], stats["timeout_count"]) == (0, 0)


def test_nothing_finished_before_commit_and_failed_batch_redelivered(
        spark: SparkSession, nsqd_factory: Callable[..., NSQDProcess], tmp_path: Path) -> None:  # noqa: F811
    # the default msg_timeout (60 s) is longer than the test may take: what comes back, came back by REQ
    nsqd = nsqd_factory()
    sent = bodies(3000)
    nsqd.multi_publish(TOPIC, sent)
    options = {"nsqd_tcp_address": f"127.0.0.1:{nsqd.tcp_port}", "max_in_flight": 600}
    checkpoint = str(tmp_path / "checkpoint")
    first = Batches(nsqd, fail_on=3)
    query = (source(spark, **options).writeStream.foreachBatch(first).option("checkpointLocation", checkpoint)
             .trigger(processingTime="100 milliseconds").start())
    with pytest.raises(Exception, match="sink failure"):
        query.awaitTermination(90)
    # at each write, the batch being written is in flight and only earlier batches may be FIN'd
    before = 0
    for count, stats in first.at_write:
        assert stats["in_flight_count"] >= count
        assert finished(stats) <= before
        before += count
    failed = {row[1] for row in first.rows if row[0] == max(row[0] for row in first.rows)}
    assert len(first.at_write) == 3 and failed

    second = Batches()
    query = (source(spark, **options).writeStream.foreachBatch(second).option("checkpointLocation", checkpoint)
             .trigger(processingTime="100 milliseconds").start())
    try:
        wait_for(lambda: set(first.bodies()) | set(second.bodies()) == set(sent)
                 and finished(nsqd.channel_stats(TOPIC, CHANNEL)) == len(sent), 60)
    finally:
        query.stop()
    again = {row[1]: row[3] for row in second.rows if row[1] in failed}
    assert again.keys() == failed and min(again.values()) >= 2
    # only the failed batch came twice
    assert len(first.rows) + len(second.rows) == len(sent) + len(failed)


def test_nsqd_found_through_lookupd_after_start(spark: SparkSession,  # noqa: F811
                                                nsqd_factory: Callable[..., NSQDProcess], tmp_path: Path) -> None:
    lookupd = start_lookupd()
    try:
        registered = f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}"
        first = nsqd_factory(registered)
        first.multi_publish(TOPIC, bodies(100, b"a"))
        sink = Batches()
        query = (source(spark, lookupd_http_address=f"127.0.0.1:{lookupd.http_port}", lookupd_poll_interval=0.5)
                 .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(processingTime="100 milliseconds").start())
        try:
            wait_for(lambda: len(sink.rows) >= 100, 60)
            second = nsqd_factory(registered)
            second.multi_publish(TOPIC, bodies(100, b"b"))
            wait_for(lambda: len(sink.rows) >= 200, 60)
        finally:
            query.stop()
        assert sorted(sink.bodies()) == bodies(100, b"a") + bodies(100, b"b")
        assert {row[4] for row in sink.rows} == {f"127.0.0.1:{first.tcp_port}", f"127.0.0.1:{second.tcp_port}"}
    finally:
        lookupd.stop()


def test_batch_reads(spark: SparkSession, nsqd_factory: Callable[..., NSQDProcess], tmp_path: Path) -> None:  # noqa: F811
    from nsqspark.batch_reader import drain, read_batch

    nsqd = nsqd_factory()
    sent = bodies(500)
    nsqd.multi_publish(TOPIC, sent)
    options = {"topic": TOPIC, "channel": CHANNEL, "nsqd_tcp_address": f"127.0.0.1:{nsqd.tcp_port}",
               "idle_timeout": "1"}

    # spark.read only looks: everything is given back
    peeked = spark.read.format("nsq").options(**options).load().collect()
    assert sorted(bytes(row.body) for row in peeked) == sent
    stats = nsqd.channel_stats(TOPIC, CHANNEL)
    assert (stats["depth"], stats["in_flight_count"], finished(stats)) == (500, 0, 0)

    # read_batch: held until ack(); a write that fails gives the batch back
    with pytest.raises(RuntimeError, match="write failure"):
        with read_batch(spark, {**options, "max_messages": "200"}) as batch:
            assert len(batch) == 200 and nsqd.channel_stats(TOPIC, CHANNEL)["in_flight_count"] == 200
            raise RuntimeError("write failure (expected by the test)")
    assert finished(nsqd.channel_stats(TOPIC, CHANNEL)) == 0
    with read_batch(spark, {**options, "max_messages": "200"}) as batch:
        batch.frame.write.parquet(str(tmp_path / "one"))
        assert finished(nsqd.channel_stats(TOPIC, CHANNEL)) == 0
        batch.ack()
    assert finished(nsqd.channel_stats(TOPIC, CHANNEL)) == 200

    # drain: batches of at most max_in_flight, each FIN'd after its write
    counts: list[int] = []

    def write(frame: DataFrame) -> None:
        counts.append(frame.count())
        frame.write.mode("append").parquet(str(tmp_path / "rest"))

    assert drain(spark, {**options, "max_in_flight": "120"}, write) == 300
    assert max(counts) <= 120 and sum(counts) == 300
    stats = nsqd.channel_stats(TOPIC, CHANNEL)
    assert (stats["depth"], stats["in_flight_count"], finished(stats)) == (0, 0, 500)
    written = spark.read.parquet(str(tmp_path / "one"), str(tmp_path / "rest")).collect()
    assert sorted(bytes(row.body) for row in written) == sent
    assert min(row.attempts for row in written) >= 2  # every one was peeked first


def test_a_batch_read_from_a_cluster_out_of_reach_fails_and_an_idle_one_reads_empty(
        spark: SparkSession, nsqd_factory: Callable[..., NSQDProcess]) -> None:  # noqa: F811
    from nsqclient import ConnectError
    from nsqspark.batch_reader import drain, read_batch

    dead_nsqd, dead_lookupd = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    base = {"topic": TOPIC, "channel": CHANNEL, "idle_timeout": "1"}
    for where, reason in (({"nsqd_tcp_address": dead_nsqd}, dead_nsqd),
                          ({"lookupd_http_address": dead_lookupd}, f"{dead_lookupd}: lookupd did not answer")):
        options = {**base, **where}
        with pytest.raises(ConnectError, match=f"no nsqd reached for {TOPIC}/{CHANNEL}: .*{reason}"):
            with read_batch(spark, options):
                pass
        with pytest.raises(ConnectError, match=reason):
            drain(spark, options, lambda frame: None)
        with pytest.raises(Exception, match="no nsqd reached"):  # Spark wraps what planning raised
            spark.read.format("nsq").options(**options).load().collect()

    nsqd = nsqd_factory()
    lookupd = start_lookupd()
    try:
        for where in ({"nsqd_tcp_address": nsqd.tcp_address_text},  # reached, nothing there
                      {"lookupd_http_address": lookupd.http_address_text},  # answers, knows no nsqd for the topic
                      # one address out of reach of two: what the other says counts
                      {"nsqd_tcp_address": f"{dead_nsqd},{nsqd.tcp_address_text}"},
                      {"lookupd_http_address": f"{dead_lookupd},{lookupd.http_address_text}"}):
            with read_batch(spark, {**base, **where}) as batch:
                assert len(batch) == 0
            assert drain(spark, {**base, **where}, lambda frame: None) == 0
    finally:
        lookupd.stop()


def test_large_messages_are_held_within_max_bytes_in_flight(nsqd_factory: Callable[..., NSQDProcess]) -> None:
    """The default window is 100,000 messages; of 100 KiB messages the source holds only what fits in
    ``max_bytes_in_flight`` (1 MiB here: 10), over its many connections."""
    from nsqspark.holding_consumer import HoldingConsumer
    from nsqspark.options import parse_options

    nsqd = nsqd_factory()
    sent = [b"%03d" % index + b"x" * (100 * 1024 - 3) for index in range(60)]
    nsqd.multi_publish(TOPIC, sent, batch=20)
    consumer = HoldingConsumer(parse_options({"topic": TOPIC, "channel": CHANNEL, "max_bytes_in_flight": str(1 << 20),
                                              "nsqd_tcp_address": f"127.0.0.1:{nsqd.tcp_port}"}, need_channel=True))

    def in_flight() -> int:
        return int(nsqd.channel_stats(TOPIC, CHANNEL)["in_flight_count"])

    consumer.start()
    try:
        wait_for(lambda: nsqd.channel_stats(TOPIC, CHANNEL).get("client_count") == 40, 10, "40 connections")
        wait_for(lambda: consumer.window() == 10, 10, "the window fitted to the bytes")
        held = wait_for(lambda: count if (count := in_flight()) == 10 else 0, 10, "the window filled")
        taken, _ = consumer.collect(10, idle_timeout=5)  # nsqd counts them in flight before they all arrive
        assert held == len(taken) == 10 and in_flight() == 10  # no more came
        consumer.finish(taken)
        wait_for(lambda: finished(nsqd.channel_stats(TOPIC, CHANNEL)) == 10 and in_flight() == 10, 10,
                 "the next ten, and no more")
    finally:
        consumer.stop()
    stats = nsqd.channel_stats(TOPIC, CHANNEL)
    assert (stats["depth"], stats["in_flight_count"], finished(stats)) == (50, 0, 10)  # the rest given back
