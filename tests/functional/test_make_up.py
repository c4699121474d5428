"""`make up`, the README's first command, as a user runs it: the cluster comes up, works, and Ctrl-C stops it all."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.etcd import require_etcd
from harness.processes import ROOT, wait_for

OFFSET = 20000  # away from a cluster the developer may be running on the default ports


def http(port: int, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method="POST" if body else "GET")
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.status, response.read()


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def make_up(args: str, data_path: Path) -> Iterator[None]:
    """``make up ARGS=...`` until the cluster is up; Ctrl-C on the way out, as a user stops it."""
    make = subprocess.Popen(["make", "-s", "up", f"ARGS={args}", f"DATA_PATH={data_path}"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    output: list[str] = []
    try:
        assert make.stdout is not None
        deadline = time.monotonic() + 60
        for line in make.stdout:
            output.append(line)
            if line.startswith("cluster up") or time.monotonic() > deadline:
                break
        assert output and output[-1].startswith("cluster up"), "".join(output)
        yield
    finally:
        os.killpg(make.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
        make.wait(60)
        assert make.stdout is not None
        make.stdout.close()


def test_make_up_starts_the_cluster_and_ctrl_c_stops_it(tmp_path: Path) -> None:
    ports = [4160 + OFFSET, 4161 + OFFSET, 4150 + OFFSET, 4151 + OFFSET, 4250 + OFFSET, 4251 + OFFSET, 4171 + OFFSET]
    with make_up(f"--port-offset={OFFSET}", tmp_path):
        for port in (4161 + OFFSET, 4151 + OFFSET, 4251 + OFFSET, 4171 + OFFSET):
            assert http(port, "/ping") == (200, b"OK")
        # each nsqd its own node ID, so that the message IDs they hand out differ
        assert [http(port, "/config/id")[1] for port in (4151 + OFFSET, 4251 + OFFSET)] == [b"1", b"2"]
        assert http(4151 + OFFSET, "/pub?topic=hello", b"world")[0] == 200
        producers: list[dict[str, object]] = wait_for(
            lambda: json.loads(http(4161 + OFFSET, "/lookup?topic=hello")[1])["producers"], 5,
            "nsqd registered the topic", retry_on=(urllib.error.HTTPError,))  # 404 until then
        assert [p["tcp_port"] for p in producers] == [4150 + OFFSET]
        assert {p["broadcast_address"] for p in producers} == {"127.0.0.1"}
        assert b"hello" in http(4171 + OFFSET, "/")[1]  # the admin sees the topic too
    assert not any(listening(port) for port in ports), "a service is still running"
    assert (tmp_path / f"nsqd-{4150 + OFFSET}" / "nsqd.dat").exists()
    assert (tmp_path / "admin" / "nsqadmin.db").exists()


def test_make_up_replicated_starts_three_mirrored_nsqd_and_etcd(tmp_path: Path) -> None:
    require_etcd()
    offset = OFFSET + 1000
    nsqd_http = [4151 + offset, 4251 + offset, 4351 + offset]
    etcd_ports = [port + offset for client in (2379, 2479, 2579) for port in (client, client + 1)]

    def replication(port: int) -> dict[str, Any]:
        return dict(json.loads(http(port, "/stats?format=json")[1])["replication"])

    with make_up(f"--port-offset={offset} --replicated", tmp_path):
        for port in nsqd_http:
            wait_for(lambda: len(replication(port)["in_sync_recorded"]) == 2, 30,
                     lambda: f"nsqd on {port} mirrored on both others: {replication(port)}")
        assert http(nsqd_http[0], "/pub?topic=hello", b"world") == (200, b"OK")  # both mirrors hold it
        origin = replication(nsqd_http[0])["node"]
        for port in nsqd_http[1:]:
            assert [store["depth"] for store in replication(port)["mirroring"] if store["origin"] == origin] == [1]
    assert not any(listening(port) for port in [*nsqd_http, *etcd_ports]), "a service is still running"


def test_make_up_with_auth_guards_the_http_apis_with_the_auth_server(tmp_path: Path) -> None:
    offset = OFFSET + 2000
    lookupd, nsqd, admin = 4161 + offset, 4151 + offset, 4171 + offset

    def ask(port: int, path: str, body: bytes | None = None, secret: str = "") -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json"}  # the admin's actions take JSON only; nsqd reads any body
        if secret:
            headers["Authorization"] = f"Bearer {(tmp_path / 'auth' / f'{secret}.secret').read_text().strip()}"
        request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body,
                                         method="POST" if body is not None else "GET", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    with make_up(f"--port-offset={offset} --auth", tmp_path):
        assert ask(nsqd, "/pub?topic=hello", b"world")[0] == 401
        assert ask(nsqd, "/pub?topic=hello", b"world", "consumer")[0] == 403
        assert ask(nsqd, "/pub?topic=hello", b"world", "publisher") == (200, b"OK")
        assert ask(lookupd, "/topics")[0] == 401
        wait_for(lambda: json.loads(ask(lookupd, "/topics", secret="consumer")[1])["topics"] == ["hello"], 5,
                 "nsqd registered the topic")
        assert b"hello" in ask(admin, "/")[1]  # the admin reaches both with the operator's secret
        assert ask(admin, "/api/topics/hello", json.dumps({"action": "pause"}).encode())[0] == 200
        assert json.loads(ask(nsqd, "/stats?format=json", secret="operator")[1])["topics"][0]["paused"] is True
