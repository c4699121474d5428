"""A real etcd cluster for tests (Debian's etcd-server): members on free loopback ports, data in a scratch
directory, always stopped by whoever started it."""

from __future__ import annotations

import base64
import json
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.processes import free_port

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


def require_etcd() -> None:
    """Skips the test where etcd is not installed (``make test`` installs Debian's etcd-server)."""
    import pytest

    if not Path(ETCD).exists():
        pytest.skip("etcd is not installed (Debian's etcd-server)")


@dataclass
class EtcdMember:
    name: str
    client_port: int
    peer_port: int
    data_dir: Path
    host: str = "127.0.0.1"
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        """``host:port`` of its client API, as ``--etcd-address`` takes it."""
        return f"{self.host}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://{self.host}:{self.peer_port}"


@dataclass
class EtcdCluster:
    members: list[EtcdMember]
    scratch: Path
    log: Path

    @property
    def addresses(self) -> list[str]:
        return [member.address for member in self.members]

    def start_member(self, member: EtcdMember, *, new: bool = True) -> None:
        cluster = ",".join(f"{other.name}={other.peer_url}" for other in self.members)
        with self.log.open("ab") as log:
            member.process = subprocess.Popen(
                [ETCD, "--name", member.name, "--data-dir", str(member.data_dir),
                 "--listen-client-urls", f"http://{member.address}", "--advertise-client-urls",
                 f"http://{member.address}", "--listen-peer-urls", member.peer_url,
                 "--initial-advertise-peer-urls", member.peer_url, "--initial-cluster", cluster,
                 "--initial-cluster-state", "new" if new else "existing", "--initial-cluster-token", self.scratch.name,
                 "--heartbeat-interval", "50", "--election-timeout", "500", "--log-level", "warn"],
                stdout=log, stderr=subprocess.STDOUT)

    def wait_healthy(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        for member in self.members:
            if member.process is None or member.process.poll() is not None:
                continue
            while True:
                try:
                    with urllib.request.urlopen(f"http://{member.address}/health", timeout=2) as answer:
                        if b'"true"' in answer.read():
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"etcd member {member.name} not healthy:\n{self.log.read_text()[-3000:]}")
                time.sleep(0.05)

    def stop_member(self, member: EtcdMember, sig: int = signal.SIGTERM) -> None:
        if member.process is not None and member.process.poll() is None:
            member.process.send_signal(sig)
            try:
                member.process.wait(10)
            except subprocess.TimeoutExpired:
                member.process.kill()
                member.process.wait()
        member.process = None

    def get(self, key: str) -> bytes | None:
        """The key's value, read (linearizably) from the first running member that answers."""
        kvs = self._call("kv/range", {"key": _b64(key.encode())}).get("kvs", [])
        return base64.b64decode(kvs[0].get("value", "")) if kvs else None

    def put(self, key: str, value: bytes) -> None:
        self._call("kv/put", {"key": _b64(key.encode()), "value": _b64(value)})

    def _call(self, path: str, request: dict[str, str]) -> dict[str, Any]:
        body = json.dumps(request).encode()
        for member in self.members:
            if member.process is None:
                continue
            http = urllib.request.Request(f"http://{member.address}/v3/{path}", data=body, method="POST")
            try:
                with urllib.request.urlopen(http, timeout=5) as answer:
                    answered: dict[str, Any] = json.loads(answer.read())
                    return answered
            except OSError:
                continue
        raise RuntimeError("no etcd member answered")

    def stop(self) -> None:
        for member in self.members:
            self.stop_member(member)
        shutil.rmtree(self.scratch, ignore_errors=True)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def start_etcd(size: int = 1, host: str = "127.0.0.1") -> EtcdCluster:
    """``size`` members (1 or 3, say) on ``host`` (an address of a network namespace's segment, say), healthy when
    this returns; the test is skipped without etcd."""
    require_etcd()
    scratch = Path(tempfile.mkdtemp(prefix="etcd-"))
    members = [EtcdMember(f"m{index}", free_port(), free_port(), scratch / f"m{index}", host)
               for index in range(size)]
    cluster = EtcdCluster(members, scratch, scratch / "etcd.log")
    try:
        for member in members:
            cluster.start_member(member)
        cluster.wait_healthy()
    except BaseException:
        cluster.stop()
        raise
    return cluster
