"""A set of messages keyed by ID and ordered by deadline: a channel's in-flight and deferred messages.

A dict finds a message by ID in O(1) (FIN, REQ, TOUCH); a min-heap of ``(deadline, id)`` gives the earliest
deadline. Removal by ID only deletes from the dict and leaves the heap entry stale; a stale entry is skipped
when it reaches the top, and the heap is rebuilt from the dict once stale entries outnumber live ones, so FIN
stays O(1) amortised and the heap stays within twice the live size.
"""

from __future__ import annotations

import heapq
from typing import Generic, Protocol, TypeVar


class HasDeadline(Protocol):
    id: bytes
    deadline: float


T = TypeVar("T", bound=HasDeadline)


class DeadlineQueue(Generic[T]):
    def __init__(self) -> None:
        self._by_id: dict[bytes, T] = {}
        self._heap: list[tuple[float, bytes]] = []

    def __len__(self) -> int:
        return len(self._by_id)

    def __contains__(self, msg_id: bytes) -> bool:
        return msg_id in self._by_id

    def get(self, msg_id: bytes) -> T | None:
        return self._by_id.get(msg_id)

    def push(self, item: T) -> None:
        self._by_id[item.id] = item
        heapq.heappush(self._heap, (item.deadline, item.id))

    def push_all(self, items: list[T]) -> None:
        by_id, heap, push = self._by_id, self._heap, heapq.heappush
        for item in items:
            by_id[item.id] = item
            push(heap, (item.deadline, item.id))

    def pop(self, msg_id: bytes) -> T | None:
        item = self._by_id.pop(msg_id, None)
        if item is not None and len(self._heap) > 2 * len(self._by_id) + 64:
            self._rebuild()
        return item

    def reschedule(self, item: T, deadline: float) -> None:
        item.deadline = deadline
        heapq.heappush(self._heap, (deadline, item.id))
        if len(self._heap) > 2 * len(self._by_id) + 64:
            self._rebuild()

    def pop_expired(self, now: float) -> list[T]:
        """Every item whose deadline is at or before ``now``, earliest first."""
        expired: list[T] = []
        heap, by_id = self._heap, self._by_id
        while heap and heap[0][0] <= now:
            deadline, msg_id = heapq.heappop(heap)
            item = by_id.get(msg_id)
            if item is not None and item.deadline == deadline:
                del by_id[msg_id]
                expired.append(item)
        return expired

    def clear(self) -> list[T]:
        items = list(self._by_id.values())
        self._by_id.clear()
        self._heap.clear()
        return items

    def values(self) -> list[T]:
        return list(self._by_id.values())

    def _rebuild(self) -> None:
        self._heap = [(item.deadline, item.id) for item in self._by_id.values()]
        heapq.heapify(self._heap)
