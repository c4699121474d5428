"""The line every benchmark figure is printed under: which machine, and how fast one of its cores runs Python.

Speed differs between machines of one kind (the same nsqd spends three times the CPU per message on a slower core),
so a figure means something only beside this line, and ratios only between runs of one sitting. It also says
which build of the checkout ran: compiled (`make compile`) or pure Python."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

from shared import compiled

LOOP = 10_000_000


def core_seconds() -> float:
    """How long this core takes for ``s += i`` over ten million integers: the best of three."""
    best = float("inf")
    for _ in range(3):
        started, total = time.perf_counter(), 0
        for i in range(LOOP):
            total += i
        best = min(best, time.perf_counter() - started)
    return best


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_line() -> str:
    """Also refuses to go on when a compiled module is older than its source: the figures would not be this
    checkout's."""
    stale = compiled.out_of_date()
    if stale:
        raise SystemExit(f"{len(stale)} compiled modules are older than their sources ({stale[0]}, ...): "
                         "run `make compile` (or `make bench`), or delete them to measure pure Python")
    return (f"machine: {cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
            f"10M-add loop {core_seconds():.2f} s on one core; this checkout: {compiled.describe()}")
