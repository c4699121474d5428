"""kill -9 while nsqd rewrites its files: disk-queue segments rolling over every few messages and nsqd.dat replaced
at every new topic. Every round the next start succeeds, leaves no half-written file behind, and delivers every
message that was acknowledged (with --mem-queue-size=0 an OK means on disk)."""

from __future__ import annotations

import asyncio
import json
import random
import signal
from pathlib import Path

import pytest

from shared.protocol.frames import FRAME_TYPE_RESPONSE, Frame
from tests.conftest import FAST_SCAN
from tests.kill_points import KillPoint
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
    return await drain_channel(address, topic, "c", depth)


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


async def test_kill_9_loses_nothing_in_flight_requeued_or_queued_behind_them(tmp_path: Path) -> None:
    """At --mem-queue-size=0 a channel keeps a message on disk until it is finished: killed while its consumer holds
    messages in flight, has requeued some (with and without a delay) and finished others after them, nsqd delivers
    every unfinished one after the restart; finished ones may come back (at-least-once), counted."""
    nsqd = start_nsqd(*FAST_SCAN, "--mem-queue-size=0", "--sync-every=1", "--max-bytes-per-file=4000",
                      data_path=tmp_path)
    bodies = [b"m%03d" % n for n in range(300)]
    try:
        assert nsqd.http("POST", "/topic/create?topic=t")[0] == 200
        assert nsqd.http("POST", "/channel/create?topic=t&channel=c")[0] == 200
        for body in bodies:
            assert nsqd.http("POST", "/pub?topic=t", body)[0] == 200
        consumer = await WireClient.connect(nsqd.tcp_address)
        await consumer.subscribe("t", "c", rdy=100)
        messages = await consumer.read_messages(100)
        consumer.send(b"RDY 0\n")  # no more: finishing frees room
        finished = {message.body for message in messages[40:80]}  # the oldest 40 stay unfinished
        for message in messages[40:80]:
            consumer.send(b"FIN " + message.id + b"\n")
        for message in messages[:10]:
            consumer.send(b"REQ " + message.id + b" 60000\n")
        for message in messages[10:20]:
            consumer.send(b"REQ " + message.id + b" 0\n")
        await consumer.expect_nothing(0.3)  # every FIN and REQ done, and synced (--sync-every=1)
        nsqd.process.send_signal(signal.SIGKILL)
        nsqd.stop()
        await consumer.close()
    finally:
        nsqd.stop()

    nsqd = start_nsqd(*FAST_SCAN, "--mem-queue-size=0", data_path=tmp_path)
    try:
        depth = nsqd.channel_stats("t", "c")["depth"]
        received = await drain_channel(nsqd.tcp_address, "t", "c", depth)
    finally:
        nsqd.stop()
    missing = set(bodies) - finished - set(received)
    assert not missing, f"{len(missing)} unfinished messages lost: {sorted(missing)[:5]}"
    print(f"\nkill -9 with 60 in flight, 10 deferred, 10 requeued: 260 unfinished, 0 lost, "
          f"{len(received) - 260} delivered again (finished, or the older copy of one requeued)")


# where a clean shutdown is killed: early and late among its writes (client sockets, log lines, records of messages
# in flight and the deferred file), and at each file it replaces (the deferred file, the queues' metadata, nsqd.dat)
SHUTDOWN_KILL_POINTS = [("write", 1), ("write", 4), ("write", 8), ("rename", 1), ("rename", 2), ("rename", 3)]


@pytest.mark.parametrize(("syscall", "nth"), SHUTDOWN_KILL_POINTS)
async def test_kill_9_while_a_clean_shutdown_flushes(tmp_path: Path, syscall: str, nth: int) -> None:
    """SIGTERM, and nsqd killed at a chosen point of the clean shutdown that follows, while it writes its in-flight,
    requeued and deferred messages to disk and replaces its files: the next start succeeds, no half-written file is
    left, and at --mem-queue-size=0 every unfinished message is delivered (or still deferred)."""
    nsqd = start_nsqd(*FAST_SCAN, "--mem-queue-size=0", data_path=tmp_path)
    bodies = [b"m%04d" % n for n in range(2000)]
    try:
        assert nsqd.http("POST", "/topic/create?topic=t")[0] == 200
        assert nsqd.http("POST", "/channel/create?topic=t&channel=c")[0] == 200
        for start in range(0, len(bodies), 100):
            assert nsqd.http("POST", "/mpub?topic=t", b"\n".join(bodies[start:start + 100]))[0] == 200
        consumer = await WireClient.connect(nsqd.tcp_address)
        await consumer.subscribe("t", "c", rdy=1000)
        messages = await consumer.read_messages(1000)
        consumer.send(b"RDY 0\n")
        deferred = {message.body for message in messages[:200]}
        for message in messages[:200]:
            consumer.send(b"REQ " + message.id + b" 60000\n")
        finished = {message.body for message in messages[200:300]}
        for message in messages[200:300]:
            consumer.send(b"FIN " + message.id + b"\n")
        await consumer.expect_nothing(0.2)
        with KillPoint(nsqd.process.pid, syscall, nth):
            nsqd.process.send_signal(signal.SIGTERM)
            assert nsqd.process.wait(10) == -signal.SIGKILL, f"the shutdown made fewer than {nth} {syscall} calls"
        await consumer.close()
    finally:
        nsqd.stop()

    nsqd = start_nsqd(*FAST_SCAN, "--mem-queue-size=0", data_path=tmp_path)
    try:
        stats = nsqd.channel_stats("t", "c")
        received = await drain_channel(nsqd.tcp_address, "t", "c", stats["depth"])
    finally:
        nsqd.stop()
    # deferred ones that reached the deferred file wait out their delay there (some may also have been read again
    # from the queue: the file was written, the queue's metadata not yet)
    missing = set(bodies) - finished - set(received)
    assert missing <= deferred and len(missing) <= stats["deferred_count"], f"{len(missing)} unfinished lost"
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob("*.bad"))
    again = len(received) - len(set(received)) + len(set(received) & finished)
    print(f"\nkill -9 at {syscall} #{nth} of a clean shutdown: 1,900 unfinished, 0 lost, {again} delivered again, "
          f"{len(missing)} still deferred")
