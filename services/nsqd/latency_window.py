"""End-to-end processing latency (publish to FIN) percentiles over a sliding window.

As NSQ does, the window is covered by two halves and the older half is dropped every window/2. Each half keeps
a uniform reservoir sample, so memory stays bounded at any rate; percentiles are computed only when asked.
"""

from __future__ import annotations

import random
from typing import Any

RESERVOIR_SIZE = 1024


class _Reservoir:
    __slots__ = ("count", "samples")

    def __init__(self) -> None:
        self.count = 0
        self.samples: list[int] = []

    def add(self, value: int) -> None:
        self.count += 1
        if len(self.samples) < RESERVOIR_SIZE:
            self.samples.append(value)
        else:
            slot = random.randrange(self.count)
            if slot < RESERVOIR_SIZE:
                self.samples[slot] = value


class LatencyWindow:
    def __init__(self, percentiles: list[float], window: float, now: float) -> None:
        self.percentiles = sorted(percentiles, reverse=True)
        self._half = window / 2
        self._rotate_at = now + self._half
        self._current = _Reservoir()
        self._previous = _Reservoir()

    def add(self, latency_ns: int, now: float) -> None:
        if now >= self._rotate_at:
            self._rotate(now)
        self._current.add(latency_ns)

    def parts(self, now: float) -> list[Any]:
        if now >= self._rotate_at:
            self._rotate(now)
        return [self._current, self._previous]

    def result(self, now: float) -> dict[str, Any]:
        """The ``e2e_processing_latency`` object of /stats."""
        return summarize(self.percentiles, self.parts(now))

    def _rotate(self, now: float) -> None:
        # rotations keep a fixed schedule, so no sample outlives its window
        skipped = now - self._rotate_at >= self._half
        self._previous = _Reservoir() if skipped else self._current
        self._current = _Reservoir()
        halves = int((now - self._rotate_at) // self._half) + 1
        self._rotate_at += halves * self._half


def summarize(percentiles: list[float], parts: list[Any]) -> dict[str, Any]:
    samples = sorted(value for part in parts for value in part.samples)
    count = sum(part.count for part in parts)
    # before the first sample NSQ reports every quantile at 0
    values = [{"quantile": q, "value": samples[min(len(samples) - 1, int(q * len(samples)))] if samples else 0}
              for q in sorted(percentiles, reverse=True)]
    return {"count": count, "percentiles": values}


DISABLED: dict[str, Any] = {"count": 0, "percentiles": None}
