from __future__ import annotations

import time
from pathlib import Path

import pytest

from services.nsqd.storage import Storage
from services.nsqd.topic import Topic, TopicError
from tests.unit.nsqd_fixtures import make_client, options
from tests.unit.test_channel import subscribe


def make_topic(name: str = "t", **opts: object) -> Topic:
    settings = options(**opts)
    return Topic(name, settings, Storage(None, settings), lambda topic: None)


def test_topic_holds_messages_until_its_first_channel() -> None:
    topic = make_topic()
    topic.publish([b"a", b"b"])
    assert topic.depth == 2 and topic.message_count == 2 and topic.message_bytes == 2
    first = topic.get_channel("first")
    assert topic.depth == 0 and first.depth == 2
    topic.publish([b"c"])
    later = topic.get_channel("later")
    topic.publish([b"d"])
    assert first.depth == 4 and later.depth == 1  # a later channel misses the earlier backlog, as in NSQ


def test_every_channel_gets_a_copy_with_the_same_id() -> None:
    topic = make_topic()
    channels = [topic.get_channel(name) for name in ("a", "b")]
    topic.publish([b"x"])
    entries = [channel.queue.memory[0] for channel in channels]
    assert entries[0][:3] == entries[1][:3] and entries[0][3] == 0


def test_ids_are_unique_and_increasing() -> None:
    topic = make_topic()
    channel = topic.get_channel("c")
    topic.publish([b"m"] * 5000)
    ids = [entry[0] for entry in channel.queue.memory]
    assert ids == sorted(ids) and len(set(ids)) == 5000


def test_overflow_goes_to_disk_and_comes_back(tmp_path: Path) -> None:
    settings = options(mem_queue_size=3)
    topic = Topic("t", settings, Storage(tmp_path, settings), lambda topic: None)
    topic.publish([b"%d" % i for i in range(5)])
    assert (len(topic.queue.memory), topic.backend_depth, topic.depth) == (3, 2, 5)
    channel = topic.get_channel("c")
    topic.publish([b"%d" % i for i in range(5, 10)])
    assert topic.depth == 0 and (len(channel.queue.memory), channel.backend_depth) == (3, 7)
    client, transport = subscribe(channel, ready=100)
    assert sorted(int(m.body) for m in transport.messages()) == list(range(10))
    assert channel.depth == 0
    topic.flush_to_disk()


def test_a_backlog_on_disk_reaches_a_new_channel_in_order(tmp_path: Path) -> None:
    # what the channel can hold in memory is decoded; the rest goes to its own disk queue unchanged
    settings = options(mem_queue_size=4)
    topic = Topic("t", settings, Storage(tmp_path, settings), lambda topic: None)
    topic.publish([b"%d" % i for i in range(4)])
    for i in range(4, 20):
        topic.publish([b"%d" % i])
    assert (len(topic.queue.memory), topic.backend_depth) == (4, 16)
    channel = topic.get_channel("c")
    assert topic.depth == 0 and channel.message_count == 20
    assert (len(channel.queue.memory), channel.backend_depth) == (4, 16)
    client, transport = subscribe(channel, ready=100)
    bodies = [int(m.body) for m in transport.messages()]
    assert sorted(bodies) == list(range(20)) and bodies[4:] == list(range(4, 20))
    assert all(m.attempts == 1 for m in channel.in_flight.values())
    topic.flush_to_disk()


def test_a_publish_the_disk_refuses_is_refused_whole(tmp_path: Path) -> None:
    settings = options(mem_queue_size=1)
    topic = Topic("t", settings, Storage(tmp_path, settings), lambda topic: None)
    (tmp_path / "t.diskqueue.000000.dat").mkdir()  # the disk queue cannot write
    with pytest.raises(TopicError):
        topic.publish([b"1", b"2", b"3"])
    assert topic.depth == 0 and topic.message_count == 0
    topic.flush_to_disk()



@pytest.mark.parametrize("name", ["t", "t:c"])
def test_at_mem_queue_size_0_a_deferred_publish_the_disk_refuses_is_refused(tmp_path: Path, name: str) -> None:
    """Refused by the topic's deferred file (no channel yet) or by its channel's: never held in memory alone."""
    settings = options(mem_queue_size=0)
    topic = Topic("t", settings, Storage(tmp_path, settings), lambda topic: None)
    if name == "t:c":
        channel = topic.get_channel("c")
    (tmp_path / f"{name}.diskqueue.deferred.dat").mkdir()  # no write to it succeeds
    with pytest.raises(TopicError):
        topic.publish([b"later"], defer_ms=1000)
    assert topic.depth == 0 and topic.message_count == 0
    if name == "t:c":
        assert not channel.deferred and channel.message_count == 0
    topic.flush_to_disk()


def test_ephemeral_channels_do_not_block_publishing() -> None:
    topic = make_topic(mem_queue_size=1)
    topic.get_channel("tail#ephemeral")
    topic.publish([b"1", b"2", b"3"])
    assert topic.channels["tail#ephemeral"].dropped_count == 2


def test_paused_topic_holds_then_delivers() -> None:
    topic = make_topic()
    channel = topic.get_channel("c")
    topic.pause()
    topic.publish([b"1"])
    assert topic.depth == 1 and channel.depth == 0
    topic.unpause()
    assert topic.depth == 0 and channel.depth == 1


def test_deferred_publish_starts_its_delay_in_each_channel() -> None:
    topic = make_topic()
    channel = topic.get_channel("c")
    before = time.monotonic()
    topic.publish([b"later"], defer_ms=1500)
    assert channel.depth == 0 and len(channel.deferred) == 1
    assert not channel.process_deferred(before + 1.4)
    assert channel.process_deferred(time.monotonic() + 1.6) and channel.depth == 1


def test_empty_drops_only_the_topic_queue() -> None:
    topic = make_topic()
    topic.pause()
    channel = topic.get_channel("c")
    topic.publish([b"1"])
    topic.empty()
    assert topic.depth == 0 and channel.depth == 0


def test_exiting_topic_refuses() -> None:
    topic = make_topic()
    topic.close()
    with pytest.raises(TopicError, match="exiting"):
        topic.publish([b"x"])


def test_an_ephemeral_channel_at_mem_queue_size_0_hands_messages_to_its_consumers(tmp_path: Path) -> None:
    """It has no disk to go through: its consumers take what they have room for, as NSQ's ephemeral channels do."""
    settings = options(mem_queue_size=0)
    topic = Topic("t", settings, Storage(tmp_path, settings), lambda topic: None)
    channel = topic.get_channel("c#ephemeral")
    client, transport = make_client(1, 0)
    client.subscribe(channel)
    client.set_ready(5)
    topic.publish([b"hello", b"world"])
    assert [m.body for m in transport.messages()] == [b"hello", b"world"] and channel.dropped_count == 0
    assert list(tmp_path.iterdir()) == []
