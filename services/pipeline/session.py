"""A SparkSession for the pipeline's jobs, with the ``nsq`` data source (``nsqspark``) registered. Spark starts its
Python workers with ``PYSPARK_PYTHON``; it is set to this interpreter so they import the same installation of the
project."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery


# Spark's default state store keeps every key in the JVM's heap and copies the whole map at every micro-batch: a
# deduplication over minutes of messages makes each batch slower than the last. RocksDB keeps it on local disk.
STATE_STORE = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def spark_session(master: str, app_name: str, config: Mapping[str, str] | None = None) -> SparkSession:
    """``master`` empty: whatever spark-submit set. Unless ``config`` or spark-submit say otherwise:

    - stateful queries keep ``spark.sql.shuffle.partitions`` in their checkpoint for good, and Spark's 200 would make
      each micro-batch 200 tasks and 200 files: the cluster's parallelism is used instead;
    - their state lives in RocksDB (``STATE_STORE``), checkpointed as a changelog. A checkpoint keeps the store it
      was started with."""
    from pyspark.sql import SparkSession

    import nsqspark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name).config("spark.ui.showConsoleProgress", "false")
    if master:
        builder = builder.master(master)
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    given = session.sparkContext.getConf()
    defaults = {"spark.sql.shuffle.partitions": str(session.sparkContext.defaultParallelism),
                "spark.sql.streaming.stateStore.providerClass": STATE_STORE,
                "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true"}
    for key, value in defaults.items():
        if not given.contains(key):
            session.conf.set(key, value)
    return nsqspark.register(session)


def run_until_stopped(query: StreamingQuery, http_address: str = "", poll_seconds: int = 1, *,
                      backlog: Callable[[], int | None] | None = None, progress_interval: float = 0) -> None:
    """Waits for the query; SIGTERM or SIGINT stop it cleanly (the source requeues what was not committed).
    Meanwhile, with ``progress_interval``, prints a progress line that often (``backlog`` says what nsqd still
    holds for the query), and with ``http_address`` serves ``/ping`` and ``/metrics`` there (sampled that often,
    or every ``progress.DEFAULT_INTERVAL`` s without progress lines).

    The query is stopped from this loop, not from the signal handler: the handler runs in the middle of a call to
    the JVM, and py4j's connection cannot take a second call then."""
    from .monitoring import serve
    from .progress import DEFAULT_INTERVAL, JobProgress, report_every

    progress = JobProgress(query, query.name or "nsq", backlog)
    server = serve(http_address, progress) if http_address else None
    reporting = threading.Event()
    if progress_interval > 0 or server is not None:
        report_every(progress, progress_interval or DEFAULT_INTERVAL, sys.stdout if progress_interval > 0 else None,
                     reporting)
    stop_requested = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stop_requested
        stop_requested = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        while not query.awaitTermination(poll_seconds):
            if stop_requested:
                query.stop()
        query.awaitTermination()  # raises what the query failed with, if it did
    finally:
        reporting.set()
        if server is not None:
            server.shutdown()
            server.server_close()
