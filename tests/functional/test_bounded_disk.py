"""A disk queue that cannot fill the disk: --max-bytes-per-queue caps each topic's and channel's disk queue; at
the cap publishes are refused whole (--queue-full-policy=refuse, the default) or the oldest messages dropped and
counted (drop-oldest). nsqd stays healthy: a full queue is its policy at work, not a fault."""

from __future__ import annotations

import json
from pathlib import Path

from harness.crash_points import drain_channel
from harness.processes import FAST_SCAN, start_nsqd
from harness.wire import WireClient
from nsqclient.protocol.frames import FRAME_TYPE_ERROR, encode_mpub
from tests.functional.test_cli import run_nsqd

RECORD = 4 + 26 + 100  # a 100-byte body on disk
CAP = 50 * RECORD


def body(n: int) -> bytes:
    return (b"%06d" % n).ljust(100, b".")


async def test_a_capped_queue_refuses_publishes_whole_and_takes_them_again_once_read(tmp_path: Path) -> None:
    nsqd = start_nsqd(*FAST_SCAN, "--mem-queue-size=0", f"--max-bytes-per-queue={CAP}", data_path=tmp_path)
    try:
        assert nsqd.http("POST", "/topic/create?topic=t")[0] == 200
        for channel in ("roomy", "tight"):
            assert nsqd.http("POST", f"/channel/create?topic=t&channel={channel}")[0] == 200
        for n in range(40):  # "tight" is 10 messages from its cap; "roomy" drains as it goes
            assert nsqd.http("POST", "/pub?topic=t", body(n))[0] == 200
        roomy = await drain_channel(nsqd.tcp_address, "t", "roomy", 40)
        assert roomy == [body(n) for n in range(40)]

        producer = await WireClient.connect(nsqd.tcp_address)
        producer.send(encode_mpub(b"t", [body(n) for n in range(40, 51)]))  # 11: one too many for "tight"
        refusal = await producer.read_frame()
        assert refusal.frame_type == FRAME_TYPE_ERROR
        assert refusal.data.startswith(b"E_MPUB_FAILED MPUB failed queue t:tight is full: 5200 of its "
                                       b"--max-bytes-per-queue=6500 bytes taken")
        await producer.close()
        assert nsqd.channel_stats("t", "roomy")["depth"] == 0  # no channel took any of it
        status, _, answer = nsqd.http("POST", "/mpub?topic=t", b"\n".join(body(n) for n in range(40, 51)))
        assert status == 500 and json.loads(answer)["message"].startswith("QUEUE_FULL - queue t:tight is full")
        assert nsqd.http("GET", "/ping")[::2] == (200, b"OK")  # healthy: the policy at work

        for n in range(40, 50):
            assert nsqd.http("POST", "/pub?topic=t", body(n))[0] == 200
        assert nsqd.http("POST", "/pub?topic=t", body(50))[0] == 500
        tight = await drain_channel(nsqd.tcp_address, "t", "tight", 50)
        assert tight == [body(n) for n in range(50)]  # everything acknowledged, nothing refused got in
        assert nsqd.http("POST", "/pub?topic=t", body(50))[0] == 200  # read: room again
        assert nsqd.channel_stats("t", "tight")["dropped_count"] == 0
    finally:
        nsqd.stop()


async def test_a_drop_oldest_queue_keeps_the_newest_and_counts_what_it_dropped(tmp_path: Path) -> None:
    nsqd = start_nsqd(*FAST_SCAN, "--mem-queue-size=10", f"--max-bytes-per-queue={CAP}",
                      "--queue-full-policy=drop-oldest", data_path=tmp_path)
    try:
        assert nsqd.http("POST", "/topic/create?topic=t")[0] == 200
        assert nsqd.http("POST", "/channel/create?topic=t&channel=c")[0] == 200
        for start in range(0, 200, 20):
            assert nsqd.http("POST", "/mpub?topic=t", b"\n".join(body(n) for n in range(start, start + 20)))[0] == 200
        stats = nsqd.channel_stats("t", "c")
        dropped = stats["dropped_count"]
        assert dropped >= 140 and stats["depth"] == 200 - dropped and stats["backend_depth"] <= 50
        received = await drain_channel(nsqd.tcp_address, "t", "c", stats["depth"])
        # the first 10 waited in memory; of those on disk, the oldest were dropped
        assert received == [body(n) for n in range(10)] + [body(n) for n in range(10 + dropped, 200)]
        topic = json.loads(nsqd.http("GET", "/stats?format=json&topic=t")[2])["topics"][0]
        assert topic["dropped_count"] == 0
        metrics = nsqd.http("GET", "/metrics")[2].decode()
        assert f'nsq_channel_dropped_total{{channel="c",topic="t"}} {float(dropped)}' in metrics
    finally:
        nsqd.stop()


def test_without_the_cap_stats_are_nsqs(tmp_path: Path) -> None:
    nsqd = start_nsqd(*FAST_SCAN, data_path=tmp_path)
    try:
        assert nsqd.http("POST", "/topic/create?topic=t")[0] == 200
        assert nsqd.http("POST", "/channel/create?topic=t&channel=c")[0] == 200
        topic = json.loads(nsqd.http("GET", "/stats?format=json")[2])["topics"][0]
        assert "dropped_count" not in topic and "dropped_count" not in topic["channels"][0]
    finally:
        nsqd.stop()


def test_a_bad_policy_is_refused_at_start() -> None:
    result = run_nsqd("--queue-full-policy=drop-newest")
    assert result.returncode == 2 and "--queue-full-policy: invalid value 'drop-newest'" in result.stderr
