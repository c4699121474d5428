"""Retention and rewinds on real nsqd processes: a topic keeps what it published (--retention-time, or its own
settings by /topic/retention), /channel/rewind puts it back into a channel, /channel/create?since makes a channel
from history; files expire by time and by bytes, and survive kill -9."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from harness.processes import FAST_SCAN, NSQDProcess, start_nsqd
from harness.wire import WireClient
from nsqclient.protocol.frames import Message


def post(nsqd: NSQDProcess, path: str) -> tuple[int, Any]:
    status, _, body = nsqd.http("POST", path)
    return status, json.loads(body) if body else None


def topic_stats(nsqd: NSQDProcess, topic: str) -> dict[str, Any]:
    document = json.loads(nsqd.http("GET", f"/stats?format=json&topic={topic}")[2])
    return dict(document["topics"][0])


def retention_files(data_path: Path, topic: str) -> list[Path]:
    return sorted(data_path.glob(f"{topic}.retention.*.dat"))


async def consume(nsqd: NSQDProcess, topic: str, channel: str, count: int, finish: bool = True) -> list[Message]:
    """``count`` messages of the channel, each finished (or left in flight), then nothing more for a moment."""
    client = await WireClient.connect(nsqd.tcp_address)
    try:
        await client.subscribe(topic, channel, rdy=min(count, 2500) or 1)
        messages = []
        for _ in range(count):
            message = await client.read_message()
            messages.append(message)
            if finish:
                await client.command(b"FIN", message.id)
        if finish:
            await client.expect_nothing(0.3)
        return messages
    finally:
        await client.close()


@pytest.mark.parametrize("mem_queue_size", ["10000", "0"])
async def test_ten_thousand_finished_messages_are_delivered_again_after_a_rewind(tmp_path: Path,
                                                                                 mem_queue_size: str) -> None:
    nsqd = start_nsqd("--retention-time=1h", f"--mem-queue-size={mem_queue_size}", data_path=tmp_path)
    try:
        assert post(nsqd, "/topic/create?topic=events")[0] == 200
        assert post(nsqd, "/channel/create?topic=events&channel=archive")[0] == 200
        nsqd.multi_publish("events", [b"event %d" % number for number in range(10_000)], batch=1000)
        first = await consume(nsqd, "events", "archive", 10_000)
        assert post(nsqd, "/channel/rewind?topic=events&channel=archive&since=earliest") == (200, {"rewound": 10_000})
        again = await consume(nsqd, "events", "archive", 10_000)
        assert [(m.id, m.body, m.timestamp) for m in again] == [(m.id, m.body, m.timestamp) for m in first]
        assert {m.attempts for m in again} == {1}  # counted afresh
        stats = topic_stats(nsqd, "events")
        assert (stats["retention_time"], stats["retention_bytes"], stats["retained_count"]) == ("1h0m0s", 0, 10_000)
        assert stats["retained_bytes"] == sum(36 + len(b"event %d" % n) for n in range(10_000))
        assert stats["retained_oldest_timestamp"] == first[0].timestamp
        metrics = nsqd.http("GET", "/metrics")[2].decode()
        assert 'nsq_topic_retained{topic="events"} 10000.0' in metrics
    finally:
        nsqd.stop()
    nsqd = start_nsqd("--retention-time=1h", f"--mem-queue-size={mem_queue_size}", data_path=tmp_path)
    try:  # what was rewound and finished is not delivered again after a restart
        assert nsqd.channel_stats("events", "archive")["depth"] == 0
        assert topic_stats(nsqd, "events")["retained_count"] == 10_000
    finally:
        nsqd.stop()


async def take_exactly(nsqd: NSQDProcess, topic: str, channel: str, count: int) -> list[bytes]:
    """The IDs of the next ``count`` messages of the channel, each finished: the window closes before the first FIN,
    so no more come."""
    client = await WireClient.connect(nsqd.tcp_address)
    try:
        await client.subscribe(topic, channel, rdy=count)
        messages = await client.read_messages(count)
        await client.command(b"RDY", b"0")
        for message in messages:
            await client.command(b"FIN", message.id)
        await client.expect_nothing(0.3)
        return [message.id for message in messages]
    finally:
        await client.close()


@pytest.mark.parametrize("mem_queue_size", ["10000", "0"])
async def test_a_rewind_under_way_takes_a_second_one_in_and_goes_on_after_a_restart(tmp_path: Path,
                                                                                     mem_queue_size: str) -> None:
    """What a rewind puts back is read from the retention files as consumers take it: a second rewind while the
    first is under way, and a restart, neither lose nor repeat anything."""
    flags = ("--retention-time=1h", f"--mem-queue-size={mem_queue_size}")
    nsqd = start_nsqd(*flags, data_path=tmp_path)
    try:
        assert post(nsqd, "/topic/create?topic=events")[0] == 200
        assert post(nsqd, "/channel/create?topic=events&channel=c")[0] == 200
        nsqd.multi_publish("events", [b"event %d" % number for number in range(5000)], batch=1000)
        published = [m.id for m in await consume(nsqd, "events", "c", 5000)]
        assert post(nsqd, "/channel/rewind?topic=events&channel=c&since=earliest") == (200, {"rewound": 5000})
        assert nsqd.channel_stats("events", "c")["depth"] == 5000
        first = await take_exactly(nsqd, "events", "c", 1200)
        assert first == published[:1200]
        # everything again: what the first rewind read and did not deliver yet is pending, so not counted twice
        pending = nsqd.channel_stats("events", "c")["depth"] - 3800
        assert post(nsqd, "/channel/rewind?topic=events&channel=c&since=earliest") == (
            200, {"rewound": 5000 - pending})
        assert nsqd.channel_stats("events", "c")["depth"] == 5000
        before_restart = await take_exactly(nsqd, "events", "c", 2000)
    finally:
        nsqd.stop()
    nsqd = start_nsqd(*flags, data_path=tmp_path)
    try:
        assert nsqd.channel_stats("events", "c")["depth"] == 3000
        after_restart = [m.id for m in await consume(nsqd, "events", "c", 3000)]
    finally:
        nsqd.stop()
    assert sorted(before_restart + after_restart) == sorted(published)


async def test_a_since_in_the_middle_puts_back_exactly_the_later_messages(tmp_path: Path) -> None:
    nsqd = start_nsqd("--retention-time=1h", data_path=tmp_path)
    try:
        assert post(nsqd, "/topic/create?topic=events")[0] == 200
        assert post(nsqd, "/channel/create?topic=events&channel=first")[0] == 200  # the topic holds nothing back
        nsqd.multi_publish("events", [b"early %d" % n for n in range(50)])
        await asyncio.sleep(0.05)
        middle = datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")
        await asyncio.sleep(0.05)
        nsqd.multi_publish("events", [b"late %d" % n for n in range(30)])
        # a new channel from history: only what came after the middle
        assert post(nsqd, f"/channel/create?topic=events&channel=late&since={middle}") == (
            200, {"rewound": 30, "created": True})
        assert [m.body for m in await consume(nsqd, "events", "late", 30)] == [b"late %d" % n for n in range(30)]
        # an existing channel is left as it is, as a consumer group that exists keeps its place
        assert post(nsqd, "/channel/create?topic=events&channel=late&since=earliest") == (
            200, {"rewound": 0, "created": False})
        # a duration before now; a since in the future puts back nothing
        assert post(nsqd, "/channel/rewind?topic=events&channel=late&since=1h") == (200, {"rewound": 80})
        assert post(nsqd, "/channel/rewind?topic=events&channel=other&since=1h")[0] == 404
        await consume(nsqd, "events", "late", 80)
        assert post(nsqd, "/channel/rewind?topic=events&channel=late&since=2999-01-01T00:00:00Z") == (
            200, {"rewound": 0})
        assert post(nsqd, "/channel/rewind?topic=events&channel=late&since=0s") == (200, {"rewound": 0})
    finally:
        nsqd.stop()


async def test_what_a_channel_or_its_topic_still_has_is_not_put_back_twice(tmp_path: Path) -> None:
    nsqd = start_nsqd("--retention-time=1h", "--mem-queue-size=10", data_path=tmp_path)
    try:
        assert post(nsqd, "/topic/create?topic=events")[0] == 200
        assert post(nsqd, "/channel/create?topic=events&channel=c")[0] == 200
        nsqd.multi_publish("events", [b"%d" % n for n in range(40)])
        # 5 in flight with a connected consumer, 35 queued (10 in memory, 25 on disk): nothing to put back
        consumer = await WireClient.connect(nsqd.tcp_address)
        await consumer.subscribe("events", "c", rdy=5)
        in_flight = await consumer.read_messages(5)
        assert post(nsqd, "/channel/rewind?topic=events&channel=c&since=earliest") == (200, {"rewound": 0})
        for message in in_flight:
            await consumer.command(b"FIN", message.id)
        await asyncio.sleep(0.2)
        assert post(nsqd, "/channel/rewind?topic=events&channel=c&since=earliest") == (200, {"rewound": 5})
        await consumer.command(b"RDY", b"100")
        received = await consumer.read_messages(40)
        assert sorted(m.body for m in received) == sorted(b"%d" % n for n in range(40))
        assert len({m.id for m in received}) == 40
        for message in received:
            await consumer.command(b"FIN", message.id)
        await consumer.expect_nothing(0.3)
        await consumer.close()
        # a paused topic holds what is published: held by the topic, not put back into its channel
        assert post(nsqd, "/topic/pause?topic=events")[0] == 200
        nsqd.publish("events", b"held")
        assert post(nsqd, "/channel/rewind?topic=events&channel=c&since=earliest") == (200, {"rewound": 40})
    finally:
        nsqd.stop()


async def test_deferred_publishes_stay_deferred_and_the_ttl_still_applies(tmp_path: Path) -> None:
    nsqd = start_nsqd(*FAST_SCAN, "--retention-time=1h", data_path=tmp_path)
    try:
        assert post(nsqd, "/topic/create?topic=events")[0] == 200
        assert post(nsqd, "/channel/create?topic=events&channel=c")[0] == 200
        assert nsqd.http("POST", "/pub?topic=events&defer=3000", b"later")[0] == 200
        nsqd.publish("events", b"now")
        assert [m.body for m in await consume(nsqd, "events", "c", 1)] == [b"now"]
        assert post(nsqd, "/channel/create?topic=events&channel=fresh&since=earliest") == (
            200, {"rewound": 2, "created": True})
        assert [m.body for m in await consume(nsqd, "events", "fresh", 1)] == [b"now"]  # "later" is not due yet
        assert nsqd.channel_stats("events", "fresh")["deferred_count"] == 1
        await asyncio.sleep(0.3)
        assert post(nsqd, "/topic/ttl?topic=events&ttl=200ms")[0] == 200
        assert post(nsqd, "/channel/rewind?topic=events&channel=c&since=earliest") == (
            200, {"rewound": 0, "expired": 1})  # "later" is still deferred in c: only "now" was a candidate
    finally:
        nsqd.stop()


async def test_retention_settings_per_topic_are_checked_kept_and_shown(tmp_path: Path) -> None:
    nsqd = start_nsqd(data_path=tmp_path)
    try:
        nsqd.publish("events", b"before")  # retention is off by default: NSQ's behaviour
        assert retention_files(tmp_path, "events") == []
        assert "retained_count" not in topic_stats(nsqd, "events")
        for query, code in (("time=soon", "INVALID_ARG_TIME"), ("time=-1s", "INVALID_ARG_TIME"),
                            ("bytes=many", "INVALID_ARG_BYTES"), ("bytes=-1", "INVALID_ARG_BYTES")):
            assert post(nsqd, f"/topic/retention?topic=events&{query}") == (400, {"message": code})
        assert post(nsqd, "/topic/retention?topic=nope&time=1h") == (404, {"message": "TOPIC_NOT_FOUND"})
        nsqd.publish("tail%23ephemeral", b"x")
        assert post(nsqd, "/topic/retention?topic=tail%23ephemeral&time=1h") == (400, {"message": "EPHEMERAL_TOPIC"})
        assert "retained_count" not in topic_stats(nsqd, "events")  # refused: nothing changed
        assert post(nsqd, "/topic/retention?topic=events&time=168h&bytes=1000000") == (200, {
            "time": "168h0m0s", "bytes": 1_000_000, "time_is_default": False, "bytes_is_default": False})
        assert post(nsqd, "/channel/create?topic=events&channel=first")[0] == 200
        nsqd.publish("events", b"after")
        assert [m.body for m in await consume(nsqd, "events", "first", 2)] == [b"before", b"after"]
        assert post(nsqd, "/channel/create?topic=events&channel=c&since=earliest") == (
            200, {"rewound": 1, "created": True})  # "before" came when retention was off
        for query, code in (("", "MISSING_ARG_SINCE"), ("&since=yesterday", "INVALID_ARG_SINCE"),
                            ("&since=2026-12-01", "INVALID_ARG_SINCE"), ("&since=-1h", "INVALID_ARG_SINCE")):
            assert post(nsqd, f"/channel/rewind?topic=events&channel=c{query}") == (400, {"message": code})
        assert post(nsqd, "/channel/rewind?topic=nope&channel=c&since=earliest") == (
            404, {"message": "TOPIC_NOT_FOUND"})
        assert nsqd.channel_stats("events", "c")["depth"] == 1  # the refused rewinds put back nothing
    finally:
        nsqd.stop()
    assert json.loads((tmp_path / "nsqd.dat").read_text())["topics"][0]["retention_time"] == "168h0m0s"
    nsqd = start_nsqd(data_path=tmp_path)
    try:
        assert topic_stats(nsqd, "events")["retained_count"] == 1
        assert post(nsqd, "/topic/retention?topic=events&bytes=default")[1]["bytes"] == 0
        assert post(nsqd, "/topic/retention?topic=events&time=0")[0] == 200  # off: its files go
        assert retention_files(tmp_path, "events") == []
        assert "retained_count" not in topic_stats(nsqd, "events")
        assert post(nsqd, "/topic/retention?topic=events&time=default")[1] == {
            "time": "0s", "bytes": 0, "time_is_default": True, "bytes_is_default": True}
    finally:
        nsqd.stop()


async def test_retained_files_expire_by_time_and_by_bytes(tmp_path: Path) -> None:
    nsqd = start_nsqd("--retention-time=3s", data_path=tmp_path)
    try:
        assert post(nsqd, "/topic/create?topic=events")[0] == 200
        assert post(nsqd, "/channel/create?topic=events&channel=first")[0] == 200  # the topic holds nothing back
        started = time.monotonic()
        nsqd.multi_publish("events", [b"x" * 100 for _ in range(100)])
        await asyncio.sleep(0.5)  # past a tenth of the retention time: the next publish starts a new file
        nsqd.multi_publish("events", [b"y" * 100 for _ in range(100)])
        assert len(retention_files(tmp_path, "events")) == 2
        await asyncio.sleep(3.25 - (time.monotonic() - started))
        # the first file's newest message is past the time: the file went, the second stays
        assert topic_stats(nsqd, "events")["retained_count"] == 100
        assert len(retention_files(tmp_path, "events")) == 1
        assert post(nsqd, "/channel/create?topic=events&channel=c&since=earliest") == (
            200, {"rewound": 100, "created": True})
        await asyncio.sleep(0.6)
        assert topic_stats(nsqd, "events")["retained_count"] == 0
        assert retention_files(tmp_path, "events") == []
        assert post(nsqd, "/channel/rewind?topic=events&channel=c&since=earliest") == (200, {"rewound": 0})
        # by bytes: files roll at a tenth of the limit, and the oldest go while the files hold more
        assert post(nsqd, "/topic/retention?topic=sized&time=1h&bytes=50000")[0] == 404
        nsqd.publish("sized", b"first")
        assert post(nsqd, "/topic/retention?topic=sized&time=1h&bytes=50000")[0] == 200
        for _ in range(20):
            nsqd.multi_publish("sized", [b"z" * 964 for _ in range(10)])  # 10,000 bytes on disk each
        await asyncio.sleep(1.3)
        stats = topic_stats(nsqd, "sized")
        assert 40_000 <= stats["retained_bytes"] <= 50_000
        assert sum(path.stat().st_size for path in retention_files(tmp_path, "sized")) == stats["retained_bytes"]
    finally:
        nsqd.stop()


async def test_kill_9_right_after_publishing_keeps_what_was_retained(tmp_path: Path) -> None:
    nsqd = start_nsqd("--retention-time=1h", data_path=tmp_path)
    try:
        assert post(nsqd, "/topic/create?topic=events")[0] == 200
        producer = await WireClient.connect(nsqd.tcp_address)
        for number in range(500):
            await producer.command(b"PUB", b"events", body=b"%d" % number)
        for _ in range(500):
            assert (await producer.read_frame()).data == b"OK"
        nsqd.stop(signal.SIGKILL)
        await producer.close()
    finally:
        nsqd.stop()
    started = time.monotonic()
    nsqd = start_nsqd("--retention-time=1h", data_path=tmp_path)
    try:
        assert time.monotonic() - started < 10
        assert post(nsqd, "/channel/create?topic=events&channel=c&since=earliest") == (
            200, {"rewound": 500, "created": True})
        assert [m.body for m in await consume(nsqd, "events", "c", 500)] == [b"%d" % n for n in range(500)]
    finally:
        nsqd.stop()


async def test_an_ephemeral_channel_takes_what_its_memory_holds_and_a_config_file_sets_retention(
        tmp_path: Path) -> None:
    config = tmp_path / "nsqd.toml"
    config.write_text('retention_time = "1h"\nretention_bytes = 1000000\nmem_queue_size = 10\n')
    (tmp_path / "data").mkdir()
    nsqd = start_nsqd(f"--config={config}", data_path=tmp_path / "data")
    try:
        assert post(nsqd, "/topic/create?topic=events")[0] == 200
        assert post(nsqd, "/channel/create?topic=events&channel=c")[0] == 200
        nsqd.multi_publish("events", [b"%d" % n for n in range(25)])
        stats = topic_stats(nsqd, "events")
        assert (stats["retention_time"], stats["retention_bytes"], stats["retained_count"]) == ("1h0m0s", 1_000_000, 25)
        assert post(nsqd, "/channel/create?topic=events&channel=tail%23ephemeral&since=earliest") == (
            200, {"rewound": 10, "created": True})  # its memory queue holds 10
        assert nsqd.channel_stats("events", "tail#ephemeral")["depth"] == 10
    finally:
        nsqd.stop()
