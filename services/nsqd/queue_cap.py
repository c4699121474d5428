"""``--max-bytes-per-queue``: a bound on the bytes of the records a disk queue holds waiting to be read.

A write that would pass it is refused (``QueueFull``), or with ``--queue-full-policy=drop-oldest`` the oldest
records make room, at least 1/64 of the cap at a time so that a queue kept at its cap does not drop on every write.
The files may hold up to one ``--max-bytes-per-file`` more (a file is deleted once read to its end), and at
``--mem-queue-size=0`` the records held for messages in flight.
"""

from __future__ import annotations


class QueueFull(Exception):
    """A write the queue's cap refuses."""


class QueueCap:
    def __init__(self, name: str, max_bytes: int, drop_oldest: bool) -> None:
        self.name = name
        self.max_bytes = max_bytes  # 0: no cap
        self._drop_oldest = drop_oldest

    def check(self, used: int, size: int) -> None:
        """Raises QueueFull if ``size`` bytes more cannot be taken, even by dropping the oldest records."""
        if self.max_bytes and used + size > self.max_bytes and (not self._drop_oldest or size > self.max_bytes):
            raise QueueFull(f"queue {self.name} is full: {used} of its --max-bytes-per-queue={self.max_bytes}"
                            f" bytes taken, {size} more refused")

    def to_free(self, used: int, size: int) -> int:
        """How many bytes of the oldest records must go for ``size`` bytes more (0: none); QueueFull if they
        cannot be taken."""
        self.check(used, size)
        if not self.max_bytes or used + size <= self.max_bytes:
            return 0
        return max(used + size - self.max_bytes, self.max_bytes // 64)
