"""Real service processes for tests: started on free loopback ports, always stopped by whoever started them."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
_LISTENING = re.compile(r"(TCP|HTTP): listening on (\S+):(\d+)")
T = TypeVar("T")
Description = str | Callable[[], str]  # what wait_for waits for, or how to say it at the timeout

# small scan intervals so that timeouts and deferrals fire promptly (the nsqd_factory fixture starts nsqd with them)
FAST_SCAN = ("--queue-scan-interval=20ms", "--queue-scan-refresh-interval=50ms")


class Service:
    """What tests use of a service listening on ``host`` (127.0.0.1 unless it runs in a network namespace),
    wherever it runs: its ports and its HTTP API."""

    tcp_port: int
    http_port: int
    host: str = "127.0.0.1"

    @property
    def tcp_address(self) -> tuple[str, int]:
        return (self.host, self.tcp_port)

    @property
    def tcp_address_text(self) -> str:
        """``host:port`` of the TCP listener, as clients and the tools' flags take it."""
        return f"{self.host}:{self.tcp_port}"

    @property
    def http_address_text(self) -> str:
        return f"{self.host}:{self.http_port}"

    def http_url(self, path: str) -> str:
        return f"http://{self.host}:{self.http_port}{path}"

    def http(self, method: str, path: str, body: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        """One HTTP request; returns status, headers and body whatever the status."""
        request = urllib.request.Request(self.http_url(path), data=body, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read()

    def publish(self, topic: str, *bodies: bytes) -> None:
        """Each body in a ``/pub`` of its own, each answered 200 OK."""
        for body in bodies:
            status, _, reply = self.http("POST", f"/pub?topic={topic}", body)
            assert (status, reply) == (200, b"OK")

    def multi_publish(self, topic: str, bodies: Sequence[bytes], batch: int = 5000) -> None:
        """``bodies`` in order, ``batch`` of them per ``/mpub``, each answered 200 OK."""
        for first in range(0, len(bodies), batch):
            status, _, reply = self.http("POST", f"/mpub?topic={topic}", b"\n".join(bodies[first:first + batch]))
            assert (status, reply) == (200, b"OK")

    def channel_stats(self, topic: str, channel: str) -> dict[str, Any]:
        """The channel's entry in nsqd's /stats, or {} while it does not exist."""
        document = json.loads(self.http("GET", f"/stats?format=json&topic={topic}")[2])
        for topic_stats in document.get("topics") or []:
            for stats in topic_stats.get("channels") or []:
                if topic_stats["topic_name"] == topic and stats["channel_name"] == channel:
                    return dict(stats)
        return {}


@dataclass
class NSQDProcess(Service):
    """A service (nsqd, nsqlookupd, nsqadmin, nsq_auth_server) as a process of its own."""

    process: subprocess.Popen[str]
    tcp_port: int
    http_port: int
    log_lines: list[str] = field(default_factory=list)
    scratch: Path | None = None  # a data path made for this process alone, removed when it stops
    host: str = "127.0.0.1"

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log_reader.join(timeout)
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
        return self.process.returncode

    def pids(self) -> list[int]:
        """The process's pid, then its children's (nsqd's ``--workers``)."""
        children: list[int] = []
        for task in Path(f"/proc/{self.process.pid}/task").glob("*/children"):
            children += [int(pid) for pid in task.read_text().split()]
        return [self.process.pid, *children]

    def __post_init__(self) -> None:
        # read the log as it comes: a full pipe would block nsqd in its next log write
        self._log_reader = threading.Thread(target=self._read_log, daemon=True)
        self._log_reader.start()

    def _read_log(self) -> None:
        assert self.process.stdout is not None
        with self.process.stdout:
            for line in self.process.stdout:
                self.log_lines.append(line.rstrip("\n"))


class ToolProcess:
    """One of the tools (``apps.<name>``) as a process; its log goes to a file (a pipe nobody reads would block
    it)."""

    def __init__(self, log_path: Path, module: str, *args: str) -> None:
        self.log_path, self.module = log_path, module
        with log_path.open("ab") as log:
            self.process = subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT,
                                            stdout=subprocess.DEVNULL, stderr=log)

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"{self.module} did not stop on {sig}:\n{self.log}") from None


def nsqd_tcp_flag(nsqd: Service) -> str:
    """The flag that points a tool at ``nsqd``: ``--nsqd-tcp-address=host:port``."""
    return f"--nsqd-tcp-address={nsqd.tcp_address_text}"


def free_port() -> int:
    """A port nothing listens on (bound, then released): free to listen on, and refusing connections until then."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def finished(stats: dict[str, Any]) -> int:
    """What a channel counts as finished (FIN'd): every message it got, less what it still holds; 0 for {}."""
    if not stats:
        return 0
    return int(stats["message_count"] - stats["depth"] - stats["in_flight_count"] - stats["deferred_count"])


def wait_for(condition: Callable[[], T | None], timeout: float = 10.0, what: Description = "condition",
             interval: float = 0.05, retry_on: tuple[type[Exception], ...] = ()) -> T:
    """``condition()``'s first true answer, asked every ``interval`` s. After ``timeout`` s, an AssertionError
    naming ``what`` (a callable is asked then, to describe the state at the timeout) and the last answer.
    ``retry_on``: exceptions of ``condition`` that mean "not yet" (a service still starting), the last one chained
    to the AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        answer, error = _ask(condition, retry_on)
        if answer:
            return answer
        _fail_after(deadline, timeout, what, answer, error)
        time.sleep(interval)


async def wait_for_async(condition: Callable[[], T | None], timeout: float = 10.0, what: Description = "condition",
                         interval: float = 0.05, retry_on: tuple[type[Exception], ...] = ()) -> T:
    """:func:`wait_for` for a condition on what the test's own event loop runs (an in-process client): it waits
    with ``asyncio.sleep``, so that the loop runs meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        answer, error = _ask(condition, retry_on)
        if answer:
            return answer
        _fail_after(deadline, timeout, what, answer, error)
        await asyncio.sleep(interval)


def _ask(condition: Callable[[], T | None],
         retry_on: tuple[type[Exception], ...]) -> tuple[T | None, Exception | None]:
    try:
        return condition(), None
    except retry_on as error:
        return None, error


def _fail_after(deadline: float, timeout: float, what: Description, answer: object, error: Exception | None) -> None:
    if time.monotonic() <= deadline:
        return
    described = what() if callable(what) else what
    last = "" if answer is None or answer is False else f"; last answer {answer!r}"
    raise AssertionError(f"{described}: not within {timeout:g}s{last}") from error


def start_nsqd(*args: str, data_path: Path | None = None, timeout: float = 15,
               program: list[str] | None = None, host: str = "127.0.0.1") -> NSQDProcess:
    """``nsqd`` on ``host`` with ports chosen by the kernel; ``args`` are extra flags. Without ``data_path`` its
    data goes to a directory of its own, removed when it stops. ``NSQD_TEST_WORKERS`` in the environment sets
    ``--workers`` where ``args`` do not. ``program`` runs another nsqd that takes NSQ's
    flags (NSQ's own binary, for the benchmark's comparison) instead of this project's, or this one another way
    (in a network namespace, harness.netns, listening on that namespace's ``host``)."""
    scratch = Path(tempfile.mkdtemp(prefix="nsqd-")) if data_path is None else None
    if program is None and (workers := os.environ.get("NSQD_TEST_WORKERS")) and not any(
            arg.startswith("--workers") for arg in args):
        args = (f"--workers={workers}", *args)
    try:
        started = _start("services.nsqd", [*_tcp_and_http(host), *args, f"--data-path={data_path or scratch}"],
                         ("TCP", "HTTP"), timeout, program, host)
    except BaseException:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        raise
    started.scratch = scratch
    return started


def start_lookupd(*args: str, timeout: float = 15, program: list[str] | None = None,
                  host: str = "127.0.0.1") -> NSQDProcess:
    """``nsqlookupd`` on ``host`` with ports chosen by the kernel; ``args`` are extra flags; ``program`` as for
    :func:`start_nsqd`."""
    return _start("services.lookupd", [*_tcp_and_http(host), *args], ("TCP", "HTTP"), timeout, program, host)


def start_admin(*args: str, data_path: Path, timeout: float = 15) -> NSQDProcess:
    """``nsqadmin`` on 127.0.0.1 with a port chosen by the kernel (``tcp_port`` stays 0); ``args`` are extra
    flags, at least one ``--lookupd-http-address`` or ``--nsqd-http-address``."""
    return _start("services.admin", ["--http-address=127.0.0.1:0", f"--data-path={data_path}", *args], ("HTTP",),
                  timeout)


def start_auth_server(rules: Path, timeout: float = 15) -> NSQDProcess:
    """``nsq_auth_server`` serving ``rules`` on 127.0.0.1 with a port chosen by the kernel."""
    return _start("apps.nsq_auth_server", ["--http-address=127.0.0.1:0", "--rules", str(rules)], ("HTTP",), timeout)


def _tcp_and_http(host: str) -> list[str]:
    return [f"--tcp-address={host}:0", f"--http-address={host}:0", f"--broadcast-address={host}"]


def _start(module: str, args: list[str], listeners: tuple[str, ...], timeout: float,
           program: list[str] | None = None, host: str = "127.0.0.1") -> NSQDProcess:
    command = [*(program or [sys.executable, "-m", module]), *args]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    ports: dict[str, int] = {}
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    assert process.stdout is not None
    while len(ports) < len(listeners) and time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        match = _LISTENING.search(line)
        if match:
            ports[match.group(1)] = int(match.group(3))
    if len(ports) < len(listeners):
        process.kill()
        process.wait()
        process.stdout.close()
        raise RuntimeError(f"{module} did not start:\n" + "\n".join(lines))
    return NSQDProcess(process, ports.get("TCP", 0), ports["HTTP"], lines, host=host)
