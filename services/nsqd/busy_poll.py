"""Keeps the event loop polling, instead of sleeping, while a few TCP clients send faster than a wake-up costs.

A client that waits for each answer before its next request (one message per PUB) sends again a few tens of
microseconds after nsqd answered. If nsqd went to sleep in ``epoll_wait`` meanwhile, every request pays for waking
it: a context switch that costs as much as serving the request, and the round trip grows by as much. Go's
scheduler spins briefly before parking a thread for the same reason.

Here, once two requests arrive within ``window`` of each other, a callback that re-queues itself makes the loop
poll without blocking, until ``window`` passes with nothing received. Clients that send less often than that never
start it, so a lightly loaded or idle nsqd sleeps as before. Many clients at once need none of it: when a turn of
the loop brings more than ``MAX_ARRIVALS`` of them, polling stops for a window, since a loop with work of its own
does not sleep, and sleeping lets arrivals gather into fewer turns. HTTP clients do not start it: many
keep-alive producers at once are the load HTTP sees, and there polling only costs.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

WINDOW = 0.0001
MAX_ARRIVALS = 2


class BusyPoll:
    def __init__(self, window: float = WINDOW, clock: Callable[[], float] = time.monotonic) -> None:
        self._window = window
        self._clock = clock
        self._last_activity = -window
        self._arrivals = 0  # since the last poll
        self._resume_at = 0.0
        self.polling = False

    def activity(self) -> None:
        """A client sent something."""
        now = self._clock()
        recent = now - self._last_activity < self._window
        self._last_activity = now
        self._arrivals += 1
        if recent and not self.polling and now >= self._resume_at:
            self.polling = True
            self._arrivals = 0
            asyncio.get_running_loop().call_soon(self._poll)

    def _poll(self) -> None:
        arrivals, self._arrivals = self._arrivals, 0
        now = self._clock()
        if arrivals > MAX_ARRIVALS:
            self.polling = False
            self._resume_at = now + self._window
        elif now - self._last_activity < self._window:
            asyncio.get_running_loop().call_soon(self._poll)
        else:
            self.polling = False
