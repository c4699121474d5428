"""``LatencyLog``: NSQ's relays' status line (``--status-every``): after every ``every`` requests, how long they
took, as ``[aggregate]: finished 250 - 99th: 12.31ms - 95th: 8.02ms - avg: 3.10ms``."""

from __future__ import annotations

import logging
import math


class LatencyLog:
    def __init__(self, prefix: str, every: int, log: logging.Logger) -> None:
        """``every`` 0: no lines."""
        self._prefix, self._every, self._log = prefix, every, log
        self._seconds: list[float] = []

    def record(self, seconds: float) -> None:
        if not self._every:
            return
        self._seconds.append(seconds)
        if len(self._seconds) >= self._every:
            self._log.info("%s", self.summary())
            self._seconds.clear()

    def summary(self) -> str:
        """The line for the requests recorded since the last one."""
        ordered = sorted(self._seconds)
        average = sum(ordered) / len(ordered) if ordered else 0.0
        return (f"{self._prefix} finished {len(ordered)} - 99th: {_ms(_percentile(ordered, 99))} - "
                f"95th: {_ms(_percentile(ordered, 95))} - avg: {_ms(average)}")


def _percentile(ordered: list[float], percent: float) -> float:
    """Nearest rank: the smallest value at least ``percent`` % of the values are no greater than."""
    if not ordered:
        return 0.0
    return ordered[max(0, math.ceil(percent / 100 * len(ordered)) - 1)]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}ms"
