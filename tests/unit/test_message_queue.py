"""The message queue topics and channels share, on real files: memory first, then disk; what happens when the disk
refuses a write; ephemeral names."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.nsqd.message import QueuedMessage, encode
from services.nsqd.message_queue import MessageQueue, Storage
from tests.unit.nsqd_fixtures import options


def message(n: int) -> QueuedMessage:
    return (b"%016d" % n, b"body%d" % n, 1_000 + n, 0)


def storage(data_path: Path | None, mem_queue_size: int = 2) -> Storage:
    return Storage(data_path, options(mem_queue_size=mem_queue_size))


def bodies(queue: MessageQueue) -> list[bytes]:
    """Everything the queue holds, in order; the queue is closed after."""
    while queue.fill_memory(100):
        pass
    queue.backend.close()
    return [entry[1] for entry in queue.take_memory()]


def test_memory_then_disk(tmp_path: Path) -> None:
    queue = storage(tmp_path).open("t")
    queue.put([message(n) for n in range(5)], keep_refused=False)
    assert (len(queue.memory), queue.backend_depth, len(queue), queue.room) == (2, 3, 5, 0)
    assert bodies(queue) == [b"body0", b"body1", b"body2", b"body3", b"body4"]


def blocked(tmp_path: Path, name: str) -> Path:
    """The queue's first file made a directory: no write to it succeeds, even as root."""
    blocker = tmp_path / f"{name}.diskqueue.000000.dat"
    blocker.mkdir()
    return blocker


def test_a_refused_write_keeps_the_messages_in_memory_when_asked(tmp_path: Path) -> None:
    nsqd_storage = storage(tmp_path)
    queue = nsqd_storage.open("t:c")
    blocker = blocked(tmp_path, "t:c")
    queue.put([message(n) for n in range(4)], keep_refused=True)
    assert (len(queue.memory), queue.backend_depth) == (4, 0)
    assert nsqd_storage.health.status.startswith("failed to write messages to t:c - ")
    blocker.rmdir()
    queue.put([message(4)], keep_refused=True)
    assert nsqd_storage.health.status == "OK" and queue.backend_depth == 1
    assert bodies(queue) == [b"body%d" % n for n in range(5)]


def test_a_refused_write_queues_nothing_otherwise(tmp_path: Path) -> None:
    queue = storage(tmp_path).open("t")
    queue.put([message(0)], keep_refused=False)
    blocked(tmp_path, "t")
    with pytest.raises(OSError):
        queue.put([message(n) for n in range(1, 4)], keep_refused=False)
    assert len(queue) == 1
    queue.backend.close()


def test_records_the_disk_refuses_stay_in_memory_decoded(tmp_path: Path) -> None:
    queue = storage(tmp_path).open("t:c")
    blocked(tmp_path, "t:c")
    records = [len(payload).to_bytes(4, "big") + payload for payload in (encode(message(n)) for n in range(3))]
    queue.put_records(records)
    assert list(queue.memory) == [message(n) for n in range(3)]


def test_ephemeral_names_drop_what_memory_cannot_hold(tmp_path: Path) -> None:
    queue = storage(tmp_path).open("t#ephemeral")
    queue.put([message(n) for n in range(5)], keep_refused=False)
    assert (len(queue), queue.dropped_count) == (2, 3)
    assert list(tmp_path.iterdir()) == []


def test_what_is_flushed_at_exit_is_there_after_a_restart(tmp_path: Path) -> None:
    queue = storage(tmp_path).open("t:c")
    queue.put([message(0), message(1)], keep_refused=False)
    queue.flush_to_disk([message(2)], deferred=[(123, encode(message(3)))])
    reopened = storage(tmp_path).open("t:c")
    assert reopened.backend.take_deferred() == [(123, encode(message(3)))]
    assert bodies(reopened) == [b"body0", b"body1", b"body2"]


def test_delete_removes_the_files(tmp_path: Path) -> None:
    nsqd_storage = storage(tmp_path, mem_queue_size=0)
    queue = nsqd_storage.open("t")
    queue.put([message(0)], keep_refused=False)
    assert "t" in nsqd_storage.queues and list(tmp_path.iterdir())
    queue.delete()
    assert len(queue) == 0 and "t" not in nsqd_storage.queues
    assert [path for path in tmp_path.iterdir() if path.name.startswith("t.")] == []


def restarted(tmp_path: Path, queue: MessageQueue) -> list[bytes]:
    """What a restart after a kill finds in ``queue`` (synced first, as the sync loop would have)."""
    queue.backend.close()
    return bodies(storage(tmp_path, mem_queue_size=0).open(queue.backend.name, channel=True))


def test_at_mem_queue_size_0_a_channel_keeps_on_disk_what_is_not_finished(tmp_path: Path) -> None:
    queue = storage(tmp_path, mem_queue_size=0).open("t:c", channel=True)
    assert queue.holds_until_finished
    queue.put([message(n) for n in range(4)], keep_refused=False)
    queue.fill_memory(4)
    handed_out = queue.take_memory()
    queue.release(handed_out[0][0])  # 0 finished; 1 requeued (written again), 2 and 3 in flight
    queue.put([handed_out[1]], keep_refused=True)
    # killed now: 2 is the oldest unfinished, 1 is safe in its new copy
    assert restarted(tmp_path, queue) == [b"body2", b"body3", b"body1"]


def test_a_clean_exit_releases_what_it_wrote_again(tmp_path: Path) -> None:
    queue = storage(tmp_path, mem_queue_size=0).open("t:c", channel=True)
    queue.put([message(n) for n in range(3)], keep_refused=False)
    queue.fill_memory(3)
    in_flight = queue.take_memory()
    queue.release(in_flight[0][0])
    queue.flush_to_disk(in_flight[1:], [])  # the others written again: their older copies are not read again
    assert bodies(storage(tmp_path, mem_queue_size=0).open("t:c", channel=True)) == [b"body1", b"body2"]


def test_topics_and_a_memory_queue_do_not_hold(tmp_path: Path) -> None:
    assert not storage(tmp_path, mem_queue_size=0).open("t").holds_until_finished
    assert not storage(tmp_path, mem_queue_size=2).open("t:c", channel=True).holds_until_finished


def test_at_mem_queue_size_0_deferred_messages_are_on_disk_as_they_are_deferred(tmp_path: Path) -> None:
    queue = storage(tmp_path, mem_queue_size=0).open("t:c", channel=True)
    assert queue.keeps_deferred and not storage(tmp_path / "x", mem_queue_size=2).open("t:c").keeps_deferred
    queue.put([message(0), message(1)], keep_refused=False)
    queue.fill_memory(2)
    requeued = queue.take_memory()[0]
    queue.defer([(123, requeued), (456, message(2))], keep_refused=False)  # one requeued with a delay, a DPUB
    # killed now: both are in the deferred file with their due times, and the requeued one is not read again
    assert restarted(tmp_path, queue) == [b"body1"]
    again = storage(tmp_path, mem_queue_size=0).open("t:c", channel=True)
    assert again.backend.take_deferred(keep=True) == [(123, encode(requeued)), (456, encode(message(2)))]
    assert again.backend.deferred_records == 2 and (tmp_path / "t:c.diskqueue.deferred.dat").exists()  # kept on: still deferred
    again.backend.close()


def test_a_deferral_the_disk_refuses_is_kept_in_memory_or_refused(tmp_path: Path) -> None:
    nsqd_storage = storage(tmp_path, mem_queue_size=0)
    queue = nsqd_storage.open("t:c", channel=True)
    (tmp_path / "t:c.diskqueue.deferred.dat").mkdir()  # no write to it succeeds
    with pytest.raises(OSError):
        queue.defer([(1, message(0))], keep_refused=False)
    queue.defer([(1, message(1))], keep_refused=True)
    assert nsqd_storage.health.status.startswith("failed to write messages to t:c - ")


def test_the_deferred_file_is_replaced_by_what_is_still_deferred_once_it_holds_mostly_gone_ones(
        tmp_path: Path) -> None:
    queue = storage(tmp_path, mem_queue_size=0).open("t:c", channel=True)
    queue.defer([(n, message(n)) for n in range(3000)], keep_refused=False)
    still = [(n, encode(message(n))) for n in range(2100, 3000)]
    queue.deferred_left(2000, lambda: still[:])  # 3,000 records for 2,000 deferred: not yet
    assert queue.backend.deferred_records == 3000
    queue.deferred_left(900, lambda: still[:])
    assert queue.backend.deferred_records == 900
    queue.defer([(9, message(9))], keep_refused=False)  # appended to the new file
    assert queue.backend.take_deferred() == [*still, (9, encode(message(9)))]
    queue.deferred_left(0, list)
    assert not (tmp_path / "t:c.diskqueue.deferred.dat").exists()
    queue.backend.close()


def test_a_peek_shows_memory_then_disk_and_takes_nothing(tmp_path: Path) -> None:
    queue = storage(tmp_path).open("t")
    queue.put([message(n) for n in range(5)], keep_refused=False)
    assert queue.peek_job(1)() == [message(0)]
    assert queue.peek_job(3)() == [message(0), message(1), message(2)]
    assert queue.peek_job(10)() == [message(n) for n in range(5)]
    assert (len(queue.memory), queue.backend_depth) == (2, 3)
    assert bodies(queue) == [b"body%d" % n for n in range(5)]


def test_a_peek_at_mem_queue_size_0_shows_what_was_read_and_not_handed_out_then_disk(tmp_path: Path) -> None:
    queue = storage(tmp_path, mem_queue_size=0).open("t:c", channel=True)
    queue.put([message(n) for n in range(5)], keep_refused=False)
    queue.fill_memory(3)
    queue.memory.popleft()  # 0 handed out: in flight, not queued
    assert queue.peek_job(10)() == [message(n) for n in range(1, 5)]
    assert (len(queue), queue.backend_depth) == (4, 2)
    queue.backend.close()


def test_an_ephemeral_queue_peeks_at_its_memory(tmp_path: Path) -> None:
    queue = storage(tmp_path).open("t#ephemeral")
    queue.put([message(n) for n in range(5)], keep_refused=True)
    assert queue.peek_job(10)() == [message(0), message(1)]
