"""The client as an application gets it: ``clients/python`` built into a wheel, installed alone into an empty venv
(no checkout on its path, no index), and its README's examples run there as written against a real nsqd: the
asyncio producer and consumer, and the blocking producer from threads."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from harness.packages import CLIENT, build_wheels, installed, readme_examples, run_example, venv_with
from harness.processes import ROOT, NSQDProcess


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a new venv holding the client's wheel and nothing else of the project."""
    scratch = tmp_path_factory.mktemp("client-package")
    (wheel,) = build_wheels([CLIENT], scratch / "wheels")
    return venv_with(scratch / "venv", [str(wheel)], index=False)


def test_the_wheel_brings_one_package_and_no_dependency(client_venv: Path, tmp_path: Path) -> None:
    assert installed(client_venv) - {"pip", "setuptools"} == {"nsqclient"}
    found = run_example(client_venv, "import importlib.util, nsqclient\n"
                                     "print([importlib.util.find_spec(n) is not None for n in "
                                     "('shared', 'services', 'apps', 'aiohttp', 'snappy')])\n"
                                     "print(nsqclient.__file__)\n", tmp_path)
    assert found.splitlines()[0] == "[False, False, False, False, False]"
    assert "site-packages" in found.splitlines()[1]
    typed = run_example(client_venv, "import importlib.resources\n"
                                     "print(importlib.resources.files('nsqclient').joinpath('py.typed').is_file())\n",
                        tmp_path)
    assert typed.strip() == "True"
    refused = subprocess.run([str(client_venv), "-I", "-c", "import nsqclient; nsqclient.Config(snappy=True)"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert "pip install 'nsqclient[snappy]'" in refused.stderr


def test_the_readmes_asyncio_example_publishes_and_consumes(client_venv: Path, nsqd: NSQDProcess,
                                                            tmp_path: Path) -> None:
    example = readme_examples(CLIENT)[0].replace("127.0.0.1:4150", nsqd.tcp_address_text)
    printed = run_example(client_venv, example, tmp_path)
    assert printed.splitlines() == ["b'hello'", "b'a'", "b'b'"]


def test_the_readmes_blocking_example_publishes_from_threads(client_venv: Path, nsqd: NSQDProcess,
                                                              tmp_path: Path) -> None:
    example = readme_examples(CLIENT)[1].replace("127.0.0.1:4150", nsqd.tcp_address_text)
    run_example(client_venv, example, tmp_path)
    stats = json.loads(nsqd.http("GET", "/stats?format=json&topic=orders")[2])
    assert stats["topics"][0]["message_count"] == 400


def test_make_docs_builds_both_api_references_from_the_docstrings(tmp_path: Path) -> None:
    built = subprocess.run(["make", "--no-print-directory", "docs", f"DOCS_DIR={tmp_path}"], cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    page = (tmp_path / "nsqclient.html").read_text()
    for name in ("BlockingProducer", "Producer", "Consumer", "Config", "NSQError", "multi_publish"):
        assert f'<span class="name">{name}</span>' in page, name
    # a docstring, rendered
    assert 'runs an asyncio <code><a href="#Producer">Producer</a></code> on an event loop of its own' in page
    connector = (tmp_path / "nsqspark.html").read_text()
    for name in ("register", "read_batch", "drain", "NSQDataSource", "SCHEMA"):
        assert f'<span class="name">{name}</span>' in connector, name
    assert 'Makes <code>format("nsq")</code> known' in connector
    assert "<code>max_in_flight</code>" in (tmp_path / "nsqspark" / "options.html").read_text()
