"""Faults on a replicated cluster, checked as Jepsen's total-queue checks a queue: every acknowledged message is
delivered at least once, nothing is delivered that was never published, and duplicates are counted.

Three nsqd at replication factor 3 (two in-sync copies required, the default), each in a network namespace of its
own (harness.netns) so that one can be partitioned away and each keeps its address across restarts; a 3-member
etcd and an nsqlookupd on the root namespace's side of the segment. From the root namespace, one producer per nsqd
publishes all along (PUB, MPUB of 10 and DPUB in turn; a body counts once answered OK) and one consumer finds the
nsqd through lookupd and finishes what it receives. A round (:func:`inflict`) applies one fault of ``FAULTS``, waits
for the lost node's messages to flow from a survivor and for the cluster to be whole again. Shared by
tests/functional/test_replication_faults.py (one round of each fault) and bench/replication.py (many).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
import signal
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.etcd import EtcdCluster, start_etcd
from harness.netns import ROOT, Network
from harness.processes import FAST_SCAN, NSQDProcess, start_lookupd, start_nsqd, wait_for_async
from nsqclient import Consumer, Message, NSQError, Producer

TOPIC, CHANNEL = "orders", "archive"
NODES = ("n1", "n2", "n3")
TCP_PORT, HTTP_PORT, REPLICATION_PORT = 4150, 4151, 4153  # every nsqd has an address of its own
FAULTS = ("kill", "kill-wipe", "pause", "partition", "etcd-member", "rolling-restart")
DESCRIBED = {
    "kill": "kill -9, started again once its messages flow from a survivor",
    "kill-wipe": "kill -9, its data directory deleted, started again at once (as a supervisor does)",
    "pause": "SIGSTOP until its messages flow from a survivor, then SIGCONT",
    "partition": "cut from the other nsqd, etcd, lookupd and the clients until its messages flow from a survivor",
    "etcd-member": "kill -9 of the etcd member every nsqd names first, started again after 5 s",
    "rolling-restart": "every nsqd in turn stopped (SIGTERM) and started again",
}


@dataclass
class Node:
    name: str
    host: str
    data_path: Path
    process: NSQDProcess | None = None

    @property
    def address(self) -> str:
        """Its name in the cluster, and where clients reach it."""
        return f"{self.host}:{TCP_PORT}"

    @property
    def running(self) -> NSQDProcess:
        assert self.process is not None, f"{self.name} is not running"
        return self.process


class ReplicatedCluster:
    def __init__(self, net: Network, etcd: EtcdCluster, lookupd: NSQDProcess, scratch: Path, liveness: float) -> None:
        self.net, self.etcd, self.lookupd, self.liveness = net, etcd, lookupd, liveness
        self.nodes = [Node(name, net.address(name), scratch / name) for name in NODES]

    def start(self, node: Node) -> None:
        node.data_path.mkdir(exist_ok=True)
        node.process = start_nsqd(
            *FAST_SCAN, f"--tcp-address={node.address}", f"--http-address={node.host}:{HTTP_PORT}",
            f"--replication-address={node.host}:{REPLICATION_PORT}", "--replication-factor=3",
            *(f"--etcd-address={address}" for address in self.etcd.addresses),
            f"--replication-liveness-timeout={self.liveness:g}s",
            f"--lookupd-tcp-address={self.lookupd.host}:{self.lookupd.tcp_port}",
            data_path=node.data_path, host=node.host, program=self.net.python(node.name, "services.nsqd"))

    def stop(self, node: Node, sig: int = signal.SIGTERM) -> None:
        if node.process is not None:
            node.process.stop(sig)
            node.process = None

    def others(self, node: Node) -> list[Node]:
        return [other for other in self.nodes if other is not node]

    def replication(self, node: Node) -> dict[str, Any]:
        document = json.loads(node.running.http("GET", "/stats?format=json&topic=-")[2])
        return dict(document.get("replication") or {})

    def whole(self) -> bool:
        """Every nsqd running, mirrored on both others, in sync and recorded so in etcd."""
        try:
            for node in self.nodes:
                state = self.replication(node)
                if sum(mirror["in_sync"] for mirror in state.get("mirrors", [])) < 2 or \
                        len(state.get("in_sync_recorded", [])) < 2:
                    return False
        except (OSError, AssertionError):
            return False
        return True

    def describe(self) -> str:
        states = []
        for node in self.nodes:
            try:
                states.append(f"{node.name}: {self.replication(node)}")
            except (OSError, AssertionError) as error:
                states.append(f"{node.name}: {error}")
        return "; ".join(states)

    async def wait_whole(self, timeout: float = 60.0) -> float:
        """Seconds until the cluster is whole again."""
        began = time.monotonic()
        await wait_for_async(self.whole, timeout, lambda: f"the cluster whole again: {self.describe()}",
                             interval=0.2)
        return time.monotonic() - began

    def adopted(self, node: Node) -> bool:
        record = self.etcd.get(f"/nsq/mirrors/{node.address}")
        return record is not None and bool(json.loads(record).get("adopted"))


@contextmanager
def replicated_cluster(scratch: Path, liveness: float) -> Iterator[ReplicatedCluster]:
    """The cluster, whole, with ``TOPIC``/``CHANNEL`` on every nsqd; stopped and deleted on the way out."""
    with Network(*NODES) as net:
        etcd = start_etcd(3, host=net.address(ROOT))
        lookupd: NSQDProcess | None = None
        cluster: ReplicatedCluster | None = None
        try:
            lookupd = start_lookupd(host=net.address(ROOT))
            cluster = ReplicatedCluster(net, etcd, lookupd, scratch, liveness)
            for node in cluster.nodes:
                cluster.start(node)
            for node in cluster.nodes:
                for path in (f"/topic/create?topic={TOPIC}", f"/channel/create?topic={TOPIC}&channel={CHANNEL}"):
                    assert node.running.http("POST", path)[0] == 200, path
            yield cluster
        finally:
            if cluster is not None:
                for node in cluster.nodes:
                    cluster.stop(node, signal.SIGKILL)  # a node cut off would not finish a clean stop
            if lookupd is not None:
                lookupd.stop()
            etcd.stop()


# -- the ledger ----------------------------------------------------------------------------------------------------

@dataclass
class Delivery:
    body: bytes
    nsqd: str
    at: float


@dataclass
class Ledger:
    attempted: set[bytes] = field(default_factory=set)  # every body sent, answered OK or not
    acknowledged: dict[bytes, float] = field(default_factory=dict)  # body: when it was answered OK
    deliveries: list[Delivery] = field(default_factory=list)
    failures: dict[str, list[float]] = field(default_factory=dict)  # node: when its publishes failed
    waits: list[tuple[str, float, float]] = field(default_factory=list)  # node, when answered OK, seconds waited

    @property
    def lost(self) -> set[bytes]:
        return set(self.acknowledged) - {delivery.body for delivery in self.deliveries}

    @property
    def duplicates(self) -> int:
        return sum(count - 1 for count in Counter(delivery.body for delivery in self.deliveries).values())

    @property
    def unexpected(self) -> set[bytes]:
        return {delivery.body for delivery in self.deliveries} - self.attempted


def origin_of(body: bytes) -> str:
    return body.split(b"-", 1)[0].decode()


class Traffic:
    """The producers and the consumer, writing to one ledger."""

    def __init__(self, cluster: ReplicatedCluster, interval: float = 0.02) -> None:
        self.cluster, self.interval = cluster, interval
        self.ledger = Ledger()
        self._producers = [Producer(node.address, command_timeout=10.0) for node in cluster.nodes]
        self._consumer = Consumer(TOPIC, CHANNEL, self._handle, lookupd_http_addresses=[
            f"{cluster.lookupd.host}:{cluster.lookupd.http_port}"], max_in_flight=48, concurrency=16,
            lookupd_poll_interval=1.0, heartbeat_interval=2000)
        self._publishing: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        await self._consumer.start()
        self._publishing = [asyncio.create_task(self._publish(node.name, producer))
                            for node, producer in zip(self.cluster.nodes, self._producers)]
        await self.flowing()

    async def flowing(self, timeout: float = 30.0) -> None:
        """Waits until the consumer received more messages from each nsqd's producer."""
        ledger = self.ledger
        since = time.monotonic()

        def received_from_each() -> bool:
            fresh = {origin_of(delivery.body) for delivery in itertools.takewhile(
                lambda delivery: delivery.at > since, reversed(ledger.deliveries))}
            return fresh >= set(NODES)

        def state() -> str:
            now = time.monotonic()
            last = {origin_of(body): at for body, at in ledger.acknowledged.items()}
            return (f"messages from every nsqd's producer flowing; last OK per nsqd "
                    f"{ {name: round(now - at, 1) for name, at in last.items()} } s ago, failures "
                    f"{ {name: len(times) for name, times in ledger.failures.items()} }, consumer connected to "
                    f"{self._consumer.connections}")
        await wait_for_async(received_from_each, timeout, state, interval=0.1)

    async def stop(self, drain_timeout: float = 60.0) -> None:
        """Stops publishing, waits (up to ``drain_timeout``) for every acknowledged message to be delivered, and
        stops the consumer."""
        for task in self._publishing:
            task.cancel()
        await asyncio.gather(*self._publishing, return_exceptions=True)
        try:
            await wait_for_async(lambda: not self.ledger.lost, drain_timeout, "every acknowledged message delivered",
                                 interval=0.2)
        except AssertionError:
            pass  # counted as lost
        finally:
            await self._consumer.stop(timeout=5)
            for producer in self._producers:
                await producer.close()

    async def _publish(self, name: str, producer: Producer) -> None:
        ledger = self.ledger
        for number in itertools.count():
            await asyncio.sleep(self.interval)
            kind = number % 3
            bodies = [b"%s-%d-%d" % (name.encode(), number, part) for part in range(10 if kind == 1 else 1)]
            ledger.attempted.update(bodies)
            began = time.monotonic()
            try:
                if kind == 0:
                    await producer.publish(TOPIC, bodies[0])
                elif kind == 1:
                    await producer.multi_publish(TOPIC, bodies)
                else:
                    await producer.deferred_publish(TOPIC, bodies[0], 0.1)
            except NSQError:
                ledger.failures.setdefault(name, []).append(time.monotonic())
                await asyncio.sleep(0.1)  # as a client backs off; a dead nsqd refuses at once
                continue
            now = time.monotonic()
            ledger.waits.append((name, now, now - began))
            for body in bodies:
                ledger.acknowledged[body] = now

    async def _handle(self, message: Message) -> None:
        self.ledger.deliveries.append(Delivery(message.body, message.nsqd_address, time.monotonic()))
        await asyncio.sleep(0.01)  # some work: a few messages are always in flight


# -- a round -------------------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    fault: str
    victim: str
    failover: float | None  # seconds from the fault until a survivor delivered a message the victim had taken
    interrupted: float  # seconds from the fault until a publish to the victim sent after it was answered OK
    survivors_failed: int  # publishes to the other nsqd that failed meanwhile
    survivors_slowest: float  # their longest wait for an OK meanwhile, seconds
    whole_after: float  # seconds from the fault until the cluster was whole again


async def inflict(cluster: ReplicatedCluster, traffic: Traffic, fault: str, victim: Node) -> Outcome:
    ledger = traffic.ledger
    began = time.monotonic()
    failover: float | None = None
    if fault in ("kill", "kill-wipe"):
        victim.running.process.send_signal(signal.SIGKILL)
        await asyncio.to_thread(cluster.stop, victim)
        if fault == "kill-wipe":
            shutil.rmtree(victim.data_path)
            await asyncio.to_thread(cluster.start, victim)
        failover = await failed_over(cluster, traffic, victim, began)
        if fault == "kill":
            await asyncio.to_thread(cluster.start, victim)
    elif fault == "pause":
        victim.running.process.send_signal(signal.SIGSTOP)
        try:
            failover = await failed_over(cluster, traffic, victim, began)
        finally:
            victim.running.process.send_signal(signal.SIGCONT)
    elif fault == "partition":
        peers = [other.name for other in cluster.others(victim)] + [ROOT]
        for peer in peers:
            cluster.net.cut(victim.name, peer)
        try:
            failover = await failed_over(cluster, traffic, victim, began)
        finally:
            for peer in peers:
                cluster.net.heal(victim.name, peer)
    elif fault == "etcd-member":
        member = cluster.etcd.members[0]
        cluster.etcd.stop_member(member, signal.SIGKILL)
        await asyncio.sleep(5)
        cluster.etcd.start_member(member, new=False)
        await asyncio.to_thread(cluster.etcd.wait_healthy)
    elif fault == "rolling-restart":  # the victim's figures are the first nsqd's; every one goes in turn
        for node in [victim, *cluster.others(victim)]:
            stopped_at = time.monotonic()
            await asyncio.to_thread(cluster.stop, node)
            taken_over = await failed_over(cluster, traffic, node, stopped_at)
            failover = taken_over if node is victim else failover
            await asyncio.to_thread(cluster.start, node)
            await cluster.wait_whole()
    else:
        raise ValueError(f"no fault {fault!r}: one of {', '.join(FAULTS)}")
    await cluster.wait_whole()
    whole_after = time.monotonic() - began
    await traffic.flowing()
    ended = time.monotonic()
    others = {node.name for node in cluster.others(victim)}
    resumed = min((at for name, at, wait in ledger.waits if name == victim.name and at - wait >= began), default=ended)
    survivors_failed = sum(began <= at <= ended for name in others for at in ledger.failures.get(name, []))
    slowest = max((wait for name, at, wait in ledger.waits if name in others and began <= at <= ended), default=0.0)
    return Outcome(fault, victim.name, failover, resumed - began, survivors_failed, slowest, whole_after)


async def failed_over(cluster: ReplicatedCluster, traffic: Traffic, victim: Node, began: float) -> float | None:
    """Seconds from ``began`` until a survivor delivered a message published to ``victim`` before then; None if the
    victim had nothing outstanding (its messages were then taken over without any to deliver)."""
    deliveries = traffic.ledger.deliveries
    checked = 0

    def delivered_by_survivor() -> float | None:
        nonlocal checked
        for delivery in itertools.islice(deliveries, checked, None):
            if delivery.at > began and delivery.nsqd != victim.address and origin_of(delivery.body) == victim.name \
                    and traffic.ledger.acknowledged.get(delivery.body, began) < began:
                return delivery.at - began
        checked = len(deliveries)
        return None

    deadline = began + cluster.liveness + 30
    while time.monotonic() < deadline:
        after = delivered_by_survivor()
        if after is not None:
            return after
        if cluster.adopted(victim):
            await asyncio.sleep(1)  # what was adopted has had its chance to arrive
            return delivered_by_survivor()
        await asyncio.sleep(0.05)
    raise AssertionError(f"{victim.name}'s messages not taken over within {cluster.liveness + 30:g} s: "
                         f"{cluster.describe()}")
