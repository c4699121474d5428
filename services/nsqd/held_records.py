"""The records a disk queue handed out and that are not finished yet (a channel's at ``--mem-queue-size=0``).

Each is held under its key (the message ID) with where it starts on disk, until it is released. The oldest one
still held is where a restart must start reading again: the disk queue names it in its metadata as the read
position, and deletes a file only once everything in it is released. A process killed while messages are in
flight or deferred reads them again at its next start: duplicates of the ones finished after them, never a loss.
"""

from __future__ import annotations

from itertools import accumulate, count, repeat
from typing import Callable, ClassVar


class HeldRecords:
    holds: ClassVar[bool] = True

    def __init__(self, key: Callable[[bytes], bytes]) -> None:
        self.key = key
        # key -> (file, position, number of records read before it), in read order
        self._held: dict[bytes, tuple[int, int, int]] = {}
        self._read_count = 0

    def __bool__(self) -> bool:
        return bool(self._held)

    def hold(self, payloads: list[bytes], file: int, position: int) -> None:
        """``payloads`` were just read, in order, from ``position`` in ``file``."""
        held, keys = self._held, list(map(self.key, payloads))
        before = len(held)
        starts = accumulate((4 + len(payload) for payload in payloads), initial=position)
        held.update(zip(keys, zip(repeat(file), starts, count(self._read_count))))
        self._read_count += len(payloads)
        if len(held) - before < len(payloads):
            # a message read again (an older copy a crash left behind): held where its newer copy is, in read order
            for key in keys:
                held[key] = held.pop(key)

    def release(self, key: bytes) -> bool:
        """Whether ``key`` was held."""
        return self._held.pop(key, None) is not None

    def release_payloads(self, payloads: list[bytes]) -> int:
        """Releases the records of ``payloads`` (dropped by the cap); how many were held."""
        return sum(self.release(self.key(payload)) for payload in payloads)

    def clear(self) -> None:
        self._held.clear()

    def restart_point(self, read_file: int, read_pos: int) -> tuple[int, int, int]:
        """Where a restart must start reading, given the queue's read position: (file, position, records from there
        already read)."""
        oldest = next(iter(self._held.values()), None)
        if oldest is None:
            return read_file, read_pos, 0
        file, position, read_before = oldest
        return file, position, self._read_count - read_before


class NotHeld(HeldRecords):
    """A queue that holds nothing it hands out (every queue but a channel's at ``--mem-queue-size=0``)."""

    holds: ClassVar[bool] = False

    def __init__(self) -> None:
        super().__init__(lambda payload: payload)

    def hold(self, payloads: list[bytes], file: int, position: int) -> None:
        pass

    def release_payloads(self, payloads: list[bytes]) -> int:
        return 0


NOT_HELD = NotHeld()
