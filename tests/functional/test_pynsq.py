"""Wire compatibility with pynsq 0.9.1 (NSQ's official Python client) as producer and consumer of a real nsqd.

pynsq takes its durations in seconds (``msg_timeout=1``, ``heartbeat_interval=1``, ``requeue_delay=1``,
``message.requeue(delay=1)``) and sends milliseconds on the wire (IDENTIFY ``msg_timeout: 1000``, ``REQ <id>
1000``). Lower time bounds are asserted tightly, upper bounds loosely (see design.md).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import nsq  # type: ignore[import-untyped]  # pynsq 0.9.1: no stubs or py.typed
import pytest

from harness.processes import NSQDProcess, wait_for
from harness.pynsq import PynsqLoop, Received
from harness.wire import WireClient

# a message sent by nsqd is timed from before the client saw it: allow that much transit on "not before"
TRANSIT = 0.05


@pytest.fixture
def pynsq(nsqd_factory: Callable[..., NSQDProcess]) -> Iterator[PynsqLoop]:
    """A pynsq IOLoop thread, stopped before any nsqd is (it depends on the factory that stops them)."""
    loop = PynsqLoop()
    loop.start()
    try:
        yield loop
    finally:
        problems = loop.stop()
    assert problems == [], "pynsq logged problems while talking to nsqd"


def stats(nsqd: NSQDProcess, topic: str) -> dict[str, Any]:
    status, _, body = nsqd.http("GET", f"/stats?format=json&topic={topic}")
    assert status == 200, body
    document: dict[str, Any] = json.loads(body)
    return document


def wait_subscribed(nsqd: NSQDProcess, topic: str, channel: str, clients: int = 1) -> dict[str, Any]:
    """The channel's stats once ``clients`` consumers are on it, each with RDY > 0."""
    def subscribed() -> dict[str, Any] | None:
        found = nsqd.channel_stats(topic, channel)
        if found and len(found["clients"]) == clients and all(c["ready_count"] > 0 for c in found["clients"]):
            return found
        return None
    return wait_for(subscribed, what=f"{clients} pynsq consumers ready on {topic}/{channel}")


def wait_settled(nsqd: NSQDProcess, topic: str, channel: str, finished: int) -> dict[str, Any]:
    """The channel's stats once its clients have FIN'd ``finished`` messages and nothing is left anywhere."""
    def settled() -> dict[str, Any] | None:
        found = nsqd.channel_stats(topic, channel)
        if found and sum(c["finish_count"] for c in found["clients"]) == finished and found["depth"] == 0 \
                and found["in_flight_count"] == 0 and found["deferred_count"] == 0:
            return found
        return None
    return wait_for(settled, what=f"{finished} finished on {topic}/{channel}, nothing left")


def assert_once_each(received: list[Received], bodies: list[bytes]) -> None:
    assert sorted(r.body for r in received) == sorted(bodies)
    assert len({r.id for r in received}) == len(received)
    assert all(r.attempts == 1 for r in received)


# 1. nsq.Writer publishes ------------------------------------------------------------------------------------------

async def test_writer_pub_mpub_dpub_reach_a_raw_consumer(nsqd: NSQDProcess, pynsq: PynsqLoop) -> None:
    consumer = await WireClient.connect(nsqd.tcp_address)
    try:
        await consumer.subscribe("pynsq_writer", "raw", rdy=10)
        writer = await asyncio.to_thread(pynsq.writer, nsqd.tcp_address)
        bodies = [b"one", b"two", b"three", "f\u00fcnf".encode()]

        assert await asyncio.to_thread(writer.pub, "pynsq_writer", bodies[0]) == b"OK"
        assert await asyncio.to_thread(writer.mpub, "pynsq_writer", bodies[1:]) == b"OK"
        messages = await consumer.read_messages(4)
        assert [m.body for m in messages] == bodies
        assert all(m.attempts == 1 for m in messages)
        for message in messages:
            await consumer.command(b"FIN", message.id)

        sent = time.monotonic()
        assert await asyncio.to_thread(writer.dpub, "pynsq_writer", 500, b"later") == b"OK"
        deferred = await consumer.read_message()
        assert deferred.body == b"later" and time.monotonic() - sent >= 0.5
        await consumer.command(b"FIN", deferred.id)
    finally:
        await consumer.close()

    document = await asyncio.to_thread(stats, nsqd, "pynsq_writer")
    assert document["topics"][0]["message_count"] == 5
    [producer] = document["producers"]
    assert producer["user_agent"] == f"pynsq/{nsq.__version__}"
    assert producer["pub_counts"] == [{"topic": "pynsq_writer", "count": 5}]


def test_writer_callback_gets_error_frames(nsqd: NSQDProcess, pynsq: PynsqLoop) -> None:
    """pynsq does not check topic names on PUB: nsqd's E_BAD_TOPIC (fatal, as in NSQ) reaches the callback."""
    writer = pynsq.writer(nsqd.tcp_address, reconnect_interval=0.1)
    [first_conn] = pynsq.call(lambda: list(writer.writer.conns.values()))
    answer = writer.pub("bad/topic", b"nowhere")
    assert isinstance(answer, nsq.Error) and b"E_BAD_TOPIC" in answer.args[0], answer

    def reconnected() -> bool:
        return any(conn is not first_conn and conn.connected() for conn in writer.writer.conns.values())

    # nsqd closed the connection; once the Writer has a new one, pynsq has logged all it will about the old one
    wait_for(lambda: pynsq.call(reconnected), what="the Writer reconnected")
    problems = pynsq.take_problems()
    assert any("E_BAD_TOPIC" in problem for problem in problems), problems
    assert any("connection closed" in problem for problem in problems), problems
    assert writer.pub("pynsq_writer_error", b"after reconnecting") == b"OK"
    assert stats(nsqd, "pynsq_writer_error")["topics"][0]["message_count"] == 1


# 2. nsq.Reader consumes ---------------------------------------------------------------------------------------------

def test_reader_consumes_http_published_messages_exactly_once(nsqd: NSQDProcess, pynsq: PynsqLoop) -> None:
    reader = pynsq.reader(nsqd.tcp_address, "pynsq_reader", "ch", max_in_flight=5)
    wait_subscribed(nsqd, "pynsq_reader", "ch")
    bodies = [f"message {i}".encode() for i in range(30)]
    for body in bodies:
        nsqd.publish("pynsq_reader", body)

    received = reader.inbox.wait_count(30)
    channel = wait_settled(nsqd, "pynsq_reader", "ch", finished=30)
    assert_once_each(reader.inbox.messages, bodies)
    assert received == reader.inbox.messages
    assert channel["message_count"] == 30
    assert (channel["requeue_count"], channel["timeout_count"]) == (0, 0)
    [client] = channel["clients"]
    assert client["ready_count"] == 5  # pynsq starts at RDY 1, then opens up to max_in_flight
    assert (client["message_count"], client["in_flight_count"]) == (30, 0)
    assert client["user_agent"] == f"pynsq/{nsq.__version__}"


def test_reader_receives_a_rewound_channels_messages_unchanged(nsqd_factory: Callable[..., NSQDProcess],
                                                               pynsq: PynsqLoop) -> None:
    nsqd = nsqd_factory("--retention-time=1h")
    reader = pynsq.reader(nsqd.tcp_address, "pynsq_rewind", "ch", max_in_flight=5)
    wait_subscribed(nsqd, "pynsq_rewind", "ch")
    bodies = [f"message {i}".encode() for i in range(20)]
    for body in bodies:
        nsqd.publish("pynsq_rewind", body)
    first = reader.inbox.wait_count(20)
    wait_settled(nsqd, "pynsq_rewind", "ch", finished=20)
    status, _, answer = nsqd.http("POST", "/channel/rewind?topic=pynsq_rewind&channel=ch&since=earliest")
    assert (status, json.loads(answer)) == (200, {"rewound": 20})
    again = reader.inbox.wait_count(40)[20:]
    wait_settled(nsqd, "pynsq_rewind", "ch", finished=40)
    assert [(r.id, r.body, r.attempts) for r in again] == [(r.id, r.body, 1) for r in first]


# 3. channels and consumers -----------------------------------------------------------------------------------------

def test_every_channel_gets_every_message(nsqd: NSQDProcess, pynsq: PynsqLoop) -> None:
    first = pynsq.reader(nsqd.tcp_address, "pynsq_fanout", "first", max_in_flight=10)
    second = pynsq.reader(nsqd.tcp_address, "pynsq_fanout", "second", max_in_flight=10)
    wait_subscribed(nsqd, "pynsq_fanout", "first")
    wait_subscribed(nsqd, "pynsq_fanout", "second")
    bodies = [f"fanout {i}".encode() for i in range(20)]
    nsqd.multi_publish("pynsq_fanout", bodies)

    for reader, channel in ((first, "first"), (second, "second")):
        reader.inbox.wait_count(20)
        wait_settled(nsqd, "pynsq_fanout", channel, finished=20)
        assert_once_each(reader.inbox.messages, bodies)


def test_readers_on_one_channel_share_its_messages(nsqd: NSQDProcess, pynsq: PynsqLoop) -> None:
    first = pynsq.reader(nsqd.tcp_address, "pynsq_shared", "ch", max_in_flight=2)
    second = pynsq.reader(nsqd.tcp_address, "pynsq_shared", "ch", max_in_flight=2)
    wait_subscribed(nsqd, "pynsq_shared", "ch", clients=2)
    bodies = [f"shared {i}".encode() for i in range(40)]
    nsqd.multi_publish("pynsq_shared", bodies)

    channel = wait_settled(nsqd, "pynsq_shared", "ch", finished=40)
    firsts, seconds = first.inbox.messages, second.inbox.messages
    assert firsts and seconds, (len(firsts), len(seconds))
    assert_once_each(firsts + seconds, bodies)
    assert sorted(c["finish_count"] for c in channel["clients"]) == sorted([len(firsts), len(seconds)])


# 4. requeue ---------------------------------------------------------------------------------------------------------

def test_handler_returning_false_requeues_with_pynsq_delay(nsqd: NSQDProcess, pynsq: PynsqLoop) -> None:
    """``return False`` sends ``REQ <id> requeue_delay*attempts*1000`` and backs off (kept short here)."""
    returned_false: list[float] = []

    def fail_first(message: nsq.Message) -> bool:
        if message.attempts == 1:
            returned_false.append(time.monotonic())
            return False
        return True

    reader = pynsq.reader(nsqd.tcp_address, "pynsq_req", "ch", fail_first, requeue_delay=1,
                          max_backoff_duration=0.5)
    wait_subscribed(nsqd, "pynsq_req", "ch")
    nsqd.publish("pynsq_req", b"try again")

    first, second = reader.inbox.wait_count(2)
    assert (first.id, first.body, first.attempts) == (second.id, b"try again", 1)
    assert second.attempts == 2
    assert second.at - returned_false[0] >= 1.0
    channel = wait_settled(nsqd, "pynsq_req", "ch", finished=1)
    assert (channel["requeue_count"], channel["timeout_count"]) == (1, 0)
    assert len(reader.inbox.messages) == 2


def test_message_requeue_with_delay(nsqd: NSQDProcess, pynsq: PynsqLoop) -> None:
    requeued: list[float] = []

    def requeue_first(message: nsq.Message) -> bool | None:
        if message.attempts > 1:
            return True
        requeued.append(time.monotonic())
        message.requeue(delay=1, backoff=False)  # REQ <id> 1000
        return None

    reader = pynsq.reader(nsqd.tcp_address, "pynsq_req_delay", "ch", requeue_first)
    wait_subscribed(nsqd, "pynsq_req_delay", "ch")
    nsqd.publish("pynsq_req_delay", b"later please")

    first, second = reader.inbox.wait_count(2)
    assert first.id == second.id and (first.attempts, second.attempts) == (1, 2)
    assert second.at - requeued[0] >= 1.0
    channel = wait_settled(nsqd, "pynsq_req_delay", "ch", finished=1)
    assert (channel["requeue_count"], channel["timeout_count"]) == (1, 0)


# 5, 6. msg_timeout -------------------------------------------------------------------------------------------------

def hold(message: nsq.Message) -> None:
    message.enable_async()  # the test answers for it later, through PynsqLoop.call


def test_touch_keeps_a_message_past_its_timeout(nsqd: NSQDProcess, pynsq: PynsqLoop) -> None:
    reader = pynsq.reader(nsqd.tcp_address, "pynsq_touch", "ch", hold, msg_timeout=1)
    wait_subscribed(nsqd, "pynsq_touch", "ch")
    nsqd.publish("pynsq_touch", b"slow work")
    [received] = reader.inbox.wait_count(1)

    # TOUCH every 300 ms for 2.5 msg_timeouts: each one moves the deadline a full msg_timeout on
    while time.monotonic() - received.at < 2.5:
        time.sleep(0.3)
        pynsq.call(received.message.touch)
    channel = nsqd.channel_stats("pynsq_touch", "ch")
    assert channel
    assert (channel["in_flight_count"], channel["timeout_count"]) == (1, 0)
    assert reader.inbox.messages == [received]

    pynsq.call(received.message.finish)
    wait_settled(nsqd, "pynsq_touch", "ch", finished=1)
    assert reader.inbox.messages == [received]


def test_unfinished_message_is_redelivered_after_msg_timeout(nsqd: NSQDProcess, pynsq: PynsqLoop) -> None:
    reader = pynsq.reader(nsqd.tcp_address, "pynsq_timeout", "ch", hold, msg_timeout=1)
    wait_subscribed(nsqd, "pynsq_timeout", "ch")
    nsqd.publish("pynsq_timeout", b"forgotten")

    first, second = reader.inbox.wait_count(2, timeout=6)
    assert (first.id, first.body, first.attempts) == (second.id, second.body, 1)
    assert second.attempts == 2
    assert second.at - first.at >= 1.0 - TRANSIT

    pynsq.call(second.message.finish)
    channel = wait_settled(nsqd, "pynsq_timeout", "ch", finished=1)
    assert (channel["timeout_count"], channel["requeue_count"]) == (1, 0)
    assert len(reader.inbox.messages) == 2


# 7. heartbeats ------------------------------------------------------------------------------------------------------

def test_reader_answers_heartbeats_and_stays_connected(nsqd: NSQDProcess, pynsq: PynsqLoop) -> None:
    reader = pynsq.reader(nsqd.tcp_address, "pynsq_heartbeat", "ch", heartbeat_interval=1)
    [client] = wait_subscribed(nsqd, "pynsq_heartbeat", "ch")["clients"]
    connected = time.monotonic()

    # nsqd drops a client silent for two heartbeat intervals; pynsq answers each heartbeat with NOP
    reader.inbox.wait_heartbeats(3, timeout=6)
    time.sleep(max(0.0, connected + 3.2 - time.monotonic()))
    [still] = wait_subscribed(nsqd, "pynsq_heartbeat", "ch")["clients"]
    assert (still["remote_address"], still["connect_ts"]) == (client["remote_address"], client["connect_ts"])
    assert reader.connections() == 1

    nsqd.publish("pynsq_heartbeat", b"alive")
    [received] = reader.inbox.wait_count(1)
    assert received.body == b"alive"
    wait_settled(nsqd, "pynsq_heartbeat", "ch", finished=1)
