"""The disk queue on real files: order, rolling, restart, recovery after a kill, corruption, write failures."""

from __future__ import annotations

import struct
from dataclasses import astuple
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.nsqd.disk_queue import DiskQueue
from services.nsqd.queue_cap import QueueFull


def payload(n: int, size: int = 40) -> bytes:
    return (b"%010d" % n).ljust(size, b"x")


_opened: list[DiskQueue] = []


@pytest.fixture(autouse=True)
def close_queues() -> Iterator[None]:
    """Every queue a test opened is closed after it (a restart is a second queue on the same files)."""
    yield
    while _opened:
        _opened.pop().release_files()


def make(path: Path, max_bytes: int = 1 << 20, sync_every: int = 2500, name: str = "t",
         holding: bool = False) -> DiskQueue:
    queue = DiskQueue(name, path, max_bytes_per_file=max_bytes, max_msg_size=1000, sync_every=sync_every,
                      hold_key=first_ten_bytes if holding else None)
    _opened.append(queue)
    return queue


def first_ten_bytes(payload: bytes) -> bytes:
    """The key of ``payload(n)``."""
    return payload[:10]


def read_all(queue: DiskQueue) -> list[bytes]:
    out: list[bytes] = []
    while batch := queue.read(100):
        out += batch
    return out


def test_messages_come_back_in_order(tmp_path: Path) -> None:
    queue = make(tmp_path)
    queue.put([payload(i) for i in range(5)])
    queue.put([payload(5)])
    assert queue.depth == 6
    assert queue.read(4) == [payload(i) for i in range(4)]
    queue.put([payload(6)])
    assert read_all(queue) == [payload(4), payload(5), payload(6)]
    assert queue.depth == 0 and queue.read(10) == []


def test_files_roll_and_are_deleted_once_read(tmp_path: Path) -> None:
    queue = make(tmp_path, max_bytes=200)  # 44-byte records: 4 a file
    queue.put([payload(i) for i in range(10)])
    assert sorted(p.name for p in tmp_path.glob("t.diskqueue.0*.dat")) == [
        "t.diskqueue.000000.dat", "t.diskqueue.000001.dat", "t.diskqueue.000002.dat"]
    assert all(p.stat().st_size <= 200 for p in tmp_path.glob("t.diskqueue.0*.dat"))
    assert queue.read(5) == [payload(i) for i in range(5)]
    assert not (tmp_path / "t.diskqueue.000000.dat").exists()
    assert read_all(queue) == [payload(i) for i in range(5, 10)]


def test_a_restart_resumes_where_the_queue_stopped(tmp_path: Path) -> None:
    queue = make(tmp_path, max_bytes=200)
    queue.put([payload(i) for i in range(10)])
    queue.read(3)
    queue.close()
    assert (tmp_path / "t.diskqueue.meta.dat").read_text().startswith("7\n")
    again = make(tmp_path, max_bytes=200)
    assert again.depth == 7
    assert read_all(again) == [payload(i) for i in range(3, 10)]


def test_records_written_after_the_last_sync_survive_a_kill(tmp_path: Path) -> None:
    queue = make(tmp_path)
    queue.put([payload(0)])
    queue.sync_job()()
    queue.put([payload(1), payload(2)])  # written, never synced: the process dies here
    again = make(tmp_path)
    assert again.depth == 3
    assert read_all(again) == [payload(0), payload(1), payload(2)]


def test_a_torn_last_record_is_cut_off(tmp_path: Path) -> None:
    queue = make(tmp_path)
    queue.put([payload(0), payload(1)])
    with open(tmp_path / "t.diskqueue.000000.dat", "ab") as file:
        file.write(struct.pack(">i", 40) + b"half a rec")
    again = make(tmp_path)
    assert read_all(again) == [payload(0), payload(1)]
    again.put([payload(2)])
    assert read_all(again) == [payload(2)]


def test_a_corrupt_file_is_renamed_bad_and_the_rest_is_served(tmp_path: Path) -> None:
    queue = make(tmp_path, max_bytes=200)
    queue.put([payload(i) for i in range(12)])  # files 0, 1, 2 with 4 records each
    queue.close()
    middle = tmp_path / "t.diskqueue.000001.dat"
    data = bytearray(middle.read_bytes())
    data[44:48] = struct.pack(">i", 10_000_000)  # the second record's size, out of bounds
    middle.write_bytes(bytes(data))
    again = make(tmp_path, max_bytes=200)
    assert read_all(again) == [payload(i) for i in (0, 1, 2, 3, 4, 8, 9, 10, 11)]
    assert (tmp_path / "t.diskqueue.000001.dat.bad").exists()
    assert again.depth == 0


def test_a_truncated_file_is_renamed_bad(tmp_path: Path) -> None:
    queue = make(tmp_path, max_bytes=200)
    queue.put([payload(i) for i in range(8)])
    queue.close()
    first = tmp_path / "t.diskqueue.000000.dat"
    first.write_bytes(first.read_bytes()[:100])  # ends inside the third record
    again = make(tmp_path, max_bytes=200)
    assert read_all(again) == [payload(i) for i in (0, 1, 4, 5, 6, 7)]
    assert (tmp_path / "t.diskqueue.000000.dat.bad").exists()


def test_corruption_in_the_file_being_written_moves_writing_on(tmp_path: Path) -> None:
    queue = make(tmp_path)
    queue.put([payload(0), payload(1)])
    queue.close()
    path = tmp_path / "t.diskqueue.000000.dat"
    data = bytearray(path.read_bytes())
    data[0:4] = struct.pack(">i", 3)
    path.write_bytes(bytes(data))
    again = make(tmp_path)
    assert again.read(10) == []
    again.put([payload(2)])
    assert read_all(again) == [payload(2)]


def test_empty_drops_every_file(tmp_path: Path) -> None:
    queue = make(tmp_path, max_bytes=200)
    queue.put([payload(i) for i in range(10)])
    queue.empty()
    assert queue.depth == 0 and queue.read(10) == []
    assert not list(tmp_path.glob("t.diskqueue.0*.dat"))
    queue.put([payload(11)])
    assert read_all(queue) == [payload(11)]
    queue.delete()
    assert not list(tmp_path.glob("t.diskqueue*"))


def test_sync_every_counts_reads_and_writes(tmp_path: Path) -> None:
    queue = make(tmp_path, sync_every=3)
    queue.put([payload(0), payload(1)])
    assert not queue.sync_due
    queue.read(1)
    assert queue.sync_due
    queue.sync_job()()
    assert not queue.sync_due and not queue.dirty
    assert (tmp_path / "t.diskqueue.meta.dat").read_text() == "1\n0,44\n0,88\n"


def test_a_failed_write_changes_nothing(tmp_path: Path) -> None:
    queue = make(tmp_path)
    blocker = tmp_path / "t.diskqueue.000000.dat"
    blocker.mkdir()  # the file cannot be opened for writing, even by root
    with pytest.raises(OSError):
        queue.put([payload(0)])
    assert queue.depth == 0
    blocker.rmdir()
    queue.put([payload(1)])
    assert read_all(queue) == [payload(1)]


def test_sizes_out_of_bounds_are_refused(tmp_path: Path) -> None:
    queue = make(tmp_path)
    for bad in (b"short", b"x" * 1027):
        with pytest.raises(ValueError):
            queue.put([payload(0), bad])
    assert queue.depth == 0


def test_channel_queues_have_their_own_files(tmp_path: Path) -> None:
    topic, channel = make(tmp_path, name="t"), make(tmp_path, name="t:c")
    topic.put([payload(1)])
    channel.put([payload(2)])
    assert read_all(topic) == [payload(1)] and read_all(channel) == [payload(2)]
    assert (tmp_path / "t:c.diskqueue.000000.dat").exists()


def test_a_file_read_while_it_was_written_is_read_to_its_real_end(tmp_path: Path) -> None:
    queue = make(tmp_path, max_bytes=200)
    queue.put([payload(0), payload(1)])
    assert queue.read(1) == [payload(0)]  # the reader opens file 0 while it is the write file
    queue.put([payload(i) for i in range(2, 8)])  # file 0 fills up, then writing rolls on to file 1
    assert read_all(queue) == [payload(i) for i in range(1, 8)]


def test_reads_records_across_chunks_and_larger_than_a_chunk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from services.nsqd import segment_files

    monkeypatch.setattr(segment_files, "_READ_CHUNK", 100)  # records straddle chunks; the 500-byte one fills several
    queue = make(tmp_path)
    written = [payload(i, size=30 + 7 * i) for i in range(20)] + [payload(20, size=500)] + [payload(21)]
    queue.put(written)
    assert queue.read(3) == written[:3]
    assert read_all(queue) == written[3:]
    assert queue.depth == 0


def test_a_record_still_being_written_is_not_read(tmp_path: Path) -> None:
    queue = make(tmp_path)
    queue.put([payload(1)])
    with open(queue.file_path(0), "ab") as file:  # half of a record, as a write cut short would leave
        file.write(struct.pack(">i", 40) + b"0000000002")
    assert queue.read(10) == [payload(1)]
    assert queue.read(10) == []


def test_a_holding_queue_restarts_from_the_oldest_unfinished_record(tmp_path: Path) -> None:
    queue = make(tmp_path, max_bytes=200, holding=True)  # 44-byte records: 4 a file
    queue.put([payload(i) for i in range(10)])
    assert read_all(queue) == [payload(i) for i in range(10)]
    for n in (0, 1, 2, 3, 4, 6, 9):
        queue.release(b"%010d" % n)
    queue.sync_job()()
    # 5 is the oldest unfinished: the files from its own on stay, and the next start reads from it
    assert sorted(p.name for p in tmp_path.glob("t.diskqueue.0*.dat")) == [
        "t.diskqueue.000001.dat", "t.diskqueue.000002.dat"]
    queue.release_files()  # killed
    again = make(tmp_path, max_bytes=200, holding=True)
    assert again.depth == 5
    assert read_all(again) == [payload(i) for i in range(5, 10)]


def test_a_holding_queue_deletes_files_once_everything_in_them_is_released(tmp_path: Path) -> None:
    queue = make(tmp_path, max_bytes=200, holding=True)
    queue.put([payload(i) for i in range(6)])
    read_all(queue)
    queue.sync_job()()
    assert (tmp_path / "t.diskqueue.000000.dat").exists()
    for n in range(6):
        queue.release(b"%010d" % n)
    queue.sync_job()()
    assert not (tmp_path / "t.diskqueue.000000.dat").exists()
    assert (tmp_path / "t.diskqueue.meta.dat").read_text() == "0\n1,88\n1,88\n"


def test_a_record_read_again_holds_its_message_in_place_of_the_older_copy(tmp_path: Path) -> None:
    queue = make(tmp_path, holding=True)
    queue.put([payload(0), payload(1)])
    read_all(queue)
    queue.put([payload(0)])  # message 0 requeued: written again
    assert read_all(queue) == [payload(0)]
    queue.release(b"%010d" % 1)
    queue.sync_job()()
    # message 0's newer copy is what a restart must find: it starts after the older one
    assert (tmp_path / "t.diskqueue.meta.dat").read_text() == "1\n0,88\n0,132\n"


def capped(path: Path, max_bytes: int, drop_oldest: bool = False, holding: bool = False) -> DiskQueue:
    queue = DiskQueue("t", path, max_bytes_per_file=200, max_msg_size=1000, sync_every=2500,
                      hold_key=first_ten_bytes if holding else None, max_bytes=max_bytes, drop_oldest=drop_oldest)
    _opened.append(queue)
    return queue


def test_a_capped_queue_refuses_what_would_pass_its_cap_whole(tmp_path: Path) -> None:
    queue = capped(tmp_path, max_bytes=440)  # 44-byte records: 10 fit
    queue.put([payload(n) for n in range(8)])
    with pytest.raises(QueueFull, match=r"queue t is full: 352 of its --max-bytes-per-queue=440 bytes taken"):
        queue.put([payload(n) for n in range(8, 11)])
    queue.put([payload(8)])
    assert queue.depth == 9
    assert queue.read(3) == [payload(0), payload(1), payload(2)]  # reading makes room
    queue.put([payload(n) for n in range(9, 13)])
    assert read_all(queue) == [payload(n) for n in range(3, 13)]


def test_a_restarted_queue_knows_how_full_it_is(tmp_path: Path) -> None:
    queue = capped(tmp_path, max_bytes=440)
    queue.put([payload(n) for n in range(10)])  # across files of 200 bytes
    queue.read(2)
    queue.close()
    again = capped(tmp_path, max_bytes=440)
    again.put([payload(10), payload(11)])
    with pytest.raises(QueueFull):
        again.put([payload(12)])


def test_a_drop_oldest_queue_drops_the_oldest_to_make_room(tmp_path: Path) -> None:
    queue = capped(tmp_path, max_bytes=440, drop_oldest=True)
    queue.put([payload(n) for n in range(10)])
    queue.put([payload(10)])
    assert queue.dropped_count >= 1 and queue.depth == 11 - queue.dropped_count
    kept = read_all(queue)
    assert kept == [payload(n) for n in range(queue.dropped_count, 11)]
    with pytest.raises(QueueFull):  # what the cap could never hold is refused, nothing dropped for it
        queue.put([payload(n) for n in range(11)])


def test_a_holding_queue_drops_without_holding_what_it_dropped(tmp_path: Path) -> None:
    queue = capped(tmp_path, max_bytes=440, drop_oldest=True, holding=True)
    queue.put([payload(n) for n in range(10)])
    in_flight = queue.read(2)
    queue.put([payload(n) for n in range(10, 13)])
    dropped = queue.dropped_count
    assert dropped >= 1
    for message in in_flight:
        queue.release(first_ten_bytes(message))
    queue.close()
    # nothing held: a restart reads on after the dropped ones (had one in flight been held, a restart would read
    # again from it, the dropped ones after it included: at-least-once)
    assert read_all(make(tmp_path, max_bytes=200)) == [payload(n) for n in range(2 + dropped, 13)]


def state(queue: DiskQueue, path: Path) -> tuple[object, ...]:
    """Everything a peek must leave as it was: positions, what is held and unsynced, the files."""
    held = queue._held
    return (astuple(queue._positions), held and dict(held._held), held and held._read_count, queue._unsynced,
            sorted(p.name for p in path.iterdir()))


def test_peeking_shows_what_a_read_would_return_across_files_and_moves_nothing(tmp_path: Path) -> None:
    queue = make(tmp_path, max_bytes=200)  # 44-byte records: 4 a file
    queue.put([payload(i) for i in range(10)])
    assert queue.read(2) == [payload(0), payload(1)]
    before = state(queue, tmp_path)
    assert queue.peek_job(5)() == [payload(i) for i in range(2, 7)]  # from file 0 into file 1
    assert queue.peek_job(100)() == [payload(i) for i in range(2, 10)]
    assert queue.peek_job(0)() == []
    assert state(queue, tmp_path) == before
    assert read_all(queue) == [payload(i) for i in range(2, 10)]
    assert queue.peek_job(10)() == []


def test_a_peek_reads_only_what_was_written_when_it_was_asked(tmp_path: Path) -> None:
    queue = make(tmp_path)
    queue.put([payload(0)])
    job = queue.peek_job(10)
    queue.put([payload(1)])
    assert job() == [payload(0)]


def test_peeking_at_a_holding_queue_shows_no_held_record_and_keeps_them_held(tmp_path: Path) -> None:
    queue = make(tmp_path, max_bytes=200, holding=True)
    queue.put([payload(i) for i in range(6)])
    assert queue.read(3) == [payload(i) for i in range(3)]  # in flight, held
    queue.put([payload(0)])  # 0 requeued: written again at the end
    queue.release(b"%010d" % 0)
    before = state(queue, tmp_path)
    assert queue.peek_job(10)() == [payload(3), payload(4), payload(5), payload(0)]
    assert state(queue, tmp_path) == before
    queue.sync_job()()
    # the restart point is still the oldest held record, 1
    assert (tmp_path / "t.diskqueue.meta.dat").read_text() == "6\n0,44\n1,132\n"


def test_a_peek_skips_a_file_deleted_while_it_waited(tmp_path: Path) -> None:
    queue = make(tmp_path, max_bytes=200)
    queue.put([payload(i) for i in range(10)])
    job = queue.peek_job(100)
    assert queue.read(5) == [payload(i) for i in range(5)]  # file 0 read to its end and deleted
    assert not (tmp_path / "t.diskqueue.000000.dat").exists()
    assert job() == [payload(i) for i in range(4, 10)]


def test_a_peek_skips_what_cannot_be_read_and_renames_nothing(tmp_path: Path) -> None:
    queue = make(tmp_path, max_bytes=200)
    queue.put([payload(i) for i in range(12)])
    middle = tmp_path / "t.diskqueue.000001.dat"
    data = bytearray(middle.read_bytes())
    data[44:48] = struct.pack(">i", 10_000_000)  # the second record's size, out of bounds
    middle.write_bytes(bytes(data))
    assert queue.peek_job(100)() == [payload(i) for i in (0, 1, 2, 3, 4, 8, 9, 10, 11)]  # as a read would
    assert middle.exists() and not middle.with_name(middle.name + ".bad").exists()


def test_a_file_the_metadata_names_that_is_gone_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A file done is deleted before the metadata is written again when the disk has no room for the metadata:
    killed in between, the next start finds the file it names gone and goes on with the next one."""
    queue = make(tmp_path, max_bytes=200, holding=True)  # 44-byte records: 4 a file
    queue.put([payload(i) for i in range(8)])
    read_all(queue)
    queue.sync_job()()  # the metadata names file 0, where the oldest unfinished record is
    for n in range(4):
        queue.release(b"%010d" % n)
    queue.file_path(0).unlink()  # file 0 deleted, then the process killed
    queue.release_files()
    again = make(tmp_path, max_bytes=200, holding=True)
    assert read_all(again) == [payload(i) for i in range(4, 8)]
    assert "t.diskqueue.000000.dat is gone" in caplog.text
    assert not list(tmp_path.glob("*.bad"))
