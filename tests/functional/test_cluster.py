"""nsqd and nsqlookupd together, as real processes: registration, propagation, reconnection."""

from __future__ import annotations

import itertools
import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from harness.processes import FAST_SCAN, NSQDProcess, start_lookupd, start_nsqd, wait_for
from harness.wire import WireClient
from nsqclient.protocol.frames import FRAME_TYPE_RESPONSE, Frame
from services.nsqd.lookup_peer import PING_INTERVAL


def lookup(lookupd: NSQDProcess, topic: str) -> dict[str, Any] | None:
    status, _, body = lookupd.http("GET", f"/lookup?topic={topic}")
    return json.loads(body) if status == 200 else None


def producer_ports(lookupd: NSQDProcess, topic: str) -> set[int]:
    found = lookup(lookupd, topic)
    return {p["tcp_port"] for p in found["producers"]} if found else set()


def test_two_nsqd_register_with_two_lookupds(tmp_path: Path) -> None:
    lookupds = [start_lookupd(), start_lookupd()]
    flags = [f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}" for lookupd in lookupds]
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    nsqds = [start_nsqd(*FAST_SCAN, *flags, data_path=tmp_path / name) for name in ("a", "b")]
    try:
        started = time.monotonic()
        assert nsqds[0].http("POST", "/pub?topic=t", b"x")[0] == 200
        assert nsqds[1].http("POST", "/channel/create?topic=t&channel=c")[0] == 404  # no topic there yet
        assert nsqds[1].http("POST", "/topic/create?topic=t")[0] == 200
        assert nsqds[1].http("POST", "/channel/create?topic=t&channel=c")[0] == 200
        both = {nsqd.tcp_port for nsqd in nsqds}
        for lookupd in lookupds:
            wait_for(lambda: producer_ports(lookupd, "t") == both, 1.0, "both nsqd registered the topic")
            wait_for(lambda: (lookup(lookupd, "t") or {}).get("channels") == ["c"], 1.0, "the channel registered")
            nodes = json.loads(lookupd.http("GET", "/nodes")[2])["producers"]
            assert {node["tcp_port"] for node in nodes} == both
            assert all(node["broadcast_address"] == "127.0.0.1" and node["topics"] == ["t"] for node in nodes)
        assert time.monotonic() - started < 3

        assert nsqds[0].http("POST", "/topic/delete?topic=t")[0] == 200
        for lookupd in lookupds:
            wait_for(lambda: producer_ports(lookupd, "t") == {nsqds[1].tcp_port}, 1.0, "the topic unregistered")

        nsqds[1].process.send_signal(signal.SIGKILL)
        for lookupd in lookupds:
            wait_for(lambda: producer_ports(lookupd, "t") == set(), 2.0, "the killed nsqd dropped")
        nsqds[1].stop()
        restarted = start_nsqd(*FAST_SCAN, *flags, data_path=tmp_path / "b")
        nsqds[1] = restarted
        for lookupd in lookupds:  # back with its topics, from its metadata
            wait_for(lambda: producer_ports(lookupd, "t") == {restarted.tcp_port}, 3.0, "the restarted nsqd back")
    finally:
        for process in [*nsqds, *lookupds]:
            process.stop()


def test_a_restarted_lookupd_gets_everything_registered_again(tmp_path: Path) -> None:
    lookupd = start_lookupd()
    port = lookupd.tcp_port
    nsqd = start_nsqd(*FAST_SCAN, f"--lookupd-tcp-address=127.0.0.1:{port}", data_path=tmp_path)
    try:
        nsqd.http("POST", "/topic/create?topic=kept")
        nsqd.http("POST", "/channel/create?topic=kept&channel=c")
        wait_for(lambda: producer_ports(lookupd, "kept") == {nsqd.tcp_port}, what="nsqd registered")
        lookupd.stop()
        lookupd = start_lookupd(f"--tcp-address=127.0.0.1:{port}")  # same port, empty memory
        wait_for(lambda: producer_ports(lookupd, "kept") == {nsqd.tcp_port}, 8.0, "nsqd registered again")
        assert (lookup(lookupd, "kept") or {}).get("channels") == ["c"]
    finally:
        nsqd.stop()
        lookupd.stop()


@pytest.mark.slow
def test_an_nsqd_whose_channels_keep_changing_still_pings(tmp_path: Path) -> None:
    # lookupd counts a producer active while it PINGs; registrations do not count (as in NSQ)
    timeout = PING_INTERVAL + 2
    lookupd = start_lookupd(f"--inactive-producer-timeout={timeout:g}s")
    nsqd = start_nsqd(*FAST_SCAN, f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}", data_path=tmp_path)
    try:
        nsqd.http("POST", "/topic/create?topic=t")
        wait_for(lambda: producer_ports(lookupd, "t") == {nsqd.tcp_port}, what="nsqd registered")
        registered = time.monotonic()
        for n in itertools.count():  # a channel every second (ephemeral channels come and go that often)
            assert nsqd.http("POST", f"/channel/create?topic=t&channel=c{n}")[0] == 200
            if time.monotonic() - registered > timeout + 1:
                break
            time.sleep(1)
        assert producer_ports(lookupd, "t") == {nsqd.tcp_port}, "lookupd dropped a connected nsqd"
    finally:
        nsqd.stop()
        lookupd.stop()


def test_lookupd_addresses_change_at_runtime(tmp_path: Path) -> None:
    lookupd = start_lookupd()
    nsqd = start_nsqd(*FAST_SCAN, data_path=tmp_path)
    try:
        nsqd.http("POST", "/topic/create?topic=t")
        assert lookup(lookupd, "t") is None
        address = json.dumps([f"127.0.0.1:{lookupd.tcp_port}"]).encode()
        assert nsqd.http("PUT", "/config/nsqlookupd_tcp_addresses", address)[0] == 200
        wait_for(lambda: producer_ports(lookupd, "t") == {nsqd.tcp_port}, what="nsqd registered")
        assert nsqd.http("PUT", "/config/nsqlookupd_tcp_addresses", b"[]")[0] == 200
        wait_for(lambda: producer_ports(lookupd, "t") == set(), what="nsqd gone from the lookupd")
    finally:
        nsqd.stop()
        lookupd.stop()


def test_a_new_topic_gets_the_channels_the_cluster_knows_before_messages_move(tmp_path: Path) -> None:
    lookupd = start_lookupd()
    nsqd = start_nsqd(*FAST_SCAN, f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}", data_path=tmp_path)
    try:
        for channel in ("archive", "realtime"):
            assert lookupd.http("POST", f"/channel/create?topic=orders&channel={channel}")[0] == 200
        # registered: nsqd read lookupd's answer to IDENTIFY, so it knows where to ask for a topic's channels
        # (lookupd lists it in /nodes as soon as it identified, before nsqd has that answer)
        assert nsqd.http("POST", "/topic/create?topic=warm_up")[0] == 200
        wait_for(lambda: lookupd.http("GET", "/lookup?topic=warm_up")[0] == 200, what="nsqd registered its topic")
        assert nsqd.http("POST", "/pub?topic=orders", b"first")[0] == 200
        def channels() -> dict[str, int]:
            topics = json.loads(nsqd.http("GET", "/stats?format=json")[2])["topics"]
            orders = [topic for topic in topics if topic["topic_name"] == "orders"]
            return {c["channel_name"]: c["depth"] for c in orders[0]["channels"]} if orders else {}
        wait_for(lambda: channels() == {"archive": 1, "realtime": 1}, what="the message in both channels")
    finally:
        nsqd.stop()
        lookupd.stop()


async def test_the_command_that_creates_a_topic_is_answered_once_the_topic_started(tmp_path: Path) -> None:
    """As NSQ: a command that creates a topic is answered only after nsqd asked lookupd for the topic's channels
    and the topic started, so what is acknowledged is in every channel (a DPUB right after SUB is deferred on the
    channel at once); a lookupd that does not answer holds that client for --http-client-request-timeout, and
    every other client is served meanwhile."""
    lookupd = start_lookupd()
    nsqd = start_nsqd(*FAST_SCAN, f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}",
                      "--http-client-connect-timeout=1s", "--http-client-request-timeout=1s", data_path=tmp_path)
    clients: list[WireClient] = []
    try:
        assert nsqd.http("POST", "/topic/create?topic=existing")[0] == 200
        # registered: nsqd read lookupd's answer to IDENTIFY, so it knows where to ask for a topic's channels
        wait_for(lambda: lookupd.http("GET", "/lookup?topic=existing")[0] == 200, what="nsqd registered its topic")
        consumer, producer, other = clients[:] = [await WireClient.connect(nsqd.tcp_address) for _ in range(3)]
        lookupd.process.send_signal(signal.SIGSTOP)  # it accepts connections and answers nothing
        try:
            started = time.monotonic()
            await consumer.command(b"SUB", b"fresh", b"c")
            await producer.command(b"DPUB", b"fresh", b"60000", body=b"later")
            await other.command(b"PUB", b"existing", body=b"now")
            assert await other.read_frame() == Frame(FRAME_TYPE_RESPONSE, b"OK")
            # held for the lookupd, it would wait its whole 1s timeout; under a full test run's load, serving the
            # three commands has taken more than half of that
            assert time.monotonic() - started < 0.9, "another client waited too"
            assert await consumer.read_frame() == Frame(FRAME_TYPE_RESPONSE, b"OK")
            assert time.monotonic() - started >= 0.9, "answered before the topic started"
            assert await producer.read_frame() == Frame(FRAME_TYPE_RESPONSE, b"OK")
            stats = json.loads(nsqd.http("GET", "/stats?format=json")[2])
            topics = {topic["topic_name"]: topic for topic in stats["topics"]}
            assert topics["fresh"]["channels"][0]["deferred_count"] == 1
            # over HTTP the same
            started = time.monotonic()
            assert nsqd.http("POST", "/pub?topic=fresh_http", b"body")[0] == 200
            assert time.monotonic() - started >= 0.9
        finally:
            lookupd.process.send_signal(signal.SIGCONT)
    finally:
        for client in clients:
            await client.close()
        nsqd.stop()
        lookupd.stop()
