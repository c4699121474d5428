"""nsq_stat as a real process against real nsqd and nsqlookupd processes: the numbers it prints, its exit codes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from apps.nsq_stat import HEADER, ChannelStats, aggregate
from harness.processes import FAST_SCAN, ROOT, NSQDProcess, free_port, start_lookupd, start_nsqd, wait_for

COLUMNS = ("ingress", "egress", "total", "mem", "disk", "inflt", "def", "req", "t-o", "msgs", "clients")
COMMAND = [sys.executable, "-m", "apps.nsq_stat"]


def nsq_stat(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, *args], cwd=ROOT, capture_output=True, text=True, timeout=30)


def start_nsq_stat(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*COMMAND, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def rows(stdout: str) -> list[dict[str, int]]:
    """The table's rows as column -> value, after checking that the header comes first."""
    lines = stdout.splitlines()
    assert tuple(lines[:2]) == HEADER
    return [dict(zip(COLUMNS, map(int, line.replace("|", " ").split()), strict=True)) for line in lines[2:]]


def fill(nsqd: NSQDProcess, topic: str, channel: str, messages: int, deferred: int = 0) -> None:
    """The topic and channel with ``messages`` ready and ``deferred`` deferred messages in the channel."""
    assert nsqd.http("POST", f"/topic/create?topic={topic}")[0] == 200
    assert nsqd.http("POST", f"/channel/create?topic={topic}&channel={channel}")[0] == 200
    for n in range(messages):
        assert nsqd.http("POST", f"/pub?topic={topic}", f"m{n}".encode())[0] == 200
    for n in range(deferred):
        assert nsqd.http("POST", f"/pub?topic={topic}&defer=60000", f"d{n}".encode())[0] == 200


@pytest.fixture
def lookupds() -> Iterator[list[NSQDProcess]]:
    started = [start_lookupd(), start_lookupd()]
    yield started
    for process in started:
        process.stop()


def producer_ports(lookupd: NSQDProcess, topic: str) -> set[int]:
    status, _, body = lookupd.http("GET", f"/lookup?topic={topic}")
    return {p["http_port"] for p in json.loads(body)["producers"]} if status == 200 else set()


def test_direct_nsqd_totals(nsqd: NSQDProcess) -> None:
    fill(nsqd, "t", "c", messages=3, deferred=1)
    result = nsq_stat("--topic=t", "--channel=c", f"--nsqd-http-address=127.0.0.1:{nsqd.http_port}",
                      "--count=2", "--interval=200ms")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    expected = {"ingress": 0, "egress": 0, "total": 3, "mem": 3, "disk": 0, "inflt": 0, "def": 1, "req": 0,
                "t-o": 0, "msgs": 4, "clients": 0}
    assert rows(result.stdout) == [expected, expected]


def test_aggregate_of_our_own_nsqd_stats(nsqd: NSQDProcess) -> None:
    fill(nsqd, "t", "c", messages=2, deferred=1)
    status, _, body = nsqd.http("GET", "/stats?format=json&topic=t&channel=c&include_clients=false")
    assert status == 200
    assert aggregate([json.loads(body)], "t", "c") == \
        ChannelStats(depth=2, memory_depth=2, deferred_count=1, message_count=3)


def test_rates_of_traffic_between_samples(nsqd: NSQDProcess) -> None:
    fill(nsqd, "t", "c", messages=2)
    stat = start_nsq_stat("--topic=t", "--channel=c", f"--nsqd-http-address=127.0.0.1:{nsqd.http_port}",
                          "--count=1", "--interval=1s")
    try:
        assert stat.stdout is not None
        assert (stat.stdout.readline(), stat.stdout.readline()) == tuple(line + "\n" for line in HEADER)
        # the baseline is taken: ten more messages within the interval
        body = b"\n".join(f"n{n}".encode() for n in range(10))
        assert nsqd.http("POST", "/mpub?topic=t", body)[0] == 200
        stdout, stderr = stat.communicate(timeout=10)
    finally:
        stat.kill()
        stat.wait()
    assert stat.returncode == 0, stderr
    row = dict(zip(COLUMNS, map(int, stdout.replace("|", " ").split()), strict=True))
    # nothing consumed: every message in is still in the channel, so ten in and none out
    assert (row["ingress"], row["egress"], row["total"], row["msgs"]) == (10, 0, 12, 12)


def test_via_lookupds_each_producer_once(lookupds: list[NSQDProcess], tmp_path: Path) -> None:
    both = [f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}" for lookupd in lookupds]
    nsqds: list[NSQDProcess] = []
    try:
        for name, flags in (("a", both), ("b", both[1:])):
            (tmp_path / name).mkdir()
            nsqds.append(start_nsqd(*FAST_SCAN, *flags, data_path=tmp_path / name))
        fill(nsqds[0], "t", "c", messages=3)
        fill(nsqds[1], "t", "c", messages=4, deferred=2)
        wait_for(lambda: producer_ports(lookupds[0], "t") == {nsqds[0].http_port}, what="one nsqd on the first")
        wait_for(lambda: producer_ports(lookupds[1], "t") == {nsqd.http_port for nsqd in nsqds},
                 what="both nsqd on the second lookupd")
        result = nsq_stat("--topic=t", "--channel=c", "--count=2", "--interval=200ms",
                          *(f"--lookupd-http-address=127.0.0.1:{lookupd.http_port}" for lookupd in lookupds))
    finally:
        for nsqd in nsqds:
            nsqd.stop()
    assert result.returncode == 0, result.stderr
    assert [(row["total"], row["def"], row["msgs"], row["ingress"]) for row in rows(result.stdout)] == \
        [(7, 2, 9, 0), (7, 2, 9, 0)]


def test_an_unreachable_node_is_logged_and_skipped(nsqd: NSQDProcess) -> None:
    fill(nsqd, "t", "c", messages=5)
    dead = f"127.0.0.1:{free_port()}"
    result = nsq_stat("--topic=t", "--channel=c", f"--nsqd-http-address=127.0.0.1:{nsqd.http_port}",
                      f"--nsqd-http-address={dead}", "--count=2", "--interval=200ms")
    assert result.returncode == 0, result.stderr
    assert [row["total"] for row in rows(result.stdout)] == [5, 5]
    errors = result.stderr.splitlines()
    assert len(errors) >= 3
    assert all(" ERROR: failed to get nsqd stats - http://" + dead in line for line in errors)


def test_a_missing_channel_is_logged_until_it_exists(nsqd: NSQDProcess) -> None:
    assert nsqd.http("POST", "/topic/create?topic=t")[0] == 200
    stat = start_nsq_stat("--topic=t", "--channel=later", f"--nsqd-http-address=127.0.0.1:{nsqd.http_port}",
                          "--count=1", "--interval=100ms")
    try:
        assert stat.stderr is not None
        assert "ERROR: failed to find channel(later) in stats metadata for topic(t)" in stat.stderr.readline()
        assert nsqd.http("POST", "/channel/create?topic=t&channel=later")[0] == 200
        stdout, _ = stat.communicate(timeout=10)
    finally:
        stat.kill()
        stat.wait()
    assert stat.returncode == 0
    assert rows(stdout)[0]["total"] == 0


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_it_cleanly(signum: int) -> None:
    stat = start_nsq_stat("--topic=t", "--channel=c", f"--lookupd-http-address=127.0.0.1:{free_port()}",
                          "--interval=100ms")
    try:
        assert stat.stderr is not None
        assert "ERROR: failed to get topic producers - " in stat.stderr.readline()
        stat.send_signal(signum)
        stdout, _ = stat.communicate(timeout=10)
    finally:
        stat.kill()
        stat.wait()
    assert stat.returncode == 0
    assert stdout == ""


@pytest.mark.parametrize(("args", "message"), [
    (("--channel=c", "--nsqd-http-address=127.0.0.1:4151"), "--topic and --channel are required"),
    (("--topic=t", "--channel=c"), "--nsqd-http-address or --lookupd-http-address required"),
    (("--topic=t", "--channel=c", "--nsqd-http-address=http://127.0.0.1:4151"),
     "--nsqd-http-address error - address should not contain scheme"),
    (("--topic=t", "--channel=c", "--nsqd-http-address=127.0.0.1:4151", "--interval=x"),
     "invalid value \"x\" for flag -interval: parse error"),
])
def test_bad_flags_exit_2(args: tuple[str, ...], message: str) -> None:
    result = nsq_stat(*args)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"nsq_stat: {message}\n"


def test_version() -> None:
    result = nsq_stat("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("nsq_stat v1.3.0 ")
