"""A real Spark standalone cluster on loopback: a master and two workers of one core each, started from the
installed pyspark (``spark-class org.apache.spark.deploy.master.Master`` / ``...Worker``), and ``spark-submit``
against it. Every process binds 127.0.0.1 on ports the kernel picks; the master's REST server (a fixed port) is
off."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from harness.processes import ROOT, wait_for

BIN = Path(sys.executable).parent
_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
T = TypeVar("T")


def spark_env() -> dict[str, str]:
    """What Spark's scripts need: where the installed Spark is, loopback only, and this interpreter for Python."""
    import pyspark

    return {**os.environ, "SPARK_HOME": str(Path(pyspark.__file__).parent), "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}


@dataclass
class SparkCluster:
    workdir: Path
    url: str = ""
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, workers: int = 2, timeout: float = 90) -> None:
        master_log = self.workdir / "master.log"
        self._spawn(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0",
                     "--webui-port", "0"], master_log)
        self.url = self._wait_for_log(master_log, lambda text: (m := _MASTER_URL.search(text)) and m.group(1),
                                      timeout)
        for index in range(workers):
            work = self.workdir / f"worker{index}"
            work.mkdir()
            self._spawn(["org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1", "--port", "0",
                         "--webui-port", "0", "--cores", "1", "--memory", "1g", "--work-dir", str(work)],
                        self.workdir / f"worker{index}.log")
        self._wait_for_log(master_log, lambda text: text.count("Registering worker") >= workers, timeout)

    def submit(self, script: Path, args: list[str], log: Path) -> subprocess.Popen[bytes]:
        """``spark-submit --master <this cluster> script args``, its output into ``log``."""
        command = [str(BIN / "spark-submit"), "--master", self.url, "--conf", f"spark.pyspark.python={sys.executable}",
                   "--conf", "spark.executor.memory=768m", str(script), *args]
        with open(log, "wb") as out:
            return subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=spark_env())

    def worker_logs(self) -> list[Path]:
        return sorted(self.workdir.glob("worker*.log"))

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.terminate()
        for process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def _spawn(self, args: list[str], log: Path) -> None:
        with open(log, "wb") as out:
            self.processes.append(subprocess.Popen([str(BIN / "spark-class"), *args], stdout=out,
                                                   stderr=subprocess.STDOUT, env=spark_env()))

    def _wait_for_log(self, log: Path, found: Callable[[str], T | None], timeout: float) -> T:
        """``found(log's text)`` once it is true; AssertionError with the log's end as soon as a process exits,
        or after ``timeout`` s."""
        def log_end() -> str:
            return log.read_text(errors="replace")[-3000:]

        def started() -> T | None:
            assert all(process.poll() is None for process in self.processes), f"a Spark process exited:\n{log_end()}"
            return found(log.read_text(errors="replace"))

        return wait_for(started, timeout, lambda: f"the Spark cluster started; the log ends\n{log_end()}\n",
                        interval=0.2)
