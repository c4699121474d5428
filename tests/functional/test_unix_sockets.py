"""nsqd on unix sockets (NSQ 1.3's rule: a --tcp-address or --http-address that is not host:port is a socket's
path): curl over the HTTP socket, this project's client and to_nsq over the TCP one, /info's ports -1 as NSQ's,
and the socket files removed when nsqd stops, as NSQ's are."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.processes import ROOT
from nsqclient import Consumer, Message, Producer
from tests.functional.test_to_nsq import to_nsq

requires_curl = pytest.mark.skipif(shutil.which("curl") is None,
                                   reason="curl is missing: `make test` installs Debian's curl")


@pytest.fixture
def sockets(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """An nsqd listening on two unix sockets: (TCP protocol's path, HTTP's path)."""
    tcp, http = str(tmp_path / "nsqd.sock"), str(tmp_path / "nsqd-http.sock")
    process = subprocess.Popen([sys.executable, "-m", "services.nsqd", f"--tcp-address={tcp}",
                                f"--http-address={http}", f"--data-path={tmp_path}"], cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while not (Path(tcp).exists() and Path(http).exists()):
            assert process.poll() is None and time.monotonic() < deadline, "nsqd did not listen"
            time.sleep(0.05)
        yield tcp, http
    finally:
        process.terminate()
        process.wait(10)
    assert process.returncode == 0
    assert not Path(tcp).exists() and not Path(http).exists()  # removed at a clean stop


def curl(http: str, *args: str) -> str:
    return subprocess.run(["curl", "-sS", "--unix-socket", http, *args], capture_output=True, text=True,
                          timeout=10, check=True).stdout


@requires_curl
def test_http_over_a_unix_socket_with_curl(sockets: tuple[str, str]) -> None:
    _, http = sockets
    assert curl(http, "http://localhost/ping") == "OK"
    info = json.loads(curl(http, "http://localhost/info"))
    assert (info["tcp_port"], info["http_port"]) == (-1, -1)  # NSQ's answer on unix sockets
    curl(http, "-X", "POST", "-d", "over http", "http://localhost/pub?topic=orders")
    stats = json.loads(curl(http, "http://localhost/stats?format=json&topic=orders"))
    assert stats["topics"][0]["message_count"] == 1


@requires_curl
def test_the_client_library_and_to_nsq_over_a_unix_socket(sockets: tuple[str, str]) -> None:
    tcp, http = sockets
    curl(http, "-X", "POST", "http://localhost/channel/create?topic=orders&channel=archive")
    published = to_nsq("--topic=orders", f"--nsqd-tcp-address={tcp}", stdin=b"from to_nsq\n")
    assert published.returncode == 0, published.stderr

    async def scenario() -> list[bytes]:
        received: list[bytes] = []
        done = asyncio.Event()

        async def handle(message: Message) -> None:
            received.append(message.body)
            if len(received) == 2:
                done.set()

        async with Producer(tcp) as producer:
            await producer.publish("orders", b"from the client")
        async with Consumer("orders", "archive", handle, nsqd_tcp_addresses=[tcp], max_in_flight=10):
            await asyncio.wait_for(done.wait(), 10)
        return received

    assert sorted(asyncio.run(scenario())) == [b"from the client", b"from to_nsq"]
