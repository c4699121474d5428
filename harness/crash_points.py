"""kill -9 at the worst moments, the scenario shared by tests/functional/test_crash_points.py (a few rounds) and
bench/crash_points.py (many).

A round (:func:`crash_round`) runs nsqd at ``--mem-queue-size=0`` with segments that roll every few messages and
kills it with SIGKILL at a random moment while:
- producers publish to one new topic after another (each rewrites nsqd.dat), recording what got OK;
- producers publish (PUB, and DPUB with a delay of a minute) to topic ``work``, whose channel's consumer finishes
  most of what it gets, requeues some (with and without a delay) and leaves the rest in flight.
The next start must succeed and leave no half-written file behind, and every message acknowledged and not finished
must be delivered (or still be deferred, for the ones published or requeued with a delay); finished ones may come
again (at-least-once), counted.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from harness.processes import FAST_SCAN, start_nsqd, wait_for_async
from harness.wire import WireClient
from nsqclient.protocol.frames import FRAME_TYPE_RESPONSE, Frame

MESSAGES_PER_TOPIC = 5  # a new topic every 5 messages: nsqd.dat is rewritten all along
WORK = "work"
# 134-byte records: a segment rolls every 7 messages
NSQD_FLAGS = (*FAST_SCAN, "--mem-queue-size=0", "--sync-every=1", "--max-bytes-per-file=1000")


@dataclass
class RoundResult:
    acknowledged: int
    lost: int
    delivered_again: int
    still_deferred: int
    restart_seconds: float  # from the start of the process to its listeners answering


async def publish_until_killed(address: tuple[str, int], worker: int, acknowledged: dict[str, list[bytes]],
                               topic_of: str | None = None, deferred: set[bytes] | None = None) -> None:
    """PUBs, recording what got OK, until the connection dies: to ``topic_of``, or to one new topic after another
    (each rewrites nsqd.dat). Given ``deferred``, DPUBs with a delay of a minute instead, recorded there too."""
    try:
        client = await WireClient.connect(address)
    except OSError:
        return
    try:
        for n in range(1_000_000):
            topic = topic_of or f"crash{worker}-{n // MESSAGES_PER_TOPIC}"
            body = (b"w%d-%d" % (worker, n)).ljust(100, b".")
            if deferred is None:
                await client.command(b"PUB", topic.encode(), body=body)
            else:
                await client.command(b"DPUB", topic.encode(), b"60000", body=body)
            if await client.read_frame(timeout=5) != Frame(FRAME_TYPE_RESPONSE, b"OK"):
                return
            acknowledged.setdefault(topic, []).append(body)
            if deferred is not None:
                deferred.add(body)
    except (ConnectionError, OSError, asyncio.TimeoutError):
        return
    finally:
        await client.close()


async def consume_until_killed(address: tuple[str, int], rng: random.Random, finished: set[bytes],
                               deferred: set[bytes]) -> None:
    """Subscribes to ``work``: finishes 80 % of what it gets, requeues 10 % with a delay of a minute (recorded in
    ``deferred``), 5 % without, and leaves the rest in flight."""
    try:
        client = await WireClient.connect(address)
        await client.subscribe(WORK, "c", rdy=50)
    except (OSError, AssertionError):
        return
    try:
        while True:
            message = await client.read_message(timeout=30)
            draw = rng.random()
            if draw < 0.8:
                client.send(b"FIN " + message.id + b"\n")
                finished.add(message.body)
            elif draw < 0.9:
                client.send(b"REQ " + message.id + b" 60000\n")
                deferred.add(message.body)
            elif draw < 0.95:
                client.send(b"REQ " + message.id + b" 0\n")
    except (ConnectionError, OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, AssertionError):
        return
    finally:
        await client.close()


async def drain_channel(address: tuple[str, int], topic: str, channel: str, depth: int) -> list[bytes]:
    consumer = await WireClient.connect(address)
    await consumer.subscribe(topic, channel, rdy=2500)
    bodies = []
    for _ in range(depth):
        message = await consumer.read_message(timeout=10)
        bodies.append(message.body)
        consumer.send(b"FIN " + message.id + b"\n")
    await consumer.close()
    return bodies


async def crash_round(data_path: Path, rng: random.Random) -> RoundResult:
    nsqd = start_nsqd(*NSQD_FLAGS, data_path=data_path)
    acknowledged: dict[str, list[bytes]] = {}
    finished: set[bytes] = set()
    deferred: set[bytes] = set()
    try:
        assert nsqd.http("POST", f"/topic/create?topic={WORK}")[0] == 200
        assert nsqd.http("POST", f"/channel/create?topic={WORK}&channel=c")[0] == 200
        tasks = [asyncio.create_task(publish_until_killed(nsqd.tcp_address, worker, acknowledged))
                 for worker in range(2)]
        tasks.append(asyncio.create_task(publish_until_killed(nsqd.tcp_address, 2, acknowledged, WORK)))
        tasks.append(asyncio.create_task(publish_until_killed(nsqd.tcp_address, 3, acknowledged, WORK, deferred)))
        tasks.append(asyncio.create_task(consume_until_killed(nsqd.tcp_address, rng, finished, deferred)))
        await asyncio.sleep(rng.uniform(0.3, 1.0))
        # on a busy machine that may be too little time for the round to mean anything: then a little longer
        await wait_for_async(lambda: sum(map(len, acknowledged.values())) > 50, timeout=30,
                             what="enough acknowledged before the kill")
        nsqd.process.send_signal(signal.SIGKILL)
        await asyncio.gather(*tasks)
    finally:
        nsqd.stop()
    assert sum(map(len, acknowledged.values())) > 50, "too little was published to mean anything"

    started = time.monotonic()
    nsqd = start_nsqd(*FAST_SCAN, "--mem-queue-size=0", data_path=data_path)
    restart_seconds = time.monotonic() - started
    lost = delivered_again = still_deferred = 0
    try:
        for topic, bodies in acknowledged.items():
            stats = nsqd.channel_stats(topic, "c")
            if not stats:  # a topic that never had a channel: its messages wait in the topic
                depth = next(t["depth"] for t in json.loads(nsqd.http("GET", "/stats?format=json")[2])["topics"]
                             if t["topic_name"] == topic)
                stats = {"depth": depth, "deferred_count": 0}
            received = await drain_channel(nsqd.tcp_address, topic, "c", stats["depth"])
            missing = set(bodies) - finished - set(received)
            # requeued with a delay and saved as such: they wait out their delay (at most the deferred count)
            unaccounted = missing - deferred
            lost += len(unaccounted) + max(0, len(missing & deferred) - stats["deferred_count"])
            still_deferred += len(missing & deferred)
            delivered_again += len(received) - len(set(received)) + len(set(received) & finished)
    finally:
        nsqd.stop()
    assert not list(data_path.glob("*.tmp")), "a half-written file survived the restart"
    return RoundResult(sum(map(len, acknowledged.values())), lost, delivered_again, still_deferred, restart_seconds)
