"""nsqd warns when another nsqd registered with its lookupds uses its --node-id (their message IDs would clash):
as real processes with two lookupds, and ``NodeIdCheck`` itself asking real lookupds and nsqd."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.processes import NSQDProcess, free_port, start_lookupd, start_nsqd, wait_for
from services.nsqd.node_id_check import NodeIdCheck
from shared.cluster_info import ClusterInfo
from tests.functional.test_lookupd import V1Client


@pytest.fixture
def started() -> Iterator[list[NSQDProcess]]:
    """Processes to stop at teardown, the last started first."""
    processes: list[NSQDProcess] = []
    yield processes
    for process in reversed(processes):
        process.stop()


def node_id_warnings(nsqd: NSQDProcess) -> list[str]:
    return [line for line in nsqd.log_lines if "NODE_ID" in line]


def listed_http_ports(lookupd: NSQDProcess) -> int:
    """How many nodes lookupd lists."""
    return lookupd.http("GET", "/nodes")[2].count(b'"http_port"')


def test_an_nsqd_warns_of_one_registered_before_it_with_its_node_id(started: list[NSQDProcess]) -> None:
    lookupds = [start_lookupd(), start_lookupd()]
    started += lookupds
    registered = [f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}" for lookupd in lookupds]
    first = start_nsqd(*registered, "--node-id=7")
    other = start_nsqd(*registered, "--node-id=8")
    started += [first, other]
    for lookupd in lookupds:
        wait_for(lambda: listed_http_ports(lookupd) == 2, 5, "both registered")
    second = start_nsqd(*registered, "--node-id=7")
    started.append(second)
    warnings = wait_for(lambda: node_id_warnings(second), 10, "a warning from the second nsqd with node ID 7")
    assert f"127.0.0.1:{first.http_port}" in warnings[0] and "node ID 7" in warnings[0], warnings
    assert "WARNING" in warnings[0] and "--node-id" in warnings[0], warnings
    assert not any(f":{other.http_port}" in line for line in warnings)
    assert not node_id_warnings(other)


async def test_the_check_names_each_nsqd_that_shares_the_node_id_once(
        started: list[NSQDProcess], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="nsqd")
    lookupd = start_lookupd()
    started.append(lookupd)
    registered = f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}"
    sharing, other = start_nsqd(registered, "--node-id=5"), start_nsqd(registered, "--node-id=6")
    started += [sharing, other]
    # nodes lookupd lists that cannot say: one whose HTTP port answers nothing yet (asked again at each check), one
    # whose answers 404 (lookupd's own port: left unchecked)
    silent_port = free_port()
    silent, refusing = V1Client(lookupd), V1Client(lookupd)
    try:
        silent.identify(tcp_port=free_port(), http_port=silent_port)
        refusing.identify(tcp_port=free_port(), http_port=lookupd.http_port)
        wait_for(lambda: listed_http_ports(lookupd) == 4, 5, "four nodes registered")

        async with ClusterInfo.open(1.0, 2.0) as cluster:
            own = "127.0.0.1:1"  # this check stands for an nsqd lookupd does not list
            check = NodeIdCheck(5, lambda: own, lambda: [f"127.0.0.1:{lookupd.http_port}"], cluster)
            assert await check.check() == [f"127.0.0.1:{sharing.http_port}"]
            assert await check.check() == []  # named once while it goes on sharing the ID
            refusals = [record for record in caplog.records if "cannot learn the node ID" in record.getMessage()]
            assert len(refusals) == 1 and f"127.0.0.1:{lookupd.http_port}" in refusals[0].getMessage()

            # the silent node answers at last: it was not forgotten
            started.append(start_nsqd("--node-id=5", f"--http-address=127.0.0.1:{silent_port}"))
            assert await check.check() == [f"127.0.0.1:{silent_port}"]

            late = start_nsqd(registered, "--node-id=5")
            started.append(late)
            wait_for(lambda: listed_http_ports(lookupd) == 5, 5, "the late nsqd registered")
            assert await check.check() == [f"127.0.0.1:{late.http_port}"]

            sharing.stop()
            wait_for(lambda: listed_http_ports(lookupd) == 4, 5, "the stopped nsqd gone from lookupd")
            assert await check.check() == []
            # this nsqd itself, as lookupd lists it, is not asked
            own = f"127.0.0.1:{late.tcp_port}"
            check = NodeIdCheck(5, lambda: own, lambda: [f"127.0.0.1:{lookupd.http_port}"], cluster)
            assert await check.check() == [f"127.0.0.1:{silent_port}"]
    finally:
        silent.sock.close()
        refusing.sock.close()


async def test_a_lookupd_that_does_not_answer_changes_nothing(started: list[NSQDProcess]) -> None:
    lookupd = start_lookupd()
    started.append(lookupd)
    sharing = start_nsqd(f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}", "--node-id=5")
    started.append(sharing)
    wait_for(lambda: listed_http_ports(lookupd) == 1, 5, "the nsqd registered")
    lookupds = [f"127.0.0.1:{lookupd.http_port}"]
    async with ClusterInfo.open(1.0, 2.0) as cluster:
        check = NodeIdCheck(5, lambda: "127.0.0.1:1", lambda: lookupds, cluster)
        assert await check.check() == [f"127.0.0.1:{sharing.http_port}"]
        lookupds[0] = f"127.0.0.1:{free_port()}"  # the lookupd gone, as far as the check can tell
        assert await check.check() == []
        lookupds[0] = f"127.0.0.1:{lookupd.http_port}"
        assert await check.check() == [], "the same node named again"


async def test_stopping_the_check_as_it_becomes_due_ends_it() -> None:
    async with ClusterInfo.open(1.0, 2.0) as cluster:
        for _ in range(20):
            check = NodeIdCheck(5, lambda: "127.0.0.1:1", lambda: [], cluster, interval=0.001)
            check.start()
            await asyncio.sleep(0)
            check.due()
            await asyncio.wait_for(check.stop(), 5)


def test_nsqd_answers_its_node_id_on_config_id(tmp_path: Path) -> None:
    nsqd = start_nsqd("--node-id=1023", data_path=tmp_path)
    try:
        assert nsqd.http("GET", "/config/id")[::2] == (200, b"1023")
    finally:
        nsqd.stop()
