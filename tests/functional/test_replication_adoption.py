"""A lost origin's messages are taken over by one of its in-sync mirrors: killed (kill -9), every message it
acknowledged and had not seen finished reaches a consumer of a survivor, once (pynsq's too); paused past its
lease, it comes back fenced and drops what was taken over; a mirror that joins late is sent a snapshot and can
take over."""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.etcd import EtcdCluster
from harness.processes import FAST_SCAN, NSQDProcess, start_nsqd, wait_for
from harness.pynsq import PynsqLoop
from harness.wire import WireClient
from nsqclient.protocol.frames import FRAME_TYPE_RESPONSE, Frame
from tests.functional.test_replication import replication

# long enough that the survivors, on a loaded machine, are not counted out too (they would come back as new
# mirrors, sent a snapshot, which these tests do not wait for)
LIVENESS = "--replication-liveness-timeout=4s"


def start_cluster(etcd: EtcdCluster, nsqd_factory: Callable[..., NSQDProcess], *flags: str) -> list[NSQDProcess]:
    nodes = [nsqd_factory(f"--etcd-address={etcd.addresses[0]}", "--replication-address=127.0.0.1:0",
                          "--replication-factor=3", LIVENESS, *flags) for _ in range(3)]
    for nsqd in nodes:
        wait_for(lambda: sum(mirror["in_sync"] for mirror in replication(nsqd)["mirrors"]) == 2, 20,
                 lambda: f"two in-sync mirrors: {replication(nsqd)}")
        wait_for(lambda: len(replication(nsqd)["in_sync_recorded"]) == 2, 10, "the in-sync set in etcd")
    return nodes


def depth(nsqd: NSQDProcess, topic: str, channel: str) -> int:
    return int(nsqd.channel_stats(topic, channel).get("depth", 0))


async def finish(nsqd: NSQDProcess, topic: str, channel: str, count: int) -> list[bytes]:
    consumer = await WireClient.connect(nsqd.tcp_address)
    await consumer.subscribe(topic, channel, rdy=count)
    bodies = []
    for message in await consumer.read_messages(count):
        await consumer.command(b"FIN", message.id)
        bodies.append(message.body)
    await consumer.command(b"CLS")
    # answered after every FIN before it: nsqd has them all (the messages the freed window took meanwhile go back
    # to the channel with the connection)
    while await consumer.read_frame() != Frame(FRAME_TYPE_RESPONSE, b"CLOSE_WAIT"):
        pass
    consumer.writer.close()
    await consumer.writer.wait_closed()
    return bodies


def finished_takeover(etcd: EtcdCluster, origin: NSQDProcess) -> dict[str, Any] | None:
    """``origin``'s record in etcd once its takeover is marked done, which the adopter does after putting the
    messages into its channels (so a moment after they show there)."""
    record: dict[str, Any] = json.loads(etcd.get(f"/nsq/mirrors/127.0.0.1:{origin.tcp_port}") or b"{}")
    return record if record.get("adopted") else None


def test_killed_its_unfinished_messages_are_delivered_by_one_survivor(
        etcd: EtcdCluster, nsqd_factory: Callable[..., NSQDProcess], tmp_path: Path) -> None:
    a, b, c = start_cluster(etcd, nsqd_factory)
    a.http("POST", "/topic/create?topic=orders")
    a.http("POST", "/channel/create?topic=orders&channel=archive")
    # 300 KiB: more than a mirror gathers in memory before it writes its copy's files
    bodies = [b"order %d " % number + b"." * 3000 for number in range(100)]
    a.multi_publish("orders", bodies)
    finished = asyncio.run(finish(a, "orders", "archive", 30))
    wait_for(lambda: all(store["depth"] == 70 for node in (b, c) for store in replication(node)["mirroring"]
                         if store["origin"] == f"127.0.0.1:{a.tcp_port}"), 5, "the finishes on the mirrors")
    copies = [tmp_path / "nsqd1" / "mirrors", tmp_path / "nsqd2" / "mirrors"]  # b's and c's data paths
    for mirrored in copies:  # the copies are on disk
        (copy,) = mirrored.glob(f"127.0.0.1_{a.tcp_port}-*")
        assert b"order 0 " in b"".join(segment.read_bytes() for segment in copy.iterdir())
    a.process.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    wait_for(lambda: depth(b, "orders", "archive") + depth(c, "orders", "archive") == 70, 20,
             "the 70 unfinished messages on a survivor")
    failover = time.monotonic() - killed_at
    assert failover < 4 + 5, failover
    adopter, other = (b, c) if depth(b, "orders", "archive") == 70 else (c, b)
    assert depth(other, "orders", "archive") == 0  # taken over once, not twice
    record = wait_for(lambda: finished_takeover(etcd, a), 5, "the takeover marked done")
    assert record["adopted_by"] == f"127.0.0.1:{adopter.tcp_port}"
    assert (replication(adopter)["adopted_origins"], replication(adopter)["adopted_messages"]) == (1, 70)
    delivered = asyncio.run(finish(adopter, "orders", "archive", 70))
    assert sorted(delivered) == sorted(set(bodies) - set(finished))
    # the adopter's own mirrors hold them now, and the other mirror dropped its copy
    wait_for(lambda: all(store["origin"] != f"127.0.0.1:{a.tcp_port}" for store in replication(other)["mirroring"]),
             5, "the other copy dropped")
    for mirrored in copies:
        wait_for(lambda: not list(mirrored.glob(f"127.0.0.1_{a.tcp_port}-*")), 5, "the copy's files deleted")


def test_paused_past_its_lease_it_comes_back_fenced_and_drops_what_was_taken_over(
        etcd: EtcdCluster, nsqd_factory: Callable[..., NSQDProcess]) -> None:
    a, b, c = start_cluster(etcd, nsqd_factory)
    a.http("POST", "/topic/create?topic=orders")
    a.http("POST", "/channel/create?topic=orders&channel=archive")
    a.multi_publish("orders", [b"order %d" % number for number in range(10)])
    a.process.send_signal(signal.SIGSTOP)
    try:
        wait_for(lambda: depth(b, "orders", "archive") + depth(c, "orders", "archive") == 10, 20,
                 "the messages on a survivor")
    finally:
        a.process.send_signal(signal.SIGCONT)
    wait_for(lambda: depth(a, "orders", "archive") == 0, 15, "a dropping what was taken over")
    wait_for(lambda: sum(mirror["in_sync"] for mirror in replication(a)["mirrors"]) == 2, 20, "a mirrored again")
    a.publish("orders", b"a new epoch")
    assert depth(a, "orders", "archive") == 1


def test_pynsq_producer_and_consumers_across_a_failover(etcd: EtcdCluster,
                                                        nsqd_factory: Callable[..., NSQDProcess]) -> None:
    """NSQ's own Python client, unchanged: what its Writer had acknowledged by the nsqd that is killed reaches its
    Reader on the survivors."""
    a, b, c = start_cluster(etcd, nsqd_factory)
    assert a.http("POST", "/topic/create?topic=orders")[0] == 200
    assert a.http("POST", "/channel/create?topic=orders&channel=archive")[0] == 200
    pynsq = PynsqLoop()
    pynsq.start()
    try:
        writer = pynsq.writer(a.tcp_address)
        bodies = [b"order %d" % number for number in range(50)]
        for body in bodies:
            writer.pub("orders", body)  # each answered OK: both mirrors hold it
        reader = pynsq.reader([b.tcp_address, c.tcp_address], "orders", "archive", max_in_flight=100)
        a.process.send_signal(signal.SIGKILL)
        received = reader.inbox.wait_count(50, timeout=20)
        assert sorted(message.body for message in received) == sorted(bodies)
        time.sleep(0.5)
        assert len(reader.inbox.messages) == 50  # taken over once
        # pynsq saw the Writer's nsqd go (what NSQ's clients see when an nsqd dies), and nothing else went wrong
        problems = pynsq.take_problems()
        assert all("127.0.0.1:%d" % a.tcp_port in problem or "closed" in problem.lower()
                   for problem in problems), problems
    finally:
        pynsq.stop()


def mirrored(nsqd: NSQDProcess, origin: NSQDProcess) -> int:
    for store in replication(nsqd)["mirroring"]:
        if store["origin"] == f"127.0.0.1:{origin.tcp_port}":
            return int(store["depth"])
    return -1


def test_a_mirror_that_joins_late_is_sent_a_snapshot_and_can_take_over(
        etcd: EtcdCluster, nsqd_factory: Callable[..., NSQDProcess]) -> None:
    a, b, c = start_cluster(etcd, nsqd_factory)
    assert a.http("POST", "/topic/create?topic=orders")[0] == 200
    assert a.http("POST", "/channel/create?topic=orders&channel=archive")[0] == 200
    bodies = [b"order %d" % number for number in range(50)]
    a.multi_publish("orders", bodies)
    a.publish("unread", b"held by a topic without channels")
    assert a.http("POST", "/pub?topic=orders&defer=600000", b"deferred ten minutes")[0] == 200
    b.process.send_signal(signal.SIGKILL)  # its copies are gone
    d = nsqd_factory(f"--etcd-address={etcd.addresses[0]}", "--replication-address=127.0.0.1:0",
                     "--replication-factor=3", LIVENESS)
    # a mirrors on c and d now: d joined with nothing, and is sent everything a has outstanding
    wait_for(lambda: mirrored(d, a) == 52, 20, lambda: f"a's snapshot on d: {replication(d)}")
    wait_for(lambda: sorted(replication(a)["in_sync_recorded"]) == sorted(f"127.0.0.1:{n.tcp_port}" for n in (c, d)),
             20, lambda: f"d in a's recorded in-sync set: {replication(a)}")
    a.process.send_signal(signal.SIGKILL)
    wait_for(lambda: depth(c, "orders", "archive") + depth(d, "orders", "archive") == 50, 20,
             "a's messages on a survivor")
    adopter = c if depth(c, "orders", "archive") == 50 else d
    assert adopter.channel_stats("orders", "archive")["deferred_count"] == 1  # it waits its ten minutes there
    delivered = asyncio.run(finish(adopter, "orders", "archive", 50))
    assert sorted(delivered) == sorted(bodies)
    assert json.loads(adopter.http("GET", "/stats?format=json&topic=unread")[2])["topics"][0]["depth"] == 1


def test_a_snapshot_reads_what_the_origin_holds_on_disk(etcd: EtcdCluster,
                                                       nsqd_factory: Callable[..., NSQDProcess]) -> None:
    """Every message through the disk queues: a mirror that joins late is sent them all (read on a thread)."""
    a, b, c = start_cluster(etcd, nsqd_factory, "--mem-queue-size=0")
    assert a.http("POST", "/topic/create?topic=orders")[0] == 200
    assert a.http("POST", "/channel/create?topic=orders&channel=archive")[0] == 200
    a.multi_publish("orders", [b"order %d" % number for number in range(300)])
    assert a.channel_stats("orders", "archive")["backend_depth"] == 300
    b.process.send_signal(signal.SIGKILL)
    d = nsqd_factory(f"--etcd-address={etcd.addresses[0]}", "--replication-address=127.0.0.1:0",
                     "--replication-factor=3", LIVENESS, "--mem-queue-size=0")
    wait_for(lambda: mirrored(d, a) == 300, 20, lambda: f"a's snapshot on d: {replication(d)}")
    a.publish("orders", b"after the snapshot")
    wait_for(lambda: mirrored(d, a) == 301, 5, "the record after the snapshot on d")


async def take_and_let_time_out(nsqd: NSQDProcess) -> int:
    """Receives the channel's one message and does nothing with it; its attempts."""
    consumer = await WireClient.connect(nsqd.tcp_address)
    await consumer.subscribe("orders", "archive", rdy=1)
    message = await consumer.read_message()
    await consumer.command(b"RDY", b"0")
    await asyncio.sleep(1.5)  # past --msg-timeout: back in the channel
    await consumer.close()
    return int(message.attempts)


def test_a_message_that_timed_out_keeps_its_attempts_on_the_survivor(
        etcd: EtcdCluster, nsqd_factory: Callable[..., NSQDProcess]) -> None:
    a, b, c = start_cluster(etcd, nsqd_factory, "--msg-timeout=1s")
    assert a.http("POST", "/topic/create?topic=orders")[0] == 200
    assert a.http("POST", "/channel/create?topic=orders&channel=archive")[0] == 200
    a.publish("orders", b"slow")
    assert asyncio.run(take_and_let_time_out(a)) == 1
    wait_for(lambda: a.channel_stats("orders", "archive")["timeout_count"] == 1, 5, "the timeout on a")
    a.process.send_signal(signal.SIGKILL)
    wait_for(lambda: depth(b, "orders", "archive") + depth(c, "orders", "archive") == 1, 20, "a's message taken over")
    adopter = b if depth(b, "orders", "archive") == 1 else c
    assert asyncio.run(take_and_let_time_out(adopter)) == 2  # its first delivery counted


def restart(nsqd: NSQDProcess, data_path: Path, *args: str) -> NSQDProcess:
    """``nsqd`` started again under the same address (the same node of the cluster), on ``data_path``."""
    return start_nsqd(*FAST_SCAN, f"--tcp-address=127.0.0.1:{nsqd.tcp_port}",
                      f"--http-address=127.0.0.1:{nsqd.http_port}", *args, data_path=data_path)


def test_killed_and_started_again_at_once_what_it_held_in_memory_is_taken_over(
        etcd: EtcdCluster, nsqd_factory: Callable[..., NSQDProcess], tmp_path: Path) -> None:
    """Restarted by its supervisor before its lease ran out: the new process ends the old one's registration and
    registers only once a mirror took over the messages the old one acknowledged (they were in memory only)."""
    a, b, c = start_cluster(etcd, nsqd_factory)
    assert a.http("POST", "/topic/create?topic=orders")[0] == 200
    assert a.http("POST", "/channel/create?topic=orders&channel=archive")[0] == 200
    bodies = [b"order %d" % number for number in range(40)]
    a.multi_publish("orders", bodies)
    a.process.send_signal(signal.SIGKILL)
    a.process.wait()
    again = restart(a, tmp_path / "nsqd0", f"--etcd-address={etcd.addresses[0]}", "--replication-address=127.0.0.1:0",
                    "--replication-factor=3", LIVENESS)
    try:
        wait_for(lambda: depth(b, "orders", "archive") + depth(c, "orders", "archive") == 40, 15,
                 "a's messages on a survivor")
        adopter = b if depth(b, "orders", "archive") == 40 else c
        assert sorted(asyncio.run(finish(adopter, "orders", "archive", 40))) == sorted(bodies)
        # registered again once they were taken over, and acknowledging publishes
        wait_for(lambda: len(replication(again)["in_sync_recorded"]) == 2, 20, "a mirrored again")
        again.publish("orders", b"after the restart")  # answered OK: both mirrors hold it
    finally:
        again.stop()


async def give_back_and_park(nsqd: NSQDProcess) -> dict[str, bytes]:
    """Of three messages: one given back for ten minutes (REQ), one given back until the channel's limit of 2
    attempts parks it in the dead letters, one finished; their bodies by fate."""
    consumer = await WireClient.connect(nsqd.tcp_address)
    await consumer.subscribe("orders", "archive", rdy=3)
    deferred, parked, finished = await consumer.read_messages(3)
    await consumer.command(b"REQ", deferred.id, b"600000")
    await consumer.command(b"FIN", finished.id)
    await consumer.command(b"REQ", parked.id, b"0")
    again = await consumer.read_message()  # its second attempt; given back once more, it is parked
    assert again.body == parked.body
    await consumer.command(b"REQ", again.id, b"0")
    await consumer.close()
    return {"deferred": deferred.body, "parked": parked.body, "finished": finished.body}


def test_what_consumers_did_reaches_the_mirrors_and_survives_with_the_messages(
        etcd: EtcdCluster, nsqd_factory: Callable[..., NSQDProcess]) -> None:
    a, b, c = start_cluster(etcd, nsqd_factory)
    assert a.http("POST", "/topic/create?topic=orders")[0] == 200
    assert a.http("POST", "/channel/create?topic=orders&channel=archive")[0] == 200
    assert a.http("POST", "/channel/dead_letter?topic=orders&channel=archive&attempts=2")[0] == 200
    a.multi_publish("orders", [b"first", b"second", b"third"])
    fates = asyncio.run(give_back_and_park(a))
    wait_for(lambda: a.channel_stats("orders", "archive").get("dead_letter_depth") == 1, 5, "one parked on a")
    wait_for(lambda: mirrored(b, a) == 2 and mirrored(c, a) == 2, 5, "the mirrors: one deferred, one parked")
    a.process.send_signal(signal.SIGKILL)
    wait_for(lambda: any(node.channel_stats("orders", "archive").get("deferred_count") == 1 for node in (b, c)), 20,
             "a's messages on a survivor")
    adopter = b if b.channel_stats("orders", "archive").get("deferred_count") == 1 else c
    stats = adopter.channel_stats("orders", "archive")
    # the message given back waits its ten minutes there, the parked one is a dead letter, the finished one is gone
    assert (stats["depth"], stats["deferred_count"], stats["dead_letter_depth"]) == (0, 1, 1), stats
    status, _, peeked = adopter.http("GET", "/channel/peek?topic=orders&channel=archive&queue=dead&n=5")
    assert status == 200
    assert [(base64.b64decode(message["body"]), message["attempts"]) for message in json.loads(peeked)["messages"]] \
        == [(fates["parked"], 2)]
