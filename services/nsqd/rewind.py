"""Rewinding a channel: every message its topic retains (retention.py) from a moment on is put back into it.

A message put back is the one published: same ID, body and timestamp, attempts counted afresh, queued behind what
the channel has, in publish order. Left out: what is past the retention time, what is past the TTL (counted apart,
as ``expired``), and every message whose ID the channel or its topic still has (queued in memory or on disk, in
flight, deferred, a dead letter, held by the topic): two copies of one ID would break the in-flight and deferred
indexes and a disk queue's record of what is finished. Those are found by one scan, when the rewind starts, of what
the channel and its topic have (``outstanding``); the retained messages are then read off the event loop a batch at
a time and put back as they come. A deferred publish whose time has not come is deferred until then. An ephemeral
channel takes what its memory queue has room for.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Awaitable, NamedTuple

from shared.flags import parse_duration

from .topic import TopicError

if TYPE_CHECKING:
    from .channel import Channel
    from .message import QueuedMessage
    from .recorder import Outstanding
    from .retention import RetainedTopic
    from .topic import Topic

log = logging.getLogger("nsqd")

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


async def rewind(topic: Topic, channel: Channel, retained: RetainedTopic | None, since_ns: int,
                 mem_queue_size: int) -> Rewound:
    """Puts back into ``channel`` what ``retained`` (the topic's retention; None: it retains nothing) holds from
    ``since_ns`` on, up to now."""
    if retained is None:
        return Rewound(0, 0)
    now_ns = time.time_ns()
    since_ns = max(since_ns, retained.oldest_kept_ns(now_ns))
    end = retained.log.end()
    pending = _pending_ids([topic.outstanding(), channel.outstanding()])
    room = max(0, mem_queue_size - len(channel.queue)) if channel.ephemeral else 1 << 62
    ttl_ns = channel.ttl_ns
    rewound = expired = 0
    batches = retained.log.read_since(since_ns, end)
    while room > 0 and (batch := await asyncio.to_thread(next, batches, None)) is not None:
        now_ns = time.time_ns()
        queued: list[QueuedMessage] = []
        waits: list[Awaitable[None]] = []
        for entry, due_ns in batch:
            if entry[0] in pending:
                continue
            if ttl_ns and entry[2] + ttl_ns <= now_ns:
                expired += 1
                continue
            if rewound == room:
                break
            rewound += 1
            if due_ns > now_ns:
                _add(channel, [entry], (due_ns - now_ns) // 1_000_000, waits)
            else:
                queued.append(entry)
        if queued:
            _add(channel, queued, 0, waits)
        for wait in waits:
            try:
                await wait
            except TopicError as error:  # put back all the same, as a lost nsqd's messages taken over are
                log.warning("rewinding %s/%s: messages put back without all their copies - %s", topic.name,
                            channel.name, error)
        if rewound == room:
            break
    return Rewound(rewound, expired)


def _add(channel: Channel, entries: list[QueuedMessage], defer_ms: int, waits: list[Awaitable[None]]) -> None:
    wait = channel.add(entries, defer_ms)
    if wait is not None:
        waits.append(wait)


def _pending_ids(outstanding: list[Outstanding]) -> set[bytes]:
    """The ID of every message the queues have, read now: on the event loop, so that nothing moves meanwhile (a
    message between the disk and memory would be missed otherwise). An operator's action; it reads every message
    the channel and its topic have on disk."""
    ids: set[bytes] = set()
    for queues in outstanding:
        ids.update(entry[0] for entry in queues.queued())
        ids.update(entry[0] for entry, _ in queues.delayed)
        ids.update(entry[0] for entry in queues.dead_letters())
    return ids
