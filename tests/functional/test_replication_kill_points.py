"""kill -9 at the worst moments of replication (harness.kill_points: strace kills the process on a chosen system call,
which then never runs): the origin after its own write of an MPUB and before every mirror acknowledged it, the origin
in the middle of recording a run of FINs, and a mirror as it acknowledges a record it applied. Three nsqd at
--replication-factor=3 on loopback, every message through the disk (--mem-queue-size=0). In each, every acknowledged
message is delivered by the survivor that takes the origin over, nothing it delivers was never published, and
nothing is delivered more often than at-least-once allows."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Callable

import pytest

from harness.etcd import EtcdCluster
from harness.full_disk import drain
from harness.kill_points import KillPoint, local_port_to, socket_to
from harness.processes import NSQDProcess, wait_for
from harness.wire import WireClient
from nsqclient.protocol.frames import FRAME_TYPE_RESPONSE, encode_mpub
from tests.functional.test_replication import replication, start_cluster
from tests.functional.test_replication_adoption import finished_takeover

TOPIC, CHANNEL = "orders", "archive"


def three_nodes(etcd: EtcdCluster, nsqd_factory: Callable[..., NSQDProcess]) -> list[NSQDProcess]:
    nodes = start_cluster(etcd, nsqd_factory, "--mem-queue-size=0", "--replication-liveness-timeout=4s")
    for path in (f"/topic/create?topic={TOPIC}", f"/channel/create?topic={TOPIC}&channel={CHANNEL}"):
        assert nodes[0].http("POST", path)[0] == 200
    return nodes


def link_to(origin: NSQDProcess, mirror: NSQDProcess) -> str:
    """The path of the origin's link to ``mirror`` (its socket), for a kill point on it."""
    return socket_to(origin.process.pid, replication_port(origin, mirror))


def link_from(origin: NSQDProcess, mirror: NSQDProcess) -> str:
    """The path of the mirror's end of the origin's link (its socket), for a kill point on it."""
    return socket_to(mirror.process.pid, local_port_to(origin.process.pid, replication_port(origin, mirror)))


def replication_port(origin: NSQDProcess, mirror: NSQDProcess) -> int:
    for link in replication(origin)["mirrors"]:
        if link["node"] == f"127.0.0.1:{mirror.tcp_port}":
            return int(link["address"].rsplit(":", 1)[1])
    raise AssertionError(f"{origin.tcp_port} does not mirror on {mirror.tcp_port}")


def adopter(etcd: EtcdCluster, origin: NSQDProcess, survivors: list[NSQDProcess]) -> NSQDProcess:
    record = wait_for(lambda: finished_takeover(etcd, origin), 30, "the lost origin taken over")
    (taken_by,) = [node for node in survivors if record["adopted_by"] == f"127.0.0.1:{node.tcp_port}"]
    return taken_by


async def delivered_by(nsqd: NSQDProcess, expected: set[bytes]) -> Counter[bytes]:
    consumer = await WireClient.connect(nsqd.tcp_address)
    await consumer.subscribe(TOPIC, CHANNEL, rdy=0)
    received = await drain(consumer, expected)
    await consumer.close()
    return received


async def answers_until_closed(client: WireClient) -> list[bytes]:
    """The responses (OK...) the connection got before nsqd was gone."""
    answers = []
    try:
        while True:
            frame = await client.read_frame(timeout=10)
            if frame.frame_type == FRAME_TYPE_RESPONSE:
                answers.append(frame.data)
    except ConnectionError:
        await client.close()
        return answers


@pytest.mark.timeout(120)
async def test_an_origin_killed_between_its_own_write_and_its_mirrors_loses_nothing_acknowledged(
        etcd: EtcdCluster, nsqd_factory: Callable[..., NSQDProcess]) -> None:
    a, b, c = three_nodes(etcd, nsqd_factory)
    acknowledged = [b"acknowledged %d" % n for n in range(100)]
    a.multi_publish(TOPIC, acknowledged)
    unanswered = [b"unanswered %d" % n for n in range(10)]
    # its own write done (every message through its disk queue), it dies as it sends the record to c
    with KillPoint(a.process.pid, "write", 1, link_to(a, c)):
        producer = await WireClient.connect(a.tcp_address)
        producer.send(encode_mpub(TOPIC.encode(), unanswered))
        assert await answers_until_closed(producer) == []  # never acknowledged
    assert a.process.wait(10) == -signal.SIGKILL
    a.stop()
    received = await delivered_by(adopter(etcd, a, [b, c]), set(acknowledged))
    assert set(acknowledged) <= set(received)
    assert set(received) <= set(acknowledged) | set(unanswered)  # the unanswered ones: once, if the adopter has them
    assert max(received.values()) == 1  # nothing was in flight: nothing comes twice


@pytest.mark.timeout(120)
async def test_an_origin_killed_while_it_records_a_run_of_fins_loses_nothing_unfinished(
        etcd: EtcdCluster, nsqd_factory: Callable[..., NSQDProcess]) -> None:
    a, b, c = three_nodes(etcd, nsqd_factory)
    acknowledged = [b"acknowledged %d" % n for n in range(100)]
    a.multi_publish(TOPIC, acknowledged)
    consumer = await WireClient.connect(a.tcp_address)
    await consumer.subscribe(TOPIC, CHANNEL, rdy=40)
    taken = await consumer.read_messages(40)
    with KillPoint(a.process.pid, "write", 1, link_to(a, c)):  # the FINs' record reaches b, maybe, never c
        consumer.send(b"".join(b"FIN " + message.id + b"\n" for message in taken))
        await answers_until_closed(consumer)
    assert a.process.wait(10) == -signal.SIGKILL
    a.stop()
    finished = {message.body for message in taken}
    received = await delivered_by(adopter(etcd, a, [b, c]), set(acknowledged) - finished)
    assert set(acknowledged) - finished <= set(received)  # nothing unfinished lost
    assert set(received) <= set(acknowledged)
    # once each: the finished ones again only where the adopter never heard of their FINs (at least once)
    assert max(received.values()) == 1


@pytest.mark.timeout(120)
async def test_a_mirror_killed_as_it_acknowledges_a_record_loses_nothing_acknowledged(
        etcd: EtcdCluster, nsqd_factory: Callable[..., NSQDProcess]) -> None:
    a, b, c = three_nodes(etcd, nsqd_factory)
    first = [b"first %d" % n for n in range(100)]
    a.multi_publish(TOPIC, first)
    then = [b"then %d" % n for n in range(10)]
    # c's next answer to a: the acknowledgement of ``then``'s record, which c applied (its copy gathers records in
    # memory before it writes them to its files)
    with KillPoint(c.process.pid, "write", 1, link_from(a, c)):
        a.multi_publish(TOPIC, then)  # acknowledged all the same: a and b hold it, the two copies required
    assert c.process.wait(10) == -signal.SIGKILL
    wait_for(lambda: [link["in_sync"] for link in replication(a)["mirrors"]].count(True) == 1, 10,
             "c out of a's in-sync set")
    a.process.send_signal(signal.SIGKILL)
    a.stop()
    assert adopter(etcd, a, [b]) is b
    received = await delivered_by(b, set(first) | set(then))
    assert set(received) == set(first) | set(then)
    assert max(received.values()) == 1
