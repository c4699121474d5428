"""Two nsqd on one host at their default --node-id (derived from the host name, so equal) hand out equal message IDs
when they publish at the same time: an ID is unique per topic on one nsqd only. The archive still holds every event
exactly once — through nsq_to_parquet at its defaults, across a SIGKILL of its driver, and through the batch reader
across a crash between a write and its FIN — because the pipeline tells messages apart by topic, nsqd and ID, not
by ID alone."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harness.archive_jobs import ARCHIVE_SCHEMA, SMALL_BATCHES, BatchJob, Driver
from harness.processes import NSQDProcess, finished, start_lookupd, start_nsqd, wait_for
from nsqclient import Producer
from tests.functional.spark import spark  # noqa: F401  (the fixture)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TOPIC = "events"
PER_NSQD = 5000


@pytest.fixture
def two_nsqd(tmp_path: Path) -> Iterator[tuple[NSQDProcess, list[NSQDProcess]]]:
    """A lookupd and two nsqd registered with it, both at the default node ID (no --node-id), as on one host."""
    lookupd = start_lookupd()
    nsqds: list[NSQDProcess] = []
    try:
        for index in range(2):
            (tmp_path / f"nsqd{index}").mkdir()
            # a short timeout, so what a killed job held comes back soon
            nsqds.append(start_nsqd(f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}", "--msg-timeout=4s",
                                    data_path=tmp_path / f"nsqd{index}"))
        assert len({nsqd.http("GET", "/config/id")[2] for nsqd in nsqds}) == 1, "the default node IDs differ"
        yield lookupd, nsqds
    finally:
        for nsqd in nsqds:
            nsqd.stop()
        lookupd.stop()


def publish_at_once(nsqds: list[NSQDProcess]) -> None:
    """``PER_NSQD`` events to each nsqd, numbered apart, in MPUBs of 100: each round sends one MPUB to every nsqd
    at the same instant and waits for all of them, so the nsqd take every round in step and the IDs they hand
    out in the same millisecond are equal, however busy the machine."""

    def batch(start: int) -> list[bytes]:
        return [json.dumps({"n": n, "pad": "x" * 100}).encode() for n in range(start, start + 100)]

    async def in_step() -> None:
        producers = [Producer(f"127.0.0.1:{nsqd.tcp_port}") for nsqd in nsqds]
        for producer in producers:
            await producer.connect()
        try:
            for offset in range(0, PER_NSQD, 100):
                await asyncio.gather(*(producer.multi_publish(TOPIC, batch(index * PER_NSQD + offset))
                                       for index, producer in enumerate(producers)))
        finally:
            for producer in producers:
                await producer.close()

    asyncio.run(in_step())


def channel_finished(nsqds: list[NSQDProcess], channel: str) -> int:
    return sum(finished(nsqd.channel_stats(TOPIC, channel)) for nsqd in nsqds)


def drained(nsqds: list[NSQDProcess], channel: str) -> bool:
    """The channel exists on every nsqd, with nothing queued or in flight."""
    def empty(stats: dict[str, Any]) -> bool:
        return bool(stats) and stats["depth"] == 0 and stats["in_flight_count"] == 0

    return all(empty(nsqd.channel_stats(TOPIC, channel)) for nsqd in nsqds)


def assert_every_event_once(archive: DataFrame) -> None:
    rows = archive.selectExpr("get_json_object(cast(body as string), '$.n') as n", "message_id").collect()
    numbers = sorted(int(row.n) for row in rows)
    missing = set(range(2 * PER_NSQD)) - set(numbers)
    assert not missing, f"{len(missing)} events lost, e.g. {sorted(missing)[:5]}"
    assert numbers == list(range(2 * PER_NSQD)), f"{len(numbers) - len(set(numbers))} events written twice"
    # what makes the test mean something: the two nsqd did hand out equal IDs
    equal_ids = len(rows) - len({row.message_id for row in rows})
    assert equal_ids > 0, "no message ID was handed out twice: the publishes did not overlap"


def read_archive(spark: SparkSession, output: Path) -> DataFrame:
    return spark.read.schema(ARCHIVE_SCHEMA).parquet(str(output))


def archive_to_the_end(lookupd: NSQDProcess, nsqds: list[NSQDProcess], tmp_path: Path,
                       flags: tuple[str, ...]) -> Path:
    """nsq_to_parquet run until every event is archived and committed, then stopped; its output."""
    driver = Driver(lookupd, tmp_path, TOPIC, flags)
    try:
        wait_for(lambda: channel_finished(nsqds, "nsq_to_parquet") == 2 * PER_NSQD, 180, "every event archived",
                 interval=0.5)
        wait_for(lambda: drained(nsqds, "nsq_to_parquet"), 30, "the last batch committed", interval=0.5)
    finally:
        assert driver.stop(signal.SIGTERM) is not None
    return driver.output


@pytest.mark.timeout(300)
def test_the_archive_at_its_defaults_keeps_events_with_equal_ids_from_two_nsqd(
        two_nsqd: tuple[NSQDProcess, list[NSQDProcess]], spark: SparkSession, tmp_path: Path) -> None:
    lookupd, nsqds = two_nsqd
    publish_at_once(nsqds)
    # the job's defaults, as the README runs it
    assert_every_event_once(read_archive(spark, archive_to_the_end(lookupd, nsqds, tmp_path, flags=())))


@pytest.mark.timeout(300)
def test_a_killed_archive_job_keeps_events_with_equal_ids_from_two_nsqd(
        two_nsqd: tuple[NSQDProcess, list[NSQDProcess]], spark: SparkSession, tmp_path: Path) -> None:
    lookupd, nsqds = two_nsqd
    publish_at_once(nsqds)
    driver = Driver(lookupd, tmp_path, TOPIC, SMALL_BATCHES)
    try:
        wait_for(lambda: channel_finished(nsqds, "nsq_to_parquet") >= 2000, 120, "first batches archived",
                 interval=0.2)
    finally:
        driver.stop(signal.SIGKILL)
    assert channel_finished(nsqds, "nsq_to_parquet") < 2 * PER_NSQD, "killed too late to test anything"

    assert_every_event_once(read_archive(spark, archive_to_the_end(lookupd, nsqds, tmp_path, SMALL_BATCHES)))


@pytest.mark.timeout(300)
def test_a_crashed_batch_archive_keeps_events_with_equal_ids_from_two_nsqd(
        two_nsqd: tuple[NSQDProcess, list[NSQDProcess]], spark: SparkSession, tmp_path: Path) -> None:
    """``drain`` into Parquet through ``for_archive``, the job killed (SIGKILL) after its second write and before
    that batch's FIN, then run again: the batch comes back from nsqd and is written a second time, and reading the
    archive back through ``for_archive`` gives each event once."""
    from services.pipeline.transforms import for_archive

    lookupd, nsqds = two_nsqd
    for nsqd in nsqds:  # the job's channel, so that what is published is kept for it
        assert nsqd.http("POST", f"/topic/create?topic={TOPIC}")[0] == 200
        assert nsqd.http("POST", f"/channel/create?topic={TOPIC}&channel=batch_archive")[0] == 200
    publish_at_once(nsqds)
    output, log_path = tmp_path / "batch-archive", tmp_path / "batch-archive.log"
    crashed = BatchJob(lookupd, TOPIC, output, log_path, "--die-after-writes=2").wait(180)
    assert crashed == -signal.SIGKILL, log_path.read_text()[-3000:]
    assert channel_finished(nsqds, "batch_archive") < 2 * PER_NSQD, "the whole channel in two batches"

    # it ends once nothing arrived for its idle timeout, which is longer than nsqd's msg_timeout
    assert BatchJob(lookupd, TOPIC, output, log_path).wait(240) == 0, log_path.read_text()[-3000:]
    assert drained(nsqds, "batch_archive"), "the second run left messages behind"
    archive = read_archive(spark, output)
    assert_every_event_once(for_archive(archive, "10 minutes"))
    assert archive.count() > 2 * PER_NSQD, "the batch the crash did not FIN was not written again"
