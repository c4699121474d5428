"""Losing lookupd, for real: the scenario shared by tests/functional/test_lookupd_loss.py (one round) and
bench/lookupd_loss.py (many). Two lookupds, nsqds registered with both (:func:`cluster`), and traffic all along
(:class:`Traffic`):
- a producer per nsqd publishing to it directly;
- producers that find their nsqd through lookupd, asking ``/lookup`` of the topic before every message as a tool
  that knows only lookupd would (:class:`DiscoveringPublisher`): while no lookupd names an nsqd they cannot
  publish, and count how long;
- consumers found through lookupd on two channels, all along, and new ones (new channels) in the rounds.

A round has three phases:
- :func:`every_lookupd_down`: every lookupd killed with SIGKILL at once; traffic goes on for the outage, a topic
  is created on every nsqd and a consumer on a new channel starts meanwhile; then they start again on their ports.
  Measured: the seconds until each knows the whole cluster (every nsqd, with every topic and channel it has), until
  the consumer started during the outage is subscribed on every nsqd, and a consumer started then; how long the
  producers that discover through lookupd could not publish.
- :func:`replace_lookupd`: a new lookupd on other ports takes slot 1, through
  ``PUT /config/nsqlookupd_tcp_addresses`` on every nsqd; measured until it knows the whole cluster. The lookupd
  replaced must list no nsqd any more.
- :func:`one_lookupd_down`: one of the two killed and started again on its ports, a topic created meanwhile:
  nobody notices (the discovering producers publish on, a consumer started meanwhile finds every nsqd through the
  other lookupd), and the one restarted knows the whole cluster again.

nsqd registers again with a lookupd that comes back within one ping interval (its reconnection delay stops at 12 s).

A replacement reaches the clients as a deployment would: the discovering producers read the current addresses
before every lookup, and consumers started later are given them; the consumers of all along keep the addresses
they started with. Once slot 1 has been replaced they poll slot 0 alone (always back on its ports) and a dead
address, which is a failed poll and no more; their connections to nsqd do not need lookupd.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness.partitions import Tally, nsqd_keys
from harness.processes import FAST_SCAN, NSQDProcess, start_lookupd, start_nsqd, wait_for, wait_for_async
from nsqclient import Consumer, Message, NSQError, Producer
from nsqclient.lookupd import lookup_topic

TOPIC = "t"
CHANNELS = ("c", "d")  # consumed all along; created on every nsqd before the first message
POLL_INTERVAL = 0.5  # the consumers' lookupd_poll_interval
PUBLISH_INTERVAL = 0.02  # between two messages of a producer publishing directly
LOOKUP_INTERVAL = 0.05  # between two messages of a producer that asks lookupd first (a /lookup per message)
LONGEST_WAIT = 60.0  # for anything to happen; what should take less (one ping interval) is measured and judged
DRAIN_WAIT = 30.0  # for consumers to get what they are owed


# -- the cluster ---------------------------------------------------------------------------------------------------

@dataclass
class Cluster:
    lookupds: list[NSQDProcess]  # slot 0 always comes back on its ports, replacements take slot 1
    nodes: list[NSQDProcess]

    @property
    def lookupd_tcp_addresses(self) -> list[str]:
        return [f"127.0.0.1:{lookupd.tcp_port}" for lookupd in self.lookupds]

    @property
    def lookupd_http_addresses(self) -> list[str]:
        return [f"127.0.0.1:{lookupd.http_port}" for lookupd in self.lookupds]

    @property
    def node_addresses(self) -> set[str]:
        return {f"127.0.0.1:{node.tcp_port}" for node in self.nodes}


@contextmanager
def cluster(data_path: Path, nodes: int = 2) -> Iterator[Cluster]:
    """Two lookupds and ``nodes`` nsqds registered with both, each with TOPIC and CHANNELS, known to both
    lookupds; whatever runs is stopped on the way out."""
    running = Cluster([], [])
    try:
        running.lookupds += [start_lookupd(), start_lookupd()]
        for number in range(nodes):
            (data_path / f"nsqd{number}").mkdir()
            running.nodes.append(start_nsqd(*FAST_SCAN, *(f"--lookupd-tcp-address={address}"
                                                          for address in running.lookupd_tcp_addresses),
                                            data_path=data_path / f"nsqd{number}"))
        for node in running.nodes:
            assert node.http("POST", f"/topic/create?topic={TOPIC}")[0] == 200
            for channel in CHANNELS:
                assert node.http("POST", f"/channel/create?topic={TOPIC}&channel={channel}")[0] == 200
        for lookupd in running.lookupds:
            seconds_until_it_knows(lookupd, running.nodes, time.monotonic())
        yield running
    finally:
        for process in [*running.nodes, *running.lookupds]:
            process.stop()


def knows_cluster(lookupd: NSQDProcess, nodes: list[NSQDProcess]) -> bool:
    """Whether ``lookupd`` has every nsqd registered with every topic and channel it has (as its /debug says)."""
    status, _, body = lookupd.http("GET", "/debug")
    if status != 200:
        return False
    debug = json.loads(body)
    return all(any(producer["tcp_port"] == node.tcp_port for producer in debug.get(key, []))
               for node in nodes for key in nsqd_keys(node))


def seconds_until_it_knows(lookupd: NSQDProcess, nodes: list[NSQDProcess], started: float) -> float:
    """Waits for ``lookupd`` to know the whole cluster; the seconds since ``started``. Blocks: run it in a thread
    beside traffic."""
    wait_for(lambda: knows_cluster(lookupd, nodes), timeout=LONGEST_WAIT, what="lookupd knowing the whole cluster",
             retry_on=(OSError,))  # refused while it starts
    return time.monotonic() - started


async def kill(cluster: Cluster, slots: Iterable[int]) -> None:
    """SIGKILL to the lookupds in ``slots``, at once."""
    await asyncio.gather(*(asyncio.to_thread(cluster.lookupds[slot].stop, signal.SIGKILL) for slot in slots))


async def start_again(cluster: Cluster, slots: Iterable[int]) -> list[float]:
    """Starts the lookupds in ``slots`` again on their ports, at once; the seconds each took, from its start, to
    know the whole cluster."""
    return list(await asyncio.gather(*(asyncio.to_thread(_start_again, cluster, slot) for slot in slots)))


def create_topic(cluster: Cluster, topic: str) -> None:
    """``topic`` with a channel on every nsqd: while a lookupd is down, something it must learn when it is back.
    Blocks: run it in a thread beside traffic."""
    for node in cluster.nodes:
        for path in (f"/topic/create?topic={topic}", f"/channel/create?topic={topic}&channel=c"):
            assert node.http("POST", path)[0] == 200, path


def _start_again(cluster: Cluster, slot: int) -> float:
    killed = cluster.lookupds[slot]
    started = time.monotonic()
    cluster.lookupds[slot] = start_lookupd(f"--tcp-address=127.0.0.1:{killed.tcp_port}",
                                           f"--http-address=127.0.0.1:{killed.http_port}")
    return seconds_until_it_knows(cluster.lookupds[slot], cluster.nodes, started)


async def replace_lookupd(cluster: Cluster, slot: int = 1) -> float:
    """A new lookupd on other ports in place of the one in ``slot``, through ``PUT /config/nsqlookupd_tcp_addresses``
    on every nsqd; the seconds from the first PUT until it knows the whole cluster. The lookupd replaced must list
    no nsqd any more (each closed its connection to it); it is stopped then."""
    return await asyncio.to_thread(_replace, cluster, slot)


def _replace(cluster: Cluster, slot: int) -> float:
    new = start_lookupd()
    replaced, cluster.lookupds[slot] = cluster.lookupds[slot], new
    try:
        addresses = json.dumps(cluster.lookupd_tcp_addresses).encode()
        started = time.monotonic()
        for node in cluster.nodes:
            status, _, answer = node.http("PUT", "/config/nsqlookupd_tcp_addresses", addresses)
            assert status == 200, answer
        seconds = seconds_until_it_knows(new, cluster.nodes, started)
        wait_for(lambda: not json.loads(replaced.http("GET", "/nodes")[2])["producers"],
                 what="the lookupd replaced dropping every nsqd")
        return seconds
    finally:
        replaced.stop()


# -- traffic -------------------------------------------------------------------------------------------------------

Published = list[tuple[float, bytes]]  # acknowledged messages, with when each was sent


class Reader:
    """Consumers of TOPIC on one channel, found through the lookupds they are given, and what they received."""

    def __init__(self, channel: str, lookupd_http_addresses: list[str], consumers: int = 1) -> None:
        self.channel = channel
        self.received: list[bytes] = []
        self.started_at = 0.0
        self.subscribed_at = float("inf")  # when it was first seen subscribed on every nsqd: owed what came after
        self._consumers = [Consumer(TOPIC, channel, self._handle, lookupd_http_addresses=lookupd_http_addresses,
                                    max_in_flight=50, lookupd_poll_interval=POLL_INTERVAL)
                           for _ in range(consumers)]

    async def start(self) -> None:
        self.started_at = time.monotonic()
        for consumer in self._consumers:
            await consumer.start()

    async def subscribed_everywhere(self, nodes: set[str]) -> float:
        """Waits for every consumer to be subscribed on every nsqd of ``nodes``; when that was seen."""
        await wait_for_async(lambda: all(set(consumer.connections) >= nodes for consumer in self._consumers),
                             timeout=LONGEST_WAIT, what=f"the consumers of {self.channel} on every nsqd")
        self.subscribed_at = time.monotonic()
        return self.subscribed_at

    async def stop(self) -> None:
        for consumer in self._consumers:
            await consumer.stop()

    async def _handle(self, message: Message) -> None:
        self.received.append(message.body)


class DiscoveringPublisher:
    """Publishes to one of the nsqds that the lookupds (``lookupds()``, read every time) name for TOPIC, asked
    before every message; while none does it cannot publish, and records for how long."""

    def __init__(self, name: str, lookupds: Callable[[], list[str]], published: Published) -> None:
        self.name = name
        self.acknowledged = 0
        self.spans: list[float] = []  # seconds it could not publish, each time
        self.unable_since: float | None = None
        self._lookupds, self._published = lookupds, published
        self._producers: dict[str, Producer] = {}

    async def run(self) -> None:
        try:
            for number in itertools.count():
                await asyncio.sleep(LOOKUP_INTERVAL)
                await self._publish(b"%s-%d" % (self.name.encode(), number))
        finally:
            for producer in self._producers.values():
                await producer.close()

    async def _publish(self, body: bytes) -> None:
        asked = time.monotonic()
        answers = await asyncio.gather(*(lookup_topic(address, TOPIC, 1.0) for address in self._lookupds()))
        nodes = sorted({node for answer in answers if answer for node in answer})
        if nodes:
            address = random.choice(nodes)
            sent = time.monotonic()
            try:
                await self._producers.setdefault(address, Producer(address)).publish(TOPIC, body)
            except NSQError:
                pass  # not acknowledged: it need not arrive
            else:
                self._published.append((sent, body))
                self.acknowledged += 1
                if self.unable_since is not None:
                    self.spans.append(time.monotonic() - self.unable_since)
                    self.unable_since = None
                return
        if self.unable_since is None:
            self.unable_since = asked


class Traffic:
    """Everything publishing and consuming: see the module's docstring."""

    def __init__(self, cluster: Cluster, discovering: int = 2) -> None:
        self.cluster = cluster
        self.published: Published = []
        self.failed = 0  # direct publishes that failed (none should: nsqd never goes)
        self.tallies: list[Tally] = []  # of the readers settled, one per channel
        self.readers = [Reader(CHANNELS[0], cluster.lookupd_http_addresses, consumers=2),
                        Reader(CHANNELS[1], cluster.lookupd_http_addresses)]
        self.round_readers: list[Reader] = []
        self.discovering = [DiscoveringPublisher(f"lookup{number}", lambda: cluster.lookupd_http_addresses,
                                                 self.published) for number in range(discovering)]
        self._producers = [Producer(f"127.0.0.1:{node.tcp_port}") for node in cluster.nodes]
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        for reader in self.readers:
            await reader.start()
            await reader.subscribed_everywhere(self.cluster.node_addresses)
        self._tasks = [asyncio.create_task(self._publish_directly(producer, f"direct{number}"))
                       for number, producer in enumerate(self._producers)]
        self._tasks += [asyncio.create_task(publisher.run()) for publisher in self.discovering]
        await self.flowing("from the start")

    async def flowing(self, when: str) -> None:
        """Waits until a few more messages went all the way to the consumers of the first channel."""
        received = self.readers[0].received
        target = len(received) + 20
        await wait_for_async(lambda: len(received) >= target, timeout=15, what=f"messages flowing {when}")

    async def new_reader(self, channel: str) -> Reader:
        """A consumer on a new channel, given the lookupds of now; settled by ``settle_round_readers``."""
        reader = Reader(channel, self.cluster.lookupd_http_addresses)
        self.round_readers.append(reader)
        await reader.start()
        return reader

    def unable_marks(self) -> list[int]:
        return [len(publisher.spans) for publisher in self.discovering]

    async def could_not_publish(self, marks: list[int]) -> list[float]:
        """Waits for every discovering producer to publish again; the seconds each could not since ``marks``
        (``unable_marks()``)."""
        await wait_for_async(lambda: all(publisher.unable_since is None for publisher in self.discovering),
                             timeout=LONGEST_WAIT, what="the producers that discover through lookupd publishing")
        return [sum(publisher.spans[mark:], 0.0) for publisher, mark in zip(self.discovering, marks)]

    async def settle_round_readers(self) -> None:
        """Settles the readers of the rounds and deletes their channels."""
        for reader in self.round_readers:
            self.tallies.append(await self._settle(reader))
            for node in self.cluster.nodes:
                path = f"/channel/delete?topic={TOPIC}&channel={reader.channel}"
                assert (await asyncio.to_thread(node.http, "POST", path))[0] == 200, path
        self.round_readers.clear()

    async def stop(self) -> list[Tally]:
        """Stops publishing, settles every reader; a tally per channel."""
        for task in self._tasks:
            task.cancel()
        await asyncio.wait(self._tasks)
        for producer in self._producers:
            await producer.close()
        await self.settle_round_readers()
        for reader in self.readers:
            self.tallies.append(await self._settle(reader))
        return self.tallies

    async def _settle(self, reader: Reader) -> Tally:
        """Waits (``DRAIN_WAIT`` at most) for ``reader`` to have every message acknowledged that was sent from when
        it was subscribed everywhere until now, stops it; its tally of those."""
        until = time.monotonic()

        def owed() -> list[bytes]:
            return [body for sent, body in self.published if reader.subscribed_at <= sent <= until]

        deadline = until + DRAIN_WAIT
        while not set(owed()) <= set(reader.received) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        await reader.stop()
        return Tally(owed(), reader.received)

    async def _publish_directly(self, producer: Producer, name: str) -> None:
        for number in itertools.count():
            await asyncio.sleep(PUBLISH_INTERVAL)
            body = b"%s-%d" % (name.encode(), number)
            sent = time.monotonic()
            try:
                await producer.publish(TOPIC, body)
            except NSQError:
                self.failed += 1
                continue
            self.published.append((sent, body))


# -- the phases of a round -----------------------------------------------------------------------------------------

@dataclass
class Outage:
    seconds: float  # every lookupd down, from the kill to the restart
    knew_after: list[float]  # per lookupd, seconds from its restart until it knew the whole cluster
    found_after: float  # seconds from the restart until the consumer started meanwhile was on every nsqd
    found_within: float  # seconds a consumer started after the restart took to be on every nsqd
    unable: list[float]  # per discovering producer, seconds it could not publish


async def every_lookupd_down(cluster: Cluster, traffic: Traffic, name: str, outage: float) -> Outage:
    marks = traffic.unable_marks()
    down_at = time.monotonic()
    slots = range(len(cluster.lookupds))
    await kill(cluster, slots)
    await asyncio.to_thread(create_topic, cluster, f"{name}-down")
    early = await traffic.new_reader(f"{name}-down")
    await traffic.flowing("while every lookupd is down")
    await asyncio.sleep(down_at + outage - time.monotonic())
    restarted_at = time.monotonic()
    knew_after = await start_again(cluster, slots)
    found_after = await early.subscribed_everywhere(cluster.node_addresses) - restarted_at
    late = await traffic.new_reader(f"{name}-back")
    found_within = await late.subscribed_everywhere(cluster.node_addresses) - late.started_at
    unable = await traffic.could_not_publish(marks)
    await traffic.flowing("once the lookupds are back")
    return Outage(restarted_at - down_at, knew_after, found_after, found_within, unable)


@dataclass
class OneDown:
    seconds: float  # down, from the kill to the restart
    knew_after: float  # seconds from its restart until it knew the whole cluster
    found_within: float  # seconds a consumer started meanwhile took to be on every nsqd, through the other
    unable: list[float]  # per discovering producer, seconds it could not publish: none


async def one_lookupd_down(cluster: Cluster, traffic: Traffic, name: str, slot: int, outage: float) -> OneDown:
    marks = traffic.unable_marks()
    down_at = time.monotonic()
    await kill(cluster, [slot])
    await asyncio.to_thread(create_topic, cluster, f"{name}-one")
    reader = await traffic.new_reader(f"{name}-one")
    found_within = await reader.subscribed_everywhere(cluster.node_addresses) - reader.started_at
    await traffic.flowing(f"while lookupd {slot} is down")
    await asyncio.sleep(down_at + outage - time.monotonic())
    restarted_at = time.monotonic()
    [knew_after] = await start_again(cluster, [slot])
    unable = await traffic.could_not_publish(marks)
    return OneDown(restarted_at - down_at, knew_after, found_within, unable)
