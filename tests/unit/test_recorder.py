"""The seam between the queues and what records them: real topics and channels tell a recorder what changed, storage
chooses who is told (nothing for an ephemeral name), and several recorders on one queue are all told."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import pytest

from services.nsqd.message import ID, QueuedMessage
from services.nsqd.recorder import NULL_CHANNEL, NULL_TOPIC, TopicRecorders
from services.nsqd.storage import Storage
from services.nsqd.topic import ReplicationError, Topic, TopicError
from tests.unit.nsqd_fixtures import options
from tests.unit.test_channel import subscribe


class Log:
    """A recording that writes down every call, as (queue, event, detail)."""

    def __init__(self, wait: Awaitable[None] | None = None) -> None:
        self.events: list[tuple[str, str, Any]] = []
        self.wait = wait

    def topic(self, name: str) -> LogTopic:
        return LogTopic(self, name)


class LogTopic:
    def __init__(self, log: Log, name: str) -> None:
        self.log, self.name = log, name

    def published(self, held: bool, defer_ms: int, entries: list[QueuedMessage]) -> Awaitable[None] | None:
        self.log.events.append((self.name, "published", (held, defer_ms, len(entries))))
        return self.log.wait

    def distributed(self) -> None:
        self.log.events.append((self.name, "distributed", None))

    def dropped(self, ids: list[bytes]) -> None:
        self.log.events.append((self.name, "dropped", len(ids)))

    def emptied(self) -> None:
        self.log.events.append((self.name, "emptied", None))

    def deleted(self) -> None:
        self.log.events.append((self.name, "deleted", None))

    def channel(self, name: str) -> LogChannel:
        return LogChannel(self.log, f"{self.name}/{name}")


class LogChannel:
    def __init__(self, log: Log, name: str) -> None:
        self.log, self.name = log, name

    def __getattr__(self, event: str) -> Any:
        def record(*args: Any) -> None:
            detail = args[0] if len(args) == 1 else (args or None)
            if isinstance(detail, list) and detail and isinstance(detail[0], tuple):
                detail = [entry[ID] for entry in detail]
            self.log.events.append((self.name, event, detail))
        return record


def recorded_topic(name: str = "t", log: Log | None = None, **opts: object) -> tuple[Topic, Log]:
    settings = options(**opts)
    storage = Storage(None, settings)
    log = log or Log()
    storage.record_with(log)
    return Topic(name, settings, storage, lambda topic: None), log


def test_a_topic_tells_its_recorder_of_publishes_held_and_handed_out() -> None:
    topic, log = recorded_topic()
    assert topic.publish([b"a", b"b"]) is None
    topic.get_channel("c")
    topic.publish([b"c"], defer_ms=500)
    assert log.events == [("t", "published", (True, 0, 2)), ("t", "distributed", None),
                          ("t", "published", (False, 500, 1))]


def test_what_a_publish_waits_for_is_the_recorders() -> None:
    async def scenario() -> None:
        refused: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        refused.set_exception(ReplicationError("1 of 2 in-sync replicas"))
        topic, _ = recorded_topic(log=Log(refused))
        waiting = topic.publish([b"a"])
        assert waiting is refused
        with pytest.raises(TopicError, match="1 of 2"):
            await waiting

    asyncio.run(scenario())


def test_a_channel_tells_finishes_requeues_and_dead_letters() -> None:
    topic, log = recorded_topic(max_attempts=2)
    channel = topic.get_channel("c")
    consumer, _ = subscribe(channel, ready=10)
    topic.publish([b"a", b"b", b"c"])
    first, second, third = (msg.id for msg in sorted(channel.in_flight.values(), key=lambda msg: msg.id))
    refusals: list[bytes] = []
    channel.finish_all(consumer, [first, b"0" * 16, first], lambda msg_id, reason: refusals.append(msg_id))
    channel.requeue(consumer, second, 0)
    assert refusals == [b"0" * 16, first]
    events = [event for event in log.events if event[0] == "t/c"]
    assert events[0] == ("t/c", "finished", [first])  # told once, the refused ones left out
    assert events[1][1] == "requeued" and events[1][2][0][ID] == second and events[1][2][1] == 0
    assert second in channel.in_flight  # delivered again at once
    channel.requeue(consumer, second, 0)  # after its second attempt: parked
    assert channel.dead_letters
    channel.replay(10)
    channel.empty_dead_letters()
    channel.empty()
    topic.delete_channel("c")
    kinds = [event[1] for event in log.events if event[0] == "t/c"][2:]
    assert kinds[-3:] == ["dead_letters_emptied", "emptied", "deleted"]
    assert kinds[:2] == ["requeued", "parked"] and "replayed" in kinds and third


def test_storage_gives_ephemeral_queues_nothing_to_tell() -> None:
    topic, log = recorded_topic("e#ephemeral")
    assert topic.recorder is NULL_TOPIC
    topic.get_channel("c").finish_all  # noqa: B018  (a channel of it)
    durable, _ = recorded_topic("t", log)
    assert durable.get_channel("c#ephemeral").recorder is NULL_CHANNEL
    durable.publish([b"a"])
    assert log.events == [("t", "published", (False, 0, 1))]


def test_without_a_recording_every_queue_has_the_null_recorder() -> None:
    settings = options()
    topic = Topic("t", settings, Storage(None, settings), lambda topic: None)
    assert topic.recorder is NULL_TOPIC and topic.get_channel("c").recorder is NULL_CHANNEL
    assert topic.publish([b"a"]) is None


def test_a_recording_added_later_records_the_queues_from_then_on() -> None:
    settings = options()
    storage = Storage(None, settings)
    topic = Topic("t", settings, storage, lambda topic: None)
    channel = topic.get_channel("c")
    log = Log()
    storage.record_with(log)
    topic.record_with(storage.topic_recorder("t"))
    channel.empty()
    topic.publish([b"a"])
    assert log.events == [("t/c", "emptied", None), ("t", "published", (False, 0, 1))]


def test_two_recorders_on_one_topic_are_both_told_and_both_waited_for() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        first, second = loop.create_future(), loop.create_future()
        settings = options()
        storage = Storage(None, settings)
        one, other = Log(first), Log(second)
        storage.record_with(one)
        storage.record_with(other)
        topic = Topic("t", settings, storage, lambda topic: None)
        assert isinstance(topic.recorder, TopicRecorders)
        topic.get_channel("c").empty()
        waiting = topic.publish([b"a"])
        assert waiting is not None
        task = asyncio.ensure_future(waiting)
        first.set_result(None)
        await asyncio.sleep(0)
        assert not task.done()  # the other has not answered yet
        second.set_result(None)
        await task
        assert one.events == other.events == [("t/c", "emptied", None), ("t", "published", (False, 0, 1))]

    asyncio.run(scenario())
