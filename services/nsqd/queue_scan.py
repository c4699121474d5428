"""NSQ's queue-scan loop: Redis-style probabilistic expiry of in-flight and deferred messages.

Every ``--queue-scan-interval`` pick ``--queue-scan-selection-count`` channels at random and redeliver their
timed-out in-flight messages and due deferred ones; if more than ``--queue-scan-dirty-percent`` of the picked
channels had work, pick again at once instead of sleeping. The channel list is refreshed every
``--queue-scan-refresh-interval``, so a new channel joins the scan at the next refresh, as in NSQ.

NSQ runs the picked channels on a pool of clamp(channels / 4, 1, ``--queue-scan-worker-pool-max``) goroutines
to use several cores; one asyncio process has one core, so the same work runs inline and the pool size is only
computed and logged, to keep the knob's meaning visible.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from .channel import Channel
    from .options import Options

log = logging.getLogger("nsqd")


class QueueScanner:
    def __init__(self, opts: Options, list_channels: Callable[[], list[Channel]],
                 rng: random.Random | None = None) -> None:
        self._opts = opts
        self._list_channels = list_channels
        self._rng = rng or random.Random()
        self._channels: list[Channel] = []
        self.pool_size = 0

    def refresh(self) -> None:
        self._channels = self._list_channels()
        pool_size = min(max(1, len(self._channels) // 4), self._opts.queue_scan_worker_pool_max)
        if pool_size != self.pool_size:
            log.debug("QUEUESCAN: worker pool size %d for %d channels", pool_size, len(self._channels))
            self.pool_size = pool_size

    def scan(self, now: float) -> bool:
        """One selection round at time ``now``; True when the round was dirty enough to repeat at once."""
        if not self._channels:
            return False
        count = min(self._opts.queue_scan_selection_count, len(self._channels))
        dirty = 0
        for channel in self._rng.sample(self._channels, count):
            timed_out = channel.process_in_flight(now)
            due = channel.process_deferred(now)
            dirty += timed_out or due
        return dirty / count > self._opts.queue_scan_dirty_percent

    async def run(self) -> None:
        next_refresh = 0.0
        while True:
            await asyncio.sleep(self._opts.queue_scan_interval)
            if time.monotonic() >= next_refresh:
                self.refresh()
                next_refresh = time.monotonic() + self._opts.queue_scan_refresh_interval
            try:
                while self.scan(time.monotonic()):
                    await asyncio.sleep(0)
            except Exception:
                # a bug must not stop every timeout and deferral of the node: report it and scan on
                log.exception("QUEUESCAN: scan failed")
