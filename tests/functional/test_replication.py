"""Three nsqd at --replication-factor=3 with a real etcd: each mirrors its queues on the other two, a publish is
acknowledged once both hold it, consumer progress follows, and publishes that cannot have enough copies fail with
E_PUB_FAILED (HTTP 500) rather than being acknowledged."""

from __future__ import annotations

import asyncio
import json
import signal
import struct
from collections.abc import Callable
from typing import Any

from harness.etcd import EtcdCluster
from harness.processes import NSQDProcess, wait_for
from harness.wire import WireClient
from nsqclient.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_RESPONSE, Frame, encode_command, encode_mpub


def replication(nsqd: NSQDProcess) -> dict[str, Any]:
    stats: dict[str, Any] = json.loads(nsqd.http("GET", "/stats?format=json")[2])["replication"]
    return stats


def mirrored_depth(mirror: NSQDProcess, origin: NSQDProcess) -> int:
    for store in replication(mirror)["mirroring"]:
        if store["origin"] == f"127.0.0.1:{origin.tcp_port}":
            return int(store["depth"])
    return -1


def recorded_in_sync(etcd: EtcdCluster, origin: NSQDProcess) -> list[str] | None:
    """The in-sync set etcd holds for ``origin``, by port."""
    value = etcd.get(f"/nsq/mirrors/127.0.0.1:{origin.tcp_port}")
    return None if value is None else [node.rsplit(":", 1)[1] for node in json.loads(value)["in_sync"]]


def ports(*nodes: NSQDProcess) -> list[str]:
    return sorted(str(nsqd.tcp_port) for nsqd in nodes)


def start_cluster(etcd: EtcdCluster, nsqd_factory: Callable[..., NSQDProcess], *flags: str) -> list[NSQDProcess]:
    # a liveness timeout well above the pauses below: these tests are about a mirror that fell behind, not one
    # counted out (which comes back as a new mirror, sent a snapshot)
    nodes = [nsqd_factory(f"--etcd-address={etcd.addresses[0]}", "--replication-address=127.0.0.1:0",
                          "--replication-factor=3", "--replication-liveness-timeout=15s", *flags) for _ in range(3)]
    for nsqd in nodes:
        wait_for(lambda: sum(mirror["in_sync"] for mirror in replication(nsqd)["mirrors"]) == 2, 20,
                 lambda: f"two in-sync mirrors: {replication(nsqd)}")
    return nodes


def test_a_publish_is_held_by_both_mirrors_before_it_is_acknowledged_and_finishes_follow(
        etcd: EtcdCluster, nsqd_factory: Callable[..., NSQDProcess]) -> None:
    a, b, c = start_cluster(etcd, nsqd_factory)
    wait_for(lambda: recorded_in_sync(etcd, a) == ports(b, c), 10, "a's in-sync set in etcd")
    assert json.loads(etcd.get(f"/nsq/mirrors/127.0.0.1:{a.tcp_port}") or b"")["epoch"] == replication(a)["epoch"]
    a.multi_publish("orders", [b"%d" % number for number in range(100)])
    # acknowledged: both mirrors hold every message already, without waiting
    assert mirrored_depth(b, a) == mirrored_depth(c, a) == 100
    assert replication(a)["min_in_sync"] == 2

    async def consume() -> None:
        consumer = await WireClient.connect(a.tcp_address)
        await consumer.subscribe("orders", "archive", rdy=100)
        for message in await consumer.read_messages(100):
            await consumer.command(b"FIN", message.id)
        producer = await WireClient.connect(a.tcp_address)
        await producer.command(b"PUB", b"orders", body=b"over TCP")
        assert await producer.read_frame() == Frame(FRAME_TYPE_RESPONSE, b"OK")
        for client in (consumer, producer):
            client.writer.close()
            await client.writer.wait_closed()

    asyncio.run(consume())
    # the 100 finished; the one published over TCP waits in the channel, on both mirrors
    wait_for(lambda: mirrored_depth(b, a) == mirrored_depth(c, a) == 1, 5, "the finishes on both mirrors")
    # Prometheus sees the same
    metrics = a.http("GET", "/metrics")[2].decode()
    for mirror in (b, c):
        assert f'nsq_replication_mirror_in_sync{{mirror="127.0.0.1:{mirror.tcp_port}"}} 1.0' in metrics
        assert f'nsq_replication_mirror_lag{{mirror="127.0.0.1:{mirror.tcp_port}"}} 0.0' in metrics
    assert "nsq_replication_in_sync_recorded 2.0" in metrics and "nsq_replication_refused_publishes_total 0.0" in metrics
    assert f'nsq_replication_mirrored_depth{{origin="127.0.0.1:{a.tcp_port}"}} 1.0' in b.http("GET", "/metrics")[2].decode()


def test_publishes_sent_together_are_mirrored_together_and_answered_in_order(
        etcd: EtcdCluster, nsqd_factory: Callable[..., NSQDProcess]) -> None:
    """A producer that sends publishes without waiting for each answer (pynsq's and go-nsq's asynchronous
    publishing) has them all mirrored at once; the answers come in order, and whatever follows them waits."""
    a, b, c = start_cluster(etcd, nsqd_factory)
    ok = Frame(FRAME_TYPE_RESPONSE, b"OK")

    async def send_together(*requests: bytes, expected: int = 1000) -> list[Frame]:
        client = await WireClient.connect(a.tcp_address)
        client.send(b"".join(requests))
        frames: list[Frame] = []
        try:
            while len(frames) < expected:
                frames.append(await client.read_frame())
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            pass  # closed by nsqd, or nothing more to read
        client.writer.close()
        return frames

    publishes = [encode_command(b"PUB", b"orders", body=b"%d" % number) for number in range(100)]
    frames = asyncio.run(send_together(*publishes, encode_mpub(b"orders", [b"x", b"y", b"z"]),
                                       encode_command(b"DPUB", b"orders", b"60000", body=b"later"),
                                       encode_command(b"PUB", b"bad!topic", body=b"refused"),
                                       encode_command(b"PUB", b"orders", body=b"never read")))
    assert frames[:102] == [ok] * 102
    assert frames[102].frame_type == FRAME_TYPE_ERROR and frames[102].data.startswith(b"E_BAD_TOPIC"), frames[102:]
    assert len(frames) == 103  # and the connection closed
    assert mirrored_depth(b, a) == mirrored_depth(c, a) == 104  # held by both before the answers went out

    # a publish whose body is refused after its topic was made: its error comes in its place too
    empty_message = b"MPUB fresh\n" + struct.pack(">III", 8, 1, 0)
    frames = asyncio.run(send_together(*publishes[:10], empty_message, publishes[0]))
    assert frames[:10] == [ok] * 10 and len(frames) == 11, frames
    assert frames[10].frame_type == FRAME_TYPE_ERROR and frames[10].data.startswith(b"E_BAD_MESSAGE"), frames[10]

    # a request that is not a publish waits for the answers before it: here SUB, then CLS after it
    frames = asyncio.run(send_together(*publishes[:20], encode_command(b"SUB", b"orders", b"archive"),
                                       encode_command(b"CLS"), expected=22))
    assert frames == [ok] * 21 + [Frame(FRAME_TYPE_RESPONSE, b"CLOSE_WAIT")], frames


def test_what_a_full_queue_drops_with_drop_oldest_is_dropped_on_the_mirrors_too(
        etcd: EtcdCluster, nsqd_factory: Callable[..., NSQDProcess]) -> None:
    record = 4 + 26 + 100  # a 100-byte body on disk
    a, b, c = start_cluster(etcd, nsqd_factory, "--mem-queue-size=10", f"--max-bytes-per-queue={50 * record}",
                            "--queue-full-policy=drop-oldest")
    assert a.http("POST", "/topic/create?topic=orders")[0] == 200
    assert a.http("POST", "/channel/create?topic=orders&channel=archive")[0] == 200
    assert a.http("POST", "/topic/create?topic=held")[0] == 200  # no channel: the topic holds them itself
    for start in range(0, 200, 20):
        for topic in ("orders", "held"):
            bodies = b"\n".join(b"%06d".ljust(100, b".") % number for number in range(start, start + 20))
            assert a.http("POST", f"/mpub?topic={topic}", bodies)[0] == 200
    channel = a.channel_stats("orders", "archive")
    held = json.loads(a.http("GET", "/stats?format=json&topic=held")[2])["topics"][0]
    assert channel["dropped_count"] >= 140 and held["dropped_count"] >= 140
    # the mirrors hold what a still has: the dropped messages would come back after a failover otherwise
    expected = channel["depth"] + held["depth"]
    wait_for(lambda: mirrored_depth(b, a) == mirrored_depth(c, a) == expected, 5,
             lambda: f"{mirrored_depth(b, a)}, {mirrored_depth(c, a)} mirrored of {expected}")


def test_a_lost_mirror_falls_out_and_too_few_copies_refuse_the_publish(
        etcd: EtcdCluster, nsqd_factory: Callable[..., NSQDProcess]) -> None:
    a, b, c = start_cluster(etcd, nsqd_factory, "--replication-timeout=1s")
    b.process.send_signal(signal.SIGSTOP)  # alive to the kernel, answering nothing
    try:
        wait_for(lambda: recorded_in_sync(etcd, a) == ports(b, c), 10, "a's in-sync set in etcd")
        a.publish("orders", b"two copies are enough")  # b falls out after the timeout; a and c hold it
        assert [mirror["in_sync"] for mirror in replication(a)["mirrors"]].count(True) == 1
        assert recorded_in_sync(etcd, a) == ports(c)  # out of the set in etcd before the OK went out
        c.process.send_signal(signal.SIGSTOP)
        try:
            status, _, body = a.http("POST", "/pub?topic=orders", b"one copy is not")
            assert status == 500 and json.loads(body)["message"].startswith("PUB_FAILED - 1 of 2"), (status, body)

            async def publish_over_tcp() -> Frame:
                producer = await WireClient.connect(a.tcp_address)
                await producer.command(b"PUB", b"orders", body=b"nor over TCP")
                frame = await producer.read_frame()
                producer.writer.close()
                await producer.writer.wait_closed()
                return frame

            frame = asyncio.run(publish_over_tcp())
            assert frame.frame_type == FRAME_TYPE_ERROR and frame.data.startswith(b"E_PUB_FAILED PUB failed 1 of 2")
            assert replication(a)["refused_publishes"] == 2
        finally:
            c.process.send_signal(signal.SIGCONT)
    finally:
        b.process.send_signal(signal.SIGCONT)
    # both come back: they get what they missed and count again
    wait_for(lambda: sum(mirror["in_sync"] for mirror in replication(a)["mirrors"]) == 2, 15,
             lambda: f"both mirrors in sync again: {replication(a)}")
    wait_for(lambda: recorded_in_sync(etcd, a) == ports(b, c), 10, "both back in the set in etcd")
    a.publish("orders", b"three copies again")


def test_an_origin_whose_in_sync_record_another_nsqd_wrote_acknowledges_nothing_more(
        etcd: EtcdCluster, nsqd_factory: Callable[..., NSQDProcess]) -> None:
    a, b, c = start_cluster(etcd, nsqd_factory, "--replication-timeout=1s")
    wait_for(lambda: recorded_in_sync(etcd, a) == ports(b, c), 10, "a's in-sync set in etcd")
    # what a mirror adopting a's messages would write: a's epoch is over
    etcd.put(f"/nsq/mirrors/127.0.0.1:{a.tcp_port}", json.dumps({"epoch": replication(a)["epoch"],
                                                                 "adopted_by": "elsewhere"}).encode())
    b.process.send_signal(signal.SIGSTOP)
    try:
        status, _, body = a.http("POST", "/pub?topic=orders", b"b is out: a must record that, and cannot")
        assert status == 500 and b"written by another nsqd" in body, (status, body)
    finally:
        b.process.send_signal(signal.SIGCONT)
    wait_for(lambda: sum(mirror["in_sync"] for mirror in replication(a)["mirrors"]) == 2, 15, "b back in sync")
    status, _, body = a.http("POST", "/pub?topic=orders", b"every mirror answers, and still")
    assert status == 500 and b"epoch" in body and b"is over" in body, (status, body)
    assert replication(a)["fenced"]


def test_without_etcd_flags_stats_keep_nsqs_shape(nsqd: NSQDProcess) -> None:
    assert "replication" not in json.loads(nsqd.http("GET", "/stats?format=json")[2])
    assert b"nsq_replication" not in nsqd.http("GET", "/metrics")[2]


def test_a_factor_above_one_needs_etcd(tmp_path: Any) -> None:
    import subprocess
    import sys

    from harness.processes import ROOT

    result = subprocess.run([sys.executable, "-m", "services.nsqd", "--replication-factor=3",
                             f"--data-path={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert result.returncode != 0
    assert "--replication-factor above 1 needs --etcd-address" in result.stdout + result.stderr
