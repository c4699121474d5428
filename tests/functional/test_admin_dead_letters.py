"""The admin over two real nsqd with the features beyond NSQ in use (an attempts limit, a TTL, a capped disk queue):
their counters summed on the API and the pages, and a channel's dead letters replayed and discarded on both nodes,
audited."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.processes import FAST_SCAN, NSQDProcess, start_admin, start_nsqd
from harness.wire import WireClient
from tests.functional.test_admin import ADMIN_USER, create_channel, get_json, nsqd_channel, nsqd_topic, page, send

FEATURES = ("--max-attempts=1", "--msg-ttl=1h", "--mem-queue-size=0", "--max-bytes-per-queue=2000",
            "--queue-full-policy=drop-oldest")
PARKED = {0: [b"poison 0", b"poison 1"], 1: [b"poison 2"]}  # by node


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[list[NSQDProcess]]:
    started: list[NSQDProcess] = []
    try:
        for index in range(2):
            (tmp_path / f"nsqd{index}").mkdir()
            started.append(start_nsqd(*FAST_SCAN, *FEATURES, data_path=tmp_path / f"nsqd{index}"))
        yield started
    finally:
        for process in started:
            process.stop()


@pytest.fixture
def admin(nodes: list[NSQDProcess], tmp_path: Path) -> Iterator[NSQDProcess]:
    (tmp_path / "admin").mkdir()
    process = start_admin(*(f"--nsqd-http-address=127.0.0.1:{node.http_port}" for node in nodes),
                          "--admin-user=alice", data_path=tmp_path / "admin")
    yield process
    process.stop()


async def park(node: NSQDProcess, count: int, topic: str = "dl", channel: str = "c") -> None:
    """Requeues each of ``count`` deliveries of the channel: past --max-attempts=1, each is parked."""
    consumer = await WireClient.connect(node.tcp_address)
    await consumer.subscribe(topic, channel, rdy=10)
    for _ in range(count):
        message = await consumer.read_message()
        consumer.send(b"REQ " + message.id + b" 0\n")
    await consumer.expect_nothing(0.3)
    await consumer.close()


def summed(nodes: list[NSQDProcess], topic: str, key: str, channel: str = "") -> int:
    """``key`` of the topic (or channel) over the nodes' own /stats."""
    rows = [nsqd_channel(node, topic, channel) if channel else nsqd_topic(node, topic) for node in nodes]
    return sum(row[key] for row in rows if row)


async def test_dead_letters_counted_over_both_nodes_replayed_and_discarded(nodes: list[NSQDProcess],
                                                                           admin: NSQDProcess) -> None:
    for index, bodies in PARKED.items():
        create_channel(nodes[index], "dl", "c")
        for body in bodies:
            assert nodes[index].http("POST", "/pub?topic=dl", body)[0] == 200
        await park(nodes[index], len(bodies))
    assert [nsqd_channel(node, "dl", "c")["dead_letter_depth"] for node in nodes] == [2, 1]  # type: ignore[index]

    status, channel = get_json(admin, "/api/topics/dl/c")
    assert status == 200 and channel["message"] == ""
    counters = ("expired_count", "max_attempts", "dead_letter_count", "dead_letter_depth", "dropped_count")
    assert {key: channel[key] for key in counters} == {
        "expired_count": 0, "max_attempts": 1, "dead_letter_count": 3, "dead_letter_depth": 3, "dropped_count": 0}
    assert sorted(row["dead_letter_depth"] for row in channel["nodes"]) == [1, 2]
    topic = get_json(admin, "/api/topics/dl")[1]
    assert (topic["ttl"], topic["dropped_count"]) == ("1h0m0s", 0)
    assert topic["channels"][0]["dead_letter_depth"] == 3

    status, dead = get_json(admin, "/api/peek/dl/c?queue=dead")
    assert status == 200 and sorted(message["attempts"] for message in dead["messages"]) == [1, 1, 1]
    assert get_json(admin, "/api/peek/dl/c?queue=nope") == (400, {"message": "INVALID_QUEUE"})

    html = page(admin, "/topics/dl/c", ADMIN_USER)
    total = html.split('<tr class="total">')[1].split("</tr>")[0]
    assert re.findall(r'<td class="num">([^<]*)</td>', total)[6:11] == ["0", "3", "3", "1", "0"]
    section = html.split("<h2>Dead Letters</h2>")[1].split("</section>")[0]
    assert all(f"<code>poison {n}</code>" in section for n in range(3))
    assert ">Replay Dead Letters</button>" in html and ">Discard Dead Letters</button>" in html
    assert ">TTL</th>" in page(admin, "/topics/dl")

    assert send(admin, "POST", "/api/topics/dl/c", {"action": "replay_dead_letters"}) == (
        403, {"message": "FORBIDDEN"})
    assert send(admin, "POST", "/api/topics/dl/c", {"action": "replay_dead_letters"}, ADMIN_USER) == (
        200, {"message": "", "replayed": 3})
    stats = [nsqd_channel(node, "dl", "c") for node in nodes]
    assert [(row["dead_letter_depth"], row["depth"]) for row in stats] == [(0, 2), (0, 1)]  # type: ignore[index]

    for index, bodies in PARKED.items():  # their attempts were reset: one more delivery parks them again
        await park(nodes[index], len(bodies))
    assert get_json(admin, "/api/topics/dl/c")[1]["dead_letter_depth"] == 3
    assert send(admin, "POST", "/api/topics/dl/c", {"action": "empty_dead_letters"}, ADMIN_USER) == (
        200, {"message": ""})
    stats = [nsqd_channel(node, "dl", "c") for node in nodes]
    assert [(row["dead_letter_depth"], row["depth"]) for row in stats] == [(0, 0), (0, 0)]  # type: ignore[index]
    channel = get_json(admin, "/api/topics/dl/c")[1]
    assert (channel["dead_letter_depth"], channel["dead_letter_count"]) == (0, 6)
    assert "<h2>Dead Letters</h2>" not in page(admin, "/topics/dl/c", ADMIN_USER)

    entries = get_json(admin, "/api/audit")[1]["entries"]
    audited = [(e["action"], e["topic"], e["channel"], e["user"], e["result"]) for e in entries]
    assert audited == [("empty_dead_letters", "dl", "c", "alice", "ok"),
                       ("replay_dead_letters", "dl", "c", "alice", "ok"),
                       ("replay_dead_letters", "dl", "c", "", "refused: FORBIDDEN")]
    assert "replay_dead_letters" in page(admin, "/audit")


def test_dropped_messages_summed_over_both_nodes(nodes: list[NSQDProcess], admin: NSQDProcess) -> None:
    body = b"\n".join([b"x" * 100] * 10)
    for node in nodes:
        create_channel(node, "full", "c")
        for _ in range(6):  # 6 KB into each channel's 2,000-byte disk queue, 1 KB at a time
            assert node.http("POST", "/mpub?topic=full", body)[0] == 200
    dropped = summed(nodes, "full", "dropped_count", "c")
    assert dropped > 0
    assert get_json(admin, "/api/topics/full/c")[1]["dropped_count"] == dropped
    topic: dict[str, Any] = get_json(admin, "/api/topics/full")[1]
    assert topic["dropped_count"] == summed(nodes, "full", "dropped_count")
    assert topic["channels"][0]["dropped_count"] == dropped
    html = page(admin, "/topics/full/c")
    total = html.split('<tr class="total">')[1].split("</tr>")[0]
    assert f'<td class="num">{dropped:,}</td>' in total
