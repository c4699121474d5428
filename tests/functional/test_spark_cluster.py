"""The pipeline's jobs on a real Spark standalone cluster (a master and two workers on loopback), submitted with
``spark-submit --master spark://...`` as the README shows: the ``nsq`` source on the driver, its partitions read
and written by executors on the workers, the ``nsq`` sink publishing from them."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.archive_jobs import ARCHIVE_SCHEMA
from harness.processes import ROOT, NSQDProcess, finished, start_lookupd, start_nsqd, wait_for
from harness.spark_cluster import SparkCluster
from tests.functional.spark import spark, spark_cluster  # noqa: F401  (the fixtures)
from tests.functional.test_event_counts_job import published_totals

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

JOBS = ROOT / "services" / "pipeline" / "jobs"
MESSAGES = 20_000


@pytest.fixture
def nsq(tmp_path: Path) -> Iterator[tuple[NSQDProcess, NSQDProcess]]:
    lookupd = start_lookupd()
    (tmp_path / "nsqd").mkdir()
    nsqd = start_nsqd(f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}", data_path=tmp_path / "nsqd")
    yield lookupd, nsqd
    nsqd.stop()
    lookupd.stop()


def publish_events(nsqd: NSQDProcess) -> None:
    for start in range(0, MESSAGES, 1000):
        body = b"\n".join(json.dumps({"type": ("click", "view")[n % 2], "n": n}).encode()
                          for n in range(start, start + 1000))
        assert nsqd.http("POST", "/mpub?topic=events", body)[0] == 200


def stop(job: subprocess.Popen[bytes], log: Path) -> None:
    """SIGTERM to spark-submit, as a scheduler would send it: the application ends."""
    if job.poll() is None:
        job.send_signal(signal.SIGTERM)
        try:
            job.wait(60)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait()
            raise AssertionError(f"spark-submit did not end on SIGTERM:\n{log.read_text()[-3000:]}") from None


def test_nsq_to_parquet_on_a_standalone_cluster(spark_cluster: SparkCluster, spark: SparkSession,  # noqa: F811
                                                nsq: tuple[NSQDProcess, NSQDProcess], tmp_path: Path) -> None:
    lookupd, nsqd = nsq
    publish_events(nsqd)
    output, log = tmp_path / "archive", tmp_path / "nsq_to_parquet.log"
    job = spark_cluster.submit(JOBS / "nsq_to_parquet.py", [
        "--topic=events", f"--lookupd-http-address=127.0.0.1:{lookupd.http_port}", f"--output-dir={output}",
        f"--checkpoint-dir={tmp_path / 'checkpoint'}", "--progress-interval=1s"], log)
    try:
        wait_for(lambda: finished(nsqd.channel_stats("events", "nsq_to_parquet")) == MESSAGES or job.poll(), 180,
                 "every event archived", interval=0.5)
        assert job.poll() is None, log.read_text()[-3000:]
        wait_for(lambda: f"{MESSAGES:,} in all" in log.read_text(), 30, "a progress line", interval=0.5)
    finally:
        stop(job, log)
    # the work ran on the workers' executors, not in the driver
    assert all("Asked to launch executor" in worker.read_text() and "for nsq_to_parquet" in worker.read_text()
               for worker in spark_cluster.worker_logs())
    rows = spark.read.schema(ARCHIVE_SCHEMA).parquet(str(output)).selectExpr(
        "cast(get_json_object(cast(body as string), '$.n') as int) as n").collect()
    assert sorted(row.n for row in rows) == list(range(MESSAGES))


def test_nsq_event_counts_on_a_standalone_cluster(spark_cluster: SparkCluster,  # noqa: F811
                                                  nsq: tuple[NSQDProcess, NSQDProcess], tmp_path: Path) -> None:
    lookupd, nsqd = nsq
    # the output topic's channel first, so that no count goes unread
    assert nsqd.http("POST", "/topic/create?topic=event_counts")[0] == 200
    assert nsqd.http("POST", "/channel/create?topic=event_counts&channel=check")[0] == 200
    publish_events(nsqd)
    log = tmp_path / "nsq_event_counts.log"
    job = spark_cluster.submit(JOBS / "event_counts.py", [
        "--topic=events", "--output-topic=event_counts", f"--lookupd-http-address=127.0.0.1:{lookupd.http_port}",
        f"--checkpoint-dir={tmp_path / 'checkpoint'}", "--window=1 day"], log)
    try:
        expected: dict[str | None, int] = {"click": MESSAGES // 2, "view": MESSAGES // 2}
        published = asyncio.run(published_totals(nsqd, expected, lambda: job.poll() is None, timeout=180))
        assert published == expected, log.read_text()[-3000:]
    finally:
        stop(job, log)
