"""The client library's Consumer against real nsqd and nsqlookupd processes, and with pynsq on the other end."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.processes import FAST_SCAN, NSQDProcess, start_lookupd, start_nsqd, wait_for_async
from harness.pynsq import PynsqLoop
from nsqclient import Consumer, Message, Producer
from tests.functional.test_pynsq import pynsq  # noqa: F401  (the fixture)


class Recorder:
    """A handler that records what it got, optionally failing or holding messages."""

    def __init__(self, fail: Callable[[Message], bool] = lambda _: False, delay: float = 0.0) -> None:
        self.messages: list[Message] = []
        self.fail, self.delay = fail, delay
        self.running = self.most_running = 0

    async def __call__(self, message: Message) -> None:
        self.messages.append(message)
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            if self.fail(message):
                raise RuntimeError("handler failure (expected by the test)")
        finally:
            self.running -= 1

    def bodies(self) -> list[bytes]:
        return [message.body for message in self.messages]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[NSQDProcess, list[NSQDProcess]]]:
    lookupd = start_lookupd()
    nodes: list[NSQDProcess] = []
    try:
        for index in range(2):
            (tmp_path / f"n{index}").mkdir()
            nodes.append(start_nsqd(*FAST_SCAN, f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}",
                                    "--broadcast-address=127.0.0.1", data_path=tmp_path / f"n{index}"))
        yield lookupd, nodes
    finally:
        for node in nodes:
            node.stop()
        lookupd.stop()


async def test_discovers_every_nsqd_through_lookupd_and_consumes_from_both(
        cluster: tuple[NSQDProcess, list[NSQDProcess]]) -> None:
    lookupd, nodes = cluster
    for index, node in enumerate(nodes):
        node.multi_publish("spread", [b"%d-%d" % (index, n) for n in range(50)])
    handler = Recorder()
    async with Consumer("spread", "c", handler, lookupd_http_addresses=[f"127.0.0.1:{lookupd.http_port}"],
                        lookupd_poll_interval=0.2, max_in_flight=10) as consumer:
        await wait_for_async(lambda: len(handler.messages) == 100, what="100 messages")
        assert sorted(consumer.connections) == sorted(node.tcp_address_text for node in nodes)
        assert consumer.total_rdy == 10
    assert sorted(handler.bodies()) == sorted(b"%d-%d" % (i, n) for i in range(2) for n in range(50))
    for node in nodes:
        await wait_for_async(lambda: node.channel_stats("spread", "c").get("in_flight_count") == 0,
                             what="every message finished")


async def test_rdy_in_total_never_exceeds_max_in_flight(cluster: tuple[NSQDProcess, list[NSQDProcess]]) -> None:
    _, nodes = cluster
    for node in nodes:
        node.multi_publish("few", [b"x"] * 20)
    handler = Recorder(delay=0.01)
    rdy_totals: list[int] = []  # sampled while the messages come in: nsqd's view and the consumer's

    def sampled_until_all_came() -> bool:
        ready = [client["ready_count"] for node in nodes
                 for client in node.channel_stats("few", "c").get("clients", [])]
        rdy_totals.extend((sum(ready), consumer.total_rdy))
        return len(handler.messages) >= 40

    async with Consumer("few", "c", handler, nsqd_tcp_addresses=[node.tcp_address_text for node in nodes],
                        max_in_flight=1, rdy_redistribute_interval=0.1) as consumer:
        await wait_for_async(sampled_until_all_came, what="40 messages", interval=0.01)
    assert max(rdy_totals) == 1  # one connection at a time has RDY 1, and both got their turn
    assert len(handler.messages) == 40
    assert {m.nsqd_address for m in handler.messages} == {n.tcp_address_text for n in nodes}


async def test_a_failing_handler_requeues_with_delay_and_backs_off(nsqd: NSQDProcess) -> None:
    nsqd.multi_publish("flaky", [b"one"])
    handler = Recorder(fail=lambda message: message.attempts == 1)
    async with Consumer("flaky", "c", handler, nsqd_tcp_addresses=[nsqd.tcp_address_text], max_in_flight=5,
                        requeue_delay=0.3, backoff_multiplier=0.5) as consumer:
        await wait_for_async(lambda: consumer.requeued == 1, what="the failure requeued", interval=0.01)
        failed_at = time.monotonic()
        await wait_for_async(lambda: [c["ready_count"] for c in nsqd.channel_stats("flaky", "c")["clients"]] == [0],
                             what="RDY 0 in the backoff")
        await wait_for_async(lambda: len(handler.messages) == 2, what="the message redelivered")
        assert time.monotonic() - failed_at >= 0.25  # the requeue delay (the backoff pause is shorter)
        assert [m.attempts for m in handler.messages] == [1, 2]
        await wait_for_async(lambda: consumer.total_rdy == 5 and consumer.finished == 1,
                             what="the backoff ended by a success")
        assert [c["ready_count"] for c in nsqd.channel_stats("flaky", "c")["clients"]] == [5]


def test_backoff_ends_on_uvloop_whose_timers_fire_a_little_early(nsqd: NSQDProcess) -> None:
    """uvloop runs a timer up to a millisecond before its time: the end of each backoff pause must still resume
    the consumer (the tools run on uvloop)."""
    uvloop = pytest.importorskip("uvloop")
    nsqd.multi_publish("flaky", [b"%d" % number for number in range(5)])

    async def scenario() -> None:
        handler = Recorder(fail=lambda message: message.attempts <= 3)
        async with Consumer("flaky", "c", handler, nsqd_tcp_addresses=[nsqd.tcp_address_text], max_in_flight=5,
                            requeue_delay=0.01, backoff_multiplier=0.05, max_backoff_duration=0.2) as consumer:
            await wait_for_async(lambda: consumer.finished == 5, what="five finished through about a dozen pauses")

    uvloop.run(scenario())


async def test_touch_extends_the_deadline(nsqd: NSQDProcess) -> None:
    nsqd.multi_publish("slow", [b"long job"])

    async def touching(message: Message) -> None:
        for _ in range(5):
            await asyncio.sleep(0.4)
            message.touch()

    seen: list[int] = []

    async def handle(message: Message) -> None:
        seen.append(message.attempts)
        await touching(message)

    async with Consumer("slow", "c", handle, nsqd_tcp_addresses=[nsqd.tcp_address_text], msg_timeout=1000) as consumer:
        await wait_for_async(lambda: consumer.finished == 1, what="the touched message finished")
    assert seen == [1]  # 2 s of work on a 1 s timeout, never redelivered
    assert nsqd.channel_stats("slow", "c")["timeout_count"] == 0


async def test_without_touch_the_message_times_out(nsqd: NSQDProcess) -> None:
    nsqd.multi_publish("slow2", [b"long job"])
    handler = Recorder(delay=1.5)
    async with Consumer("slow2", "c", handler, nsqd_tcp_addresses=[nsqd.tcp_address_text], msg_timeout=1000,
                        max_in_flight=2, concurrency=2):
        await wait_for_async(lambda: len(handler.messages) == 2, what="the message redelivered after its timeout")
    assert [m.attempts for m in handler.messages] == [1, 2]
    assert nsqd.channel_stats("slow2", "c")["timeout_count"] == 1


@pytest.mark.parametrize("hook_kind", ["sync", "async"])
async def test_max_attempts_hands_the_message_to_the_give_up_hook(nsqd: NSQDProcess, hook_kind: str) -> None:
    nsqd.multi_publish("poison", [b"bad"])
    given_up: list[Message] = []

    def sync_hook(message: Message) -> None:
        given_up.append(message)

    async def async_hook(message: Message) -> None:
        given_up.append(message)

    handler = Recorder(fail=lambda _: True)
    async with Consumer("poison", "c", handler, nsqd_tcp_addresses=[nsqd.tcp_address_text], max_attempts=2,
                        requeue_delay=0, backoff_multiplier=0.01,
                        on_give_up=sync_hook if hook_kind == "sync" else async_hook) as consumer:
        await wait_for_async(lambda: consumer.given_up == 1, what="the message given up")
    assert [m.attempts for m in handler.messages] == [1, 2] and [m.attempts for m in given_up] == [3]
    stats = nsqd.channel_stats("poison", "c")
    assert (stats["depth"], stats["in_flight_count"]) == (0, 0)


async def test_reconnects_after_nsqd_is_killed_and_restarted(tmp_path: Path) -> None:
    first = start_nsqd(*FAST_SCAN, data_path=tmp_path)
    tcp_port, http_port = first.tcp_port, first.http_port
    handler = Recorder()
    consumer = Consumer("phoenix", "c", handler, nsqd_tcp_addresses=[first.tcp_address_text])
    await consumer.start()
    second: NSQDProcess | None = None
    try:
        await wait_for_async(lambda: consumer.connections, what="connected")
        first.multi_publish("phoenix", [b"before"])
        await wait_for_async(lambda: handler.bodies() == [b"before"], what="the first message")
        await wait_for_async(lambda: first.channel_stats("phoenix", "c")["in_flight_count"] == 0,
                             what="the first message finished")
        first.stop(signal.SIGKILL)
        await wait_for_async(lambda: not consumer.connections, what="the connection lost")
        second = start_nsqd(*FAST_SCAN, f"--tcp-address=127.0.0.1:{tcp_port}",
                            f"--http-address=127.0.0.1:{http_port}", data_path=tmp_path)
        second.multi_publish("phoenix", [b"after"])
        await wait_for_async(lambda: handler.bodies() == [b"before", b"after"], what="the message after the restart")
    finally:
        await consumer.stop()
        if second is not None:
            second.stop()


async def test_stop_waits_for_the_messages_in_flight(nsqd: NSQDProcess) -> None:
    nsqd.multi_publish("drain", [b"%d" % n for n in range(4)])
    handler = Recorder(delay=0.5)
    consumer = Consumer("drain", "c", handler, nsqd_tcp_addresses=[nsqd.tcp_address_text], max_in_flight=4,
                        concurrency=4)
    await consumer.start()
    await wait_for_async(lambda: handler.running == 4, what="four handlers running")
    await consumer.stop()
    assert consumer.finished == 4 and handler.most_running == 4  # concurrency: all four at once

    def without_clients() -> dict[str, Any] | None:  # nsqd sees the connection close after the consumer closed it
        stats = nsqd.channel_stats("drain", "c")
        return stats if stats["clients"] == [] else None

    stats = await wait_for_async(without_clients, what="the consumer gone from the channel")
    assert (stats["depth"], stats["in_flight_count"], stats["requeue_count"]) == (0, 0, 0)


async def test_manual_responses_and_starvation(nsqd: NSQDProcess) -> None:
    nsqd.multi_publish("batch", [b"%d" % n for n in range(10)])
    held: list[Message] = []

    async def hold(message: Message) -> None:
        message.disable_auto_response()
        held.append(message)

    async with Consumer("batch", "c", hold, nsqd_tcp_addresses=[nsqd.tcp_address_text], max_in_flight=10) as consumer:
        await wait_for_async(lambda: len(held) == 10, what="ten messages held")
        assert consumer.is_starved() and consumer.in_flight == 10
        held[0].requeue(0, backoff=False)
        for message in held[1:]:
            message.finish()
        held[1].finish()  # a second response is ignored
        await wait_for_async(lambda: len(held) == 11, what="the requeued message again")
        held[10].finish()
        assert consumer.requeued == 1 and consumer.finished == 10 and consumer.total_rdy == 10  # no backoff
    stats = nsqd.channel_stats("batch", "c")
    assert (stats["depth"], stats["in_flight_count"], stats["requeue_count"]) == (0, 0, 1)


# interoperability with pynsq, NSQ's own Python client ------------------------------------------------------------

async def test_messages_published_by_pynsq_are_consumed_by_ours(nsqd: NSQDProcess, pynsq: PynsqLoop) -> None:
    writer = await asyncio.to_thread(pynsq.writer, nsqd.tcp_address)
    assert await asyncio.to_thread(writer.pub, "interop", b"single") == b"OK"
    assert await asyncio.to_thread(writer.mpub, "interop", [b"m1", b"m2", "\u00fc".encode()]) == b"OK"
    handler = Recorder()
    async with Consumer("interop", "ours", handler, nsqd_tcp_addresses=[nsqd.tcp_address_text], max_in_flight=10):
        await wait_for_async(lambda: len(handler.messages) == 4, what="pynsq's four messages")
    assert handler.bodies() == [b"single", b"m1", b"m2", "\u00fc".encode()]


async def test_messages_published_by_ours_are_consumed_by_pynsq(nsqd: NSQDProcess, pynsq: PynsqLoop) -> None:
    reader = await asyncio.to_thread(pynsq.reader, nsqd.tcp_address, "interop2", "theirs", max_in_flight=10)
    await wait_for_async(lambda: nsqd.channel_stats("interop2", "theirs").get("clients"), what="pynsq subscribed")
    async with Producer(nsqd.tcp_address_text) as producer:
        await producer.publish("interop2", b"single")
        await producer.multi_publish("interop2", [b"m1", b"m2"])
        await producer.deferred_publish("interop2", b"deferred", delay=0.1)
    received = await asyncio.to_thread(reader.inbox.wait_count, 4)
    assert sorted(message.body for message in received) == [b"deferred", b"m1", b"m2", b"single"]
