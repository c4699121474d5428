"""How a consumer spreads ``max_in_flight`` over its connections as RDY counts (pure, no I/O).

The counts never add up to more than ``max_in_flight``, and none exceeds its nsqd's ``max_rdy_count`` (nsqd
closes a connection that asks for more). With more connections than ``max_in_flight`` some get 0; the consumer
rotates ``order`` from time to time so that each gets its turn.
"""

from __future__ import annotations

from typing import Sequence, TypeVar

K = TypeVar("K")


def spread(max_in_flight: int, order: Sequence[K], max_rdy: dict[K, int]) -> dict[K, int]:
    """Each connection's share: ``max_in_flight // n``, one more for the first ``max_in_flight % n``."""
    if not order:
        return {}
    share, extra = divmod(max_in_flight, len(order))
    return {key: min(share + (1 if index < extra else 0), max_rdy[key]) for index, key in enumerate(order)}


def changes_in_safe_order(current: dict[K, int], target: dict[K, int]) -> list[tuple[K, int]]:
    """The RDY commands that take ``current`` to ``target``, decreases first, so that the total never goes above
    either sum while they are sent."""
    changes = [(key, count) for key, count in target.items() if current.get(key) != count]
    return sorted(changes, key=lambda change: change[1] - current.get(change[0], 0))
