"""A job's HTTP endpoint (``--http-address``): ``/ping`` answers ``OK`` while the streaming query runs (a container's
health check), ``/metrics`` gives the query's progress to Prometheus. Served from a thread of the driver: the
job's main thread is waiting on the query."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from shared.addresses import split_host_port

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery


class QueryProgress:
    """Prometheus collector over ``StreamingQuery.recentProgress``: rows read, batches, rates, last batch time."""

    def __init__(self, query: StreamingQuery, job: str) -> None:
        self._query, self._job = query, job
        self._rows = 0
        self._seen_batches: set[int] = set()
        self._lock = threading.Lock()  # scrapes come on threads of their own

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            self._count_new_batches()
        yield from self._families()

    def _count_new_batches(self) -> None:
        for progress in self._query.recentProgress:  # the last few batches, some perhaps already counted
            if progress.batchId not in self._seen_batches:
                self._seen_batches.add(progress.batchId)
                self._rows += progress.numInputRows
        if len(self._seen_batches) > 10_000:  # recentProgress only holds the last 100
            self._seen_batches = set(sorted(self._seen_batches)[-1000:])

    def _families(self) -> Iterator[Metric]:
        last: Any = self._query.lastProgress
        labels = ["job"]
        active = GaugeMetricFamily("nsq_pipeline_query_active", "1 while the streaming query runs", labels=labels)
        active.add_metric([self._job], 1 if self._query.isActive else 0)
        rows = CounterMetricFamily("nsq_pipeline_input_rows", "Messages read into committed or running batches",
                                   labels=labels)
        rows.add_metric([self._job], self._rows)
        batch = GaugeMetricFamily("nsq_pipeline_batch_id", "The last micro-batch's id", labels=labels)
        rate = GaugeMetricFamily("nsq_pipeline_processed_rows_per_second", "The last micro-batch's rate",
                                 labels=labels)
        duration = GaugeMetricFamily("nsq_pipeline_batch_duration_seconds", "The last micro-batch's time",
                                     labels=labels)
        if last is not None:
            batch.add_metric([self._job], last.batchId)
            rate.add_metric([self._job], last.processedRowsPerSecond or 0.0)
            duration.add_metric([self._job], last.durationMs.get("triggerExecution", 0) / 1000)
        yield from (active, rows, batch, rate, duration)


def serve(address: str, query: StreamingQuery, job: str) -> ThreadingHTTPServer:
    """Starts serving ``/ping`` and ``/metrics`` on ``address`` (``host:port``); ``shutdown()`` stops it."""
    registry = CollectorRegistry()
    registry.register(QueryProgress(query, job))

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/ping":
                healthy = query.isActive
                self._reply(200 if healthy else 500, b"OK" if healthy else b"NOK - query stopped", "text/plain")
            elif self.path == "/metrics":
                self._reply(200, generate_latest(registry), "text/plain; version=0.0.4; charset=utf-8")
            else:
                self._reply(404, b"NOT_FOUND", "text/plain")

        def _reply(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a health check every few seconds is not worth a log line

    host, port = split_host_port(address)
    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="nsq-pipeline-http", daemon=True).start()
    return server
