"""nsqlookupd against a real process: protocol V1 as nsqd speaks it, and the HTTP API against NSQ's shapes."""

from __future__ import annotations

import json
import socket
import struct
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.processes import NSQDProcess, start_lookupd, start_nsqd, wait_for

REFERENCE = Path(__file__).resolve().parent.parent / "reference"


class V1Client:
    """Speaks protocol V1 the way nsqd does: blocking, one reply per command."""

    def __init__(self, lookupd: NSQDProcess, magic: bytes = b"  V1") -> None:
        self.sock = socket.create_connection(lookupd.tcp_address, timeout=5)
        self.sock.sendall(magic)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def reply(self) -> bytes:
        size = struct.unpack(">i", self._read(4))[0]
        return self._read(size)

    def _read(self, count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def command(self, line: bytes) -> bytes:
        self.send(line + b"\n")
        return self.reply()

    def identify(self, **fields: Any) -> dict[str, Any]:
        info = {"broadcast_address": "127.0.0.1", "tcp_port": 4150, "http_port": 4151, "version": "1.3.0",
                "hostname": "node-a", **fields}
        body = json.dumps(info).encode()
        self.send(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body)
        reply: dict[str, Any] = json.loads(self.reply())
        return reply

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionError:
            return True

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def lookupd() -> Iterator[NSQDProcess]:
    process = start_lookupd()
    yield process
    process.stop()


def get(lookupd: NSQDProcess, path: str) -> tuple[int, Any]:
    status, _, body = lookupd.http("GET", path)
    return status, json.loads(body) if body.startswith(b"{") else body


def same_keys(ours: Any, reference: Any) -> None:
    if isinstance(reference, dict):
        assert set(ours) == set(reference), (set(ours), set(reference))
        for key in reference:
            if reference[key] not in (None, []) and ours[key] not in (None, []):
                same_keys(ours[key], reference[key])
    elif isinstance(reference, list) and reference and ours:
        same_keys(ours[0], reference[0])


def reference(name: str) -> Any:
    return json.loads((REFERENCE / name).read_text())


def test_a_registered_nsqd_is_found_with_nsqs_shapes(lookupd: NSQDProcess) -> None:
    nsqd = V1Client(lookupd)
    reply = nsqd.identify()
    assert set(reply) == {"tcp_port", "http_port", "version", "broadcast_address", "hostname"}
    assert (reply["tcp_port"], reply["http_port"], reply["broadcast_address"]) == (
        lookupd.tcp_port, lookupd.http_port, "127.0.0.1")
    assert nsqd.command(b"REGISTER sample_topic sample_channel") == b"OK"
    assert nsqd.command(b"REGISTER other") == b"OK"
    assert nsqd.command(b"PING") == b"OK"
    for path, name in (("/lookup?topic=sample_topic", "lookupd_lookup.json"), ("/topics", "lookupd_topics.json"),
                       ("/channels?topic=sample_topic", "lookupd_channels.json"), ("/nodes", "lookupd_nodes.json"),
                       ("/debug", "lookupd_debug.json"), ("/info", "lookupd_info.json")):
        status, body = get(lookupd, path)
        assert status == 200, path
        if name != "lookupd_debug.json":
            same_keys(body, reference(name))
    assert get(lookupd, "/lookup?topic=sample_topic")[1]["channels"] == ["sample_channel"]
    node = get(lookupd, "/nodes")[1]["producers"][0]
    assert (node["hostname"], node["tcp_port"], node["topics"], node["tombstones"]) == (
        "node-a", 4150, ["other", "sample_topic"], [False, False])
    assert get(lookupd, "/topics")[1] == {"topics": ["other", "sample_topic"]}
    assert nsqd.command(b"UNREGISTER sample_topic sample_channel") == b"OK"
    assert get(lookupd, "/lookup?topic=sample_topic")[1]["channels"] == ["sample_channel"]  # names stay, as NSQ's
    nsqd.close()
    wait_for(lambda: get(lookupd, "/lookup?topic=sample_topic")[1]["producers"] == [],
             what="the producer gone with its connection")
    status, body = get(lookupd, "/lookup?topic=sample_topic")
    assert status == 200 and body["producers"] == []  # gone with its connection
    assert get(lookupd, "/nodes")[1] == {"producers": []}


def test_lookup_errors(lookupd: NSQDProcess) -> None:
    assert get(lookupd, "/lookup") == (400, {"message": "MISSING_ARG_TOPIC"})
    assert get(lookupd, "/lookup?topic=nope") == (404, reference("lookupd_lookup_missing.json"))
    assert get(lookupd, "/ping") == (200, b"OK")


def test_http_topic_and_channel_management(lookupd: NSQDProcess) -> None:
    assert lookupd.http("POST", "/channel/create?topic=t&channel=c")[0] == 200
    assert get(lookupd, "/lookup?topic=t")[1] == {"channels": ["c"], "producers": []}
    assert lookupd.http("POST", "/channel/delete?topic=t&channel=x")[0] == 404
    assert lookupd.http("POST", "/channel/delete?topic=t&channel=c")[0] == 200
    assert lookupd.http("POST", "/topic/create?topic=bad!")[:3:2] == (400, b'{"message":"INVALID_ARG_TOPIC"}')
    assert lookupd.http("POST", "/topic/delete?topic=t")[0] == 200
    assert get(lookupd, "/topics")[1] == {"topics": []}
    assert lookupd.http("POST", "/topic/tombstone?topic=t")[:3:2] == (400, b'{"message":"MISSING_ARG_NODE"}')


@pytest.mark.parametrize("lines, error", [
    (b"REGISTER t\n", b"E_INVALID client must IDENTIFY"),
    (b"HELLO\n", b"E_INVALID invalid command HELLO"),
    (b"IDENTIFY\n\x00\x00\x00\x02{}", b"E_BAD_BODY IDENTIFY missing fields"),
    (b"IDENTIFY\n\x00\x00\x00\x05{nope", b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (b"IDENTIFY\n\x7f\xff\xff\xff", b"E_BAD_BODY IDENTIFY invalid body size 2147483647"),
])
def test_bad_input_gets_nsqs_error_and_the_connection_closes(lookupd: NSQDProcess, lines: bytes, error: bytes) -> None:
    client = V1Client(lookupd)
    client.send(lines)
    assert client.reply() == error
    assert client.closed()
    client.close()


def test_bad_registrations_and_repeated_identify(lookupd: NSQDProcess) -> None:
    for line, error in ((b"REGISTER bad!", b"E_BAD_TOPIC REGISTER topic name 'bad!' is not valid"),
                        (b"UNREGISTER t bad!", b"E_BAD_CHANNEL UNREGISTER channel name 'bad!' is not valid"),
                        (b"REGISTER", b"E_INVALID REGISTER insufficient number of params")):
        client = V1Client(lookupd)
        client.identify()
        assert client.command(line) == error
        client.close()
    client = V1Client(lookupd)
    client.identify()
    body = b'{"x":1}'
    client.send(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body)
    assert client.reply() == b"E_INVALID cannot IDENTIFY again"
    client.close()


def test_wrong_magic_and_garbage_leave_others_served(lookupd: NSQDProcess) -> None:
    healthy = V1Client(lookupd)
    healthy.identify()
    bad = V1Client(lookupd, magic=b"  V2")
    assert bad.reply() == b"E_BAD_PROTOCOL" and bad.closed()
    bad.close()
    garbage = V1Client(lookupd)
    garbage.send(bytes(range(256)) * 100)
    assert garbage.reply().startswith(b"E_INVALID")
    garbage.close()
    assert healthy.command(b"REGISTER still_here") == b"OK"
    assert get(lookupd, "/topics")[1] == {"topics": ["still_here"]}
    healthy.close()


def test_inactive_producers_drop_out_until_they_ping() -> None:
    lookupd = start_lookupd("--inactive-producer-timeout=1s")
    try:
        nsqd = V1Client(lookupd)
        nsqd.identify()
        nsqd.command(b"REGISTER t")
        assert len(get(lookupd, "/lookup?topic=t")[1]["producers"]) == 1
        time.sleep(1.3)
        assert get(lookupd, "/lookup?topic=t")[1]["producers"] == []
        assert get(lookupd, "/nodes")[1] == {"producers": []}
        nsqd.command(b"PING")
        assert len(get(lookupd, "/lookup?topic=t")[1]["producers"]) == 1
        nsqd.close()
    finally:
        lookupd.stop()


def test_a_tombstone_hides_a_producer_for_its_lifetime() -> None:
    lookupd = start_lookupd("--tombstone-lifetime=1s")
    try:
        nsqd = V1Client(lookupd)
        nsqd.identify()
        nsqd.command(b"REGISTER t")
        assert lookupd.http("POST", "/topic/tombstone?topic=t&node=127.0.0.1:4151")[0] == 200
        assert get(lookupd, "/lookup?topic=t")[1]["producers"] == []
        assert get(lookupd, "/nodes")[1]["producers"][0]["tombstones"] == [True]
        time.sleep(1.2)
        assert len(get(lookupd, "/lookup?topic=t")[1]["producers"]) == 1
        nsqd.close()
    finally:
        lookupd.stop()


def test_version_and_drop_in_flags() -> None:
    import subprocess
    import sys

    from harness.processes import ROOT
    result = subprocess.run([sys.executable, "-m", "services.lookupd", "-version"], cwd=ROOT, capture_output=True,
                            text=True, timeout=30)
    assert result.stdout.startswith("nsqlookupd v1.3.0 (built w/python3.11")


@pytest.mark.parametrize("flag", ["--tcp-address=/some/path", "--http-address=4161"])
def test_an_address_that_is_not_host_and_port_is_a_flag_error(flag: str) -> None:
    import subprocess
    import sys

    from harness.processes import ROOT
    result = subprocess.run([sys.executable, "-m", "services.lookupd", flag], cwd=ROOT, capture_output=True,
                            text=True, timeout=30)
    name, value = flag.split("=")
    assert result.returncode == 2
    assert result.stderr == f"nsqlookupd: {name} {value!r} must be <addr>:<port>\n"  # no traceback


def test_metrics(lookupd: NSQDProcess) -> None:
    nsqd = V1Client(lookupd)
    nsqd.identify()
    nsqd.command(b"REGISTER t c")
    get(lookupd, "/lookup?topic=t")
    get(lookupd, "/lookup?topic=missing")
    status, _, body = lookupd.http("GET", "/metrics")
    text = body.decode()
    assert status == 200
    for line in ("nsqlookupd_topics 1.0", "nsqlookupd_channels 1.0", "nsqlookupd_producers 1.0",
                 'nsqlookupd_registrations{category="topic"} 1.0',
                 'nsqlookupd_http_requests_total{path="/lookup",status="200"} 1.0',
                 'nsqlookupd_http_requests_total{path="/lookup",status="404"} 1.0'):
        assert line in text, line
    assert "process_resident_memory_bytes" in text
    nsqd.close()


def test_clients_outside_the_nsqd_network_get_its_external_address(tmp_path: Path) -> None:
    """The Docker case: lookupd's external listener (the port published to the host) hands out each nsqd's
    --external-broadcast-address, its usual listener the --broadcast-address that containers resolve."""
    from harness.processes import start_nsqd

    lookupd = start_lookupd("--external-http-address=127.0.0.1:0")
    nsqds: list[NSQDProcess] = []
    try:
        external_port = wait_for(lambda: logged_port(lookupd, "HTTP (external): listening on "),
                                 what="the external listener logged")
        registered = f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}"
        nsqds.append(start_nsqd(registered, "--external-broadcast-address=host.example",
                                "--external-broadcast-tcp-port=14150"))
        nsqds.append(start_nsqd(registered))  # gives no external address: the same for everyone
        for nsqd in nsqds:
            assert nsqd.http("POST", "/topic/create?topic=t")[0] == 200
        wait_for(lambda: len(get(lookupd, "/lookup?topic=t")[1].get("producers", [])) >= 2,
                 what="both nsqd registered")

        def addresses(port: int, path: str) -> set[tuple[str, int, int]]:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
                producers = json.load(response)["producers"]
            return {(p["broadcast_address"], p["tcp_port"], p["http_port"]) for p in producers}

        inside = {("127.0.0.1", nsqd.tcp_port, nsqd.http_port) for nsqd in nsqds}
        outside = {("host.example", 14150, nsqds[0].http_port), ("127.0.0.1", nsqds[1].tcp_port, nsqds[1].http_port)}
        for path in ("/lookup?topic=t", "/nodes"):
            assert addresses(lookupd.http_port, path) == inside
            assert addresses(external_port, path) == outside
    finally:
        for nsqd in nsqds:
            nsqd.stop()
        lookupd.stop()


def logged_port(process: NSQDProcess, prefix: str) -> int | None:
    """The port of the first log line with ``prefix`` (``<prefix><host>:<port>``), None before there is one."""
    return next((int(line.rsplit(":", 1)[1]) for line in process.log_lines if prefix in line), None)


def test_an_nsqd_is_listed_as_soon_as_it_listens(lookupd: NSQDProcess) -> None:
    """As gnsq's own test_lookup checks it: nsqd started (its listeners up), a tenth of a second later lookupd's
    /nodes lists it, asked once. Its registration waits for nothing (the node-ID check's HTTP client is
    imported later, off the event loop)."""
    nsqd = start_nsqd(f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}")
    try:
        time.sleep(0.1)
        status, body = get(lookupd, "/nodes")
        assert status == 200 and [node["tcp_port"] for node in body["producers"]] == [nsqd.tcp_port]
    finally:
        nsqd.stop()
