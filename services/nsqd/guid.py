"""Message IDs by NSQ's scheme: a 64-bit snowflake written as 16 ASCII hex characters.

    id = ((ts - twepoch) << 22) | (node_id << 12) | sequence        ts = unix ns >> 20 (about a ms)

IDs only have to be unique and increasing per (node, topic), so each topic owns a factory. Within one tick the
first 13 hex characters are fixed and the sequence is exactly the last 3, so an ID is a cached prefix plus a
table lookup. Where NSQ sleeps when the 4096 IDs of a tick are used up, this factory borrows the next tick:
the IDs stay unique and increasing and the publisher never waits.
"""

from __future__ import annotations

import time
from typing import Callable

TWEPOCH = 1288834974288
_NODE_SHIFT = 12
_TIMESTAMP_SHIFT = 22
_SEQUENCE_MASK = 0xFFF

# every sequence as 3 hex digits, back to back: one 12 KiB object instead of 4096 small ones
_SEQUENCE_HEX = b"".join(f"{sequence:03x}".encode() for sequence in range(4096))


class GuidFactory:
    def __init__(self, node_id: int, clock: Callable[[], int] = time.time_ns) -> None:
        self._node_bits = node_id << _NODE_SHIFT
        self._clock = clock  # unix ns
        self._tick = -1
        self._sequence = 0
        self._prefix = b""

    def next_ids(self, count: int) -> list[bytes]:
        """``count`` new IDs, in increasing order."""
        tick = self._clock() >> 20
        if tick > self._tick:
            self._start_tick(tick)
        ids: list[bytes] = []
        while count:
            take = min(count, 4096 - self._sequence)
            if take == 0:
                self._start_tick(self._tick + 1)
                continue
            prefix, start = self._prefix, self._sequence
            ids += [prefix + _SEQUENCE_HEX[i:i + 3] for i in range(3 * start, 3 * (start + take), 3)]
            self._sequence += take
            count -= take
        return ids

    def next_id(self) -> bytes:
        """One new ID: ``next_ids(1)[0]``, without building a list."""
        tick = self._clock() >> 20
        if tick > self._tick:
            self._start_tick(tick)
        elif self._sequence == 4096:
            self._start_tick(self._tick + 1)
        sequence = self._sequence
        self._sequence = sequence + 1
        return self._prefix + _SEQUENCE_HEX[3 * sequence:3 * sequence + 3]

    def _start_tick(self, tick: int) -> None:
        self._tick = tick
        self._sequence = 0
        high = ((tick - TWEPOCH) << _TIMESTAMP_SHIFT) | self._node_bits
        self._prefix = f"{high:016x}".encode()[:13]
