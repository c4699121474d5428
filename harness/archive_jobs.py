"""Archive jobs as real processes for tests, each with its JVM in a process group of its own (so that a kill takes
both): ``Driver`` runs ``nsq_to_parquet``, ``BatchJob`` runs ``harness.batch_archive_job`` (the batch reader's
``drain`` into Parquet)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from harness.processes import ROOT, NSQDProcess, free_port

# the columns of an archive, for reading one before anything committed (there is nothing to infer them from)
ARCHIVE_SCHEMA = ("message_id string, body binary, timestamp timestamp, attempts int, nsqd_address string, "
                  "topic string, date string, hour int")
# small batches, so that a kill comes in the middle of a run
SMALL_BATCHES = ("--max-messages-per-batch=2000", "--max-in-flight=5000", "--progress-interval=1s",
                 "--lookupd-poll-interval=1s")


class Driver:
    """One nsq_to_parquet process archiving ``topic`` found through ``lookupd`` into ``tmp_path``, with ``flags``
    beyond where it reads and writes."""

    def __init__(self, lookupd: NSQDProcess, tmp_path: Path, topic: str,
                 flags: tuple[str, ...] = SMALL_BATCHES) -> None:
        self.output, self.checkpoint = tmp_path / "out", tmp_path / "checkpoint"
        self.http_port = free_port()
        self.log_path = tmp_path / f"driver-{time.monotonic_ns()}.log"
        self.log = open(self.log_path, "w")
        command = [sys.executable, "-m", "services.pipeline.jobs.nsq_to_parquet", f"--topic={topic}",
                   f"--lookupd-http-address=127.0.0.1:{lookupd.http_port}", f"--output-dir={self.output}",
                   f"--checkpoint-dir={self.checkpoint}", "--master=local[2]", *flags,
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

    def progress_lines(self) -> list[str]:
        return [line for line in self.log_path.read_text().splitlines() if line.startswith("nsq_to_parquet: ")
                and "msg/s" in line]


class BatchJob:
    """``harness.batch_archive_job`` draining ``topic`` (found through ``lookupd``) into ``output``; ``args`` are its
    further flags."""

    def __init__(self, lookupd: NSQDProcess, topic: str, output: Path, log_path: Path, *args: str) -> None:
        self.log_path = log_path
        with log_path.open("a") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "harness.batch_archive_job", f"--topic={topic}",
                 f"--lookupd-http-address=127.0.0.1:{lookupd.http_port}", f"--output-dir={output}", *args],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "PYSPARK_PYTHON": sys.executable})

    def wait(self, timeout: float) -> int:
        """Its exit status (negative: the signal that ended it); killed and failed if it has not ended by then."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            raise AssertionError(f"the batch job did not end:\n{self.log_path.read_text()[-3000:]}") from None
