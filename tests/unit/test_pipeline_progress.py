"""A job's progress reporting: batches counted once from repeated progress reports, the progress line, and the
channel's backlog read from fake lookupd and nsqd hosts on loopback ports."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from services.pipeline.progress import BatchCounter, ChannelBacklog, Sample
from tests.unit.http_hosts import Hosts, closed_address


def report(batch: int, rows: int, ms: int = 500) -> dict[str, Any]:
    return {"batchId": batch, "numInputRows": rows, "durationMs": {"triggerExecution": ms}}


def test_batches_are_counted_once_across_overlapping_reports() -> None:
    counter = BatchCounter()
    counter.add([report(0, 10), report(1, 20)])
    counter.add([report(1, 20), report(2, 0), report(3, 30)])
    assert counter.rows == 60
    assert counter.last == report(3, 30)
    counter.add([report(3, 30), report(4, 0)])  # an empty batch after it: the last one that read stays
    assert counter.rows == 60 and counter.last == report(3, 30)


def test_the_seen_batches_are_bounded() -> None:
    counter = BatchCounter()
    for first in range(0, 20_000, 100):
        counter.add([report(batch, 1) for batch in range(first, first + 100)])
    assert counter.rows == 20_000
    counter.add([report(19_999, 1)])  # still known: the latest ones are kept
    assert counter.rows == 20_000


def test_the_progress_line() -> None:
    sample = Sample(rows_per_second=41_234.4, rows=1_234_567, batch_id=7, batch_rows=50_000, batch_seconds=1.234,
                    backlog=250_000)
    assert sample.line("nsq_to_parquet") == ("nsq_to_parquet: 41,234 msg/s, 1,234,567 in all; backlog in nsqd "
                                             "250,000; last batch 50,000 messages in 1.23s")
    assert Sample(0.0, 0).line("job") == "job: 0 msg/s, 0 in all; backlog in nsqd unknown; no batch yet"



@pytest.fixture
async def hosts() -> AsyncIterator[Hosts]:
    async with Hosts() as started:
        yield started


def stats(topic: str, depths: dict[str, int]) -> tuple[int, str]:
    channels = [{"channel_name": name, "depth": depth} for name, depth in depths.items()]
    return 200, json.dumps({"topics": [{"topic_name": topic, "channels": channels}]})


def lookup(*nsqds: int) -> tuple[int, str]:
    producers = [{"broadcast_address": "127.0.0.1", "tcp_port": 1, "http_port": port} for port in nsqds]
    return 200, json.dumps({"producers": producers})


async def test_the_backlog_is_the_channels_depth_over_every_nsqd_of_the_topics(
        hosts: Hosts, caplog: pytest.LogCaptureFixture) -> None:
    first, second = await hosts.start(stats=stats("a", {"job": 5, "other": 100})), await hosts.start(
        stats=stats("a", {"job": 7}))
    lookupd = await hosts.start(lookup=lookup(first.port, second.port))
    unknown = await hosts.start(lookup=(404, '{"message":"TOPIC_NOT_FOUND"}'))
    down = closed_address()
    backlog = ChannelBacklog(["a"], "job", [lookupd.address, unknown.address, down], [first.address])
    with caplog.at_level(logging.WARNING, "nsq.pipeline"):
        assert await asyncio.to_thread(backlog) == 12  # the first nsqd counted once
    # the lookupd that is down is logged; the one that does not know the topic yet is not
    [warning] = [record.getMessage() for record in caplog.records]
    assert warning.startswith(f"http://{down}/lookup?topic=a: ")
    assert {request.query_string for request in first.requests} == \
        {"format=json&topic=a&channel=job&include_clients=false"}


async def test_no_backlog_when_no_nsqd_answers(hosts: Hosts) -> None:
    lookupd = await hosts.start(lookup=lookup())
    assert await asyncio.to_thread(ChannelBacklog(["a"], "job", [lookupd.address], [closed_address()])) is None
