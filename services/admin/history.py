"""Counter samples for the admin's charts: what is recorded from the cluster's stats, how rates are drawn from it,
and the ``samples`` table that keeps it.

A row is (ts, topic, channel, depth, message_count, in_flight); ``channel`` is '' for the topic itself.
``message_count`` is a counter, so a chart of throughput is the difference between samples, and downsampling keeps
the last sample of each time bucket rather than an average (an averaged counter is no longer a counter).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import aiosqlite

# (topic, channel, depth, message_count, in_flight)
SampleRow = tuple[str, str, int, int, int]


@dataclass(frozen=True)
class Sample:
    ts: float
    depth: int
    message_count: int
    in_flight: int


def samples_from_stats(topics: list[dict[str, Any]]) -> list[SampleRow]:
    """Rows for each topic and its channels, from the admin's aggregated topic dicts (``/api/topics/:topic``)."""
    rows: list[SampleRow] = []
    for topic in topics:
        name = str(topic["topic_name"])
        channels = topic.get("channels") or []
        in_flight = sum(int(channel.get("in_flight_count", 0)) for channel in channels)
        rows.append((name, "", int(topic["depth"]), int(topic["message_count"]), in_flight))
        rows.extend((name, str(channel["channel_name"]), int(channel["depth"]), int(channel["message_count"]),
                     int(channel.get("in_flight_count", 0)))
                    for channel in channels)
    return rows


def rates(samples: list[Sample]) -> list[tuple[float, float]]:
    """Messages per second between consecutive samples, as (ts of the later sample, rate)."""
    points: list[tuple[float, float]] = []
    for before, after in zip(samples, samples[1:]):
        elapsed = after.ts - before.ts
        delta = after.message_count - before.message_count
        # a counter that went down was reset at an unknown moment in between: any rate drawn there is a guess,
        # and a gap in the chart is honest
        if elapsed <= 0 or delta < 0:
            continue
        points.append((after.ts, delta / elapsed))
    return points


class History:
    """The ``samples`` table of an open store."""

    def __init__(self, connection: aiosqlite.Connection) -> None:
        self._connection = connection

    async def record(self, ts: float, rows: Iterable[SampleRow]) -> None:
        await self._connection.executemany(
            "INSERT INTO samples (ts, topic, channel, depth, message_count, in_flight) VALUES (?, ?, ?, ?, ?, ?)",
            [(ts, *row) for row in rows])
        await self._connection.commit()

    async def series(self, topic: str, channel: str, since: float, max_points: int = 360) -> list[Sample]:
        """Samples of one topic (``channel`` '') or channel from ``since`` on, oldest first. With more than
        ``max_points`` of them, the span is cut into ``max_points`` equal buckets and each keeps its last sample,
        so the newest sample is always there."""
        if max_points < 1:
            raise ValueError(f"max_points must be at least 1, not {max_points}")
        key = (topic, channel, since)
        async with self._connection.execute(
                "SELECT MIN(ts), MAX(ts), COUNT(*) FROM samples WHERE topic = ? AND channel = ? AND ts >= ?",
                key) as cursor:
            first, last, count = await cursor.fetchone() or (None, None, 0)
        if count <= max_points or first is None:
            sql = ("SELECT ts, depth, message_count, in_flight FROM samples "
                   "WHERE topic = ? AND channel = ? AND ts >= ? ORDER BY ts")
            params: tuple[Any, ...] = key
        else:
            # SQLite takes the bare columns from the row that holds MAX(ts), i.e. the bucket's last sample; the
            # bucket index is clamped because the newest sample lands exactly on the upper edge
            sql = ("SELECT MAX(ts), depth, message_count, in_flight FROM samples "
                   "WHERE topic = ? AND channel = ? AND ts >= ? "
                   "GROUP BY MIN(CAST((ts - ?) / ? AS INTEGER), ?) ORDER BY 1")
            width = (last - first) / max_points or 1.0
            params = (*key, first, width, max_points - 1)
        async with self._connection.execute(sql, params) as cursor:
            return [Sample(float(row[0]), int(row[1]), int(row[2]), int(row[3])) async for row in cursor]

    async def deepest_channel(self, topic: str, since: float, max_points: int = 360) -> list[tuple[float, float]]:
        """At each sample time from ``since`` on, the largest depth among the topic's channels: the backlog of its
        slowest one, oldest first. More than ``max_points`` are thinned as ``series`` does (each bucket's last)."""
        async with self._connection.execute(
                "SELECT ts, MAX(depth) FROM samples WHERE topic = ? AND channel != '' AND ts >= ? "
                "GROUP BY ts ORDER BY ts", (topic, since)) as cursor:
            points = [(float(row[0]), float(row[1])) async for row in cursor]
        return keep_last_per_bucket(points, max_points)

    async def prune(self, before: float) -> int:
        """Deletes samples older than ``before``; returns how many."""
        async with self._connection.execute("DELETE FROM samples WHERE ts < ?", (before,)) as cursor:
            deleted = cursor.rowcount
        await self._connection.commit()
        return deleted


def keep_last_per_bucket(points: list[tuple[float, float]], max_points: int) -> list[tuple[float, float]]:
    """Points sorted by time, cut into ``max_points`` equal spans of time, each keeping its last point."""
    if len(points) <= max_points:
        return points
    first, last = points[0][0], points[-1][0]
    width = (last - first) / max_points or 1.0
    kept: dict[int, tuple[float, float]] = {}
    for point in points:
        kept[min(int((point[0] - first) / width), max_points - 1)] = point
    return list(kept.values())
