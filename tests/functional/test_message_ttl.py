"""Message TTL: --msg-ttl, or a topic's own (POST /topic/ttl, kept in nsqd.dat): a message older than it is never
delivered; it is dropped when it reaches the head of a queue, in memory or on disk, and counted."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from harness.processes import FAST_SCAN, start_nsqd
from harness.wire import WireClient


async def test_messages_past_the_ttl_are_dropped_from_memory_and_disk_and_counted(tmp_path: Path) -> None:
    nsqd = start_nsqd(*FAST_SCAN, "--msg-ttl=1s", "--mem-queue-size=5", data_path=tmp_path)
    try:
        assert nsqd.http("POST", "/topic/create?topic=t")[0] == 200
        assert nsqd.http("POST", "/channel/create?topic=t&channel=c")[0] == 200
        assert nsqd.http("POST", "/mpub?topic=t", b"\n".join(b"old%d" % n for n in range(20)))[0] == 200
        await asyncio.sleep(1.2)
        assert nsqd.http("POST", "/mpub?topic=t", b"\n".join(b"new%d" % n for n in range(3)))[0] == 200
        consumer = await WireClient.connect(nsqd.tcp_address)
        await consumer.subscribe("t", "c", rdy=100)
        assert [message.body for message in await consumer.read_messages(3)] == [b"new0", b"new1", b"new2"]
        await consumer.expect_nothing(0.3)
        stats = nsqd.channel_stats("t", "c")
        assert (stats["expired_count"], stats["depth"]) == (20, 0)  # 5 from memory, 15 from disk
        topic = json.loads(nsqd.http("GET", "/stats?format=json&topic=t")[2])["topics"][0]
        assert topic["ttl"] == "1s"
        assert 'nsq_channel_expired_total{channel="c",topic="t"} 20.0' in nsqd.http("GET", "/metrics")[2].decode()
        await consumer.close()
    finally:
        nsqd.stop()


async def test_a_topics_own_ttl_is_kept_across_restarts(tmp_path: Path) -> None:
    nsqd = start_nsqd(*FAST_SCAN, "--mem-queue-size=0", data_path=tmp_path)
    try:
        assert nsqd.http("POST", "/topic/create?topic=t")[0] == 200
        assert nsqd.http("POST", "/topic/ttl?topic=t")[::2] == (400, b'{"message":"MISSING_ARG_TTL"}')
        assert nsqd.http("POST", "/topic/ttl?topic=t&ttl=soon")[::2] == (400, b'{"message":"INVALID_TTL"}')
        assert nsqd.http("POST", "/topic/ttl?topic=nope&ttl=1s")[0] == 404
        assert nsqd.http("POST", "/topic/ttl?topic=t&ttl=800ms")[0] == 200
        assert nsqd.http("POST", "/channel/create?topic=t&channel=c")[0] == 200
        assert nsqd.http("POST", "/pub?topic=t", b"old")[0] == 200
    finally:
        nsqd.stop()
    assert json.loads((tmp_path / "nsqd.dat").read_text())["topics"][0]["ttl"] == "800ms"
    await asyncio.sleep(1.0)
    nsqd = start_nsqd(*FAST_SCAN, "--mem-queue-size=0", data_path=tmp_path)
    try:
        assert nsqd.http("POST", "/pub?topic=t", b"new")[0] == 200
        consumer = await WireClient.connect(nsqd.tcp_address)
        await consumer.subscribe("t", "c", rdy=10)
        assert (await consumer.read_message()).body == b"new"
        await consumer.expect_nothing(0.3)
        assert nsqd.channel_stats("t", "c")["expired_count"] == 1
        assert nsqd.http("POST", "/topic/ttl?topic=t&ttl=0")[0] == 200  # none for this topic
        assert "expired_count" in nsqd.channel_stats("t", "c")  # counted before: still shown
        await consumer.close()
    finally:
        nsqd.stop()
    assert "ttl" in json.loads((tmp_path / "nsqd.dat").read_text())["topics"][0]


def test_without_a_ttl_stats_and_nsqd_dat_are_nsqs(tmp_path: Path) -> None:
    nsqd = start_nsqd(*FAST_SCAN, data_path=tmp_path)
    try:
        assert nsqd.http("POST", "/topic/create?topic=t")[0] == 200
        assert nsqd.http("POST", "/channel/create?topic=t&channel=c")[0] == 200
        topic = json.loads(nsqd.http("GET", "/stats?format=json")[2])["topics"][0]
        assert "ttl" not in topic and "expired_count" not in topic["channels"][0]
    finally:
        nsqd.stop()
    assert "ttl" not in json.loads((tmp_path / "nsqd.dat").read_text())["topics"][0]
