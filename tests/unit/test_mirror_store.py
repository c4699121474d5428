"""A mirror's copy of an origin's outstanding messages, built from the origin's records."""

from __future__ import annotations

import resource
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from services.nsqd.replication.mirror_files import MirrorFiles
from services.nsqd.replication.mirror_store import COMPACT_AT, MirrorStore, OutOfOrder
from services.nsqd.replication.wire import (TOPIC_QUEUE, Distribute, DropChannel, DropTopic, Finish, Messages,
                                            Publish, Requeue, Snapshot, SnapshotEnd)


def ids(count: int, start: int = 0) -> list[bytes]:
    return [f"{number:016x}".encode() for number in range(start, start + count)]


def publish(sequence: int, topic: str, channels: tuple[str, ...], msg_ids: list[bytes], defer_ms: int = 0) -> Publish:
    return Publish(sequence, topic, channels, defer_ms, Messages.of([(msg_id, b"body " + msg_id, 1000, 0)
                                                                   for msg_id in msg_ids]))


def outstanding(store: MirrorStore) -> set[tuple[str, str | None, bytes]]:
    return {(topic, channel, message[0]) for topic, channel, message, _ in store.outstanding()}


def test_a_message_is_outstanding_in_each_channel_until_that_channel_finishes_it(tmp_path: Path) -> None:
    store = MirrorStore("a:4150", 1, MirrorFiles(tmp_path))
    first, second = ids(2)
    store.apply(publish(1, "t", ("c1", "c2"), [first, second]))
    assert store.depth == 4
    store.apply(Finish(2, "t", "c1", (first, b"never-published!")))
    assert outstanding(store) == {("t", "c1", second), ("t", "c2", first), ("t", "c2", second)}
    store.apply(Finish(3, "t", "c2", (first, second)))
    assert outstanding(store) == {("t", "c1", second)}
    assert store.applied == 3


def test_a_topic_without_channels_holds_its_messages_until_it_hands_them_out(tmp_path: Path) -> None:
    store = MirrorStore("a:4150", 1, MirrorFiles(tmp_path))
    held = ids(3)
    store.apply(publish(1, "t", (), held))
    assert outstanding(store) == {("t", None, msg_id) for msg_id in held}
    store.apply(Distribute(2, "t", ("c1", "c2")))
    assert outstanding(store) == {("t", channel, msg_id) for channel in ("c1", "c2") for msg_id in held}
    store.apply(publish(3, "t", (), ids(1, 10)))  # paused, say: held again
    store.apply(DropTopic(4, "t", held_only=True))  # /topic/empty
    assert store.depth == 6


def test_what_a_topic_holds_and_drops_is_finished_there(tmp_path: Path) -> None:
    store = MirrorStore("a:4150", 1, MirrorFiles(tmp_path))
    held = ids(3)
    store.apply(publish(1, "t", (), held))
    store.apply(Finish(2, "t", TOPIC_QUEUE, tuple(held[:2])))  # its cap dropped the oldest two
    store.apply(Finish(3, "elsewhere", TOPIC_QUEUE, tuple(held)))  # no such topic: nothing changes
    assert outstanding(store) == {("t", None, held[2])}
    store.apply(Distribute(4, "t", ("c",)))
    assert outstanding(store) == {("t", "c", held[2])}


def test_channels_and_topics_dropped_take_their_messages(tmp_path: Path) -> None:
    store = MirrorStore("a:4150", 1, MirrorFiles(tmp_path))
    store.apply(publish(1, "t", ("c1", "c2"), ids(2)))
    store.apply(publish(2, "u", ("c1",), ids(2, 5)))
    store.apply(DropChannel(3, "t", "c1"))
    assert {(topic, channel) for topic, channel, _, _ in store.outstanding()} == {("t", "c2"), ("u", "c1")}
    store.apply(DropTopic(4, "t", held_only=False))
    store.apply(DropChannel(5, "gone", "c1"))  # nothing there: no error
    assert {topic for topic, _, _, _ in store.outstanding()} == {"u"}


def test_a_deferred_message_keeps_when_it_is_due_and_its_body_is_held_once(tmp_path: Path) -> None:
    store = MirrorStore("a:4150", 1, MirrorFiles(tmp_path))
    (msg_id,) = ids(1)
    store.apply(publish(1, "t", ("c1", "c2"), [msg_id], defer_ms=2500))
    copies = [(message, due) for _, _, message, due in store.outstanding()]
    assert copies[0] == ((msg_id, b"body " + msg_id, 1000, 0), 1000 + 2_500_000_000)
    assert store.topics["t"].channels["c1"].batches[0] is store.topics["t"].channels["c2"].batches[0]  # held once
    store.apply(Finish(2, "t", "c1", (msg_id,)))
    assert [(channel, due) for _, channel, _, due in store.outstanding()] == [("c2", 1000 + 2_500_000_000)]


def test_a_deferred_message_held_by_its_topic_stays_deferred_in_the_channels_it_is_handed_to(tmp_path: Path) -> None:
    store = MirrorStore("a:4150", 1, MirrorFiles(tmp_path))
    deferred, at_once = ids(2)
    store.apply(publish(1, "t", (), [deferred], defer_ms=1000))
    store.apply(publish(2, "t", (), [at_once]))
    store.apply(Distribute(3, "t", ("c1", "c2")))
    assert sorted((channel, message[0], due) for _, channel, message, due in store.outstanding()) == [
        ("c1", deferred, 1000 + 1_000_000_000), ("c1", at_once, 0), ("c2", deferred, 1000 + 1_000_000_000),
        ("c2", at_once, 0)]
    store.apply(DropChannel(4, "t", "c1"))
    assert {channel for _, channel, _, _ in store.outstanding()} == {"c2"}


def test_the_batches_a_channel_finished_at_its_front_go_with_their_ids(tmp_path: Path) -> None:
    store = MirrorStore("a:4150", 1, MirrorFiles(tmp_path))
    published = ids(COMPACT_AT + 100)
    for sequence, start in enumerate(range(0, len(published), 100), 1):
        store.apply(publish(sequence, "t", ("c1", "c2"), published[start:start + 100]))
    store.apply(Finish(sequence + 1, "t", "c1", tuple(published[:COMPACT_AT - 1])))
    c1 = store.topics["t"].channels["c1"]
    assert (len(c1.finished), store.depth) == (COMPACT_AT - 1, 101 + len(published))
    store.apply(Finish(sequence + 2, "t", "c1", (published[-1],)))  # the front goes now: 40 batches of 100
    assert (len(c1.finished), len(c1.batches), c1.count) == (96, 2, 196)
    assert outstanding(store) == {("t", "c1", msg_id) for msg_id in published[COMPACT_AT - 1:-1]} | {
        ("t", "c2", msg_id) for msg_id in published}


def test_a_channel_whose_front_waits_for_one_message_is_compacted_once_it_finished_half(tmp_path: Path) -> None:
    store = MirrorStore("a:4150", 1, MirrorFiles(tmp_path))
    published = ids(3 * COMPACT_AT)
    for sequence, start in enumerate(range(0, len(published), 100), 1):
        store.apply(publish(sequence, "t", ("c",), published[start:start + 100]))
    queue = store.topics["t"].channels["c"]
    store.apply(Finish(sequence + 1, "t", "c", tuple(published[1:COMPACT_AT + 1])))  # the first is still out
    assert (len(queue.finished), queue.count) == (COMPACT_AT, len(published))
    store.apply(Finish(sequence + 2, "t", "c", tuple(published[COMPACT_AT + 1:3 * COMPACT_AT // 2 + 1])))
    assert (len(queue.finished), queue.count, len(queue.batches)) == (0, 3 * COMPACT_AT // 2, 63)
    assert queue.batches[0].ids == published[0]
    left = [published[0], *published[3 * COMPACT_AT // 2 + 1:]]
    assert outstanding(store) == {("t", "c", msg_id) for msg_id in left}


def test_a_message_given_back_keeps_its_attempts_and_when_it_is_due_until_finished(tmp_path: Path) -> None:
    store = MirrorStore("a:4150", 1, MirrorFiles(tmp_path))
    given_back, other = ids(2)
    store.apply(publish(1, "t", ("c1", "c2"), [given_back, other]))
    store.apply(Requeue(2, "t", "c1", given_back, 3, 5_000))
    store.apply(Requeue(3, "t", "gone", given_back, 1, 0))  # no such channel: nothing changes
    assert sorted((channel, message[0], message[3], due) for _, channel, message, due in store.outstanding()) == [
        ("c1", given_back, 3, 5_000), ("c1", other, 0, 0), ("c2", given_back, 0, 0), ("c2", other, 0, 0)]
    store.apply(Finish(4, "t", "c1", (given_back,)))
    assert store.topics["t"].channels["c1"].requeued == {}


def test_records_must_come_in_order(tmp_path: Path) -> None:
    store = MirrorStore("a:4150", 1, MirrorFiles(tmp_path))
    store.apply(publish(1, "t", ("c",), ids(1)))
    with pytest.raises(OutOfOrder, match="record 3 after 1"):
        store.apply(publish(3, "t", ("c",), ids(1, 1)))
    with pytest.raises(OutOfOrder):
        store.apply(publish(1, "t", ("c",), ids(1, 1)))  # a replay
    assert store.applied == 1


def test_a_store_started_late_holds_a_snapshot_then_takes_the_records_after_it(tmp_path: Path) -> None:
    store = MirrorStore("a:4150", 1, MirrorFiles(tmp_path), applied=40)  # the origin was at record 41 when this mirror joined
    assert not store.complete
    store.apply(publish(41, "t", ("c",), ids(1, 99)))  # an earlier attempt's leftovers: replaced by the snapshot
    store.take_snapshot(Snapshot(45, publish(0, "t", ("c",), ids(2))))
    store.take_snapshot(Snapshot(45, publish(0, "t", (), ids(1, 5))))
    store.take_snapshot(SnapshotEnd(45))
    assert store.complete and store.applied == 45
    assert outstanding(store) == {("t", "c", ids(2)[0]), ("t", "c", ids(2)[1]), ("t", None, ids(1, 5)[0])}
    store.apply(Finish(46, "t", "c", (ids(2)[0],)))
    assert store.depth == 2


def test_bodies_are_in_the_files_and_memory_keeps_only_where_they_are(tmp_path: Path) -> None:
    store = MirrorStore("a:4150", 1, MirrorFiles(tmp_path, flush_at=0))
    store.apply(publish(1, "t", ("c1", "c2"), ids(3)))
    (batch,) = store.topics["t"].channels["c1"].batches
    assert (batch.segment.number, batch.offset, batch.size, batch.ids) == (0, 0, 3 * 51, b"".join(ids(3)))
    assert b"body " + ids(3)[2] in (tmp_path / "000000.dat").read_bytes()  # once, for both channels
    assert store.files.size == (tmp_path / "000000.dat").stat().st_size == 3 * 51  # header 30, body 21


def test_a_segment_goes_once_every_queue_is_done_with_every_batch_in_it(tmp_path: Path) -> None:
    store = MirrorStore("a:4150", 1, MirrorFiles(tmp_path, segment_size=110))  # 2 messages a segment
    published = ids(6)
    for sequence, msg_id in enumerate(published, 1):
        store.apply(publish(sequence, "t", ("c1", "c2"), [msg_id]))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["000000.dat", "000001.dat", "000002.dat"]
    store.apply(Finish(7, "t", "c1", tuple(published[:4])))
    store.topics["t"].channels["c1"].compact()
    assert len(list(tmp_path.iterdir())) == 3  # c2 still has them
    store.apply(Finish(8, "t", "c2", tuple(published[:3])))
    store.topics["t"].channels["c2"].compact()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["000001.dat", "000002.dat"]
    store.apply(DropChannel(9, "t", "c2"))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["000002.dat"]
    assert outstanding(store) == {("t", "c1", published[4]), ("t", "c1", published[5])}
    store.apply(DropTopic(10, "t", held_only=False))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["000002.dat"]  # being written: it stays
    store.apply(publish(11, "t", (), ids(2, 10)))  # the next segment: the last one goes, nothing in it is held
    assert sorted(path.name for path in tmp_path.iterdir()) == ["000003.dat"]
    store.apply(publish(12, "t", (), ids(1, 12)))  # and the next: the topic holds what is in the last one
    assert sorted(path.name for path in tmp_path.iterdir()) == ["000003.dat", "000004.dat"]


def test_a_batch_finished_in_part_is_read_back_without_what_was_finished(tmp_path: Path) -> None:
    store = MirrorStore("a:4150", 1, MirrorFiles(tmp_path))
    published = ids(5)
    store.apply(publish(1, "t", ("c1", "c2"), published))
    store.apply(Finish(2, "t", "c1", (published[1], published[3])))
    store.topics["t"].channels["c1"].compact()
    assert store.topics["t"].channels["c1"].batches[0].outstanding == 3
    assert sorted(message for _, channel, message, _ in store.outstanding() if channel == "c1") == [
        (msg_id, b"body " + msg_id, 1000, 0) for msg_id in (published[0], published[2], published[4])]


def test_a_snapshot_starts_the_files_over_and_closing_deletes_them(tmp_path: Path) -> None:
    directory = tmp_path / "a_4150-1"
    store = MirrorStore("a:4150", 1, MirrorFiles(directory), applied=40)
    store.apply(publish(41, "t", ("c",), ids(1, 99)))
    store.take_snapshot(Snapshot(45, publish(0, "t", ("c",), ids(2))))
    assert [path.name for path in directory.iterdir()] == ["000001.dat"]
    store.take_snapshot(SnapshotEnd(45))
    assert len(outstanding(store)) == 2
    store.close()
    assert not directory.exists()


@contextmanager
def disk_full_at(size: int) -> Iterator[None]:
    """Files cannot grow past ``size`` bytes, as on a full disk: a short write, then none."""
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, limits[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, handler)


@pytest.mark.parametrize("flush_at", [0, 1000])
def test_a_record_that_cannot_be_written_is_not_applied_and_the_next_one_goes_where_it_would_have(
        tmp_path: Path, flush_at: int) -> None:
    store = MirrorStore("a:4150", 1, MirrorFiles(tmp_path, flush_at=flush_at))
    store.apply(publish(1, "t", ("c",), ids(1)))
    written = store.files.size
    with disk_full_at(10 if flush_at else written + 10):
        with pytest.raises(OSError):
            for sequence in range(2, 100):  # gathered in memory until there are flush_at bytes to write
                store.apply(publish(sequence, "t", ("c",), ids(1, sequence)))
    refused = store.applied + 1
    assert store.depth == store.applied and store.files.size == written * store.applied
    store.apply(publish(refused, "t", ("c",), ids(1, 500)))
    assert outstanding(store) == {("t", "c", msg_id) for msg_id in [*ids(1), *ids(refused - 2, 2), *ids(1, 500)]}
    assert [message[1] for _, _, message, _ in store.outstanding()] == [
        b"body " + msg_id for msg_id in [*ids(1), *ids(refused - 2, 2), *ids(1, 500)]]


def test_records_gathered_in_memory_are_read_back_before_and_after_they_are_written(tmp_path: Path) -> None:
    store = MirrorStore("a:4150", 1, MirrorFiles(tmp_path, flush_at=1000))
    for sequence in range(1, 40):
        store.apply(publish(sequence, "t", ("c",), ids(1, sequence)))
        expected = [b"body " + msg_id for msg_id in ids(sequence, 1)]
        assert [message[1] for _, _, message, _ in store.outstanding()] == expected
    segment = store.files.current
    assert 0 < segment.written < segment.size  # some on disk, the rest gathered


def test_what_the_origins_topic_retains_is_retained_apart_from_the_queues(tmp_path: Path) -> None:
    store = MirrorStore("a:4150", 1, MirrorFiles(tmp_path / "copy"))
    hour = (3_600_000_000_000, 0)
    retained = Publish(1, "t", ("c",), 0, Messages.of([(msg_id, b"kept", time.time_ns(), 0) for msg_id in ids(3)]),
                       hour)
    store.apply(retained)
    store.apply(Finish(2, "t", "c", tuple(ids(3))))
    store.apply(publish(3, "t", ("c",), ids(1, 10)))  # added to a channel (a rewind): not retained again
    history = Publish(4, "t", (), 0, Messages.of([(msg_id, b"old", time.time_ns(), 0) for msg_id in ids(2, 20)]),
                      hour, history=True)
    store.apply(history)
    assert outstanding(store) == {("t", "c", ids(1, 10)[0])}  # history is in no queue
    assert store.history.retain == {"t": hour}
    assert [entry[0] for batch in store.history.read("t") for entry, _ in batch] == ids(3) + ids(2, 20)
    store.apply(DropTopic(5, "t", False))
    assert store.history.logs == {} and not list((tmp_path / "copy" / "retained").iterdir())
    store.close()
