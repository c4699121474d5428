from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from harness.etcd import EtcdCluster, start_etcd
from harness.in_process import InProcessNSQD
from harness.processes import FAST_SCAN, NSQDProcess, ToolProcess, start_nsqd
from shared import compiled


S = TypeVar("S", NSQDProcess, InProcessNSQD)

# the JVMs the tests start (Spark's driver, executors, standalone master and worker) live for seconds: there the
# C1 compiler alone and the serial collector use a third less CPU than the server defaults, and the test run is
# CPU-bound on two cores; no test measures Spark's speed
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Python would run a compiled module older than its source, and the tests would test what is no longer there."""
    if stale := compiled.out_of_date():
        names = ", ".join(str(source.relative_to(compiled.ROOT)) for source in stale)
        pytest.exit(f"compiled before their last change: {names}; `make compile` "
                    "(pure Python: `make test COMPILE=0`)", 2)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The Docker cluster's test (minutes long) starts first, then the rest in file order, each to the next free
    worker (make test's --maxschedchunk=1): the longest never runs alone at the end, and the Spark tests stay spread
    over the run instead of starving each other and their neighbours at once."""
    items.sort(key=lambda item: item.get_closest_marker("docker") is None)  # a stable sort: otherwise in file order


def _nsqd_starter(tmp_path: Path, name: str, start: Callable[..., S]) -> Iterator[Callable[..., S]]:
    """Starts nsqds with extra flags, each in a data path of its own; every one is stopped at teardown."""
    started: list[S] = []

    def start_one(*args: str) -> S:
        data_path = tmp_path / f"{name}{len(started)}"
        data_path.mkdir()
        nsqd = start(*FAST_SCAN, *args, data_path=data_path)
        started.append(nsqd)
        return nsqd

    yield start_one
    for nsqd in started:
        nsqd.stop()


@pytest.fixture
def nsqd_factory(tmp_path: Path) -> Iterator[Callable[..., NSQDProcess]]:
    """nsqd processes."""
    yield from _nsqd_starter(tmp_path, "nsqd", start_nsqd)


@pytest.fixture
def nsqd(nsqd_factory: Callable[..., NSQDProcess]) -> NSQDProcess:
    return nsqd_factory()


@pytest.fixture
def in_process_nsqd_factory(tmp_path: Path) -> Iterator[Callable[..., InProcessNSQD]]:
    """As ``nsqd_factory``, with nsqd in the test's process (harness.in_process), for tests of what it answers."""
    yield from _nsqd_starter(tmp_path, "in-process-nsqd", InProcessNSQD)


@pytest.fixture
def tools(tmp_path: Path) -> Iterator[Callable[..., ToolProcess]]:
    """Starts tools, ``tools("apps.nsq_to_file", *flags)``; any still running at teardown is killed."""
    started: list[ToolProcess] = []

    def start(module: str, *args: str) -> ToolProcess:
        tool = ToolProcess(tmp_path / f"{module}.{len(started)}.log", module, *args)
        started.append(tool)
        return tool

    yield start
    for tool in started:
        if tool.process.poll() is None:
            tool.process.kill()
            tool.process.wait()


@pytest.fixture
def etcd() -> Iterator[EtcdCluster]:
    """A real one-member etcd (skipped where etcd is not installed)."""
    cluster = start_etcd()
    yield cluster
    cluster.stop()
