"""nsqd pushes its figures to a real UDP socket standing in for statsd: NSQ's names under the host's prefix,
counters as the change since the last push, packets no larger than the packet size, spread over the interval."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.processes import NSQDProcess
from tests.functional.test_cli import run_nsqd


@pytest.fixture
def statsd() -> Iterator[socket.socket]:
    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener.bind(("127.0.0.1", 0))
    yield listener
    listener.close()


def receive_push(listener: socket.socket) -> list[tuple[float, bytes]]:
    """The packets of one push, (arrival, data): up to the one with its last line (``mem.gc_runs``)."""
    listener.settimeout(10)
    received = [(time.monotonic(), listener.recv(65536))]
    while b"mem.gc_runs:" not in received[-1][1]:
        received.append((time.monotonic(), listener.recv(65536)))
    return received


def test_figures_reach_statsd_under_nsqs_names_and_counters_count_the_change(
        statsd: socket.socket, nsqd_factory: Callable[..., NSQDProcess]) -> None:
    address = "127.0.0.1:%d" % statsd.getsockname()[1]
    nsqd = nsqd_factory(f"--statsd-address={address}", "--statsd-interval=3s", "--statsd-udp-packet-size=200",
                        "--broadcast-address=nsqd.example", "--e2e-processing-latency-percentile=0.99")
    nsqd.http("POST", "/topic/create?topic=orders")
    nsqd.http("POST", "/channel/create?topic=orders&channel=archive")
    nsqd.multi_publish("orders", [b"order %d" % number for number in range(5)])
    prefix = f"nsq.nsqd_example_{nsqd.http_port}."

    first = receive_push(statsd)
    lines = b"".join(data for _, data in first).decode().splitlines()
    assert all(len(data) <= 200 for _, data in first)
    assert first[-1][0] - first[0][0] > 0.5  # spread over the interval less a second, not sent at once
    for expected in ("topic.orders.message_count:5|c", "topic.orders.depth:0|g",
                     "topic.orders.channel.archive.message_count:5|c", "topic.orders.channel.archive.depth:5|g",
                     "topic.orders.channel.archive.in_flight_count:0|g", "topic.orders.channel.archive.clients:0|g",
                     "topic.orders.channel.archive.e2e_processing_latency_99:0|g", "mem.gc_runs:"):
        assert any(line.startswith(prefix + expected) for line in lines), (expected, lines)
    assert any(line.startswith(prefix + "mem.heap_in_use_bytes:") for line in lines)

    nsqd.publish("orders", b"one more")
    second = b"".join(data for _, data in receive_push(statsd)).decode().splitlines()
    assert prefix + "topic.orders.message_count:1|c" in second
    assert prefix + "topic.orders.channel.archive.depth:6|g" in second


def test_an_interval_statsd_cannot_be_pushed_in_is_refused(tmp_path: Path) -> None:
    result = run_nsqd("--statsd-address=127.0.0.1:8125", "--statsd-interval=1s", f"--data-path={tmp_path}")
    assert result.returncode != 0
    assert "--statsd-interval 1s must be more than 1s" in result.stdout + result.stderr
    result = run_nsqd("--statsd-address=nowhere", f"--data-path={tmp_path}")
    assert result.returncode != 0 and "--statsd-address 'nowhere' must be <addr>:<port>" in result.stdout + result.stderr


def test_two_nsqd_on_one_host_push_to_one_statsd_under_prefixes_of_their_own(
        statsd: socket.socket, nsqd_factory: Callable[..., NSQDProcess]) -> None:
    """``make up``'s shape: two nsqd on one host, told apart by their HTTP port in the prefix."""
    address = "127.0.0.1:%d" % statsd.getsockname()[1]
    nodes = [nsqd_factory(f"--statsd-address={address}", "--statsd-interval=2s", "--broadcast-address=host.example")
             for _ in range(2)]
    for number, nsqd in enumerate(nodes, 1):
        nsqd.multi_publish("orders", [b"x"] * number)
    statsd.settimeout(10)
    seen: dict[str, str] = {}
    while len(seen) < 2:
        for line in statsd.recv(65536).decode().splitlines():
            if ".topic.orders.message_count:" in line:
                prefix, _, value = line.partition("topic.orders.message_count:")
                seen.setdefault(prefix, value)
    assert seen == {f"nsq.host_example_{nodes[0].http_port}.": "1|c", f"nsq.host_example_{nodes[1].http_port}.": "2|c"}
