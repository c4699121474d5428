"""The topics page's table: each topic's depth, rate, channels, nodes and slowest channel, sortable by any column.

Pure: built from the topic names lookupd knows, the topics aggregated over every nsqd (``Cluster.topics_snapshot``)
and the rates from the admin's history. A topic lookupd knows but no nsqd has shows with no counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .aggregation import Json


@dataclass(frozen=True)
class TopicRow:
    name: str
    depth: int | None  # None: no nsqd has the topic
    rate: float | None  # msg/s; None until the history has two samples of it
    channels: int
    nodes: int
    slowest_channel: str  # the channel with the most messages waiting ('' without channels)
    backlog: int  # how many that is
    paused: bool


# column -> (sort key, whether a first click sorts it largest first)
COLUMNS: dict[str, tuple[Callable[[TopicRow], Any], bool]] = {
    "topic": (lambda row: row.name, False),
    "depth": (lambda row: row.depth if row.depth is not None else -1, True),
    "rate": (lambda row: row.rate if row.rate is not None else -1.0, True),
    "channels": (lambda row: row.channels, True),
    "nodes": (lambda row: row.nodes, True),
    "backlog": (lambda row: row.backlog, True),
}


def topic_rows(names: list[str], topics: list[Json], rates: dict[str, float]) -> list[TopicRow]:
    by_name = {topic["topic_name"]: topic for topic in topics}
    rows = []
    for name in sorted(set(names) | set(by_name)):
        topic = by_name.get(name)
        channels = topic["channels"] if topic else []
        slowest = max(channels, key=lambda channel: channel["depth"], default=None)
        rows.append(TopicRow(name=name, depth=topic["depth"] if topic else None, rate=rates.get(name),
                             channels=len(channels), nodes=len(topic["nodes"]) if topic else 0,
                             slowest_channel=slowest["channel_name"] if slowest else "",
                             backlog=slowest["depth"] if slowest else 0,
                             paused=bool(topic and topic["paused"])))
    return rows


def sort_rows(rows: list[TopicRow], column: str, descending: bool) -> list[TopicRow]:
    """Sorted by ``column`` (by name when unknown), ties by name."""
    key = COLUMNS.get(column, COLUMNS["topic"])[0]
    by_name = sorted(rows, key=lambda row: row.name)
    return sorted(by_name, key=key, reverse=descending)


def sort_order(query: dict[str, str]) -> tuple[str, bool]:
    """The column and direction a page's ``?sort=&order=`` asks for (by topic name, ascending, by default)."""
    column = query.get("sort", "topic")
    if column not in COLUMNS:
        column = "topic"
    order = query.get("order")
    return column, (order == "desc") if order in ("asc", "desc") else COLUMNS[column][1]


def next_order(column: str, current: tuple[str, bool]) -> str:
    """The ``order`` a click on ``column``'s header asks for: the other way round when it is the sorted column."""
    if current[0] == column:
        return "asc" if current[1] else "desc"
    return "desc" if COLUMNS[column][1] else "asc"
