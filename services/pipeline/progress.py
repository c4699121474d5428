"""How a streaming job is doing, sampled at a steady interval: messages per second over the interval, messages in
all, the last micro-batch's size and duration, and the backlog nsqd still holds for the job's channel. Each sample
is a line on the job's output and the figures on its ``/metrics``.

The rows come from the query's own progress reports (``recentProgress``, the last hundred batches: each counted
once, by batch id); the backlog from nsqd's ``/stats`` on every nsqd that has the topic (the ones lookupd lists
for it, and any given by HTTP address), summed: the channel's ``depth``, which does not count what the job holds
in flight.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from shared.cluster_info import ClusterInfo, ClusterInfoError, gather_answers, http_address

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger("nsq.pipeline")
T = TypeVar("T")

HTTP_TIMEOUT = 5.0
DEFAULT_INTERVAL = 10.0  # how often /metrics is sampled when no progress lines are printed


@dataclass(frozen=True)
class Sample:
    rows_per_second: float
    rows: int  # in all, since the job started
    batch_id: int | None = None  # the last batch that read something, and its size and duration
    batch_rows: int = 0
    batch_seconds: float = 0.0
    backlog: int | None = None  # None: no nsqd could be asked

    def line(self, job: str) -> str:
        backlog = "unknown" if self.backlog is None else f"{self.backlog:,}"
        batch = ("no batch yet" if self.batch_id is None else
                 f"last batch {self.batch_rows:,} messages in {self.batch_seconds:.2f}s")
        return (f"{job}: {self.rows_per_second:,.0f} msg/s, {self.rows:,} in all; backlog in nsqd {backlog}; "
                f"{batch}")


class BatchCounter:
    """Rows read, from progress reports that repeat: each batch counted once."""

    def __init__(self) -> None:
        self.rows = 0
        self.last: dict[str, Any] | None = None  # the latest report of a batch that read something
        self._seen: set[int] = set()

    def add(self, reports: Iterable[dict[str, Any]]) -> None:
        for report in reports:
            if report["batchId"] in self._seen:
                continue
            self._seen.add(report["batchId"])
            self.rows += report["numInputRows"]
            if report["numInputRows"] and (self.last is None or report["batchId"] > self.last["batchId"]):
                self.last = report
        if len(self._seen) > 10_000:  # reports only go 100 batches back
            self._seen = set(sorted(self._seen)[-1000:])


class ChannelBacklog:
    """The channel's depth summed over the nsqd that have any of ``topics``; None when none answered. Called on the
    sampling thread: each call asks on a loop and a session of its own, closed before it returns."""

    def __init__(self, topics: Sequence[str], channel: str, lookupd_http_addresses: Sequence[str] = (),
                 nsqd_http_addresses: Sequence[str] = ()) -> None:
        self._topics, self._channel = list(topics), channel
        self._lookupds, self._nsqds = list(lookupd_http_addresses), list(nsqd_http_addresses)

    def __call__(self) -> int | None:
        return asyncio.run(self._backlog())

    async def _backlog(self) -> int | None:
        async with ClusterInfo.open(HTTP_TIMEOUT, HTTP_TIMEOUT) as cluster:
            asked = [self._depths(cluster, topic) for topic in self._topics]
            depths = [depth for found in await asyncio.gather(*asked) for depth in found]
        return sum(depths) if depths else None

    async def _depths(self, cluster: ClusterInfo, topic: str) -> list[int]:
        """The channel's depth on each nsqd of ``topic`` that answered."""
        nodes = dict.fromkeys(self._nsqds)
        for producers in _answered(await gather_answers(cluster.producers(lookupd, topic)
                                                        for lookupd in self._lookupds)):
            nodes.update(dict.fromkeys(http_address(producer) for producer in producers))
        answers = await gather_answers(cluster.stats(node, topic, self._channel) for node in nodes)
        return [sum(int(channel.get("depth") or 0) for entry in stats.get("topics") or []
                    if entry.get("topic_name") == topic for channel in entry.get("channels") or []
                    if channel.get("channel_name") == self._channel)
                for stats in _answered(answers)]


def _answered(answers: list[T | ClusterInfoError]) -> list[T]:
    """The answers; each failure logged, but for a topic a lookupd does not know (yet)."""
    for answer in answers:
        if isinstance(answer, ClusterInfoError) and answer.status != 404:
            log.warning("%s", answer)
    return [answer for answer in answers if not isinstance(answer, ClusterInfoError)]


class JobProgress:
    """Samples a query's progress and its channel's backlog; a Prometheus collector of the latest sample."""

    def __init__(self, query: StreamingQuery, job: str, backlog: Callable[[], int | None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.query, self.job = query, job
        self._backlog = backlog
        self._clock = clock
        self._batches = BatchCounter()
        self._sampled_at = clock()
        # replaced whole by the one sampling thread; scrapes on other threads read it
        self.latest = Sample(0.0, 0)

    def sample(self) -> Sample:
        before = self._batches.rows
        self._batches.add(self.query.recentProgress)
        now = self._clock()
        elapsed, self._sampled_at = now - self._sampled_at, now
        last = self._batches.last
        self.latest = Sample(
            rows_per_second=(self._batches.rows - before) / elapsed if elapsed > 0 else 0.0,
            rows=self._batches.rows,
            batch_id=None if last is None else last["batchId"],
            batch_rows=0 if last is None else last["numInputRows"],
            batch_seconds=0.0 if last is None else last["durationMs"].get("triggerExecution", 0) / 1000,
            backlog=self._backlog() if self._backlog is not None else None)
        return self.latest

    def collect(self) -> Iterator[Metric]:
        latest = self.latest
        yield _gauge("nsq_pipeline_query_active", "1 while the streaming query runs", self.job,
                     1 if self.query.isActive else 0)
        rows = CounterMetricFamily("nsq_pipeline_input_rows", "Messages read by the query's micro-batches",
                                   labels=["job"])
        rows.add_metric([self.job], latest.rows)
        yield rows
        yield _gauge("nsq_pipeline_messages_per_second", "Messages read per second over the last progress interval",
                     self.job, latest.rows_per_second)
        last_batch = latest.batch_id is not None
        yield _gauge("nsq_pipeline_batch_id", "The last micro-batch that read messages", self.job,
                     latest.batch_id if last_batch else None)
        yield _gauge("nsq_pipeline_batch_messages", "The last micro-batch's messages", self.job,
                     latest.batch_rows if last_batch else None)
        yield _gauge("nsq_pipeline_batch_duration_seconds", "The last micro-batch's time", self.job,
                     latest.batch_seconds if last_batch else None)
        yield _gauge("nsq_pipeline_backlog_messages", "Messages nsqd holds for the job's channel, not yet sent to it",
                     self.job, latest.backlog)


def _gauge(name: str, documentation: str, job: str, value: float | None) -> GaugeMetricFamily:
    """A gauge with the ``job`` label; without a sample while ``value`` is unknown."""
    gauge = GaugeMetricFamily(name, documentation, labels=["job"])
    if value is not None:
        gauge.add_metric([job], value)
    return gauge


def report_every(progress: JobProgress, interval: float, out: TextIO | None,
                 stopped: threading.Event) -> threading.Thread:
    """Samples ``progress`` every ``interval`` s on a thread of its own (for ``/metrics``) and prints each sample's
    line to ``out`` (None: no lines), until ``stopped`` is set."""

    def loop() -> None:
        deadline = time.monotonic()
        while not stopped.wait(max(0.0, (deadline := deadline + interval) - time.monotonic())):
            try:
                line = progress.sample().line(progress.job)
            except Exception:  # the query's JVM side going away as the job stops, most likely
                if not stopped.is_set():
                    log.exception("sampling the job's progress")
                continue
            if out is not None:
                out.write(line + "\n")
                out.flush()

    thread = threading.Thread(target=loop, name="nsq-pipeline-progress", daemon=True)
    thread.start()
    return thread
