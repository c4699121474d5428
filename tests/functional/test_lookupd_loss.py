"""Losing lookupd, for real: every lookupd killed with SIGKILL and restarted on its ports, then replaced by a new
one elsewhere (``PUT /config/nsqlookupd_tcp_addresses``). Consumers that found their nsqds through lookupd keep
consuming, producers keep publishing, and the lookupd that comes (back) knows the whole cluster within one ping
interval."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from services.nsqd.lookup_peer import PING_INTERVAL
from shared.client import Consumer, Message
from tests.conftest import FAST_SCAN
from tests.processes import NSQDProcess, start_lookupd, start_nsqd, wait_for, wait_for_async


def knows_cluster(lookupd: NSQDProcess, nodes: list[NSQDProcess]) -> bool:
    """Whether ``lookupd`` has every node as a producer of topic t, with channel c."""
    status, _, body = lookupd.http("GET", "/lookup?topic=t")
    if status != 200:
        return False
    answer = json.loads(body)
    ports = sorted(producer["tcp_port"] for producer in answer["producers"])
    return ports == sorted(node.tcp_port for node in nodes) and answer["channels"] == ["c"]


def seconds_until_it_knows(lookupd: NSQDProcess, nodes: list[NSQDProcess], started: float) -> float:
    wait_for(lambda: knows_cluster(lookupd, nodes), timeout=PING_INTERVAL, what="lookupd knowing the whole cluster")
    return time.monotonic() - started


def start_node(data_path: Path, lookupd: NSQDProcess) -> NSQDProcess:
    data_path.mkdir()
    return start_nsqd(*FAST_SCAN, f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}", data_path=data_path)


def publish(nodes: list[NSQDProcess], first: int, count: int) -> list[bytes]:
    bodies = [b"m%d" % n for n in range(first, first + count)]
    for n, body in enumerate(bodies):
        assert nodes[n % len(nodes)].http("POST", "/pub?topic=t", body)[0] == 200
    return bodies


async def test_the_cluster_rides_out_losing_every_lookupd(tmp_path: Path) -> None:
    lookupd = start_lookupd()
    nodes = [start_node(tmp_path / f"nsqd{n}", lookupd) for n in range(2)]
    replacement: NSQDProcess | None = None
    received: list[bytes] = []

    async def handle(message: Message) -> None:
        received.append(message.body)

    consumer = Consumer("t", "c", handle, lookupd_http_addresses=[f"127.0.0.1:{lookupd.http_port}"],
                        max_in_flight=10, lookupd_poll_interval=0.5)
    try:
        for node in nodes:
            assert node.http("POST", "/topic/create?topic=t")[0] == 200
            assert node.http("POST", "/channel/create?topic=t&channel=c")[0] == 200
        wait_for(lambda: knows_cluster(lookupd, nodes), what="lookupd knowing both nodes")
        await consumer.start()
        sent = publish(nodes, 0, 10)
        await wait_for_async(lambda: sorted(received) == sorted(sent), what="the first messages")

        tcp_port, http_port = lookupd.tcp_port, lookupd.http_port
        lookupd.stop(signal.SIGKILL)
        sent += publish(nodes, 10, 10)  # producers publish on, consumers consume on, with no lookupd
        await wait_for_async(lambda: sorted(received) == sorted(sent), what="messages while lookupd is down")

        started = time.monotonic()
        lookupd = start_lookupd(f"--tcp-address=127.0.0.1:{tcp_port}", f"--http-address=127.0.0.1:{http_port}")
        back = seconds_until_it_knows(lookupd, nodes, started)

        replacement = start_lookupd()
        started = time.monotonic()
        for node in nodes:
            status, _, answer = node.http("PUT", "/config/nsqlookupd_tcp_addresses",
                                          json.dumps([f"127.0.0.1:{replacement.tcp_port}"]).encode())
            assert status == 200, answer
        replaced = seconds_until_it_knows(replacement, nodes, started)
        sent += publish(nodes, 20, 10)
        await wait_for_async(lambda: sorted(received) == sorted(sent), what="messages after the replacement")
        assert len(received) == len(sent) == 30  # nothing lost, nothing twice
        print(f"lookupd restarted: knew the cluster after {back:.2f} s; replaced: after {replaced:.2f} s")
    finally:
        await consumer.stop()
        for process in [*nodes, lookupd, *([replacement] if replacement else [])]:
            process.stop()
