"""The admin over two real nsqd that retain what their topic published: retention summed on the API and the pages,
set from the topic's form on both nodes, and a channel rewound on both nodes, audited."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.processes import NSQDProcess, start_nsqd
from harness.wire import WireClient
from tests.functional.test_admin import ADMIN_USER, create_channel, get_json, nsqd_channel, nsqd_topic, page, send
from tests.functional.test_admin_dead_letters import admin  # noqa: F401  (the fixture, on this module's nodes)

PUBLISHED = (3, 2)  # by node


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[list[NSQDProcess]]:
    started: list[NSQDProcess] = []
    try:
        for index in range(2):
            (tmp_path / f"nsqd{index}").mkdir()
            started.append(start_nsqd("--retention-time=1h", data_path=tmp_path / f"nsqd{index}"))
        yield started
    finally:
        for process in started:
            process.stop()


def topic_of(node: NSQDProcess) -> dict[str, Any]:
    found = nsqd_topic(node, "events")
    assert found is not None
    return found


async def consume_all(node: NSQDProcess, count: int) -> None:
    consumer = await WireClient.connect(node.tcp_address)
    await consumer.subscribe("events", "c", rdy=10)
    for _ in range(count):
        await consumer.command(b"FIN", (await consumer.read_message()).id)
    await consumer.expect_nothing(0.3)
    await consumer.close()


async def test_retention_shown_and_set_and_a_channel_rewound_on_both_nodes(nodes: list[NSQDProcess],
                                                                          admin: NSQDProcess) -> None:
    for node, count in zip(nodes, PUBLISHED):
        create_channel(node, "events", "c")
        node.multi_publish("events", [b"event %d" % n for n in range(count)])
        await consume_all(node, count)

    topic = get_json(admin, "/api/topics/events")[1]
    assert (topic["retention_time"], topic["retention_bytes"], topic["retained_count"]) == ("1h0m0s", 0, 5)
    assert topic["retained_oldest_timestamp"] == min(topic_of(node)["retained_oldest_timestamp"]
                                                     for node in nodes)
    html = page(admin, "/topics/events", ADMIN_USER)
    assert ">Retention</th>" in html and ">Retained</th>" in html and "Retains 5 messages" in html
    assert 'data-action="set_retention"' in html
    assert 'data-action="rewind"' in page(admin, "/topics/events/c", ADMIN_USER)
    assert 'data-action="rewind"' not in page(admin, "/topics/events/c")  # not an admin: no form

    assert send(admin, "POST", "/api/topics/events/c", {"action": "rewind", "since": "earliest"}) == (
        403, {"message": "FORBIDDEN"})
    assert send(admin, "POST", "/api/topics/events/c", {"action": "rewind"}, ADMIN_USER) == (
        400, {"message": "MISSING_ARG_SINCE"})
    assert send(admin, "POST", "/api/topics/events/c", {"action": "rewind", "since": "earliest"}, ADMIN_USER) == (
        200, {"message": "", "rewound": 5})
    assert [nsqd_channel(node, "events", "c")["depth"] for node in nodes] == list(PUBLISHED)  # type: ignore[index]
    status, answer = send(admin, "POST", "/api/topics/events/c", {"action": "rewind", "since": "soon"}, ADMIN_USER)
    assert status == 502 and "INVALID_ARG_SINCE" in answer["message"]

    assert send(admin, "POST", "/api/topics/events", {"action": "set_retention", "time": "2h", "bytes": "5000"},
                ADMIN_USER) == (200, {"message": ""})
    assert [(topic_of(node)["retention_time"], topic_of(node)["retention_bytes"])
            for node in nodes] == [("2h0m0s", 5000), ("2h0m0s", 5000)]
    assert send(admin, "POST", "/api/topics/events", {"action": "set_retention"}, ADMIN_USER)[0] == 400
    assert send(admin, "POST", "/api/topics/events", {"action": "set_retention", "time": "0"}, ADMIN_USER) == (
        200, {"message": ""})
    assert all("retained_count" not in topic_of(node) for node in nodes)
    assert "Retains" not in page(admin, "/topics/events", ADMIN_USER)

    entries = get_json(admin, "/api/audit")[1]["entries"]
    audited = [(e["action"], e["topic"], e["channel"], e["user"], e["result"].split(":")[0]) for e in entries]
    assert audited == [("set_retention", "events", "", "alice", "ok"),
                       ("set_retention", "events", "", "alice", "ok"),
                       ("rewind_channel", "events", "c", "alice", "UPSTREAM_ERROR"),
                       ("rewind_channel", "events", "c", "alice", "ok"),
                       ("rewind_channel", "events", "c", "", "refused")]
