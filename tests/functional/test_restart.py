"""What survives a restart of nsqd on the same --data-path."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from harness.processes import FAST_SCAN, ROOT, start_nsqd


def topics(stats_body: bytes) -> dict[str, tuple[bool, dict[str, bool]]]:
    return {t["topic_name"]: (t["paused"], {c["channel_name"]: c["paused"] for c in t["channels"]})
            for t in json.loads(stats_body)["topics"]}


def test_topics_channels_and_paused_state_survive_a_restart(tmp_path: Path) -> None:
    nsqd = start_nsqd(*FAST_SCAN, data_path=tmp_path)
    try:
        for path in ("/topic/create?topic=kept", "/channel/create?topic=kept&channel=a",
                     "/channel/create?topic=kept&channel=b", "/channel/pause?topic=kept&channel=b",
                     "/topic/create?topic=held", "/topic/pause?topic=held",
                     "/topic/create?topic=gone", "/topic/delete?topic=gone",
                     "/topic/create?topic=tmp%23ephemeral"):
            assert nsqd.http("POST", path)[0] == 200, path
    finally:
        assert nsqd.stop() == 0
    nsqd = start_nsqd(*FAST_SCAN, data_path=tmp_path)
    try:
        assert topics(nsqd.http("GET", "/stats?format=json")[2]) == {
            "held": (True, {}), "kept": (False, {"a": False, "b": True})}
    finally:
        nsqd.stop()


def test_pause_is_on_disk_before_the_reply(tmp_path: Path) -> None:
    nsqd = start_nsqd(*FAST_SCAN, data_path=tmp_path)
    try:
        nsqd.http("POST", "/topic/create?topic=t")
        assert nsqd.http("POST", "/topic/pause?topic=t")[0] == 200
        recorded = json.loads((tmp_path / "nsqd.dat").read_text())["topics"]
        assert recorded == [{"name": "t", "paused": True, "channels": []}]
    finally:
        nsqd.process.kill()  # no clean exit: what is on disk is what the reply promised
        nsqd.stop()


def test_a_second_nsqd_on_the_same_data_path_refuses_to_start(tmp_path: Path) -> None:
    nsqd = start_nsqd(data_path=tmp_path)
    try:
        second = subprocess.run([sys.executable, "-m", "services.nsqd", "--tcp-address=127.0.0.1:0",
                                 "--http-address=127.0.0.1:0", f"--data-path={tmp_path}"],
                                cwd=ROOT, capture_output=True, text=True, timeout=30)
        assert second.returncode == 1
        assert f"--data-path={tmp_path} in use (possibly by another instance of nsqd)" in second.stderr
        assert nsqd.http("GET", "/ping")[0] == 200
    finally:
        nsqd.stop()


async def test_queued_in_flight_and_deferred_messages_come_back_after_a_restart(tmp_path: Path) -> None:
    from harness.wire import WireClient

    nsqd = start_nsqd(*FAST_SCAN, "--mem-queue-size=2", data_path=tmp_path)
    try:
        assert nsqd.http("POST", "/channel/create?topic=t&channel=c")[0] == 404  # no topic yet
        nsqd.http("POST", "/topic/create?topic=t")
        nsqd.http("POST", "/channel/create?topic=t&channel=c")
        for i in range(5):
            assert nsqd.http("POST", "/pub?topic=t", b"queued %d" % i)[0] == 200
        assert nsqd.http("POST", "/pub?topic=t&defer=60000", b"deferred")[0] == 200
        consumer = await WireClient.connect(nsqd.tcp_address)
        await consumer.subscribe("t", "c", rdy=2)
        in_flight = await consumer.read_messages(2)  # delivered, never finished
        await consumer.close()
    finally:
        assert nsqd.stop() == 0
    nsqd = start_nsqd(*FAST_SCAN, data_path=tmp_path)
    try:
        stats = json.loads(nsqd.http("GET", "/stats?format=json")[2])["topics"][0]["channels"][0]
        assert (stats["depth"], stats["deferred_count"]) == (5, 1)
        consumer = await WireClient.connect(nsqd.tcp_address)
        await consumer.subscribe("t", "c", rdy=10)
        bodies = sorted(m.body for m in await consumer.read_messages(5))
        assert bodies == sorted([b"queued %d" % i for i in range(5)])
        assert {m.body for m in in_flight} <= set(bodies)
        await consumer.expect_nothing(0.5)  # the deferred one is due in a minute, restart or not
        await consumer.close()
    finally:
        nsqd.stop()


async def test_deferred_messages_keep_their_due_time_across_a_restart(tmp_path: Path) -> None:
    from harness.wire import WireClient

    nsqd = start_nsqd(*FAST_SCAN, data_path=tmp_path)
    try:
        nsqd.http("POST", "/topic/create?topic=d")
        nsqd.http("POST", "/channel/create?topic=d&channel=c")
        published_at = time.monotonic()
        assert nsqd.http("POST", "/pub?topic=d&defer=2500", b"later")[0] == 200
        assert nsqd.http("POST", "/pub?topic=waiting&defer=1000", b"no channel yet")[0] == 200
    finally:
        assert nsqd.stop() == 0
    nsqd = start_nsqd(*FAST_SCAN, data_path=tmp_path)
    try:
        consumer = await WireClient.connect(nsqd.tcp_address)
        await consumer.subscribe("d", "c", rdy=10)
        message = await consumer.read_message(timeout=10)
        assert message.body == b"later" and time.monotonic() - published_at >= 2.5
        waiting = await WireClient.connect(nsqd.tcp_address)
        subscribed_at = time.monotonic()
        await waiting.subscribe("waiting", "c", rdy=10)  # a topic's deferral starts when it reaches a channel
        assert (await waiting.read_message(timeout=10)).body == b"no channel yet"
        assert time.monotonic() - subscribed_at >= 1.0
        await consumer.close()
        await waiting.close()
    finally:
        nsqd.stop()
