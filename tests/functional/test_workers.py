"""nsqd with ``--workers``: clients spread over worker processes, one nsqd to everyone who looks, nothing
acknowledged lost when a worker dies. (The wire, transport and delivery suites also run through workers: the
Makefile's ``test`` target runs them again with ``NSQD_TEST_WORKERS``.)"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

from harness.processes import NSQDProcess, start_nsqd, wait_for, wait_for_async
from harness.wire import WireClient
from nsqclient import Consumer, Message, Producer
from nsqclient.protocol.frames import FRAME_TYPE_ERROR

WORKERS = 2


def worker_pids(nsqd: NSQDProcess) -> dict[int, int]:
    """The live pid of each worker, from nsqd's log (``worker N: pid P``, the last one for each N)."""
    pids: dict[int, int] = {}
    for line in list(nsqd.log_lines):
        if match := re.search(r"worker (\d+): pid (\d+)", line):
            pids[int(match.group(1))] = int(match.group(2))
    return pids


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def stats_of(nsqd: NSQDProcess, topic: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(nsqd.http("GET", f"/stats?format=json&topic={topic}")[2])
    return document


def clients_of(nsqd: NSQDProcess, topic: str, channel: str | None = None) -> list[dict[str, object]]:
    stats = stats_of(nsqd, "")
    for each in stats["topics"]:
        if each["topic_name"] == topic:
            if channel is None:
                return list(each.get("producers", []) or [])
            for chan in each["channels"]:
                if chan["channel_name"] == channel:
                    return list(chan["clients"])
    return []


async def test_sixteen_producers_and_one_direct_consumer_through_the_workers(
        nsqd_factory: Callable[..., NSQDProcess]) -> None:
    nsqd = nsqd_factory(f"--workers={WORKERS}")
    assert len(worker_pids(nsqd)) == WORKERS
    received: list[Message] = []

    async def handle(message: Message) -> None:
        received.append(message)

    per_producer = 200
    async with Consumer("spread", "c", handle, nsqd_tcp_addresses=[nsqd.tcp_address_text], max_in_flight=100):
        await wait_for_async(lambda: len(clients_of(nsqd, "spread", "c")) == 1, what="the consumer subscribed")

        async def produce(index: int) -> None:
            async with Producer(nsqd.tcp_address_text) as producer:
                for n in range(per_producer):
                    await producer.publish("spread", b"%d-%d" % (index, n))

        await asyncio.gather(*(produce(index) for index in range(16)))
        await wait_for_async(lambda: len(received) == 16 * per_producer, timeout=30, what="every message")
    assert sorted(m.body for m in received) == sorted(b"%d-%d" % (i, n) for i in range(16) for n in range(per_producer))
    assert len({m.id for m in received}) == len(received)  # one nsqd hands out the IDs
    stats = stats_of(nsqd, "spread")
    assert stats["topics"][0]["message_count"] == 16 * per_producer
    assert stats["topics"][0]["channels"][0]["message_count"] == 16 * per_producer


async def test_req_touch_and_fin_through_a_worker(nsqd_factory: Callable[..., NSQDProcess]) -> None:
    nsqd = nsqd_factory(f"--workers={WORKERS}")
    nsqd.publish("t", b"one")
    consumer = await WireClient.connect(nsqd.tcp_address)
    await consumer.subscribe("t", "c", rdy=1)
    first = await consumer.read_message()
    await consumer.command(b"TOUCH", first.id)
    await consumer.command(b"REQ", first.id, b"0")
    again = await consumer.read_message()
    assert (again.id, again.attempts) == (first.id, 2)
    await consumer.command(b"FIN", again.id)
    await consumer.command(b"FIN", again.id)  # twice: nsqd's own error, through the worker
    frame = await consumer.read_frame()
    assert frame.frame_type == FRAME_TYPE_ERROR and frame.data.startswith(b"E_FIN_FAILED")
    stats = nsqd.channel_stats("t", "c")
    assert (stats["in_flight_count"], stats["requeue_count"], stats["clients"][0]["finish_count"]) == (0, 1, 1)
    await consumer.close()


async def test_clients_show_once_with_their_own_addresses(nsqd_factory: Callable[..., NSQDProcess]) -> None:
    nsqd = nsqd_factory(f"--workers={WORKERS}")
    nsqd.publish("t", b"x")
    consumers = [await WireClient.connect(nsqd.tcp_address) for _ in range(6)]
    for consumer in consumers:
        await consumer.subscribe("t", "c", rdy=0)
    clients = clients_of(nsqd, "t", "c")
    assert len(clients) == 6
    local_ports = sorted(consumer.writer.get_extra_info("sockname")[1] for consumer in consumers)
    assert sorted(int(str(c["remote_address"]).rsplit(":", 1)[1]) for c in clients) == local_ports
    for consumer in consumers:
        await consumer.close()
    await wait_for_async(lambda: not clients_of(nsqd, "t", "c"), what="the clients gone")


async def test_a_worker_killed_under_load_loses_nothing_acknowledged(
        nsqd_factory: Callable[..., NSQDProcess]) -> None:
    for flags in ((), ("--mem-queue-size=0",)):
        nsqd = nsqd_factory(f"--workers={WORKERS}", *flags)
        before = worker_pids(nsqd)
        acknowledged: list[bytes] = []
        stop = asyncio.Event()

        async def produce(index: int) -> None:
            n = 0
            while not stop.is_set():
                client = await WireClient.connect(nsqd.tcp_address)
                try:
                    while not stop.is_set():
                        body = b"%d-%d" % (index, n)
                        await client.command(b"PUB", b"load", body=body)
                        frame = await client.read_frame()
                        assert frame.data == b"OK"
                        acknowledged.append(body)
                        n += 1
                except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
                    await asyncio.sleep(0.05)  # its worker died: publish again through another
                finally:
                    await client.close()

        producers = [asyncio.create_task(produce(index)) for index in range(8)]
        await wait_for_async(lambda: len(acknowledged) > 300, what="publishing under way")
        os.kill(before[0], signal.SIGKILL)
        await wait_for_async(lambda: worker_pids(nsqd).get(0) not in (None, before[0]), what="worker 0 restarted")
        count = len(acknowledged)
        await wait_for_async(lambda: len(acknowledged) > count + 300, what="publishing on")
        stop.set()
        await asyncio.gather(*producers)
        assert worker_pids(nsqd)[1] == before[1] and alive(before[1])
        # every acknowledged message is in the topic's channel-less queue, once
        depth = stats_of(nsqd, "load")["topics"][0]["depth"]
        assert depth >= len(acknowledged)
        drained = await drain(nsqd, "load", depth)
        assert set(acknowledged) <= set(drained)
        assert any("worker 0" in line and "exited with -9" in line for line in nsqd.log_lines)


async def drain(nsqd: NSQDProcess, topic: str, count: int) -> list[bytes]:
    consumer = await WireClient.connect(nsqd.tcp_address)
    await consumer.subscribe(topic, "drain", rdy=min(count, 2500))
    bodies = []
    for _ in range(count):
        message = await consumer.read_message(timeout=30)
        bodies.append(message.body)
        await consumer.command(b"FIN", message.id)
    await consumer.close()
    return bodies


def test_sigterm_stops_the_workers_with_nsqd(nsqd_factory: Callable[..., NSQDProcess]) -> None:
    nsqd = nsqd_factory(f"--workers={WORKERS}")
    pids = list(worker_pids(nsqd).values())
    nsqd.publish("t", b"x")
    started = time.monotonic()
    assert nsqd.stop() == 0
    assert time.monotonic() - started < 5
    assert not any(alive(pid) for pid in pids)


def test_workers_exit_when_nsqd_is_killed(nsqd_factory: Callable[..., NSQDProcess]) -> None:
    nsqd = nsqd_factory(f"--workers={WORKERS}")
    pids = list(worker_pids(nsqd).values())
    nsqd.process.kill()
    nsqd.process.wait()
    wait_for(lambda: not any(alive(pid) for pid in pids), timeout=10, what="the workers gone")


def test_workers_below_one_are_refused() -> None:
    with pytest.raises(RuntimeError, match="--workers must be >= 1"):
        start_nsqd("--workers=0")
