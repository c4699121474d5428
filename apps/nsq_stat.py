"""``nsq_stat``: polls ``/stats`` of every nsqd holding a topic and prints one channel's aggregate, a row an interval.

As NSQ's ``apps/nsq_stat``: the nodes are the ``--nsqd-http-address`` ones, or the producers every
``--lookupd-http-address`` lists for the topic (each node once); the channel's counters are summed over the nodes;
a row shows the ingress and egress rates over the last interval (from ``message_count`` and ``depth`` deltas), then
the current totals, under a header printed before every 25th sample. The first sample is only the baseline, so
``--count N`` prints N rows from N + 1 polls.

Where this differs from NSQ, on purpose: NSQ exits on the first failed poll, here an unreachable node or a missing
topic/channel is logged and the next poll tries again; a sample taken from another set of nodes than the previous
one (a node lost or gained) starts a new baseline instead of printing a rate that mixes the two sets.

The aggregation (``channel_stats``, ``aggregate``, ``producer_addresses``) and the table (``Report``) are pure;
``Cluster`` asks the nodes (through ``shared.cluster_info``) and ``stat_loop`` keeps the timing.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, TextIO, TypeVar

from shared.cluster_info import ClusterInfo, ClusterInfoError, gather_answers, http_address
from shared.flags import FlagError, check_secret_file, option, require_positive, secret_from_file
from shared.program import ProgramOptions, run_tool
from shared.version import VERSION, version_line

log = logging.getLogger("nsq_stat")
T = TypeVar("T")

HEADER_EVERY = 25
HEADER = (
    "------rate------+----------------depth----------------+--------------metadata---------------",
    (f"{'ingress':>7} {'egress':>7} | {'total':>7} {'mem':>7} {'disk':>7} {'inflt':>5} {'def':>5} | "
     f"{'req':>7} {'t-o':>7} {'msgs':>12} {'clients':>7}"),
)
_COUNTERS = ("depth", "backend_depth", "in_flight_count", "deferred_count", "requeue_count", "timeout_count",
             "message_count")


@dataclass
class Options(ProgramOptions):
    topic: str = option("", "NSQ topic")
    channel: str = option("", "NSQ channel")
    interval: float = option(2.0, "duration of time between polling/printing output", kind="duration")
    http_client_connect_timeout: float = option(2.0, "timeout for HTTP connect", kind="duration")
    http_client_request_timeout: float = option(5.0, "timeout for HTTP request", kind="duration")
    http_client_auth_secret_file: str = option("", "file whose first line is the secret sent (Authorization: "
                                                   "Bearer) to nsqds and lookupds that ask for one "
                                                   "(--http-auth-required)")
    count: int = option(0, "number of reports")
    nsqd_http_address: list[str] = option([], "nsqd HTTP address (may be given multiple times)")
    lookupd_http_address: list[str] = option([], "lookupd HTTP address (may be given multiple times)")

    def validate(self) -> None:
        """NSQ's checks, in NSQ's order and words."""
        super().validate()
        if not self.topic or not self.channel:
            raise FlagError("--topic and --channel are required")
        require_positive(self, "interval", "http_client_connect_timeout", "http_client_request_timeout")
        if self.count < 0:  # 0 is the default, forever (NSQ refuses an explicit 0 too)
            raise FlagError("--count should be positive")
        self._validate_addresses()
        check_secret_file(self.http_client_auth_secret_file)

    def _validate_addresses(self) -> None:
        if not self.nsqd_http_address and not self.lookupd_http_address:
            raise FlagError("--nsqd-http-address or --lookupd-http-address required")
        if self.nsqd_http_address and self.lookupd_http_address:
            raise FlagError("use --nsqd-http-address or --lookupd-http-address not both")
        for flag, addresses in (("nsqd-http-address", self.nsqd_http_address),
                                ("lookupd-http-address", self.lookupd_http_address)):
            if any(address.startswith("http") for address in addresses):  # NSQ's test, prefix only
                raise FlagError(f"--{flag} error - address should not contain scheme")


@dataclass(frozen=True)
class ChannelStats:
    """One channel's counters on one node, or summed over several (NSQ's ``clusterinfo.ChannelStats``)."""

    depth: int = 0
    memory_depth: int = 0
    backend_depth: int = 0
    in_flight_count: int = 0
    deferred_count: int = 0
    requeue_count: int = 0
    timeout_count: int = 0
    message_count: int = 0
    client_count: int = 0

    @classmethod
    def from_json(cls, channel: Mapping[str, Any]) -> ChannelStats:
        """From a channel of nsqd's ``/stats`` JSON; nsqd has no memory depth, NSQ takes depth - backend_depth."""
        counters = {name: int(channel.get(name) or 0) for name in _COUNTERS}
        clients = channel.get("client_count", len(channel.get("clients") or []))
        return cls(memory_depth=counters["depth"] - counters["backend_depth"], client_count=int(clients or 0),
                   **counters)

    def __add__(self, other: ChannelStats) -> ChannelStats:
        return ChannelStats(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


def channel_stats(document: Mapping[str, Any], topic: str, channel: str) -> ChannelStats | None:
    """The channel's counters in one nsqd's ``/stats?format=json`` document; None when it has no such channel."""
    for topic_stats in document.get("topics") or []:
        if topic_stats.get("topic_name") != topic:
            continue
        for stats in topic_stats.get("channels") or []:
            if stats.get("channel_name") == channel:
                return ChannelStats.from_json(stats)
    return None


def aggregate(documents: Iterable[Mapping[str, Any]], topic: str, channel: str) -> ChannelStats | None:
    """The channel summed over the nodes' ``/stats`` documents; None when no node has it."""
    found = [stats for document in documents if (stats := channel_stats(document, topic, channel)) is not None]
    return sum(found, ChannelStats()) if found else None


def producer_addresses(lookups: Iterable[list[dict[str, Any]]]) -> list[str]:
    """The HTTP addresses of the producers several lookupds list, each once, in the order first seen."""
    return list(dict.fromkeys(http_address(producer) for producers in lookups for producer in producers))


def format_row(current: ChannelStats, previous: ChannelStats, interval: float) -> str:
    """A row of the table: rates per second over ``interval`` (truncated toward zero, as NSQ's int64 conversion),
    then the current totals."""
    messages = current.message_count - previous.message_count
    ingress = int(messages / interval)
    egress = int((messages - (current.depth - previous.depth)) / interval)
    c = current
    return (f"{ingress:7d} {egress:7d} | {c.depth:7d} {c.memory_depth:7d} {c.backend_depth:7d} "
            f"{c.in_flight_count:5d} {c.deferred_count:5d} | {c.requeue_count:7d} {c.timeout_count:7d} "
            f"{c.message_count:12d} {c.client_count:7d}")


@dataclass(frozen=True)
class Sample:
    """The channel summed over the nodes that answered one poll, and which nodes those were."""

    stats: ChannelStats
    nodes: frozenset[str]


@dataclass
class Report:
    """NSQ's table, fed sample by sample: a header before every 25th sample, a row for each sample after the one
    before it (the baseline)."""

    interval: float
    samples: int = 0
    rows: int = 0
    previous: Sample | None = None

    def add(self, sample: Sample) -> list[str]:
        """The lines to print for ``sample``."""
        lines = list(HEADER) if self.samples % HEADER_EVERY == 0 else []
        if self.previous is not None and self.previous.nodes == sample.nodes:
            lines.append(format_row(sample.stats, self.previous.stats, self.interval))
            self.rows += 1
        self.previous = sample
        self.samples += 1
        return lines

    def missed(self) -> None:
        """A poll that gave no sample: the next sample is a new baseline, so no rate spans two intervals."""
        self.previous = None


class Cluster:
    """Polls the nsqd nodes of one topic/channel over HTTP, as NSQ's ``clusterinfo`` does; logs what fails."""

    def __init__(self, info: ClusterInfo, opts: Options) -> None:
        self._info = info
        self._opts = opts

    async def sample(self) -> Sample | None:
        """The channel summed over the nodes that answered; None (the reason logged) when there is none."""
        nodes = await self._nodes()
        documents = await _from_each(nodes, self._stats, "failed to get nsqd stats")
        if nodes and not documents:
            return None  # every node failed, each one logged
        stats = aggregate(documents.values(), self._opts.topic, self._opts.channel)
        if stats is None:
            log.error("failed to find channel(%s) in stats metadata for topic(%s)", self._opts.channel,
                      self._opts.topic)
            return None
        return Sample(stats, frozenset(documents))

    def _stats(self, address: str) -> Awaitable[dict[str, Any]]:
        return self._info.stats(address, self._opts.topic, self._opts.channel)

    async def _nodes(self) -> list[str]:
        """The nsqd HTTP addresses to poll: the given ones, or the topic's producers known to any lookupd."""
        if not self._opts.lookupd_http_address:
            return list(self._opts.nsqd_http_address)
        lookups = await _from_each(self._opts.lookupd_http_address,
                                   lambda address: self._info.producers(address, self._opts.topic),
                                   "failed to get topic producers")
        return producer_addresses(lookups.values())


async def _from_each(addresses: list[str], ask: Callable[[str], Awaitable[T]], failure: str) -> dict[str, T]:
    """Each address's answer, asked concurrently; the failures are logged and left out."""
    answers = {}
    for address, answer in zip(addresses, await gather_answers(ask(address) for address in addresses)):
        if isinstance(answer, ClusterInfoError):
            log.error("%s - %s", failure, answer)
        else:
            answers[address] = answer
    return answers


async def _poll(cluster: Cluster, report: Report) -> list[str]:
    sample = await cluster.sample()
    if sample is None:
        report.missed()
        return []
    return report.add(sample)


async def stat_loop(opts: Options, out: TextIO) -> None:
    """Polls every ``--interval`` and prints, until ``--count`` rows are out (forever for 0)."""
    report = Report(opts.interval)
    loop = asyncio.get_running_loop()
    async with ClusterInfo.open(opts.http_client_connect_timeout, opts.http_client_request_timeout,
                                f"nsq_stat/{VERSION}", secret_from_file(opts.http_client_auth_secret_file)) as info:
        cluster = Cluster(info, opts)
        deadline = loop.time()
        while True:
            lines = await _poll(cluster, report)
            if lines:
                out.write("\n".join(lines) + "\n")
                out.flush()  # a row is for watching now, also through a pipe
            if opts.count and report.rows >= opts.count:
                return
            # fixed ticks, so the time between samples is the interval the rates divide by; a poll slower than
            # the interval only delays the next one
            deadline = max(deadline + opts.interval, loop.time())
            await asyncio.sleep(deadline - loop.time())


async def run(opts: Options, stopping: asyncio.Event) -> int:
    """The tool: the stat loop, ended early (and with exit code 0) by SIGINT or SIGTERM."""
    stat = asyncio.create_task(stat_loop(opts, sys.stdout))
    stop = asyncio.create_task(stopping.wait())
    try:
        await asyncio.wait((stat, stop), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (stat, stop):
            task.cancel()
        await asyncio.wait((stat, stop))
    if not stat.cancelled():
        stat.result()  # an unexpected error is raised, not hidden
    return 0


def main(argv: list[str] | None = None) -> None:
    run_tool("nsq_stat", Options, version_line("nsq_stat"), run, argv)


if __name__ == "__main__":
    main()
