"""``Destinations``: which of a relay's addresses (HTTP endpoints, nsqd) a message goes to, by ``--mode``.

- ``hostpool`` (NSQ's default): the addresses in turn, skipping one that failed. A failed address is tried again
  after ``retry_delay`` seconds, then after twice as long each time it fails again (up to ``max_retry_delay``), and
  is back in turn as soon as a request to it succeeds. When every address is out, all are tried again at once:
  a message is never held back for want of a destination.
- ``round-robin``: the addresses in turn, failing or not.
- ``multicast``: every address, each message.

Sans-I/O: the caller says what time it is and how each request went.
"""

from __future__ import annotations

from dataclasses import dataclass

MODES = ("hostpool", "round-robin", "multicast")


@dataclass
class _Address:
    name: str
    out: bool = False
    retry_at: float = 0.0
    retry_delay: float = 0.0


class Destinations:
    def __init__(self, addresses: list[str], mode: str, retry_delay: float = 30.0,
                 max_retry_delay: float = 900.0) -> None:
        if not addresses:
            raise ValueError("no destination addresses")
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r} (one of {', '.join(MODES)})")
        self.mode = mode
        self._addresses = [_Address(name) for name in addresses]
        self._by_name = {address.name: address for address in self._addresses}
        self._retry_delay, self._max_retry_delay = retry_delay, max_retry_delay
        self._next = 0

    @property
    def names(self) -> list[str]:
        return [address.name for address in self._addresses]

    def choose(self, now: float) -> list[str]:
        """The addresses the next message goes to."""
        if self.mode == "multicast":
            return self.names
        if self.mode == "round-robin":
            return [self._take(self._next)]
        for offset in range(len(self._addresses)):
            index = (self._next + offset) % len(self._addresses)
            address = self._addresses[index]
            if not address.out:
                return [self._take(index)]
            if address.retry_at <= now:
                address.retry_delay = min(address.retry_delay * 2, self._max_retry_delay)
                address.retry_at = now + address.retry_delay
                return [self._take(index)]
        for address in self._addresses:
            address.out = False
        return [self._take(0)]

    def mark(self, name: str, succeeded: bool, now: float) -> None:
        """How a request to ``name`` went (only ``hostpool`` minds)."""
        address = self._by_name[name]
        if succeeded:
            address.out = False
        elif not address.out:
            address.out = True
            address.retry_delay = self._retry_delay
            address.retry_at = now + self._retry_delay

    def _take(self, index: int) -> str:
        self._next = (index + 1) % len(self._addresses)
        return self._addresses[index].name
