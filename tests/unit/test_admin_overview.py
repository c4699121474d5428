"""The topics page's table: rows from lookupd's names and the aggregated topics, and sorting by any column."""

from __future__ import annotations

from typing import Any

import pytest

from services.admin.overview import TopicRow, next_order, sort_order, sort_rows, topic_rows


def topic(name: str, depth: int, channels: dict[str, int], nodes: int = 1, paused: bool = False) -> dict[str, Any]:
    return {"topic_name": name, "depth": depth, "paused": paused, "nodes": [{}] * nodes,
            "channels": [{"channel_name": channel, "depth": backlog} for channel, backlog in channels.items()]}


ROWS = topic_rows(
    ["orders", "clicks", "forgotten"],  # lookupd knows "forgotten", no nsqd has it
    [topic("orders", 5, {"archive": 10, "billing": 7_000}, nodes=2), topic("clicks", 0, {"stats": 3}, paused=True),
     topic("ephemeral#ephemeral", 1, {})],  # an nsqd has it, lookupd does not list it
    {"orders": 12.5, "clicks": 400.0})


def by_name(name: str) -> TopicRow:
    return next(row for row in ROWS if row.name == name)


def test_each_topic_with_its_counts_and_slowest_channel() -> None:
    assert by_name("orders") == TopicRow("orders", depth=5, rate=12.5, channels=2, nodes=2, slowest_channel="billing",
                                         backlog=7_000, paused=False)
    assert by_name("clicks").paused and by_name("clicks").slowest_channel == "stats"
    assert by_name("forgotten") == TopicRow("forgotten", depth=None, rate=None, channels=0, nodes=0,
                                            slowest_channel="", backlog=0, paused=False)
    assert by_name("ephemeral#ephemeral").depth == 1
    assert [row.name for row in ROWS] == sorted(row.name for row in ROWS)


@pytest.mark.parametrize(("column", "descending", "names"), [
    ("topic", False, ["clicks", "ephemeral#ephemeral", "forgotten", "orders"]),
    ("backlog", True, ["orders", "clicks", "ephemeral#ephemeral", "forgotten"]),
    ("rate", True, ["clicks", "orders", "ephemeral#ephemeral", "forgotten"]),  # no rate yet: last
    ("depth", False, ["forgotten", "clicks", "ephemeral#ephemeral", "orders"]),  # no nsqd: below zero
    ("nodes", True, ["orders", "clicks", "ephemeral#ephemeral", "forgotten"]),  # ties by name
    ("no such column", False, ["clicks", "ephemeral#ephemeral", "forgotten", "orders"]),
])
def test_sorting(column: str, descending: bool, names: list[str]) -> None:
    assert [row.name for row in sort_rows(ROWS, column, descending)] == names


@pytest.mark.parametrize(("query", "order"), [
    ({}, ("topic", False)), ({"sort": "backlog"}, ("backlog", True)), ({"sort": "backlog", "order": "asc"},
                                                                        ("backlog", False)),
    ({"sort": "topic", "order": "desc"}, ("topic", True)), ({"sort": "evil<>"}, ("topic", False)),
    ({"sort": "rate", "order": "sideways"}, ("rate", True)),
])
def test_sort_order_from_the_query(query: dict[str, str], order: tuple[str, bool]) -> None:
    assert sort_order(query) == order


def test_a_header_click_reverses_the_sorted_column_and_starts_others_their_natural_way() -> None:
    assert next_order("backlog", ("backlog", True)) == "asc"
    assert next_order("backlog", ("backlog", False)) == "desc"
    assert next_order("backlog", ("topic", False)) == "desc"  # largest first
    assert next_order("topic", ("backlog", True)) == "asc"
