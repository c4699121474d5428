"""``kill -9`` at a chosen point of a running process: strace attached to it, told to deliver SIGKILL on the
``nth`` call of a system call (the call itself then never runs). The kernel's own ptrace, no hook in the product;
needs strace and the right to trace (root here), skipped elsewhere."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from types import TracebackType

import pytest


class KillPoint:
    """While in use, the process ``pid`` dies on its ``nth`` ``syscall`` (``write``, ``rename``...) from now; with
    ``path``, only the calls on that file count (a socket's path is ``socket:[<inode>]``, see ``socket_to``)."""

    def __init__(self, pid: int, syscall: str, nth: int, path: str | None = None) -> None:
        if shutil.which("strace") is None:
            pytest.skip("strace is not installed")
        self._command = ["strace", "-f", "-p", str(pid), "-o", "/dev/null", "-e", f"trace={syscall}",
                         "-e", f"inject={syscall}:signal=SIGKILL:when={nth}", *(["-P", path] if path else [])]
        self._strace: subprocess.Popen[str] | None = None

    def __enter__(self) -> KillPoint:
        self._strace = subprocess.Popen(self._command, stderr=subprocess.PIPE, text=True)
        assert self._strace.stderr is not None
        first = self._strace.stderr.readline()  # "strace: Process N attached", once tracing has begun
        if "attached" not in first:
            self._strace.kill()
            self._strace.wait()
            pytest.skip(f"cannot trace here: {first.strip()}")
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        assert self._strace is not None
        try:
            self._strace.wait(10)  # it ends with the process it traces
        except subprocess.TimeoutExpired:
            self._strace.kill()
            self._strace.wait()
        if self._strace.stderr is not None:
            self._strace.stderr.close()


def socket_to(pid: int, port: int) -> str:
    """The path (``socket:[<inode>]``) of the TCP connection process ``pid`` holds to ``port`` on IPv4 loopback."""
    return f"socket:[{_connection_to(pid, port)[0]}]"


def local_port_to(pid: int, port: int) -> int:
    """This end's port of the TCP connection process ``pid`` holds to ``port`` on IPv4 loopback."""
    return _connection_to(pid, port)[1]


def _connection_to(pid: int, port: int) -> tuple[str, int]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port, remote_port, inode = int(fields[1].split(":")[1], 16), int(fields[2].split(":")[1], 16), fields[9]
        if remote_port == port and inode in inodes:
            return inode, local_port
    raise AssertionError(f"process {pid} has no connection to port {port}")
