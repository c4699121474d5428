"""The Spark connector as a Spark job gets it: ``clients/spark`` and ``clients/python`` built into wheels,
installed into an empty venv (no checkout on its path) with what they depend on (PySpark, pyarrow, py4j, from the
package index), and the connector's README examples run there as written, in a local Spark session started by the
venv's python, against two real nsqd on one host (which hand out equal message IDs)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.packages import CLIENT, CONNECTOR, build_wheels, installed, readme_examples, run_example, venv_with
from harness.processes import NSQDProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]
SPARK_EXAMPLE_TIMEOUT = 300  # a JVM and a local Spark session, started in a new venv


@pytest.fixture(scope="module")
def connector_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    scratch = tmp_path_factory.mktemp("spark-package")
    wheels = build_wheels([CLIENT, CONNECTOR], scratch / "wheels")
    return venv_with(scratch / "venv", [str(wheel) for wheel in wheels], index=True)


@pytest.fixture
def two_nsqd(nsqd_factory: Callable[..., NSQDProcess]) -> list[NSQDProcess]:
    return [nsqd_factory(), nsqd_factory()]


def with_nsqd(example: str, nodes: list[NSQDProcess]) -> str:
    assert '"nsqd_tcp_address": "127.0.0.1:4150"' in example
    return example.replace("127.0.0.1:4150", ",".join(node.tcp_address_text for node in nodes))


def channel_stats(nsqd: NSQDProcess, topic: str) -> dict[str, int]:
    stats = json.loads(nsqd.http("GET", f"/stats?format=json&topic={topic}")[2])
    return {key: sum(channel[key] for topic_stats in stats["topics"] for channel in topic_stats["channels"])
            for key in ("depth", "in_flight_count", "message_count")}


def test_the_wheel_brings_the_connector_the_client_and_spark_alone(connector_venv: Path, tmp_path: Path) -> None:
    assert installed(connector_venv) - {"pip", "setuptools"} == {"nsqspark", "nsqclient", "pyspark", "pyarrow",
                                                                    "py4j"}
    found = run_example(connector_venv, "import importlib.util, importlib.resources, nsqspark\n"
                                        "print([importlib.util.find_spec(n) is not None for n in "
                                        "('shared', 'services', 'apps', 'aiohttp', 'prometheus_client')])\n"
                                        "print(importlib.resources.files('nsqspark').joinpath('py.typed').is_file())\n",
                        tmp_path)
    assert found.splitlines() == ["[False, False, False, False, False]", "True"]


def test_the_readmes_batch_example_publishes_and_consumes_on_two_nsqd(connector_venv: Path,
                                                                      two_nsqd: list[NSQDProcess],
                                                                      tmp_path: Path) -> None:
    example = with_nsqd(readme_examples(CONNECTOR)[0], two_nsqd)
    printed = run_example(connector_venv, example, tmp_path, timeout=SPARK_EXAMPLE_TIMEOUT)
    assert printed.splitlines()[-1] == "[b'order 1', b'order 2']"
    counts = [channel_stats(node, "orders") for node in two_nsqd]
    assert sum(count["message_count"] for count in counts) == 2  # published once, over both nodes
    # acknowledged: finished on both, none left queued or in flight
    assert [(count["depth"], count["in_flight_count"]) for count in counts] == [(0, 0), (0, 0)]


def test_the_readmes_streaming_example_reads_a_stream(connector_venv: Path, two_nsqd: list[NSQDProcess],
                                                      tmp_path: Path) -> None:
    example = with_nsqd(readme_examples(CONNECTOR)[1], two_nsqd)
    printed = run_example(connector_venv, example, tmp_path, timeout=SPARK_EXAMPLE_TIMEOUT)
    assert printed.splitlines()[-1] == "[Row(topic='clicks', attempts=1)]"
    assert sum(channel_stats(node, "clicks")["message_count"] for node in two_nsqd) == 3
