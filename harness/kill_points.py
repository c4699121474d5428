"""``kill -9`` at a chosen point of a running process: strace attached to it, told to deliver SIGKILL on the
``nth`` call of a system call (the call itself then never runs). The kernel's own ptrace, no hook in the product;
needs strace and the right to trace (root here), skipped elsewhere."""

from __future__ import annotations

import shutil
import subprocess
from types import TracebackType

import pytest


class KillPoint:
    """While in use, the process ``pid`` dies on its ``nth`` ``syscall`` (``write``, ``rename``...) from now."""

    def __init__(self, pid: int, syscall: str, nth: int) -> None:
        if shutil.which("strace") is None:
            pytest.skip("strace is not installed")
        self._command = ["strace", "-f", "-p", str(pid), "-o", "/dev/null", "-e", f"trace={syscall}",
                         "-e", f"inject={syscall}:signal=SIGKILL:when={nth}"]
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
