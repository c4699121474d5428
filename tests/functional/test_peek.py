"""Peeking at a queue (``GET /channel/peek``, ``GET /topic/peek``) on a real nsqd: the messages shown are the ones
a consumer then gets, in that order, and nothing the peek could have changed did (stats, files, delivery); a
channel's dead-letter queue with ``queue=dead``."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.processes import NSQDProcess
from harness.wire import WireClient
from nsqclient.protocol.frames import Message

# records of about 35 bytes: three to a file, so a peek crosses files
SMALL_FILES = "--max-bytes-per-file=110"


def create_channel(nsqd: NSQDProcess) -> None:
    assert nsqd.http("POST", "/topic/create?topic=t")[0] == 200
    assert nsqd.http("POST", "/channel/create?topic=t&channel=c")[0] == 200


def peek(nsqd: NSQDProcess, path: str) -> list[dict[str, Any]]:
    status, headers, body = nsqd.http("GET", path)
    assert status == 200, body
    assert headers["Content-Type"] == "application/json; charset=utf-8"
    messages = json.loads(body)["messages"]
    assert isinstance(messages, list)
    return messages


def as_peeked(message: Message) -> dict[str, Any]:
    """A delivered message as a peek showed it before its delivery (which counted one more attempt)."""
    return {"id": message.id.decode(), "timestamp": message.timestamp, "attempts": message.attempts - 1,
            "body": base64.b64encode(message.body).decode()}


def what_a_peek_may_not_change(nsqd: NSQDProcess, data_path: Path) -> tuple[object, ...]:
    """Every count nsqd reports and the queues' files (the metadata, and the temporary file it is written through,
    are left out: the sync loop rewrites it on its own time; the unit tests check that a peek moves no position)."""
    stats = json.loads(nsqd.http("GET", "/stats?format=json&include_clients=false")[2])
    files = {path.name: path.stat().st_size for path in data_path.iterdir() if ".diskqueue." in path.name
             and ".meta.dat" not in path.name}
    return stats["topics"], files


def data_path_of(nsqd_factory: Callable[..., NSQDProcess], tmp_path: Path) -> Path:
    """Where the factory's latest nsqd keeps its files (conftest names them in order)."""
    return sorted(tmp_path.glob("nsqd*"))[-1]


@pytest.mark.parametrize("mem_queue_size", ["2", "0"])
async def test_a_channel_peek_shows_what_consumers_get_next_and_changes_nothing(
        nsqd_factory: Callable[..., NSQDProcess], tmp_path: Path, mem_queue_size: str) -> None:
    nsqd = nsqd_factory(f"--mem-queue-size={mem_queue_size}", SMALL_FILES)
    data_path = data_path_of(nsqd_factory, tmp_path)
    create_channel(nsqd)
    bodies = [b"m%d" % n for n in range(7)] + [b"\x00\xff binary"]
    assert nsqd.http("POST", "/mpub?topic=t&binary=false", b"\n".join(bodies[:7]))[0] == 200
    assert nsqd.http("POST", "/pub?topic=t", bodies[7])[0] == 200
    assert nsqd.http("POST", "/pub?topic=t&defer=60000", b"deferred")[0] == 200

    consumer = await WireClient.connect(nsqd.tcp_address)
    await consumer.subscribe("t", "c", rdy=2)
    first, second = await consumer.read_messages(2)
    await consumer.command(b"RDY", b"0")
    await consumer.command(b"REQ", first.id, b"0")  # queued again, its attempt counted; second stays in flight
    await consumer.expect_nothing(0.2)

    before = what_a_peek_may_not_change(nsqd, data_path)
    peeked = peek(nsqd, "/channel/peek?topic=t&channel=c&n=100")
    assert peek(nsqd, "/channel/peek?topic=t&channel=c&n=3") == peeked[:3]
    assert peek(nsqd, "/channel/peek?topic=t&channel=c") == peeked  # 10 by default: all 7 there are
    assert what_a_peek_may_not_change(nsqd, data_path) == before
    # neither the in-flight message nor the deferred one is queued
    assert sorted(base64.b64decode(message["body"]) for message in peeked) == sorted(
        body for body in bodies if body != second.body)
    assert [message["attempts"] for message in peeked if message["id"] == first.id.decode()] == [1]
    assert all(len(message["id"]) == 16 for message in peeked)

    await consumer.command(b"FIN", second.id)
    await consumer.command(b"RDY", b"100")
    delivered = await consumer.read_messages(len(peeked))
    assert [as_peeked(message) for message in delivered] == peeked
    for message in delivered:
        await consumer.command(b"FIN", message.id)
    await consumer.expect_nothing(0.2)
    await consumer.close()
    assert peek(nsqd, "/channel/peek?topic=t&channel=c") == []


@pytest.mark.parametrize("mem_queue_size", ["2", "0"])
async def test_a_topic_peek_shows_its_backlog_in_the_order_its_first_channel_gets_it(
        nsqd_factory: Callable[..., NSQDProcess], tmp_path: Path, mem_queue_size: str) -> None:
    nsqd = nsqd_factory(f"--mem-queue-size={mem_queue_size}", SMALL_FILES)
    data_path = data_path_of(nsqd_factory, tmp_path)
    assert nsqd.http("POST", "/mpub?topic=t", b"\n".join(b"m%d" % n for n in range(6)))[0] == 200
    before = what_a_peek_may_not_change(nsqd, data_path)
    peeked = peek(nsqd, "/topic/peek?topic=t")
    assert [base64.b64decode(message["body"]) for message in peeked] == [b"m%d" % n for n in range(6)]
    assert what_a_peek_may_not_change(nsqd, data_path) == before

    consumer = await WireClient.connect(nsqd.tcp_address)
    await consumer.subscribe("t", "c", rdy=100)
    assert [as_peeked(message) for message in await consumer.read_messages(6)] == peeked
    await consumer.close()
    assert peek(nsqd, "/topic/peek?topic=t") == []  # handed to the channel


async def test_the_dead_letter_queue_is_peeked_with_queue_dead(nsqd_factory: Callable[..., NSQDProcess]) -> None:
    nsqd = nsqd_factory("--max-attempts=1")
    create_channel(nsqd)
    for body in (b"poison", b"fine"):
        assert nsqd.http("POST", "/pub?topic=t", body)[0] == 200
    consumer = await WireClient.connect(nsqd.tcp_address)
    await consumer.subscribe("t", "c", rdy=2)
    poison, fine = await consumer.read_messages(2)
    await consumer.command(b"REQ", poison.id, b"0")  # its second delivery would pass the limit: parked
    await consumer.expect_nothing(0.2)  # (a RDY 0 in the same read would leave it queued, to be parked later)
    await consumer.command(b"FIN", fine.id)
    await consumer.command(b"RDY", b"0")
    await consumer.expect_nothing(0.2)
    assert nsqd.http("POST", "/pub?topic=t", b"later")[0] == 200
    [dead] = peek(nsqd, "/channel/peek?topic=t&channel=c&queue=dead")
    assert (dead["id"], base64.b64decode(dead["body"]), dead["attempts"]) == (poison.id.decode(), b"poison", 1)
    assert [base64.b64decode(m["body"]) for m in peek(nsqd, "/channel/peek?topic=t&channel=c")] == [b"later"]
    assert nsqd.channel_stats("t", "c")["dead_letter_depth"] == 1
    answer = nsqd.http("GET", "/channel/peek?topic=t&channel=c&queue=other")
    assert (answer[0], json.loads(answer[2])) == (400, {"message": "INVALID_QUEUE"})
    await consumer.close()


def test_at_most_a_hundred_messages_are_shown(nsqd: NSQDProcess) -> None:
    assert nsqd.http("POST", "/mpub?topic=t", b"\n".join(b"m%d" % n for n in range(120)))[0] == 200
    assert len(peek(nsqd, "/topic/peek?topic=t&n=1000000000000000000000")) == 100
    assert len(peek(nsqd, "/topic/peek?topic=t&n=0100")) == 100
    assert [base64.b64decode(m["body"]) for m in peek(nsqd, "/topic/peek?topic=t&n=2")] == [b"m0", b"m1"]


@pytest.mark.parametrize(("path", "status", "code"), [
    ("/topic/peek", 400, "MISSING_ARG_TOPIC"),
    ("/topic/peek?topic=bad!", 400, "INVALID_TOPIC"),
    ("/topic/peek?topic=missing", 404, "TOPIC_NOT_FOUND"),
    ("/topic/peek?topic=t&n=0", 400, "INVALID_ARG_N"),
    ("/topic/peek?topic=t&n=-1", 400, "INVALID_ARG_N"),
    ("/topic/peek?topic=t&n=ten", 400, "INVALID_ARG_N"),
    ("/topic/peek?topic=t&n=", 400, "INVALID_ARG_N"),
    ("/channel/peek?channel=c", 400, "MISSING_ARG_TOPIC"),
    ("/channel/peek?topic=bad!&channel=c", 400, "INVALID_ARG_TOPIC"),
    ("/channel/peek?topic=t", 400, "MISSING_ARG_CHANNEL"),
    ("/channel/peek?topic=t&channel=bad!", 400, "INVALID_ARG_CHANNEL"),
    ("/channel/peek?topic=missing&channel=c", 404, "TOPIC_NOT_FOUND"),
    ("/channel/peek?topic=t&channel=missing", 404, "CHANNEL_NOT_FOUND"),
    ("/channel/peek?topic=t&channel=c&n=1.5", 400, "INVALID_ARG_N"),
])
def test_errors_answer_as_the_other_routes_do(nsqd: NSQDProcess, path: str, status: int, code: str) -> None:
    create_channel(nsqd)
    answer = nsqd.http("GET", path)
    assert (answer[0], json.loads(answer[2])) == (status, {"message": code})
    assert answer[1]["X-Nsq-Content-Type"] == "nsq; version=1.0"


def test_a_peek_is_a_get(nsqd: NSQDProcess) -> None:
    create_channel(nsqd)
    status, headers, body = nsqd.http("POST", "/channel/peek?topic=t&channel=c")
    assert (status, headers["Allow"], json.loads(body)) == (405, "GET, OPTIONS", {"message": "METHOD_NOT_ALLOWED"})
