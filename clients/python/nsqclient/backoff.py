"""A consumer's backoff, as NSQ's client guidelines describe it (time is a parameter, no I/O).

Each failed message raises a counter; while it is above zero the consumer holds every connection at RDY 0 for
``multiplier * 2 ** (counter - 1)`` seconds (at most ``max_duration``), then tests the waters with RDY 1 on one
connection. A success lowers the counter; at zero, full RDY comes back. Only the first result after each window
counts: messages that were already in flight when the backoff began say nothing new about the downstream.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Action(Enum):
    NONE = "none"
    PAUSE = "pause"  # RDY 0 everywhere until ``resume_at``
    RESUME = "resume"  # full RDY everywhere


@dataclass
class Backoff:
    multiplier: float = 1.0
    max_duration: float = 120.0
    counter: int = 0
    # while ``now < resume_at`` the consumer is paused and results do not count
    resume_at: float = 0.0

    def duration(self, counter: int) -> float:
        return min(self.multiplier * 2 ** (counter - 1), self.max_duration) if counter > 0 else 0.0

    @property
    def active(self) -> bool:
        return self.counter > 0

    def paused(self, now: float) -> bool:
        return now < self.resume_at

    def end_pause(self) -> None:
        """The pause is over, whatever the clock says: the timer set for ``resume_at`` fired (an event loop may
        fire one a little early: uvloop's timers count whole milliseconds)."""
        self.resume_at = 0.0

    def failure(self, now: float) -> Action:
        if self.paused(now):
            return Action.NONE
        if self.duration(self.counter) < self.max_duration or self.counter == 0:
            self.counter += 1  # no higher once the window is as long as it may be
        return self._pause(now)

    def success(self, now: float) -> Action:
        if self.counter == 0 or self.paused(now):
            return Action.NONE
        self.counter -= 1
        return Action.RESUME if self.counter == 0 else self._pause(now)

    def _pause(self, now: float) -> Action:
        self.resume_at = now + self.duration(self.counter)
        return Action.PAUSE
