"""Keeps the event loop polling, instead of sleeping, while a few TCP clients send faster than a wake-up costs.

A client that waits for each answer before its next request (one message per PUB) sends again a few tens of
microseconds after nsqd answered. If nsqd went to sleep in ``epoll_wait`` meanwhile, every request pays for waking
it: a context switch that costs as much as serving the request, and the round trip grows by as much. Go's
scheduler spins briefly before parking a thread for the same reason.

Here, once two requests arrive within ``window`` of each other, a callback that re-queues itself makes the loop
poll without blocking. Polling pays only while requests keep arriving within a few empty turns of the loop of each
other: each request earns ``TURNS_PER_REQUEST`` more empty turns (up to ``MAX_CREDIT``), each empty turn spends one,
and polling stops when they run out. Clients that pause between requests (a slower client, or the same client on a
slower core) would otherwise buy a spell of spinning with every pair of requests that happens to arrive close
together, CPU that the clients on the same machine could have used; a spell that ends having caught fewer than
``MIN_CAUGHT`` requests also holds polling off for ``BACK_OFF``, doubling with each such spell in a row up to
``MAX_BACK_OFF``.

Many clients at once need none of it: when a turn of the loop brings more than ``MAX_ARRIVALS`` of them, polling
stops for a window, since a loop with work of its own does not sleep, and sleeping lets arrivals gather into fewer
turns. HTTP clients do not start it: many keep-alive producers at once are the load HTTP sees, and there polling
only costs.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

WINDOW = 0.0001
MAX_ARRIVALS = 2
TURNS_PER_REQUEST = 8
MAX_CREDIT = 64
MIN_CAUGHT = 16
BACK_OFF = 0.001
MAX_BACK_OFF = 0.5


class BusyPoll:
    def __init__(self, window: float = WINDOW, clock: Callable[[], float] = time.monotonic) -> None:
        self._window = window
        self._clock = clock
        self._last_activity = -window
        self._arrivals = 0  # since the last poll
        self._resume_at = 0.0
        self._credit = 0  # empty turns left
        self._caught = 0  # requests during this spell
        self._back_off = BACK_OFF
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
            self._caught = 0
            self._credit = TURNS_PER_REQUEST
            asyncio.get_running_loop().call_soon(self._poll)

    def _poll(self) -> None:
        arrivals, self._arrivals = self._arrivals, 0
        if arrivals > MAX_ARRIVALS:
            self.polling = False
            self._resume_at = self._clock() + self._window
            return
        if arrivals:
            self._caught += arrivals
            self._credit = min(self._credit + arrivals * TURNS_PER_REQUEST, MAX_CREDIT)
        else:
            self._credit -= 1
        if self._credit > 0:
            asyncio.get_running_loop().call_soon(self._poll)
            return
        self.polling = False
        if self._caught < MIN_CAUGHT:
            self._resume_at = self._clock() + self._back_off
            self._back_off = min(self._back_off * 2, MAX_BACK_OFF)
        else:
            self._back_off = BACK_OFF
