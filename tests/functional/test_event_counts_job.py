"""nsq_event_counts in the test's Spark session against a real nsqd: JSON events read from one topic through the
``nsq`` source, counted per type and window, and the counts published to another topic through the sink."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harness.processes import NSQDProcess, wait_for_async
from nsqclient import Consumer, Message
from services.pipeline.jobs import event_counts
from tests.functional.spark import spark  # noqa: F401  (the fixture)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def totals(counts: list[dict[str, Any]]) -> dict[str | None, int]:
    """Events per type over every window. In update mode a window's count is published again whenever it grows:
    its last, largest, count is its total."""
    latest: dict[tuple[str, str | None], int] = {}
    for count in counts:
        assert count["window_end"] > count["window_start"]
        key = (count["window_start"], count.get("type"))
        latest[key] = max(latest.get(key, 0), count["count"])
    per_type: defaultdict[str | None, int] = defaultdict(int)
    for (_, kind), number in latest.items():
        per_type[kind] += number
    return dict(per_type)


async def published_totals(nsqd: NSQDProcess, expected: dict[str | None, int], running: Callable[[], bool],
                           timeout: float = 60) -> dict[str | None, int]:
    """The totals the output topic's messages add up to, once they are ``expected`` or the query is no longer
    ``running``; AssertionError after ``timeout`` s."""
    received: list[dict[str, Any]] = []

    async def handle(message: Message) -> None:
        received.append(json.loads(message.body))

    consumer = Consumer("event_counts", "check", handle, nsqd_tcp_addresses=[f"127.0.0.1:{nsqd.tcp_port}"])
    await consumer.start()
    try:
        await wait_for_async(lambda: totals(received) == expected or not running(), timeout,
                             lambda: f"the totals {expected}, got {totals(received)}", interval=0.1)
    finally:
        await consumer.stop()
    return totals(received)


def test_counts_events_per_type_and_publishes_them(spark: SparkSession, nsqd: NSQDProcess,  # noqa: F811
                                                    tmp_path: Path) -> None:
    # the channel first, so that nothing published to the output topic goes unread
    assert nsqd.http("POST", "/topic/create?topic=event_counts")[0] == 200
    assert nsqd.http("POST", "/channel/create?topic=event_counts&channel=check")[0] == 200
    events = [{"type": "click"}] * 20 + [{"type": "view"}] * 10 + [{"user": 7}]
    body = b"\n".join(json.dumps(event).encode() for event in events)
    assert nsqd.http("POST", "/mpub?topic=events", body)[0] == 200

    args = event_counts.parser().parse_args([
        "--topic=events", "--output-topic=event_counts", f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}",
        f"--checkpoint-dir={tmp_path / 'checkpoint'}", "--window=1 day", "--trigger-interval=500 milliseconds"])
    query = event_counts.start(spark, args)
    try:
        expected = {"click": 20, "view": 10, None: 1}  # an event without a type counts as type null
        published = asyncio.run(published_totals(nsqd, expected, lambda: query.isActive))
        assert query.exception() is None
        assert published == expected
    finally:
        query.stop()
