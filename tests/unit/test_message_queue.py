"""The message queues topics and channels share, on real files: the memory-first kind and the disk-through kind,
their deferred messages, what happens when the disk refuses a write, ephemeral names."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from services.nsqd.message import QueuedMessage, decode, encode
from services.nsqd.message_queue import DiskThroughQueue, MemoryFirstQueue, MessageQueue
from services.nsqd.storage import Storage
from tests.unit.nsqd_fixtures import options


def message(n: int) -> QueuedMessage:
    return (b"%016d" % n, b"body%d" % n, 1_000 + n, 0)


def storage(data_path: Path | None, mem_queue_size: int = 2) -> Storage:
    return Storage(data_path, options(mem_queue_size=mem_queue_size))


def bodies(queue: MessageQueue) -> list[bytes]:
    """Everything the queue holds, in order; the queue is closed after."""
    while queue.fill_memory(100):
        pass
    queue._backend.close()
    return [entry[1] for entry in queue.take_memory()]


def fail(entry: QueuedMessage, deadline: float) -> None:
    raise AssertionError(f"{entry} is not due yet")


def test_memory_then_disk(tmp_path: Path) -> None:
    queue = storage(tmp_path).open_topic("t")
    queue.put([message(n) for n in range(5)])
    assert (len(queue.memory), queue.backend_depth, len(queue), queue.room) == (2, 3, 5, 0)
    assert bodies(queue) == [b"body0", b"body1", b"body2", b"body3", b"body4"]


def blocked(tmp_path: Path, name: str) -> Path:
    """The queue's first file made a directory: no write to it succeeds, even as root."""
    blocker = tmp_path / f"{name}.diskqueue.000000.dat"
    blocker.mkdir()
    return blocker


def test_a_refused_write_keeps_the_messages_in_memory_when_asked(tmp_path: Path) -> None:
    nsqd_storage = storage(tmp_path)
    queue = nsqd_storage.open_channel("t:c")
    blocker = blocked(tmp_path, "t:c")
    queue.put([message(n) for n in range(4)])
    assert (len(queue.memory), queue.backend_depth) == (4, 0)
    assert nsqd_storage.health.status.startswith("failed to write messages to t:c - ")
    blocker.rmdir()
    queue.put([message(4)])
    assert nsqd_storage.health.status == "OK" and queue.backend_depth == 1
    assert bodies(queue) == [b"body%d" % n for n in range(5)]


def test_a_refused_write_queues_nothing_otherwise(tmp_path: Path) -> None:
    queue = storage(tmp_path).open_topic("t")
    queue.put([message(0)])
    blocked(tmp_path, "t")
    with pytest.raises(OSError):
        queue.accept([message(n) for n in range(1, 4)])
    assert len(queue) == 1
    queue._backend.close()


def test_records_the_disk_refuses_stay_in_memory_decoded(tmp_path: Path) -> None:
    queue = storage(tmp_path).open_channel("t:c")
    blocked(tmp_path, "t:c")
    records = [len(payload).to_bytes(4, "big") + payload for payload in (encode(message(n)) for n in range(3))]
    queue.put_records(records)
    assert list(queue.memory) == [message(n) for n in range(3)]


def test_ephemeral_names_drop_what_memory_cannot_hold(tmp_path: Path) -> None:
    queue = storage(tmp_path).open_topic("t#ephemeral")
    queue.put([message(n) for n in range(5)])
    assert (len(queue), queue.dropped_count) == (2, 3)
    assert list(tmp_path.iterdir()) == []


def test_what_is_flushed_at_exit_is_there_after_a_restart(tmp_path: Path) -> None:
    queue = storage(tmp_path).open_channel("t:c")
    queue.put([message(0), message(1)])
    queue.defer(message(3), time.monotonic() + 60)
    queue.flush_to_disk([message(2)])
    reopened = storage(tmp_path).open_channel("t:c")
    due: list[QueuedMessage] = []
    assert len(reopened.deferred) == 1 and not reopened.deferred.pop_due(time.monotonic() + 59, fail)
    assert reopened.deferred.pop_due(time.monotonic() + 61, lambda entry, deadline: due.append(entry))
    assert due == [message(3)]
    assert bodies(reopened) == [b"body0", b"body1", b"body2"]


def test_delete_removes_the_files(tmp_path: Path) -> None:
    nsqd_storage = storage(tmp_path, mem_queue_size=0)
    queue = nsqd_storage.open_topic("t")
    queue.put([message(0)])
    assert "t" in nsqd_storage.queues and list(tmp_path.iterdir())
    queue.delete()
    assert len(queue) == 0 and "t" not in nsqd_storage.queues
    assert [path for path in tmp_path.iterdir() if path.name.startswith("t.")] == []


def restarted(tmp_path: Path, queue: MessageQueue) -> list[bytes]:
    """What a restart after a kill finds in ``queue`` (synced first, as the sync loop would have)."""
    queue._backend.close()
    return bodies(storage(tmp_path, mem_queue_size=0).open_channel(queue.name))


def test_at_mem_queue_size_0_a_channel_keeps_on_disk_what_is_not_finished(tmp_path: Path) -> None:
    queue = storage(tmp_path, mem_queue_size=0).open_channel("t:c")
    assert isinstance(queue, DiskThroughQueue)
    queue.put([message(n) for n in range(4)])
    queue.fill_memory(4)
    handed_out = queue.take_memory()
    queue.release(handed_out[0][0])  # 0 finished; 1 requeued (written again), 2 and 3 in flight
    queue.put([handed_out[1]])
    # killed now: 2 is the oldest unfinished, 1 is safe in its new copy
    assert restarted(tmp_path, queue) == [b"body2", b"body3", b"body1"]


def test_a_clean_exit_releases_what_it_wrote_again(tmp_path: Path) -> None:
    queue = storage(tmp_path, mem_queue_size=0).open_channel("t:c")
    queue.put([message(n) for n in range(3)])
    queue.fill_memory(3)
    in_flight = queue.take_memory()
    queue.release(in_flight[0][0])
    queue.flush_to_disk(in_flight[1:])  # the others written again: their older copies are not read again
    assert bodies(storage(tmp_path, mem_queue_size=0).open_channel("t:c")) == [b"body1", b"body2"]


def test_topics_and_a_memory_queue_do_not_hold(tmp_path: Path) -> None:
    assert isinstance(storage(tmp_path, mem_queue_size=0).open_topic("t"), MemoryFirstQueue)
    assert isinstance(storage(tmp_path, mem_queue_size=0).open_dead_letters("t:dead:c"), MemoryFirstQueue)
    assert isinstance(storage(tmp_path, mem_queue_size=2).open_channel("t:c"), MemoryFirstQueue)


def test_at_mem_queue_size_0_deferred_messages_are_on_disk_as_they_are_deferred(tmp_path: Path) -> None:
    queue = storage(tmp_path, mem_queue_size=0).open_channel("t:c")
    queue.put([message(0), message(1)])
    queue.fill_memory(2)
    requeued = queue.take_memory()[0]
    soon, later = time.monotonic() + 30, time.monotonic() + 60
    queue.defer(requeued, soon)  # requeued with a delay
    queue.defer_published(message(2), later)  # a DPUB
    # killed now: both are in the deferred file with their due times, and the requeued one is not read again
    assert restarted(tmp_path, queue) == [b"body1"]
    again = storage(tmp_path, mem_queue_size=0).open_channel("t:c")
    due: list[tuple[QueuedMessage, float]] = []
    assert again.deferred.pop_due(later + 1, lambda entry, deadline: due.append((entry, deadline)))
    assert [entry for entry, _ in due] == [requeued, message(2)]
    assert abs(due[0][1] - soon) < 1 and abs(due[1][1] - later) < 1
    again._backend.close()


def test_a_deferral_the_disk_refuses_is_kept_in_memory_or_refused(tmp_path: Path) -> None:
    nsqd_storage = storage(tmp_path, mem_queue_size=0)
    queue = nsqd_storage.open_channel("t:c")
    (tmp_path / "t:c.diskqueue.deferred.dat").mkdir()  # no write to it succeeds
    with pytest.raises(OSError):
        queue.defer_published(message(0), 1)
    assert len(queue.deferred) == 0
    queue.defer(message(1), 1)
    assert len(queue.deferred) == 1
    assert nsqd_storage.health.status.startswith("failed to write messages to t:c - ")


def test_the_deferred_file_is_replaced_by_what_is_still_deferred_once_it_holds_mostly_gone_ones(
        tmp_path: Path) -> None:
    queue = storage(tmp_path, mem_queue_size=0).open_channel("t:c")
    now = time.monotonic()
    for n in range(3000):
        queue.defer_published(message(n), now + n)
    deferred_file = queue.deferred._file
    assert deferred_file is not None
    assert queue.deferred.pop_due(now + 999.5, lambda entry, due: None)  # 3,000 records for 2,000 deferred
    assert deferred_file.records == 3000
    assert queue.deferred.pop_due(now + 2099.5, lambda entry, due: None)
    assert deferred_file.records == 900
    queue.defer_published(message(9), now + 9)  # appended to the new file
    deferred_file.close()
    assert [decode(payload) for _, payload in deferred_file.take(keep=True)] == \
        [message(n) for n in range(2100, 3000)] + [message(9)]
    assert queue.deferred.pop_all(lambda entry, due: None)
    assert not (tmp_path / "t:c.diskqueue.deferred.dat").exists()
    queue._backend.close()


def test_a_peek_shows_memory_then_disk_and_takes_nothing(tmp_path: Path) -> None:
    queue = storage(tmp_path).open_topic("t")
    queue.put([message(n) for n in range(5)])
    assert queue.peek_job(1)() == [message(0)]
    assert queue.peek_job(3)() == [message(0), message(1), message(2)]
    assert queue.peek_job(10)() == [message(n) for n in range(5)]
    assert (len(queue.memory), queue.backend_depth) == (2, 3)
    assert bodies(queue) == [b"body%d" % n for n in range(5)]


def test_a_peek_at_mem_queue_size_0_shows_what_was_read_and_not_handed_out_then_disk(tmp_path: Path) -> None:
    queue = storage(tmp_path, mem_queue_size=0).open_channel("t:c")
    queue.put([message(n) for n in range(5)])
    queue.fill_memory(3)
    queue.memory.popleft()  # 0 handed out: in flight, not queued
    assert queue.peek_job(10)() == [message(n) for n in range(1, 5)]
    assert (len(queue), queue.backend_depth) == (4, 2)
    queue._backend.close()


def test_an_ephemeral_queue_peeks_at_its_memory(tmp_path: Path) -> None:
    queue = storage(tmp_path).open_topic("t#ephemeral")
    queue.put([message(n) for n in range(5)])
    assert queue.peek_job(10)() == [message(0), message(1)]
