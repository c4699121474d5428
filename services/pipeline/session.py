"""A SparkSession for the pipeline's jobs, with the ``nsq`` data source registered. Spark starts its Python workers
with ``PYSPARK_PYTHON``; it is set to this interpreter so they import the same installation of the project."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery


def spark_session(master: str, app_name: str, config: Mapping[str, str] | None = None) -> SparkSession:
    """``master`` empty: whatever spark-submit set. Stateful queries keep ``spark.sql.shuffle.partitions`` in their
    checkpoint for good, and Spark's 200 would make each micro-batch 200 tasks and 200 files; unless ``config``
    says otherwise, the cluster's parallelism is used instead."""
    from pyspark.sql import SparkSession

    from .datasource import NSQDataSource

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name).config("spark.ui.showConsoleProgress", "false")
    if master:
        builder = builder.master(master)
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if not (config and "spark.sql.shuffle.partitions" in config):
        session.conf.set("spark.sql.shuffle.partitions", str(session.sparkContext.defaultParallelism))
    session.dataSource.register(NSQDataSource)
    return session


def run_until_stopped(query: StreamingQuery, http_address: str = "", poll_seconds: int = 1) -> None:
    """Waits for the query; SIGTERM or SIGINT stop it cleanly (the source requeues what was not committed). With
    ``http_address``, serves ``/ping`` and ``/metrics`` there meanwhile.

    The query is stopped from this loop, not from the signal handler: the handler runs in the middle of a call to
    the JVM, and py4j's connection cannot take a second call then."""
    from .monitoring import serve

    server = serve(http_address, query, query.name or "nsq") if http_address else None
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
        if server is not None:
            server.shutdown()
            server.server_close()
