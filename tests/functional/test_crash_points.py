"""kill -9 while nsqd rewrites its files: disk-queue segments rolling over every few messages and nsqd.dat replaced
at every new topic. Every round the next start succeeds, leaves no half-written file behind, and delivers every
message that was acknowledged (with --mem-queue-size=0 an OK means on disk)."""

from __future__ import annotations

import asyncio
import json
import random
import signal
from pathlib import Path

from shared.protocol.frames import FRAME_TYPE_RESPONSE, Frame
from tests.conftest import FAST_SCAN
from tests.processes import start_nsqd
from tests.wire import WireClient

MESSAGES_PER_TOPIC = 5  # a new topic every 5 messages: nsqd.dat is rewritten all along


async def publish_until_killed(address: tuple[str, int], worker: int, acknowledged: dict[str, list[bytes]]) -> None:
    """PUBs to one new topic after another (each rewrites nsqd.dat), recording what got OK, until the connection
    dies."""
    try:
        client = await WireClient.connect(address)
    except OSError:
        return
    try:
        for n in range(1_000_000):
            topic, body = f"crash{worker}-{n // MESSAGES_PER_TOPIC}", b"w%d-%d" % (worker, n)
            await client.command(b"PUB", topic.encode(), body=body.ljust(100, b"."))
            if await client.read_frame(timeout=5) != Frame(FRAME_TYPE_RESPONSE, b"OK"):
                return
            acknowledged.setdefault(topic, []).append(body.ljust(100, b"."))
    except (ConnectionError, OSError, asyncio.TimeoutError):
        return
    finally:
        await client.close()


async def drain(address: tuple[str, int], topic: str, depth: int) -> list[bytes]:
    consumer = await WireClient.connect(address)
    await consumer.subscribe(topic, "c", rdy=2500)
    bodies = []
    for _ in range(depth):
        message = await consumer.read_message(timeout=10)
        bodies.append(message.body)
        consumer.send(b"FIN " + message.id + b"\n")
    await consumer.close()
    return bodies


async def test_kill_9_while_segments_roll_and_metadata_is_rewritten(tmp_path: Path) -> None:
    rng = random.Random(19)
    duplicated = 0
    for round_number in range(4):
        data_path = tmp_path / f"round{round_number}"
        data_path.mkdir()
        # 134-byte records: a segment rolls every 7 messages
        nsqd = start_nsqd(*FAST_SCAN, "--mem-queue-size=0", "--sync-every=1", "--max-bytes-per-file=1000",
                          data_path=data_path)
        acknowledged: dict[str, list[bytes]] = {}
        workers = [asyncio.create_task(publish_until_killed(nsqd.tcp_address, worker, acknowledged))
                   for worker in range(3)]
        await asyncio.sleep(rng.uniform(0.2, 0.8))
        nsqd.process.send_signal(signal.SIGKILL)
        await asyncio.gather(*workers)
        nsqd.stop()
        assert sum(map(len, acknowledged.values())) > 50, "too little was published to mean anything"

        nsqd = start_nsqd(*FAST_SCAN, data_path=data_path)
        try:
            depths = {topic["topic_name"]: topic["depth"]
                      for topic in json.loads(nsqd.http("GET", "/stats?format=json")[2])["topics"]}
            for topic, bodies in acknowledged.items():
                received = await drain(nsqd.tcp_address, topic, depths.get(topic, 0))
                missing = set(bodies) - set(received)
                assert not missing, f"round {round_number}: {len(missing)} acknowledged messages of {topic} lost"
                duplicated += len(received) - len(set(received))
        finally:
            nsqd.stop()
        assert not list(data_path.glob("*.tmp")), "a half-written file survived the restart"
    assert duplicated == 0
