"""nsq_to_parquet as a real driver process against real nsqd and nsqlookupd: 20 000 messages archived exactly once,
also across a SIGKILL of the driver and a restart from its checkpoint."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.processes import ROOT, NSQDProcess, finished, start_lookupd, start_nsqd, wait_for
from tests.spark import spark  # noqa: F401  (the fixture)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MESSAGES = 20_000
TOPIC = "archived"
ARCHIVE_SCHEMA = ("message_id string, body binary, timestamp timestamp, attempts int, nsqd_address string, "
                  "topic string, date string, hour int")


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


def publish(nsqd: NSQDProcess) -> None:
    for start in range(0, MESSAGES, 1000):
        body = b"\n".join(json.dumps({"n": n, "pad": "x" * 180}).encode() for n in range(start, start + 1000))
        assert nsqd.http("POST", f"/mpub?topic={TOPIC}", body)[0] == 200


class Driver:
    """One nsq_to_parquet process (with its JVM, in a process group of its own)."""

    def __init__(self, lookupd: NSQDProcess, tmp_path: Path) -> None:
        self.output, self.checkpoint = tmp_path / "out", tmp_path / "checkpoint"
        self.log = open(tmp_path / f"driver-{time.monotonic_ns()}.log", "w")
        self.http_port = free_port()
        command = [sys.executable, "-m", "services.pipeline.jobs.nsq_to_parquet", f"--topic={TOPIC}",
                   f"--lookupd-http-address=127.0.0.1:{lookupd.http_port}", f"--output-dir={self.output}",
                   f"--checkpoint-dir={self.checkpoint}", "--master=local[2]", "--trigger-interval=1 second",
                   "--max-messages-per-batch=2000", "--max-in-flight=5000",
                   f"--http-address=127.0.0.1:{self.http_port}"]
        self.process = subprocess.Popen(command, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT,
                                        start_new_session=True, env={**os.environ, "PYSPARK_PYTHON": sys.executable})

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int | None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()
        return self.process.returncode


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def metric(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def archived_ids(spark: SparkSession, output: Path) -> list[int]:
    """Message numbers in the archive as Spark sees it (its file sink's log decides which files count)."""
    if not (output / "_spark_metadata").exists():
        return []
    # the schema given: until a batch with rows commits, there is nothing to infer it from
    rows = spark.read.schema(ARCHIVE_SCHEMA).parquet(str(output)).selectExpr("get_json_object(cast(body as string), '$.n') as n").collect()
    return [int(row.n) for row in rows]


def channel_stats(nsqd: NSQDProcess) -> dict[str, Any]:
    return nsqd.channel_stats(TOPIC, "nsq_to_parquet")


@pytest.mark.timeout(300)
def test_archives_every_message_exactly_once_across_a_driver_kill(
        cluster: tuple[NSQDProcess, NSQDProcess], spark: SparkSession, tmp_path: Path) -> None:
    lookupd, nsqd = cluster
    publish(nsqd)
    driver = Driver(lookupd, tmp_path)
    try:
        wait_for(lambda: finished(channel_stats(nsqd)) >= 4000, 120, "first batches archived", interval=0.5)
    finally:
        driver.stop(signal.SIGKILL)
    assert finished(channel_stats(nsqd)) < MESSAGES, "killed too late to test anything"
    # what the killed driver held (read, perhaps written, not committed) is still in flight until nsqd's timeout
    killed_with = len(archived_ids(spark, driver.output))

    driver = Driver(lookupd, tmp_path)
    try:
        wait_for(lambda: finished(channel_stats(nsqd)) == MESSAGES, 180, "every message archived", interval=0.5)
        # everything archived is finished in nsqd, nothing left in flight or queued
        wait_for(lambda: (lambda c: c["depth"] == 0 and c["in_flight_count"] == 0)(channel_stats(nsqd)), 30,
                 "channel drained", interval=0.5)
        assert driver.get("/ping") == (200, "OK")
        status, metrics = driver.get("/metrics")
        assert status == 200 and metric(metrics, "nsq_pipeline_query_active") == 1
        assert 0 < metric(metrics, "nsq_pipeline_input_rows_total") <= MESSAGES
    finally:
        assert driver.stop(signal.SIGTERM) is not None
    ids = archived_ids(spark, driver.output)
    assert sorted(ids) == list(range(MESSAGES)), f"{len(ids) - len(set(ids))} duplicates, {killed_with} before"
    assert channel_stats(nsqd)["timeout_count"] > 0, "the killed driver's messages came back by timeout"
    partitions = {path.relative_to(driver.output).parts[:3] for path in driver.output.rglob("*.parquet")}
    assert all(part[0] == f"topic={TOPIC}" and part[1].startswith("date=") and part[2].startswith("hour=")
               for part in partitions)
