"""Dead letters: --max-attempts, or a channel's own limit (POST /channel/dead_letter, kept in nsqd.dat): a message
delivered that many times is parked in the channel's dead-letter queue instead of being delivered again, durably;
replayed with its attempts reset (POST /channel/replay) or discarded (POST /channel/empty?queue=dead)."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

from harness.processes import FAST_SCAN, NSQDProcess, start_nsqd, wait_for
from harness.wire import WireClient
from services.nsqd import disk_queue_meta


async def requeue_every_delivery(nsqd: NSQDProcess, expected: int, more: bool = False) -> list[tuple[bytes, int]]:
    """Subscribes to t/c and requeues at once every message delivered, until ``expected`` deliveries (and then
    none, unless ``more``): their bodies and attempts."""
    consumer = await WireClient.connect(nsqd.tcp_address)
    await consumer.subscribe("t", "c", rdy=10)
    deliveries = []
    for _ in range(expected):
        message = await consumer.read_message()
        deliveries.append((message.body, message.attempts))
        consumer.send(b"REQ " + message.id + b" 0\n")
    if not more:
        await consumer.expect_nothing(0.3)
    await consumer.close()
    return deliveries


async def test_a_message_past_its_attempts_is_parked_kept_across_a_crash_and_replayed(tmp_path: Path) -> None:
    nsqd = start_nsqd(*FAST_SCAN, "--max-attempts=3", "--mem-queue-size=0", data_path=tmp_path)
    try:
        assert nsqd.http("POST", "/topic/create?topic=t")[0] == 200
        assert nsqd.http("POST", "/channel/create?topic=t&channel=c")[0] == 200
        for body in (b"poison", b"also poison"):
            assert nsqd.http("POST", "/pub?topic=t", body)[0] == 200
        deliveries = await requeue_every_delivery(nsqd, 6)
        assert sorted(attempts for _, attempts in deliveries) == [1, 1, 2, 2, 3, 3]  # never a fourth
        stats = nsqd.channel_stats("t", "c")
        assert (stats["dead_letter_count"], stats["dead_letter_depth"], stats["depth"]) == (2, 2, 0)
        assert stats["max_attempts"] == 3
        metrics = nsqd.http("GET", "/metrics")[2].decode()
        assert 'nsq_channel_dead_letter_depth{channel="c",topic="t"} 2.0' in metrics
        # the channel's metadata records them gone from it (else a restart delivers them there again, too)
        wait_for(lambda: disk_queue_meta.load("t:c", tmp_path).depth == 0, what="the channel's metadata synced")
        nsqd.process.send_signal(signal.SIGKILL)
    finally:
        nsqd.stop()

    nsqd = start_nsqd(*FAST_SCAN, "--max-attempts=3", "--mem-queue-size=0", data_path=tmp_path)
    try:
        assert nsqd.channel_stats("t", "c")["dead_letter_depth"] == 2  # parked on disk: kill -9 kept them
        assert nsqd.http("POST", "/channel/replay?topic=t&channel=c&n=x")[0] == 400
        assert json.loads(nsqd.http("POST", "/channel/replay?topic=t&channel=c&n=1")[2]) == {"replayed": 1}
        consumer = await WireClient.connect(nsqd.tcp_address)
        await consumer.subscribe("t", "c", rdy=10)
        replayed = await consumer.read_message()
        assert (replayed.body, replayed.attempts) == (b"poison", 1)  # attempts reset
        consumer.send(b"FIN " + replayed.id + b"\n")
        await consumer.expect_nothing(0.3)
        await consumer.close()
        assert nsqd.http("POST", "/channel/empty?topic=t&channel=c&queue=nope")[::2] == (
            400, b'{"message":"INVALID_QUEUE"}')
        assert nsqd.http("POST", "/channel/empty?topic=t&channel=c&queue=dead")[0] == 200
        assert nsqd.channel_stats("t", "c")["dead_letter_depth"] == 0
    finally:
        nsqd.stop()


async def test_a_channels_own_limit_is_kept_and_0_turns_it_off(tmp_path: Path) -> None:
    nsqd = start_nsqd(*FAST_SCAN, data_path=tmp_path)
    try:
        assert nsqd.http("POST", "/topic/create?topic=t")[0] == 200
        for channel in ("c", "other"):
            assert nsqd.http("POST", f"/channel/create?topic=t&channel={channel}")[0] == 200
        assert nsqd.http("POST", "/channel/dead_letter?topic=t&channel=c")[::2] == (
            400, b'{"message":"MISSING_ARG_ATTEMPTS"}')
        assert nsqd.http("POST", "/channel/dead_letter?topic=t&channel=nope&attempts=2")[0] == 404
        assert nsqd.http("POST", "/channel/dead_letter?topic=t&channel=c&attempts=2")[0] == 200
    finally:
        nsqd.stop()
    channels = json.loads((tmp_path / "nsqd.dat").read_text())["topics"][0]["channels"]
    assert {channel["name"]: channel.get("max_attempts") for channel in channels} == {"c": 2, "other": None}

    nsqd = start_nsqd(*FAST_SCAN, data_path=tmp_path)
    try:
        assert nsqd.http("POST", "/pub?topic=t", b"poison")[0] == 200
        assert len(await requeue_every_delivery(nsqd, 2)) == 2
        assert nsqd.channel_stats("t", "c")["dead_letter_depth"] == 1
        assert "dead_letter_count" not in nsqd.channel_stats("t", "other")  # NSQ's stats where it is off
        assert nsqd.http("POST", "/channel/dead_letter?topic=t&channel=c&attempts=0")[0] == 200
        assert json.loads(nsqd.http("POST", "/channel/replay?topic=t&channel=c")[2]) == {"replayed": 1}
        assert len(await requeue_every_delivery(nsqd, 5, more=True)) == 5  # no limit any more
    finally:
        nsqd.stop()


async def test_an_expired_message_is_parked_where_there_is_a_limit(tmp_path: Path) -> None:
    nsqd = start_nsqd(*FAST_SCAN, "--msg-ttl=500ms", "--max-attempts=5", data_path=tmp_path)
    try:
        assert nsqd.http("POST", "/topic/create?topic=t")[0] == 200
        assert nsqd.http("POST", "/channel/create?topic=t&channel=c")[0] == 200
        assert nsqd.http("POST", "/pub?topic=t", b"stale")[0] == 200
        await asyncio.sleep(0.6)
        assert await requeue_every_delivery(nsqd, 0) == []
        stats = nsqd.channel_stats("t", "c")
        assert (stats["expired_count"], stats["dead_letter_depth"]) == (1, 1)
    finally:
        nsqd.stop()
