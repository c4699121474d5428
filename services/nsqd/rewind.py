"""Rewinding a channel: every message its topic retains (retention.py) from a moment on is put back into it.

A message put back is the one published: same ID, body and timestamp, attempts counted afresh, behind what the
channel has queued (and what is published meanwhile), in publish order. Left out: what is past the retention time,
what is past the TTL (counted apart, as ``expired``), and every message whose ID the channel or its topic still has
(queued in memory or on disk, in flight, deferred, a dead letter, held by the topic): two copies of one ID would
break the in-flight and deferred indexes and a disk queue's record of what is finished. Those are found by one scan,
when the rewind starts, of what the channel and its topic have (``outstanding``).

Nothing is copied: the channel is handed a cursor over the retention files (rewind_cursor.py) that it reads once its
queue is empty, as its consumers have room. The answer counts what it will put back from the files' counts (a file
that straddles the moment is read from the mark before it, at most a few thousand records, unless history taken over
left it out of order), less the pending IDs published since the moment: a pending message its topic never retained
(published before retention was on, or refused by a full disk) is counted though not put back. A deferred publish
whose time has not come is deferred until then. An ephemeral channel takes what its memory queue has room for.
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Callable, NamedTuple

from shared.flags import parse_duration

from .rewind_cursor import RewindCursor, RewindPosition

if TYPE_CHECKING:
    from .channel import Channel
    from .recorder import Outstanding
    from .retention import RetainedTopic
    from .topic import Topic

EARLIEST = "earliest"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# RFC 3339: a date, "T" (or a space), a time with optional fractions, and an offset
_RFC3339 = re.compile(r"\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)")


class Rewound(NamedTuple):
    rewound: int
    expired: int


def parse_since(text: str, now_ns: int) -> int:
    """The moment ``text`` names, in nanoseconds since the epoch: ``earliest`` (0), an RFC 3339 time, or a
    duration before now (``30m``); ValueError for anything else."""
    if text == EARLIEST:
        return 0
    if (match := _RFC3339.fullmatch(text)) is not None:
        fraction = match.group(1) or ""
        moment = datetime.fromisoformat(text.upper().replace(fraction, "", 1))
        return (moment - _EPOCH) // timedelta(seconds=1) * 1_000_000_000 + int(fraction[1:10].ljust(9, "0"))
    seconds = parse_duration(text)
    if seconds < 0:
        raise ValueError(f"a negative duration: {text}")
    return max(0, now_ns - round(seconds * 1e9))


def rewind(topic: Topic, channel: Channel, retained: RetainedTopic | None, since_ns: int, mem_queue_size: int,
           ended: Callable[[], None]) -> Rewound:
    """Starts putting back into ``channel`` what ``retained`` (the topic's retention; None: it retains nothing) holds
    from ``since_ns`` on, up to now; how many it will put back, and how many it leaves out as past the TTL.
    ``ended`` is told when the rewind is done or dropped. All of it at once, on the event loop: a cursor already
    under way must not move between the scan of what is pending and its merging with this one."""
    if retained is None:
        return Rewound(0, 0)
    now_ns = time.time_ns()
    since_ns = max(since_ns, retained.oldest_kept_ns(now_ns))
    unexpired_ns = max(since_ns, now_ns - channel.ttl_ns) if channel.ttl_ns else since_ns
    end = retained.log.end()
    pending = _pending([topic.outstanding(), channel.outstanding()])
    in_range = retained.log.counter(since_ns, end)()
    unexpired = retained.log.counter(unexpired_ns, end)() if unexpired_ns != since_ns else in_range
    # every pending ID is skipped, whenever it was published: a merged cursor reads from the earlier moment
    skip = set(pending)
    pending_unexpired = sum(1 for timestamp in pending.values() if timestamp >= unexpired_ns)
    pending_expired = sum(1 for timestamp in pending.values() if since_ns <= timestamp < unexpired_ns)
    rewound, limit = max(0, unexpired - pending_unexpired), None
    if channel.ephemeral:
        rewound = limit = min(rewound, max(0, mem_queue_size - len(channel.queue)))
    start = retained.log.start_of(unexpired_ns, end)
    if rewound and start is not None:
        position = RewindPosition(unexpired_ns, end.number, end.size, start[0], start[1], rewound, now_ns)
        cursor = RewindCursor(retained, position, skip, limit)
        cursor.ended = ended
        channel.rewind(cursor)
    return Rewound(rewound, max(0, in_range - unexpired - pending_expired))


def resume(topic: Topic, channel: Channel, retained: RetainedTopic | None, position: RewindPosition,
           ended: Callable[[], None]) -> None:
    """A rewind nsqd.dat records goes on after a restart (what is pending now is skipped); nothing if the topic no
    longer retains."""
    if retained is not None:
        channel.rewinding = RewindCursor(retained, position, set(_pending([topic.outstanding(),
                                                                            channel.outstanding()])))
        channel.rewinding.ended = ended


def _pending(outstanding: list[Outstanding]) -> dict[bytes, int]:
    """The ID of every message the queues have, with its timestamp, read now: on the event loop, so that nothing
    moves meanwhile (a message between the disk and memory would be missed otherwise). An operator's action; it
    reads every message the channel and its topic have on disk."""
    pending: dict[bytes, int] = {}
    for queues in outstanding:
        pending.update((entry[0], entry[2]) for entry in queues.queued())
        pending.update((entry[0], entry[2]) for entry, _ in queues.delayed)
        pending.update((entry[0], entry[2]) for entry in queues.dead_letters())
    return pending
