"""A disk that fills up, for real: nsqd's (or nsqadmin's) --data-path on a tmpfs of a few MB. Publishes are refused
with NSQ's errors before they are acknowledged, nothing acknowledged is lost or corrupted, consumers drain, and once
space is freed publishing (and nsqd.dat, and the admin's history) works again without a restart. Needs root (to
mount the tmpfs); skipped elsewhere."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.full_disk import (
    BATCH,
    BODY_SIZE,
    DISK_MB,
    NSQD_FLAGS,
    body,
    drain,
    fill,
    full_disk_round,
    publish_until_refused,
    take,
    tmpfs,
    unavailable,
)
from harness.processes import FAST_SCAN, NSQDProcess, start_admin, start_nsqd, wait_for
from harness.wire import WireClient
from services.nsqd.disk_queue import ROLL_DRAINED_AT, DiskQueue


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    with tmpfs(tmp_path / "disk", DISK_MB) as disk:
        yield disk


@pytest.mark.parametrize("mem_queue_size", [0, 2000])
async def test_a_full_disk_refuses_publishes_loses_nothing_and_recovers(small_disk: Path,
                                                                        mem_queue_size: int) -> None:
    nsqd = start_nsqd(*NSQD_FLAGS, f"--mem-queue-size={mem_queue_size}", data_path=small_disk)
    try:
        assert nsqd.http("POST", "/topic/create?topic=t")[0] == 200
        assert nsqd.http("POST", "/channel/create?topic=t&channel=c")[0] == 200
        consumer = await WireClient.connect(nsqd.tcp_address)
        await consumer.subscribe("t", "c", rdy=0)  # subscribed, taking nothing: everything waits in the channel

        acknowledged, refusal = await publish_until_refused(nsqd)
        assert refusal.startswith(b"E_MPUB_FAILED MPUB failed ")
        assert len(acknowledged) >= (DISK_MB - 1) * 1024 * 1024 // (BODY_SIZE + 30)  # the disk was used
        for n in range(len(acknowledged), len(acknowledged) + 100):  # what room is left takes smaller publishes
            status, _, answer = nsqd.http("POST", "/pub?topic=t", body(b"%d" % n))
            if status != 200:
                break
            acknowledged.append(body(b"%d" % n))
        assert (status, answer) == (500, b'{"message":"INTERNAL_ERROR"}')
        status, _, answer = nsqd.http("GET", "/ping")
        assert status == 500 and answer.startswith(b"NOK - failed to write messages to t:c - ")

        received = await drain(consumer, set(acknowledged))
        assert set(received) == set(acknowledged)  # nothing lost, nothing corrupted, nothing refused got in
        assert sum(received.values()) == len(acknowledged)  # and no duplicate
        print(f"--mem-queue-size={mem_queue_size}: {len(acknowledged)} acknowledged before the disk refused, "
              f"{len(received)} received, 0 lost, 0 duplicated")

        # reading freed the disk: publishing works again, without a restart, and nsqd is healthy again
        assert nsqd.http("POST", "/pub?topic=t", b"after")[0] == 200
        assert nsqd.http("GET", "/ping")[::2] == (200, b"OK")
        assert (await consumer.read_message()).body == b"after"
        await consumer.close()
    finally:
        nsqd.stop()


@pytest.mark.parametrize("mem_queue_size", [0, None])
async def test_producers_on_every_route_ride_out_a_disk_filled_and_freed_again(small_disk: Path,
                                                                              mem_queue_size: int | None) -> None:
    """A short round of bench/full_disk.py: PUB, MPUB, /pub and /mpub all along, the disk full and freed twice
    (at --mem-queue-size=0 and at nsqd's default)."""
    result = await full_disk_round(small_disk, mem_queue_size, takes=[1200, 2000])
    assert set(result.refusals) == {"PUB E_PUB_FAILED", "MPUB E_MPUB_FAILED", "/pub HTTP 500 INTERNAL_ERROR",
                                    "/mpub HTTP 500 INTERNAL_ERROR"}
    assert result.acknowledged > 5000 and result.received == result.acknowledged
    assert (result.lost, result.duplicated, result.corrupted, result.refused_yet_delivered) == (0, 0, 0, 0)
    assert len(result.publish_recovered) == len(result.ping_recovered) == 2
    assert result.recovered_at_end and result.nsqd_running


def test_a_write_cut_short_by_the_full_disk_leaves_nothing_behind(small_disk: Path) -> None:
    """A record the disk took only part of is cut back, and the next write starts where it started: no hole, no
    torn record, once space is freed."""
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (1024 * 1024))
    queue = DiskQueue("q", small_disk, max_bytes_per_file=100 * 1024 * 1024, max_msg_size=1 << 20, sync_every=1)
    payloads = [(b"%08d" % n).ljust(100 * 1024, b"p") for n in range(100)]
    taken = []
    with pytest.raises(OSError):
        for payload in payloads:
            queue.put([payload])
            taken.append(payload)
    filler.unlink()  # space again
    queue.put([b"after".ljust(100, b"a")])
    assert queue.read(len(payloads) + 1) == [*taken, b"after".ljust(100, b"a")]
    queue.close()


def test_a_batch_the_full_disk_takes_part_of_leaves_none_of_it_behind(small_disk: Path) -> None:
    """A batch that passes the end of its file: the first records fit in the room the last page of the file has
    left, then the next file (or the metadata written at the roll) finds no space. None of the batch stays: a
    publish the disk refused is refused whole."""
    queue = DiskQueue("q", small_disk, max_bytes_per_file=4096, max_msg_size=1 << 20, sync_every=1)
    first = body(b"first", 1000)
    queue.put([first])
    filler = fill(small_disk)
    with pytest.raises(OSError):
        queue.put([body(b"%d" % n, 1000) for n in range(20)])
    assert queue.depth == 1
    filler.unlink()
    queue.put([body(b"after", 1000)])
    queue.close()
    restarted = DiskQueue("q", small_disk, max_bytes_per_file=4096, max_msg_size=1 << 20, sync_every=1)
    assert restarted.read(30) == [first, body(b"after", 1000)]
    restarted.close()


def filled_inside_one_file(queue: DiskQueue) -> list[bytes]:
    """What ``queue`` took, in 100 KiB records, before the disk refused one."""
    taken: list[bytes] = []
    with pytest.raises(OSError):
        for n in range(1000):
            payload = (b"%016d" % n).ljust(100 * 1024, b"p")
            queue.put([payload])
            taken.append(payload)
    return taken


def queue_files(disk: Path) -> list[str]:
    return sorted(path.name for path in disk.glob("q.diskqueue.0*.dat"))


def test_a_disk_filled_inside_one_file_gets_its_space_back_once_the_file_is_read(small_disk: Path) -> None:
    """Under the default --max-bytes-per-file (100 MB) a small disk fills inside the queue's first file. Once all of
    it is read, the next put goes to a new file and the one read is deleted (NSQ writes on in it: the disk stays
    full for good)."""
    queue = DiskQueue("q", small_disk, max_bytes_per_file=100 * 1024 * 1024, max_msg_size=1 << 20, sync_every=1)
    taken = filled_inside_one_file(queue)
    assert len(taken) >= (DISK_MB - 1) * 10 and len(queue_files(small_disk)) == 1
    first_file = queue_files(small_disk)
    assert queue.read(len(taken)) == taken
    after = [body(b"after%d" % n, 100 * 1024) for n in range(len(taken) - 2)]  # about as much again
    for payload in after:
        queue.put([payload])
    assert queue_files(small_disk) != first_file and len(queue_files(small_disk)) == 1
    queue.close()
    restarted = DiskQueue("q", small_disk, max_bytes_per_file=100 * 1024 * 1024, max_msg_size=1 << 20,
                          sync_every=1)
    assert restarted.read(len(after) + 1) == after
    restarted.close()


def test_no_write_goes_to_a_new_file_before_the_metadata_names_it(small_disk: Path) -> None:
    """The full disk makes the queue start a new file, but its metadata cannot be written (here: a directory where
    the file goes). Puts are refused until it can be, so that a restart finds every record it acknowledged."""
    queue = DiskQueue("q", small_disk, max_bytes_per_file=100 * 1024 * 1024, max_msg_size=1 << 20, sync_every=1)
    taken = filled_inside_one_file(queue)
    assert queue.read(len(taken)) == taken
    queue.meta_path.unlink(missing_ok=True)
    queue.meta_path.mkdir()
    for _ in range(2):  # the roll, then a put into the new file: both refused
        with pytest.raises(OSError):
            queue.put([body(b"refused", 100 * 1024)])
    queue.meta_path.rmdir()
    queue.put([body(b"after", 100 * 1024)])
    queue.close()
    restarted = DiskQueue("q", small_disk, max_bytes_per_file=100 * 1024 * 1024, max_msg_size=1 << 20,
                          sync_every=1)
    assert restarted.read(len(taken)) == [body(b"after", 100 * 1024)]
    restarted.close()


def test_a_full_file_read_at_mem_queue_size_0_is_freed_once_its_messages_are_finished(small_disk: Path) -> None:
    """What is read and held (in flight) cannot go: puts are refused until it is finished, then the file goes."""
    queue = DiskQueue("q", small_disk, max_bytes_per_file=100 * 1024 * 1024, max_msg_size=1 << 20, sync_every=1,
                      hold_key=lambda payload: payload[:16])
    taken = filled_inside_one_file(queue)
    assert queue.read(len(taken)) == taken
    with pytest.raises(OSError):
        queue.put([body(b"refused", 100 * 1024)])
    for payload in taken:
        queue.release(payload[:16])
    queue.sync_job()()  # nsqd's next sync
    queue.put([body(b"after", 100 * 1024)])
    queue.close()
    restarted = DiskQueue("q", small_disk, max_bytes_per_file=100 * 1024 * 1024, max_msg_size=1 << 20,
                          sync_every=1, hold_key=lambda payload: payload[:16])
    assert restarted.read(len(taken)) == [body(b"after", 100 * 1024)]
    restarted.close()


async def filled_then_drained(nsqd: NSQDProcess) -> WireClient:
    """t/c's consumer, once the producer filled the disk (publishes refused, /ping unhealthy) and the consumer
    finished every message acknowledged."""
    assert nsqd.http("POST", "/topic/create?topic=t")[0] == 200
    assert nsqd.http("POST", "/channel/create?topic=t&channel=c")[0] == 200
    consumer = await WireClient.connect(nsqd.tcp_address)
    await consumer.subscribe("t", "c", rdy=0)
    acknowledged, _ = await publish_until_refused(nsqd)
    assert nsqd.http("GET", "/ping")[0] == 500
    assert sum((await drain(consumer, set(acknowledged))).values()) == len(acknowledged)
    return consumer


async def test_an_nsqd_whose_disk_filled_inside_one_file_publishes_again_once_it_is_consumed(
        small_disk: Path) -> None:
    """The default --max-bytes-per-file (100 MB) on a 6 MB disk, every message through it (--mem-queue-size=0):
    once a consumer has finished everything, a publish is taken again and /ping says OK, without a restart."""
    nsqd = start_nsqd(*FAST_SCAN, "--sync-every=1", "--mem-queue-size=0", data_path=small_disk)
    try:
        consumer = await filled_then_drained(nsqd)
        after = [body(b"after%d" % n) for n in range(BATCH)]
        wait_for(lambda: nsqd.http("POST", "/mpub?topic=t", b"\n".join(after))[0] == 200,
                 what="a publish accepted again")
        assert nsqd.http("GET", "/ping")[::2] == (200, b"OK")
        assert set(await drain(consumer, set(after))) == set(after)
        await consumer.close()
    finally:
        nsqd.stop()


def test_a_file_read_and_finished_gives_its_space_back_at_the_next_sync(small_disk: Path) -> None:
    """No put needed: once the disk refused one, the next sync after the write file is read and finished starts a
    new file and deletes the one read; past ``ROLL_DRAINED_AT`` it does so though the disk never filled."""
    queue = DiskQueue("q", small_disk, max_bytes_per_file=100 * 1024 * 1024, max_msg_size=1 << 20, sync_every=1,
                      hold_key=lambda payload: payload[:16])
    taken = filled_inside_one_file(queue)
    assert queue.read(len(taken)) == taken
    queue.sync_job()()
    assert len(queue_files(small_disk)) == 1  # in flight: kept
    for payload in taken:
        queue.release(payload[:16])
    queue.sync_job()()  # nsqd's next sync
    assert queue_files(small_disk) == []
    queue.put([body(b"after", 100 * 1024)])
    roomy = DiskQueue("r", small_disk, max_bytes_per_file=100 * 1024 * 1024, max_msg_size=1 << 20, sync_every=1)
    small = [body(b"%d" % n, 1000) for n in range(ROLL_DRAINED_AT // 1000 // 2)]
    roomy.put(small)
    assert roomy.read(len(small)) == small
    roomy.sync_job()()
    assert len(list(small_disk.glob("r.diskqueue.0*.dat"))) == 1  # under the threshold: a file per message never
    roomy.put(small * 2)
    assert len(roomy.read(len(small) * 2)) == len(small) * 2
    roomy.sync_job()()
    assert list(small_disk.glob("r.diskqueue.0*.dat")) == []
    for opened in (queue, roomy):
        opened.close()
    restarted = DiskQueue("q", small_disk, max_bytes_per_file=100 * 1024 * 1024, max_msg_size=1 << 20,
                          sync_every=1, hold_key=lambda payload: payload[:16])
    assert restarted.read(len(taken)) == [body(b"after", 100 * 1024)]
    restarted.close()


async def test_an_nsqd_at_nsqs_defaults_gives_a_full_disk_back_once_its_consumer_finished(small_disk: Path) -> None:
    """NSQ's default --max-bytes-per-file (100 MB), --sync-every and --sync-timeout on a 6 MB disk, every message
    through it (--mem-queue-size=0): once a consumer has finished everything the disk took, the file goes and /ping
    says OK again, with no publish and no restart."""
    nsqd = start_nsqd("--mem-queue-size=0", data_path=small_disk)
    try:
        consumer = await filled_then_drained(nsqd)
        wait_for(lambda: not list(small_disk.glob("t:c.diskqueue.0*.dat")), what="the file read deleted")
        wait_for(lambda: nsqd.http("GET", "/ping")[::2] == (200, b"OK"), what="/ping OK")
        await consumer.close()
    finally:
        nsqd.stop()


async def test_finishing_what_a_consumer_held_frees_a_full_disk(small_disk: Path) -> None:
    """At --mem-queue-size=0 a segment read while its messages were in flight is deleted once they are finished,
    at the next sync. On a full disk that sync cannot write the metadata first: the segment goes all the same,
    and publishing works again."""
    nsqd = start_nsqd(*NSQD_FLAGS, "--mem-queue-size=0", data_path=small_disk)
    try:
        assert nsqd.http("POST", "/topic/create?topic=t")[0] == 200
        consumer = await WireClient.connect(nsqd.tcp_address)
        await consumer.subscribe("t", "c", rdy=0)
        acknowledged, _ = await publish_until_refused(nsqd)
        fill(small_disk)  # the last pages too, as producers that keep trying take them
        taken = await take(consumer, 1500)  # all in flight at once, then all finished: more than a segment
        assert taken == acknowledged[:1500]
        after = [body(b"after%d" % n) for n in range(BATCH)]  # more than the room the last pages have left
        wait_for(lambda: nsqd.http("POST", "/mpub?topic=t", b"\n".join(after))[0] == 200,
                 what="a publish accepted again")
        assert nsqd.http("GET", "/ping")[::2] == (200, b"OK")
        received = await drain(consumer, {*acknowledged[1500:], *after})
        assert sorted(received.elements()) == sorted([*acknowledged[1500:], *after])
        await consumer.close()
    finally:
        nsqd.stop()


async def test_nsqd_stops_cleanly_on_a_full_disk_and_keeps_what_it_acknowledged(small_disk: Path) -> None:
    """Stopping on a full disk: the metadata nsqd cannot write is logged, as NSQ does, and it exits 0. Restarted
    once there is room for nsqd.dat (NSQ, too, will not start without), it delivers everything it acknowledged."""
    flags = (*NSQD_FLAGS, "--mem-queue-size=0")
    reserve = small_disk / "reserve"
    reserve.write_bytes(b"\0" * 65536)
    nsqd = start_nsqd(*flags, data_path=small_disk)
    try:
        assert nsqd.http("POST", "/topic/create?topic=t")[0] == 200
        assert nsqd.http("POST", "/channel/create?topic=t&channel=c")[0] == 200
        acknowledged, _ = await publish_until_refused(nsqd)
        fill(small_disk)
    finally:
        exit_code = nsqd.stop()
    assert exit_code == 0, "\n".join(nsqd.log_lines[-5:])
    assert any("failed to persist metadata" in line for line in nsqd.log_lines)
    assert nsqd.log_lines[-1].endswith("NSQ: bye")
    reserve.unlink()
    restarted = start_nsqd(*flags, data_path=small_disk)
    try:
        consumer = await WireClient.connect(restarted.tcp_address)
        await consumer.subscribe("t", "c", rdy=0)
        received = await drain(consumer, set(acknowledged))
        assert sorted(received.elements()) == sorted(acknowledged)
        await consumer.close()
    finally:
        restarted.stop()


def test_metadata_the_full_disk_refused_is_written_once_there_is_room(small_disk: Path) -> None:
    nsqd = start_nsqd(*FAST_SCAN, data_path=small_disk)
    try:
        filler = fill(small_disk)
        assert nsqd.http("POST", "/topic/create?topic=late")[0] == 200
        wait_for(lambda: nsqd.http("GET", "/ping")[0] == 500, what="nsqd reporting the refused nsqd.dat write")
        assert b"failed to persist metadata" in nsqd.http("GET", "/ping")[2]
        filler.unlink()
        wait_for(lambda: b'"late"' in (small_disk / "nsqd.dat").read_bytes(), timeout=5,
                 what="nsqd.dat naming the topic once there is room")
    finally:
        nsqd.stop(signal.SIGKILL)
    restarted = start_nsqd(*FAST_SCAN, data_path=small_disk)
    try:
        topics = json.loads(restarted.http("GET", "/stats?format=json")[2])["topics"]
        assert [topic["topic_name"] for topic in topics] == ["late"]
    finally:
        restarted.stop()


def test_the_admin_rides_out_a_full_disk(small_disk: Path, tmp_path: Path) -> None:
    """nsqadmin's history and audit log (SQLite) on the full disk: pages and actions keep working, history goes
    on once there is room."""
    nsqd = start_nsqd(*FAST_SCAN, data_path=tmp_path)
    admin = start_admin(f"--nsqd-http-address=127.0.0.1:{nsqd.http_port}", "--history-interval=200ms",
                        data_path=small_disk)

    def last_count() -> int | None:
        samples = json.loads(admin.http("GET", "/api/history/h")[2])["samples"]
        return samples[-1]["message_count"] if samples else None

    try:
        assert nsqd.http("POST", "/pub?topic=h", b"one")[0] == 200
        wait_for(lambda: last_count() == 1, what="a first history sample")
        filler = fill(small_disk)
        assert nsqd.http("POST", "/pub?topic=h", b"two")[0] == 200
        wait_for(lambda: any("history sample failed" in line for line in admin.log_lines),
                 what="a sample the disk refuses")
        assert last_count() == 1
        assert admin.http("GET", "/topics/h")[0] == 200
        status, _, answer = admin.http("POST", "/api/topics/h", b'{"action": "pause"}',
                                       headers={"Content-Type": "application/json"})
        assert status == 200, answer  # the action is done, though the audit log could not keep it
        assert json.loads(nsqd.http("GET", "/stats?format=json&topic=h")[2])["topics"][0]["paused"]
        filler.unlink()
        wait_for(lambda: last_count() == 2, what="history sampled again once there is room")
    finally:
        admin.stop()
        nsqd.stop()


async def test_retained_messages_give_way_to_publishes_on_a_full_disk(small_disk: Path) -> None:
    """Retention never refuses a publish: what a topic retains goes, oldest first, when the disk fills, first while
    a consumer keeps the channel empty (only the retention files grow), then for the channel's own queue."""
    nsqd = start_nsqd(*NSQD_FLAGS, "--mem-queue-size=0", "--retention-time=1h", data_path=small_disk)
    try:
        assert nsqd.http("POST", "/topic/create?topic=t")[0] == 200
        assert nsqd.http("POST", "/channel/create?topic=t&channel=c")[0] == 200
        consumer = await WireClient.connect(nsqd.tcp_address)
        try:
            await give_way(nsqd, consumer)
        finally:
            await consumer.close()
    finally:
        nsqd.stop()


async def give_way(nsqd: NSQDProcess, consumer: WireClient) -> None:
    """First while the consumer keeps the channel empty, then while the channel keeps everything."""
    await consumer.subscribe("t", "c", rdy=0)
    # twice what the disk holds, consumed as it comes: every publish is taken, the oldest retained go
    total = 2 * DISK_MB * 1024 * 1024 // BODY_SIZE
    for first in range(0, total, BATCH):
        bodies = [body(b"%d" % n) for n in range(first, first + BATCH)]
        assert nsqd.http("POST", "/mpub?topic=t", b"\n".join(bodies))[0] == 200
        assert len(await take(consumer, BATCH)) == BATCH
    stats = json.loads(nsqd.http("GET", "/stats?format=json&topic=t")[2])["topics"][0]
    assert 0 < stats["retained_count"] < total and stats["retention_refused_count"] == 0
    assert stats["retained_oldest_timestamp"] > 0
    retained_before = stats["retained_count"]
    print(f"retained {retained_before} of {total} published on a {DISK_MB} MB disk")

    # now the channel keeps everything: its queue takes the room the retention files had
    acknowledged, refusal = await publish_until_refused(nsqd)
    assert refusal.startswith(b"E_MPUB_FAILED MPUB failed ")
    assert len(acknowledged) * (BODY_SIZE + 30) > retained_before * (BODY_SIZE + 36) // 2
    stats = json.loads(nsqd.http("GET", "/stats?format=json&topic=t")[2])["topics"][0]
    assert stats["retained_count"] < retained_before // 4
    print(f"then {len(acknowledged)} acknowledged in the channel, {stats['retained_count']} still retained")
    received = await drain(consumer, set(acknowledged))
    assert set(received) == set(acknowledged) and sum(received.values()) == len(acknowledged)
