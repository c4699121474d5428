"""nsq_to_parquet as a real driver process against real nsqd and nsqlookupd: 20 000 messages archived exactly once
across a SIGKILL of the driver and a restart from its checkpoint, and across a SIGKILL of one of two nsqd and its
restart; progress lines and /metrics along the way."""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.archive_jobs import ARCHIVE_SCHEMA, Driver
from harness.processes import NSQDProcess, finished, start_lookupd, start_nsqd, wait_for
from tests.functional.spark import spark  # noqa: F401  (the fixture)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MESSAGES = 20_000
TOPIC = "archived"
CHANNEL = "nsq_to_parquet"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[NSQDProcess, NSQDProcess]]:
    lookupd = start_lookupd()
    (tmp_path / "nsqd").mkdir()
    # a short timeout, so what a killed driver held comes back soon
    nsqd = start_nsqd(f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}", "--msg-timeout=4s",
                      data_path=tmp_path / "nsqd")
    yield lookupd, nsqd
    nsqd.stop()
    lookupd.stop()


def records(numbers: range = range(MESSAGES)) -> list[bytes]:
    return [json.dumps({"n": n, "pad": "x" * 180}).encode() for n in numbers]


def drained(nsqd: NSQDProcess) -> bool:
    """Whether the archive's channel holds nothing any more, queued or in flight."""
    stats = nsqd.channel_stats(TOPIC, CHANNEL)
    return bool(stats) and stats["depth"] == 0 and stats["in_flight_count"] == 0


def metric(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def archived_ids(spark: SparkSession, output: Path) -> list[int]:
    """Message numbers in the archive as Spark sees it (its file sink's log decides which files count)."""
    if not (output / "_spark_metadata").exists():
        return []
    # the schema given: until a batch with rows commits, there is nothing to infer it from
    rows = (spark.read.schema(ARCHIVE_SCHEMA).parquet(str(output))
            .selectExpr("get_json_object(cast(body as string), '$.n') as n").collect())
    return [int(row.n) for row in rows]


@pytest.mark.timeout(300)
def test_archives_every_message_exactly_once_across_a_driver_kill(
        cluster: tuple[NSQDProcess, NSQDProcess], spark: SparkSession, tmp_path: Path) -> None:
    lookupd, nsqd = cluster
    nsqd.multi_publish(TOPIC, records(), batch=1000)
    driver = Driver(lookupd, tmp_path, TOPIC)
    try:
        wait_for(lambda: finished(nsqd.channel_stats(TOPIC, CHANNEL)) >= 4000, 120, "first batches archived",
                 interval=0.5)
    finally:
        driver.stop(signal.SIGKILL)
    assert finished(nsqd.channel_stats(TOPIC, CHANNEL)) < MESSAGES, "killed too late to test anything"
    # what the killed driver held (read, perhaps written, not committed) is still in flight until nsqd's timeout
    killed_with = len(archived_ids(spark, driver.output))

    driver = Driver(lookupd, tmp_path, TOPIC)
    try:
        wait_for(lambda: finished(nsqd.channel_stats(TOPIC, CHANNEL)) == MESSAGES, 180, "every message archived",
                 interval=0.5)
        # everything archived is finished in nsqd, nothing left in flight or queued
        wait_for(lambda: drained(nsqd), 30, "channel drained", interval=0.5)
        assert driver.get("/ping") == (200, "OK")
        # the next progress sample sees the drained channel
        wait_for(lambda: re.search(r"backlog in nsqd 0; last batch [\d,]+ messages in [\d.]+s$",
                                   (driver.progress_lines() or [""])[-1]), 10, "a progress line", interval=0.5)
        status, metrics = driver.get("/metrics")
        assert status == 200 and metric(metrics, "nsq_pipeline_query_active") == 1
        assert 0 < metric(metrics, "nsq_pipeline_input_rows_total") <= MESSAGES
        assert metric(metrics, "nsq_pipeline_backlog_messages") == 0
        assert 0 < metric(metrics, "nsq_pipeline_batch_messages") <= 2000
        assert metric(metrics, "nsq_pipeline_batch_duration_seconds") > 0
        rates = [float(line.split(" msg/s")[0].split()[-1].replace(",", "")) for line in driver.progress_lines()]
        assert max(rates) > 0
    finally:
        assert driver.stop(signal.SIGTERM) is not None
    ids = archived_ids(spark, driver.output)
    assert sorted(ids) == list(range(MESSAGES)), f"{len(ids) - len(set(ids))} duplicates, {killed_with} before"
    assert nsqd.channel_stats(TOPIC, CHANNEL)["timeout_count"] > 0, "the killed driver's messages came back by timeout"
    partitions = {path.relative_to(driver.output).parts[:3] for path in driver.output.rglob("*.parquet")}
    assert all(part[0] == f"topic={TOPIC}" and part[1].startswith("date=") and part[2].startswith("hour=")
               for part in partitions)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("same_address", [True, False], ids=["back-at-its-address", "back-at-another-port"])
def test_nothing_finished_is_lost_when_an_nsqd_is_killed(spark: SparkSession, tmp_path: Path,
                                                         same_address: bool) -> None:
    """One of two nsqd dies by SIGKILL in the middle of the run and comes back on its data: the job goes on with
    the other, takes the restarted one up again, and archives each message once (what the restarted nsqd
    delivers again may be written twice when it comes back at another address). nsqd keeps what is in flight in
    memory (as NSQ does), so only what the job held from the killed nsqd may be gone; everything it FIN'd is
    archived, because FIN only follows the commit."""
    lookupd = start_lookupd()
    survivor_path, killed_path = tmp_path / "survivor", tmp_path / "killed"
    survivor_path.mkdir()
    killed_path.mkdir()
    registered = (f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}", "--msg-timeout=4s")
    # every message on disk, synced as it is written: all that the killed nsqd acknowledged outlives it
    durable = ("--mem-queue-size=0", "--sync-every=1")
    survivor = start_nsqd(*registered, data_path=survivor_path)
    killed = start_nsqd(*registered, *durable, data_path=killed_path)
    half = MESSAGES // 2
    driver: Driver | None = None
    try:
        survivor.multi_publish(TOPIC, records(range(half)), batch=1000)
        killed.multi_publish(TOPIC, records(range(half, MESSAGES)), batch=1000)
        driver = Driver(lookupd, tmp_path, TOPIC)
        wait_for(lambda: finished(killed.channel_stats(TOPIC, CHANNEL)) >= 2000, 120, "batches from the nsqd to kill",
                 interval=0.2)
        before = killed.channel_stats(TOPIC, CHANNEL)
        killed.stop(signal.SIGKILL)
        assert finished(before) < half, "killed too late to test anything"

        # the job goes on with the survivor, then with the nsqd restarted on the same data path
        wait_for(lambda: finished(survivor.channel_stats(TOPIC, CHANNEL)) == half, 120,
                 "the survivor's messages archived", interval=0.5)
        assert driver.get("/ping") == (200, "OK")
        # at its address, as an nsqd restarts, or at another one that lookupd tells the job
        addresses = (f"--tcp-address=127.0.0.1:{killed.tcp_port}", f"--http-address=127.0.0.1:{killed.http_port}")
        killed = start_nsqd(*registered, *durable, *(addresses if same_address else ()), data_path=killed_path)
        wait_for(lambda: drained(killed), 120, "the restarted nsqd's messages archived", interval=0.5)
        wait_for(lambda: survivor.channel_stats(TOPIC, CHANNEL)["in_flight_count"] == 0, 30, "the last batch committed")
    finally:
        stopped = driver.stop(signal.SIGTERM) if driver is not None else 0
        killed.stop()
        survivor.stop()
        lookupd.stop()
    assert stopped is not None
    ids = archived_ids(spark, driver.output)
    assert sorted(n for n in ids if n < half) == list(range(half)), "the survivor's messages not each once"
    # the archive tells messages apart by the address of the nsqd that delivered them: an nsqd that comes back at
    # another address delivers again what it had not synced as finished, and that is written twice
    duplicates = len(ids) - len(set(ids))
    assert duplicates == 0 or not same_address, f"{duplicates} duplicates"
    lost = set(range(half, MESSAGES)) - set(ids)
    # only what was in flight to the job when nsqd died can be gone: never what it had FIN'd, nor what was queued
    assert len(lost) <= before["in_flight_count"], f"{len(lost)} lost, {before['in_flight_count']} were in flight"
