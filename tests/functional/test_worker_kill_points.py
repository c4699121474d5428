"""kill -9 of a worker (``--workers``) at the worst moments (harness.kill_points: strace kills it on a chosen system
call, which then never runs): as it relays a producer's PUB to nsqd, as it writes nsqd's OK to the producer, and as
it writes messages to a consumer. nsqd at ``--mem-queue-size=0``, every message through the disk. In each, nothing
acknowledged is lost, the worker is started again, and the clients carry on through the workers."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from harness.kill_points import KillPoint, socket_to
from harness.processes import NSQDProcess, wait_for_async
from harness.wire import WireClient
from tests.functional.test_workers import WORKERS, drain, stats_of, worker_pids

TOPIC = "kill-points"


def start(nsqd_factory: Callable[..., NSQDProcess], *flags: str) -> NSQDProcess:
    return nsqd_factory(f"--workers={WORKERS}", "--mem-queue-size=0", *flags)


def holder_of(nsqd: NSQDProcess, client: WireClient) -> tuple[int, str]:
    """The worker that holds ``client``'s connection, and the path of its end of it (for a kill point)."""
    port = client.writer.get_extra_info("sockname")[1]
    for pid in worker_pids(nsqd).values():
        try:
            return pid, socket_to(pid, port)
        except AssertionError:
            continue
    raise AssertionError(f"no worker holds the connection from port {port}")


def depth(nsqd: NSQDProcess) -> int:
    topics = stats_of(nsqd, TOPIC)["topics"]
    return int(topics[0]["depth"]) if topics else 0


async def killed(nsqd: NSQDProcess, pid: int) -> None:
    """The worker ``pid`` died of SIGKILL, and another took its place."""
    index = next(index for index, worker in worker_pids(nsqd).items() if worker == pid)
    await wait_for_async(lambda: worker_pids(nsqd)[index] != pid, what="the worker started again")
    assert any(f"worker {index}" in line and "exited with -9" in line for line in nsqd.log_lines)


async def published_through_a_worker(nsqd: NSQDProcess, bodies: list[bytes]) -> None:
    """``bodies`` published and acknowledged, each over a connection of its own (whichever worker takes it)."""
    for body in bodies:
        producer = await WireClient.connect(nsqd.tcp_address)
        await producer.command(b"PUB", TOPIC.encode(), body=body)
        assert (await producer.read_frame()).data == b"OK"
        await producer.close()


@pytest.mark.timeout(60)
async def test_a_worker_killed_as_it_relays_a_publish_loses_nothing_acknowledged(
        nsqd_factory: Callable[..., NSQDProcess]) -> None:
    nsqd = start(nsqd_factory)
    await published_through_a_worker(nsqd, [b"before"])
    producer = await WireClient.connect(nsqd.tcp_address)
    await producer.identify()  # answered: a worker holds the connection, and nsqd knows it
    pid, _ = holder_of(nsqd, producer)
    # the worker's next write: the PUB, relayed to nsqd over its link (nothing else is under way)
    with KillPoint(pid, "write,writev", 1):
        await producer.command(b"PUB", TOPIC.encode(), body=b"never acknowledged")
        assert await producer.closed(10)
    await killed(nsqd, pid)
    await producer.close()
    await published_through_a_worker(nsqd, [b"after %d" % n for n in range(4)])
    received = await drain(nsqd, TOPIC, depth(nsqd))
    assert {b"before", *(b"after %d" % n for n in range(4))} <= set(received)
    assert b"never acknowledged" not in received  # nsqd never had it: the producer was not told OK


@pytest.mark.timeout(60)
async def test_a_worker_killed_as_it_writes_the_ok_leaves_the_message_with_nsqd(
        nsqd_factory: Callable[..., NSQDProcess]) -> None:
    nsqd = start(nsqd_factory)
    producer = await WireClient.connect(nsqd.tcp_address)
    await producer.identify()
    pid, path = holder_of(nsqd, producer)
    with KillPoint(pid, "write,writev", 1, path):  # the worker's next write to the producer: the OK
        await producer.command(b"PUB", TOPIC.encode(), body=b"taken, not answered")
        assert await producer.closed(10)
    await killed(nsqd, pid)
    await producer.close()
    # nsqd took it (on disk at --mem-queue-size=0): a producer that publishes again makes a duplicate, not a loss
    await published_through_a_worker(nsqd, [b"taken, not answered"])
    assert await drain(nsqd, TOPIC, 2) == [b"taken, not answered"] * 2


@pytest.mark.timeout(60)
async def test_a_worker_killed_as_it_delivers_messages_gives_them_to_the_next_consumer(
        nsqd_factory: Callable[..., NSQDProcess]) -> None:
    nsqd = start(nsqd_factory, "--msg-timeout=2s")
    bodies = [b"message %d" % n for n in range(50)]
    await published_through_a_worker(nsqd, bodies)
    consumer = await WireClient.connect(nsqd.tcp_address)
    await consumer.subscribe(TOPIC, "c", rdy=0)
    pid, path = holder_of(nsqd, consumer)
    with KillPoint(pid, "write,writev", 1, path):  # the worker's first write of messages to the consumer
        await consumer.command(b"RDY", b"50")
        assert await consumer.closed(10)
    await killed(nsqd, pid)
    await consumer.close()
    # the messages in flight to the lost consumer time out (as NSQ's do) and go to the next one: every one
    next_consumer = await WireClient.connect(nsqd.tcp_address)
    await next_consumer.subscribe(TOPIC, "c", rdy=50)
    received = [message.body for message in await next_consumer.read_messages(50, timeout=20)]
    assert sorted(received) == sorted(bodies)
    await next_consumer.close()
