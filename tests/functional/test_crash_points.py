"""kill -9 at the worst moments: while nsqd rewrites its files (disk-queue segments rolling over every few messages,
nsqd.dat replaced at every new topic) with messages in flight and requeued (harness.crash_points), and at chosen
system calls of a clean shutdown. Every time the next start succeeds, leaves no half-written file behind, and
delivers every message that was acknowledged and not finished (with --mem-queue-size=0 an OK means on disk until
finished)."""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest

from harness.crash_points import crash_round, drain_channel
from harness.kill_points import KillPoint
from harness.processes import FAST_SCAN, start_nsqd
from harness.wire import WireClient
from nsqclient.protocol.frames import FRAME_TYPE_RESPONSE, Frame


async def test_kill_9_while_segments_roll_metadata_is_rewritten_and_messages_are_in_flight(tmp_path: Path) -> None:
    rng = random.Random(19)
    results = []
    for round_number in range(4):
        data_path = tmp_path / f"round{round_number}"
        data_path.mkdir()
        results.append(await crash_round(data_path, rng))
    assert sum(result.lost for result in results) == 0, results
    print(f"\nkill -9 at random, 4 rounds: {sum(r.acknowledged for r in results)} acknowledged, 0 lost, "
          f"{sum(r.delivered_again for r in results)} delivered again")


async def test_kill_9_loses_nothing_in_flight_requeued_or_queued_behind_them(tmp_path: Path) -> None:
    """At --mem-queue-size=0 a channel keeps a message on disk until it is finished: killed while its consumer holds
    messages in flight, has requeued some (with and without a delay) and finished others after them, nsqd delivers
    every unfinished one after the restart, the ones requeued with a delay once it is over; finished ones may
    come back (at-least-once), counted."""
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
        deferred = {message.body for message in messages[:10]}
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
        stats = nsqd.channel_stats("t", "c")
        received = await drain_channel(nsqd.tcp_address, "t", "c", stats["depth"])
    finally:
        nsqd.stop()
    missing = set(bodies) - finished - set(received)
    assert missing == deferred and stats["deferred_count"] == 10, f"{len(missing - deferred)} unfinished lost"
    print(f"\nkill -9 with 60 in flight, 10 deferred, 10 requeued: 260 unfinished, 0 lost, 10 still deferred, "
          f"{len(received) - 250} delivered again (finished, or the older copy of one requeued)")


async def test_kill_9_keeps_deferred_publishes_and_their_delays(tmp_path: Path) -> None:
    """At --mem-queue-size=0 a DPUB's OK means on disk too: killed with messages DPUBed to a channel and to a topic
    without channels, nsqd still has every one deferred after the restart, and delivers each once its delay is
    over, not before."""
    nsqd = start_nsqd(*FAST_SCAN, "--mem-queue-size=0", data_path=tmp_path)
    try:
        assert nsqd.http("POST", "/topic/create?topic=t")[0] == 200
        assert nsqd.http("POST", "/channel/create?topic=t&channel=c")[0] == 200
        producer = await WireClient.connect(nsqd.tcp_address)
        published = time.monotonic()
        for n in range(20):
            for topic, delay in ((b"t", b"3000"), (b"t", b"600000"), (b"held", b"3000")):
                await producer.command(b"DPUB", topic, delay, body=b"%s-%s-%02d" % (topic, delay, n))
                assert await producer.read_frame() == Frame(FRAME_TYPE_RESPONSE, b"OK")
        nsqd.process.send_signal(signal.SIGKILL)
        await producer.close()
    finally:
        nsqd.stop()

    nsqd = start_nsqd(*FAST_SCAN, "--mem-queue-size=0", data_path=tmp_path)
    try:
        assert nsqd.channel_stats("t", "c")["deferred_count"] == 40
        assert nsqd.http("POST", "/channel/create?topic=held&channel=c")[0] == 200  # their delay starts now
        assert nsqd.channel_stats("held", "c")["deferred_count"] == 20
        consumer = await WireClient.connect(nsqd.tcp_address)
        await consumer.subscribe("t", "c", rdy=100)
        messages = await consumer.read_messages(20, timeout=10)
        assert time.monotonic() - published >= 3.0
        assert sorted(message.body for message in messages) == [b"t-3000-%02d" % n for n in range(20)]
        await consumer.close()
        assert nsqd.channel_stats("t", "c")["deferred_count"] == 20  # the long ones wait on
    finally:
        nsqd.stop()


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
