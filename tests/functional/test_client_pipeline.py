"""The Producer's pipeline against a real nsqd: a window of publishes under way on one connection, answers taken in
order, and what a failure leaves unacknowledged."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable

import pytest

from harness.processes import NSQDProcess
from harness.wire import WireClient
from nsqclient import CommandTimeout, NSQProtocolError, Producer, Publish


def message_count(nsqd: NSQDProcess, topic: str) -> int:
    topics = json.loads(nsqd.http("GET", f"/stats?format=json&topic={topic}")[2])["topics"] or []
    return int(topics[0]["message_count"]) if topics else 0


async def test_a_window_of_publishes_on_one_connection(nsqd: NSQDProcess) -> None:
    consumer = await WireClient.connect(nsqd.tcp_address)
    await consumer.subscribe("piped", "c", rdy=2000)
    most = 0
    async with Producer(nsqd.tcp_address_text) as producer:
        async with producer.pipeline(window=16) as pipeline:
            for number in range(2000):
                await pipeline.publish("piped", b"%d" % number)
                most = max(most, pipeline.unanswered)
        assert pipeline.unanswered == 0  # leaving the block collected every answer
        producers = json.loads(nsqd.http("GET", "/stats?format=json")[2])["producers"]
        assert [p["pub_counts"] for p in producers] == [[{"topic": "piped", "count": 2000}]]  # one connection
    assert most == 16  # the window filled, and never overflowed
    assert [message.body for message in await consumer.read_messages(2000)] == [b"%d" % n for n in range(2000)]
    await consumer.close()


async def test_multi_and_deferred_publishes_in_a_pipeline(nsqd: NSQDProcess) -> None:
    consumer = await WireClient.connect(nsqd.tcp_address)
    await consumer.subscribe("mixed", "c", rdy=10)
    async with Producer(nsqd.tcp_address_text) as producer:
        sent_at = time.monotonic()
        async with producer.pipeline() as pipeline:
            await pipeline.deferred_publish("mixed", b"later", delay=0.3)
            await pipeline.multi_publish("mixed", [b"a", b"b"])
            await pipeline.publish("mixed", b"c")
        assert [message.body for message in await consumer.read_messages(3)] == [b"a", b"b", b"c"]
        assert (await consumer.read_message()).body == b"later" and time.monotonic() - sent_at >= 0.3
    await consumer.close()


async def test_a_refused_publish_fails_the_pipeline_until_it_is_abandoned(
        nsqd_factory: Callable[..., NSQDProcess]) -> None:
    nsqd = nsqd_factory("--max-msg-size=10")
    async with Producer(nsqd.tcp_address_text) as producer:
        pipeline = producer.pipeline()
        for body in (b"one", b"two", b"x" * 11, b"three", b"four"):
            await pipeline.publish("small", body)  # written without waiting: the refusal is not known yet
        with pytest.raises(NSQProtocolError, match="E_BAD_MESSAGE"):
            await pipeline.flush()
        with pytest.raises(NSQProtocolError, match="E_BAD_MESSAGE"):  # nothing more is sent until abandon()
            await pipeline.publish("small", b"five")
        # nsqd closed the connection after the refusal: what followed it was not taken either
        assert pipeline.abandon() == [Publish("small", [b"x" * 11]), Publish("small", [b"three"]),
                                      Publish("small", [b"four"])]
        assert pipeline.unanswered == 0
        await pipeline.publish("small", b"five")  # on a new connection
        await pipeline.flush()
    assert message_count(nsqd, "small") == 3


async def test_an_unanswered_publish_times_out_and_ends_the_connection(nsqd: NSQDProcess) -> None:
    async with Producer(nsqd.tcp_address_text) as producer:
        pipeline = producer.pipeline(timeout=0.5)
        await pipeline.publish("slow", b"answered")
        await pipeline.flush()
        nsqd.process.send_signal(signal.SIGSTOP)  # nsqd answers nothing while stopped
        try:
            await pipeline.publish("slow", b"first")
            await pipeline.multi_publish("slow", [b"second", b"third"])
            with pytest.raises(CommandTimeout, match="no answer within 0.5 s"):
                await pipeline.flush()
            assert pipeline.abandon() == [Publish("slow", [b"first"]), Publish("slow", [b"second", b"third"])]
        finally:
            nsqd.process.send_signal(signal.SIGCONT)
        await pipeline.publish("slow", b"after")
        await pipeline.flush()
    # what was abandoned may or may not have been taken (nsqd read it once it went on): at least once
    assert message_count(nsqd, "slow") in (2, 3, 5)
